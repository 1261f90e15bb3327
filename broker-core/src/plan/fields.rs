//! The field helpers every part of the plan parser shares: the [`SpecError`] naming a field's
//! JSON path, reading typed fields, refusing unknown keys, and the quoting of caller-supplied
//! text inside messages.

use serde_json::{Map, Value};

use super::LANGUAGE_ID;

/// A problem in a plan section: the JSON path of the field and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError {
    pub field: String,
    pub problem: String,
}

pub(super) type SpecResult<T> = Result<T, SpecError>;

pub(super) fn bad<T>(field: &str, problem: impl Into<String>) -> SpecResult<T> {
    Err(SpecError {
        field: field.to_string(),
        problem: problem.into(),
    })
}

pub(super) fn object<'a>(
    v: &'a Value,
    field: &str,
    what: &str,
) -> SpecResult<&'a Map<String, Value>> {
    match v.as_object() {
        Some(m) => Ok(m),
        None => bad(field, format!("must be {what}")),
    }
}

/// Refuses any key outside `allowed` (naming the bytewise-smallest offender).
pub(super) fn only_keys(m: &Map<String, Value>, allowed: &[&str], field: &str) -> SpecResult<()> {
    match m.keys().filter(|k| !allowed.contains(&k.as_str())).min() {
        None => Ok(()),
        Some(k) => bad(
            field,
            format!(
                "has key \"{}\", which {LANGUAGE_ID} does not define here (keys here: {})",
                escape_for_message(k),
                allowed.join(", ")
            ),
        ),
    }
}

pub(super) fn string_field<'a>(
    m: &'a Map<String, Value>,
    key: &str,
    field: &str,
) -> SpecResult<&'a str> {
    match m.get(key) {
        None => bad(&format!("{field}.{key}"), "is missing"),
        Some(Value::String(s)) => Ok(s),
        Some(_) => bad(&format!("{field}.{key}"), "must be a string"),
    }
}

pub(super) fn u64_field(m: &Map<String, Value>, key: &str, field: &str) -> SpecResult<u64> {
    match m.get(key) {
        None => bad(&format!("{field}.{key}"), "is missing"),
        Some(v) => match v.as_u64() {
            Some(n) => Ok(n),
            None => bad(&format!("{field}.{key}"), "must be a non-negative integer"),
        },
    }
}

pub(super) fn i64_field(m: &Map<String, Value>, key: &str, field: &str) -> SpecResult<i64> {
    match m.get(key) {
        None => bad(&format!("{field}.{key}"), "is missing"),
        Some(v) => match v.as_i64() {
            Some(n) => Ok(n),
            None => bad(
                &format!("{field}.{key}"),
                "must be an integer between -2^63 and 2^63-1",
            ),
        },
    }
}

/// A non-empty array of distinct, non-empty strings.
pub(super) fn string_list(
    m: &Map<String, Value>,
    key: &str,
    field: &str,
    min: usize,
) -> SpecResult<Vec<String>> {
    let f = format!("{field}.{key}");
    let items = match m.get(key) {
        None => return bad(&f, "is missing"),
        Some(Value::Array(items)) => items,
        Some(_) => return bad(&f, "must be an array of strings"),
    };
    if items.len() < min {
        return bad(&f, format!("must list at least {min} value(s)"));
    }
    let mut out: Vec<String> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        match item.as_str() {
            Some("") => return bad(&format!("{f}[{i}]"), "must not be empty"),
            Some(s) if out.iter().any(|o| o == s) => {
                return bad(&format!("{f}[{i}]"), "repeats an earlier value")
            }
            Some(s) => out.push(s.to_string()),
            None => return bad(&format!("{f}[{i}]"), "must be a string"),
        }
    }
    Ok(out)
}

pub(super) fn noun_field(m: &Map<String, Value>, field: &str) -> SpecResult<String> {
    match m.get("noun") {
        None => Ok("value".to_string()),
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.clone()),
        Some(_) => bad(&format!("{field}.noun"), "must be a non-empty string"),
    }
}

pub(super) fn valid_argument_name(s: &str) -> bool {
    let b = s.as_bytes();
    matches!(b.first(), Some(c) if c.is_ascii_alphanumeric() || *c == b'_')
        && b.len() <= 64
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.'))
}

/// Renders a caller-supplied text for quoting inside a refusal: JSON-style escapes for `"`, `\\`
/// and control characters; texts over [`MAX_QUOTED_BYTES`](super::MAX_QUOTED_BYTES) bytes are cut at a character
/// boundary and end with `…` ([`dialect::quote::escape`], the quoting every layer shares).
pub fn escape_for_message(s: &str) -> String {
    dialect::quote::escape(s)
}
