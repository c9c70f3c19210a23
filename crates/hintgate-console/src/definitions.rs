//! Definitions: the pinned tools of each server, the changes held for
//! approval with a side-by-side diff, and approving or revoking them.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use axum::Form;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use hintgate_policy::pin::diff;
use hintgate_policy::tool::Tool;
use hintgate_store::{INSTRUCTIONS, Pin, REMOVED};
use serde::Deserialize;
use serde_json::Value;

use crate::html::{self, View, escape, query_value};
use crate::{Console, refusal};

/// `?note=...` after a change: fixed texts only.
#[derive(Debug, Deserialize)]
pub(crate) struct Note {
    note: Option<String>,
}

/// `GET /definitions`
pub(crate) async fn page(
    State(console): State<Arc<Console>>,
    Query(note): Query<Note>,
) -> Response {
    let pins = match console.with_store(|store| store.pins()).await {
        Ok(pins) => pins,
        Err(response) => return response,
    };
    let mut body = String::from("<h1>Definitions</h1>\n");
    let note = match note.note.as_deref() {
        Some("approved") => {
            Some("The new definition is pinned: calls to it are decided as usual again.")
        }
        Some("revoked") => Some(
            "The pin is forgotten: the tool is new again, and its next listing is pinned anew.",
        ),
        _ => None,
    };
    if let Some(note) = note {
        let _ = writeln!(body, "<p class=\"note\" role=\"status\">{note}</p>");
    }
    let held: Vec<&Pin> = pins.iter().filter(|pin| pin.seen.is_some()).collect();
    if held.is_empty() {
        body.push_str("<p class=\"lead\">No change is held for approval.</p>\n");
    } else {
        let _ = writeln!(
            body,
            "<section class=\"held\"><h2>Held for approval ({})</h2><ul>",
            held.len()
        );
        for pin in held {
            let _ = writeln!(
                body,
                "<li><a href=\"{href}\"><span class=\"server\">{server}</span> / <span class=\"tool\">{tool}</span></a> {what}</li>",
                href = escape(&change_link(pin)),
                server = html::line(&pin.server),
                tool = html::line(&tool_label(pin)),
                what = state_word(pin),
            );
        }
        body.push_str("</ul></section>\n");
    }
    let mut servers: BTreeMap<(&str, &str), Vec<&Pin>> = BTreeMap::new();
    for pin in &pins {
        servers
            .entry((pin.server.as_str(), pin.server_key.as_str()))
            .or_default()
            .push(pin);
    }
    if servers.is_empty() {
        body.push_str("<p class=\"empty\">Nothing is pinned yet: a gateway pins each tool the first time its server lists it.</p>\n");
    }
    for ((server, _), pins) in servers {
        let identity = pins.first().map(|pin| pin.identity.as_str()).unwrap_or("");
        let _ = writeln!(
            body,
            "<section class=\"server-pins\"><h2>{}</h2><p class=\"identity\">{}</p>\n<table><thead><tr><th>Tool</th><th>Description</th><th>Pinned</th><th>State</th><th></th></tr></thead><tbody>",
            html::line(server),
            html::line(identity)
        );
        for pin in pins {
            let description = pin
                .definition
                .get("description")
                .and_then(Value::as_str)
                .or_else(|| pin.definition.get("instructions").and_then(Value::as_str))
                .unwrap_or("");
            let action = if pin.seen.is_some() {
                format!(
                    "<a href=\"{}\">Review the change</a>",
                    escape(&change_link(pin))
                )
            } else {
                revoke_form(&console.secrets.csrf, pin)
            };
            let _ = writeln!(
                body,
                "<tr><td class=\"tool\">{tool}</td><td class=\"description\">{description}</td><td>{at}<br><code>{digest}</code></td><td>{state}</td><td>{action}</td></tr>",
                tool = html::line(&tool_label(pin)),
                description = html::block(description),
                at = html::utc(pin.pinned_at),
                digest = html::line(pin.digest.get(..19).unwrap_or(&pin.digest)),
                state = state_word(pin),
            );
        }
        body.push_str("</tbody></table></section>\n");
    }
    crate::html(html::page(
        "Definitions · hintgate console",
        View::Definitions,
        &console.secrets.csrf,
        &body,
    ))
}

