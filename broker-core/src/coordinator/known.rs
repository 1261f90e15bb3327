//! What each episode already holds in the store: the objects an earlier call of the episode
//! stored and was granted, in a commit that is durable.
//!
//! Calls repeat themselves: an agent reading one file again sends the same arguments, which
//! plan the same effect, request it in the same second and get the same result; a refused call
//! sent again is refused in the same words. Each such object is stored once, but every call
//! that made it again sent it to the store's writer, which looked it up to find it present,
//! looked it up again to learn its sequence and kind, and looked up the episode's grant to
//! find it made: five or six searches of the store's largest tables per object, on the one
//! thread every commit waits for. A call now leaves out the objects its episode is known to
//! hold.
//!
//! # Why an entry stays true
//!
//! An entry is added only after the commit that stored the object and granted it to the
//! episode is durable, and nothing removes objects or grants from a store while it is open.
//! Entries are kept per episode: another episode that makes the same object still stores its
//! own grant. The set keeps at most [`KNOWN_MAX`] objects over at most [`KNOWN_EPISODES_MAX`]
//! episodes (under a mebibyte, however the objects are spread over the episodes), then starts
//! over; what it forgot is sent to the writer again, as before.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, PoisonError};

use crate::object::{Object, Ref};

/// Most (episode, object) pairs kept. An episode's repeating objects are a handful, so a full
/// set is mostly objects that will not come again, and starting over costs each episode one
/// call that sends its objects anew.
pub const KNOWN_MAX: usize = 16_384;

/// Most episodes kept (each costs its name and a set of its own).
pub const KNOWN_EPISODES_MAX: usize = 1_024;

/// The objects each episode is known to hold ([module docs](self)).
#[derive(Default)]
pub(crate) struct KnownObjects {
    inner: Mutex<Known>,
}

#[derive(Default)]
struct Known {
    by_episode: HashMap<String, HashSet<Ref>>,
    count: usize,
}

impl KnownObjects {
    /// Drop from `objects` those `episode` is known to hold.
    pub(crate) fn keep_unknown(&self, episode: &str, objects: &mut Vec<Object>) {
        let known = self.lock();
        if let Some(held) = known.by_episode.get(episode) {
            objects.retain(|o| !held.contains(&o.hash));
        }
    }

    /// Note that `episode` holds `refs`: call only once the commit that stored them and
    /// granted them to it is durable.
    pub(crate) fn learn(&self, episode: &str, refs: &[Ref]) {
        if refs.len() > KNOWN_MAX {
            return;
        }
        let mut known = self.lock();
        let new_episode = !known.by_episode.contains_key(episode);
        if known.count + refs.len() > KNOWN_MAX
            || (new_episode && known.by_episode.len() >= KNOWN_EPISODES_MAX)
        {
            *known = Known::default();
        }
        let Known { by_episode, count } = &mut *known;
        let held = match by_episode.get_mut(episode) {
            Some(held) => held,
            None => by_episode.entry(episode.to_owned()).or_default(),
        };
        for r in refs {
            if held.insert(*r) {
                *count += 1;
            }
        }
    }

    /// Objects `episode` is known to hold.
    pub(crate) fn held_by(&self, episode: &str) -> usize {
        self.lock().by_episode.get(episode).map_or(0, HashSet::len)
    }

    /// Pairs kept now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().count
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Known> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::sid;

    fn object(n: u32) -> Object {
        Object::new(
            sid::INVOCATION_INPUT,
            "test",
            format!("{{\"n\":{n}}}").into_bytes(),
        )
    }

    #[test]
    fn an_object_known_for_one_episode_is_still_sent_for_another() {
        let known = KnownObjects::default();
        let (a, b) = (object(1), object(2));
        known.learn("ep-a", &[a.hash]);
        let mut sent = vec![a.clone(), b.clone()];
        known.keep_unknown("ep-a", &mut sent);
        assert_eq!(sent.iter().map(|o| o.hash).collect::<Vec<_>>(), [b.hash]);
        let mut other = vec![a.clone(), b.clone()];
        known.keep_unknown("ep-b", &mut other);
        assert_eq!(other.len(), 2);
    }

    #[test]
    fn the_known_objects_start_over_past_their_bound() {
        let known = KnownObjects::default();
        let first = object(0).hash;
        known.learn("ep", &[first]);
        known.learn("ep", &[first]);
        assert_eq!(known.len(), 1, "a pair learned twice is kept once");
        let refs: Vec<Ref> = (1..KNOWN_MAX as u32).map(|n| object(n).hash).collect();
        known.learn("ep", &refs);
        assert_eq!(known.len(), KNOWN_MAX);
        let one_more = object(KNOWN_MAX as u32).hash;
        known.learn("other", &[one_more]);
        assert_eq!(known.len(), 1, "past the bound the set starts over");
        let mut sent = vec![object(0)];
        known.keep_unknown("ep", &mut sent);
        assert_eq!(sent.len(), 1, "what was forgotten is sent again");
    }

    #[test]
    fn the_known_objects_start_over_past_their_episodes() {
        let known = KnownObjects::default();
        let one = [object(0).hash];
        for e in 0..KNOWN_EPISODES_MAX {
            known.learn(&format!("ep-{e}"), &one);
        }
        assert_eq!(known.len(), KNOWN_EPISODES_MAX);
        known.learn("ep-0", &[object(1).hash]);
        assert_eq!(
            known.len(),
            KNOWN_EPISODES_MAX + 1,
            "a known episode adds no episode"
        );
        known.learn("one-too-many", &one);
        assert_eq!(
            known.len(),
            1,
            "past the episodes' bound the set starts over"
        );
        assert_eq!(known.held_by("ep-0"), 0);
        assert_eq!(known.held_by("one-too-many"), 1);
    }
}
