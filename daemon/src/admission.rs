//! Admission: which calls run now, which wait, and which are refused at once.
//!
//! A call first joins its **episode's queue**: one call of an episode runs at a time and at
//! most [`Limits::episode_queue`] more wait behind it; a call beyond that is refused at once
//! ([`Refusal::QueueFull`]), and one still waiting when its own deadline passes is refused
//! then ([`Refusal::EpisodeBusy`]). At the head of its queue it takes one of
//! [`Limits::execution_slots`] **global execution slots**, waiting at most
//! [`Limits::slot_wait`] ([`Refusal::NoSlot`]). A **large call** (a request body over
//! [`Limits::large_call_bytes`]) first takes one of [`Limits::large_calls`] places in the
//! large-call lane, in arrival order, waiting for it while a whole handler run still fits
//! before its own deadline ([`Refusal::NoLargeLane`]), and keeps it for at most [`LANE_HOLD`].
//!
//! The order matters: an episode holds at most one slot, so one episode looping a slow tool
//! cannot starve the others, and calls queued behind a busy episode hold no slot while they
//! wait. The episode's turn is handed to the coordinator as its *hold*: a handler that overran
//! its deadline keeps its episode's turn (and queue place) until it really returns, while its
//! slot is freed as soon as the caller is answered.
//!
//! The lane exists because a large call costs far more than its slot: several copies of its
//! body in memory, and a group commit that writes megabytes, which every call committed after
//! it waits for. Taken before the slot, it lets large calls queue without holding slots, and
//! keeps the few that run from filling the store's commits ahead of small calls. Large calls
//! wait for it as long as their deadline allows rather than the slot wait: a burst of them is
//! worked through in order instead of refused, and what they hold while they wait is bounded
//! by the body budget ([`crate::edge::body`]). A call still waiting when less than
//! [`Limits::handler_deadline`] of its deadline is left is refused then, with the capacity
//! error and its count, rather than let in to time out in its handler.
//!
//! A large call's costs come early (its copies while it is opened and planned, its intent) and
//! at its commit, which for a quick handler follow within milliseconds; a handler that waits
//! for a child process for seconds spends none of them meanwhile. Held for the whole call, one
//! agent looping a slow large call made every other episode's large calls wait a handler
//! deadline each, and a few such agents made them all time out. So a call keeps its place for
//! at most [`LANE_HOLD`], then gives it up while it runs on (its execution slot it keeps): what
//! the lane bounds is then the large calls that *start* at once, and the copies of a slow call
//! that gave its place up are bounded by its slot.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use broker_core::coordinator::MIN_HANDLER_TIME;

use crate::limits::Limits;

/// The longest a large call keeps its place in the lane: far more than a quick large write
/// takes to be planned, run and committed, far less than a handler that waits for a child.
pub const LANE_HOLD: Duration = Duration::from_secs(1);

/// Why a call was not admitted. Nothing ran in any of these cases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The episode's queue was full.
    QueueFull,
    /// The call's deadline passed while an earlier call of its episode was still running.
    EpisodeBusy,
    /// Every global execution slot stayed busy for the whole slot wait.
    NoSlot,
    /// The call's deadline passed while it waited for a place in the large-call lane.
    NoLargeLane,
}

impl Refusal {
    /// The label counted in `/v1/metrics`.
    pub fn label(self) -> &'static str {
        match self {
            Refusal::QueueFull => "episode_queue_full",
            Refusal::EpisodeBusy => "episode_busy",
            Refusal::NoSlot => "no_execution_slot",
            Refusal::NoLargeLane => "no_large_call_lane",
        }
    }
}

/// One episode's queue: the running call's turn and the count of calls in it.
struct Queue {
    turn: Arc<Semaphore>,
    members: usize,
    /// The invocation ids of the keyed calls in it (the running one included), each with how
    /// many of its calls are here: a call that waits has nothing journaled yet, and
    /// reconciling it must say the daemon holds it, not that it is safe to send.
    keyed: HashMap<String, usize>,
}

/// The admission state of a daemon.
pub struct Admission {
    slots: Arc<Semaphore>,
    large: Arc<Semaphore>,
    episodes: Arc<Mutex<HashMap<String, Queue>>>,
    limits: Limits,
}

