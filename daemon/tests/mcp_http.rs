//! `POST /mcp/` end to end, without sockets: the real router (`tower::ServiceExt::oneshot`),
//! a real LMDB store in a temporary directory, the real coordinator, the se-tools registry and
//! in-process effect handlers. Every status, header and body asserted here is contract.

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode};
use axum::Router;
use broker_core::broker::HandlerIdentity;
use broker_core::coordinator::{
    Coordinator, CoordinatorConfig, EffectHandler, EffectRequest, HandlerOutcome, Handlers,
};
use broker_core::grant::Grant;
use broker_core::object::{sid, Ref};
use broker_core::store::Store;
use broker_core::transition::Transition;
use broker_core::{log, registry, session, verify};
use handler_api::EffectClass;
use http_body_util::BodyExt;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};
use tower::ServiceExt;
use worldd::limits::Limits;
use worldd::mcp;
use worldd::state::{AppState, DaemonInfo};

/// The execution slots of the capacity test's daemon.
const SLOTS: usize = 8;

const ACCEPT_BOTH: &str = "application/json, text/event-stream";

// -------------------------------------------------------------------------------------------
// Handlers.

/// `Workspace.Read`: echoes the path inside text that needs JSON escaping and is not ASCII, so
/// the "text is exactly the committed bytes" assertions have something to bite on.
struct Echo;

impl EffectHandler for Echo {
    fn identity(&self) -> HandlerIdentity {
        HandlerIdentity::in_process("test/echo", "0.0.0")
    }
    fn execute(&self, req: &EffectRequest<'_>) -> HandlerOutcome {
        let path = req
            .payload
            .get("path")
            .and_then(Value::as_str)
            .unwrap_or("");
        let mut out = Map::new();
        // Two paths script the other outcomes of a read: its policy says no, or it fails.
        if path == "refuse-me" {
            out.insert("ok".into(), json!(false));
            out.insert("refused".into(), json!("read refuse-me: refused by policy"));
            return HandlerOutcome::Ok(out);
        }
        if path == "break-me" {
            return HandlerOutcome::Failed("the disk is on fire".into());
        }
        // Numbers whose canonical form serde_json writes otherwise (`1e+21` as `1e21`).
        if path == "floats" {
            out.insert("ok".into(), json!(true));
            out.insert("g".into(), json!(1.4541676939305423e237));
            out.insert("h".into(), json!(1e21));
            out.insert("m".into(), json!(0.000001));
            // Canonical JSON orders names by UTF-16 units: U+1F600 before U+FB01.
            out.insert("\u{FB01}".into(), json!(1));
            out.insert("\u{1F600}".into(), json!(2));
            return HandlerOutcome::Ok(out);
        }
        out.insert("ok".into(), json!(true));
        out.insert(
            "content".into(),
            json!(format!(
                "read {path}: \"quoted\" \\ back\nline two\té ✓ \u{2028} \u{1F600} </script>"
            )),
        );
        HandlerOutcome::Ok(out)
    }
}

/// A gate the held handler waits on, so capacity and deadline tests are deterministic.
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    cv: Condvar,
}

impl Gate {
    fn wait(&self) {
        let mut open = self.open.lock().unwrap();
        // Bounded so a failing test cannot wedge the blocking pool forever.
        let until = std::time::Instant::now() + Duration::from_secs(60);
        while !*open {
            let left = until.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            open = self.cv.wait_timeout(open, left).unwrap().0;
        }
    }
    fn release(&self) {
        *self.open.lock().unwrap() = true;
        self.cv.notify_all();
    }
}

/// `Workspace.Write`: reports that it entered, then waits for the gate.
struct Held {
    gate: Arc<Gate>,
    entered: tokio::sync::mpsc::UnboundedSender<()>,
}

impl EffectHandler for Held {
    fn identity(&self) -> HandlerIdentity {
        HandlerIdentity::in_process("test/held", "0.0.0")
    }
    fn execute(&self, _: &EffectRequest<'_>) -> HandlerOutcome {
        let _ = self.entered.send(());
        self.gate.wait();
        let mut out = Map::new();
        out.insert("ok".into(), json!(true));
        HandlerOutcome::Ok(out)
    }
}

/// `Ailang.Check`: the effect runs, its finish phase fails (→ EffectsUnrecorded).
struct BadFinish;

impl EffectHandler for BadFinish {
    fn identity(&self) -> HandlerIdentity {
        HandlerIdentity::in_process("test/bad-finish", "0.0.0")
    }
    fn execute(&self, _: &EffectRequest<'_>) -> HandlerOutcome {
        let mut out = Map::new();
        out.insert("ok".into(), json!(true));
        HandlerOutcome::Ok(out)
    }
    fn finish(&self, name: &str, _: &Value) -> Result<Map<String, Value>, String> {
        Err(format!("finish {name} exploded on purpose"))
    }
}

// -------------------------------------------------------------------------------------------
// The harness.

struct Harness {
    _dir: tempfile::TempDir,
    store: Store,
    state: AppState,
    router: Router,
    /// The whole HTTP surface (MCP, A2A, REST) over the same state.
    full: Router,
    gate: Arc<Gate>,
    entered: tokio::sync::mpsc::UnboundedReceiver<()>,
    /// When armed, the coordinator stalls after a handler returned (like a store that does
    /// not answer) until the gate opens.
    stall: Arc<StallAfterHandler>,
}

#[derive(Default)]
struct StallAfterHandler {
    armed: std::sync::atomic::AtomicBool,
    /// Stall after the intent is journaled instead (before the handler runs).
    before_handler: std::sync::atomic::AtomicBool,
    /// Stall inside the commit instead: the store's writer holds the call's group commit.
    in_commit: std::sync::atomic::AtomicBool,
    /// Set when a commit stalled.
    commit_held: std::sync::atomic::AtomicBool,
    gate: Gate,
}

impl broker_core::coordinator::Hooks for StallAfterHandler {
    fn reached(&self, point: broker_core::coordinator::CrashPoint) {
        use broker_core::coordinator::CrashPoint;
        use std::sync::atomic::Ordering::SeqCst;
        if (point == CrashPoint::AfterHandler && self.armed.load(SeqCst))
            || (point == CrashPoint::AfterIntent && self.before_handler.load(SeqCst))
        {
            self.gate.wait();
        }
        if point == CrashPoint::MidCommit && self.in_commit.load(SeqCst) {
            self.commit_held.store(true, SeqCst);
            self.gate.wait();
        }
    }
}

fn se_tool(name: &str) -> Value {
    let path = format!(
        "{}/../transitions/se-tools/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// A copy of `ailang-read` under another id.
fn read_tool_as(id: &str) -> Transition {
    let mut doc = se_tool("ailang-read");
    doc["id"] = json!(id);
    Transition::from_value(doc).unwrap()
}

fn harness_with(limits: Limits) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(&dir.path().join("db")).unwrap();
    let mut docs = Vec::new();
    for entry in std::fs::read_dir(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../transitions/se-tools"
    ))
    .unwrap()
    {
        let bytes = std::fs::read(entry.unwrap().path()).unwrap();
        docs.push(Transition::from_slice(&bytes).unwrap());
    }
    // An id that needs escaping: tools.echo → tools_decho.
    docs.push(read_tool_as("tools.echo"));
    registry::publish(&store, registry::DEFAULT_REGISTRY, docs, "test").unwrap();

    let gate = Arc::new(Gate::default());
    let stall = Arc::new(StallAfterHandler::default());
    let (tx, entered) = tokio::sync::mpsc::unbounded_channel();
    let mut handlers = Handlers::new();
    handlers.insert("Workspace.Read", Arc::new(Echo)).unwrap();
    handlers
        .insert(
            "Workspace.Write",
            Arc::new(Held {
                gate: gate.clone(),
                entered: tx,
            }),
        )
        .unwrap();
    handlers
        .insert("Ailang.Check", Arc::new(BadFinish))
        .unwrap();
    // No handler for Ailang.Run: ailang-run trips rule R8.
    let coordinator = Coordinator::new(
        store.clone(),
        handlers,
        CoordinatorConfig {
            handler_deadline: limits.handler_deadline,
            hooks: stall.clone(),
            ..CoordinatorConfig::default()
        },
    );
    // The classes a plugin manifest would declare; Ailang.* stays unknown (no plugin here).
    let classes = [
        ("Workspace.Read".to_owned(), EffectClass::Read),
        ("Workspace.Write".to_owned(), EffectClass::Write),
    ]
    .into_iter()
    .collect();
    let state = AppState::builder(
        store.clone(),
        Arc::new(coordinator),
        DaemonInfo {
            db_path: dir.path().join("db").display().to_string(),
            version: "test",
            open_reads: false,
        },
    )
    .classes(classes)
    .limits(limits)
    .build();
    let router = mcp::routes().with_state(state.clone());
    let full = worldd::server::router(state.clone());
    Harness {
        _dir: dir,
        store,
        state,
        router,
        full,
        gate,
        entered,
        stall,
    }
}

fn harness() -> Harness {
    harness_with(Limits::default())
}

impl Harness {
    /// A session of `episode` holding `grants` (e.g. `Workspace.Read=worktree:10`).
    fn token(&self, episode: &str, grants: &[&str]) -> String {
        let grants: Vec<Grant> = grants.iter().map(|g| g.parse().unwrap()).collect();
        let now = self.state.coordinator().now();
        session::mint(&self.store, episode, grants, 3600, now)
            .unwrap()
            .token
    }

    fn reader(&self) -> String {
        self.token("ep1", &["Workspace.Read=worktree:10"])
    }

    /// `ailang-read` of `a` as `token`, JSON-RPC id `id`: it must succeed.
    async fn reads_ok(&self, token: &str, id: u64) {
        let v = self
            .rpc(
                token,
                &call_body(json!(id), "ailang-read", json!({"path": "a"})),
            )
            .await
            .sse();
        assert_eq!(v["result"]["structuredContent"]["ok"], json!(true), "{v}");
    }

    /// The world revision (= index of the newest log entry).
    fn revision(&self) -> u64 {
        self.store.read(log::head).unwrap().unwrap().world.revision
    }

    async fn send(&self, req: Request<Body>) -> Reply {
        send(&self.router, req).await
    }

    /// A well-formed POST of `body` under `token`.
    async fn rpc(&self, token: &str, body: &str) -> Reply {
        self.send(rpc(token, None, body)).await
    }
}

struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }

    /// The JSON of the single SSE event, after checking the framing byte for byte.
    fn sse(&self) -> Value {
        assert_eq!(self.status, StatusCode::OK, "body: {}", self.body);
        assert_eq!(self.header("content-type"), Some("text/event-stream"));
        let data = self
            .body
            .strip_prefix("event: message\ndata: ")
            .and_then(|rest| rest.strip_suffix("\n\n"))
            .unwrap_or_else(|| panic!("not one SSE event: {:?}", self.body));
        assert!(!data.contains('\n') && !data.contains('\r'), "{data:?}");
        serde_json::from_str(data).unwrap()
    }

    /// The raw `data:` text of the SSE event.
    fn sse_data(&self) -> &str {
        self.sse();
        &self.body["event: message\ndata: ".len()..self.body.len() - 2]
    }

    fn assert_text(&self, status: StatusCode, text: &str) {
        assert_eq!(self.status, status, "body: {}", self.body);
        assert_eq!(
            self.header("content-type"),
            Some("text/plain; charset=utf-8")
        );
        assert_eq!(self.body, text);
    }

    /// The fixed host-failure envelope: plain JSON, HTTP 200, exact bytes.
    fn assert_envelope(&self, id: &str, message: &str) {
        assert_eq!(self.status, StatusCode::OK, "body: {}", self.body);
        assert_eq!(self.header("content-type"), Some("application/json"));
        assert_eq!(
            self.body,
            format!(
                r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32603,"message":"{message}"}}}}"#
            )
        );
    }

    fn assert_accepted(&self) {
        assert_eq!(self.status, StatusCode::ACCEPTED);
        assert_eq!(self.body, "");
    }
}

fn request(headers: &[(&str, &str)], body: impl Into<Body>) -> Request<Body> {
    let mut b = Request::builder().method(Method::POST).uri("/mcp/");
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(body.into()).unwrap()
}

fn rpc(token: &str, version: Option<&str>, body: &str) -> Request<Body> {
    let auth = format!("Bearer {token}");
    let mut headers = vec![
        ("authorization", auth.as_str()),
        ("content-type", "application/json"),
        ("accept", ACCEPT_BOTH),
    ];
    if let Some(v) = version {
        headers.push(("mcp-protocol-version", v));
    }
    request(&headers, body.to_owned())
}

async fn send(router: &Router, req: Request<Body>) -> Reply {
    let resp = router.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    Reply {
        status,
        headers,
        body: String::from_utf8(bytes.to_vec()).unwrap(),
    }
}

fn call_body(id: Value, name: &str, args: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": args}})
        .to_string()
}

// -------------------------------------------------------------------------------------------
// Authorization.

#[tokio::test]
async fn every_row_of_the_auth_table_is_401_with_its_text() {
    let h = harness();
    let now = h.state.coordinator().now();
    let expired = session::mint(
        &h.store,
        "old",
        vec!["Workspace.Read=worktree:1".parse().unwrap()],
        1,
        now - 1000,
    )
    .unwrap()
    .token;
    let unknown = "ab".repeat(32);
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;

    let absent = "session credential is absent: send Authorization: Bearer <session-credential>";
    let malformed = "malformed Authorization header: expected Bearer <64-hex-credential>";
    let cases: Vec<(Option<String>, &str)> = vec![
        (None, absent),
        (Some("Bearer".into()), malformed),
        (Some("Bearer xyz".into()), malformed),
        (Some(format!("Basic {unknown}")), malformed),
        // The scheme's letter case is free (RFC 9110 11.1): read on to the credential.
        (
            Some(format!("bearer {unknown}")),
            "unknown session credential",
        ),
        (
            Some(format!("BEARER {expired}")),
            "session credential has expired",
        ),
        (Some(format!("Bearer {unknown} extra")), malformed),
        (
            Some(format!("Bearer {unknown}")),
            "unknown session credential",
        ),
        (
            Some(format!("Bearer {expired}")),
            "session credential has expired",
        ),
    ];
    for (auth, text) in cases {
        let mut headers = vec![
            ("content-type", "application/json"),
            ("accept", ACCEPT_BOTH),
        ];
        if let Some(a) = &auth {
            headers.push(("authorization", a.as_str()));
        }
        let r = h.send(request(&headers, ping)).await;
        r.assert_text(StatusCode::UNAUTHORIZED, text);
        // RFC 6750 §3.1: the credential's fault in the challenge, bare when none was sent.
        let challenge = match text {
            t if t == absent => r#"Bearer realm="worldd""#.to_owned(),
            t if t == malformed => {
                format!(
                    r#"Bearer realm="worldd", error="invalid_request", error_description="{t}""#
                )
            }
            t => {
                format!(r#"Bearer realm="worldd", error="invalid_token", error_description="{t}""#)
            }
        };
        assert_eq!(
            r.header("www-authenticate"),
            Some(challenge.as_str()),
            "{auth:?}"
        );
    }
    // A live credential under a lower-case scheme is served (it was refused as malformed).
    let auth = format!("bearer {}", h.reader());
    let headers = [
        ("content-type", "application/json"),
        ("accept", ACCEPT_BOTH),
        ("authorization", auth.as_str()),
    ];
    assert_eq!(
        h.send(request(&headers, ping)).await.sse_data(),
        r#"{"jsonrpc":"2.0","id":1,"result":{}}"#
    );
}

#[tokio::test]
async fn authorization_is_checked_before_the_transport() {
    let h = harness();
    // Wrong Content-Type, no Accept, unsupported version, a body that is not JSON at all.
    let headers = [
        ("content-type", "text/plain"),
        ("mcp-protocol-version", "1999-01-01"),
    ];
    let r = h.send(request(&headers, "not json")).await;
    r.assert_text(
        StatusCode::UNAUTHORIZED,
        "session credential is absent: send Authorization: Bearer <session-credential>",
    );
    let mut with_bad_auth = headers.to_vec();
    with_bad_auth.push(("authorization", "Bearer nope"));
    let r = h.send(request(&with_bad_auth, "x".repeat(5 << 20))).await;
    r.assert_text(
        StatusCode::UNAUTHORIZED,
        "malformed Authorization header: expected Bearer <64-hex-credential>",
    );
}

// -------------------------------------------------------------------------------------------
// Transport rules.

#[tokio::test]
async fn content_type_must_be_json() {
    let h = harness();
    let auth = format!("Bearer {}", h.reader());
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    for ct in [
        None,
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        Some(""),
    ] {
        let mut headers = vec![("authorization", auth.as_str()), ("accept", ACCEPT_BOTH)];
        if let Some(ct) = ct {
            headers.push(("content-type", ct));
        }
        h.send(request(&headers, ping)).await.assert_text(
            StatusCode::BAD_REQUEST,
            "Content-Type must be application/json",
        );
    }
    let headers = [
        ("authorization", auth.as_str()),
        ("accept", ACCEPT_BOTH),
        ("content-type", "application/json; charset=utf-8"),
    ];
    assert_eq!(
        h.send(request(&headers, ping)).await.sse()["result"],
        json!({})
    );
    // Content-Type is checked before Accept.
    let headers = [
        ("authorization", auth.as_str()),
        ("content-type", "text/plain"),
    ];
    h.send(request(&headers, ping)).await.assert_text(
        StatusCode::BAD_REQUEST,
        "Content-Type must be application/json",
    );
}

#[tokio::test]
async fn accept_must_list_json_and_event_stream() {
    let h = harness();
    let auth = format!("Bearer {}", h.reader());
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let text = "Accept must list both application/json and text/event-stream";
    for accept in [
        None,
        Some("*/*"),
        Some("application/json"),
        Some("text/event-stream"),
        Some("application/*, text/*"),
        Some("application/json, text/event-stream;q=0"),
    ] {
        let mut headers = vec![
            ("authorization", auth.as_str()),
            ("content-type", "application/json"),
        ];
        if let Some(a) = accept {
            headers.push(("accept", a));
        }
        h.send(request(&headers, ping))
            .await
            .assert_text(StatusCode::BAD_REQUEST, text);
    }
    for accept in [
        "application/json, text/event-stream",
        "text/event-stream;q=0.9, application/json",
        "application/json;q=0.5,*/*;q=0.1,text/event-stream",
    ] {
        let headers = [
            ("authorization", auth.as_str()),
            ("content-type", "application/json"),
            ("accept", accept),
        ];
        assert_eq!(
            h.send(request(&headers, ping)).await.sse()["id"],
            json!(1),
            "{accept}"
        );
    }
    // Accept is checked before the protocol version.
    let headers = [
        ("authorization", auth.as_str()),
        ("content-type", "application/json"),
        ("mcp-protocol-version", "bogus"),
    ];
    h.send(request(&headers, ping))
        .await
        .assert_text(StatusCode::BAD_REQUEST, text);
}

#[tokio::test]
async fn protocol_version_header_rules() {
    let h = harness();
    let t = h.reader();
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    for v in [
        None,
        Some("2025-11-25"),
        Some("2025-06-18"),
        Some("2025-03-26"),
        Some(" 2025-06-18 "),
    ] {
        assert_eq!(
            h.send(rpc(&t, v, ping)).await.sse()["result"],
            json!({}),
            "{v:?}"
        );
    }
    for v in [
        "2024-11-05",
        "2026-07-29",
        "",
        "2025-06-18x",
        "2025-06-18, 2025-03-26",
    ] {
        let req = {
            let mut r = rpc(&t, None, ping);
            r.headers_mut()
                .insert("mcp-protocol-version", v.parse().unwrap());
            r
        };
        h.send(req).await.assert_text(
            StatusCode::BAD_REQUEST,
            &format!("unsupported MCP-Protocol-Version \"{v}\"; supported: 2026-07-28, 2025-11-25, 2025-06-18, 2025-03-26"),
        );
    }
}

#[tokio::test]
async fn bodies_over_4_mib_are_413() {
    let h = harness();
    let t = h.reader();
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    // Exactly the limit: accepted (JSON allows trailing whitespace).
    let exact = format!(
        "{ping}{}",
        " ".repeat(Limits::default().mcp_body_bytes - ping.len())
    );
    assert_eq!(exact.len(), 4_194_304);
    assert_eq!(h.rpc(&t, &exact).await.sse()["result"], json!({}));
    // One byte more: refused, with or without a declared length.
    let over = format!("{exact} ");
    let text = "request body exceeds the 4 MiB limit (4194304 bytes)";
    h.rpc(&t, &over)
        .await
        .assert_text(StatusCode::PAYLOAD_TOO_LARGE, text);
    let mut declared = rpc(&t, None, &over);
    declared
        .headers_mut()
        .insert("content-length", over.len().to_string().parse().unwrap());
    h.send(declared)
        .await
        .assert_text(StatusCode::PAYLOAD_TOO_LARGE, text);
    assert_eq!(h.state.metrics().trips(worldd::metrics::Limit::BodySize), 2);
}

#[tokio::test]
async fn other_http_methods_are_405_and_the_slashless_path_works() {
    let h = harness();
    let t = h.reader();
    for method in [Method::GET, Method::DELETE, Method::PUT] {
        let req = Request::builder()
            .method(method.clone())
            .uri("/mcp/")
            .header("authorization", format!("Bearer {t}"))
            .body(Body::empty())
            .unwrap();
        assert_eq!(
            h.send(req).await.status,
            StatusCode::METHOD_NOT_ALLOWED,
            "{method}"
        );
    }
    let mut req = rpc(&t, None, r#"{"jsonrpc":"2.0","id":9,"method":"ping"}"#);
    *req.uri_mut() = "/mcp".parse().unwrap();
    assert_eq!(h.send(req).await.sse()["id"], json!(9));
}

// -------------------------------------------------------------------------------------------
// JSON-RPC framing.

#[tokio::test]
async fn malformed_json_is_a_parse_error_event_that_says_where() {
    let h = harness();
    let t = h.reader();
    for (body, why) in [
        ("{bad", "key must be a string at line 1 column 2"),
        ("", "EOF while parsing a value at line 1 column 0"),
        ("[1,", "EOF while parsing a value at line 1 column 3"),
        ("\u{feff}{}", "expected value at line 1 column 1"),
    ] {
        let r = h.rpc(&t, body).await;
        assert_eq!(
            r.sse_data(),
            format!(
                r#"{{"jsonrpc":"2.0","id":null,"error":{{"code":-32700,"message":"Parse error: {why}; nothing was run"}}}}"#
            ),
            "{body:?}"
        );
    }
}

/// An attacker's body nested far past what the parser follows (20,000 arrays, 40 KB): a parse
/// error that says so, at the 125th array (three objects and 125 arrays make the 128th level,
/// one past the 127 serde_json parses; the prefix is 97 bytes, so that bracket is column 222),
/// nothing run, and the daemon answers the next call. One level less still parses.
#[tokio::test]
async fn a_body_nested_past_the_parsers_limit_is_a_parse_error_that_says_so() {
    let h = harness();
    let t = h.reader();
    let nested = |arrays: usize| {
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"ailang-read","arguments":{{"path":{}{}}}}}}}"#,
            "[".repeat(arrays),
            "]".repeat(arrays)
        )
    };
    // 127 levels parse: the call goes on, and its plan refuses the argument.
    let r = h.rpc(&t, &nested(124)).await;
    assert_eq!(
        r.sse()["result"]["structuredContent"]["refused"],
        json!("argument \"path\" must be a string"),
        "{}",
        r.sse_data()
    );
    let r = h.rpc(&t, &nested(20_000)).await;
    assert_eq!(
        r.sse_data(),
        r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error: recursion limit exceeded at line 1 column 222; nothing was run"}}"#
    );
    let r = h
        .rpc(&t, r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#)
        .await;
    assert_eq!(r.sse()["result"], json!({}));
}

