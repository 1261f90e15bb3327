//! The agent card at `GET /.well-known/agent-card.json` (and the older
//! `/.well-known/agent.json`): the tools this session sees, as skills.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use broker_core::registry::RegistryEntry;
use handler_api::EffectClass;
use serde_json::{json, Value};

use super::A2A_VERSIONS;
use crate::catalog::{self, Runnable};
use crate::rest::ApiError;
use crate::state::AppState;
use crate::tools;

pub(super) async fn agent_card(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let session = state
        .authenticate(&headers)
        .await
        .map_err(ApiError::from_auth)?;
    // Never built from the request: its Host header is the attacker's to choose.
    let base = state.server().public_base();
    let tools = tools::visible(&state, &session)
        .await
        .map_err(|e| ApiError::internal("agent card", e))?;
    let skills: Vec<Skill<'_>> = tools
        .iter()
        .map(|e| Skill {
            entry: e,
            class: tools::tool_class(&state, &e.transition),
            runnable: catalog::runnable(&state, &session, &e.transition),
        })
        .collect();
    Ok(Json(card(&base, &skills)).into_response())
}

/// One tool as a skill of the card.
pub struct Skill<'e> {
    pub entry: &'e RegistryEntry,
    /// Its effect class.
    pub class: EffectClass,
    /// Whether this daemon can run it for the session (rule R8).
    pub runnable: Runnable,
}

/// The tag of a skill this daemon cannot run for the session.
pub const CANNOT_RUN_TAG: &str = "cannot-run";

/// The agent card for these tools. One document serves both client generations: the 0.3
/// fields (`url`, `protocolVersion`, `preferredTransport`, the `securitySchemes` with `type`,
/// `security`) and the 1.0 `supportedInterfaces`, which 1.0 clients prefer (the 0.3 members
/// are then ignored). Each skill's `tags` hold its effect class: `read`, `write` or `unknown`.
/// A skill that cannot run here is marked as MCP `tools/list` marks it (an agent picks a
/// skill from the card, and learned only from the refusal): the same paragraph after its
/// `description`, and the tag `cannot-run` (both plain strings in either A2A version).
pub fn card(base: &str, tools: &[Skill<'_>]) -> Value {
    let skills: Vec<Value> = tools
        .iter()
        .map(|skill| {
            let t = &skill.entry.transition;
            let mut tags = vec![tools::class_name(skill.class).to_owned()];
            let description = match skill.runnable.marking() {
                Some((_, paragraph)) => {
                    tags.push(CANNOT_RUN_TAG.to_owned());
                    format!("{}\n\n{paragraph}", t.description)
                }
                None => t.description.clone(),
            };
            json!({
                "id": t.id,
                "name": t.title,
                "description": description,
                "tags": tags,
                "examples": [],
                "inputModes": ["application/json"],
                "outputModes": ["application/json"],
            })
        })
        .collect();
    let url = format!("{base}/a2a/");
    let interfaces: Vec<Value> = A2A_VERSIONS
        .iter()
        .map(|v| json!({"url": url, "protocolBinding": "JSONRPC", "protocolVersion": v}))
        .collect();
    json!({
        "name": "worldd",
        "description": "World effect broker: every tool call is planned, admitted against capability grants, executed by a plugin and committed to a verifiable log.",
        "url": url,
        "version": env!("CARGO_PKG_VERSION"),
        "protocolVersion": "0.3.0",
        "preferredTransport": "JSONRPC",
        "supportedInterfaces": interfaces,
        "capabilities": {"streaming": false, "pushNotifications": false, "stateTransitionHistory": false, "extendedAgentCard": false},
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "description": "the worldd session credential (worldd session new)"}},
        "security": [{"bearer": []}],
        "defaultInputModes": ["application/json"],
        "defaultOutputModes": ["application/json"],
        "skills": skills,
    })
}
