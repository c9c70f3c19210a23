//! A small MCP client for `hintgate lint`: connect to one server, list its
//! tools, optionally call its read-only tools, and hang up.
//!
//! It reuses the gateway's transports ([`Process`] for a command,
//! [`HttpLink`] for a Streamable HTTP URL) and its way of finding a
//! server's era: `server/discover` first (a result naming 2026-07-28 means
//! the modern era), and the legacy `initialize` when the probe is refused or
//! unanswered. Tools are listed twice, each time in a session of its own:
//! once declaring no optional client capability, once declaring
//! elicitation, sampling and roots, since some servers list different tools
//! to such clients. The server's own requests are answered the way a
//! client without a person would (no roots, elicitation declined, no
//! sampling).
//!
//! Everything runs under one deadline; a server that hangs, crashes, or
//! writes something that is not JSON-RPC ends the probe with a
//! [`ProbeError`] that says which step failed, never a hang or a panic.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use hintgate_lint::{CallCheck, CallOutcome, Listing};
use hintgate_policy::config::SandboxConfig;
use serde_json::{Value, json};

use tokio::time::Instant;

use crate::event::{Event, UpstreamEvent};
use crate::frame;
use crate::upstream::{Link, Process, Spawn};
use crate::upstream_http::HttpLink;
use crate::versions::{LEGACY_VERSIONS, MODERN_VERSION};

/// How long the era probe may take before the server is taken for a legacy one.
const DISCOVER_TIMEOUT: Duration = Duration::from_secs(3);

/// The largest message read from a server (as the gateway's default).
const MAX_MESSAGE: usize = 16 * 1024 * 1024;

/// At most this many pages of a list (`tools/list`, `prompts/list`), so a
/// server that always sends a next cursor cannot keep the probe forever.
const MAX_PAGES: usize = 1000;

/// Which server to probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A command that speaks MCP on stdio.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Variables added to its environment (a host config's `env`).
        env: BTreeMap<String, String>,
        /// The sandbox to start it in (a configured server's table): the
        /// same plan, and the same refusal where the kernel cannot enforce
        /// it, as the gateway's.
        sandbox: Option<SandboxConfig>,
    },
    /// A Streamable HTTP endpoint.
    Http {
        /// The URL.
        url: String,
        /// Headers sent with every request.
        headers: BTreeMap<String, String>,
    },
}

/// How to probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// The whole probe, both sessions and every call included, ends by then.
    pub timeout: Duration,
    /// Call the tools that declare `readOnlyHint: true` and an `outputSchema`
    /// (and need no argument without a default), and check their results.
    pub call_read_only: bool,
}

/// What the probe learned.
#[derive(Debug, Clone, PartialEq)]
pub struct Probed {
    /// The tools and call outcomes, ready for the lint checks.
    pub listing: Listing,
    /// The server's `serverInfo`, when it sent one.
    pub server_info: Option<Value>,
    /// The protocol version the sessions spoke.
    pub protocol_version: String,
}

/// Why a server could not be probed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProbeError {
    /// The server could not be started or reached.
    #[error("cannot connect: {0}")]
    Connect(String),
    /// The server did not answer in time.
    #[error("no answer to `{method}` within {timeout_s} s{stderr}")]
    Timeout {
        /// The request that got no answer.
        method: String,
        /// The probe's timeout, in seconds.
        timeout_s: u64,
        /// For a child process, its last lines of standard error as a
        /// clause (`; the lines of its standard error: ...`); else empty.
        stderr: String,
    },
    /// The server stopped or broke the protocol.
    #[error("during `{method}`, the server {reason}")]
    Closed {
        /// The request in flight.
        method: String,
        /// What happened.
        reason: String,
    },
    /// The server answered a request with an error.
    #[error("`{method}` failed: {message}")]
    Refused {
        /// The request.
        method: String,
        /// The error it returned.
        message: String,
    },
}

/// One connection, with the requests of the probe in flight one at a time.
struct Session {
    link: Option<Link>,
    events: crate::event::EventReceiver,
    next_id: u64,
    deadline: Instant,
    timeout_s: u64,
    /// The modern `_meta` for every request, or `None` in the legacy era.
    meta: Option<Value>,
    capabilities: Value,
    protocol_version: String,
    server_info: Option<Value>,
    /// Whether the server declared the `tools` capability.
    has_tools: bool,
    /// Whether the server declared the `prompts` capability.
    has_prompts: bool,
}

