//! Continue's YAML configs: `config.yaml` and the block files of
//! `.continue/mcpServers/`, whose `mcpServers` is a sequence of mappings
//! (`name`, `command`, `args`, `env`, or `type` and `url`). Read with
//! `saphyr-parser`'s events, whose markers give the byte ranges `wrap` edits.

use std::collections::BTreeMap;
use std::ops::Range;

use saphyr_parser::{Event, Parser, ScalarStyle, ScanError};

use super::{Anchors, ArgsInsert, Entry, Scope, SyntaxError, Transport};

/// A node of the document, with its byte range in the text.
#[derive(Debug)]
struct Node {
    value: Value,
    span: Range<usize>,
}

#[derive(Debug)]
enum Value {
    Scalar(String),
    Sequence(Vec<Node>),
    /// A mapping; `flow` for `{...}`.
    Mapping {
        pairs: Vec<(Node, Node)>,
        flow: bool,
    },
    /// An alias, which this reader does not follow.
    Alias,
}

/// The servers of the `mcpServers` sequence.
pub fn entries(text: &str, scope: Scope) -> Result<Vec<Entry>, SyntaxError> {
    let Some(root) = parse(text)? else {
        return Ok(Vec::new());
    };
    let Some(servers) = get(&root, "mcpServers") else {
        return Ok(Vec::new());
    };
    let Value::Sequence(items) = &servers.value else {
        return Err(SyntaxError::at(
            text,
            servers.span.start,
            "`mcpServers` is not a sequence",
        ));
    };
    Ok(items
        .iter()
        .enumerate()
        .map(|(index, item)| entry(text, index, item, scope))
        .collect())
}

fn entry(text: &str, index: usize, item: &Node, scope: Scope) -> Entry {
    let name = get(item, "name")
        .and_then(scalar)
        .map_or_else(|| format!("server-{}", index + 1), str::to_owned);
    let mut entry = Entry {
        scope,
        project: None,
        name,
        transport: Transport::Other {
            reason: "the entry is not a mapping".to_owned(),
        },
        // The whole mapping: a URL server wrapped is a command server, and
        // unwrap finds the same region either way.
        region: item.span.clone(),
        anchors: Anchors::default(),
    };
    let Value::Mapping { pairs, flow } = &item.value else {
        return entry;
    };
    let key_of = |wanted: &str| {
        pairs
            .iter()
            .find(|(key, _)| scalar(key) == Some(wanted))
            .map(|(key, value)| (key, value))
    };
    if let Some((command_key, command_node)) = key_of("command")
        && let Some(command) = scalar(command_node)
    {
        let args = key_of("args");
        // The args range spans key to value, so a block sequence becomes a
        // flow sequence right after `args:` whatever its indentation.
        let args_span = args.map(|(key, value)| key.span.start..value.span.end);
        let command_span = command_node.span.clone();
        entry.anchors = Anchors {
            args_insert: if *flow {
                ArgsInsert::JsonProperty
            } else {
                ArgsInsert::TomlLine(format!("{}args: ", key_indent(text, command_key)))
            },
            command: Some(command_span),
            args: args_span,
            args_with_key: true,
            ..Anchors::default()
        };
        entry.transport = Transport::Stdio {
            command: command.to_owned(),
            args: match args.map(|(_, value)| &value.value) {
                Some(Value::Sequence(items)) => items
                    .iter()
                    .map(|arg| scalar(arg).unwrap_or("…").to_owned())
                    .collect(),
                _ => Vec::new(),
            },
            env: strings(get(item, "env")),
        };
        return entry;
    }
    if let Some((url_key, url_node)) = key_of("url")
        && let Some(url) = scalar(url_node)
    {
        let kind = get(item, "type");
        if kind.and_then(scalar) == Some("sse") {
            entry.transport = Transport::Sse {
                url: url.to_owned(),
            };
            return entry;
        }
        let headers = strings(get(item, "requestOptions").and_then(|opts| get(opts, "headers")));
        let url_property = url_key.span.start..url_node.span.end;
        let type_value = kind.map(|node| node.span.clone());
        entry.anchors = Anchors {
            url_property: Some(url_property),
            type_value,
            yaml_separator: Some(if *flow {
                ", ".to_owned()
            } else {
                format!(
                    "{}{}",
                    newline_at(text, url_node.span.end),
                    key_indent(text, url_key)
                )
            }),
            ..Anchors::default()
        };
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

/// Spaces as wide as the text before `key` on its line (`  - ` counts).
fn key_indent(text: &str, key: &Node) -> String {
    let before = text.get(..key.span.start).unwrap_or_default();
    let line_start = before.rfind('\n').map_or(0, |idx| idx + 1);
    " ".repeat(before.get(line_start..).unwrap_or_default().chars().count())
}

/// The line ending used at `at` (`\r\n` or `\n`).
fn newline_at(text: &str, at: usize) -> &'static str {
    let rest = text.get(at..).unwrap_or_default();
    match rest.find('\n') {
        Some(idx) if idx > 0 && rest.as_bytes().get(idx - 1) == Some(&b'\r') => "\r\n",
        _ => "\n",
    }
}

fn get<'a>(node: &'a Node, wanted: &str) -> Option<&'a Node> {
    let Value::Mapping { pairs, .. } = &node.value else {
        return None;
    };
    pairs
        .iter()
        .find(|(key, _)| scalar(key) == Some(wanted))
        .map(|(_, value)| value)
}

