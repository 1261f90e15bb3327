//! Reconciliation and budget, for an agent that lost a response or wants to know what is
//! left: `GET /v1/calls/{surface}/{task_id}`, `GET /v1/invocations/{id}` and `GET /v1/budget`.
//!
//! Every route needs a valid session (even under `--open-reads`) and answers only about the
//! caller's own episode: a task id or invocation id of another episode is reported exactly
//! like one that never existed. An operator credential may name any episode's invocation id
//! (`/v1/invocations/{id}`); `/v1/calls/…` names no episode, so it is always about the
//! caller's own.
//!
//! A budget is granted per credential and spent per episode: `/v1/budget` lists the calling
//! credential's grants, each against what its episode has spent under any credential.
//! `?episode=EP` names another episode; only an operator credential may (the access model:
//! operators read every episode), and it gets that episode's spend and indeterminate intents,
//! without grants, which belong to credentials. An agent naming another episode gets one
//! `404` whatever the name, so the answer says nothing about which episodes exist.
//!
//! A call is in one of six states:
//!
//! | `state` | HTTP | meaning | what to do |
//! |---|---|---|---|
//! | `committed` | 200 | the result is in the log (`entryIndex`, `outputRef`, `worldRef`); resending the same key returns it | read it; never resend with another key |
//! | `indeterminate` | 200 | the effect's intent is durable, its outcome is not: it may have run (`outcome.reason` `in-flight`: this daemon is still running it, and its outcome may still come) | do not retry; inspect the worktree (`in-flight`: ask again later) |
//! | `unrecorded` | 200 | an effect ran and was recorded (`effects`), the call was not committed | do not retry; read the records |
//! | `withdrawn` | 200 | the call's deadline passed while its intent was written, so its handler was never started: nothing ran, its unit was given back (its record's `budgetAfter` is its `budgetBefore`), nothing was committed (`outcome` `refused` / `deadline`); the key stays used | send it again under another key |
//! | `queued` | 200 | this daemon holds the call, which waits behind its episode's running call; nothing of it is journaled yet (`outcome.reason` `in-flight`) | ask again later; do not send it again under another key |
//! | `not-found` | 404 | nothing was journaled under this key in your episode, and this daemon holds no such call | safe to send |
//!
//! A key names a call on each surface, so a `not-found` answer also says whether the other
//! surface holds the key (`otherSurface`: its surface, invocation id and state): sent again over
//! the asked surface, such a call would run a second time. Only a `not-found` without
//! `otherSurface` is safe to send.
//!
//! A call absent from a store the daemon has found rolled back under it (a copy put over its
//! data file) is not `not-found`: the copy may lack calls the daemon acknowledged, so the
//! answer is `503 Unavailable` saying so, and the call is not safe to send.
//!
//! A committed call's task state names its entry; that entry is read, and must hold the call.
//! When it does not (the log lost its end, perhaps grown again over the same indexes by later
//! calls), the answer is `500 Damaged` naming the call and the entry, not `committed`: the
//! store no longer holds what it says landed. A call whose invocation row does not decode is
//! `500 Damaged` too, saying what failed, not `not-found` (which would say it is safe to send).

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use broker_core::coordinator::{CallError, CallState, Reconciliation, Surface};
use broker_core::journal;
use broker_core::object::Object;
use broker_core::session::{self, Session};
use broker_core::store::StoreError;
use broker_core::task;
use broker_core::verify::{self, VerifyError};
use serde_json::{json, Value};

use crate::extract::{Params, Segments};
use crate::outcome::{self, Outcome};
use crate::rest::ApiError;
use crate::state::AppState;
use crate::tools;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/calls/{surface}/{task_id}", get(call_by_task))
        .route("/v1/invocations/{id}", get(call_by_invocation))
        .route("/v1/budget", get(budget))
}

async fn session(state: &AppState, headers: &HeaderMap) -> Result<Arc<Session>, ApiError> {
    state
        .authenticate(headers)
        .await
        .map_err(ApiError::from_auth)
}

fn parse_surface(s: &str) -> Option<Surface> {
    match s {
        "mcp" => Some(Surface::Mcp),
        "a2a" => Some(Surface::A2a),
        _ => None,
    }
}

/// The surface a key was not asked on.
fn other_surface(s: Surface) -> Surface {
    match s {
        Surface::Mcp => Surface::A2a,
        Surface::A2a => Surface::Mcp,
    }
}