/// Probes one server: lists its tools with and without the optional client
/// capabilities and, when asked, calls its read-only tools.
///
/// # Errors
///
/// [`ProbeError`] when the server cannot be started, does not answer in
/// time, stops, or refuses to list its tools.
pub async fn probe(target: &Target, options: Options) -> Result<Probed, ProbeError> {
    let deadline = Instant::now() + options.timeout;
    let timeout_s = options.timeout.as_secs().max(1);

    let mut plain = Session::open(target, json!({}), None, deadline, timeout_s).await?;
    let result = plain.list_tools().await;
    let plain_tools = match result {
        Ok(tools) => tools,
        Err(error) => {
            plain.close().await;
            return Err(error);
        }
    };
    let prompts = match plain.list_prompts().await {
        Ok(prompts) => prompts,
        Err(error) => {
            plain.close().await;
            return Err(error);
        }
    };
    let calls = if options.call_read_only {
        plain.call_read_only(&plain_tools).await
    } else {
        Vec::new()
    };
    let protocol_version = plain.protocol_version.clone();
    let modern = plain.meta.is_some();
    let server_info = plain.server_info.clone();
    plain.close().await;

    let optional = json!({
        "elicitation": {},
        "sampling": {},
        "roots": {"listChanged": true},
    });
    // The era is the server's, not the session's: no second probe.
    let mut rich = Session::open(target, optional, Some(modern), deadline, timeout_s).await?;
    let result = rich.list_tools().await;
    rich.close().await;
    let rich_tools = result?;

    let name_of = |tool: &Value| tool.get("name").and_then(Value::as_str).map(str::to_owned);
    let plain_names: BTreeSet<String> = plain_tools.iter().filter_map(name_of).collect();
    let rich_names: BTreeSet<String> = rich_tools.iter().filter_map(name_of).collect();
    let mut tools = plain_tools;
    let mut only_with = Vec::new();
    for tool in rich_tools {
        if let Some(name) = name_of(&tool).filter(|name| !plain_names.contains(name)) {
            only_with.push(name);
            tools.push(tool);
        }
    }
    let only_without: Vec<String> = tools
        .iter()
        .filter_map(name_of)
        .filter(|name| !rich_names.contains(name))
        .collect();
    Ok(Probed {
        listing: Listing {
            tools,
            only_with_capabilities: only_with,
            only_without_capabilities: only_without,
            calls,
            prompts,
        },
        server_info,
        protocol_version,
    })
}

// === impl Session ===

impl Session {
    /// Connects and runs the handshake of the server's era (`modern`, when
    /// already known, skips the era probe).
    async fn open(
        target: &Target,
        capabilities: Value,
        modern: Option<bool>,
        deadline: Instant,
        timeout_s: u64,
    ) -> Result<Self, ProbeError> {
        let (events_tx, events) = crate::event::channel(std::sync::Arc::default());
        // The probe sends one request at a time and waits for its answer:
        // what waits for the server is one message at most.
        let link_target = crate::upstream::LinkTarget {
            server: 0,
            generation: 1,
            max_line: MAX_MESSAGE,
            // The probe reads what it gets with serde_json itself.
            max_depth: crate::json::MAX_DEPTH,
            events: events_tx,
            queue: std::sync::Arc::default(),
        };
        let link = match target {
            Target::Stdio {
                command,
                args,
                env,
                sandbox,
            } => {
                let spawn = Spawn {
                    command,
                    args,
                    env,
                    name: command,
                    sandbox: sandbox.as_ref(),
                };
                Process::spawn(&spawn, link_target)
                    .map(Link::Stdio)
                    .map_err(|error| ProbeError::Connect(error.to_string()))?
            }
            Target::Http { url, headers } => HttpLink::connect(url, headers, link_target)
                .map(Link::Http)
                .map_err(|error| ProbeError::Connect(error.to_string()))?,
        };
        let mut session = Self {
            link: Some(link),
            events,
            next_id: 0,
            deadline,
            timeout_s,
            meta: None,
            capabilities,
            protocol_version: String::new(),
            server_info: None,
            has_tools: true,
            has_prompts: false,
        };
        if let Err(error) = session.handshake(modern).await {
            session.close().await;
            return Err(error);
        }
        Ok(session)
    }

