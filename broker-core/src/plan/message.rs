//! Refusal texts: message templates with `{placeholders}` (`{argument}`, `{value}`, `{limit}`,
//! …) that a rule's default text or a document's own `message` fills in, and the quoting of
//! caller-supplied values inside them.

use serde_json::{Map, Value};

use super::fields::{bad, escape_for_message, SpecResult};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Var {
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
    pub(super) const ALL: [Var; 10] = [
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

    pub(super) fn name(self) -> &'static str {
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
pub(super) enum Seg {
    Lit(String),
    Var(Var),
}

/// A refusal text with `{placeholders}`; `{{` and `}}` are literal braces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Template(pub(super) Vec<Seg>);

/// The values a template may draw on. Everything is borrowed, so this is `Copy`.
#[derive(Clone, Copy, Default)]
pub(super) struct Vars<'a> {
    pub(super) tool: &'a str,
    pub(super) argument: &'a str,
    pub(super) value: Option<&'a str>,
    pub(super) actual: Option<i128>,
    pub(super) limit: Option<i128>,
    pub(super) allowed: Option<&'a [String]>,
    pub(super) noun: Option<&'a str>,
    pub(super) first: Option<&'a str>,
    pub(super) second: Option<&'a str>,
    pub(super) item: Option<&'a str>,
}

impl Template {
    pub(super) fn parse(text: &str, allowed: &[Var], field: &str) -> SpecResult<Template> {
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

    pub(super) fn render(&self, vars: &Vars<'_>) -> String {
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

pub(super) fn message_field(
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
