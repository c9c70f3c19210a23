//! The console over HTTP, in process: what is refused (no token, a wrong
//! Host, a change from another origin or without the CSRF token), the
//! headers on every response, and attacker-controlled strings coming back
//! escaped. The browser test (in `hintgate-cli`) drives the same pages in
//! Chromium.
#![expect(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, Response, StatusCode, header};
use hintgate_console::{CONTENT_SECURITY_POLICY, Console};
use hintgate_store::{
    ApprovalQueue, AuditLog, MemoryStore, NewPending, PendingState, Pin, PinStore, Remember, Seal,
    Seen, Store,
};
use serde_json::{Value, json};
use tower::ServiceExt;

const HOST: &str = "127.0.0.1:4321";
const ORIGIN: &str = "http://127.0.0.1:4321";

struct Fixture {
    store: Arc<MemoryStore>,
    console: Arc<Console>,
    cookie: String,
}

fn now() -> i64 {
    i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs(),
    )
    .unwrap()
}

fn token(console: &Console) -> String {
    console.url().split("token=").nth(1).unwrap().to_owned()
}

async fn send(
    console: &Arc<Console>,
    request: Request<Body>,
) -> (StatusCode, Response<Body>, String) {
    let router: Router = Arc::clone(console).router();
    let response = router.oneshot(request).await.unwrap();
    let status = response.status();
    let (parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, 1 << 24).await.unwrap();
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    (status, Response::from_parts(parts, Body::empty()), text)
}

fn get(path: &str, cookie: Option<&str>) -> Request<Body> {
    let mut request = Request::get(path).header(header::HOST, HOST);
    if let Some(cookie) = cookie {
        request = request.header(header::COOKIE, cookie);
    }
    request.body(Body::empty()).unwrap()
}

fn post(path: &str, cookie: &str, origin: Option<&str>, form: &str) -> Request<Body> {
    let mut request = Request::post(path)
        .header(header::HOST, HOST)
        .header(header::COOKIE, cookie)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
    if let Some(origin) = origin {
        request = request.header(header::ORIGIN, origin);
    }
    request.body(Body::from(form.to_owned())).unwrap()
}

/// A console on a memory store, and the session cookie its token buys.
async fn fixture() -> Fixture {
    let store = Arc::new(MemoryStore::default());
    let addr: SocketAddr = HOST.parse().unwrap();
    let console =
        Arc::new(Console::new(Arc::clone(&store) as Arc<dyn Store>, addr, "tester").unwrap());
    let (status, response, _) =
        send(&console, get(&format!("/?token={}", token(&console)), None)).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(response.headers()[header::LOCATION], "/");
    let set = response.headers()[header::SET_COOKIE]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Strict"),
        "{set}"
    );
    let cookie = set.split(';').next().unwrap().to_owned();
    Fixture {
        store,
        console,
        cookie,
    }
}

fn csrf(page: &str) -> String {
    let at = page.find("name=\"csrf\" value=\"").unwrap() + "name=\"csrf\" value=\"".len();
    page[at..].split('"').next().unwrap().to_owned()
}

fn enqueue(store: &MemoryStore, server: &str, tool: &str, prompt: &str, offer: Remember) -> u64 {
    enqueue_with(store, server, tool, prompt, None, offer)
}

fn enqueue_with(
    store: &MemoryStore,
    server: &str,
    tool: &str,
    prompt: &str,
    details: Option<Value>,
    offer: Remember,
) -> u64 {
    store
        .enqueue(&NewPending {
            at: now() - 30,
            expires_at: now() + 600,
            session: "s1".into(),
            server: server.into(),
            server_key: "key-1".into(),
            tool: tool.into(),
            digest: "sha256:00".into(),
            prompt: prompt.into(),
            details,
            offer,
        })
        .unwrap()
}

