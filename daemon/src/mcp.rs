//! MCP over streamable HTTP: `POST /mcp/` (and `POST /mcp`, the same endpoint).
//!
//! A hand-written transport, because the contract fixes exact status codes and texts that no
//! SDK reproduces (rmcp answers arrays and malformed JSON with 415, for instance). The server
//! is stateless: no `Mcp-Session-Id`, no `GET` stream, `tools.listChanged: false`. Every POST
//! is handled on its own, in this order:
//!
//! 1. **Authorization**, before anything about the transport is checked, so an unauthorized
//!    caller learns nothing about it: 401 with one of four fixed texts and
//!    `WWW-Authenticate: Bearer realm="worldd"` (with `error="invalid_request"` for a malformed header,
//!    `error="invalid_token"` for an unknown or expired credential, RFC 6750 §3.1); 500 when
//!    the store failed underneath.
//! 2. **Headers** (`transport`): one `Content-Type`, `application/json` (parameters such
//!    as `charset` allowed); `Accept` must list both `application/json` and
//!    `text/event-stream` (wildcards do not count); the optional `MCP-Protocol-Version` must be
//!    one of [`SUPPORTED_VERSIONS`], sent once (absent means [`DEFAULT_VERSION`]). Each
//!    failure is a 400 with a plain-text body. `2026-07-28` ([`MODERN_VERSION`]) selects the
//!    stateless revision, served by `modern`; the rest of this list describes the handshake
//!    revisions.
//! 3. **Body**: at most `[limits] mcp_body_bytes` (4 MiB), else 413; complete within
//!    `[server] body_timeout_ms`, else 408 ([`crate::edge::body`]).
//! 4. **JSON-RPC** (`jsonrpc`): malformed JSON, or an object that names a member twice, is
//!    answered `-32700 Parse error: …` (id null; where the parser stopped, and why) and a
//!    malformed message `-32600`; so is a body of more than `[limits] json_values` values,
//!    whose parse stops there ([`crate::json_bounds`]). Each is an SSE event with HTTP 200
//!    like any other JSON-RPC reply: once the request is authorized and well-formed HTTP, the
//!    client reads every protocol answer the same way. Notifications and valid responses are
//!    accepted and ignored: a POST that carries only those is answered 202 with an empty body.
//!    A message shaped as a response (`result` or `error`, no `method`) that is no valid one
//!    is answered 400 with a plain-JSON `-32600`, id null (MCP: a posted response the server
//!    cannot accept gets an HTTP error), and so is a batch of only responses and notifications
//!    that holds one (its array of `-32600`s); an integer literal past 64 bits, or a number
//!    too large for a double (`1e400`, which is JSON: no `-32700`), outside one request's
//!    `params` is `-32600` naming it (inside, `-32602` to that request's id).
//! 5. **Methods** (`methods`): `initialize`, `ping`, `tools/list`, `tools/call`.
//!
//! A successful reply is one Server-Sent Event, `event: message\ndata: <compact JSON>\n\n`.
//! When the host fails a call (any coordinator error, a deadline, a cancellation, all callback
//! slots busy) the *whole POST* is instead answered with one fixed plain-JSON envelope,
//! `{"jsonrpc":"2.0","id":…,"error":{"code":-32603,"message":"host callback failed"}}`
//! (`host callback timed out` / `canceled` / `capacity exceeded`), with HTTP 200. The specific
//! cause, including any effect record refs, is logged with `tracing`, never put on the wire.
//!
//! JSON-RPC batches (arrays) are served only under `2025-03-26` (also when the version header
//! is absent); later versions get a 400. An `initialize` item is that item's `-32600` (the
//! revision's lifecycle forbids it in a batch), not run. Items run one after another, each re-admitted with a
//! fresh view of the session's tools and a fresh random task id. A host failure in any item
//! answers the whole POST with the fixed envelope and id null; earlier items may already have
//! committed. A batch of more than `[limits] batch_items` messages is refused whole (`-32600`,
//! nothing runs); once the replies gathered reach `[limits] reply_bytes`, no further item runs
//! and each request left gets its own `-32600` "not run" error. All items share the POST's
//! deadline (below): once it is spent no further item starts, and a `tools/call` item left
//! less than a handler's minimum time ([`broker_core::coordinator::MIN_HANDLER_TIME`], 1 s)
//! is refused before anything is journaled or spent; either way the POST is answered with the
//! `host callback timed out` envelope, id null.
//!
//! Every `tools/call` result carries `_meta` (the invocation id, entry index, world ref,
//! output ref, each effect's `budgetAfter`, and the outcome classification of
//! [`crate::outcome`]). A call may carry an idempotency key in `params._meta`
//! ([`IDEMPOTENCY_KEY`]): the key becomes the call's task id, so the same key with the same
//! arguments returns the committed result without running again, durably across restarts.
//!
//! The aggregate deadline of a POST is `[limits] call_deadline_ms` (20 s) from arrival,
//! credential resolution included; every invocation gets what remains of it (its handler at
//! most `[limits] handler_deadline_ms`). Past either, the POST is answered with the `host
//! callback timed out` envelope; so is a call left less than 1 s of it to run its handler
//! ([`broker_core::coordinator::MIN_HANDLER_TIME`]), which journals and spends nothing.

