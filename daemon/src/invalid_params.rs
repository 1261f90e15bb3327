//! A bad argument is a bad *parameter*, never a bad envelope or a host failure.
//!
//! Both surfaces promise that `-32602 invalid params` means nothing ran and nothing was
//! journaled, while `-32603 host callback failed` means the effect may have run. An argument
//! whose number has no canonical form (an integer beyond ±(2^53−1), such as
//! `9007199254740993`) is refused in admission, before the journal, so it is invalid params.
//! A2A reads its body with the strict canonical parser, which refuses such a number wherever
//! it is; MCP reads it as serde_json does, and reads the text again for an integer literal too
//! wide for `u64` (which serde_json rounds to a double). [`params_error`] tells a number
//! problem inside `params` (invalid params) from one in the envelope itself (an invalid
//! request); [`around_params`] gives A2A the envelope alone, which it judges as any other
//! (a notification is not answered, a bad id is answered with null) before params matter.
//! [`a2a_notification`] does the same for an A2A notification whose `params` hold a number
//! too large for a double. Where the numbers lie is found on the text ([`crate::json_numbers`]),
//! which both protocols share.

use broker_core::canon::{self, CanonError};
use serde_json::Value;

/// The request id to answer `-32602 invalid params` with, when `error` (from parsing `body`)
/// is a number without a canonical form that lies inside `params` of an otherwise valid
/// JSON-RPC 2.0 request; `None` leaves it an invalid request. The body is read again within
/// `max_values` (`[limits] json_values`), as the strict parse that failed was.
pub fn params_error(
    body: &[u8],
    error: &CanonError,
    max_values: usize,
    envelope: Envelope,
) -> Option<Value> {
    let request = around_params(body, error, max_values, envelope)?;
    if request.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return None;
    }
    Some(request.get("id").cloned().unwrap_or(Value::Null))
}

/// The request without its `params`, when `error` (from parsing `body`) is a number without a
/// canonical form and every such number of the body lies inside `params`, and the rest reads as
/// `envelope` says; `None` when one is elsewhere (or the body is no object). Where they lie is
/// found as for `1e400` ([`crate::json_numbers`]): the body is read twice with each such literal
/// blanked, as `null` and as `0`, and the two readings must differ only inside `params`. A
/// request that also holds `params` was otherwise answered `-32602` for a number in another
/// member, and, read leniently, to an id it never sent (a wide id read as a double). Nothing of
/// the JSON-RPC envelope is judged beyond that: the caller judges it as any request's (a
/// notification, an id of the wrong type, a missing method), whatever `params` held.
pub fn around_params(
    body: &[u8],
    error: &CanonError,
    max_values: usize,
    envelope: Envelope,
) -> Option<Value> {
    use crate::json_numbers::{blanked, literals, same_but_params, wider_than_64_bits};
    if !matches!(
        error,
        CanonError::UnsafeInteger { .. } | CanonError::NonFinite
    ) {
        return None;
    }
    // The literals this envelope's reader cannot take exactly: A2A's strict parser refuses an
    // integer beyond ±(2^53−1); MCP reads one within 64 bits exactly.
    let unreadable = literals(body, |text| match envelope {
        Envelope::Canonical => matches!(
            canon::parse(text.as_bytes()),
            Err(CanonError::UnsafeInteger { .. })
        ),
        Envelope::Ids64 => wider_than_64_bits(text),
    });
    if unreadable.is_empty() {
        return None;
    }
    let as_null =
        dialect::json::parse_bounded(&blanked(body, &unreadable, b"null"), max_values).ok()?;
    let as_zero =
        dialect::json::parse_bounded(&blanked(body, &unreadable, b"0"), max_values).ok()?;
    if !same_but_params(as_null.clone(), as_zero) {
        return None;
    }
    let Value::Object(mut request) = as_null else {
        return None;
    };
    request.remove("params")?;
    let request = Value::Object(request);
    match envelope {
        // The rest of the request (the id included) must be canonical on its own.
        Envelope::Canonical => {
            canon::to_vec(&request).ok()?;
        }
        // The id must be one MCP takes.
        Envelope::Ids64 => match request.get("id") {
            Some(Value::String(_)) => {}
            Some(Value::Number(n)) if n.is_i64() || n.is_u64() => {}
            _ => return None,
        },
    }
    Some(request)
}

