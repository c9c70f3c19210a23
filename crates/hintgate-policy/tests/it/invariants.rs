//! Property tests of the invariants the product promises (design §4.2).
//!
//! - For an untrusted server, no change to the declared annotations moves a
//!   verdict towards less friction or makes a hidden tool visible.
//! - Adding a deny rule never yields allow; deny beats ask beats allow.
//! - An allow rule never beats a deny rule or a changed definition.
//! - A tool that is not listed is refused when it is called anyway.
//! - `unattended` never leaves an ask.
//! - The decision hook never overrides a deny rule, a read scope, a hidden
//!   tool or a changed definition; a failed hook never allows; a `paid`
//!   label is asked about every time, whatever the hook, the rules and the
//!   profile say.
//! - Deciding never panics, whatever the input; broken input denies.
//! - The pin digest ignores key order and whitespace and changes with any
//!   pinned field.

use std::collections::BTreeMap;

use hintgate_policy::config::{
    self, Action, GatewaySettings, Instance, PrivateData, Profile, ReadOnlyConfig, Rule,
    SandboxConfig, ServerConfig, Transport, ValidConfig,
};
use hintgate_policy::config::{HookConfig, HookMode, Label};
use hintgate_policy::decide::{
    Call, Policy, RememberOffer, Remembered, Scope, SessionState, Verdict,
};
use hintgate_policy::explain::{ExplainInput, explain};
use hintgate_policy::glob::Glob;
use hintgate_policy::hook::OwnedAnswer;
use hintgate_policy::pin::{PinDigest, PinStatus};
use hintgate_policy::reason::ReasonCode;
use hintgate_policy::tool::{Annotations, SandboxProof, Tool, Trust};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

const SERVERS: [&str; 2] = ["alpha", "beta"];
const TOOLS: [&str; 4] = ["read_notes", "delete_notes", "write_file", "fetch"];
const GLOBS: [&str; 9] = [
    "*",
    "alpha",
    "beta",
    "read_*",
    "*_notes",
    "?rite_file",
    "[df]*",
    "fetch",
    "gamma",
];

fn friction(verdict: Verdict) -> u8 {
    match verdict {
        Verdict::Allow => 0,
        Verdict::Ask => 1,
        Verdict::Deny => 2,
    }
}

fn glob() -> impl Strategy<Value = Glob> {
    proptest::sample::select(GLOBS.to_vec()).prop_map(|text| Glob::new(text).unwrap())
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![Just(Action::Allow), Just(Action::Ask), Just(Action::Deny)]
}

fn rule() -> impl Strategy<Value = Rule> {
    (glob(), glob(), action()).prop_map(|(server, tool, action)| Rule {
        server,
        tool,
        action,
        reason: None,
    })
}

fn trust() -> impl Strategy<Value = Trust> {
    prop_oneof![Just(Trust::Trusted), Just(Trust::Untrusted)]
}

fn profile() -> impl Strategy<Value = Profile> {
    prop_oneof![
        Just(Profile::AskWrites),
        Just(Profile::HideWrites),
        Just(Profile::AskAll)
    ]
}

fn sandbox() -> impl Strategy<Value = Option<SandboxConfig>> {
    proptest::option::of((any::<bool>(), any::<bool>(), any::<bool>()).prop_map(
        |(network, hosts, writes)| SandboxConfig {
            read: vec!["/data".into()],
            write: if writes { vec!["/data".into()] } else { vec![] },
            network: network && !hosts,
            egress: if hosts && !network {
                egress_hosts()
            } else {
                vec![]
            },
            best_effort: false,
            ..SandboxConfig::default()
        },
    ))
}

/// The hosts of a `network = ["host:port", ...]` list.
fn egress_hosts() -> Vec<config::Egress> {
    ["api.example.com:443", "127.0.0.1:8080"]
        .into_iter()
        .map(|text| config::Egress::parse(text).unwrap())
        .collect()
}

/// A read-only instance, vouched for or not.
fn read_only() -> impl Strategy<Value = Option<ReadOnlyConfig>> {
    proptest::option::of(any::<bool>().prop_map(|vouch| ReadOnlyConfig {
        transport: Transport::Stdio {
            command: "server".into(),
            args: vec!["--read-only".into()],
            env: BTreeMap::new(),
        },
        vouch,
        scopes: None,
    }))
}

fn server_config(name: &'static str) -> impl Strategy<Value = ServerConfig> {
    (trust(), sandbox(), read_only()).prop_map(move |(trust, sandbox, read_only)| ServerConfig {
        name: name.to_owned(),
        transport: Transport::Stdio {
            command: "server".into(),
            args: vec![],
            env: BTreeMap::new(),
        },
        trust,
        private_data: PrivateData::None,
        sandbox,
        decide: hintgate_policy::config::ServerHook::Inherit,
        idempotency_key: None,
        read_only,
        oauth: None,
    })
}

