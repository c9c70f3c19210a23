//! Codex's `config.toml`: `[mcp_servers.NAME]` tables, read with
//! `toml_edit`, whose parsed document keeps byte spans.

use std::collections::BTreeMap;
use std::ops::Range;

use toml_edit::{Document, Item, TableLike};

use super::{Anchors, ArgsInsert, Entry, Scope, SyntaxError, Transport};

/// The servers under `mcp_servers`.
pub fn entries(text: &str, scope: Scope) -> Result<Vec<Entry>, SyntaxError> {
    let document = Document::parse(text).map_err(|error| {
        let offset = error.span().map_or(0, |span| span.start);
        SyntaxError::at(text, offset, error.message().trim().to_owned())
    })?;
    let Some(servers) = document.as_table().get("mcp_servers") else {
        return Ok(Vec::new());
    };
    let Some(servers) = servers.as_table_like() else {
        return Err(SyntaxError::at(
            text,
            servers.span().map_or(0, |span| span.start),
            "`mcp_servers` is not a table",
        ));
    };
    Ok(servers
        .iter()
        .map(|(name, item)| entry(text, name, item, scope))
        .collect())
}

fn entry(text: &str, name: &str, item: &Item, scope: Scope) -> Entry {
    let mut entry = Entry {
        scope,
        project: None,
        name: name.to_owned(),
        transport: Transport::Other {
            reason: "the entry is not a table".to_owned(),
        },
        region: item.span().unwrap_or(0..0),
        anchors: Anchors::default(),
    };
    let Some(table) = item.as_table_like() else {
        return entry;
    };
    if let Some(command_item) = table.get("command")
        && let Some(command) = command_item.as_str()
        && let Some(command_span) = command_item.span()
    {
        let args_item = table.get("args");
        let args_span = args_item.and_then(Item::span);
        entry.region = match &args_span {
            Some(args) => command_span.start.min(args.start)..command_span.end.max(args.end),
            None => command_span.clone(),
        };
        entry.anchors = Anchors {
            args_insert: if item.is_inline_table() {
                ArgsInsert::TomlInline
            } else {
                ArgsInsert::TomlLine(args_line_prefix(text, &command_span))
            },
            command: Some(command_span),
            args: args_span,
            ..Anchors::default()
        };
        entry.transport = Transport::Stdio {
            command: command.to_owned(),
            args: args_item
                .and_then(Item::as_array)
                .map(|args| {
                    args.iter()
                        .map(|arg| arg.as_str().unwrap_or("…").to_owned())
                        .collect()
                })
                .unwrap_or_default(),
            env: string_table(table.get("env")),
        };
        return entry;
    }
    if let Some(url) = table.get("url").and_then(Item::as_str) {
        let mut headers = string_table(table.get("http_headers"));
        if let Some(var) = table.get("bearer_token_env_var").and_then(Item::as_str) {
            headers.insert("Authorization".to_owned(), format!("Bearer ${{{var}}}"));
        }
        entry.transport = Transport::Http {
            url: url.to_owned(),
            headers,
        };
        return entry;
    }
    entry.transport = Transport::Other {
        reason: "neither a command nor a url".to_owned(),
    };
    entry
}

/// What starts a new `args = ` line that belongs to the same table as the
/// command: the command's line up to its value, with the last `command`
/// key segment made `args` (so `mcp_servers.fs.command = ` becomes
/// `mcp_servers.fs.args = `).
fn args_line_prefix(text: &str, command: &Range<usize>) -> String {
    let before = text.get(..command.start).unwrap_or_default();
    let line_start = before.rfind('\n').map_or(0, |idx| idx + 1);
    let prefix = before.get(line_start..).unwrap_or_default();
    match prefix.rfind("command") {
        Some(idx) => format!(
            "{}args{}",
            prefix.get(..idx).unwrap_or_default(),
            prefix.get(idx + "command".len()..).unwrap_or_default()
        ),
        None => "args = ".to_owned(),
    }
}

fn string_table(item: Option<&Item>) -> BTreeMap<String, String> {
    let Some(table) = item.and_then(Item::as_table_like) else {
        return BTreeMap::new();
    };
    table_strings(table)
}

fn table_strings(table: &dyn TableLike) -> BTreeMap<String, String> {
    table
        .iter()
        .map(|(key, value)| (key.to_owned(), value.as_str().unwrap_or("…").to_owned()))
        .collect()
}
