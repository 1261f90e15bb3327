//! The HTTP side of the MCP endpoint: header rules, the body limit, and every reply shape.
//!
//! Header decisions where the contract is silent:
//!
//! - `Content-Type` is the first such header; its media type (before any `;`) must equal
//!   `application/json`, case-insensitively. Parameters such as `charset=utf-8` are ignored.
//! - `Accept` values from every `Accept` header line are joined, split on `,`, and compared by
//!   media type, case-insensitively. Both `application/json` and `text/event-stream` must be
//!   listed explicitly: `*/*`, `application/*` and `text/*` do not count (the client must show
//!   it can read both reply framings), and an entry with `q=0` means "not acceptable", so it
//!   does not count either.
//! - `MCP-Protocol-Version` is the first such header; with surrounding spaces and tabs
//!   removed (they are not part of an HTTP field value) it must match a supported revision
//!   exactly. An empty value is unsupported too.

use axum::http::header::{ACCEPT, CONTENT_TYPE, WWW_AUTHENTICATE};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use broker_core::session::AuthError;
use serde_json::Value;

use super::jsonrpc::{Reply, INTERNAL_ERROR};
use super::methods::HostFailure;
use super::{DEFAULT_VERSION, MODERN_VERSION, SUPPORTED_VERSIONS};
use crate::edge::fields::single;
use crate::state::AuthFailure;

const TEXT_PLAIN: &str = "text/plain; charset=utf-8";

/// The header carrying the client's MCP revision.
const PROTOCOL_VERSION_HEADER: &str = "mcp-protocol-version";

/// The 401 texts of the authentication table, verbatim.
pub(super) fn auth_text(denial: AuthError) -> &'static str {
    match denial {
        AuthError::Absent => {
            "session credential is absent: send Authorization: Bearer <session-credential>"
        }
        AuthError::Malformed => {
            "malformed Authorization header: expected Bearer <64-hex-credential>"
        }
        AuthError::Unknown => "unknown session credential",
        AuthError::Expired => "session credential has expired",
    }
}

/// 401 for a denial; 500 when the store failed underneath.
pub(super) fn auth_failure(failure: AuthFailure) -> Response {
    match failure {
        AuthFailure::Denied(denial) => (
            StatusCode::UNAUTHORIZED,
            [
                (CONTENT_TYPE, HeaderValue::from_static(TEXT_PLAIN)),
                (
                    WWW_AUTHENTICATE,
                    crate::challenge::bearer(denial, auth_text(denial)),
                ),
            ],
            auth_text(denial),
        )
            .into_response(),
        // The cause was logged where it happened (AppState::authenticate).
        AuthFailure::Internal => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            "session credential lookup failed".to_owned(),
        ),
    }
}

/// Check `Content-Type`, `Accept` and `MCP-Protocol-Version`, in that order; returns the
/// protocol revision in force, or the text of the 400 to send ([`bad_request`]).
pub(super) fn check_headers(headers: &HeaderMap) -> Result<&'static str, String> {
    if !content_type_is_json(headers) {
        return Err("Content-Type must be application/json".to_owned());
    }
    if !accepts_json_and_sse(headers) {
        return Err("Accept must list both application/json and text/event-stream".to_owned());
    }
    protocol_version(headers)
}

/// Exactly one `Content-Type` ([`single`]), and it is JSON.
fn content_type_is_json(headers: &HeaderMap) -> bool {
    single(headers, CONTENT_TYPE)
        .ok()
        .flatten()
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| media_type(v).eq_ignore_ascii_case("application/json"))
}

fn accepts_json_and_sse(headers: &HeaderMap) -> bool {
    let (mut json, mut sse) = (false, false);
    for line in headers.get_all(ACCEPT) {
        let Ok(line) = line.to_str() else { continue };
        for range in line.split(',') {
            if refused_by_q(range) {
                continue;
            }
            let media = media_type(range);
            json |= media.eq_ignore_ascii_case("application/json");
            sse |= media.eq_ignore_ascii_case("text/event-stream");
        }
    }
    json && sse
}

