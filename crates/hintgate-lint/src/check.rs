//! The checks over a server's tool definitions.
//!
//! Each check looks at one tool (or, for duplicates and capability-dependent
//! listings, at the list) and pushes [`Finding`]s. The checks that guess at
//! meaning from words (names against hints, instructions to the model,
//! secrets) are written against the false positives other scanners are known
//! for: whole words only, the first verb of a name, the leading verbs of a
//! description's first sentence, and phrases rather than single words.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

use hintgate_policy::sanitize::{Removed, sanitize};
use hintgate_policy::tool::{DeclaredHints, Tool};
use regex::Regex;
use serde_json::Value;

use crate::finding::{Code, Finding};
use crate::words;

/// Descriptions longer than this many characters get `long-description`:
/// OpenAI's function-calling API rejects longer function descriptions, and
/// a description that long buries what the tool does.
pub const MAX_DESCRIPTION_CHARS: usize = 1024;

/// The longest tool name the spec allows.
pub const MAX_NAME_CHARS: usize = hintgate_policy::name::MAX_CHARS;

/// Everything lint knows about one server: its tools and what calling them showed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Listing {
    /// Every tool definition, as the server sent it, in listing order
    /// (merged over the listings with and without optional capabilities).
    pub tools: Vec<Value>,
    /// Names listed only when the client declared the optional capabilities.
    pub only_with_capabilities: Vec<String>,
    /// Names listed only when the client declared none of them.
    pub only_without_capabilities: Vec<String>,
    /// The outcome of calling read-only tools (`--call-read-only`).
    pub calls: Vec<CallCheck>,
    /// Every prompt the server listed (without the optional capabilities),
    /// as sent, in listing order: their names are checked like tool names.
    pub prompts: Vec<Value>,
}

/// What calling one read-only tool showed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallCheck {
    /// The tool's name.
    pub tool: String,
    /// What happened.
    pub outcome: CallOutcome,
}

/// The outcome of calling one read-only tool with an `outputSchema`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallOutcome {
    /// `structuredContent` satisfies the `outputSchema`.
    Conforms,
    /// It does not: the validator's first errors.
    Mismatch(Vec<String>),
    /// The result has no `structuredContent` although the tool has an `outputSchema`.
    NoStructuredContent,
    /// The call failed (an error, `isError`, no answer in time).
    Failed(String),
}

static INSTRUCTIONS: LazyLock<Vec<Regex>> = LazyLock::new(|| {
    [
        // Overriding what the model was told.
        r"(?i)\b(ignore|disregard|forget|override)\b[^.]{0,30}\b(previous|prior|above|earlier|all|any|other|system|your)\b[^.]{0,20}\b(instructions?|prompts?|rules|guidelines|directions)\b",
        // Hiding something from the user.
        r"(?i)\b(do not|don't|never|without)\b[^.]{0,20}\b(tell|telling|inform|informing|notify|notifying|mention|mentioning|reveal|revealing|alert|alerting|show|showing)\b[^.]{0,15}\b(the )?user\b",
        r"(?i)\bhide\b[^.]{0,40}\bfrom the user\b",
        r"(?i)\bthe user (must|should|need|needs to) not (know|see|be told)\b",
        r"(?i)\b(keep|keeping) (this|it) (a )?(secret|hidden|confidential)\b",
        // Steering the model to call other tools.
        r"(?i)\byou must (always )?(first )?(call|use|invoke|run|execute)\b",
        r"(?i)\b(before|after) (using|calling|running|invoking) (this|any other|any) tool,? (you )?(must|should|always|first)\b",
        r"(?i)\balways (call|invoke|run|use)\b[^.]{0,40}\b(before|first|after)\b",
        // Speaking to the model about its own instructions or permissions.
        r"(?i)\b(grants?|gives?) you\b",
        r"(?i)\byou (now )?have (access|permission)\b",
        r"(?i)\byou (are|were) (now )?(allowed|permitted|authorized|advised|instructed|told)\b",
        r"(?i)\b(originally|previously) you\b",
        r"(?i)\bsystem prompt\b",
        r"(?i)<\s*(important|system|instructions?)\s*>",
    ]
    .iter()
    .filter_map(|pattern| Regex::new(pattern).ok())
    .collect()
});

