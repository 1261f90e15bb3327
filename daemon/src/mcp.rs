//! MCP over streamable HTTP: `POST /mcp/` (and `POST /mcp`, the same endpoint).
//!
//! A hand-written transport, because the contract fixes exact status codes and texts that no
//! SDK reproduces (rmcp answers arrays and malformed JSON with 415, for instance). The server
//! is stateless: no `Mcp-Session-Id`, no `GET` stream, `tools.listChanged: false`. Every POST
//! is handled on its own, in this order:
//!
//! 1. **Authorization**, before anything about the transport is checked, so an unauthorized
//!    caller learns nothing about it: 401 with one of four fixed texts and
//!    `WWW-Authenticate: Bearer`; 503 when the credential lookup timed out, 500 when the store
//!    failed underneath.
//! 2. **Headers** ([`transport`]): `Content-Type` must be `application/json` (parameters such
//!    as `charset` allowed); `Accept` must list both `application/json` and
//!    `text/event-stream` (wildcards do not count); the optional `MCP-Protocol-Version` must be
//!    one of [`SUPPORTED_VERSIONS`] (absent means [`DEFAULT_VERSION`]). Each failure is a 400
//!    with a plain-text body. `2026-07-28` ([`MODERN_VERSION`]) selects the stateless revision,
//!    served by [`modern`]; the rest of this list describes the handshake revisions.
//! 3. **Body**: at most [`MAX_BODY_BYTES`], else 413.
//! 4. **JSON-RPC** ([`jsonrpc`]): malformed JSON is answered `-32700 Parse error` (id null) and
//!    a malformed message `-32600`, both as an SSE event with HTTP 200 like any other JSON-RPC
//!    reply: once the request is authorized and well-formed HTTP, the client reads every
//!    protocol answer the same way. Notifications and responses are accepted and ignored: a
//!    POST that carries only those is answered 202 with an empty body.
//! 5. **Methods** ([`methods`]): `initialize`, `ping`, `tools/list`, `tools/call`.
//!
//! A successful reply is one Server-Sent Event, `event: message\ndata: <compact JSON>\n\n`.
//! When the host fails a call (any coordinator error, a deadline, a cancellation, all callback
//! slots busy) the *whole POST* is instead answered with one fixed plain-JSON envelope,
//! `{"jsonrpc":"2.0","id":…,"error":{"code":-32603,"message":"host callback failed"}}`
//! (`host callback timed out` / `canceled` / `capacity exceeded`), with HTTP 200. The specific
//! cause, including any effect record refs, is logged with `tracing`, never put on the wire.
//!
//! JSON-RPC batches (arrays) are served only under `2025-03-26` (also when the version header
//! is absent); later versions get a 400. Items run one after another, each re-admitted with a
//! fresh view of the session's tools and a fresh random task id. A host failure in any item
//! answers the whole POST with the fixed envelope and id null; earlier items may already have
//! committed.
//!
//! Every `tools/call` result carries `_meta` (the invocation id, entry index, world ref,
//! output ref, each effect's `budgetAfter`, and the outcome classification of
//! [`crate::outcome`]). A call may carry an idempotency key in `params._meta`
//! ([`IDEMPOTENCY_KEY`]): the key becomes the call's task id, so the same key with the same
//! arguments returns the committed result without running again, durably across restarts.
//!
//! The aggregate deadline of a POST is [`POST_DEADLINE`] from arrival, credential resolution
//! included; every invocation gets what remains of it, and building the tool surface is
//! bounded by [`ADMISSION_DEADLINE`] as well. Past the deadline the POST is answered with the
//! `host callback timed out` envelope.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::post;
use axum::Router;
use serde_json::Value;
use tokio::time::Instant;

use crate::state::AppState;

mod jsonrpc;
mod methods;
mod modern;
mod transport;

use jsonrpc::{Message, Reply};
use methods::{Ctx, HostFailure};
use transport::BodyError;

/// Largest request body, in bytes (4 MiB); a larger one is answered 413.
pub const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// The aggregate deadline of one POST, including credential resolution.
pub const POST_DEADLINE: Duration = Duration::from_secs(20);

/// Bound on building the session's tool surface (the registry read behind admission).
pub const ADMISSION_DEADLINE: Duration = Duration::from_secs(10);

/// The MCP revisions this endpoint speaks, newest first: the stateless revision, then the
/// three handshake revisions.
pub const SUPPORTED_VERSIONS: [&str; 4] = ["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26"];

/// The stateless revision: `server/discover` instead of `initialize`, a `_meta` envelope on
/// every request, `resultType` on every result.
pub const MODERN_VERSION: &str = "2026-07-28";

/// The revisions `initialize` negotiates, newest first.
pub const HANDSHAKE_VERSIONS: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];

/// The `params._meta` member of a `tools/call` that carries an idempotency key (1-128 of
/// `A-Z a-z 0-9 . _ -`, like an A2A task id).
pub const IDEMPOTENCY_KEY: &str = "world/idempotencyKey";

