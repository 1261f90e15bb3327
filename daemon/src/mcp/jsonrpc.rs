//! JSON-RPC 2.0 framing for MCP: classify what arrives, shape what leaves.
//!
//! Replies are typed structs rather than `serde_json::Value` so that their members serialize
//! in the documented order (`jsonrpc`, `id`, `result`/`error`): the host-failure envelope is a
//! byte-for-byte contract, and `serde_json::Map` would sort the keys.

use serde::Serialize;
use serde_json::Value;

use super::methods::MethodResult;

pub(super) const PARSE_ERROR: i64 = -32700;
pub(super) const INVALID_REQUEST: i64 = -32600;
pub(super) const METHOD_NOT_FOUND: i64 = -32601;
pub(super) const INVALID_PARAMS: i64 = -32602;
pub(super) const INTERNAL_ERROR: i64 = -32603;
/// 2026-07-28: HTTP headers disagree with the body, or a routing header is missing.
pub(super) const HEADER_MISMATCH: i64 = -32020;
/// 2026-07-28: the envelope names a protocol version this server does not serve.
pub(super) const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;
/// The request's credential was revoked while it waited ([`crate::state::REVOKED_WHILE_WAITING`]):
/// the code A2A gives its authentication errors.
pub(super) const SESSION_REVOKED: i64 = -32001;

/// Why a message holding both `method` and `result` or `error` is refused, with or without `id`.
pub(super) const NOT_BOTH: &str =
    "a message is a request (\"method\") or a response (\"result\", \"error\"), not both";

/// One incoming JSON-RPC message, classified.
#[derive(Debug)]
pub(super) enum Message {
    /// A request: it gets exactly one reply.
    Request {
        /// A string or an integer, as sent.
        id: Value,
        method: String,
        params: Option<Value>,
    },
    /// A notification (no `id`) or a valid response (`result`/`error` without `method`):
    /// accepted and ignored. Notifications are not executed, whatever their method.
    Ignored,
    /// Not a valid request; answered `-32600` with `id` when it was readable, else null.
    Invalid { id: Value, why: &'static str },
    /// Input that is no request and that the server cannot accept: shaped as a response
    /// (`result` or `error`, no `method`) but no valid JSON-RPC 2.0 response, or a message
    /// without `id` that is no notification (no `"jsonrpc": "2.0"`, no string `method`, or
    /// `method` beside `result`/`error`). Refused, not acknowledged: MCP's transport answers
    /// such input with an HTTP error, id null; there is no request to answer on a stream.
    Unaccepted { why: &'static str },
}

/// Classify one message of a POST (a whole body, or one batch item).
pub(super) fn classify(message: Value) -> Message {
    let Value::Object(mut m) = message else {
        return Message::Invalid {
            id: Value::Null,
            why: "expected a JSON-RPC object",
        };
    };
    let id = m.remove("id");
    let method = m.remove("method");
    if method.is_none() && (m.contains_key("result") || m.contains_key("error")) {
        return match response_fault(&m, id.as_ref()) {
            None => Message::Ignored,
            Some(why) => Message::Unaccepted { why },
        };
    }
    let Some(id) = id else {
        // No `id`: a notification, never answered on a stream. A well-formed one is ignored
        // whatever its `params` (as under 2026-07-28, and notifications are not executed);
        // any other is refused with an HTTP error.
        let why = if m.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            "\"jsonrpc\" must be \"2.0\""
        } else {
            match method {
                Some(Value::String(_)) if m.contains_key("result") || m.contains_key("error") => {
                    NOT_BOTH
                }
                Some(Value::String(_)) => return Message::Ignored,
                Some(_) => "\"method\" must be a string",
                None => "a request needs \"method\"",
            }
        };
        return Message::Unaccepted { why };
    };
    // Echo the id in an error only when it is one we could have accepted.
    let echo = if valid_id(&id) {
        id.clone()
    } else {
        Value::Null
    };
    let invalid = |why| Message::Invalid {
        id: echo.clone(),
        why,
    };
    if m.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return invalid("\"jsonrpc\" must be \"2.0\"");
    }
    let method = match method {
        Some(Value::String(s)) => s,
        Some(_) => return invalid("\"method\" must be a string"),
        None => return invalid("a request needs \"method\""),
    };
    // Both a request and a response: a proxy reading it as a response would let it through
    // while this server ran it.
    if m.contains_key("result") || m.contains_key("error") {
        return invalid(NOT_BOTH);
    }
    let params = m.remove("params");
    if matches!(&params, Some(p) if !p.is_object() && !p.is_array()) {
        return invalid("\"params\" must be an object or an array");
    }
    // MCP narrows JSON-RPC: ids are strings or integers, never null or fractional.
    if valid_id(&id) {
        Message::Request { id, method, params }
    } else {
        invalid("\"id\" must be a string or an integer")
    }
}

