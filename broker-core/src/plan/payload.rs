//! The payload a plan hands its effect: which arguments are copied under their own names
//! (`"all"` or a list), and which fields are constants or argument values; parsed once, built
//! per call from the checked values.

use serde_json::{Map, Value};

use super::fields::{bad, escape_for_message, object, only_keys, SpecResult};
use super::rules::ArgSpec;

#[derive(Debug, Clone, PartialEq)]
pub(super) enum CopyArgs {
    None,
    All,
    Named(Vec<String>),
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum FieldSource {
    Const(Value),
    Argument(String),
}

#[derive(Debug, Clone, PartialEq)]
pub(super) struct PayloadSpec {
    pub(super) arguments: CopyArgs,
    pub(super) fields: Vec<(String, FieldSource)>,
}

pub(super) fn parse_payload(v: &Value, args: &[ArgSpec]) -> SpecResult<PayloadSpec> {
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

impl PayloadSpec {
    /// The payload for checked `values` (defaults applied): the copied arguments, then the
    /// fields, in their order.
    pub(super) fn build(
        &self,
        arguments: &[ArgSpec],
        values: &Map<String, Value>,
    ) -> Map<String, Value> {
        let mut payload = Map::new();
        match &self.arguments {
            CopyArgs::None => {}
            CopyArgs::All => {
                for arg in arguments {
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
        for (key, source) in &self.fields {
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
        payload
    }
}
