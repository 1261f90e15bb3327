//! Running an effect handler under its deadline.
//!
//! A handler is a synchronous call into a plugin, and a plugin can hang. Whoever waits for the
//! call must be answered at the deadline all the same, so the handler runs in one of two ways
//! (`Runner`):
//!
//! - **inline**, on the thread that runs the call's pipeline, when the caller waits for that
//!   thread through a [`Watch`] (the daemon: an async task waits for a blocking thread). The
//!   watch tells the waiter when the running handler is due; the waiter gives up on it there
//!   ([`Watch::abandon_if_due`]) and answers its caller. No thread hop per handler call.
//! - **spawned**, on a runner thread from a [`Spawner`], when the caller waits for the pipeline
//!   thread itself ([`crate::coordinator::Coordinator::invoke_until`]): the pipeline thread
//!   waits for the runner until the deadline.
//!
//! Either way there are two endings:
//!
//! - it returns in time: the pipeline goes on with its outcome, exactly as if it had run inline;
//! - it overruns: the waiter gives up and answers its caller at once. What the caller held
//!   for the episode (the *hold*: the episode's turn, the in-flight claim, whatever the daemon
//!   attached) stays with the thread that runs the handler, which keeps it until the handler
//!   really returns and then hands the late outcome to a `late` closure (the coordinator
//!   journals it there).
//!
//! One mutex decides between the two, so a handler that returns exactly at the deadline is
//! either in time or late, never both, and its outcome is never lost.

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Starts a job on a thread of its own (or a pool's). The job runs one handler call to
/// its end, however long that takes. Used for the callers of
/// [`crate::coordinator::Coordinator::invoke_until`] only.
pub type Spawner = Arc<dyn Fn(Box<dyn FnOnce() + Send>) + Send + Sync>;

/// A spawner that starts one OS thread per job.
pub fn thread_spawner() -> Spawner {
    Arc::new(|job| {
        if let Err(e) = std::thread::Builder::new()
            .name("worldd-handler".into())
            .spawn(job)
        {
            // The job is gone: its waiter sees the deadline pass and the intent stays
            // indeterminate, which is the truth about an effect nobody can confirm.
            tracing::error!("could not start a handler thread: {e}");
        }
    })
}

/// The handler did not return before the deadline; it goes on running on its own.
#[derive(Debug)]
pub(crate) struct Overran;

/// Where a handler call runs: see the module docs.
#[derive(Clone, Copy)]
pub(crate) enum Runner<'a> {
    /// On the pipeline's thread; the caller waits through this watch.
    Inline(&'a Watch),
    /// On a runner thread from this spawner; the pipeline's thread waits for it.
    Spawned(&'a Spawner),
}

/// Told once, when the waiter gives up on a handler (the coordinator counts the overrun).
pub(crate) type OnAbandon = Box<dyn FnOnce() + Send>;

/// Run `work` under `deadline`.
///
/// In time: `Ok` with its result and the hold back. Overrun: `Err(Overran)` (at the deadline
/// when spawned; when the handler returns when inline, the caller having been answered by its
/// waiter at the deadline). The hold stays with the thread that runs `work`, which calls
/// `late(result, hold)` when `work` returns; `on_abandon` runs at the moment the waiter gives up.
pub(crate) fn run_within<T, H>(
    runner: Runner<'_>,
    deadline: Instant,
    hold: H,
    work: impl FnOnce() -> T + Send + 'static,
    on_abandon: OnAbandon,
    late: impl FnOnce(T, H) + Send + 'static,
) -> Result<(T, H), Overran>
where
    T: Send + 'static,
    H: Send + 'static,
{
    match runner {
        Runner::Inline(watch) => {
            watch.arm(deadline, on_abandon);
            let out = work();
            if watch.disarm() {
                Ok((out, hold))
            } else {
                late(out, hold);
                Err(Overran)
            }
        }
        Runner::Spawned(spawn) => spawned(spawn, deadline, hold, work, on_abandon, late),
    }
}

/// The waiter's side of a call whose handlers run inline on the pipeline's thread.
///
/// The pipeline arms the watch with the deadline of each handler call it makes and disarms it
/// when the handler returns; neither wakes the waiter, except a handler armed with a deadline
/// already past (its caller's own deadline passed before it started), which calls the
/// [`Watch::on_overdue`] callback so that the waiter looks now. Otherwise the waiter looks
/// again at [`Watch::next_look`], which is never later than the deadline of a handler running
/// then or started after: a handler's deadline is at most `handler_deadline` after it starts.
/// When it looks and [`Watch::abandon_if_due`] says `true`, the caller is answered as timed out
/// now and the pipeline, when its handler returns, journals the late outcome instead of going
/// on.
pub struct Watch {
    state: Mutex<Armed>,
    handler_deadline: Duration,
    overdue: Option<Box<dyn Fn() + Send + Sync>>,
}

enum Armed {
    /// No handler is running.
    Idle,
    /// A handler runs and is due at `deadline`.
    Running {
        deadline: Instant,
        on_abandon: OnAbandon,
    },
    /// The waiter gave up on the running handler.
    Abandoned,
}

impl Watch {
    /// A watch for a coordinator whose handlers get `handler_deadline`; callers get theirs from
    /// [`crate::coordinator::Coordinator::watch`], which cannot mismatch.
    pub(crate) fn new(handler_deadline: Duration) -> Watch {
        Watch {
            state: Mutex::new(Armed::Idle),
            handler_deadline,
            overdue: None,
        }
    }

    /// Call `wake` when a handler is armed already past its deadline (e.g. `Notify::notify_one`).
    pub fn on_overdue(mut self, wake: impl Fn() + Send + Sync + 'static) -> Watch {
        self.overdue = Some(Box::new(wake));
        self
    }

    /// When the waiter must look again, seen at `now`: the running handler's deadline, or, when
    /// none runs, the earliest a handler started from now on can be due.
    pub fn next_look(&self, now: Instant) -> Instant {
        self.handler_deadline()
            .unwrap_or(now + self.handler_deadline)
    }

    /// When the handler running now is due, if one runs and the waiter has not given up on it.
    pub fn handler_deadline(&self) -> Option<Instant> {
        match &*self.lock() {
            Armed::Running { deadline, .. } => Some(*deadline),
            Armed::Idle | Armed::Abandoned => None,
        }
    }

    /// Give up on the running handler if it is due at `now`: `true` means the caller is to be
    /// answered as timed out, and the pipeline will journal the handler's outcome when it
    /// returns. `false`: no handler runs, or it is not due yet.
    pub fn abandon_if_due(&self, now: Instant) -> bool {
        let mut state = self.lock();
        match &*state {
            Armed::Running { deadline, .. } if *deadline <= now => {}
            _ => return false,
        }
        if let Armed::Running { on_abandon, .. } = std::mem::replace(&mut *state, Armed::Abandoned)
        {
            on_abandon();
        }
        true
    }

    fn arm(&self, deadline: Instant, on_abandon: OnAbandon) {
        *self.lock() = Armed::Running {
            deadline,
            on_abandon,
        };
        if deadline <= Instant::now() {
            if let Some(wake) = &self.overdue {
                wake();
            }
        }
    }

    /// The handler returned: `true` if it was still awaited.
    fn disarm(&self) -> bool {
        !matches!(
            std::mem::replace(&mut *self.lock(), Armed::Idle),
            Armed::Abandoned
        )
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Armed> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The hand-over between a spawned runner and its waiter.
enum Slot<T, H> {
    /// The waiter is still waiting.
    Waiting,
    /// The handler returned in time.
    Done(T),
    /// The waiter gave up and left the hold for the runner.
    Abandoned(H),
    /// Settled; nothing left to hand over.
    Settled,
}

/// Run `work` on a thread from `spawn` and wait for it until `deadline`.
fn spawned<T, H>(
    spawn: &Spawner,
    deadline: Instant,
    hold: H,
    work: impl FnOnce() -> T + Send + 'static,
    on_abandon: OnAbandon,
    late: impl FnOnce(T, H) + Send + 'static,
) -> Result<(T, H), Overran>
where
    T: Send + 'static,
    H: Send + 'static,
{
    let shared = Arc::new((Mutex::new(Slot::<T, H>::Waiting), Condvar::new()));
    let runner = shared.clone();
    spawn(Box::new(move || {
        let out = work();
        let (lock, done) = &*runner;
        let mut slot = lock.lock().unwrap_or_else(PoisonError::into_inner);
        match std::mem::replace(&mut *slot, Slot::Settled) {
            Slot::Waiting => {
                // What `late` holds (the coordinator's store, to journal a late outcome) is let
                // go before the waiter hears: its caller may close the store as soon as it is
                // answered, and a handle still held here kept the store open a moment longer,
                // so reopening its directory in the same process failed, now and then.
                drop(late);
                *slot = Slot::Done(out);
                done.notify_one();
            }
            Slot::Abandoned(hold) => {
                drop(slot);
                late(out, hold);
            }
            Slot::Done(_) | Slot::Settled => {}
        }
    }));

    let (lock, done) = &*shared;
    let mut slot = lock.lock().unwrap_or_else(PoisonError::into_inner);
    loop {
        if matches!(*slot, Slot::Done(_)) {
            if let Slot::Done(out) = std::mem::replace(&mut *slot, Slot::Settled) {
                return Ok((out, hold));
            }
        }
        let now = Instant::now();
        if now >= deadline {
            *slot = Slot::Abandoned(hold);
            drop(slot);
            on_abandon();
            return Err(Overran);
        }
        slot = done
            .wait_timeout(slot, deadline - now)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;
    use std::time::Duration;

    /// Sends once when dropped: tells when a hold is released.
    struct Hold(mpsc::Sender<()>);
    impl Drop for Hold {
        fn drop(&mut self) {
            let _ = self.0.send(());
        }
    }

    fn counted(count: &Arc<AtomicUsize>) -> OnAbandon {
        let count = count.clone();
        Box::new(move || {
            count.fetch_add(1, Ordering::SeqCst);
        })
    }

    /// A spawned handler in time: what its `late` holds is released before the waiter is
    /// answered, not when the handler's thread gets round to ending (under load, later).
    #[test]
    fn what_late_holds_is_released_before_an_in_time_answer() {
        let spawn = thread_spawner();
        for _ in 0..50 {
            let (released, told) = mpsc::channel();
            let held = Hold(released);
            let r = run_within(
                Runner::Spawned(&spawn),
                Instant::now() + Duration::from_secs(30),
                (),
                || 7,
                Box::new(|| panic!("not abandoned")),
                move |_, ()| drop(held),
            );
            assert_eq!(r.map(|(out, ())| out).ok(), Some(7));
            assert!(
                told.try_recv().is_ok(),
                "late's captures outlived the answer"
            );
        }
    }

    #[test]
    fn in_time_returns_the_result_and_the_hold() {
        let spawn = thread_spawner();
        let watch = Watch::new(Duration::from_secs(30));
        for runner in [Runner::Spawned(&spawn), Runner::Inline(&watch)] {
            let r = run_within(
                runner,
                Instant::now() + Duration::from_secs(30),
                "hold",
                || 7,
                Box::new(|| panic!("not abandoned")),
                |_, _| panic!("not late"),
            );
            assert_eq!(r.unwrap(), (7, "hold"));
        }
        assert_eq!(watch.handler_deadline(), None, "disarmed after the handler");
    }

    #[test]
    fn an_overrun_hands_the_hold_and_the_late_result_to_the_runner() {
        let spawn = thread_spawner();
        let (release, gate) = mpsc::channel::<()>();
        let (late_tx, late_rx) = mpsc::channel();
        // The hold is dropped only after `late` ran: the episode stays busy until then.
        let (held_tx, held_rx) = mpsc::channel::<()>();
        let abandoned = Arc::new(AtomicUsize::new(0));
        let r = run_within(
            Runner::Spawned(&spawn),
            Instant::now() + Duration::from_millis(50),
            Hold(held_tx),
            move || {
                gate.recv().unwrap();
                "late output"
            },
            counted(&abandoned),
            move |out, hold| {
                late_tx.send(out).unwrap();
                drop(hold);
            },
        );
        assert!(r.is_err());
        assert_eq!(abandoned.load(Ordering::SeqCst), 1);
        assert!(held_rx.try_recv().is_err(), "the hold was released early");
        release.send(()).unwrap();
        assert_eq!(
            late_rx.recv_timeout(Duration::from_secs(30)).unwrap(),
            "late output"
        );
        held_rx.recv_timeout(Duration::from_secs(30)).unwrap();
    }

    /// Inline, the waiter watches from another thread: it looks no later than the deadline,
    /// cannot give up before it, gives up once after it, and the pipeline thread then records
    /// the late result and keeps the hold until it did.
    #[test]
    fn an_inline_overrun_is_abandoned_by_the_waiter_and_recorded_by_the_pipeline() {
        let hd = Duration::from_millis(50);
        let watch = Arc::new(Watch::new(hd));
        let looked = Instant::now();
        assert_eq!(watch.next_look(looked), looked + hd, "no handler runs yet");
        let (release, gate) = mpsc::channel::<()>();
        let (late_tx, late_rx) = mpsc::channel();
        let (held_tx, held_rx) = mpsc::channel::<()>();
        let abandoned = Arc::new(AtomicUsize::new(0));
        let deadline = Instant::now() + hd;
        let (entered_tx, entered) = mpsc::channel::<()>();
        let pipeline = {
            let (watch, on_abandon) = (watch.clone(), counted(&abandoned));
            std::thread::spawn(move || {
                run_within(
                    Runner::Inline(&watch),
                    deadline,
                    Hold(held_tx),
                    move || {
                        entered_tx.send(()).unwrap();
                        gate.recv().unwrap();
                        "late output"
                    },
                    on_abandon,
                    move |out, hold| {
                        late_tx.send(out).unwrap();
                        drop(hold);
                    },
                )
                .is_err()
            })
        };
        entered.recv_timeout(Duration::from_secs(30)).unwrap();
        assert_eq!(watch.handler_deadline(), Some(deadline));
        assert!(
            deadline >= looked + hd,
            "the first look comes before the handler is due"
        );
        assert_eq!(watch.next_look(Instant::now()), deadline);
        assert!(!watch.abandon_if_due(deadline - Duration::from_millis(1)));
        assert_eq!(abandoned.load(Ordering::SeqCst), 0);
        assert!(watch.abandon_if_due(deadline));
        assert!(!watch.abandon_if_due(deadline), "given up once");
        assert_eq!(abandoned.load(Ordering::SeqCst), 1);
        assert_eq!(watch.handler_deadline(), None);
        assert!(held_rx.try_recv().is_err(), "the hold was released early");
        release.send(()).unwrap();
        assert!(pipeline.join().unwrap(), "the pipeline saw the overrun");
        assert_eq!(late_rx.try_recv().unwrap(), "late output");
        held_rx.try_recv().unwrap();
    }

    /// Only a handler armed already past its deadline wakes the waiter.
    #[test]
    fn only_an_overdue_handler_wakes_the_waiter() {
        let woken = Arc::new(AtomicUsize::new(0));
        let watch = Watch::new(Duration::from_secs(30)).on_overdue({
            let woken = woken.clone();
            move || {
                woken.fetch_add(1, Ordering::SeqCst);
            }
        });
        let later = Instant::now() + Duration::from_secs(30);
        watch.arm(later, Box::new(|| {}));
        assert!(watch.disarm());
        assert_eq!(woken.load(Ordering::SeqCst), 0);
        let past = Instant::now();
        watch.arm(past, Box::new(|| {}));
        assert_eq!(woken.load(Ordering::SeqCst), 1);
        assert!(watch.abandon_if_due(Instant::now()));
        assert!(!watch.disarm(), "abandoned");
    }
}
