//! The plan interpreter: `(transition document, arguments) -> world/effect-plan/v1`.
//!
//! A transition's `plan` section is written in a small declarative language,
//! `world/plan-language/v1`. It says which arguments a tool admits, how each is checked, which
//! effect a call requests and what payload that effect receives. There are no expressions, loops
//! or functions: only a fixed set of argument types, value rules, conditional refusals, effect
//! cases and payload fields. [`plan`] is total and deterministic — any JSON value in, one
//! [`Plan`] out; no I/O, no clock, no randomness, no panics.
//!
//! # Example
//!
//! A read-only tool confined to `docs/**`:
//!
//! ```json
//! {
//!   "id": "docs-read",
//!   "title": "Read a document",
//!   "description": "Read one file under docs/ in this episode's worktree.",
//!   "inputSchema": {"type": "object", "additionalProperties": false, "required": ["path"],
//!                   "properties": {"path": {"type": "string", "description": "File under docs/"}}},
//!   "outputSchema": {"type": "object", "required": ["world"],
//!                    "properties": {"ok": {"type": "boolean"}, "refused": {"type": "string"},
//!                                   "world": {"type": "object"}}},
//!   "access": {"effect": "Workspace.Read", "scope": "worktree", "cost": 0},
//!   "declaredEffects": [{"effect": "Workspace.Read", "scope": "worktree", "cost": 1}],
//!   "plan": {
//!     "language": "world/plan-language/v1",
//!     "arguments": [
//!       {"name": "path", "type": "string", "required": true,
//!        "rules": [{"rule": "relative-path"}, {"rule": "path-glob", "globs": ["docs/**"]}]}
//!     ],
//!     "effect": {"effect": "Workspace.Read", "scope": "worktree", "cost": 1},
//!     "payload": {"fields": {"op": {"const": "read"}, "path": {"argument": "path"}}}
//!   }
//! }
//! ```
//!
//! `{"path": "src/main.rs"}` plans nothing and refuses with
//! `path "src/main.rs" refused: it must match one of: docs/**`;
//! `{"path": "docs/a.md"}` plans one `Workspace.Read` effect with payload
//! `{"op": "read", "path": "docs/a.md"}`.
//!
//! # The plan section
//!
//! | key | meaning |
//! |---|---|
//! | `language` | must be `"world/plan-language/v1"` |
//! | `arguments` | argument declarations, in order (the order of the `admits only:` list and of checking) |
//! | `checks` | optional conditional refusals across arguments, in order |
//! | `effect` | `{effect, scope, cost, cases?}`: the effect requested; `cases` pick another effect name (or scope/cost) when conditions hold |
//! | `payload` | `{arguments?, fields?}`: `arguments` = `"all"` or a list of names copied under their own names; `fields` = constants (`{"const": v}`) or argument values (`{"argument": "name"}`) |
//!
//! An argument is `{name, type, required?, default?, typeMessage?, rules?}`. Types: `string`,
//! `string-array`, `string-map` (object of string values), `boolean`, `integer`, `object`.
//! Rules for strings: `relative-path`, `path-glob {globs}`, `max-bytes {limit}`,
//! `min-bytes {limit}`, `no-nul`, `json`, `one-of {values, noun?}`. Rules for string arrays:
//! `max-items {limit}`, `min-items {limit}`, `exclusive {values}`, and `each {item?, rules}`, whose
//! rules (the string rules plus `unique {noun?}`) run item by item. Rules for integers:
//! `min-value {limit}`, `max-value {limit}`. Every rule may carry a `message` template with
//! `{placeholders}` replacing its default refusal text.
//!
//! # Check order
//!
//! 1. arguments not a JSON object → `arguments must be a JSON object`;
//! 2. unknown keys → `unknown argument "<k>"; <tool> admits only: <declared names, in order>`
//!    (the bytewise-smallest unknown key is named);
//! 3. each declared argument, in declaration order: missing required → type → its rules in order
//!    (absent optional arguments take their default, which is not re-checked);
//! 4. `checks`, in order;
//! 5. the first effect case whose conditions all hold (else the base effect); the triple must be
//!    one of the transition's `declaredEffects` exactly;
//! 6. the payload is built.
//!
//! Values quoted in refusals (`{value}`, unknown keys) are rendered JSON-style: `"` `\` and
//! control characters are escaped (`\"`, `\\`, `\n`, `\u0001`, …), everything else is verbatim;
//! a value longer than 256 bytes is cut at a character boundary and ends with `…`.
//!
//! The full reference, with every default refusal text, is `docs/plan-language.md`.

use serde::de::IgnoredAny;
use serde_json::{json, Map, Value};

use crate::transition::{
    parse_cost, parse_effect_name, parse_effect_spec, parse_scope, EffectSpec, Transition,
};

/// Semantic id of the plans this interpreter produces.
pub const PLAN_SEMANTIC_ID: &str = "world/effect-plan/v1";
/// The plan language this interpreter speaks (the `plan.language` of every document).
pub const LANGUAGE_ID: &str = "world/plan-language/v1";
/// Version of this interpreter; bump when any plan for any document could change.
pub const INTERPRETER_VERSION: u32 = 1;
/// The semantics epoch recorded in every log entry.
pub const SEMANTICS_EPOCH: u32 = 1;
/// The id of the (only) effect of a plan.
pub const EFFECT_ID: &str = "e1";
/// Values quoted in refusal messages are cut to this many bytes.
pub const MAX_QUOTED_BYTES: usize = 256;

/// The identity document of this interpreter; its canonical-JSON sha256 is the `interpreter`
/// ref stored in every log entry.
pub fn interpreter_document() -> Value {
    json!({
        "name": "worldd-plan",
        "version": INTERPRETER_VERSION,
        "semanticsEpoch": SEMANTICS_EPOCH,
        "language": LANGUAGE_ID,
    })
}

// ───────────────────────────── plans ─────────────────────────────

/// The one effect of a plan.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedEffect {
    /// Always `"e1"`.
    pub id: String,
    pub effect: String,
    pub scope: String,
    pub cost: u64,
    pub payload: Map<String, Value>,
}

/// The outcome of planning a call.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// Zero effects; the call is refused with this message.
    Refused { message: String },
    /// One effect; `finish` is true when the transition has a finish phase.
    Effect { effect: PlannedEffect, finish: bool },
}

impl Plan {
    /// A refusal plan.
    pub fn refused(message: impl Into<String>) -> Self {
        Plan::Refused {
            message: message.into(),
        }
    }

    /// The refusal message, if this plan refuses.
    pub fn refusal(&self) -> Option<&str> {
        match self {
            Plan::Refused { message } => Some(message),
            Plan::Effect { .. } => None,
        }
    }

    /// The `world/effect-plan/v1` document:
    /// `{"plan":"world/effect-plan/v1","effects":[{"id":"e1","effect":..,"scope":..,"cost":..,"payload":{..}}],"finish":bool,"result":null}`,
    /// or for a refusal
    /// `{"plan":"world/effect-plan/v1","effects":[],"finish":false,"result":{"ok":false,"refused":"<message>"}}`.
    pub fn to_value(&self) -> Value {
        match self {
            Plan::Refused { message } => json!({
                "plan": PLAN_SEMANTIC_ID,
                "effects": [],
                "finish": false,
                "result": {"ok": false, "refused": message},
            }),
            Plan::Effect { effect, finish } => json!({
                "plan": PLAN_SEMANTIC_ID,
                "effects": [{
                    "id": effect.id,
                    "effect": effect.effect,
                    "scope": effect.scope,
                    "cost": effect.cost,
                    "payload": Value::Object(effect.payload.clone()),
                }],
                "finish": finish,
                "result": Value::Null,
            }),
        }
    }
}

