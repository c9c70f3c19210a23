//! `hintgate log`: the audit log, queried or verified.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use anyhow::{Context, Result};
use hintgate_policy::config::Instance;
use hintgate_policy::decide::Verdict;
use hintgate_policy::sanitize::escape_line;
use hintgate_store::record::OutcomeCode;
use hintgate_store::{Entry, HeadState, Record, Span, Verification, WitnessKey};
use serde_json::Value;

use crate::args::{LogArgs, LogCommand, SetupWitnessArgs, VerifyArgs};
use crate::exit::Exit;
use crate::output;
use crate::state::{KeyFile, Use};
use crate::when::utc;

/// Runs `hintgate log`.
pub fn run(args: &LogArgs) -> Result<Exit> {
    match &args.command {
        Some(LogCommand::Verify(verify)) => return run_verify(args, verify),
        Some(LogCommand::SetupWitness(setup)) => return run_setup_witness(args, setup),
        Some(LogCommand::AcceptRollback) => return run_accept_rollback(args),
        Some(LogCommand::Ship(ship)) => return crate::ship::run(args, ship),
        None => {}
    }
    // What the journals of ended runs hold and the log lacks comes in first
    // (their calls left pending marked `interrupted`), when the key is at
    // hand to check their chains.
    if let Ok(keyed) = crate::state::open_store_of(
        &args.at,
        args.audit_key.as_deref(),
        &Use::Log { head: None },
    ) {
        import_journals(keyed.store.as_ref());
        // And what running gateways have journaled is indexed: the log then
        // shows every call sent before this command started.
        if !hintgate_store::journal::wait_indexed(keyed.store.as_ref(), INDEX_PATIENCE)
            .unwrap_or(true)
        {
            output::err(
                "warning: a running gateway's audit index is behind its journal; the latest calls may not be shown yet\n",
            )?;
        }
    }
    // Reading the records needs no key.
    let store = crate::state::open_store_of(&args.at, None, &Use::Other)?.store;
    let since = args
        .since
        .map(|since| since.resolve(crate::when::unix_now()));
    let mut view = View {
        args,
        since,
        shown: HashMap::new(),
    };
    let mut after = 0;
    let mut grouped = Grouped::default();
    loop {
        let batch = store.entries(after, 1000)?;
        let Some(last) = batch.last() else {
            break;
        };
        after = last.seq;
        for record in batch {
            grouped.add(record);
        }
    }
    // Rows below 1 are not part of the log that is followed from 1; they
    // are not shown, but not passed over in silence either.
    let (_, below_one) = store.rows_below_one(0)?;
    if below_one > 0 {
        output::err(&format!(
            "warning: {below_one} {} stored with a sequence number below 1, where the log never numbers one, and not shown: `hintgate log verify` names {}\n",
            if below_one == 1 {
                "record is"
            } else {
                "records are"
            },
            if below_one == 1 { "it" } else { "them" },
        ))?;
    }
    let mut out = String::new();
    grouped.render(&mut view, &mut out);
    if !args.follow {
        output::out(&out)?;
        return Ok(Exit::Success);
    }
    // Follow: print what is committed from now on. A call's outcome comes
    // as a line of its own once the call has ended. The loop ends on Ctrl-C
    // (the default action of SIGINT; nothing is held open for writing) or
    // when the reader of standard output goes away.
    loop {
        if !output::out_while_open(&out)? {
            return Ok(Exit::Success);
        }
        out.clear();
        store.wait_for_entries(after, FOLLOW_WAIT)?;
        for record in store.entries(after, 1000)? {
            after = record.seq;
            view.followed(record, &mut out);
        }
    }
}

/// What a record is to `hintgate log`, once [`Entry::expand`] has split the
/// records that hold several outcomes.
enum Filed {
    /// A call.
    Call,
    /// The outcome of the call with this sequence number.
    Outcome(u64),
    /// A standing approval granted or revoked, or a rolled-back log
    /// accepted.
    Standing,
    /// Neither: an outcome that names no call, or a record of outcomes that
    /// `expand` gave back whole because it is not a list of outcomes that
    /// each name their call. The gateway writes none; shown as it is stored,
    /// so that it is neither lost nor taken for a call.
    Unreadable,
}

fn filed(entry: &Entry) -> Filed {
    match (&entry.record, entry.call) {
        (Some(Record::Call(_)), _) => Filed::Call,
        (Some(Record::Outcome(_)), Some(call)) => Filed::Outcome(call),
        (Some(Record::Grant(_) | Record::Revoke(_) | Record::Rollback(_)), _) => Filed::Standing,
        // A malformed record, and a record of several outcomes that
        // `expand` gave back whole (it never does for one that reads).
        (Some(Record::Outcome(_)), None) | (Some(Record::Outcomes(_)) | None, _) => {
            Filed::Unreadable
        }
    }
}

/// The log as printed without `--follow`: each call once, with its last
/// outcome, and every record that cannot be read as a call or an outcome,
/// in the order of the log.
#[derive(Default)]
struct Grouped {
    /// Calls and unreadable records, by sequence number.
    rows: BTreeMap<u64, Row>,
    /// The outcomes of each call, by the call's sequence number.
    outcomes: BTreeMap<u64, Vec<Entry>>,
}

enum Row {
    Call(Entry),
    Standing(Entry),
    Unreadable(Entry),
}

impl Grouped {
    /// Files one stored record.
    fn add(&mut self, record: Entry) {
        for entry in record.expand() {
            match filed(&entry) {
                Filed::Outcome(call) => self.outcomes.entry(call).or_default().push(entry),
                Filed::Call => {
                    self.rows.insert(entry.seq, Row::Call(entry));
                }
                Filed::Standing => {
                    self.rows.insert(entry.seq, Row::Standing(entry));
                }
                Filed::Unreadable => {
                    self.rows.insert(entry.seq, Row::Unreadable(entry));
                }
            }
        }
    }