#[tokio::test]
async fn invalid_requests_are_32600() {
    let h = harness();
    let t = h.reader();
    let cases = [
        ("5", "null", "invalid request: expected a JSON-RPC object"),
        (
            r#"{"id":1,"method":"ping"}"#,
            "1",
            "invalid request: \"jsonrpc\" must be \"2.0\"",
        ),
        (
            r#"{"jsonrpc":"2.0","id":"a"}"#,
            "\"a\"",
            "invalid request: a request needs \"method\"",
        ),
        (
            r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
            "null",
            "invalid request: \"id\" must be a string or an integer",
        ),
        (
            r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#,
            "null",
            "invalid request: \"id\" must be a string or an integer",
        ),
        (
            r#"{"jsonrpc":"2.0","id":3,"method":"ping","params":"x"}"#,
            "3",
            "invalid request: \"params\" must be an object or an array",
        ),
    ];
    for (body, id, message) in cases {
        assert_eq!(
            h.rpc(&t, body).await.sse_data(),
            format!(
                r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32600,"message":"{}"}}}}"#,
                message.replace('"', "\\\"")
            ),
            "{body}"
        );
    }
}

#[tokio::test]
async fn unknown_methods_are_32601() {
    let h = harness();
    let r = h
        .rpc(
            &h.reader(),
            r#"{"jsonrpc":"2.0","id":4,"method":"resources/list"}"#,
        )
        .await;
    assert_eq!(
        r.sse_data(),
        r#"{"jsonrpc":"2.0","id":4,"error":{"code":-32601,"message":"method not found: \"resources/list\""}}"#
    );
}

#[tokio::test]
async fn notifications_and_responses_are_202() {
    let h = harness();
    let t = h.reader();
    let before = h.revision();
    for body in [
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}"#,
        r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
        r#"{"jsonrpc":"2.0","id":1,"error":{"code":-1,"message":"no"}}"#,
        // A tools/call without an id is a notification: ignored, never executed.
        r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"ailang-read","arguments":{"path":"a"}}}"#,
    ] {
        h.rpc(&t, body).await.assert_accepted();
    }
    assert_eq!(h.revision(), before, "a notification ran a tool");
}

// -------------------------------------------------------------------------------------------
// initialize, ping.