async fn call_by_task(
    State(state): State<AppState>,
    headers: HeaderMap,
    Segments((surface, task_id)): Segments<(String, String)>,
) -> Result<Response, ApiError> {
    let session = session(&state, &headers).await?;
    let surface = parse_surface(&surface)
        .ok_or_else(|| ApiError::bad_request("surface must be mcp or a2a"))?;
    if !task::valid_task_id(&task_id) {
        return Err(ApiError::bad_request(
            "task id must be 1-128 characters of A-Z a-z 0-9 . _ -",
        ));
    }
    reconcile(state, session, surface, task_id).await
}

async fn call_by_invocation(
    State(state): State<AppState>,
    headers: HeaderMap,
    Segments(id): Segments<String>,
) -> Result<Response, ApiError> {
    let session = session(&state, &headers).await?;
    let (surface, episode, task_id) = checked_invocation_id(&id)?;
    let session = if episode == session.episode {
        session
    } else if session.operator {
        // Operators read every episode (the access model); reconcile in the id's episode.
        Arc::new(Session {
            episode: episode.to_owned(),
            ..Session::clone(&session)
        })
    } else {
        // Another episode's calls are not the caller's to see, nor to learn of: the answer is
        // the same whether the call exists or not, and names the id as it was asked for (not
        // the caller's own call with that task id, which may well exist).
        return Ok(not_found(surface, &id, task_id, LookedIn::Elsewhere));
    };
    let task_id = task_id.to_owned();
    reconcile(state, session, surface, task_id).await
}

/// An invocation id's surface, episode and task id, each checked (`mcp:` or `a2a:`, a valid
/// episode name, a valid task id); else the route's `400`.
pub fn checked_invocation_id(id: &str) -> Result<(Surface, &str, &str), ApiError> {
    let bad = || {
        ApiError::bad_request(
            "invocation id must be mcp:<episode>:<task id> or a2a:<episode>:<task id>",
        )
    };
    let (surface, episode, task_id) = task::split_invocation_id(id).ok_or_else(bad)?;
    let surface = parse_surface(surface).ok_or_else(bad)?;
    if broker_core::session::validate_episode(episode).is_err() || !task::valid_task_id(task_id) {
        return Err(bad());
    }
    Ok((surface, episode, task_id))
}

/// Where a `not-found` answer looked.
enum LookedIn<'a> {
    /// The caller's own episode.
    Own,
    /// Another episode, whose calls an agent may not read, exist or not.
    Elsewhere,
    /// The episode an operator's invocation id names: an operator reads every episode's.
    Episode(&'a str),
}

/// The `404 not-found` answer for `invocation_id`, as [`LookedIn`] says.
fn not_found(surface: Surface, invocation_id: &str, task_id: &str, looked: LookedIn) -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(not_found_json(surface, invocation_id, task_id, looked)),
    )
        .into_response()
}

/// The body of the `404 not-found` answer.
fn not_found_json(surface: Surface, invocation_id: &str, task_id: &str, looked: LookedIn) -> Value {
    let message = match looked {
        LookedIn::Elsewhere => format!(
            "no call {invocation_id} that this session may read (another episode's calls are its own)"
        ),
        LookedIn::Own => format!(
            "no call with task id {task_id:?} on surface {} in this session's episode",
            surface.prefix()
        ),
        LookedIn::Episode(episode) => format!(
            "no call with task id {task_id:?} on surface {} in episode {episode}",
            surface.prefix()
        ),
    };
    json!({
        "state": "not-found",
        "surface": surface.prefix(),
        "taskId": task_id,
        "invocationId": invocation_id,
        "error": {"class": "NotFound", "message": message},
    })
}

/// What the daemon holds of one call.
enum Found {
    /// Its task state, and its outcome.
    Call(Box<Reconciliation>, Outcome),
    /// Nothing journaled, but the daemon holds it in its episode's queue.
    Queued,
    /// Nothing journaled, nor held.
    Absent,
}