/// Plans one call. Total and deterministic: any `args` value yields a [`Plan`]; never panics,
/// no I/O, no clock, no randomness.
pub fn plan(transition: &Transition, args: &Value) -> Plan {
    match transition.plan.evaluate(
        &transition.id,
        &transition.declared_effects,
        transition.finish.is_some(),
        args,
    ) {
        Ok(p) => p,
        Err(message) => Plan::Refused { message },
    }
}

// ───────────────────────────── the parsed language ─────────────────────────────

/// A parsed, validated plan section.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanSpec {
    arguments: Vec<ArgSpec>,
    checks: Vec<Check>,
    effect: EffectChoice,
    payload: PayloadSpec,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ArgType {
    String,
    StringArray,
    StringMap,
    Boolean,
    Integer,
    Object,
}

impl ArgType {
    const ALL: [(&'static str, ArgType); 6] = [
        ("string", ArgType::String),
        ("string-array", ArgType::StringArray),
        ("string-map", ArgType::StringMap),
        ("boolean", ArgType::Boolean),
        ("integer", ArgType::Integer),
        ("object", ArgType::Object),
    ];

    fn name(self) -> &'static str {
        match self {
            ArgType::String => "string",
            ArgType::StringArray => "string-array",
            ArgType::StringMap => "string-map",
            ArgType::Boolean => "boolean",
            ArgType::Integer => "integer",
            ArgType::Object => "object",
        }
    }

    /// The JSON Schema `type` of values of this type.
    fn json_type(self) -> &'static str {
        match self {
            ArgType::String => "string",
            ArgType::StringArray => "array",
            ArgType::StringMap | ArgType::Object => "object",
            ArgType::Boolean => "boolean",
            ArgType::Integer => "integer",
        }
    }

    fn default_type_message(self) -> &'static str {
        match self {
            ArgType::String => "argument \"{argument}\" must be a string",
            ArgType::StringArray => "argument \"{argument}\" must be an array of strings",
            ArgType::StringMap => "argument \"{argument}\" must be an object of string values",
            ArgType::Boolean => "argument \"{argument}\" must be true or false",
            ArgType::Integer => "argument \"{argument}\" must be an integer",
            ArgType::Object => "argument \"{argument}\" must be a JSON object",
        }
    }

    fn rule_names(self) -> &'static [&'static str] {
        match self {
            ArgType::String => &STRING_RULES,
            ArgType::StringArray => &ARRAY_RULES,
            ArgType::Integer => &INTEGER_RULES,
            ArgType::StringMap | ArgType::Boolean | ArgType::Object => &[],
        }
    }
}

const STRING_RULES: [&str; 7] = [
    "relative-path",
    "path-glob",
    "max-bytes",
    "min-bytes",
    "no-nul",
    "json",
    "one-of",
];
const ITEM_RULES: [&str; 8] = [
    "relative-path",
    "path-glob",
    "max-bytes",
    "min-bytes",
    "no-nul",
    "json",
    "one-of",
    "unique",
];
const ARRAY_RULES: [&str; 4] = ["max-items", "min-items", "exclusive", "each"];
const INTEGER_RULES: [&str; 2] = ["min-value", "max-value"];
const ALL_RULES: [&str; 14] = [
    "relative-path",
    "path-glob",
    "max-bytes",
    "min-bytes",
    "no-nul",
    "json",
    "one-of",
    "unique",
    "max-items",
    "min-items",
    "exclusive",
    "each",
    "min-value",
    "max-value",
];

#[derive(Debug, Clone, PartialEq)]
struct ArgSpec {
    name: String,
    ty: ArgType,
    required: bool,
    default: Option<Value>,
    type_message: Template,
    rules: Vec<Rule>,
}

#[derive(Debug, Clone, PartialEq)]
enum Rule {
    Str(StrRule),
    Array {
        check: ArrayCheck,
        message: Template,
    },
    Each {
        item: String,
        rules: Vec<StrRule>,
    },
    Int {
        check: IntCheck,
        message: Template,
    },
}

#[derive(Debug, Clone, PartialEq)]
struct StrRule {
    check: StrCheck,
    message: Template,
}

#[derive(Debug, Clone, PartialEq)]
enum StrCheck {
    RelativePath,
    PathGlob(Vec<String>),
    MaxBytes(u64),
    MinBytes(u64),
    NoNul,
    Json,
    OneOf { values: Vec<String>, noun: String },
    Unique { noun: String },
}

#[derive(Debug, Clone, PartialEq)]
enum ArrayCheck {
    MaxItems(u64),
    MinItems(u64),
    Exclusive(Vec<String>),
}

#[derive(Debug, Clone, PartialEq)]
enum IntCheck {
    Min(i64),
    Max(i64),
}

#[derive(Debug, Clone, PartialEq)]
struct Condition {
    argument: String,
    test: Test,
}

#[derive(Debug, Clone, PartialEq)]
enum Test {
    Equals(Value),
    Contains(String),
    HasKey(String),
    Present(bool),
}

#[derive(Debug, Clone, PartialEq)]
struct Check {
    when: Vec<Condition>,
    message: Template,
}

#[derive(Debug, Clone, PartialEq)]
struct EffectChoice {
    base: EffectSpec,
    cases: Vec<(Vec<Condition>, EffectSpec)>,
}

#[derive(Debug, Clone, PartialEq)]
enum CopyArgs {
    None,
    All,
    Named(Vec<String>),
}

#[derive(Debug, Clone, PartialEq)]
enum FieldSource {
    Const(Value),
    Argument(String),
}

#[derive(Debug, Clone, PartialEq)]
struct PayloadSpec {
    arguments: CopyArgs,
    fields: Vec<(String, FieldSource)>,
}

// ───────────────────────────── message templates ─────────────────────────────

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Var {
    Tool,
    Argument,
    Value,
    Actual,
    Limit,
    Allowed,
    Noun,
    First,
    Second,
    Item,
}

impl Var {
    const ALL: [Var; 10] = [
        Var::Tool,
        Var::Argument,
        Var::Value,
        Var::Actual,
        Var::Limit,
        Var::Allowed,
        Var::Noun,
        Var::First,
        Var::Second,
        Var::Item,
    ];