static SECRETS: LazyLock<Vec<Regex>> = LazyLock::new(|| {
    [
        r"~/\.ssh\b",
        r"\.ssh/",
        r"\bid_(rsa|dsa|ecdsa|ed25519)\b",
        r"(^|[\s'`(\[/])\.env(\.[a-z]+)?\b",
        r"\.aws/credentials\b",
        r"\.netrc\b",
        r"\.npmrc\b",
        r"\.pgpass\b",
        r"\.git-credentials\b",
        r"\.kube/config\b",
        r"\.docker/config\.json\b",
        r"/etc/shadow\b",
        r"(?i)\bprivate keys?\b",
        r"(?i)\benvironment variables\b",
        r"(?i)\bkeychain\b",
    ]
    .iter()
    .filter_map(|pattern| Regex::new(pattern).ok())
    .collect()
});

static NETWORK_DESCRIPTION: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(
        r"(?i)\b(from|on|over|across|to) the (internet|web)\b|\bweb search\b|\bsearch(es)? the web\b|\bhttps? requests?\b|\bsends? (an? )?(e-?mail|mail)s?\b|\bweb ?pages?\b|\burls?\b",
    )
    .ok()
});

/// Runs every check over a server's listing; findings come in tool order,
/// then by severity and code.
pub fn lint(listing: &Listing) -> Vec<Finding> {
    let mut findings = Vec::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let alike = look_alikes(&listing.tools);
    for value in &listing.tools {
        let name = value.get("name").and_then(Value::as_str);
        if let Some(name) = name {
            let count = seen.entry(name.to_owned()).or_default();
            *count += 1;
            if *count == 2 {
                findings.push(Finding::new(
                    Code::DuplicateToolName,
                    Some(name),
                    format!("more than one tool is named `{name}`"),
                    "give every tool of the server its own name; hosts call tools by name",
                ));
            }
            if *count > 1 {
                continue;
            }
        }
        let start = findings.len();
        if let Some(others) = name.and_then(|name| alike.get(name)) {
            let others: Vec<String> = others.iter().map(|other| format!("`{other}`")).collect();
            findings.push(Finding::new(
                Code::LookAlikeToolName,
                name,
                format!(
                    "the name looks the same as {} (case, `I` `l` `1`, `O` `0`, `rn` `m` or `vv` `w`), so a person could approve one for the other; hintgate lists and calls neither",
                    others.join(", ")
                ),
                "give each tool a name that reads unlike the others",
            ));
        }
        check_tool(value, &mut findings);
        findings
            .get_mut(start..)
            .unwrap_or_default()
            .sort_by_key(|f| (f.severity, f.code));
    }
    for name in &listing.only_with_capabilities {
        findings.push(Finding::new(
            Code::CapabilityDependentTool,
            Some(name),
            "listed only when the client declares elicitation, sampling or roots",
            "nothing to fix if this is meant; hosts without those capabilities do not see the tool, and a gateway must pin each listing",
        ));
    }
    for name in &listing.only_without_capabilities {
        findings.push(Finding::new(
            Code::CapabilityDependentTool,
            Some(name),
            "listed only when the client declares none of elicitation, sampling and roots",
            "nothing to fix if this is meant; hosts with those capabilities do not see the tool",
        ));
    }
    for call in &listing.calls {
        check_call(call, &mut findings);
    }
    check_prompts(&listing.prompts, &mut findings);
    findings
}

