//! Number literals too large for a double (`1e400`): well-formed JSON (RFC 8259's grammar has
//! no bound) that serde_json refuses as "number out of range", which is no reason to tell a
//! client its JSON is broken (`-32700`). Such a body is answered as the wide integers are: in
//! one request's `params`, `-32602 invalid params` to that request's id (admission's refusal:
//! canonical JSON has no such number); anywhere else `-32600`, id null, as A2A answers it.

use std::ops::Range;

use broker_core::canon::{self, CanonError};
use serde_json::Value;

use super::jsonrpc::{classify, Message, Reply, INVALID_PARAMS};
use crate::json_numbers::{blanked, infinite, literals, same_but_params, wider_than_64_bits};

/// The reply to `body`, which serde_json refused, when the refusal is a number literal that
/// overflows a double and the body is otherwise JSON; `None` when no such literal is in it.
/// The body is read again with each such literal blanked out (same length, so a real syntax
/// error later in it is reported where it is): first as `null`, then as `0`, so that what
/// differs between the two readings is where the literals were.
pub(super) fn out_of_range(body: &[u8], max_values: usize) -> Option<Reply> {
    let literals = overflowing_literals(body);
    let first = literals.first()?.clone();
    let as_null = blanked(body, &literals, b"null");
    let message = match dialect::json::parse_bounded(&as_null, max_values) {
        Ok(v) => v,
        // Not JSON after all (or past a limit): that is the answer, where it is.
        Err(why) => return Some(Reply::unparsed(&why)),
    };
    let why = account(&body[first]);
    let as_zero = blanked(body, &literals, b"0");
    if let (Some(id), Ok(other)) = (
        request_id(message.clone()),
        dialect::json::parse_bounded(&as_zero, max_values),
    ) {
        if same_but_params(message, other) {
            return Some(Reply::error(
                &id,
                INVALID_PARAMS,
                format!("invalid params: {why}"),
            ));
        }
    }
    Some(Reply::invalid_request(
        Value::Null,
        &format!("{why}; nothing was run"),
    ))
}

/// The id of `message` when it is one valid request.
fn request_id(message: Value) -> Option<Value> {
    match classify(message) {
        Message::Request { id, .. } => Some(id),
        _ => None,
    }
}

/// What the canonical parser says of `literal` (as A2A words it), the literal cut if long.
fn account(literal: &[u8]) -> String {
    match canon::parse(literal) {
        Err(e @ (CanonError::NumberOutOfRange { .. } | CanonError::UnsafeInteger { .. })) => {
            e.to_string()
        }
        _ => "a number too large for a 64-bit float".to_owned(),
    }
}

/// `body` read with every number literal this server cannot take (one that overflows a
/// double, or an integer past 64 bits) as `null`, when that reading holds no request: one
/// notification or response, or a batch of only those. Such input is acknowledged (`202`) or,
/// holding a malformed response, refused with an HTTP error, as it is without the number: a
/// number in a message that asks for no answer was answered with an SSE error. `None` when
/// the body holds no such literal, is no JSON with them blanked, or holds a request.
pub(super) fn without_requests(body: &[u8], max_values: usize) -> Option<Value> {
    let literals = literals(body, |text| infinite(text) || wider_than_64_bits(text));
    if literals.is_empty() {
        return None;
    }
    let read = dialect::json::parse_bounded(&blanked(body, &literals, b"null"), max_values).ok()?;
    let no_request = |m: &Value| {
        matches!(
            classify(m.clone()),
            Message::Ignored | Message::Unaccepted { .. }
        )
    };
    let none = match &read {
        Value::Array(items) => !items.is_empty() && items.iter().all(no_request),
        one => no_request(one),
    };
    none.then_some(read)
}

/// Where each number literal of `body` that overflows a double lies (outside strings).
fn overflowing_literals(body: &[u8]) -> Vec<Range<usize>> {
    literals(body, infinite)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(body: &str) -> Option<String> {
        out_of_range(body.as_bytes(), 1000).map(|r| r.to_json().unwrap())
    }

    #[test]
    fn literals_that_overflow_a_double_are_found_outside_strings_only() {
        let body = br#"{"a":"1e400","b":[1e308,-1e400,1E999],"c\"1e400":2e-400}"#;
        let found: Vec<&[u8]> = overflowing_literals(body)
            .into_iter()
            .map(|r| &body[r])
            .collect();
        assert_eq!(found, vec![&b"-1e400"[..], &b"1E999"[..]]);
    }

    #[test]
    fn a_number_too_large_for_a_double_is_invalid_params_in_params_and_an_invalid_request_elsewhere(
    ) {
        assert_eq!(
            reply(r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"x":[1e400]}}"#)
                .as_deref(),
            Some(
                r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32602,"message":"invalid params: number 1e400 is too large for a 64-bit float"}}"#
            )
        );
        let elsewhere = r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request: number 1e400 is too large for a 64-bit float; nothing was run"}}"#;
        for body in [
            r#"{"jsonrpc":"2.0","id":1e400,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","x":1e400}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","x":1e400,"params":{"y":1e400}}"#,
            r#"{"jsonrpc":"2.0","id":true,"method":"ping","params":{"y":1e400}}"#,
            r#"[{"jsonrpc":"2.0","id":1,"method":"ping","params":{"y":1e400}}]"#,
        ] {
            assert_eq!(reply(body).as_deref(), Some(elsewhere), "{body}");
        }
        // A real syntax error after the number is reported, where it is.
        assert_eq!(
            reply(r#"{"a":1e400,"#).as_deref(),
            Some(
                r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error: EOF while parsing a value at line 1 column 11; nothing was run"}}"#
            )
        );
        assert_eq!(reply(r#"{"a":1e300}"#), None);
    }
}
