//! The workbench at `GET /workbench`: a provenance explorer in the browser.
//!
//! The page is plain HTML, CSS and JavaScript compiled into the binary (no CDN, nothing
//! fetched from anywhere but this daemon). It reads the log through the REST routes with the
//! same session credential as any client (kept in the page's memory, sent as a bearer header;
//! no cookies, so no cross-site request can borrow it), follows `GET /v1/log/stream`, and
//! re-verifies an entry's chain itself with WebCrypto: every address, and how the documents
//! refer to each other. That is less than `worldd why` checks (no journal, no replay, no
//! effect against its planned effect, no output body against the handler's result, no
//! genesis document against this build's): `docs/workbench.md` says which.
//!
//! `GET /workbench/daemon` answers, without a credential, the absolute path of the store this
//! daemon serves: the page compares it before it sends its credential to whatever answers on
//! the port after the daemon went away.
//!
//! Every answer under `/workbench` (the assets, `/workbench/daemon` and the refusals alike) is
//! served with `nosniff`, `Referrer-Policy: no-referrer` and a Content-Security-Policy that
//! allows only this origin's scripts, styles, images and fetches: no inline script or style,
//! no framing, no form posts, no plugins. The page and its assets say `Cache-Control:
//! no-cache`; the rest `no-store`, as every other answer of the daemon.

use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::middleware::map_response;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

use crate::extract::Segments;
use crate::rest::ApiError;
use crate::state::AppState;

/// The policy every workbench response carries.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
style-src 'self'; img-src 'self'; connect-src 'self'; font-src 'none'; object-src 'none'; \
base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The page and its assets: name, content type, bytes.
const ASSETS: &[(&str, &str, &str)] = &[
    (
        "workbench.js",
        "text/javascript; charset=utf-8",
        include_str!("workbench/workbench.js"),
    ),
    (
        "verify.js",
        "text/javascript; charset=utf-8",
        include_str!("workbench/verify.js"),
    ),
    (
        "canon.js",
        "text/javascript; charset=utf-8",
        include_str!("workbench/canon.js"),
    ),
    (
        "workbench.css",
        "text/css; charset=utf-8",
        include_str!("workbench/workbench.css"),
    ),
    (
        "icon.svg",
        "image/svg+xml",
        include_str!("workbench/icon.svg"),
    ),
];

const INDEX: &str = include_str!("workbench/index.html");

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/workbench", get(page))
        .route("/workbench/", get(page))
        .route("/workbench/daemon", get(daemon))
        .route("/workbench/{asset}", get(asset))
        .layer(map_response(workbench_headers))
}

/// What every answer of the workbench's routes says, refusals and `/workbench/daemon`
/// included: a browser that shows one as a page (or frames it) runs nothing and leaks no
/// referrer from it.
async fn workbench_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
    ] {
        headers
            .entry(name)
            .or_insert(HeaderValue::from_static(value));
    }
    response
}

/// Which daemon answers, asked by the page without its credential before it sends the
/// credential again after the daemon went away: the absolute path of the store it serves.
/// `GET /v1/health` gives the path as the daemon was told it (`.world/db` for every store
/// opened in its own directory), which another daemon in another directory shares.
async fn daemon(State(state): State<AppState>) -> Response {
    // Where the store was opened, not `db_path` resolved again: plugin code may have changed
    // the working directory since.
    let at = state.store().location();
    let store = std::fs::canonicalize(at)
        .unwrap_or_else(|_| at.to_path_buf())
        .display()
        .to_string();
    // `no-store` (the edge's default) and the workbench's headers come from the layers.
    Json(json!({ "status": "ok", "store": store })).into_response()
}

fn respond(content_type: &'static str, body: &'static str) -> Response {
    let headers: [(HeaderName, HeaderValue); 5] = [
        (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
        (
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CONTENT_SECURITY_POLICY),
        ),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
        (
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        ),
        // The assets change with the binary; a browser must ask again after an upgrade.
        (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
    ];
    let mut response = (StatusCode::OK, headers, body).into_response();
    // Compiled into the binary: an unread copy holds no memory, so the reply budget, and
    // an anonymous flood filling its share, leaves it alone.
    response.extensions_mut().insert(crate::edge::reply::Static);
    response
}

async fn page(RawQuery(query): RawQuery) -> Result<Response, ApiError> {
    // The page has no parameters; its state lives in the fragment (`#entry/42`).
    if query.is_some_and(|q| !q.is_empty()) {
        return Err(ApiError::bad_request(
            "the workbench takes no query parameters (its links use the fragment, e.g. /workbench#entry/42)",
        ));
    }
    Ok(respond("text/html; charset=utf-8", INDEX))
}

async fn asset(Segments(name): Segments<String>) -> Result<Response, ApiError> {
    ASSETS
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, ct, body)| respond(ct, body))
        .ok_or_else(|| ApiError::not_found("no such workbench asset"))
}