/// Prompt names follow the tool-name rule: the gateway prefixes and routes
/// them like tools, and leaves out a prompt whose name is not plain or
/// looks like another's, or whose arguments would not read one way only
/// ([`hintgate_policy::name::arguments_problem`]). A finding about a prompt names no tool; its
/// message starts with the prompt's name.
fn check_prompts(prompts: &[Value], findings: &mut Vec<Finding>) {
    let alike = look_alikes(prompts);
    let mut seen = BTreeSet::new();
    for prompt in prompts {
        let name = prompt.get("name").and_then(Value::as_str).unwrap_or("");
        // No tool field to carry it: the name is in the message, escaped.
        let shown = hintgate_policy::sanitize::escape_line(name);
        if let Some(problem) = hintgate_policy::name::arguments_problem(prompt.get("arguments")) {
            findings.push(Finding::new(
                Code::InvalidPromptArguments,
                None,
                format!("prompt `{shown}`: the prompt {problem}"),
                "give each argument a name of visible characters on one line that reads unlike the prompt's others; hintgate neither lists nor gets such a prompt",
            ));
        }
        if !seen.insert(name) {
            continue;
        }
        if let Some(problem) = hintgate_policy::name::problem(name) {
            findings.push(Finding::new(
                Code::InvalidPromptName,
                None,
                format!("prompt `{shown}`: the name {problem}"),
                "use 1 to 128 characters of A-Z, a-z, 0-9, `_`, `-` and `.`; hintgate neither lists nor gets such a prompt",
            ));
        } else if let Some(others) = alike.get(name) {
            let others: Vec<String> = others.iter().map(|other| format!("`{other}`")).collect();
            findings.push(Finding::new(
                Code::LookAlikePromptName,
                None,
                format!(
                    "prompt `{shown}`: the name looks the same as {} (case, `I` `l` `1`, `O` `0`, `rn` `m` or `vv` `w`); hintgate lists and gets neither",
                    others.join(", ")
                ),
                "give each prompt a name that reads unlike the others",
            ));
        }
    }
}

fn check_tool(value: &Value, findings: &mut Vec<Finding>) {
    let raw_name = value.get("name").and_then(Value::as_str);
    let tool = match Tool::from_value(value.clone()) {
        Ok(tool) => tool,
        Err(error) => {
            let detail = error.to_string();
            let detail = detail
                .strip_prefix("invalid tool definition: ")
                .unwrap_or(&detail);
            findings.push(Finding::new(
                Code::InvalidToolDefinition,
                raw_name,
                format!("the definition does not parse: {detail}"),
                "give every field the spec names its type: a string `name`, boolean hints, an object `annotations`",
            ));
            return;
        }
    };
    let name = Some(tool.name.as_str());
    check_name(&tool, findings);
    check_hints(&tool, findings);
    check_text(&tool, findings);
    check_schema(&tool, findings);
    if tool.title.is_none()
        && tool
            .annotations
            .as_ref()
            .is_none_or(|annotations| annotations.title.is_none())
    {
        findings.push(Finding::new(
            Code::MissingTitle,
            name,
            "no `title`: hosts and approval prompts show the raw name",
            "add a short human-readable `title`",
        ));
    }
}

/// The plain names (of tools, or of prompts) that look like other plain
/// names of the listing
/// ([`hintgate_policy::name::look_alike`]), each with the names it looks
/// like; the same name listed twice is `duplicate-tool-name`'s, and a name
/// that is not plain is `invalid-tool-name`'s.
fn look_alikes(listed: &[Value]) -> BTreeMap<String, Vec<String>> {
    let mut by_look: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for name in listed
        .iter()
        .filter_map(|entry| entry.get("name").and_then(Value::as_str))
        .filter(|name| hintgate_policy::name::problem(name).is_none())
    {
        let group = by_look
            .entry(hintgate_policy::name::look_alike(name))
            .or_default();
        if !group.contains(&name) {
            group.push(name);
        }
    }
    let mut alike = BTreeMap::new();
    for group in by_look.values().filter(|group| group.len() > 1) {
        for name in group {
            let others = group
                .iter()
                .filter(|other| *other != name)
                .map(|other| (*other).to_owned())
                .collect();
            alike.insert((*name).to_owned(), others);
        }
    }
    alike
}