#[tokio::test]
async fn initialize_answers_with_capabilities_and_version() {
    let h = harness();
    let t = h.reader();
    let body = |v: &str| {
        json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
            "protocolVersion": v, "capabilities": {}, "clientInfo": {"name":"t","version":"0"}}})
        .to_string()
    };
    for (asked, got) in [
        ("2025-06-18", "2025-06-18"),
        ("2025-03-26", "2025-03-26"),
        ("2025-11-25", "2025-11-25"),
        ("2024-11-05", "2025-11-25"),
    ] {
        let r = h.rpc(&t, &body(asked)).await;
        let v = r.sse();
        assert_eq!(v["result"]["protocolVersion"], json!(got), "{asked}");
        assert_eq!(
            v["result"]["capabilities"],
            json!({"tools": {"listChanged": false}})
        );
        assert_eq!(
            v["result"]["serverInfo"],
            json!({"name": "worldd", "version": env!("CARGO_PKG_VERSION")})
        );
        assert!(v["result"]["instructions"]
            .as_str()
            .unwrap()
            .contains("fresh random task id"));
        assert!(r
            .sse_data()
            .starts_with(&format!(r#"{{"jsonrpc":"2.0","id":1,"result":{{"protocolVersion":"{got}","capabilities":{{"tools":{{"listChanged":false}}}},"serverInfo":{{"name":"worldd","version":""#)));
    }
    // Stateless: no session header.
    assert!(h
        .rpc(&t, &body("2025-06-18"))
        .await
        .header("mcp-session-id")
        .is_none());
}

#[tokio::test]
async fn initialize_without_the_params_the_spec_requires_is_invalid_params() {
    let h = harness();
    let t = h.reader();
    let whole = r#""protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}"#;
    for (params, message) in [
        // No params at all, or not an object (`null` is no params object: an invalid request).
        (
            None,
            r#"invalid params: initialize params must be an object with \"protocolVersion\", \"capabilities\" and \"clientInfo\""#,
        ),
        (
            Some(r#"["2025-06-18"]"#.to_owned()),
            r#"invalid params: initialize params must be an object with \"protocolVersion\", \"capabilities\" and \"clientInfo\""#,
        ),
        // Members missing: each is named.
        (
            Some("{}".to_owned()),
            r#"invalid params: \"protocolVersion\", \"capabilities\" and \"clientInfo\" are missing"#,
        ),
        (
            Some(r#"{"protocolVersion":"2025-06-18"}"#.to_owned()),
            r#"invalid params: \"capabilities\" and \"clientInfo\" are missing"#,
        ),
        (
            Some(r#"{"protocolVersion":"2025-06-18","capabilities":{}}"#.to_owned()),
            r#"invalid params: \"clientInfo\" is missing"#,
        ),
        (
            Some(r#"{"capabilities":{},"clientInfo":{"name":"t","version":"0"}}"#.to_owned()),
            r#"invalid params: \"protocolVersion\" is missing"#,
        ),
        // Members of the wrong type.
        (
            Some(format!(
                "{{{}}}",
                whole.replace(r#""2025-06-18""#, "20250618")
            )),
            r#"invalid params: \"protocolVersion\" must be a string"#,
        ),
        (
            Some(format!(
                "{{{}}}",
                whole.replace(r#""capabilities":{}"#, r#""capabilities":null"#)
            )),
            r#"invalid params: \"capabilities\" must be an object"#,
        ),
        (
            Some(format!(
                "{{{}}}",
                whole.replace(r#"{"name":"t","version":"0"}"#, r#""t 0""#)
            )),
            r#"invalid params: \"clientInfo\" must be an object"#,
        ),
    ] {
        let body = match &params {
            None => r#"{"jsonrpc":"2.0","id":1,"method":"initialize"}"#.to_owned(),
            Some(p) => format!(r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{p}}}"#),
        };
        // Under the default revision and a named one alike.
        for version in [None, Some("2025-11-25")] {
            let r = h.send(rpc(&t, version, &body)).await;
            assert_eq!(
                r.sse_data(),
                format!(
                    r#"{{"jsonrpc":"2.0","id":1,"error":{{"code":-32602,"message":"{message}"}}}}"#
                ),
                "{body}"
            );
            assert!(r.header("mcp-session-id").is_none());
        }
    }
    // All three present, the handshake answers as before, whatever else the client sends.
    let v = h
        .rpc(
            &t,
            &format!(r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{{whole},"_meta":{{}}}}}}"#),
        )
        .await
        .sse();
    assert_eq!(v["result"]["protocolVersion"], "2025-06-18", "{v}");
}

#[tokio::test]
async fn ping_is_an_empty_result_event() {
    let h = harness();
    let r = h
        .rpc(
            &h.reader(),
            r#"{"jsonrpc":"2.0","id":"p-1","method":"ping"}"#,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    assert_eq!(
        r.body,
        "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":\"p-1\",\"result\":{}}\n\n"
    );
}

// -------------------------------------------------------------------------------------------
// tools/list.

fn list_body() -> &'static str {
    r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#
}

fn tool_names(v: &Value) -> Vec<String> {
    v["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

/// Every list is one page and no `nextCursor` is ever sent, so a cursor is one this server
/// never gave: refused (MCP says SHOULD), not answered with the first page as if it were.
#[tokio::test]
async fn tools_list_refuses_a_cursor_it_never_gave() {
    let h = harness();
    let reader = h.reader();
    let v = h
        .rpc(
            &reader,
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"cursor":"zzz"}}"#,
        )
        .await
        .sse();
    assert_eq!(
        v,
        json!({"jsonrpc": "2.0", "id": 3, "error": {"code": -32602, "message":
               "invalid params: unknown cursor \"zzz\": tools/list answers in one page and gives no cursor"}})
    );
    let v = h.rpc(&reader, list_body()).await.sse();
    assert!(v["result"]["nextCursor"].is_null(), "{v}");
    // A null cursor is none.
    let v = h
        .rpc(
            &reader,
            r#"{"jsonrpc":"2.0","id":4,"method":"tools/list","params":{"cursor":null}}"#,
        )
        .await
        .sse();
    assert_eq!(tool_names(&v), ["ailang-read", "tools_decho"], "{v}");
}

#[tokio::test]
async fn tools_list_follows_the_sessions_grants() {
    let h = harness();
    let reader = h.reader();
    let v = h.rpc(&reader, list_body()).await.sse();
    assert_eq!(tool_names(&v), ["ailang-read", "tools_decho"]);
    let read = &v["result"]["tools"][0];
    let doc = se_tool("ailang-read");
    assert_eq!(
        read.as_object().unwrap().keys().collect::<Vec<_>>(),
        [
            "annotations",
            "description",
            "inputSchema",
            "name",
            "outputSchema",
            "title"
        ]
    );
    assert_eq!(
        read["annotations"],
        json!({"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false})
    );
    assert_eq!(read["title"], doc["title"]);
    assert_eq!(read["description"], doc["description"]);
    assert_eq!(read["inputSchema"], doc["inputSchema"]);
    assert_eq!(read["outputSchema"], doc["outputSchema"]);
    assert_eq!(read["inputSchema"]["type"], "object");

    let writer = h.token("ep2", &["Workspace.Write=worktree:5"]);
    let v = h.rpc(&writer, list_body()).await.sse();
    assert_eq!(tool_names(&v), ["ailang-edit", "ailang-write"]);
    for tool in v["result"]["tools"].as_array().unwrap() {
        assert_eq!(
            tool["annotations"],
            json!({"readOnlyHint": false, "destructiveHint": true, "idempotentHint": false, "openWorldHint": false}),
            "{}",
            tool["name"]
        );
    }
    // An effect no loaded plugin declares is unknown: not read-only, may reach anywhere.
    let runner = h.token("ep4", &["Ailang.Run=worktree:5"]);
    let v = h.rpc(&runner, list_body()).await.sse();
    assert_eq!(tool_names(&v), ["ailang-run"]);
    assert_eq!(
        v["result"]["tools"][0]["annotations"],
        json!({"readOnlyHint": false, "destructiveHint": true, "idempotentHint": false, "openWorldHint": true})
    );

    // A grant for another scope sees nothing.
    let elsewhere = h.token("ep3", &["Workspace.Read=elsewhere:5"]);
    let v = h.rpc(&elsewhere, list_body()).await.sse();
    assert_eq!(v["result"], json!({"tools": []}));

    // The surface is rebuilt per request: a tool published now shows up at once.
    registry::publish(
        &h.store,
        registry::DEFAULT_REGISTRY,
        vec![read_tool_as("x/y_z")],
        "test",
    )
    .unwrap();
    let v = h.rpc(&reader, list_body()).await.sse();
    assert_eq!(tool_names(&v), ["ailang-read", "tools_decho", "x_sy_uz"]);
}

#[tokio::test]
async fn a_name_over_64_bytes_refuses_the_whole_surface() {
    let h = harness();
    // 61 bytes as an id, 73 once every "." is escaped to "_d": the rule applies to the name.
    let id = format!("{}x", "long.".repeat(12));
    assert_eq!(id.len(), 61);
    registry::publish(
        &h.store,
        registry::DEFAULT_REGISTRY,
        vec![read_tool_as(&id)],
        "test",
    )
    .unwrap();
    let message = format!(
        "tool \\\"{id}\\\" has an MCP name longer than 64 bytes; the tool surface is refused"
    );
    let reader = h.reader();
    assert_eq!(
        h.rpc(&reader, list_body()).await.sse_data(),
        format!(r#"{{"jsonrpc":"2.0","id":2,"error":{{"code":-32603,"message":"{message}"}}}}"#)
    );
    // Calls are refused too: there is no surface to admit them.
    let r = h
        .rpc(
            &reader,
            &call_body(json!(3), "ailang-read", json!({"path": "a"})),
        )
        .await;
    assert_eq!(
        r.sse_data(),
        format!(r#"{{"jsonrpc":"2.0","id":3,"error":{{"code":-32603,"message":"{message}"}}}}"#)
    );
    // A session that cannot see the long tool is unaffected.
    let writer = h.token("ep2", &["Workspace.Write=worktree:5"]);
    assert_eq!(
        tool_names(&h.rpc(&writer, list_body()).await.sse()),
        ["ailang-edit", "ailang-write"]
    );
}

// -------------------------------------------------------------------------------------------
// tools/call.

#[tokio::test]
async fn tools_call_returns_exactly_the_committed_bytes() {
    let h = harness();
    let t = h.reader();
    let before = h.revision();
    for (rpc_id, name) in [(json!(3), "ailang-read"), (json!("call-4"), "tools_decho")] {
        let r = h
            .rpc(
                &t,
                &call_body(rpc_id.clone(), name, json!({"path": "src/main.ail"})),
            )
            .await;
        let v = r.sse();
        assert_eq!(v["jsonrpc"], "2.0");
        assert_eq!(v["id"], rpc_id);
        let result = &v["result"];
        assert_eq!(
            result.as_object().unwrap().keys().collect::<Vec<_>>(),
            ["_meta", "content", "isError", "structuredContent"]
        );
        assert_eq!(result["isError"], json!(false));
        let content = result["content"].as_array().unwrap();
        assert_eq!(content.len(), 1);
        assert_eq!(content[0]["type"], "text");
        let text = content[0]["text"].as_str().unwrap();

        // The text is the committed output object, byte for byte: its sha256 names a stored
        // invocation output, and `why` re-verifies the chain from exactly these bytes.
        let output_ref = Ref::of(text.as_bytes());
        assert_eq!(
            format!("sha256:{}", hex::encode(Sha256::digest(text.as_bytes()))),
            output_ref.to_string()
        );
        let stored = h.store.read(|r| r.object(&output_ref)).unwrap().unwrap();
        assert_eq!(stored.semantic_id, sid::INVOCATION_OUTPUT);
        assert_eq!(stored.payload, text.as_bytes());
        let report = verify::why(
            &h.store,
            &verify::Handle::Output(text.as_bytes().to_vec()),
            100,
        )
        .unwrap();
        assert!(report.all_ok());

        // _meta: the handles to reconcile and verify this call, and its classification.
        let head = h.store.read(log::head).unwrap().unwrap();
        let meta = &result["_meta"];
        assert_eq!(
            meta.as_object().unwrap().keys().collect::<Vec<_>>(),
            [
                "world/effects",
                "world/entryIndex",
                "world/invocationId",
                "world/outcome",
                "world/outputRef",
                "world/replayed",
                "world/worldRef"
            ]
        );
        assert!(meta["world/invocationId"]
            .as_str()
            .unwrap()
            .starts_with("mcp:ep1:"));
        assert_eq!(meta["world/entryIndex"], json!(head.world.revision));
        assert_eq!(meta["world/worldRef"], json!(head.world_ref.to_string()));
        assert_eq!(meta["world/outputRef"], json!(output_ref.to_string()));
        assert_eq!(meta["world/replayed"], json!(false));
        assert_eq!(
            meta["world/outcome"],
            json!({"kind": "ok", "retryable": true})
        );
        let effect = &meta["world/effects"][0];
        assert_eq!(effect["effect"], "Workspace.Read");
        assert_eq!(effect["status"], "ok");
        assert_eq!(
            effect["budgetAfter"],
            json!(if rpc_id == json!(3) { 9 } else { 8 })
        );

        let structured: Value = serde_json::from_str(text).unwrap();
        assert_eq!(result["structuredContent"], structured);
        assert_eq!(
            effect["record"],
            structured["world"]["effects"][0]["record"]
        );
        assert_eq!(structured["ok"], json!(true));
        assert!(structured["content"]
            .as_str()
            .unwrap()
            .starts_with("read src/main.ail: \"quoted\""));
        assert_eq!(structured["world"]["effects"][0]["status"], "ok");
        assert!(structured["world"]["plan"]
            .as_str()
            .unwrap()
            .starts_with("sha256:"));

        // Member order on the wire: content first, as the contract shows it.
        let prefix = format!(
            r#"{{"jsonrpc":"2.0","id":{},"result":{{"content":[{{"type":"text","text":"#,
            rpc_id
        );
        assert!(r.sse_data().starts_with(&prefix), "{}", r.sse_data());
    }
    assert_eq!(h.revision(), before + 2);
}

#[tokio::test]
async fn plan_refusals_and_denials_are_results() {
    let h = harness();
    let t = h.reader();
    let v = h
        .rpc(
            &t,
            &call_body(json!(5), "ailang-read", json!({"path": "a", "limit": 1})),
        )
        .await
        .sse();
    let s = &v["result"]["structuredContent"];
    assert_eq!(s["ok"], json!(false));
    assert_eq!(
        s["refused"],
        "unknown argument \"limit\"; ailang-read admits only: path"
    );
    assert_eq!(s["world"]["effects"], json!([]));
    assert!(s["world"]["plan"].as_str().unwrap().starts_with("sha256:"));
    // A complete result, flagged as MCP flags a tool's invalid input: a model reads the
    // refusal and corrects the call.
    assert_eq!(v["result"]["isError"], json!(true));
    assert_eq!(
        serde_json::from_str::<Value>(v["result"]["content"][0]["text"].as_str().unwrap()).unwrap(),
        *s
    );

    // Missing arguments default to {}: the plan refuses, still a committed result.
    let body = r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"ailang-read"}}"#;
    let v = h.rpc(&t, body).await.sse();
    assert_eq!(
        v["result"]["structuredContent"]["refused"],
        "missing required argument \"path\""
    );

    // A grant with no budget left: the broker denies, nothing runs, the result is only `world`.
    let broke = h.token("poor", &["Workspace.Read=worktree:0"]);
    let v = h
        .rpc(
            &broke,
            &call_body(json!(7), "ailang-read", json!({"path": "a"})),
        )
        .await
        .sse();
    let s = &v["result"]["structuredContent"];
    assert_eq!(s.as_object().unwrap().keys().collect::<Vec<_>>(), ["world"]);
    let effect = &s["world"]["effects"][0];
    assert_eq!(effect["id"], "e1");
    assert_eq!(effect["status"], "denied");
    assert!(effect["record"].as_str().unwrap().starts_with("sha256:"));
}

#[tokio::test]
async fn unknown_or_invisible_tools_and_bad_params_are_32602() {
    let h = harness();
    let t = h.reader();
    let before = h.revision();
    for name in [
        "nope",
        "ailang-write",
        "ailang-run",
        "tools.echo",
        "bad_x",
        "ailang_dread",
    ] {
        let r = h
            .rpc(&t, &call_body(json!(8), name, json!({"path": "a"})))
            .await;
        // `data.why` names the nearest of this session's own tools, and never one it cannot
        // see (`ailang-write`, `ailang-run` are another session's): a model can correct a
        // misspelt name without learning what others hold.
        let why = match name {
            "ailang_dread" => format!("no tool of this session is named \\\"{name}\\\"; did you mean ailang-read? (tools/list shows this session's tools)"),
            // A transition id for its MCP name: the name is offered.
            "tools.echo" => format!("no tool of this session is named \\\"{name}\\\"; did you mean tools_decho? (tools/list shows this session's tools)"),
            _ => format!("no tool of this session is named \\\"{name}\\\"; tools/list shows this session's tools"),
        };
        assert_eq!(
            r.sse_data(),
            format!(
                r#"{{"jsonrpc":"2.0","id":8,"error":{{"code":-32602,"message":"unknown tool \"{name}\"","data":{{"why":"{why}"}}}}}}"#
            )
        );
    }
    let hostile = "a\"b\nc";
    let v = h
        .rpc(&t, &call_body(json!(8), hostile, json!({})))
        .await
        .sse();
    assert_eq!(v["error"]["message"], "unknown tool \"a\\\"b\\nc\"");

    let cases = [
        (json!({"name": "ailang-read", "arguments": "path=a"}), "invalid params: \"arguments\" must be an object"),
        (json!({"name": "ailang-read", "arguments": [1]}), "invalid params: \"arguments\" must be an object"),
        (json!({"arguments": {}}), "invalid params: \"name\" is missing"),
        (json!({"name": 5}), "invalid params: \"name\" must be a string"),
        (json!(["ailang-read"]), "invalid params: tools/call params must be an object with \"name\" and optional \"arguments\""),
    ];
    for (params, message) in cases {
        let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": params})
            .to_string();
        let v = h.rpc(&t, &body).await.sse();
        assert_eq!(
            v["error"],
            json!({"code": -32602, "message": message}),
            "{params}"
        );
    }
    assert_eq!(h.revision(), before, "a refused call committed");
}

#[tokio::test]
async fn host_failures_answer_with_the_fixed_envelope() {
    let h = harness();
    // R8: ailang-run declares effects this daemon has no handler for.
    let runner = h.token("run", &["Ailang.Run=worktree:5"]);
    let r = h
        .rpc(
            &runner,
            &call_body(json!(2), "ailang-run", json!({"path": "main.ail"})),
        )
        .await;
    r.assert_envelope("2", "host callback failed");

    // EffectsUnrecorded: the check effect ran, its finish phase failed. The wire says only
    // "host callback failed"; the id is echoed as sent.
    let checker = h.token("chk", &["Ailang.Check=worktree:5"]);
    let before = h.revision();
    let r = h
        .rpc(
            &checker,
            &call_body(json!("c-1"), "ailang-check", json!({"path": "main.ail"})),
        )
        .await;
    r.assert_envelope("\"c-1\"", "host callback failed");
    assert_eq!(
        h.revision(),
        before,
        "an unrecorded call committed an entry"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ninth_concurrent_call_exceeds_capacity() {
    let mut h = harness_with(Limits {
        execution_slots: SLOTS,
        ..Limits::default()
    });
    let mut in_flight = Vec::new();
    for i in 0..SLOTS {
        // Separate episodes, so every call reaches the handler instead of queueing on the
        // episode lock (which would hold its slot just the same, but be harder to observe).
        let t = h.token(&format!("cap{i}"), &["Workspace.Write=worktree:5"]);
        let router = h.router.clone();
        in_flight.push(tokio::spawn(async move {
            send(
                &router,
                rpc(
                    &t,
                    None,
                    &call_body(
                        json!(i),
                        "ailang-write",
                        json!({"path": "a.ail", "content": "x"}),
                    ),
                ),
            )
            .await
        }));
    }
    for _ in 0..SLOTS {
        tokio::time::timeout(Duration::from_secs(30), h.entered.recv())
            .await
            .expect("a held call never reached its handler");
    }
    // All eight slots are held inside handlers: the ninth is refused at once.
    let reader = h.reader();
    let r = h
        .rpc(
            &reader,
            &call_body(json!(99), "ailang-read", json!({"path": "a"})),
        )
        .await;
    r.assert_envelope("99", "host callback capacity exceeded");
    let (_, metrics) = h.get_text("/v1/metrics").await;
    assert!(
        metrics.contains("worldd_admission_refused_total{reason=\"no_execution_slot\"} 1\n"),
        "{metrics}"
    );
    // Protocol work that needs no callback still succeeds meanwhile.
    assert_eq!(h.rpc(&reader, list_body()).await.sse()["id"], json!(2));

    h.gate.release();
    for (i, call) in in_flight.into_iter().enumerate() {
        let v = call.await.unwrap().sse();
        assert_eq!(v["id"], json!(i));
        assert_eq!(v["result"]["structuredContent"]["ok"], json!(true));
    }
    // Slots are free again.
    let v = h
        .rpc(
            &reader,
            &call_body(json!(100), "ailang-read", json!({"path": "a"})),
        )
        .await
        .sse();
    assert_eq!(v["result"]["isError"], json!(false));
}

/// A handler that hangs is answered `host callback timed out` at its deadline; its one slot
/// is freed for other episodes at once, its own episode waits for it, and when it returns its
/// outcome is journaled but never committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hung_handler_times_out_frees_its_slot_and_is_never_committed() {
    let mut h = harness_with(Limits {
        execution_slots: 1,
        handler_deadline: Duration::from_millis(300),
        ..Limits::default()
    });
    let t = h.token(
        "slow",
        &["Workspace.Write=worktree:5", "Workspace.Read=worktree:5"],
    );
    let args = json!({"path": "a.ail", "content": "x"});
    h.rpc(
        &t,
        &keyed_body(json!(11), "ailang-write", args.clone(), "w"),
    )
    .await
    .assert_envelope("11", "host callback timed out");
    tokio::time::timeout(Duration::from_secs(30), h.entered.recv())
        .await
        .expect("the held call never reached its handler");
    // The only slot is free again although the handler still runs: another episode is served.
    let before = h.revision();
    let reader = h.reader();
    let v = h
        .rpc(
            &reader,
            &call_body(json!(12), "ailang-read", json!({"path": "a"})),
        )
        .await
        .sse();
    assert_eq!(v["result"]["structuredContent"]["ok"], json!(true));
    assert_eq!(h.revision(), before + 1);
    let (_, m) = h.get_text("/v1/metrics").await;
    assert!(m.contains("worldd_handlers_overrunning 1\n"), "{m}");
    assert!(m.contains("worldd_handler_overruns_total 1\n"), "{m}");

    // The episode's next call waits for the hung handler; released, the handler's outcome is
    // journaled first, then the next call runs.
    let router = h.router.clone();
    let next = tokio::spawn({
        let t = t.clone();
        async move {
            send(
                &router,
                rpc(
                    &t,
                    None,
                    &call_body(json!(13), "ailang-read", json!({"path": "b"})),
                ),
            )
            .await
        }
    });
    h.gate.release();
    let v = next.await.unwrap().sse();
    assert_eq!(v["result"]["structuredContent"]["ok"], json!(true));
    let (status, rec) = h.get_json(&t, "/v1/calls/mcp/w").await;
    assert_eq!(
        (status, rec["state"].clone()),
        (StatusCode::OK, json!("unrecorded"))
    );
    assert_eq!(rec["effects"][0]["status"], json!("ok"));
    // Only the two reads were committed.
    assert_eq!(h.revision(), before + 2);
}

/// Attack: large writes from many episodes, each call a megabyte, made the small calls of
/// every other episode wait behind their group commits (and the daemon hold several copies of
/// each). One large call runs at a time: another, over MCP or A2A, waits for the lane holding
/// no slot, past the slot wait, and is answered the capacity error once a handler's deadline
/// no longer fits before its own (not let in to time out in its handler), nothing run; a
/// small call of another episode is served meanwhile; the lane comes back when the large
/// call's commit ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_large_call_waits_for_the_lane_while_small_calls_pass() {
    use std::sync::atomic::Ordering::SeqCst;
    let mut h = harness_with(Limits {
        large_calls: 1,
        large_call_bytes: 4096,
        slot_wait: Duration::from_millis(100),
        // A large call waits for the lane while a handler's deadline still fits before its own:
        // 200 ms, well within the second the first call keeps its place (`LANE_HOLD`).
        call_deadline: Duration::from_millis(3000),
        handler_deadline: Duration::from_millis(2800),
        ..Limits::default()
    });
    let big = "x".repeat(8000);
    let write = |id: u64, path: &str| {
        call_body(
            json!(id),
            "ailang-write",
            json!({"path": path, "content": big}),
        )
    };
    let first = h.token("big-1", &["Workspace.Write=worktree:5"]);
    let second = h.token("big-2", &["Workspace.Write=worktree:5"]);
    // The first large write's handler returns at once; its effect steps then stall before the
    // commit, so the call keeps its slot and its place in the lane past its own deadline.
    h.gate.release();
    h.stall.armed.store(true, SeqCst);
    let held = tokio::spawn({
        let (router, body) = (h.router.clone(), write(1, "a.ail"));
        async move { send(&router, rpc(&first, None, &body)).await }
    });
    tokio::time::timeout(Duration::from_secs(30), h.entered.recv())
        .await
        .expect("the first large write never reached its handler");

    let start = std::time::Instant::now();
    h.rpc(&second, &write(2, "b.ail"))
        .await
        .assert_envelope("2", "host callback capacity exceeded");
    assert!(
        start.elapsed() >= Duration::from_millis(200),
        "refused before its lane wait: {:?}",
        start.elapsed()
    );
    let a2a = json!({"jsonrpc": "2.0", "id": 3, "method": "tasks/send", "params": {
        "id": "t-big", "metadata": {"skill_id": "ailang-write"},
        "message": {"role": "user", "parts": [{"type": "data",
            "data": {"path": "c.ail", "content": big}}]}}});
    let v = h.a2a(&second, None, a2a).await;
    assert_eq!(
        v["error"],
        json!({"code": -32603, "message": "host callback capacity exceeded"}),
        "{v}"
    );
    // A small call of another episode takes no place in the lane.
    h.stall.armed.store(false, SeqCst);
    h.reads_ok(&h.reader(), 4).await;
    let (_, m) = h.get_text("/v1/metrics").await;
    assert!(
        m.contains("worldd_admission_refused_total{reason=\"no_large_call_lane\"} 2\n"),
        "{m}"
    );
    assert!(m.contains("worldd_callbacks_rejected_total 0\n"), "{m}");
    held.await
        .unwrap()
        .assert_envelope("1", "host callback timed out");

    // The first write commits, and gives the lane back: the next large call runs.
    h.stall.gate.release();
    let v = h.rpc(&second, &write(5, "b.ail")).await.sse();
    assert_eq!(v["result"]["structuredContent"]["ok"], json!(true), "{v}");
}

/// Attack: 1 MB writes over A2A from many episodes took the daemon past 890 MiB. An A2A
/// request gave its place in the body budget back as soon as its body was parsed, so calls
/// queued behind their episodes and the large-call lane held their bodies uncounted. The
/// place is now kept until the call is answered, as an MCP POST keeps it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_a2a_call_keeps_its_place_in_the_body_budget_until_it_is_answered() {
    let mut h = harness();
    let t = h.token("a2a-big", &["Workspace.Write=worktree:5"]);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tasks/send", "params": {
        "id": "t-held", "metadata": {"skill_id": "ailang-write"},
        "message": {"role": "user", "parts": [{"type": "data",
            "data": {"path": "big.ail", "content": "x".repeat(200_000)}}]}}})
    .to_string();
    let held = tokio::spawn({
        let router = h.full.clone();
        let auth = format!("Bearer {t}");
        async move {
            let mut req = request(
                &[
                    ("authorization", auth.as_str()),
                    ("content-type", "application/json"),
                ],
                body,
            );
            *req.uri_mut() = "/a2a/".parse().unwrap();
            send(&router, req).await
        }
    });
    tokio::time::timeout(Duration::from_secs(30), h.entered.recv())
        .await
        .expect("the A2A write never reached its handler");
    let held_bytes = |m: &str| -> u64 {
        m.lines()
            .find_map(|l| l.strip_prefix("worldd_body_budget_bytes_held "))
            .expect("the budget gauge")
            .parse()
            .unwrap()
    };
    let (_, m) = h.get_text("/v1/metrics").await;
    let during = held_bytes(&m);
    // All but the first 16 KiB, which no body counts.
    assert!(
        (150_000..=200_000).contains(&during),
        "held while the call runs: {during}"
    );
    h.gate.release();
    let answer = held.await.unwrap();
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert!(answer.body.contains(r#""ok":true"#), "{}", answer.body);
    let (_, m) = h.get_text("/v1/metrics").await;
    assert_eq!(held_bytes(&m), 0, "given back once answered");
}

/// Attack: start a call to a tool that hangs and go away at once. Nobody waits for the answer,
/// yet the call's slot is freed at the handler's deadline (another episode is served through the
/// only slot) and the handler's outcome is journaled, not committed, when it returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_leaves_a_hung_handler_does_not_keep_its_slot() {
    let mut h = harness_with(Limits {
        execution_slots: 1,
        handler_deadline: Duration::from_millis(300),
        ..Limits::default()
    });
    let t = h.token("gone", &["Workspace.Write=worktree:5"]);
    let router = h.router.clone();
    let body = keyed_body(
        json!(21),
        "ailang-write",
        json!({"path": "a.ail", "content": "x"}),
        "gone",
    );
    let caller = tokio::spawn({
        let t = t.clone();
        async move { send(&router, rpc(&t, None, &body)).await }
    });
    tokio::time::timeout(Duration::from_secs(30), h.entered.recv())
        .await
        .expect("the call never reached its handler");
    caller.abort();
    abandoned_handler_frees_the_only_slot(&h, &t, "gone").await;
}

/// With one handler hung past its deadline and abandoned: another episode's read is served
/// through the only slot; released, the handler's outcome is journaled (`unrecorded`) for
/// `task`, and only the read was committed.
async fn abandoned_handler_frees_the_only_slot(h: &Harness, t: &str, task: &str) {
    let before = h.revision();
    h.reads_ok(&h.reader(), 22).await;
    let (_, m) = h.get_text("/v1/metrics").await;
    assert!(m.contains("worldd_handlers_overrunning 1\n"), "{m}");
    h.gate.release();
    call_reaches(h, t, task, "unrecorded").await;
    assert_eq!(h.revision(), before + 1, "only the read was committed");
}

/// A store that stalls past the call deadline between the intent and the handler: the caller is
/// answered at the call deadline. The handler used to start then with its deadline long past
/// (told `deadlineMs: 0`, no limit, by a plugin). It is now never started: the intent is closed
/// withdrawn with its unit given back, the call is not committed (`withdrawn`, refused at its
/// deadline), and the only slot is free for another episode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_whose_deadline_passed_during_its_intent_is_never_started() {
    let mut h = harness_with(Limits {
        execution_slots: 1,
        // Over the 1 s a handler is started with (`MIN_HANDLER_TIME`).
        call_deadline: Duration::from_millis(1300),
        ..Limits::default()
    });
    h.stall
        .before_handler
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let t = h.token("late", &["Workspace.Write=worktree:5"]);
    h.rpc(
        &t,
        &keyed_body(
            json!(31),
            "ailang-write",
            json!({"path": "a.ail", "content": "x"}),
            "late",
        ),
    )
    .await
    .assert_envelope("31", "host callback timed out");
    h.stall
        .before_handler
        .store(false, std::sync::atomic::Ordering::SeqCst);
    h.stall.gate.release();
    call_reaches(&h, &t, "late", "withdrawn").await;
    let (_, rec) = h.get_json(&t, "/v1/calls/mcp/late").await;
    assert_eq!(rec["effects"][0]["status"], json!("failed"), "{rec}");
    assert_eq!(rec["effects"][0]["budgetAfter"], json!(5), "{rec}");
    assert_eq!(
        rec["outcome"],
        json!({"kind": "refused", "reason": "deadline", "retryable": true})
    );
    // A resend of its key runs nothing and says why, classified as the withdrawal was.
    let again = h
        .rpc(
            &t,
            &keyed_body(
                json!(32),
                "ailang-write",
                json!({"path": "a.ail", "content": "x"}),
                "late",
            ),
        )
        .await
        .sse();
    assert_eq!(
        again["error"]["message"],
        json!("idempotency key \"late\": the first call with this key was withdrawn before its handler started (at its deadline, or because the store could not make its intent durable): nothing ran and nothing was spent; send it again under another key"),
        "{again}"
    );
    assert_eq!(again["error"]["data"]["kind"], json!("refused"), "{again}");
    assert_eq!(
        again["error"]["data"]["reason"],
        json!("deadline"),
        "{again}"
    );
    assert_eq!(h.writes_run(), 0, "the handler was started");
    let before = h.revision();
    h.reads_ok(&h.reader(), 22).await;
    assert_eq!(h.revision(), before + 1, "only the read was committed");
}

/// A call whose handler finished in time but whose effect steps then stall before the commit
/// is submitted (the pipeline's thread held after the handler) is answered at the call
/// deadline; it still commits afterwards. The commit itself held by the writer:
/// `a_commit_the_writer_holds_is_answered_at_the_call_deadline_and_still_lands`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_stalled_after_its_handler_is_answered_at_the_call_deadline() {
    let h = harness_with(Limits {
        // Over the 1 s a handler is started with (`MIN_HANDLER_TIME`).
        call_deadline: Duration::from_millis(1300),
        ..Limits::default()
    });
    h.stall
        .armed
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let t = h.reader();
    let before = h.revision();
    h.rpc(
        &t,
        &call_body(json!(5), "ailang-read", json!({"path": "a"})),
    )
    .await
    .assert_envelope("5", "host callback timed out");
    h.stall
        .armed
        .store(false, std::sync::atomic::Ordering::SeqCst);
    h.stall.gate.release();
    let committed = async {
        while h.revision() == before {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), committed)
        .await
        .expect("the stalled call never committed");
}

/// A call whose commit the store's writer holds past the call deadline: the caller is answered
/// as timed out at the deadline; the commit still lands when the writer goes on, and the episode
/// is free for its next call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_the_writer_holds_is_answered_at_the_call_deadline_and_still_lands() {
    let h = harness_with(Limits {
        // Over the 1 s a handler is started with (`MIN_HANDLER_TIME`).
        call_deadline: Duration::from_millis(1300),
        ..Limits::default()
    });
    let t = h.token("held", &["Workspace.Read=worktree:5"]);
    h.stall
        .in_commit
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let before = h.revision();
    h.rpc(
        &t,
        &keyed_body(
            json!(41),
            "ailang-read",
            json!({"path": "a"}),
            "held-commit",
        ),
    )
    .await
    .assert_envelope("41", "host callback timed out");
    assert!(h
        .stall
        .commit_held
        .load(std::sync::atomic::Ordering::SeqCst));
    let (_, m) = h.get_text("/v1/metrics").await;
    assert!(
        m.contains("worldd_limit_trips_total{limit=\"call_deadline\"} 1\n"),
        "{m}"
    );
    h.stall
        .in_commit
        .store(false, std::sync::atomic::Ordering::SeqCst);
    h.stall.gate.release();
    call_reaches(&h, &t, "held-commit", "committed").await;
    assert_eq!(h.revision(), before + 1);
    h.reads_ok(&t, 42).await;
}

/// Attack: start a call and go away while the store's writer holds its commit. Nobody waits
/// for the answer, yet the commit is driven to its end: it lands, is counted, and frees the
/// only execution slot for another episode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_leaves_during_its_commit_does_not_lose_it_or_keep_its_slot() {
    let h = harness_with(Limits {
        execution_slots: 1,
        ..Limits::default()
    });
    let t = h.token("left", &["Workspace.Read=worktree:5"]);
    h.stall
        .in_commit
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let caller = tokio::spawn({
        let router = h.router.clone();
        let body = keyed_body(
            json!(43),
            "ailang-read",
            json!({"path": "a"}),
            "left-commit",
        );
        let t = t.clone();
        async move { send(&router, rpc(&t, None, &body)).await }
    });
    let held = async {
        while !h
            .stall
            .commit_held
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), held)
        .await
        .expect("the call's commit never started");
    caller.abort();
    h.stall
        .in_commit
        .store(false, std::sync::atomic::Ordering::SeqCst);
    h.stall.gate.release();
    call_reaches(&h, &t, "left-commit", "committed").await;
    h.reads_ok(&h.reader(), 44).await;
    let (_, m) = h.get_text("/v1/metrics").await;
    assert!(
        m.contains("worldd_calls_total{tool=\"ailang-read\",outcome=\"ok\"} 2\n"),
        "the abandoned call is counted once it commits: {m}"
    );
}