/// The media type of a header value: the part before any `;`, trimmed.
fn media_type(value: &str) -> &str {
    value.split(';').next().unwrap_or("").trim()
}

/// True for a media range carrying `q=0` (RFC 9110: "not acceptable").
fn refused_by_q(range: &str) -> bool {
    range.split(';').skip(1).any(|param| {
        let Some((name, value)) = param.split_once('=') else {
            return false;
        };
        name.trim().eq_ignore_ascii_case("q") && value.trim().parse::<f64>().is_ok_and(|q| q == 0.0)
    })
}

fn protocol_version(headers: &HeaderMap) -> Result<&'static str, String> {
    let Some(value) = headers.get(PROTOCOL_VERSION_HEADER) else {
        return Ok(DEFAULT_VERSION);
    };
    let bytes = value.as_bytes().trim_ascii();
    let version = SUPPORTED_VERSIONS
        .iter()
        .copied()
        .find(|v| v.as_bytes() == bytes)
        .ok_or_else(|| {
            format!(
                "unsupported MCP-Protocol-Version {}; supported: {}",
                super::jsonrpc::quote(&String::from_utf8_lossy(bytes)),
                SUPPORTED_VERSIONS.join(", ")
            )
        })?;
    // Two fields ([`single`]): batches, for one, are served under 2025-03-26 alone. The
    // stateless revision's ladder answers a second field itself (`-32020`).
    if single(headers, PROTOCOL_VERSION_HEADER).is_err() && version != MODERN_VERSION {
        return Err("MCP-Protocol-Version must be sent once".to_owned());
    }
    Ok(version)
}

pub(super) fn body_too_large(limit: usize) -> Response {
    text(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!(
            "request body exceeds the {} limit ({limit} bytes)",
            crate::edge::body::describe(limit)
        ),
    )
}

/// 503 while the body budget is full; `Retry-After: 1` asks a client not to come straight
/// back (each refusal costs a connection: the body was never read).
pub(super) fn body_busy(why: &str) -> Response {
    let mut r = text(StatusCode::SERVICE_UNAVAILABLE, why.to_owned());
    r.headers_mut().insert(
        axum::http::header::RETRY_AFTER,
        HeaderValue::from_static("1"),
    );
    r
}

pub(super) fn body_timed_out() -> Response {
    text(
        StatusCode::REQUEST_TIMEOUT,
        "request body not received in time ([server] body_timeout_ms)".to_owned(),
    )
}

/// 408 for a body its call's deadline cut short, before its body timeout.
pub(super) fn body_past_call_deadline() -> Response {
    text(
        StatusCode::REQUEST_TIMEOUT,
        crate::edge::body::PAST_CALL_DEADLINE.to_owned(),
    )
}

/// 415 for a content-coded body (with the one coding accepted, RFC 9110 §15.5.16), 501 for
/// a transfer coding other than `chunked`.
pub(super) fn body_coded(coding: &crate::edge::body::Coding) -> Response {
    let mut r = text(coding.status(), coding.text());
    r.headers_mut().insert(
        axum::http::header::ACCEPT_ENCODING,
        axum::http::HeaderValue::from_static("identity"),
    );
    r
}

/// 400 for a JSON-RPC array under a revision that has no batches.
pub(super) fn batch_refused(version: &str) -> Response {
    bad_request(format!(
        "JSON-RPC batches are not supported under MCP-Protocol-Version {version}; send one message per POST (batches are accepted only under 2025-03-26)"
    ))
}

