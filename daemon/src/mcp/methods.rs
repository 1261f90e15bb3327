//! The four MCP methods: `initialize`, `ping`, `tools/list` and `tools/call`.
//!
//! Protocol problems are JSON-RPC errors inside a normal reply; failures of the host (the
//! coordinator, deadlines, callback slots, the registry underneath) are a [`HostFailure`],
//! which the transport turns into the fixed envelope for the whole POST.

use broker_core::coordinator::{Call, CallOutput, Surface};
use broker_core::registry::RegistryEntry;
use broker_core::session::Session;
use serde::Serialize;
use serde_json::{Map, Value};
use tokio::time::Instant;

use super::jsonrpc::{quote, Reply, INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND};
use super::{ADMISSION_DEADLINE, SUPPORTED_VERSIONS};
use crate::state::{AppState, InvokeFailure};
use crate::tools::{self, SurfaceError};

/// What one request runs with.
pub(super) struct Ctx<'a> {
    pub state: &'a AppState,
    pub session: &'a Session,
    /// The aggregate deadline of the POST.
    pub deadline: Instant,
}

/// A failure of the host; the caller sees only [`HostFailure::message`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum HostFailure {
    Failed,
    TimedOut,
    Canceled,
    Capacity,
}

impl HostFailure {
    pub(super) fn message(self) -> &'static str {
        match self {
            HostFailure::Failed => "host callback failed",
            HostFailure::TimedOut => "host callback timed out",
            HostFailure::Canceled => "host callback canceled",
            HostFailure::Capacity => "host callback capacity exceeded",
        }
    }
}

/// Run one request.
pub(super) async fn dispatch(
    ctx: &Ctx<'_>,
    id: &Value,
    method: &str,
    params: Option<Value>,
) -> Result<Reply, HostFailure> {
    match method {
        "initialize" => Ok(initialize(id, params.as_ref())),
        "ping" => Ok(Reply::result(id, MethodResult::Empty(Empty {}))),
        "tools/list" => tools_list(ctx, id).await,
        "tools/call" => tools_call(ctx, id, params).await,
        other => Ok(Reply::error(
            id,
            METHOD_NOT_FOUND,
            format!("method not found: {}", quote(other)),
        )),
    }
}

/// The `result` member of a successful reply.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub(super) enum MethodResult {
    Initialize(InitializeResult),
    Empty(Empty),
    Tools(ToolsList),
    Call(CallToolResult),
}

/// `{}` (a braced struct without fields serializes as an empty object, not `null`).
#[derive(Debug, Serialize)]
pub(super) struct Empty {}

// -- initialize ---------------------------------------------------------------------------

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct InitializeResult {
    protocol_version: &'static str,
    capabilities: Capabilities,
    server_info: ServerInfo,
    instructions: &'static str,
}

