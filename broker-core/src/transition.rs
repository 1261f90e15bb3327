//! Transition documents (`world/transition/v1`): a tool defined as data.
//!
//! A transition is one JSON object. Every key is required except `finish`:
//!
//! | key | meaning |
//! |---|---|
//! | `id` | tool id = MCP tool name = A2A skill id; `^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$` |
//! | `title` | short human title (non-empty) |
//! | `description` | what the tool does, written for the agent that reads `tools/list` (non-empty) |
//! | `inputSchema` | JSON Schema of the arguments: `"type":"object"`, `"additionalProperties":false`, one property per plan argument (same names, JSON types matching the plan's types), `required` = the plan's required arguments |
//! | `outputSchema` | JSON Schema of the result object (`"type":"object"`) |
//! | `access` | `{effect, scope, cost}`: the grant that makes the tool visible and admits a call; `effect` must be one of the declared effect names |
//! | `declaredEffects` | `[{effect, scope, cost}]`: every effect the plan may request, exactly — each triple must be reachable by the plan and the plan can reach no other |
//! | `finish` | optional name of a pure reshaping function exported by the effect's plugin (e.g. `"check-report"`); `null` means none |
//! | `plan` | the plan section, in the plan language (see [`crate::plan`]) |
//!
//! Unknown keys are refused. [`Transition::from_value`] validates all of it (and the whole plan
//! section) and never panics; [`Transition::to_value`] hands back the document exactly as
//! given — its canonical bytes are what `transitionFn` hashes.

use serde_json::{Map, Value};

pub use crate::plan::EffectSpec;
use crate::plan::{escape_for_message, parse_effect_spec, Plan, PlanSpec, SpecError};

/// The semantic id of a transition document.
pub const SEMANTIC_ID: &str = "world/transition/v1";

/// Longest tool id, in bytes.
pub const MAX_ID_BYTES: usize = crate::plan::MAX_NAME_BYTES;

/// A validated transition document.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    /// Tool id = MCP name = A2A skill id; `^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$`.
    pub id: String,
    pub title: String,
    pub description: String,
    /// JSON Schema object of the arguments, published to agents.
    pub input_schema: Value,
    /// JSON Schema object of the result.
    pub output_schema: Value,
    /// Visibility / admission triple.
    pub access: EffectSpec,
    /// Every effect a plan may request, exactly.
    pub declared_effects: Vec<EffectSpec>,
    /// Name of a pure reshaping function exported by the effect's plugin.
    pub finish: Option<String>,
    /// The parsed plan section.
    pub plan: PlanSpec,
    document: Value,
}

/// Why a transition document was refused. The texts name the offending field.
#[derive(Debug, thiserror::Error)]
pub enum TransitionError {
    /// `from_slice` got bytes that are not one JSON value.
    #[error("transition document is not JSON: {0}")]
    NotJson(String),
    /// The document is JSON but not an object.
    #[error("transition document must be a JSON object")]
    NotObject,
    /// A field is missing, mistyped or breaks a rule, e.g.
    /// `transition "x": declaredEffects[0].cost must be a non-negative integer`.
    #[error("{}: {field} {problem}", subject(.id))]
    Invalid {
        /// The document's id, when it was readable.
        id: Option<String>,
        /// JSON path of the field, e.g. `plan.arguments[2].rules[0]`.
        field: String,
        /// What is wrong with it.
        problem: String,
    },
}

fn subject(id: &Option<String>) -> String {
    match id {
        Some(id) => format!("transition \"{id}\""),
        None => "transition document".to_string(),
    }
}

/// Longest `title`, in bytes.
pub const MAX_TITLE_BYTES: usize = 256;
/// Longest `description`, in bytes.
pub const MAX_DESCRIPTION_BYTES: usize = 8 * 1024;
/// Largest `inputSchema` or `outputSchema`, as compact JSON, in bytes.
pub const MAX_SCHEMA_BYTES: usize = 64 * 1024;

fn json_len(v: &Value) -> usize {
    serde_json::to_vec(v).map_or(usize::MAX, |b| b.len())
}

