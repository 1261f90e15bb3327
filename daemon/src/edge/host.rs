//! Host and Origin validation, against DNS rebinding (MCP requires it of local servers).
//!
//! A web page the operator opens can make the browser send requests to the daemon's loopback
//! port under the page's own name (`Host: evil.example.com`, once its DNS is rebound to
//! 127.0.0.1) or from its own origin. Both are refused on every route with 403 before anything
//! else is looked at, credentials included:
//!
//! - **Host** (without its port) must be a loopback name — `localhost`, an IPv4 address in
//!   127.0.0.0/8, `[::1]` — or one of `[server] allowed_hosts`, compared case-insensitively.
//!   An HTTP/1.1 request without Host that came over a connection is malformed (RFC 9112
//!   §3.2) and answered `400`; without Host, HTTP/1.0 (which has none) and in-process requests
//!   pass.
//!   A request target in absolute form (`GET http://name/path`) names the host that counts
//!   (RFC 9112 §3.2.2 tells a server to ignore Host then): its authority must pass the same
//!   rule, and so must any Host sent beside it.
//! - **Origin**, when present, must be a loopback origin (`http://localhost:5173`,
//!   `https://127.0.0.1`, any port) or one of `[server] allowed_origins` exactly (scheme,
//!   host and port, case-insensitively). A missing Origin is a non-browser client and passes;
//!   `Origin: null` is refused.

use axum::extract::{Request, State};
use axum::http::header::{HOST, ORIGIN};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::ServerConfig;
use crate::metrics::Limit;
use crate::state::AppState;

/// The Host and Origin values this daemon accepts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostPolicy {
    hosts: Vec<String>,
    origins: Vec<String>,
}

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    Host(String),
    Origin(String),
}

impl Refused {
    /// The metrics label.
    pub fn limit(&self) -> Limit {
        match self {
            Refused::Host(_) => Limit::Host,
            Refused::Origin(_) => Limit::Origin,
        }
    }

    pub fn message(&self) -> String {
        match self {
            Refused::Host(h) => format!(
                "Host {} is not allowed: this daemon answers only to loopback names (localhost, 127.0.0.1, [::1]) and the [server] allowed_hosts of its configuration",
                quote(h)
            ),
            Refused::Origin(o) => format!(
                "Origin {} is not allowed: this daemon answers only to loopback origins and the [server] allowed_origins of its configuration",
                quote(o)
            ),
        }
    }
}

use dialect::quote::json_string as quote;

impl HostPolicy {
    pub fn new(config: &ServerConfig) -> HostPolicy {
        HostPolicy {
            hosts: config
                .allowed_hosts
                .iter()
                .map(|h| h.to_ascii_lowercase())
                .collect(),
            origins: config
                .allowed_origins
                .iter()
                .map(|o| o.trim_end_matches('/').to_ascii_lowercase())
                .collect(),
        }
    }

    /// Whether a Host value (or a target's authority) names a loopback or configured host.
    fn host_allowed(&self, value: &str) -> bool {
        host_name(value).is_some_and(|name| {
            is_loopback_name(name) || self.hosts.iter().any(|h| h == &name.to_ascii_lowercase())
        })
    }

    /// Check a request's target authority, Host and Origin headers.
    pub fn check(&self, target: &Uri, headers: &HeaderMap) -> Result<(), Refused> {
        if let Some(authority) = target.authority() {
            // With userinfo (`a@127.0.0.1`) the authority is no host name: refused.
            if !self.host_allowed(authority.as_str()) {
                return Err(Refused::Host(authority.as_str().to_owned()));
            }
        }
        let hosts = super::fields::texts(headers, HOST);
        match hosts.as_slice() {
            [] => {}
            [text] => {
                if !self.host_allowed(text) {
                    return Err(Refused::Host(text.clone().into_owned()));
                }
            }
            // Two Host headers are a malformed request (RFC 9112 §3.2), whatever each says:
            // the refusal names them all.
            _ => return Err(Refused::Host(hosts.join(", "))),
        }
        for value in headers.get_all(ORIGIN) {
            let text = String::from_utf8_lossy(value.as_bytes());
            let normalized = text.trim().trim_end_matches('/').to_ascii_lowercase();
            let ok = match parse_origin(&normalized) {
                Some((_, host, _)) => {
                    is_loopback_name(host) || self.origins.iter().any(|o| o == &normalized)
                }
                None => false,
            };
            if !ok {
                return Err(Refused::Origin(text.into_owned()));
            }
        }
        Ok(())
    }
}

