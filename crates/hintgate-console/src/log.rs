//! Log: the audit log's calls with filters, a live tail, each record's
//! reasons and who let it through, the chain's verification state, and a
//! chart of calls over time by verdict drawn on the server as SVG.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::HeaderValue;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use hintgate_policy::decide::Verdict;
use hintgate_store::record::OutcomeCode;
use hintgate_store::{Entry, HeadState, Record, Store, StoreError, Verification};
use serde::Deserialize;

use crate::html::{self, View, escape};
use crate::{Console, now};

/// The most rows the page shows (the newest).
const SHOWN: usize = 500;

/// How many bars the chart has.
const BARS: i64 = 48;

/// The verdicts, in the chart's stacking order.
const VERDICTS: [&str; 3] = ["allow", "ask", "deny"];

/// The filters (`?server=&tool=&verdict=&since=`); empty means any.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Filters {
    #[serde(default)]
    server: String,
    #[serde(default)]
    tool: String,
    #[serde(default)]
    verdict: String,
    /// `1h`, `24h`, `7d`, or empty for the whole log.
    #[serde(default)]
    since: String,
    /// For the live tail: only calls after this sequence number.
    #[serde(default)]
    after: u64,
}

impl Filters {
    fn since_seconds(&self) -> Option<i64> {
        match self.since.as_str() {
            "1h" => Some(3_600),
            "24h" => Some(86_400),
            "7d" => Some(7 * 86_400),
            _ => None,
        }
    }

    fn keeps(&self, call: &Call, now: i64) -> bool {
        (self.server.is_empty() || call.server == self.server)
            && (self.tool.is_empty() || call.tool == self.tool)
            && (self.verdict.is_empty() || verdict_name(call.verdict) == self.verdict)
            && self
                .since_seconds()
                .is_none_or(|since| call.at >= now - since)
            && call.seq > self.after
    }
}

/// One call as the log holds it, with its outcome when it has one.
#[derive(Debug, Clone)]
struct Call {
    seq: u64,
    at: i64,
    server: String,
    tool: String,
    verdict: Verdict,
    reasons: Vec<String>,
    approver: String,
    /// How it ended, as the log names it (`pending` until it has).
    outcome: &'static str,
}

/// A verdict as the log, the filters and the page's classes name it.
const fn verdict_name(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Allow => "allow",
        Verdict::Ask => "ask",
        Verdict::Deny => "deny",
    }
}

/// The calls after `after`, oldest first, each with its outcome; and the
/// last sequence number read.
fn calls(store: &dyn Store, after: u64) -> Result<(Vec<Call>, u64), StoreError> {
    let mut calls: Vec<Call> = Vec::new();
    let mut index: HashMap<u64, usize> = HashMap::new();
    let mut last = after;
    loop {
        let batch = store.entries(last, 1000)?;
        let Some(end) = batch.last() else {
            break;
        };
        last = end.seq;
        for entry in batch.into_iter().flat_map(Entry::expand) {
            // A malformed record has no record: it is neither a call nor
            // an outcome.
            match &entry.record {
                Some(Record::Call(call)) => {
                    index.insert(entry.seq, calls.len());
                    calls.push(Call {
                        seq: entry.seq,
                        at: entry.at,
                        server: call.server.clone(),
                        tool: call.tool.clone(),
                        verdict: call.verdict,
                        reasons: call.reasons.clone(),
                        approver: call.approver.clone(),
                        outcome: call.outcome.map_or("pending", OutcomeCode::as_str),
                    });
                }
                Some(Record::Outcome(ended)) => {
                    if let Some(call) = entry
                        .call
                        .and_then(|seq| index.get(&seq))
                        .and_then(|&at| calls.get_mut(at))
                    {
                        call.outcome = ended.outcome.as_str();
                    }
                }
                _ => {}
            }
        }
    }
    Ok((calls, last))
}

fn rows(calls: &[&Call]) -> String {
    let mut out = String::new();
    for call in calls.iter().rev().take(SHOWN) {
        let _ = writeln!(
            out,
            "<tr class=\"v-{verdict_class}\"><td>{seq}</td><td>{at}</td><td class=\"server\">{server}</td><td class=\"tool\">{tool}</td><td class=\"verdict\">{verdict}</td><td>{reasons}</td><td>{approver}</td><td>{outcome}</td></tr>",
            verdict_class = verdict_name(call.verdict),
            seq = call.seq,
            at = html::utc(call.at),
            server = html::line(&call.server),
            tool = html::line(&call.tool),
            verdict = verdict_name(call.verdict),
            reasons = html::line(&call.reasons.join(", ")),
            approver = html::line(&call.approver),
            outcome = html::line(call.outcome),
        );
    }
    out
}