use std::ops::Range;

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::post;
use axum::Router;
use serde_json::Value;
use tokio::time::Instant;

use crate::edge::body::BodyError;
use crate::json_bounds::{self, McpUnparsed, Refused};
use crate::metrics::Limit;
use crate::state::{AppState, InvokeFailure};

mod jsonrpc;
mod methods;
mod modern;
mod numbers;
mod transport;
mod withheld;

use dialect::json::Unparsed;
use jsonrpc::{Message, Reply};
use methods::{Ctx, HostFailure};

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

/// Why an `initialize` inside a batch is refused (`-32600`).
const INITIALIZE_IN_BATCH: &str = "initialize must not be part of a JSON-RPC batch (the 2025-03-26 lifecycle); send it alone, in a POST of its own";

/// `POST /mcp/` and `POST /mcp`, with the daemon's limits. Other methods get 405.
pub fn routes() -> Router<AppState> {
    let handler = |State(state): State<AppState>, headers: HeaderMap, body: Body| async move {
        serve_post(state, headers, body).await
    };
    // Clients differ on the trailing slash; both spellings are one endpoint.
    Router::new()
        .route("/mcp/", post(handler))
        .route("/mcp", post(handler))
}

/// One POST, from credential to reply.
async fn serve_post(state: AppState, headers: HeaderMap, body: Body) -> Response {
    let deadline = Instant::now() + state.limits().call_deadline;

    let session = match state.authenticate(&headers).await {
        Ok(s) => s,
        Err(failure) => return transport::auth_failure(failure),
    };
    let version = match transport::check_headers(&headers) {
        Ok(v) => v,
        Err(refusal) => return transport::bad_request(refusal),
    };
    let limit = state.limits().mcp_body_bytes;
    let body_timeout = state.server().body_timeout;
    let read = state
        .bodies()
        .read_for_call(&headers, body, limit, body_timeout, deadline)
        .await;
    let body = match read {
        Ok(b) => b,
        Err(BodyError::TooLarge) => return transport::body_too_large(limit),
        Err(BodyError::Busy(busy)) => return transport::body_busy(busy.text()),
        // Any session holder can cause these as fast as it can open POSTs: throttled, as the
        // credential refusals are.
        Err(BodyError::TimedOut) => {
            late_body_line(
                &state,
                &session.episode,
                "mcp_body_timeout",
                "request body not received in time ([server] body_timeout_ms)",
            );
            return transport::body_timed_out();
        }
        Err(BodyError::PastCallDeadline) => {
            late_body_line(
                &state,
                &session.episode,
                "mcp_body_call_deadline",
                crate::edge::body::PAST_CALL_DEADLINE,
            );
            return transport::body_past_call_deadline();
        }
        Err(BodyError::ShuttingDown) => {
            return transport::body_busy(crate::edge::body::SHUTTING_DOWN)
        }
        Err(BodyError::Unreadable(cause)) => {
            return transport::bad_request(crate::edge::body::unreadable(&cause))
        }
        Err(BodyError::TooManyPieces(n)) => {
            return transport::bad_request(crate::edge::body::too_many_pieces(n))
        }
        Err(BodyError::Coded(coding)) => return transport::body_coded(&coding),
    };

    // The share keeps the body's place in the budget, and what its parse holds, until the
    // POST is answered.
    let (bytes, mut share) = body.split();
    let ctx = Ctx {
        state: &state,
        session: &session,
        deadline,
        version,
        body_bytes: bytes.len(),
    };
    let bytes = &bytes[..];
    if ctx.modern() {
        return modern::serve(&ctx, &headers, bytes, &mut share).await;
    }
    // A batch is sized up before it is built: one over the limit costs no memory.
    let limit = state.limits().batch_items;
    if let Some(items) = jsonrpc::batch_len(bytes, limit) {
        if version != BATCH_VERSION {
            return transport::batch_refused(version);
        }
        if items == jsonrpc::BatchLen::MoreThan {
            state.metrics().limit_tripped(Limit::BatchItems);
            let why = format!(
                "a batch of more than {limit} messages ([limits] batch_items); nothing was run"
            );
            return transport::sse_reply(&Reply::invalid_request(Value::Null, &why));
        }
    }
    // Within `[limits] json_values`, and refused whole otherwise; what the parse builds is
    // held in the body budget until the POST is answered.
    let message = match json_bounds::held(&state, &headers, &mut share, bytes, json_bounds::parse) {
        Ok(v) => v,
        Err(Refused::Unparsed(why)) => {
            let limit = state.limits().json_values;
            return match taken_without_numbers(&why, bytes, limit) {
                Some(Value::Array(items)) => serve_batch(&ctx, version, items).await,
                Some(one) => serve_single(&ctx, one).await,
                None => transport::sse_reply(&Reply::not_taken(&why, bytes, limit)),
            };
        }
        Err(Refused::Busy(busy)) => return transport::body_busy(busy.text()),
    };
    match message {
        Value::Array(items) => serve_batch(&ctx, version, items).await,
        single => serve_single(&ctx, single).await,
    }
}

