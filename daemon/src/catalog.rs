//! What this daemon can run, and why a tool cannot: `GET /v1/handlers`.
//!
//! A tool whose plugin is missing or declined to start is still listed to agents (the registry
//! keeps it), and every call to it is refused by rule R8 before anything runs. Over MCP that
//! refusal is the fixed `host callback failed` envelope, which also covers failures after an
//! effect ran; this route lets a client (and `worldd call`) tell the two apart. It answers, for
//! any valid session:
//!
//! ```json
//! {"plugins":[{"name":"workspace","version":"0.1.0","identity":"workspace 0.1.0 (sha256:…)",
//!              "library":"sha256:…","path":"libworldd_workspace.so",
//!              "effects":[{"effect":"Workspace.Read","class":"read"}]}],
//!  "declined":[{"name":"ailang","path":"libworldd_ailang.so","reason":"declined: …",
//!               "effects":[{"effect":"Ailang.Run","class":"write"}]}],
//!  "unselected":[{"name":"git","path":"libworldd_git.so",
//!                 "effects":[{"effect":"Git.Commit","class":"write"}]}],
//!  "tools":[{"name":"ailang-read","effects":["Workspace.Read"],"canRun":true},
//!           {"name":"ailang-run","effects":["Ailang.Run"],"canRun":false,
//!            "reason":"transition declares an effect this daemon has no handler for (Ailang.Run)",
//!            "plugin":"ailang"}]}
//! ```
//!
//! An operator credential gets each `path` as the absolute path it was loaded from; an agent's
//! session only its file name (where the operator keeps plugins is not the agent's to learn).
//! `tools` are the tools the calling session sees (the same function as MCP `tools/list`), and
//! `canRun` applies rule R8 exactly as the coordinator does: every declared effect needs a
//! loaded handler, and a `worktree`-scoped effect needs the episode's worktree.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::get;
use axum::{Json, Router};
use broker_core::coordinator::{worktree_of, CallError, R8_MESSAGE};
use broker_core::session::Session;
use broker_core::transition::Transition;
use handler_api::EffectClass;
use serde::Serialize;
use serde_json::{json, Value};

use crate::rest::ApiError;
use crate::state::AppState;
use crate::tools;

/// A plugin that loaded and serves effects.
#[derive(Debug, Clone, Serialize)]
pub struct LoadedPlugin {
    pub name: String,
    pub version: String,
    /// The identity its effect records carry, in words: `name version (library ref)`.
    pub identity: String,
    /// The sha256 of the library bytes that were loaded: `handler.library` in effect records.
    pub library: String,
    pub path: String,
    pub effects: Vec<PluginEffect>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PluginEffect {
    pub effect: String,
    pub class: EffectClass,
}

/// A plugin that was found but declined to start; its tools are refused by R8.
#[derive(Debug, Clone, Serialize)]
pub struct DeclinedPlugin {
    pub name: String,
    pub path: String,
    /// The plugin's own words (`declined: …`), naming what the operator must configure.
    pub reason: String,
    /// The effects its manifest declares, which no handler serves here: what lets a client
    /// name this plugin as the cause of a tool's refusal, and not every plugin that declined.
    pub effects: Vec<PluginEffect>,
}

/// A plugin that was found but is not selected here (`--handler`, `[serve] handlers`); its
/// tools are refused by R8.
#[derive(Debug, Clone, Serialize)]
pub struct UnselectedPlugin {
    pub name: String,
    pub path: String,
    /// The effects its manifest declares, as for [`DeclinedPlugin`].
    pub effects: Vec<PluginEffect>,
}

/// The plugins of a running daemon, fixed at start-up.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    pub plugins: Vec<LoadedPlugin>,
    pub declined: Vec<DeclinedPlugin>,
    pub unselected: Vec<UnselectedPlugin>,
}

/// Whether a session can run a tool here, and if not, why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Runnable {
    Yes,
    /// A declared effect has no loaded handler: R8's text and the effects.
    No(String),
    /// Every handler is loaded, but the episode's worktree is missing (or a link): what is
    /// wrong with it, which holds for every worktree-scoped tool of the session alike.
    NoWorktree(String),
}

impl Runnable {
    /// For a tool that cannot run here: the cause to name, and the paragraph a listing (MCP
    /// `tools/list`, the A2A agent card) puts after its description, where a model reads. A
    /// missing handler is the tool's own: another tool may do. A missing worktree is the
    /// session's, the same for every tool that works in it: another tool is no way out, and
    /// "no handler" is not what is wrong. `None` when it can run.
    pub fn marking(&self) -> Option<(&str, String)> {
        const REFUSED: &str = "A call is refused before anything runs (host callback failed; nothing ran, nothing was spent)";
        let (why, what_to_do) = match self {
            Runnable::Yes => return None,
            Runnable::No(why) => (why, "use another tool."),
            Runnable::NoWorktree(why) => (
                why,
                "no tool of this session that works in its worktree can run until an operator has fixed that, so do not try another such tool.",
            ),
        };
        let joint = if matches!(self, Runnable::No(_)) {
            ":"
        } else {
            ";"
        };
        Some((
            why,
            format!("Cannot run here: {why}. {REFUSED}{joint} {what_to_do}"),
        ))
    }