/// The host part of a Host header value (`name`, `name:port`, `[v6]`, `[v6]:port`).
pub fn host_name(value: &str) -> Option<&str> {
    let value = value.trim();
    if value.is_empty() {
        return None;
    }
    let (name, port) = if value.starts_with('[') {
        value.split_at(value.find(']')? + 1)
    } else {
        value.split_at(value.find(':').unwrap_or(value.len()))
    };
    let port_ok = port.is_empty()
        || port.strip_prefix(':').is_some_and(|p| {
            !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit())
        });
    (port_ok && !name.is_empty()).then_some(name)
}

/// `localhost`, any IPv4 address in 127.0.0.0/8, or the IPv6 loopback in brackets, however
/// written (`[::1]`, `[0:0:0:0:0:0:0:1]`), or an IPv4 loopback mapped into IPv6
/// (`[::ffff:127.0.0.1]`, what a dual-stack socket bound so is reached by). Address literals
/// only: no name but `localhost` is resolved, so DNS rebinding gains nothing here.
pub fn is_loopback_name(name: &str) -> bool {
    if name.eq_ignore_ascii_case("localhost") {
        return true;
    }
    if let Some(v6) = name.strip_prefix('[').and_then(|n| n.strip_suffix(']')) {
        return v6
            .parse::<std::net::Ipv6Addr>()
            .is_ok_and(|ip| std::net::IpAddr::V6(ip).to_canonical().is_loopback());
    }
    name.parse::<std::net::Ipv4Addr>()
        .is_ok_and(|ip| ip.is_loopback())
}

/// `scheme://host[:port]` of an origin (lowercase input): its scheme, host and port text.
pub fn parse_origin(origin: &str) -> Option<(&str, &str, &str)> {
    let (scheme, rest) = origin.split_once("://")?;
    if !matches!(scheme, "http" | "https") || rest.contains('/') {
        return None;
    }
    let name = host_name(rest)?;
    Some((scheme, name, &rest[name.len()..]))
}

/// An `allowed_hosts` entry must be a bare host name or address: a DNS name (labels of
/// letters, digits and `-`), an IPv4 address or a bracketed IPv6 one. `*` and `a b` were taken
/// and compared literally, so an operator's "any host" answered every browser with 403.
pub fn check_host_entry(entry: &str) -> Result<(), String> {
    if entry.contains('*') {
        return Err(format!(
            "{entry:?} is not a host name: wildcards are not supported, list each name a client reaches this daemon by"
        ));
    }
    let dns_name = |name: &str| {
        name.len() <= 253
            && name.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && label
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-')
            })
    };
    let address = |name: &str| match name.strip_prefix('[').and_then(|n| n.strip_suffix(']')) {
        Some(v6) => v6.parse::<std::net::Ipv6Addr>().is_ok(),
        None => name.parse::<std::net::Ipv4Addr>().is_ok(),
    };
    // Shapes that are no scheme or port, each told what is wrong with it.
    if !entry.is_ascii() {
        return Err(format!(
            "{entry:?} is not a host name: give an internationalised name in its ASCII (xn--) form, as clients send it in Host"
        ));
    }
    if let Some(bare) = entry.strip_suffix('.').filter(|b| dns_name(b)) {
        return Err(format!(
            "{entry:?} is not a host name: give it without the trailing dot, {bare:?}"
        ));
    }
    let (v6, zone) = entry.split_once('%').unwrap_or((entry, ""));
    if v6.parse::<std::net::Ipv6Addr>().is_ok() {
        return Err(if zone.is_empty() {
            format!("{entry:?} is not a host name: bracket an IPv6 address, \"[{entry}]\"")
        } else {
            format!("{entry:?} is not a host name: IPv6 zone ids are not supported")
        });
    }
    match host_name(entry) {
        Some(name) if name == entry && (dns_name(name) || address(name)) => Ok(()),
        _ => Err(format!(
            "{entry:?} is not a host name (give names without scheme or port)"
        )),
    }
}

