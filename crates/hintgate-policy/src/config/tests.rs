//! Unit tests of configuration validation; the snapshot tests in
//! `tests/it/snapshots.rs` show the full diagnostics.

use super::*;
use crate::diag::DiagCode;

fn codes(source: &str) -> Vec<(DiagCode, String)> {
    parse_str(source)
        .1
        .into_iter()
        .map(|d| (d.code, d.key))
        .collect()
}

#[test]
fn defaults_apply_when_keys_are_absent() {
    let (config, diagnostics) = parse_str("[servers.fs]\ncommand = \"x\"\n");
    assert!(diagnostics.is_empty());
    let config = config.unwrap();
    assert_eq!(config.gateway, GatewaySettings::default());
    let fs = &config.servers["fs"];
    assert_eq!(fs.trust, Trust::Untrusted);
    assert_eq!(fs.private_data, PrivateData::None);
}

#[test]
fn loopback_http_is_fine_and_lookalikes_are_not() {
    for url in [
        "http://127.0.0.1:8080/mcp",
        "http://localhost/mcp",
        "http://[::1]:3000/mcp",
    ] {
        assert!(
            codes(&format!("[servers.a]\nurl = \"{url}\"\n")).is_empty(),
            "{url}"
        );
    }
    assert_eq!(
        codes("[servers.a]\nurl = \"http://127.attacker.example/mcp\"\n"),
        vec![(DiagCode::InsecureUrl, "servers.a.url".to_owned())]
    );
    assert_eq!(
        codes("[servers.a]\nurl = \"http://\"\n"),
        vec![(DiagCode::InvalidValue, "servers.a.url".to_owned())]
    );
}

#[test]
fn rules_naming_absent_servers_are_warned_about_even_without_servers() {
    assert_eq!(
        codes("[[rules]]\nserver = \"github\"\naction = \"deny\"\n"),
        vec![(DiagCode::UnknownRuleServer, "rules[0].server".to_owned())]
    );
    // A server with errors of its own is still a configured name.
    let found =
        codes("[servers.fs]\ntrust = \"trusted\"\n[[rules]]\nserver = \"fs\"\naction = \"deny\"\n");
    assert_eq!(found, vec![(DiagCode::MissingKey, "servers.fs".to_owned())]);
}

#[test]
fn private_data_takes_a_flag_or_globs() {
    let (config, _) =
        parse_str("[servers.a]\ncommand = \"x\"\nprivate_data = [\"read_*\", \"get_mail\"]\n");
    let server = &config.unwrap().servers["a"];
    assert!(server.returns_private_data("read_inbox"));
    assert!(server.returns_private_data("get_mail"));
    assert!(!server.returns_private_data("send_mail"));
    // The globs name tools; the server's resources and prompts are private
    // data only when the whole server is.
    assert!(!server.serves_private_data());
    let (config, _) = parse_str("[servers.a]\ncommand = \"x\"\nprivate_data = true\n");
    assert!(config.unwrap().servers["a"].serves_private_data());
}

#[test]
fn timeouts_and_limits_are_bounded() {
    let (config, _) = parse_str(
        "[gateway]\ncall_timeout_s = 5\nmax_message_bytes = 1048576\nmax_json_depth = 32\n",
    );
    let gateway = config.unwrap().gateway;
    assert_eq!(
        (
            gateway.call_timeout_s,
            gateway.max_message_bytes,
            gateway.max_json_depth
        ),
        (5, 1_048_576, 32)
    );
    assert_eq!(
        parse_str("").0.unwrap().gateway.max_json_depth,
        64,
        "the default"
    );
    assert_eq!(
        codes("[gateway]\ncall_timeout_s = 0\nmax_message_bytes = 10\nmax_json_depth = 129\n"),
        vec![
            (DiagCode::InvalidValue, "gateway.call_timeout_s".to_owned()),
            (
                DiagCode::InvalidValue,
                "gateway.max_message_bytes".to_owned()
            ),
            (DiagCode::InvalidValue, "gateway.max_json_depth".to_owned()),
        ]
    );
    assert_eq!(
        codes("[gateway]\nmax_json_depth = 15\n"),
        vec![(DiagCode::InvalidValue, "gateway.max_json_depth".to_owned())]
    );
    let (config, _) = parse_str("[gateway]\nmax_tools_per_server = 50\n");
    assert_eq!(config.unwrap().gateway.max_tools_per_server, 50);
    assert_eq!(
        parse_str("").0.unwrap().gateway.max_tools_per_server,
        10_000,
        "the default"
    );
    assert_eq!(
        codes("[gateway]\nmax_tools_per_server = 0\n"),
        vec![(
            DiagCode::InvalidValue,
            "gateway.max_tools_per_server".to_owned()
        )]
    );
}

#[test]
fn audit_redaction_patterns_are_checked_where_they_are_written() {
    let source = "[audit]\nredact = [\"/credentials/password\", \"*TOKEN*\", \"/a~2\", \"[x-\", 3]\nredact_defaults = false\n";
    let (config, diagnostics) = parse_str(source);
    assert!(config.is_none());
    let found: Vec<_> = diagnostics
        .iter()
        .map(|d| {
            let line = source[..d.span.clone().unwrap().start].lines().count();
            (d.code, d.key.as_str(), line)
        })
        .collect();
    assert_eq!(
        found,
        vec![
            (DiagCode::BadPointer, "audit.redact[2]", 2),
            (DiagCode::BadGlob, "audit.redact[3]", 2),
            (DiagCode::WrongType, "audit.redact[4]", 2),
        ]
    );

    let (config, diagnostics) = parse_str(
        "[audit]\nredact = [\"/credentials/password\", \"*TOKEN*\"]\nredact_defaults = false\n",
    );
    assert!(diagnostics.is_empty(), "{diagnostics:?}");
    let audit = config.unwrap().audit;
    assert!(!audit.redact_defaults);
    let patterns: Vec<&str> = audit.redact.iter().map(|p| p.as_str()).collect();
    assert_eq!(patterns, ["/credentials/password", "*token*"]);
    assert_eq!(
        codes("[audit]\nredact_default = true\n"),
        vec![(DiagCode::UnknownKey, "audit.redact_default".to_owned())]
    );
    assert!(
        parse_str("[servers.fs]\ncommand = \"x\"\n")
            .0
            .unwrap()
            .audit
            .redact_defaults
    );
}

