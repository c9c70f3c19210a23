//! Waiting calls: the approval queue, each call with its whole prompt, how
//! long it has waited and until when, and the answers the gateway allows.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::Form;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use hintgate_store::{Answer, Answered, Pending, Remember, edit};
use serde::Deserialize;
use serde_json::Value;

use crate::html::{self, View, escape};
use crate::{Console, now, refusal};

/// What the page says after an answer (`?note=...&id=N`): fixed texts only,
/// nothing from the request is echoed.
#[derive(Debug, Deserialize)]
pub(crate) struct Note {
    note: Option<String>,
    id: Option<u64>,
}

fn note_text(note: &Note) -> Option<String> {
    let id = note.id?;
    let text = match note.note.as_deref()? {
        "approved" => "was approved; the gateway runs it now.",
        "denied" => "was denied; the gateway refuses it now.",
        "expired" => "is past its time; the gateway has refused it.",
        "answered" => "was answered already, or the gateway stopped waiting.",
        "edited" => {
            "was edited; the gateway decides on the edited call and previews it, then lists it here again, to be approved as shown."
        }
        "unknown" => "is not in the queue.",
        "broken" => {
            "was not answered: its seal does not verify, so it was not put in the queue by a gateway holding this store's audit key (or this console runs without that key)."
        }
        _ => return None,
    };
    Some(format!("Call #{id} {text}"))
}

/// The title of the tab: how many calls wait.
fn title(count: usize) -> String {
    if count == 0 {
        "hintgate console".to_owned()
    } else {
        format!("({count}) waiting · hintgate console")
    }
}

/// `GET /`
pub(crate) async fn page(
    State(console): State<Arc<Console>>,
    Query(note): Query<Note>,
) -> Response {
    let at = now();
    let waiting = match console.with_store(move |store| store.waiting(at)).await {
        Ok(waiting) => waiting,
        Err(response) => return response,
    };
    let mut body = String::new();
    body.push_str("<h1>Waiting calls</h1>\n");
    body.push_str(
        "<p class=\"lead\">Calls from hosts that cannot ask a person wait here. Read the whole call, then answer: the gateway that holds it runs or refuses it at once.</p>\n",
    );
    if let Some(text) = note_text(&note) {
        let _ = writeln!(
            body,
            "<p class=\"note\" role=\"status\">{}</p>",
            escape(&text)
        );
    }
    let _ = writeln!(
        body,
        "<div id=\"waiting\" data-ids=\"{}\">{}</div>",
        ids(&waiting),
        list(&waiting, at, &console.secrets.csrf)
    );
    crate::html(html::page(
        &title(waiting.len()),
        View::Waiting,
        &console.secrets.csrf,
        &body,
    ))
}

/// `GET /api/waiting`: what the page's script polls; the list rendered
/// (escaped) on the server, its ids and count, and the tab's title.
pub(crate) async fn api(State(console): State<Arc<Console>>) -> Response {
    let at = now();
    let waiting = match console.with_store(move |store| store.waiting(at)).await {
        Ok(waiting) => waiting,
        Err(response) => return response,
    };
    let json = serde_json::json!({
        "count": waiting.len(),
        "ids": ids(&waiting),
        "title": title(waiting.len()),
        "html": list(&waiting, at, &console.secrets.csrf),
    });
    (
        [(
            axum::http::header::CONTENT_TYPE,
            axum::http::HeaderValue::from_static("application/json"),
        )],
        json.to_string(),
    )
        .into_response()
}