/// Why `m` (its `id` taken out, as `id`), a message with `result` or `error` and no `method`,
/// is no JSON-RPC 2.0 response; `None` when it is one: `"jsonrpc": "2.0"`, exactly one of
/// `result` and `error`, an `error` object with an integer `code` and a string `message`, and
/// an `id` as a request's (null only beside an `error`, when the request's could not be read).
fn response_fault(m: &serde_json::Map<String, Value>, id: Option<&Value>) -> Option<&'static str> {
    if m.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Some("\"jsonrpc\" must be \"2.0\"");
    }
    let error = m.get("error");
    if let Some(error) = error {
        if m.contains_key("result") {
            return Some("a response holds \"result\" or \"error\", not both");
        }
        let code = error.get("code").is_some_and(Value::is_i64);
        let message = error.get("message").is_some_and(Value::is_string);
        if !(error.is_object() && code && message) {
            return Some("a response's \"error\" must be an object with an integer \"code\" and a string \"message\"");
        }
    }
    match id {
        None => Some("a response needs the \"id\" of the request it answers"),
        Some(id) if valid_id(id) => None,
        Some(Value::Null) if error.is_some() => None,
        Some(_) => Some(
            "a response's \"id\" must be a string or an integer (null only beside an \"error\")",
        ),
    }
}

/// A string, or a number that is an integer within 64 bits (so it echoes back unchanged).
fn valid_id(id: &Value) -> bool {
    match id {
        Value::String(_) => true,
        Value::Number(n) => n.is_i64() || n.is_u64(),
        _ => false,
    }
}

/// One outgoing reply.
///
/// Written by [`Reply::write_json`], not by serde: a committed call's result is written by
/// hand around the committed output (see [`MethodResult::write_json`]).
#[derive(Debug)]
pub(super) enum Reply {
    Result { id: Value, result: MethodResult },
    Error { id: Value, error: ErrorObject },
}

#[derive(Debug, Serialize)]
pub(super) struct ErrorObject {
    pub code: i64,
    pub message: String,
    /// Machine-readable detail; absent from every reply whose bytes the contract fixes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl Reply {
    pub(super) fn result(id: &Value, result: MethodResult) -> Reply {
        Reply::Result {
            id: id.clone(),
            result,
        }
    }

    pub(super) fn error(id: &Value, code: i64, message: impl Into<String>) -> Reply {
        Reply::Error {
            id: id.clone(),
            error: ErrorObject {
                code,
                message: message.into(),
                data: None,
            },
        }
    }

    /// An error reply with a `data` member.
    pub(super) fn error_with_data(
        id: &Value,
        code: i64,
        message: impl Into<String>,
        data: Value,
    ) -> Reply {
        let mut reply = Reply::error(id, code, message);
        if let Reply::Error { error, .. } = &mut reply {
            error.data = Some(data);
        }
        reply
    }

    /// The error code, for an error reply.
    pub(super) fn error_code(&self) -> Option<i64> {
        match self {
            Reply::Error { error, .. } => Some(error.code),
            Reply::Result { .. } => None,
        }
    }