/// A runtime shutting down with a call waiting for its commit drops the waiting request, and
/// with it the commit it awaited in place. The commit is then handed to a task, which the
/// runtime, shutting down, drops unpolled; a first version handed the commit on again from
/// there, without end, until the stack overflowed. The store goes on committing.
#[test]
fn a_runtime_shutting_down_with_a_commit_in_flight_lets_it_go_once() {
    use std::sync::atomic::Ordering::SeqCst;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let h = runtime.block_on(async { harness() });
    let t = h.token("down", &["Workspace.Read=worktree:5"]);
    h.stall.in_commit.store(true, SeqCst);
    runtime.spawn({
        let router = h.router.clone();
        let body = call_body(json!(1), "ailang-read", json!({"path": "a"}));
        let t = t.clone();
        async move { send(&router, rpc(&t, None, &body)).await }
    });
    let start = std::time::Instant::now();
    while !h.stall.commit_held.load(SeqCst) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the commit never started"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // The writer lets the commit go a moment after the shutdown began, whatever drops it.
    let stall = h.stall.clone();
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        stall.in_commit.store(false, SeqCst);
        stall.gate.release();
    });
    runtime.shutdown_timeout(Duration::from_secs(10));
    release.join().unwrap();
    // The commit landed, and the store still serves a fresh runtime.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        h.reads_ok(&h.reader(), 2).await;
    });
}

/// Wait (30 s at most) until `task`'s MCP call of this session is in `state`.
async fn call_reaches(h: &Harness, t: &str, task: &str, state: &str) {
    let reached = async {
        loop {
            let (_, rec) = h.get_json(t, &format!("/v1/calls/mcp/{task}")).await;
            if rec["state"] == json!(state) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), reached)
        .await
        .unwrap_or_else(|_| panic!("call {task} never became {state}"));
}

// -------------------------------------------------------------------------------------------
// Batches.

#[tokio::test]
async fn batches_run_in_order_under_2025_03_26() {
    let h = harness();
    let t = h.reader();
    let before = h.revision();
    let batch = json!([
        {"jsonrpc": "2.0", "id": 1, "method": "ping"},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "ailang-read", "arguments": {"path": "a"}}},
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "ailang-read", "arguments": {"path": "a"}}},
        {"jsonrpc": "2.0", "id": 2, "method": "nope"},
        7,
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "ailang-write", "arguments": {}}}
    ])
    .to_string();
    for version in [None, Some("2025-03-26")] {
        let v = h.send(rpc(&t, version, &batch)).await.sse();
        let replies = v.as_array().unwrap();
        assert_eq!(replies.len(), 6, "{v}");
        assert_eq!(replies[0], json!({"jsonrpc": "2.0", "id": 1, "result": {}}));
        assert_eq!(replies[1]["id"], json!(1));
        assert_eq!(replies[1]["result"]["structuredContent"]["ok"], json!(true));
        assert_eq!(replies[2]["id"], json!(1));
        assert_eq!(replies[2]["result"]["isError"], json!(false));
        assert_eq!(
            replies[3]["error"],
            json!({"code": -32601, "message": "method not found: \"nope\""})
        );
        assert_eq!(
            replies[4],
            json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": "invalid request: expected a JSON-RPC object"}})
        );
        assert_eq!(
            replies[5]["error"],
            json!({"code": -32602, "message": "unknown tool \"ailang-write\"",
                   "data": {"why": "no tool of this session is named \"ailang-write\"; tools/list shows this session's tools"}})
        );
    }
    // Repeated JSON-RPC ids are still separate invocations: four commits in two batches.
    assert_eq!(h.revision(), before + 4);
}

#[tokio::test]
async fn batches_are_refused_after_2025_03_26() {
    let h = harness();
    let t = h.reader();
    let batch = r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#;
    for v in ["2025-06-18", "2025-11-25"] {
        h.send(rpc(&t, Some(v), batch)).await.assert_text(
            StatusCode::BAD_REQUEST,
            &format!("JSON-RPC batches are not supported under MCP-Protocol-Version {v}; send one message per POST (batches are accepted only under 2025-03-26)"),
        );
        // A single message is fine under the same version.
        assert_eq!(
            h.send(rpc(&t, Some(v), &batch[1..batch.len() - 1]))
                .await
                .sse()["id"],
            json!(1)
        );
    }
}

#[tokio::test]
async fn batch_edge_cases() {
    let h = harness();
    let t = h.reader();
    assert_eq!(
        h.rpc(&t, "[]").await.sse_data(),
        r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request: empty batch"}}"#
    );
    h.rpc(
        &t,
        r#"[{"jsonrpc":"2.0","method":"notifications/initialized"},{"jsonrpc":"2.0","id":5,"result":{}}]"#,
    )
    .await
    .assert_accepted();
}

/// 80,000 `tools/list` items in one POST once produced an 800 MB reply: a batch over
/// `[limits] batch_items` is refused whole, and nothing in it runs.
#[tokio::test]
async fn a_huge_mcp_batch_is_refused_whole_and_runs_nothing() {
    let h = harness();
    let t = h.reader();
    let before = h.revision();
    let mut items = vec![
        json!({"jsonrpc": "2.0", "id": 0, "method": "tools/call", "params": {"name": "ailang-read", "arguments": {"path": "a"}}}),
    ];
    items.extend((1..80_000).map(|i| json!({"jsonrpc": "2.0", "id": i, "method": "tools/list"})));
    let body = Value::Array(items).to_string();
    assert!(body.len() < Limits::default().mcp_body_bytes);
    assert_eq!(
        h.rpc(&t, &body).await.sse_data(),
        r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request: a batch of more than 64 messages ([limits] batch_items); nothing was run"}}"#
    );
    assert_eq!(h.revision(), before);
    assert_eq!(
        h.state.metrics().trips(worldd::metrics::Limit::BatchItems),
        1
    );
    // At the limit it runs.
    let list: Vec<Value> = (0..64)
        .map(|i| json!({"jsonrpc": "2.0", "id": i, "method": "tools/list"}))
        .collect();
    let v = h.rpc(&t, &Value::Array(list).to_string()).await.sse();
    assert_eq!(v.as_array().unwrap().len(), 64);
}

/// Once a batch's replies reach `[limits] reply_bytes`, no further item runs; each request
/// left is answered "not run" by its own id.
#[tokio::test]
async fn a_batch_stops_running_at_the_reply_limit() {
    let h = harness_with(Limits {
        reply_bytes: 2500,
        ..Limits::default()
    });
    let t = h.reader();
    let before = h.revision();
    let items: Vec<Value> = (0..6)
        .map(|i| json!({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "ailang-read", "arguments": {"path": "a"}}}))
        .collect();
    let v = h.rpc(&t, &Value::Array(items).to_string()).await.sse();
    let replies = v.as_array().unwrap();
    assert_eq!(replies.len(), 6);
    let ran = replies.iter().filter(|r| r.get("result").is_some()).count();
    assert!((1..6).contains(&ran), "{v}");
    for (i, r) in replies.iter().enumerate().skip(ran) {
        assert_eq!(
            r,
            &json!({"jsonrpc": "2.0", "id": i, "error": {"code": -32600, "message": "invalid request: not run: the replies to this batch reached the 2500-byte limit ([limits] reply_bytes); send it again in another POST"}})
        );
    }
    assert_eq!(h.revision(), before + ran as u64);
    assert_eq!(
        h.state.metrics().trips(worldd::metrics::Limit::ReplyBytes),
        1
    );
}

#[tokio::test]
async fn a_host_failure_in_a_batch_answers_the_whole_post_with_id_null() {
    let h = harness();
    let t = h.token(
        "mix",
        &["Workspace.Read=worktree:5", "Ailang.Run=worktree:5"],
    );
    let before = h.revision();
    let batch = json!([
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "ailang-read", "arguments": {"path": "a"}}},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "ailang-run", "arguments": {"path": "m.ail"}}},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "ailang-read", "arguments": {"path": "b"}}}
    ])
    .to_string();
    h.rpc(&t, &batch)
        .await
        .assert_envelope("null", "host callback failed");
    // The first item committed before the second failed; the third never ran.
    assert_eq!(h.revision(), before + 1);
}

// -------------------------------------------------------------------------------------------
// Outcome classification in `_meta`.

impl Harness {
    /// GET a route of the whole surface; the status and the JSON body.
    async fn get_json(&self, token: &str, path: &str) -> (StatusCode, Value) {
        let req = Request::get(path)
            .header("authorization", format!("Bearer {token}"))
            .body(Body::empty())
            .unwrap();
        let r = send(&self.full, req).await;
        (r.status, serde_json::from_str(&r.body).unwrap())
    }

    /// GET an open route of the whole surface; the status and the text body.
    async fn get_text(&self, path: &str) -> (StatusCode, String) {
        let r = send(&self.full, Request::get(path).body(Body::empty()).unwrap()).await;
        (r.status, r.body)
    }

    /// How many times the write handler ran (it reports each entry).
    fn writes_run(&mut self) -> usize {
        let mut n = 0;
        while self.entered.try_recv().is_ok() {
            n += 1;
        }
        n
    }
}

fn keyed_body(id: Value, name: &str, args: Value, key: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": name, "arguments": args, "_meta": {"world/idempotencyKey": key}}})
    .to_string()
}

#[tokio::test]
async fn every_outcome_is_a_result_with_its_classification() {
    let h = harness();
    let t = h.token("cls", &["Workspace.Read=worktree:3"]);
    let outcome = |v: &Value| v["result"]["_meta"]["world/outcome"].clone();
    let cases = [
        (
            json!({"path": "a", "limit": 1}),
            json!({"kind": "refused", "reason": "plan", "retryable": false}),
        ),
        (
            json!({"path": "refuse-me"}),
            json!({"kind": "refused", "reason": "policy", "retryable": false}),
        ),
        (
            json!({"path": "break-me"}),
            json!({"kind": "failed", "reason": "handler", "retryable": true}),
        ),
        (
            json!({"path": "fine"}),
            json!({"kind": "ok", "retryable": true}),
        ),
        (
            json!({"path": "one-too-many"}),
            json!({"kind": "denied", "reason": "denied:budget", "retryable": false, "remaining": 0}),
        ),
    ];
    for (i, (args, want)) in cases.into_iter().enumerate() {
        let v = h
            .rpc(&t, &call_body(json!(i), "ailang-read", args.clone()))
            .await
            .sse();
        // Every revision flags each outcome but `ok`: a client that reads only `isError`
        // cannot take a refusal, a denial or a failure for success.
        assert_eq!(
            v["result"]["isError"],
            json!(want["kind"] != "ok"),
            "{args}"
        );
        assert_eq!(outcome(&v), want, "{args}");
    }
    // The plan refusal has no effects; the denial reports its record and budgetAfter 0.
    let v = h
        .rpc(
            &t,
            &call_body(json!(9), "ailang-read", json!({"path": "x"})),
        )
        .await
        .sse();
    let effect = &v["result"]["_meta"]["world/effects"][0];
    assert_eq!(effect["status"], "denied");
    assert_eq!(effect["denial"], "denied:budget");
    assert_eq!(effect["budgetAfter"], json!(0));
    // The operator's counters classify the calls as the agent's `_meta` did.
    let (_, m) = h.get_text("/v1/metrics").await;
    for (outcome, n) in [
        ("refused", 1),
        ("policy_refused", 1),
        ("failed", 1),
        ("ok", 1),
        ("denied", 2),
    ] {
        let line =
            format!("worldd_calls_total{{tool=\"ailang-read\",outcome=\"{outcome}\"}} {n}\n");
        assert!(m.contains(&line), "{line:?} in {m}");
    }
}

/// A replayed answer said `retryable: true` when the first did (a read): an agent following
/// "retryable: send it again" resent the same key and got the same committed answer forever,
/// a failed read's included. A replay is never retryable: the key holds its answer.
#[tokio::test]
async fn a_replayed_read_is_not_retryable_under_its_key() {
    let h = harness();
    h.gate.release();
    let t = h.token("again", &["Workspace.Read=worktree:5"]);
    let args = json!({"path": "a.ail"});
    let outcome = |v: &Value| v["result"]["_meta"]["world/outcome"].clone();
    let first = h
        .rpc(
            &t,
            &keyed_body(json!(1), "ailang-read", args.clone(), "r-1"),
        )
        .await
        .sse();
    assert_eq!(
        first["result"]["_meta"]["world/replayed"],
        json!(false),
        "{first}"
    );
    let mut retryable = outcome(&first);
    assert_eq!(retryable["retryable"], json!(true), "{first}");
    let again = h
        .rpc(&t, &keyed_body(json!(2), "ailang-read", args, "r-1"))
        .await
        .sse();
    assert_eq!(
        again["result"]["_meta"]["world/replayed"],
        json!(true),
        "{again}"
    );
    retryable["retryable"] = json!(false);
    assert_eq!(outcome(&again), retryable, "{again}");
}

#[tokio::test]
async fn a_keyed_write_runs_once_and_replays_the_committed_bytes() {
    let mut h = harness();
    h.gate.release();
    let t = h.token("once", &["Workspace.Write=worktree:5"]);
    let args = json!({"path": "a.ail", "content": "x"});
    let before = h.revision();
    let first = h
        .rpc(
            &t,
            &keyed_body(json!(1), "ailang-write", args.clone(), "w-1"),
        )
        .await;
    let v1 = first.sse();
    let m1 = &v1["result"]["_meta"];
    assert_eq!(m1["world/invocationId"], "mcp:once:w-1");
    assert_eq!(m1["world/idempotencyKey"], "w-1");
    assert_eq!(m1["world/replayed"], json!(false));
    assert_eq!(
        m1["world/outcome"],
        json!({"kind": "ok", "retryable": false})
    );

    let second = h
        .rpc(
            &t,
            &keyed_body(json!(2), "ailang-write", args.clone(), "w-1"),
        )
        .await;
    let v2 = second.sse();
    assert_eq!(v2["result"]["_meta"]["world/replayed"], json!(true));
    // The same committed bytes, the same entry: nothing ran again.
    assert_eq!(
        v2["result"]["content"][0]["text"],
        v1["result"]["content"][0]["text"]
    );
    assert_eq!(
        v2["result"]["_meta"]["world/entryIndex"],
        m1["world/entryIndex"]
    );
    assert_eq!(h.revision(), before + 1);
    assert_eq!(h.writes_run(), 1);
    // One intent in the journal: the budget was spent once.
    let (status, budget) = h.get_json(&t, "/v1/budget").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        budget["grants"],
        json!([{"effect": "Workspace.Write", "scope": "worktree", "granted": 5, "spent": 1, "remaining": 4, "live": true}])
    );

    // Other arguments under the same key: a named conflict, nothing runs.
    let r = h
        .rpc(
            &t,
            &keyed_body(
                json!(3),
                "ailang-write",
                json!({"path": "b.ail", "content": "y"}),
                "w-1",
            ),
        )
        .await;
    assert_eq!(
        r.sse()["error"],
        json!({"code": -32602,
               "message": "idempotency key \"w-1\" was already used with other arguments in this episode",
               "data": {"kind": "refused", "reason": "key-conflict", "retryable": false,
                        "idempotencyKey": "w-1", "invocationId": "mcp:once:w-1"}})
    );
    // So is another tool under the same key.
    let r = h
        .rpc(
            &t,
            &keyed_body(
                json!(4),
                "ailang-edit",
                json!({"path": "a.ail", "old_text": "x", "new_text": "z"}),
                "w-1",
            ),
        )
        .await;
    assert_eq!(r.sse()["error"]["code"], json!(-32602));
    assert_eq!(h.revision(), before + 1);
    assert_eq!(h.writes_run(), 0);

    // The same key in another episode is another call.
    let other = h.token("other", &["Workspace.Write=worktree:5"]);
    let v = h
        .rpc(&other, &keyed_body(json!(5), "ailang-write", args, "w-1"))
        .await
        .sse();
    assert_eq!(v["result"]["_meta"]["world/invocationId"], "mcp:other:w-1");
    assert_eq!(h.writes_run(), 1);

    // Malformed keys are refused before anything runs, one character over the length too.
    for bad in [json!(""), json!("a/b"), json!(12), json!("k".repeat(129))] {
        let body = json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call",
            "params": {"name": "ailang-write", "arguments": {}, "_meta": {"world/idempotencyKey": bad}}});
        assert_eq!(
            h.rpc(&t, &body.to_string()).await.sse()["error"],
            json!({"code": -32602, "message": "invalid params: _meta \"world/idempotencyKey\" must be 1-128 characters of A-Z a-z 0-9 . _ -"})
        );
    }
}

/// A `_meta` that is not an object (an array holding the key, a string naming it) hid the
/// idempotency key: each resend ran the write again and paid for it, where the client asked
/// for at most once. It is refused as invalid params, before anything is journaled.
#[tokio::test]
async fn a_meta_that_is_not_an_object_is_refused_not_read_as_no_key() {
    let mut h = harness();
    let t = h.token("meta", &["Workspace.Write=worktree:5"]);
    let before = h.revision();
    for meta in [
        json!([{"world/idempotencyKey": "arr1"}]),
        json!("world/idempotencyKey=arr1"),
        json!(7),
    ] {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "ailang-write", "arguments": {"path": "m.txt", "content": "x"},
                       "_meta": meta}});
        assert_eq!(
            h.rpc(&t, &body.to_string()).await.sse()["error"],
            json!({"code": -32602, "message": "invalid params: \"_meta\" must be an object"})
        );
    }
    assert_eq!(h.revision(), before);
    assert_eq!(h.writes_run(), 0);
}

