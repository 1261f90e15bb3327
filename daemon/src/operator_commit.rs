//! `POST /v1/commit`: an operator's act, not an agent's.
//!
//! Seed 004 tells agents never to call this route; tool calls commit for them. So a commit
//! needs, in this order (each checked before the body is read):
//!
//! 1. a valid session credential (401 otherwise, as every gated route);
//! 2. an **operator** credential (`worldd session mint --operator`), else 403 `Forbidden`;
//! 3. a live commit grant `World.Commit=log:N` with a unit left, else 403 `Forbidden` with the
//!    broker's denial label. One commit spends one unit, journaled like any effect
//!    ([`broker_core::commit`]): budgets hold across restarts and concurrent commits never both
//!    spend the last unit;
//! 4. a body within the commit size limit (`[limits] commit_body_bytes`,
//!    `--commit-body-bytes`; default 1 MiB, at most 8 MiB), read within the edge's body
//!    deadline and budget ([`crate::edge::body`]), else 413 `PayloadTooLarge`.
//!
//! The credential and its grant are checked again once the body is in (it may trickle in for
//! up to `[server] body_timeout_ms`): one revoked meanwhile is answered the 401 of a revoked
//! credential, and one whose grant expired meanwhile the 403 `denied:expired` of step 3. The
//! commit's own transaction checks once more that the credential's session record exists, so
//! a revocation lands wholly before the commit or after it.
//!
//! Then the commit itself is checked ([`broker_core::commit::rest_commit`]): a `writtenBy` of
//! the coordinator or the store, or a coordinator's invocation record, or one that passes for
//! them (lookalike letters, another letter case), is refused with 400 `BadRequest`, like any
//! other invalid commit. Every answer is counted in `/v1/metrics`
//! (`worldd_commits_total{result=…}`).

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use broker_core::broker::{self, Decision, Denial};
use broker_core::commit::{self, CommitError, CommitGrant, COMMIT_COST, COMMIT_SCOPE, REST_EFFECT};
use broker_core::journal;
use broker_core::log::LogError;
use broker_core::session::{AuthError, Session};
use serde_json::{json, Value};

use crate::rest::{parse_commit, ApiError};
use crate::state::{AppState, AuthFailure, InvokeFailure};

/// A refused commit: the answer, and the reason counted in the metrics.
struct Refusal {
    reason: &'static str,
    error: ApiError,
}

impl Refusal {
    fn new(reason: &'static str, error: ApiError) -> Refusal {
        Refusal { reason, error }
    }

    fn forbidden(reason: &'static str, message: impl Into<String>) -> Refusal {
        Refusal::new(
            reason,
            ApiError::new(StatusCode::FORBIDDEN, "Forbidden", message),
        )
    }
}

/// The route: every answer is counted by result.
pub async fn route(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    match commit_checked(&state, &headers, body).await {
        Ok(selected) => {
            state.metrics().observe_commit("accepted");
            Ok(Json(json!({ "selectedHead": selected })))
        }
        Err(refusal) => {
            state.metrics().observe_commit(refusal.reason);
            Err(refusal.error)
        }
    }
}