/// The WARN line of a body that did not arrive in time (`kind`, said as `what`): the first at
/// once, then at most one every [`crate::log_throttle::LOG_EVERY`], with how many went
/// unlogged since.
fn late_body_line(state: &AppState, episode: &str, kind: &'static str, what: &str) {
    match state.metrics().log_due(kind) {
        Some(0) => tracing::warn!(%episode, "mcp: {what}"),
        Some(unlogged) => tracing::warn!(%episode, unlogged, "mcp: {what}"),
        None => {}
    }
}

/// A number it cannot take in a message that asks for no answer: the body read with each such
/// number as `null`, for the message to be acknowledged or refused as it is without it
/// (nothing in it runs). `None` when the body is refused as `why` says: it holds a request, or
/// is refused for something else. The same under every revision.
fn taken_without_numbers(why: &McpUnparsed, bytes: &[u8], limit: usize) -> Option<Value> {
    match why {
        McpUnparsed::Json(Unparsed::Syntax(_))
        | McpUnparsed::Inexact {
            params_id: None, ..
        } => numbers::without_requests(bytes, limit),
        _ => None,
    }
}

/// One JSON-RPC message.
async fn serve_single(ctx: &Ctx<'_>, message: Value) -> Response {
    match jsonrpc::classify(message) {
        Message::Ignored => transport::accepted(),
        Message::Unaccepted { why } => transport::bad_response(why),
        Message::Invalid { id, why } => transport::sse_reply(&Reply::invalid_request(id, why)),
        Message::Request { id, method, params } => match run(ctx, &id, &method, params).await {
            Ok(reply) => transport::sse_reply(&reply),
            Err(failure) => transport::host_failure(&id, failure),
        },
    }
}

