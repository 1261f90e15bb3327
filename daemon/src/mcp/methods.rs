//! The MCP methods: `initialize` and `ping` (handshake revisions), `server/discover`
//! (2026-07-28), `tools/list` and `tools/call` (every revision).
//!
//! Protocol problems are JSON-RPC errors inside a normal reply; failures of the host (the
//! coordinator, deadlines, callback slots, the registry underneath) are a [`HostFailure`],
//! which the transport turns into the fixed envelope for the whole POST. A `tools/call` that
//! carries an idempotency key (`params._meta["world/idempotencyKey"]`) gets named errors
//! instead for the outcomes only a key can have: a conflicting reuse, a call still in flight,
//! a first call that is not confirmed committed.

use std::sync::Arc;

use broker_core::coordinator::{Call, CallError, CallOutput, EffectSummary, Surface};
use broker_core::object::Ref;
use broker_core::registry::RegistryEntry;
use broker_core::session::Session;
use broker_core::task;
use serde::Serialize;
use serde_json::{json, Map, Value};
use tokio::time::Instant;

use super::jsonrpc::{
    quote, Reply, INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND, SESSION_REVOKED,
};
use super::{HANDSHAKE_VERSIONS, IDEMPOTENCY_KEY, MODERN_VERSION};
use crate::outcome::{self, Outcome};
use crate::state::{AppState, InvokeFailure, REVOKED_WHILE_WAITING};
use crate::tools::{self, SurfaceError};

/// The `_meta` key of the 2026-07-28 server identity stamp.
pub(super) const SERVER_INFO_META_KEY: &str = "io.modelcontextprotocol/serverInfo";

/// What one request runs with.
pub(super) struct Ctx<'a> {
    pub state: &'a AppState,
    pub session: &'a Arc<Session>,
    /// The aggregate deadline of the POST.
    pub deadline: Instant,
    /// The protocol revision in force for this POST.
    pub version: &'static str,
    /// The POST's body size: what each call it carries counts as, for the large-call lane.
    pub body_bytes: usize,
}

impl Ctx<'_> {
    /// True under the stateless 2026-07-28 revision.
    pub(super) fn modern(&self) -> bool {
        self.version == MODERN_VERSION
    }
}

/// A failure of the host; the caller sees only [`HostFailure::message`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum HostFailure {
    Failed,
    /// No loaded plugin handles the tool's effect (rule R8), or there is no world: the
    /// fixed "failed" message, classified `refused` / `unavailable`, since nothing ran.
    Unavailable,
    TimedOut,
    /// Too little of the call's deadline was left to start its handler: the timed-out
    /// envelope, classified `refused` / `deadline`, since nothing ran.
    TooLate,
    Canceled,
    Capacity,
    /// The episode's queue was full or stayed busy past the deadline: the capacity envelope,
    /// classified `busy`.
    Busy,
    /// The store is past its reserve: the capacity message, classified `store-full`.
    StoreFull,
}