#[tokio::test]
async fn nothing_is_served_without_the_token() {
    let f = fixture().await;
    for path in [
        "/",
        "/api/waiting",
        "/static/console.js",
        "/definitions",
        "/log",
        "/nowhere",
    ] {
        let (status, _, body) = send(&f.console, get(path, None)).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}");
        assert!(!body.contains('<'), "{path}: {body}");
    }
    // A wrong token, a wrong cookie, or the token itself as the cookie.
    let (status, response, _) = send(&f.console, get("/?token=00", None)).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(response.headers().get(header::SET_COOKIE).is_none());
    let wrong = format!("hintgate-console-4321={}", "0".repeat(64));
    assert_eq!(
        send(&f.console, get("/", Some(&wrong))).await.0,
        StatusCode::FORBIDDEN
    );
    let token_as_cookie = format!("hintgate-console-4321={}", token(&f.console));
    assert_eq!(
        send(&f.console, get("/", Some(&token_as_cookie))).await.0,
        StatusCode::FORBIDDEN
    );
    // The session cookie opens every page.
    for path in [
        "/",
        "/api/waiting",
        "/static/console.js",
        "/definitions",
        "/log",
    ] {
        let (status, _, _) = send(&f.console, get(path, Some(&f.cookie))).await;
        assert_eq!(status, StatusCode::OK, "{path}");
    }
}

#[tokio::test]
async fn the_token_is_dropped_from_the_address_and_other_query_values_kept() {
    let f = fixture().await;
    let path = format!("/log?verdict=deny&token={}", token(&f.console));
    let (status, response, _) = send(&f.console, get(&path, None)).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(response.headers()[header::LOCATION], "/log?verdict=deny");
}

#[tokio::test]
async fn a_request_naming_another_host_is_refused() {
    let f = fixture().await;
    for host in [
        "evil.example:4321",
        "evil.example",
        "127.0.0.1:80",
        "localhost",
    ] {
        let request = Request::get("/")
            .header(header::HOST, host)
            .header(header::COOKIE, &f.cookie)
            .body(Body::empty())
            .unwrap();
        let (status, _, body) = send(&f.console, request).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{host}");
        assert!(
            body.contains("answers only at http://127.0.0.1:4321/"),
            "{body}"
        );
    }
    let missing = Request::get("/")
        .header(header::COOKIE, &f.cookie)
        .body(Body::empty())
        .unwrap();
    assert_eq!(send(&f.console, missing).await.0, StatusCode::FORBIDDEN);
    for host in ["localhost:4321", "[::1]:4321"] {
        let request = Request::get("/")
            .header(header::HOST, host)
            .header(header::COOKIE, &f.cookie)
            .body(Body::empty())
            .unwrap();
        assert_eq!(send(&f.console, request).await.0, StatusCode::OK, "{host}");
    }
}