    async fn handshake(&mut self, modern: Option<bool>) -> Result<(), ProbeError> {
        let meta = json!({
            "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
            "io.modelcontextprotocol/clientCapabilities": self.capabilities,
            "io.modelcontextprotocol/clientInfo": client_info(),
        });
        // A modern server is asked with its full deadline; an unknown one
        // gets the era probe's few seconds; a legacy one is not asked.
        let probe_deadline = match modern {
            Some(true) => self.deadline,
            None => (Instant::now() + DISCOVER_TIMEOUT).min(self.deadline),
            Some(false) => Instant::now(),
        };
        let discovered = if modern == Some(false) {
            Err(ProbeError::Refused {
                method: "server/discover".to_owned(),
                message: "a legacy server".to_owned(),
            })
        } else {
            self.request_until("server/discover", json!({"_meta": meta}), probe_deadline)
                .await
        };
        match discovered {
            Ok(result) if speaks_modern(&result) => {
                self.adopt_modern(&result, meta);
                return Ok(());
            }
            // A stopped server stays stopped: say so rather than wait again.
            Err(error @ ProbeError::Closed { .. }) => return Err(error),
            // Any other answer, or none in time: the legacy era.
            Ok(_) | Err(_) => {}
        }
        let params = json!({
            "protocolVersion": LEGACY_VERSIONS.first().copied().unwrap_or("2025-11-25"),
            "capabilities": self.capabilities,
            "clientInfo": client_info(),
        });
        let result = match self.request("initialize", params).await {
            Ok(result) => result,
            // A busy modern server may answer the era probe only after it
            // timed out, and then refuse `initialize`: ask it once more,
            // with the whole deadline.
            Err(error @ ProbeError::Refused { .. }) if modern.is_none() => {
                let again = self
                    .request("server/discover", json!({"_meta": meta.clone()}))
                    .await;
                match again {
                    Ok(result) if speaks_modern(&result) => {
                        self.adopt_modern(&result, meta);
                        return Ok(());
                    }
                    _ => return Err(error),
                }
            }
            Err(error) => return Err(error),
        };
        self.has_tools = result.pointer("/capabilities/tools").is_some();
        self.has_prompts = result.pointer("/capabilities/prompts").is_some();
        self.server_info = result.get("serverInfo").cloned();
        self.protocol_version = result
            .get("protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        self.send(frame::notification("notifications/initialized", &json!({})));
        Ok(())
    }

    /// Takes the server for a 2026-07-28 one, from its `server/discover` result.
    fn adopt_modern(&mut self, result: &Value, meta: Value) {
        self.has_tools = result.pointer("/capabilities/tools").is_some();
        self.has_prompts = result.pointer("/capabilities/prompts").is_some();
        self.server_info = result
            .pointer("/_meta/io.modelcontextprotocol~1serverInfo")
            .or_else(|| result.get("serverInfo"))
            .cloned();
        self.protocol_version = MODERN_VERSION.to_owned();
        self.meta = Some(meta);
    }

    /// Every page of `tools/list`.
    async fn list_tools(&mut self) -> Result<Vec<Value>, ProbeError> {
        if !self.has_tools {
            return Ok(Vec::new());
        }
        self.list_all("tools/list", "tools").await
    }

    /// Every page of `prompts/list`, for the checks of prompt names.
    async fn list_prompts(&mut self) -> Result<Vec<Value>, ProbeError> {
        if !self.has_prompts {
            return Ok(Vec::new());
        }
        self.list_all("prompts/list", "prompts").await
    }

    /// Every page of the list `method` gives under `key`.
    async fn list_all(&mut self, method: &str, key: &str) -> Result<Vec<Value>, ProbeError> {
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        let mut seen_cursors = BTreeSet::new();
        for _ in 0..MAX_PAGES {
            let params = match &cursor {
                Some(cursor) => json!({"cursor": cursor}),
                None => json!({}),
            };
            let result = self.request(method, params).await?;
            if let Some(page) = result.get(key).and_then(Value::as_array) {
                items.extend(page.iter().cloned());
            } else {
                return Err(ProbeError::Refused {
                    method: method.to_owned(),
                    message: format!("the result has no `{key}` list"),
                });
            }
            match result.get("nextCursor").and_then(Value::as_str) {
                // A cursor seen before would list the same pages forever.
                Some(next) if seen_cursors.insert(next.to_owned()) => {
                    cursor = Some(next.to_owned());
                }
                _ => return Ok(items),
            }
        }
        Ok(items)
    }

    /// Calls each read-only tool with an `outputSchema` that needs no
    /// argument without a default, and checks its `structuredContent`.
    async fn call_read_only(&mut self, tools: &[Value]) -> Vec<CallCheck> {
        let mut checks = Vec::new();
        for tool in tools {
            let Some(name) = tool.get("name").and_then(Value::as_str) else {
                continue;
            };
            let read_only = tool.pointer("/annotations/readOnlyHint") == Some(&Value::Bool(true));
            let Some(output_schema) = tool.get("outputSchema") else {
                continue;
            };
            let Some(arguments) = default_arguments(tool) else {
                continue;
            };
            if !read_only {
                continue;
            }
            let mut stopped = false;
            let outcome = match jsonschema::validator_for(output_schema) {
                Err(error) => CallOutcome::Mismatch(vec![format!(
                    "the `outputSchema` cannot be compiled: {error}"
                )]),
                Ok(validator) => {
                    let params = json!({"name": name, "arguments": arguments});
                    match self.request("tools/call", params).await {
                        Err(error) => {
                            // A stopped server or a spent deadline ends the calls.
                            stopped = matches!(
                                error,
                                ProbeError::Closed { .. } | ProbeError::Timeout { .. }
                            );
                            CallOutcome::Failed(error.to_string())
                        }
                        Ok(result) => check_result(&validator, &result),
                    }
                }
            };
            checks.push(CallCheck {
                tool: name.to_owned(),
                outcome,
            });
            if stopped {
                break;
            }
        }
        checks
    }

    async fn request(&mut self, method: &str, params: Value) -> Result<Value, ProbeError> {
        let deadline = self.deadline;
        self.request_until(method, params, deadline).await
    }

    /// Sends one request and waits for its answer until `deadline`,
    /// answering the server's own requests meanwhile.
    async fn request_until(
        &mut self,
        method: &str,
        params: Value,
        deadline: Instant,
    ) -> Result<Value, ProbeError> {
        let params = match (&self.meta, params) {
            (Some(meta), Value::Object(mut object)) => {
                object.insert("_meta".to_owned(), meta.clone());
                Value::Object(object)
            }
            (_, params) => params,
        };
        self.next_id += 1;
        let id = self.next_id;
        self.send(frame::request(&id.to_string(), method, &params));
        loop {
            let event = tokio::time::timeout_at(deadline, self.events.recv()).await;
            let line = match event {
                Err(_) => {
                    return Err(ProbeError::Timeout {
                        method: method.to_owned(),
                        timeout_s: self.timeout_s,
                        stderr: self
                            .link
                            .as_ref()
                            .and_then(Link::stderr_clause)
                            .unwrap_or_default(),
                    });
                }
                Ok(None) => {
                    return Err(closed(method, "stopped".to_owned()));
                }
                Ok(Some(Event::Upstream { event, .. })) => match event {
                    UpstreamEvent::Line(line) | UpstreamEvent::LineOnStream { line, .. } => {
                        line.into_line()
                    }
                    UpstreamEvent::Broken(reason) | UpstreamEvent::Closed(reason) => {
                        return Err(closed(method, reason));
                    }
                    // The probe installs nothing.
                    UpstreamEvent::Prepared(_) => continue,
                },
                Ok(Some(_)) => continue,
            };
            let Ok(message) = serde_json::from_str::<Value>(&line) else {
                let excerpt: String = line.chars().take(80).collect();
                return Err(closed(
                    method,
                    format!("wrote a line that is not JSON (`{excerpt}`)"),
                ));
            };
            let message_id = message.get("id");
            if let Some(server_method) = message.get("method").and_then(Value::as_str) {
                if let Some(request_id) = message_id {
                    self.answer(&request_id.to_string(), server_method);
                }
                continue;
            }
            if message_id.and_then(Value::as_u64) != Some(id) {
                // A late answer to a request that already timed out.
                continue;
            }
            if let Some(error) = message.get("error") {
                let text = error
                    .get("message")
                    .and_then(Value::as_str)
                    .map_or_else(|| error.to_string(), str::to_owned);
                return Err(ProbeError::Refused {
                    method: method.to_owned(),
                    message: text,
                });
            }
            return Ok(message.get("result").cloned().unwrap_or(Value::Null));
        }
    }

    /// Answers a server's own request as a client without a person would.
    fn answer(&self, id: &str, method: &str) {
        let line = match method {
            "ping" => frame::response(id, &json!({})),
            "roots/list" => frame::response(id, &json!({"roots": []})),
            "elicitation/create" => frame::response(id, &json!({"action": "decline"})),
            _ => frame::error_response(
                id,
                -32601,
                &format!("`{method}` is not answered by hintgate lint"),
            ),
        };
        self.send(line);
    }

    fn send(&self, line: String) {
        if let Some(link) = &self.link {
            // One request waits at a time: a server that does not read its
            // input fails the probe at its deadline.
            link.send(line);
        }
    }

    async fn close(&mut self) {
        if let Some(link) = self.link.take() {
            // Stopping waits a moment for a graceful exit; never past the deadline.
            let _ = tokio::time::timeout(Duration::from_secs(3), link.stop()).await;
        }
    }
}

/// Whether a `server/discover` result offers 2026-07-28.
fn speaks_modern(result: &Value) -> bool {
    result
        .get("supportedVersions")
        .and_then(Value::as_array)
        .is_some_and(|versions| versions.iter().any(|v| v == MODERN_VERSION))
}

fn closed(method: &str, reason: String) -> ProbeError {
    ProbeError::Closed {
        method: method.to_owned(),
        reason,
    }
}

fn client_info() -> Value {
    json!({"name": "hintgate-lint", "version": env!("CARGO_PKG_VERSION")})
}

/// The arguments of a call with every property's default, or `None` when
/// a required argument has no default.
fn default_arguments(tool: &Value) -> Option<Value> {
    let schema = tool.get("inputSchema")?;
    let properties = schema.get("properties").and_then(Value::as_object);
    let mut arguments = serde_json::Map::new();
    if let Some(properties) = properties {
        for (name, property) in properties {
            if let Some(default) = property.get("default") {
                arguments.insert(name.clone(), default.clone());
            }
        }
    }
    let required = schema
        .get("required")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let complete = required
        .iter()
        .filter_map(Value::as_str)
        .all(|name| arguments.contains_key(name));
    complete.then_some(Value::Object(arguments))
}

fn check_result(validator: &jsonschema::Validator, result: &Value) -> CallOutcome {
    if result.get("isError") == Some(&Value::Bool(true)) {
        let text = result
            .pointer("/content/0/text")
            .and_then(Value::as_str)
            .unwrap_or("no text");
        return CallOutcome::Failed(format!("the tool returned an error: {text}"));
    }
    let Some(structured) = result.get("structuredContent") else {
        return CallOutcome::NoStructuredContent;
    };
    let problems: Vec<String> = validator
        .iter_errors(structured)
        .take(3)
        .map(|error| {
            let path = error.instance_path().to_string();
            if path.is_empty() {
                error.to_string()
            } else {
                format!("{error} (at `{path}`)")
            }
        })
        .collect();
    if problems.is_empty() {
        CallOutcome::Conforms
    } else {
        CallOutcome::Mismatch(problems)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_arguments_fill_defaults_and_need_every_required_one() {
        let tool = json!({"inputSchema": {"type": "object", "properties": {"n": {"default": 3}, "q": {"type": "string"}}}});
        assert_eq!(default_arguments(&tool), Some(json!({"n": 3})));
        let tool = json!({"inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}});
        assert_eq!(default_arguments(&tool), None);
        assert_eq!(default_arguments(&json!({})), None);
    }

    #[test]
    fn results_are_checked_against_the_output_schema() {
        let schema =
            json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]});
        let validator = jsonschema::validator_for(&schema).unwrap();
        assert_eq!(
            check_result(&validator, &json!({"structuredContent": {"n": 1}})),
            CallOutcome::Conforms
        );
        assert!(matches!(
            check_result(&validator, &json!({"structuredContent": {"n": "x"}})),
            CallOutcome::Mismatch(problems) if problems[0].contains("/n")
        ));
        assert_eq!(
            check_result(&validator, &json!({"content": []})),
            CallOutcome::NoStructuredContent
        );
        assert!(matches!(
            check_result(&validator, &json!({"isError": true, "content": [{"type": "text", "text": "boom"}]})),
            CallOutcome::Failed(text) if text.contains("boom")
        ));
    }
}
