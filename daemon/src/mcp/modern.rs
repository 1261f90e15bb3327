//! The stateless revision, `2026-07-28`: one self-contained JSON-RPC request per POST, no
//! `initialize`, no session. Followed here as the reference SDK's server does (python `mcp`
//! 2.3.0, `server/_streamable_http_modern.py` and `shared/inbound.py`):
//!
//! 1. The handshake-era header rules of the transport still apply first (authorization,
//!    `Content-Type`, `Accept` listing both media types, the 4 MiB body limit).
//! 2. Malformed JSON, or an object that names a member twice, is `-32700`; a body that is not
//!    one JSON-RPC object (a batch, a posted response, a malformed envelope) is `-32600`. A
//!    notification is acknowledged `202` and dropped, whatever its `params` hold: the revision
//!    defines no client-to-server notification over HTTP. One with `method` beside `result` or
//!    `error` is no notification: `-32600`, as under the older revisions.
//! 3. The request ladder, first failure wins: a routing header (`MCP-Protocol-Version`,
//!    `Mcp-Method`, `Mcp-Name`) sent twice is `-32020`; `params._meta` must carry
//!    `io.modelcontextprotocol/protocolVersion` and `io.modelcontextprotocol/clientCapabilities`
//!    (`-32602`); the headers must agree with the body — `MCP-Protocol-Version` with the
//!    envelope's version, `Mcp-Method` with `method`, `Mcp-Name` (with its `=?base64?…?=`
//!    form decoded) with a `tools/call`'s `name` (`-32020`); the envelope's version must be one
//!    this server serves (`-32022` with `data: {supported, requested}`).
//! 4. Methods: `server/discover`, `tools/list`, `tools/call`; anything else (`initialize` and
//!    `ping` included) is `-32601`.
//!
//! Every reply is plain `application/json` (the revision lets a server answer a request that
//! emits no notification with JSON). Errors carry the status of the revision's table:
//! `-32700`, `-32600`, `-32602`, `-32020`, `-32021`, `-32022` → 400; `-32601` → 404;
//! `-32001` (the credential revoked while the call waited) → 401, as the transport answers a
//! revoked credential, with `WWW-Authenticate: Bearer realm="worldd", error="invalid_token"`. The
//! table leaves `-32603` open; here it is 500, because every `-32603` of a `tools/call`
//! means the outcome is not confirmed, and a transport status is how an agent loop that
//! treats a complete JSON-RPC answer as "outcome known" learns the truth. Host failures keep
//! their fixed messages and add `data` with the outcome classification.

use axum::http::header::{CONTENT_TYPE, WWW_AUTHENTICATE};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use serde_json::{json, Value};

use super::jsonrpc::{
    self, Message, Reply, HEADER_MISMATCH, INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST,
    METHOD_NOT_FOUND, PARSE_ERROR, SESSION_REVOKED, UNSUPPORTED_PROTOCOL_VERSION,
};
use super::methods::{Ctx, HostFailure};
use super::MODERN_VERSION;
use crate::edge::body::BodyShare;
use crate::json_bounds::{self, Refused};

/// The envelope key naming the request's protocol version.
pub(super) const PROTOCOL_VERSION_META_KEY: &str = "io.modelcontextprotocol/protocolVersion";
/// The envelope key carrying the client's capabilities for this request.
pub(super) const CLIENT_CAPABILITIES_META_KEY: &str = "io.modelcontextprotocol/clientCapabilities";

/// The `error_description` of the 401 that answers a call whose credential was revoked while
/// it waited.
const REVOKED_CHALLENGE: &str = "session credential was revoked while this call waited";

const VERSION_HEADER: &str = "mcp-protocol-version";
const METHOD_HEADER: &str = "mcp-method";
const NAME_HEADER: &str = "mcp-name";

