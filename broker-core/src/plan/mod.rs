//! The plan interpreter: `(transition document, arguments) -> world/effect-plan/v1`.
//!
//! A transition's `plan` section is written in a small declarative language,
//! `world/plan-language/v1`. It says which arguments a tool admits, how each is checked, which
//! effect a call requests and what payload that effect receives. There are no expressions, loops
//! or functions: only a fixed set of argument types, value rules, conditional refusals, effect
//! cases and payload fields. [`PlanSpec::plan_call`] (through
//! [`crate::transition::Transition::plan_call`]) is total and deterministic — any JSON value in,
//! one [`Plan`] out; no I/O, no clock, no randomness, no panics.
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
//!
//! # Modules
//!
//! | module | concept |
//! |---|---|
//! | `spec` | parsing and validating the plan section into a [`PlanSpec`]; checks and the effect choice |
//! | `rules` | argument declarations: types, value rules, parsing them, checking a value |
//! | `eval` | one call through a [`PlanSpec`], in the check order above |
//! | `payload` | which arguments and constants the effect's payload carries, and building it |
//! | `glob` | the `relative-path` rule and `path-glob` in worldd's one glob dialect |
//! | `message` | refusal templates and their placeholders |
//! | `effect` | the `{effect, scope, cost}` triple and the rules of its names |
//! | `fields` | the field helpers the parser shares, [`SpecError`], quoting values in messages |
//!
//! The interpreter knows nothing of the transition document around its section: the document
//! ([`crate::transition`]) holds a [`PlanSpec`] and hands it its id and declared effects.

use serde_json::{json, Map, Value};

mod effect;
mod eval;
mod fields;
mod glob;
mod message;
mod payload;
mod rules;
mod spec;
#[cfg(test)]
mod tests;

pub(crate) use effect::parse_effect_spec;
pub use effect::{valid_effect_name, valid_name, EffectSpec, MAX_NAME_BYTES};
pub use fields::{escape_for_message, SpecError};
pub use glob::{glob_match, relative_path_ok};
pub use spec::PlanSpec;

/// Semantic id of the plans this interpreter produces.
pub const PLAN_SEMANTIC_ID: &str = "world/effect-plan/v1";
/// The plan language this interpreter speaks (the `plan.language` of every document).
pub const LANGUAGE_ID: &str = "world/plan-language/v1";
/// Version of this interpreter; bump when any plan for any document could change.
pub const INTERPRETER_VERSION: u32 = 1;
/// The semantics epoch of this interpreter, recorded in its identity document and in every
/// log entry (the one definition; `log::SEMANTICS_EPOCH` is this).
pub const SEMANTICS_EPOCH: u64 = 1;
/// The id of the (only) effect of a plan.
pub const EFFECT_ID: &str = "e1";
/// Values quoted in refusal messages are cut to this many bytes.
pub const MAX_QUOTED_BYTES: usize = dialect::quote::MAX_QUOTED_BYTES;

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
    /// [`Plan::to_value`]'s canonical JSON, the payload of the plan object, written without
    /// building the value: every call plans once, and the payload need not be copied.
    pub fn canonical(&self) -> Result<Vec<u8>, crate::canon::CanonError> {
        use crate::canon::Members;
        let m = match self {
            Plan::Refused { message } => Members::new()
                .plain_array::<&str>("effects", &[])
                .boolean("finish", false)
                .string("plan", PLAN_SEMANTIC_ID)
                .object("result", |m| {
                    Ok(m.boolean("ok", false).string("refused", message))
                })?,
            Plan::Effect { effect, finish } => Members::new()
                .object_array("effects", std::slice::from_ref(effect), |m, e| {
                    // The payload is the fourth level: the plan, `effects`, the effect, it.
                    Ok(m.integer("cost", e.cost)?
                        .string("effect", &e.effect)
                        .string("id", &e.id)
                        .map("payload", &e.payload, 3)?
                        .string("scope", &e.scope))
                })?
                .boolean("finish", *finish)
                .string("plan", PLAN_SEMANTIC_ID)
                .null("result"),
        };
        Ok(m.finish().into_bytes())
    }

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

impl PlanSpec {
    /// Plans one call of the tool `tool`, whose document declares `declared` and has a finish
    /// phase when `finish`. Total and deterministic: any `args` value yields a [`Plan`]; never
    /// panics, no I/O, no clock, no randomness. A transition plans its calls with
    /// [`crate::transition::Transition::plan_call`].
    pub fn plan_call(
        &self,
        tool: &str,
        declared: &[EffectSpec],
        finish: bool,
        args: &Value,
    ) -> Plan {
        match self.evaluate(tool, declared, finish, args) {
            Ok(p) => p,
            Err(message) => Plan::Refused { message },
        }
    }
}
