//! One call at a time per episode: the turn a call holds from its opening until its episode is
//! free again.

use std::collections::HashSet;
use std::sync::{Arc, Condvar, Mutex, PoisonError};

/// One call at a time per episode. A turn is an owned guard, so a handler that overran its
/// deadline can keep its episode's turn on the runner thread until it returns.
#[derive(Default)]
pub(super) struct EpisodeTurns {
    busy: Mutex<HashSet<String>>,
    freed: Condvar,
}

impl EpisodeTurns {
    /// Wait for the episode's turn.
    pub(super) fn enter(self: &Arc<Self>, episode: &str) -> EpisodeTurn {
        let mut busy = self.busy.lock().unwrap_or_else(PoisonError::into_inner);
        while busy.contains(episode) {
            busy = self
                .freed
                .wait(busy)
                .unwrap_or_else(PoisonError::into_inner);
        }
        busy.insert(episode.to_owned());
        EpisodeTurn {
            turns: self.clone(),
            episode: episode.to_owned(),
        }
    }

    /// The episodes holding a turn, sorted.
    #[cfg(test)]
    pub(super) fn held(&self) -> Vec<String> {
        let busy = self.busy.lock().unwrap_or_else(PoisonError::into_inner);
        let mut held: Vec<String> = busy.iter().cloned().collect();
        held.sort();
        held
    }
}

pub(super) struct EpisodeTurn {
    turns: Arc<EpisodeTurns>,
    episode: String,
}

impl Drop for EpisodeTurn {
    fn drop(&mut self) {
        let mut busy = self
            .turns
            .busy
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        busy.remove(&self.episode);
        self.turns.freed.notify_all();
    }
}