    /// Prints what the filters keep.
    fn render(&self, view: &mut View<'_>, out: &mut String) {
        for row in self.rows.values() {
            match row {
                Row::Call(call) => {
                    let ended = self.outcomes.get(&call.seq).and_then(|list| list.last());
                    view.call(call, ended, out);
                }
                Row::Standing(entry) => view.standing(entry, out),
                Row::Unreadable(entry) => view.unreadable(entry, out),
            }
        }
    }
}

/// How long one wait for new records lasts at most; new records end it at
/// once. (A reader that went away is noticed at the next write, as with
/// `tail -f`.)
const FOLLOW_WAIT: Duration = Duration::from_secs(1);

/// The records `hintgate log` prints, and how.
struct View<'a> {
    args: &'a LogArgs,
    /// Seconds since the Unix epoch: calls before it are left out.
    since: Option<i64>,
    /// The calls printed so far, with their server and tool, so that a
    /// `--follow` outcome is printed exactly for the calls that were.
    shown: HashMap<u64, (String, String)>,
}

impl View<'_> {
    /// Prints one stored record as `--follow` shows it: a call, the outcome
    /// of a call printed before, or a record it cannot read.
    fn followed(&mut self, record: Entry, out: &mut String) {
        for entry in record.expand() {
            match filed(&entry) {
                Filed::Call => self.call(&entry, None, out),
                Filed::Outcome(call) => self.outcome(&entry, call, out),
                Filed::Standing => self.standing(&entry, out),
                Filed::Unreadable => self.unreadable(&entry, out),
            }
        }
    }

    /// Prints a record that cannot be read as a call or as outcomes, as it
    /// is stored. The server, tool and verdict filters cannot be matched
    /// against it, so it is printed whatever they say (it may concern the
    /// calls they keep); `--since` applies.
    fn unreadable(&mut self, entry: &Entry, out: &mut String) {
        if self.since.is_some_and(|since| entry.at < since) {
            return;
        }
        let kind = entry.stored_kind.as_str();
        if self.args.json {
            let mut record = serde_json::json!({
                "seq": entry.seq,
                "at": entry.at,
                "kind": "malformed",
                "record": {"kind": kind, "call": entry.call, "body": entry.body},
            });
            if let (Some(problem), Some(object)) = (&entry.malformed, record.as_object_mut()) {
                object.insert("problem".into(), Value::from(problem.code()));
            }
            out.push_str(&format!("{record}\n"));
        } else {
            let why = entry
                .malformed
                .as_ref()
                .map_or_else(String::new, |problem| format!(" ({problem})"));
            out.push_str(&format!(
                "{:>6}  {}  malformed {kind} record{why}, shown as stored: {}\n",
                entry.seq,
                utc(entry.at),
                escape_line(&entry.stored_body),
            ));
        }
    }

    /// Prints a grant or revocation of a standing approval, if the server
    /// and tool filters keep it (a verdict filter keeps calls only), or an
    /// accepted rollback, which concerns every call and is printed whatever
    /// they say; `--since` applies to all.
    fn standing(&mut self, entry: &Entry, out: &mut String) {
        let args = self.args;
        if self.since.is_some_and(|since| entry.at < since) {
            return;
        }
        let Some(record) = &entry.record else {
            return;
        };
        // The server and tool an approval record names (none: a rollback).
        let named = match record {
            Record::Grant(grant) => Some((&grant.server, &grant.tool)),
            Record::Revoke(revoke) => Some((&revoke.server, &revoke.tool)),
            _ => None,
        };
        let keep = named.is_none_or(|(server, tool)| {
            args.verdict.is_none()
                && args.server.as_ref().is_none_or(|wanted| server == wanted)
                && args.tool.as_ref().is_none_or(|wanted| tool == wanted)
        });
        if !keep {
            return;
        }
        if args.json {
            out.push_str(&format!(
                "{}\n",
                json_line(record, entry.seq, entry.at, entry.stored_kind.as_str())
            ));
            return;
        }
        let server = |server: &str, key: &str| {
            if server.is_empty() {
                // A standing approval of a tool without a pin: its key.
                format!("key {}", key.get(..16).unwrap_or(key))
            } else {
                server.to_owned()
            }
        };
        let what = match record {
            Record::Grant(grant) => format!(
                "{} / {}  approved always ({})",
                escape_line(&server(&grant.server, &grant.server_key)),
                escape_line(&grant.tool),
                escape_line(grant.digest.get(..19).unwrap_or(&grant.digest))
            ),
            Record::Revoke(revoke) => format!(
                "{} / {}  standing approval revoked ({})",
                escape_line(&server(&revoke.server, &revoke.server_key)),
                escape_line(&revoke.tool),
                revoke.why.as_str()
            ),
            Record::Rollback(rollback) => {
                let named = rollback.head_seq.map_or_else(String::new, |head| {
                    format!(" where its head named record {head}")
                });
                format!(
                    "rollback accepted ({}): the log ended at record {}{named}; standing approvals granted before this record approve nothing",
                    rollback.found.as_str(),
                    rollback.log_end,
                )
            }
            Record::Call(_) | Record::Outcome(_) | Record::Outcomes(_) => return,
        };
        out.push_str(&format!("{:>6}  {}  {what}\n", entry.seq, utc(entry.at)));
    }

    /// Prints a call (with its outcome, when known) if the filters keep it.
    fn call(&mut self, entry: &Entry, ended: Option<&Entry>, out: &mut String) {
        let args = self.args;
        let Some(call) = entry.call_record() else {
            return;
        };
        let keep = args
            .server
            .as_ref()
            .is_none_or(|server| call.server == *server)
            && args.tool.as_ref().is_none_or(|tool| call.tool == *tool)
            && args
                .verdict
                .as_ref()
                .is_none_or(|verdict| verdict_name(call.verdict) == verdict.as_str())
            && self.since.is_none_or(|since| entry.at >= since);
        if !keep {
            return;
        }
        if args.follow {
            self.shown
                .insert(entry.seq, (call.server.clone(), call.tool.clone()));
        }
        let seq = entry.seq;
        let ended = ended.and_then(Entry::outcome_record);
        let outcome = call
            .outcome
            .or(ended.map(|ended| ended.outcome))
            .map_or("pending", OutcomeCode::as_str);
        if args.json {
            let mut record =
                json_line(&Record::Call(Box::new(call.clone())), seq, entry.at, "call");
            if let Some(object) = record.as_object_mut() {
                object.insert("outcome".into(), Value::from(outcome));
                if let Some(ended) = ended {
                    object.insert("duration_ms".into(), Value::from(ended.duration_ms));
                }
            }
            out.push_str(&format!("{record}\n"));
        } else {
            let reasons: Vec<String> = call.reasons.iter().map(|text| escape_line(text)).collect();
            // A call decided for a server's read-only instance says so; one
            // for the full instance (or a server without a read-only one)
            // reads as it always did.
            let instance = if call.instance == Some(Instance::ReadOnly) {
                "  on read-only instance"
            } else {
                ""
            };
            // A call a person edited says who (its arguments and the
            // host's are in `--json`).
            let edited = call
                .edit
                .as_ref()
                .map(|edit| format!("  edited by {}", escape_line(&edit.by)))
                .unwrap_or_default();
            // What the log holds came from hosts and servers: each field on
            // its line, escaped, so no name can write a line of its own.
            out.push_str(&format!(
                "{seq:>6}  {}  {} / {}  {}  ({})  by {}{instance}{edited}  -> {}\n",
                utc(entry.at),
                escape_line(&call.server),
                escape_line(&call.tool),
                verdict_name(call.verdict),
                reasons.join(", "),
                escape_line(&call.approver),
                outcome,
            ));
        }
    }

    /// Prints the outcome of a call printed before (`--follow` only).
    fn outcome(&mut self, entry: &Entry, call: u64, out: &mut String) {
        let Some((server, tool)) = self.shown.get(&call) else {
            return;
        };
        let Some(ended) = entry.outcome_record() else {
            return;
        };
        if self.args.json {
            let record = serde_json::json!({
                "seq": entry.seq,
                "at": entry.at,
                "kind": "outcome",
                "call": call,
                "server": server,
                "tool": tool,
                "outcome": ended.outcome,
                "duration_ms": ended.duration_ms,
            });
            out.push_str(&format!("{record}\n"));
        } else {
            out.push_str(&format!(
                "{:>6}  {}  {} / {}  call {call} ended  -> {} ({} ms)\n",
                entry.seq,
                utc(entry.at),
                escape_line(server),
                escape_line(tool),
                ended.outcome,
                ended.duration_ms,
            ));
        }
    }
}

