//! The result of a committed `tools/call`: the committed output, written by hand around its
//! bytes, and the `_meta` with its provenance handles and outcome classification.
//!
//! An output that does not conform to its tool's `outputSchema` ([`output_schema`]) is not
//! served as `structuredContent`: MCP requires structured results to conform, and a client
//! that validates them (the official SDKs) raised instead of returning a call that ran and was
//! committed, so an agent would call a write again. It is answered `isError: true`, with the
//! output as text (as always, `content[0]`), then a text that says the call ran and was
//! committed and what does not conform.
//! The journal keeps the truth: the effect happened.

mod output_schema;

use broker_core::coordinator::{CallOutput, EffectSummary};
use broker_core::object::Ref;
use serde::Serialize;
use serde_json::Value;

use super::super::jsonrpc::Reply;
use super::modern_fields::ModernFields;
use super::server_info::{ServerInfo, SERVER_INFO_META_KEY};
use super::{Ctx, HostFailure, MethodResult};
use crate::outcome::{self, Outcome};

/// The result of a committed call: the committed output twice, then `_meta`.
#[derive(Debug)]
pub(in crate::mcp) struct CallToolResult {
    /// The committed output as stored: canonical JSON, one object
    /// ([`crate::json_scan::is_one_object`]).
    output: String,
    is_error: bool,
    /// Set when the output does not conform to the tool's `outputSchema`: the note served as
    /// a second text after the output, which is then never `structuredContent`.
    nonconforming: Option<String>,
    modern: Option<ModernFields>,
    /// Boxed: the other results are small, and a reply is moved a few times.
    meta: Box<CallMeta>,
}

impl CallToolResult {
    /// Whether the call was a resend of a committed key, answered without running.
    pub(in crate::mcp) fn replayed(&self) -> bool {
        self.meta.replayed
    }

    /// The result's `_meta` alone, as a JSON value (`null` where it cannot be written: it
    /// always can, its keys being strings).
    pub(in crate::mcp) fn meta_value(&self) -> serde_json::Value {
        serde_json::to_value(&*self.meta).unwrap_or(serde_json::Value::Null)
    }