#[derive(Debug, Serialize)]
struct Capabilities {
    tools: ToolsCapability,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ToolsCapability {
    list_changed: bool,
}

#[derive(Debug, Serialize)]
struct ServerInfo {
    name: &'static str,
    version: &'static str,
}

const INSTRUCTIONS: &str = "worldd serves World tools. Every tools/call is a new invocation with a fresh random task id: JSON-RPC ids give no idempotency, so a retry may repeat an effect. Every call, refusals and denials included, is committed to the World log; each result carries a `world` block with the plan ref and each effect's status and record ref. If a call fails with a host callback error, the effect may have run: inspect the log before retrying.";

/// The client's requested revision when we speak it, else our newest (the client then
/// decides whether it can continue, as the MCP lifecycle prescribes).
fn initialize(id: &Value, params: Option<&Value>) -> Reply {
    let requested = params
        .and_then(|p| p.get("protocolVersion"))
        .and_then(Value::as_str);
    let protocol_version = SUPPORTED_VERSIONS
        .iter()
        .copied()
        .find(|v| Some(*v) == requested)
        .unwrap_or(SUPPORTED_VERSIONS[0]);
    Reply::result(
        id,
        MethodResult::Initialize(InitializeResult {
            protocol_version,
            capabilities: Capabilities {
                tools: ToolsCapability {
                    list_changed: false,
                },
            },
            server_info: ServerInfo {
                name: "worldd",
                version: env!("CARGO_PKG_VERSION"),
            },
            instructions: INSTRUCTIONS,
        }),
    )
}

// -- tools/list ---------------------------------------------------------------------------

#[derive(Debug, Serialize)]
pub(super) struct ToolsList {
    tools: Vec<Tool>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Tool {
    name: String,
    title: String,
    description: String,
    input_schema: Value,
    output_schema: Value,
}

async fn tools_list(ctx: &Ctx<'_>, id: &Value) -> Result<Reply, HostFailure> {
    let entries = match surface(ctx).await? {
        Ok(entries) => entries,
        Err(refusal) => return Ok(Reply::error(id, INTERNAL_ERROR, refusal)),
    };
    let tools = entries
        .iter()
        .map(|e| {
            let t = &e.transition;
            Tool {
                name: tools::mcp_name(&t.id),
                title: t.title.clone(),
                description: t.description.clone(),
                input_schema: published_schema(&t.input_schema),
                output_schema: published_schema(&t.output_schema),
            }
        })
        .collect();
    Ok(Reply::result(id, MethodResult::Tools(ToolsList { tools })))
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
    let bound = ctx.deadline.min(Instant::now() + ADMISSION_DEADLINE);
    match tokio::time::timeout_at(bound, tools::visible_for_mcp(ctx.state, ctx.session)).await {
        Err(_) => {
            tracing::warn!(episode = %ctx.session.episode, "mcp: building the tool surface timed out");
            Err(HostFailure::TimedOut)
        }
        Ok(Ok(entries)) => Ok(Ok(entries)),
        Ok(Err(refusal @ SurfaceError::NameTooLong(_))) => {
            tracing::warn!(episode = %ctx.session.episode, "mcp: {refusal}");
            Ok(Err(refusal.to_string()))
        }
        Ok(Err(SurfaceError::Registry(cause))) => {
            tracing::error!(episode = %ctx.session.episode, "mcp: tool surface unavailable: {cause}");
            Err(HostFailure::Failed)
        }
    }
}

// -- tools/call ---------------------------------------------------------------------------

/// The result of a committed call. A later revision adds `_meta`; it is one more field here.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct CallToolResult {
    content: Vec<TextContent>,
    structured_content: Value,
    is_error: bool,
}

#[derive(Debug, Serialize)]
struct TextContent {
    #[serde(rename = "type")]
    kind: &'static str,
    text: String,
}

/// `name` and `arguments` of a `tools/call`; the error is the `-32602` text.
fn call_params(params: Option<Value>) -> Result<(String, Value), String> {
    let Some(Value::Object(mut p)) = params else {
        return Err(
            "invalid params: tools/call params must be an object with \"name\" and optional \"arguments\""
                .into(),
        );
    };
    let name = match p.remove("name") {
        Some(Value::String(s)) => s,
        Some(_) => return Err("invalid params: \"name\" must be a string".into()),
        None => return Err("invalid params: \"name\" is missing".into()),
    };
    // Absent and null both mean no arguments, as a Go map decoded from null does upstream.
    let arguments = match p.remove("arguments") {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(v @ Value::Object(_)) => v,
        Some(_) => return Err("invalid params: \"arguments\" must be an object".into()),
    };
    Ok((name, arguments))
}

async fn tools_call(
    ctx: &Ctx<'_>,
    id: &Value,
    params: Option<Value>,
) -> Result<Reply, HostFailure> {
    let (name, args) = match call_params(params) {
        Ok(p) => p,
        Err(text) => return Ok(Reply::error(id, INVALID_PARAMS, text)),
    };
    // Fresh admission: having listed a tool earlier conveys nothing.
    let entries = match surface(ctx).await? {
        Ok(entries) => entries,
        Err(refusal) => return Ok(Reply::error(id, INTERNAL_ERROR, refusal)),
    };
    // Matching on the escaped name (not on an unescaped id) means a name that is not a valid
    // escape simply names no tool.
    let Some(entry) = entries
        .into_iter()
        .find(|e| tools::mcp_name(&e.transition.id) == name)
    else {
        return Ok(Reply::error(
            id,
            INVALID_PARAMS,
            format!("unknown tool {}", quote(&name)),
        ));
    };
    let remaining = ctx.deadline.saturating_duration_since(Instant::now());
    if remaining.is_zero() {
        tracing::warn!(episode = %ctx.session.episode, tool = %name, "mcp: POST deadline passed before the call started");
        return Err(HostFailure::TimedOut);
    }
    let call = Call {
        surface: Surface::Mcp,
        session: ctx.session.clone(),
        skill_id: entry.transition.id.clone(),
        // MCP ids give no idempotency: the coordinator mints a fresh random task id.
        task_id: None,
        args,
        transition_fn: None,
    };
    let tool = entry.transition.id.as_str();
    let episode = ctx.session.episode.as_str();
    match ctx.state.invoke(call, remaining).await {
        Ok(out) => call_result(id, tool, episode, out),
        Err(failure) => {
            let (host, cause) = match failure {
                InvokeFailure::Call(e) => (HostFailure::Failed, e.to_string()),
                InvokeFailure::Capacity => (
                    HostFailure::Capacity,
                    "all host callback slots are busy".to_owned(),
                ),
                InvokeFailure::TimedOut => (
                    HostFailure::TimedOut,
                    "the invocation did not finish before the POST deadline; it may still commit"
                        .to_owned(),
                ),
                InvokeFailure::Canceled => (
                    HostFailure::Canceled,
                    "the invocation task was canceled or panicked".to_owned(),
                ),
            };
            // The wire carries only the fixed message; the operator gets the cause, including
            // the effect record refs of an EffectsUnrecorded failure.
            match host {
                // Load and slow calls are operational, not faults.
                HostFailure::Capacity | HostFailure::TimedOut => {
                    tracing::warn!(%episode, %tool, rpc_id = %id, "mcp tools/call: {}: {cause}", host.message())
                }
                HostFailure::Failed | HostFailure::Canceled => {
                    tracing::error!(%episode, %tool, rpc_id = %id, "mcp tools/call: {}: {cause}", host.message())
                }
            }
            Err(host)
        }
    }
}

/// The committed output, twice: as text holding exactly the committed bytes (so the text's
/// sha256 is the output ref) and as `structuredContent`.
fn call_result(
    id: &Value,
    tool: &str,
    episode: &str,
    out: CallOutput,
) -> Result<Reply, HostFailure> {
    let invocation = out.invocation_id;
    let text = String::from_utf8(out.output).map_err(|_| {
        tracing::error!(%episode, %tool, %invocation, output = %out.output_ref, "mcp: committed output is not UTF-8");
        HostFailure::Failed
    })?;
    let structured: Value = match serde_json::from_str(&text) {
        Ok(v @ Value::Object(_)) => v,
        _ => {
            tracing::error!(%episode, %tool, %invocation, output = %out.output_ref, "mcp: committed output is not a JSON object");
            return Err(HostFailure::Failed);
        }
    };
    tracing::debug!(%episode, %tool, %invocation, entry = out.entry_index, "mcp tools/call committed");
    Ok(Reply::result(
        id,
        MethodResult::Call(CallToolResult {
            content: vec![TextContent { kind: "text", text }],
            structured_content: structured,
            is_error: false,
        }),
    ))
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

    #[test]
    fn call_params_shapes() {
        assert_eq!(
            call_params(Some(json!({"name": "t"}))),
            Ok(("t".into(), json!({})))
        );
        assert_eq!(
            call_params(Some(json!({"name": "t", "arguments": null}))),
            Ok(("t".into(), json!({})))
        );
        assert_eq!(
            call_params(Some(
                json!({"name": "t", "arguments": {"a": 1}, "_meta": {}})
            )),
            Ok(("t".into(), json!({"a": 1})))
        );
        assert_eq!(
            call_params(Some(json!({"name": "t", "arguments": [1]}))),
            Err("invalid params: \"arguments\" must be an object".into())
        );
        assert_eq!(
            call_params(Some(json!({"arguments": {}}))),
            Err("invalid params: \"name\" is missing".into())
        );
        assert_eq!(
            call_params(Some(json!({"name": 1}))),
            Err("invalid params: \"name\" must be a string".into())
        );
        assert!(call_params(None).is_err());
        assert!(call_params(Some(json!(["t"]))).is_err());
    }

    #[test]
    fn initialize_negotiates_the_version() {
        let v = |params: Option<Value>| match initialize(&json!(1), params.as_ref()) {
            Reply::Result {
                result: MethodResult::Initialize(r),
                ..
            } => r.protocol_version,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            v(Some(json!({"protocolVersion": "2025-06-18"}))),
            "2025-06-18"
        );
        assert_eq!(
            v(Some(json!({"protocolVersion": "2025-03-26"}))),
            "2025-03-26"
        );
        assert_eq!(
            v(Some(json!({"protocolVersion": "2024-11-05"}))),
            "2025-11-25"
        );
        assert_eq!(v(None), "2025-11-25");
    }
}
