//! What a document entering the registry (a plugin's shipped tool at load, a published one) is
//! refused for beyond the document rules: an `outputSchema` a client that validates results
//! cannot use (a `type` JSON Schema does not define; a schema that forbids the `world` member
//! every result carries), and an `access` scope the plan never runs its effect at. Documents a
//! store already holds are read without these checks.

use broker_core::transition::Transition;
use serde_json::{json, Value};

/// A valid tool whose `outputSchema` and `access` the test replaces.
fn doc(output_schema: Value, access_scope: &str) -> Value {
    json!({
        "id": "notes-append",
        "title": "Append a line",
        "description": "Append one line to the notes file. Returns {ok, lines}.",
        "inputSchema": {"type": "object", "additionalProperties": false},
        "outputSchema": output_schema,
        "access": {"effect": "Notes.Append", "scope": access_scope, "cost": 0},
        "declaredEffects": [{"effect": "Notes.Append", "scope": "notes", "cost": 1}],
        "plan": {
            "language": "world/plan-language/v1",
            "effect": {"effect": "Notes.Append", "scope": "notes", "cost": 1},
            "payload": {"fields": {"op": {"const": "append"}}}
        }
    })
}

/// The refusal of `check_entering`, after `from_value` took the document.
fn refusal(d: Value) -> Option<String> {
    let t = Transition::from_value(d).expect("a valid document");
    t.check_entering().err().map(|e| e.to_string())
}

const TYPES: &str = "object, array, string, number, integer, boolean, null";

#[test]
fn an_output_schema_type_json_schema_does_not_define_is_refused_naming_its_path() {
    let cases = [
        (
            json!({"type": "object", "properties": {"lines": {"type": "int"}}}),
            format!("outputSchema.properties.lines.type is \"int\", which is not a JSON Schema type ({TYPES}): a client that validates results refuses the schema, and so every call's result; did you mean integer?"),
        ),
        (
            json!({"type": "object", "properties": {"list": {"type": "array", "items": {"type": "String"}}}}),
            format!("outputSchema.properties.list.items.type is \"String\", which is not a JSON Schema type ({TYPES}): a client that validates results refuses the schema, and so every call's result; did you mean string?"),
        ),
        (
            json!({"type": "object", "properties": {"a.b": {"type": "object", "properties": {"n": {"type": ["null", "float"]}}}}}),
            format!("outputSchema.properties[\"a.b\"].properties.n.type[1] is \"float\", which is not a JSON Schema type ({TYPES}): a client that validates results refuses the schema, and so every call's result; did you mean number?"),
        ),
        (
            json!({"type": "object", "properties": {"t": {"type": "tuple"}}}),
            format!("outputSchema.properties.t.type is \"tuple\", which is not a JSON Schema type ({TYPES}): a client that validates results refuses the schema, and so every call's result; did you mean array?"),
        ),
        (
            json!({"type": "object", "properties": {"x": {"type": "zebra"}}}),
            format!("outputSchema.properties.x.type is \"zebra\", which is not a JSON Schema type ({TYPES}): a client that validates results refuses the schema, and so every call's result"),
        ),
        (
            json!({"type": "object", "properties": {"x": {"type": []}}}),
            "outputSchema.properties.x.type is an empty array; name at least one JSON Schema type".to_owned(),
        ),
        (
            json!({"type": "object", "properties": {"x": {"type": 5}}}),
            format!("outputSchema.properties.x.type must be a type name or an array of them ({TYPES})"),
        ),
        (
            json!({"type": "object", "properties": {"lines": "integer"}}),
            "outputSchema.properties.lines must be a JSON Schema (an object, or true or false)".to_owned(),
        ),
        (
            json!({"type": "object", "properties": ["lines"]}),
            "outputSchema.properties must be an object of member schemas".to_owned(),
        ),
    ];
    for (schema, problem) in cases {
        assert_eq!(
            refusal(doc(schema.clone(), "notes")),
            Some(format!("transition \"notes-append\": {problem}")),
            "{schema}"
        );
    }
}

#[test]
fn an_output_schema_that_forbids_world_is_refused() {
    let why = "every result carries \"world\" (an object, the call's receipt), so a client that validates results would refuse every one";
    let cases = [
        (
            json!({"type": "object", "additionalProperties": false,
                   "properties": {"ok": {"type": "boolean"}, "lines": {"type": "integer"}}}),
            format!("outputSchema.additionalProperties is false with no \"world\" in properties, but {why}; add \"world\": {{\"type\": \"object\"}} to properties"),
        ),
        (
            json!({"type": "object", "additionalProperties": false}),
            format!("outputSchema.additionalProperties is false with no \"world\" in properties, but {why}; add \"world\": {{\"type\": \"object\"}} to properties"),
        ),
        (
            json!({"type": "object", "properties": {"world": {"type": "string"}}}),
            format!("outputSchema.properties.world.type is \"string\", but {why}; give it \"type\": \"object\""),
        ),
        (
            json!({"type": "object", "properties": {"world": false}}),
            format!("outputSchema.properties.world is false, but {why}"),
        ),
    ];
    for (schema, problem) in cases {
        assert_eq!(
            refusal(doc(schema.clone(), "notes")),
            Some(format!("transition \"notes-append\": {problem}")),
            "{schema}"
        );
    }
}

#[test]
fn output_schemas_a_validating_client_accepts_enter() {
    for schema in [
        json!({"type": "object"}),
        json!({"type": "object", "required": ["world"], "additionalProperties": false,
               "properties": {"world": {"type": "object"}, "ok": {"type": "boolean"},
                              "lines": {"type": ["integer", "null"]},
                              "list": {"type": "array", "items": [{"type": "string"}, true]},
                              "any": true, "deep": {"properties": {"n": {"type": "number"}}}}}),
        // A pattern may admit world: not certain, so not refused.
        json!({"type": "object", "additionalProperties": false, "patternProperties": {"^w": {}}}),
        json!({"type": "object", "properties": {"world": {"type": ["object", "null"]}}}),
        json!({"type": "object", "properties": {"world": {}}}),
    ] {
        assert_eq!(refusal(doc(schema.clone(), "notes")), None, "{schema}");
    }
}

#[test]
fn an_access_scope_the_plan_never_runs_its_effect_at_is_refused() {
    assert_eq!(
        refusal(doc(json!({"type": "object"}), "note")),
        Some("transition \"notes-append\": access.scope is \"note\", but the plan runs Notes.Append at scope \"notes\": a session would need a grant at each scope (access admits the call, the effect pays for it); give access the effect's scope".to_owned())
    );
    assert_eq!(refusal(doc(json!({"type": "object"}), "notes")), None);
}

#[test]
fn a_document_refused_on_entering_is_still_read_as_a_document() {
    // What a store holds from before these checks stays readable, and its receipts verifiable.
    let d = doc(
        json!({"type": "object", "properties": {"lines": {"type": "int"}}}),
        "note",
    );
    let t = Transition::from_value(d.clone()).expect("still a valid document");
    assert_eq!(t.to_value(), &d);
    assert!(t.check_entering().is_err());
}
