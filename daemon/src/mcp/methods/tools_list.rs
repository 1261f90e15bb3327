//! `tools/list`: the session's tools, in one page.

use broker_core::registry::RegistryEntry;
use serde::Serialize;
use serde_json::{Map, Value};

use super::super::jsonrpc::{Reply, INTERNAL_ERROR, INVALID_PARAMS};
use super::modern_fields::ModernFields;
use super::server_info::server_info_meta;
use super::{Ctx, HostFailure, MethodResult};
use crate::catalog::{self, Runnable};
use crate::tools::{self, SurfaceError};

#[derive(Debug, Serialize)]
pub(in crate::mcp) struct ToolsList {
    tools: Vec<Tool>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    modern: Option<ModernFields>,
    #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
    meta: Option<Map<String, Value>>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Tool {
    name: String,
    title: String,
    description: String,
    input_schema: Value,
    output_schema: Value,
    /// The truth about the tool's effect class ([`tools::annotations`]).
    annotations: Value,
    /// `{"world/cannotRun": "<why>"}` for a tool this daemon cannot run ([`cannot_run`]).
    #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
    meta: Option<Value>,
}

/// The `_meta` member that marks a listed tool this daemon cannot run.
const CANNOT_RUN_META: &str = "world/cannotRun";

/// A listed tool that cannot run here (rule R8: no loaded plugin handles one of its effects,
/// or the episode's worktree is missing) stays listed (a session sees every tool its grants
/// reach), but says so where a model reads: after its description ([`Runnable::marking`]),
/// and in `_meta`. A model that picked it got only `host callback failed`, which reads as
/// "the effect may have run".
fn cannot_run(description: &str, runnable: &Runnable) -> Option<(String, Value)> {
    let (why, paragraph) = runnable.marking()?;
    Some((
        format!("{description}\n\n{paragraph}"),
        serde_json::json!({ CANNOT_RUN_META: why }),
    ))
}

pub(super) async fn tools_list(
    ctx: &Ctx<'_>,
    id: &Value,
    params: Option<&Value>,
) -> Result<Reply, HostFailure> {
    // A `null` cursor is no cursor: clients that serialize an empty field send one.
    if let Some(cursor) = params
        .and_then(|p| p.get("cursor"))
        .filter(|c| !c.is_null())
    {
        // Every list is one page (no `nextCursor` is ever sent), so a cursor was not ours.
        return Ok(Reply::error(
            id,
            INVALID_PARAMS,
            format!(
                "invalid params: unknown cursor {}: tools/list answers in one page and gives no cursor",
                dialect::quote::quote(
                    &cursor
                        .as_str()
                        .map_or_else(|| cursor.to_string(), str::to_owned)
                )
            ),
        ));
    }
    let entries = match surface(ctx).await? {
        Ok(entries) => entries,
        Err(refusal) => return Ok(Reply::error(id, INTERNAL_ERROR, refusal)),
    };
    let tools = entries
        .iter()
        .map(|e| {
            let t = &e.transition;
            let (description, meta) = match cannot_run(
                &t.description,
                &catalog::runnable(ctx.state, ctx.session, t),
            ) {
                Some((d, m)) => (d, Some(m)),
                None => (t.description.clone(), None),
            };
            Tool {
                name: tools::mcp_name(&t.id),
                title: t.title.clone(),
                description,
                input_schema: published_schema(&t.input_schema),
                output_schema: published_schema(&t.output_schema),
                annotations: tools::annotations(tools::tool_class(ctx.state, t)),
                meta,
            }
        })
        .collect();
    Ok(Reply::result(
        id,
        MethodResult::Tools(ToolsList {
            tools,
            modern: ctx.modern().then(ModernFields::cacheable),
            meta: ctx.modern().then(server_info_meta),
        }),
    ))
}

/// MCP requires tool schemas with a top-level `type`; a schema without one gains
/// `"type":"object"` and keeps every other keyword. (The transition validator already demands
/// `"type":"object"`, so today this only guards documents from older registries.) A schema
/// that is not an object is passed through untouched: turning `false` into a permissive
/// object would change its meaning.
fn published_schema(schema: &Value) -> Value {
    match schema {
        Value::Object(m) if !m.contains_key("type") => {
            let mut m = m.clone();
            m.insert("type".into(), Value::String("object".into()));
            Value::Object(m)
        }
        other => other.clone(),
    }
}

/// The session's tool surface, rebuilt now. `Ok(Err(text))` is the 64-byte refusal of the
/// whole surface, a protocol-level answer; registry failures and the deadline are host
/// failures.
async fn surface(ctx: &Ctx<'_>) -> Result<Result<Vec<RegistryEntry>, String>, HostFailure> {
    // One LMDB read of the registry head (the parsed registry is cached): nothing here waits.
    match tools::visible_for_mcp(ctx.state, ctx.session).await {
        Ok(entries) => Ok(Ok(entries)),
        Err(e) => refused(ctx, e).map(Err),
    }
}

/// How MCP answers a tool surface that could not be built (`tools/list` and `tools/call`
/// alike): the refusal's text for a `-32603`, or the host-failure envelope.
pub(super) fn refused(ctx: &Ctx<'_>, e: SurfaceError) -> Result<String, HostFailure> {
    match e {
        refusal @ SurfaceError::NameTooLong(_) => {
            tracing::warn!(episode = %ctx.session.episode, "mcp: {refusal}");
            Ok(refusal.to_string())
        }
        SurfaceError::Registry(cause) => {
            tracing::error!(episode = %ctx.session.episode, "mcp: tool surface unavailable: {cause}");
            Err(HostFailure::Failed)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn schemas_gain_type_object_only_when_untyped() {
        let untyped =
            json!({"properties": {"n": {"type": "integer", "minimum": 1}}, "required": ["n"]});
        assert_eq!(
            published_schema(&untyped),
            json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}, "required": ["n"]})
        );
        let typed = json!({"type": "object", "additionalProperties": false});
        assert_eq!(published_schema(&typed), typed);
        assert_eq!(published_schema(&json!(false)), json!(false));
    }
}