const TOP_KEYS: [&str; 9] = [
    "id",
    "title",
    "description",
    "inputSchema",
    "outputSchema",
    "access",
    "declaredEffects",
    "finish",
    "plan",
];

impl Transition {
    /// Parses and validates a document. Never panics.
    pub fn from_value(doc: Value) -> Result<Self, TransitionError> {
        let obj = doc.as_object().ok_or(TransitionError::NotObject)?;
        let id = parse_id(obj)?;
        let lift = |e: SpecError| TransitionError::Invalid {
            id: Some(id.clone()),
            field: e.field,
            problem: e.problem,
        };

        check_known_keys(obj).map_err(lift)?;
        let title = non_empty_string(obj, "title").map_err(lift)?;
        let description = non_empty_string(obj, "description").map_err(lift)?;
        let input_schema = schema(obj, "inputSchema").map_err(lift)?;
        let output_schema = schema(obj, "outputSchema").map_err(lift)?;
        check_size_limits(&title, &description, &input_schema, &output_schema).map_err(lift)?;
        let access = parse_access(obj).map_err(lift)?;
        let declared_effects = parse_declared(obj.get("declaredEffects")).map_err(lift)?;
        let finish = parse_finish(obj).map_err(lift)?;
        let plan = parse_plan(obj, &id).map_err(lift)?;

        check_access_is_declared(&access, &declared_effects).map_err(lift)?;
        check_declared_matches_plan(&declared_effects, &plan).map_err(lift)?;
        check_input_schema(&input_schema, &plan).map_err(lift)?;

        Ok(Transition {
            id,
            title,
            description,
            input_schema,
            output_schema,
            access,
            declared_effects,
            finish,
            plan,
            document: doc,
        })
    }

    /// Parses JSON bytes, then validates as [`Transition::from_value`].
    pub fn from_slice(bytes: &[u8]) -> Result<Self, TransitionError> {
        // Strict parse: duplicate keys would make the hashed document ambiguous.
        let doc: Value =
            crate::canon::parse(bytes).map_err(|e| TransitionError::NotJson(e.to_string()))?;
        Self::from_value(doc)
    }

    /// Plans one call of this tool ([`PlanSpec::plan_call`] with this document's id, declared
    /// effects and finish phase). Total and deterministic: any `args` value yields a [`Plan`];
    /// never panics, no I/O, no clock, no randomness.
    pub fn plan_call(&self, args: &Value) -> Plan {
        self.plan.plan_call(
            &self.id,
            &self.declared_effects,
            self.finish.is_some(),
            args,
        )
    }

    /// What is checked of a document entering the registry, a plugin's shipped tool at load or
    /// a published one, beyond [`Transition::from_value`]: the `outputSchema` is one a client
    /// that validates results can use (every `type` it reads is one of JSON Schema's names, and
    /// the schema admits the `world` member every result carries), and `access` names the
    /// scope the plan runs its effect at. Kept out of `from_value`, which also reads the
    /// documents a store already holds: those stay readable (and their receipts verifiable).
    pub fn check_entering(&self) -> Result<(), TransitionError> {
        let lift = |e: SpecError| TransitionError::Invalid {
            id: Some(self.id.clone()),
            field: e.field,
            problem: e.problem,
        };
        check_output_types(&self.output_schema, "outputSchema", 0).map_err(lift)?;
        check_output_admits_world(&self.output_schema).map_err(lift)?;
        check_access_scope(&self.access, &self.declared_effects).map_err(lift)
    }

    /// The full document as given (what `transitionFn` hashes, in canonical form).
    pub fn to_value(&self) -> &Value {
        &self.document
    }

    /// The declared effect names, in declaration order, each once.
    pub fn effect_names(&self) -> impl Iterator<Item = &str> {
        self.declared_effects
            .iter()
            .enumerate()
            .filter(move |(i, e)| {
                !self
                    .declared_effects
                    .iter()
                    .take(*i)
                    .any(|p| p.effect == e.effect)
            })
            .map(|(_, e)| e.effect.as_str())
    }
}