fn tool_label(pin: &Pin) -> String {
    if pin.tool == INSTRUCTIONS {
        "(the server's instructions)".to_owned()
    } else {
        pin.tool.clone()
    }
}

fn state_word(pin: &Pin) -> &'static str {
    match &pin.seen {
        None => "pinned",
        Some(seen) if seen.digest == REMOVED => "no longer listed",
        Some(seen)
            if !pin.identity.is_empty()
                && !seen.identity.is_empty()
                && seen.identity != pin.identity =>
        {
            "changed with a new identity, held"
        }
        Some(_) => "changed, held",
    }
}

fn change_link(pin: &Pin) -> String {
    format!(
        "/definitions/change?key={}&tool={}",
        query_value(&pin.server_key),
        query_value(&pin.tool)
    )
}

fn revoke_form(csrf: &str, pin: &Pin) -> String {
    format!(
        "<form method=\"post\" action=\"/definitions/revoke\">{}<input type=\"hidden\" name=\"key\" value=\"{}\"><input type=\"hidden\" name=\"tool\" value=\"{}\"><button type=\"submit\" class=\"deny\">Revoke</button></form>",
        html::csrf_field(csrf),
        escape(&pin.server_key),
        escape(&pin.tool)
    )
}

/// Which pin.
#[derive(Debug, Deserialize)]
pub(crate) struct Which {
    key: String,
    tool: String,
}

/// `GET /definitions/change?key=&tool=`: the held change side by side.
pub(crate) async fn change(
    State(console): State<Arc<Console>>,
    Query(which): Query<Which>,
) -> Response {
    let Which { key, tool } = which;
    let found = {
        let (key, tool) = (key.clone(), tool.clone());
        console
            .with_store(move |store| store.pin(&key, &tool))
            .await
    };
    let pin = match found {
        Ok(Some(pin)) => pin,
        Ok(None) => return refusal(StatusCode::NOT_FOUND, "No such pin."),
        Err(response) => return response,
    };
    let mut body = format!(
        "<h1><span class=\"server\">{}</span> / <span class=\"tool\">{}</span></h1>\n<p class=\"identity\">{}</p>\n",
        html::line(&pin.server),
        html::line(&tool_label(&pin)),
        html::line(&pin.identity)
    );
    let csrf = &console.secrets.csrf;
    match &pin.seen {
        None => body.push_str("<p class=\"empty\">No change is held for approval.</p>\n"),
        Some(seen) if seen.digest == REMOVED => {
            body.push_str("<p>The server no longer lists this tool. There is nothing new to approve; revoking forgets the pin.</p>\n");
        }
        Some(seen) => {
            let _ = writeln!(
                body,
                "<p>Pinned <code>{}</code> on {}; the server now lists <code>{}</code>. Calls to it are held until a person approves the new definition.</p>",
                html::line(&pin.digest),
                html::utc(pin.pinned_at),
                html::line(&seen.digest)
            );
            body.push_str("<table class=\"diff\"><thead><tr><th>Field</th><th>Pinned (approved)</th><th>Listed now</th></tr></thead><tbody>\n");
            if !pin.identity.is_empty()
                && !seen.identity.is_empty()
                && pin.identity != seen.identity
            {
                let _ = writeln!(
                    body,
                    "<tr><th>server identity</th><td class=\"old\"><pre>{}</pre></td><td class=\"new\"><pre>{}</pre></td></tr>",
                    html::line(&pin.identity),
                    html::line(&seen.identity)
                );
            }
            let rows: Vec<(String, String, String)> = if pin.tool == INSTRUCTIONS {
                let text = |value: &Value| {
                    value
                        .get("instructions")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned()
                };
                vec![(
                    "instructions".to_owned(),
                    text(&pin.definition),
                    text(&seen.definition),
                )]
            } else {
                match (
                    Tool::from_value(pin.definition.clone()),
                    Tool::from_value(seen.definition.clone()),
                ) {
                    (Ok(old), Ok(new)) => diff(&old, &new)
                        .into_iter()
                        .map(|change| {
                            (
                                change.field.clone(),
                                html::readable(change.old.as_deref()),
                                html::readable(change.new.as_deref()),
                            )
                        })
                        .collect(),
                    _ => vec![(
                        "definition".to_owned(),
                        serde_json::to_string_pretty(&pin.definition).unwrap_or_default(),
                        serde_json::to_string_pretty(&seen.definition).unwrap_or_default(),
                    )],
                }
            };
            for (field, old, new) in rows {
                let class = if field.starts_with("annotations.") {
                    " class=\"hint\""
                } else {
                    ""
                };
                let _ = writeln!(
                    body,
                    "<tr{class}><th>{}</th><td class=\"old\"><pre>{}</pre></td><td class=\"new\"><pre>{}</pre></td></tr>",
                    html::line(&field),
                    html::block(&old),
                    html::block(&new)
                );
            }
            body.push_str("</tbody></table>\n");
            let _ = writeln!(
                body,
                "<form method=\"post\" action=\"/definitions/approve\" class=\"answers\">{}<input type=\"hidden\" name=\"key\" value=\"{}\"><input type=\"hidden\" name=\"tool\" value=\"{}\"><input type=\"hidden\" name=\"digest\" value=\"{}\"><button type=\"submit\" class=\"approve\" id=\"approve-definition\">Approve the new definition</button></form>",
                html::csrf_field(csrf),
                escape(&pin.server_key),
                escape(&pin.tool),
                escape(&seen.digest)
            );
        }
    }
    body.push_str(&revoke_form(csrf, &pin));
    crate::html(html::page(
        "Held change · hintgate console",
        View::Definitions,
        csrf,
        &body,
    ))
}

