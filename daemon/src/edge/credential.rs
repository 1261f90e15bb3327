//! The request's credential header: its one `Authorization` field, or none; and the session
//! it was found to name before the request was routed.
//!
//! `Authorization` is not a list: a request that carries it twice is refused as malformed,
//! whatever the two say. Which of two credentials counts would otherwise depend on who reads
//! the request. A proxy in front that checks the last while the daemon takes the first would
//! let a request be accounted and authorised as one session and checked as another.
//!
//! The accept loop's service looks the credential up before routing a request, to count the
//! request as its session's ([`super::reply::Client`]), and runs the routing with what it
//! found ([`routed_with`]): the read turns name their client from it ([`looked_up_before_routing`])
//! and the routes that authenticate the request take its session ([`found_before_routing`]),
//! so that a request costs one lookup of its credential, not two or three. Only a live session
//! is taken as authenticated: a credential that was absent, malformed, unknown or expired is
//! looked up again by the route, which refuses it and counts the refusal.

use std::future::Future;
use std::sync::Arc;

use axum::http::header::AUTHORIZATION;
use axum::http::HeaderMap;
use broker_core::session::{AuthError, Session, SessionCache};
use broker_core::store::Store;

tokio::task_local! {
    /// What was found for the request's credential before it was routed.
    static FOUND: Option<Resolved>;
}

/// An `Authorization` value, and the live session it names, if any.
pub struct Resolved {
    credential: Box<str>,
    session: Option<Arc<Session>>,
}

impl Resolved {
    pub fn new(credential: &str, session: Option<Arc<Session>>) -> Resolved {
        Resolved {
            credential: credential.into(),
            session,
        }
    }

    pub fn session(&self) -> Option<&Session> {
        self.session.as_deref()
    }
}

/// Run `request` (a request's routing and answer) with `found` as what was found for its
/// credential.
pub async fn routed_with<F: Future>(found: Option<Resolved>, request: F) -> F::Output {
    FOUND.scope(found, request).await
}

/// What the lookup before the running request was routed found for `credential`, when it is
/// that request's credential: `Some(None)` when it names no live session. `None` when no such
/// lookup was made: outside a request's routing (a streamed body, a spawned task, the router
/// served on its own), or for another credential.
pub fn looked_up_before_routing(credential: &str) -> Option<Option<Arc<Session>>> {
    FOUND
        .try_with(|found| {
            found
                .as_ref()
                .filter(|f| &*f.credential == credential)
                .map(|f| f.session.clone())
        })
        .ok()
        .flatten()
}

/// The live session [`looked_up_before_routing`] found for `credential`, if any.
pub fn found_before_routing(credential: &str) -> Option<Arc<Session>> {
    looked_up_before_routing(credential).flatten()
}

/// Whose a refused credential is, for the refusal's log line: its public credential id and
/// episode, when its record was found (an expired credential; a revoked one has none), else
/// `None`. Never the token itself. Read once more, and only when the line is written: the
/// refusal's lookup keeps none of it, and its throttle leaves at most a line every few
/// seconds.
pub fn whose(
    sessions: &SessionCache,
    store: &Store,
    authorization: Option<&str>,
) -> Option<(String, String)> {
    let token = broker_core::session::parse_authorization(authorization).ok()?;
    let id = broker_core::session::credential_id(token);
    let session = sessions.current(store, &id).ok()??;
    Some((session.credential_id.clone(), session.episode.clone()))
}

/// The request's `Authorization` field: `Ok(None)` without one; malformed when it appears more
/// than once or is not visible ASCII.
pub fn authorization(headers: &HeaderMap) -> Result<Option<&str>, AuthError> {
    match super::fields::single(headers, AUTHORIZATION) {
        Ok(None) => Ok(None),
        Ok(Some(field)) => field.to_str().map(Some).map_err(|_| AuthError::Malformed),
        Err(_) => Err(AuthError::Malformed),
    }
}

/// A live session of credential id `id`, for tests.
#[cfg(test)]
pub fn session_of(id: &str) -> Arc<Session> {
    Arc::new(Session {
        credential_id: id.to_owned(),
        episode: format!("episode-of-{id}"),
        grants: Vec::new(),
        created_at: 0,
        expires_at: i64::MAX,
        operator: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[tokio::test]
    async fn a_session_found_before_routing_is_handed_on_for_its_own_credential_only() {
        let credential = format!("Bearer {}", "1".repeat(64));
        let session = session_of("one");
        assert!(
            found_before_routing(&credential).is_none(),
            "outside a request"
        );
        let found = Some(Resolved::new(&credential, Some(session.clone())));
        routed_with(found, async {
            let handed = found_before_routing(&credential).expect("its own credential");
            assert!(Arc::ptr_eq(&handed, &session));
            let other = format!("Bearer {}", "2".repeat(64));
            assert!(found_before_routing(&other).is_none(), "another credential");
            // A task the request spawns looks its credential up itself.
            let spawned = tokio::spawn({
                let credential = credential.clone();
                async move { found_before_routing(&credential).is_none() }
            });
            assert!(spawned.await.unwrap());
        })
        .await;
        routed_with(None, async {
            assert!(found_before_routing(&credential).is_none(), "nothing found");
        })
        .await;
        // Looked up and not live: known as such, so not looked up again, and not handed on.
        routed_with(Some(Resolved::new(&credential, None)), async {
            assert_eq!(
                looked_up_before_routing(&credential).map(|s| s.is_none()),
                Some(true)
            );
            assert!(found_before_routing(&credential).is_none());
        })
        .await;
    }

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
