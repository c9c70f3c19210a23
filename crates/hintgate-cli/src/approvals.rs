//! `hintgate approvals`: the calls that wait for a person because their host
//! cannot ask one, and the answers that release them.
//!
//! The answer goes into the store; the waiting gateway (this machine's, or
//! any gateway on the same PostgreSQL store) sees it at once and runs or
//! refuses the call.

use anyhow::Result;
use hintgate_policy::sanitize::{escape_invisible, escape_line};
use hintgate_store::{Answer, Answered, PendingState, Remember, Seal, Store};

use crate::args::{ApprovalsArgs, ApprovalsCommand, RememberArg};
use crate::exit::Exit;
use crate::output;

/// Runs `hintgate approvals`.
pub fn run(args: &ApprovalsArgs) -> Result<Exit> {
    let store = crate::state::open_store_of(
        &args.at,
        args.audit_key.as_deref(),
        &crate::state::Use::Rows,
    )?
    .store;
    match &args.command {
        ApprovalsCommand::List { json } => list(store.as_ref(), *json),
        ApprovalsCommand::Show { id, json } => show(store.as_ref(), *id, *json),
        ApprovalsCommand::Approve {
            id,
            remember,
            arguments,
        } => {
            let remember = match remember {
                RememberArg::Call => Remember::Call,
                RememberArg::Session => Remember::Session,
                RememberArg::Always => Remember::Always,
            };
            match arguments {
                Some(file) => edit(store.as_ref(), *id, remember, file),
                None => answer(store.as_ref(), *id, true, remember),
            }
        }
        ApprovalsCommand::Deny { id } => answer(store.as_ref(), *id, false, Remember::Call),
    }
}

fn list(store: &dyn Store, json: bool) -> Result<Exit> {
    let now = crate::when::unix_now();
    let waiting = store.waiting(now)?;
    if json {
        let mut text = String::new();
        for pending in &waiting {
            text.push_str(&serde_json::to_string(pending)?);
            text.push('\n');
        }
        output::out(&text)?;
        return Ok(Exit::Success);
    }
    if waiting.is_empty() {
        output::out("No call is waiting for a person.\n")?;
        return Ok(Exit::Success);
    }
    let mut text = String::new();
    for pending in &waiting {
        let remember = match pending.offer {
            Remember::Always => "--remember call|session|always",
            Remember::Session => "--remember call|session",
            Remember::Call => "this call only",
        };
        // The queue is only as trusted as whoever can write the store: what
        // it holds is shown escaped, the prompt line by line.
        text.push_str(&format!(
            "#{id}  {server} / {tool}  waits {left} s more  (approve: {remember})\n",
            id = pending.id,
            server = escape_line(&pending.server),
            tool = escape_line(&pending.tool),
            left = pending.expires_at.saturating_sub(now),
        ));
        if pending.seal == Seal::Broken {
            text.push_str(
                "    SEAL BROKEN: put in the queue or changed without the audit key; it cannot be answered\n",
            );
        }
        for line in escape_invisible(&pending.prompt).lines() {
            text.push_str(&format!("    {line}\n"));
        }
        text.push_str(&format!(
            "    -> hintgate approvals approve {id}   |   hintgate approvals deny {id}\n\n",
            id = pending.id
        ));
    }
    output::out(&text)?;
    Ok(Exit::Success)
}

/// `hintgate approvals show ID`: the call's prompt, then its whole
/// preview, each line escaped and marked as the prompt marks it.
fn show(store: &dyn Store, id: u64, json: bool) -> Result<Exit> {
    let Some(pending) = store.pending(id)? else {
        output::err(&format!("error: no call #{id} in the approval queue\n"))?;
        return Ok(Exit::Error);
    };
    if json {
        output::out(&format!("{}\n", serde_json::to_string(&pending)?))?;
        return Ok(Exit::Success);
    }
    let mut text = format!(
        "#{id}  {server} / {tool}  ({state})\n",
        server = escape_line(&pending.server),
        tool = escape_line(&pending.tool),
        state = match &pending.state {
            PendingState::Waiting => "waiting".to_owned(),
            PendingState::Answered(answer) => format!(
                "answered: {} by {}",
                if answer.approve { "approved" } else { "denied" },
                escape_line(&answer.by)
            ),
            PendingState::Withdrawn { why } => format!("withdrawn: {}", escape_line(why)),
        },
    );
    if pending.seal == Seal::Broken {
        text.push_str(
            "    SEAL BROKEN: put in the queue or changed without the audit key; it cannot be answered\n",
        );
    }
    for line in escape_invisible(&pending.prompt).lines() {
        text.push_str(&format!("    {line}\n"));
    }
    let edited = pending
        .details
        .as_ref()
        .and_then(|details| details.get("edited"));
    if let Some(edited) = edited {
        text.push_str(&format!(
            "\n    edited by {} (#{}); the host asked for:\n",
            escape_line(
                edited
                    .get("by")
                    .and_then(|by| by.as_str())
                    .unwrap_or("someone")
            ),
            edited
                .get("of")
                .and_then(serde_json::Value::as_u64)
                .unwrap_or_default()
        ));
        let original = edited
            .get("original")
            .map(|original| serde_json::to_string_pretty(original).unwrap_or_default())
            .unwrap_or_default();
        for line in original.lines() {
            text.push_str(&format!("      {}\n", escape_line(line)));
        }
    }
    let preview = pending
        .details
        .as_ref()
        .and_then(|details| details.get("preview"));
    if let Some(whole) = preview
        .and_then(|preview| preview.get("text"))
        .and_then(|text| text.as_str())
    {
        let source = preview
            .and_then(|preview| preview.get("source"))
            .and_then(|source| source.as_str())
            .unwrap_or("unknown");
        text.push_str(&format!(
            "\n    the whole preview (source: {}):\n",
            escape_line(source)
        ));
        for line in whole.lines() {
            text.push_str(&format!("      | {}\n", escape_line(line)));
        }
    }
    text.push_str(&format!(
        "    -> hintgate approvals approve {id}   |   hintgate approvals approve {id} --arguments FILE   |   hintgate approvals deny {id}\n"
    ));
    output::out(&text)?;
    Ok(Exit::Success)
}

