//! The handshake: `initialize` and `ping` under the handshake revisions, `server/discover`
//! under the stateless 2026-07-28 one.

use serde::Serialize;
use serde_json::{Map, Value};

use super::super::jsonrpc::{quote, Reply, INVALID_PARAMS};
use super::super::{HANDSHAKE_VERSIONS, MODERN_VERSION};
use super::modern_fields::ModernFields;
use super::server_info::{server_info_meta, ServerInfo};
use super::{Empty, MethodResult};

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(in crate::mcp) struct InitializeResult {
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

const INSTRUCTIONS: &str = "worldd serves World tools. Without an idempotency key every tools/call is a new invocation with a fresh random task id: JSON-RPC ids give no idempotency, so a retry may repeat an effect. To make a write exactly-once, send a key in params._meta[\"world/idempotencyKey\"] (1-128 of A-Z a-z 0-9 . _ -): resending the same key with the same arguments returns the committed result without running again. Every call, refusals and denials included, is committed to the World log; each result carries a `world` block with the plan ref and each effect's status and record ref, and a _meta block with the invocation id, entry index, world ref, budgetAfter and an outcome classification {kind, reason, retryable}. If a call fails with a host callback error, the effect may have run: reconcile (GET /v1/calls/mcp/<key> or /v1/invocations/<id>) or inspect the log before retrying. The exception is a tool whose description ends with a \"Cannot run here\" paragraph (and whose _meta holds \"world/cannotRun\"): a call of it is refused before anything runs, so its host callback error means nothing ran and nothing was spent; do not pick such a tool.";

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
pub(super) fn initialize(id: &Value, params: Option<&Value>) -> Reply {
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

/// `ping`: an empty result.
pub(super) fn ping(id: &Value) -> Reply {
    Reply::result(id, MethodResult::Empty(Empty {}))
}

/// The stateless revision's replacement for `initialize`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(in crate::mcp) struct DiscoverResult {
    supported_versions: [&'static str; 1],
    capabilities: Capabilities,
    instructions: &'static str,
    #[serde(flatten)]
    modern: ModernFields,
    #[serde(rename = "_meta")]
    meta: Map<String, Value>,
}

pub(super) fn discover(id: &Value) -> Reply {
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
