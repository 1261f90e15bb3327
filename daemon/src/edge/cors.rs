//! Answers a browser may read across origins: for a page on an origin the Host and Origin check
//! accepts ([`super::host`]: a loopback origin or one of `[server] allowed_origins`).
//!
//! A browser sends a preflight (`OPTIONS` with `Access-Control-Request-Method`) before any
//! request that carries `Authorization`, a JSON body or an MCP header, and hands a page an
//! answer only when the answer names the page's origin. Without these headers the operator's
//! `allowed_origins` let a browser-based client past the Origin check and no further: its
//! preflight was answered 405 and its requests never sent.
//!
//! The preflight is answered here, before authentication (a browser never sends credentials
//! with one) and before any route; every answer to a request that names an accepted origin,
//! refusals included, names that origin back, so that a page can read why it was refused. No
//! answer allows credentials: the daemon reads no cookie, only the `Authorization` header a
//! page sets itself. [`super::host::guard`] calls these once it has accepted the origin, in the
//! same middleware: a layer of its own cost every request about 6,000 instructions and 13
//! allocations (callgrind), a request without `Origin` included.

use axum::extract::Request;
use axum::http::header::{
    ACCESS_CONTROL_ALLOW_HEADERS, ACCESS_CONTROL_ALLOW_METHODS, ACCESS_CONTROL_ALLOW_ORIGIN,
    ACCESS_CONTROL_EXPOSE_HEADERS, ACCESS_CONTROL_MAX_AGE, ACCESS_CONTROL_REQUEST_METHOD, ORIGIN,
    VARY,
};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};

/// The methods the daemon serves.
pub const ALLOW_METHODS: &str = "GET, POST";
/// The request headers the daemon reads, beside the ones a browser always may send.
pub const ALLOW_HEADERS: &str = "authorization, content-type, accept, mcp-protocol-version, \
     mcp-method, mcp-name, mcp-session-id, last-event-id, a2a-version";
/// The answer headers a page may read, beside the ones it always may. `www-authenticate` is
/// not safelisted: without it a page sees no challenge on a 401 (an SDK's auth path reads it).
pub const EXPOSE_HEADERS: &str = "retry-after, allow, www-authenticate";
/// How long a browser may keep a preflight's answer, in seconds.
pub const MAX_AGE_SECS: &str = "600";

/// The request's one `Origin`, as sent; none when it is absent or sent twice (a browser sends
/// it once; the Host and Origin check has accepted every one sent).
pub fn origin(headers: &HeaderMap) -> Option<HeaderValue> {
    let mut all = headers.get_all(ORIGIN).iter();
    match (all.next(), all.next()) {
        (Some(one), None) => Some(one.clone()),
        _ => None,
    }
}

/// The answer to a browser's preflight from `origin`, when `request` is one.
pub fn preflight(request: &Request, origin: &HeaderValue) -> Option<Response> {
    if request.method() != Method::OPTIONS
        || !request
            .headers()
            .contains_key(ACCESS_CONTROL_REQUEST_METHOD)
    {
        return None;
    }
    let mut response = StatusCode::NO_CONTENT.into_response();
    let headers = response.headers_mut();
    headers.insert(
        ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static(ALLOW_METHODS),
    );
    headers.insert(
        ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static(ALLOW_HEADERS),
    );
    headers.insert(
        ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static(MAX_AGE_SECS),
    );
    name_origin(headers, origin.clone());
    Some(response)
}

/// An answer to a request from `origin` made readable by the page that sent it.
pub fn readable(response: &mut Response, origin: HeaderValue) {
    let headers = response.headers_mut();
    headers.insert(
        ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static(EXPOSE_HEADERS),
    );
    name_origin(headers, origin);
}

/// The origin named back, and the answer marked as one that differs by origin.
fn name_origin(headers: &mut HeaderMap, origin: HeaderValue) {
    headers.insert(ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    headers.append(VARY, HeaderValue::from_static("origin"));
}