/// An A2A body whose only fault is a number literal too large for a double, all of them in
/// `params`, when it is a notification (no `id`): the message with its `params` dropped, for
/// the envelope to be judged as a notification's whose `params` hold a wide integer (`202`
/// when it is well-formed). `None` otherwise: a request is refused as before.
pub(crate) fn a2a_notification(body: &[u8], max_values: usize) -> Option<Value> {
    use crate::json_numbers::{blanked, infinite, literals, same_but_params};
    let literals = literals(body, infinite);
    if literals.is_empty() {
        return None;
    }
    let as_null =
        dialect::json::parse_bounded(&blanked(body, &literals, b"null"), max_values).ok()?;
    let as_zero = dialect::json::parse_bounded(&blanked(body, &literals, b"0"), max_values).ok()?;
    let Value::Object(mut message) = as_null.clone() else {
        return None;
    };
    if message.contains_key("id") || !same_but_params(as_null, as_zero) {
        return None;
    }
    message.remove("params")?;
    // The rest is read strictly, as every A2A message is.
    let message = Value::Object(message);
    canon::to_vec(&message).ok()?;
    Some(message)
}

/// How the rest of a request around its `params` is read, for [`params_error`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Envelope {
    /// Strictly, as canonical JSON (A2A): an id beyond ±(2^53−1) is no id.
    Canonical,
    /// As MCP reads it: an id is a string or a 64-bit integer (2^60 is echoed exactly).
    Ids64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn classify(body: &str) -> Option<Value> {
        let error = canon::parse(body.as_bytes()).unwrap_err();
        params_error(body.as_bytes(), &error, usize::MAX, Envelope::Canonical)
    }

    #[test]
    fn numbers_inside_params_are_invalid_params() {
        assert_eq!(
            classify(
                r#"{"jsonrpc":"2.0","id":4,"method":"tasks/send","params":{"x":9007199254740993}}"#
            ),
            Some(serde_json::json!(4))
        );
        // In the envelope it stays an invalid request.
        assert_eq!(
            classify(
                r#"{"jsonrpc":"2.0","id":9007199254740993,"method":"tasks/send","params":{}}"#
            ),
            None
        );
        assert_eq!(
            classify(r#"{"jsonrpc":"1.0","id":1,"params":{"x":9007199254740993}}"#),
            None
        );
        // As MCP reads an envelope, an id of 64 bits is an id: the number in `params` is
        // invalid params answered to it.
        let body = r#"{"jsonrpc":"2.0","id":1152921504606846976,"method":"tools/call","params":{"x":18446744073709551616}}"#;
        let error = canon::parse(b"18446744073709551616").unwrap_err();
        assert_eq!(
            params_error(body.as_bytes(), &error, usize::MAX, Envelope::Ids64),
            Some(serde_json::json!(1152921504606846976_u64))
        );
        assert_eq!(
            params_error(body.as_bytes(), &error, usize::MAX, Envelope::Canonical),
            None
        );
        // A number outside `params` is the envelope's, whatever `params` hold: never invalid
        // params, and never answered to an id read as a double.
        for (body, envelope) in [
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{},"x":18446744073709551616}"#,
                Envelope::Ids64,
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"ping","x":18446744073709551616,"params":{"y":18446744073709551616}}"#,
                Envelope::Ids64,
            ),
            (
                r#"{"jsonrpc":"2.0","id":12345678901234567890123,"method":"tasks/get","params":{}}"#,
                Envelope::Canonical,
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{},"x":9007199254740993}"#,
                Envelope::Canonical,
            ),
        ] {
            let error = canon::parse(body.as_bytes()).unwrap_err();
            assert_eq!(
                params_error(body.as_bytes(), &error, usize::MAX, envelope),
                None,
                "{body}"
            );
        }
        // Other parse failures are not touched.
        assert_eq!(
            classify(r#"{"jsonrpc":"2.0","id":1,"params":{"a":1,"a":2}}"#),
            None
        );
    }
}