fn parse_id(obj: &Map<String, Value>) -> Result<String, TransitionError> {
    let invalid = |problem: &str| TransitionError::Invalid {
        id: None,
        field: "id".into(),
        problem: problem.into(),
    };
    match obj.get("id") {
        None => Err(invalid("is missing")),
        Some(Value::String(s)) if valid_id(s) => Ok(s.clone()),
        Some(Value::String(_)) => Err(invalid("must match ^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$")),
        Some(_) => Err(invalid("must be a string")),
    }
}

fn check_known_keys(obj: &Map<String, Value>) -> Result<(), SpecError> {
    if let Some(k) = obj.keys().filter(|k| !TOP_KEYS.contains(&k.as_str())).min() {
        return Err(spec_err(
            "document",
            format!(
                "has key \"{}\", which {SEMANTIC_ID} does not define (keys: {})",
                escape_for_message(k),
                TOP_KEYS.join(", ")
            ),
        ));
    }
    Ok(())
}

/// Every session's tools/list and agent card carry these: bound them at publishing.
fn check_size_limits(
    title: &str,
    description: &str,
    input_schema: &Value,
    output_schema: &Value,
) -> Result<(), SpecError> {
    for (field, len, limit) in [
        ("title", title.len(), MAX_TITLE_BYTES),
        ("description", description.len(), MAX_DESCRIPTION_BYTES),
        ("inputSchema", json_len(input_schema), MAX_SCHEMA_BYTES),
        ("outputSchema", json_len(output_schema), MAX_SCHEMA_BYTES),
    ] {
        if len > limit {
            return Err(spec_err(
                field,
                format!("is {len} bytes; the limit is {limit}"),
            ));
        }
    }
    Ok(())
}

fn parse_access(obj: &Map<String, Value>) -> Result<EffectSpec, SpecError> {
    match obj.get("access") {
        None => Err(spec_err("access", "is missing")),
        Some(v) => parse_effect_spec(v, "access"),
    }
}

fn parse_finish(obj: &Map<String, Value>) -> Result<Option<String>, SpecError> {
    match obj.get("finish") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if valid_finish_name(s) => Ok(Some(s.clone())),
        Some(Value::String(_)) => Err(spec_err(
            "finish",
            "must match ^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$ (the name of a finish function the effect's plugin exports)",
        )),
        Some(_) => Err(spec_err("finish", "must be a string or null")),
    }
}

fn parse_plan(obj: &Map<String, Value>, id: &str) -> Result<PlanSpec, SpecError> {
    match obj.get("plan") {
        None => Err(spec_err("plan", "is missing")),
        Some(v) => PlanSpec::parse(v, id),
    }
}

/// access must name a declared effect: one grant both admits and pays.
fn check_access_is_declared(access: &EffectSpec, declared: &[EffectSpec]) -> Result<(), SpecError> {
    if !declared.iter().any(|d| d.effect == access.effect) {
        return Err(spec_err(
            "access.effect",
            format!(
                "is \"{}\", which declaredEffects does not name",
                access.effect
            ),
        ));
    }
    Ok(())
}

/// A grant admits a call only at its own scope, and the effect is paid at the plan's: access at
/// another scope would hide the tool from every session granted the effect's scope.
fn check_access_scope(access: &EffectSpec, declared: &[EffectSpec]) -> Result<(), SpecError> {
    let scopes: Vec<String> = declared
        .iter()
        .filter(|d| d.effect == access.effect)
        .map(|d| format!("\"{}\"", d.scope))
        .collect();
    if scopes.is_empty()
        || declared
            .iter()
            .any(|d| d.effect == access.effect && d.scope == access.scope)
    {
        return Ok(());
    }
    Err(spec_err(
        "access.scope",
        format!(
            "is \"{}\", but the plan runs {} at scope {}: a session would need a grant at each scope (access admits the call, the effect pays for it); give access the effect's scope",
            access.scope,
            access.effect,
            scopes.join(" or ")
        ),
    ))
}

