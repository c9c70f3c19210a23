//! `hintgate pins`: what was approved, what changed, and what to do about it.

use anyhow::{Result, bail};
use hintgate_policy::pin::diff;
use hintgate_policy::sanitize::{escape_invisible, escape_line};
use hintgate_policy::tool::Tool;
use hintgate_store::{INSTRUCTIONS, Pin, REMOVED, Seal, Store};

use crate::args::{PinsArgs, PinsCommand};
use crate::exit::Exit;
use crate::output;

/// Runs `hintgate pins`.
pub fn run(args: &PinsArgs) -> Result<Exit> {
    let store = crate::state::open_store_of(
        &args.at,
        args.audit_key.as_deref(),
        &crate::state::Use::Rows,
    )?
    .store;
    match &args.command {
        PinsCommand::List { json } => list(store.as_ref(), *json),
        PinsCommand::Show { server, tool } => {
            for pin in matching(store.as_ref(), server, tool)? {
                output::out(&format!(
                    "{}\n",
                    serde_json::to_string_pretty(&pin.definition)?
                ))?;
            }
            Ok(Exit::Success)
        }
        PinsCommand::Diff { server, tool } => {
            let text = diff_text(&matching(store.as_ref(), server, tool)?, server, tool)?;
            output::out(&text)?;
            Ok(Exit::Success)
        }
        PinsCommand::Approve { server, tool } => {
            let mut approved = 0;
            for pin in matching(store.as_ref(), server, tool)? {
                let Some(seen) = pin.seen.clone() else {
                    continue;
                };
                if seen.digest == REMOVED {
                    bail!(
                        "`{tool}` is no longer listed by `{server}`: there is nothing new to approve (`hintgate pins revoke {server} {tool}` forgets it)"
                    );
                }
                // What is pinned is the digest of the definition the person
                // was shown, never a digest the store holds beside it: a
                // held change is not sealed, and one whose digest and
                // definition disagree was written by someone else.
                if !seen.is_genuine(&pin.tool) {
                    bail!(
                        "the change held for `{tool}` on `{server}` was written by someone without hintgate (its digest is not the digest of its definition): not approved; the gateway holds the tool's next change anew"
                    );
                }
                // The seen definition is pinned with the identity it was
                // seen under: what the person approved.
                store.put_pin(&Pin {
                    digest: seen.digest,
                    definition: seen.definition,
                    identity: seen.identity,
                    seen: None,
                    ..pin
                })?;
                approved += 1;
            }
            if approved == 0 {
                bail!("`{server}` / `{tool}` has no change held for approval");
            }
            output::out(&format!(
                "approved the new definition of `{tool}` on `{server}`\n"
            ))?;
            Ok(Exit::Success)
        }
        PinsCommand::Revoke { server, tool } => {
            let mut revoked = 0;
            for pin in matching(store.as_ref(), server, tool)? {
                if store.revoke(&pin.server_key, &pin.tool)? {
                    revoked += 1;
                }
            }
            output::out(&format!(
                "revoked {revoked} pin(s) of `{tool}` on `{server}`\n"
            ))?;
            Ok(Exit::Success)
        }
    }
}

/// What `hintgate pins diff SERVER TOOL` prints for the pins that match.
fn diff_text(pins: &[Pin], server: &str, tool: &str) -> Result<String> {
    // Names, identities and definitions came from servers: each shown with
    // what would break its line or hide escaped.
    let (server, tool) = (escape_line(server), escape_line(tool));
    let mut text = String::new();
    for pin in pins {
        match &pin.seen {
            None => text.push_str(&format!("{server} / {tool}: no change held for approval\n")),
            Some(seen) if seen.digest == REMOVED => text.push_str(&format!(
                "{server} / {tool}: no longer listed by the server (pinned {})\n",
                pin.digest
            )),
            Some(seen) if pin.tool == INSTRUCTIONS => {
                let identity = identity_line(pin);
                let line = |definition: &serde_json::Value| {
                    definition
                        .get("instructions")
                        .and_then(serde_json::Value::as_str)
                        .unwrap_or("")
                        .to_owned()
                };
                text.push_str(&format!(
                    "{server} / the server's instructions: {} -> {}\n{identity}  - {}\n  + {}\n",
                    pin.digest,
                    seen.digest,
                    escape_invisible(&line(&pin.definition)).replace('\n', "\n    "),
                    escape_invisible(&line(&seen.definition)).replace('\n', "\n    ")
                ));
            }
            Some(seen) => {
                text.push_str(&format!(
                    "{server} / {tool}: {} -> {}\n{}",
                    pin.digest,
                    seen.digest,
                    identity_line(pin)
                ));
                let (Ok(old), Ok(new)) = (
                    Tool::from_value(pin.definition.clone()),
                    Tool::from_value(seen.definition.clone()),
                ) else {
                    bail!("a stored definition of `{tool}` is not a valid tool");
                };
                for change in diff(&old, &new) {
                    let hint = if change.field.starts_with("annotations.") {
                        "  (hint)"
                    } else {
                        ""
                    };
                    text.push_str(&format!(
                        "  {}:{hint}\n    - {}\n    + {}\n",
                        escape_line(&change.field),
                        escape_line(change.old.as_deref().unwrap_or("(absent)")),
                        escape_line(change.new.as_deref().unwrap_or("(absent)"))
                    ));
                }
            }
        }
    }
    Ok(text)
}