    /// `{"content":[{"type":"text","text":…}],"structuredContent":…,"isError":…,` the
    /// revision's fields, `"_meta":…}`. Written by hand around the output, which may hold a
    /// whole file: its text is escaped 32 bytes a step
    /// ([`dialect::quote::push_escaped_bytes`]), where serde_json escapes a byte at a time,
    /// and it is copied as stored for `structuredContent`, where serde_json would parse it
    /// again to check it.
    pub(super) fn write_json(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        out.reserve(2 * self.output.len() + 1024);
        out.extend_from_slice(br#"{"content":[{"type":"text","text":""#);
        dialect::quote::push_escaped_bytes(out, &self.output);
        if let Some(note) = &self.nonconforming {
            // The output stays the first text, byte for byte (its sha256 is its ref).
            out.extend_from_slice(br#""},{"type":"text","text":""#);
            dialect::quote::push_escaped_bytes(out, note);
            out.extend_from_slice(br#""}]"#);
        } else {
            out.extend_from_slice(br#""}],"structuredContent":"#);
            out.extend_from_slice(self.output.as_bytes());
        }
        out.extend_from_slice(if self.is_error {
            br#","isError":true"#
        } else {
            br#","isError":false"#
        });
        if let Some(modern) = &self.modern {
            // The revision's members, as if flattened into this object.
            let members = serde_json::to_vec(modern)?;
            if let Some(inner) = members
                .strip_prefix(b"{")
                .and_then(|m| m.strip_suffix(b"}"))
                .filter(|m| !m.is_empty())
            {
                out.push(b',');
                out.extend_from_slice(inner);
            }
        }
        out.extend_from_slice(br#","_meta":"#);
        serde_json::to_writer(&mut *out, &self.meta)?;
        out.push(b'}');
        Ok(())
    }
}

/// The `_meta` of a committed call: `world/invocationId`, `world/entryIndex`,
/// `world/worldRef`, `world/outputRef`, `world/replayed`, `world/effects`, `world/outcome`,
/// for a keyed call `world/idempotencyKey`, and under the 2026-07-28 revision the server
/// identity stamp. Written directly, in the order a JSON map keeps its members: it was a map
/// of JSON values, about twenty allocations per call.
#[derive(Debug)]
struct CallMeta {
    invocation_id: String,
    entry_index: u64,
    world_ref: Ref,
    output_ref: Ref,
    replayed: bool,
    effects: Vec<EffectSummary>,
    outcome: Outcome,
    key: Option<String>,
    server_info: bool,
}

impl Serialize for CallMeta {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        if self.server_info {
            m.serialize_entry(SERVER_INFO_META_KEY, &ServerInfo::ours())?;
        }
        m.serialize_entry("world/effects", &outcome::Effects(&self.effects))?;
        m.serialize_entry("world/entryIndex", &self.entry_index)?;
        if let Some(k) = &self.key {
            m.serialize_entry("world/idempotencyKey", k)?;
        }
        m.serialize_entry("world/invocationId", &self.invocation_id)?;
        m.serialize_entry("world/outcome", &self.outcome)?;
        m.serialize_entry("world/outputRef", &self.output_ref)?;
        m.serialize_entry("world/replayed", &self.replayed)?;
        m.serialize_entry("world/worldRef", &self.world_ref)?;
        m.end()
    }
}

/// sha256 is the output ref) and as `structuredContent`; then `_meta` with the provenance
/// handles and the outcome classification.
pub(super) fn call_result(
    ctx: &Ctx<'_>,
    id: &Value,
    tool: &str,
    output_schema: &Value,
    out: CallOutput,
    outcome: Outcome,
    key: Option<&str>,
) -> Result<Reply, HostFailure> {
    let episode = ctx.session.episode.as_str();
    let CallOutput {
        invocation_id: invocation,
        output,
        output_ref,
        entry_index,
        world_ref,
        replayed,
        effects,
    } = out;
    let output = String::from_utf8(output).map_err(|_| {
        tracing::error!(%episode, %tool, %invocation, output = %output_ref, "mcp: committed output is not UTF-8");
        HostFailure::Failed
    })?;
    // The store's canonical JSON, written by this daemon; a walk of its shape (not a parse)
    // keeps bytes that would unbalance the answer around them out of it.
    if !crate::json_scan::is_one_object(output.as_bytes()) {
        tracing::error!(%episode, %tool, %invocation, output = %output_ref, "mcp: committed output is not a JSON object");
        return Err(HostFailure::Failed);
    }
    tracing::debug!(%episode, %tool, %invocation, entry = entry_index, replayed, "mcp tools/call committed");
    let modern = ctx.modern();
    // Every revision flags an outcome that is not `ok` (MCP's tool execution errors, "invalid
    // input data, business logic errors", are results with `isError: true`), so a client that
    // reads only `isError` cannot mistake a refusal or a denial for success, and a model is
    // shown the refusal to correct itself from.
    let mut is_error = outcome.kind != outcome::Kind::Ok;
    // Clients validate only results without `isError`: those are the ones checked.
    let nonconforming = if is_error {
        None
    } else {
        output_schema::violation(output_schema, &output).map(|why| {
            let plugins = plugins_of(ctx, &effects);
            tracing::warn!(%episode, %tool, %invocation, entry = entry_index, output = %output_ref, plugin = %plugins,
                "mcp tools/call: the committed output does not conform to the tool's outputSchema ({why}); answered isError with the output as text, without structuredContent");
            is_error = true;
            format!(
                "{tool} ran and its result was committed (log entry {entry_index}, invocation {invocation}), but its output does not conform to the tool's outputSchema ({why}), so it is not served as structuredContent. Do not call {tool} again to get this result: it is the text before this one."
            )
        })
    };
    let meta = Box::new(CallMeta {
        invocation_id: invocation,
        entry_index,
        world_ref,
        output_ref,
        replayed,
        effects,
        outcome,
        key: key.map(str::to_owned),
        server_info: modern,
    });
    Ok(Reply::result(
        id,
        MethodResult::Call(CallToolResult {
            output,
            is_error,
            nonconforming,
            modern: modern.then(ModernFields::complete),
            meta,
        }),
    ))
}

/// The plugins that ran the call's effects (`a, b`), for the operator's line: the author to
/// tell. `none` for a call that ran no effect (only a finish function could shape it).
fn plugins_of(ctx: &Ctx<'_>, effects: &[EffectSummary]) -> String {
    let handlers = ctx.state.coordinator().handlers();
    let mut names: Vec<String> = Vec::new();
    for e in effects {
        let Some(h) = handlers.get(&e.effect) else {
            continue;
        };
        // Plugin code is not trusted not to panic, here as where the coordinator asks.
        let Ok(id) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h.identity())) else {
            continue;
        };
        if !names.contains(&id.plugin) {
            names.push(id.plugin);
        }
    }
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::super::server_info::server_info_meta;
    use super::*;
    use serde_json::{json, Map};

    /// `_meta` as it was built before it was written directly: a map of JSON values.
    fn meta_as_map(m: &CallMeta) -> Map<String, Value> {
        let effects: Vec<Value> = m
            .effects
            .iter()
            .map(|e| {
                let mut o = Map::new();
                o.insert("id".into(), json!(e.id));
                o.insert("effect".into(), json!(e.effect));
                o.insert("status".into(), json!(e.status));
                o.insert("record".into(), json!(e.record));
                o.insert("budgetAfter".into(), json!(e.budget_after));
                if let Some(d) = &e.denial {
                    o.insert("denial".into(), json!(d));
                }
                Value::Object(o)
            })
            .collect();
        let mut outcome = Map::new();
        outcome.insert("kind".into(), json!(m.outcome.kind.as_str()));
        if let Some(r) = m.outcome.reason {
            outcome.insert("reason".into(), json!(r));
        }
        outcome.insert("retryable".into(), json!(m.outcome.retryable));
        if let Some(n) = m.outcome.remaining {
            outcome.insert("remaining".into(), json!(n));
        }
        let mut map = Map::new();
        map.insert("world/invocationId".into(), json!(m.invocation_id));
        map.insert("world/entryIndex".into(), json!(m.entry_index));
        map.insert("world/worldRef".into(), json!(m.world_ref));
        map.insert("world/outputRef".into(), json!(m.output_ref));
        map.insert("world/replayed".into(), json!(m.replayed));
        map.insert("world/effects".into(), Value::Array(effects));
        map.insert("world/outcome".into(), Value::Object(outcome));
        if let Some(k) = &m.key {
            map.insert("world/idempotencyKey".into(), json!(k));
        }
        if m.server_info {
            map.extend(server_info_meta());
        }
        map
    }

    #[test]
    fn a_calls_meta_written_directly_is_the_map_it_replaced() {
        let effect = |denial: Option<&str>| EffectSummary {
            id: "e1".into(),
            effect: "Workspace.Write".into(),
            status: "denied".into(),
            record: Ref::of(b"record \"quoted\""),
            budget_after: u64::MAX,
            denial: denial.map(str::to_owned),
        };
        let mut denied = Outcome::capacity();
        denied.remaining = Some(3);
        let cases = [
            CallMeta {
                entry_index: 0,
                ..a_meta()
            },
            CallMeta {
                invocation_id: "mcp:\u{e9}p\u{2028}:k-1".into(),
                entry_index: u64::MAX,
                world_ref: Ref::of(b"w2"),
                output_ref: Ref::of(b"o2"),
                replayed: true,
                effects: vec![effect(None), effect(Some("denied:budget"))],
                outcome: denied,
                key: Some("k-1.x_y".into()),
                server_info: true,
            },
        ];
        for meta in cases {
            assert_eq!(
                serde_json::to_string(&meta).unwrap(),
                serde_json::to_string(&meta_as_map(&meta)).unwrap(),
            );
        }
    }

    /// A call's reply as serde_json wrote it before it was written by hand: the oracle.
    #[derive(Serialize)]
    struct SerdeReply<'a> {
        jsonrpc: &'static str,
        id: &'a Value,
        result: SerdeCallResult<'a>,
    }

    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct SerdeCallResult<'a> {
        content: [SerdeText<'a>; 1],
        structured_content: Box<serde_json::value::RawValue>,
        is_error: bool,
        #[serde(flatten, skip_serializing_if = "Option::is_none")]
        modern: Option<ModernFields>,
        #[serde(rename = "_meta")]
        meta: &'a CallMeta,
    }

    #[derive(Serialize)]
    struct SerdeText<'a> {
        #[serde(rename = "type")]
        kind: &'static str,
        text: &'a str,
    }