/// declaredEffects and the plan's reachable effects must be the same set.
fn check_declared_matches_plan(declared: &[EffectSpec], plan: &PlanSpec) -> Result<(), SpecError> {
    let reachable = plan.possible_effects();
    for (field, e) in &reachable {
        if !declared.contains(e) {
            return Err(spec_err(
                field,
                format!(
                    "plans effect {} at scope \"{}\" cost {}, which declaredEffects does not list",
                    e.effect, e.scope, e.cost
                ),
            ));
        }
    }
    for (i, d) in declared.iter().enumerate() {
        if !reachable.iter().any(|(_, e)| e == d) {
            return Err(spec_err(
                &format!("declaredEffects[{i}]"),
                format!(
                    "({} at scope \"{}\" cost {}) is never planned by the plan section; declare exactly the effects the plan may request",
                    d.effect, d.scope, d.cost
                ),
            ));
        }
    }
    Ok(())
}

/// `^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$`, the pattern scopes share.
pub fn valid_id(s: &str) -> bool {
    crate::plan::valid_name(s)
}

fn valid_finish_name(s: &str) -> bool {
    let b = s.as_bytes();
    matches!(b.first(), Some(c) if c.is_ascii_alphanumeric())
        && b.len() <= 64
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'))
}

fn spec_err(field: &str, problem: impl Into<String>) -> SpecError {
    SpecError {
        field: field.to_string(),
        problem: problem.into(),
    }
}

fn non_empty_string(obj: &Map<String, Value>, key: &str) -> Result<String, SpecError> {
    match obj.get(key) {
        None => Err(spec_err(key, "is missing")),
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.clone()),
        Some(Value::String(_)) => Err(spec_err(key, "must not be empty")),
        Some(_) => Err(spec_err(key, "must be a string")),
    }
}

fn schema(obj: &Map<String, Value>, key: &str) -> Result<Value, SpecError> {
    match obj.get(key) {
        None => Err(spec_err(key, "is missing")),
        Some(v @ Value::Object(m)) => {
            if m.get("type") != Some(&Value::String("object".into())) {
                return Err(spec_err(
                    &format!("{key}.type"),
                    "must be \"object\" (tool arguments and results are JSON objects)",
                ));
            }
            Ok(v.clone())
        }
        Some(_) => Err(spec_err(key, "must be a JSON Schema object")),
    }
}

fn parse_declared(v: Option<&Value>) -> Result<Vec<EffectSpec>, SpecError> {
    let items = match v {
        None => return Err(spec_err("declaredEffects", "is missing")),
        Some(Value::Array(items)) => items,
        Some(_) => {
            return Err(spec_err(
                "declaredEffects",
                "must be an array of {effect, scope, cost}",
            ))
        }
    };
    if items.is_empty() {
        return Err(spec_err(
            "declaredEffects",
            "must list at least one effect (a plan always requests one when it does not refuse)",
        ));
    }
    let mut out: Vec<EffectSpec> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let field = format!("declaredEffects[{i}]");
        let e = parse_effect_spec(item, &field)?;
        if out.contains(&e) {
            return Err(spec_err(&field, "repeats an earlier entry"));
        }
        out.push(e);
    }
    Ok(out)
}