/// The identities before and after a held change that came with a new
/// identity of the server; `None` for a change under the same identity, a
/// removal, or a pin that predates identities.
fn identity_change(pin: &Pin) -> Option<(&str, &str)> {
    let seen = pin.seen.as_ref()?;
    let changed = seen.digest != REMOVED
        && !pin.identity.is_empty()
        && !seen.identity.is_empty()
        && pin.identity != seen.identity;
    changed.then_some((pin.identity.as_str(), seen.identity.as_str()))
}

/// `  identity: OLD -> NEW` and a newline for a change with a new identity;
/// nothing otherwise.
fn identity_line(pin: &Pin) -> String {
    identity_change(pin).map_or_else(String::new, |(old, new)| {
        format!("  identity: {} -> {}\n", escape_line(old), escape_line(new))
    })
}

fn matching(store: &dyn Store, server: &str, tool: &str) -> Result<Vec<Pin>> {
    let pins: Vec<Pin> = store
        .pins()?
        .into_iter()
        .filter(|pin| pin.server == server && pin.tool == tool)
        .collect();
    if pins.is_empty() {
        bail!("no pin of `{tool}` on `{server}`");
    }
    Ok(pins)
}

fn list(store: &dyn Store, as_json: bool) -> Result<Exit> {
    let pins = store.pins()?;
    if as_json {
        output::out(&format!("{}\n", serde_json::to_string_pretty(&pins)?))?;
        return Ok(Exit::Success);
    }
    output::out(&list_text(&pins))?;
    Ok(Exit::Success)
}

/// The table `hintgate pins list` prints.
fn list_text(pins: &[Pin]) -> String {
    let mut text = String::new();
    for pin in pins {
        let state = match &pin.seen {
            _ if pin.seal == Seal::Broken => {
                "SEAL BROKEN: written or changed without the audit key, so it has no effect (`hintgate pins revoke` removes it)"
            }
            Some(seen) if seen.digest == REMOVED => "REMOVED, no longer listed",
            Some(_) if identity_change(pin).is_some() => {
                "CHANGED with a new identity, held for approval"
            }
            Some(_) => "CHANGED, held for approval",
            None => "pinned",
        };
        let short = pin.digest.get(..19).unwrap_or(&pin.digest);
        text.push_str(&format!(
            "{:<16} {:<32} {}  {state}\n{}",
            escape_line(&pin.server),
            escape_line(&pin.tool),
            escape_line(short),
            identity_line(pin)
        ));
    }
    if pins.is_empty() {
        text.push_str("no pins yet\n");
    }
    text
}

#[cfg(test)]
mod tests {
    use hintgate_store::{Pin, Seen};
    use serde_json::json;

    use super::{diff_text, list_text};

    const FORGED: &str =
        "\n\nfs               read                             sha256:0000000000  pinned";

    fn pin(tool: &str, title: &str, seen_title: Option<&str>) -> Pin {
        Pin {
            server_key: "k".into(),
            server: "fs".into(),
            identity: format!("x (1.0){FORGED}"),
            tool: tool.into(),
            digest: "sha256:1111111111111111".into(),
            definition: json!({"name": tool, "title": title}),
            pinned_at: 1,
            seen: seen_title.map(|title| Seen {
                digest: "sha256:2222222222222222".into(),
                definition: json!({"name": tool, "title": title}),
                identity: "x (2.0)\u{202e}".into(),
            }),
            seal: hintgate_store::Seal::Valid,
        }
    }

    #[test]
    fn issue_11_pins_show_server_supplied_text_escaped_on_its_line() {
        let name = format!("\u{1b}[2Jread{FORGED}");
        let pins = [pin(&name, "Read", Some("Read\u{202e}"))];
        let listed = list_text(&pins);
        assert_eq!(
            listed.lines().count(),
            2,
            "the pin and its identity line: {listed}"
        );
        let diffed = diff_text(&pins, "fs", &name).unwrap();
        for text in [&listed, &diffed] {
            assert!(
                !text.contains('\u{1b}') && !text.contains('\u{202e}'),
                "{text:?}"
            );
            for line in text.lines() {
                assert!(
                    !line.starts_with("fs               read"),
                    "a forged line:\n{text}"
                );
            }
        }
        assert!(listed.contains("\\u{001b}[2Jread\\n\\n"), "{listed}");
    }
}
