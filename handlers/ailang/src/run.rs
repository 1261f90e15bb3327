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
//!
//! The streams are read as bytes: only the lines that matter are decoded, so up to 8 MiB of
//! output that is not UTF-8 is never copied into a string three times its size. A line that
//! is not UTF-8 is not JSON `ailang` wrote, and is not recognised.

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

const POLICY: &[u8] = b"policy: ";
const POLICY_RESULT: &[u8] = b"policy-result: ";

fn lines(text: &[u8]) -> impl Iterator<Item = &[u8]> {
    text.split(|b| *b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
}

fn object(text: &[u8]) -> Option<Value> {
    let text = std::str::from_utf8(text).ok()?;
    serde_json::from_str::<Value>(text.trim())
        .ok()
        .filter(Value::is_object)
}

/// Whether `text` is empty or only white space.
fn blank(text: &[u8]) -> bool {
    std::str::from_utf8(text).is_ok_and(|t| t.trim().is_empty())
}

fn decision_with(envelope: &Value, ok: bool) -> Option<Value> {
    let decision = envelope.get("decision")?;
    (decision.is_object() && decision.get("ok") == Some(&Value::Bool(ok))).then(|| decision.clone())
}

/// Classify one run. `rc` is `None` when the process was killed by a signal (no outcome).
pub fn parse(rc: Option<i32>, stdout: &[u8], stderr: &[u8]) -> Option<Envelope> {
    let rc = rc?;
    let policy_lines: Vec<&[u8]> = lines(stderr)
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
        [] if !has_result_line && rc != 0 && blank(stderr) => {
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

    fn parse(rc: Option<i32>, stdout: &str, stderr: &str) -> Option<Envelope> {
        super::parse(rc, stdout.as_bytes(), stderr.as_bytes())
    }

    #[test]
    fn output_that_is_not_utf8_is_read_around_and_a_policy_line_that_is_not_is_unrecognised() {
        let stderr = [b"\xff\xfe oops\n".as_slice(), OK.as_bytes(), b"\n"].concat();
        let e = super::parse(Some(0), b"\xff\x00", &stderr).unwrap();
        assert_eq!(e.decision, json!({"ok": true, "function": "main"}));
        let bad = [
            OK.as_bytes().strip_suffix(b"}").unwrap(),
            b",\"x\":\"\xff\"}\n",
        ]
        .concat();
        assert!(super::parse(Some(0), b"", &bad).is_none());
        // Stderr that is not UTF-8 is not empty.
        let out = br#"{"decision":{"ok":false}}"#;
        assert!(super::parse(Some(2), out, b"").is_some());
        assert!(super::parse(Some(2), out, b"\xff").is_none());
    }

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