/// The form that approves a held change: the digest shown, so that a
/// definition that changed again since is not approved unseen.
#[derive(Debug, Deserialize)]
pub(crate) struct ApproveForm {
    #[serde(default)]
    csrf: String,
    key: String,
    tool: String,
    digest: String,
}

/// `POST /definitions/approve`
pub(crate) async fn approve(
    State(console): State<Arc<Console>>,
    Form(form): Form<ApproveForm>,
) -> Response {
    if !console.csrf_ok(&form.csrf) {
        return refusal(
            StatusCode::FORBIDDEN,
            "The form's CSRF token is not this console's: reload the page and try again.",
        );
    }
    let done = console
        .with_store(move |store| {
            let Some(pin) = store.pin(&form.key, &form.tool)? else {
                return Ok(Err("There is no such pin any more."));
            };
            let Some(seen) = pin.seen.clone() else {
                return Ok(Err("No change is held for approval any more."));
            };
            if seen.digest == REMOVED {
                return Ok(Err(
                    "The tool is no longer listed: there is nothing new to approve.",
                ));
            }
            if seen.digest != form.digest {
                return Ok(Err(
                    "The held definition changed again since the page was shown: review it again.",
                ));
            }
            if !seen.is_genuine(&pin.tool) {
                return Ok(Err(
                    "This held change was written by someone without hintgate (its digest is not the digest of its definition): it is not approved, and the gateway holds the tool's next change anew.",
                ));
            }
            // Pinned with the identity it was seen under: what the person
            // approved.
            store.put_pin(&Pin {
                digest: seen.digest,
                definition: seen.definition,
                identity: seen.identity,
                seen: None,
                ..pin
            })?;
            Ok(Ok(()))
        })
        .await;
    match done {
        Ok(Ok(())) => crate::see_other("/definitions?note=approved"),
        Ok(Err(why)) => refusal(StatusCode::CONFLICT, why),
        Err(response) => response,
    }
}

/// The form that revokes a pin.
#[derive(Debug, Deserialize)]
pub(crate) struct RevokeForm {
    #[serde(default)]
    csrf: String,
    key: String,
    tool: String,
}

/// `POST /definitions/revoke`
pub(crate) async fn revoke(
    State(console): State<Arc<Console>>,
    Form(form): Form<RevokeForm>,
) -> Response {
    if !console.csrf_ok(&form.csrf) {
        return refusal(
            StatusCode::FORBIDDEN,
            "The form's CSRF token is not this console's: reload the page and try again.",
        );
    }
    match console
        .with_store(move |store| store.revoke(&form.key, &form.tool))
        .await
    {
        Ok(true) => crate::see_other("/definitions?note=revoked"),
        Ok(false) => refusal(StatusCode::NOT_FOUND, "No such pin."),
        Err(response) => response,
    }
}