fn scalar(node: &Node) -> Option<&str> {
    match &node.value {
        Value::Scalar(text) => Some(text),
        _ => None,
    }
}

fn strings(node: Option<&Node>) -> BTreeMap<String, String> {
    let Some(Node {
        value: Value::Mapping { pairs, .. },
        ..
    }) = node
    else {
        return BTreeMap::new();
    };
    pairs
        .iter()
        .filter_map(|(key, value)| {
            Some((
                scalar(key)?.to_owned(),
                scalar(value).unwrap_or("…").to_owned(),
            ))
        })
        .collect()
}

/// The first document's root node, `None` for an empty file.
fn parse(text: &str) -> Result<Option<Node>, SyntaxError> {
    let mut reader = Reader {
        text,
        bytes: text
            .char_indices()
            .map(|(idx, _)| idx)
            .chain([text.len()])
            .collect(),
        parser: Parser::new_from_str(text),
    };
    loop {
        match reader.next()? {
            None | Some((Event::StreamEnd, _)) => return Ok(None),
            Some((Event::StreamStart | Event::DocumentStart(_), _)) => {}
            Some((event, span)) => return reader.node(event, span).map(Some),
        }
    }
}

struct Reader<'a> {
    text: &'a str,
    /// The byte offset of each character index (and of the end).
    bytes: Vec<usize>,
    parser: Parser<'a, saphyr_parser::StrInput<'a>>,
}

impl<'a> Reader<'a> {
    fn next(&mut self) -> Result<Option<(Event<'a>, Range<usize>)>, SyntaxError> {
        match self.parser.next_event() {
            None => Ok(None),
            Some(Ok((event, span))) => {
                let range = self.byte(span.start.index())..self.byte(span.end.index());
                Ok(Some((event, range)))
            }
            Some(Err(error)) => Err(self.error(&error)),
        }
    }

    fn byte(&self, char_index: usize) -> usize {
        self.bytes
            .get(char_index)
            .copied()
            .unwrap_or(self.text.len())
    }

    fn error(&self, error: &ScanError) -> SyntaxError {
        SyntaxError {
            line: error.marker().line(),
            column: error.marker().col() + 1,
            message: error.info().to_owned(),
        }
    }

    fn node(&mut self, event: Event<'a>, span: Range<usize>) -> Result<Node, SyntaxError> {
        match event {
            Event::Scalar(value, style, ..) => Ok(Node {
                span: span.start..scalar_end(self.text, &span, style),
                value: Value::Scalar(value.into_owned()),
            }),
            Event::SequenceStart(..) => {
                let flow = self
                    .text
                    .get(span.start..)
                    .is_some_and(|rest| rest.starts_with('['));
                let mut items = Vec::new();
                let mut end = span.start;
                loop {
                    let Some((event, next)) = self.next()? else {
                        return Err(SyntaxError::at(
                            self.text,
                            span.start,
                            "unterminated sequence",
                        ));
                    };
                    if matches!(event, Event::SequenceEnd) {
                        if flow {
                            end = next.end;
                        }
                        break;
                    }
                    let item = self.node(event, next)?;
                    end = end.max(item.span.end);
                    items.push(item);
                }
                Ok(Node {
                    value: Value::Sequence(items),
                    span: span.start..end,
                })
            }
            Event::MappingStart(..) => {
                let flow = self
                    .text
                    .get(span.start..)
                    .is_some_and(|rest| rest.starts_with('{'));
                let mut pairs = Vec::new();
                let mut end = span.start;
                loop {
                    let Some((event, next)) = self.next()? else {
                        return Err(SyntaxError::at(
                            self.text,
                            span.start,
                            "unterminated mapping",
                        ));
                    };
                    if matches!(event, Event::MappingEnd) {
                        if flow {
                            end = next.end;
                        }
                        break;
                    }
                    let key = self.node(event, next)?;
                    let Some((event, next)) = self.next()? else {
                        return Err(SyntaxError::at(
                            self.text,
                            key.span.start,
                            "a key without a value",
                        ));
                    };
                    let value = self.node(event, next)?;
                    end = end.max(value.span.end);
                    pairs.push((key, value));
                }
                Ok(Node {
                    value: Value::Mapping { pairs, flow },
                    span: span.start..end,
                })
            }
            _ => Ok(Node {
                value: Value::Alias,
                span,
            }),
        }
    }
}

/// Where a scalar's text ends: the parser's span of a quoted scalar can run
/// on over the spaces and comment after it.
fn scalar_end(text: &str, span: &Range<usize>, style: ScalarStyle) -> usize {
    let bytes = text.as_bytes();
    let mut idx = span.start + 1;
    match style {
        ScalarStyle::DoubleQuoted => {
            while let Some(&byte) = bytes.get(idx) {
                match byte {
                    b'\\' => idx += 2,
                    b'"' => return idx + 1,
                    _ => idx += 1,
                }
            }
            span.end
        }
        ScalarStyle::SingleQuoted => {
            while let Some(&byte) = bytes.get(idx) {
                if byte == b'\'' {
                    if bytes.get(idx + 1) == Some(&b'\'') {
                        idx += 2;
                        continue;
                    }
                    return idx + 1;
                }
                idx += 1;
            }
            span.end
        }
        _ => {
            let body = text.get(span.clone()).unwrap_or_default();
            span.start + body.trim_end().len()
        }
    }
}