/// An admitted call: its episode's turn and a global slot.
pub struct Ticket {
    /// Keep while the episode is busy with the call (the coordinator's hold).
    pub turn: Turn,
    /// Keep while the call runs on the caller's behalf.
    pub slot: Slot,
}

/// A global execution slot, with a place in the large-call lane for a large call: the place
/// is given back with the slot, or at [`LANE_HOLD`] if that comes first.
pub struct Slot {
    _global: OwnedSemaphorePermit,
    _large: Option<LanePlace>,
}

/// A place in the large-call lane, given back when dropped or at [`LANE_HOLD`].
struct LanePlace {
    permit: Arc<Mutex<Option<OwnedSemaphorePermit>>>,
    expiry: tokio::task::JoinHandle<()>,
}

impl LanePlace {
    fn hold(permit: OwnedSemaphorePermit) -> LanePlace {
        let permit = Arc::new(Mutex::new(Some(permit)));
        let expiry = tokio::spawn({
            let permit = permit.clone();
            async move {
                tokio::time::sleep(LANE_HOLD).await;
                drop(permit.lock().unwrap_or_else(PoisonError::into_inner).take());
            }
        });
        LanePlace { permit, expiry }
    }
}

impl Drop for LanePlace {
    fn drop(&mut self) {
        self.expiry.abort();
        drop(
            self.permit
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
    }
}

/// A place in an episode's queue; at the head, it also holds the episode's turn.
pub struct Turn {
    episodes: Arc<Mutex<HashMap<String, Queue>>>,
    episode: String,
    permit: Option<OwnedSemaphorePermit>,
    key: Option<String>,
}

impl Drop for Turn {
    fn drop(&mut self) {
        // Release the turn before leaving the queue, under the map's lock, so a queue is
        // removed only when nobody is in it.
        let mut episodes = self.episodes.lock().unwrap_or_else(PoisonError::into_inner);
        drop(self.permit.take());
        if let Some(q) = episodes.get_mut(&self.episode) {
            q.members -= 1;
            if let Some(key) = &self.key {
                if let Some(n) = q.keyed.get_mut(key) {
                    *n -= 1;
                    if *n == 0 {
                        q.keyed.remove(key);
                    }
                }
            }
            if q.members == 0 {
                episodes.remove(&self.episode);
            }
        }
    }
}

impl Admission {
    pub fn new(limits: Limits) -> Admission {
        Admission {
            slots: Arc::new(Semaphore::new(limits.execution_slots)),
            large: Arc::new(Semaphore::new(limits.large_calls)),
            episodes: Arc::default(),
            limits,
        }
    }

    /// Global slots free right now.
    #[cfg(test)]
    fn free_slots(&self) -> usize {
        self.slots.available_permits()
    }

    /// Places in the large-call lane free right now.
    #[cfg(test)]
    fn free_large_lane(&self) -> usize {
        self.large.available_permits()
    }

    /// Join `episode`'s queue, wait for its turn until `until`, then take a global slot; a
    /// call of `body_bytes` over the large-call size first takes a place in the lane.
    pub async fn admit(
        &self,
        episode: &str,
        until: Instant,
        body_bytes: usize,
    ) -> Result<Ticket, Refusal> {
        self.admit_keyed(episode, None, until, body_bytes).await
    }

