//! Argument declarations and their rules: the types (`string`, `string-array`, …), the value
//! rules each type admits (`relative-path`, `path-glob`, `max-bytes`, `one-of`, `each`, …),
//! how a declaration is parsed, and how a value is checked against it, type first, then rules
//! in order. A failed check is the refusal text.

use std::collections::HashSet;

use serde::de::IgnoredAny;
use serde_json::{Map, Value};

use super::fields::{
    bad, escape_for_message, i64_field, noun_field, object, only_keys, string_field, string_list,
    u64_field, valid_argument_name, SpecResult,
};
use super::glob::{glob_match, relative_path_ok};
use super::message::{message_field, Template, Var, Vars};
use super::LANGUAGE_ID;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ArgType {
    String,
    StringArray,
    StringMap,
    Boolean,
    Integer,
    Object,
}

impl ArgType {
    pub(super) const ALL: [(&'static str, ArgType); 6] = [
        ("string", ArgType::String),
        ("string-array", ArgType::StringArray),
        ("string-map", ArgType::StringMap),
        ("boolean", ArgType::Boolean),
        ("integer", ArgType::Integer),
        ("object", ArgType::Object),
    ];

    pub(super) fn name(self) -> &'static str {
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
    pub(super) fn json_type(self) -> &'static str {
        match self {
            ArgType::String => "string",
            ArgType::StringArray => "array",
            ArgType::StringMap | ArgType::Object => "object",
            ArgType::Boolean => "boolean",
            ArgType::Integer => "integer",
        }
    }

    pub(super) fn default_type_message(self) -> &'static str {
        match self {
            ArgType::String => "argument \"{argument}\" must be a string",
            ArgType::StringArray => "argument \"{argument}\" must be an array of strings",
            ArgType::StringMap => "argument \"{argument}\" must be an object of string values",
            ArgType::Boolean => "argument \"{argument}\" must be true or false",
            ArgType::Integer => "argument \"{argument}\" must be an integer",
            ArgType::Object => "argument \"{argument}\" must be a JSON object",
        }
    }

    pub(super) fn rule_names(self) -> &'static [&'static str] {
        match self {
            ArgType::String => &STRING_RULES,
            ArgType::StringArray => &ARRAY_RULES,
            ArgType::Integer => &INTEGER_RULES,
            ArgType::StringMap | ArgType::Boolean | ArgType::Object => &[],
        }
    }
}

