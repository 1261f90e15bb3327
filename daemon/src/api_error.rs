//! The error envelope of every REST answer, `{"error":{"class","message"}}`: its status, class
//! and message, the constructors the routes share, and the mappings of session refusals and
//! store failures onto it.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use broker_core::log::LogError;
use broker_core::object::Ref;
use broker_core::session::AuthError;
use broker_core::store::StoreError;
use serde_json::json;

use crate::state::AuthFailure;

/// An error in the REST envelope.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub class: &'static str,
    pub message: String,
    pub extra: Option<(String, String)>,
    /// Sent as `Retry-After` (seconds): the refusal is momentary, and a client that comes
    /// straight back costs the daemon another connection.
    pub retry_after_secs: Option<u32>,
    /// The refusal whose challenge a 401 sends as `WWW-Authenticate` ([`crate::challenge`]).
    pub challenge: Option<AuthError>,
}

impl ApiError {
    pub fn new(status: StatusCode, class: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            class,
            message: message.into(),
            extra: None,
            retry_after_secs: None,
            challenge: None,
        }
    }

    /// 503 for a shared budget that is full now: `Retry-After: 1`.
    pub fn busy(message: impl Into<String>) -> ApiError {
        ApiError {
            retry_after_secs: Some(1),
            ..ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "Unavailable", message)
        }
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "BadRequest", message)
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "NotFound", message)
    }

    /// Internal failures never leak their cause to the client; it is logged instead.
    pub fn internal(context: &str, cause: impl std::fmt::Display) -> ApiError {
        tracing::error!("internal error: {context}: {cause}");
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Internal",
            "internal store failure",
        )
    }

    /// 500 `Damaged`: a stored object's payload no longer hashes to its address. Said (and
    /// logged) rather than hidden behind "internal": serving the bytes would pass damage off as
    /// what the address names, and the operator has a store to repair.
    pub fn damaged_object(reference: &Ref, hashes_to: &Ref) -> ApiError {
        let message = format!(
            "object {reference} is damaged: its stored payload hashes to {hashes_to}, not to its address; it is not served (run worldd doctor, and restore the store from a backup)"
        );
        tracing::error!("{message}");
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "Damaged", message)
    }

    /// 500 `Damaged`: log row `index` no longer decodes as an entry. Named like a damaged
    /// object rather than hidden behind "internal": the operator has one row to repair, and a
    /// client walking the chain can mark that one link broken and go on.
    pub fn damaged_entry(index: u64, cause: impl std::fmt::Display) -> ApiError {
        let message = format!("log entry {index} is damaged: {cause}; run worldd doctor");
        tracing::error!("{message}");
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "Damaged", message)
    }

    /// The REST mapping of a session refusal; a 401 with its challenge.
    pub fn from_auth(f: AuthFailure) -> ApiError {
        let (status, class, message) = match f {
            AuthFailure::Denied(AuthError::Absent) => (
                StatusCode::UNAUTHORIZED,
                "SessionAbsent",
                "a session credential is required: no Authorization Bearer header was present",
            ),
            AuthFailure::Denied(AuthError::Malformed) => (
                StatusCode::BAD_REQUEST,
                "InvalidSession",
                "malformed Authorization header: expected Bearer <64-hex-credential>",
            ),
            AuthFailure::Denied(AuthError::Unknown) => (
                StatusCode::UNAUTHORIZED,
                "SessionUnknown",
                "unknown session credential",
            ),
            AuthFailure::Denied(AuthError::Expired) => (
                StatusCode::UNAUTHORIZED,
                "SessionExpired",
                "session credential has expired",
            ),
            AuthFailure::Internal => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "Internal",
                "internal store failure",
            ),
        };
        let challenge = match f {
            AuthFailure::Denied(denial) if status == StatusCode::UNAUTHORIZED => Some(denial),
            _ => None,
        };
        ApiError {
            challenge,
            ..ApiError::new(status, class, message)
        }
    }
}

impl ApiError {
    /// New client work refused: the store is past its reserve (507, nothing written).
    pub fn store_full() -> ApiError {
        ApiError::new(
            StatusCode::INSUFFICIENT_STORAGE,
            "StoreFull",
            broker_core::capacity::Full::AGENT_MESSAGE,
        )
    }