fn config() -> impl Strategy<Value = ValidConfig> {
    (
        profile(),
        any::<bool>(),
        server_config(SERVERS[0]),
        server_config(SERVERS[1]),
        proptest::collection::vec(rule(), 0..6),
    )
        .prop_map(|(profile, unattended, alpha, beta, rules)| ValidConfig {
            gateway: GatewaySettings {
                profile,
                unattended,
                ..GatewaySettings::default()
            },
            servers: BTreeMap::from([(alpha.name.clone(), alpha), (beta.name.clone(), beta)]),
            rules,
            audit: Default::default(),
            labels: Vec::new(),
            listen: Default::default(),
            telemetry: Default::default(),
            previews: Vec::new(),
        })
}

fn annotations() -> impl Strategy<Value = Option<Annotations>> {
    proptest::option::of(
        (
            proptest::option::of("[A-Za-z ]{0,12}"),
            proptest::option::of(any::<bool>()),
            proptest::option::of(any::<bool>()),
            proptest::option::of(any::<bool>()),
            proptest::option::of(any::<bool>()),
        )
            .prop_map(|(title, read_only, destructive, idempotent, open_world)| {
                Annotations {
                    title,
                    read_only_hint: read_only,
                    destructive_hint: destructive,
                    idempotent_hint: idempotent,
                    open_world_hint: open_world,
                    extra: Map::new(),
                }
            }),
    )
}

fn tool_named(name: &str, annotations: Option<Annotations>, title: Option<String>) -> Tool {
    let mut tool = Tool::named(name);
    tool.annotations = annotations;
    tool.title = title;
    tool
}

fn pin() -> impl Strategy<Value = PinStatus> {
    prop_oneof![
        Just(PinStatus::New),
        Just(PinStatus::Unchanged),
        Just(PinStatus::Changed)
    ]
}

fn session() -> impl Strategy<Value = SessionState> {
    (
        any::<bool>(),
        prop_oneof![
            Just(Remembered::None),
            Just(Remembered::Session),
            Just(Remembered::Always)
        ],
        any::<bool>(),
    )
        .prop_map(|(tainted, remembered, read)| SessionState {
            tainted,
            remembered,
            scope: if read { Scope::Read } else { Scope::Write },
        })
}

/// What the running sandbox proves: only what the config asked for, or nothing.
fn proof(config: &ValidConfig, server: &str, enforced: bool) -> SandboxProof {
    match config.servers.get(server).and_then(|s| s.sandbox.as_ref()) {
        Some(sandbox) if enforced => sandbox.proof(),
        _ => SandboxProof::default(),
    }
}

/// Everything about one call except the tool's annotations.
#[derive(Debug, Clone)]
struct Scenario {
    config: ValidConfig,
    server: &'static str,
    tool: &'static str,
    pin: PinStatus,
    session: SessionState,
    enforced: bool,
    /// The decision hook's answer, for a configuration with a hook.
    hook: Option<OwnedAnswer>,
}

fn hook_answer() -> impl Strategy<Value = OwnedAnswer> {
    prop_oneof![
        Just(OwnedAnswer::Abstain),
        Just(OwnedAnswer::Decided(Verdict::Allow, "fine".to_owned())),
        Just(OwnedAnswer::Decided(Verdict::Ask, "check".to_owned())),
        Just(OwnedAnswer::Decided(Verdict::Deny, "no".to_owned())),
        Just(OwnedAnswer::Failed("timed out".to_owned())),
    ]
}

fn paid_label() -> impl Strategy<Value = Label> {
    (glob(), glob()).prop_map(|(server, tool)| Label {
        server,
        tool,
        paid: true,
        reason: None,
    })
}

/// A scenario whose configuration has a decision hook for every server,
/// maybe `paid` labels, and the hook's answer.
fn hooked_scenario() -> impl Strategy<Value = Scenario> {
    (
        scenario(),
        hook_answer(),
        proptest::collection::vec(paid_label(), 0..3),
    )
        .prop_map(|(mut scenario, answer, labels)| {
            scenario.config.gateway.decide = Some(HookConfig {
                command: vec!["decide".into()],
                mode: HookMode::Persistent,
                timeout_ms: 2000,
            });
            scenario.config.labels = labels;
            scenario.hook = Some(answer);
            scenario
        })
}

fn scenario() -> impl Strategy<Value = Scenario> {
    (
        config(),
        proptest::sample::select(SERVERS.to_vec()),
        proptest::sample::select(TOOLS.to_vec()),
        pin(),
        session(),
        any::<bool>(),
    )
        .prop_map(|(config, server, tool, pin, session, enforced)| Scenario {
            config,
            server,
            tool,
            pin,
            session,
            enforced,
            hook: None,
        })
}

impl Scenario {
    fn decide(&self, policy: &Policy, tool: &Tool) -> (Verdict, Vec<ReasonCode>, bool) {
        let decision = self.decision(policy, tool);
        let sandbox = proof(&self.config, self.server, self.enforced);
        let visible = policy.visible_to(self.server, tool, sandbox, self.session.scope);
        (decision.verdict, decision.codes().collect(), visible)
    }

    fn decision(&self, policy: &Policy, tool: &Tool) -> hintgate_policy::Decision {
        let sandbox = proof(&self.config, self.server, self.enforced);
        policy.decide(&Call {
            server: self.server,
            tool,
            pin: self.pin,
            session: self.session,
            sandbox,
            hook: self
                .hook
                .as_ref()
                .map_or(Default::default(), OwnedAnswer::as_answer),
        })
    }