#[test]
fn server_names_whose_prefixed_tool_names_collide_are_refused() {
    // `docs___x` is `_x` of `docs` and `x` of `docs_`.
    let source = "[servers.docs]\ncommand = \"x\"\n\n[servers.docs_]\ncommand = \"x\"\n";
    let (config, diagnostics) = parse_str(source);
    assert!(config.is_none(), "{diagnostics:?}");
    let found: Vec<(&str, &str)> = diagnostics
        .iter()
        .map(|d| (d.code.as_str(), d.key.as_str()))
        .collect();
    assert_eq!(found, [("colliding-server-names", "servers.docs_")]);
    let diagnostic = &diagnostics[0];
    assert!(diagnostic.is_error());
    assert!(
        diagnostic.message.contains("`docs`")
            && diagnostic.message.contains("`docs_`")
            && diagnostic.message.contains("`docs___x`"),
        "{}",
        diagnostic.message
    );
    // It points at the second server and names the first one's line.
    let rendered = diagnostic.render("hintgate.toml", source);
    assert!(rendered.contains("hintgate.toml:4:10"), "{rendered}");
    assert!(rendered.contains("line 1"), "{rendered}");

    // Another separator, or a name that does not run into it, is fine.
    for clean in [
        "[gateway]\nseparator = \"-\"\n[servers.docs]\ncommand = \"x\"\n[servers.docs_]\ncommand = \"x\"\n",
        "[servers.docs]\ncommand = \"x\"\n[servers.docs-a]\ncommand = \"x\"\n",
        "[servers.docs_]\ncommand = \"x\"\n",
        "[servers.a]\ncommand = \"x\"\n[servers.b]\ncommand = \"x\"\n",
    ] {
        let (config, diagnostics) = parse_str(clean);
        assert!(config.is_some(), "{clean}: {diagnostics:?}");
    }
    // Each pair that collides is named once.
    let three = "[servers.a]\ncommand = \"x\"\n[servers.a_]\ncommand = \"x\"\n[servers.a__]\ncommand = \"x\"\n";
    let (_, diagnostics) = parse_str(three);
    let colliding = diagnostics
        .iter()
        .filter(|d| d.code.as_str() == "colliding-server-names")
        .count();
    assert_eq!(colliding, 1, "`a__` holds the separator: {diagnostics:?}");
    let three = "[gateway]\nseparator = \"___\"\n[servers.a]\ncommand = \"x\"\n[servers.a_]\ncommand = \"x\"\n[servers.a__]\ncommand = \"x\"\n";
    let (_, diagnostics) = parse_str(three);
    let colliding = diagnostics
        .iter()
        .filter(|d| d.code.as_str() == "colliding-server-names")
        .count();
    assert_eq!(colliding, 3, "{diagnostics:?}");
}

#[test]
fn server_names_that_look_the_same_are_refused() {
    // Hosts and people read `Docs` and `docs` as one server.
    let source = "[servers.docs]\ncommand = \"x\"\n\n[servers.Docs]\ncommand = \"x\"\n";
    let (config, diagnostics) = parse_str(source);
    assert!(config.is_none(), "{diagnostics:?}");
    let found: Vec<(&str, &str)> = diagnostics
        .iter()
        .map(|d| (d.code.as_str(), d.key.as_str()))
        .collect();
    assert_eq!(found, [("look-alike-server-names", "servers.Docs")]);
    let diagnostic = &diagnostics[0];
    assert!(diagnostic.is_error());
    let rendered = diagnostic.render("hintgate.toml", source);
    assert!(rendered.contains("hintgate.toml:4:10"), "{rendered}");
    assert!(rendered.contains("line 1"), "{rendered}");
    assert!(
        rendered.contains("`docs`") && rendered.contains("`Docs`"),
        "{rendered}"
    );
    // Characters drawn alike count too, with any separator.
    for alike in [
        "[servers.mail1]\ncommand = \"x\"\n[servers.maill]\ncommand = \"x\"\n",
        "[servers.FS]\ncommand = \"x\"\n[servers.fs]\ncommand = \"x\"\n",
        "[gateway]\nseparator = \"-\"\n[servers.b0x]\ncommand = \"x\"\n[servers.box]\ncommand = \"x\"\n",
    ] {
        let (config, diagnostics) = parse_str(alike);
        assert!(config.is_none(), "{alike}");
        assert_eq!(diagnostics.len(), 1, "{diagnostics:?}");
        assert_eq!(diagnostics[0].code.as_str(), "look-alike-server-names");
    }
    // A name outside the rule is refused on its own.
    let (config, diagnostics) = parse_str("[servers.\"do\u{200b}cs\"]\ncommand = \"x\"\n");
    assert!(config.is_none());
    assert_eq!(diagnostics[0].code.as_str(), "invalid-server-name");
}

#[test]
fn the_witness_is_an_absolute_path_with_a_bounded_cadence() {
    let (config, diagnostics) = parse_str(
        "[audit]\nwitness = \"/mnt/other/hintgate.witness\"\nwitness_every_records = 50\nwitness_every_s = 5\n",
    );
    assert!(diagnostics.is_empty(), "{diagnostics:?}");
    let audit = config.unwrap().audit;
    assert_eq!(
        audit.witness.as_deref(),
        Some("/mnt/other/hintgate.witness")
    );
    assert_eq!(audit.witness_every_records, Some(50));
    assert_eq!(audit.witness_every_s, Some(5));
    let (config, _) = parse_str("[audit]\nwitness = \"${WITNESS}\"\n");
    assert_eq!(config.unwrap().audit.witness.as_deref(), Some("${WITNESS}"));
    let (config, _) = parse_str("[audit]\n");
    let audit = config.unwrap().audit;
    assert_eq!(
        (
            audit.witness,
            audit.witness_every_records,
            audit.witness_every_s
        ),
        (None, None, None)
    );
    let source = "[audit]\nwitness = \"hintgate.witness\"\nwitness_every_records = 0\nwitness_every_s = \"60\"\nwitness_evry_s = 1\n";
    let (config, diagnostics) = parse_str(source);
    assert!(config.is_none());
    let found: Vec<(&str, &str, usize)> = diagnostics
        .iter()
        .map(|d| {
            let line = crate::diag::position(source, d.span.clone().unwrap().start).line;
            (d.code.as_str(), d.key.as_str(), line)
        })
        .collect();
    for expected in [
        ("relative-path", "audit.witness", 2),
        ("invalid-value", "audit.witness_every_records", 3),
        ("wrong-type", "audit.witness_every_s", 4),
        ("unknown-key", "audit.witness_evry_s", 5),
    ] {
        assert!(found.contains(&expected), "{expected:?} in {found:?}");
    }
    assert_eq!(found.len(), 4, "{found:?}");
}