    fn name(self) -> &'static str {
        match self {
            Var::Tool => "tool",
            Var::Argument => "argument",
            Var::Value => "value",
            Var::Actual => "actual",
            Var::Limit => "limit",
            Var::Allowed => "allowed",
            Var::Noun => "noun",
            Var::First => "first",
            Var::Second => "second",
            Var::Item => "item",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Seg {
    Lit(String),
    Var(Var),
}

/// A refusal text with `{placeholders}`; `{{` and `}}` are literal braces.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Template(Vec<Seg>);

/// The values a template may draw on. Everything is borrowed, so this is `Copy`.
#[derive(Clone, Copy, Default)]
struct Vars<'a> {
    tool: &'a str,
    argument: &'a str,
    value: Option<&'a str>,
    actual: Option<i128>,
    limit: Option<i128>,
    allowed: Option<&'a [String]>,
    noun: Option<&'a str>,
    first: Option<&'a str>,
    second: Option<&'a str>,
    item: Option<&'a str>,
}

impl Template {
    fn parse(text: &str, allowed: &[Var], field: &str) -> SpecResult<Template> {
        let mut segs = Vec::new();
        let mut lit = String::new();
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '{' if chars.peek() == Some(&'{') => {
                    chars.next();
                    lit.push('{');
                }
                '{' => {
                    let mut name = String::new();
                    let mut closed = false;
                    for d in chars.by_ref() {
                        if d == '}' {
                            closed = true;
                            break;
                        }
                        name.push(d);
                    }
                    if !closed {
                        return bad(
                            field,
                            "has an unclosed \"{\" (write \"{{\" for a literal brace)",
                        );
                    }
                    let var = match Var::ALL
                        .iter()
                        .find(|v| v.name() == name && allowed.contains(v))
                    {
                        Some(v) => *v,
                        None => {
                            let names: Vec<String> = allowed
                                .iter()
                                .map(|v| format!("{{{}}}", v.name()))
                                .collect();
                            return bad(
                                field,
                                format!(
                                    "uses placeholder \"{{{}}}\", which is not available here (available: {})",
                                    escape_for_message(&name),
                                    names.join(", ")
                                ),
                            );
                        }
                    };
                    if !lit.is_empty() {
                        segs.push(Seg::Lit(std::mem::take(&mut lit)));
                    }
                    segs.push(Seg::Var(var));
                }
                '}' if chars.peek() == Some(&'}') => {
                    chars.next();
                    lit.push('}');
                }
                '}' => {
                    return bad(field, "has a lone \"}\" (write \"}}\" for a literal brace)");
                }
                c => lit.push(c),
            }
        }
        if !lit.is_empty() {
            segs.push(Seg::Lit(lit));
        }
        Ok(Template(segs))
    }

    fn render(&self, vars: &Vars<'_>) -> String {
        let mut out = String::new();
        for seg in &self.0 {
            match seg {
                Seg::Lit(s) => out.push_str(s),
                Seg::Var(v) => match v {
                    Var::Tool => out.push_str(vars.tool),
                    Var::Argument => out.push_str(vars.argument),
                    Var::Value => out.push_str(&escape_for_message(vars.value.unwrap_or(""))),
                    Var::Actual => {
                        if let Some(n) = vars.actual {
                            out.push_str(&n.to_string());
                        }
                    }
                    Var::Limit => {
                        if let Some(n) = vars.limit {
                            out.push_str(&n.to_string());
                        }
                    }
                    Var::Allowed => out.push_str(&vars.allowed.unwrap_or(&[]).join(", ")),
                    Var::Noun => out.push_str(vars.noun.unwrap_or("")),
                    Var::First => out.push_str(vars.first.unwrap_or("")),
                    Var::Second => out.push_str(vars.second.unwrap_or("")),
                    Var::Item => out.push_str(vars.item.unwrap_or("")),
                },
            }
        }
        out
    }
}

/// Renders a caller-supplied text for quoting inside a refusal: JSON-style escapes for `"`, `\`
/// and control characters; texts over [`MAX_QUOTED_BYTES`] bytes are cut at a character
/// boundary and end with `…`.
pub fn escape_for_message(s: &str) -> String {
    let mut out = String::with_capacity(s.len().min(MAX_QUOTED_BYTES) + 2);
    for (i, c) in s.char_indices() {
        if i + c.len_utf8() > MAX_QUOTED_BYTES {
            out.push('…');
            break;
        }
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

// ───────────────────────────── parsing the plan section ─────────────────────────────

/// A problem in a plan section: the JSON path of the field and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError {
    pub field: String,
    pub problem: String,
}

type SpecResult<T> = Result<T, SpecError>;

fn bad<T>(field: &str, problem: impl Into<String>) -> SpecResult<T> {
    Err(SpecError {
        field: field.to_string(),
        problem: problem.into(),
    })
}

fn object<'a>(v: &'a Value, field: &str, what: &str) -> SpecResult<&'a Map<String, Value>> {
    match v.as_object() {
        Some(m) => Ok(m),
        None => bad(field, format!("must be {what}")),
    }
}

/// Refuses any key outside `allowed` (naming the bytewise-smallest offender).
fn only_keys(m: &Map<String, Value>, allowed: &[&str], field: &str) -> SpecResult<()> {
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

fn string_field<'a>(m: &'a Map<String, Value>, key: &str, field: &str) -> SpecResult<&'a str> {
    match m.get(key) {
        None => bad(&format!("{field}.{key}"), "is missing"),
        Some(Value::String(s)) => Ok(s),
        Some(_) => bad(&format!("{field}.{key}"), "must be a string"),
    }
}

fn u64_field(m: &Map<String, Value>, key: &str, field: &str) -> SpecResult<u64> {
    match m.get(key) {
        None => bad(&format!("{field}.{key}"), "is missing"),
        Some(v) => match v.as_u64() {
            Some(n) => Ok(n),
            None => bad(&format!("{field}.{key}"), "must be a non-negative integer"),
        },
    }
}

