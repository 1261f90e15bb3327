//! Who may see which log entries: the one decision behind `GET /v1/log/stream`,
//! `GET /v1/log/summaries` and `GET /v1/log`.
//!
//! The read model is broker-core's ([`broker_core::access`]): an entry is listed to a reader
//! that may read its invocation record — every reader under `--open-reads` and every operator;
//! an agent session for its own episode's calls and the public entries (the genesis). Another
//! episode's entries are skipped without a trace (no existence oracle); every entry header
//! stays readable by index, so chains can be followed.

use axum::http::HeaderMap;
use broker_core::log::Entry;
use broker_core::store::{ReadCtx, StoreError};

pub use broker_core::access::Reader;

use crate::rest::ApiError;
use crate::state::AppState;

/// Authenticate the request (unless reads are open) and name its reader.
pub async fn reader_of_request(state: &AppState, headers: &HeaderMap) -> Result<Reader, ApiError> {
    if state.info().open_reads {
        return Ok(Reader::Everyone);
    }
    state
        .authenticate(headers)
        .await
        .map(|s| Reader::of(&s))
        .map_err(ApiError::from_auth)
}

/// May `reader` see `entry` in a listing or a stream?
pub fn may_see(r: &ReadCtx<'_>, reader: &Reader, entry: &Entry) -> Result<bool, StoreError> {
    broker_core::access::may_list(r, reader, entry)
}