/// The chart: calls over time, one stacked bar per slice of the time
/// shown, by verdict.
fn chart(calls: &[&Call], from: i64, to: i64) -> String {
    const WIDTH: i64 = 720;
    const HEIGHT: i64 = 140;
    let span = (to - from).max(BARS);
    let mut counts = vec![[0_u64; 3]; usize::try_from(BARS).unwrap_or(0)];
    for call in calls {
        let slot = ((call.at - from).clamp(0, span - 1) * BARS / span).clamp(0, BARS - 1);
        let verdict = VERDICTS
            .iter()
            .position(|v| *v == verdict_name(call.verdict));
        if let (Some(bar), Some(verdict)) = (
            usize::try_from(slot)
                .ok()
                .and_then(|slot| counts.get_mut(slot)),
            verdict,
        ) && let Some(count) = bar.get_mut(verdict)
        {
            *count += 1;
        }
    }
    let most = counts
        .iter()
        .map(|bar| bar.iter().sum::<u64>())
        .max()
        .unwrap_or(0)
        .max(1);
    let mut out = format!(
        "<svg class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {WIDTH} {total}\" role=\"img\" aria-labelledby=\"chart-title\"><title id=\"chart-title\">Calls over time by verdict, {from_text} to {to_text}</title>\n",
        total = HEIGHT + 40,
        from_text = html::utc(from),
        to_text = html::utc(to),
    );
    let bar_width = WIDTH / BARS;
    for (index, bar) in counts.iter().enumerate() {
        let x = i64::try_from(index).unwrap_or(0) * bar_width;
        let mut y = HEIGHT;
        let slice_from = from + i64::try_from(index).unwrap_or(0) * span / BARS;
        for (verdict, count) in VERDICTS.iter().zip(bar) {
            if *count == 0 {
                continue;
            }
            let height = (i64::try_from(*count).unwrap_or(i64::MAX) * HEIGHT)
                .div_euclid(i64::try_from(most).unwrap_or(1))
                .max(1);
            y -= height;
            let _ = writeln!(
                out,
                "<rect class=\"v-{verdict}\" x=\"{x}\" y=\"{y}\" width=\"{w}\" height=\"{height}\"><title>{count} {verdict} from {at}</title></rect>",
                w = bar_width - 1,
                at = html::utc(slice_from),
            );
        }
    }
    let _ = write!(
        out,
        "<line class=\"axis\" x1=\"0\" y1=\"{HEIGHT}\" x2=\"{WIDTH}\" y2=\"{HEIGHT}\"/>\n\
         <text x=\"0\" y=\"{label}\">{from_text}</text><text x=\"{WIDTH}\" y=\"{label}\" text-anchor=\"end\">{to_text}</text>\n\
         <text x=\"{WIDTH}\" y=\"12\" text-anchor=\"end\">most in one bar: {most}</text>\n\
         <text class=\"v-allow\" x=\"0\" y=\"{legend}\">■ allow</text><text class=\"v-ask\" x=\"70\" y=\"{legend}\">■ ask</text><text class=\"v-deny\" x=\"130\" y=\"{legend}\">■ deny</text>\n</svg>\n",
        label = HEIGHT + 16,
        legend = HEIGHT + 34,
        from_text = html::utc(from),
        to_text = html::utc(to),
    );
    out
}

fn verification(verified: &Verification) -> String {
    let mut out = String::new();
    if verified.problems.is_empty() {
        let keyed = if verified.key_id.is_some() {
            "every link checked with the audit key"
        } else if verified.keyed.is_some() {
            "the links' order checked, but not their keyed MACs (this console has no audit key)"
        } else {
            "no keyed records"
        };
        let _ = write!(
            out,
            "<p class=\"chain ok\">The chain holds: {} records checked, {keyed}.",
            verified.checked
        );
    } else {
        let codes: Vec<&str> = verified
            .problems
            .iter()
            .map(|problem| problem.code())
            .collect();
        let _ = write!(
            out,
            "<p class=\"chain bad\">The chain does not hold: {} problem(s) in {} records ({}{}). Run <code>hintgate log verify</code> for the details.",
            verified.problems.len() as u64 + verified.more_problems,
            verified.checked,
            escape(&codes.join(", ")),
            if verified.more_problems > 0 {
                ", …"
            } else {
                ""
            }
        );
    }
    if let Some(unkeyed) = verified.unkeyed {
        let _ = write!(
            out,
            " Records {}–{} were written before the log was keyed: anyone who could write the database could have rewritten them.",
            unkeyed.first, unkeyed.last
        );
    }
    match &verified.head {
        HeadState::Reached { seq, sealed, .. } => {
            let _ = write!(
                out,
                " The head names record {seq}{}.",
                if *sealed {
                    ", its seal checked"
                } else {
                    " (its seal not checked)"
                }
            );
        }
        HeadState::Failed { .. } => out.push_str(" The head does not hold."),
        HeadState::NotYet { .. } | HeadState::NotKept => {}
    }
    out.push_str("</p>\n");
    out
}