/// The published schema must describe exactly the arguments the plan admits.
fn check_input_schema(schema: &Value, plan: &PlanSpec) -> Result<(), SpecError> {
    let m = match schema.as_object() {
        Some(m) => m,
        None => return Err(spec_err("inputSchema", "must be a JSON Schema object")),
    };
    if m.get("additionalProperties") != Some(&Value::Bool(false)) {
        return Err(spec_err(
            "inputSchema.additionalProperties",
            "must be false (the plan refuses every argument it does not declare)",
        ));
    }
    let empty = Map::new();
    let props = match m.get("properties") {
        None => &empty,
        Some(Value::Object(p)) => p,
        Some(_) => return Err(spec_err("inputSchema.properties", "must be an object")),
    };
    for (name, json_type, _) in plan.argument_summary() {
        match props.get(name) {
            None => {
                return Err(spec_err(
                    "inputSchema.properties",
                    format!("lacks \"{name}\", which the plan declares as an argument"),
                ))
            }
            Some(p) => {
                if let Some(t) = p.get("type") {
                    if t != &Value::String(json_type.into()) {
                        return Err(spec_err(
                            &format!("inputSchema.properties.{name}.type"),
                            format!("must be \"{json_type}\" to match the plan's argument type"),
                        ));
                    }
                }
            }
        }
    }
    if let Some(k) = props
        .keys()
        .filter(|k| !plan.argument_summary().any(|(n, _, _)| n == k.as_str()))
        .min()
    {
        return Err(spec_err(
            "inputSchema.properties",
            format!(
                "has \"{}\", which the plan does not declare (the plan would refuse it)",
                escape_for_message(k)
            ),
        ));
    }
    let mut listed: Vec<&str> = Vec::new();
    match m.get("required") {
        None => {}
        Some(Value::Array(items)) => {
            for item in items {
                match item.as_str() {
                    Some(s) => listed.push(s),
                    None => {
                        return Err(spec_err(
                            "inputSchema.required",
                            "must be an array of argument names",
                        ))
                    }
                }
            }
        }
        Some(_) => {
            return Err(spec_err(
                "inputSchema.required",
                "must be an array of argument names",
            ))
        }
    }
    for (name, _, required) in plan.argument_summary() {
        if required != listed.contains(&name) {
            return Err(spec_err(
                "inputSchema.required",
                format!(
                    "must list exactly the plan's required arguments; \"{name}\" is {} in the plan",
                    if required { "required" } else { "optional" }
                ),
            ));
        }
    }
    if let Some(extra) = listed
        .iter()
        .find(|n| !plan.argument_summary().any(|(a, _, _)| a == **n))
    {
        return Err(spec_err(
            "inputSchema.required",
            format!(
                "lists \"{}\", which the plan does not declare",
                escape_for_message(extra)
            ),
        ));
    }
    Ok(())
}

/// JSON Schema's type names: a client that validates results refuses a schema naming another.
const JSON_SCHEMA_TYPES: [&str; 7] = [
    "object", "array", "string", "number", "integer", "boolean", "null",
];

/// Past this depth the output checks read nothing (as the daemon's conformance check).
const MAX_OUTPUT_SCHEMA_DEPTH: usize = 64;

/// `path` with one member of a `properties` object: `.name`, or `["a.b"]` when the name is
/// not a plain word.
fn member_path(path: &str, name: &str) -> String {
    if !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        format!("{path}.{name}")
    } else {
        format!("{path}[{}]", Value::String(name.to_owned()))
    }
}

/// The type name an author most likely meant by `name`, from another language's spelling.
fn meant_type(name: &str) -> Option<&'static str> {
    let lower = name.to_ascii_lowercase();
    if let Some(t) = JSON_SCHEMA_TYPES.iter().find(|t| **t == lower) {
        return Some(t);
    }
    Some(match lower.as_str() {
        "int" | "integr" | "long" | "i64" | "u64" | "int64" | "uint" => "integer",
        "float" | "double" | "decimal" | "f64" | "numeric" | "num" => "number",
        "str" | "text" | "strng" => "string",
        "bool" | "bolean" => "boolean",
        "dict" | "map" | "obj" | "record" => "object",
        "list" | "vec" | "tuple" | "arr" => "array",
        "none" | "nil" => "null",
        _ => return None,
    })
}

fn unknown_type(field: &str, name: &str) -> SpecError {
    let hint = meant_type(name)
        .map(|t| format!("; did you mean {t}?"))
        .unwrap_or_default();
    spec_err(
        field,
        format!(
            "is \"{}\", which is not a JSON Schema type ({}): a client that validates results refuses the schema, and so every call's result{hint}",
            escape_for_message(name),
            JSON_SCHEMA_TYPES.join(", ")
        ),
    )
}