fn ids(waiting: &[Pending]) -> String {
    waiting
        .iter()
        .map(|pending| pending.id.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// The waiting calls, oldest first, each as a card with its answers.
pub(crate) fn list(waiting: &[Pending], now: i64, csrf: &str) -> String {
    if waiting.is_empty() {
        return "<p class=\"empty\">No call is waiting for a person.</p>\n".to_owned();
    }
    let mut out = String::new();
    for pending in waiting {
        let id = pending.id;
        let _ = write!(
            out,
            "<article class=\"call\" id=\"call-{id}\" data-id=\"{id}\">\n\
             <h2>#{id} <span class=\"server\">{server}</span> / <span class=\"tool\">{tool}</span></h2>\n\
             <p class=\"time\">Waiting for {waited} (since {since}); the gateway waits until {until}, <strong>{left} left</strong>.</p>\n\
             {shown}\
             <form method=\"post\" action=\"/answer\" class=\"answers\">{csrf}<input type=\"hidden\" name=\"id\" value=\"{id}\">\n\
             <button type=\"submit\" name=\"answer\" value=\"approve\" class=\"approve\">Approve this call</button>\n",
            server = html::line(&pending.server),
            tool = html::line(&pending.tool),
            waited = html::span(now - pending.at),
            since = html::utc(pending.at),
            until = html::utc(pending.expires_at),
            left = html::span(pending.expires_at - now),
            shown = shown(pending),
            csrf = html::csrf_field(csrf),
        );
        if pending.offer >= Remember::Session {
            out.push_str("<button type=\"submit\" name=\"answer\" value=\"approve-session\">Approve this tool for the session</button>\n");
        }
        if pending.offer >= Remember::Always {
            out.push_str("<button type=\"submit\" name=\"answer\" value=\"approve-always\">Approve this tool always (this definition)</button>\n");
        }
        out.push_str(
            "<button type=\"submit\" name=\"answer\" value=\"deny\" class=\"deny\">Deny</button>\n</form>\n",
        );
        out.push_str(&edit_form(pending, csrf));
        let offer = match pending.offer {
            Remember::Always => None,
            Remember::Session => Some(
                "This approval can be remembered for the session at most: a rule, a changed definition or the session's taint asked.",
            ),
            Remember::Call => Some(
                "This approval is for this call only: the tool is effectively destructive, or a rule, a changed definition or the session's taint asked.",
            ),
        };
        if let Some(offer) = offer {
            let _ = writeln!(out, "<p class=\"offer\">{offer}</p>");
        }
        out.push_str("</article>\n");
    }
    out
}

/// The form that edits a call's arguments before approving it: the
/// arguments as the card shows them (values the audit log redacts are
/// markers, to be written out in full), sent to `POST /edit`.
fn edit_form(pending: &Pending, csrf: &str) -> String {
    let arguments = pending
        .details
        .as_ref()
        .and_then(|details| details.get("arguments"))
        .filter(|arguments| arguments.is_object())
        .map_or_else(
            || "{}".to_owned(),
            |arguments| {
                serde_json::to_string_pretty(arguments).unwrap_or_else(|_| arguments.to_string())
            },
        );
    format!(
        "<details class=\"edit\"><summary>Edit the arguments, then approve</summary>\n\
         <form method=\"post\" action=\"/edit\" class=\"edit\">{csrf}<input type=\"hidden\" name=\"id\" value=\"{id}\">\n\
         <p>The whole arguments, as one JSON object. They are checked against the tool's input schema now; the gateway then decides on the edited call and previews it, and lists it here again to be approved as shown (for this call only). Values the audit log redacts show as markers: write them out in full.</p>\n\
         <textarea name=\"arguments\" rows=\"12\" spellcheck=\"false\">{arguments}</textarea>\n\
         <button type=\"submit\" class=\"edit\">Check the edit and ask again</button>\n</form></details>\n",
        csrf = html::csrf_field(csrf),
        id = pending.id,
        arguments = html::block(&arguments),
    )
}

/// What the card shows of the call: the prompt's content laid out (the
/// arguments on their own, the reasons and risks as lists, a changed
/// definition side by side) with the prompt's text a click away; or, for
/// an entry without that content, the prompt's text.
fn shown(pending: &Pending) -> String {
    let prompt = html::block(&pending.prompt);
    let Some(details) = pending
        .details
        .as_ref()
        .filter(|details| details.is_object())
    else {
        return format!("<pre class=\"prompt\">{prompt}</pre>\n");
    };
    let text = |key: &str| details.get(key).and_then(Value::as_str).unwrap_or("");
    let list = |key: &str| -> Vec<&str> {
        details
            .get(key)
            .and_then(Value::as_array)
            .map(|items| items.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default()
    };
    let mut out = String::from("<dl class=\"facts\">\n");
    let trust = text("trust");
    let _ = writeln!(
        out,
        "<dt>Server</dt><dd><span class=\"server\">{}</span> <span class=\"trust {trust_class}\">{trust}</span></dd>",
        html::line(text("server")),
        trust_class = if trust == "trusted" {
            "trusted"
        } else {
            "untrusted"
        },
        trust = html::line(trust),
    );
    let _ = writeln!(
        out,
        "<dt>Identity</dt><dd class=\"identity\">{}</dd>",
        html::line(text("identity"))
    );
    if let Some(previous) = details.get("previous_identity").and_then(Value::as_str) {
        let was = if previous.is_empty() {
            "The server's identity changed since its tools were pinned (its environment, its headers or the capabilities hintgate declares to it).".to_owned()
        } else {
            format!(
                "The server's identity changed since its tools were pinned; it was {}.",
                html::line(previous)
            )
        };
        let _ = writeln!(out, "<dd class=\"warning\">{was}</dd>");
    }
    let title = details
        .get("title")
        .and_then(Value::as_str)
        .map(|title| format!(" titled “{}”", html::line(title)))
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "<dt>Tool</dt><dd><span class=\"tool\">{}</span>{title}</dd>",
        html::line(text("tool"))
    );
    if let Some(edited) = details.get("edited").filter(|edited| edited.is_object()) {
        let original = match edited.get("original") {
            None | Some(Value::Null) => "(none)".to_owned(),
            Some(original) => {
                serde_json::to_string_pretty(original).unwrap_or_else(|_| original.to_string())
            }
        };
        let _ = writeln!(
            out,
            "<dt>Edited</dt><dd class=\"warning\">{} edited this call (#{}): the arguments below are the edited ones, and what it will change is the edited call's. The host asked for:<pre class=\"original\">{}</pre></dd>",
            html::line(
                edited
                    .get("by")
                    .and_then(Value::as_str)
                    .unwrap_or("someone")
            ),
            edited.get("of").and_then(Value::as_u64).unwrap_or_default(),
            html::block(&original)
        );
    }
    let arguments = match details.get("arguments") {
        None | Some(Value::Null) => "(none)".to_owned(),
        Some(arguments) => {
            serde_json::to_string_pretty(arguments).unwrap_or_else(|_| arguments.to_string())
        }
    };
    let _ = writeln!(
        out,
        "<dt>Arguments</dt><dd><pre class=\"arguments\">{}</pre></dd>",
        html::block(&arguments)
    );
    for (key, label) in [("why", "Why you are asked"), ("risks", "Risks")] {
        let items = list(key);
        if items.is_empty() {
            continue;
        }
        let _ = write!(out, "<dt>{label}</dt><dd><ul class=\"{key}\">");
        for item in items {
            let class = if item.starts_with("WARNING") {
                " class=\"warning\""
            } else {
                ""
            };
            let _ = write!(out, "<li{class}>{}</li>", html::line(item));
        }
        out.push_str("</ul></dd>\n");
    }
    let changes = details
        .get("changes")
        .and_then(Value::as_array)
        .filter(|changes| !changes.is_empty());
    if let Some(changes) = changes {
        out.push_str("<dt>Changed since it was approved</dt><dd><table class=\"diff\"><thead><tr><th>Field</th><th>Approved</th><th>Now</th></tr></thead><tbody>");
        for change in changes {
            let field = change.get("field").and_then(Value::as_str).unwrap_or("");
            let value = |key: &str| html::readable(change.get(key).and_then(Value::as_str));
            let _ = write!(
                out,
                "<tr><th>{}</th><td class=\"old\"><pre>{}</pre></td><td class=\"new\"><pre>{}</pre></td></tr>",
                html::line(field),
                html::block(&value("old")),
                html::block(&value("new"))
            );
        }
        out.push_str("</tbody></table></dd>\n");
    }
    out.push_str(&preview(details));
    out.push_str("</dl>\n");
    let _ = writeln!(
        out,
        "<details class=\"prompt\"><summary>The prompt as a host that can ask shows it</summary><pre class=\"prompt\">{prompt}</pre></details>"
    );
    out
}

/// What the call will do, as its preview says, whole (the prompt's text
/// shows a long diff's first hunks): the text, escaped, under its source;
/// or why there is none. Empty for a call without a preview.
fn preview(details: &Value) -> String {
    let Some(preview) = details.get("preview").filter(|preview| preview.is_object()) else {
        return String::new();
    };
    let source = match preview.get("source").and_then(Value::as_str) {
        Some("files") => "computed by hintgate from the file on this machine",
        Some("command") => "from your previewer command",
        Some("dry-run") => "the server's own dry run: its claim, which hintgate does not check",
        _ => "of unknown source",
    };
    let diff = preview.get("kind").and_then(Value::as_str) == Some("diff");
    match (
        preview.get("text").and_then(Value::as_str),
        preview.get("none").and_then(Value::as_str),
    ) {
        (Some(text), _) if diff => format!(
            "<dt>What it will change ({source})</dt><dd><pre class=\"preview diff\">{}</pre></dd>\n",
            diff_lines(text)
        ),
        (Some(text), _) => format!(
            "<dt>What it will change ({source})</dt><dd><pre class=\"preview\">{}</pre></dd>\n",
            html::block(text)
        ),
        (None, Some(none)) => format!(
            "<dt>What it will change</dt><dd>no preview: {}</dd>\n",
            html::line(none)
        ),
        (None, None) => String::new(),
    }
}

/// A unified diff, one element per line, each line's class saying what
/// it is (`file` for the `---`/`+++` headers, `hunk` for `@@`, `del`, `add`,
/// or `same` for context and anything else), so the style sheet colours
/// what goes and what comes. Every line's text is escaped as a block is;
/// the line breaks are the elements' own.
fn diff_lines(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 2);
    for line in text.lines() {
        let class = if line.starts_with("---") || line.starts_with("+++") {
            "file"
        } else if line.starts_with("@@") {
            "hunk"
        } else if line.starts_with('-') {
            "del"
        } else if line.starts_with('+') {
            "add"
        } else {
            "same"
        };
        let _ = write!(out, "<span class=\"{class}\">{}</span>", html::block(line));
    }
    out
}

/// The form of an answer.
#[derive(Debug, Deserialize)]
pub(crate) struct AnswerForm {
    #[serde(default)]
    csrf: String,
    id: u64,
    answer: String,
}

/// `POST /answer`
pub(crate) async fn answer(
    State(console): State<Arc<Console>>,
    Form(form): Form<AnswerForm>,
) -> Response {
    if !console.csrf_ok(&form.csrf) {
        return refusal(
            StatusCode::FORBIDDEN,
            "The form's CSRF token is not this console's: reload the page and answer again.",
        );
    }
    let (approve, remember) = match form.answer.as_str() {
        "approve" => (true, Remember::Call),
        "approve-session" => (true, Remember::Session),
        "approve-always" => (true, Remember::Always),
        "deny" => (false, Remember::Call),
        _ => return refusal(StatusCode::BAD_REQUEST, "No such answer."),
    };
    let id = form.id;
    let given = Answer {
        approve,
        remember,
        by: console.by.clone(),
        arguments: None,
    };
    let outcome = console
        .with_store(move |store| {
            let Some(pending) = store.pending(id)? else {
                return Ok(Err("unknown"));
            };
            if approve && remember > pending.offer {
                return Ok(Err("beyond-offer"));
            }
            Ok(Ok(store.answer(id, &given, now())?))
        })
        .await;
    let note = match outcome {
        Err(response) => return response,
        Ok(Err("beyond-offer")) => {
            return refusal(
                StatusCode::BAD_REQUEST,
                "This call may not be remembered that far: the gateway offered less.",
            );
        }
        Ok(Err(_) | Ok(Answered::Unknown)) => "unknown",
        Ok(Ok(Answered::Released)) if approve => "approved",
        Ok(Ok(Answered::Released)) => "denied",
        Ok(Ok(Answered::Expired)) => "expired",
        Ok(Ok(Answered::NotWaiting(_))) => "answered",
        Ok(Ok(Answered::Broken)) => "broken",
    };
    crate::see_other(&format!("/?note={note}&id={id}"))
}

/// The form of an edit.
#[derive(Debug, Deserialize)]
pub(crate) struct EditForm {
    #[serde(default)]
    csrf: String,
    id: u64,
    arguments: String,
}

/// `POST /edit`: the edit is read and checked against the tool's input
/// schema here (one that cannot be used is refused and changes nothing),
/// then given as the call's answer; the gateway checks it again, decides
/// on the edited call, previews it and asks about it again.
pub(crate) async fn edit(
    State(console): State<Arc<Console>>,
    Form(form): Form<EditForm>,
) -> Response {
    if !console.csrf_ok(&form.csrf) {
        return refusal(
            StatusCode::FORBIDDEN,
            "The form's CSRF token is not this console's: reload the page and answer again.",
        );
    }
    let id = form.id;
    let by = console.by.clone();
    let outcome = console
        .with_store(move |store| {
            let Some(pending) = store.pending(id)? else {
                return Ok(Err(None));
            };
            let schema = pending
                .details
                .as_ref()
                .and_then(|details| details.get("input_schema"));
            let edited = edit::read(&form.arguments)
                .and_then(|edited| edit::check_schema(&edited, schema).map(|()| edited));
            let edited = match edited {
                Ok(edited) => edited,
                Err(err) => return Ok(Err(Some(err))),
            };
            let given = Answer {
                approve: true,
                remember: Remember::Call,
                by,
                arguments: Some(edited.canonical),
            };
            Ok(Ok(store.answer(id, &given, now())?))
        })
        .await;
    let note = match outcome {
        Err(response) => return response,
        Ok(Err(Some(err))) => {
            return refusal(
                StatusCode::BAD_REQUEST,
                &format!(
                    "The edit of call #{id} is refused ({}): {err}. Nothing was changed: the call still waits.",
                    err.code()
                ),
            );
        }
        Ok(Err(None) | Ok(Answered::Unknown)) => "unknown",
        Ok(Ok(Answered::Released)) => "edited",
        Ok(Ok(Answered::Expired)) => "expired",
        Ok(Ok(Answered::NotWaiting(_))) => "answered",
        Ok(Ok(Answered::Broken)) => "broken",
    };
    crate::see_other(&format!("/?note={note}&id={id}"))
}

#[cfg(test)]
mod tests {
    use super::diff_lines;

    #[test]
    fn a_diff_is_one_classed_element_per_line_and_its_text_stays_text() {
        let shown = diff_lines(
            "--- a/notes.txt\n+++ b/notes.txt\n@@ -1,2 +1,2 @@\n one\n-two\n+<script>x()</script>\n",
        );
        assert_eq!(
            shown,
            "<span class=\"file\">--- a/notes.txt</span>\
             <span class=\"file\">+++ b/notes.txt</span>\
             <span class=\"hunk\">@@ -1,2 +1,2 @@</span>\
             <span class=\"same\"> one</span>\
             <span class=\"del\">-two</span>\
             <span class=\"add\">+&lt;script&gt;x()&lt;/script&gt;</span>"
        );
    }
}