    /// The reply to `body`, not taken, which so ran nothing: [`Reply::unparsed`]'s, or, for an
    /// integer literal read inexactly, `-32602 invalid params` when it lies in one request's
    /// `params` (the reply the same number within `u64` gets from admission, whose rule is
    /// canonical JSON's ±2^53−1) and `-32600` otherwise, naming the rule there: ids and the
    /// rest of a message are read as 64-bit integers (an id of 2^64−1 is taken and echoed).
    /// A number too large for a double is answered the same way ([`super::numbers`]), not as
    /// a parse error: it is JSON. `max_values` is `[limits] json_values`.
    pub(super) fn not_taken(why: &McpUnparsed, body: &[u8], max_values: usize) -> Reply {
        match why {
            McpUnparsed::Json(why @ Unparsed::Syntax(_)) => {
                super::numbers::out_of_range(body, max_values)
                    .unwrap_or_else(|| Reply::unparsed(why))
            }
            McpUnparsed::Json(why) => Reply::unparsed(why),
            McpUnparsed::Inexact {
                why,
                params_id: Some(id),
            } => Reply::error(id, INVALID_PARAMS, format!("invalid params: {why}")),
            McpUnparsed::Inexact {
                why,
                params_id: None,
            } => {
                let why = match wider_than_64_bits(body) {
                    Some(literal) => format!(
                        "number {literal} is outside the 64-bit integer range (−2^63 to 2^64−1) in which this server reads integers exactly"
                    ),
                    None => why.to_string(),
                };
                Reply::invalid_request(Value::Null, &format!("{why}; nothing was run"))
            }
        }
    }

    /// The reply to a body that was not parsed, and so ran nothing: `-32700` when it is not
    /// one JSON value (where the parser stopped, and why) or has an object that repeats a
    /// member (its name quoted, at most 256 bytes of it); `-32600` when it holds more values
    /// than `[limits] json_values`, as for a batch past `batch_items`.
    pub(super) fn unparsed(why: &Unparsed) -> Reply {
        match why {
            Unparsed::TooManyValues(limit) => Reply::invalid_request(
                Value::Null,
                &format!(
                    "{}; nothing was run",
                    crate::json_bounds::too_many_values(*limit)
                ),
            ),
            // serde_json's account is one short line that names the line and column.
            Unparsed::Syntax(err) => Reply::error(
                &Value::Null,
                PARSE_ERROR,
                format!("Parse error: {err}; nothing was run"),
            ),
            Unparsed::DuplicateKey(key) => Reply::error(
                &Value::Null,
                PARSE_ERROR,
                format!(
                    "Parse error: duplicate key {}; nothing was run",
                    dialect::quote::quote(key)
                ),
            ),
        }
    }

    pub(super) fn invalid_request(id: Value, why: &str) -> Reply {
        Reply::error(&id, INVALID_REQUEST, format!("invalid request: {why}"))
    }

    /// A batch item left unrun because the replies before it reached `limit` bytes.
    pub(super) fn not_run(id: Value, limit: usize) -> Reply {
        Reply::error(
            &id,
            INVALID_REQUEST,
            format!("invalid request: not run: the replies to this batch reached the {limit}-byte limit ([limits] reply_bytes); send it again in another POST"),
        )
    }

    /// Append this reply to `out` as compact JSON: `jsonrpc`, `id`, then `result` or
    /// `error`. An error leaves `out` as it was.
    pub(super) fn write_json(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        let start = out.len();
        let written = self.write_members(out);
        if written.is_err() {
            out.truncate(start);
        }
        written
    }