#[test]
fn the_audit_key_file_is_an_absolute_path_or_a_variable() {
    let (config, diagnostics) = parse_str("[audit]\nkey_file = \"/etc/hintgate/audit.key\"\n");
    assert!(diagnostics.is_empty(), "{diagnostics:?}");
    assert_eq!(
        config.unwrap().audit.key_file.as_deref(),
        Some("/etc/hintgate/audit.key")
    );
    let (config, diagnostics) = parse_str("[audit]\nkey_file = \"${TEAM_AUDIT_KEY}\"\n");
    assert!(diagnostics.is_empty(), "{diagnostics:?}");
    assert_eq!(
        config.unwrap().audit.key_file.as_deref(),
        Some("${TEAM_AUDIT_KEY}")
    );
    assert_eq!(
        codes("[audit]\nkey_file = \"audit.key\"\n"),
        vec![(DiagCode::RelativePath, "audit.key_file".to_owned())]
    );
    assert_eq!(
        codes("[audit]\nkey_file = 3\n"),
        vec![(DiagCode::WrongType, "audit.key_file".to_owned())]
    );
    assert_eq!(
        parse_str("[servers.fs]\ncommand = \"x\"\n")
            .0
            .unwrap()
            .audit
            .key_file,
        None
    );
}

/// Each malformed `network` entry is refused at its own line and key.
fn sandbox_limits_refuse_malformed_hosts() {
    for (entry, words) in [
        ("example.com", "no port"),
        ("example.com:0", "not 1 to 65535"),
        ("example.com:65536", "not 1 to 65535"),
        ("example.com:+443", "not 1 to 65535"),
        ("example.com:", "not 1 to 65535"),
        (":443", "no host"),
        ("*.example.com:443", "wildcard"),
        ("https://example.com:443", "URL"),
        ("::1:443", "without brackets"),
        ("[::1:443", "closing"),
        ("[nope]:443", "not an IPv6 address"),
        ("exa mple.com:443", "not a host name"),
        ("-bad.example.com:443", "not a host name"),
        ("1.2.3.04:443", "not a host name"),
    ] {
        let text = format!(
            "[servers.fs]\ncommand = \"x\"\n[servers.fs.sandbox]\nnetwork = [\n  \"ok.example.com:443\",\n  \"{entry}\",\n]\n"
        );
        let (config, diagnostics) = parse_str(&text);
        assert!(config.is_none(), "{entry}");
        assert_eq!(diagnostics.len(), 1, "{entry}: {diagnostics:?}");
        let diagnostic = &diagnostics[0];
        assert_eq!(diagnostic.code, DiagCode::InvalidValue, "{entry}");
        assert_eq!(diagnostic.key, "servers.fs.sandbox.network[1]", "{entry}");
        assert!(
            diagnostic.message.contains(words),
            "{entry}: {}",
            diagnostic.message
        );
        // Its position is the entry's own line (the sixth).
        let span = diagnostic.span.clone().expect("a span");
        assert_eq!(text[..span.start].lines().count(), 6, "{entry}");
    }
    let (_, diagnostics) =
        parse_str("[servers.fs]\ncommand = \"x\"\n[servers.fs.sandbox]\nnetwork = []\n");
    assert_eq!(diagnostics.len(), 1, "{diagnostics:?}");
    assert_eq!(diagnostics[0].key, "servers.fs.sandbox.network");
    let (_, diagnostics) =
        parse_str("[servers.fs]\ncommand = \"x\"\n[servers.fs.sandbox]\nnetwork = [443]\n");
    assert_eq!(diagnostics.len(), 1, "{diagnostics:?}");
    assert_eq!(diagnostics[0].key, "servers.fs.sandbox.network[0]");
}

#[test]
fn sandbox_limits_and_a_list_of_hosts_are_read() {
    let (config, diagnostics) = parse_str(
        "[servers.fs]\ncommand = \"x\"\n[servers.fs.sandbox]\nread = [\"/data\"]\nmax_open_files = 256\nmax_processes = 32\nmax_memory_mb = 2048\n",
    );
    assert!(diagnostics.is_empty(), "{diagnostics:?}");
    let sandbox = config.unwrap().servers["fs"].sandbox.clone().unwrap();
    assert_eq!(sandbox.max_open_files, Some(256));
    assert_eq!(sandbox.max_processes, Some(32));
    assert_eq!(sandbox.max_memory_mb, Some(2048));
    assert!(!sandbox.network);
    // A list of hosts: the server reaches those, through the gateway.
    let (config, diagnostics) = parse_str(
        "[servers.fs]\ncommand = \"x\"\n[servers.fs.sandbox]\nnetwork = [\"API.example.com:443\", \"10.0.0.5:8080\", \"[::1]:80\", \"api.example.com:443\"]\n",
    );
    assert!(diagnostics.is_empty(), "{diagnostics:?}");
    let sandbox = config.unwrap().servers["fs"].sandbox.clone().unwrap();
    assert!(!sandbox.network);
    assert_eq!(
        sandbox.egress_hosts(),
        ["api.example.com:443", "10.0.0.5:8080", "[::1]:80"]
    );
    let proof = sandbox.proof();
    assert!(!proof.no_network && proof.egress_only, "{proof:?}");
    sandbox_limits_refuse_malformed_hosts();
    assert_eq!(
        codes("[servers.fs]\ncommand = \"x\"\n[servers.fs.sandbox]\nmax_processes = 0\n"),
        vec![(
            DiagCode::InvalidValue,
            "servers.fs.sandbox.max_processes".to_owned()
        )]
    );
}

#[test]
fn a_value_with_line_breaks_is_named_in_a_one_line_diagnostic() {
    // Found by fuzzing: a value quoted into a message kept its line breaks,
    // so one diagnostic spanned several lines, and the file's text could
    // pass for a line hintgate wrote.
    let source = "[gateway]\nprofile = \"ask\\nerror[toml-syntax]: all is well\"\n\n[servers.\"a\\nb\"]\ncommand = \"x\"\ntrust = \"mostly\\r\\u202e\"\n";
    let (_, diagnostics) = parse_str(source);
    assert!(diagnostics.len() >= 2, "{diagnostics:#?}");
    for diagnostic in &diagnostics {
        for text in [
            Some(&diagnostic.message),
            diagnostic.help.as_ref(),
            Some(&diagnostic.key),
        ]
        .into_iter()
        .flatten()
        {
            assert!(!text.contains(['\n', '\r', '\u{202e}']), "{diagnostic:#?}");
        }
    }
    let profile = diagnostics
        .iter()
        .find(|d| d.key == "gateway.profile")
        .unwrap();
    assert_eq!(
        profile.message,
        "unknown profile `ask\\nerror[toml-syntax]: all is well`"
    );
}

