//! The tool surface a session sees, shared by MCP `tools/list` and `tools/call` and by the A2A
//! agent card and sends: the same function, rebuilt for every request from the session's
//! grants (the coordinator checks the grants again when it opens a call).
//! [`resolve`] is the one lookup of a called tool by name for both surfaces.

use broker_core::coordinator::Surface;
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

/// Why [`resolve`] found no tool for a name.
#[derive(Debug, thiserror::Error)]
pub enum Unresolved {
    /// The session's tool surface could not be built; each surface answers this its own way.
    #[error(transparent)]
    Surface(#[from] SurfaceError),
    /// No tool of this session goes by the name on that surface. `why` (each surface's
    /// `data.why`) names the nearest of the session's own tools, never one it cannot see, so
    /// that a misspelt name can be corrected.
    #[error("{why}")]
    Unknown { why: String },
}

/// The tool this session may call under `name` as `surface` names tools: the MCP name (`x_dy`
/// for the id `x.y`) on MCP, the id itself on A2A. Visibility is rebuilt for this request:
/// having seen a tool earlier conveys no authority. Each surface wraps [`Unresolved`] in its
/// own envelope and message (`unknown tool …`, `not authorized`).
pub async fn resolve(
    state: &AppState,
    session: &Session,
    name: &str,
    surface: Surface,
) -> Result<RegistryEntry, Unresolved> {
    let mut entries = match surface {
        // Only MCP names are limited to 64 bytes; A2A sends the id as it is.
        Surface::Mcp => visible_for_mcp(state, session).await?,
        Surface::A2a => visible(state, session).await?,
    };
    // Matching on the escaped name (not on an unescaped id) means an MCP name that is not a
    // valid escape simply names no tool.
    if let Some(i) = entries
        .iter()
        .position(|e| goes_by(&e.transition.id, name, surface))
    {
        return Ok(entries.swap_remove(i));
    }
    Err(Unresolved::Unknown {
        why: unknown_why(&entries, name, surface),
    })
}

/// True when the tool `id` is called `name` on `surface`.
fn goes_by(id: &str, name: &str, surface: Surface) -> bool {
    match surface {
        Surface::Mcp => escapes_to(id, name),
        Surface::A2a => id == name,
    }
}

/// The `data.why` of a name no tool of `entries` goes by on `surface`.
fn unknown_why(entries: &[RegistryEntry], name: &str, surface: Surface) -> String {
    let (other, noun, listed) = match surface {
        Surface::Mcp => (
            Surface::A2a,
            "tool",
            "tools/list shows this session's tools",
        ),
        Surface::A2a => (
            Surface::Mcp,
            "skill",
            "the agent card lists this session's skills",
        ),
    };
    // A tool's name as the other surface spells it (its id `x.y` sent to MCP, its MCP name
    // `x_dy` sent to A2A) names that tool without doubt, whatever is nearer by distance.
    if let Some(e) = entries
        .iter()
        .find(|e| goes_by(&e.transition.id, name, other))
    {
        let meant = match surface {
            Surface::Mcp => mcp_name(&e.transition.id),
            Surface::A2a => e.transition.id.clone(),
        };
        return crate::spelling::did_you_mean(name, &meant, noun, listed);
    }
    match surface {
        // MCP also offers the tool a host's prefix, a suffix or a part of a name points at
        // (`mcp__worldd__ailang-read`, `read`): MCP hosts prefix the tool names they show a
        // model, and a model sends them back so. A2A offers only names within two edits.
        Surface::Mcp => {
            let names: Vec<String> = entries.iter().map(|e| mcp_name(&e.transition.id)).collect();
            crate::spelling::unknown_tool(name, names.iter().map(String::as_str), listed)
        }
        Surface::A2a => crate::spelling::unknown_name(
            name,
            entries.iter().map(|e| e.transition.id.as_str()),
            noun,
            listed,
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use broker_core::coordinator::Surface;
    use broker_core::object::Ref;
    use broker_core::registry::RegistryEntry;
    use broker_core::transition::Transition;

    use super::{goes_by, unknown_why};

    /// The session's tools: `ailang-read`'s document under each of `ids`.
    fn entries(ids: &[&str]) -> Vec<RegistryEntry> {
        let doc = include_str!("../../transitions/se-tools/ailang-read.json");
        let doc: serde_json::Value = serde_json::from_str(doc).unwrap();
        ids.iter()
            .map(|id| {
                let mut doc = doc.clone();
                doc["id"] = serde_json::json!(id);
                let t = Transition::from_slice(&serde_json::to_vec(&doc).unwrap()).unwrap();
                RegistryEntry {
                    transition: Arc::new(t),
                    transition_fn: Ref::of(id.as_bytes()),
                }
            })
            .collect()
    }

    #[test]
    fn each_surface_matches_its_own_spelling_of_a_tool_and_points_at_it_from_the_other() {
        assert!(goes_by("git.status", "git_dstatus", Surface::Mcp));
        assert!(!goes_by("git.status", "git.status", Surface::Mcp));
        assert!(goes_by("git.status", "git.status", Surface::A2a));
        assert!(!goes_by("git.status", "git_dstatus", Surface::A2a));

        let tools = entries(&["ailang-read", "git.status", "git_status"]);
        // The id sent to MCP names the tool's MCP name, though `git_status` is nearer.
        assert_eq!(
            unknown_why(&tools, "git.status", Surface::Mcp),
            "no tool of this session is named \"git.status\"; did you mean git_dstatus? \
             (tools/list shows this session's tools)"
        );
        // The MCP name sent to A2A names the id.
        assert_eq!(
            unknown_why(&tools, "git_dstatus", Surface::A2a),
            "no skill of this session is named \"git_dstatus\"; did you mean git.status? \
             (the agent card lists this session's skills)"
        );
    }

    #[test]
    fn only_mcp_reads_a_host_prefix_or_a_part_of_a_name_as_a_tool() {
        let tools = entries(&["ailang-read", "git.status"]);
        assert_eq!(
            unknown_why(&tools, "mcp__worldd__ailang-read", Surface::Mcp),
            "no tool of this session is named \"mcp__worldd__ailang-read\"; did you mean \
             ailang-read? (tools/list shows this session's tools)"
        );
        assert_eq!(
            unknown_why(&tools, "mcp__worldd__ailang-read", Surface::A2a),
            "no skill of this session is named \"mcp__worldd__ailang-read\"; \
             the agent card lists this session's skills"
        );
        // Within two edits, both surfaces offer the nearest, in their own spelling.
        assert_eq!(
            unknown_why(&tools, "git_dstatu", Surface::Mcp),
            "no tool of this session is named \"git_dstatu\"; did you mean git_dstatus? \
             (tools/list shows this session's tools)"
        );
        assert_eq!(
            unknown_why(&tools, "git.statsu", Surface::A2a),
            "no skill of this session is named \"git.statsu\"; did you mean git.status? \
             (the agent card lists this session's skills)"
        );
    }
}