fn check_name(tool: &Tool, findings: &mut Vec<Finding>) {
    // The gateway's own rule: a name that breaks it is neither listed nor
    // called through hintgate.
    if let Some(problem) = hintgate_policy::name::problem(&tool.name) {
        findings.push(Finding::new(
            Code::InvalidToolName,
            Some(tool.name.as_str()),
            format!("the name {problem}"),
            "use 1 to 128 characters of A-Z, a-z, 0-9, `_`, `-` and `.`",
        ));
    }
}

fn check_hints(tool: &Tool, findings: &mut Vec<Finding>) {
    let name = Some(tool.name.as_str());
    let declared: DeclaredHints = tool.declared();
    if declared.is_empty() {
        findings.push(Finding::new(
            Code::MissingAnnotations,
            name,
            "no hints: hosts must assume the tool writes, destroys, repeats with effect and reaches the open world",
            "declare `readOnlyHint`, `destructiveHint`, `idempotentHint` and `openWorldHint` in `annotations`",
        ));
    } else {
        let implicit = declared.implicit();
        if !implicit.is_empty() {
            let list = implicit
                .iter()
                .map(|hint| format!("`{hint}`"))
                .collect::<Vec<_>>()
                .join(", ");
            findings.push(Finding::new(
                Code::ImplicitHints,
                name,
                format!("{list} left implicit: hosts fall back to the spec's cautious defaults"),
                format!("declare {list} explicitly, as the tool really behaves"),
            ));
        }
    }
    if declared.read_only == Some(true) && declared.destructive == Some(true) {
        findings.push(Finding::new(
            Code::ReadOnlyDestructive,
            name,
            "`readOnlyHint: true` and `destructiveHint: true` contradict each other",
            "a tool that changes nothing cannot destroy anything: set `readOnlyHint: false`, or `destructiveHint: false` if it really only reads",
        ));
    }
    if declared.read_only == Some(true) && declared.idempotent == Some(false) {
        findings.push(Finding::new(
            Code::ReadOnlyNotIdempotent,
            name,
            "`readOnlyHint: true` with `idempotentHint: false`: a call that changes nothing can be repeated without effect",
            "set `idempotentHint: true`, or `readOnlyHint: false` if a call does change something",
        ));
    }
    if declared.destructive == Some(false) {
        let from_name = words::destructive_name_verb(&tool.name).map(|verb| ("name", verb));
        let from_description = || {
            tool.description
                .as_deref()
                .and_then(words::destructive_description_verb)
                .map(|verb| ("description", verb))
        };
        if let Some((place, verb)) = from_name.or_else(from_description) {
            findings.push(Finding::new(
                Code::DestructiveNameNotDestructive,
                name,
                format!("`destructiveHint: false`, but its {place} says `{verb}`"),
                "set `destructiveHint: true` if a call can delete, overwrite, cancel, send or pay; rename the tool if it does not",
            ));
        }
    }
    if declared.read_only == Some(true) {
        let from_name = words::write_name_verb(&tool.name)
            .map(|verb| format!("`readOnlyHint: true`, but its name says `{verb}`"));
        let from_mode = || {
            mode_argument(tool).map(|(argument, value)| {
                format!("`readOnlyHint: true`, but its argument `{argument}` can be `{value}`")
            })
        };
        if let Some(message) = from_name.or_else(from_mode) {
            findings.push(Finding::new(
                Code::WriteNameReadOnly,
                name,
                message,
                "set `readOnlyHint: false` if any call can change something; split a read/write tool into two tools",
            ));
        }
    }
    if declared.open_world == Some(false)
        && let Some(evidence) = network_evidence(tool)
    {
        findings.push(Finding::new(
            Code::NetworkToolClosedWorld,
            name,
            format!("`openWorldHint: false`, but {evidence}"),
            "set `openWorldHint: true`: what the tool reaches is outside the server's own domain",
        ));
    }
}