    fn a_meta() -> CallMeta {
        CallMeta {
            invocation_id: "mcp:ep:0f".into(),
            entry_index: 7,
            world_ref: Ref::of(b"w"),
            output_ref: Ref::of(b"o"),
            replayed: false,
            effects: Vec::new(),
            outcome: Outcome {
                kind: outcome::Kind::Ok,
                reason: None,
                retryable: true,
                remaining: None,
            },
            key: None,
            server_info: false,
        }
    }

    /// The reply written by hand, and as serde_json wrote it.
    fn both_ways(output: &str, is_error: bool, modern: bool) -> (String, String) {
        let id = json!("r-1");
        let by_hand = Reply::result(
            &id,
            MethodResult::Call(CallToolResult {
                output: output.to_owned(),
                is_error,
                nonconforming: None,
                modern: modern.then(ModernFields::complete),
                meta: Box::new(a_meta()),
            }),
        )
        .to_json()
        .unwrap();
        let meta = a_meta();
        let oracle = SerdeReply {
            jsonrpc: "2.0",
            id: &id,
            result: SerdeCallResult {
                content: [SerdeText {
                    kind: "text",
                    text: output,
                }],
                structured_content: serde_json::value::RawValue::from_string(output.to_owned())
                    .unwrap(),
                is_error,
                modern: modern.then(ModernFields::complete),
                meta: &meta,
            },
        };
        (by_hand, serde_json::to_string(&oracle).unwrap())
    }

