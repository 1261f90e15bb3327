//! Who may see which log entries: the one decision behind `GET /v1/log/stream` and
//! `GET /v1/log/summaries`.
//!
//! An entry *belongs* to the episode named by its invocation record (`episodeId`); entries
//! that are not calls (the genesis, client-built commits) belong to no episode. Today:
//!
//! - under `--open-reads` every reader sees every entry (the reference's behaviour);
//! - otherwise a session sees its own episode's entries and the entries of no episode.
//!
//! Another episode's entries are skipped without a trace (no existence oracle). When the
//! store gains a read model (operator credentials, per-object readers), this module is the
//! place to consult it: callers only ask [`Reader::may_see`].

use axum::http::HeaderMap;

use crate::rest::ApiError;
use crate::state::AppState;

/// The reader of a request, as far as log visibility is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reader {
    /// `--open-reads`: reads are not scoped.
    Everyone,
    /// A session of this episode.
    Episode(String),
}

impl Reader {
    /// Authenticate the request (unless reads are open) and name its reader.
    pub async fn of_request(state: &AppState, headers: &HeaderMap) -> Result<Reader, ApiError> {
        if state.info().open_reads {
            return Ok(Reader::Everyone);
        }
        let session = state
            .authenticate(headers)
            .await
            .map_err(ApiError::from_auth)?;
        Ok(Reader::Episode(session.episode))
    }

    /// May this reader see an entry that belongs to `episode` (`None`: to no episode)?
    pub fn may_see(&self, episode: Option<&str>) -> bool {
        match (self, episode) {
            (Reader::Everyone, _) | (_, None) => true,
            (Reader::Episode(own), Some(e)) => own == e,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_sees_its_own_episode_and_entries_of_none() {
        let ep1 = Reader::Episode("ep1".into());
        assert!(ep1.may_see(Some("ep1")));
        assert!(ep1.may_see(None));
        assert!(!ep1.may_see(Some("ep2")));
        assert!(!ep1.may_see(Some("ep10")));
        assert!(!ep1.may_see(Some("")));
        assert!(Reader::Everyone.may_see(Some("ep2")));
        assert!(Reader::Everyone.may_see(None));
    }
}
