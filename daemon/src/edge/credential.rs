//! The request's credential header: its one `Authorization` field, or none.
//!
//! `Authorization` is not a list: a request that carries it twice is refused as malformed,
//! whatever the two say. Which of two credentials counts would otherwise depend on who reads
//! the request. A proxy in front that checks the last while the daemon takes the first would
//! let a request be accounted and authorised as one session and checked as another.

use axum::http::header::AUTHORIZATION;
use axum::http::HeaderMap;
use broker_core::session::AuthError;

/// The request's `Authorization` field: `Ok(None)` without one; malformed when it appears more
/// than once or is not visible ASCII.
pub fn authorization(headers: &HeaderMap) -> Result<Option<&str>, AuthError> {
    match super::fields::single(headers, AUTHORIZATION) {
        Ok(None) => Ok(None),
        Ok(Some(field)) => field.to_str().map(Some).map_err(|_| AuthError::Malformed),
        Err(_) => Err(AuthError::Malformed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn with(fields: &[&[u8]]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for f in fields {
            h.append(AUTHORIZATION, HeaderValue::from_bytes(f).unwrap());
        }
        h
    }

    #[test]
    fn a_credential_sent_twice_is_malformed_even_when_both_agree() {
        let token = format!("Bearer {}", "a".repeat(64));
        assert_eq!(authorization(&with(&[])), Ok(None));
        assert_eq!(
            authorization(&with(&[token.as_bytes()])),
            Ok(Some(token.as_str()))
        );
        let other = format!("Bearer {}", "b".repeat(64));
        for twice in [
            with(&[token.as_bytes(), other.as_bytes()]),
            with(&[token.as_bytes(), token.as_bytes()]),
            with(&[b"Basic dXNlcg==", token.as_bytes()]),
        ] {
            assert_eq!(authorization(&twice), Err(AuthError::Malformed));
        }
        assert_eq!(
            authorization(&with(&[b"Bearer \xff"])),
            Err(AuthError::Malformed)
        );
    }
}
