//! The 2026-07-28 ("modern") era's facts, shared by every part: the
//! `_meta` keys a modern request carries and what the gateway reads of
//! them, the log levels, the gateway's own answer in a retried call, the
//! result shapes the era asks for ([`modernize`]), and what the servers
//! are told of the host ([`Declared`]: the first session's declaration,
//! and the modern `_meta` made from it once).
//!
//! Plain data and functions, importing no part above the call and the
//! request: `modern` holds what the gateway does in the era.

use serde_json::{Map, Value, json};

use super::call::CallContext;
use super::request::HostRequest;
use crate::json::members;
use crate::versions::{LEGACY_VERSIONS, MODERN_VERSION};

/// The `_meta` keys of a modern request.
pub(super) const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
pub(super) const META_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
pub(super) const META_CLIENT: &str = "io.modelcontextprotocol/clientInfo";
pub(super) const META_SUBSCRIPTION: &str = "io.modelcontextprotocol/subscriptionId";
/// The `_meta` key a 2026-07-28 request asks for log messages with: the
/// lowest level it wants (the legacy `logging/setLevel`, per request).
pub(super) const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";

/// The log levels, from the least severe (RFC 5424's, as MCP names them).
pub(super) const LOG_LEVELS: [&str; 8] = [
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

/// Where `level` is in [`LOG_LEVELS`]; `None` for a level MCP does not name.
pub(super) fn log_rank(level: &str) -> Option<usize> {
    LOG_LEVELS.iter().position(|known| *known == level)
}

/// The key of the gateway's own question in an input-required result.
pub const INPUT_KEY: &str = "hintgate/approve";

/// Methods whose results a modern host may cache: they say for how long.
pub(super) const CACHEABLE: [&str; 6] = [
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "server/discover",
];

/// Whether a retried call carries the gateway's own answer or state.
pub(super) fn carries_our_answer(cx: &CallContext) -> bool {
    let state_is_ours = cx
        .params
        .request_state
        .as_deref()
        .is_some_and(crate::seal::is_ours);
    state_is_ours || cx.answers(INPUT_KEY)
}

/// Whether a `requestState` value (JSON text) is one the gateway sealed.
pub(super) fn is_our_state(value: &str) -> bool {
    serde_json::from_str::<String>(value)
        .ok()
        .is_some_and(|state| crate::seal::is_ours(&state))
}

/// `inputResponses` (JSON text) without the gateway's own answer; `None`
/// when nothing else is left.
pub(super) fn without_our_answer(value: &str) -> Option<String> {
    let Ok(found) = members(value) else {
        return Some(value.to_owned());
    };
    let rest: Vec<&str> = found
        .iter()
        .filter(|member| member.key != INPUT_KEY)
        .filter_map(|member| value.get(member.span.clone()))
        .collect();
    if rest.is_empty() {
        return None;
    }
    let mut writer = crate::json::ObjectWriter::with_capacity(value.len());
    for member in rest {
        writer.copy(member);
    }
    Some(writer.finish())
}

/// A request's `_meta` (JSON text) with the modern keys set to `ours`.
pub(super) fn merged_meta(value: &str, ours: &Value) -> String {
    let mut meta = match serde_json::from_str::<Value>(value) {
        Ok(Value::Object(object)) => object,
        _ => Map::new(),
    };
    if let Value::Object(ours) = ours {
        for (key, item) in ours {
            meta.insert(key.clone(), item.clone());
        }
    }
    Value::Object(meta).to_string()
}

/// `params` with the keys of `ours` set in its `_meta` (its own `_meta`
/// entries, such as a progress token, are kept).
pub(super) fn with_meta(params: Value, ours: &Value) -> Value {
    let mut params = match params {
        Value::Object(object) => object,
        _ => Map::new(),
    };
    let meta = params
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()));
    if let (Some(meta), Value::Object(ours)) = (meta.as_object_mut(), ours) {
        for (key, value) in ours {
            meta.insert(key.clone(), value.clone());
        }
    }
    Value::Object(params)
}

/// What the servers are told of the host: the first session's `initialize`
/// (its capabilities, without tasks, and its client identity), and the
/// `_meta` made from it once, which every request to a 2026-07-28 server
/// carries.
#[derive(Debug)]
pub(crate) struct Declared {
    init: Option<Value>,
    meta: Value,
}