#[test]
fn a_key_dotted_past_the_parsers_recursion_limit_is_reported_at_a_place() {
    // Found by fuzzing: the TOML parser stops at its recursion limit with
    // an error that has no position, and the diagnostic named no place.
    let source = format!(
        "[gateway]\nprofile = \"ask-all\"\nx{} = 1\n",
        ".y".repeat(200)
    );
    let (config, diagnostics) = parse_str(&source);
    assert!(config.is_none());
    let syntax: Vec<_> = diagnostics
        .iter()
        .filter(|d| d.code == DiagCode::TomlSyntax)
        .collect();
    assert!(!syntax.is_empty(), "{diagnostics:#?}");
    for diagnostic in syntax {
        assert!(diagnostic.span.is_some(), "{diagnostic:#?}");
        assert!(
            diagnostic.message.contains("nested too deeply"),
            "{diagnostic:#?}"
        );
    }
}

#[test]
fn decision_hooks_are_read_where_they_are_set_and_checked() {
    let (config, diagnostics) = parse_str(
        r#"
[gateway]
decide_command = ["/usr/local/bin/decide", "--strict"]
decide_timeout_ms = 500

[servers.fs]
command = "x"

[servers.db]
command = "y"
decide_command = ["python3", "db_hook.py"]
decide_command_mode = "per-call"

[servers.notes]
command = "z"
decide_command = []
"#,
    );
    assert!(diagnostics.is_empty(), "{diagnostics:?}");
    let config = config.unwrap();
    let gateway = config.gateway.decide.clone().unwrap();
    assert_eq!(gateway.command, ["/usr/local/bin/decide", "--strict"]);
    assert_eq!(
        (gateway.mode, gateway.timeout_ms),
        (HookMode::Persistent, 500)
    );
    let hook = |name: &str| config.servers[name].hook(&config.gateway).cloned();
    assert_eq!(hook("fs"), Some(gateway.clone()));
    let db = hook("db").unwrap();
    assert_eq!(
        (db.command[0].as_str(), db.mode, db.timeout_ms),
        ("python3", HookMode::PerCall, DEFAULT_DECIDE_TIMEOUT_MS)
    );
    assert_eq!(hook("notes"), None, "an empty command turns the hook off");

    assert_eq!(
        codes("[gateway]\ndecide_command_mode = \"per-call\"\n"),
        vec![(
            DiagCode::ConflictingKeys,
            "gateway.decide_command_mode".to_owned()
        )]
    );
    assert_eq!(
        codes("[gateway]\ndecide_command = []\n"),
        vec![(DiagCode::InvalidValue, "gateway.decide_command".to_owned())]
    );
    assert_eq!(
        codes("[gateway]\ndecide_command = [\"d\"]\ndecide_command_mode = \"sometimes\"\n"),
        vec![(
            DiagCode::InvalidValue,
            "gateway.decide_command_mode".to_owned()
        )]
    );
    assert_eq!(
        codes("[gateway]\ndecide_command = [\"d\"]\ndecide_timeout_ms = 0\n"),
        vec![(
            DiagCode::InvalidValue,
            "gateway.decide_timeout_ms".to_owned()
        )]
    );
    assert_eq!(
        codes("[servers.a]\ncommand = \"x\"\ndecide_command = \"d\"\n"),
        vec![(DiagCode::WrongType, "servers.a.decide_command".to_owned())]
    );
}

#[test]
fn labels_and_idempotency_keys_are_read_and_checked() {
    let (config, diagnostics) = parse_str(
        r#"
[gateway]
idempotency_window_s = 3600

[servers.billing]
url = "https://billing.example/mcp"
idempotency_key = "requestId"

[servers.notes]
command = "n"
idempotency_key = false

[[labels]]
server = "billing"
tool = "charge_*"
paid = true
reason = "money"
"#,
    );
    assert!(diagnostics.is_empty(), "{diagnostics:?}");
    let config = config.unwrap();
    assert_eq!(config.gateway.idempotency_window_s, 3600);
    assert_eq!(
        config.servers["billing"].idempotency_key.as_deref(),
        Some("requestId")
    );
    assert_eq!(config.servers["notes"].idempotency_key, None);
    assert!(config.labels[0].paid && config.labels[0].matches("billing", "charge_card"));
    assert!(!config.labels[0].matches("billing", "refund"));

    assert_eq!(
        codes("[[labels]]\ntool = \"x\"\n"),
        vec![(DiagCode::MissingKey, "labels[0]".to_owned())]
    );
    assert_eq!(
        codes("[[labels]]\ntool = \"x\"\npaid = true\ncost = 3\n"),
        vec![(DiagCode::UnknownKey, "labels[0].cost".to_owned())]
    );
    assert_eq!(
        codes("[[labels]]\nserver = \"nowhere\"\npaid = true\n"),
        vec![(DiagCode::UnknownRuleServer, "labels[0].server".to_owned())]
    );
    assert_eq!(
        codes("[servers.a]\ncommand = \"x\"\nidempotency_key = 3\n"),
        vec![(DiagCode::WrongType, "servers.a.idempotency_key".to_owned())]
    );
    assert_eq!(
        codes("[servers.a]\ncommand = \"x\"\nidempotency_key = \"\"\n"),
        vec![(
            DiagCode::InvalidValue,
            "servers.a.idempotency_key".to_owned()
        )]
    );
    assert_eq!(
        codes("[gateway]\nidempotency_window_s = 0\n"),
        vec![(
            DiagCode::InvalidValue,
            "gateway.idempotency_window_s".to_owned()
        )]
    );
}

#[test]
fn a_listen_table_gives_the_http_host_sides_settings() {
    let source = r#"
[listen]
address = "10.0.0.5:8787"
public = true
tls_cert = "/etc/hintgate/cert.pem"
tls_key = "${HINTGATE_TLS_KEY}"
allow_origins = ["https://app.example.com"]
oauth_issuer = "https://auth.example.com"
oauth_jwks = "https://auth.example.com/jwks.json"
oauth_audience = "https://gw.example.com/mcp"
oauth_read_scope = "tools:read"
oauth_write_scope = "tools:write"
"#;
    let (config, diagnostics) = parse_str(source);
    assert!(diagnostics.is_empty(), "{diagnostics:?}");
    let listen = config.unwrap().listen;
    assert_eq!(listen.address, Some("10.0.0.5:8787".parse().unwrap()));
    assert!(listen.public);
    assert_eq!(listen.tls_cert.as_deref(), Some("/etc/hintgate/cert.pem"));
    assert_eq!(listen.tls_key.as_deref(), Some("${HINTGATE_TLS_KEY}"));
    assert_eq!(listen.allow_origins, ["https://app.example.com"]);
    assert_eq!(
        listen.oauth_issuer.as_deref(),
        Some("https://auth.example.com")
    );
    assert_eq!(
        listen.oauth_jwks.as_deref(),
        Some("https://auth.example.com/jwks.json")
    );
    assert_eq!(
        listen.oauth_audience.as_deref(),
        Some("https://gw.example.com/mcp")
    );
    assert_eq!(listen.oauth_read_scope.as_deref(), Some("tools:read"));
    assert_eq!(listen.oauth_write_scope.as_deref(), Some("tools:write"));
    // Without the table, nothing listens.
    let (config, _) = parse_str("");
    assert_eq!(config.unwrap().listen, ListenSettings::default());
}