/// A JSON-RPC batch: sequential, all-or-envelope, bounded in items and in reply bytes.
async fn serve_batch(ctx: &Ctx<'_>, version: &'static str, items: Vec<Value>) -> Response {
    if version != BATCH_VERSION {
        return transport::batch_refused(version);
    }
    if items.is_empty() {
        // JSON-RPC 2.0: an empty array is answered with one error, not an array.
        return transport::sse_reply(&Reply::invalid_request(Value::Null, "empty batch"));
    }
    // The item count was checked before the batch was built (`serve_post`).
    let limits = ctx.state.limits();
    let mut replies = BatchReplies::default();
    // The credential was authenticated when the POST arrived. Each request after the first
    // waited for the ones before it (a slow tool, a hung handler): it runs on the credential
    // as it is then, so that a revocation made meanwhile runs nothing more of the batch.
    let mut session = ctx.session.clone();
    let mut first = true;
    // Whether any item is a request (valid or not): a batch of only responses and
    // notifications that is refused gets an HTTP error, as such a message alone does.
    let mut requests = false;
    // Whether a request was held back by `[limits] reply_bytes`.
    let mut cut = false;
    for item in items {
        let item = jsonrpc::classify(item);
        requests |= matches!(item, Message::Request { .. } | Message::Invalid { .. });
        if replies.bytes >= limits.reply_bytes {
            // Nothing runs past the limit; each request left is told so by its id. The limit
            // tripped once a request is held back, counted once a batch.
            if let Message::Request { id, .. } = item {
                if !std::mem::replace(&mut cut, true) {
                    ctx.state.metrics().limit_tripped(Limit::ReplyBytes);
                }
                replies.push_uncounted(&Reply::not_run(id, limits.reply_bytes));
            }
            continue;
        }
        let reply = match item {
            Message::Ignored => continue,
            Message::Invalid { id, why } => Reply::invalid_request(id, why),
            Message::Unaccepted { why } => Reply::invalid_request(Value::Null, why),
            // The 2025-03-26 lifecycle: initialize MUST NOT be part of a batch. Refused, not
            // run; the other items are served as ever.
            Message::Request { id, method, .. } if method == "initialize" => {
                Reply::invalid_request(id, INITIALIZE_IN_BATCH)
            }
            Message::Request { id, method, params } => {
                // One deadline for the whole POST: once it is spent, no further item starts
                // (a call would be refused before its intent anyway), and the POST is answered
                // with the one timed-out envelope, as when an item runs past it.
                if Instant::now() >= ctx.deadline {
                    ctx.state.metrics().limit_tripped(Limit::CallDeadline);
                    tracing::warn!(episode = %session.episode, "mcp: the batch's deadline passed; its remaining items were not started");
                    return transport::host_failure(&Value::Null, HostFailure::TimedOut);
                }
                if !std::mem::replace(&mut first, false) {
                    match ctx.state.session_now(&session) {
                        Ok(now) => session = now,
                        // Revoked meanwhile: this request and each after it run nothing.
                        Err(InvokeFailure::Revoked) => {
                            replies.push(&Reply::error(
                                &id,
                                jsonrpc::SESSION_REVOKED,
                                crate::state::REVOKED_WHILE_WAITING,
                            ));
                            continue;
                        }
                        Err(_) => {
                            return transport::host_failure(&Value::Null, HostFailure::Failed)
                        }
                    }
                }
                let item_ctx = Ctx {
                    session: &session,
                    ..*ctx
                };
                match run(&item_ctx, &id, &method, params).await {
                    Ok(reply) => reply,
                    // Earlier items may have committed; the envelope cannot name one request.
                    Err(failure) => return transport::host_failure(&Value::Null, failure),
                }
            }
        };
        replies.push(&reply);
    }
    match replies.finish() {
        None => transport::accepted(),
        // Only responses and notifications, and some refused: MCP 2025-03-26's transport
        // MUST answer such input with an HTTP error status.
        Some(Ok(done)) if !requests => transport::bad_responses(done.json),
        Some(Ok(done)) => {
            let answer = transport::sse(|out| {
                out.extend_from_slice(&done.json);
                Ok(())
            });
            // An answer the budget never counts is never withheld: its withheld form is built
            // only past that size, from the replies as written.
            let size = axum::body::HttpBody::size_hint(answer.body()).exact();
            if size.is_none_or(|n| n <= crate::edge::reply::UNCOUNTED_BYTES as u64) {
                return answer;
            }
            match done.withheld() {
                Some(body) => transport::with_withheld(answer, axum::http::StatusCode::OK, body),
                None => answer,
            }
        }
        Some(Err(e)) => transport::sse(|_| Err(e)),
    }
}