    /// A write that failed in the store: "disk full" and a full map are 507, the rest 500.
    pub fn from_store_write(context: &str, e: StoreError) -> ApiError {
        match e {
            e if e.is_disk_full() => {
                tracing::error!("{context}: {e}");
                ApiError::new(StatusCode::INSUFFICIENT_STORAGE, "DiskFull", e.to_string())
            }
            StoreError::MapFull { .. } => {
                tracing::error!("{context}: {e}");
                ApiError::store_full()
            }
            other => ApiError::internal(context, other),
        }
    }
}

impl ApiError {
    /// An operator's commit that was made (its entry is in the log, the head moved) but that
    /// the store could not make durable ([`StoreError::NotDurable`]): not a failed commit. A
    /// sync failing for room is 507 `DiskFull`, as the disk-full row says, the rest 500
    /// `NotDurable`; both say the commit was made and how to confirm it (the same body with
    /// its `invocationId` answers 200 and the same head once it is durable).
    pub fn commit_not_durable(e: &StoreError) -> ApiError {
        tracing::error!("commit: {e}");
        const MADE: &str = "the commit was made and the head moved, but it is not yet durable; send the same body with its invocationId again to confirm it";
        match e {
            StoreError::NotDurable(why) if why.is_disk_full() => ApiError::new(
                StatusCode::INSUFFICIENT_STORAGE,
                "DiskFull",
                format!("{why}: {MADE} once the store has room"),
            ),
            _ => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "NotDurable",
                format!(
                    "the store could not sync its disk: {MADE} once the store's writes succeed"
                ),
            ),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let challenge = self
            .challenge
            .map(|denial| crate::challenge::bearer(denial, &self.message));
        let mut body = json!({"error": {"class": self.class, "message": self.message}});
        if let Some((observed, selected)) = self.extra {
            body["error"]["observedHead"] = json!(observed);
            body["error"]["selectedHead"] = json!(selected);
        }
        let mut r = (self.status, Json(body)).into_response();
        if let Some(secs) = self.retry_after_secs {
            r.headers_mut()
                .insert(axum::http::header::RETRY_AFTER, secs.into());
        }
        if let Some(challenge) = challenge {
            r.headers_mut()
                .insert(axum::http::header::WWW_AUTHENTICATE, challenge);
        }
        r
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        ApiError::internal("store", e)
    }
}

impl From<LogError> for ApiError {
    fn from(e: LogError) -> Self {
        ApiError::internal("log", e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An operator's commit made whose sync failed fell to 500 "internal store failure", and
    /// one whose sync failed for room lost its 507: it says the commit was made, and a sync
    /// that failed for room is 507 `DiskFull` as before.
    #[test]
    fn a_commit_made_but_not_durable_says_so_and_a_full_disk_stays_507() {
        let full = StoreError::DiskFull("No space left on device (os error 28)".into());
        let e = ApiError::commit_not_durable(&StoreError::NotDurable(Box::new(full.clone())));
        assert_eq!(
            (e.status, e.class),
            (StatusCode::INSUFFICIENT_STORAGE, "DiskFull")
        );
        assert_eq!(
            e.message,
            "disk full: the store's filesystem has no space left (No space left on device (os error 28)): the commit was made and the head moved, but it is not yet durable; send the same body with its invocationId again to confirm it once the store has room"
        );
        let eio = StoreError::Io("Input/output error (os error 5)".into());
        let e = ApiError::commit_not_durable(&StoreError::NotDurable(Box::new(eio)));
        assert_eq!(
            (e.status, e.class),
            (StatusCode::INTERNAL_SERVER_ERROR, "NotDurable")
        );
        assert_eq!(
            e.message,
            "the store could not sync its disk: the commit was made and the head moved, but it is not yet durable; send the same body with its invocationId again to confirm it once the store's writes succeed"
        );
        let e = ApiError::from_store_write("commit", StoreError::NotDurable(Box::new(full)));
        assert_eq!(
            (e.status, e.class),
            (StatusCode::INSUFFICIENT_STORAGE, "DiskFull")
        );
    }
}