fn i64_field(m: &Map<String, Value>, key: &str, field: &str) -> SpecResult<i64> {
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
fn string_list(
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

fn noun_field(m: &Map<String, Value>, field: &str) -> SpecResult<String> {
    match m.get("noun") {
        None => Ok("value".to_string()),
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.clone()),
        Some(_) => bad(&format!("{field}.noun"), "must be a non-empty string"),
    }
}

fn message_field(
    m: &Map<String, Value>,
    default: &str,
    allowed: &[Var],
    field: &str,
) -> SpecResult<Template> {
    match m.get("message") {
        None => Template::parse(default, allowed, field),
        Some(Value::String(s)) if !s.trim().is_empty() => {
            Template::parse(s, allowed, &format!("{field}.message"))
        }
        Some(_) => bad(&format!("{field}.message"), "must be a non-empty string"),
    }
}

fn valid_argument_name(s: &str) -> bool {
    let b = s.as_bytes();
    matches!(b.first(), Some(c) if c.is_ascii_alphanumeric() || *c == b'_')
        && b.len() <= 64
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.'))
}

const PLAN_KEYS: [&str; 5] = ["language", "arguments", "checks", "effect", "payload"];
/// At most this many arguments per tool.
const MAX_ARGUMENTS: usize = 64;

impl PlanSpec {
    /// Parses and validates a plan section. `tool` is the transition id (used to check
    /// defaults against their own rules).
    pub(crate) fn parse(section: &Value, tool: &str) -> SpecResult<PlanSpec> {
        let m = object(section, "plan", "an object (the plan section)")?;
        only_keys(m, &PLAN_KEYS, "plan")?;
        match m.get("language") {
            None => {
                return bad(
                    "plan.language",
                    format!("is missing (use \"{LANGUAGE_ID}\")"),
                )
            }
            Some(Value::String(s)) if s == LANGUAGE_ID => {}
            Some(Value::String(s)) => {
                return bad(
                    "plan.language",
                    format!(
                        "is \"{}\"; this interpreter speaks only {LANGUAGE_ID}",
                        escape_for_message(s)
                    ),
                )
            }
            Some(_) => return bad("plan.language", "must be a string"),
        }

        let arguments = match m.get("arguments") {
            None => Vec::new(),
            Some(Value::Array(items)) => {
                if items.len() > MAX_ARGUMENTS {
                    return bad(
                        "plan.arguments",
                        format!(
                            "declares {} arguments; the limit is {MAX_ARGUMENTS}",
                            items.len()
                        ),
                    );
                }
                let mut out: Vec<ArgSpec> = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    let field = format!("plan.arguments[{i}]");
                    let arg = parse_argument(item, &field, tool)?;
                    if out.iter().any(|a| a.name == arg.name) {
                        return bad(
                            &format!("{field}.name"),
                            format!("declares \"{}\" a second time", arg.name),
                        );
                    }
                    out.push(arg);
                }
                out
            }
            Some(_) => {
                return bad(
                    "plan.arguments",
                    "must be an array of argument declarations",
                )
            }
        };

        let checks = match m.get("checks") {
            None => Vec::new(),
            Some(Value::Array(items)) => {
                let mut out = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    out.push(parse_check(item, &format!("plan.checks[{i}]"), &arguments)?);
                }
                out
            }
            Some(_) => return bad("plan.checks", "must be an array of checks"),
        };

        let effect = match m.get("effect") {
            None => return bad("plan.effect", "is missing"),
            Some(v) => parse_effect_choice(v, &arguments)?,
        };

        let payload = match m.get("payload") {
            None => PayloadSpec {
                arguments: CopyArgs::None,
                fields: Vec::new(),
            },
            Some(v) => parse_payload(v, &arguments)?,
        };

        Ok(PlanSpec {
            arguments,
            checks,
            effect,
            payload,
        })
    }

    /// The declared argument names, in declaration order.
    pub fn argument_names(&self) -> impl Iterator<Item = &str> {
        self.arguments.iter().map(|a| a.name.as_str())
    }

    /// `(name, JSON Schema type, required)` per declared argument, in declaration order.
    pub fn argument_summary(&self) -> impl Iterator<Item = (&str, &'static str, bool)> {
        self.arguments
            .iter()
            .map(|a| (a.name.as_str(), a.ty.json_type(), a.required))
    }

    /// Every effect triple this plan can request, each with the field that names it.
    pub fn possible_effects(&self) -> Vec<(String, EffectSpec)> {
        let mut out = vec![("plan.effect".to_string(), self.effect.base.clone())];
        for (i, (_, e)) in self.effect.cases.iter().enumerate() {
            if !out.iter().any(|(_, o)| o == e) {
                out.push((format!("plan.effect.cases[{i}]"), e.clone()));
            }
        }
        out
    }

    /// Runs the language on one call's arguments. `Err` is a refusal message.
    fn evaluate(
        &self,
        tool: &str,
        declared: &[EffectSpec],
        finish: bool,
        args: &Value,
    ) -> Result<Plan, String> {
        let given = match args.as_object() {
            Some(m) => m,
            None => return Err("arguments must be a JSON object".to_string()),
        };

        // 2. unknown keys: name the bytewise-smallest one.
        if let Some(k) = given
            .keys()
            .filter(|k| !self.arguments.iter().any(|a| &a.name == *k))
            .min()
        {
            let k = escape_for_message(k);
            return Err(if self.arguments.is_empty() {
                format!("unknown argument \"{k}\"; {tool} admits no arguments")
            } else {
                let names: Vec<&str> = self.argument_names().collect();
                format!(
                    "unknown argument \"{k}\"; {tool} admits only: {}",
                    names.join(", ")
                )
            });
        }

        // 3. each declared argument in order; collect checked values with defaults applied.
        let mut values = Map::new();
        for arg in &self.arguments {
            match given.get(&arg.name) {
                Some(v) => {
                    arg.check(tool, v)?;
                    values.insert(arg.name.clone(), v.clone());
                }
                None if arg.required => {
                    return Err(format!("missing required argument \"{}\"", arg.name))
                }
                None => {
                    if let Some(d) = &arg.default {
                        values.insert(arg.name.clone(), d.clone());
                    }
                }
            }
        }

        // 4. cross-argument checks.
        for check in &self.checks {
            if all_hold(&check.when, &values) {
                return Err(check.message.render(&Vars {
                    tool,
                    ..Vars::default()
                }));
            }
        }

        // 5. the effect, verified against the declaration.
        let chosen = self
            .effect
            .cases
            .iter()
            .find(|(when, _)| all_hold(when, &values))
            .map(|(_, e)| e)
            .unwrap_or(&self.effect.base);
        if !declared.contains(chosen) {
            return Err(format!(
                "transition \"{tool}\" is faulty: its plan chose effect {} at scope \"{}\" cost {}, which its declaredEffects do not list",
                chosen.effect, chosen.scope, chosen.cost
            ));
        }

        // 6. the payload.
        let mut payload = Map::new();
        match &self.payload.arguments {
            CopyArgs::None => {}
            CopyArgs::All => {
                for arg in &self.arguments {
                    if let Some(v) = values.get(&arg.name) {
                        payload.insert(arg.name.clone(), v.clone());
                    }
                }
            }
            CopyArgs::Named(names) => {
                for name in names {
                    if let Some(v) = values.get(name) {
                        payload.insert(name.clone(), v.clone());
                    }
                }
            }
        }
        for (key, source) in &self.payload.fields {
            match source {
                FieldSource::Const(v) => {
                    payload.insert(key.clone(), v.clone());
                }
                FieldSource::Argument(name) => {
                    if let Some(v) = values.get(name) {
                        payload.insert(key.clone(), v.clone());
                    }
                }
            }
        }

        Ok(Plan::Effect {
            effect: PlannedEffect {
                id: EFFECT_ID.to_string(),
                effect: chosen.effect.clone(),
                scope: chosen.scope.clone(),
                cost: chosen.cost,
                payload,
            },
            finish,
        })
    }
}

const ARG_KEYS: [&str; 6] = [
    "name",
    "type",
    "required",
    "default",
    "typeMessage",
    "rules",
];