impl Declared {
    /// Nothing declared yet: the servers are told of no capabilities, and
    /// of hintgate as the client.
    pub fn new() -> Self {
        Self {
            init: None,
            meta: upstream_meta(None),
        }
    }

    /// The first session's declaration, `init` (its capabilities already
    /// without tasks), becomes what the servers are told; a later one
    /// changes nothing. The host's capabilities sit a level deeper in a
    /// 2026-07-28 request's `params._meta` than in its `initialize`: what
    /// fit there may not fit within `max_depth` here, and then the
    /// 2026-07-28 servers are told of none.
    pub fn declare(&mut self, init: Value, max_depth: usize) {
        if self.init.is_some() {
            return;
        }
        self.meta = upstream_meta(Some(&init));
        let placed = format!("{{\"params\":{{\"_meta\":{}}}}}", self.meta);
        if let Err(err) = crate::json::check_depth(&placed, max_depth) {
            tracing::warn!(
                "the host's capabilities, passed on in a 2026-07-28 request's `_meta`, {err}; 2026-07-28 servers are told of none"
            );
            let mut bare = init.clone();
            if let Some(object) = bare.as_object_mut() {
                object.insert("capabilities".to_owned(), Value::Object(Map::new()));
                object.remove("clientInfo");
            }
            self.meta = upstream_meta(Some(&bare));
        }
        self.init = Some(init);
    }

    /// The host's capabilities as the servers are told them (`{}` before
    /// any session declared them).
    pub fn capabilities(&self) -> Value {
        self.init
            .as_ref()
            .and_then(|init| init.get("capabilities"))
            .cloned()
            .unwrap_or_else(|| json!({}))
    }

    /// The `_meta` of the era probe and of a 2026-07-28 server's requests.
    pub fn meta(&self) -> &Value {
        &self.meta
    }

    /// `params` with the modern `_meta` keys added (the request's own
    /// `_meta` entries, such as a progress token, are kept).
    pub fn with_meta(&self, params: Value) -> Value {
        with_meta(params, &self.meta)
    }

    /// The `_meta` a request on behalf of a session carries to a 2026-07-28
    /// server: the gateway's, and the log `level` a legacy host set with
    /// `logging/setLevel` (2026-07-28 has no such method: a server sends log
    /// messages only for a request that names a level).
    pub fn for_level(&self, level: Option<&str>) -> std::borrow::Cow<'_, Value> {
        match (level, &self.meta) {
            (Some(level), Value::Object(meta)) => {
                let mut meta = meta.clone();
                meta.insert(META_LOG_LEVEL.to_owned(), Value::String(level.to_owned()));
                std::borrow::Cow::Owned(Value::Object(meta))
            }
            _ => std::borrow::Cow::Borrowed(&self.meta),
        }
    }

    /// The params of a legacy server's `initialize`: the host's version
    /// where it is a legacy one hintgate speaks (else 2025-11-25), its
    /// capabilities and its client identity (else hintgate's).
    pub fn initialize_params(&self) -> Value {
        let init = self.init.clone().unwrap_or_else(|| json!({}));
        let asked = init
            .get("protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or("");
        let version = if LEGACY_VERSIONS.contains(&asked) {
            asked
        } else {
            "2025-11-25"
        };
        json!({
            "protocolVersion": version,
            "capabilities": init.get("capabilities").cloned().unwrap_or_else(|| json!({})),
            "clientInfo": init.get("clientInfo").cloned().unwrap_or_else(|| json!({"name": "hintgate", "version": env!("CARGO_PKG_VERSION")})),
        })
    }
}

/// The `_meta` every request to a 2026-07-28 server carries: the version,
/// and the host's capabilities and identity (from what the first session
/// declared, `init`).
pub(super) fn upstream_meta(init: Option<&Value>) -> Value {
    let field = |name: &str| init.and_then(|init| init.get(name)).cloned();
    json!({
        META_VERSION: MODERN_VERSION,
        META_CAPABILITIES: field("capabilities").unwrap_or_else(|| json!({})),
        META_CLIENT: field("clientInfo").unwrap_or_else(|| json!({"name": "hintgate", "version": env!("CARGO_PKG_VERSION")})),
    })
}