impl HostFailure {
    pub(super) fn message(self) -> &'static str {
        match self {
            HostFailure::Failed | HostFailure::Unavailable => "host callback failed",
            HostFailure::TimedOut | HostFailure::TooLate => "host callback timed out",
            HostFailure::Canceled => "host callback canceled",
            HostFailure::Capacity | HostFailure::Busy | HostFailure::StoreFull => {
                "host callback capacity exceeded"
            }
        }
    }

    /// The classification of the failure: nothing ran only when admission refused it.
    pub(super) fn outcome(self) -> Outcome {
        match self {
            HostFailure::Failed => Outcome::indeterminate("host"),
            HostFailure::Unavailable => Outcome::unavailable(),
            HostFailure::TimedOut => Outcome::indeterminate("timeout"),
            HostFailure::TooLate => Outcome::too_late(),
            HostFailure::Canceled => Outcome::indeterminate("canceled"),
            HostFailure::Capacity => Outcome::capacity(),
            HostFailure::Busy => Outcome::busy(),
            HostFailure::StoreFull => Outcome::store_full(),
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
    match (method, ctx.modern()) {
        ("initialize", false) => Ok(initialize(id, params.as_ref())),
        ("ping", false) => Ok(Reply::result(id, MethodResult::Empty(Empty {}))),
        ("server/discover", true) => Ok(discover(id)),
        // A `null` cursor is no cursor: clients that serialize an empty field send one.
        ("tools/list", _) => match params
            .as_ref()
            .and_then(|p| p.get("cursor"))
            .filter(|c| !c.is_null())
        {
            // Every list is one page (no `nextCursor` is ever sent), so a cursor was not ours.
            Some(cursor) => Ok(Reply::error(
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
            )),
            None => tools_list(ctx, id).await,
        },
        ("tools/call", _) => tools_call(ctx, id, params).await,
        (other, _) => Ok(Reply::error(
            id,
            METHOD_NOT_FOUND,
            format!("method not found: {}", quote(other)),
        )),
    }
}

/// The `result` member of a successful reply.
#[derive(Debug)]
pub(super) enum MethodResult {
    Initialize(InitializeResult),
    Discover(DiscoverResult),
    Empty(Empty),
    Tools(ToolsList),
    Call(CallToolResult),
}

impl MethodResult {
    /// Append this result to `out` as compact JSON.
    pub(super) fn write_json(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        match self {
            MethodResult::Initialize(r) => serde_json::to_writer(out, r),
            MethodResult::Discover(r) => serde_json::to_writer(out, r),
            MethodResult::Empty(r) => serde_json::to_writer(out, r),
            MethodResult::Tools(r) => serde_json::to_writer(out, r),
            MethodResult::Call(r) => r.write_json(out),
        }
    }
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

const INSTRUCTIONS: &str = "worldd serves World tools. Without an idempotency key every tools/call is a new invocation with a fresh random task id: JSON-RPC ids give no idempotency, so a retry may repeat an effect. To make a write exactly-once, send a key in params._meta[\"world/idempotencyKey\"] (1-128 of A-Z a-z 0-9 . _ -): resending the same key with the same arguments returns the committed result without running again. Every call, refusals and denials included, is committed to the World log; each result carries a `world` block with the plan ref and each effect's status and record ref, and a _meta block with the invocation id, entry index, world ref, budgetAfter and an outcome classification {kind, reason, retryable}. If a call fails with a host callback error, the effect may have run: reconcile (GET /v1/calls/mcp/<key> or /v1/invocations/<id>) or inspect the log before retrying.";

/// The members of `initialize`'s params that every revision's `InitializeRequest` requires, and
/// the JSON type each must have. Every real client (the Python and TypeScript SDKs, rmcp, the
/// Inspector) sends all three.
type Required = (&'static str, &'static str, fn(&Value) -> bool);
const INITIALIZE_REQUIRES: [Required; 3] = [
    ("protocolVersion", "a string", Value::is_string),
    ("capabilities", "an object", Value::is_object),
    ("clientInfo", "an object", Value::is_object),
];

/// The params of `initialize` against [`INITIALIZE_REQUIRES`]: the protocol version they
/// request, or the `-32602` message naming every member missing (or the first of a wrong type).
fn initialize_params(params: Option<&Value>) -> Result<&str, String> {
    let Some(Value::Object(p)) = params else {
        return Err(
            "invalid params: initialize params must be an object with \"protocolVersion\", \"capabilities\" and \"clientInfo\""
                .into(),
        );
    };
    let missing: Vec<String> = INITIALIZE_REQUIRES
        .iter()
        .filter(|(name, ..)| !p.contains_key(*name))
        .map(|(name, ..)| quote(name))
        .collect();
    match missing.as_slice() {
        [] => {}
        [one] => return Err(format!("invalid params: {one} is missing")),
        [first @ .., last] => {
            return Err(format!(
                "invalid params: {} and {last} are missing",
                first.join(", ")
            ))
        }
    }
    for (name, kind, is) in INITIALIZE_REQUIRES {
        if !is(&p[name]) {
            return Err(format!("invalid params: {} must be {kind}", quote(name)));
        }
    }
    Ok(p["protocolVersion"].as_str().unwrap_or_default())
}

/// The client's requested revision when the handshake speaks it, else its newest (the client
/// then decides whether it can continue, as the MCP lifecycle prescribes). 2026-07-28 has no
/// handshake: it is never the answer to `initialize`. Params without what the spec requires
/// are invalid params: nothing is negotiated.
fn initialize(id: &Value, params: Option<&Value>) -> Reply {
    let requested = match initialize_params(params) {
        Ok(requested) => Some(requested),
        Err(text) => return Reply::error(id, INVALID_PARAMS, text),
    };
    let protocol_version = HANDSHAKE_VERSIONS
        .iter()
        .copied()
        .find(|v| Some(*v) == requested)
        .unwrap_or(HANDSHAKE_VERSIONS[0]);
    Reply::result(
        id,
        MethodResult::Initialize(InitializeResult {
            protocol_version,
            capabilities: Capabilities {
                tools: ToolsCapability {
                    list_changed: false,
                },
            },
            server_info: ServerInfo::ours(),
            instructions: INSTRUCTIONS,
        }),
    )
}

// -- server/discover (2026-07-28) ---------------------------------------------------------

/// The stateless revision's replacement for `initialize`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct DiscoverResult {
    supported_versions: [&'static str; 1],
    capabilities: Capabilities,
    instructions: &'static str,
    #[serde(flatten)]
    modern: ModernFields,
    #[serde(rename = "_meta")]
    meta: Map<String, Value>,
}

/// The members every 2026-07-28 result carries: `resultType`, the cache hints of cacheable
/// results, and the `_meta` server identity stamp (plus any of our own `_meta` members).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ModernFields {
    result_type: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    ttl_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_scope: Option<&'static str>,
}

impl ModernFields {
    /// A cacheable result. Every answer depends on the caller's credential (its grants pick
    /// the tools), so the scope is `private`; the registry can change at any publish, so the
    /// time-to-live is 0.
    fn cacheable() -> ModernFields {
        ModernFields {
            result_type: "complete",
            ttl_ms: Some(0),
            cache_scope: Some("private"),
        }
    }

    fn complete() -> ModernFields {
        ModernFields {
            result_type: "complete",
            ttl_ms: None,
            cache_scope: None,
        }
    }
}

/// A 2026-07-28 `_meta` holding only the server identity stamp.
fn server_info_meta() -> Map<String, Value> {
    let mut m = Map::new();
    // One stamp, the same as `serverInfo` and a committed call's `_meta` write.
    if let Ok(stamp) = serde_json::to_value(ServerInfo::ours()) {
        m.insert(SERVER_INFO_META_KEY.into(), stamp);
    }
    m
}

fn discover(id: &Value) -> Reply {
    Reply::result(
        id,
        MethodResult::Discover(DiscoverResult {
            supported_versions: [MODERN_VERSION],
            capabilities: Capabilities {
                tools: ToolsCapability {
                    list_changed: false,
                },
            },
            instructions: INSTRUCTIONS,
            modern: ModernFields::cacheable(),
            meta: server_info_meta(),
        }),
    )
}

// -- tools/list ---------------------------------------------------------------------------

#[derive(Debug, Serialize)]
pub(super) struct ToolsList {
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
                annotations: tools::annotations(tools::tool_class(ctx.state, t)),
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
        Err(refusal @ SurfaceError::NameTooLong(_)) => {
            tracing::warn!(episode = %ctx.session.episode, "mcp: {refusal}");
            Ok(Err(refusal.to_string()))
        }
        Err(SurfaceError::Registry(cause)) => {
            tracing::error!(episode = %ctx.session.episode, "mcp: tool surface unavailable: {cause}");
            Err(HostFailure::Failed)
        }
    }
}

