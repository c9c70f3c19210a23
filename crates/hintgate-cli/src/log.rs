//! `hintgate log`: the audit log, queried or verified.

use anyhow::Result;
use hintgate_store::{Entry, EntryKind};
use serde_json::Value;

use crate::args::{LogArgs, LogCommand};
use crate::exit::Exit;
use crate::output;

/// Runs `hintgate log`.
pub fn run(args: &LogArgs) -> Result<Exit> {
    let store = crate::state::open_store(args.state_dir.as_deref(), args.store.as_deref(), None)?;
    if let Some(LogCommand::Verify) = args.command {
        let verification = store.verify()?;
        return Ok(match verification.first_broken {
            None => {
                output::out(&format!(
                    "the audit log holds: {} records checked\n",
                    verification.checked
                ))?;
                Exit::Success
            }
            Some(seq) => {
                output::out(&format!(
                    "the audit log is broken at record {seq}: its hash does not follow from the record before (edited, inserted or deleted)\n"
                ))?;
                Exit::Denied
            }
        });
    }
    let text_of = |entry: &Entry, key: &str| {
        entry
            .body
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let mut after = 0;
    let mut calls: std::collections::BTreeMap<u64, Entry> = std::collections::BTreeMap::new();
    let mut outcomes: std::collections::BTreeMap<u64, Vec<Entry>> =
        std::collections::BTreeMap::new();
    loop {
        let batch = store.entries(after, 1000)?;
        let Some(last) = batch.last() else {
            break;
        };
        after = last.seq;
        for entry in batch {
            match (entry.kind, entry.call) {
                (EntryKind::Outcome, Some(call)) => outcomes.entry(call).or_default().push(entry),
                _ => {
                    calls.insert(entry.seq, entry);
                }
            }
        }
    }
    let mut out = String::new();
    for (seq, call) in &calls {
        let keep = args
            .server
            .as_ref()
            .is_none_or(|server| text_of(call, "server") == *server)
            && args
                .tool
                .as_ref()
                .is_none_or(|tool| text_of(call, "tool") == *tool)
            && args
                .verdict
                .as_ref()
                .is_none_or(|verdict| text_of(call, "verdict") == *verdict);
        if !keep {
            continue;
        }
        let ended = outcomes.get(seq).and_then(|list| list.last());
        let outcome = call
            .body
            .get("outcome")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| {
                ended
                    .and_then(|entry| entry.body.get("outcome"))
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| "pending".to_owned());
        if args.json {
            let mut record = call.body.clone();
            if let Some(object) = record.as_object_mut() {
                object.insert("seq".into(), Value::from(*seq));
                object.insert("at".into(), Value::from(call.at));
                object.insert("outcome".into(), Value::from(outcome));
                if let Some(ended) = ended {
                    object.insert(
                        "duration_ms".into(),
                        ended
                            .body
                            .get("duration_ms")
                            .cloned()
                            .unwrap_or(Value::Null),
                    );
                }
            }
            out.push_str(&format!("{record}\n"));
        } else {
            let reasons: Vec<&str> = call
                .body
                .get("reasons")
                .and_then(Value::as_array)
                .map(|list| list.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            out.push_str(&format!(
                "{seq:>6}  {}  {} / {}  {}  ({})  by {}  -> {outcome}\n",
                utc(call.at),
                text_of(call, "server"),
                text_of(call, "tool"),
                text_of(call, "verdict"),
                reasons.join(", "),
                text_of(call, "approver"),
            ));
        }
    }
    output::out(&out)?;
    Ok(Exit::Success)
}

/// Seconds since the Unix epoch as `YYYY-MM-DDTHH:MM:SSZ` (UTC), by the
/// civil-from-days algorithm (Howard Hinnant's), so no date crate is needed.
pub(crate) fn utc(seconds: i64) -> String {
    let days = seconds.div_euclid(86_400);
    let rest = seconds.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3_600,
        rest % 3_600 / 60,
        rest % 60
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn times_are_shown_in_utc() {
        assert_eq!(super::utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(super::utc(1_795_989_518), "2026-11-29T21:58:38Z");
        assert_eq!(super::utc(951_782_400), "2000-02-29T00:00:00Z");
    }
}