#[test]
fn every_problem_of_a_listen_table_is_named_by_its_key_and_place() {
    let source = r#"[listen]
address = "10.0.0.5:8787"
tls_cert = "cert.pem"
allow_origins = ["https://app.example.com/path", 3]
oauth_jwks = "http://keys.example.com/jwks.json"
oauth_read_scope = "read write"
oauth_write_scope = "mcp:read"
port = 8787
"#;
    let (config, diagnostics) = parse_str(source);
    assert!(config.is_none());
    let found: Vec<(DiagCode, String, usize)> = diagnostics
        .iter()
        .map(|d| {
            let line = d
                .span
                .as_ref()
                .map_or(0, |span| source[..span.start].matches('\n').count() + 1);
            (d.code, d.key.clone(), line)
        })
        .collect();
    let expected = [
        // Beyond loopback without `public = true`.
        (DiagCode::InvalidValue, "listen.address", 2),
        (DiagCode::RelativePath, "listen.tls_cert", 3),
        // A certificate without its key.
        (DiagCode::MissingKey, "listen.tls_key", 3),
        (DiagCode::InvalidValue, "listen.allow_origins[0]", 4),
        (DiagCode::WrongType, "listen.allow_origins[1]", 4),
        // A key set in clear text from another host, and no issuer.
        (DiagCode::InsecureUrl, "listen.oauth_jwks", 5),
        (DiagCode::MissingKey, "listen.oauth_issuer", 5),
        (DiagCode::InvalidValue, "listen.oauth_read_scope", 6),
        (DiagCode::MissingKey, "listen.oauth_issuer", 6),
        (DiagCode::MissingKey, "listen.oauth_issuer", 7),
        (DiagCode::UnknownKey, "listen.port", 8),
    ];
    for (code, key, line) in expected {
        assert!(
            found.contains(&(code, key.to_owned(), line)),
            "{code:?} {key} at line {line}: {found:?}"
        );
    }
    // The write scope named like the default read scope.
    assert!(
        found
            .iter()
            .any(|(code, key, _)| *code == DiagCode::ConflictingKeys
                && key == "listen.oauth_write_scope"),
        "{found:?}"
    );
    for (code, key) in codes("[listen]\naddress = \"localhost\"\n") {
        assert_eq!(
            (code, key.as_str()),
            (DiagCode::InvalidValue, "listen.address")
        );
    }
    assert_eq!(
        codes("[listen]\noauth_issuer = \"https://a.example\"\n"),
        vec![(DiagCode::MissingKey, "listen.oauth_jwks".to_owned())]
    );
    assert_eq!(
        codes("listen = 1\n"),
        vec![(DiagCode::WrongType, "listen".to_owned())]
    );
}

#[test]
fn a_read_only_table_inherits_what_it_does_not_override() {
    let source = r#"
[servers.db]
command = "npx"
args = ["-y", "pg-server", "${DB_WRITER_URL}"]
env = { PGAPPNAME = "hintgate", PGUSER = "writer" }

[servers.db.read_only]
env = { PGUSER = "reader" }
vouch = true

[servers.api]
url = "https://api.example/mcp"
headers = { Authorization = "Bearer ${WRITE}", "X-Team" = "a" }

[servers.api.read_only]
headers = { Authorization = "Bearer ${READ}" }
"#;
    let (config, diagnostics) = parse_str(source);
    // The vouched stdio server has no sandbox, which is only a warning.
    let found: Vec<_> = diagnostics
        .iter()
        .map(|d| (d.code, d.key.as_str()))
        .collect();
    assert_eq!(
        found,
        vec![(DiagCode::VouchWithoutSandbox, "servers.db.read_only.vouch")],
        "{diagnostics:?}"
    );
    let config = config.unwrap();
    let db = config.servers["db"].read_only.as_ref().unwrap();
    assert!(db.vouch);
    assert_eq!(
        db.transport,
        Transport::Stdio {
            command: "npx".into(),
            args: vec!["-y".into(), "pg-server".into(), "${DB_WRITER_URL}".into()],
            env: BTreeMap::from([
                ("PGAPPNAME".into(), "hintgate".into()),
                ("PGUSER".into(), "reader".into())
            ]),
        }
    );
    let api = config.servers["api"].read_only.as_ref().unwrap();
    assert!(!api.vouch, "vouch is off unless written");
    assert_eq!(
        api.transport,
        Transport::Http {
            url: "https://api.example/mcp".into(),
            headers: BTreeMap::from([
                ("Authorization".into(), "Bearer ${READ}".into()),
                ("X-Team".into(), "a".into())
            ]),
        }
    );
    let instance = config.servers["db"].read_only_instance().unwrap();
    assert_eq!(instance.transport, db.transport);
    assert!(instance.read_only.is_none());
}

