//! Reading `ailang run`'s outcome: exactly four shapes are recognised, anything else is a
//! failed effect (never guessed at).
//!
//! - **admitted** (shapes a, b and d): stderr holds exactly one line `policy: {…}` whose JSON
//!   has `"ok": true` and a `decision` object with `"ok": true`. The exit code is reported
//!   verbatim (b: a refusal at runtime usually exits 1). When the exit code is 3, the last
//!   `policy-result: {…}` line (an object) is the `limit` (d); otherwise `limit` is null. A
//!   program can print its own `policy-result:` line, so `limit` is a hint, not a fact.
//! - **refused before execution** (c): no `policy:` or `policy-result:` line, a non-zero exit
//!   code, empty stderr, and stdout is one JSON object whose `decision` is an object with
//!   `"ok": false` (error_kind, message, missing_from_policy…).

use handler_kit::serde_json::{self, Value};

/// A recognised outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    pub admitted: bool,
    pub exit_code: i32,
    pub decision: Value,
    /// The parsed `policy-result:` line, or null.
    pub limit: Value,
}

const POLICY: &str = "policy: ";
const POLICY_RESULT: &str = "policy-result: ";

fn lines(text: &str) -> impl Iterator<Item = &str> {
    text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l))
}

fn object(text: &str) -> Option<Value> {
    serde_json::from_str::<Value>(text.trim())
        .ok()
        .filter(Value::is_object)
}

fn decision_with(envelope: &Value, ok: bool) -> Option<Value> {
    let decision = envelope.get("decision")?;
    (decision.is_object() && decision.get("ok") == Some(&Value::Bool(ok))).then(|| decision.clone())
}

/// Classify one run. `rc` is `None` when the process was killed by a signal (no outcome).
pub fn parse(rc: Option<i32>, stdout: &str, stderr: &str) -> Option<Envelope> {
    let rc = rc?;
    let policy_lines: Vec<&str> = lines(stderr)
        .filter_map(|l| l.strip_prefix(POLICY))
        .collect();
    let has_result_line = lines(stderr).any(|l| l.starts_with(POLICY_RESULT));
    match policy_lines.as_slice() {
        [line] => {
            let policy = object(line)?;
            if policy.get("ok") != Some(&Value::Bool(true)) {
                return None;
            }
            let decision = decision_with(&policy, true)?;
            let limit = if rc == 3 {
                lines(stderr)
                    .filter_map(|l| l.strip_prefix(POLICY_RESULT))
                    .filter_map(object)
                    .last()
                    .unwrap_or(Value::Null)
            } else {
                Value::Null
            };
            Some(Envelope {
                admitted: true,
                exit_code: rc,
                decision,
                limit,
            })
        }
        [] if !has_result_line && rc != 0 && stderr.trim().is_empty() => {
            let decision = decision_with(&object(stdout)?, false)?;
            Some(Envelope {
                admitted: false,
                exit_code: rc,
                decision,
                limit: Value::Null,
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use handler_kit::serde_json::json;

    const OK: &str = r#"policy: {"ok":true,"decision":{"ok":true,"function":"main"},"security_mode":"restricted"}"#;

    #[test]
    fn admitted_with_any_exit_code() {
        let e = parse(Some(0), "hi\n", &format!("{OK}\n")).unwrap();
        assert!(e.admitted);
        assert_eq!(e.decision, json!({"ok": true, "function": "main"}));
        assert_eq!(e.limit, Value::Null);
        let e = parse(Some(1), "", &format!("Error: execution failed: x\n{OK}\n")).unwrap();
        assert_eq!((e.admitted, e.exit_code), (true, 1));
    }

    #[test]
    fn limit_only_with_exit_code_3() {
        let stderr = format!("{OK}\npolicy-result: {{\"reason\":\"timeout\",\"stage\":\"run\"}}\n");
        let e = parse(Some(3), "tick\n", &stderr).unwrap();
        assert_eq!(e.limit, json!({"reason": "timeout", "stage": "run"}));
        let e = parse(Some(0), "tick\n", &stderr).unwrap();
        assert_eq!(e.limit, Value::Null);
    }

    #[test]
    fn refused_before_execution() {
        let out = r#"{"decision":{"ok":false,"error_kind":"policy_violation","missing_from_policy":["Net"]}}"#;
        let e = parse(Some(2), &format!("{out}\n"), "").unwrap();
        assert!(!e.admitted);
        assert_eq!(e.exit_code, 2);
        assert_eq!(e.decision["missing_from_policy"], json!(["Net"]));
        // Each condition matters.
        assert!(parse(Some(0), out, "").is_none());
        assert!(parse(Some(2), out, "noise\n").is_none());
        assert!(parse(Some(2), r#"{"decision":{"ok":true}}"#, "").is_none());
        assert!(parse(Some(2), r#"{"decision":"no"}"#, "").is_none());
    }

    #[test]
    fn anything_else_is_unrecognised() {
        assert!(parse(Some(0), "garbage", "").is_none());
        assert!(parse(None, "", &format!("{OK}\n")).is_none());
        assert!(parse(Some(0), "", &format!("{OK}\n{OK}\n")).is_none());
        assert!(parse(Some(0), "", "policy: {\"ok\":false}\n").is_none());
        assert!(parse(
            Some(0),
            "",
            "policy: {\"ok\":true,\"decision\":{\"ok\":false}}\n"
        )
        .is_none());
        assert!(parse(Some(0), "", "policy: not json\n").is_none());
        assert!(parse(Some(1), "", "").is_none());
    }
}
