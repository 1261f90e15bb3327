//! Answers for requests no route serves: a JSON body in the REST error envelope that names the
//! daemon's real endpoints, instead of an empty 404 or 405.
//!
//! Clients pointed at the wrong place (`/`, `/sse` from an SSE-era MCP client, `GET /mcp/` from
//! a browser, a base URL with an extra path) learn where to go. The body names only fixed paths
//! and the request's own method and path; nothing is taken from the `Host` header.

use axum::http::{Method, StatusCode, Uri};
use axum::Json;
use serde_json::{json, Value};

/// Where things are, appended to every fallback message.
pub const ENDPOINTS: &str = "worldd serves MCP at POST /mcp/, A2A at POST /a2a/ (agent card at GET /.well-known/agent-card.json), the REST API under /v1/ (GET /v1/health needs no session) and the workbench at /workbench";

/// Longest request path echoed back, in bytes.
const MAX_ECHO: usize = 256;

fn echo(uri: &Uri) -> String {
    let path = uri.path();
    if path.len() <= MAX_ECHO {
        return path.to_owned();
    }
    format!("{}…", crate::text::head(path, MAX_ECHO))
}

fn body(class: &str, message: String) -> Json<Value> {
    Json(json!({"error": {"class": class, "message": message}}))
}

/// No route has this path: 404.
pub async fn not_found(method: Method, uri: Uri) -> (StatusCode, Json<Value>) {
    (
        StatusCode::NOT_FOUND,
        body(
            "NotFound",
            format!("no route for {method} {}; {ENDPOINTS}", echo(&uri)),
        ),
    )
}

/// The path exists but not for this method: 405 (axum adds the `Allow` header).
pub async fn method_not_allowed(method: Method, uri: Uri) -> (StatusCode, Json<Value>) {
    (
        StatusCode::METHOD_NOT_ALLOWED,
        body(
            "MethodNotAllowed",
            format!(
                "{method} is not served at {} (the Allow header lists what is); {ENDPOINTS}",
                echo(&uri)
            ),
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_paths_are_cut() {
        let uri: Uri = format!("/{}", "a".repeat(1000)).parse().unwrap();
        assert_eq!(echo(&uri), format!("/{}…", "a".repeat(MAX_ECHO - 1)));
        let short: Uri = "/sse".parse().unwrap();
        assert_eq!(echo(&short), "/sse");
    }
}