/// An argument of the input schema that selects a write: an enum value
/// with a write verb in it (`mode: "write"`, `"read_write"`), or a boolean
/// named for one (`overwrite`, `create_if_missing`). Only plain verb forms
/// count: `status: "deleted"` and `include_deleted` filter what is read.
fn mode_argument(tool: &Tool) -> Option<(String, String)> {
    let properties = tool.input_schema.as_ref()?.get("properties")?.as_object()?;
    for (argument, schema) in properties {
        if let Some(values) = schema.get("enum").and_then(Value::as_array) {
            for value in values.iter().filter_map(Value::as_str) {
                let writes = words::name_words(value)
                    .iter()
                    .any(|word| words::plain_write_verb(word).is_some());
                if writes {
                    return Some((argument.clone(), value.to_owned()));
                }
            }
        }
        let is_boolean = schema.get("type").and_then(Value::as_str) == Some("boolean");
        let argument_words = words::name_words(argument);
        if is_boolean
            && let Some(verb) = argument_words
                .first()
                .filter(|word| words::plain_write_verb(word).is_some())
        {
            return Some((argument.clone(), format!("true (`{verb}`)")));
        }
    }
    None
}

/// Why a tool reaches outside: a URL argument, a name about the web or
/// mail, or a first sentence that says so.
fn network_evidence(tool: &Tool) -> Option<String> {
    if let Some(properties) = tool
        .input_schema
        .as_ref()
        .and_then(|schema| schema.get("properties"))
        .and_then(Value::as_object)
    {
        for (argument, schema) in properties {
            let argument_words = words::name_words(argument);
            let named_url = argument_words
                .iter()
                .any(|word| matches!(word.as_str(), "url" | "urls" | "href" | "webhook"));
            let local = argument_words
                .iter()
                .any(|word| matches!(word.as_str(), "resource" | "file" | "path"));
            let uri_format = schema
                .get("format")
                .and_then(Value::as_str)
                .is_some_and(|format| matches!(format, "uri" | "iri" | "url"));
            if named_url || (uri_format && !local) {
                return Some(format!("it takes a URL (`{argument}`)"));
            }
        }
    }
    let name_words = words::name_words(&tool.name);
    if let Some(word) = name_words.iter().find(|word| {
        matches!(
            word.as_str(),
            "web" | "internet" | "http" | "https" | "url" | "email" | "mail" | "smtp" | "webhook"
        )
    }) {
        return Some(format!("its name says `{word}`"));
    }
    let first = words::first_sentence(tool.description.as_deref().unwrap_or(""));
    let found = NETWORK_DESCRIPTION.as_ref()?.find(first)?;
    Some(format!("its description says `{}`", found.as_str()))
}

/// Every text of a tool a model or a person reads: title, description and
/// the strings of the input schema (descriptions, titles, enum values,
/// defaults), each with where it sits.
fn texts(tool: &Tool) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if let Some(title) = &tool.title {
        out.push(("title".to_owned(), title.clone()));
    }
    if let Some(title) = tool.annotations.as_ref().and_then(|a| a.title.as_ref()) {
        out.push(("annotations.title".to_owned(), title.clone()));
    }
    if let Some(description) = &tool.description {
        out.push(("description".to_owned(), description.clone()));
    }
    if let Some(schema) = &tool.input_schema {
        schema_strings(schema, "inputSchema", &mut out);
    }
    out
}

