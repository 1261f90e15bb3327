//! The two reads online verification needs that no other route serves: `worldd why --addr`
//! walks a chain over the REST routes, and these hand it the rest as stored bytes.
//!
//! - `GET /v1/invocations/{id}/rows`: the rows of one coordinator invocation (its invocation
//!   row, the resolution of its intent and the journal rows they name), base64-encoded exactly
//!   as stored, for the journal link. The rows have no content address, so the verifier
//!   decodes and cross-checks them itself ([`broker_core::verify::InvocationRows`]); nothing
//!   here says whether they verify.
//!   They are the id's episode's ([`broker_core::access::may_read_invocation`]): another
//!   episode's invocation answers 404 whether it exists or not.
//! - `GET /v1/log/{index}/world`: the world entry `index` selected, for a client commit whose
//!   world is not the head. Worlds are public, like the entry headers.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::get;
use axum::{Json, Router};
use base64::Engine;
use broker_core::access;
use broker_core::log;
use broker_core::verify::InvocationRows;
use serde_json::{json, Value};

use crate::extract::Segments;
use crate::rest::ApiError;
use crate::state::AppState;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/invocations/{id}/rows", get(invocation_rows))
        .route("/v1/log/{index}/world", get(world_at))
}

async fn invocation_rows(
    State(state): State<AppState>,
    headers: HeaderMap,
    Segments(id): Segments<String>,
) -> Result<Json<Value>, ApiError> {
    let reader = crate::visibility::reader_of_request(&state, &headers).await?;
    // Checked as `/v1/invocations/{id}` checks it: an id no call could have is a 400.
    crate::reconcile::checked_invocation_id(&id)?;
    // Another episode's rows: the same answer whether they exist or not.
    if !access::may_read_invocation(&reader, &id) {
        return Err(ApiError::not_found("invocation not found"));
    }
    let store = state.store().clone();
    let i = id.clone();
    let rows =
        crate::durable_answers::spawn_read(move || store.read(|r| InvocationRows::read(r, &i)))
            .await
            .map_err(|e| ApiError::internal("rows task", e))??
            .unwrap_or_default();
    let b64 = |b: &Vec<u8>| base64::engine::general_purpose::STANDARD.encode(b);
    let journal_rows: BTreeMap<String, String> = rows
        .journal_rows
        .iter()
        .map(|(seq, b)| (seq.to_string(), b64(b)))
        .collect();
    Ok(Json(json!({
        "invocationId": id,
        "invocation": rows.invocation.as_ref().map(b64),
        "resolution": rows.resolution.as_ref().map(b64),
        "journalRows": journal_rows,
    })))
}

async fn world_at(
    State(state): State<AppState>,
    headers: HeaderMap,
    Segments(index): Segments<String>,
) -> Result<Json<Value>, ApiError> {
    crate::visibility::reader_of_request(&state, &headers).await?;
    let i: u64 = index
        .parse()
        .map_err(|_| ApiError::bad_request("log index must be a non-negative integer"))?;
    let store = state.store().clone();
    let found = crate::durable_answers::spawn_read(move || {
        store.read(|r| -> Result<_, ApiError> {
            let Some(world_ref) = log::world_ref_at(r, i)? else {
                return Ok(None);
            };
            Ok(log::world(r, &world_ref)?.map(|w| (world_ref, w)))
        })
    })
    .await
    .map_err(|e| ApiError::internal("world task", e))??;
    let (r, w) = found.ok_or_else(|| ApiError::not_found("no world selects this log entry"))?;
    Ok(Json(json!({
        "ref": r,
        "revision": w.revision,
        "stateRoot": w.state_root,
        "logHead": w.log_head,
    })))
}