    /// [`Admission::admit`] of a call with an invocation id its client knows (`key`): while
    /// the call is in the queue, [`Admission::holds`] says so.
    pub async fn admit_keyed(
        &self,
        episode: &str,
        key: Option<String>,
        until: Instant,
        body_bytes: usize,
    ) -> Result<Ticket, Refusal> {
        let mut turn = self.join(episode, key)?;
        let gate = {
            let episodes = self.episodes.lock().unwrap_or_else(PoisonError::into_inner);
            // The queue exists while `turn` is in it.
            episodes
                .get(episode)
                .map(|q| q.turn.clone())
                .ok_or(Refusal::QueueFull)?
        };
        let permit = match gate.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => tokio::time::timeout_at(until, gate.acquire_owned())
                .await
                .map_err(|_| Refusal::EpisodeBusy)?
                .map_err(|_| Refusal::EpisodeBusy)?,
        };
        turn.permit = Some(permit);
        let large = if body_bytes > self.limits.large_call_bytes {
            // Let in past this, the call would have less than a handler's deadline left, or
            // (a call deadline shorter than that) less than a handler is started with.
            let now = Instant::now();
            let least = MIN_HANDLER_TIME.min(self.limits.handler_deadline);
            let lane_until = until
                .checked_sub(self.limits.handler_deadline)
                .filter(|&t| t > now)
                .or_else(|| until.checked_sub(least))
                .unwrap_or(now);
            let permit = take(&self.large, lane_until, Refusal::NoLargeLane).await?;
            Some(LanePlace::hold(permit))
        } else {
            None
        };
        let slot_wait = until.min(Instant::now() + self.limits.slot_wait);
        let global = take(&self.slots, slot_wait, Refusal::NoSlot).await?;
        Ok(Ticket {
            turn,
            slot: Slot {
                _global: global,
                _large: large,
            },
        })
    }

    /// A place in the episode's queue, or [`Refusal::QueueFull`] at once.
    fn join(&self, episode: &str, key: Option<String>) -> Result<Turn, Refusal> {
        let mut episodes = self.episodes.lock().unwrap_or_else(PoisonError::into_inner);
        let q = episodes.entry(episode.to_owned()).or_insert_with(|| Queue {
            turn: Arc::new(Semaphore::new(1)),
            members: 0,
            keyed: HashMap::new(),
        });
        // The running call plus the waiting ones.
        if q.members > self.limits.episode_queue {
            return Err(Refusal::QueueFull);
        }
        q.members += 1;
        if let Some(key) = &key {
            *q.keyed.entry(key.clone()).or_default() += 1;
        }
        Ok(Turn {
            episodes: self.episodes.clone(),
            episode: episode.to_owned(),
            permit: None,
            key,
        })
    }

    /// Whether a call with this invocation id is in `episode`'s queue, waiting or running
    /// (until its episode is free of it).
    pub fn holds(&self, episode: &str, invocation_id: &str) -> bool {
        let episodes = self.episodes.lock().unwrap_or_else(PoisonError::into_inner);
        episodes
            .get(episode)
            .is_some_and(|q| q.keyed.contains_key(invocation_id))
    }

    /// Calls in `episode`'s queue, the running one included.
    pub fn queued(&self, episode: &str) -> usize {
        let episodes = self.episodes.lock().unwrap_or_else(PoisonError::into_inner);
        episodes.get(episode).map_or(0, |q| q.members)
    }
}

