//! The `WWW-Authenticate` challenge every 401 carries (RFC 9110 §11.6.1 requires one; RFC 6750
//! §3.1 says what it holds): `Bearer realm="worldd"` when no credential was sent (RFC 6750 §3
//! wants at least one auth-param after the scheme, and §3.1 no error code for that case),
//! `error="invalid_request"` for a malformed header, `error="invalid_token"` for a credential
//! that names no live session (unknown, expired, revoked), so that a client tells
//! "authenticate again" from "not configured" without reading the body. Every challenge names
//! the realm. MCP and REST answer with the same challenges.

use axum::http::HeaderValue;
use broker_core::session::AuthError;

/// The challenge when no credential was sent.
const ABSENT: &str = r#"Bearer realm="worldd""#;

/// The challenge for `denial`, `description` (the 401's own text) as its `error_description`.
pub fn bearer(denial: AuthError, description: &str) -> HeaderValue {
    let error = match denial {
        AuthError::Absent => return HeaderValue::from_static(ABSENT),
        AuthError::Malformed => "invalid_request",
        AuthError::Unknown | AuthError::Expired => "invalid_token",
    };
    bearer_error(error, description)
}

/// `Bearer realm="worldd", error="<error>", error_description="<description>"`. RFC 6750 allows a description
/// of visible ASCII without `"` or a backslash; one that is not (every caller passes a fixed text, so
/// never in fact) is left out rather than quoted wrongly.
pub fn bearer_error(error: &str, description: &str) -> HeaderValue {
    let quotable = description
        .bytes()
        .all(|b| matches!(b, b' ' | b'!' | b'#'..=b'[' | b']'..=b'~'));
    let text = if quotable {
        format!(r#"Bearer realm="worldd", error="{error}", error_description="{description}""#)
    } else {
        format!(r#"Bearer realm="worldd", error="{error}""#)
    };
    HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static(ABSENT))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_denial_has_its_challenge() {
        assert_eq!(bearer(AuthError::Absent, "x"), r#"Bearer realm="worldd""#);
        assert_eq!(
            bearer(AuthError::Malformed, "bad"),
            r#"Bearer realm="worldd", error="invalid_request", error_description="bad""#
        );
        assert_eq!(
            bearer(AuthError::Expired, "gone"),
            r#"Bearer realm="worldd", error="invalid_token", error_description="gone""#
        );
        assert_eq!(
            bearer_error("invalid_token", "a\"b"),
            r#"Bearer realm="worldd", error="invalid_token""#
        );
    }
}