    /// Why the tool cannot run (R8's text first for a missing handler); `None` when it can. A
    /// missing worktree has a lead-in of its own: "no handler" before it sent operators
    /// looking for a plugin when the episode's directory was what was missing.
    pub fn reason(&self) -> Option<String> {
        match self {
            Runnable::Yes => None,
            Runnable::No(why) => Some(why.clone()),
            Runnable::NoWorktree(why) => Some(format!("{NO_WORKTREE_LEAD}: {why}")),
        }
    }
}

/// What a tool's `reason` says first when the session's episode has no worktree it can run in.
const NO_WORKTREE_LEAD: &str = "no usable worktree for this episode";

/// Rule R8 for one tool and session, as the coordinator applies it before planning.
pub fn runnable(state: &AppState, session: &Session, t: &Transition) -> Runnable {
    let handlers = state.coordinator().handlers();
    let mut missing: Vec<&str> = Vec::new();
    for e in &t.declared_effects {
        if handlers.get(&e.effect).is_none() && !missing.contains(&e.effect.as_str()) {
            missing.push(&e.effect);
        }
    }
    if !missing.is_empty() {
        return Runnable::No(format!("{R8_MESSAGE} ({})", missing.join(", ")));
    }
    // Every effect served, but by another plugin than the one that ships the tool.
    if let Some(plugin) = handlers.not_running(&t.id) {
        return Runnable::No(format!(
            "{R8_MESSAGE} (its plugin {plugin} is not started here)"
        ));
    }
    let needs_worktree = t.declared_effects.iter().any(|e| e.scope == "worktree");
    if let (true, Some(root)) = (needs_worktree, state.coordinator().workspace_root()) {
        if let Err(missing) = worktree_of(root, &session.episode) {
            // What an operator does, which is not `session new` for an episode that already
            // has its credential; A2A's refusal of a call puts R8's text before it (the seed's
            // words), the reason here a lead-in of its own.
            return Runnable::NoWorktree(match missing {
                CallError::NoWorktree(why) => why,
                other => other.to_string(),
            });
        }
    }
    Runnable::Yes
}

/// `GET /v1/handlers`.
pub fn routes() -> Router<AppState> {
    Router::new().route("/v1/handlers", get(handlers))
}

async fn handlers(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let session = state
        .authenticate(&headers)
        .await
        .map_err(ApiError::from_auth)?;
    let visible = tools::visible(&state, &session)
        .await
        .map_err(|e| ApiError::internal("handlers", e))?;
    let tools: Vec<Value> = visible
        .iter()
        .map(|entry| {
            let t = &entry.transition;
            let mut effects: Vec<&str> = Vec::new();
            for e in &t.declared_effects {
                if !effects.contains(&e.effect.as_str()) {
                    effects.push(&e.effect);
                }
            }
            let mut tool = match runnable(&state, &session, t).reason() {
                None => json!({"name": t.id, "effects": effects, "canRun": true}),
                Some(reason) => {
                    json!({"name": t.id, "effects": effects, "canRun": false, "reason": reason})
                }
            };
            // The plugin that ships the tool, when it is not started here (declined, or left
            // out by the selection): a client names it from this field, not from the reason's
            // words, which are for people and may change.
            if let Some(plugin) = state.coordinator().handlers().not_running(&t.id) {
                tool["plugin"] = plugin.into();
            }
            tool
        })
        .collect();
    let catalog = state.catalog();
    let mut answer = json!({
        "plugins": catalog.plugins,
        "declined": catalog.declined,
        "unselected": catalog.unselected,
        "tools": tools,
    });
    if !session.operator {
        file_names_only(&mut answer);
    }
    Ok(Json(answer))
}

/// An agent is told each library by its file name: where the operator keeps plugins on the
/// host (an absolute path, the operator's home perhaps) is not the agent's to learn.
fn file_names_only(answer: &mut Value) {
    for list in ["plugins", "declined", "unselected"] {
        let Some(items) = answer[list].as_array_mut() else {
            continue;
        };
        for item in items {
            if let Some(path) = item["path"].as_str() {
                let name = std::path::Path::new(path)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                item["path"] = Value::String(name);
            }
        }
    }
}
