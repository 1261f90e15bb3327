//! Per-key quotas: how much of something each key (a credential, an episode) holds now, under
//! a cap per key. A holding is a guard that gives its amount back when dropped, so whatever
//! ends a request, stream or answer also ends what it held. Keys holding nothing are not
//! kept, so the map grows only with the keys holding something at the moment.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

type Counts<K> = Arc<Mutex<HashMap<K, usize>>>;

/// The amounts held per key, each capped at `cap`.
#[derive(Clone)]
pub struct Quota<K> {
    held: Counts<K>,
    cap: usize,
}

impl<K: Eq + Hash + Clone> Quota<K> {
    pub fn new(cap: usize) -> Self {
        Quota {
            held: Arc::default(),
            cap,
        }
    }

    /// The most one key may hold.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// What `key` holds now.
    pub fn held(&self, key: &K) -> usize {
        self.held
            .lock()
            .map_or(0, |m| m.get(key).copied().unwrap_or(0))
    }

    /// True when `key` holds its whole cap.
    pub fn is_full(&self, key: &K) -> bool {
        self.held(key) >= self.cap
    }

    /// Keys holding something now.
    #[cfg(test)]
    pub fn holders(&self) -> usize {
        self.held.lock().map_or(0, |m| m.len())
    }

    /// Take `amount` for `key` if that keeps it within the cap.
    pub fn take(&self, key: &K, amount: usize) -> Option<Held<K>> {
        let mut m = self.held.lock().ok()?;
        let now = m.get(key).copied().unwrap_or(0);
        if now + amount > self.cap {
            return None;
        }
        m.insert(key.clone(), now + amount);
        Some(Held {
            held: self.held.clone(),
            key: key.clone(),
            amount,
        })
    }
}

/// An amount one key holds; given back when dropped.
pub struct Held<K: Eq + Hash> {
    held: Counts<K>,
    key: K,
    amount: usize,
}

impl<K: Eq + Hash> Held<K> {
    /// How much this holding is.
    pub fn amount(&self) -> usize {
        self.amount
    }

    /// Make `more`, taken for the same key, part of this holding.
    pub fn merge(&mut self, mut more: Held<K>) {
        debug_assert!(self.key == more.key, "holdings of one key only");
        self.amount += std::mem::take(&mut more.amount);
    }
}

impl<K: Eq + Hash> Drop for Held<K> {
    fn drop(&mut self) {
        if let Ok(mut m) = self.held.lock() {
            if let Some(n) = m.get_mut(&self.key) {
                *n = n.saturating_sub(self.amount);
                if *n == 0 {
                    m.remove(&self.key);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_takes_up_to_its_cap_and_gets_it_back_when_its_holdings_drop() {
        let q: Quota<&str> = Quota::new(10);
        let a = q.take(&"a", 6).unwrap();
        assert!(q.take(&"a", 5).is_none(), "6 + 5 is over the cap");
        let b = q.take(&"a", 4).unwrap();
        assert!(q.is_full(&"a"));
        assert!(q.take(&"a", 1).is_none());
        // Another key has its own cap.
        let other = q.take(&"b", 10).unwrap();
        assert_eq!((q.held(&"a"), q.held(&"b"), q.holders()), (10, 10, 2));
        drop(a);
        assert_eq!(q.held(&"a"), 4);
        assert!(!q.is_full(&"a"));
        drop((b, other));
        assert_eq!(q.holders(), 0, "keys holding nothing are not kept");
        assert!(q.take(&"a", 11).is_none(), "more than the cap never fits");
        assert_eq!(q.holders(), 0, "a refused take keeps no key");
    }

    #[test]
    fn merged_holdings_are_given_back_together() {
        let q: Quota<&str> = Quota::new(10);
        let mut a = q.take(&"a", 3).unwrap();
        a.merge(q.take(&"a", 4).unwrap());
        assert_eq!((a.amount(), q.held(&"a")), (7, 7));
        drop(a);
        assert_eq!(q.holders(), 0);
    }
}