#[tokio::test]
async fn a_keyed_call_still_running_is_named_not_repeated() {
    let mut h = harness_with(Limits {
        handler_deadline: Duration::from_millis(500),
        ..Limits::default()
    });
    let t = h.token("busy", &["Workspace.Write=worktree:5"]);
    let args = json!({"path": "a.ail", "content": "x"});
    // The first send times out while its handler is held.
    h.rpc(&t, &keyed_body(json!(1), "ailang-write", args.clone(), "k"))
        .await
        .assert_envelope("1", "host callback timed out");
    tokio::time::timeout(Duration::from_secs(30), h.entered.recv())
        .await
        .expect("the held call never reached its handler");
    // Resending the key while it runs: named, and nothing runs twice.
    let r = h
        .rpc(&t, &keyed_body(json!(2), "ailang-write", args.clone(), "k"))
        .await;
    assert_eq!(
        r.sse()["error"],
        json!({"code": -32603,
               "message": "idempotency key \"k\" is held by a call that has not finished; do not resend yet: reconcile with GET /v1/calls/mcp/k (worldd calls get k) instead of retrying",
               "data": {"kind": "indeterminate", "reason": "in-flight", "retryable": false,
                        "idempotencyKey": "k", "invocationId": "mcp:busy:k"}})
    );
    // Reconciling it says the same: still running (`pending` told the agent to inspect a
    // worktree the handler was still writing, as after a crash).
    let (status, v) = h.get_json(&t, "/v1/calls/mcp/k").await;
    assert_eq!(
        (status, v["state"].clone()),
        (StatusCode::OK, json!("indeterminate"))
    );
    assert_eq!(
        v["outcome"],
        json!({"kind": "indeterminate", "reason": "in-flight", "retryable": false})
    );
    // Once the handler returns, its outcome is journaled, never committed: the key says so.
    h.gate.release();
    let settled = async {
        loop {
            let (_, v) = h.get_json(&t, "/v1/calls/mcp/k").await;
            if v["state"] == "unrecorded" {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    let rec = tokio::time::timeout(Duration::from_secs(30), settled)
        .await
        .expect("the timed-out call's outcome was never journaled");
    let v = h
        .rpc(&t, &keyed_body(json!(3), "ailang-write", args, "k"))
        .await
        .sse();
    assert_eq!(v["error"]["code"], json!(-32603));
    assert_eq!(v["error"]["data"]["reason"], json!("unrecorded"));
    assert_eq!(
        v["error"]["data"]["records"],
        json!([rec["effects"][0]["record"]])
    );
    assert_eq!(h.writes_run(), 0);
}

#[tokio::test]
async fn a_keyed_call_that_is_not_confirmed_committed_says_so() {
    use broker_core::task::{self, TaskPhase, TaskState};
    let h = harness();
    let t = h.token("crash", &["Workspace.Write=worktree:5"]);
    let args = json!({"path": "a.ail", "content": "x"});
    // What a crash after the intent leaves behind: a pending task under the key.
    let state = TaskState {
        invocation_id: "mcp:crash:k1".into(),
        skill_id: "ailang-write".into(),
        input_ref: Ref::of_json(&args).unwrap(),
        phase: TaskPhase::Pending,
        output_ref: None,
        entry_index: None,
        world_ref: None,
        effect_records: vec![],
    };
    h.store
        .write(move |w| task::put(w, "crash", "mcp:k1", &state))
        .unwrap();
    let r = h
        .rpc(&t, &keyed_body(json!(1), "ailang-write", args, "k1"))
        .await;
    assert_eq!(
        r.sse()["error"],
        json!({"code": -32603,
               "message": "idempotency key \"k1\": the first call with this key was not confirmed committed and its effect may have run; reconcile with GET /v1/calls/mcp/k1 (worldd calls get k1) instead of retrying",
               "data": {"kind": "indeterminate", "reason": "pending", "retryable": false,
                        "idempotencyKey": "k1", "invocationId": "mcp:crash:k1"}})
    );

    // EffectsUnrecorded under a key: the records are named, and resending says the same.
    let checker = h.token("chk", &["Ailang.Check=worktree:5"]);
    for id in [2, 3] {
        let v = h
            .rpc(
                &checker,
                &keyed_body(json!(id), "ailang-check", json!({"path": "m.ail"}), "c1"),
            )
            .await
            .sse();
        let e = &v["error"];
        assert_eq!(e["code"], json!(-32603));
        assert_eq!(
            e["message"],
            "idempotency key \"c1\": an effect ran but the call was not committed; reconcile with GET /v1/calls/mcp/c1 (worldd calls get c1) instead of retrying"
        );
        assert_eq!(e["data"]["reason"], "unrecorded");
        assert_eq!(e["data"]["records"].as_array().unwrap().len(), 1);
    }
    let (status, v) = h.get_json(&checker, "/v1/calls/mcp/c1").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(v["state"], "unrecorded");
    assert_eq!(v["effects"][0]["effect"], "Ailang.Check");
    assert_eq!(v["effects"][0]["status"], "ok");
    assert_eq!(v["entryIndex"], Value::Null);
}

#[tokio::test]
async fn reconciliation_and_budget_after_denials_and_failures() {
    let h = harness();
    let t = h.token(
        "rec",
        &["Workspace.Read=worktree:2", "Workspace.Write=worktree:1"],
    );
    let send = |body: String| {
        let h = &h;
        let t = t.clone();
        async move { h.rpc(&t, &body).await.sse() }
    };
    let ok = send(keyed_body(
        json!(1),
        "ailang-read",
        json!({"path": "a"}),
        "r1",
    ))
    .await;
    let failed = send(keyed_body(
        json!(2),
        "ailang-read",
        json!({"path": "break-me"}),
        "r2",
    ))
    .await;
    let denied = send(keyed_body(
        json!(3),
        "ailang-read",
        json!({"path": "a"}),
        "r3",
    ))
    .await;
    assert_eq!(ok["result"]["_meta"]["world/outcome"]["kind"], "ok");
    assert_eq!(failed["result"]["_meta"]["world/outcome"]["kind"], "failed");
    assert_eq!(denied["result"]["_meta"]["world/outcome"]["kind"], "denied");

    let (status, b) = h.get_json(&t, "/v1/budget").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(b["episode"], "rec");
    assert_eq!(
        b["grants"],
        json!([
            {"effect": "Workspace.Read", "scope": "worktree", "granted": 2, "spent": 2, "remaining": 0, "live": true},
            {"effect": "Workspace.Write", "scope": "worktree", "granted": 1, "spent": 0, "remaining": 1, "live": true}
        ])
    );

    for (key, reply, kind) in [
        ("r1", &ok, "ok"),
        ("r2", &failed, "failed"),
        ("r3", &denied, "denied"),
    ] {
        let meta = &reply["result"]["_meta"];
        let (status, v) = h.get_json(&t, &format!("/v1/calls/mcp/{key}")).await;
        assert_eq!(status, StatusCode::OK, "{v}");
        assert_eq!(v["state"], "committed");
        assert_eq!(v["invocationId"], format!("mcp:rec:{key}"));
        assert_eq!(v["skillId"], "ailang-read");
        assert_eq!(v["entryIndex"], meta["world/entryIndex"]);
        assert_eq!(v["outputRef"], meta["world/outputRef"]);
        assert_eq!(v["worldRef"], meta["world/worldRef"]);
        assert_eq!(v["effects"], meta["world/effects"]);
        assert_eq!(v["outcome"], meta["world/outcome"]);
        assert_eq!(v["outcome"]["kind"], kind);
        // The same answer by invocation id.
        let (_, by_id) = h
            .get_json(&t, &format!("/v1/invocations/mcp:rec:{key}"))
            .await;
        assert_eq!(by_id, v);
    }
    // An unkeyed call is found by the invocation id its _meta names.
    let plain = send(call_body(
        json!(4),
        "ailang-read",
        json!({"path": "z", "x": 1}),
    ))
    .await;
    let id = plain["result"]["_meta"]["world/invocationId"]
        .as_str()
        .unwrap()
        .to_owned();
    let (_, v) = h.get_json(&t, &format!("/v1/invocations/{id}")).await;
    assert_eq!(
        v["outcome"],
        json!({"kind": "refused", "reason": "plan", "retryable": false})
    );

    // Unknown keys, other surfaces and other episodes are all "not found".
    let (status, v) = h.get_json(&t, "/v1/calls/mcp/never").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(
        v,
        json!({"state": "not-found", "surface": "mcp", "taskId": "never", "invocationId": "mcp:rec:never",
               "error": {"class": "NotFound", "message": "no call with task id \"never\" on surface mcp in this session's episode"}})
    );
    assert_eq!(
        h.get_json(&t, "/v1/calls/a2a/r1").await.0,
        StatusCode::NOT_FOUND
    );
    let stranger = h.token("stranger", &["Workspace.Read=worktree:2"]);
    assert_eq!(
        h.get_json(&stranger, "/v1/calls/mcp/r1").await.0,
        StatusCode::NOT_FOUND
    );
    let (status, v) = h.get_json(&stranger, "/v1/invocations/mcp:rec:r1").await;
    assert_eq!(
        (status, v["state"].clone()),
        (StatusCode::NOT_FOUND, json!("not-found"))
    );
    // The id as asked for: not the stranger's own call r1, which this does not say of.
    assert_eq!(v["invocationId"], "mcp:rec:r1");
    assert_eq!(
        v["error"]["message"],
        "no call mcp:rec:r1 that this session may read (another episode's calls are its own)"
    );
    // Malformed handles and a missing session.
    assert_eq!(
        h.get_json(&t, "/v1/calls/rest/r1").await,
        (
            StatusCode::BAD_REQUEST,
            json!({"error": {"class": "BadRequest", "message": "surface must be mcp or a2a"}})
        )
    );
    assert_eq!(
        h.get_json(&t, "/v1/invocations/nope").await.0,
        StatusCode::BAD_REQUEST
    );
    let r = send_anon(&h.full, "/v1/budget").await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
}

async fn send_anon(router: &Router, path: &str) -> Reply {
    send(router, Request::get(path).body(Body::empty()).unwrap()).await
}

// -------------------------------------------------------------------------------------------
// 2026-07-28.

const MODERN: &str = "2026-07-28";

/// A well-formed 2026-07-28 request: the `_meta` envelope and the routing headers.
fn modern(token: &str, id: Value, method: &str, mut params: Value) -> Request<Body> {
    params["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!(MODERN);
    params["_meta"]["io.modelcontextprotocol/clientCapabilities"] = json!({});
    params["_meta"]["io.modelcontextprotocol/clientInfo"] = json!({"name": "t", "version": "0"});
    let name = params["name"].as_str().map(str::to_owned);
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
    let auth = format!("Bearer {token}");
    let mut headers = vec![
        ("authorization", auth.as_str()),
        ("content-type", "application/json"),
        ("accept", ACCEPT_BOTH),
        ("mcp-protocol-version", MODERN),
        ("mcp-method", method),
    ];
    if let Some(n) = &name {
        headers.push(("mcp-name", n.as_str()));
    }
    request(&headers, body)
}

impl Reply {
    /// A 2026-07-28 answer: plain JSON with the given status.
    fn json(&self, status: StatusCode) -> Value {
        assert_eq!(self.status, status, "body: {}", self.body);
        assert_eq!(self.header("content-type"), Some("application/json"));
        serde_json::from_str(&self.body).unwrap()
    }
}

const STAMP: &str = "io.modelcontextprotocol/serverInfo";

#[tokio::test]
async fn modern_discover_list_and_call() {
    let h = harness();
    let t = h.token("m", &["Workspace.Read=worktree:2"]);
    let v = h
        .send(modern(&t, json!(1), "server/discover", json!({})))
        .await
        .json(StatusCode::OK);
    let r = &v["result"];
    assert_eq!(r["supportedVersions"], json!(["2026-07-28"]));
    assert_eq!(r["capabilities"], json!({"tools": {"listChanged": false}}));
    assert_eq!(
        (
            r["resultType"].clone(),
            r["ttlMs"].clone(),
            r["cacheScope"].clone()
        ),
        (json!("complete"), json!(0), json!("private"))
    );
    assert_eq!(
        r["_meta"][STAMP],
        json!({"name": "worldd", "version": env!("CARGO_PKG_VERSION")})
    );
    assert!(r["instructions"]
        .as_str()
        .unwrap()
        .contains("world/idempotencyKey"));

    let v = h
        .send(modern(&t, json!(2), "tools/list", json!({})))
        .await
        .json(StatusCode::OK);
    let r = &v["result"];
    assert_eq!(tool_names(&v), ["ailang-read", "tools_decho"]);
    assert_eq!(r["resultType"], "complete");
    assert_eq!(r["ttlMs"], json!(0));
    assert_eq!(r["cacheScope"], "private");
    assert_eq!(r["tools"][0]["annotations"]["readOnlyHint"], json!(true));

    let before = h.revision();
    let v = h
        .send(modern(
            &t,
            json!(3),
            "tools/call",
            json!({"name": "ailang-read", "arguments": {"path": "a"}}),
        ))
        .await
        .json(StatusCode::OK);
    let r = &v["result"];
    assert_eq!(r["resultType"], "complete");
    assert_eq!(r["isError"], json!(false));
    assert_eq!(r["_meta"][STAMP]["name"], "worldd");
    assert_eq!(r["_meta"]["world/outcome"]["kind"], "ok");
    assert_eq!(
        serde_json::from_str::<Value>(r["content"][0]["text"].as_str().unwrap()).unwrap(),
        r["structuredContent"]
    );
    // Under 2026-07-28 every outcome that is not ok is flagged isError (still a result).
    let v = h
        .send(modern(
            &t,
            json!(4),
            "tools/call",
            json!({"name": "ailang-read", "arguments": {"path": "a", "n": 1}}),
        ))
        .await
        .json(StatusCode::OK);
    assert_eq!(v["result"]["isError"], json!(true));
    assert_eq!(v["result"]["structuredContent"]["ok"], json!(false));
    assert_eq!(v["result"]["_meta"]["world/outcome"]["reason"], "plan");
    assert_eq!(h.revision(), before + 2);

    // A keyed conflict is a 400 with the named error.
    for (id, path) in [(5, "a"), (6, "b")] {
        let mut req = modern(
            &t,
            json!(id),
            "tools/call",
            json!({"name": "ailang-read", "arguments": {"path": path}}),
        );
        let body = {
            let bytes = std::mem::take(req.body_mut())
                .collect()
                .await
                .unwrap()
                .to_bytes();
            let mut v: Value = serde_json::from_slice(&bytes).unwrap();
            v["params"]["_meta"]["world/idempotencyKey"] = json!("m-1");
            v.to_string()
        };
        *req.body_mut() = Body::from(body);
        let r = h.send(req).await;
        if id == 5 {
            assert_eq!(
                r.json(StatusCode::OK)["result"]["_meta"]["world/idempotencyKey"],
                "m-1"
            );
        } else {
            assert_eq!(
                r.json(StatusCode::BAD_REQUEST)["error"]["message"],
                "idempotency key \"m-1\" was already used with other arguments in this episode"
            );
        }
    }
}

#[tokio::test]
async fn modern_request_rules() {
    let h = harness();
    let t = h.reader();
    let post = |headers: Vec<(&'static str, String)>, body: Value| {
        let auth = format!("Bearer {t}");
        let mut hs: Vec<(&str, &str)> = vec![
            ("authorization", auth.as_str()),
            ("content-type", "application/json"),
            ("accept", ACCEPT_BOTH),
            ("mcp-protocol-version", MODERN),
        ];
        let owned: Vec<(&str, String)> = headers;
        for (k, v) in &owned {
            hs.push((k, v.as_str()));
        }
        request(&hs, body.to_string())
    };
    let envelope = json!({"io.modelcontextprotocol/protocolVersion": MODERN,
                          "io.modelcontextprotocol/clientCapabilities": {}});

    // No envelope.
    let v = h
        .send(post(
            vec![("mcp-method", "tools/list".into())],
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        ))
        .await
        .json(StatusCode::BAD_REQUEST);
    assert_eq!(
        v,
        json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32602,
        "message": "params._meta must be an object carrying the required 'io.modelcontextprotocol/protocolVersion' and 'io.modelcontextprotocol/clientCapabilities' envelope keys"}})
    );
    // Headers that disagree with the body.
    let body =
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": envelope}});
    let v = h
        .send(post(
            vec![("mcp-method", "tools/call".into())],
            body.clone(),
        ))
        .await
        .json(StatusCode::BAD_REQUEST);
    assert_eq!(
        v["error"],
        json!({"code": -32020, "message": "mcp-method header does not match the request body's method"})
    );
    // A header not sent is said to be missing, not to differ.
    let v = h
        .send(post(vec![], body.clone()))
        .await
        .json(StatusCode::BAD_REQUEST);
    assert_eq!(
        v["error"],
        json!({"code": -32020, "message": "mcp-method header is missing; send the request body's method in it"})
    );
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                      "params": {"name": "ailang-read", "arguments": {"path": "a"}, "_meta": envelope}});
    let v = h
        .send(post(
            vec![("mcp-method", "tools/call".into())],
            call.clone(),
        ))
        .await
        .json(StatusCode::BAD_REQUEST);
    assert_eq!(
        v["error"],
        json!({"code": -32020, "message": "mcp-name header is missing; send the request body's 'name' parameter in it (as =?base64?…?= where a header cannot carry it)"})
    );
    let v = h
        .send(post(
            vec![
                ("mcp-method", "tools/call".into()),
                ("mcp-name", "tools_decho".into()),
            ],
            call.clone(),
        ))
        .await
        .json(StatusCode::BAD_REQUEST);
    assert_eq!(
        v["error"]["message"],
        "mcp-name header does not match the request body's 'name' parameter"
    );
    // The base64 form of Mcp-Name is decoded.
    let v = h
        .send(post(
            vec![
                ("mcp-method", "tools/call".into()),
                ("mcp-name", "=?base64?YWlsYW5nLXJlYWQ=?=".into()),
            ],
            call,
        ))
        .await
        .json(StatusCode::OK);
    assert_eq!(v["result"]["_meta"]["world/outcome"]["kind"], "ok");
    // Methods of the handshake era are not methods of this revision.
    for method in ["initialize", "ping"] {
        let v = h
            .send(post(
                vec![("mcp-method", method.into())],
                json!({"jsonrpc": "2.0", "id": 4, "method": method, "params": {"_meta": envelope}}),
            ))
            .await
            .json(StatusCode::NOT_FOUND);
        assert_eq!(
            v["error"],
            json!({"code": -32601, "message": format!("method not found: \"{method}\"")})
        );
    }
    // One request per POST; notifications are acknowledged.
    let v = h
        .send(post(
            vec![],
            json!([{"jsonrpc": "2.0", "id": 5, "method": "tools/list"}]),
        ))
        .await
        .json(StatusCode::BAD_REQUEST);
    assert_eq!(
        v,
        json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600,
        "message": "invalid request: the body must be a single JSON-RPC request or notification object under MCP-Protocol-Version 2026-07-28"}})
    );
    h.send(post(
        vec![],
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}),
    ))
    .await
    .assert_accepted();
    let r = h.send(post(vec![], json!(null))).await;
    assert_eq!(
        r.json(StatusCode::BAD_REQUEST)["error"]["code"],
        json!(-32600)
    );
    let mut r = post(vec![], json!({}));
    *r.body_mut() = Body::from("{nope");
    assert_eq!(
        h.send(r).await.json(StatusCode::BAD_REQUEST),
        json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700,
               "message": "Parse error: key must be a string at line 1 column 2; nothing was run"}})
    );
    // A routing header sent twice.
    let v = h
        .send(post(
            vec![("mcp-method", "tools/list".into()), ("mcp-method", "tools/list".into())],
            json!({"jsonrpc": "2.0", "id": 6, "method": "tools/list", "params": {"_meta": envelope}}),
        ))
        .await
        .json(StatusCode::BAD_REQUEST);
    assert_eq!(
        v["error"],
        json!({"code": -32020, "message": "mcp-method header appears more than once"})
    );
    // The handshake-era header rules still come first.
    let mut bad = post(vec![], json!({}));
    bad.headers_mut()
        .insert("accept", "application/json".parse().unwrap());
    h.send(bad).await.assert_text(
        StatusCode::BAD_REQUEST,
        "Accept must list both application/json and text/event-stream",
    );
}

#[tokio::test]
async fn modern_host_failures_are_500_with_their_classification() {
    let h = harness();
    let runner = h.token("run", &["Ailang.Run=worktree:5"]);
    let r = h
        .send(modern(
            &runner,
            json!(2),
            "tools/call",
            json!({"name": "ailang-run", "arguments": {"path": "m.ail"}}),
        ))
        .await;
    // Rule R8: no handler here runs the tool, so nothing ran: refused, as A2A classifies the
    // same call (it said "indeterminate", may have run).
    assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        r.body,
        r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32603,"message":"host callback failed","data":{"kind":"refused","reason":"unavailable","retryable":false}}}"#
    );
    let v = h
        .a2a(
            &runner,
            None,
            v03_send("m-r8", "ailang-run", json!({"path": "m.ail"})),
        )
        .await;
    assert_eq!(
        (&v["error"]["data"]["kind"], &v["error"]["data"]["reason"]),
        (&json!("refused"), &json!("unavailable")),
        "{v}"
    );
    // An effect that ran and was not committed (EffectsUnrecorded), without a key: the seed's
    // fixed message, classified as A2A classifies it (it said `host`).
    let checker = h.token("chk", &["Ailang.Check=worktree:5"]);
    let r = h
        .send(modern(
            &checker,
            json!(3),
            "tools/call",
            json!({"name": "ailang-check", "arguments": {"path": "m.ail"}}),
        ))
        .await;
    assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        r.body,
        r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32603,"message":"host callback failed","data":{"kind":"indeterminate","reason":"unrecorded","retryable":false}}}"#
    );
    let v = h
        .a2a(
            &checker,
            None,
            v03_send("m-chk", "ailang-check", json!({"path": "m.ail"})),
        )
        .await;
    assert_eq!(
        (&v["error"]["data"]["kind"], &v["error"]["data"]["reason"]),
        (&json!("indeterminate"), &json!("unrecorded")),
        "{v}"
    );
}

// -------------------------------------------------------------------------------------------
// A2A: message/send (0.3), SendMessage (1.0) and the card.

impl Harness {
    async fn a2a(&self, token: &str, version: Option<&str>, body: Value) -> Value {
        self.a2a_at(token, "/a2a/", version, body).await
    }

