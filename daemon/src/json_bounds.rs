//! The limits a request body's JSON meets before anything in it runs.
//!
//! A body's bytes are bounded at the edge, but what a parser builds from them is not: `{"a":0}`
//! is 7 bytes of text and several hundred bytes of `serde_json::Value` (an object is a B-tree
//! node however few its members). A megabyte of such objects built 177 MiB. So every request
//! body is parsed with a bound on its values, `[limits] json_values`, which stops the parse at
//! the first value past it; and nesting stops at the parsers' own limit, 128 levels. Both are
//! counted in `worldd_limit_trips_total` (`json_values`, `json_depth`) when they trip.
//!
//! What a body's parse will build is also counted against the body budget, from one scan of
//! its bytes (`json_scan::values`), before the parse and until its call is answered
//! ([`crate::edge::body::BodyShare::hold_parsed`]): bodies at the value limit from many
//! sessions would otherwise hold megabytes each while they wait their turn, which no byte
//! budget sees.
//!
//! MCP reads its body as serde_json does, refusing repeated members ([`dialect::json`]); A2A and
//! `POST /v1/commit` read theirs strictly ([`broker_core::canon`]).

use axum::http::HeaderMap;
use broker_core::canon::{self, CanonError};
use dialect::json::Unparsed;
use serde_json::Value;

use crate::edge::body::{BodyShare, Busy};
use crate::metrics::Limit;
use crate::state::AppState;

/// The operator's key, named in every refusal of a body past it.
const KEY: &str = "[limits] json_values";

/// Why an MCP body was not taken.
#[derive(Debug)]
pub enum McpUnparsed {
    /// Not one JSON value, a member named twice, or past `[limits] json_values`.
    Json(Unparsed),
    /// It holds an integer literal past 64 bits that serde_json read as the nearest double
    /// (`1000000000000000000001` as `1e21`): refused as the canonical parser refuses
    /// it, so that a rounded number is never run or taken for another call's. `params_id` is
    /// the request's id when the number lies in the `params` of one otherwise valid request
    /// (invalid params), `None` otherwise (an invalid request; a whole batch).
    Inexact {
        why: CanonError,
        params_id: Option<Value>,
    },
}

/// `bytes` as MCP reads them, within `[limits] json_values`.
pub fn parse(state: &AppState, bytes: &[u8]) -> Result<Value, McpUnparsed> {
    let limit = state.limits().json_values;
    let (value, wide) = dialect::json::parse_noting_wide(bytes, limit)
        .inspect_err(|why| {
            if why.is_too_deep() {
                state.metrics().limit_tripped(Limit::JsonDepth);
            } else if matches!(why, Unparsed::TooManyValues(_)) {
                state.metrics().limit_tripped(Limit::JsonValues);
            }
        })
        .map_err(McpUnparsed::Json)?;
    if wide {
        // Only a literal past 64 bits was rounded: one within them (an id of 2^60) was read
        // exactly, and a large float is a float; admission judges both by canonical JSON.
        if let Some(literal) = crate::json_scan::first_wider_than_64_bits(bytes) {
            // The canonical parser's own refusal: the literal as sent, cut if long.
            if let Err(why) = canon::parse(literal) {
                let params_id = crate::invalid_params::params_error(
                    bytes,
                    &why,
                    limit,
                    crate::invalid_params::Envelope::Ids64,
                );
                return Err(McpUnparsed::Inexact { why, params_id });
            }
        }
    }
    Ok(value)
}

/// `bytes` read strictly (A2A, `POST /v1/commit`), within `[limits] json_values`.
pub fn parse_strict(state: &AppState, bytes: &[u8]) -> Result<Value, CanonError> {
    canon::parse_bounded(bytes, state.limits().json_values).inspect_err(|why| match why {
        CanonError::TooDeep { .. } => state.metrics().limit_tripped(Limit::JsonDepth),
        CanonError::TooManyValues { .. } => state.metrics().limit_tripped(Limit::JsonValues),
        _ => {}
    })
}

/// How many values `value` holds: every scalar, array and object, at any depth, as the
/// parsers count them (the oracle of the scan's count).
#[cfg(test)]
pub fn values(value: &Value) -> usize {
    1 + match value {
        Value::Array(items) => items.iter().map(values).sum(),
        Value::Object(members) => members.values().map(values).sum(),
        _ => 0,
    }
}

/// Why a request body's JSON was not taken.
pub enum Refused<E> {
    /// The parser refused it: why.
    Unparsed(E),
    /// The body budget has no room for what its parse would build.
    Busy(Busy),
}

/// `bytes` parsed by `parse` ([`parse`] for MCP, [`parse_strict`] for A2A), what the parse
/// builds counted against `share` in the body budget until the share is dropped. The values
/// are counted with one scan (`json_scan::values`) and taken from the budget
/// ([`BodyShare::hold_parsed`]) before `parse` builds them, so that a refusal for want of room
/// costs a scan, not a parse. At most `[limits] json_values` values are counted: the parse
/// stops one past them, and which error a body gets (not JSON, nested too deep, too many
/// values) is the parse's, in the order its bytes come.
pub fn held<E>(
    state: &AppState,
    headers: &HeaderMap,
    share: &mut BodyShare,
    bytes: &[u8],
    parse: impl FnOnce(&AppState, &[u8]) -> Result<Value, E>,
) -> Result<Value, Refused<E>> {
    let values = crate::json_scan::values(bytes).min(state.limits().json_values);
    share
        .hold_parsed(state.bodies(), headers, bytes.len(), values)
        .map_err(Refused::Busy)?;
    parse(state, bytes).map_err(Refused::Unparsed)
}

/// What a refusal says of a body past `[limits] json_values`: the limit and its key.
pub fn too_many_values(limit: usize) -> String {
    format!("a body of more than {limit} JSON values ({KEY})")
}

/// The parser's account of why a strict body was refused, one bounded line: where the text
/// broke, or which limit it met.
pub fn strict_account(why: &CanonError) -> String {
    match why {
        CanonError::TooManyValues { limit } => too_many_values(*limit),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn values_are_counted_as_the_parsers_count_them() {
        let text = br#"{"a":[1,"x",null],"b":{},"c":{"d":[[]]}}"#;
        let value = dialect::json::parse(text).unwrap();
        assert_eq!(super::values(&value), 9);
        assert!(dialect::json::parse_bounded(text, 9).is_ok());
        assert!(dialect::json::parse_bounded(text, 8).is_err());
    }
}
