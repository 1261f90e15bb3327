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
    let deadline_ms = u64::try_from(req.deadline.as_millis()).unwrap_or(u64::MAX);
    let _ = write!(out, r#","deadlineMs":{deadline_ms}}}"#);
    out
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
            deadline_ms: req.deadline.as_millis() as u64,
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