// -- tools/call ---------------------------------------------------------------------------

/// The result of a committed call: the committed output twice, then `_meta`.
#[derive(Debug)]
pub(super) struct CallToolResult {
    /// The committed output as stored: canonical JSON, one object
    /// ([`crate::json_scan::is_one_object`]).
    output: String,
    is_error: bool,
    modern: Option<ModernFields>,
    /// Boxed: the other results are small, and a reply is moved a few times.
    meta: Box<CallMeta>,
}

impl CallToolResult {
    /// `{"content":[{"type":"text","text":…}],"structuredContent":…,"isError":…,` the
    /// revision's fields, `"_meta":…}`. Written by hand around the output, which may hold a
    /// whole file: its text is escaped 32 bytes a step
    /// ([`dialect::quote::push_escaped_bytes`]), where serde_json escapes a byte at a time,
    /// and it is copied as stored for `structuredContent`, where serde_json would parse it
    /// again to check it.
    fn write_json(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        out.reserve(2 * self.output.len() + 1024);
        out.extend_from_slice(br#"{"content":[{"type":"text","text":""#);
        dialect::quote::push_escaped_bytes(out, &self.output);
        out.extend_from_slice(br#""}],"structuredContent":"#);
        out.extend_from_slice(self.output.as_bytes());
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
pub(super) struct CallMeta {
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

impl ServerInfo {
    fn ours() -> ServerInfo {
        ServerInfo {
            name: "worldd",
            version: env!("CARGO_PKG_VERSION"),
        }
    }
}

/// The parsed params of a `tools/call`.
#[derive(Debug, PartialEq)]
struct CallParams {
    name: String,
    arguments: Value,
    /// `_meta["world/idempotencyKey"]`, validated.
    key: Option<String>,
}

/// `name`, `arguments` and the optional idempotency key of a `tools/call`; the error is the
/// `-32602` text.
fn call_params(params: Option<Value>) -> Result<CallParams, String> {
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
    // A `_meta` of another type would hide the key it may carry: the call would run unkeyed
    // (at least once) where the client asked for at most once.
    let meta = match p.get("_meta") {
        None | Some(Value::Null) => None,
        Some(m @ Value::Object(_)) => Some(m),
        Some(_) => return Err("invalid params: \"_meta\" must be an object".into()),
    };
    let key = match meta.and_then(|m| m.get(IDEMPOTENCY_KEY)) {
        None | Some(Value::Null) => None,
        Some(Value::String(k)) if task::valid_task_id(k) => Some(k.clone()),
        Some(_) => {
            return Err(format!(
                "invalid params: _meta {} must be 1-128 characters of A-Z a-z 0-9 . _ -",
                quote(IDEMPOTENCY_KEY)
            ))
        }
    };
    Ok(CallParams {
        name,
        arguments,
        key,
    })
}

async fn tools_call(
    ctx: &Ctx<'_>,
    id: &Value,
    params: Option<Value>,
) -> Result<Reply, HostFailure> {
    let CallParams {
        name,
        arguments: args,
        key,
    } = match call_params(params) {
        Ok(p) => p,
        Err(text) => return Ok(Reply::error(id, INVALID_PARAMS, text)),
    };
    let entry = match tool_named(ctx, id, &name).await? {
        Ok(entry) => entry,
        Err(reply) => return Ok(reply),
    };
    let remaining = ctx.deadline.saturating_duration_since(Instant::now());
    if remaining.is_zero() {
        tracing::warn!(episode = %ctx.session.episode, tool = %name, "mcp: POST deadline passed before the call started");
        return Err(HostFailure::TimedOut);
    }
    let class = tools::tool_class(ctx.state, &entry.transition);
    let keyed_args = key.as_ref().map(|_| args.clone());
    let call = Call {
        surface: Surface::Mcp,
        session: ctx.session.clone(),
        skill_id: entry.transition.id.clone(),
        // Without a key, MCP ids give no idempotency: the coordinator mints a fresh random
        // task id. With one, the key is the task id, and the journal makes the call
        // exactly-once within the episode.
        task_id: key.clone(),
        args,
        transition_fn: None,
    };
    let tool = entry.transition.id.as_str();
    let episode = ctx.session.episode.as_str();
    match ctx.state.invoke(call, ctx.deadline, ctx.body_bytes).await {
        Ok(out) => {
            let outcome = outcome::of_output(&out, class);
            call_result(ctx, id, tool, out, outcome, key.as_deref())
        }
        Err(InvokeFailure::Revoked) => {
            // Nothing ran or was journaled: an authentication error, not a host failure.
            tracing::info!(%episode, %tool, rpc_id = %id, "mcp tools/call: {REVOKED_WHILE_WAITING}");
            Ok(Reply::error(id, SESSION_REVOKED, REVOKED_WHILE_WAITING))
        }
        Err(InvokeFailure::Call(
            e @ (CallError::InvalidArguments(_) | CallError::InvalidTaskId),
        )) => {
            // Refused in admission, before anything was journaled: a protocol error that
            // promises nothing ran, never the host-failure envelope.
            tracing::info!(%episode, %tool, rpc_id = %id, "mcp tools/call: {e}");
            Ok(Reply::error(id, INVALID_PARAMS, e.to_string()))
        }
        Err(failure) => {
            if let (Some(k), Some(a), InvokeFailure::Call(e)) =
                (key.as_deref(), keyed_args.as_ref(), &failure)
            {
                if let Some(reply) = keyed_error(ctx, id, k, tool, a, e).await {
                    return Ok(reply);
                }
            }
            Err(host_failure(episode, tool, id, failure))
        }
    }
}

/// The tool this session may call under the MCP name `name`, or the protocol error that
/// answers the call instead. Admission is fresh: having listed a tool earlier conveys nothing.
async fn tool_named(
    ctx: &Ctx<'_>,
    id: &Value,
    name: &str,
) -> Result<Result<RegistryEntry, Reply>, HostFailure> {
    let mut entries = match surface(ctx).await? {
        Ok(entries) => entries,
        Err(refusal) => return Ok(Err(Reply::error(id, INTERNAL_ERROR, refusal))),
    };
    // Matching on the escaped name (not on an unescaped id) means a name that is not a valid
    // escape simply names no tool.
    if let Some(i) = entries
        .iter()
        .position(|e| tools::escapes_to(&e.transition.id, name))
    {
        return Ok(Ok(entries.swap_remove(i)));
    }
    // The contract's message, and in `data` the nearest of this session's own tools (never one
    // it cannot see), so that a model can correct a misspelt name.
    let message = format!("unknown tool {}", quote(name));
    let names: Vec<String> = entries
        .iter()
        .map(|e| tools::mcp_name(&e.transition.id))
        .collect();
    let why = crate::spelling::unknown_name(
        name,
        names.iter().map(String::as_str),
        "tool",
        "tools/list shows this session's tools",
    );
    Ok(Err(Reply::error_with_data(
        id,
        INVALID_PARAMS,
        message,
        serde_json::json!({ "why": why }),
    )))
}

/// The envelope that answers a call the host failed. The wire carries only its fixed message;
/// the operator's log gets the cause, including the effect record refs of an
/// EffectsUnrecorded failure.
fn host_failure(episode: &str, tool: &str, id: &Value, failure: InvokeFailure) -> HostFailure {
    let (host, cause) = match failure {
        // Nothing ran: the store is past its reserve (the operator's log says why).
        InvokeFailure::Call(e @ CallError::StoreFull(_)) => (HostFailure::StoreFull, e.to_string()),
        // Nothing ran either: no plugin here runs the tool, or there is no world.
        InvokeFailure::Call(
            e @ (CallError::NoHandler | CallError::NoWorktree(_) | CallError::NoWorld),
        ) => {
            (HostFailure::Unavailable, e.to_string())
        }
        // Nothing ran: too little of the deadline was left to start the handler.
        InvokeFailure::Call(e @ (CallError::NoTimeToStart | CallError::PreflightTimedOut)) => {
            (HostFailure::TooLate, e.to_string())
        }
        InvokeFailure::Call(e) => (HostFailure::Failed, e.to_string()),
        InvokeFailure::Capacity => (
            HostFailure::Capacity,
            "all execution slots stayed busy".to_owned(),
        ),
        InvokeFailure::Busy => (
            HostFailure::Busy,
            "an earlier call of this episode is still running (queue full, or it outlasted this call's deadline); nothing ran".to_owned(),
        ),
        InvokeFailure::TimedOut => (
            HostFailure::TimedOut,
            "the handler overran its deadline (its outcome is journaled when it returns; the call is not committed), or the POST deadline passed (the call may still commit)"
                .to_owned(),
        ),
        InvokeFailure::Canceled => (
            HostFailure::Canceled,
            "the invocation task was canceled or panicked".to_owned(),
        ),
        // Answered before this (`tools_call`); never a host failure in fact.
        InvokeFailure::Revoked => (HostFailure::Failed, REVOKED_WHILE_WAITING.to_owned()),
    };
    match host {
        // Load and slow calls are operational, not faults.
        // Capacity refusals are counted in /v1/metrics; a log line each would flood
        // stderr exactly when the daemon is busiest.
        HostFailure::Capacity | HostFailure::Busy | HostFailure::StoreFull => {
            tracing::debug!(%episode, %tool, rpc_id = %id, "mcp tools/call: {}: {cause}", host.message())
        }
        // A tool no loaded plugin can run is the deployment's choice, not a fault.
        HostFailure::Unavailable => {
            tracing::warn!(%episode, %tool, rpc_id = %id, "mcp tools/call: {}: {cause}", host.message())
        }
        HostFailure::TimedOut | HostFailure::TooLate => {
            tracing::warn!(%episode, %tool, rpc_id = %id, "mcp tools/call: {}: {cause}", host.message())
        }
        HostFailure::Failed | HostFailure::Canceled => {
            tracing::error!(%episode, %tool, rpc_id = %id, "mcp tools/call: {}: {cause}", host.message())
        }
    }
    host
}

/// The named errors of a keyed call, for the coordinator outcomes only a key can have;
/// `None` leaves the error to the generic host-failure envelope.
async fn keyed_error(
    ctx: &Ctx<'_>,
    id: &Value,
    key: &str,
    tool: &str,
    args: &Value,
    error: &CallError,
) -> Option<Reply> {
    let episode = &ctx.session.episode;
    let reconcile = format!(
        "reconcile with GET /v1/calls/mcp/{key} (worldd calls get {key}) instead of retrying"
    );
    let q = quote(key);
    let (code, message, outcome, records) = match error {
        CallError::TaskIdReused => {
            // The coordinator says "reused" both for a key stored with other arguments and for
            // a key whose call is still running: the task table tells them apart.
            let o = outcome::reuse(ctx.state, ctx.session, Surface::Mcp, key, tool, args).await;
            if o.kind == outcome::Kind::Refused {
                (
                    INVALID_PARAMS,
                    format!("idempotency key {q} was already used with other arguments in this episode"),
                    o,
                    None,
                )
            } else {
                (
                    INTERNAL_ERROR,
                    format!("idempotency key {q} is held by a call that has not finished; do not resend yet: {reconcile}"),
                    o,
                    None,
                )
            }
        }
        CallError::NotCommitted => (
            INTERNAL_ERROR,
            format!("idempotency key {q}: the first call with this key was not confirmed committed and its effect may have run; {reconcile}"),
            Outcome::indeterminate("pending"),
            None,
        ),
        CallError::EffectsUnrecorded { records } => (
            INTERNAL_ERROR,
            format!("idempotency key {q}: an effect ran but the call was not committed; {reconcile}"),
            Outcome::indeterminate("unrecorded"),
            Some(json!(records)),
        ),
        _ => return None,
    };
    let mut data = match outcome.to_json() {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    data.insert("idempotencyKey".into(), json!(key));
    data.insert(
        "invocationId".into(),
        json!(Surface::Mcp.invocation_id(episode, key)),
    );
    if let Some(r) = records {
        data.insert("records".into(), r);
    }
    tracing::warn!(%episode, %tool, rpc_id = %id, "mcp tools/call with key {key}: {error}");
    Some(Reply::error_with_data(
        id,
        code,
        message,
        Value::Object(data),
    ))
}

/// The committed output, twice: as text holding exactly the committed bytes (so the text's
/// sha256 is the output ref) and as `structuredContent`; then `_meta` with the provenance
/// handles and the outcome classification.
fn call_result(
    ctx: &Ctx<'_>,
    id: &Value,
    tool: &str,
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
    let is_error = outcome.kind != outcome::Kind::Ok;
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
            modern: modern.then(ModernFields::complete),
            meta,
        }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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

    fn plain(name: &str, arguments: Value) -> Result<CallParams, String> {
        Ok(CallParams {
            name: name.into(),
            arguments,
            key: None,
        })
    }

    #[test]
    fn call_params_shapes() {
        assert_eq!(
            call_params(Some(json!({"name": "t"}))),
            plain("t", json!({}))
        );
        assert_eq!(
            call_params(Some(json!({"name": "t", "arguments": null}))),
            plain("t", json!({}))
        );
        assert_eq!(
            call_params(Some(
                json!({"name": "t", "arguments": {"a": 1}, "_meta": {}})
            )),
            plain("t", json!({"a": 1}))
        );
        assert_eq!(
            call_params(Some(
                json!({"name": "t", "_meta": {"world/idempotencyKey": "k-1.x_y"}})
            )),
            Ok(CallParams {
                name: "t".into(),
                arguments: json!({}),
                key: Some("k-1.x_y".into())
            })
        );
        for bad in [json!(""), json!("a b"), json!(7), json!("x".repeat(129))] {
            assert_eq!(
                call_params(Some(json!({"name": "t", "_meta": {"world/idempotencyKey": bad}}))),
                Err("invalid params: _meta \"world/idempotencyKey\" must be 1-128 characters of A-Z a-z 0-9 . _ -".into())
            );
        }
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
        let asking = |version: &str| {
            Some(json!({"protocolVersion": version, "capabilities": {},
                        "clientInfo": {"name": "t", "version": "0"}}))
        };
        assert_eq!(v(asking("2025-06-18")), "2025-06-18");
        assert_eq!(v(asking("2025-03-26")), "2025-03-26");
        assert_eq!(v(asking("2024-11-05")), "2025-11-25");
        // The stateless revision has no handshake.
        assert_eq!(v(asking("2026-07-28")), "2025-11-25");
    }
}