    fn write_members(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
        let (Reply::Result { id, .. } | Reply::Error { id, .. }) = self;
        serde_json::to_writer(&mut *out, id)?;
        match self {
            Reply::Result { result, .. } => {
                out.extend_from_slice(br#","result":"#);
                result.write_json(out)?;
            }
            Reply::Error { error, .. } => {
                out.extend_from_slice(br#","error":"#);
                serde_json::to_writer(&mut *out, error)?;
            }
        }
        out.push(b'}');
        Ok(())
    }

    /// This reply as compact JSON text.
    pub(super) fn to_json(&self) -> serde_json::Result<String> {
        let mut out = Vec::with_capacity(256);
        self.write_json(&mut out)?;
        // Only JSON, which is UTF-8, was written.
        String::from_utf8(out).map_err(serde::ser::Error::custom)
    }
}

/// The first integer literal of `body` (outside strings) that is no 64-bit integer, as the
/// canonical parser quotes it (cut when long): the one serde_json rounded to a double.
fn wider_than_64_bits(body: &[u8]) -> Option<String> {
    let literal = crate::json_scan::first_wider_than_64_bits(body)?;
    let text = std::str::from_utf8(literal).ok()?;
    Some(match broker_core::canon::parse(literal) {
        Err(broker_core::canon::CanonError::UnsafeInteger { text }) => text,
        _ => text.to_owned(),
    })
}

/// How many messages a body that is one JSON array holds, as far as a limit goes
/// ([`batch_len`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BatchLen {
    /// This many.
    Exactly(usize),
    /// More than the limit: counting stopped one past it.
    MoreThan,
}

/// The number of messages in a body that is one JSON array, counted without building them
/// (a huge batch is refused before it costs memory) and no further than one past `limit`;
/// `None` for anything else, including malformed JSON before that point, which the full
/// parse then reports. Counting a batch to its end made the daemon read all of it: four
/// clients sending 80,000-message batches had the count take 62 % of its CPU (bench row 3).
pub(super) fn batch_len(bytes: &[u8], limit: usize) -> Option<BatchLen> {
    use serde::de::{Deserializer as _, Error as _, IgnoredAny, SeqAccess, Visitor};
    use std::cell::Cell;
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'[') {
        return None;
    }
    struct Count<'a> {
        limit: usize,
        stopped: &'a Cell<bool>,
    }
    impl<'de> Visitor<'de> for Count<'_> {
        type Value = usize;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON array")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<usize, A::Error> {
            let mut n = 0;
            while seq.next_element::<IgnoredAny>()?.is_some() {
                n += 1;
                if n > self.limit {
                    // The only way out that leaves the rest unread is an error.
                    self.stopped.set(true);
                    return Err(A::Error::custom("past the limit"));
                }
            }
            Ok(n)
        }
    }
    let stopped = Cell::new(false);
    let mut de = serde_json::Deserializer::from_slice(bytes);
    match (&mut de).deserialize_seq(Count {
        limit,
        stopped: &stopped,
    }) {
        Ok(n) => de.end().ok().map(|()| BatchLen::Exactly(n)),
        Err(_) if stopped.get() => Some(BatchLen::MoreThan),
        Err(_) => None,
    }
}

/// Why a POST's body is not a message this server acts on: not JSON (`-32700 Parse error`),
/// or an object that names a member twice, which is refused whole so that nothing in the POST
/// runs ([`dialect::json`]: a proxy that checked the first `path` would see another call than
/// the one that ran).
pub(super) use dialect::json::Unparsed;

pub(super) use crate::json_bounds::McpUnparsed;

