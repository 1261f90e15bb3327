//! Log lines that anyone can cause, written at most once per interval for each kind.
//!
//! A client without a credential can make the daemon refuse a request thousands of times a
//! second, and a descriptor shortage fails every accept. A log line for each would let them
//! fill the operator's disk and, with stderr on a pipe nobody drains fast enough, block the
//! thread that writes it. So each kind of such line is written for the first occurrence and
//! then at most once per [`Throttle`] interval, saying how many occurrences went unlogged since
//! the last line; the metrics count every one.
//!
//! A kind may also be keyed by who caused it ([`Throttle::per`]): an agent's calls that run
//! nothing and store nothing (a tool under rule R8, a reused key, a replay) cost it nothing
//! either, so each episode's such lines are throttled by episode and outcome. Such a throttle
//! keeps at most a bounded number of keys; past it, keys whose interval has passed are
//! forgotten (with what they held back), and a new key finds no room until one has.
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

/// Most keys a throttle keyed by who caused its lines keeps ([`Throttle::per`]).
pub const MAX_KEYS: usize = 4096;

/// When each kind of line was last written, and how many of it went unlogged since.
#[derive(Debug)]
pub struct Throttle<K = &'static str> {
    every: Duration,
    kinds: Mutex<BTreeMap<K, Kind>>,
    /// Most kinds kept; `usize::MAX` for a fixed set of kinds.
    max_kinds: usize,
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
            max_kinds: usize::MAX,
        }
    }
}

impl<K: Ord> Throttle<K> {
    /// A throttle whose kinds are keyed by who caused them (an episode and an outcome), of at
    /// most `max_kinds` keys: a key finds no room, and its line is not written (the metrics
    /// still count it), while that many keys were each logged within the interval.
    pub fn per(every: Duration, max_kinds: usize) -> Throttle<K> {
        Throttle {
            every,
            kinds: Mutex::default(),
            max_kinds: max_kinds.max(1),
        }
    }

    /// One occurrence of `kind` now: `Some(unlogged)` when its line is due, with how many
    /// occurrences went unlogged since its last line; `None` when it is not.
    pub fn due(&self, kind: K) -> Option<u64> {
        self.due_at(kind, Instant::now())
    }

    /// [`Throttle::due`] at `now`.
    pub fn due_at(&self, kind: K, now: Instant) -> Option<u64> {
        // A poisoned lock only means another thread panicked while counting: log, as before.
        let Ok(mut kinds) = self.kinds.lock() else {
            return Some(0);
        };
        match kinds.get_mut(&kind) {
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
                if kinds.len() >= self.max_kinds {
                    // Forget the keys whose interval has passed: the next occurrence of one
                    // is logged at once, as after a quiet spell (without what it held back).
                    kinds.retain(|_, k| now.saturating_duration_since(k.logged_at) < self.every);
                    if kinds.len() >= self.max_kinds {
                        return None;
                    }
                }
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

impl Default for Throttle<&'static str> {
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

    #[test]
    fn a_throttle_per_key_keeps_at_most_its_keys_and_forgets_those_past_their_interval() {
        let t: Throttle<(String, &str)> = Throttle::per(Duration::from_secs(10), 2);
        let start = Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);
        let key = |e: &str| (e.to_owned(), "no_handler");
        assert_eq!(t.due_at(key("ep1"), at(0)), Some(0));
        assert_eq!(t.due_at(key("ep2"), at(1)), Some(0));
        // Both keys logged within the interval: a third finds no room, and writes nothing.
        assert_eq!(t.due_at(key("ep3"), at(2)), None);
        assert_eq!(t.due_at(key("ep1"), at(3)), None);
        // ep1's interval has passed: it is forgotten to make room for ep3.
        assert_eq!(t.due_at(key("ep3"), at(10)), Some(0));
        assert_eq!(t.due_at(key("ep3"), at(11)), None);
        // ep2 was kept (logged within the interval then) and is due again.
        assert_eq!(t.due_at(key("ep2"), at(11)), Some(0));
    }
}