async fn commit_checked(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<String, Refusal> {
    let session = state
        .authenticate(headers)
        .await
        .map_err(|f| Refusal::new("unauthenticated", ApiError::from_auth(f)))?;
    // Refused before its body is read; the grant spent is the one found after.
    commit_grant(state, &session)?;
    if state.store().admits_client_work().is_err() {
        return Err(Refusal::new("store_full", ApiError::store_full()));
    }

    // Read the body only now, never more than the limit, and in time.
    let limit = state.limits().commit_body_bytes;
    let deadline = tokio::time::Instant::now() + state.server().body_timeout;
    let read = state
        .bodies()
        .read(headers, body, limit, deadline)
        .await
        .map_err(|e| {
            let reason = match e {
                crate::edge::body::BodyError::TooLarge => "too_large",
                _ => "body",
            };
            Refusal::new(reason, crate::edge::body::rest_error(e, limit))
        })?;
    // The commit is made on the credential as it is now, not as it was at the request's head:
    // its body may have trickled in for up to `body_timeout_ms`. Revoked meanwhile, it is
    // answered as a revoked credential is; its grant no longer live, as an expired grant is.
    let session = state.session_now(&session).map_err(|e| match e {
        InvokeFailure::Revoked => revoked(),
        _ => Refusal::new("error", ApiError::from_auth(AuthFailure::Internal)),
    })?;
    let grant = commit_grant(state, &session)?;
    let c = parse_commit(state, &read.bytes).map_err(|e| Refusal::new("invalid", e))?;
    if let Some(id) = &c.invocation_id {
        if !id.starts_with("rest:") {
            return Err(Refusal::new(
                "invalid",
                ApiError::bad_request("invocationId must start with \"rest:\""),
            ));
        }
    }
    let store = state.store().clone();
    let credential = session.credential_id.clone();
    // A commit's answer waits for its own commit, newer than anything it read. A revocation
    // after this point is seen inside the commit's transaction.
    let selected =
        tokio::task::spawn_blocking(move || commit::rest_commit_as(&store, c, &grant, &credential))
            .await
            .map_err(|e| Refusal::new("error", ApiError::internal("commit task", e)))?;
    match selected {
        Ok(r) => Ok(r.to_string()),
        Err(CommitError::Log(LogError::HeadConflict { observed, selected })) => Err(Refusal::new(
            "head_conflict",
            ApiError {
                extra: Some((observed.clone(), selected.clone())),
                ..ApiError::new(
                    StatusCode::CONFLICT,
                    "HeadConflict",
                    format!("conflict: observed {observed} selected {selected}"),
                )
            },
        )),
        Err(
            e @ (CommitError::ReservedWriter(_)
            | CommitError::ReservedInvocation(_)
            | CommitError::ImitatedInvocation(_)),
        ) => Err(Refusal::new(
            "reserved",
            ApiError::bad_request(e.to_string()),
        )),
        Err(CommitError::Log(e)) => Err(Refusal::new(
            "invalid",
            ApiError::bad_request(e.to_string()),
        )),
        Err(
            e @ (CommitError::BadInvocationId
            | CommitError::Reused(_)
            | CommitError::NotPlainText { .. }
            | CommitError::NotAscii { .. }),
        ) => Err(Refusal::new(
            "invalid",
            ApiError::bad_request(e.to_string()),
        )),
        Err(e @ CommitError::Budget { .. }) => Err(Refusal::forbidden("budget", e.to_string())),
        Err(CommitError::Revoked) => Err(revoked()),
        // Made, only its sync failing: the head moved, so it is counted accepted, and the
        // answer says so rather than "internal store failure".
        Err(CommitError::Store(e)) if e.committed_not_durable() => {
            Err(Refusal::new("accepted", ApiError::commit_not_durable(&e)))
        }
        Err(CommitError::Store(e)) => Err(Refusal::new(
            "store",
            ApiError::from_store_write("commit", e),
        )),
        Err(e) => Err(Refusal::new("error", ApiError::internal("commit", e))),
    }
}

/// The answer to a commit whose credential was revoked after its request's head arrived:
/// the 401 a revoked (unknown) credential gets at the head.
fn revoked() -> Refusal {
    Refusal::new(
        "unauthenticated",
        ApiError::from_auth(AuthFailure::Denied(AuthError::Unknown)),
    )
}

/// The operator's commit grant, if this session may commit now. Checked again, durably,
/// inside the store's writer when the commit spends its unit.
fn commit_grant(state: &AppState, session: &Session) -> Result<CommitGrant, Refusal> {
    if !session.operator {
        return Err(Refusal::forbidden(
            "not_operator",
            "POST /v1/commit is an operator's act: this session credential is not an operator \
             credential (mint one with worldd session mint --operator)",
        ));
    }
    let spent = state
        .store()
        .read(|r| journal::spent(r, &session.episode))
        .map_err(|e| Refusal::new("error", ApiError::internal("commit budget", e)))?;
    let caps = session.capabilities(&spent);
    let now = state.coordinator().now();
    match broker::decide(&caps, REST_EFFECT, COMMIT_SCOPE, COMMIT_COST, now) {
        Decision::Allowed { grant, .. } => Ok(CommitGrant {
            episode: session.episode.clone(),
            budget: session.grants.get(grant).map_or(0, |g| g.budget),
        }),
        Decision::Denied(d @ (Denial::EffectName | Denial::Scope)) => Err(Refusal::forbidden(
            "no_grant",
            format!(
                "{}: POST /v1/commit needs a {REST_EFFECT}={COMMIT_SCOPE}:N grant; this operator \
                 credential has none",
                d.label()
            ),
        )),
        Decision::Denied(d @ Denial::Expired) => Err(Refusal::forbidden(
            "expired",
            format!(
                "{}: the {REST_EFFECT}={COMMIT_SCOPE} grant is not live",
                d.label()
            ),
        )),
        Decision::Denied(Denial::Budget) => Err(Refusal::forbidden(
            "budget",
            CommitError::Budget { remaining: 0 }.to_string(),
        )),
    }
}