async fn reconcile(
    state: AppState,
    session: Arc<Session>,
    surface: Surface,
    task_id: String,
) -> Result<Response, ApiError> {
    let episode = session.episode.clone();
    let operator = session.operator;
    let id = surface.invocation_id(&episode, &task_id);
    let (r, outcome) = match find(&state, session.clone(), surface, &task_id).await? {
        Found::Call(r, outcome) => (r, outcome),
        Found::Queued => return Ok(queued(surface, &id, &task_id)),
        Found::Absent => {
            // A key names a call on each surface: one sent over the other is absent from this
            // one, and sent again over this one it would run a second time. Said with the
            // not-found, so that "safe to send" is read only where neither surface holds it.
            let other = other_surface(surface);
            let elsewhere = match find(&state, session, other, &task_id).await? {
                Found::Call(r, _) => Some((r.invocation_id.clone(), r.state.as_str())),
                Found::Queued => Some((other.invocation_id(&episode, &task_id), "queued")),
                Found::Absent => None,
            };
            let looked = if operator {
                LookedIn::Episode(&episode)
            } else {
                LookedIn::Own
            };
            let mut answer = not_found_json(surface, &id, &task_id, looked);
            if let Some((other_id, other_state)) = elsewhere {
                answer["otherSurface"] = json!({
                    "surface": other.prefix(),
                    "invocationId": other_id,
                    "state": other_state,
                });
                answer["error"]["message"] = Value::String(format!(
                    "{}, but {other_id} was sent over {} ({other_state}): do not send it over {}, which would run it again",
                    answer["error"]["message"].as_str().unwrap_or_default(),
                    other.prefix(),
                    surface.prefix()
                ));
            }
            return Ok((StatusCode::NOT_FOUND, Json(answer)).into_response());
        }
    };
    Ok(Json(json!({
        "state": r.state.as_str(),
        "surface": surface.prefix(),
        "taskId": task_id,
        "invocationId": r.invocation_id,
        "skillId": r.skill_id,
        "entryIndex": r.entry_index,
        "outputRef": r.output_ref,
        "worldRef": r.world_ref,
        "effects": outcome::effects_json(&r.effects),
        "outcome": outcome.to_json(),
    }))
    .into_response())
}

/// What the daemon holds of the call `task_id` sent over `surface` in the session's episode:
/// its task state (a committed one checked against the entry it names), or that this daemon
/// holds it queued, or nothing. A store found rolled back under the daemon answers 503 for a
/// call it lacks, which may have run.
async fn find(
    state: &AppState,
    session: Arc<Session>,
    surface: Surface,
    task_id: &str,
) -> Result<Found, ApiError> {
    let s = state.clone();
    let episode = session.episode.clone();
    let t = task_id.to_owned();
    let found = crate::durable_answers::spawn_read(move || -> Result<_, ApiError> {
        let coordinator = s.coordinator();
        let id = surface.invocation_id(&session.episode, &t);
        // Its mark looked at before the read and again after (`read_beside_mark`).
        let (read, running) = coordinator.read_beside_mark(surface, &session.episode, &t, || {
            coordinator.reconcile(&session, surface, &t)
        });
        let running = running.is_some();
        let Some(r) = read.map_err(|e| match e {
            // A row that does not decode is not a call never journaled ("safe to send").
            CallError::Store(StoreError::Corrupt(what)) => {
                damaged_call(&id, &what, "what became of it cannot be read")
            }
            e => ApiError::internal("reconcile", e),
        })?
        else {
            return Ok(None);
        };
        // The task state says where the call committed; that entry must still hold it (a log
        // that lost its end, perhaps grown again over the same indexes, does not).
        if let (CallState::Committed, Some(i)) = (r.state, r.entry_index) {
            s.store()
                .read(|rd| verify::committed_entry_holds(rd, &r.invocation_id, i))
                .map_err(|e| match e {
                    VerifyError::Integrity(what) => {
                        damaged_call(&id, &what, "it is not answered as committed")
                    }
                    e if e.is_integrity() => {
                        damaged_call(&id, &e.to_string(), "it is not answered as committed")
                    }
                    e => ApiError::internal("reconcile entry", e),
                })?;
        }
        let mut outcome = classify(&s, &r)?;
        // A call this daemon is still running is not one a crash left behind: its outcome may
        // still come, so the agent is told to wait, not to inspect what may be half written.
        if r.state == CallState::Indeterminate && running {
            outcome = Outcome::indeterminate("in-flight");
        }
        Ok(Some((r, outcome)))
    })
    .await
    .map_err(|e| ApiError::internal("reconcile task", e))??;
    if let Some((r, outcome)) = found {
        return Ok(Found::Call(Box::new(r), outcome));
    }
    let id = surface.invocation_id(&episode, task_id);
    // Nothing journaled yet, but the daemon holds the call: it waits behind its episode's
    // running call (or is being opened). Not safe to send while its request is open: it runs
    // next (a request that left drops it, and it is then absent).
    if state.admission().holds(&episode, &id) {
        return Ok(Found::Queued);
    }
    // A store rolled back under the daemon may lack calls it acknowledged: absent from it is
    // not "never journaled", and "safe to send" could run an effect twice.
    if state.store().rolled_back() {
        return Err(rolled_back_absent(&id));
    }
    Ok(Found::Absent)
}