/// The revision assumed when the request has no `MCP-Protocol-Version` header.
pub const DEFAULT_VERSION: &str = "2025-03-26";

/// The only revision under which JSON-RPC batches are accepted.
const BATCH_VERSION: &str = "2025-03-26";

/// Tunables of the endpoint. The daemon uses [`McpConfig::default`]; tests shorten the
/// deadline to exercise it without waiting 20 seconds.
#[derive(Debug, Clone)]
pub struct McpConfig {
    /// The aggregate deadline of one POST ([`POST_DEADLINE`] by default).
    pub post_deadline: Duration,
}

impl Default for McpConfig {
    fn default() -> Self {
        McpConfig {
            post_deadline: POST_DEADLINE,
        }
    }
}

/// `POST /mcp/` and `POST /mcp` with the default configuration. Other methods get 405.
pub fn routes() -> Router<AppState> {
    routes_with(McpConfig::default())
}

/// The same routes with an explicit configuration.
pub fn routes_with(config: McpConfig) -> Router<AppState> {
    let config = Arc::new(config);
    let handler = move |State(state): State<AppState>, headers: HeaderMap, body: Body| {
        let config = config.clone();
        async move { serve_post(state, &config, headers, body).await }
    };
    // Clients differ on the trailing slash; both spellings are one endpoint.
    Router::new()
        .route("/mcp/", post(handler.clone()))
        .route("/mcp", post(handler))
}

/// One POST, from credential to reply.
async fn serve_post(
    state: AppState,
    config: &McpConfig,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let deadline = Instant::now() + config.post_deadline;

    let session = match state.authenticate(&headers).await {
        Ok(s) => s,
        Err(failure) => return transport::auth_failure(failure),
    };
    let version = match transport::check_headers(&headers) {
        Ok(v) => v,
        Err(refusal) => return transport::bad_request(refusal),
    };
    let bytes = match tokio::time::timeout_at(
        deadline,
        transport::read_body(&headers, body, MAX_BODY_BYTES),
    )
    .await
    {
        Err(_) => {
            tracing::warn!(episode = %session.episode, "mcp: request body not received before the POST deadline");
            return transport::host_failure(&Value::Null, HostFailure::TimedOut);
        }
        Ok(Err(BodyError::TooLarge)) => return transport::body_too_large(),
        Ok(Err(BodyError::Unreadable)) => return transport::body_unreadable(),
        Ok(Ok(b)) => b,
    };

    let ctx = Ctx {
        state: &state,
        session: &session,
        deadline,
        version,
    };
    if ctx.modern() {
        return modern::serve(&ctx, &headers, &bytes).await;
    }
    let message: Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(_) => return transport::sse(&Reply::parse_error()),
    };
    match message {
        Value::Array(items) => serve_batch(&ctx, version, items).await,
        single => serve_single(&ctx, single).await,
    }
}

/// One JSON-RPC message.
async fn serve_single(ctx: &Ctx<'_>, message: Value) -> Response {
    match jsonrpc::classify(message) {
        Message::Ignored => transport::accepted(),
        Message::Invalid { id, why } => transport::sse(&Reply::invalid_request(id, why)),
        Message::Request { id, method, params } => match run(ctx, &id, &method, params).await {
            Ok(reply) => transport::sse(&reply),
            Err(failure) => transport::host_failure(&id, failure),
        },
    }
}

/// A JSON-RPC batch: sequential, all-or-envelope.
async fn serve_batch(ctx: &Ctx<'_>, version: &'static str, items: Vec<Value>) -> Response {
    if version != BATCH_VERSION {
        return transport::batch_refused(version);
    }
    if items.is_empty() {
        // JSON-RPC 2.0: an empty array is answered with one error, not an array.
        return transport::sse(&Reply::invalid_request(Value::Null, "empty batch"));
    }
    let mut replies = Vec::with_capacity(items.len());
    for item in items {
        match jsonrpc::classify(item) {
            Message::Ignored => {}
            Message::Invalid { id, why } => replies.push(Reply::invalid_request(id, why)),
            Message::Request { id, method, params } => match run(ctx, &id, &method, params).await {
                Ok(reply) => replies.push(reply),
                // Earlier items may have committed; the envelope cannot name one request.
                Err(failure) => return transport::host_failure(&Value::Null, failure),
            },
        }
    }
    if replies.is_empty() {
        transport::accepted()
    } else {
        transport::sse(&replies)
    }
}

/// Dispatch one request under the POST deadline. The methods pass the remaining time to each
/// invocation themselves; this bound is the backstop for everything else they await.
async fn run(
    ctx: &Ctx<'_>,
    id: &Value,
    method: &str,
    params: Option<Value>,
) -> Result<Reply, HostFailure> {
    match tokio::time::timeout_at(ctx.deadline, methods::dispatch(ctx, id, method, params)).await {
        Ok(result) => result,
        Err(_) => {
            tracing::warn!(episode = %ctx.session.episode, %method, rpc_id = %id, "mcp: POST deadline passed");
            Err(HostFailure::TimedOut)
        }
    }
}