pub(super) const STRING_RULES: [&str; 7] = [
    "relative-path",
    "path-glob",
    "max-bytes",
    "min-bytes",
    "no-nul",
    "json",
    "one-of",
];
pub(super) const ITEM_RULES: [&str; 8] = [
    "relative-path",
    "path-glob",
    "max-bytes",
    "min-bytes",
    "no-nul",
    "json",
    "one-of",
    "unique",
];
pub(super) const ARRAY_RULES: [&str; 4] = ["max-items", "min-items", "exclusive", "each"];
pub(super) const INTEGER_RULES: [&str; 2] = ["min-value", "max-value"];
pub(super) const ALL_RULES: [&str; 14] = [
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
pub(super) struct ArgSpec {
    pub(super) name: String,
    pub(super) ty: ArgType,
    pub(super) required: bool,
    pub(super) default: Option<Value>,
    pub(super) type_message: Template,
    pub(super) rules: Vec<Rule>,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Rule {
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
pub(super) struct StrRule {
    pub(super) check: StrCheck,
    pub(super) message: Template,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum StrCheck {
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
pub(super) enum ArrayCheck {
    MaxItems(u64),
    MinItems(u64),
    Exclusive(Vec<String>),
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum IntCheck {
    Min(i64),
    Max(i64),
}

pub(super) const ARG_KEYS: [&str; 6] = [
    "name",
    "type",
    "required",
    "default",
    "typeMessage",
    "rules",
];

pub(super) fn parse_argument(v: &Value, field: &str, tool: &str) -> SpecResult<ArgSpec> {
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
pub(super) fn parse_rules(
    items: &[Value],
    ty: ArgType,
    field: &str,
    in_item: bool,
) -> SpecResult<Vec<Rule>> {
    let mut out = Vec::with_capacity(items.len());
    let mut seen_relative_path = false;
    for (i, item) in items.iter().enumerate() {
        let f = format!("{field}[{i}]");
        let m = object(item, &f, "a rule object {\"rule\": …}")?;
        let kind = string_field(m, "rule", &f)?;
        applies(kind, ty, in_item, &f)?;
        let rule = match kind {
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
                Rule::Str(parse_str_rule(m, kind, in_item, &f)?)
            }
            "max-items" | "min-items" => item_count_rule(m, kind, &f)?,
            "exclusive" => exclusive_rule(m, &f)?,
            "each" => each_rule(m, ty, &f)?,
            "min-value" | "max-value" => value_rule(m, kind, &f)?,
            _ => {
                return bad(
                    &format!("{f}.rule"),
                    format!(
                        "is \"{}\", which {LANGUAGE_ID} does not define",
                        escape_for_message(kind)
                    ),
                )
            }
        };
        out.push(rule);
    }
    Ok(out)
}

/// Whether rule `kind` applies to an argument of type `ty` (or to an item of `each`); the
/// error lists the rules that do.
fn applies(kind: &str, ty: ArgType, in_item: bool, f: &str) -> SpecResult<()> {
    let applicable: &[&str] = if in_item {
        &ITEM_RULES
    } else {
        ty.rule_names()
    };
    if applicable.contains(&kind) {
        return Ok(());
    }
    let context = if in_item {
        "inside \"each\"".to_string()
    } else {
        format!("for a {} argument", ty.name())
    };
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
    bad(&format!("{f}.rule"), what)
}

/// `max-items` / `min-items`: an array's length against a limit.
fn item_count_rule(m: &Map<String, Value>, kind: &str, f: &str) -> SpecResult<Rule> {
    only_keys(m, &["rule", "limit", "message"], f)?;
    let limit = u64_field(m, "limit", f)?;
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
        f,
    )?;
    Ok(Rule::Array { check, message })
}

/// `exclusive`: at most one of the listed values in an array.
fn exclusive_rule(m: &Map<String, Value>, f: &str) -> SpecResult<Rule> {
    only_keys(m, &["rule", "values", "message"], f)?;
    let values = string_list(m, "values", f, 2)?;
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
        f,
    )?;
    Ok(Rule::Array {
        check: ArrayCheck::Exclusive(values),
        message,
    })
}

/// `each`: string rules applied to every item of an array.
fn each_rule(m: &Map<String, Value>, ty: ArgType, f: &str) -> SpecResult<Rule> {
    only_keys(m, &["rule", "item", "rules"], f)?;
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
    // An empty phrase means the default, `an item of "<argument>"`, built at evaluation time.
    Ok(Rule::Each {
        item: item.unwrap_or_default(),
        rules,
    })
}

/// `min-value` / `max-value`: an integer against a limit.
fn value_rule(m: &Map<String, Value>, kind: &str, f: &str) -> SpecResult<Rule> {
    only_keys(m, &["rule", "limit", "message"], f)?;
    let limit = i64_field(m, "limit", f)?;
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
        f,
    )?;
    Ok(Rule::Int { check, message })
}

pub(super) fn parse_str_rule(
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

impl ArgSpec {
    /// Type, then rules in order. `Err` is the refusal text.
    pub(super) fn check(&self, tool: &str, v: &Value) -> Result<(), String> {
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
                        r.apply(s, &HashSet::new(), base)?;
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
                            // Earlier items, for `unique`: a set, since a list searched
                            // once per item made an array of n items cost n² comparisons.
                            let mut prior = HashSet::new();
                            let tracks = rules
                                .iter()
                                .any(|r| matches!(r.check, StrCheck::Unique { .. }));
                            for s in &items {
                                for r in rules {
                                    r.apply(s, &prior, vars)?;
                                }
                                if tracks {
                                    prior.insert(*s);
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

pub(super) fn check_array(
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
    pub(super) fn apply(
        &self,
        s: &str,
        prior: &HashSet<&str>,
        base: Vars<'_>,
    ) -> Result<(), String> {
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
                if prior.contains(s) {
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