#[test]
fn a_read_only_table_with_scopes_signs_in_with_a_token_of_its_own() {
    let source = r#"
[servers.docs]
url = "https://docs.example/mcp"

[servers.docs.oauth]
client_id = "hintgate"
scopes = ["docs:read", "docs:write"]

[servers.docs.read_only]
scopes = ["docs:read"]
vouch = true
"#;
    let (config, diagnostics) = parse_str(source);
    assert!(diagnostics.is_empty(), "{diagnostics:?}");
    let config = config.unwrap();
    let server = &config.servers["docs"];
    assert_eq!(
        server.read_only.as_ref().unwrap().scopes,
        Some(vec!["docs:read".to_owned()])
    );
    assert!(server.credentials().read_only);
    assert_eq!(server.oauth.as_ref().unwrap().instance, Instance::Full);
    // The instance is reached at the same URL, with its own login: the
    // read-only table's scopes, marked as the read-only instance's.
    let instance = server.read_only_instance().unwrap();
    assert_eq!(instance.transport, server.transport);
    let oauth = instance.oauth.unwrap();
    assert_eq!(oauth.scopes, Some(vec!["docs:read".to_owned()]));
    assert_eq!(oauth.instance, Instance::ReadOnly);
    assert_eq!(oauth.client_id.as_deref(), Some("hintgate"));

    // Scopes need a token to ask for; an empty list or a spaced scope is
    // refused.
    assert_eq!(
        codes(
            "[servers.api]\nurl = \"https://a.example\"\n[servers.api.read_only]\nscopes = [\"r\"]\n"
        ),
        vec![
            (
                DiagCode::ReadOnlyUnchanged,
                "servers.api.read_only".to_owned()
            ),
            (
                DiagCode::ConflictingKeys,
                "servers.api.read_only.scopes".to_owned()
            ),
        ]
    );
    assert_eq!(
        codes(
            "[servers.db]\ncommand = \"pg\"\n[servers.db.read_only]\nargs = [\"r\"]\nscopes = [\"r\"]\n"
        ),
        vec![(
            DiagCode::ConflictingKeys,
            "servers.db.read_only.scopes".to_owned()
        )]
    );
    assert_eq!(
        codes(
            "[servers.api]\nurl = \"https://a.example\"\n[servers.api.oauth]\n[servers.api.read_only]\nscopes = []\n"
        ),
        vec![
            (
                DiagCode::ReadOnlyUnchanged,
                "servers.api.read_only".to_owned()
            ),
            (
                DiagCode::InvalidValue,
                "servers.api.read_only.scopes".to_owned()
            ),
        ]
    );
    assert_eq!(
        codes(
            "[servers.api]\nurl = \"https://a.example\"\n[servers.api.oauth]\n[servers.api.read_only]\nscopes = [\"a b\"]\n"
        ),
        vec![(
            DiagCode::InvalidValue,
            "servers.api.read_only.scopes[0]".to_owned()
        )]
    );
}

#[test]
fn a_read_only_table_is_checked_like_a_server_table() {
    let base = "[servers.db]\ncommand = \"pg\"\nargs = [\"${W}\"]\n[servers.db.read_only]\n";
    assert_eq!(
        codes(&format!("{base}args = [\"${{R}}\"]\nvouched = true\n")),
        vec![(
            DiagCode::UnknownKey,
            "servers.db.read_only.vouched".to_owned()
        )]
    );
    assert_eq!(
        codes(&format!(
            "{base}args = [\"${{R}}\"]\nheaders = {{ A = \"b\" }}\n"
        )),
        vec![(
            DiagCode::ConflictingKeys,
            "servers.db.read_only.headers".to_owned()
        )]
    );
    assert_eq!(
        codes(&format!("{base}args = [\"${{R\"]\n")),
        vec![(
            DiagCode::BadVariable,
            "servers.db.read_only.args[0]".to_owned()
        )]
    );
    assert_eq!(
        codes(&format!("{base}vouch = \"yes\"\nargs = [\"${{R}}\"]\n")),
        vec![(DiagCode::WrongType, "servers.db.read_only.vouch".to_owned())]
    );
    assert_eq!(
        codes("[servers.db]\ncommand = \"pg\"\nread_only = 1\n"),
        vec![(DiagCode::WrongType, "servers.db.read_only".to_owned())]
    );
    // Its variables are checked against the environment too.
    let vars = std::collections::HashMap::from([("W".to_owned(), "w".to_owned())]);
    let found: Vec<_> = parse_str_checking_vars(&format!("{base}args = [\"${{R}}\"]\n"), &vars)
        .1
        .into_iter()
        .map(|d| (d.code, d.key))
        .collect();
    assert_eq!(
        found,
        vec![(
            DiagCode::UnsetVariable,
            "servers.db.read_only.args[0]".to_owned()
        )]
    );
}

#[test]
fn a_read_only_table_that_overrides_nothing_is_an_error() {
    for source in [
        "[servers.db]\ncommand = \"pg\"\nargs = [\"${W}\"]\n[servers.db.read_only]\nvouch = true\n",
        "[servers.db]\ncommand = \"pg\"\nargs = [\"${W}\"]\n[servers.db.read_only]\nargs = [\"${W}\"]\nvouch = true\n",
        "[servers.api]\nurl = \"https://a.example\"\nheaders = { A = \"1\" }\n[servers.api.read_only]\nheaders = { A = \"1\" }\n",
    ] {
        let (config, diagnostics) = parse_str(source);
        assert!(config.is_none(), "{source}");
        assert_eq!(diagnostics.len(), 1, "{diagnostics:?}");
        assert_eq!(diagnostics[0].code, DiagCode::ReadOnlyUnchanged);
        assert!(diagnostics[0].message.contains("same credentials"));
    }
}

#[test]
fn a_vouched_stdio_server_without_a_sandbox_is_warned_about_as_explain_says() {
    let base = "[servers.db]\ncommand = \"pg\"\nargs = [\"${W}\"]\n[servers.db.read_only]\nargs = [\"${R}\"]\n";
    let source = format!("{base}vouch = true\n");
    let (config, diagnostics) = parse_str(&source);
    let config = config.expect("a warning leaves the configuration valid");
    assert_eq!(diagnostics.len(), 1, "{diagnostics:?}");
    let warning = &diagnostics[0];
    assert_eq!(warning.severity, crate::diag::Severity::Warning);
    assert_eq!(warning.code, DiagCode::VouchWithoutSandbox);
    assert_eq!(warning.key, "servers.db.read_only.vouch");
    assert_eq!(
        warning.span.clone().and_then(|span| source.get(span)),
        Some("true")
    );
    // The words are explain's caveat, split into message and help.
    let words = config.servers["db"].unsandboxed_vouch().unwrap();
    assert_eq!(warning.message, words.message);
    assert_eq!(warning.help.as_deref(), Some(words.help.as_str()));
    assert!(
        warning.message.starts_with(
            "server `db` runs its read-only instance with credentials vouched for, and no sandbox"
        ),
        "{}",
        warning.message
    );
    assert_eq!(words.help, "add a `[servers.db.sandbox]` table");

    // A sandbox, no vouch, or a server reached by URL: nothing to warn about.
    for quiet in [
        format!("{base}vouch = true\n[servers.db.sandbox]\nnetwork = true\n"),
        format!("{base}vouch = false\n"),
        base.to_owned(),
        "[servers.api]\nurl = \"https://a.example\"\nheaders = { A = \"w\" }\n[servers.api.read_only]\nheaders = { A = \"r\" }\nvouch = true\n".to_owned(),
    ] {
        assert_eq!(codes(&quiet), vec![], "{quiet}");
    }
}