fn parse_argument(v: &Value, field: &str, tool: &str) -> SpecResult<ArgSpec> {
    let m = object(v, field, "an argument declaration {name, type, …}")?;
    only_keys(m, &ARG_KEYS, field)?;
    let name = string_field(m, "name", field)?;
    if !valid_argument_name(name) {
        return bad(
            &format!("{field}.name"),
            "must match ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$",
        );
    }
    let type_name = string_field(m, "type", field)?;
    let ty = match ArgType::ALL.iter().find(|(n, _)| *n == type_name) {
        Some((_, t)) => *t,
        None => {
            let names: Vec<&str> = ArgType::ALL.iter().map(|(n, _)| *n).collect();
            return bad(
                &format!("{field}.type"),
                format!(
                    "is \"{}\", which {LANGUAGE_ID} does not define (types: {})",
                    escape_for_message(type_name),
                    names.join(", ")
                ),
            );
        }
    };
    let required = match m.get("required") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return bad(&format!("{field}.required"), "must be true or false"),
    };
    let type_message = match m.get("typeMessage") {
        None => Template::parse(
            ty.default_type_message(),
            &[Var::Tool, Var::Argument],
            field,
        )?,
        Some(Value::String(s)) if !s.trim().is_empty() => Template::parse(
            s,
            &[Var::Tool, Var::Argument],
            &format!("{field}.typeMessage"),
        )?,
        Some(_) => {
            return bad(
                &format!("{field}.typeMessage"),
                "must be a non-empty string",
            )
        }
    };
    let rules = match m.get("rules") {
        None => Vec::new(),
        Some(Value::Array(items)) => parse_rules(items, ty, &format!("{field}.rules"), false)?,
        Some(_) => return bad(&format!("{field}.rules"), "must be an array of rules"),
    };
    let mut arg = ArgSpec {
        name: name.to_string(),
        ty,
        required,
        default: None,
        type_message,
        rules,
    };
    if let Some(d) = m.get("default") {
        if required {
            return bad(
                &format!("{field}.default"),
                "is given for a required argument; a default applies only to optional ones",
            );
        }
        if let Err(why) = arg.check(tool, d) {
            return bad(
                &format!("{field}.default"),
                format!("is refused by the argument's own type and rules: {why}"),
            );
        }
        arg.default = Some(d.clone());
    }
    Ok(arg)
}

/// Parses a rule list for a value of type `ty` (`in_item`: the rules of an `each`).
fn parse_rules(items: &[Value], ty: ArgType, field: &str, in_item: bool) -> SpecResult<Vec<Rule>> {
    let mut out = Vec::with_capacity(items.len());
    let mut seen_relative_path = false;
    for (i, item) in items.iter().enumerate() {
        let f = format!("{field}[{i}]");
        let m = object(item, &f, "a rule object {\"rule\": …}")?;
        let kind = string_field(m, "rule", &f)?;
        let applicable: &[&str] = if in_item {
            &ITEM_RULES
        } else {
            ty.rule_names()
        };
        let context = if in_item {
            "inside \"each\"".to_string()
        } else {
            format!("for a {} argument", ty.name())
        };
        if !applicable.contains(&kind) {
            let listed = if applicable.is_empty() {
                "none".to_string()
            } else {
                applicable.join(", ")
            };
            let what = if ALL_RULES.contains(&kind) {
                format!("is \"{kind}\", which does not apply {context} (rules {context}: {listed})")
            } else {
                format!(
                    "is \"{}\", which {LANGUAGE_ID} does not define (rules {context}: {listed})",
                    escape_for_message(kind)
                )
            };
            return bad(&format!("{f}.rule"), what);
        }
        match kind {
            "relative-path" | "path-glob" | "max-bytes" | "min-bytes" | "no-nul" | "json"
            | "one-of" | "unique" => {
                if kind == "path-glob" && !seen_relative_path {
                    return bad(
                        &f,
                        "is a path-glob rule with no relative-path rule before it in the same list; globs match text, so the relative-path rule must refuse \"..\" segments first",
                    );
                }
                if kind == "relative-path" {
                    seen_relative_path = true;
                }
                out.push(Rule::Str(parse_str_rule(m, kind, in_item, &f)?));
            }
            "max-items" | "min-items" => {
                only_keys(m, &["rule", "limit", "message"], &f)?;
                let limit = u64_field(m, "limit", &f)?;
                let (check, default) = if kind == "max-items" {
                    (
                        ArrayCheck::MaxItems(limit),
                        "argument \"{argument}\" has {actual} items; the limit is {limit}",
                    )
                } else {
                    (
                        ArrayCheck::MinItems(limit),
                        "argument \"{argument}\" has {actual} items; it must have at least {limit}",
                    )
                };
                let message = message_field(
                    m,
                    default,
                    &[Var::Tool, Var::Argument, Var::Actual, Var::Limit],
                    &f,
                )?;
                out.push(Rule::Array { check, message });
            }
            "exclusive" => {
                only_keys(m, &["rule", "values", "message"], &f)?;
                let values = string_list(m, "values", &f, 2)?;
                let message = message_field(
                    m,
                    "{argument} names both {first} and {second}; at most one of them is allowed",
                    &[
                        Var::Tool,
                        Var::Argument,
                        Var::First,
                        Var::Second,
                        Var::Allowed,
                    ],
                    &f,
                )?;
                out.push(Rule::Array {
                    check: ArrayCheck::Exclusive(values),
                    message,
                });
            }
            "each" => {
                only_keys(m, &["rule", "item", "rules"], &f)?;
                let item = match m.get("item") {
                    None => None,
                    Some(Value::String(s)) if !s.trim().is_empty() => Some(s.clone()),
                    Some(_) => return bad(&format!("{f}.item"), "must be a non-empty string"),
                };
                let rules = match m.get("rules") {
                    Some(Value::Array(rs)) => parse_rules(rs, ty, &format!("{f}.rules"), true)?,
                    None => return bad(&format!("{f}.rules"), "is missing"),
                    Some(_) => return bad(&format!("{f}.rules"), "must be an array of rules"),
                };
                let rules = rules
                    .into_iter()
                    .filter_map(|r| match r {
                        Rule::Str(s) => Some(s),
                        _ => None,
                    })
                    .collect();
                // An empty phrase means the default, `an item of "<argument>"`, built at
                // evaluation time.
                out.push(Rule::Each {
                    item: item.unwrap_or_default(),
                    rules,
                });
            }
            "min-value" | "max-value" => {
                only_keys(m, &["rule", "limit", "message"], &f)?;
                let limit = i64_field(m, "limit", &f)?;
                let (check, default) = if kind == "min-value" {
                    (
                        IntCheck::Min(limit),
                        "argument \"{argument}\" is {actual}; it must be at least {limit}",
                    )
                } else {
                    (
                        IntCheck::Max(limit),
                        "argument \"{argument}\" is {actual}; the limit is {limit}",
                    )
                };
                let message = message_field(
                    m,
                    default,
                    &[Var::Tool, Var::Argument, Var::Actual, Var::Limit],
                    &f,
                )?;
                out.push(Rule::Int { check, message });
            }
            _ => {
                return bad(
                    &format!("{f}.rule"),
                    format!(
                        "is \"{}\", which {LANGUAGE_ID} does not define",
                        escape_for_message(kind)
                    ),
                )
            }
        }
    }
    Ok(out)
}