/// `s` as a JSON string literal, for names quoted in error texts (`unknown tool "x"`): quotes
/// and control characters come out escaped, so a hostile name cannot break the message.
pub(super) use dialect::quote::json_string as quote;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn why(v: Value) -> (Value, &'static str) {
        match classify(v) {
            Message::Invalid { id, why } => (id, why),
            other => panic!("expected invalid, got {other:?}"),
        }
    }

    #[test]
    fn a_member_named_twice_is_a_parse_error_that_names_it_and_is_bounded() {
        let reply = |text: &str| {
            let why = dialect::json::parse(text.as_bytes()).unwrap_err();
            Reply::unparsed(&why).to_json().unwrap()
        };
        assert_eq!(
            reply(r#"{"id":1,"id":2}"#),
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error: duplicate key \"id\"; nothing was run"}}"#
        );
        assert_eq!(
            reply("{"),
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error: EOF while parsing an object at line 1 column 1; nothing was run"}}"#
        );
        let long = format!(r#"{{"{0}":1,"{0}":2}}"#, "k".repeat(1000));
        let text = reply(&long);
        assert!(text.len() < 400, "{text}");
        assert!(text.contains("…\\\"; nothing was run"), "{text}");
    }

    #[test]
    fn requests_notifications_and_responses() {
        match classify(json!({"jsonrpc":"2.0","id":7,"method":"ping"})) {
            Message::Request { id, method, params } => {
                assert_eq!(id, json!(7));
                assert_eq!(method, "ping");
                assert!(params.is_none());
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            classify(json!({"jsonrpc":"2.0","method":"notifications/initialized"})),
            Message::Ignored
        ));
        assert!(matches!(
            classify(json!({"jsonrpc":"2.0","id":1,"result":{}})),
            Message::Ignored
        ));
        assert!(matches!(
            classify(json!({"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"x"}})),
            Message::Ignored
        ));
    }

    #[test]
    fn invalid_messages_name_the_problem() {
        assert_eq!(why(json!(1)), (Value::Null, "expected a JSON-RPC object"));
        assert_eq!(
            why(json!({"jsonrpc":"1.0","id":"a","method":"ping"})),
            (json!("a"), "\"jsonrpc\" must be \"2.0\"")
        );
        assert_eq!(
            why(json!({"jsonrpc":"2.0","id":2,"method":5})),
            (json!(2), "\"method\" must be a string")
        );
        assert_eq!(
            why(json!({"jsonrpc":"2.0","id":2})),
            (json!(2), "a request needs \"method\"")
        );
        assert_eq!(
            why(json!({"jsonrpc":"2.0","id":2,"method":"ping","params":3})),
            (json!(2), "\"params\" must be an object or an array")
        );
        for bad in [json!(null), json!(1.5), json!([1]), json!({})] {
            assert_eq!(
                why(json!({"jsonrpc":"2.0","id":bad,"method":"ping"})),
                (Value::Null, "\"id\" must be a string or an integer")
            );
        }
    }

    #[test]
    fn batches_are_counted_without_being_built() {
        use BatchLen::{Exactly, MoreThan};
        assert_eq!(
            batch_len(b" [1, {\"a\": [2]}, \"x\"] ", 64),
            Some(Exactly(3))
        );
        assert_eq!(
            batch_len(b" [1, {\"a\": [2]}, \"x\"] ", 3),
            Some(Exactly(3))
        );
        assert_eq!(batch_len(b" [1, {\"a\": [2]}, \"x\"] ", 2), Some(MoreThan));
        assert_eq!(batch_len(b"[]", 0), Some(Exactly(0)));
        assert_eq!(batch_len(b"[{}]", 0), Some(MoreThan));
        assert_eq!(batch_len(b"{\"a\":1}", 64), None);
        assert_eq!(batch_len(b"[1,", 64), None);
        assert_eq!(batch_len(b"[1] x", 64), None);
        assert_eq!(batch_len(b"[1,]", 64), None);
    }

    /// Bench row 3's attack: batches of 80,000 messages, each read to its end to be counted.
    /// Counting stops one past the limit, so what follows is never looked at: not even the
    /// syntax error that ends this one.
    #[test]
    fn a_huge_batch_is_counted_no_further_than_one_past_the_limit() {
        let mut body = String::from("[");
        for i in 0..80_000 {
            body.push_str(&format!(
                r#"{{"jsonrpc":"2.0","id":{i},"method":"tools/list"}},"#
            ));
        }
        body.push_str("not json");
        assert_eq!(batch_len(body.as_bytes(), 64), Some(BatchLen::MoreThan));
        assert_eq!(
            batch_len(body.as_bytes(), 80_000),
            None,
            "malformed at its end"
        );
    }

    #[test]
    fn replies_keep_member_order() {
        let r = Reply::error(&json!(2), INTERNAL_ERROR, "host callback failed");
        assert_eq!(
            r.to_json().unwrap(),
            r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32603,"message":"host callback failed"}}"#
        );
        assert_eq!(quote("a\"b\n"), r#""a\"b\n""#);
    }
}