/// A record as `hintgate log --json` prints it: its fields, with its
/// sequence number, time and kind.
fn json_line(record: &Record, seq: u64, at: i64, kind: &str) -> Value {
    let mut line = serde_json::to_value(record).unwrap_or(Value::Null);
    if let Some(object) = line.as_object_mut() {
        object.insert("seq".into(), Value::from(seq));
        object.insert("at".into(), Value::from(at));
        object.insert("kind".into(), Value::from(kind));
    }
    line
}

/// A verdict as the log and `--verdict` name it.
const fn verdict_name(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Allow => "allow",
        Verdict::Ask => "ask",
        Verdict::Deny => "deny",
    }
}

/// How long `hintgate log` waits for running gateways' indexes to catch up
/// with their journals.
const INDEX_PATIENCE: std::time::Duration = std::time::Duration::from_secs(5);

/// Imports what the journals of ended runs hold and the log lacks,
/// warning when it cannot.
fn import_journals(store: &dyn hintgate_store::AuditLog) {
    match hintgate_store::journal::import_ended(store) {
        Ok(imported) if imported.interrupted > 0 => {
            let _ = output::err(&format!(
                "note: {} call(s) of {} ended gateway run(s) had no outcome, and are marked `interrupted`\n",
                imported.interrupted, imported.runs
            ));
        }
        Ok(_) => {}
        Err(err) => {
            let _ = output::err(&format!(
                "warning: the journals of ended gateway runs could not be imported: {err}\n"
            ));
        }
    }
}