/// One POST under 2026-07-28, after the transport's header checks and the body limit.
pub(super) async fn serve(
    ctx: &Ctx<'_>,
    headers: &HeaderMap,
    bytes: &[u8],
    share: &mut BodyShare,
) -> Response {
    let not_one_request = || {
        json_reply(&Reply::invalid_request(
            Value::Null,
            "the body must be a single JSON-RPC request or notification object under MCP-Protocol-Version 2026-07-28",
        ))
    };
    // An array is refused before it is built, and before more than its first message is read.
    if jsonrpc::batch_len(bytes, 0).is_some() {
        return not_one_request();
    }
    let message = match json_bounds::held(ctx.state, headers, share, bytes, json_bounds::parse) {
        Ok(v) => v,
        Err(Refused::Unparsed(why)) => {
            let limit = ctx.state.limits().json_values;
            // A notification is dropped whatever its `params` hold, as under the older
            // revisions: a number this server cannot take decides nothing in it.
            match super::taken_without_numbers(&why, bytes, limit) {
                Some(message) => message,
                None => return json_reply(&Reply::not_taken(&why, bytes, limit)),
            }
        }
        Err(Refused::Busy(busy)) => return super::transport::body_busy(busy.text()),
    };
    let Value::Object(object) = &message else {
        return not_one_request();
    };
    // Without `id`, `classify` tells a notification (accepted and dropped, as the revision's
    // transport prescribes) from a message that is none.
    let notification = !object.contains_key("id");
    let (id, method, params) = match jsonrpc::classify(message) {
        Message::Ignored if notification => return StatusCode::ACCEPTED.into_response(),
        // Both a request and a response is neither, so no notification: refused as the older
        // revisions refuse it (a proxy reading it as a response would pass it on).
        Message::Unaccepted { why } if notification && why == jsonrpc::NOT_BOTH => {
            return json_reply(&Reply::invalid_request(Value::Null, jsonrpc::NOT_BOTH))
        }
        // A posted response, well-formed or not (clients must not send one on this
        // revision), or a message without `id` that is no notification.
        Message::Ignored | Message::Unaccepted { .. } => return not_one_request(),
        Message::Invalid { id, why } => return json_reply(&Reply::invalid_request(id, why)),
        Message::Request { id, method, params } => (id, method, params),
    };
    if let Err((code, text, data)) = ladder(headers, &method, params.as_ref()) {
        let reply = match data {
            Some(d) => Reply::error_with_data(&id, code, text, d),
            None => Reply::error(&id, code, text),
        };
        return json_reply(&reply);
    }
    match super::run(ctx, &id, &method, params).await {
        Ok(reply) => json_reply(&reply),
        Err(failure) => host_failure(&id, failure),
    }
}

type Rejection = (i64, String, Option<Value>);

/// The request ladder of the revision; `Err` is the first rung that failed.
fn ladder(headers: &HeaderMap, method: &str, params: Option<&Value>) -> Result<(), Rejection> {
    for name in [VERSION_HEADER, METHOD_HEADER, NAME_HEADER] {
        if crate::edge::fields::single(headers, name).is_err() {
            return Err((
                HEADER_MISMATCH,
                format!("{name} header appears more than once"),
                None,
            ));
        }
    }
    let Some(meta) = params
        .and_then(|p| p.get("_meta"))
        .and_then(Value::as_object)
    else {
        return Err((
            INVALID_PARAMS,
            format!("params._meta must be an object carrying the required '{PROTOCOL_VERSION_META_KEY}' and '{CLIENT_CAPABILITIES_META_KEY}' envelope keys"),
            None,
        ));
    };
    let missing: Vec<&str> = [PROTOCOL_VERSION_META_KEY, CLIENT_CAPABILITIES_META_KEY]
        .into_iter()
        .filter(|k| !meta.contains_key(*k))
        .collect();
    if !missing.is_empty() {
        return Err((
            INVALID_PARAMS,
            format!(
                "params._meta is missing the required envelope key(s): {}",
                missing.join(", ")
            ),
            None,
        ));
    }
    // The client's capabilities are an object (the revision's `ClientCapabilities`); `5` or a
    // string was taken as if it were one.
    if !meta[CLIENT_CAPABILITIES_META_KEY].is_object() {
        return Err((
            INVALID_PARAMS,
            format!("params._meta['{CLIENT_CAPABILITIES_META_KEY}'] must be an object (the client's capabilities, {{}} for none)"),
            None,
        ));
    }
    let version = &meta[PROTOCOL_VERSION_META_KEY];
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.trim_matches([' ', '\t']))
    };
    if header(VERSION_HEADER) != version.as_str() {
        return Err((
            HEADER_MISMATCH,
            format!(
                "{VERSION_HEADER} header does not match the request envelope's protocol version"
            ),
            None,
        ));
    }
    // A header not sent is said as missing: "does not match" sent a client looking for a
    // difference (case, encoding) in a header it never sent.
    match header(METHOD_HEADER) {
        None => {
            return Err((
                HEADER_MISMATCH,
                format!("{METHOD_HEADER} header is missing; send the request body's method in it"),
                None,
            ))
        }
        Some(sent) if sent != method => {
            return Err((
                HEADER_MISMATCH,
                format!("{METHOD_HEADER} header does not match the request body's method"),
                None,
            ))
        }
        Some(_) => {}
    }
    if method == "tools/call" {
        if let Some(name) = params.and_then(|p| p.get("name")).and_then(Value::as_str) {
            match header(NAME_HEADER) {
                None => {
                    return Err((
                        HEADER_MISMATCH,
                        format!(
                            "{NAME_HEADER} header is missing; send the request body's 'name' parameter in it (as =?base64?…?= where a header cannot carry it)"
                        ),
                        None,
                    ))
                }
                Some(sent) if decode_header_value(sent).as_deref() != Some(name) => {
                    return Err((
                        HEADER_MISMATCH,
                        format!(
                            "{NAME_HEADER} header does not match the request body's 'name' parameter"
                        ),
                        None,
                    ))
                }
                Some(_) => {}
            }
        }
    }
    match version.as_str() {
        Some(MODERN_VERSION) => Ok(()),
        Some(other) => Err((
            UNSUPPORTED_PROTOCOL_VERSION,
            "Unsupported protocol version".into(),
            Some(json!({"supported": [MODERN_VERSION], "requested": other})),
        )),
        None => Err((
            INVALID_PARAMS,
            "the protocol-version envelope value must be a string".into(),
            None,
        )),
    }
}

