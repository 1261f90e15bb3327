//! A call's effect running on the blocking pool, watched for its handler's deadline, and its
//! commit driven by a task of its own.
//!
//! The coordinator runs the call's handler on the same blocking thread as the rest of its
//! effect steps ([`Coordinator::run_effect`]); whoever waits for that thread enforces the
//! handler's deadline through the call's [`Watch`]: at the deadline the handler is abandoned,
//! the caller answered as timed out and the call's global slot freed, while the episode stays
//! busy until the handler really returns. The request's own task waits; if it goes away (the
//! client left, or the call deadline answered first), a task of its own goes on watching, so a
//! hung handler never keeps its slot.
//!
//! The commit is submitted by the pipeline and awaited where its answer is wanted
//! ([`Driven`]): the store's writer then wakes the runtime once for a whole group commit
//! instead of one blocked thread per call. A waiter that goes away first hands the commit to a
//! task of its own, so the commit ends (freeing the episode and the slot) whether or not anyone
//! still waits for it.

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::task::{Context, Poll};

use broker_core::coordinator::{CallError, CallOutput, Committing, Coordinator, EffectCall};
use broker_core::deadline::Watch;
use tokio::sync::Notify;
use tokio::task::{JoinError, JoinHandle};
use tokio::time::Instant;

/// What the coordinator answered.
pub type CallResult = Result<CallOutput, CallError>;

/// Calls whose waiter went away, still running or committing on a task of their own
/// ([`Driven`]'s and [`WatchedCall`]'s drop). A request answered is no call finished: a
/// graceful stop waits for these too ([`wait_for_detached`]), for the runtime's own shutdown
/// drops such a task unpolled, and its call's intent stayed indeterminate for good, its effect
/// run and its unit spent, after an orderly stop.
static DETACHED: Mutex<usize> = Mutex::new(0);
/// Told each time a detached call ends.
static DETACHED_ENDED: Condvar = Condvar::new();

/// How many calls run on without a waiter now (`worldd_calls_detached`).
pub fn detached() -> usize {
    *DETACHED.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Wait, on a thread that may block (the runtime's workers drive the calls meanwhile), until no
/// call runs on without a waiter or `until` comes; how many still do.
pub fn wait_for_detached(until: std::time::Instant) -> usize {
    let mut n = DETACHED.lock().unwrap_or_else(PoisonError::into_inner);
    while *n > 0 {
        let left = until.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            break;
        }
        n = DETACHED_ENDED
            .wait_timeout(n, left)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
    }
    *n
}

/// One call counted in [`DETACHED`] for as long as its task holds this.
struct Detached;

impl Detached {
    fn new() -> Detached {
        *DETACHED.lock().unwrap_or_else(PoisonError::into_inner) += 1;
        Detached
    }
}

impl Drop for Detached {
    fn drop(&mut self) {
        let mut n = DETACHED.lock().unwrap_or_else(PoisonError::into_inner);
        *n = n.saturating_sub(1);
        DETACHED_ENDED.notify_all();
    }
}

/// What a call's commit ending is shown to (the call's metrics and log line).
type After = Box<dyn FnOnce(&CallResult) + Send>;

/// A call's commit and what its end frees: awaited in place, its answer. Dropped before the
/// commit ends, it drives the commit to its end on a task of its own. Awaiting in place saves
/// spawning that task, and waking it, on every call.
#[must_use = "the commit is driven to its end only when awaited or dropped"]
pub struct Driven {
    parts: Option<(Committing, Box<dyn Send>, After)>,
}

/// How a watched call ended for its waiter.
pub enum Ended {
    /// The effect steps returned (or their thread panicked): the commit being driven, or
    /// why there is none.
    Returned(Result<Result<Driven, CallError>, JoinError>),
    /// The handler was due and abandoned: answer as timed out. The slot is free.
    Abandoned,
    /// The caller's own deadline passed first (a store that does not answer); the call goes on
    /// and may still commit.
    CallDeadline,
}

/// `committing`, to be driven to its end, then `slot` freed and the result shown to `after`.
pub fn drive<S: Send + 'static>(
    committing: Committing,
    slot: S,
    after: impl FnOnce(&CallResult) + Send + 'static,
) -> Driven {
    Driven {
        parts: Some((committing, Box::new(slot), Box::new(after))),
    }
}

/// The commit, or what was shown its end, panicked: the call is answered as canceled, as a
/// panic on its blocking thread is.
#[derive(Debug)]
pub struct Panicked;

impl Future for Driven {
    type Output = Result<CallResult, Panicked>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some((committing, _, _)) = self.parts.as_mut() else {
            return Poll::Ready(Err(Panicked));
        };
        let polled = catch_unwind(AssertUnwindSafe(|| Pin::new(committing).poll(cx)));
        let result = match polled {
            Ok(Poll::Pending) => return Poll::Pending,
            Ok(Poll::Ready(result)) => result,
            Err(_) => {
                self.parts = None;
                return Poll::Ready(Err(Panicked));
            }
        };
        let Some((_, slot, after)) = self.parts.take() else {
            return Poll::Ready(Err(Panicked));
        };
        match catch_unwind(AssertUnwindSafe(|| ended(slot, after, &result))) {
            Ok(()) => Poll::Ready(Ok(result)),
            Err(_) => Poll::Ready(Err(Panicked)),
        }
    }
}

