//! Wrapping and unwrapping one entry of a config file's text: span edits
//! inside the entry, every other byte kept.
//!
//! Each rewrite returns the entry's region before and after, which is all
//! that `unwrap` needs to give back the original bytes: it finds the same
//! region in the wrapped file, checks it still holds what `wrap` wrote and
//! puts the original text back.

use std::ops::Range;

use super::{ArgsInsert, Entry, Transport};

/// What a wrapped entry runs.
#[derive(Debug, Clone)]
pub struct WrapSpec {
    /// The absolute path of the `hintgate` binary.
    pub hintgate: String,
    /// `--trust` for the wrapped server, if chosen.
    pub trust: Option<&'static str>,
    /// More `hintgate run` flags for this entry (its sandbox table).
    pub extra: Vec<String>,
}

/// A rewritten file and the region that changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewrite {
    /// The whole new text.
    pub text: String,
    /// The region's text before.
    pub original: String,
    /// The region's text after.
    pub wrapped: String,
}

/// `text` with `entry` run through `hintgate run`, or why it cannot be.
pub fn wrap(text: &str, entry: &Entry, spec: &WrapSpec) -> Result<Rewrite, String> {
    let anchors = &entry.anchors;
    let mut run = vec![
        "run".to_owned(),
        "--name".to_owned(),
        server_name(&entry.name),
    ];
    if let Some(trust) = spec.trust {
        run.extend(["--trust".to_owned(), trust.to_owned()]);
    }
    run.extend(spec.extra.iter().cloned());
    let hintgate = quote(&spec.hintgate);
    let mut edits: Vec<(Range<usize>, String)> = Vec::new();
    match &entry.transport {
        Transport::Stdio { command, args, .. } => {
            let command_range = anchors
                .command
                .clone()
                .ok_or_else(|| "its command could not be located".to_owned())?;
            run.push("--".to_owned());
            run.push(command.clone());
            run.extend(args.iter().cloned());
            let array = array(&run);
            match &anchors.args {
                Some(args_range) if anchors.args_with_key => {
                    edits.push((args_range.clone(), format!("args: {array}")));
                }
                Some(args_range) => edits.push((args_range.clone(), array)),
                None => {
                    let at = command_range.end;
                    let insert = match &anchors.args_insert {
                        ArgsInsert::JsonProperty => format!(", \"args\": {array}"),
                        ArgsInsert::TomlInline => format!(", args = {array}"),
                        ArgsInsert::TomlLine(prefix) => {
                            format!("{}{prefix}{array}", newline_after(text, at))
                        }
                    };
                    edits.push((at..at, insert));
                }
            }
            edits.push((command_range, hintgate));
        }
        Transport::Http { url, headers } => {
            let url_range = anchors.url_property.clone().ok_or_else(|| {
                "this version wraps URL servers of JSON and YAML configs only".to_owned()
            })?;
            run.extend(["--url".to_owned(), url.clone()]);
            for (name, value) in headers {
                run.extend(["--header".to_owned(), format!("{name}: {value}")]);
            }
            let replacement = if let Some(separator) = &anchors.yaml_separator {
                format!("command: {hintgate}{separator}args: {}", array(&run))
            } else {
                // `args` goes on a line of its own when the url was on one.
                let separator = match line_indent(text, url_range.start) {
                    Some(indent) => format!(",{}{indent}", newline_after(text, url_range.start)),
                    None => ", ".to_owned(),
                };
                format!(
                    "\"command\": {hintgate}{separator}\"args\": {}",
                    array(&run)
                )
            };
            edits.push((url_range, replacement));
            if let Some(removal) = &anchors.headers_removal {
                edits.push((removal.clone(), String::new()));
            }
            if let Some(type_range) = &anchors.type_value {
                edits.push((type_range.clone(), quote("stdio")));
            }
        }
        Transport::Sse { .. } => {
            return Err(
                "it uses the legacy SSE transport, which `hintgate run` does not speak".to_owned(),
            );
        }
        Transport::Other { reason } => return Err(reason.clone()),
    }
    apply(text, &entry.region, edits)
}

/// `text` with the region of `entry` given back its `original` text, when
/// it still holds what `wrap` wrote (`wrapped`).
pub fn unwrap(text: &str, entry: &Entry, original: &str, wrapped: &str) -> Result<String, String> {
    let current = text
        .get(entry.region.clone())
        .ok_or_else(|| "its entry could not be located".to_owned())?;
    if current != wrapped {
        return Err("the entry was changed after it was wrapped".to_owned());
    }
    let mut out = text.to_owned();
    out.replace_range(entry.region.clone(), original);
    Ok(out)
}

/// A server name `hintgate run --name` accepts: letters, digits, `_` and
/// `-`, anything else made `-`.
pub fn server_name(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .map(|ch| {
            if ch.is_ascii_alphanumeric() || ch == '_' || ch == '-' {
                ch
            } else {
                '-'
            }
        })
        .collect();
    if cleaned.is_empty() {
        "server".to_owned()
    } else {
        cleaned
    }
}

/// Applies non-overlapping `edits`, all inside `region`.
fn apply(
    text: &str,
    region: &Range<usize>,
    mut edits: Vec<(Range<usize>, String)>,
) -> Result<Rewrite, String> {
    let original = text
        .get(region.clone())
        .ok_or_else(|| "its entry could not be located".to_owned())?
        .to_owned();
    edits.sort_by_key(|(range, _)| std::cmp::Reverse(range.start));
    let mut out = text.to_owned();
    let mut growth: isize = 0;
    let mut floor = usize::MAX;
    for (range, replacement) in edits {
        // INVARIANT: every edit lies inside the region and they do not
        // overlap, so the region's new end is its old end plus the growth.
        if range.start < region.start
            || range.end > region.end
            || range.end > floor
            || text.get(range.clone()).is_none()
        {
            return Err("its entry has an unexpected layout".to_owned());
        }
        floor = range.start;
        growth += isize::try_from(replacement.len()).unwrap_or(0)
            - isize::try_from(range.len()).unwrap_or(0);
        out.replace_range(range, &replacement);
    }
    let end = region
        .end
        .checked_add_signed(growth)
        .ok_or_else(|| "its entry has an unexpected layout".to_owned())?;
    let wrapped = out
        .get(region.start..end)
        .ok_or_else(|| "its entry has an unexpected layout".to_owned())?
        .to_owned();
    Ok(Rewrite {
        text: out,
        original,
        wrapped,
    })
}

/// A string literal valid in both JSON and TOML (basic string).
fn quote(text: &str) -> String {
    serde_json::to_string(text)
        .unwrap_or_default()
        .replace('\u{7f}', "\\u007f")
}

fn array(items: &[String]) -> String {
    let items: Vec<String> = items.iter().map(|item| quote(item)).collect();
    format!("[{}]", items.join(", "))
}

/// The whitespace before `at` on its line, when there is nothing else.
fn line_indent(text: &str, at: usize) -> Option<&str> {
    let before = text.get(..at)?;
    let line_start = before.rfind('\n').map_or(0, |idx| idx + 1);
    let indent = before.get(line_start..)?;
    indent
        .chars()
        .all(|ch| ch == ' ' || ch == '\t')
        .then_some(indent)
}

/// The line ending of the line `at` is on.
fn newline_after(text: &str, at: usize) -> &'static str {
    let rest = text.get(at..).unwrap_or_default();
    match rest.find('\n') {
        Some(idx) if idx > 0 && rest.as_bytes().get(idx - 1) == Some(&b'\r') => "\r\n",
        Some(_) => "\n",
        None if text.contains("\r\n") => "\r\n",
        None => "\n",
    }
}