/// The replies to a batch, written into one JSON array as they come, with the bytes of those
/// that count toward `[limits] reply_bytes`; and what their withheld form ([`withheld`]) is
/// built from, for when the reply budget has no room for the array.
#[derive(Default)]
struct BatchReplies {
    json: Vec<u8>,
    bytes: usize,
    /// Whether a reply answers a call that ran ([`withheld::ran`]): only then is the answer
    /// withheld rather than refused.
    ran: bool,
    /// Each reply over [`withheld::KEPT_BYTES`], by where it lies in `json`, with its stand-in.
    /// Built as the reply is pushed, while it is at hand: a few allocations for a reply of
    /// more than 4 KiB, of which an answer the budget never counts holds at most three.
    large: Vec<(Range<usize>, Reply)>,
    error: Option<serde_json::Error>,
}

impl BatchReplies {
    fn push(&mut self, reply: &Reply) {
        self.bytes += self.push_uncounted(reply);
    }

    /// Append `reply`; its length.
    fn push_uncounted(&mut self, reply: &Reply) -> usize {
        self.json
            .push(if self.json.is_empty() { b'[' } else { b',' });
        let before = self.json.len();
        if let Err(e) = reply.write_json(&mut self.json) {
            self.error.get_or_insert(e);
        }
        let written = self.json.len() - before;
        self.ran |= withheld::ran(reply);
        if let Some(standing) = withheld::in_batch(reply, written) {
            self.large.push((before..self.json.len(), standing));
        }
        written
    }

    /// The replies, written; `None` when there is none.
    fn finish(mut self) -> Option<serde_json::Result<FinishedBatch>> {
        if self.json.is_empty() {
            return None;
        }
        if let Some(e) = self.error {
            return Some(Err(e));
        }
        self.json.push(b']');
        Some(Ok(FinishedBatch {
            json: self.json,
            ran: self.ran,
            large: self.large,
        }))
    }
}

/// A batch's replies, written: the array, and what its withheld form is built from.
struct FinishedBatch {
    json: Vec<u8>,
    ran: bool,
    large: Vec<(Range<usize>, Reply)>,
}

impl FinishedBatch {
    /// The SSE event of the array with each reply over [`withheld::KEPT_BYTES`] replaced by its
    /// stand-in: the answer's withheld form. Where no reply is that large (many short ones),
    /// it is the answer as it is: that batch got the `503` after its calls ran, for want of a
    /// stand-in, though its answer was no larger than a form may be. `None` where it has none:
    /// no call of it ran (it is refused, as before, when the budget has no room for it), or the
    /// form would pass [`crate::edge::reply::WITHHELD_MOST_BYTES`] (which the budget refuses:
    /// not built past it).
    fn withheld(&self) -> Option<Vec<u8>> {
        if !self.ran {
            return None;
        }
        let most = crate::edge::reply::WITHHELD_MOST_BYTES;
        let event = transport::event(|out| {
            let mut from = 0;
            for (range, standing) in &self.large {
                out.extend_from_slice(&self.json[from..range.start]);
                standing.write_json(out)?;
                from = range.end;
                if out.len() > most {
                    break;
                }
            }
            if out.len() <= most {
                out.extend_from_slice(&self.json[from..]);
            }
            Ok(())
        });
        event.ok().filter(|body| body.len() <= most)
    }
}

/// Dispatch one request. The POST deadline reaches every invocation through [`Ctx`]; nothing
/// else awaited here can outlast it.
async fn run(
    ctx: &Ctx<'_>,
    id: &Value,
    method: &str,
    params: Option<Value>,
) -> Result<Reply, HostFailure> {
    methods::dispatch(ctx, id, method, params).await
}

#[cfg(test)]
mod tests {
    use super::jsonrpc::INVALID_PARAMS;
    use super::*;
    use crate::edge::reply::WITHHELD_MOST_BYTES;
    use serde_json::json;

    /// The replies of a withheld batch's SSE event.
    fn replies_of(event: &[u8]) -> Vec<Value> {
        let data = event
            .strip_prefix(b"event: message\ndata: ")
            .and_then(|d| d.strip_suffix(b"\n\n"))
            .expect("one SSE message event");
        serde_json::from_slice(data).unwrap()
    }