/// Runs `hintgate log verify`.
fn run_verify(args: &LogArgs, verify: &VerifyArgs) -> Result<Exit> {
    let opened = crate::state::open_store_of(
        &args.at,
        args.audit_key.as_deref(),
        &Use::Log {
            head: verify.head.clone(),
        },
    )?;
    import_journals(opened.store.as_ref());
    let _ = hintgate_store::journal::wait_indexed(opened.store.as_ref(), INDEX_PATIENCE);
    let key = match &verify.verification_key {
        Some(key) => Some(key.clone()),
        None => std::env::var(WITNESS_KEY_VAR)
            .ok()
            .filter(|key| !key.is_empty()),
    };
    // `--witness` wins over the configuration's; a witness named on the
    // command line is checked or the command fails, the configuration's is
    // checked when its key is given, and said to be unchecked otherwise.
    let witness = match (&verify.witness, &opened.configured_witness, key) {
        (Some(witness), _, Some(key)) => Some((witness, key)),
        (Some(_), _, None) => {
            return Err(crate::load::InputError(format!(
                "give the witness's verification key with `--verification-key KEY` or `{WITNESS_KEY_VAR}`"
            ))
            .into());
        }
        (None, Some(witness), Some(key)) => Some((witness, key)),
        (None, Some(_), None) => None,
        (None, None, Some(_)) if verify.verification_key.is_some() => {
            return Err(crate::load::InputError(
                "a verification key checks a witness: name it with `--witness FILE` or the `[audit] witness` of `--config`".to_owned(),
            )
            .into());
        }
        (None, None, _) => None,
    };
    let verification = match &witness {
        Some((witness, key)) => {
            let key: WitnessKey = key
                .parse()
                .map_err(|err| crate::load::InputError(format!("--verification-key: {err}")))?;
            opened.store.verify_with_witness(witness, &key)?
        }
        None => opened.store.verify()?,
    };
    let mut verification = verification;
    let journals = hintgate_store::journal::verify(opened.store.as_ref())?;
    verification
        .problems
        .extend(journals.problems.iter().cloned());
    let mut warnings = witness_warnings(
        &verification,
        opened.store.head_path(),
        opened.configured_witness.as_deref(),
        opened.store.head_made_with_key(),
    );
    warnings.extend(journals.torn.iter().map(|(run, torn)| Warning {
        code: "journal-torn-tail",
        message: match torn {
            hintgate_store::journal::Stop::Torn { segment, offset } => format!(
                "the journal of run {run} ends in part of a record (segment {segment}, byte {offset}): the gateway stopped in the middle of a write, and the calls of that record were never sent"
            ),
            other => format!("the journal of run {run} stops short: {other:?}"),
        },
    }));
    for warning in &warnings {
        output::err(&format!("warning: {}\n", warning.message))?;
    }
    if args.json || verify.json {
        let mut json = verification_json(&verification, &opened.key);
        if let Some(object) = json.as_object_mut() {
            object.insert(
                "journals".into(),
                serde_json::json!({"runs": journals.runs, "live": journals.live, "records": journals.records}),
            );
            object.insert(
                "warnings".into(),
                warnings
                    .iter()
                    .map(|warning| serde_json::json!({"warning": warning.code, "message": warning.message}))
                    .collect(),
            );
        }
        output::out(&format!("{json}\n"))?;
    } else {
        let mut out = render_verification(&verification, &opened.key);
        if journals.runs > 0 {
            // Among the findings, before the verdict on the last line.
            let verdict = out
                .trim_end_matches('\n')
                .rfind('\n')
                .map_or(0, |at| at + 1);
            out.insert_str(
                verdict,
                &format!(
                    "  journals: {} run(s) ({} still running), {} record(s) found in the log as their journals hold them\n",
                    journals.runs, journals.live, journals.records
                ),
            );
        }
        output::out(&out)?;
    }
    Ok(if !verification.holds() {
        Exit::Broken
    } else if !verification.complete() {
        Exit::Error
    } else {
        Exit::Success
    })
}

/// A warning of `log verify`: what it could not check, with a stable code.
struct Warning {
    /// `no-witness` or `witness-not-checked`.
    code: &'static str,
    /// In words.
    message: String,
}

/// What `log verify` says when no witness was checked: that a witness is
/// set up (or configured) but was not checked, or that there is none, and
/// what a check without one cannot see. With the head made with the key
/// (`head_made_with_key`), a log deleted with its head is found as long as
/// the key is there; otherwise (a shared log's head in a directory) it is
/// not found at all.
fn witness_warnings(
    verification: &Verification,
    head: Option<&std::path::Path>,
    configured: Option<&std::path::Path>,
    head_made_with_key: bool,
) -> Vec<Warning> {
    if verification.witness.is_some() {
        return Vec::new();
    }
    let deleted = if head_made_with_key {
        "the whole log deleted together with its head and its audit key"
    } else {
        "the whole log deleted together with this machine's head"
    };
    let set_up = head
        .map(hintgate_store::witness_state_path)
        .filter(|state| state.exists());
    if set_up.is_some() || configured.is_some() {
        return vec![Warning {
            code: "witness-not-checked",
            message: format!(
                "a witness is {} for this log but was not checked: give `--witness FILE` (or `--config` with `[audit] witness`) and the verification key (`--verification-key KEY` or `{WITNESS_KEY_VAR}`); without it, a rewrite by whoever holds the audit key, {deleted}, and an older copy of the log put back with its head all verify",
                if set_up.is_some() {
                    "set up"
                } else {
                    "configured"
                }
            ),
        }];
    }
    vec![Warning {
        code: "no-witness",
        message: format!(
            "no witness is set up for this log, so this check cannot see {deleted} (a new log looks the same), an older copy of the log put back with its head, or a rewrite by whoever holds the audit key: each of those verifies; set one up with `hintgate log setup-witness FILE`, kept on another machine or volume"
        ),
    }]
}

/// The variable that holds the witness's verification key when no
/// `--verification-key` does.
const WITNESS_KEY_VAR: &str = "HINTGATE_WITNESS_KEY";

