//! The request document a plugin is sent for one effect (`handler_api::Request`), written as
//! JSON text directly.
//!
//! A plugin gets each effect's request twice, for its preflight and for its execute, and a
//! write's payload carries the whole content. serde_json escapes a string a byte at a time;
//! here every string goes through `dialect::quote` (32 bytes a step). The bytes are those
//! serde_json writes for a `Request` (its members, in its order), so a plugin reads the same
//! document either way.

use std::fmt::Write as _;

use broker_core::coordinator::EffectRequest;
use dialect::json::write_compact_object;
use dialect::quote::push_json_string;

/// The request document for `req`.
pub fn write(req: &EffectRequest<'_>) -> String {
    let mut out = String::with_capacity(256 + strings_len(req.payload));
    out.push_str(r#"{"invocationId":"#);
    push_json_string(&mut out, req.invocation_id);
    out.push_str(r#","episode":"#);
    push_json_string(&mut out, req.episode);
    if let Some(worktree) = req.worktree {
        // A path that is not UTF-8 is sent with its invalid bytes replaced, as it is displayed.
        out.push_str(r#","worktree":"#);
        push_json_string(&mut out, &worktree.to_string_lossy());
    }
    out.push_str(r#","effect":"#);
    push_json_string(&mut out, req.effect);
    out.push_str(r#","scope":"#);
    push_json_string(&mut out, req.scope);
    let _ = write!(out, r#","cost":{},"payload":"#, req.cost);
    write_compact_object(&mut out, req.payload);
    let _ = write!(out, r#","deadlineMs":{}}}"#, deadline_ms(req.deadline));
    out
}

/// `deadlineMs` for a handler given `left`: whole milliseconds, and never `0`, which the
/// handler ABI reads as "no limit" (`handler_api::Request::deadline_ms`). A deadline under a
/// millisecond is sent as `1`: due at once, never unlimited. (The coordinator starts no handler
/// with less than a millisecond left; this holds whatever calls it.)
pub fn deadline_ms(left: std::time::Duration) -> u64 {
    u64::try_from(left.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// The bytes of the payload's top-level strings: what a write's content adds to the document,
/// so that it is sized once instead of doubled into.
fn strings_len(payload: &serde_json::Map<String, serde_json::Value>) -> usize {
    payload
        .values()
        .filter_map(serde_json::Value::as_str)
        .map(str::len)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::time::Duration;

    use serde_json::{json, Map, Value};

    /// The document `handler_api::Request` serializes to: what the plugin parses.
    fn as_serde_writes(req: &EffectRequest<'_>) -> String {
        serde_json::to_string(&handler_api::Request {
            invocation_id: req.invocation_id.into(),
            episode: req.episode.into(),
            worktree: req.worktree.map(|w| w.to_string_lossy().into_owned()),
            effect: req.effect.into(),
            scope: req.scope.into(),
            cost: req.cost,
            payload: Value::Object(req.payload.clone()),
            deadline_ms: deadline_ms(req.deadline),
        })
        .unwrap()
    }

    fn request<'a>(
        payload: &'a Map<String, Value>,
        worktree: Option<&'a Path>,
    ) -> EffectRequest<'a> {
        EffectRequest {
            invocation_id: "mcp:ep-1:k\u{e9}",
            episode: "ep-1",
            worktree,
            effect: "Workspace.Write",
            scope: "worktree",
            cost: 3,
            payload,
            deadline: Duration::from_millis(9_876),
        }
    }

    #[test]
    fn the_document_is_the_one_the_request_type_serializes_to() {
        let payloads = [
            json!({"op": "write", "path": "a \"b\"\u{2028}.txt", "content": "x\ny\t\u{1}\\", "n": 7, "f": null, "list": [true, -2, {"k": "v"}]}),
            json!({}),
            json!({"n": u64::MAX, "x": 1.5e300, "s": "é"}),
        ];
        for payload in payloads {
            let Value::Object(payload) = payload else {
                unreachable!()
            };
            for worktree in [Some(Path::new("/w/\u{e9}p-1")), None] {
                let req = request(&payload, worktree);
                assert_eq!(write(&req), as_serde_writes(&req));
            }
        }
    }

    /// Attack: a call whose handler was left under a millisecond was sent `deadlineMs: 0`,
    /// which a plugin reads as no limit: the ailang plugin ran for its whole 10 s cap, and the
    /// git plugin really committed, after the daemon had answered "timed out".
    #[test]
    fn a_deadline_under_a_millisecond_is_sent_as_one_not_as_no_limit() {
        let cases = [
            (Duration::ZERO, 1),
            (Duration::from_nanos(1), 1),
            (Duration::from_micros(999), 1),
            (Duration::from_millis(1), 1),
            (Duration::from_micros(1_999), 1),
            (Duration::from_millis(2), 2),
            (Duration::from_millis(9_876), 9_876),
            (Duration::MAX, u64::MAX),
        ];
        for (left, ms) in cases {
            assert_eq!(deadline_ms(left), ms, "{left:?}");
        }
        let payload = Map::new();
        for left in [Duration::ZERO, Duration::from_micros(400)] {
            let req = EffectRequest {
                deadline: left,
                ..request(&payload, None)
            };
            let doc = write(&req);
            assert!(doc.ends_with(r#","deadlineMs":1}"#), "{doc}");
            let parsed: handler_api::Request = serde_json::from_str(&doc).unwrap();
            assert_eq!(parsed.deadline_ms, 1);
        }
    }

    use proptest::strategy::Strategy as _;

    proptest::proptest! {
        /// Any payload of strings and integers, whatever they hold, is written as the
        /// request type serializes it.
        #[test]
        fn any_payload_is_written_as_the_request_type_writes_it(
            members in proptest::collection::btree_map(
                "[a-z]{1,8}",
                proptest::prop_oneof![
                    "(\\PC|[\\x00-\\x1f\"\\\\]|é|😀){0,80}".prop_map(Value::from),
                    proptest::num::i64::ANY.prop_map(Value::from),
                ],
                0..6,
            ),
        ) {
            let payload: Map<String, Value> = members.into_iter().collect();
            let req = request(&payload, Some(Path::new("/w/x")));
            proptest::prop_assert_eq!(write(&req), as_serde_writes(&req));
        }
    }
}
