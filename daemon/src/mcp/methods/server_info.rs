//! The server's identity: `initialize`'s `serverInfo`, and the same stamp in the `_meta` of
//! 2026-07-28 results.

use serde::Serialize;
use serde_json::{Map, Value};

/// The `_meta` key of the 2026-07-28 server identity stamp.
pub(super) const SERVER_INFO_META_KEY: &str = "io.modelcontextprotocol/serverInfo";

#[derive(Debug, Serialize)]
pub(super) struct ServerInfo {
    name: &'static str,
    version: &'static str,
}

impl ServerInfo {
    pub(super) fn ours() -> ServerInfo {
        ServerInfo {
            name: "worldd",
            version: env!("CARGO_PKG_VERSION"),
        }
    }
}

/// A 2026-07-28 `_meta` holding only the server identity stamp.
pub(super) fn server_info_meta() -> Map<String, Value> {
    let mut m = Map::new();
    // One stamp, the same as `serverInfo` and a committed call's `_meta` write.
    if let Ok(stamp) = serde_json::to_value(ServerInfo::ours()) {
        m.insert(SERVER_INFO_META_KEY.into(), stamp);
    }
    m
}