/// A permit of `semaphore` at once, or by `until` (in arrival order), or `refusal`.
async fn take(
    semaphore: &Arc<Semaphore>,
    until: Instant,
    refusal: Refusal,
) -> Result<OwnedSemaphorePermit, Refusal> {
    if let Ok(permit) = semaphore.clone().try_acquire_owned() {
        return Ok(permit);
    }
    tokio::time::timeout_at(until, semaphore.clone().acquire_owned())
        .await
        .map_err(|_| refusal)?
        .map_err(|_| refusal)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn admission(slots: usize, queue: usize) -> Admission {
        Admission::new(Limits {
            execution_slots: slots,
            episode_queue: queue,
            slot_wait: Duration::from_millis(500),
            ..Limits::default()
        })
    }

    fn far() -> Instant {
        Instant::now() + Duration::from_secs(3600)
    }

    /// A keyed call waiting behind its episode's running call had nothing journaled, and
    /// reconciling it answered `not-found` ("safe to send") while it was about to run. The
    /// queue now says which keyed calls it holds, until each leaves it.
    #[tokio::test(start_paused = true)]
    async fn a_keyed_call_is_held_from_the_moment_it_queues_until_it_leaves() {
        let a = Arc::new(admission(8, 2));
        let running = a
            .admit_keyed("ep", Some("mcp:ep:k1".into()), far(), 0)
            .await
            .unwrap();
        let waiting = tokio::spawn({
            let a = a.clone();
            async move {
                a.admit_keyed("ep", Some("mcp:ep:k2".into()), far(), 0)
                    .await
                    .map(|_| ())
            }
        });
        tokio::task::yield_now().await;
        assert!(a.holds("ep", "mcp:ep:k1") && a.holds("ep", "mcp:ep:k2"));
        assert!(!a.holds("ep", "mcp:ep:k3") && !a.holds("other", "mcp:ep:k2"));
        drop(running);
        assert!(!a.holds("ep", "mcp:ep:k1"));
        waiting.await.unwrap().unwrap();
        assert!(!a.holds("ep", "mcp:ep:k2"), "the ticket was dropped");
        // Two calls under one key (a resend queued behind the first): held until both leave.
        let one = a.join("ep", Some("k".into())).unwrap();
        let two = a.join("ep", Some("k".into())).unwrap();
        drop(one);
        assert!(a.holds("ep", "k"));
        drop(two);
        assert!(!a.holds("ep", "k"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_episode_queue_refuses_at_once() {
        let a = Arc::new(admission(8, 2));
        let running = a.admit("ep", far(), 0).await.unwrap();
        // Two wait behind it; the third is refused without waiting.
        let w1 = tokio::spawn({
            let a = a.clone();
            async move { a.admit("ep", far(), 0).await.map(|_| ()) }
        });
        tokio::task::yield_now().await;
        assert_eq!(a.queued("ep"), 2);
        let w2 = a.join("ep", None).unwrap();
        let before = Instant::now();
        assert_eq!(
            a.admit("ep", far(), 0).await.err(),
            Some(Refusal::QueueFull)
        );
        assert_eq!(
            Instant::now(),
            before,
            "a full queue must refuse without waiting"
        );
        drop(w2);
        drop(running);
        assert!(w1.await.unwrap().is_ok());
        assert_eq!(a.queued("ep"), 0, "the queue is removed when empty");
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_call_is_refused_busy_at_its_deadline() {
        let a = admission(8, 4);
        let _running = a.admit("ep", far(), 0).await.unwrap();
        let until = Instant::now() + Duration::from_secs(3);
        assert_eq!(
            a.admit("ep", until, 0).await.err(),
            Some(Refusal::EpisodeBusy)
        );
        assert_eq!(Instant::now(), until);
        assert_eq!(a.queued("ep"), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_slot_a_call_waits_the_slot_wait_then_is_refused() {
        let a = admission(1, 4);
        let _one = a.admit("a", far(), 0).await.unwrap();
        let start = Instant::now();
        assert_eq!(a.admit("b", far(), 0).await.err(), Some(Refusal::NoSlot));
        assert_eq!(Instant::now() - start, Duration::from_millis(500));
        // Its place in its episode's queue is given back.
        assert_eq!(a.queued("b"), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn large_calls_wait_for_their_lane_without_a_slot_while_small_calls_pass() {
        let a = Arc::new(Admission::new(Limits {
            execution_slots: 4,
            large_calls: 1,
            large_call_bytes: 100,
            slot_wait: Duration::from_millis(100),
            handler_deadline: Duration::from_secs(2),
            ..Limits::default()
        }));
        // A body of exactly the large-call size is not large.
        let small = a.admit("s", far(), 100).await.unwrap();
        let big = a.admit("b1", far(), 101).await.unwrap();
        assert_eq!((a.free_slots(), a.free_large_lane()), (2, 0));
        // A second large call waits while a handler's deadline still fits before its own,
        // holding no slot, then is refused.
        let start = Instant::now();
        let until = start + Duration::from_millis(2500);
        let waiting = tokio::spawn({
            let a = a.clone();
            async move { a.admit("b2", until, 1 << 20).await.err() }
        });
        tokio::task::yield_now().await;
        assert_eq!(a.queued("b2"), 1);
        assert_eq!(
            a.free_slots(),
            2,
            "a large call waiting for its lane holds no slot"
        );
        // Meanwhile a small call of another episode is admitted at once.
        let passed = a.admit("s2", far(), 10).await.unwrap();
        assert_eq!(Instant::now(), start);
        assert_eq!(waiting.await.unwrap(), Some(Refusal::NoLargeLane));
        assert_eq!(
            Instant::now(),
            until - Duration::from_secs(2),
            "not at the slot wait: when a handler's deadline no longer fits before its own"
        );
        assert_eq!(a.queued("b2"), 0);
        // The lane comes back with the slot, and the next large call takes it at once.
        drop(big);
        assert_eq!(a.free_large_lane(), 1);
        let next = a.admit("b3", far(), 101).await.unwrap();
        drop((small, passed, next));
        assert_eq!((a.free_slots(), a.free_large_lane()), (4, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn large_calls_waiting_for_their_lane_get_it_in_arrival_order_past_the_slot_wait() {
        let a = Arc::new(Admission::new(Limits {
            large_calls: 1,
            large_call_bytes: 100,
            slot_wait: Duration::from_millis(500),
            ..Limits::default()
        }));
        let big = a.admit("b1", far(), 101).await.unwrap();
        let mut waiters = Vec::new();
        for episode in ["b2", "b3"] {
            let a = a.clone();
            waiters.push(tokio::spawn(async move {
                let ticket = a.admit(episode, far(), 101).await.unwrap();
                let admitted = Instant::now();
                tokio::time::sleep(Duration::from_millis(100)).await;
                drop(ticket);
                admitted
            }));
            tokio::task::yield_now().await;
        }
        // Past the slot wait (and within the first call's hold), both still wait.
        tokio::time::sleep(Duration::from_millis(800)).await;
        let released = Instant::now();
        drop(big);
        let second = waiters.remove(0).await.unwrap();
        let third = waiters.remove(0).await.unwrap();
        assert_eq!(second, released);
        assert_eq!(third, released + Duration::from_millis(100));
    }

    /// One agent looping a slow large call (a handler waiting for its child for seconds) held
    /// the lane for each whole run, so every other episode's large calls waited a handler
    /// deadline each, and behind a few such agents timed out. A call gives its place up at
    /// [`LANE_HOLD`] while it runs on, keeping its slot: the next large call starts then.
    #[tokio::test(start_paused = true)]
    async fn a_slow_large_call_gives_its_place_in_the_lane_up_at_the_lane_hold_while_it_runs_on() {
        let a = Arc::new(Admission::new(Limits {
            execution_slots: 4,
            large_calls: 1,
            large_call_bytes: 100,
            ..Limits::default()
        }));
        let start = Instant::now();
        let slow = a.admit("loop", far(), 101).await.unwrap();
        assert_eq!((a.free_slots(), a.free_large_lane()), (3, 0));
        let mut victims = Vec::new();
        for episode in ["v1", "v2"] {
            let a = a.clone();
            victims.push(tokio::spawn(async move {
                let ticket = a.admit(episode, far(), 1 << 20).await.unwrap();
                (Instant::now(), ticket)
            }));
            tokio::task::yield_now().await;
        }
        let (first, one) = victims.remove(0).await.unwrap();
        assert_eq!(first, start + LANE_HOLD, "the slow call still runs");
        assert_eq!(a.free_slots(), 2, "the slow call keeps its slot");
        // A quick one gives its place back when it ends, before its hold.
        tokio::time::sleep(Duration::from_millis(10)).await;
        drop(one);
        let (second, two) = victims.remove(0).await.unwrap();
        assert_eq!(second, first + Duration::from_millis(10));
        // The looping agent's next slow call takes its turn behind the others, as they do.
        drop(slow);
        let next = tokio::spawn({
            let a = a.clone();
            async move {
                let ticket = a.admit("loop", far(), 101).await.unwrap();
                (Instant::now(), ticket)
            }
        });
        tokio::task::yield_now().await;
        drop(two);
        let (third, again) = next.await.unwrap();
        assert_eq!(third, second);
        drop(again);
        assert_eq!((a.free_slots(), a.free_large_lane()), (4, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn one_episode_holds_at_most_one_slot() {
        let a = admission(2, 8);
        let busy = a.admit("loop", far(), 0).await.unwrap();
        // The looping episode's next call waits for its turn, holding no slot.
        let queued = a.join("loop", None).unwrap();
        assert_eq!(a.free_slots(), 1);
        // So another episode still gets a slot at once.
        let other = a.admit("other", far(), 0).await.unwrap();
        assert_eq!(a.free_slots(), 0);
        drop((busy, queued, other));
        assert_eq!(a.free_slots(), 2);
    }
}
