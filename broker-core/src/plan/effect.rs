//! The effect triple `{effect, scope, cost}`: what a plan requests and what a transition
//! declares and requires, with the name rules of its parts.

use serde_json::Value;

use super::fields::{escape_for_message, SpecError};

/// One `{effect, scope, cost}` triple: an access requirement or a declared effect.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EffectSpec {
    pub effect: String,
    pub scope: String,
    pub cost: u64,
}

/// Longest scope or tool id, in bytes.
pub const MAX_NAME_BYTES: usize = 128;

/// `^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$`: the pattern of scopes and of tool ids.
pub fn valid_name(s: &str) -> bool {
    let b = s.as_bytes();
    match b.first() {
        Some(c) if c.is_ascii_alphanumeric() => {}
        _ => return false,
    }
    b.len() <= MAX_NAME_BYTES
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'/' | b'-'))
}

/// Effect names: dot-separated identifiers, e.g. `Workspace.Read`; at most 128 bytes.
pub fn valid_effect_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.split('.').all(|part| {
            let b = part.as_bytes();
            matches!(b.first(), Some(c) if c.is_ascii_alphabetic())
                && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
        })
}

/// Scopes: `^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$` (no `=`, `:` or `,`, which the grant syntax uses).
fn valid_scope(s: &str) -> bool {
    valid_name(s)
}

fn spec_err(field: &str, problem: impl Into<String>) -> SpecError {
    SpecError {
        field: field.to_string(),
        problem: problem.into(),
    }
}

/// Parses one `{effect, scope, cost}` object; `field` names it in errors.
pub(crate) fn parse_effect_spec(v: &Value, field: &str) -> Result<EffectSpec, SpecError> {
    let m = v
        .as_object()
        .ok_or_else(|| spec_err(field, "must be an object {effect, scope, cost}"))?;
    if let Some(k) = m
        .keys()
        .filter(|k| !matches!(k.as_str(), "effect" | "scope" | "cost"))
        .min()
    {
        return Err(spec_err(
            field,
            format!(
                "has key \"{}\"; an effect triple has only effect, scope and cost",
                escape_for_message(k)
            ),
        ));
    }
    let effect = parse_effect_name(m.get("effect"), &format!("{field}.effect"))?;
    let scope = parse_scope(m.get("scope"), &format!("{field}.scope"))?;
    let cost = parse_cost(m.get("cost"), &format!("{field}.cost"))?;
    Ok(EffectSpec {
        effect,
        scope,
        cost,
    })
}

pub(super) fn parse_effect_name(v: Option<&Value>, field: &str) -> Result<String, SpecError> {
    match v {
        None => Err(spec_err(field, "is missing")),
        Some(Value::String(s)) if valid_effect_name(s) => Ok(s.clone()),
        Some(Value::String(_)) => Err(spec_err(
            field,
            "must be an effect name such as \"Workspace.Read\" (dot-separated identifiers, at most 128 bytes)",
        )),
        Some(_) => Err(spec_err(field, "must be a string")),
    }
}

pub(super) fn parse_scope(v: Option<&Value>, field: &str) -> Result<String, SpecError> {
    match v {
        None => Err(spec_err(field, "is missing")),
        Some(Value::String(s)) if valid_scope(s) => Ok(s.clone()),
        Some(Value::String(_)) => Err(spec_err(
            field,
            "must match ^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$ (e.g. \"worktree\")",
        )),
        Some(_) => Err(spec_err(field, "must be a string")),
    }
}

pub(super) fn parse_cost(v: Option<&Value>, field: &str) -> Result<u64, SpecError> {
    match v {
        None => Err(spec_err(field, "is missing")),
        Some(v) => v
            .as_u64()
            .ok_or_else(|| spec_err(field, "must be a non-negative integer")),
    }
}