fn parse_str_rule(
    m: &Map<String, Value>,
    kind: &str,
    in_item: bool,
    f: &str,
) -> SpecResult<StrRule> {
    let mut base = vec![Var::Tool, Var::Argument];
    if in_item {
        base.push(Var::Item);
    }
    let with = |extra: &[Var]| -> Vec<Var> {
        let mut v = base.clone();
        v.extend_from_slice(extra);
        v
    };
    let (check, default, vars): (StrCheck, &str, Vec<Var>) = match kind {
        "relative-path" => {
            only_keys(m, &["rule", "message"], f)?;
            (
                StrCheck::RelativePath,
                "path \"{value}\" refused: it must be relative and non-empty, with no \"..\" segment and no leading \"-\"",
                with(&[Var::Value]),
            )
        }
        "path-glob" => {
            only_keys(m, &["rule", "globs", "message"], f)?;
            let globs = string_list(m, "globs", f, 1)?;
            for (i, g) in globs.iter().enumerate() {
                if g.len() > 256 {
                    return bad(&format!("{f}.globs[{i}]"), "is longer than 256 bytes");
                }
                if let Err(why) = crate::glob::check(g) {
                    return bad(&format!("{f}.globs[{i}]"), why);
                }
            }
            (
                StrCheck::PathGlob(globs),
                "path \"{value}\" refused: it must match one of: {allowed}",
                with(&[Var::Value, Var::Allowed]),
            )
        }
        "max-bytes" | "min-bytes" => {
            only_keys(m, &["rule", "limit", "message"], f)?;
            let limit = u64_field(m, "limit", f)?;
            let vars = with(&[Var::Value, Var::Actual, Var::Limit]);
            match (kind, in_item) {
                ("max-bytes", false) => (
                    StrCheck::MaxBytes(limit),
                    "argument \"{argument}\" is {actual} bytes; the limit is {limit}",
                    vars,
                ),
                ("max-bytes", true) => (
                    StrCheck::MaxBytes(limit),
                    "{item} is {actual} bytes; the limit is {limit}",
                    vars,
                ),
                (_, false) => (
                    StrCheck::MinBytes(limit),
                    "argument \"{argument}\" is {actual} bytes; it must be at least {limit}",
                    vars,
                ),
                (_, true) => (
                    StrCheck::MinBytes(limit),
                    "{item} is {actual} bytes; it must be at least {limit}",
                    vars,
                ),
            }
        }
        "no-nul" => {
            only_keys(m, &["rule", "message"], f)?;
            (
                StrCheck::NoNul,
                if in_item {
                    "{item} contains a NUL byte"
                } else {
                    "argument \"{argument}\" contains a NUL byte"
                },
                with(&[]),
            )
        }
        "json" => {
            only_keys(m, &["rule", "message"], f)?;
            (
                StrCheck::Json,
                if in_item {
                    "{item} must be a string holding JSON"
                } else {
                    "argument \"{argument}\" must be a string holding JSON"
                },
                with(&[]),
            )
        }
        "one-of" => {
            only_keys(m, &["rule", "values", "noun", "message"], f)?;
            let values = string_list(m, "values", f, 1)?;
            let noun = noun_field(m, f)?;
            (
                StrCheck::OneOf { values, noun },
                "unknown {noun} \"{value}\"; {argument} admits only: {allowed}",
                with(&[Var::Value, Var::Noun, Var::Allowed]),
            )
        }
        _ => {
            // "unique" (only reachable inside "each").
            only_keys(m, &["rule", "noun", "message"], f)?;
            let noun = noun_field(m, f)?;
            (
                StrCheck::Unique { noun },
                "{noun} \"{value}\" is listed twice",
                with(&[Var::Value, Var::Noun]),
            )
        }
    };
    let message = message_field(m, default, &vars, f)?;
    Ok(StrRule { check, message })
}

const CONDITION_TESTS: [&str; 4] = ["equals", "contains", "hasKey", "present"];

fn parse_conditions(
    v: Option<&Value>,
    field: &str,
    args: &[ArgSpec],
) -> SpecResult<Vec<Condition>> {
    let items = match v {
        None => return bad(field, "is missing"),
        Some(Value::Array(items)) if !items.is_empty() => items,
        Some(_) => return bad(field, "must be a non-empty array of conditions"),
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let f = format!("{field}[{i}]");
        let m = object(item, &f, "a condition {\"argument\": …, <test>: …}")?;
        let mut keys = vec!["argument"];
        keys.extend_from_slice(&CONDITION_TESTS);
        only_keys(m, &keys, &f)?;
        let name = string_field(m, "argument", &f)?;
        let arg = match args.iter().find(|a| a.name == name) {
            Some(a) => a,
            None => {
                return bad(
                    &format!("{f}.argument"),
                    format!(
                        "names \"{}\", which is not a declared argument",
                        escape_for_message(name)
                    ),
                )
            }
        };
        let tests: Vec<&str> = CONDITION_TESTS
            .iter()
            .copied()
            .filter(|t| m.contains_key(*t))
            .collect();
        let test = match tests.as_slice() {
            [t] => *t,
            _ => {
                return bad(
                    &f,
                    format!(
                        "must carry exactly one test of: {}",
                        CONDITION_TESTS.join(", ")
                    ),
                )
            }
        };
        let test = match (test, m.get(test)) {
            ("equals", Some(v)) => Test::Equals(v.clone()),
            ("contains", Some(Value::String(s))) => {
                if arg.ty != ArgType::StringArray {
                    return bad(
                        &format!("{f}.contains"),
                        "applies only to a string-array argument",
                    );
                }
                Test::Contains(s.clone())
            }
            ("hasKey", Some(Value::String(s))) => {
                if !matches!(arg.ty, ArgType::StringMap | ArgType::Object) {
                    return bad(
                        &format!("{f}.hasKey"),
                        "applies only to a string-map or object argument",
                    );
                }
                Test::HasKey(s.clone())
            }
            ("present", Some(Value::Bool(b))) => Test::Present(*b),
            ("present", _) => return bad(&format!("{f}.present"), "must be true or false"),
            (t, _) => return bad(&format!("{f}.{t}"), "must be a string"),
        };
        out.push(Condition {
            argument: name.to_string(),
            test,
        });
    }
    Ok(out)
}

fn parse_check(v: &Value, field: &str, args: &[ArgSpec]) -> SpecResult<Check> {
    let m = object(v, field, "a check {\"check\": \"refuse\", …}")?;
    let kind = string_field(m, "check", field)?;
    if kind != "refuse" {
        return bad(
            &format!("{field}.check"),
            format!(
                "is \"{}\", which {LANGUAGE_ID} does not define (checks: refuse)",
                escape_for_message(kind)
            ),
        );
    }
    only_keys(m, &["check", "when", "message"], field)?;
    let when = parse_conditions(m.get("when"), &format!("{field}.when"), args)?;
    let message = match m.get("message") {
        Some(Value::String(s)) if !s.trim().is_empty() => {
            Template::parse(s, &[Var::Tool], &format!("{field}.message"))?
        }
        None => return bad(&format!("{field}.message"), "is missing"),
        Some(_) => return bad(&format!("{field}.message"), "must be a non-empty string"),
    };
    Ok(Check { when, message })
}