/// 503 for a call absent from a store found rolled back under the daemon: whether it ran
/// cannot be said from the copy, so it is neither `not-found` nor safe to send.
fn rolled_back_absent(invocation_id: &str) -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "Unavailable",
        rolled_back_absent_text(invocation_id),
    )
}

/// Why a call absent from a store found rolled back under the daemon is not said not found
/// (here and by A2A's task reads).
pub fn rolled_back_absent_text(invocation_id: &str) -> String {
    format!(
        "call {invocation_id} is not in the store, but whether it ran cannot be said: the store's data file was rolled back or written by another process while this daemon served it, and what it holds now may lack calls the daemon acknowledged; do not send it again before the daemon is stopped and `worldd doctor` has checked the store"
    )
}

/// The `queued` answer: this daemon holds the call and has journaled nothing of it yet.
fn queued(surface: Surface, invocation_id: &str, task_id: &str) -> Response {
    Json(json!({
        "state": "queued",
        "surface": surface.prefix(),
        "taskId": task_id,
        "invocationId": invocation_id,
        "skillId": null,
        "entryIndex": null,
        "outputRef": null,
        "worldRef": null,
        "effects": [],
        "outcome": Outcome::indeterminate("in-flight").to_json(),
    }))
    .into_response()
}

/// 500 `Damaged`: the call's invocation row does not decode, or the entry its committed task
/// state names does not hold it (`what`), so the call is not answered as committed, nor as
/// anything else (`answer` says which): the store no longer says what became of it. Said and
/// logged, like a damaged object ([`ApiError::damaged_object`]).
fn damaged_call(invocation_id: &str, what: &str, answer: &str) -> ApiError {
    let message = format!(
        "call {invocation_id} is damaged: {what}; {answer} (run worldd doctor, and restore the store from a backup)"
    );
    tracing::error!("{message}");
    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "Damaged", message)
}

/// The outcome of a reconciled call: a committed one is classified from its stored output
/// exactly as its result was; the others are indeterminate.
fn classify(state: &AppState, r: &Reconciliation) -> Result<Outcome, ApiError> {
    Ok(match (r.state, r.output_ref) {
        (CallState::Committed, Some(output_ref)) => {
            let output = state
                .store()
                .read(|rd| rd.object(&output_ref))
                .map_err(|e| ApiError::internal("reconcile output", e))?
                .filter(Object::verify)
                .and_then(|o| o.payload_json().ok())
                .unwrap_or(Value::Null);
            let class = tools::class_of(state, &r.skill_id);
            outcome::of_committed(&r.effects, &output, class)
        }
        (CallState::Unrecorded, _) => Outcome::indeterminate("unrecorded"),
        // Nothing ran and nothing was spent: refused at its deadline, as a call left too
        // little of it is.
        (CallState::Withdrawn, _) => Outcome::too_late(),
        // A committed state without its output ref reads as one whose outcome is not known.
        (CallState::Committed | CallState::Indeterminate, _) => Outcome::indeterminate("pending"),
    })
}

async fn budget(
    State(state): State<AppState>,
    headers: HeaderMap,
    Params(q): Params,
) -> Result<Response, ApiError> {
    let session = session(&state, &headers).await?;
    if let Some(other) = q.keys().find(|k| *k != "episode") {
        return Err(ApiError::bad_request(format!(
            "unknown parameter {other:?}: /v1/budget takes only episode"
        )));
    }
    match q.get("episode") {
        Some(episode) if *episode != session.episode => {
            session::validate_episode(episode).map_err(|e| ApiError::bad_request(e.to_string()))?;
            if !session.operator {
                // One answer for every other name: it says nothing about which episodes exist.
                return Err(ApiError::not_found(format!(
                    "only an operator credential reads another episode's budget; this credential's episode is {}",
                    session.episode
                )));
            }
            episode_spend(state, episode.clone()).await
        }
        _ => own_budget(state, session).await,
    }
}