fn select(name: &str, label: &str, current: &str, options: &[(&str, &str)]) -> String {
    let mut out = format!("<label>{label} <select name=\"{name}\">");
    for (value, text) in options {
        let selected = if *value == current { " selected" } else { "" };
        let _ = write!(
            out,
            "<option value=\"{}\"{selected}>{}</option>",
            escape(value),
            html::line(text)
        );
    }
    out.push_str("</select></label>");
    out
}

/// `GET /log`
pub(crate) async fn page(
    State(console): State<Arc<Console>>,
    Query(filters): Query<Filters>,
) -> Response {
    let read = console
        .with_store(|store| Ok((calls(store, 0)?, store.verify()?)))
        .await;
    let ((calls, last), verified) = match read {
        Ok(read) => read,
        Err(response) => return response,
    };
    let now = now();
    let kept: Vec<&Call> = calls
        .iter()
        .filter(|call| filters.keeps(call, now))
        .collect();
    let mut servers: Vec<&str> = calls.iter().map(|call| call.server.as_str()).collect();
    servers.sort_unstable();
    servers.dedup();
    let mut body = String::from("<h1>Log</h1>\n");
    body.push_str(&verification(&verified));
    let mut server_options = vec![("", "any server")];
    server_options.extend(servers.iter().map(|server| (*server, *server)));
    let _ = writeln!(
        body,
        "<form method=\"get\" action=\"/log\" class=\"filters\">{}<label>Tool <input name=\"tool\" value=\"{}\"></label>{}{}<button type=\"submit\">Filter</button></form>",
        select("server", "Server", &filters.server, &server_options),
        escape(&filters.tool),
        select(
            "verdict",
            "Verdict",
            &filters.verdict,
            &[
                ("", "any"),
                ("allow", "allow"),
                ("ask", "ask"),
                ("deny", "deny")
            ]
        ),
        select(
            "since",
            "Since",
            &filters.since,
            &[
                ("", "the beginning"),
                ("1h", "1 hour"),
                ("24h", "24 hours"),
                ("7d", "7 days")
            ]
        ),
    );
    // The time shown: the filter's, else the whole log's, and an hour at
    // least, so that a burst stands out against what came before.
    let from = filters.since_seconds().map_or_else(
        || kept.first().map_or(now, |call| call.at).min(now - 3_600),
        |since| now - since,
    );
    if kept.is_empty() {
        body.push_str("<p class=\"empty\">No call matches.</p>\n");
    } else {
        body.push_str(&chart(&kept, from, now));
    }
    let _ = writeln!(
        body,
        "<p class=\"lead\">{} call(s) match{}; newest first. New calls appear as they are logged.</p>",
        kept.len(),
        if kept.len() > SHOWN {
            ", the newest 500 shown"
        } else {
            ""
        }
    );
    let _ = writeln!(
        body,
        "<table class=\"log\"><thead><tr><th>#</th><th>Time</th><th>Server</th><th>Tool</th><th>Verdict</th><th>Reasons</th><th>Who let it through</th><th>Outcome</th></tr></thead>\n<tbody id=\"log-rows\" data-after=\"{last}\" data-server=\"{}\" data-tool=\"{}\" data-verdict=\"{}\">\n{}</tbody></table>",
        escape(&filters.server),
        escape(&filters.tool),
        escape(&filters.verdict),
        rows(&kept)
    );
    crate::html(html::page(
        "Log · hintgate console",
        View::Log,
        &console.secrets.csrf,
        &body,
    ))
}

/// `GET /api/log?after=N&...`: the live tail, the calls logged after `N`
/// that the filters keep, as rows rendered (escaped) on the server.
pub(crate) async fn api(
    State(console): State<Arc<Console>>,
    Query(filters): Query<Filters>,
) -> Response {
    let after = filters.after;
    let (calls, last) = match console.with_store(move |store| calls(store, after)).await {
        Ok(read) => read,
        Err(response) => return response,
    };
    let now = now();
    let kept: Vec<&Call> = calls
        .iter()
        .filter(|call| filters.keeps(call, now))
        .collect();
    let json = serde_json::json!({"last": last, "html": rows(&kept)});
    (
        [(CONTENT_TYPE, HeaderValue::from_static("application/json"))],
        json.to_string(),
    )
        .into_response()
}