fn check_type_keyword(t: &Value, field: &str) -> Result<(), SpecError> {
    match t {
        Value::String(s) if JSON_SCHEMA_TYPES.contains(&s.as_str()) => Ok(()),
        Value::String(s) => Err(unknown_type(field, s)),
        Value::Array(names) if names.is_empty() => Err(spec_err(
            field,
            "is an empty array; name at least one JSON Schema type",
        )),
        Value::Array(names) => {
            for (i, n) in names.iter().enumerate() {
                match n {
                    Value::String(s) if JSON_SCHEMA_TYPES.contains(&s.as_str()) => {}
                    Value::String(s) => return Err(unknown_type(&format!("{field}[{i}]"), s)),
                    _ => {
                        return Err(spec_err(
                            &format!("{field}[{i}]"),
                            "must be a type name (a string)",
                        ))
                    }
                }
            }
            Ok(())
        }
        _ => Err(spec_err(
            field,
            format!(
                "must be a type name or an array of them ({})",
                JSON_SCHEMA_TYPES.join(", ")
            ),
        )),
    }
}

/// Every `type` the daemon's conformance check reads (at the top, in `properties` and `items`,
/// at every depth) names JSON Schema types, and every schema there is a schema.
fn check_output_types(schema: &Value, field: &str, depth: usize) -> Result<(), SpecError> {
    let m = match schema {
        Value::Bool(_) => return Ok(()),
        Value::Object(m) => m,
        _ => {
            return Err(spec_err(
                field,
                "must be a JSON Schema (an object, or true or false)",
            ))
        }
    };
    if depth > MAX_OUTPUT_SCHEMA_DEPTH {
        return Ok(());
    }
    if let Some(t) = m.get("type") {
        check_type_keyword(t, &format!("{field}.type"))?;
    }
    match m.get("properties") {
        None => {}
        Some(Value::Object(props)) => {
            for (name, sub) in props {
                check_output_types(
                    sub,
                    &member_path(&format!("{field}.properties"), name),
                    depth + 1,
                )?;
            }
        }
        Some(_) => {
            return Err(spec_err(
                &format!("{field}.properties"),
                "must be an object of member schemas",
            ))
        }
    }
    match m.get("items") {
        None => {}
        // Draft-07's tuple form.
        Some(Value::Array(items)) => {
            for (i, sub) in items.iter().enumerate() {
                check_output_types(sub, &format!("{field}.items[{i}]"), depth + 1)?;
            }
        }
        Some(sub) => check_output_types(sub, &format!("{field}.items"), depth + 1)?,
    }
    Ok(())
}

/// Every result carries `world` (an object): a schema that forbids it is one no result meets.
fn check_output_admits_world(schema: &Value) -> Result<(), SpecError> {
    const WHY: &str = "every result carries \"world\" (an object, the call's receipt), so a client that validates results would refuse every one";
    let Some(m) = schema.as_object() else {
        return Ok(());
    };
    let world = m
        .get("properties")
        .and_then(Value::as_object)
        .and_then(|p| p.get("world"));
    match world {
        None => {
            // Only certain without patternProperties, one of which might admit `world`.
            let patterns = m
                .get("patternProperties")
                .and_then(Value::as_object)
                .is_some_and(|p| !p.is_empty());
            if m.get("additionalProperties") == Some(&Value::Bool(false)) && !patterns {
                return Err(spec_err(
                    "outputSchema.additionalProperties",
                    format!("is false with no \"world\" in properties, but {WHY}; add \"world\": {{\"type\": \"object\"}} to properties"),
                ));
            }
        }
        Some(Value::Bool(false)) => {
            return Err(spec_err(
                "outputSchema.properties.world",
                format!("is false, but {WHY}"),
            ))
        }
        Some(w) => {
            let admits_object = match w.get("type") {
                None => true,
                Some(Value::String(t)) => t == "object",
                Some(Value::Array(ts)) => ts.iter().any(|t| t == "object"),
                Some(_) => true,
            };
            if !admits_object {
                return Err(spec_err(
                    "outputSchema.properties.world.type",
                    format!("is {}, but {WHY}; give it \"type\": \"object\"", w["type"]),
                ));
            }
        }
    }
    Ok(())
}