#[tokio::test]
async fn every_response_carries_the_hardening_headers() {
    let f = fixture().await;
    let requests = [
        get("/", Some(&f.cookie)),
        get("/", None),
        get("/static/console.js", Some(&f.cookie)),
        get(&format!("/?token={}", token(&f.console)), None),
        post("/answer", &f.cookie, Some("http://evil.example"), "id=1"),
    ];
    for request in requests {
        let path = request.uri().to_string();
        let (_, response, _) = send(&f.console, request).await;
        let headers = response.headers();
        assert_eq!(
            headers[header::CONTENT_SECURITY_POLICY],
            CONTENT_SECURITY_POLICY,
            "{path}"
        );
        assert_eq!(headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff", "{path}");
        assert_eq!(headers[header::REFERRER_POLICY], "same-origin", "{path}");
        assert_eq!(headers[header::CACHE_CONTROL], "no-store", "{path}");
        assert_eq!(headers[header::X_FRAME_OPTIONS], "DENY", "{path}");
    }
    let policy = CONTENT_SECURITY_POLICY;
    for part in [
        "default-src 'none'",
        "script-src 'self'",
        "frame-ancestors 'none'",
        "form-action 'self'",
        "base-uri 'none'",
    ] {
        assert!(policy.contains(part), "{part}");
    }
    assert!(
        !policy.contains("unsafe-inline") && !policy.contains("http"),
        "{policy}"
    );
}

#[tokio::test]
async fn a_change_from_another_origin_or_without_the_csrf_token_is_refused() {
    let f = fixture().await;
    let id = enqueue(&f.store, "fs", "write_file", "prompt", Remember::Always);
    let (_, _, page) = send(&f.console, get("/", Some(&f.cookie))).await;
    let csrf = csrf(&page);
    let form = format!("csrf={csrf}&id={id}&answer=approve");
    for origin in [
        Some("http://evil.example"),
        Some("http://localhost:9999"),
        Some("null"),
        None,
    ] {
        let (status, _, _) = send(&f.console, post("/answer", &f.cookie, origin, &form)).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{origin:?}");
    }
    for form in [
        format!("id={id}&answer=approve"),
        format!("csrf={}&id={id}&answer=approve", "0".repeat(64)),
    ] {
        let (status, _, _) =
            send(&f.console, post("/answer", &f.cookie, Some(ORIGIN), &form)).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{form}");
    }
    // The right Origin, but the browser says the request came from another site.
    let mut forged = post("/answer", &f.cookie, Some(ORIGIN), &form);
    forged
        .headers_mut()
        .insert("sec-fetch-site", "cross-site".parse().unwrap());
    assert_eq!(send(&f.console, forged).await.0, StatusCode::FORBIDDEN);
    // Without the session, even with the right origin and token.
    let (status, _, _) = send(&f.console, post("/answer", "x=y", Some(ORIGIN), &form)).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(
        f.store.pending(id).unwrap().unwrap().state,
        PendingState::Waiting
    );

    let (status, response, _) =
        send(&f.console, post("/answer", &f.cookie, Some(ORIGIN), &form)).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(
        response.headers()[header::LOCATION],
        format!("/?note=approved&id={id}")
    );
    match f.store.pending(id).unwrap().unwrap().state {
        PendingState::Answered(answer) => {
            assert!(answer.approve);
            assert_eq!(answer.remember, Remember::Call);
            assert_eq!(answer.by, "tester (console)");
        }
        other => panic!("{other:?}"),
    }
    // Answering again says it was answered, and changes nothing.
    let deny = format!("csrf={csrf}&id={id}&answer=deny");
    let (_, response, _) = send(&f.console, post("/answer", &f.cookie, Some(ORIGIN), &deny)).await;
    assert_eq!(
        response.headers()[header::LOCATION],
        format!("/?note=answered&id={id}")
    );
}

#[tokio::test]
async fn a_call_is_remembered_no_further_than_the_gateway_offered() {
    let f = fixture().await;
    let once = enqueue(&f.store, "fs", "delete_file", "destroys", Remember::Call);
    let session = enqueue(&f.store, "fs", "move_file", "moves", Remember::Session);
    let (_, _, page) = send(&f.console, get("/", Some(&f.cookie))).await;
    let card = |id: u64| {
        let start = page.find(&format!("id=\"call-{id}\"")).unwrap();
        let end = page[start..].find("</article>").unwrap();
        page[start..start + end].to_owned()
    };
    assert!(!card(once).contains("approve-session") && !card(once).contains("approve-always"));
    assert!(card(once).contains("for this call only"), "{}", card(once));
    assert!(card(session).contains("approve-session") && !card(session).contains("approve-always"));
    let csrf = csrf(&page);
    let form = format!("csrf={csrf}&id={once}&answer=approve-always");
    let (status, _, _) = send(&f.console, post("/answer", &f.cookie, Some(ORIGIN), &form)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        f.store.pending(once).unwrap().unwrap().state,
        PendingState::Waiting
    );
}

#[tokio::test]
async fn waiting_calls_show_the_whole_prompt_with_hostile_strings_escaped() {
    let f = fixture().await;
    let prompt = "hintgate: approve this tool call?\n\n  tool:      x (titled \"<script>document.title='pwned'</script>\")\n  arguments:\n    {\n      \"path\": \"<img src=x onerror=alert(1)>\"\n    }\n";
    enqueue(
        &f.store,
        "<b>evil</b>",
        "x\"><script>alert(1)</script>",
        prompt,
        Remember::Always,
    );
    enqueue(
        &f.store,
        "fs",
        "read\u{202e}txt.exe\u{200b}",
        "p",
        Remember::Call,
    );
    let (_, _, page) = send(&f.console, get("/", Some(&f.cookie))).await;
    // A name that would turn around or hide shows its escapes.
    assert!(
        !page.contains('\u{202e}') && !page.contains('\u{200b}'),
        "{page}"
    );
    assert!(page.contains("read\\u{202e}txt.exe\\u{200b}"), "{page}");
    assert!(!page.contains("<script>"), "{page}");
    assert!(!page.contains("<img"), "{page}");
    assert!(!page.contains("<b>evil"), "{page}");
    assert!(
        page.contains("&lt;script&gt;document.title=&#39;pwned&#39;&lt;/script&gt;"),
        "{page}"
    );
    assert!(
        page.contains("&quot;path&quot;: &quot;&lt;img src=x onerror=alert(1)&gt;&quot;"),
        "{page}"
    );
    assert!(
        page.contains("<title>(2) waiting · hintgate console</title>"),
        "{page}"
    );
    assert!(
        page.contains("Waiting for 30 s") || page.contains("Waiting for 31 s"),
        "{page}"
    );
    assert!(page.contains("min") && page.contains("left"), "{page}");
    // The only script is the console's own file; no inline script at all.
    assert_eq!(page.matches("<script").count(), 1, "{page}");
    assert!(page.contains("<script src=\"/static/console.js\" defer></script>"));

    let (_, response, api) = send(&f.console, get("/api/waiting", Some(&f.cookie))).await;
    assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
    let api: Value = serde_json::from_str(&api).unwrap();
    assert_eq!(api["count"], 2);
    assert_eq!(api["title"], "(2) waiting · hintgate console");
    let html = api["html"].as_str().unwrap();
    assert!(
        !html.contains("<script") && !html.contains("<img"),
        "{html}"
    );
}

fn tool(description: &str, destructive: bool) -> Value {
    json!({"name": "write", "description": description,
           "inputSchema": {"type": "object"},
           "annotations": {"destructiveHint": destructive}})
}

/// The pin digest of a tool definition, as the gateway computes it.
fn digest(definition: &Value) -> String {
    hintgate_policy::pin::PinDigest::of(
        &hintgate_policy::tool::Tool::from_value(definition.clone()).unwrap(),
    )
    .to_string()
}

#[tokio::test]
async fn a_held_change_is_shown_side_by_side_escaped_and_approved_only_as_shown() {
    let f = fixture().await;
    let old = tool("Writes a note.", false);
    let new = tool(
        "Writes a note.<script>document.title='pwned'</script>",
        true,
    );
    let new_digest = digest(&new);
    f.store
        .put_pin(&Pin {
            server_key: "key-1".into(),
            server: "notes".into(),
            identity: "python3 server.py".into(),
            tool: "write".into(),
            digest: digest(&old),
            definition: old,
            pinned_at: now() - 100,
            seen: None,
            seal: Seal::Unchecked,
        })
        .unwrap();
    f.store
        .see(
            "key-1",
            "write",
            &Seen {
                digest: new_digest.clone(),
                definition: new,
                identity: "python3 server.py".into(),
            },
        )
        .unwrap();
    let (_, _, list) = send(&f.console, get("/definitions", Some(&f.cookie))).await;
    assert!(list.contains("Held for approval (1)"), "{list}");
    assert!(
        list.contains("href=\"/definitions/change?key=key-1&amp;tool=write\""),
        "{list}"
    );
    let (status, _, page) = send(
        &f.console,
        get("/definitions/change?key=key-1&tool=write", Some(&f.cookie)),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(!page.contains("<script>document"), "{page}");
    assert!(
        page.contains("Writes a note.&lt;script&gt;document.title=&#39;pwned&#39;&lt;/script&gt;"),
        "{page}"
    );
    assert!(
        page.contains("<th>annotations.destructiveHint</th>"),
        "{page}"
    );
    assert!(
        page.contains(
            "<td class=\"old\"><pre>false</pre></td><td class=\"new\"><pre>true</pre></td>"
        ),
        "{page}"
    );
    let csrf = csrf(&page);

    // A digest other than the one shown approves nothing.
    let stale = format!("csrf={csrf}&key=key-1&tool=write&digest=sha256%3Aother");
    let (status, _, _) = send(
        &f.console,
        post("/definitions/approve", &f.cookie, Some(ORIGIN), &stale),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    let no_csrf = format!("key=key-1&tool=write&digest={new_digest}");
    let (status, _, _) = send(
        &f.console,
        post("/definitions/approve", &f.cookie, Some(ORIGIN), &no_csrf),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(
        f.store
            .pin("key-1", "write")
            .unwrap()
            .unwrap()
            .seen
            .is_some()
    );

    let form = format!("csrf={csrf}&key=key-1&tool=write&digest={new_digest}");
    let (status, response, _) = send(
        &f.console,
        post("/definitions/approve", &f.cookie, Some(ORIGIN), &form),
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{response:?}");
    let pin = f.store.pin("key-1", "write").unwrap().unwrap();
    assert_eq!(pin.digest, new_digest);
    assert!(pin.seen.is_none());
    assert_eq!(pin.definition["annotations"]["destructiveHint"], true);

    let revoke = format!("csrf={csrf}&key=key-1&tool=write");
    let (status, _, _) = send(
        &f.console,
        post("/definitions/revoke", &f.cookie, Some(ORIGIN), &revoke),
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert!(f.store.pin("key-1", "write").unwrap().is_none());
}

#[tokio::test]
async fn the_log_filters_charts_and_states_the_chain_escaped() {
    let f = fixture().await;
    let at = now() - 60;
    let call = |server: &str, tool: &str, verdict: &str, approver: &str| {
        hintgate_store::test_util::call_entry(
            at,
            &json!({"server": server, "tool": tool, "verdict": verdict,
                    "reasons": ["rule"], "approver": approver}),
        )
    };
    let seqs = f
        .store
        .append(&[
            call("fs", "read", "allow", "rule"),
            call("fs", "<script>x()</script>", "deny", "rule"),
            call(
                "git",
                "push",
                "ask",
                "person (hintgate approvals, ann (console))",
            ),
        ])
        .unwrap();
    f.store
        .append(&[hintgate_store::test_util::outcome_entry(
            at + 1,
            seqs[0],
            hintgate_store::record::OutcomeCode::Ok,
        )])
        .unwrap();
    let (_, _, page) = send(&f.console, get("/log", Some(&f.cookie))).await;
    assert!(
        page.contains("The chain holds: 4 records checked, every link checked with the audit key"),
        "{page}"
    );
    assert!(page.contains("<svg class=\"chart\""), "{page}");
    assert!(page.contains("<rect class=\"v-deny\""), "{page}");
    assert!(page.contains("<rect class=\"v-ask\""), "{page}");
    assert!(!page.contains("<script>x()"), "{page}");
    assert!(page.contains("&lt;script&gt;x()&lt;/script&gt;"), "{page}");
    assert!(
        page.contains("person (hintgate approvals, ann (console))"),
        "{page}"
    );
    assert!(
        page.contains("<td>ok</td>"),
        "the outcome joins its call: {page}"
    );

    let (_, _, denied) = send(&f.console, get("/log?verdict=deny", Some(&f.cookie))).await;
    assert!(denied.contains("1 call(s) match"), "{denied}");
    assert!(!denied.contains("<td class=\"tool\">read</td>"), "{denied}");
    let (_, _, git) = send(&f.console, get("/log?server=git", Some(&f.cookie))).await;
    assert!(
        git.contains("<td class=\"tool\">push</td>")
            && !git.contains("<td class=\"tool\">read</td>"),
        "{git}"
    );

    // The live tail: only what came after the page.
    let (_, _, tail) = send(&f.console, get("/api/log?after=4", Some(&f.cookie))).await;
    let tail: Value = serde_json::from_str(&tail).unwrap();
    assert_eq!(tail["html"], "");
    f.store
        .append(&[call("fs", "write", "deny", "rule")])
        .unwrap();
    let (_, _, tail) = send(
        &f.console,
        get("/api/log?after=4&verdict=deny", Some(&f.cookie)),
    )
    .await;
    let tail: Value = serde_json::from_str(&tail).unwrap();
    assert_eq!(tail["last"], 5);
    assert!(
        tail["html"]
            .as_str()
            .unwrap()
            .contains("<td class=\"tool\">write</td>"),
        "{tail}"
    );
}

#[tokio::test]
async fn a_call_with_the_prompts_content_is_laid_out_and_every_part_escaped() {
    let f = fixture().await;
    let details = json!({
        "server": "notes",
        "trust": "untrusted",
        "identity": "python3 server.py -> /usr/bin/python3",
        "previous_identity": "python3 old.py\u{202e}",
        "tool": "write",
        "title": "<script>document.title='pwned'</script>",
        "arguments": {"path": "<img src=x onerror=alert(1)>", "n": 3},
        "why": ["the tool may change things (a rule's <b>reason</b>)"],
        "risks": ["`notes` is not trusted", "WARNING: this tool may delete or overwrite data"],
        "changes": [{"field": "description", "old": "\"Writes.\"", "new": "\"Writes.<script>x()</script>\""}],
        "preview": {"source": "files", "kind": "diff", "digest": "sha256:p", "text": "--- a/n\n+++ b/n\n@@ -1 +1 @@\n-old\n+<script>y()</script>\n"}
    });
    enqueue_with(
        &f.store,
        "notes",
        "write",
        "the prompt's text",
        Some(details),
        Remember::Call,
    );
    let (_, _, page) = send(&f.console, get("/", Some(&f.cookie))).await;
    assert!(
        !page.contains("<script>document")
            && !page.contains("<script>x()")
            && !page.contains("<script>y()"),
        "{page}"
    );
    assert!(
        !page.contains("<img") && !page.contains("<b>reason"),
        "{page}"
    );
    assert!(!page.contains('\u{202e}'), "{page}");
    for part in [
        "<span class=\"trust untrusted\">untrusted</span>",
        "titled “&lt;script&gt;document.title=&#39;pwned&#39;&lt;/script&gt;”",
        "&quot;path&quot;: &quot;&lt;img src=x onerror=alert(1)&gt;&quot;",
        "<li>the tool may change things (a rule&#39;s &lt;b&gt;reason&lt;/b&gt;)</li>",
        "<li class=\"warning\">WARNING: this tool may delete or overwrite data</li>",
        "it was python3 old.py\\u{202e}.",
        "<td class=\"old\"><pre>Writes.</pre></td><td class=\"new\"><pre>Writes.&lt;script&gt;x()&lt;/script&gt;</pre></td>",
        "<pre class=\"prompt\">the prompt&#39;s text</pre>",
        "<dt>What it will change (computed by hintgate from the file on this machine)</dt>",
        "<pre class=\"preview diff\">",
        "<span class=\"del\">-old</span><span class=\"add\">+&lt;script&gt;y()&lt;/script&gt;</span></pre>",
    ] {
        assert!(page.contains(part), "{part} in {page}");
    }
}

#[tokio::test]
async fn a_held_change_whose_digest_is_not_its_definitions_is_not_approved() {
    // Someone who can write the store but not run hintgate puts a change
    // in the queue whose digest is not its definition's: approving it
    // would pin what the person never saw.
    let f = fixture().await;
    let old = tool("Writes a note.", false);
    f.store
        .put_pin(&Pin {
            server_key: "key-1".into(),
            server: "notes".into(),
            identity: "python3 server.py".into(),
            tool: "write".into(),
            digest: digest(&old),
            definition: old,
            pinned_at: now() - 100,
            seen: None,
            seal: Seal::Unchecked,
        })
        .unwrap();
    let shown = tool("Writes a note, harmlessly.", false);
    let forged = digest(&tool("Deletes every note.", true));
    f.store
        .see(
            "key-1",
            "write",
            &Seen {
                digest: forged.clone(),
                definition: shown,
                identity: "python3 server.py".into(),
            },
        )
        .unwrap();
    let (_, _, page) = send(
        &f.console,
        get("/definitions/change?key=key-1&tool=write", Some(&f.cookie)),
    )
    .await;
    let csrf = csrf(&page);
    let form = format!("csrf={csrf}&key=key-1&tool=write&digest={forged}");
    let (status, _, body) = send(
        &f.console,
        post("/definitions/approve", &f.cookie, Some(ORIGIN), &form),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(body.contains("without hintgate"), "{body}");
    let pin = f.store.pin("key-1", "write").unwrap().unwrap();
    assert_ne!(pin.digest, forged);
    assert!(pin.seen.is_some());
}

fn form_value(text: &str) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => {
                char::from(byte).to_string()
            }
            _ => format!("%{byte:02X}"),
        })
        .collect()
}

#[tokio::test]
async fn an_edit_is_checked_before_it_is_given_and_shown_escaped() {
    let f = fixture().await;
    let details = json!({
        "server": "notes",
        "tool": "write",
        "arguments": {"path": "</textarea><img src=x onerror=alert(1)>", "text": "old"},
        "input_schema": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "text": {"type": "string"}},
            "required": ["path", "text"],
        },
        "edited": {"by": "<b>mallory</b>", "of": 7, "original": {"path": "<script>z()</script>"}},
    });
    let id = enqueue_with(
        &f.store,
        "notes",
        "write",
        "prompt",
        Some(details),
        Remember::Call,
    );
    let (_, _, page) = send(&f.console, get("/", Some(&f.cookie))).await;
    assert!(
        !page.contains("</textarea><img")
            && !page.contains("<b>mallory")
            && !page.contains("<script>z()"),
        "{page}"
    );
    for part in [
        "<form method=\"post\" action=\"/edit\" class=\"edit\">",
        "&quot;path&quot;: &quot;&lt;/textarea&gt;&lt;img src=x onerror=alert(1)&gt;&quot;",
        "&lt;b&gt;mallory&lt;/b&gt; edited this call (#7)",
        "&quot;path&quot;: &quot;&lt;script&gt;z()&lt;/script&gt;&quot;",
    ] {
        assert!(page.contains(part), "{part} in {page}");
    }
    let csrf = csrf(&page);
    let edit = |arguments: &str, csrf: &str| {
        format!("csrf={csrf}&id={id}&arguments={}", form_value(arguments))
    };
    // Without the CSRF token, or an edit that cannot be used: refused, and
    // the call still waits.
    let (status, _, _) = send(
        &f.console,
        post(
            "/edit",
            &f.cookie,
            Some(ORIGIN),
            &edit(r#"{"path":"a","text":"b"}"#, "forged"),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    for (arguments, code) in [
        ("{", "edit-not-json"),
        ("[]", "edit-not-object"),
        (r#"{"path":"a"}"#, "edit-schema"),
        (r#"{"path":"a","text":"b","_meta":{}}"#, "edit-reserved-key"),
        (
            r#"{"path":"a","path":"b","text":"c"}"#,
            "edit-duplicate-key",
        ),
    ] {
        let (status, _, text) = send(
            &f.console,
            post("/edit", &f.cookie, Some(ORIGIN), &edit(arguments, &csrf)),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{arguments}");
        assert!(
            text.contains(code) && text.contains("the call still waits"),
            "{arguments}: {text}"
        );
        assert_eq!(
            f.store.pending(id).unwrap().unwrap().state,
            PendingState::Waiting
        );
    }
    // An edit that fits is given as the answer, as canonical JSON, for
    // this call only.
    let (status, response, _) = send(
        &f.console,
        post(
            "/edit",
            &f.cookie,
            Some(ORIGIN),
            &edit("{\"text\": \"new\",\n \"path\": \"a\"}", &csrf),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(
        response.headers()[header::LOCATION],
        format!("/?note=edited&id={id}")
    );
    match f.store.pending(id).unwrap().unwrap().state {
        PendingState::Answered(answer) => {
            assert!(answer.approve);
            assert_eq!(answer.remember, Remember::Call);
            assert_eq!(
                answer.arguments.as_deref(),
                Some(r#"{"path":"a","text":"new"}"#)
            );
            assert_eq!(answer.by, "tester (console)");
        }
        other => panic!("{other:?}"),
    }
    let (_, _, page) = send(
        &f.console,
        get(&format!("/?note=edited&id={id}"), Some(&f.cookie)),
    )
    .await;
    assert!(
        page.contains(&format!(
            "Call #{id} was edited; the gateway decides on the edited call"
        )),
        "{page}"
    );
    // An edit of a call that no longer waits changes nothing.
    let (_, response, _) = send(
        &f.console,
        post(
            "/edit",
            &f.cookie,
            Some(ORIGIN),
            &edit(r#"{"path":"b","text":"c"}"#, &csrf),
        ),
    )
    .await;
    assert_eq!(
        response.headers()[header::LOCATION],
        format!("/?note=answered&id={id}")
    );
}