impl Drop for Driven {
    fn drop(&mut self) {
        let Some((committing, slot, after)) = self.parts.take() else {
            return;
        };
        // Nobody waits any more (the call deadline answered first, the client left, or the
        // handler was abandoned): the commit still ends, on a task of its own.
        match tokio::runtime::Handle::try_current() {
            // The parts go to the task as they are, not as a `Driven`: a runtime shutting down
            // drops the task unpolled, and a `Driven` dropped there would hand itself on again.
            Ok(runtime) => {
                let counted = Detached::new();
                runtime.spawn(async move {
                    let _counted = counted;
                    ended(slot, after, &committing.await)
                });
            }
            // Not on a runtime's thread, so this thread may block.
            Err(_) => ended(slot, after, &committing.wait()),
        }
    }
}

/// A commit's end, however it was awaited: its slot freed, then its result shown.
fn ended(slot: Box<dyn Send>, after: After, result: &CallResult) {
    drop(slot);
    after(result);
}

/// One call's effect steps on a blocking thread, with what its waiter needs.
pub struct WatchedCall<S: Send + 'static> {
    task: Option<JoinHandle<Result<Driven, CallError>>>,
    shared: Arc<Shared<S>>,
}

/// What the call's thread and its waiters share.
struct Shared<S> {
    watch: Watch,
    /// Told when a handler starts already past its deadline (the watch's `on_overdue`).
    overdue: Arc<Notify>,
    /// The global slot, until the commit ends or the handler is abandoned.
    slot: Mutex<Option<S>>,
}

impl<S: Send + 'static> WatchedCall<S> {
    /// Start `call`'s effect steps on the blocking pool. `slot` stays with the call until its
    /// commit ends or its handler is abandoned; `after` sees the result.
    pub fn start(
        coordinator: Arc<Coordinator>,
        call: EffectCall,
        until: std::time::Instant,
        slot: S,
        after: impl FnOnce(&CallResult) + Send + 'static,
    ) -> WatchedCall<S> {
        let overdue = Arc::new(Notify::new());
        let watch = coordinator.watch().on_overdue({
            let overdue = overdue.clone();
            move || overdue.notify_one()
        });
        let shared = Arc::new(Shared {
            watch,
            overdue,
            slot: Mutex::new(Some(slot)),
        });
        let task = tokio::task::spawn_blocking({
            let shared = shared.clone();
            move || match coordinator.run_effect(call, Some(until), &shared.watch) {
                Ok(committing) => Ok(drive(committing, shared.take(), after)),
                Err(err) => {
                    drop(shared.take());
                    let failed: CallResult = Err(err);
                    after(&failed);
                    failed.map(|_| unreachable!("`failed` is an error"))
                }
            }
        });
        WatchedCall {
            task: Some(task),
            shared,
        }
    }

    /// Wait until the effect steps return, the handler is abandoned at its deadline, or
    /// `until`.
    pub async fn ended(&mut self, until: Instant) -> Ended {
        let Some(task) = self.task.as_mut() else {
            return Ended::Abandoned;
        };
        let ended = self.shared.watch_over(task, Some(until)).await;
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
        let shared = self.shared.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let counted = Detached::new();
                runtime.spawn(async move {
                    let _counted = counted;
                    // The commit is driven here, counted all along: handed to a task of its
                    // own, it would be counted only once this one had ended, and a stop
                    // looking in between would find no call running and drop it.
                    if let Ended::Returned(Ok(Ok(driven))) =
                        shared.watch_over(&mut task, None).await
                    {
                        let _ = driven.await;
                    }
                });
            }
            Err(_) => tracing::error!("a call lost its waiter outside the runtime"),
        }
    }
}

impl<S> Shared<S> {
    /// One timer per call: it fires at the next look at the handler, or at `until` if sooner.
    /// A handler that starts already past its deadline is looked at when it starts.
    async fn watch_over(
        &self,
        task: &mut JoinHandle<Result<Driven, CallError>>,
        until: Option<Instant>,
    ) -> Ended {
        let mut now = std::time::Instant::now();
        loop {
            let look = Instant::from_std(self.watch.next_look(now));
            let wake = until.map_or(look, |u| u.min(look));
            tokio::select! {
                biased;
                joined = &mut *task => return Ended::Returned(joined),
                () = tokio::time::sleep_until(wake) => {}
                () = self.overdue.notified() => {}
            }
            now = std::time::Instant::now();
            if self.watch.abandon_if_due(now) {
                drop(self.take());
                return Ended::Abandoned;
            }
            if until.is_some_and(|u| Instant::from_std(now) >= u) {
                return Ended::CallDeadline;
            }
        }
    }

    /// The call's global slot, once, for whichever side is done with it first.
    fn take(&self) -> Option<S> {
        self.slot
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}