    #[test]
    fn a_calls_result_written_by_hand_is_what_serde_json_wrote() {
        let file = "line \"one\"\n\tback\\slash \u{1} \u{7f} é \u{2028} 😀";
        let output =
            serde_json::to_string(&json!({"content": file, "ok": true, "path": "f.txt"})).unwrap();
        for (is_error, modern) in [(false, false), (true, false), (false, true), (true, true)] {
            let (by_hand, oracle) = both_ways(&output, is_error, modern);
            assert_eq!(by_hand, oracle);
        }
        let (by_hand, _) = both_ways(r#"{"ok":true}"#, false, true);
        assert_eq!(
            by_hand,
            format!(
                r#"{{"jsonrpc":"2.0","id":"r-1","result":{{"content":[{{"type":"text","text":"{{\"ok\":true}}"}}],"structuredContent":{{"ok":true}},"isError":false,"resultType":"complete","_meta":{}}}}}"#,
                serde_json::to_string(&a_meta()).unwrap()
            )
        );
    }

    /// A nonconforming output: the output as the first text (byte for byte), the note as the
    /// second, `isError`, and no `structuredContent`.
    #[test]
    fn a_nonconforming_output_is_served_as_two_texts_without_structured_content() {
        let output = r#"{"count":"x\n","ok":true}"#;
        let reply = Reply::result(
            &json!(1),
            MethodResult::Call(CallToolResult {
                output: output.to_owned(),
                is_error: true,
                nonconforming: Some("it ran \"here\"".into()),
                modern: None,
                meta: Box::new(a_meta()),
            }),
        )
        .to_json()
        .unwrap();
        let v: Value = serde_json::from_str(&reply).unwrap();
        assert_eq!(
            v["result"]["content"],
            json!([{"type": "text", "text": output}, {"type": "text", "text": "it ran \"here\""}])
        );
        assert_eq!(v["result"]["isError"], true);
        assert!(v["result"].get("structuredContent").is_none(), "{v}");
    }

    proptest::proptest! {
        /// Any committed output, whatever its strings hold, is written as serde_json wrote it.
        #[test]
        fn any_committed_output_is_written_as_serde_json_wrote_it(
            members in proptest::collection::btree_map(
                "(\\PC|[\\x00-\\x1f\"\\\\])", "(\\PC|[\\x00-\\x1f\"\\\\]|é|😀){0,60}", 0..5),
            is_error in proptest::bool::ANY,
            modern in proptest::bool::ANY,
        ) {
            let output = serde_json::to_string(&members).unwrap();
            let (by_hand, oracle) = both_ways(&output, is_error, modern);
            proptest::prop_assert_eq!(by_hand, oracle);
        }
    }
}
