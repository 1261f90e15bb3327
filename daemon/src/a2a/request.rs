//! Reading a request: the caller's credential first, then the body within its limits,
//! parsed strictly, and its JSON-RPC envelope.

use std::sync::Arc;

use axum::http::HeaderMap;
use axum::response::Response;
use broker_core::session::Session;
use serde_json::Value;
use tokio::time::Instant;

use super::errors::{auth_error, rpc_error};
use super::version::Version;
use crate::edge::body::{BodyError, BodyShare};
use crate::json_bounds::{self, Refused};
use crate::state::AppState;

/// A request read: the caller's session, the request parsed strictly, the request body's
/// size and its place in the body budget.
pub(super) struct Received {
    pub(super) session: Arc<Session>,
    /// The request; without its `params` when they hold a number that has no canonical form
    /// (an integer beyond ±(2^53−1)): its envelope is still judged as any other's.
    pub(super) req: Value,
    /// `params` held such a number: why. Once the envelope, method and version are sound, the
    /// request is `-32602 invalid params` saying so ([`params_unreadable`]), and nothing runs.
    pub(super) params_unreadable: Option<String>,
    pub(super) body_bytes: usize,
    pub(super) share: BodyShare,
}

/// The request, read. Authorization comes first, from the headers alone: an unauthorized
/// caller learns nothing about the transport, and no body is read for it (its id is unknown,
/// so errors carry null; `speaks` is the version the headers name, whose error shape they
/// take).
pub(super) async fn received(
    state: &AppState,
    headers: &HeaderMap,
    body: axum::body::Body,
    deadline: Instant,
    speaks: Version,
) -> Result<Received, Response> {
    let null = Value::Null;
    let session = state
        .authenticate(headers)
        .await
        .map_err(|f| auth_error(&null, f, speaks))?;
    let limit = state.limits().a2a_body_bytes;
    let body_timeout = state.server().body_timeout;
    let read = state
        .bodies()
        .read_for_call(headers, body, limit, body_timeout, deadline)
        .await;
    let body = match read {
        Ok(b) => b,
        Err(unread) => {
            let why = match unread {
                BodyError::Busy(busy) => return Err(rpc_error(&null, -32603, busy.text())),
                BodyError::ShuttingDown => {
                    return Err(rpc_error(&null, -32603, crate::edge::body::SHUTTING_DOWN))
                }
                BodyError::TooLarge => format!("body exceeds {limit} bytes"),
                BodyError::TimedOut => "body not received in time".to_owned(),
                BodyError::PastCallDeadline => {
                    "body not received within the call's deadline ([limits] call_deadline_ms)"
                        .to_owned()
                }
                BodyError::Coded(coding) => coding.text(),
                BodyError::TooManyPieces(n) => crate::edge::body::too_many_pieces(n),
                BodyError::Unreadable(cause) => crate::edge::body::unreadable(&cause),
            };
            return Err(rpc_error(
                &null,
                -32600,
                format!("invalid JSON-RPC request: {why}"),
            ));
        }
    };
    let (bytes, mut share) = body.split();
    // What the parse builds is held in the body budget until the call is answered.
    match json_bounds::held(
        state,
        headers,
        &mut share,
        &bytes,
        json_bounds::parse_strict,
    ) {
        Ok(req) => Ok(Received {
            session,
            req,
            params_unreadable: None,
            body_bytes: bytes.len(),
            share,
        }),
        Err(Refused::Busy(busy)) => Err(rpc_error(&null, -32603, busy.text())),
        // The parser's account says what and where (line, column, byte), in one bounded line.
        Err(Refused::Unparsed(e)) => {
            let limit = state.limits().json_values;
            // A number without an exact canonical form inside `params`, or (JSON this daemon
            // does not take, not text that is no JSON) a notification whose `params` hold a
            // number too large for a double: the envelope alone, judged as any request's (a
            // notification with a wide integer or with `1e400` is `202` alike).
            let around = crate::invalid_params::around_params(
                &bytes,
                &e,
                limit,
                crate::invalid_params::Envelope::Canonical,
            )
            .or_else(|| {
                (!not_json(&e))
                    .then(|| crate::invalid_params::a2a_notification(&bytes, limit))
                    .flatten()
            });
            if let Some(req) = around {
                return Ok(Received {
                    session,
                    req,
                    params_unreadable: Some(format!(
                        "params: {}",
                        crate::json_bounds::strict_account(&e)
                    )),
                    body_bytes: bytes.len(),
                    share,
                });
            }
            Err(if not_json(&e) {
                // Text that is no JSON value (JSON-RPC's and A2A's `-32700`), as MCP answers it.
                rpc_error(
                    &null,
                    -32700,
                    format!(
                        "Parse error: {}; nothing was run",
                        crate::json_bounds::strict_account(&e)
                    ),
                )
            } else {
                // JSON this daemon does not take: past the value limit, or a number without an
                // exact canonical form.
                rpc_error(
                    &null,
                    -32600,
                    format!(
                        "invalid JSON-RPC request: {}",
                        crate::json_bounds::strict_account(&e)
                    ),
                )
            })
        }
    }
}

/// `-32602 invalid params` for params holding a number without an exact canonical form, with
/// `why` (which number) in `data`, as any other invalid params are answered; in the shape
/// `speaks` reads.
pub(super) fn params_unreadable(id: &Value, why: &str, speaks: Version) -> Response {
    super::errors::error_with_data(
        id,
        -32602,
        "invalid params".into(),
        serde_json::json!({ "why": why }),
        speaks,
    )
}

/// Whether the strict parser stopped because the text is no JSON value (or an object names a
/// member twice, which MCP answers the same way), rather than at a bound of this daemon's.
fn not_json(e: &broker_core::canon::CanonError) -> bool {
    use broker_core::canon::CanonError as E;
    match e {
        E::NotUtf8 | E::Syntax { .. } | E::DuplicateKey { .. } | E::LoneSurrogate => true,
        E::TooDeep { .. } | E::TrailingData => true,
        E::UnsafeInteger { .. } | E::NonFinite | E::NumberOutOfRange { .. } => false,
        E::TooManyValues { .. } => false,
    }
}

/// The request's id (`None` for a notification), or why the message is no JSON-RPC 2.0
/// request: an id that is not a string, a number or null; a method that is not a string; a
/// message that is both a request and a response (`method` beside `result` or `error`),
/// which a proxy reading it as a response would let through while this daemon ran it.
pub(super) fn envelope(req: &Value) -> Result<Option<Value>, &'static str> {
    let Some(m) = req.as_object() else {
        return Err("expected a JSON-RPC object");
    };
    if m.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err("\"jsonrpc\" must be \"2.0\"");
    }
    match m.get("method") {
        Some(Value::String(_)) => {}
        Some(_) => return Err("\"method\" must be a string"),
        None => return Err("a request needs \"method\""),
    }
    if m.contains_key("result") || m.contains_key("error") {
        return Err(
            "a message is a request (\"method\") or a response (\"result\", \"error\"), not both",
        );
    }
    match m.get("id") {
        None => Ok(None),
        Some(id @ (Value::String(_) | Value::Number(_) | Value::Null)) => Ok(Some(id.clone())),
        Some(_) => Err("\"id\" must be a string, a number or null"),
    }
}