    /// The server untrusted, and any read-only instance it has not
    /// vouched for (still routed to): the core invariant's server.
    fn untrusted(mut self) -> Self {
        if let Some(server) = self.config.servers.get_mut(self.server) {
            server.trust = Trust::Untrusted;
            if let Some(read_only) = &mut server.read_only {
                read_only.vouch = false;
            }
        }
        self
    }

    /// The same call with the server's read-only instance as `read_only`
    /// says (`None`: no instance).
    fn with_read_only(&self, read_only: Option<bool>) -> Self {
        let mut scenario = self.clone();
        if let Some(server) = scenario.config.servers.get_mut(self.server) {
            server.read_only = read_only.map(|vouch| ReadOnlyConfig {
                transport: Transport::Stdio {
                    command: "server".into(),
                    args: vec!["--read-only".into()],
                    env: BTreeMap::new(),
                },
                vouch,
                scopes: None,
            });
        }
        scenario
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The invariant of the product: an untrusted server's annotations can
    /// only add friction. Between any two sets of annotations (and titles),
    /// the verdict never moves towards less friction, and a hidden tool never
    /// becomes visible.
    #[test]
    fn untrusted_annotations_never_lower_friction(
        scenario in scenario(),
        before in annotations(),
        after in annotations(),
        title_before in proptest::option::of("[A-Za-z_]{1,10}"),
        title_after in proptest::option::of("[A-Za-z_]{1,10}"),
    ) {
        let scenario = scenario.untrusted();
        let policy = Policy::new(scenario.config.clone());
        let (verdict_before, _, visible_before) =
            scenario.decide(&policy, &tool_named(scenario.tool, before, title_before));
        let (verdict_after, _, visible_after) =
            scenario.decide(&policy, &tool_named(scenario.tool, after, title_after));
        prop_assert!(friction(verdict_after) >= friction(verdict_before),
            "{verdict_before:?} -> {verdict_after:?}");
        prop_assert!(visible_before || !visible_after, "a hidden tool became visible");
    }

    /// A preview only adds information: whatever `[[previews]]` the
    /// configuration has (a file preview, a previewer command, a dry run,
    /// for any server and tool), every decision, its reasons and the
    /// tool's visibility are what they are without it.
    #[test]
    fn previews_never_change_a_decision(
        scenario in scenario(),
        claims in annotations(),
        source in 0..3u8,
        for_this_server in any::<bool>(),
    ) {
        let tool = tool_named(scenario.tool, claims, None);
        let without = scenario.decide(&Policy::new(scenario.config.clone()), &tool);
        let previewer = match source {
            0 => config::Previewer::Files(config::FilePreview {
                path: "path".into(),
                change: config::FileChange::Write { content: "content".into() },
                roots: vec!["/".into()],
            }),
            1 => config::Previewer::Command(HookConfig {
                command: vec!["preview".into()],
                mode: HookMode::Persistent,
                timeout_ms: 100,
            }),
            _ => config::Previewer::DryRun { argument: "dryRun".into() },
        };
        let mut with = scenario.config.clone();
        with.previews.push(config::PreviewRule {
            server: Glob::new(if for_this_server { scenario.server } else { "*" }).unwrap(),
            tool: Glob::new("*").unwrap(),
            previewer,
        });
        let previewed = scenario.decide(&Policy::new(with), &tool);
        prop_assert_eq!(without, previewed);
    }

    /// A list of hosts the server may reach (`network = ["host:port"]`)
    /// never lowers friction for an untrusted server: it is decided, listed
    /// and proven exactly as with the network unconfined (the same
    /// writable paths), never as with no network, and never with less
    /// friction than with no sandbox at all.
    #[test]
    fn an_allow_list_network_never_lowers_friction_for_an_untrusted_server(
        scenario in scenario(),
        claims in annotations(),
        writes in any::<bool>(),
    ) {
        let scenario = scenario.untrusted();
        let tool = tool_named(scenario.tool, claims, None);
        let with_network = |network: bool, egress: Vec<config::Egress>| {
            let mut variant = scenario.clone();
            if let Some(server) = variant.config.servers.get_mut(scenario.server) {
                server.sandbox = Some(SandboxConfig {
                    read: vec!["/data".into()],
                    write: if writes { vec!["/data".into()] } else { vec![] },
                    network,
                    egress,
                    ..SandboxConfig::default()
                });
            }
            variant
        };
        let listed = with_network(false, egress_hosts());
        let open = with_network(true, Vec::new());
        let closed = with_network(false, Vec::new());
        let mut bare = scenario.clone();
        if let Some(server) = bare.config.servers.get_mut(scenario.server) {
            server.sandbox = None;
        }
        let decide = |variant: &Scenario| variant.decide(&Policy::new(variant.config.clone()), &tool);
        let (listed_verdict, listed_codes, listed_visible) = decide(&listed);
        let (open_verdict, open_codes, open_visible) = decide(&open);
        prop_assert_eq!(listed_verdict, open_verdict);
        prop_assert_eq!(&listed_codes, &open_codes);
        prop_assert_eq!(listed_visible, open_visible);
        let (closed_verdict, _, closed_visible) = decide(&closed);
        prop_assert!(friction(listed_verdict) >= friction(closed_verdict));
        prop_assert!(closed_visible || !listed_visible);
        let (bare_verdict, _, bare_visible) = decide(&bare);
        prop_assert!(friction(listed_verdict) >= friction(bare_verdict));
        prop_assert!(bare_visible || !listed_visible);
        // Nothing is proven closed: the tool stays open-world.
        let sandbox = proof(&listed.config, scenario.server, true);
        prop_assert!(!sandbox.no_network && sandbox.egress_only);
        let assessment = Policy::new(listed.config.clone())
            .assess(scenario.server, &tool, sandbox)
            .unwrap();
        prop_assert!(assessment.effective.open_world);
    }

    /// Vouched read-only credentials never lower friction for a tool that
    /// does not claim to only read: it goes to the full instance and is
    /// decided exactly as with credentials nobody vouched for.
    #[test]
    fn vouch_never_lowers_friction_for_a_tool_that_does_not_claim_read_only(
        scenario in scenario(),
        claims in annotations(),
    ) {
        let tool = tool_named(scenario.tool, claims, None);
        prop_assume!(!tool.declared().claims_read_only());
        let vouched = scenario.with_read_only(Some(true));
        let unvouched = scenario.with_read_only(Some(false));
        let with = vouched.decide(&Policy::new(vouched.config.clone()), &tool);
        let without = unvouched.decide(&Policy::new(unvouched.config.clone()), &tool);
        prop_assert_eq!(with, without);
    }

    /// A read-only instance nobody vouched for changes no decision: routing
    /// is defence in depth, and nothing is skipped for it.
    #[test]
    fn without_vouch_a_read_only_instance_changes_no_decision(
        scenario in scenario(),
        claims in annotations(),
    ) {
        let tool = tool_named(scenario.tool, claims, None);
        let routed = scenario.with_read_only(Some(false));
        let plain = scenario.with_read_only(None);
        let with = routed.decide(&Policy::new(routed.config.clone()), &tool);
        let without = plain.decide(&Policy::new(plain.config.clone()), &tool);
        prop_assert_eq!(with, without);
        prop_assert_eq!(
            Policy::new(plain.config.clone()).instance(scenario.server, &tool, proof(&plain.config, scenario.server, scenario.enforced)),
            Instance::Full
        );
    }

    /// What vouched credentials prove holds only on the read-only instance:
    /// a tool they make read-only (the reason `read-only-credentials`)
    /// always goes there, and so does every tool the decision treats as
    /// read-only on a server with such an instance.
    #[test]
    fn a_vouched_read_only_tool_always_goes_to_the_read_only_instance(
        scenario in scenario(),
        claims in annotations(),
        vouch in any::<bool>(),
    ) {
        let scenario = scenario.with_read_only(Some(vouch));
        let policy = Policy::new(scenario.config.clone());
        let tool = tool_named(scenario.tool, claims, None);
        let sandbox = proof(&scenario.config, scenario.server, scenario.enforced);
        let decision = scenario.decision(&policy, &tool);
        let instance = policy.instance(scenario.server, &tool, sandbox);
        let assessment = policy.assess(scenario.server, &tool, sandbox).unwrap();
        if decision.has(ReasonCode::ReadOnlyCredentials) || assessment.read_only_credentials {
            prop_assert!(vouch);
            prop_assert_eq!(instance, Instance::ReadOnly);
        }
        if assessment.effective.read_only {
            prop_assert_eq!(instance, Instance::ReadOnly);
        }
        if instance == Instance::Full {
            prop_assert!(!assessment.effective.read_only && !tool.declared().claims_read_only());
        }
    }

    /// With vouched credentials, an untrusted server's claimed read is
    /// effectively read-only, and a call that runs for that reason says so:
    /// an allow by the profile names `read-only-credentials` (or the
    /// sandbox, when it proves as much).
    #[test]
    fn a_vouched_claim_is_read_only_and_says_why(scenario in scenario(), claims in annotations()) {
        let scenario = scenario.untrusted().with_read_only(Some(true));
        let policy = Policy::new(scenario.config.clone());
        let tool = tool_named(scenario.tool, claims, None);
        let sandbox = proof(&scenario.config, scenario.server, scenario.enforced);
        let assessment = policy.assess(scenario.server, &tool, sandbox).unwrap();
        prop_assert_eq!(assessment.effective.read_only, tool.declared().claims_read_only() || (sandbox.no_network && sandbox.no_writes));
        let decision = scenario.decision(&policy, &tool);
        if decision.verdict == Verdict::Allow && decision.reasons.first().map(|r| r.code) == Some(ReasonCode::ReadOnly) {
            prop_assert!(decision.has(ReasonCode::ReadOnlyCredentials) || decision.has(ReasonCode::SandboxConfined), "{:?}", decision.codes().collect::<Vec<_>>());
        }
    }

    /// Compared with declaring nothing, an untrusted server's claims never
    /// lower friction.
    #[test]
    fn untrusted_claims_never_beat_no_claims(scenario in scenario(), claims in annotations()) {
        let scenario = scenario.untrusted();
        let policy = Policy::new(scenario.config.clone());
        let (bare, _, bare_visible) = scenario.decide(&policy, &tool_named(scenario.tool, None, None));
        let (claimed, _, claimed_visible) = scenario.decide(&policy, &tool_named(scenario.tool, claims, None));
        prop_assert!(friction(claimed) >= friction(bare));
        prop_assert!(bare_visible || !claimed_visible);
    }

    /// A tool the host is not shown is refused when it is called anyway,
    /// whatever the state of the call (a changed definition, session taint
    /// or a remembered approval never makes it a question). Found by
    /// fuzzing: under `hide-writes` both asked.
    #[test]
    fn issue_11_a_tool_that_is_not_listed_is_refused(scenario in scenario(), claims in annotations()) {
        let policy = Policy::new(scenario.config.clone());
        let (verdict, codes, visible) = scenario.decide(&policy, &tool_named(scenario.tool, claims, None));
        if !visible {
            prop_assert_eq!(verdict, Verdict::Deny, "{:?}", codes);
        }
    }

    /// A session whose credentials only read (scope `read`) never gets less
    /// friction than one that may write, in the same state, and never runs
    /// or sees a tool that is not effectively read-only, whatever the rules,
    /// the profile and a remembered approval say.
    #[test]
    fn a_read_scope_never_lowers_friction_and_never_runs_a_write(
        scenario in scenario(),
        claims in annotations(),
    ) {
        let policy = Policy::new(scenario.config.clone());
        let tool = tool_named(scenario.tool, claims, None);
        let mut write = scenario.clone();
        write.session.scope = Scope::Write;
        let mut read = scenario.clone();
        read.session.scope = Scope::Read;
        let (verdict_write, _, visible_write) = write.decide(&policy, &tool);
        let (verdict_read, codes, visible_read) = read.decide(&policy, &tool);
        prop_assert!(friction(verdict_read) >= friction(verdict_write), "{:?}", codes);
        prop_assert!(visible_write || !visible_read);
        let sandbox = proof(&scenario.config, scenario.server, scenario.enforced);
        let read_only = policy
            .assess(scenario.server, &tool, sandbox)
            .is_some_and(|assessment| assessment.effective.read_only);
        if !read_only {
            prop_assert_eq!(verdict_read, Verdict::Deny);
            prop_assert!(!visible_read);
        }
    }

    /// Adding a deny rule anywhere never lowers friction, and when it matches
    /// the call it denies and hides the tool.
    #[test]
    fn adding_a_deny_rule_never_yields_allow(
        scenario in scenario(),
        claims in annotations(),
        server_glob in glob(),
        tool_glob in glob(),
        position in 0usize..8,
    ) {
        let tool = tool_named(scenario.tool, claims, None);
        let (before, _, _) = scenario.decide(&Policy::new(scenario.config.clone()), &tool);
        let mut config = scenario.config.clone();
        let rule = Rule { server: server_glob, tool: tool_glob, action: Action::Deny, reason: None };
        let matches = rule.matches(scenario.server, scenario.tool);
        let position = position.min(config.rules.len());
        config.rules.insert(position, rule);
        let (after, codes, visible) = scenario.decide(&Policy::new(config), &tool);
        prop_assert!(friction(after) >= friction(before), "{before:?} -> {after:?}");
        if matches {
            prop_assert_eq!(after, Verdict::Deny);
            prop_assert_eq!(codes, vec![ReasonCode::RuleDeny]);
            prop_assert!(!visible);
        }
    }

    /// Deny beats ask beats allow, whatever order the rules are written in.
    #[test]
    fn deny_beats_ask_beats_allow(scenario in scenario(), claims in annotations(), order in 0usize..6) {
        let tool = tool_named(scenario.tool, claims, None);
        let any = || Glob::new("*").unwrap();
        let mut actions = [Action::Allow, Action::Ask, Action::Deny];
        // Every permutation of three, chosen by `order`.
        actions.rotate_left(order % 3);
        if order >= 3 {
            actions.swap(0, 1);
        }
        let mut with_all = scenario.config.clone();
        with_all.rules = actions.iter().map(|&action| Rule { server: any(), tool: any(), action, reason: None }).collect();
        prop_assert_eq!(scenario.decide(&Policy::new(with_all.clone()), &tool).0, Verdict::Deny);

        let mut ask_and_allow = with_all;
        ask_and_allow.rules.retain(|rule| rule.action != Action::Deny);
        let (verdict, codes, _) = scenario.decide(&Policy::new(ask_and_allow.clone()), &tool);
        // A read scope refuses a write before any rule is looked at.
        let scoped_out = scenario.session.scope == Scope::Read
            && codes.first() == Some(&ReasonCode::ScopeReadOnly);
        if scoped_out {
            prop_assert_eq!(verdict, Verdict::Deny);
        } else if ask_and_allow.gateway.unattended {
            prop_assert_eq!(verdict, Verdict::Deny);
            prop_assert_eq!(codes.first().copied(), Some(ReasonCode::Unattended));
        } else {
            prop_assert_eq!(verdict, Verdict::Ask);
        }
    }

    /// An allow rule never beats a deny rule or a changed definition.
    #[test]
    fn an_allow_rule_never_beats_a_deny_rule_or_a_changed_definition(
        scenario in scenario(),
        claims in annotations(),
    ) {
        let tool = tool_named(scenario.tool, claims, None);
        let mut config = scenario.config.clone();
        config.rules.insert(0, Rule {
            server: Glob::new(scenario.server).unwrap(),
            tool: Glob::new(scenario.tool).unwrap(),
            action: Action::Allow,
            reason: None,
        });
        let policy = Policy::new(config.clone());
        let denied_by_rule = config.rules.iter().any(|rule| rule.action == Action::Deny && rule.matches(scenario.server, scenario.tool));
        let (verdict, codes, _) = scenario.decide(&policy, &tool);
        if denied_by_rule {
            prop_assert_eq!(verdict, Verdict::Deny);
            prop_assert_eq!(codes, vec![ReasonCode::RuleDeny]);
        } else if scenario.pin == PinStatus::Changed {
            prop_assert_ne!(verdict, Verdict::Allow);
            // A read scope refuses a write before the change is looked at.
            let scoped_out = scenario.session.scope == Scope::Read
                && codes.first() == Some(&ReasonCode::ScopeReadOnly);
            prop_assert!(scoped_out || codes.contains(&ReasonCode::DefinitionChanged), "{:?}", codes);
        }
    }

    /// With a decision hook, whatever it answers, an untrusted server's
    /// annotations still only add friction.
    #[test]
    fn untrusted_annotations_never_lower_friction_whatever_the_hook_answers(
        scenario in hooked_scenario(),
        before in annotations(),
        after in annotations(),
    ) {
        let scenario = scenario.untrusted();
        let policy = Policy::new(scenario.config.clone());
        let (verdict_before, _, visible_before) =
            scenario.decide(&policy, &tool_named(scenario.tool, before, None));
        let (verdict_after, _, visible_after) =
            scenario.decide(&policy, &tool_named(scenario.tool, after, None));
        prop_assert!(friction(verdict_after) >= friction(verdict_before),
            "{verdict_before:?} -> {verdict_after:?}");
        prop_assert!(visible_before || !visible_after, "a hidden tool became visible");
    }

    /// The hook takes part after the deny rules, the read scope, the tools
    /// `hide-writes` hides and changed definitions, and overrides none of
    /// them: whatever it answers, the call is decided as it would be with
    /// no answer at all (and the hook is not even asked).
    #[test]
    fn the_hook_never_overrides_a_deny_a_scope_a_hidden_tool_or_a_change(
        scenario in hooked_scenario(),
        claims in annotations(),
    ) {
        let policy = Policy::new(scenario.config.clone());
        let tool = tool_named(scenario.tool, claims, None);
        let without = Scenario { hook: None, ..scenario.clone() };
        let unanswered = without.decision(&policy, &tool);
        let sandbox = proof(&scenario.config, scenario.server, scenario.enforced);
        let call = Call {
            server: scenario.server,
            tool: &tool,
            pin: scenario.pin,
            session: scenario.session,
            sandbox,
            hook: Default::default(),
        };
        let settled_before = unanswered.has(ReasonCode::RuleDeny)
            || unanswered.has(ReasonCode::ScopeReadOnly)
            || unanswered.has(ReasonCode::ProfileHideWrites)
            || unanswered.has(ReasonCode::DefinitionChanged);
        prop_assert_eq!(policy.hook_so_far(&call).is_none(), settled_before, "{:?}", unanswered);
        if settled_before {
            prop_assert_eq!(scenario.decision(&policy, &tool), unanswered);
        }
    }

    /// A hook that fails denies, and no answer of a hook allows a call
    /// that a deny rule, a paid label or a failure refuses or asks about.
    #[test]
    fn a_failed_hook_never_allows_and_a_paid_call_is_always_asked(
        scenario in hooked_scenario(),
        claims in annotations(),
    ) {
        let policy = Policy::new(scenario.config.clone());
        let tool = tool_named(scenario.tool, claims, None);
        let decision = scenario.decision(&policy, &tool);
        if matches!(scenario.hook, Some(OwnedAnswer::Failed(_))) {
            prop_assert_ne!(decision.verdict, Verdict::Allow, "{:?}", decision);
        }
        if policy.paid_label(scenario.server, scenario.tool).is_some() {
            prop_assert_ne!(decision.verdict, Verdict::Allow, "{:?}", decision);
            prop_assert_ne!(decision.remember, RememberOffer::UpToAlways);
        }
    }

    /// The hook's answer counts only where a hook is configured: for a
    /// server that turned it off, an answer changes nothing.
    #[test]
    fn an_answer_without_a_hook_changes_nothing(scenario in hooked_scenario(), claims in annotations()) {
        let mut config = scenario.config.clone();
        for server in config.servers.values_mut() {
            server.decide = hintgate_policy::config::ServerHook::Off;
        }
        let policy = Policy::new(config);
        let tool = tool_named(scenario.tool, claims, None);
        let without = Scenario { hook: None, ..scenario.clone() };
        prop_assert_eq!(scenario.decision(&policy, &tool), without.decision(&policy, &tool));
    }

    /// `unattended` never leaves a question for nobody.
    #[test]
    fn unattended_never_asks(scenario in prop_oneof![scenario(), hooked_scenario()], claims in annotations()) {
        let mut config = scenario.config.clone();
        config.gateway.unattended = true;
        let (verdict, _, _) = scenario.decide(&Policy::new(config), &tool_named(scenario.tool, claims, None));
        prop_assert_ne!(verdict, Verdict::Ask);
    }

    /// A remembered approval never allows an effectively destructive tool.
    #[test]
    fn remembered_approvals_never_allow_destructive_tools(scenario in scenario(), claims in annotations()) {
        let tool = tool_named(scenario.tool, claims, None);
        let policy = Policy::new(scenario.config.clone());
        let sandbox = proof(&scenario.config, scenario.server, scenario.enforced);
        let destructive = policy.assess(scenario.server, &tool, sandbox).unwrap().effective.destructive;
        let decision = policy.decide(&Call { server: scenario.server, tool: &tool, pin: scenario.pin, session: scenario.session, sandbox, hook: Default::default(), });
        if destructive {
            prop_assert!(!decision.has(ReasonCode::RememberedApproval));
        }
    }

    /// Arbitrary JSON as a tool definition, any server name: explaining never
    /// panics, and a definition that does not parse is denied and hidden.
    #[test]
    fn explaining_arbitrary_input_never_panics(
        scenario in scenario(),
        tool in json_value(),
        arguments in proptest::option::of(json_value()),
        server in "[a-z]{0,6}",
    ) {
        let policy = Policy::new(scenario.config.clone());
        for server in [server.as_str(), scenario.server] {
            let explanation = explain(&policy, &ExplainInput {
                server,
                tool: &tool,
                arguments: arguments.as_ref(),
                pinned: None,
                pin: scenario.pin,
                session: scenario.session,
                sandbox: SandboxProof::default(),
                hook: Default::default(),
            });
            if Tool::from_value(tool.clone()).is_err() {
                prop_assert_eq!(explanation.verdict, Verdict::Deny);
                prop_assert_eq!(explanation.reasons, vec![ReasonCode::InvalidDefinition]);
                prop_assert!(!explanation.visible);
            } else if !scenario.config.servers.contains_key(server) {
                prop_assert_eq!(explanation.verdict, Verdict::Deny);
                prop_assert_eq!(explanation.reasons, vec![ReasonCode::UnknownServer]);
            }
        }
    }

    /// A tool-shaped object with arbitrary field values never panics either.
    #[test]
    fn deciding_tool_shaped_input_never_panics(scenario in scenario(), fields in proptest::collection::btree_map(
        proptest::sample::select(vec!["name", "title", "description", "inputSchema", "annotations", "icons", "_meta", "other"]),
        json_value(), 0..6)) {
        let mut object: Map<String, Value> = fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        object.entry("name").or_insert(json!("write_file"));
        let policy = Policy::new(scenario.config.clone());
        let _ = explain(&policy, &ExplainInput {
            server: scenario.server,
            tool: &Value::Object(object),
            arguments: None,
            pinned: None,
            pin: scenario.pin,
            session: scenario.session,
            sandbox: SandboxProof::default(),
            hook: Default::default(),
        });
    }

    /// Validating arbitrary text as a configuration never panics, and a
    /// configuration is returned only when no diagnostic is an error.
    #[test]
    fn validating_arbitrary_config_text_never_panics(text in config_text()) {
        let (config, diagnostics) = config::parse_str(&text);
        let has_error = diagnostics.iter().any(|d| d.is_error());
        prop_assert_eq!(config.is_some(), !has_error);
        for diagnostic in &diagnostics {
            let _ = diagnostic.render("fuzz.toml", &text);
        }
    }

    /// The pin digest ignores key order and whitespace.
    #[test]
    fn the_pin_digest_ignores_key_order_and_whitespace(tool in tool_value(), seed in any::<u64>()) {
        // Both sides come from text, as a server's definitions do: the same
        // number literal always parses to the same value.
        let parsed = Tool::from_json(&serde_json::to_string(&tool).unwrap()).unwrap();
        let reordered_text = write_shuffled(&tool, seed);
        let reordered = Tool::from_json(&reordered_text).unwrap();
        prop_assert_eq!(PinDigest::of(&parsed), PinDigest::of(&reordered));
    }

    /// The pin digest changes when any pinned field changes, including a
    /// single annotation flip.
    #[test]
    fn the_pin_digest_changes_with_any_pinned_field(tool in tool_value(), field in 0usize..8) {
        let original = Tool::from_value(tool.clone()).unwrap();
        let mut changed = original.clone();
        match field {
            0 => changed.name.push('x'),
            1 => changed.title = Some(format!("{}!", changed.title.unwrap_or_default())),
            2 => changed.description = Some(format!("{} ", changed.description.unwrap_or_default())),
            3 => changed.input_schema = Some(json!({"type": "object", "properties": {"changed": {"type": "string"}}})),
            4 => changed.output_schema = Some(json!({"type": "object", "x": changed.output_schema.is_some()})),
            5 => {
                let annotations = changed.annotations.get_or_insert_with(Annotations::default);
                annotations.destructive_hint = Some(!annotations.destructive_hint.unwrap_or(false));
            }
            6 => {
                let annotations = changed.annotations.get_or_insert_with(Annotations::default);
                annotations.read_only_hint = Some(!annotations.read_only_hint.unwrap_or(false));
            }
            _ => changed.icons = Some(json!([{"src": format!("{:?}", changed.icons)}])),
        }
        prop_assert_ne!(PinDigest::of(&original), PinDigest::of(&changed));
        prop_assert_eq!(PinStatus::compare(Some(PinDigest::of(&original)), &changed), PinStatus::Changed);
    }
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        "\\PC{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map("[a-zA-Z_]{1,12}", inner, 0..5)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

/// A valid tool definition with every pinned field sometimes present.
fn tool_value() -> impl Strategy<Value = Value> {
    (
        "[a-z_]{1,12}",
        proptest::option::of("\\PC{0,16}"),
        proptest::option::of("\\PC{0,32}"),
        proptest::option::of(json_value()),
        annotations(),
        proptest::option::of(json_value()),
        json_value(),
    )
        .prop_map(|(name, title, description, output_schema, annotations, icons, meta)| {
            let mut tool = json!({"name": name, "inputSchema": {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}}});
            let object = tool.as_object_mut().unwrap();
            if let Some(title) = title { object.insert("title".into(), json!(title)); }
            if let Some(description) = description { object.insert("description".into(), json!(description)); }
            if let Some(schema) = output_schema { object.insert("outputSchema".into(), schema); }
            if let Some(annotations) = annotations { object.insert("annotations".into(), serde_json::to_value(annotations).unwrap()); }
            if let Some(icons) = icons { object.insert("icons".into(), icons); }
            object.insert("_meta".into(), json!({"x/meta": meta}));
            tool
        })
}

/// Serialises JSON with object keys in a seeded shuffled order and random
/// whitespace between tokens.
fn write_shuffled(value: &Value, seed: u64) -> String {
    fn next(state: &mut u64) -> u64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    }
    fn space(state: &mut u64) -> &'static str {
        ["", " ", "\n  ", "\t"][(next(state) % 4) as usize]
    }
    fn write(value: &Value, state: &mut u64, out: &mut String) {
        match value {
            Value::Object(map) => {
                let mut entries: Vec<_> = map.iter().collect();
                for idx in (1..entries.len()).rev() {
                    let other = (next(state) % (idx as u64 + 1)) as usize;
                    entries.swap(idx, other);
                }
                out.push('{');
                for (idx, (key, item)) in entries.into_iter().enumerate() {
                    if idx > 0 {
                        out.push(',');
                    }
                    out.push_str(space(state));
                    out.push_str(&serde_json::to_string(key).unwrap());
                    out.push_str(space(state));
                    out.push(':');
                    out.push_str(space(state));
                    write(item, state, out);
                }
                out.push_str(space(state));
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for (idx, item) in items.iter().enumerate() {
                    if idx > 0 {
                        out.push(',');
                    }
                    out.push_str(space(state));
                    write(item, state, out);
                }
                out.push(']');
            }
            scalar => out.push_str(&scalar.to_string()),
        }
    }
    let mut state = seed | 1;
    let mut out = String::new();
    write(value, &mut state, &mut out);
    out
}