/// Marks a request that came over a connection the listener accepted, as opposed to one a
/// test hands the router in process.
#[derive(Debug, Clone, Copy)]
pub struct FromConnection;

/// What an HTTP/1.1 client that sent no Host is told.
pub const HOST_REQUIRED: &str = "an HTTP/1.1 request must carry a Host header (RFC 9112 §3.2): send the name and port you reach this daemon by, e.g. Host: 127.0.0.1:7644";

/// An HTTP/1.1 request from a connection, with no Host and no authority in its target.
fn lacks_host(request: &Request) -> bool {
    request.extensions().get::<FromConnection>().is_some()
        && request.version() == axum::http::Version::HTTP_11
        && request.uri().authority().is_none()
        && !request.headers().contains_key(HOST)
}

/// The middleware: refuse before anything else runs.
pub async fn guard(State(state): State<AppState>, request: Request, next: Next) -> Response {
    if lacks_host(&request) {
        state.metrics().limit_tripped(Limit::Host);
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": {"class": "BadRequest", "message": HOST_REQUIRED}})),
        )
            .into_response();
    }
    match state.host_policy().check(request.uri(), request.headers()) {
        // A browser's request: its preflight answered here, its answers made readable.
        // The reply budget acts here, past the checks and inside the CORS naming (and
        // `for_browsers` around this), so its 503 is an answer like any other.
        Ok(()) => match super::cors::origin(request.headers()) {
            None => super::reply::within(request, |r| next.run(r)).await,
            Some(origin) => {
                if let Some(answer) = super::cors::preflight(&request, &origin) {
                    return answer;
                }
                let mut response = super::reply::within(request, |r| next.run(r)).await;
                super::cors::readable(&mut response, origin);
                response
            }
        },
        Err(refused) => {
            state.metrics().limit_tripped(refused.limit());
            (
                StatusCode::FORBIDDEN,
                Json(json!({"error": {"class": "Forbidden", "message": refused.message()}})),
            )
                .into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn origin_form() -> Uri {
        Uri::from_static("/v1/health")
    }

    fn policy(hosts: &[&str], origins: &[&str]) -> HostPolicy {
        HostPolicy::new(&ServerConfig {
            allowed_hosts: hosts.iter().map(|s| s.to_string()).collect(),
            allowed_origins: origins.iter().map(|s| s.to_string()).collect(),
            ..ServerConfig::default()
        })
    }

    #[test]
    fn loopback_names_pass_with_any_port() {
        let p = policy(&[], &[]);
        for host in [
            "localhost",
            "LOCALHOST:7644",
            "127.0.0.1",
            "127.0.0.1:1",
            "127.8.9.10:65535",
            "[::1]",
            "[::1]:7644",
            "[0:0:0:0:0:0:0:1]:7644",
            "[::ffff:127.0.0.1]:7644",
            "[::FFFF:7f00:1]",
        ] {
            assert_eq!(
                p.check(&origin_form(), &headers(&[("host", host)])),
                Ok(()),
                "{host}"
            );
        }
        assert_eq!(p.check(&origin_form(), &HeaderMap::new()), Ok(()));
    }

    #[test]
    fn rebinding_hosts_are_refused() {
        let p = policy(&["worldd.internal"], &[]);
        for host in [
            "evil.example.com",
            "evil.example.com:7644",
            "localhost.evil.com",
            "127.0.0.1.nip.io",
            "128.0.0.1",
            "[::2]",
            "[::ffff:10.0.0.1]:7644",
            "[::127.0.0.1]",
            "[::1",
            "localhost:",
            "localhost:port",
            "a\"b<script>",
            "",
        ] {
            assert_eq!(
                p.check(&origin_form(), &headers(&[("host", host)])),
                Err(Refused::Host(host.into())),
                "{host}"
            );
        }
        assert_eq!(
            p.check(&origin_form(), &headers(&[("host", "Worldd.Internal:80")])),
            Ok(())
        );
        for two in [["localhost", "evil.com"], ["evil.com", "localhost"]] {
            assert_eq!(
                p.check(
                    &origin_form(),
                    &headers(&[("host", two[0]), ("host", two[1])])
                ),
                Err(Refused::Host(two.join(", "))),
            );
        }
    }

    #[test]
    fn an_absolute_form_target_must_name_an_allowed_host_too() {
        let p = policy(&["worldd.internal"], &[]);
        let loopback = headers(&[("host", "127.0.0.1:7644")]);
        for ok in [
            "http://127.0.0.1:7644/v1/health",
            "http://localhost/mcp/",
            "https://WORLDD.internal:443/v1/log",
        ] {
            assert_eq!(p.check(&Uri::from_static(ok), &loopback), Ok(()), "{ok}");
        }
        for (bad, authority) in [
            ("http://evil.com/v1/health", "evil.com"),
            ("http://evil.com:7644/mcp/", "evil.com:7644"),
            ("http://127.0.0.1.nip.io/v1/health", "127.0.0.1.nip.io"),
            ("http://evil.com@127.0.0.1/v1/health", "evil.com@127.0.0.1"),
        ] {
            assert_eq!(
                p.check(&Uri::from_static(bad), &loopback),
                Err(Refused::Host(authority.into())),
                "{bad}"
            );
        }
        // A loopback target does not vouch for a foreign Host beside it.
        assert_eq!(
            p.check(
                &Uri::from_static("http://localhost/v1/health"),
                &headers(&[("host", "evil.com")])
            ),
            Err(Refused::Host("evil.com".into()))
        );
    }

    #[test]
    fn origins_must_be_loopback_or_listed() {
        let p = policy(&[], &["https://agents.example.com"]);
        for ok in [
            "http://localhost:5173",
            "https://127.0.0.1",
            "http://[::1]:7644",
            "https://agents.example.com",
            "HTTPS://Agents.Example.com/",
        ] {
            assert_eq!(
                p.check(&origin_form(), &headers(&[("origin", ok)])),
                Ok(()),
                "{ok}"
            );
        }
        for bad in [
            "http://evil.example.com",
            "https://agents.example.com:8443",
            "http://agents.example.com",
            "null",
            "file://",
            "http://localhost/path",
        ] {
            assert_eq!(
                p.check(&origin_form(), &headers(&[("origin", bad)])),
                Err(Refused::Origin(bad.into())),
                "{bad}"
            );
        }
    }

    #[test]
    fn entries_are_checked() {
        assert!(check_host_entry("worldd.internal").is_ok());
        assert!(check_host_entry("worldd.internal:80").is_err());
        assert!(check_host_entry("http://x").is_err());
        // Names and literals only: a wildcard or a space was taken and compared literally.
        assert_eq!(
            check_host_entry("*"),
            Err("\"*\" is not a host name: wildcards are not supported, list each name a client reaches this daemon by".into())
        );
        assert!(check_host_entry("*.example.com").is_err());
        assert_eq!(
            check_host_entry("a b"),
            Err("\"a b\" is not a host name (give names without scheme or port)".into())
        );
        for fine in ["10.0.0.7", "[fd00::1]", "my-host", "worldd.example.com."] {
            assert!(
                check_host_entry(fine).is_ok() || fine.ends_with('.'),
                "{fine}"
            );
        }
        assert!(check_host_entry("[nonsense]").is_err());
        assert!(parse_origin("https://a.example:8443").is_some());
        assert!(parse_origin("a.example").is_none());
    }
}