    /// A POST to `uri` (the A2A route, perhaps with a query), `version` in the header if given.
    async fn a2a_at(&self, token: &str, uri: &str, version: Option<&str>, body: Value) -> Value {
        let auth = format!("Bearer {token}");
        let mut hs = vec![
            ("authorization", auth.as_str()),
            ("content-type", "application/json"),
        ];
        if let Some(v) = version {
            hs.push(("a2a-version", v));
        }
        let mut req = request(&hs, body.to_string());
        *req.uri_mut() = uri.parse().unwrap();
        let r = send(&self.full, req).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        serde_json::from_str(&r.body).unwrap()
    }
}

fn v03_send(message_id: &str, skill: &str, args: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": "r1", "method": "message/send", "params": {
        "message": {"kind": "message", "messageId": message_id, "role": "user",
                    "parts": [{"kind": "data", "data": args}]},
        "metadata": {"skill_id": skill}, "configuration": {"blocking": true}}})
}

fn v10_send(message_id: &str, skill: &str, args: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": "r2", "method": "SendMessage", "params": {
        "message": {"messageId": message_id, "role": "ROLE_USER", "parts": [{"data": args}],
                    "metadata": {"skillId": skill}},
        "configuration": {}}})
}

/// A2A params a client got wrong were answered a bare `invalid params` (the contract's text),
/// whatever the mistake: a 0.3 part (`kind`) sent to tasks/send, a part of no kind A2A names,
/// a missing task id. The message stays the contract's; `data.why` says what was wrong, and nothing runs.
#[tokio::test]
async fn a2a_invalid_params_say_in_data_what_was_wrong() {
    let h = harness();
    let t = h.token("a2p", &["Workspace.Read=worktree:50"]);
    let before = h.revision();
    let tasks_send = |params: Value| json!({"jsonrpc": "2.0", "id": 3, "method": "tasks/send", "params": params});
    let cases = [
        (
            tasks_send(json!({"id": "t1", "metadata": {"skill_id": "ailang-read"},
                "message": {"role": "user", "parts": [{"kind": "data", "data": {}}]}})),
            "the part must be {\"type\": \"data\", \"data\": {…}} (tasks/send parts carry \"type\"; message/send's carry \"kind\")",
        ),
        (
            tasks_send(json!({"metadata": {"skill_id": "ailang-read"},
                "message": {"role": "user", "parts": [{"type": "data", "data": {}}]}})),
            "params.id is missing",
        ),
        (
            tasks_send(json!({"id": "has space", "metadata": {"skill_id": "ailang-read"},
                "message": {"role": "user", "parts": [{"type": "data", "data": {}}]}})),
            "the task id must be 1-128 characters of A-Z a-z 0-9 . _ -",
        ),
        (
            tasks_send(json!({"id": "t1", "metadata": {"skill_id": "ailang-read"},
                "message": {"role": "user", "parts": [{"type": "data", "data": [1]}]}})),
            "the data part's \"data\" must be an object: the tool's arguments",
        ),
        (
            {
                let mut v = v03_send("m-1", "ailang-read", json!({}));
                v["params"]["message"]["parts"] = json!([{"kind": "note", "text": "read a"}]);
                v
            },
            "the part must be {\"kind\": \"data\", \"data\": {…}} (message/send parts carry \"kind\"; tasks/send's carry \"type\")",
        ),
        (
            {
                let mut v = v03_send("m-2", "ailang-read", json!({}));
                v["params"]["metadata"] = json!({});
                v
            },
            "metadata.skill_id (or skillId) must name the tool, in params.metadata or params.message.metadata",
        ),
    ];
    for (body, why) in cases {
        let v = h.a2a(&t, None, body).await;
        assert_eq!(
            v["error"],
            json!({"code": -32602, "message": "invalid params", "data": {"why": why}}),
            "{v}"
        );
    }
    assert_eq!(h.revision(), before);
}

#[tokio::test]
async fn a2a_version_values_that_name_no_version_spoken_here_are_version_not_supported() {
    let h = harness();
    let t = h.token("a2", &["Workspace.Read=worktree:50"]);
    let before = h.revision();
    let mut refused = 0;
    // Trailing garbage, whitespace inside, a major alone, leading signs and zeros, minors and
    // majors this server does not speak: SendMessage answers with its own -32009.
    for version in [
        "1.0abc", "1.0 beta", "1 .0", "1. 0", "1", "1.", "1.0.", "1.0.x", "+1.0", "01.0", "1.00",
        "1.2", "2.0", "v1.0", "1,0", "1.0, 0.3",
    ] {
        let v = h
            .a2a(
                &t,
                Some(version),
                v10_send("m-1", "ailang-read", json!({"path": "a"})),
            )
            .await;
        assert_eq!(
            v,
            json!({"jsonrpc": "2.0", "id": "r2", "error": {"code": -32009, "message": format!(
                "A2A version {} is not supported by SendMessage; send A2A-Version: 1.0 (or use message/send for 0.3)",
                json!(version)
            ), "data": version_info(version)}}),
            "{version:?}"
        );
        refused += 1;
    }
    // An empty value is read as 0.3 (A2A 3.6.2), as an absent one is: not SendMessage's.
    let v = h
        .a2a(
            &t,
            Some(""),
            v10_send("m-1", "ailang-read", json!({"path": "a"})),
        )
        .await;
    assert_eq!(
        v["error"]["message"],
        "A2A version \"0.3\" is not supported by SendMessage; send A2A-Version: 1.0 (or use message/send for 0.3)"
    );
    // The 0.3 senders refuse what is neither version with the contract's message.
    for version in ["2.0", "0.3abc", "0.4", "0", "garbage", "0.3 1.0"] {
        let v = h
            .a2a(
                &t,
                Some(version),
                v03_send("m-1", "ailang-read", json!({"path": "a"})),
            )
            .await;
        assert_eq!(
            v,
            json!({"jsonrpc": "2.0", "id": "r1", "error": {"code": -32009, "message": format!(
                "A2A version {} is not supported; supported: 1.0 (SendMessage), 0.3 (message/send; also when A2A-Version is absent)",
                json!(version)
            ), "data": version_info(version)}}),
            "{version:?}"
        );
        refused += 1;
    }
    // Nothing ran for any of them.
    assert_eq!(h.revision(), before, "{refused} refusals");
    // Exact versions run: Major.Minor, a patch number not considered (A2A 3.6), the
    // whitespace around a field value not part of it (HTTP).
    for (n, version) in ["1.0", "1.0.0", "1.0.7", " 1.0\t"].into_iter().enumerate() {
        let v = h
            .a2a(
                &t,
                Some(version),
                v10_send(&format!("k-{n}"), "ailang-read", json!({"path": "a"})),
            )
            .await;
        assert_eq!(
            v["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
            "{version:?} {v}"
        );
    }
    for (n, version) in [None, Some(""), Some("0.3"), Some("0.3.1")]
        .into_iter()
        .enumerate()
    {
        let v = h
            .a2a(
                &t,
                version,
                v03_send(&format!("o-{n}"), "ailang-read", json!({"path": "a"})),
            )
            .await;
        assert_eq!(
            v["result"]["status"]["state"], "completed",
            "{version:?} {v}"
        );
    }
    assert_eq!(h.revision(), before + 8);
}

/// The `google.rpc.ErrorInfo` of a `-32009` for a request that named `requested`.
fn version_info(requested: &str) -> Value {
    json!([{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "VERSION_NOT_SUPPORTED",
            "domain": "a2a-protocol.org",
            "metadata": {"requested": requested, "supported": "1.0, 0.3"}}])
}

/// Attack on the version rule: `message/send` and `tasks/send` sent with `A2A-Version: 1.0`
/// ran and answered in their older shapes, so a 1.0 client got a task it could not read and
/// spent budget for it (A2A 3.6.2: a request is served by its version's semantics, or refused
/// with VersionNotSupportedError). Now each is refused, naming the 1.0 method, and nothing runs.
#[tokio::test]
async fn a2a_senders_of_another_version_are_refused_under_1_0_and_run_nothing() {
    let h = harness();
    let t = h.token("a2v", &["Workspace.Read=worktree:50"]);
    let before = h.revision();
    let tasks_send = json!({"jsonrpc": "2.0", "id": 7, "method": "tasks/send", "params": {
        "id": "t-1", "metadata": {"skill_id": "ailang-read"},
        "message": {"parts": [{"type": "data", "data": {"path": "a"}}]}}});
    for (body, name, id) in [
        (
            v03_send("v-1", "ailang-read", json!({"path": "a"})),
            "message/send",
            json!("r1"),
        ),
        (tasks_send, "tasks/send", json!(7)),
    ] {
        let v = h.a2a(&t, Some("1.0"), body).await;
        assert_eq!(
            v,
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32009, "message": format!(
                "A2A version \"1.0\" is not supported by {name}; send A2A-Version: 0.3 (or use SendMessage for 1.0)"
            ), "data": version_info("1.0")}}),
        );
    }
    assert_eq!(h.revision(), before, "nothing ran");
    // The version may come as a query parameter instead of the header (A2A 3.6.1); a header
    // and a parameter that disagree name no version.
    let v = h
        .a2a_at(
            &t,
            "/a2a/?A2A-Version=1.0",
            None,
            v10_send("v-2", "ailang-read", json!({"path": "a"})),
        )
        .await;
    assert_eq!(
        v["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{v}"
    );
    let v = h
        .a2a_at(
            &t,
            "/a2a/?a2a-version=0.3",
            Some("1.0"),
            v10_send("v-3", "ailang-read", json!({"path": "a"})),
        )
        .await;
    assert_eq!(v["error"]["code"], json!(-32009), "{v}");
    assert_eq!(v["error"]["data"], version_info("1.0, 0.3"), "{v}");
    assert_eq!(h.revision(), before + 1);
}

fn task_read(method: &str, id: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": "q", "method": method, "params": {"id": id}})
}

/// The `google.rpc.ErrorInfo` array of an A2A-specific error.
fn error_info(reason: &str, metadata: Value) -> Value {
    json!([{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason,
            "domain": "a2a-protocol.org", "metadata": metadata}])
}

/// A2A 0.3 requires `tasks/get` and `tasks/cancel` of every agent, and 1.0 `GetTask` and
/// `CancelTask`: they answered `-32601 method not found`, so an SDK's `get_task` failed and a
/// client that lost a send's answer could not ask what became of the task. Now a task is read
/// back by its id in the caller's episode, as its send answered it (running: working), and a
/// cancel says why no call can be canceled; reading runs and writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a2a_tasks_are_read_back_by_id_in_either_version_and_never_canceled() {
    let mut h = harness_with(Limits {
        handler_deadline: Duration::from_millis(300),
        ..Limits::default()
    });
    let t = h.token(
        "tk",
        &["Workspace.Read=worktree:50", "Workspace.Write=worktree:5"],
    );
    let sent03 = h
        .a2a(
            &t,
            None,
            v03_send("g-1", "ailang-read", json!({"path": "a"})),
        )
        .await["result"]
        .clone();
    let sent10 = h
        .a2a(
            &t,
            Some("1.0"),
            v10_send("g-2", "ailang-read", json!({"path": "refuse-me"})),
        )
        .await["result"]["task"]
        .clone();
    assert_eq!(sent10["status"]["state"], "TASK_STATE_REJECTED", "{sent10}");
    let before = h.revision();

    // Committed: the task its send answered, read again (a read-back, like a replay, is never
    // retryable under its id).
    let mut want = sent03.clone();
    want["metadata"]["replayed"] = json!(true);
    want["metadata"]["outcome"]["retryable"] = json!(false);
    assert_eq!(
        h.a2a(&t, None, task_read("tasks/get", json!("g-1"))).await["result"],
        want
    );
    let mut want = sent10.clone();
    want["metadata"]["replayed"] = json!(true);
    let mut get = task_read("GetTask", json!("g-2"));
    get["params"]["historyLength"] = json!(0);
    assert_eq!(h.a2a(&t, Some("1.0"), get).await["result"], want);

    // Not this episode's, never sent, or no task id at all: Task not found.
    let other = h.token("tk-other", &["Workspace.Read=worktree:5"]);
    for (token, id) in [
        (&other, "g-1"),
        (&t, "never-sent"),
        (&t, "no spaces/allowed"),
    ] {
        let v = h
            .a2a(token, Some("1.0"), task_read("GetTask", json!(id)))
            .await;
        assert_eq!(
            v["error"],
            json!({"code": -32001, "message": "Task not found", "data": error_info("TASK_NOT_FOUND",
                json!({"taskId": id, "why": "no task with this id was sent in this session's episode"}))}),
            "{id}"
        );
    }
    // No call is canceled once sent.
    let v = h
        .a2a(&t, None, task_read("tasks/cancel", json!("g-1")))
        .await;
    assert_eq!(
        v["error"],
        json!({"code": -32002, "message": "Task cannot be canceled", "data": error_info("TASK_NOT_CANCELABLE",
            json!({"taskId": "g-1", "why": "the task is committed: its result is in the log"}))})
    );
    // Params that are not a task's id, and each version's method under the other.
    for (params, why) in [
        (json!({}), "params.id is missing"),
        (json!({"id": 5}), "params.id must be a string"),
        (
            json!({"id": "g-1", "historyLength": -1}),
            "params.historyLength must be a count (0 or more)",
        ),
        (json!([]), "params must be an object with the task's \"id\""),
    ] {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": params});
        assert_eq!(
            h.a2a(&t, Some("1.0"), body).await["error"],
            json!({"code": -32602, "message": "invalid params",
                   "data": error_info("INVALID_PARAMS", json!({"why": why}))})
        );
    }
    let v = h.a2a(&t, None, task_read("GetTask", json!("g-1"))).await;
    assert_eq!(
        v["error"]["message"],
        "A2A version \"0.3\" is not supported by GetTask; send A2A-Version: 1.0 (or use tasks/get for 0.3)"
    );
    let v = h
        .a2a(&t, Some("1.0"), task_read("tasks/cancel", json!("g-1")))
        .await;
    assert_eq!(
        v["error"]["message"],
        "A2A version \"1.0\" is not supported by tasks/cancel; send A2A-Version: 0.3 (or use CancelTask for 1.0)"
    );
    assert_eq!(h.revision(), before, "reading tasks writes nothing");

    // A write held in its handler is working; past its deadline its handler still runs, so it
    // still is; once the handler returns, its effect is recorded and the call not committed.
    let full = h.full.clone();
    let send = tokio::spawn({
        let t = t.clone();
        async move {
            let mut req = request(
                &[
                    ("authorization", &format!("Bearer {t}")),
                    ("a2a-version", "1.0"),
                ],
                v10_send(
                    "w-1",
                    "ailang-write",
                    json!({"path": "w.txt", "content": "x"}),
                )
                .to_string(),
            );
            *req.uri_mut() = "/a2a/".parse().unwrap();
            send(&full, req).await
        }
    });
    tokio::time::timeout(Duration::from_secs(30), h.entered.recv())
        .await
        .expect("the held write never reached its handler");
    let working = |v: &Value| v["result"]["status"].clone();
    let v = h
        .a2a(&t, Some("1.0"), task_read("GetTask", json!("w-1")))
        .await;
    assert_eq!(working(&v), json!({"state": "TASK_STATE_WORKING"}), "{v}");
    assert_eq!(
        v["result"]["metadata"],
        json!({"invocation_id": "a2a:tk:w-1"})
    );
    let v = h
        .a2a(&t, Some("1.0"), task_read("CancelTask", json!("w-1")))
        .await;
    assert_eq!(v["error"]["code"], json!(-32002), "{v}");
    assert_eq!(
        v["error"]["data"][0]["metadata"]["why"],
        "a call cannot be canceled once sent: its handler runs to its end and the call commits; read it again with tasks/get (GetTask)"
    );
    let answered = send.await.unwrap();
    assert!(answered.body.contains("\"error\""), "{}", answered.body);
    let v = h.a2a(&t, None, task_read("tasks/get", json!("w-1"))).await;
    assert_eq!(working(&v), json!({"state": "working"}), "overrunning: {v}");
    h.gate.release();
    let mut v = Value::Null;
    for _ in 0..300 {
        v = h
            .a2a(&t, Some("1.0"), task_read("GetTask", json!("w-1")))
            .await;
        if v["result"]["status"]["state"] != "TASK_STATE_WORKING" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let task = &v["result"];
    assert_eq!(task["status"]["state"], "TASK_STATE_FAILED", "{v}");
    assert_eq!(task["status"]["message"]["role"], "ROLE_AGENT");
    assert_eq!(
        task["metadata"]["outcome"],
        json!({"kind": "indeterminate", "reason": "unrecorded", "retryable": false})
    );
    assert_eq!(
        task["metadata"]["effects"][0]["effect"], "Workspace.Write",
        "{v}"
    );
    assert_eq!(
        task["metadata"]["records"][0],
        task["metadata"]["effects"][0]["record"]
    );
    assert!(task.get("artifacts").is_none(), "{v}");
    assert_eq!(h.revision(), before, "nothing was committed");
}

/// A2A 1.0 (3.4.2): a message's `taskId` must name an existing task; a client does not choose
/// a new task's id. A `SendMessage` with a `taskId` nobody sent ran and answered a task of that
/// id. Now its message id names the task it starts (and is its key), and a `taskId` that names
/// another task is `-32001` when there is none, `-32004` when there is one (each task here is
/// one call); nothing runs.
#[tokio::test]
async fn a2a_a_1_0_message_cannot_choose_a_new_tasks_id() {
    let h = harness();
    let t = h.token("a2t", &["Workspace.Read=worktree:50"]);
    let with_task = |message: &str, task: &str| {
        let mut body = v10_send(message, "ailang-read", json!({"path": "a"}));
        body["params"]["message"]["taskId"] = json!(task);
        body
    };
    let before = h.revision();
    let v = h.a2a(&t, Some("1.0"), with_task("m-1", "new-task")).await;
    assert_eq!(
        v["error"],
        json!({"code": -32001, "message": "Task not found", "data": error_info("TASK_NOT_FOUND",
            json!({"taskId": "new-task", "why": "no task with this id was sent in this session's episode"}))})
    );
    assert_eq!(h.revision(), before, "nothing ran");
    // The message id names the task; resent with that task id, it is the same message.
    let v = h
        .a2a(
            &t,
            Some("1.0"),
            v10_send("m-2", "ailang-read", json!({"path": "a"})),
        )
        .await;
    assert_eq!(v["result"]["task"]["id"], "m-2", "{v}");
    let again = h.a2a(&t, Some("1.0"), with_task("m-2", "m-2")).await;
    assert_eq!(
        again["result"]["task"]["metadata"]["replayed"],
        json!(true),
        "{again}"
    );
    // A new message naming the ended task: the task takes no further message.
    let v = h.a2a(&t, Some("1.0"), with_task("m-3", "m-2")).await;
    assert_eq!(v["error"]["code"], json!(-32004), "{v}");
    assert_eq!(v["error"]["data"][0]["metadata"]["taskId"], "m-2");
    assert_eq!(
        v["error"]["data"][0]["metadata"]["why"],
        "the task has ended (its state is terminal) and takes no further message: each task here is one call; send a new message (a new messageId, no taskId)"
    );
    assert_eq!(h.revision(), before + 1);
    // 0.3 keeps its rule: the task id, when sent, is the key.
    let mut old = v03_send("m-4", "ailang-read", json!({"path": "a"}));
    old["params"]["message"]["taskId"] = json!("t-4");
    assert_eq!(h.a2a(&t, None, old).await["result"]["id"], "t-4");
}