fn parse_effect_choice(v: &Value, args: &[ArgSpec]) -> SpecResult<EffectChoice> {
    let m = object(v, "plan.effect", "an object {effect, scope, cost, cases?}")?;
    only_keys(m, &["effect", "scope", "cost", "cases"], "plan.effect")?;
    let mut triple = Map::new();
    for k in ["effect", "scope", "cost"] {
        if let Some(x) = m.get(k) {
            triple.insert(k.to_string(), x.clone());
        }
    }
    let base = parse_effect_spec(&Value::Object(triple), "plan.effect")?;
    let mut cases = Vec::new();
    match m.get("cases") {
        None => {}
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                let f = format!("plan.effect.cases[{i}]");
                let c = object(item, &f, "a case {when, effect, scope?, cost?}")?;
                only_keys(c, &["when", "effect", "scope", "cost"], &f)?;
                let when = parse_conditions(c.get("when"), &format!("{f}.when"), args)?;
                let effect = parse_effect_name(c.get("effect"), &format!("{f}.effect"))?;
                let scope = match c.get("scope") {
                    None => base.scope.clone(),
                    s => parse_scope(s, &format!("{f}.scope"))?,
                };
                let cost = match c.get("cost") {
                    None => base.cost,
                    s => parse_cost(s, &format!("{f}.cost"))?,
                };
                cases.push((
                    when,
                    EffectSpec {
                        effect,
                        scope,
                        cost,
                    },
                ));
            }
        }
        Some(_) => return bad("plan.effect.cases", "must be an array of cases"),
    }
    Ok(EffectChoice { base, cases })
}

fn parse_payload(v: &Value, args: &[ArgSpec]) -> SpecResult<PayloadSpec> {
    let m = object(v, "plan.payload", "an object {arguments?, fields?}")?;
    only_keys(m, &["arguments", "fields"], "plan.payload")?;
    let declared = |n: &str| args.iter().any(|a| a.name == n);
    let arguments = match m.get("arguments") {
        None => CopyArgs::None,
        Some(Value::String(s)) if s == "all" => CopyArgs::All,
        Some(Value::Array(items)) => {
            let mut names: Vec<String> = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                let f = format!("plan.payload.arguments[{i}]");
                match item.as_str() {
                    Some(n) if declared(n) && !names.iter().any(|x| x == n) => {
                        names.push(n.to_string())
                    }
                    Some(n) if declared(n) => return bad(&f, "repeats an earlier name"),
                    Some(n) => {
                        return bad(
                            &f,
                            format!(
                                "names \"{}\", which is not a declared argument",
                                escape_for_message(n)
                            ),
                        )
                    }
                    None => return bad(&f, "must be a string"),
                }
            }
            CopyArgs::Named(names)
        }
        Some(_) => {
            return bad(
                "plan.payload.arguments",
                "must be \"all\" or an array of argument names",
            )
        }
    };
    let copied = |k: &str| match &arguments {
        CopyArgs::None => false,
        CopyArgs::All => declared(k),
        CopyArgs::Named(ns) => ns.iter().any(|n| n == k),
    };
    let mut fields = Vec::new();
    match m.get("fields") {
        None => {}
        Some(Value::Object(fs)) => {
            for (key, src) in fs {
                let f = format!("plan.payload.fields.{key}");
                if copied(key) {
                    return bad(
                        &f,
                        "collides with an argument that plan.payload.arguments already copies",
                    );
                }
                let s = object(src, &f, "{\"const\": <value>} or {\"argument\": <name>}")?;
                let source = match (s.get("const"), s.get("argument"), s.len()) {
                    (Some(c), None, 1) => FieldSource::Const(c.clone()),
                    (None, Some(Value::String(n)), 1) if declared(n) => {
                        FieldSource::Argument(n.clone())
                    }
                    (None, Some(Value::String(n)), 1) => {
                        return bad(
                            &format!("{f}.argument"),
                            format!(
                                "names \"{}\", which is not a declared argument",
                                escape_for_message(n)
                            ),
                        )
                    }
                    _ => {
                        return bad(
                            &f,
                            "must be exactly {\"const\": <value>} or {\"argument\": <name>}",
                        )
                    }
                };
                fields.push((key.clone(), source));
            }
        }
        Some(_) => return bad("plan.payload.fields", "must be an object"),
    }
    Ok(PayloadSpec { arguments, fields })
}

// ───────────────────────────── evaluation ─────────────────────────────

impl ArgSpec {
    /// Type, then rules in order. `Err` is the refusal text.
    fn check(&self, tool: &str, v: &Value) -> Result<(), String> {
        let base = Vars {
            tool,
            argument: &self.name,
            ..Vars::default()
        };
        let type_error = || self.type_message.render(&base);
        match self.ty {
            ArgType::String => {
                let s = v.as_str().ok_or_else(type_error)?;
                for rule in &self.rules {
                    if let Rule::Str(r) = rule {
                        r.apply(s, &[], base)?;
                    }
                }
            }
            ArgType::StringArray => {
                let items: Vec<&str> = v
                    .as_array()
                    .and_then(|a| a.iter().map(Value::as_str).collect::<Option<Vec<_>>>())
                    .ok_or_else(type_error)?;
                for rule in &self.rules {
                    match rule {
                        Rule::Array { check, message } => {
                            check_array(check, message, &items, base)?
                        }
                        Rule::Each { item, rules } => {
                            let default_item;
                            let phrase = if item.is_empty() {
                                default_item = format!("an item of \"{}\"", self.name);
                                default_item.as_str()
                            } else {
                                item.as_str()
                            };
                            let vars = Vars {
                                item: Some(phrase),
                                ..base
                            };
                            for (i, s) in items.iter().enumerate() {
                                let prior = items.get(..i).unwrap_or(&[]);
                                for r in rules {
                                    r.apply(s, prior, vars)?;
                                }
                            }
                        }
                        Rule::Str(_) | Rule::Int { .. } => {}
                    }
                }
            }
            ArgType::StringMap => {
                let ok = v
                    .as_object()
                    .is_some_and(|m| m.values().all(Value::is_string));
                if !ok {
                    return Err(type_error());
                }
            }
            ArgType::Boolean => {
                if !v.is_boolean() {
                    return Err(type_error());
                }
            }
            ArgType::Integer => {
                let n: i128 = match (v.as_i64(), v.as_u64()) {
                    (Some(n), _) => i128::from(n),
                    (None, Some(n)) => i128::from(n),
                    (None, None) => return Err(type_error()),
                };
                for rule in &self.rules {
                    if let Rule::Int { check, message } = rule {
                        let (fails, limit) = match check {
                            IntCheck::Min(l) => (n < i128::from(*l), *l),
                            IntCheck::Max(l) => (n > i128::from(*l), *l),
                        };
                        if fails {
                            return Err(message.render(&Vars {
                                actual: Some(n),
                                limit: Some(i128::from(limit)),
                                ..base
                            }));
                        }
                    }
                }
            }
            ArgType::Object => {
                if !v.is_object() {
                    return Err(type_error());
                }
            }
        }
        Ok(())
    }
}

fn check_array(
    check: &ArrayCheck,
    message: &Template,
    items: &[&str],
    base: Vars<'_>,
) -> Result<(), String> {
    let n = items.len() as u64;
    match check {
        ArrayCheck::MaxItems(l) if n > *l => Err(message.render(&Vars {
            actual: Some(i128::from(n)),
            limit: Some(i128::from(*l)),
            ..base
        })),
        ArrayCheck::MinItems(l) if n < *l => Err(message.render(&Vars {
            actual: Some(i128::from(n)),
            limit: Some(i128::from(*l)),
            ..base
        })),
        ArrayCheck::Exclusive(values) => {
            let mut present = values.iter().filter(|v| items.contains(&v.as_str()));
            match (present.next(), present.next()) {
                (Some(first), Some(second)) => Err(message.render(&Vars {
                    first: Some(first),
                    second: Some(second),
                    allowed: Some(values),
                    ..base
                })),
                _ => Ok(()),
            }
        }
        _ => Ok(()),
    }
}