/// A header value, with the revision's `=?base64?…?=` form for values that are not plain
/// printable ASCII decoded; `None` for a malformed encoding.
fn decode_header_value(value: &str) -> Option<String> {
    let Some(payload) = value
        .strip_prefix("=?base64?")
        .and_then(|v| v.strip_suffix("?="))
    else {
        return Some(value.to_owned());
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(payload)
        .ok()?;
    // Only the canonical encoding names a value.
    if base64::engine::general_purpose::STANDARD.encode(&bytes) != payload {
        return None;
    }
    String::from_utf8(bytes).ok()
}

/// The HTTP status of a JSON-RPC error code under this revision.
fn status_of(code: i64) -> StatusCode {
    match code {
        PARSE_ERROR
        | INVALID_REQUEST
        | INVALID_PARAMS
        | HEADER_MISMATCH
        | UNSUPPORTED_PROTOCOL_VERSION => StatusCode::BAD_REQUEST,
        // -32021: a required client capability is missing (never raised here today).
        -32021 => StatusCode::BAD_REQUEST,
        METHOD_NOT_FOUND => StatusCode::NOT_FOUND,
        INTERNAL_ERROR => StatusCode::INTERNAL_SERVER_ERROR,
        // The credential was revoked while the call waited: what the transport answers a
        // revoked credential, so that no error of this revision rides on a result's 200.
        SESSION_REVOKED => StatusCode::UNAUTHORIZED,
        _ => StatusCode::OK,
    }
}

/// A reply as plain JSON with the status of its error code (200 for results).
fn json_reply(reply: &Reply) -> Response {
    let status = reply.error_code().map(status_of).unwrap_or(StatusCode::OK);
    let mut body = Vec::with_capacity(1024);
    match reply.write_json(&mut body) {
        Ok(()) => {
            // Its withheld form where it is large ([`super::withheld`]); an answer the budget
            // never counts is never withheld.
            let counted = body.len() > crate::edge::reply::UNCOUNTED_BYTES;
            let standing = counted.then(|| super::withheld::stand_in(reply, body.len()));
            let standing = standing.flatten().and_then(|s| {
                let mut json = Vec::new();
                s.write_json(&mut json).ok()?;
                Some((
                    s.error_code().map(status_of).unwrap_or(StatusCode::OK),
                    json,
                ))
            });
            let mut r = (
                status,
                [(CONTENT_TYPE, HeaderValue::from_static("application/json"))],
                body,
            )
                .into_response();
            // A 401 names its challenge (RFC 9110 §15.5.2), as the transport's do.
            if status == StatusCode::UNAUTHORIZED {
                r.headers_mut().insert(
                    WWW_AUTHENTICATE,
                    crate::challenge::bearer_error("invalid_token", REVOKED_CHALLENGE),
                );
            }
            match standing {
                Some((status, json)) => super::transport::with_withheld(r, status, json),
                None => r,
            }
        }
        Err(e) => {
            tracing::error!("mcp: reply could not be serialized: {e}");
            host_failure(&Value::Null, HostFailure::Failed)
        }
    }
}

/// The host-failure envelope of this revision: the fixed message, `data` with the outcome
/// classification, HTTP 500.
fn host_failure(id: &Value, failure: HostFailure) -> Response {
    let reply = Reply::error_with_data(
        id,
        INTERNAL_ERROR,
        failure.message(),
        failure.outcome().to_json(),
    );
    let body = reply.to_json().unwrap_or_else(|_| {
        format!(
            r#"{{"jsonrpc":"2.0","id":null,"error":{{"code":-32603,"message":"{}"}}}}"#,
            failure.message()
        )
    });
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        [(CONTENT_TYPE, HeaderValue::from_static("application/json"))],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        super::super::transport::test_headers(pairs)
    }

    fn envelope(extra: Value) -> Value {
        let mut p = json!({"_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}
        }});
        if let (Value::Object(p), Value::Object(e)) = (&mut p, extra) {
            p.extend(e);
        }
        p
    }

    #[test]
    fn base64_header_values() {
        assert_eq!(decode_header_value("echo-say").as_deref(), Some("echo-say"));
        assert_eq!(decode_header_value("=?base64?w6k=?=").as_deref(), Some("é"));
        assert_eq!(decode_header_value("=?base64?w6k?="), None);
        assert_eq!(decode_header_value("=?base64?!!?="), None);
    }

    #[test]
    fn the_ladder_in_order() {
        let ok = headers(&[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "ailang-read"),
        ]);
        let call = envelope(json!({"name": "ailang-read"}));
        assert!(ladder(&ok, "tools/call", Some(&call)).is_ok());

        let code = |h: &HeaderMap, m: &str, p: Option<&Value>| ladder(h, m, p).unwrap_err();
        let twice = headers(&[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/list"),
            ("mcp-method", "tools/list"),
        ]);
        assert_eq!(
            code(&twice, "tools/list", Some(&envelope(json!({})))),
            (
                -32020,
                "mcp-method header appears more than once".into(),
                None
            )
        );
        assert_eq!(code(&ok, "tools/call", None).0, -32602);
        let half = json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}});
        assert_eq!(
            code(&ok, "tools/call", Some(&half)).1,
            "params._meta is missing the required envelope key(s): io.modelcontextprotocol/clientCapabilities"
        );
        // Capabilities that are no object were taken as if they were.
        for caps in [json!(5), json!("all"), json!(null), json!([])] {
            let odd = json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                                       "io.modelcontextprotocol/clientCapabilities": caps}});
            assert_eq!(
                code(&ok, "tools/call", Some(&odd)),
                (
                    -32602,
                    "params._meta['io.modelcontextprotocol/clientCapabilities'] must be an object (the client's capabilities, {} for none)".into(),
                    None
                ),
                "{caps}"
            );
        }
        assert_eq!(
            code(&ok, "tools/list", Some(&envelope(json!({})))).1,
            "mcp-method header does not match the request body's method"
        );
        let other = envelope(json!({"name": "ailang-write"}));
        assert_eq!(
            code(&ok, "tools/call", Some(&other)).1,
            "mcp-name header does not match the request body's 'name' parameter"
        );
        let mut old = envelope(json!({"name": "ailang-read"}));
        old["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2025-11-25");
        assert_eq!(
            code(&ok, "tools/call", Some(&old)).1,
            "mcp-protocol-version header does not match the request envelope's protocol version"
        );
    }

    #[test]
    fn statuses() {
        assert_eq!(status_of(-32602), StatusCode::BAD_REQUEST);
        assert_eq!(status_of(-32020), StatusCode::BAD_REQUEST);
        assert_eq!(status_of(-32601), StatusCode::NOT_FOUND);
        assert_eq!(status_of(-32603), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(status_of(-32001), StatusCode::UNAUTHORIZED);
    }
}
