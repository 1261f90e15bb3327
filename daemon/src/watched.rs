//! A call running on the blocking pool, watched for its handler's deadline.
//!
//! The coordinator runs the call's handler on the same blocking thread as the rest of its
//! pipeline ([`Coordinator::invoke_watched`]); whoever waits for that thread enforces the
//! handler's deadline through the call's [`Watch`]: at the deadline the handler is abandoned,
//! the caller answered as timed out and the call's global slot freed, while the episode stays
//! busy until the handler really returns. The request's own task waits; if it goes away (the
//! client left, or the call deadline answered first), a task of its own goes on watching, so a
//! hung handler never keeps its slot.

use std::sync::{Arc, Mutex, PoisonError};

use broker_core::coordinator::{Call, CallError, CallOutput, Coordinator};
use broker_core::deadline::Watch;
use tokio::sync::Notify;
use tokio::task::{JoinError, JoinHandle};
use tokio::time::Instant;

/// What the coordinator answered.
pub type CallResult = Result<CallOutput, CallError>;

/// How a watched call ended for its waiter.
pub enum Ended {
    /// The pipeline returned (or its thread panicked).
    Returned(Result<CallResult, JoinError>),
    /// The handler was due and abandoned: answer as timed out. The slot is free.
    Abandoned,
    /// The caller's own deadline passed first (a store that does not answer); the call goes on
    /// and may still commit.
    CallDeadline,
}

/// One call on a blocking thread, with what its waiter needs.
pub struct WatchedCall<S: Send + 'static> {
    task: Option<JoinHandle<CallResult>>,
    watch: Arc<Watch>,
    /// Told when a handler starts already past its deadline.
    overdue: Arc<Notify>,
    slot: Arc<Mutex<Option<S>>>,
}

impl<S: Send + 'static> WatchedCall<S> {
    /// Start `call` on the blocking pool. `hold` stays with the call while its episode is busy;
    /// `slot` until the call returns or its handler is abandoned; `after` sees the result on
    /// the blocking thread.
    pub fn start(
        coordinator: Arc<Coordinator>,
        call: Call,
        until: std::time::Instant,
        hold: impl Send + 'static,
        slot: S,
        after: impl FnOnce(&CallResult) + Send + 'static,
    ) -> WatchedCall<S> {
        let overdue = Arc::new(Notify::new());
        let watch = Arc::new(coordinator.watch().on_overdue({
            let overdue = overdue.clone();
            move || overdue.notify_one()
        }));
        let slot = Arc::new(Mutex::new(Some(slot)));
        let task = tokio::task::spawn_blocking({
            let (watch, slot) = (watch.clone(), slot.clone());
            move || {
                let result = coordinator.invoke_watched(&call, Some(until), hold, &watch);
                free(&slot);
                after(&result);
                result
            }
        });
        WatchedCall {
            task: Some(task),
            watch,
            overdue,
            slot,
        }
    }

    /// Wait until the call returns, its handler is abandoned at its deadline, or `until`.
    pub async fn ended(&mut self, until: Instant) -> Ended {
        let Some(task) = self.task.as_mut() else {
            return Ended::Abandoned;
        };
        let ended = watch(task, &self.watch, &self.overdue, &self.slot, Some(until)).await;
        if !matches!(ended, Ended::CallDeadline) {
            self.task = None;
        }
        ended
    }
}

impl<S: Send + 'static> Drop for WatchedCall<S> {
    fn drop(&mut self) {
        // Nobody waits any more: watch on from a task of its own.
        let Some(mut task) = self.task.take() else {
            return;
        };
        let (watch_, overdue, slot) = (self.watch.clone(), self.overdue.clone(), self.slot.clone());
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime
                    .spawn(async move { watch(&mut task, &watch_, &overdue, &slot, None).await });
            }
            Err(_) => tracing::error!("a call lost its waiter outside the runtime"),
        }
    }
}

/// One timer per call: it fires at the next look at the handler, or at `until` if sooner. A
/// handler that starts already past its deadline is looked at when it starts.
async fn watch<S>(
    task: &mut JoinHandle<CallResult>,
    watch: &Watch,
    overdue: &Notify,
    slot: &Mutex<Option<S>>,
    until: Option<Instant>,
) -> Ended {
    let mut now = std::time::Instant::now();
    loop {
        let look = Instant::from_std(watch.next_look(now));
        let wake = until.map_or(look, |u| u.min(look));
        tokio::select! {
            biased;
            joined = &mut *task => return Ended::Returned(joined),
            () = first(tokio::time::sleep_until(wake), overdue.notified()) => {
                now = std::time::Instant::now();
                if watch.abandon_if_due(now) {
                    free(slot);
                    return Ended::Abandoned;
                }
                if until.is_some_and(|u| Instant::from_std(now) >= u) {
                    return Ended::CallDeadline;
                }
            }
        }
    }
}

/// Whichever of two waits ends first.
async fn first(a: impl std::future::Future<Output = ()>, b: impl std::future::Future<Output = ()>) {
    tokio::select! {
        () = a => {}
        () = b => {}
    }
}

/// Drop the call's global slot, once, from whichever side is done with it first.
fn free<S>(slot: &Mutex<Option<S>>) {
    drop(slot.lock().unwrap_or_else(PoisonError::into_inner).take());
}