#[test]
fn an_oauth_table_is_read_with_its_defaults() {
    let source = r#"
[servers.docs]
url = "https://docs.example/mcp"

[servers.docs.oauth]

[servers.svc]
url = "https://svc.example/mcp"

[servers.svc.oauth]
client_id = "hintgate-svc"
client_secret_file = "/etc/hintgate/svc-secret"
authorization_server = "https://auth.example"
scopes = ["files:read", "offline_access"]
grant = "client_credentials"
redirect_port = 8765
"#;
    let (config, diagnostics) = parse_str(source);
    assert!(diagnostics.is_empty(), "{diagnostics:?}");
    let config = config.unwrap();
    assert_eq!(
        config.servers["docs"].oauth,
        Some(super::OAuthConfig::default())
    );
    let svc = config.servers["svc"].oauth.clone().unwrap();
    assert_eq!(svc.client_id.as_deref(), Some("hintgate-svc"));
    assert_eq!(
        svc.client_secret_file.as_deref(),
        Some("/etc/hintgate/svc-secret")
    );
    assert_eq!(svc.grant, super::OAuthGrant::ClientCredentials);
    assert_eq!(svc.redirect_port, Some(8765));
    assert_eq!(
        svc.scopes,
        Some(vec!["files:read".to_owned(), "offline_access".to_owned()])
    );
    // A server without the table has none.
    let (config, _) = parse_str("[servers.a]\nurl = \"https://a.example\"\n");
    assert_eq!(config.unwrap().servers["a"].oauth, None);
}

#[test]
fn a_client_secret_in_the_config_is_refused_where_it_is_written() {
    let source = "[servers.a]\nurl = \"https://a.example\"\n[servers.a.oauth]\nclient_id = \"c\"\nclient_secret = \"s3cret\"\n";
    let (config, diagnostics) = parse_str(source);
    assert!(config.is_none());
    assert_eq!(diagnostics.len(), 1, "{diagnostics:?}");
    let d = &diagnostics[0];
    assert_eq!(d.code, DiagCode::SecretInConfig);
    assert_eq!(d.code.as_str(), "secret-in-config");
    assert_eq!(d.key, "servers.a.oauth.client_secret");
    // No span: the renderer would print the line, secret included.
    assert_eq!(d.span, None);
    assert!(!d.message.contains("s3cret") && !format!("{d:?}").contains("s3cret"));
}

#[test]
fn every_problem_of_an_oauth_table_is_named_by_its_key() {
    let url = "[servers.a]\nurl = \"https://a.example\"\n[servers.a.oauth]\n";
    for (body, expected) in [
        (
            "client_secret_file = \"/s\"\n",
            vec![(DiagCode::MissingKey, "servers.a.oauth.client_id")],
        ),
        (
            "client_id = \"c\"\nclient_secret_file = \"/s\"\nclient_secret_env = \"S\"\n",
            vec![(
                DiagCode::ConflictingKeys,
                "servers.a.oauth.client_secret_env",
            )],
        ),
        (
            "grant = \"client_credentials\"\n",
            vec![(DiagCode::MissingKey, "servers.a.oauth.grant")],
        ),
        (
            "grant = \"implicit\"\n",
            vec![(DiagCode::InvalidValue, "servers.a.oauth.grant")],
        ),
        (
            "client_metadata_url = \"http://me.example/c.json\"\n",
            vec![(
                DiagCode::InvalidValue,
                "servers.a.oauth.client_metadata_url",
            )],
        ),
        (
            "authorization_server = \"http://auth.example\"\n",
            vec![(
                DiagCode::InsecureUrl,
                "servers.a.oauth.authorization_server",
            )],
        ),
        (
            "scopes = [\"a b\", \"\"]\n",
            vec![
                (DiagCode::InvalidValue, "servers.a.oauth.scopes[0]"),
                (DiagCode::InvalidValue, "servers.a.oauth.scopes[1]"),
            ],
        ),
        (
            "redirect_port = 70000\n",
            vec![(DiagCode::InvalidValue, "servers.a.oauth.redirect_port")],
        ),
        (
            "client_name = \"x\"\n",
            vec![(DiagCode::UnknownKey, "servers.a.oauth.client_name")],
        ),
    ] {
        let found = codes(&format!("{url}{body}"));
        let expected: Vec<(DiagCode, String)> = expected
            .into_iter()
            .map(|(code, key)| (code, key.to_owned()))
            .collect();
        assert_eq!(found, expected, "{body}");
    }
    assert_eq!(
        codes("[servers.a]\nurl = \"https://a.example\"\noauth = 1\n"),
        vec![(DiagCode::WrongType, "servers.a.oauth".to_owned())]
    );
    assert_eq!(
        codes("[servers.a]\ncommand = \"x\"\n[servers.a.oauth]\n"),
        vec![(DiagCode::ConflictingKeys, "servers.a.oauth".to_owned())]
    );
}

#[test]
fn prepare_on_start_is_read_and_named_where_there_is_nothing_to_install() {
    let (config, diagnostics) = parse_str(
        "[servers.fs]\ncommand = \"npx\"\nargs = [\"-y\", \"@scope/server\"]\n[servers.fs.sandbox]\nprepare = \"on-start\"\n",
    );
    assert!(diagnostics.is_empty(), "{diagnostics:?}");
    let sandbox = config.unwrap().servers["fs"].sandbox.clone().unwrap();
    assert_eq!(sandbox.prepare, Prepare::OnStart);
    // The default: the user prepares it.
    let (config, _) = parse_str("[servers.fs]\ncommand = \"npx\"\n[servers.fs.sandbox]\n");
    assert_eq!(
        config.unwrap().servers["fs"]
            .sandbox
            .clone()
            .unwrap()
            .prepare,
        Prepare::ByHand
    );
    // A plain program has nothing to install: a warning at the key.
    assert_eq!(
        codes(
            "[servers.fs]\ncommand = \"/usr/bin/server\"\n[servers.fs.sandbox]\nprepare = \"on-start\"\n"
        ),
        [(
            DiagCode::NothingToPrepare,
            "servers.fs.sandbox.prepare".to_owned()
        )]
    );
    // `npm start` is not `npm exec`.
    assert_eq!(
        codes(
            "[servers.fs]\ncommand = \"npm\"\nargs = [\"start\"]\n[servers.fs.sandbox]\nprepare = \"on-start\"\n"
        )
        .len(),
        1
    );
    assert_eq!(
        codes(
            "[servers.fs]\ncommand = \"uv\"\nargs = [\"run\", \"server.py\"]\n[servers.fs.sandbox]\nprepare = \"on-start\"\n"
        ),
        [(
            DiagCode::NothingToPrepare,
            "servers.fs.sandbox.prepare".to_owned()
        )]
    );
    let found = codes(
        "[servers.fs]\ncommand = \"uvx\"\nargs = [\"pkg\"]\n[servers.fs.sandbox]\nprepare = \"always\"\n",
    );
    assert_eq!(
        found,
        [(
            DiagCode::InvalidValue,
            "servers.fs.sandbox.prepare".to_owned()
        )]
    );
    assert_eq!(
        codes(
            "[servers.fs]\ncommand = \"uvx\"\nargs = [\"pkg\"]\n[servers.fs.sandbox]\nprepare = true\n"
        ),
        [(DiagCode::WrongType, "servers.fs.sandbox.prepare".to_owned())]
    );
}

