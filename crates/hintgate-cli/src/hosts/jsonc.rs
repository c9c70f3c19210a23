//! The JSON family of host configs, read tolerantly (comments, trailing
//! commas) with `jsonc-parser`, whose syntax tree keeps byte ranges.

use std::collections::BTreeMap;
use std::ops::Range;

use jsonc_parser::ast::{Object, ObjectProp, Value};
use jsonc_parser::common::Ranged;
use jsonc_parser::{CollectOptions, ParseOptions, parse_to_ast};

use super::{Anchors, Entry, Host, Scope, SyntaxError, Transport};

/// The servers under `key` of the root object, or, with no key, Claude
/// Code's `~/.claude.json`: `mcpServers` (user scope) and
/// `projects.<path>.mcpServers` (local scope).
pub fn entries(
    host: Host,
    text: &str,
    key: Option<&str>,
    scope: Scope,
) -> Result<Vec<Entry>, SyntaxError> {
    let parsed = parse_to_ast(text, &CollectOptions::default(), &ParseOptions::default()).map_err(
        |error| {
            SyntaxError::at(
                text,
                error.range().start,
                lowercase(&error.kind().to_string()),
            )
        },
    )?;
    let Some(root) = parsed.value else {
        // An empty file (or one with only comments) holds no servers.
        return Ok(Vec::new());
    };
    let Value::Object(root) = root else {
        return Err(SyntaxError::at(
            text,
            root.start(),
            "the file is not a JSON object",
        ));
    };
    let mut out = Vec::new();
    let servers_key = key.unwrap_or("mcpServers");
    collect(host, text, &root, servers_key, scope, None, &mut out)?;
    if key.is_none()
        && let Some(projects) = root.get("projects")
    {
        let Value::Object(projects) = &projects.value else {
            return Err(SyntaxError::at(
                text,
                projects.value.start(),
                "`projects` is not an object",
            ));
        };
        for project in &projects.properties {
            if let Value::Object(settings) = &project.value {
                collect(
                    host,
                    text,
                    settings,
                    "mcpServers",
                    Scope::Local,
                    Some(project.name.as_str().to_owned()),
                    &mut out,
                )?;
            }
        }
    }
    Ok(out)
}

fn collect(
    host: Host,
    text: &str,
    parent: &Object<'_>,
    key: &str,
    scope: Scope,
    project: Option<String>,
    out: &mut Vec<Entry>,
) -> Result<(), SyntaxError> {
    let Some(servers) = parent.get(key) else {
        return Ok(());
    };
    let Value::Object(servers) = &servers.value else {
        return Err(SyntaxError::at(
            text,
            servers.value.start(),
            format!("`{key}` is not an object"),
        ));
    };
    for server in &servers.properties {
        out.push(entry(host, server, scope, project.clone()));
    }
    Ok(())
}

fn entry(host: Host, server: &ObjectProp<'_>, scope: Scope, project: Option<String>) -> Entry {
    let value = &server.value;
    let region = range(value.range());
    let name = server.name.as_str().to_owned();
    let Value::Object(object) = value else {
        return Entry {
            scope,
            project,
            name,
            transport: Transport::Other {
                reason: "the entry is not an object".to_owned(),
            },
            region,
            anchors: Anchors::default(),
        };
    };
    let mut anchors = Anchors {
        type_value: object.get("type").map(|prop| range(prop.value.range())),
        ..Anchors::default()
    };
    let kind = object
        .get_string("type")
        .map(|kind| kind.value.to_string())
        .unwrap_or_default();

    // A command: `command` (a string), or Zed's older nested
    // `command: {path, args, env}`.
    let holder = match object.get("command").map(|prop| &prop.value) {
        Some(Value::Object(nested)) => Some((nested, "path")),
        Some(Value::StringLit(_)) => Some((object, "command")),
        _ => None,
    };
    if let Some((holder, command_key)) = holder
        && let Some(command) = holder.get_string(command_key)
    {
        anchors.command = Some(range(command.range));
        anchors.args = holder.get("args").map(|prop| range(prop.value.range()));
        let env_holder = holder
            .get_object("env")
            .or_else(|| object.get_object("env"));
        let transport = Transport::Stdio {
            command: command.value.to_string(),
            args: holder
                .get_array("args")
                .map(|args| args.elements.iter().map(scalar_text).collect())
                .unwrap_or_default(),
            env: env_holder.map(string_map).unwrap_or_default(),
        };
        return Entry {
            scope,
            project,
            name,
            transport,
            region,
            anchors,
        };
    }

    // A URL. Gemini CLI: `httpUrl` is Streamable HTTP and `url` is SSE;
    // Windsurf: `serverUrl`; the rest: `url`, with `type` saying which.
    let url_prop = ["httpUrl", "serverUrl", "url"]
        .into_iter()
        .find_map(|key| object.get(key).map(|prop| (key, prop)));
    if let Some((url_key, prop)) = url_prop
        && let Value::StringLit(url) = &prop.value
    {
        let sse = kind == "sse" || (host == Host::GeminiCli && url_key == "url" && kind != "http");
        let url = url.value.to_string();
        let transport = if sse {
            Transport::Sse { url }
        } else {
            anchors.url_property = Some(range(prop.range));
            anchors.headers_removal = removal(object, "headers");
            Transport::Http {
                url,
                headers: object
                    .get_object("headers")
                    .map(string_map)
                    .unwrap_or_default(),
            }
        };
        return Entry {
            scope,
            project,
            name,
            transport,
            region,
            anchors,
        };
    }

    let reason = if object.get("source").is_some() || object.get("settings").is_some() {
        "started by an editor extension, not by a command in this file"
    } else {
        "neither a command nor a url"
    };
    Entry {
        scope,
        project,
        name,
        transport: Transport::Other {
            reason: reason.to_owned(),
        },
        region,
        anchors,
    }
}

/// The range that removes property `key` of `object` with one separator:
/// up to the next property's start, or, for the last one, from the previous
/// property's end.
fn removal(object: &Object<'_>, key: &str) -> Option<Range<usize>> {
    let idx = object
        .properties
        .iter()
        .position(|prop| prop.name.as_str() == key)?;
    let prop = object.properties.get(idx)?;
    if let Some(next) = object.properties.get(idx + 1) {
        return Some(prop.range.start..next.range.start);
    }
    match idx
        .checked_sub(1)
        .and_then(|prev| object.properties.get(prev))
    {
        Some(prev) => Some(prev.range.end..prop.range.end),
        None => Some(range(prop.range)),
    }
}

fn string_map(object: &Object<'_>) -> BTreeMap<String, String> {
    object
        .properties
        .iter()
        .map(|prop| (prop.name.as_str().to_owned(), scalar_text(&prop.value)))
        .collect()
}

/// A string's value; another scalar as written; an object or array as `…`.
fn scalar_text(value: &Value<'_>) -> String {
    match value {
        Value::StringLit(lit) => lit.value.to_string(),
        Value::NumberLit(lit) => lit.value.to_owned(),
        Value::BooleanLit(lit) => lit.value.to_string(),
        Value::NullKeyword(_) => "null".to_owned(),
        Value::Object(_) | Value::Array(_) => "…".to_owned(),
    }
}

fn range(range: jsonc_parser::common::Range) -> Range<usize> {
    range.start..range.end
}

fn lowercase(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}