/// Who answers, for the audit log: the user name this command runs as.
pub(crate) fn who() -> String {
    ["USER", "LOGNAME", "USERNAME"]
        .iter()
        .find_map(|name| std::env::var(name).ok().filter(|value| !value.is_empty()))
        .unwrap_or_else(|| "an unnamed user".to_owned())
}

/// `hintgate approvals approve ID --arguments FILE`: the edit is read and
/// checked against the tool's input schema here, so that one that does not
/// fit is refused and changes nothing; the gateway checks it again, decides
/// on the edited call, previews it and asks about it again.
fn edit(store: &dyn Store, id: u64, remember: Remember, file: &std::path::Path) -> Result<Exit> {
    if remember != Remember::Call {
        output::err(
            "error: an edited call is approved for this call only: `--arguments` goes without `--remember`\n",
        )?;
        return Ok(Exit::Usage);
    }
    let Some(pending) = store.pending(id)? else {
        output::err(&format!("error: no call #{id} in the approval queue\n"))?;
        return Ok(Exit::Error);
    };
    let text = match crate::load::text(file, "the edited arguments") {
        Ok(text) => text,
        Err(err) => {
            output::err(&format!("error: {err}; #{id} was not answered\n"))?;
            return Ok(Exit::Usage);
        }
    };
    let schema = pending
        .details
        .as_ref()
        .and_then(|details| details.get("input_schema"));
    let edited = hintgate_store::edit::read(&text)
        .and_then(|edited| hintgate_store::edit::check_schema(&edited, schema).map(|()| edited));
    let edited = match edited {
        Ok(edited) => edited,
        Err(err) => {
            output::err(&format!(
                "error: the edit of #{id} ({} / {}) is refused ({}): {}; #{id} was not answered and still waits\n",
                escape_line(&pending.server),
                escape_line(&pending.tool),
                err.code(),
                escape_line(&err.to_string())
            ))?;
            return Ok(Exit::Usage);
        }
    };
    let given = Answer {
        approve: true,
        remember: Remember::Call,
        by: who(),
        arguments: Some(edited.canonical),
    };
    deliver(store, id, &pending, &given)
}

fn answer(store: &dyn Store, id: u64, approve: bool, remember: Remember) -> Result<Exit> {
    let Some(pending) = store.pending(id)? else {
        output::err(&format!("error: no call #{id} in the approval queue\n"))?;
        return Ok(Exit::Error);
    };
    if approve && remember > pending.offer {
        output::err(&format!(
            "error: call #{id} ({} / {}) may only be remembered up to `{}`: the tool is effectively destructive, or a rule, a changed definition or the session's taint asked\n",
            pending.server,
            pending.tool,
            pending.offer.as_str()
        ))?;
        return Ok(Exit::Usage);
    }
    let given = Answer {
        approve,
        remember,
        by: who(),
        arguments: None,
    };
    deliver(store, id, &pending, &given)
}

/// Puts `given` in the store as the answer to `#id` and says what came of
/// it.
fn deliver(
    store: &dyn Store,
    id: u64,
    pending: &hintgate_store::Pending,
    given: &Answer,
) -> Result<Exit> {
    let (approve, remember) = (given.approve, given.remember);
    let what = format!(
        "#{id} ({} / {})",
        escape_line(&pending.server),
        escape_line(&pending.tool)
    );
    match store.answer(id, given, crate::when::unix_now())? {
        Answered::Released => {
            let text = if given.arguments.is_some() {
                format!(
                    "Edited {what}. The gateway checks the edited call, decides on it and previews it, then puts it in the queue again to be approved as shown: `hintgate approvals list`.\n"
                )
            } else if approve {
                format!(
                    "Approved {what}, remembered: {}. The gateway runs it now.\n",
                    remember.as_str()
                )
            } else {
                format!("Denied {what}. The gateway refuses it now.\n")
            };
            output::out(&text)?;
            Ok(Exit::Success)
        }
        Answered::Expired => {
            output::err(&format!(
                "error: {what} is past its time; the gateway has refused it\n"
            ))?;
            Ok(Exit::Error)
        }
        Answered::NotWaiting(state) => {
            let why = match state {
                PendingState::Answered(earlier) => format!(
                    "{} answered it already ({})",
                    earlier.by,
                    if earlier.approve {
                        "approved"
                    } else {
                        "denied"
                    }
                ),
                PendingState::Withdrawn { why } => format!("the gateway stopped waiting: {why}"),
                PendingState::Waiting => "it is not waiting".to_owned(),
            };
            output::err(&format!("error: {what} no longer waits: {why}\n"))?;
            Ok(Exit::Error)
        }
        Answered::Unknown => {
            output::err(&format!("error: no call #{id} in the approval queue\n"))?;
            Ok(Exit::Error)
        }
        Answered::Broken => {
            output::err(&format!(
                "error: {what} was put in the queue or changed by someone without the audit key (its seal does not verify): what it shows may not be what the gateway asked, so it is not answered; the gateway refuses it when its time is up\n"
            ))?;
            Ok(Exit::Error)
        }
    }
}