impl StrRule {
    /// Checks one string (`prior`: earlier items of the same array, for `unique`).
    fn apply(&self, s: &str, prior: &[&str], base: Vars<'_>) -> Result<(), String> {
        let vars = Vars {
            value: Some(s),
            ..base
        };
        let fail = |vars: Vars<'_>| Err(self.message.render(&vars));
        match &self.check {
            StrCheck::RelativePath => {
                if !relative_path_ok(s) {
                    return fail(vars);
                }
            }
            StrCheck::PathGlob(globs) => {
                if !globs.iter().any(|g| glob_match(g, s)) {
                    return fail(Vars {
                        allowed: Some(globs),
                        ..vars
                    });
                }
            }
            StrCheck::MaxBytes(l) => {
                let n = s.len() as u64;
                if n > *l {
                    return fail(Vars {
                        actual: Some(i128::from(n)),
                        limit: Some(i128::from(*l)),
                        ..vars
                    });
                }
            }
            StrCheck::MinBytes(l) => {
                let n = s.len() as u64;
                if n < *l {
                    return fail(Vars {
                        actual: Some(i128::from(n)),
                        limit: Some(i128::from(*l)),
                        ..vars
                    });
                }
            }
            StrCheck::NoNul => {
                if s.contains('\0') {
                    return fail(vars);
                }
            }
            StrCheck::Json => {
                if serde_json::from_str::<IgnoredAny>(s).is_err() {
                    return fail(vars);
                }
            }
            StrCheck::OneOf { values, noun } => {
                if !values.iter().any(|v| v == s) {
                    return fail(Vars {
                        noun: Some(noun),
                        allowed: Some(values),
                        ..vars
                    });
                }
            }
            StrCheck::Unique { noun } => {
                if prior.contains(&s) {
                    return fail(Vars {
                        noun: Some(noun),
                        ..vars
                    });
                }
            }
        }
        Ok(())
    }
}

fn all_hold(when: &[Condition], values: &Map<String, Value>) -> bool {
    when.iter().all(|c| {
        let v = values.get(&c.argument);
        match &c.test {
            Test::Equals(x) => v == Some(x),
            Test::Contains(s) => v
                .and_then(Value::as_array)
                .is_some_and(|a| a.iter().any(|i| i.as_str() == Some(s))),
            Test::HasKey(k) => v
                .and_then(Value::as_object)
                .is_some_and(|m| m.contains_key(k)),
            Test::Present(b) => v.is_some() == *b,
        }
    })
}

/// The relative-path rule: non-empty; not starting with `/` or `-`; no `..` segment (the whole
/// path `..`, a leading `../`, a trailing `/..` or an inner `/../`). `..a` is fine.
pub fn relative_path_ok(p: &str) -> bool {
    !p.is_empty()
        && !p.starts_with('/')
        && !p.starts_with('-')
        && p != ".."
        && !p.starts_with("../")
        && !p.ends_with("/..")
        && !p.contains("/../")
}

/// Whether `pattern` matches the whole of `text`, in worldd's one glob dialect (the workspace
/// plugin's deny globs match the same way): see [`crate::glob`].
pub fn glob_match(pattern: &str, text: &str) -> bool {
    crate::glob::matches(pattern, text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_glob_matching() {
        assert!(glob_match("docs/**", "docs/a/b.md"));
        assert!(glob_match("docs/**", "docs/"));
        assert!(!glob_match("docs/**", "docs"));
        assert!(!glob_match("docs/**", "src/docs/a"));
        assert!(glob_match("docs/*.md", "docs/a.md"));
        assert!(!glob_match("docs/*.md", "docs/x/a.md"));
        assert!(glob_match("docs/**/*.md", "docs/x/y/a.md"));
        // `/**/` matches zero or more directories, as the workspace's deny globs do.
        assert!(glob_match("docs/**/*.md", "docs/a.md"));
        assert!(glob_match("a?c", "abc"));
        assert!(!glob_match("a?c", "a/c"));
        assert!(glob_match("", ""));
        assert!(!glob_match("", "a"));
        assert!(glob_match("**", ""));
        assert!(glob_match("é*", "été"));
        // `?` is one byte, as in globset: one ASCII character.
        assert!(!glob_match("?t\u{e9}", "\u{e9}t\u{e9}"));
    }

    #[test]
    fn plan_relative_path_rule() {
        for p in ["", "/etc/hosts", "-x", "..", "../a", "a/..", "a/../b"] {
            assert!(!relative_path_ok(p), "{p:?} must be refused");
        }
        for p in ["..a", "a/b..c", "./x", "a/-b", "a..", "a/..b/c"] {
            assert!(relative_path_ok(p), "{p:?} must be accepted");
        }
    }

    #[test]
    fn plan_message_escaping() {
        assert_eq!(
            escape_for_message("a\"b\\c\nd\u{1}"),
            "a\\\"b\\\\c\\nd\\u0001"
        );
        let long = "é".repeat(200); // 400 bytes
        let cut = escape_for_message(&long);
        assert!(cut.ends_with('…'));
        assert_eq!(cut.len(), 256 + '…'.len_utf8());
    }

    #[test]
    fn plan_templates() {
        let t = Template::parse("{{x}} {argument}!", &[Var::Argument], "f");
        let t = match t {
            Ok(t) => t,
            Err(e) => panic!("{e:?}"),
        };
        assert_eq!(
            t.render(&Vars {
                argument: "a",
                ..Vars::default()
            }),
            "{x} a!"
        );
        assert!(Template::parse("{nope}", &[Var::Argument], "f").is_err());
        assert!(Template::parse("{value}", &[Var::Argument], "f").is_err());
        assert!(Template::parse("{argument", &[Var::Argument], "f").is_err());
        assert!(Template::parse("a } b", &[Var::Argument], "f").is_err());
    }

    /// A plan whose chosen triple is not declared refuses instead of panicking. Transition
    /// validation makes this unreachable through documents; exercise it directly.
    #[test]
    fn plan_undeclared_effect_refuses() {
        let spec = PlanSpec {
            arguments: Vec::new(),
            checks: Vec::new(),
            effect: EffectChoice {
                base: EffectSpec {
                    effect: "X.Y".into(),
                    scope: "worktree".into(),
                    cost: 1,
                },
                cases: Vec::new(),
            },
            payload: PayloadSpec {
                arguments: CopyArgs::None,
                fields: Vec::new(),
            },
        };
        let declared = [EffectSpec {
            effect: "X.Y".into(),
            scope: "worktree".into(),
            cost: 2,
        }];
        let got = spec.evaluate("t", &declared, false, &json!({}));
        assert_eq!(
            got,
            Err("transition \"t\" is faulty: its plan chose effect X.Y at scope \"worktree\" cost 1, which its declaredEffects do not list".to_string())
        );
    }

    #[test]
    fn plan_interpreter_document() {
        assert_eq!(
            interpreter_document(),
            json!({"name":"worldd-plan","version":1,"semanticsEpoch":1,"language":"world/plan-language/v1"})
        );
    }
}
