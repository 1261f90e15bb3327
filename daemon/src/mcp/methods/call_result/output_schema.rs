//! Whether a committed output conforms to its tool's `outputSchema`, in the part of JSON
//! Schema that can be checked cheaply and with certainty: `type`, `required`, `enum`,
//! `properties` (each present member against its schema) and `items` (a single schema, for the
//! elements after any `prefixItems`), the same keywords at every depth. Every other keyword is ignored, so this never calls an
//! output that conforms non-conforming; it catches what a client that validates (the official
//! MCP SDKs do, for every result without `isError`) would refuse most often. A `type` naming
//! no JSON Schema type (`"int"`) is reported where it is read: such a schema is invalid, and a
//! client that validates refuses every result against it.
//!
//! The output is walked as raw JSON text: a member's kind is read from its first byte, and only
//! what a schema looks inside (an object with `required` or `properties`, an array with
//! `items`, a value with `enum`) is split further. A 1 MiB file in a `{"type":"string"}`
//! member is never copied or parsed.

use std::collections::BTreeMap;

use serde_json::value::RawValue;
use serde_json::Value;

/// Past this depth nothing is checked (a schema deeper than this is not what a model reads).
const MAX_DEPTH: usize = 64;

/// What does not conform, as `at <where>: <what>`; `None` when nothing checked fails.
/// `output` is one JSON object (the committed output).
pub(super) fn violation(schema: &Value, output: &str) -> Option<String> {
    let raw: &RawValue = serde_json::from_str(output).ok()?;
    check(schema, raw, "", 0)
}

/// The JSON kinds `type` names, as a value's first byte shows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Object,
    Array,
    String,
    Number { integer: bool },
    Boolean,
    Null,
}

impl Kind {
    fn of(raw: &RawValue) -> Option<Kind> {
        let text = raw.get().trim_start();
        Some(match text.as_bytes().first()? {
            b'{' => Kind::Object,
            b'[' => Kind::Array,
            b'"' => Kind::String,
            b't' | b'f' => Kind::Boolean,
            b'n' => Kind::Null,
            b'-' | b'0'..=b'9' => Kind::Number {
                integer: is_integer(text.trim_end()),
            },
            _ => return None,
        })
    }

    /// The article and name an operator reads (`a string`).
    fn said(self) -> &'static str {
        match self {
            Kind::Object => "an object",
            Kind::Array => "an array",
            Kind::String => "a string",
            Kind::Number { integer: true } => "an integer",
            Kind::Number { integer: false } => "a number with a fraction",
            Kind::Boolean => "a boolean",
            Kind::Null => "null",
        }
    }

    /// Whether this kind is the JSON Schema type `name`; `None` for a name JSON Schema does
    /// not define (not checked).
    fn is(self, name: &str) -> Option<bool> {
        Some(match name {
            "object" => self == Kind::Object,
            "array" => self == Kind::Array,
            "string" => self == Kind::String,
            "number" => matches!(self, Kind::Number { .. }),
            "integer" => self == Kind::Number { integer: true },
            "boolean" => self == Kind::Boolean,
            "null" => self == Kind::Null,
            _ => return None,
        })
    }
}

/// JSON Schema's integer: any number whose value is whole (`1.0` and `1e2` are integers).
fn is_integer(number: &str) -> bool {
    if !number.contains(['.', 'e', 'E']) {
        return true;
    }
    number
        .parse::<f64>()
        .is_ok_and(|n| n.is_finite() && n.fract() == 0.0)
}

/// JSON Schema's equality for `enum`: numbers by value, objects by members, the rest exactly.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_f64(), y.as_f64()) {
            (Some(x), Some(y)) => x == y,
            _ => x == y,
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

fn place(at: &str) -> &str {
    if at.is_empty() {
        "the top level"
    } else {
        at
    }
}

/// A member's name in a JSON Pointer (RFC 6901).
fn pointer(at: &str, name: &str) -> String {
    format!("{at}/{}", name.replace('~', "~0").replace('/', "~1"))
}

