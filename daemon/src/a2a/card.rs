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
    let skills: Vec<(&RegistryEntry, EffectClass)> = tools
        .iter()
        .map(|e| (e, tools::tool_class(&state, &e.transition)))
        .collect();
    Ok(Json(card(&base, &skills)).into_response())
}

/// The agent card for these tools, each with its effect class. One document serves both
/// client generations: the 0.3 fields (`url`, `protocolVersion`, `preferredTransport`, the
/// `securitySchemes` with `type`, `security`) and the 1.0 `supportedInterfaces`, which 1.0
/// clients prefer (the 0.3 members are then ignored). Each skill's `tags` hold its effect
/// class: `read`, `write` or `unknown`.
pub fn card(base: &str, tools: &[(&RegistryEntry, EffectClass)]) -> Value {
    let skills: Vec<Value> = tools
        .iter()
        .map(|(e, class)| {
            let t = &e.transition;
            json!({
                "id": t.id,
                "name": t.title,
                "description": t.description,
                "tags": [tools::class_name(*class)],
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