/// The calling credential's grants against its episode's spend.
async fn own_budget(state: AppState, session: Arc<Session>) -> Result<Response, ApiError> {
    let s = state.clone();
    let operator = session.operator;
    let episode = session.episode.clone();
    let expires_at = session.expires_at;
    let own = episode.clone();
    let (lines, pending) = crate::durable_answers::spawn_read(move || {
        let lines = s
            .coordinator()
            .budget(&session)
            .map_err(|e| ApiError::internal("budget", e))?;
        let pending = episode_indeterminate(&s, &own)?;
        Ok::<_, ApiError>((lines, pending))
    })
    .await
    .map_err(|e| ApiError::internal("budget task", e))??;
    let grants: Vec<Value> = lines
        .iter()
        .map(|l| {
            json!({
                "effect": l.effect,
                "scope": l.scope,
                "granted": l.granted,
                "spent": l.spent,
                "remaining": l.remaining,
                "live": l.live,
            })
        })
        .collect();
    Ok(Json(json!({
        "episode": episode,
        "operator": operator,
        "expiresAt": expires_at,
        "grants": grants,
        "indeterminate": indeterminate_json(&pending),
    }))
    .into_response())
}

/// Any episode's spend per effect and scope, and its indeterminate intents (operators only).
async fn episode_spend(state: AppState, episode: String) -> Result<Response, ApiError> {
    let own = episode.clone();
    let (spent, pending) = crate::durable_answers::spawn_read(move || {
        let spent = state
            .store()
            .read(|r| journal::spent(r, &own))
            .map_err(|e| ApiError::internal("spent", e))?;
        let pending = episode_indeterminate(&state, &own)?;
        Ok::<_, ApiError>((spent, pending))
    })
    .await
    .map_err(|e| ApiError::internal("budget task", e))??;
    let spent: Vec<Value> = spent
        .iter()
        .map(|((effect, scope), units)| json!({"effect": effect, "scope": scope, "spent": units}))
        .collect();
    Ok(Json(json!({
        "episode": episode,
        "spent": spent,
        "indeterminate": indeterminate_json(&pending),
    }))
    .into_response())
}

/// One of the episode's intents without an outcome: spent, and maybe run.
struct Pending {
    state: journal::JournalState,
    /// This daemon is still running the call: its outcome may still come (as `/v1/calls` says
    /// `in-flight`), so it is no crash's leftover.
    in_flight: bool,
}

/// The episode's intents without an outcome, each marked in flight when this daemon runs the
/// call now.
fn episode_indeterminate(state: &AppState, episode: &str) -> Result<Vec<Pending>, ApiError> {
    let read = || -> Result<Vec<journal::JournalState>, ApiError> {
        Ok(state
            .store()
            .indeterminate()
            .map_err(|e| ApiError::internal("indeterminate intents", e))?
            .into_iter()
            .filter(|p| p.intent.episode == episode)
            .collect())
    };
    let coordinator = state.coordinator();
    let running = |id: &str| {
        task::split_invocation_id(id)
            .and_then(|(surface, episode, task_id)| {
                coordinator.running_attempt(parse_surface(surface)?, episode, task_id)
            })
            .is_some()
    };
    let pending: Vec<Pending> = read()?
        .into_iter()
        .map(|p| Pending {
            in_flight: running(&p.intent.invocation_id),
            state: p,
        })
        .collect();
    if pending.iter().all(|p| p.in_flight) {
        return Ok(pending);
    }
    // A call not marked may have ended between the read and the look at the marks: its
    // outcome is durable before its mark goes, so a second read no longer holds it. What the
    // second read still holds unmarked is no call this daemon runs.
    let still: std::collections::HashSet<String> = read()?
        .into_iter()
        .map(|p| p.intent.invocation_id)
        .collect();
    Ok(pending
        .into_iter()
        .filter(|p| p.in_flight || still.contains(&p.state.intent.invocation_id))
        .collect())
}

fn indeterminate_json(pending: &[Pending]) -> Vec<Value> {
    pending
        .iter()
        .map(|p| {
            let i = &p.state.intent;
            let mut v = json!({
                "invocationId": i.invocation_id,
                "effect": i.effect,
                "scope": i.scope,
                "cost": i.cost,
                "requestRef": i.request_ref,
            });
            // Only where it holds: an intent a crash left keeps the fields it always had.
            if p.in_flight {
                v["inFlight"] = Value::Bool(true);
            }
            v
        })
        .collect()
}