fn check(schema: &Value, raw: &RawValue, at: &str, depth: usize) -> Option<String> {
    let schema = schema.as_object()?;
    // Beside `$ref`, draft-07 ignores every other keyword: nothing here is certain.
    if depth > MAX_DEPTH || schema.contains_key("$ref") {
        return None;
    }
    let kind = Kind::of(raw)?;
    if let Some(wanted) = schema.get("type") {
        let names: Vec<&str> = match wanted {
            Value::String(s) => vec![s.as_str()],
            Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        let verdicts: Vec<Option<bool>> = names.iter().map(|n| kind.is(n)).collect();
        // A name JSON Schema does not define makes the schema itself invalid: a client that
        // validates refuses it whatever the output (load and publish refuse such a schema;
        // a document stored before that still reaches here).
        if let Some(unknown) = names.iter().zip(&verdicts).find(|(_, v)| v.is_none()) {
            return Some(format!(
                "at {}: the outputSchema's type {} is not a JSON Schema type",
                place(at),
                dialect::quote::quote(unknown.0)
            ));
        }
        if !names.is_empty() && verdicts.iter().all(|v| *v == Some(false)) {
            return Some(format!(
                "at {}: {} where the outputSchema says {}",
                place(at),
                kind.said(),
                names.join(" or ")
            ));
        }
    }
    if let Some(Value::Array(allowed)) = schema.get("enum") {
        let value: Value = serde_json::from_str(raw.get()).ok()?;
        if !allowed.iter().any(|a| same(a, &value)) {
            let shown = value.to_string();
            let shown = if shown.len() > 80 {
                format!("{}…", shown.chars().take(80).collect::<String>())
            } else {
                shown
            };
            return Some(format!(
                "at {}: {shown} is not one of the outputSchema's enum values",
                place(at)
            ));
        }
    }
    match kind {
        Kind::Object => {
            let required: Vec<&str> = schema
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let properties = schema.get("properties").and_then(Value::as_object);
            if required.is_empty() && properties.is_none_or(|p| p.is_empty()) {
                return None;
            }
            let members: BTreeMap<String, &RawValue> = serde_json::from_str(raw.get()).ok()?;
            if let Some(missing) = required.iter().find(|r| !members.contains_key(**r)) {
                return Some(format!(
                    "at {}: the required member {} is missing",
                    place(at),
                    dialect::quote::quote(missing)
                ));
            }
            properties?.iter().find_map(|(name, sub)| {
                let member = members.get(name)?;
                check(sub, member, &pointer(at, name), depth + 1)
            })
        }
        Kind::Array => {
            let items = schema.get("items").filter(|i| i.is_object())?;
            // Beside `prefixItems`, JSON Schema 2020-12 (MCP's default dialect) applies `items`
            // only to the elements after the prefix; draft-07 knows no `prefixItems` and
            // applies `items` to all. Those after the prefix are checked, which is right under
            // both; the prefix itself is not (draft-07 ignores `prefixItems`).
            let prefix = match schema.get("prefixItems") {
                None => 0,
                Some(Value::Array(prefix)) => prefix.len(),
                Some(_) => return None,
            };
            let elements: Vec<&RawValue> = serde_json::from_str(raw.get()).ok()?;
            elements
                .iter()
                .enumerate()
                .skip(prefix)
                .find_map(|(i, e)| check(items, e, &format!("{at}/{i}"), depth + 1))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn v(schema: Value, output: Value) -> Option<String> {
        violation(&schema, &output.to_string())
    }

    #[test]
    fn items_beside_prefix_items_is_checked_only_after_the_prefix() {
        let schema = json!({"type": "array", "prefixItems": [{"type": "integer"}],
                            "items": {"type": "string"}});
        assert_eq!(v(schema.clone(), json!([1, "a", "b"])), None);
        // The prefix itself is not checked: draft-07 ignores `prefixItems`.
        assert_eq!(v(schema.clone(), json!(["a", "b"])), None);
        assert_eq!(
            v(schema, json!([1, "a", 2])),
            Some("at /2: an integer where the outputSchema says string".into())
        );
        let odd = json!({"type": "array", "prefixItems": 5, "items": {"type": "string"}});
        assert_eq!(v(odd, json!([1])), None);
    }

    #[test]
    fn what_conforms_or_is_not_checked_passes() {
        let schema = json!({
            "type": "object",
            "required": ["world", "ok"],
            "properties": {
                "ok": {"type": "boolean"},
                "count": {"type": "integer"},
                "ratio": {"type": ["number", "null"]},
                "mode": {"enum": ["a", "b", 1]},
                "list": {"type": "array", "items": {"type": "string"}},
                "deep": {"type": "object", "properties": {"n": {"type": "integer"}}},
                "ref": {"$ref": "#/$defs/x", "type": "string"},
                "any": true
            },
            "additionalProperties": false,
            "minProperties": 99
        });
        let good = json!({"world": {}, "ok": true, "count": 3, "ratio": null, "mode": 1.0,
            "list": ["x"], "deep": {"n": 2.0}, "ref": 5, "any": [], "extra": 1});
        assert_eq!(v(schema.clone(), good), None);
        assert_eq!(v(json!({"type": "object"}), json!({"a": 1})), None);
        assert_eq!(v(json!(true), json!({"a": 1})), None);
        assert_eq!(
            v(
                json!({"properties": {"n": {"type": "integer"}}}),
                json!({"n": 1e2})
            ),
            None
        );
    }

    #[test]
    fn an_unknown_type_name_in_the_schema_does_not_pass_as_conforming() {
        let schema = json!({"type": "object", "properties": {
            "lines": {"type": "int"},
            "ratio": {"type": ["number", "decimal"]}
        }});
        assert_eq!(
            v(schema.clone(), json!({"world": {}, "lines": 3})).as_deref(),
            Some("at /lines: the outputSchema's type \"int\" is not a JSON Schema type")
        );
        assert_eq!(
            v(schema.clone(), json!({"world": {}, "ratio": 0.5})).as_deref(),
            Some("at /ratio: the outputSchema's type \"decimal\" is not a JSON Schema type")
        );
        // Where the check does not read (a member the output lacks), nothing is said.
        assert_eq!(v(schema, json!({"world": {}})), None);
    }

    #[test]
    fn what_does_not_conform_is_named_by_its_place() {
        let schema = json!({
            "type": "object",
            "required": ["world"],
            "properties": {
                "count": {"type": "integer"},
                "mode": {"enum": ["a", "b"]},
                "list": {"type": "array", "items": {"type": "string"}},
                "a/b": {"type": "object", "properties": {"n": {"type": ["integer", "null"]}}}
            }
        });
        let cases = [
            (
                json!({"count": 1}),
                "at the top level: the required member \"world\" is missing",
            ),
            (
                json!({"world": {}, "count": "not a number"}),
                "at /count: a string where the outputSchema says integer",
            ),
            (
                json!({"world": {}, "count": 1.5}),
                "at /count: a number with a fraction where the outputSchema says integer",
            ),
            (
                json!({"world": {}, "mode": "c"}),
                "at /mode: \"c\" is not one of the outputSchema's enum values",
            ),
            (
                json!({"world": {}, "list": ["x", 2]}),
                "at /list/1: an integer where the outputSchema says string",
            ),
            (
                json!({"world": {}, "a/b": {"n": true}}),
                "at /a~1b/n: a boolean where the outputSchema says integer or null",
            ),
        ];
        for (output, why) in cases {
            assert_eq!(
                v(schema.clone(), output.clone()).as_deref(),
                Some(why),
                "{output}"
            );
        }
        assert_eq!(
            v(json!({"type": "array"}), json!({})).as_deref(),
            Some("at the top level: an object where the outputSchema says array")
        );
    }
}