/// Runs `hintgate log setup-witness`.
fn run_setup_witness(args: &LogArgs, setup: &SetupWitnessArgs) -> Result<Exit> {
    let opened = crate::state::open_store_of(&args.at, None, &Use::Log { head: None })?;
    let Some(head) = opened.store.head_path() else {
        anyhow::bail!("this store keeps no head, so it has no witness");
    };
    // The witness named here wins over the configuration's.
    let Some(named) = setup
        .witness
        .as_deref()
        .or(opened.configured_witness.as_deref())
    else {
        return Err(crate::load::InputError(
            "name the witness: `hintgate log setup-witness FILE`, or `--config` with `[audit] witness`".to_owned(),
        )
        .into());
    };
    let witness = std::path::absolute(named)
        .with_context(|| format!("cannot resolve `{}`", named.display()))?;
    // A witness beside the head falls with the state directory; it is
    // meant to outlive it.
    let same_dir = |a: &std::path::Path, b: &std::path::Path| match (
        a.parent().and_then(|dir| std::fs::canonicalize(dir).ok()),
        b.parent().and_then(|dir| std::fs::canonicalize(dir).ok()),
    ) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    };
    if same_dir(&witness, head) {
        return Err(crate::load::InputError(format!(
            "the witness `{}` is in the directory of the log's head: put it elsewhere, ideally on another volume or machine, so that it outlives the state directory",
            witness.display()
        ))
        .into());
    }
    let key = hintgate_store::setup_witness(&hintgate_store::witness_state_path(head), &witness)?;
    output::out(&format!(
        "the witness is set up: gateways on this log append a checkpoint to `{}` every {} records or {} s after a commit, and at the first commit of each run (restart those running)\n\
         verification key, shown once; keep it offline, away from this machine (whoever holds it can make checkpoints):\n\
         {}\n\
         check with: hintgate log verify --witness {} --verification-key KEY\n",
        witness.display(),
        hintgate_store::WITNESS_EVERY_RECORDS,
        hintgate_store::WITNESS_EVERY.as_secs(),
        key.to_hex(),
        witness.display(),
    ))?;
    Ok(Exit::Success)
}

/// Runs `hintgate log accept-rollback`.
fn run_accept_rollback(args: &LogArgs) -> Result<Exit> {
    let opened = crate::state::open_store_of(
        &args.at,
        args.audit_key.as_deref(),
        &Use::Log { head: None },
    )?;
    if opened.store.head_path().is_none() {
        anyhow::bail!("this store keeps no head here, so there is nothing to compare its log with");
    }
    match opened.store.accept_rollback()? {
        None => output::out("the audit log and its head agree: there is nothing to accept\n")?,
        Some(accepted) => output::out(&format!(
            "accepted in record {}: {}\n\
             gateways start on this log again; standing approvals granted before record {} approve nothing (their tools are asked about again), and `hintgate log verify` names the record (`rolled-back`)\n",
            accepted.seq, accepted.rollback, accepted.seq
        ))?,
    }
    Ok(Exit::Success)
}

/// What `log verify --json` prints: the findings, whether the log holds
/// and whether every MAC was checked, the key file, and each problem with
/// its stable code and in words.
fn verification_json(verification: &Verification, key: &KeyFile) -> Value {
    let mut json = serde_json::to_value(verification).unwrap_or(Value::Null);
    if let Some(object) = json.as_object_mut() {
        object.insert("holds".into(), Value::from(verification.holds()));
        object.insert("complete".into(), Value::from(verification.complete()));
        let key_file = match key {
            KeyFile::Read(path, _) | KeyFile::Missing(path) => {
                Value::from(path.display().to_string())
            }
            KeyFile::NotNamed => Value::Null,
        };
        object.insert("key_file".into(), key_file);
        if let Some(Value::Array(problems)) = object.get_mut("problems") {
            for (json, problem) in problems.iter_mut().zip(&verification.problems) {
                if let Some(json) = json.as_object_mut() {
                    json.insert("message".into(), Value::from(problem.to_string()));
                }
            }
        }
    }
    json
}

/// `log verify`'s findings in words.
fn render_verification(verification: &Verification, key: &KeyFile) -> String {
    let mut out = format!("{} records checked\n", verification.checked);
    if let Some(span) = verification.unkeyed {
        out.push_str(&format!(
            "  {}: chained without a key (written before the log was keyed); anyone who can write the database could have rewritten them\n",
            records(span)
        ));
    }
    if let Some(span) = verification.keyed {
        match (&verification.key_id, key) {
            (Some(id), KeyFile::Read(path, _)) => out.push_str(&format!(
                "  {}: chained under the key `{id}` (`{}`), every link checked with it\n",
                records(span),
                path.display()
            )),
            (Some(id), _) => out.push_str(&format!(
                "  {}: chained under the key `{id}`, every link checked with it\n",
                records(span)
            )),
            (None, KeyFile::Missing(path)) => out.push_str(&format!(
                "  {}: chained under a key, but the key file `{}` is not there: their links cannot be checked, only their order\n",
                records(span),
                path.display()
            )),
            (None, _) => out.push_str(&format!(
                "  {}: chained under a key, but no key file was named (`--audit-key`, `{}` or `[audit] key_file`): their links cannot be checked, only their order\n",
                records(span),
                crate::state::AUDIT_KEY_VAR
            )),
        }
    }
    match &verification.head {
        HeadState::NotKept => {}
        HeadState::NotYet { path } => out.push_str(&format!(
            "  head `{path}`: none yet (a gateway writes it when it makes the key, and after each commit)\n"
        )),
        HeadState::Reached { path, seq: 0, sealed } => out.push_str(&format!(
            "  head `{path}`: at the start, written with the key before any record, {}\n",
            if *sealed {
                "its seal checked with the key"
            } else {
                "its seal not checked (no key)"
            }
        )),
        HeadState::Reached { path, seq, sealed } => out.push_str(&format!(
            "  head `{path}`: record {seq}, {}, reached\n",
            if *sealed {
                "its seal checked with the key"
            } else {
                "its seal not checked (no key)"
            }
        )),
        HeadState::Failed { path } => {
            out.push_str(&format!("  head `{path}`: does not hold\n"));
        }
    }
    if let Some(witness) = &verification.witness {
        match witness.last {
            Some(last) => out.push_str(&format!(
                "  witness `{}`: {} checkpoints, the last that holds at record {} (epoch {})\n",
                witness.path, witness.checkpoints, last.seq, last.epoch
            )),
            None if witness.checkpoints == 0 => out.push_str(&format!(
                "  witness `{}`: no checkpoint yet\n",
                witness.path
            )),
            None => out.push_str(&format!(
                "  witness `{}`: {} checkpoints, none that holds\n",
                witness.path, witness.checkpoints
            )),
        }
    }
    for problem in &verification.problems {
        out.push_str(&format!("{problem}\n"));
    }
    if verification.more_problems > 0 {
        out.push_str(&format!(
            "and {} more problems\n",
            verification.more_problems
        ));
    }
    let found = verification.problems.len() as u64 + verification.more_problems;
    if found > 0 {
        out.push_str(&format!(
            "the log does not hold: {found} problem{} found\n",
            if found == 1 { "" } else { "s" }
        ));
    } else if !verification.complete() {
        out.push_str(
            "no problem found, but the keyed records cannot be checked without their key\n",
        );
    } else {
        out.push_str("the log holds\n");
    }
    out
}