/// The `_meta` of a request's params, when the request is modern. Only
/// `_meta` is read: the rest of the params (a call's arguments) is skipped.
pub(super) fn modern_meta(request: &HostRequest) -> Option<Map<String, Value>> {
    #[derive(serde::Deserialize)]
    struct MetaOnly {
        #[serde(rename = "_meta", default)]
        meta: Option<Map<String, Value>>,
    }
    // serde would read an array field by field: only an object has `_meta`.
    let raw = request
        .params_text()
        .filter(|raw| raw.trim_start().starts_with('{'))?;
    let meta = serde_json::from_str::<MetaOnly>(raw).ok()?.meta?;
    meta.contains_key(META_VERSION).then_some(meta)
}

/// Adds what a modern host requires of a result the gateway composed.
pub(super) fn modernize(modern: bool, method: &str, result: &mut Value) {
    if !modern {
        return;
    }
    if let Some(object) = result.as_object_mut() {
        object
            .entry("resultType")
            .or_insert_with(|| json!("complete"));
        if CACHEABLE.contains(&method) {
            object.entry("ttlMs").or_insert_with(|| json!(0));
            object
                .entry("cacheScope")
                .or_insert_with(|| json!("private"));
        }
    }
}

pub(super) fn supports_modern(result: Option<&Value>) -> bool {
    result.is_some_and(|result| {
        result
            .get("supportedVersions")
            .and_then(Value::as_array)
            .is_some_and(|versions| versions.iter().any(|v| v == MODERN_VERSION))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gateways_own_answer_is_removed_and_the_rest_kept() {
        assert_eq!(
            without_our_answer(r#"{"hintgate/approve":{"action":"accept"},"server":{"n":1.0}}"#),
            Some(r#"{"server":{"n":1.0}}"#.to_owned())
        );
        assert_eq!(without_our_answer(r#"{"hintgate/approve":{}}"#), None);
    }

    #[test]
    fn modern_meta_overrides_only_its_own_keys() {
        let merged: Value = serde_json::from_str(&merged_meta(
            r#"{"progressToken":"p","io.modelcontextprotocol/protocolVersion":"x"}"#,
            &json!({META_VERSION: MODERN_VERSION}),
        ))
        .unwrap();
        assert_eq!(
            merged,
            json!({"progressToken": "p", META_VERSION: MODERN_VERSION})
        );
    }

    #[test]
    fn the_servers_are_told_what_the_first_session_declared_and_no_more() {
        let mut declared = Declared::new();
        assert_eq!(declared.capabilities(), json!({}));
        assert_eq!(
            declared.initialize_params()["protocolVersion"],
            "2025-11-25"
        );
        assert_eq!(
            declared.initialize_params()["clientInfo"]["name"],
            "hintgate"
        );
        let first = json!({
            "protocolVersion": "2025-06-18",
            "capabilities": {"sampling": {}},
            "clientInfo": {"name": "host", "version": "1"},
        });
        declared.declare(first, 64);
        declared.declare(json!({"capabilities": {"roots": {}}}), 64);
        assert_eq!(declared.capabilities(), json!({"sampling": {}}));
        let params = declared.initialize_params();
        assert_eq!(params["protocolVersion"], "2025-06-18");
        assert_eq!(params["clientInfo"]["name"], "host");
        assert_eq!(declared.meta()[META_CAPABILITIES], json!({"sampling": {}}));
        assert_eq!(declared.meta()[META_VERSION], MODERN_VERSION);
        // A request's own `_meta` entries are kept beside the gateway's.
        let with = declared.with_meta(json!({"_meta": {"progressToken": 1}}));
        assert_eq!(with["_meta"]["progressToken"], 1);
        assert_eq!(with["_meta"][META_VERSION], MODERN_VERSION);
        // A legacy host's log level rides in a 2026-07-28 request's `_meta`.
        assert_eq!(declared.for_level(Some("debug"))[META_LOG_LEVEL], "debug");
        assert!(declared.for_level(None).get(META_LOG_LEVEL).is_none());
    }

    #[test]
    fn capabilities_too_deep_for_a_modern_meta_are_not_passed_on_there() {
        let mut deep = json!({});
        for _ in 0..8 {
            deep = json!({"x": deep});
        }
        let mut declared = Declared::new();
        declared.declare(
            json!({"capabilities": {"experimental": deep}, "clientInfo": {"name": "host"}}),
            10,
        );
        // The legacy handshake still carries them; the modern `_meta` none.
        assert!(declared.capabilities()["experimental"].is_object());
        assert_eq!(declared.meta()[META_CAPABILITIES], json!({}));
        assert_eq!(declared.meta()[META_CLIENT]["name"], "hintgate");
    }
}
