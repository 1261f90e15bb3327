//! Log lines that anyone can cause, written at most once per interval for each kind.
//!
//! A client without a credential can make the daemon refuse a request thousands of times a
//! second, and a descriptor shortage fails every accept. A log line for each would let them
//! fill the operator's disk and, with stderr on a pipe nobody drains fast enough, block the
//! thread that writes it. So each kind of such line is written for the first occurrence and
//! then at most once per [`Throttle`] interval, saying how many occurrences went unlogged since
//! the last line; the metrics count every one.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use worldd::log_throttle::Throttle;
//!
//! let throttle = Throttle::new(Duration::from_secs(10));
//! let start = Instant::now();
//! assert_eq!(throttle.due_at("absent", start), Some(0));
//! assert_eq!(throttle.due_at("absent", start + Duration::from_secs(1)), None);
//! assert_eq!(throttle.due_at("unknown", start + Duration::from_secs(1)), Some(0));
//! assert_eq!(throttle.due_at("absent", start + Duration::from_secs(10)), Some(1));
//! ```

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often one kind of line that clients can cause is written at most.
pub const LOG_EVERY: Duration = Duration::from_secs(10);

/// When each kind of line was last written, and how many of it went unlogged since.
#[derive(Debug)]
pub struct Throttle {
    every: Duration,
    kinds: Mutex<BTreeMap<&'static str, Kind>>,
}

#[derive(Debug)]
struct Kind {
    logged_at: Instant,
    unlogged: u64,
}

impl Throttle {
    pub fn new(every: Duration) -> Throttle {
        Throttle {
            every,
            kinds: Mutex::default(),
        }
    }

    /// One occurrence of `kind` now: `Some(unlogged)` when its line is due, with how many
    /// occurrences went unlogged since its last line; `None` when it is not.
    pub fn due(&self, kind: &'static str) -> Option<u64> {
        self.due_at(kind, Instant::now())
    }

    /// [`Throttle::due`] at `now`.
    pub fn due_at(&self, kind: &'static str, now: Instant) -> Option<u64> {
        // A poisoned lock only means another thread panicked while counting: log, as before.
        let Ok(mut kinds) = self.kinds.lock() else {
            return Some(0);
        };
        match kinds.get_mut(kind) {
            Some(k) if now.saturating_duration_since(k.logged_at) < self.every => {
                k.unlogged += 1;
                None
            }
            Some(k) => {
                let unlogged = std::mem::take(&mut k.unlogged);
                k.logged_at = now;
                Some(unlogged)
            }
            None => {
                kinds.insert(
                    kind,
                    Kind {
                        logged_at: now,
                        unlogged: 0,
                    },
                );
                Some(0)
            }
        }
    }
}

impl Default for Throttle {
    fn default() -> Throttle {
        Throttle::new(LOG_EVERY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_is_logged_first_then_once_an_interval_with_what_went_unlogged() {
        let t = Throttle::new(Duration::from_secs(10));
        let start = Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);
        assert_eq!(t.due_at("a", at(0)), Some(0));
        for s in 1..10 {
            assert_eq!(t.due_at("a", at(s)), None, "within the interval");
        }
        // Another kind is not held back by the first.
        assert_eq!(t.due_at("b", at(5)), Some(0));
        assert_eq!(t.due_at("a", at(10)), Some(9));
        assert_eq!(t.due_at("a", at(11)), None);
        // A quiet spell: the next is logged at once, with the one held back.
        assert_eq!(t.due_at("a", at(60)), Some(1));
        assert_eq!(t.due_at("b", at(60)), Some(0));
    }
}
