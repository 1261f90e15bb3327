//! Parsing and validating a transition's `plan` section into a [`PlanSpec`]: the top level
//! (`language`, `arguments`, `checks`, `effect`, `payload`), cross-argument checks with their
//! conditions, the effect choice, and the field helpers every part of the parser shares. Each
//! problem is a [`SpecError`] naming the JSON path of the field.

use serde_json::{Map, Value};

use super::effect::{parse_cost, parse_effect_name, parse_effect_spec, parse_scope, EffectSpec};
use super::fields::{bad, escape_for_message, object, only_keys, string_field, SpecResult};
use super::message::{Template, Var};
use super::payload::{parse_payload, CopyArgs, PayloadSpec};
use super::rules::{parse_argument, ArgSpec, ArgType};
use super::LANGUAGE_ID;

/// A parsed, validated plan section.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanSpec {
    pub(super) arguments: Vec<ArgSpec>,
    pub(super) checks: Vec<Check>,
    pub(super) effect: EffectChoice,
    pub(super) payload: PayloadSpec,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) struct Condition {
    pub(super) argument: String,
    pub(super) test: Test,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Test {
    Equals(Value),
    Contains(String),
    HasKey(String),
    Present(bool),
}

#[derive(Debug, Clone, PartialEq)]
pub(super) struct Check {
    pub(super) when: Vec<Condition>,
    pub(super) message: Template,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) struct EffectChoice {
    pub(super) base: EffectSpec,
    pub(super) cases: Vec<(Vec<Condition>, EffectSpec)>,
}

pub(super) const PLAN_KEYS: [&str; 5] = ["language", "arguments", "checks", "effect", "payload"];
/// At most this many arguments per tool.
pub(super) const MAX_ARGUMENTS: usize = 64;

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
}

pub(super) const CONDITION_TESTS: [&str; 4] = ["equals", "contains", "hasKey", "present"];

pub(super) fn parse_conditions(
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

pub(super) fn parse_check(v: &Value, field: &str, args: &[ArgSpec]) -> SpecResult<Check> {
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

pub(super) fn parse_effect_choice(v: &Value, args: &[ArgSpec]) -> SpecResult<EffectChoice> {
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