    /// `replies` written as a batch whose answer holds a call that ran (the call's own reply,
    /// whichever it is, changes nothing of how the others are kept or replaced).
    fn batch_with_a_call(replies: &[Reply]) -> FinishedBatch {
        let mut batch = BatchReplies::default();
        for reply in replies {
            batch.push(reply);
        }
        batch.ran = true;
        batch.finish().unwrap().unwrap()
    }

    /// A long error of a withheld batch was kept whole beside the stand-ins; it is cut now (its
    /// id and code kept), and the batch's other replies are as written, each larger one
    /// replaced.
    #[test]
    fn a_withheld_batch_whose_replies_include_a_long_error_stays_under_the_bound() {
        let long = Reply::error_with_data(
            &json!(1),
            INVALID_PARAMS,
            "invalid params: x",
            json!({"why": "w".repeat(200_000)}),
        );
        let short = Reply::error(&json!(2), INVALID_PARAMS, "invalid params: y");
        let done = batch_with_a_call(&[long, short]);
        assert!(done.json.len() > 200_000);
        let event = done.withheld().expect("a withheld form");
        assert!(event.len() < 1024, "{}", event.len());
        let v = replies_of(&event);
        assert_eq!(
            v[0],
            json!({"jsonrpc": "2.0", "id": 1, "error": {"code": INVALID_PARAMS,
                   "message": format!("{}invalid params: x", withheld::ERROR_TEXT)}})
        );
        assert_eq!(
            v[1],
            json!({"jsonrpc": "2.0", "id": 2, "error": {"code": INVALID_PARAMS,
                   "message": "invalid params: y"}})
        );
    }

    /// A batch of calls whose replies were each 4 KiB or under, more than 16 KiB together, had
    /// no withheld form (no reply to replace), so it got the `503` after its calls ran. Its form
    /// is the answer as it is, within [`WITHHELD_MOST_BYTES`]; past it, none.
    #[test]
    fn a_batch_of_short_replies_that_ran_a_call_is_its_own_withheld_form() {
        let short = |i: u64| Reply::error(&json!(i), INVALID_PARAMS, "y".repeat(3_900));
        let within = batch_with_a_call(&(1..=8).map(short).collect::<Vec<_>>());
        assert!(within.large.is_empty());
        assert!(within.json.len() > 16 * 1024, "{}", within.json.len());
        let event = within.withheld().expect("the answer as it is");
        let answer = transport::event(|out| {
            out.extend_from_slice(&within.json);
            Ok(())
        })
        .unwrap();
        assert_eq!(event, answer);
        assert_eq!(replies_of(&event).len(), 8);
        let past = batch_with_a_call(&(1..=17).map(short).collect::<Vec<_>>());
        assert!(past.json.len() > WITHHELD_MOST_BYTES);
        assert!(past.withheld().is_none());
    }

    /// 63 replies of up to 4 KiB, kept whole, beside one large one made a withheld form of a
    /// quarter of a megabyte, counted against the whole budget only. Past
    /// [`WITHHELD_MOST_BYTES`] a batch has no withheld form (the budget gives it the `503`);
    /// one that ran nothing has none at all, and one within the bound has its form.
    #[test]
    fn a_batch_whose_withheld_form_would_pass_the_bound_has_none() {
        // An error of about 4,000 bytes (its id long), kept whole in a withheld form.
        let kept =
            |i: u64| Reply::error(&json!(format!("{i:04}{}", "k".repeat(3_900))), -32601, "m");
        let large = Reply::error(&json!(0), INVALID_PARAMS, "x".repeat(20_000));
        let mut replies = vec![large];
        replies.extend((1..=16).map(kept));
        let within = batch_with_a_call(&replies);
        let event = within.withheld().expect("within the bound");
        assert!(event.len() <= WITHHELD_MOST_BYTES, "{}", event.len());
        assert_eq!(replies_of(&event).len(), 17);
        replies.extend((17..=20).map(kept));
        assert!(batch_with_a_call(&replies).withheld().is_none());
        // The same replies where no call ran: none, however small.
        let mut batch = BatchReplies::default();
        batch.push(&replies[0]);
        assert!(batch.finish().unwrap().unwrap().withheld().is_none());
    }
}