/// One Server-Sent Event carrying the compact JSON that `write` appends. Compact JSON escapes
/// every control character inside strings, so the data never spans more than one line.
pub(super) fn sse(write: impl FnOnce(&mut Vec<u8>) -> serde_json::Result<()>) -> Response {
    match event(write) {
        Ok(event) => (
            StatusCode::OK,
            [(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"))],
            event,
        )
            .into_response(),
        Err(e) => {
            // Unreachable with the reply types used here (string keys only), but never panic.
            tracing::error!("mcp: reply could not be serialized: {e}");
            text(
                StatusCode::INTERNAL_SERVER_ERROR,
                "reply could not be serialized".to_owned(),
            )
        }
    }
}

/// One SSE `message` event around the JSON `write` writes. The event is written in place
/// around the JSON: no second copy of a reply that may carry a whole file twice.
pub(super) fn event(
    write: impl FnOnce(&mut Vec<u8>) -> serde_json::Result<()>,
) -> serde_json::Result<Vec<u8>> {
    let mut event = Vec::with_capacity(1024);
    event.extend_from_slice(b"event: message\ndata: ");
    write(&mut event)?;
    event.extend_from_slice(b"\n\n");
    Ok(event)
}

/// `reply` as an SSE event, with its withheld form where it is a call's result too large for
/// the budget to pass uncounted ([`super::withheld::stand_in`]); any other reply ran nothing,
/// and has none (where the budget has no room for it, the `503`).
pub(super) fn sse_reply(reply: &Reply) -> Response {
    use axum::body::HttpBody as _;
    let answer = sse(|out| reply.write_json(out));
    let written = usize::try_from(answer.body().size_hint().exact().unwrap_or(0)).unwrap_or(0);
    // An answer the budget never counts is never withheld: no stand-in built on the way.
    if written <= crate::edge::reply::UNCOUNTED_BYTES {
        return answer;
    }
    let standing = super::withheld::stand_in(reply, written);
    match standing.map(|s| event(|out| s.write_json(out))) {
        Some(Ok(body)) => with_withheld(answer, StatusCode::OK, body),
        _ => answer,
    }
}

/// `answer` with `body` (of `status`) to send in its place where the reply budget has no room
/// for it ([`crate::edge::reply::Withheld`]).
pub(super) fn with_withheld(mut answer: Response, status: StatusCode, body: Vec<u8>) -> Response {
    answer
        .extensions_mut()
        .insert(crate::edge::reply::Withheld {
            status,
            body: body.into(),
        });
    answer
}

/// The fixed plain-JSON envelope that answers a whole POST when the host fails.
pub(super) fn host_failure(id: &Value, failure: HostFailure) -> Response {
    let reply = Reply::error(id, INTERNAL_ERROR, failure.message());
    let body = reply.to_json().unwrap_or_else(|_| {
        format!(
            r#"{{"jsonrpc":"2.0","id":null,"error":{{"code":-32603,"message":"{}"}}}}"#,
            failure.message()
        )
    });
    (
        StatusCode::OK,
        [(CONTENT_TYPE, HeaderValue::from_static("application/json"))],
        body,
    )
        .into_response()
}

/// 400 with a JSON-RPC `-32600` body (id null): a posted message shaped as a response that is
/// none, or a message without `id` that is no notification. MCP: a response or notification
/// the server cannot accept gets an HTTP error status, its body a JSON-RPC error without an id.
pub(super) fn bad_response(why: &str) -> Response {
    let body = Reply::invalid_request(Value::Null, why)
        .to_json()
        .unwrap_or_else(|_| {
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request"}}"#
                .to_owned()
        });
    (
        StatusCode::BAD_REQUEST,
        [(CONTENT_TYPE, HeaderValue::from_static("application/json"))],
        body,
    )
        .into_response()
}

/// 400 with the JSON array of a batch's replies (each a `-32600`, id null): a batch of only
/// responses and notifications, some of them ones the server cannot accept.
pub(super) fn bad_responses(json: Vec<u8>) -> Response {
    (
        StatusCode::BAD_REQUEST,
        [(CONTENT_TYPE, HeaderValue::from_static("application/json"))],
        json,
    )
        .into_response()
}

/// 202, empty body: the POST carried only notifications and responses.
pub(super) fn accepted() -> Response {
    StatusCode::ACCEPTED.into_response()
}

pub(super) fn bad_request(message: String) -> Response {
    text(StatusCode::BAD_REQUEST, message)
}

fn text(status: StatusCode, message: String) -> Response {
    (
        status,
        [(CONTENT_TYPE, HeaderValue::from_static(TEXT_PLAIN))],
        message,
    )
        .into_response()
}

/// A header map for unit tests of the MCP modules.
#[cfg(test)]
pub(super) fn test_headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(*k, HeaderValue::from_static(v));
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        test_headers(pairs)
    }

    #[test]
    fn a_full_body_budget_asks_the_client_to_wait_a_second() {
        let r = body_busy(crate::edge::body::BUSY_TEXT);
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(r.headers()[axum::http::header::RETRY_AFTER], "1");
    }

    #[test]
    fn content_type_media_type_only() {
        for ok in [
            "application/json",
            "application/json; charset=utf-8",
            "Application/JSON;charset=UTF-8",
        ] {
            assert!(
                content_type_is_json(&headers(&[("content-type", ok)])),
                "{ok}"
            );
        }
        for bad in ["text/json", "application/json-rpc", "", "application/*"] {
            assert!(
                !content_type_is_json(&headers(&[("content-type", bad)])),
                "{bad}"
            );
        }
        assert!(!content_type_is_json(&HeaderMap::new()));
    }

    #[test]
    fn accept_needs_both_explicitly() {
        for ok in [
            "application/json, text/event-stream",
            "text/event-stream;q=0.5,application/json;q=1",
            "TEXT/EVENT-STREAM, Application/Json",
        ] {
            assert!(accepts_json_and_sse(&headers(&[("accept", ok)])), "{ok}");
        }
        assert!(accepts_json_and_sse(&headers(&[
            ("accept", "application/json"),
            ("accept", "text/event-stream"),
        ])));
        for bad in [
            "*/*",
            "application/json",
            "text/event-stream",
            "application/*, text/*",
            "application/json, text/event-stream;q=0",
            "application/json;q=0.0, text/event-stream",
        ] {
            assert!(!accepts_json_and_sse(&headers(&[("accept", bad)])), "{bad}");
        }
    }

    #[test]
    fn protocol_versions() {
        assert_eq!(protocol_version(&HeaderMap::new()), Ok("2025-03-26"));
        for v in SUPPORTED_VERSIONS {
            let h = headers(&[("mcp-protocol-version", v)]);
            assert_eq!(protocol_version(&h), Ok(v));
        }
        assert_eq!(
            protocol_version(&headers(&[("mcp-protocol-version", " 2025-06-18\t")])),
            Ok("2025-06-18")
        );
        assert_eq!(
            protocol_version(&headers(&[("mcp-protocol-version", "2024-11-05")])),
            Err("unsupported MCP-Protocol-Version \"2024-11-05\"; supported: 2026-07-28, 2025-11-25, 2025-06-18, 2025-03-26".to_owned())
        );
        for two in [
            ["2025-03-26", "2025-11-25"],
            ["2025-11-25", "2025-03-26"],
            ["2025-11-25", "2025-11-25"],
        ] {
            let h = headers(&[
                ("mcp-protocol-version", two[0]),
                ("mcp-protocol-version", two[1]),
            ]);
            assert_eq!(
                protocol_version(&h),
                Err("MCP-Protocol-Version must be sent once".to_owned()),
                "{two:?}"
            );
        }
        // The stateless revision's ladder refuses the second field itself (-32020).
        let h = headers(&[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-protocol-version", "2025-03-26"),
        ]);
        assert_eq!(protocol_version(&h), Ok("2026-07-28"));
    }

    #[test]
    fn a_second_content_type_is_refused_whatever_it_says() {
        for two in [
            ["application/json", "text/html"],
            ["text/html", "application/json"],
            ["application/json", "application/json"],
        ] {
            let h = headers(&[("content-type", two[0]), ("content-type", two[1])]);
            assert!(!content_type_is_json(&h), "{two:?}");
        }
    }
}