/// A run of records in words.
fn records(span: Span) -> String {
    if span.first == span.last {
        format!("record {}", span.first)
    } else {
        format!("records {} to {}", span.first, span.last)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use hintgate_store::{Entry, EntryKind};
    use serde_json::{Value, json};

    use super::{Grouped, View};
    use crate::args::{LogArgs, StoreArgs};

    fn log_args(json: bool, follow: bool) -> LogArgs {
        LogArgs {
            at: StoreArgs {
                state_dir: None,
                store: None,
                config: None,
            },
            // Records that cannot be read are shown whatever this says.
            server: Some("fs".into()),
            tool: None,
            verdict: None,
            since: None,
            follow,
            json,
            audit_key: None,
            command: None,
        }
    }

    /// A stored record of `kind`: a call or outcome body given in part is
    /// completed with the fields the gateway always writes (so a test
    /// names only what it is about); what it gives stays as given.
    fn record(seq: u64, kind: EntryKind, call: Option<u64>, mut body: Value) -> Entry {
        let fill = |item: &mut Value, defaults: Value| {
            if let (Some(item), Value::Object(defaults)) = (item.as_object_mut(), defaults) {
                for (key, value) in defaults {
                    item.entry(key).or_insert(value);
                }
            }
        };
        let outcome_defaults = || json!({"attempt": 0, "duration_ms": 0});
        match kind {
            EntryKind::Call => fill(
                &mut body,
                json!({"approver": "rule", "arguments": null, "identity": null, "pin": null,
                       "reasons": [], "request": "1", "session": "s"}),
            ),
            EntryKind::Outcome => fill(&mut body, outcome_defaults()),
            EntryKind::Outcomes => {
                if let Some(items) = body.get_mut("outcomes").and_then(Value::as_array_mut) {
                    for item in items {
                        fill(item, outcome_defaults());
                    }
                }
            }
            _ => {}
        }
        let kind = kind.as_str();
        Entry::from_stored(
            seq,
            1_795_989_518,
            kind.to_owned(),
            call,
            hintgate_policy::pin::canonical_json(&body),
            String::new(),
            String::new(),
        )
    }

    /// Two calls, a record of outcomes that ends the first, and three
    /// records that cannot be read as calls and outcomes.
    fn records() -> Vec<Entry> {
        let call = |seq| {
            record(
                seq,
                EntryKind::Call,
                None,
                json!({"server": "fs", "tool": "read", "verdict": "allow", "reasons": [], "approver": "rule"}),
            )
        };
        vec![
            call(1),
            call(2),
            record(
                3,
                EntryKind::Outcomes,
                None,
                json!({"outcomes": [{"call": 1, "outcome": "ok", "duration_ms": 4}]}),
            ),
            // An item that names no call.
            record(
                4,
                EntryKind::Outcomes,
                None,
                json!({"outcomes": [{"call": 2, "outcome": "ok"}, {"outcome": "failed"}]}),
            ),
            // Outcomes that are not a list.
            record(5, EntryKind::Outcomes, None, json!({"outcomes": "ok"})),
            // An outcome of no call.
            record(6, EntryKind::Outcome, None, json!({"outcome": "ok"})),
        ]
    }

    fn grouped(json: bool) -> Vec<String> {
        rendered(&log_args(json, false), records())
    }

    /// What `hintgate log` (not following) prints of `entries`, a line each.
    fn rendered(args: &LogArgs, entries: impl IntoIterator<Item = Entry>) -> Vec<String> {
        let mut view = View {
            args,
            since: None,
            shown: HashMap::new(),
        };
        let mut grouped = Grouped::default();
        for entry in entries {
            grouped.add(entry);
        }
        let mut out = String::new();
        grouped.render(&mut view, &mut out);
        out.lines().map(str::to_owned).collect()
    }

    #[test]
    fn a_record_of_outcomes_that_cannot_be_read_is_shown_not_dropped_or_filed_as_a_call() {
        let lines = grouped(false);
        assert_eq!(lines.len(), 5, "{lines:#?}");
        assert!(lines[0].starts_with("     1  ") && lines[0].ends_with("-> ok"));
        assert!(
            lines[1].starts_with("     2  ") && lines[1].ends_with("-> pending"),
            "an outcome in a record that cannot be read ends no call: {lines:#?}"
        );
        assert_eq!(
            lines[2],
            r#"     4  2026-11-29T21:58:38Z  malformed outcomes record (its body is not what hintgate writes for a `outcomes` record), shown as stored: {"outcomes":[{"attempt":0,"call":2,"duration_ms":0,"outcome":"ok"},{"attempt":0,"duration_ms":0,"outcome":"failed"}]}"#
        );
        assert_eq!(
            lines[3],
            r#"     5  2026-11-29T21:58:38Z  malformed outcomes record (its body is not what hintgate writes for a `outcomes` record), shown as stored: {"outcomes":"ok"}"#
        );
        assert_eq!(
            lines[4],
            r#"     6  2026-11-29T21:58:38Z  malformed outcome record (its body is not what hintgate writes for a `outcome` record), shown as stored: {"attempt":0,"duration_ms":0,"outcome":"ok"}"#
        );

        let json: Vec<Value> = grouped(true)
            .iter()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        assert_eq!(
            json.iter()
                .map(|line| line["kind"].as_str().unwrap())
                .collect::<Vec<_>>(),
            ["call", "call", "malformed", "malformed", "malformed"]
        );
        assert_eq!(json[0]["outcome"], "ok");
        assert_eq!(json[1]["outcome"], "pending");
        assert_eq!(
            json[3],
            json!({"seq": 5, "at": 1_795_989_518, "kind": "malformed", "problem": "unexpected-body",
                   "record": {"kind": "outcomes", "call": null, "body": {"outcomes": "ok"}}})
        );
    }

    #[test]
    fn follow_shows_a_record_of_outcomes_that_cannot_be_read() {
        let args = log_args(false, true);
        let mut view = View {
            args: &args,
            since: None,
            shown: HashMap::new(),
        };
        let mut out = String::new();
        for entry in records() {
            view.followed(entry, &mut out);
        }
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 6, "{lines:#?}");
        assert!(lines[2].ends_with("fs / read  call 1 ended  -> ok (4 ms)"));
        for (line, seq) in lines[3..].iter().zip(["4", "5", "6"]) {
            assert!(
                line.trim_start().starts_with(seq) && line.contains("malformed"),
                "{line}"
            );
        }
    }

    /// A record whose kind hintgate does not write, or whose body repeats
    /// a key, is shown as stored with what is wrong with it, never as a
    /// call.
    #[test]
    fn a_record_with_an_unknown_kind_or_a_repeated_key_is_shown_as_malformed() {
        let stored = |seq, kind: &str, body: &str| {
            Entry::from_stored(
                seq,
                1_795_989_518,
                kind.to_owned(),
                None,
                body.to_owned(),
                String::new(),
                String::new(),
            )
        };
        let entries = [
            stored(
                1,
                "call",
                r#"{"verdict":"deny","approver":"rule","reasons":[],"server":"fs","tool":"read","verdict":"allow"}"#,
            ),
            stored(
                2,
                "note",
                r#"{"approver":"rule","reasons":[],"server":"fs","tool":"read","verdict":"allow"}"#,
            ),
            stored(3, "call", "{\"server\":\"fs\"}\n\u{1b}[2J"),
        ];
        for json in [false, true] {
            let lines = rendered(&log_args(json, false), entries.clone());
            let out = lines.join("\n");
            assert_eq!(lines.len(), 3, "{out}");
            if json {
                let problems: Vec<Value> = lines
                    .iter()
                    .map(|line| serde_json::from_str::<Value>(line).unwrap())
                    .inspect(|line| assert_eq!(line["kind"], "malformed"))
                    .map(|line| line["problem"].clone())
                    .collect();
                assert_eq!(
                    problems,
                    [
                        json!("duplicate-key"),
                        json!("unknown-kind"),
                        json!("not-json")
                    ]
                );
            } else {
                assert_eq!(
                    lines[0],
                    r#"     1  2026-11-29T21:58:38Z  malformed call record (its body repeats the key `verdict`), shown as stored: {"verdict":"deny","approver":"rule","reasons":[],"server":"fs","tool":"read","verdict":"allow"}"#
                );
                assert!(
                    lines[1].contains(
                        "malformed note record (its kind `note` is not one hintgate writes)"
                    ),
                    "{}",
                    lines[1]
                );
                assert!(
                    lines[2].ends_with(r#"{"server":"fs"}\n\u{001b}[2J"#),
                    "control characters are shown escaped: {}",
                    lines[2]
                );
            }
        }
    }

    #[test]
    fn issue_11_names_from_the_log_are_shown_escaped_on_one_line() {
        let forged = "read\n\n     9  2026-11-29T21:58:38Z  fs / read  allow  ()  by rule  -> ok";
        let tool = format!("\u{1b}[2J{forged}\u{202e}");
        let body = json!({"server": "fs", "tool": tool, "verdict": "deny",
                          "reasons": ["unknown-tool"], "approver": "gateway\nby person"});
        let malformed = json!({"outcome": "ok\u{202e}\u{200b}"});
        for follow in [false, true] {
            let args = log_args(false, follow);
            let mut view = View {
                args: &args,
                since: None,
                shown: HashMap::new(),
            };
            let mut out = String::new();
            view.call(
                &record(1, EntryKind::Call, None, body.clone()),
                None,
                &mut out,
            );
            view.outcome(
                &record(
                    2,
                    EntryKind::Outcome,
                    Some(1),
                    json!({"outcome": "shutdown", "duration_ms": 1}),
                ),
                1,
                &mut out,
            );
            view.unreadable(
                &record(3, EntryKind::Outcome, None, malformed.clone()),
                &mut out,
            );
            let lines: Vec<&str> = out.lines().collect();
            assert_eq!(lines.len(), 2 + usize::from(follow), "{out}");
            assert!(
                !out.contains('\u{1b}') && !out.contains('\u{202e}') && !out.contains('\u{200b}'),
                "{out:?}"
            );
            assert!(
                lines[0].contains("fs / \\u{001b}[2Jread\\n\\n     9"),
                "{out}"
            );
            assert!(
                lines[0].ends_with("by gateway\\nby person  -> pending"),
                "{out}"
            );
        }
    }

    /// Grants, revocations and an accepted rollback, as the store writes
    /// them: shown in the order of the log, each on one line; the server
    /// and tool filters apply to grants and revocations, and an accepted
    /// rollback is shown whatever they say.
    #[test]
    fn grants_revocations_and_an_accepted_rollback_are_shown_in_the_log() {
        let grant = |seq, server: &str, tool: &str| {
            record(
                seq,
                EntryKind::Grant,
                None,
                json!({"digest": "sha256:0123456789abcdef0123", "server": server, "server_key": "a".repeat(64), "tool": tool}),
            )
        };
        let entries = [
            grant(1, "fs", "write"),
            grant(2, "gh", "push"),
            record(
                3,
                EntryKind::Revoke,
                None,
                json!({"server": "fs", "server_key": "a".repeat(64), "tool": "write", "why": "revoked"}),
            ),
            record(
                4,
                EntryKind::Rollback,
                None,
                json!({"found": "cut-off", "head": "/s/state.db.audit-head", "head_link": "hmac-sha256:00:00", "head_seq": 9, "log_end": 3, "why": null}),
            ),
            grant(5, "", "write\nforged"),
        ];
        for entry in &entries {
            assert_eq!(entry.malformed, None, "{entry:?}");
        }
        let shown = |json: bool, server: Option<&str>| {
            let mut args = log_args(json, false);
            args.server = server.map(str::to_owned);
            rendered(&args, entries.clone())
        };
        assert_eq!(
            shown(false, Some("fs")),
            [
                "     1  2026-11-29T21:58:38Z  fs / write  approved always (sha256:0123456789ab)",
                "     3  2026-11-29T21:58:38Z  fs / write  standing approval revoked (revoked)",
                "     4  2026-11-29T21:58:38Z  rollback accepted (cut-off): the log ended at record 3 where its head named record 9; standing approvals granted before this record approve nothing",
            ]
        );
        let all = shown(false, None);
        assert_eq!(all.len(), 5, "{all:#?}");
        assert_eq!(
            all[4],
            r"     5  2026-11-29T21:58:38Z  key aaaaaaaaaaaaaaaa / write\nforged  approved always (sha256:0123456789ab)"
        );
        let json: Vec<Value> = shown(true, None)
            .iter()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        assert_eq!(
            json.iter()
                .map(|line| line["kind"].as_str().unwrap())
                .collect::<Vec<_>>(),
            ["grant", "grant", "revoke", "rollback", "grant"]
        );
        assert_eq!(json[2]["why"], "revoked");
        assert_eq!(json[3]["head_seq"], 9);
    }

    #[test]
    fn a_call_on_the_read_only_instance_says_so_and_the_others_read_as_before() {
        let call = |seq, instance: Option<&str>| {
            let mut body = json!({"server": "fs", "tool": "count", "verdict": "allow",
                "reasons": ["read-only", "read-only-credentials"], "approver": "read-only"});
            if let Some(instance) = instance {
                body["instance"] = json!(instance);
                body["instance_identity"] = json!("sha256:reader");
            }
            record(seq, EntryKind::Call, None, body)
        };
        let lines = rendered(
            &log_args(false, false),
            [
                call(1, Some("read-only")),
                call(2, Some("full")),
                call(3, None),
            ],
        );
        assert_eq!(
            lines,
            [
                "     1  2026-11-29T21:58:38Z  fs / count  allow  (read-only, read-only-credentials)  by read-only  on read-only instance  -> pending",
                "     2  2026-11-29T21:58:38Z  fs / count  allow  (read-only, read-only-credentials)  by read-only  -> pending",
                "     3  2026-11-29T21:58:38Z  fs / count  allow  (read-only, read-only-credentials)  by read-only  -> pending",
            ]
        );
        // `--json` gives the record's fields as they are.
        let lines = rendered(&log_args(true, false), [call(1, Some("read-only"))]);
        let shown: Value = serde_json::from_str(&lines[0]).unwrap();
        assert_eq!(shown["instance"], "read-only");
        assert_eq!(shown["instance_identity"], "sha256:reader");
    }

    #[test]
    fn a_call_a_person_edited_says_who_and_json_keeps_both_versions() {
        let body = json!({"server": "fs", "tool": "write_file", "verdict": "ask",
            "reasons": ["destructive"], "approver": "person (hintgate approvals, ann)",
            "arguments": {"content": "new"},
            "edit": {"by": "ann\nforged line", "original": {"content": "old"}}});
        let lines = rendered(
            &log_args(false, false),
            [record(1, EntryKind::Call, None, body.clone())],
        );
        assert_eq!(
            lines,
            [
                "     1  2026-11-29T21:58:38Z  fs / write_file  ask  (destructive)  by person (hintgate approvals, ann)  edited by ann\\nforged line  -> pending",
            ]
        );
        let lines = rendered(
            &log_args(true, false),
            [record(1, EntryKind::Call, None, body)],
        );
        let shown: Value = serde_json::from_str(&lines[0]).unwrap();
        assert_eq!(shown["arguments"]["content"], "new");
        assert_eq!(shown["edit"]["original"]["content"], "old");
    }
}