/// Text that is often TOML-shaped, with the real keys, wrong types and garbage.
fn config_text() -> impl Strategy<Value = String> {
    let key = proptest::sample::select(vec![
        "profile",
        "unattended",
        "separator",
        "ask_timeout_s",
        "command",
        "args",
        "env",
        "url",
        "headers",
        "trust",
        "private_data",
        "sandbox",
        "read",
        "write",
        "network",
        "best_effort",
        "server",
        "tool",
        "action",
        "reason",
        "bogus",
    ]);
    let value = proptest::sample::select(vec![
        "\"ask-all\"",
        "\"hide-writes\"",
        "true",
        "false",
        "0",
        "-1",
        "99999999999999999999",
        "1.5",
        "[\"a\", 1]",
        "[]",
        "{ A = \"b\" }",
        "\"${X\"",
        "\"${OK}\"",
        "\"[z-a]\"",
        "\"deny\"",
        "\"http://example.com\"",
        "\"relative/path\"",
        "\"x\"",
        "{",
        "\"\"",
    ]);
    let header = proptest::sample::select(vec![
        "[gateway]",
        "[servers.fs]",
        "[servers.fs.sandbox]",
        "[[rules]]",
        "[servers.\"bad name\"]",
        "[servers]",
        "[[servers.fs]]",
        "[rules]",
        "",
    ]);
    let line = prop_oneof![
        (key, value).prop_map(|(k, v)| format!("{k} = {v}")),
        header.prop_map(str::to_owned),
        "\\PC{0,20}",
    ];
    proptest::collection::vec(line, 0..16).prop_map(|lines| lines.join("\n"))
}
