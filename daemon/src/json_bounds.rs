//! The limits a request body's JSON meets before anything in it runs.
//!
//! A body's bytes are bounded at the edge, but what a parser builds from them is not: `{"a":0}`
//! is 7 bytes of text and several hundred bytes of `serde_json::Value` (an object is a B-tree
//! node however few its members). A megabyte of such objects built 177 MiB. So every request
//! body is parsed with a bound on its values, `[limits] json_values`, which stops the parse at
//! the first value past it; and nesting stops at the parsers' own limit, 128 levels. Both are
//! counted in `worldd_limit_trips_total` (`json_values`, `json_depth`) when they trip.
//!
//! MCP reads its body as serde_json does, refusing repeated members ([`dialect::json`]); A2A and
//! `POST /v1/commit` read theirs strictly ([`broker_core::canon`]).

use broker_core::canon::{self, CanonError};
use dialect::json::Unparsed;
use serde_json::Value;

use crate::state::AppState;

/// The operator's key, named in every refusal of a body past it.
const KEY: &str = "[limits] json_values";

/// `bytes` as MCP reads them, within `[limits] json_values`.
pub fn parse(state: &AppState, bytes: &[u8]) -> Result<Value, Unparsed> {
    dialect::json::parse_bounded(bytes, state.limits().json_values).inspect_err(|why| {
        if why.is_too_deep() {
            state.metrics().limit_tripped("json_depth");
        } else if matches!(why, Unparsed::TooManyValues(_)) {
            state.metrics().limit_tripped("json_values");
        }
    })
}

/// `bytes` read strictly (A2A, `POST /v1/commit`), within `[limits] json_values`.
pub fn parse_strict(state: &AppState, bytes: &[u8]) -> Result<Value, CanonError> {
    canon::parse_bounded(bytes, state.limits().json_values).inspect_err(|why| match why {
        CanonError::TooDeep { .. } => state.metrics().limit_tripped("json_depth"),
        CanonError::TooManyValues { .. } => state.metrics().limit_tripped("json_values"),
        _ => {}
    })
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