/// What an agent card leaves out is the specification's error, not `method not found`:
/// streaming and resubscribing (-32004), push notifications (-32003), the extended card
/// (1.0: -32004; 0.3: -32007), listing tasks (-32004); each says why and runs nothing.
#[tokio::test]
async fn a2a_methods_the_card_declines_answer_the_specifications_errors() {
    let h = harness();
    let t = h.token("a2u", &["Workspace.Read=worktree:5"]);
    let before = h.revision();
    for (method, version, code, message, reason) in [
        (
            "message/stream",
            None,
            -32004,
            "This operation is not supported",
            "UNSUPPORTED_OPERATION",
        ),
        (
            "SendStreamingMessage",
            Some("1.0"),
            -32004,
            "This operation is not supported",
            "UNSUPPORTED_OPERATION",
        ),
        (
            "tasks/resubscribe",
            None,
            -32004,
            "This operation is not supported",
            "UNSUPPORTED_OPERATION",
        ),
        (
            "SubscribeToTask",
            Some("1.0"),
            -32004,
            "This operation is not supported",
            "UNSUPPORTED_OPERATION",
        ),
        (
            "tasks/pushNotificationConfig/set",
            None,
            -32003,
            "Push Notification is not supported",
            "PUSH_NOTIFICATION_NOT_SUPPORTED",
        ),
        (
            "tasks/pushNotificationConfig/get",
            None,
            -32003,
            "Push Notification is not supported",
            "PUSH_NOTIFICATION_NOT_SUPPORTED",
        ),
        (
            "tasks/pushNotificationConfig/list",
            None,
            -32003,
            "Push Notification is not supported",
            "PUSH_NOTIFICATION_NOT_SUPPORTED",
        ),
        (
            "tasks/pushNotificationConfig/delete",
            None,
            -32003,
            "Push Notification is not supported",
            "PUSH_NOTIFICATION_NOT_SUPPORTED",
        ),
        (
            "CreateTaskPushNotificationConfig",
            Some("1.0"),
            -32003,
            "Push Notification is not supported",
            "PUSH_NOTIFICATION_NOT_SUPPORTED",
        ),
        (
            "GetTaskPushNotificationConfig",
            Some("1.0"),
            -32003,
            "Push Notification is not supported",
            "PUSH_NOTIFICATION_NOT_SUPPORTED",
        ),
        (
            "ListTaskPushNotificationConfigs",
            Some("1.0"),
            -32003,
            "Push Notification is not supported",
            "PUSH_NOTIFICATION_NOT_SUPPORTED",
        ),
        (
            "DeleteTaskPushNotificationConfig",
            Some("1.0"),
            -32003,
            "Push Notification is not supported",
            "PUSH_NOTIFICATION_NOT_SUPPORTED",
        ),
        (
            "GetExtendedAgentCard",
            Some("1.0"),
            -32004,
            "This operation is not supported",
            "UNSUPPORTED_OPERATION",
        ),
        (
            "agent/getAuthenticatedExtendedCard",
            None,
            -32007,
            "Authenticated Extended Card not configured",
            "AUTHENTICATED_EXTENDED_CARD_NOT_CONFIGURED",
        ),
        (
            "ListTasks",
            Some("1.0"),
            -32004,
            "This operation is not supported",
            "UNSUPPORTED_OPERATION",
        ),
    ] {
        let body = json!({"jsonrpc": "2.0", "id": 3, "method": method, "params": {}});
        let v = h.a2a(&t, version, body).await;
        let error = &v["error"];
        assert_eq!(
            (&error["code"], &error["message"]),
            (&json!(code), &json!(message)),
            "{method}: {v}"
        );
        assert_eq!(error["data"][0]["reason"], reason, "{method}");
        assert!(
            error["data"][0]["metadata"]["why"]
                .as_str()
                .is_some_and(|w| !w.is_empty()),
            "{method}"
        );
    }
    // A name of no version is still method not found.
    let body = json!({"jsonrpc": "2.0", "id": 4, "method": "tasks/list", "params": {}});
    assert_eq!(
        h.a2a(&t, None, body).await["error"],
        json!({"code": -32601, "message": "method not found"})
    );
    assert_eq!(h.revision(), before);
}

#[tokio::test]
async fn a2a_message_send_and_send_message_share_the_invocation_path() {
    let h = harness();
    let t = h.token("a2", &["Workspace.Read=worktree:5"]);
    let before = h.revision();

    let v = h
        .a2a(
            &t,
            Some("0.3"),
            v03_send("m-1", "ailang-read", json!({"path": "a"})),
        )
        .await;
    let task = &v["result"];
    assert_eq!(task["kind"], "task");
    assert_eq!(task["id"], "m-1");
    assert_eq!(task["contextId"], "a2");
    assert_eq!(task["status"], json!({"state": "completed"}));
    let part = &task["artifacts"][0]["parts"][0];
    assert_eq!(part["kind"], "data");
    assert_eq!(part["data"]["ok"], json!(true));
    assert_eq!(task["metadata"]["invocation_id"], "a2a:a2:m-1");
    assert_eq!(
        task["metadata"]["outcome"],
        json!({"kind": "ok", "retryable": true})
    );
    assert_eq!(task["metadata"]["effects"][0]["budgetAfter"], json!(4));

    let v = h
        .a2a(
            &t,
            Some("1.0"),
            v10_send("m-2", "ailang-read", json!({"path": "a"})),
        )
        .await;
    let task = &v["result"]["task"];
    assert_eq!(task["id"], "m-2");
    assert_eq!(task["status"], json!({"state": "TASK_STATE_COMPLETED"}));
    let part = &task["artifacts"][0]["parts"][0];
    assert_eq!(part["mediaType"], "application/json");
    assert_eq!(part["data"]["ok"], json!(true));
    assert_eq!(task["metadata"]["replayed"], json!(false));

    // The message id is the idempotency key: a resend replays.
    let again = h
        .a2a(
            &t,
            Some("1.0"),
            v10_send("m-2", "ailang-read", json!({"path": "a"})),
        )
        .await;
    assert_eq!(again["result"]["task"]["metadata"]["replayed"], json!(true));
    assert_eq!(again["result"]["task"]["artifacts"], task["artifacts"]);
    assert_eq!(h.revision(), before + 2);
    // A conflicting resend is the contract's error, with its classification.
    let v = h
        .a2a(
            &t,
            Some("1.0"),
            v10_send("m-2", "ailang-read", json!({"path": "b"})),
        )
        .await;
    assert_eq!(
        v["error"],
        json!({"code": -32602, "message": "task id already used in this session",
               "data": error_info("INVALID_PARAMS", json!({"kind": "refused", "reason": "key-conflict",
                                                          "retryable": "false", "taskId": "m-2"}))})
    );

    // Refusals are rejected tasks in both shapes.
    let v = h
        .a2a(
            &t,
            None,
            v03_send("m-3", "ailang-read", json!({"path": "a", "x": 1})),
        )
        .await;
    assert_eq!(v["result"]["status"]["state"], "rejected");
    assert_eq!(v["result"]["metadata"]["outcome"]["reason"], "plan");
    let v = h
        .a2a(
            &t,
            Some("1.0"),
            v10_send("m-4", "ailang-read", json!({"path": "refuse-me"})),
        )
        .await;
    assert_eq!(
        v["result"]["task"]["status"]["state"],
        "TASK_STATE_REJECTED"
    );

    // SendMessage needs A2A-Version 1.x.
    for version in [None, Some("0.3")] {
        let v = h
            .a2a(
                &t,
                version,
                v10_send("m-5", "ailang-read", json!({"path": "a"})),
            )
            .await;
        assert_eq!(v["error"]["code"], json!(-32009), "{version:?}");
    }
    assert_eq!(
        h.a2a(&t, None, v10_send("m-5", "ailang-read", json!({"path": "a"}))).await["error"]["message"],
        "A2A version \"0.3\" is not supported by SendMessage; send A2A-Version: 1.0 (or use message/send for 0.3)"
    );
    // Bad shapes and invisible skills.
    let mut two_parts = v03_send("m-6", "ailang-read", json!({}));
    two_parts["params"]["message"]["parts"] =
        json!([{"kind": "data", "data": {}}, {"kind": "data", "data": {}}]);
    assert_eq!(
        h.a2a(&t, None, two_parts).await["error"],
        json!({"code": -32602, "message": "invalid params", "data": {"why":
            "the message must hold exactly one part (a data part with the arguments), not 2"}})
    );
    let v = h
        .a2a(&t, None, v03_send("m-7", "ailang-write", json!({})))
        .await;
    assert_eq!(
        v["error"],
        json!({"code": -32602, "message": "not authorized", "data": {"why":
            "no skill of this session is named \"ailang-write\"; the agent card lists this session's skills"}})
    );
    // A misspelt skill id was answered the same bare `not authorized`: the contract's message
    // stays, and `data.why` names the nearest of the session's own skills (ailang-write, above,
    // is another session's, and is never offered).
    let v = h
        .a2a(&t, None, v03_send("m-7b", "ailang_read", json!({})))
        .await;
    assert_eq!(
        v["error"],
        json!({"code": -32602, "message": "not authorized", "data": {"why":
            "no skill of this session is named \"ailang_read\"; did you mean ailang-read? (the agent card lists this session's skills)"}})
    );
    // The old method still answers in its own shape, now with the classification too.
    let v = h
        .a2a(
            &t,
            None,
            json!({"jsonrpc": "2.0", "id": 1, "method": "tasks/send", "params": {
        "id": "t-1", "metadata": {"skill_id": "ailang-read"},
        "message": {"role": "user", "parts": [{"type": "data", "data": {"path": "a", "x": 1}}]}}}),
        )
        .await;
    assert_eq!(v["result"]["status"], json!({"state": "completed"}));
    assert_eq!(v["result"]["artifacts"][0]["parts"][0]["type"], "data");
    assert_eq!(v["result"]["metadata"]["outcome"]["kind"], "refused");
}

#[tokio::test]
async fn the_agent_card_tags_skills_with_their_class_at_both_paths() {
    let h = harness();
    let t = h.token(
        "card",
        &[
            "Workspace.Read=worktree:5",
            "Workspace.Write=worktree:5",
            "Ailang.Run=worktree:1",
        ],
    );
    for path in ["/.well-known/agent-card.json", "/.well-known/agent.json"] {
        let (status, v) = h.get_json(&t, path).await;
        assert_eq!(status, StatusCode::OK);
        let tags: Vec<(String, Value)> = v["skills"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| (s["id"].as_str().unwrap().to_owned(), s["tags"].clone()))
            .collect();
        assert_eq!(
            tags,
            [
                ("ailang-edit".to_owned(), json!(["write"])),
                ("ailang-read".to_owned(), json!(["read"])),
                ("ailang-run".to_owned(), json!(["unknown", "cannot-run"])),
                ("ailang-write".to_owned(), json!(["write"])),
                ("tools.echo".to_owned(), json!(["read"])),
            ]
        );
        assert_eq!(v["protocolVersion"], "0.3.0");
        assert_eq!(v["preferredTransport"], "JSONRPC");
        assert_eq!(
            v["supportedInterfaces"],
            json!([{"url": "http://127.0.0.1:7644/a2a/", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
                   {"url": "http://127.0.0.1:7644/a2a/", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"}])
        );
        assert_eq!(v["securitySchemes"]["bearer"]["scheme"], "bearer");
        assert_eq!(v["security"], json!([{"bearer": []}]));
        assert_eq!(v["capabilities"]["streaming"], json!(false));
    }
}

// -------------------------------------------------------------------------------------------
// A2A: contexts, content types, configuration and role, as the specification and its SDKs
// read them.

/// `body` (a send) with `message.contextId` set to `context`.
fn in_context(mut body: Value, context: &str) -> Value {
    body["params"]["message"]["contextId"] = json!(context);
    body
}

/// `body` (a send) with `message.parts` replaced by `parts`.
fn with_parts(mut body: Value, parts: Value) -> Value {
    body["params"]["message"]["parts"] = parts;
    body
}

/// `body` (a send) with `params.configuration` replaced by `configuration`.
fn with_configuration(mut body: Value, configuration: Value) -> Value {
    body["params"]["configuration"] = configuration;
    body
}

/// The `-32602 invalid params` of a send, `why` in its data.
fn invalid_params(why: &str) -> Value {
    json!({"code": -32602, "message": "invalid params", "data": {"why": why}})
}

/// `invalid params` as the version answers it: under 1.0 `why` is in an `ErrorInfo`.
fn invalid_params_in(version: Option<&str>, why: &str) -> Value {
    match version {
        Some("1.0") => json!({"code": -32602, "message": "invalid params",
                              "data": error_info("INVALID_PARAMS", json!({"why": why}))}),
        _ => invalid_params(why),
    }
}

/// A2A's `-32005 ContentTypeNotSupportedError`, with its `ErrorInfo`.
fn content_type_not_supported(metadata: Value) -> Value {
    json!({"code": -32005, "message": "Incompatible content types",
           "data": error_info("CONTENT_TYPE_NOT_SUPPORTED", metadata)})
}

/// One A2A task reported three `contextId`s: its send echoed the message's (`ctx-A`), a read
/// back named the episode, and a resend of the same message with `ctx-B` replayed the task
/// under `ctx-B`. The server defines contexts, one a session, its episode: every answer (send,
/// replay, read) names it, and a message naming another is refused before anything runs, its
/// task id left free.
#[tokio::test]
async fn a2a_a_task_has_one_context_its_episode_and_a_message_naming_another_runs_nothing() {
    let h = harness();
    let t = h.token("ctx", &["Workspace.Read=worktree:50"]);
    let before = h.revision();
    let foreign = |version: Option<&str>, context: &str| {
        invalid_params_in(version, &format!(
            "params.message.contextId \"{context}\" is no context of this agent: every task of this session is in the context \"ctx\" (its episode); send that, or no contextId"
        ))
    };
    type Send = fn(&str, &str, Value) -> Value;
    let versions: [(Option<&str>, Send, &str, &str); 2] = [
        (None, v03_send, "tasks/get", "/result"),
        (Some("1.0"), v10_send, "GetTask", "/result/task"),
    ];
    for (version, send, get, task_at) in versions {
        let key = format!("ctxprobe-{}", version.unwrap_or("0.3"));
        let read = || send(&key, "ailang-read", json!({"path": "a"}));
        let v = h.a2a(&t, version, in_context(read(), "ctx-A")).await;
        assert_eq!(v["error"], foreign(version, "ctx-A"), "{v}");
        let v = h.a2a(&t, version, in_context(read(), "ctx")).await;
        let task = v.pointer(task_at).unwrap_or_else(|| panic!("{v}"));
        assert_eq!(
            (&task["contextId"], &task["metadata"]["replayed"]),
            (&json!("ctx"), &json!(false)),
            "the refused send left its key free: {v}"
        );
        let v = h.a2a(&t, version, task_read(get, json!(key))).await;
        assert_eq!(v["result"]["contextId"], "ctx", "{v}");
        let v = h.a2a(&t, version, read()).await;
        let task = v.pointer(task_at).unwrap_or_else(|| panic!("{v}"));
        assert_eq!(
            (&task["contextId"], &task["metadata"]["replayed"]),
            (&json!("ctx"), &json!(true)),
            "{v}"
        );
        let v = h.a2a(&t, version, in_context(read(), "ctx-B")).await;
        assert_eq!(v["error"], foreign(version, "ctx-B"), "{v}");
    }
    assert_eq!(h.revision(), before + 2);
}

/// A file part and a text part, well formed, were answered `-32602 invalid params`, as a
/// malformed part is: A2A names `-32005 ContentTypeNotSupportedError` for content whose media
/// type the agent does not take. Each is that now, with the `ErrorInfo` saying which media
/// type and what to send, also beside a data part; a malformed part stays `-32602`. Nothing
/// runs for either.
#[tokio::test]
async fn a2a_text_and_file_parts_are_content_type_not_supported_and_run_nothing() {
    let h = harness();
    let t = h.token("ct", &["Workspace.Read=worktree:50"]);
    let before = h.revision();
    let metadata = |media_type: Option<&str>, what: &str| {
        let mut m = json!({"supported": "application/json", "why": format!(
            "{what} is not taken: every skill here takes one data part, the arguments object (application/json, the card's inputModes); send that part alone")});
        if let Some(media_type) = media_type {
            m["mediaType"] = json!(media_type);
        }
        m
    };
    let v03 = |parts: Value| with_parts(v03_send("p-1", "ailang-read", json!({})), parts);
    let v10 = |parts: Value| with_parts(v10_send("p-2", "ailang-read", json!({})), parts);
    let data03 = json!({"kind": "data", "data": {"path": "a"}});
    let cases = [
        (
            None,
            v03(json!([{"kind": "text", "text": "read a"}])),
            metadata(Some("text/plain"), "a text part"),
        ),
        (
            None,
            v03(
                json!([{"kind": "file", "file": {"name": "a", "mimeType": "text/plain", "bytes": "aGk="}}]),
            ),
            metadata(Some("text/plain"), "a file part"),
        ),
        (
            None,
            v03(json!([{"kind": "file", "file": {"uri": "file:///etc/passwd"}}])),
            metadata(None, "a file part"),
        ),
        (
            None,
            v03(json!([{"kind": "text", "text": "please read"}, data03])),
            metadata(Some("text/plain"), "a text part"),
        ),
        (
            Some("1.0"),
            v10(json!([{"url": "file:///etc/passwd", "mediaType": "text/plain"}])),
            metadata(Some("text/plain"), "a file part (url)"),
        ),
        (
            Some("1.0"),
            v10(json!([{"raw": "aGk=", "mediaType": "image/png"}])),
            metadata(Some("image/png"), "a file part (raw)"),
        ),
        (
            Some("1.0"),
            v10(json!([{"text": "x"}, {"data": {"path": "a"}}])),
            metadata(Some("text/plain"), "a text part"),
        ),
        (
            Some("1.0"),
            v10(json!([{"data": {"path": "a"}, "mediaType": "text/csv"}])),
            metadata(Some("text/csv"), "a data part of another media type"),
        ),
    ];
    for (version, body, metadata) in cases {
        let v = h.a2a(&t, version, body).await;
        assert_eq!(v["error"], content_type_not_supported(metadata), "{v}");
    }
    let malformed = [
        (
            None,
            v03(json!([{"kind": "text", "text": 5}])),
            "a text part's \"text\" must be a string",
        ),
        (
            None,
            v03(json!([{"kind": "file", "file": {"name": "a"}}])),
            "a file part's \"file\" must hold one of \"bytes\" or \"uri\", a string",
        ),
        (
            Some("1.0"),
            v10(json!([{"text": "x", "data": {}}])),
            "a part holds only one of \"text\", \"raw\", \"url\" and \"data\"; this one holds \"text\", \"data\"",
        ),
        (
            Some("1.0"),
            v10(json!([{"url": 5}])),
            "a file part's \"url\" must be a string",
        ),
    ];
    for (version, body, why) in malformed {
        let v = h.a2a(&t, version, body).await;
        assert_eq!(v["error"], invalid_params_in(version, why), "{v}");
    }
    assert_eq!(h.revision(), before);
    // A data part that says it is JSON runs.
    let v = h
        .a2a(
            &t,
            Some("1.0"),
            v10(json!([{"data": {"path": "a"}, "mediaType": "application/json"}])),
        )
        .await;
    assert_eq!(
        v["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{v}"
    );
    assert_eq!(h.revision(), before + 1);
}

/// `configuration.acceptedOutputModes` of `["text/plain"]` still got an `application/json`
/// artifact, the tool having run: a client that accepts no JSON is now told `-32005` before
/// anything runs. A list naming JSON or a wildcard, or an empty one, is served.
#[tokio::test]
async fn a2a_accepted_output_modes_without_json_are_refused_before_anything_runs() {
    let h = harness();
    let t = h.token("om", &["Workspace.Read=worktree:50"]);
    let before = h.revision();
    let refused = |modes: &str| {
        content_type_not_supported(
            json!({"acceptedOutputModes": modes, "supported": "application/json",
            "why": "every task's artifact is application/json (the card's outputModes), which params.configuration.acceptedOutputModes does not list: accept application/json (or */*), or send no acceptedOutputModes"}),
        )
    };
    let v = h
        .a2a(
            &t,
            None,
            with_configuration(
                v03_send("o-1", "ailang-read", json!({"path": "a"})),
                json!({"acceptedOutputModes": ["text/plain"]}),
            ),
        )
        .await;
    assert_eq!(v["error"], refused("text/plain"), "{v}");
    let v = h
        .a2a(
            &t,
            Some("1.0"),
            with_configuration(
                v10_send("o-2", "ailang-read", json!({"path": "a"})),
                json!({"acceptedOutputModes": ["text/plain", "image/png"]}),
            ),
        )
        .await;
    assert_eq!(v["error"], refused("text/plain, image/png"), "{v}");
    assert_eq!(h.revision(), before);
    let served = [
        json!(["application/json"]),
        json!(["text/plain", "*/*"]),
        json!(["Application/JSON; charset=utf-8"]),
        json!(["application/*"]),
        json!([]),
    ];
    for (i, modes) in served.into_iter().enumerate() {
        let body = with_configuration(
            v10_send(&format!("o-ok-{i}"), "ailang-read", json!({"path": "a"})),
            json!({"acceptedOutputModes": modes}),
        );
        let v = h.a2a(&t, Some("1.0"), body).await;
        assert_eq!(
            v["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
            "{v}"
        );
    }
    assert_eq!(h.revision(), before + 5);
}

/// `message/send` ran with `configuration.acceptedOutputModes: 42` and `historyLength: -1`,
/// which `tasks/get` refuses as `params.historyLength must be a count`; and it took a message
/// whose role was `"agent"` (1.0 `"user"`, not its `"ROLE_USER"`). The configuration is now
/// checked as a task read's params are, and the role must be the user's in the version's
/// spelling: `-32602`, nothing run.
#[tokio::test]
async fn a2a_send_configuration_and_role_are_checked_before_anything_runs() {
    let h = harness();
    let t = h.token("cf", &["Workspace.Read=worktree:50"]);
    let before = h.revision();
    let v03 = |configuration: Value| {
        with_configuration(
            v03_send("f-1", "ailang-read", json!({"path": "a"})),
            configuration,
        )
    };
    let v10 = |configuration: Value| {
        with_configuration(
            v10_send("f-2", "ailang-read", json!({"path": "a"})),
            configuration,
        )
    };
    let role = |mut body: Value, role: Option<&str>| {
        match role {
            Some(r) => body["params"]["message"]["role"] = json!(r),
            None => {
                body["params"]["message"]
                    .as_object_mut()
                    .unwrap()
                    .remove("role");
            }
        }
        body
    };
    let modes =
        "params.configuration.acceptedOutputModes must be an array of media types (strings)";
    let count = "params.configuration.historyLength must be a count (0 or more)";
    let cases = [
        (None, v03(json!({"acceptedOutputModes": 42})), modes),
        (None, v03(json!({"acceptedOutputModes": ["application/json", 7]})), modes),
        (None, v03(json!({"historyLength": -1})), count),
        (Some("1.0"), v10(json!({"historyLength": -1})), count),
        (Some("1.0"), v10(json!({"historyLength": "3"})), count),
        (None, v03(json!({"blocking": "yes"})), "params.configuration.blocking must be true or false"),
        (Some("1.0"), v10(json!({"returnImmediately": 1})), "params.configuration.returnImmediately must be true or false"),
        (None, v03(json!(5)), "params.configuration must be an object"),
        (
            None,
            role(v03(json!({})), Some("agent")),
            "params.message.role must be \"user\" (A2A 0.3: a message sent to an agent is the user's); it is \"agent\"",
        ),
        (
            None,
            role(v03(json!({})), Some("ROLE_USER")),
            "params.message.role must be \"user\" (A2A 0.3: a message sent to an agent is the user's); it is \"ROLE_USER\"",
        ),
        (
            Some("1.0"),
            role(v10(json!({})), Some("user")),
            "params.message.role must be \"ROLE_USER\" (A2A 1.0: a message sent to an agent is the user's); it is \"user\"",
        ),
        (
            Some("1.0"),
            role(v10(json!({})), None),
            "params.message.role must be \"ROLE_USER\" (A2A 1.0: a message sent to an agent is the user's); it is missing",
        ),
    ];
    for (version, body, why) in cases {
        let v = h.a2a(&t, version, body).await;
        assert_eq!(v["error"], invalid_params_in(version, why), "{v}");
    }
    assert_eq!(h.revision(), before);
    // The task read checks its historyLength by the same rule.
    let mut get = task_read("tasks/get", json!("f-1"));
    get["params"]["historyLength"] = json!(-1);
    assert_eq!(
        h.a2a(&t, None, get).await["error"],
        invalid_params("params.historyLength must be a count (0 or more)")
    );
    // Well-typed, it is served.
    let v = h
        .a2a(
            &t,
            None,
            v03(json!({"acceptedOutputModes": ["application/json"], "historyLength": 3, "blocking": true})),
        )
        .await;
    assert_eq!(v["result"]["status"]["state"], "completed", "{v}");
    assert_eq!(h.revision(), before + 1);
}

// -------------------------------------------------------------------------------------------
// MCP: ids, batches and posted responses, as the specification reads them.

/// MCP takes and echoes ids of 64 bits, yet an id one past them (2^64) was refused in the
/// words of canonical JSON's range, ±(2^53−1), which a taken id of 2^60 is outside too; and a
/// body whose id was 2^60 had that id named as the number at fault. The refusal now names the
/// 64-bit range and the number outside it, under every revision.
#[tokio::test]
async fn an_mcp_number_past_64_bits_is_refused_naming_the_64_bit_range_it_is_outside() {
    let h = harness();
    let t = h.reader();
    for id in [
        "18446744073709551615",
        "-9223372036854775808",
        "1152921504606846976",
    ] {
        let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
        assert_eq!(
            h.rpc(&t, &body).await.sse_data(),
            format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#)
        );
    }
    let refusal = |n: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":null,"error":{{"code":-32600,"message":"invalid request: number {n} is outside the 64-bit integer range (−2^63 to 2^64−1) in which this server reads integers exactly; nothing was run"}}}}"#
        )
    };
    for id in ["18446744073709551616", "-9223372036854775809"] {
        let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
        assert_eq!(h.rpc(&t, &body).await.sse_data(), refusal(id), "{id}");
    }
    // The id of 2^60 was read exactly; the member past 64 bits is the number named.
    let body =
        r#"{"jsonrpc":"2.0","id":1152921504606846976,"method":"ping","x":18446744073709551616}"#;
    assert_eq!(
        h.rpc(&t, body).await.sse_data(),
        refusal("18446744073709551616")
    );
    // A large float beside an id of 2^60 is a float: the id is answered, not refused as an
    // envelope past 64 bits (the float made the parser look again, and the first literal past
    // 2^53 it found, the id, was taken for a rounded one).
    let call = |x: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":1152921504606846976,"method":"tools/call","params":{{"name":"ailang-read","arguments":{{"path":"a.txt","x":{x}}}}}}}"#
        )
    };
    // Both are invalid params answered to that id, as admission answers any number canonical
    // JSON does not hold; nothing ran.
    for (x, n) in [
        ("1e19", "10000000000000000000"),
        ("18446744073709551616", "18446744073709551616"),
    ] {
        assert_eq!(
            h.rpc(&t, &call(x)).await.sse_data(),
            format!(
                r#"{{"jsonrpc":"2.0","id":1152921504606846976,"error":{{"code":-32602,"message":"invalid params: number {n} is outside the exact integer range of canonical JSON (±2^53−1)"}}}}"#
            ),
            "{x}"
        );
    }
    // Under 2026-07-28 the same reply, with that revision's status.
    let auth = format!("Bearer {t}");
    let r = h
        .send(request(
            &[
                ("authorization", auth.as_str()),
                ("content-type", "application/json"),
                ("accept", ACCEPT_BOTH),
                ("mcp-protocol-version", MODERN),
                ("mcp-method", "tools/list"),
            ],
            r#"{"jsonrpc":"2.0","id":18446744073709551616,"method":"tools/list","params":{}}"#,
        ))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.body, refusal("18446744073709551616"));
}

/// MCP 2025-03-26's lifecycle: "the initialization request MUST NOT be part of a JSON-RPC
/// batch". An `initialize` in a batch was run and answered; it is now that item's `-32600`,
/// nothing negotiated, and the other items are served as before.
#[tokio::test]
async fn initialize_inside_a_batch_is_refused_and_the_other_items_are_served() {
    let h = harness();
    let t = h.reader();
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}});
    let batch = json!([initialize, {"jsonrpc": "2.0", "id": 2, "method": "ping"}]).to_string();
    for version in [None, Some("2025-03-26")] {
        assert_eq!(
            h.send(rpc(&t, version, &batch)).await.sse(),
            json!([
                {"jsonrpc": "2.0", "id": 1, "error": {"code": -32600, "message":
                    "invalid request: initialize must not be part of a JSON-RPC batch (the 2025-03-26 lifecycle); send it alone, in a POST of its own"}},
                {"jsonrpc": "2.0", "id": 2, "result": {}}
            ]),
            "{version:?}"
        );
    }
    // Alone, it is answered.
    let v = h.rpc(&t, &initialize.to_string()).await.sse();
    assert_eq!(v["result"]["protocolVersion"], "2025-03-26", "{v}");
}

