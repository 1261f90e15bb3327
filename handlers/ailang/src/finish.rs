//! The finish functions: pure, deterministic reshaping of a handler output.
//!
//! Both see `{args, output}` where `output` is the policy-tool reply the effect returned
//! (`{ok, argv, exit_code, stdout, stderr, tool, policy_digest}`, or the policy-tool's own
//! `{ok:false, refused}`). The coordinator only calls them for effects that ended `ok`, so a
//! refusal they produce carries `"status": "ok"`. They never return an empty success for
//! output they cannot read.

use handler_kit::serde_json::{self, json, Map, Value};
use handler_kit::{FinishInput, JsonObject};

/// `check-report`.
pub const CHECK_REPORT: &str = "check-report";
/// `builtins-inventory`.
pub const BUILTINS_INVENTORY: &str = "builtins-inventory";

/// At most this many matches when a `query` is given.
pub const MAX_QUERY_MATCHES: usize = 10;

/// Longest stderr excerpt quoted in a refusal.
const STDERR_LIMIT: usize = 2048;

fn refusal(message: String) -> JsonObject {
    let mut out = Map::new();
    out.insert("ok".into(), json!(false));
    out.insert("status".into(), json!("ok"));
    out.insert("refused".into(), json!(message));
    out
}

/// The policy-tool's own refusal, passed through.
fn passed_refusal(output: &JsonObject) -> Option<JsonObject> {
    output
        .get("refused")
        .and_then(Value::as_str)
        .map(|r| refusal(r.to_string()))
}

fn stderr_of(output: &JsonObject) -> String {
    let text = output
        .get("stderr")
        .and_then(Value::as_str)
        .unwrap_or("")
        .trim();
    if text.is_empty() {
        return "(empty)".to_string();
    }
    if text.len() <= STDERR_LIMIT {
        return text.to_string();
    }
    format!("{}…", handler_kit::dialect::quote::head(text, STDERR_LIMIT))
}

/// `check-report`: ai_check's stdout `{"file", "check": {"passed", "error_count",
/// "errors": [{code, message, file}]}, "verify": …}` → `{ok:true, passed, error_count,
/// errors}`; errors keep their `code`, `message` and `file` strings (line and column stay
/// inside `message`).
pub fn check_report(input: &FinishInput) -> JsonObject {
    if let Some(r) = passed_refusal(&input.output) {
        return r;
    }
    report(&input.output).unwrap_or_else(|| {
        refusal(format!(
            "ai_check returned no check report; stderr: {}",
            stderr_of(&input.output)
        ))
    })
}

fn report(output: &JsonObject) -> Option<JsonObject> {
    let stdout = output.get("stdout")?.as_str()?;
    let parsed: Value = serde_json::from_str(stdout.trim()).ok()?;
    let check = parsed.get("check")?.as_object()?;
    let passed = check.get("passed")?.as_bool()?;
    let error_count = check.get("error_count")?.as_u64()?;
    let errors = check
        .get("errors")?
        .as_array()?
        .iter()
        .map(|e| {
            let e = e.as_object()?;
            let mut item = Map::new();
            for key in ["code", "message", "file"] {
                match e.get(key) {
                    Some(Value::String(s)) => {
                        item.insert(key.into(), json!(s));
                    }
                    None | Some(Value::Null) => {}
                    Some(_) => return None,
                }
            }
            Some(Value::Object(item))
        })
        .collect::<Option<Vec<Value>>>()?;
    let mut out = Map::new();
    out.insert("ok".into(), json!(true));
    out.insert("passed".into(), json!(passed));
    out.insert("error_count".into(), json!(error_count));
    out.insert("errors".into(), Value::Array(errors));
    Some(out)
}

/// One inventory line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Builtin {
    pub name: String,
    pub effect: String,
    pub module: String,
}

/// Parse `Total: N builtins` followed by one `name [effect] module` line per builtin (blank
/// lines ignored, columns may be padded). Errors say what is wrong, for the refusal.
pub fn parse_inventory(text: &str) -> Result<Vec<Builtin>, String> {
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let header = lines.next().ok_or("builtins_list printed nothing")?;
    let total: usize = header
        .strip_prefix("Total: ")
        .and_then(|rest| rest.strip_suffix(" builtins"))
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| {
            format!(
                "builtins_list printed no \"Total: N builtins\" header (first line {:?})",
                crate::process::excerpt(header)
            )
        })?;
    let mut items = Vec::new();
    for line in lines {
        let bad = || {
            format!(
                "builtins_list printed an unreadable inventory line {:?} (expected \"name [effect] module\")",
                crate::process::excerpt(line)
            )
        };
        let (name, rest) = line.split_once(char::is_whitespace).ok_or_else(bad)?;
        let rest = rest.trim_start().strip_prefix('[').ok_or_else(bad)?;
        let (effect, module) = rest.split_once(']').ok_or_else(bad)?;
        let module = module.trim();
        if module.is_empty() || module.contains(char::is_whitespace) || effect.contains('[') {
            return Err(bad());
        }
        items.push(Builtin {
            name: name.to_string(),
            effect: effect.trim().to_string(),
            module: module.to_string(),
        });
    }
    if total == 0 {
        return Err("builtins_list reported an empty inventory (Total: 0 builtins)".to_string());
    }
    if items.len() != total {
        return Err(format!(
            "builtins_list returned a truncated inventory: the header says {total} builtins, {} are listed",
            items.len()
        ));
    }
    Ok(items)
}

/// `builtins-inventory`: filter the inventory by the call's `module` (substring of the
/// module) and `query` (substring of name, module or effect), both case-insensitive; at
/// most [`MAX_QUERY_MATCHES`] matches when a query is given → `{count, matches}`.
pub fn builtins_inventory(input: &FinishInput) -> JsonObject {
    if let Some(r) = passed_refusal(&input.output) {
        return r;
    }
    let arg = |key: &str| -> Result<Option<String>, ()> {
        match input.args.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.to_lowercase())),
            Some(_) => Err(()),
        }
    };
    let (Ok(query), Ok(module)) = (arg("query"), arg("module")) else {
        return refusal(
            "builtins-search arguments \"query\" and \"module\" must be strings".into(),
        );
    };
    let Some(stdout) = input.output.get("stdout").and_then(Value::as_str) else {
        return refusal(format!(
            "builtins_list returned no inventory; stderr: {}",
            stderr_of(&input.output)
        ));
    };
    let items = match parse_inventory(stdout) {
        Ok(items) => items,
        Err(why) => {
            return refusal(format!("{why}; stderr: {}", stderr_of(&input.output)));
        }
    };
    let limit = if query.is_some() {
        MAX_QUERY_MATCHES
    } else {
        usize::MAX
    };
    let matches: Vec<Value> = items
        .iter()
        .filter(|b| {
            let (name, m, effect) = (
                b.name.to_lowercase(),
                b.module.to_lowercase(),
                b.effect.to_lowercase(),
            );
            module.as_ref().is_none_or(|want| m.contains(want.as_str()))
                && query.as_ref().is_none_or(|q| {
                    name.contains(q.as_str())
                        || m.contains(q.as_str())
                        || effect.contains(q.as_str())
                })
        })
        .take(limit)
        .map(|b| json!({"name": b.name, "module": b.module, "effect": b.effect}))
        .collect();
    let mut out = Map::new();
    out.insert("count".into(), json!(matches.len()));
    out.insert("matches".into(), Value::Array(matches));
    out
}
