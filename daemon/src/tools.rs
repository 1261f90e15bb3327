//! The tool surface a session sees, shared by MCP `tools/list` and `tools/call` and by the A2A
//! agent card and sends: the same function, rebuilt for every request from the session's
//! grants (the coordinator checks the grants again when it opens a call).

use broker_core::registry::RegistryEntry;
use broker_core::session::Session;
use broker_core::transition::Transition;
use handler_api::EffectClass;

use crate::state::AppState;

pub use dialect::names::{escapes_to, mcp_name, mcp_name_len, transition_id, MAX_MCP_NAME};

/// What a tool may do to the world, from the classes of every effect it may plan: `read`
/// only if all are reads; `unknown` if any is unknown or served by no loaded plugin.
pub fn tool_class(state: &AppState, t: &Transition) -> EffectClass {
    let mut class = EffectClass::Read;
    for e in &t.declared_effects {
        match state.effect_class(&e.effect) {
            None | Some(EffectClass::Unknown) => return EffectClass::Unknown,
            Some(EffectClass::Write) => class = EffectClass::Write,
            Some(EffectClass::Read) => {}
        }
    }
    class
}

/// The class of the tool `skill_id` names in the registry now, for an earlier call's outcome:
/// a tool gone from the registry since is `unknown`, which classifies as a write would (never
/// retryable).
pub fn class_of(state: &AppState, skill_id: &str) -> EffectClass {
    state
        .coordinator()
        .registry()
        .ok()
        .and_then(|reg| reg.get(skill_id).map(|e| tool_class(state, &e.transition)))
        .unwrap_or(EffectClass::Unknown)
}

/// The lowercase name of a class, as published in tags and docs.
pub fn class_name(class: EffectClass) -> &'static str {
    match class {
        EffectClass::Read => "read",
        EffectClass::Write => "write",
        EffectClass::Unknown => "unknown",
    }
}

/// MCP tool annotations that tell the truth about a class: only reads are read-only and
/// idempotent; writes and unknowns may destroy; only unknowns reach beyond the worktree.
pub fn annotations(class: EffectClass) -> serde_json::Value {
    let read = class == EffectClass::Read;
    serde_json::json!({
        "readOnlyHint": read,
        "destructiveHint": !read,
        "idempotentHint": read,
        "openWorldHint": class == EffectClass::Unknown,
    })
}

/// Why the tool surface could not be built.
#[derive(Debug, thiserror::Error)]
pub enum SurfaceError {
    #[error("tool {0:?} has an MCP name longer than 64 bytes; the tool surface is refused")]
    NameTooLong(String),
    #[error("{0}")]
    Registry(String),
}

/// The tools this session may see and call, in id order.
pub async fn visible(
    state: &AppState,
    session: &Session,
) -> Result<Vec<RegistryEntry>, SurfaceError> {
    // One LMDB read of the registry head (the parsed registry is cached until it moves):
    // cheaper inline than a hop to the blocking pool on every request.
    state
        .coordinator()
        .visible(session)
        .map_err(|e| SurfaceError::Registry(e.to_string()))
}

/// Same, with the 64-byte MCP name rule applied to the whole surface.
pub async fn visible_for_mcp(
    state: &AppState,
    session: &Session,
) -> Result<Vec<RegistryEntry>, SurfaceError> {
    let tools = visible(state, session).await?;
    if let Some(t) = tools
        .iter()
        .find(|t| mcp_name_len(&t.transition.id) > MAX_MCP_NAME)
    {
        return Err(SurfaceError::NameTooLong(t.transition.id.clone()));
    }
    Ok(tools)
}