#[test]
fn previews_take_one_source_each_and_name_the_first_that_matches() {
    let source = "[servers.fs]\ncommand = \"x\"\n\n\
        [[previews]]\nserver = \"fs\"\ntool = \"save_*\"\n\
        files = { path = \"file\", content = \"text\", roots = [\"/srv/notes\"] }\n\n\
        [[previews]]\nserver = \"fs\"\ntool = \"*\"\ncommand = [\"/bin/preview\", \"--sql\"]\ncommand_mode = \"per-call\"\ntimeout_ms = 500\n\n\
        [[previews]]\ntool = \"edit_file\"\ndry_run_argument = \"dryRun\"\n";
    let (config, diagnostics) = parse_str(source);
    assert!(diagnostics.is_empty(), "{diagnostics:?}");
    let config = config.unwrap();
    assert_eq!(
        config.preview_for("fs", "save_note"),
        Some(&Previewer::Files(FilePreview {
            path: "file".into(),
            change: FileChange::Write {
                content: "text".into()
            },
            roots: vec!["/srv/notes".into()],
        }))
    );
    assert_eq!(
        config.preview_for("fs", "query"),
        Some(&Previewer::Command(HookConfig {
            command: vec!["/bin/preview".into(), "--sql".into()],
            mode: HookMode::PerCall,
            timeout_ms: 500,
        }))
    );
    assert_eq!(
        config.preview_for("other", "edit_file"),
        Some(&Previewer::DryRun {
            argument: "dryRun".into()
        })
    );
    assert_eq!(config.preview_for("other", "write_file"), None);
}

#[test]
fn a_malformed_preview_names_its_key() {
    let cases = [
        (
            "[[previews]]\ntool = \"x\"\n",
            DiagCode::MissingKey,
            "previews[0]",
        ),
        (
            "[[previews]]\ncommand = [\"a\"]\ndry_run_argument = \"d\"\n",
            DiagCode::ConflictingKeys,
            "previews[0]",
        ),
        (
            "[[previews]]\ndry_run_argument = \"d\"\ntimeout_ms = 5\n",
            DiagCode::ConflictingKeys,
            "previews[0].timeout_ms",
        ),
        (
            "[[previews]]\ncommand = [\"a\"]\ntimeout_ms = 0\n",
            DiagCode::InvalidValue,
            "previews[0].timeout_ms",
        ),
        (
            "[[previews]]\ncommand = [\"a\"]\ncommand_mode = \"often\"\n",
            DiagCode::InvalidValue,
            "previews[0].command_mode",
        ),
        (
            "[[previews]]\nfiles = { path = \"p\", content = \"c\", roots = [\"rel\"] }\n",
            DiagCode::InvalidValue,
            "previews[0].files.roots[0]",
        ),
        (
            "[[previews]]\nfiles = { path = \"p\", content = \"c\" }\n",
            DiagCode::MissingKey,
            "previews[0].files.roots",
        ),
        (
            "[[previews]]\nfiles = { path = \"p\", content = \"c\", edits = \"e\", roots = [\"/r\"] }\n",
            DiagCode::ConflictingKeys,
            "previews[0].files",
        ),
        (
            "[[previews]]\nfiles = { content = \"c\", roots = [\"/r\"] }\n",
            DiagCode::MissingKey,
            "previews[0].files",
        ),
        (
            "[[previews]]\nfiles = { path = \"p\", contents = \"c\", content = \"c\", roots = [\"/r\"] }\n",
            DiagCode::UnknownKey,
            "previews[0].files.contents",
        ),
        ("previews = 3\n", DiagCode::WrongType, "previews"),
    ];
    for (source, code, key) in cases {
        let (config, diagnostics) = parse_str(source);
        assert!(config.is_none(), "{source}");
        assert!(
            diagnostics.iter().any(|d| d.code == code && d.key == key),
            "{source}: {diagnostics:?}"
        );
        // Each names its line, as every config error does.
        assert!(
            diagnostics.iter().all(|d| d.span.is_some()),
            "{source}: {diagnostics:?}"
        );
    }
}

#[test]
fn a_dry_run_for_an_untrusted_server_is_warned_about() {
    let source = "[servers.fs]\ncommand = \"x\"\n[servers.ok]\ncommand = \"y\"\ntrust = \"trusted\"\n\
        [[previews]]\nserver = \"fs\"\ndry_run_argument = \"dryRun\"\n\
        [[previews]]\nserver = \"ok\"\ndry_run_argument = \"dryRun\"\n";
    assert_eq!(
        codes(source),
        vec![(
            DiagCode::DryRunUntrusted,
            "previews[0].dry_run_argument".to_owned()
        )]
    );
    assert!(parse_str(source).0.is_some(), "a warning, not an error");
}

#[test]
fn the_journal_durability_and_segment_size_are_checked() {
    let (config, diagnostics) =
        parse_str("[audit]\ndurability = \"fsync\"\nsegment_bytes = 1048576\n");
    assert!(diagnostics.is_empty(), "{diagnostics:?}");
    let audit = config.unwrap().audit;
    assert!(audit.fsync);
    assert_eq!(audit.segment_bytes, Some(1_048_576));
    let (config, _) = parse_str("[audit]\n");
    let audit = config.unwrap().audit;
    assert_eq!((audit.fsync, audit.segment_bytes), (false, None));
    let (config, _) = parse_str("[audit]\ndurability = \"write\"\n");
    assert!(!config.unwrap().audit.fsync);
    let source = "[audit]\ndurability = \"fsnyc\"\nsegment_bytes = 100\n";
    let (config, diagnostics) = parse_str(source);
    assert!(config.is_none());
    let found: Vec<(&str, &str)> = diagnostics
        .iter()
        .map(|d| (d.code.as_str(), d.key.as_str()))
        .collect();
    assert_eq!(
        found,
        [
            ("invalid-value", "audit.durability"),
            ("invalid-value", "audit.segment_bytes")
        ]
    );
}