fn schema_strings(value: &Value, path: &str, out: &mut Vec<(String, String)>) {
    match value {
        Value::String(text) => out.push((path.to_owned(), text.clone())),
        Value::Array(items) => {
            for item in items {
                schema_strings(item, path, out);
            }
        }
        Value::Object(object) => {
            for (key, item) in object {
                // Property names are read by the model too.
                if path.ends_with(".properties") || path.ends_with("properties") {
                    out.push((format!("{path} key"), key.clone()));
                }
                schema_strings(item, &format!("{path}.{key}"), out);
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

fn check_text(tool: &Tool, findings: &mut Vec<Finding>) {
    let name = Some(tool.name.as_str());
    let all = texts(tool);

    // Hidden characters anywhere, the name included.
    let mut hidden: BTreeMap<Removed, usize> = BTreeMap::new();
    let mut places: Vec<String> = Vec::new();
    let name_text = ("name".to_owned(), tool.name.clone());
    for (place, text) in std::iter::once(&name_text).chain(all.iter()) {
        let cleaned = sanitize(text);
        if cleaned.is_clean() {
            continue;
        }
        for (kind, count) in cleaned.removed {
            *hidden.entry(kind).or_default() += count;
        }
        let place = place.split(" key").next().unwrap_or(place).to_owned();
        if !places.contains(&place) {
            places.push(place);
        }
    }
    if !hidden.is_empty() {
        let kinds = hidden
            .iter()
            .map(|(kind, count)| format!("{count} {}", removed_name(*kind)))
            .collect::<Vec<_>>()
            .join(", ");
        let places = places
            .iter()
            .map(|place| format!("`{place}`"))
            .collect::<Vec<_>>()
            .join(", ");
        findings.push(Finding::new(
            Code::HiddenCharacters,
            name,
            format!("hidden characters ({kinds}) in {places}"),
            "remove ANSI escapes, control, bidi, zero-width and tag characters: a person does not see them, the model does",
        ));
    }

    // Instructions to the model: the description, titles and schema texts.
    let instruction = all.iter().find_map(|(place, text)| {
        let text = sanitize(text).text;
        INSTRUCTIONS
            .iter()
            .find_map(|pattern| {
                pattern
                    .find(&text)
                    .map(|m| sentence_around(&text, m.start(), m.end()).to_owned())
            })
            .map(|phrase| (place.clone(), phrase))
    });
    if let Some((place, phrase)) = instruction {
        findings.push(Finding::new(
            Code::InstructionsToModel,
            name,
            format!("`{place}` speaks to the model: \"{}\"", one_line(&phrase)),
            "describe what the tool does and returns; never tell the model what to believe, what else to call or what to keep from the user",
        ));
    }

    // References to secrets.
    let mut secrets: Vec<String> = Vec::new();
    for (_, text) in &all {
        for pattern in SECRETS.iter() {
            if let Some(found) = pattern.find(text) {
                let found = found
                    .as_str()
                    .trim_start_matches([' ', '\'', '`', '(', '[', '/']);
                let found = one_line(found);
                if !secrets.contains(&found) {
                    secrets.push(found);
                }
            }
        }
    }
    if !secrets.is_empty() {
        let list = secrets
            .iter()
            .map(|secret| format!("`{secret}`"))
            .collect::<Vec<_>>()
            .join(", ");
        findings.push(Finding::new(
            Code::SecretReference,
            name,
            format!(
                "refers to secrets ({list}): what the tool returns reaches the model, and from there any tool that reaches the open world"
            ),
            "do not read or return secrets through a tool; if it must, narrow it to what it needs and say so plainly",
        ));
    }

    match tool.description.as_deref().map(str::trim) {
        None | Some("") => findings.push(Finding::new(
            Code::MissingDescription,
            name,
            "no description: the model and the person asked to approve a call learn nothing of what it does",
            "add a description of what the tool does, what it changes and what it returns",
        )),
        Some(description) => {
            let length = description.chars().count();
            if length > MAX_DESCRIPTION_CHARS {
                findings.push(Finding::new(
                    Code::LongDescription,
                    name,
                    format!(
                        "the description is {length} characters long, over {MAX_DESCRIPTION_CHARS}"
                    ),
                    "keep the description to what the tool does; move details into argument descriptions",
                ));
            }
        }
    }
}

fn check_schema(tool: &Tool, findings: &mut Vec<Finding>) {
    let name = Some(tool.name.as_str());
    let problem = match &tool.input_schema {
        None => Some("no `inputSchema`".to_owned()),
        Some(Value::Object(schema)) => match schema.get("type") {
            Some(Value::String(kind)) if kind == "object" => None,
            Some(kind) => Some(format!("`inputSchema` has `type: {kind}`, not `object`")),
            None => Some("`inputSchema` has no `type: \"object\"`".to_owned()),
        },
        Some(other) => Some(format!(
            "`inputSchema` is {}, not an object schema",
            kind_of(other)
        )),
    };
    if let Some(problem) = problem {
        findings.push(Finding::new(
            Code::InputSchemaNotObject,
            name,
            problem,
            "give the tool an `inputSchema` with `\"type\": \"object\"`; one without arguments uses `{\"type\": \"object\", \"additionalProperties\": false}`",
        ));
        return;
    }
    let Some(schema) = tool.input_schema.as_ref() else {
        return;
    };
    let properties = schema.get("properties").and_then(Value::as_object);
    let needs_required = properties.is_some_and(|properties| {
        properties
            .values()
            .any(|property| property.get("default").is_none())
    });
    if needs_required && schema.get("required").is_none() {
        findings.push(Finding::new(
            Code::MissingRequired,
            name,
            "`inputSchema` has arguments without defaults but no `required` list: the model cannot tell which it must give",
            "add `required` with the arguments a call needs (an empty list if none is)",
        ));
    }
}

fn check_call(call: &CallCheck, findings: &mut Vec<Finding>) {
    let name = Some(call.tool.as_str());
    match &call.outcome {
        CallOutcome::Conforms => {}
        CallOutcome::Mismatch(errors) => findings.push(Finding::new(
            Code::OutputSchemaMismatch,
            name,
            format!(
                "`structuredContent` does not satisfy `outputSchema`: {}",
                errors
                    .iter()
                    .map(|error| one_line(error))
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
            "return `structuredContent` that satisfies the declared `outputSchema`, or fix the schema",
        )),
        CallOutcome::NoStructuredContent => findings.push(Finding::new(
            Code::OutputSchemaMismatch,
            name,
            "the tool declares an `outputSchema` but its result has no `structuredContent`",
            "return `structuredContent` with every result, as the spec requires of a tool with an `outputSchema`",
        )),
        CallOutcome::Failed(reason) => findings.push(Finding::new(
            Code::ReadOnlyCallFailed,
            name,
            format!("calling it without arguments failed: {}", one_line(reason)),
            "nothing to fix if the tool needs setup; a read-only tool should answer a call with its defaults",
        )),
    }
}

fn removed_name(kind: Removed) -> &'static str {
    match kind {
        Removed::AnsiEscape => "ANSI escape",
        Removed::Control => "control",
        Removed::Bidi => "bidi",
        Removed::ZeroWidth => "zero-width",
        Removed::Tag => "tag",
    }
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The sentence of `text` that holds the bytes `start..end`.
fn sentence_around(text: &str, start: usize, end: usize) -> &str {
    let is_stop = |ch: char| matches!(ch, '.' | '!' | '?' | '\n');
    let begin = text
        .get(..start)
        .and_then(|before| before.rfind(is_stop))
        .map_or(0, |idx| idx + 1);
    let finish = text
        .get(end..)
        .and_then(|after| after.find(is_stop))
        .map_or(text.len(), |idx| end + idx + 1);
    text.get(begin..finish).map_or(text, str::trim)
}

/// Text on one line, cut to 160 characters, invisible characters escaped.
fn one_line(text: &str) -> String {
    let text = hintgate_policy::sanitize::escape_invisible(text);
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() > 160 {
        let cut: String = flat.chars().take(159).collect();
        format!("{cut}…")
    } else {
        flat
    }
}

#[cfg(test)]
mod tests;