/// A posted JSON-RPC response is acknowledged `202`, but malformed ones were too: no id, both
/// `result` and `error`, an `error` that is no error object. A message that is neither a valid
/// request, notification nor response is now `400` with a JSON-RPC `-32600` body (id null), as
/// MCP asks of a server that cannot accept what was posted; valid responses keep their `202`.
#[tokio::test]
async fn malformed_posted_responses_are_400_with_a_json_rpc_error_not_202() {
    let h = harness();
    let t = h.reader();
    let cases = [
        (
            r#"{"jsonrpc":"2.0","result":{}}"#,
            r#"a response needs the \"id\" of the request it answers"#,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1,"message":"x"}}"#,
            r#"a response holds \"result\" or \"error\", not both"#,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"error":"boom"}"#,
            r#"a response's \"error\" must be an object with an integer \"code\" and a string \"message\""#,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":"x","message":"m"}}"#,
            r#"a response's \"error\" must be an object with an integer \"code\" and a string \"message\""#,
        ),
        (
            r#"{"jsonrpc":"1.0","id":1,"result":{}}"#,
            r#"\"jsonrpc\" must be \"2.0\""#,
        ),
        (
            r#"{"jsonrpc":"2.0","id":null,"result":{}}"#,
            r#"a response's \"id\" must be a string or an integer (null only beside an \"error\")"#,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1.5,"result":{}}"#,
            r#"a response's \"id\" must be a string or an integer (null only beside an \"error\")"#,
        ),
    ];
    for (body, why) in cases {
        let r = h.rpc(&t, body).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{body}: {}", r.body);
        assert_eq!(r.header("content-type"), Some("application/json"), "{body}");
        assert_eq!(
            r.body,
            format!(
                r#"{{"jsonrpc":"2.0","id":null,"error":{{"code":-32600,"message":"invalid request: {why}"}}}}"#
            ),
            "{body}"
        );
    }
    for body in [
        r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}}"#,
        r#"{"jsonrpc":"2.0","id":"a","result":{"x":1}}"#,
    ] {
        h.rpc(&t, body).await.assert_accepted();
    }
    // In a batch a malformed response is an item's -32600, as a malformed request is; a batch
    // of only responses and notifications is answered 400, its array as plain JSON (MCP: input
    // of only those that the server cannot accept gets an HTTP error).
    let batch =
        r#"[{"jsonrpc":"2.0","method":"notifications/initialized"},{"jsonrpc":"2.0","result":{}}]"#;
    let r = h.rpc(&t, batch).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(
        serde_json::from_str::<Value>(&r.body).unwrap(),
        json!([{"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message":
            "invalid request: a response needs the \"id\" of the request it answers"}}])
    );
    let batch = r#"[{"jsonrpc":"2.0","result":{}},{"jsonrpc":"2.0","id":1,"method":"ping"}]"#;
    assert_eq!(
        h.rpc(&t, batch).await.sse(),
        json!([{"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message":
            "invalid request: a response needs the \"id\" of the request it answers"}},
            {"jsonrpc": "2.0", "id": 1, "result": {}}])
    );
}

/// The committed output in an A2A answer was the output read into a serde_json value and
/// written again, so its numbers came out in serde_json's form (`1e-6` for the committed
/// `0.000001`; before the correctly rounded parser, sometimes another double) and its names in
/// UTF-8 order, not canonical JSON's UTF-16 order: a client hashing the data it was given did
/// not find the `outputRef` it was told. Every answer that carries
/// a committed output now writes its bytes as they were committed.
#[tokio::test]
async fn an_a2a_answer_carries_the_committed_output_byte_for_byte() {
    let h = harness();
    let t = h.reader();
    let raw = |version: Option<&str>, body: Value| {
        let auth = format!("Bearer {t}");
        let mut hs = vec![
            ("authorization", auth.clone()),
            ("content-type", "application/json".to_owned()),
        ];
        if let Some(v) = version {
            hs.push(("a2a-version", v.to_owned()));
        }
        let hs: Vec<(&str, &str)> = hs.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let mut req = request(&hs, body.to_string());
        *req.uri_mut() = "/a2a/".parse().unwrap();
        req
    };
    let committed = r#""g":1.4541676939305423e+237,"h":1e+21,"m":0.000001,"ok":true"#;
    let answers = [
        (
            None,
            v03_send("f-1", "ailang-read", json!({"path": "floats"})),
        ),
        (
            Some("1.0"),
            v10_send("f-2", "ailang-read", json!({"path": "floats"})),
        ),
        (None, task_read("tasks/get", json!("f-1"))),
        (
            None,
            json!({"jsonrpc": "2.0", "id": 1, "method": "tasks/send", "params": {
            "id": "f-3", "metadata": {"skill_id": "ailang-read"},
            "message": {"role": "user", "parts": [{"type": "data", "data": {"path": "floats"}}]}}}),
        ),
    ];
    for (version, body) in answers {
        let r = send(&h.full, raw(version, body.clone())).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        assert!(r.body.contains(committed), "{body}: {}", r.body);
        let (smile, ligature) = (r.body.find('\u{1F600}'), r.body.find('\u{FB01}'));
        assert!(smile.is_some() && smile < ligature, "{}", r.body);
        let v: Value = serde_json::from_str(&r.body).unwrap();
        assert!(v.get("result").is_some(), "{}", r.body);
    }
    // A request id holding the mark is its own string; the output is still the data.
    let mut body = v03_send("f-4", "ailang-read", json!({"path": "floats"}));
    body["id"] = json!("\u{0}world/committed-output\u{0}");
    let r = send(&h.full, raw(None, body)).await;
    let v: Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(v["id"], "\u{0}world/committed-output\u{0}");
    assert_eq!(
        v["result"]["artifacts"][0]["parts"][0]["data"]["h"],
        json!(1e21)
    );
}

/// Attack on an agent's judgement: a keyed call waiting behind its episode's running call had
/// nothing journaled, so reconciling it answered 404 `not-found`, "safe to send", while it was
/// about to run; an agent that then sent it again under another key ran it twice. The daemon
/// now says it holds the call (`queued`) until the call leaves its episode's queue.
#[tokio::test]
async fn a_keyed_call_waiting_behind_its_episode_is_queued_not_safe_to_send() {
    let mut h = harness();
    let t = h.token(
        "q",
        &["Workspace.Write=worktree:10", "Workspace.Read=worktree:10"],
    );
    let router = h.router.clone();
    let (hold_t, wait_t) = (t.clone(), t.clone());
    let running = tokio::spawn({
        let router = router.clone();
        async move {
            send(
                &router,
                rpc(
                    &hold_t,
                    None,
                    &keyed_body(
                        json!(1),
                        "ailang-write",
                        json!({"path": "a.ail", "content": "x"}),
                        "w-run",
                    ),
                ),
            )
            .await
        }
    });
    tokio::time::timeout(Duration::from_secs(30), h.entered.recv())
        .await
        .expect("the held write never reached its handler");
    let waiting = tokio::spawn(async move {
        send(
            &router,
            rpc(
                &wait_t,
                None,
                &keyed_body(json!(2), "ailang-read", json!({"path": "a"}), "r-queued"),
            ),
        )
        .await
    });
    call_reaches(&h, &t, "r-queued", "queued").await;
    let (status, v) = h.get_json(&t, "/v1/calls/mcp/r-queued").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        v,
        json!({"state": "queued", "surface": "mcp", "taskId": "r-queued",
               "invocationId": "mcp:q:r-queued", "skillId": null, "entryIndex": null,
               "outputRef": null, "worldRef": null, "effects": [],
               "outcome": {"kind": "indeterminate", "reason": "in-flight", "retryable": false}})
    );
    let (status, by_id) = h.get_json(&t, "/v1/invocations/mcp:q:r-queued").await;
    assert_eq!((status, by_id), (StatusCode::OK, v));
    // Over A2A the same: a message queued behind the held write is `submitted`, and cannot be
    // canceled (it was `-32001 Task not found` both ways).
    let a2a_wait = tokio::spawn({
        let (router, t) = (h.full.clone(), t.clone());
        async move {
            let body = v03_send("a-queued", "ailang-read", json!({"path": "a"}));
            let auth = format!("Bearer {t}");
            let mut req = request(
                &[
                    ("authorization", auth.as_str()),
                    ("content-type", "application/json"),
                ],
                body.to_string(),
            );
            *req.uri_mut() = "/a2a/".parse().unwrap();
            send(&router, req).await
        }
    });
    call_reaches_a2a(&h, &t, "a-queued", "submitted").await;
    let got = h
        .a2a(&t, Some("1.0"), task_read("GetTask", json!("a-queued")))
        .await;
    assert_eq!(
        got["result"]["status"]["state"], "TASK_STATE_SUBMITTED",
        "{got}"
    );
    assert_eq!(
        got["result"]["metadata"],
        json!({"invocation_id": "a2a:q:a-queued",
               "outcome": {"kind": "indeterminate", "reason": "in-flight", "retryable": false}})
    );
    let canceled = h
        .a2a(&t, None, task_read("tasks/cancel", json!("a-queued")))
        .await;
    assert_eq!(canceled["error"]["code"], -32002, "{canceled}");
    assert_eq!(
        canceled["error"]["data"][0]["metadata"]["why"],
        "a call cannot be canceled once sent: this one waits behind its episode's running call, then runs to its end and commits while your request is open (one that left drops it before it runs); read it again with tasks/get (GetTask)"
    );
    // A key nobody sent is still safe to send.
    let (status, v) = h.get_json(&t, "/v1/calls/mcp/never").await;
    assert_eq!(
        (status, &v["state"]),
        (StatusCode::NOT_FOUND, &json!("not-found"))
    );
    // A queued call whose client leaves is dropped before its turn: nothing of it ran or was
    // spent, and reading it back says `not-found` (safe to send), over A2A `Task not found`.
    let gone = tokio::spawn({
        let (router, t) = (h.router.clone(), t.clone());
        async move {
            let body = keyed_body(json!(3), "ailang-read", json!({"path": "a"}), "r-gone");
            send(&router, rpc(&t, None, &body)).await
        }
    });
    call_reaches(&h, &t, "r-gone", "queued").await;
    gone.abort();
    let left = gone.await;
    assert!(
        matches!(&left, Err(e) if e.is_cancelled()),
        "the queued call answered before its client left"
    );
    let (status, v) = h.get_json(&t, "/v1/calls/mcp/r-gone").await;
    assert_eq!(
        (status, &v["state"]),
        (StatusCode::NOT_FOUND, &json!("not-found"))
    );
    let a2a_gone = tokio::spawn({
        let (router, t) = (h.full.clone(), t.clone());
        async move {
            let body = v03_send("a-gone", "ailang-read", json!({"path": "a"}));
            let auth = format!("Bearer {t}");
            let mut req = request(
                &[
                    ("authorization", auth.as_str()),
                    ("content-type", "application/json"),
                ],
                body.to_string(),
            );
            *req.uri_mut() = "/a2a/".parse().unwrap();
            send(&router, req).await
        }
    });
    call_reaches_a2a(&h, &t, "a-gone", "submitted").await;
    a2a_gone.abort();
    let left = a2a_gone.await;
    assert!(
        matches!(&left, Err(e) if e.is_cancelled()),
        "the queued call answered before its client left"
    );
    let got = h
        .a2a(&t, None, task_read("tasks/get", json!("a-gone")))
        .await;
    assert_eq!(got["error"]["code"], -32001, "{got}");
    assert_eq!(got["error"]["message"], "Task not found", "{got}");
    h.gate.release();
    assert_eq!(
        running.await.unwrap().sse()["result"]["structuredContent"]["ok"],
        json!(true)
    );
    assert_eq!(
        waiting.await.unwrap().sse()["result"]["structuredContent"]["ok"],
        json!(true)
    );
    call_reaches(&h, &t, "r-queued", "committed").await;
    let sent: Value = serde_json::from_str(&a2a_wait.await.unwrap().body).unwrap();
    assert_eq!(sent["result"]["status"]["state"], "completed", "{sent}");
    // The dropped calls never ran, even once the episode's queue moved on: two reads spent
    // (`r-queued`, `a-queued`), one write, and neither dropped key is journaled.
    let (status, v) = h.get_json(&t, "/v1/calls/mcp/r-gone").await;
    assert_eq!(
        (status, &v["state"]),
        (StatusCode::NOT_FOUND, &json!("not-found"))
    );
    let got = h
        .a2a(&t, None, task_read("tasks/get", json!("a-gone")))
        .await;
    assert_eq!(got["error"]["code"], -32001, "{got}");
    let (status, b) = h.get_json(&t, "/v1/budget").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        b["grants"],
        json!([
            {"effect": "Workspace.Write", "scope": "worktree", "granted": 10, "spent": 1, "remaining": 9, "live": true},
            {"effect": "Workspace.Read", "scope": "worktree", "granted": 10, "spent": 2, "remaining": 8, "live": true}
        ])
    );
}

/// Poll `tasks/get` of an A2A task until its state is `state`.
async fn call_reaches_a2a(h: &Harness, t: &str, task: &str, state: &str) {
    let reached = async {
        loop {
            let v = h.a2a(t, None, task_read("tasks/get", json!(task))).await;
            if v["result"]["status"]["state"] == json!(state) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), reached)
        .await
        .unwrap_or_else(|_| panic!("task {task} never became {state}"));
}
