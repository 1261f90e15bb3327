//! Running an effect handler under its deadline.
//!
//! A handler is a synchronous call into a plugin, and a plugin can hang. The coordinator's
//! execute step therefore hands the handler to a runner thread and waits for it until the
//! deadline:
//!
//! - it returns in time: the pipeline goes on with its outcome, exactly as if it had run inline;
//! - it overruns: the waiter gives up and answers its caller at once. What the caller held
//!   for the episode (the *hold*: the episode's turn, the in-flight claim, whatever the daemon
//!   attached) passes to the runner thread, which keeps it until the handler really returns and
//!   then hands the late outcome to a `late` closure (the coordinator journals it there).
//!
//! One mutex decides between the two, so a handler that returns exactly at the deadline is
//! either in time or late, never both, and its outcome is never lost.

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Instant;

/// Starts a job on a thread of its own (or a pool's). The job runs one handler call to
/// its end, however long that takes; the daemon passes its runtime's blocking pool.
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
///
/// In time: `Ok` with its result and the hold back. Overrun: `Err(Overran)` at the deadline;
/// the runner keeps `hold` and calls `late(result, hold)` when `work` returns.
pub(crate) fn run_within<T, H>(
    spawn: &Spawner,
    deadline: Instant,
    hold: H,
    work: impl FnOnce() -> T + Send + 'static,
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
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn in_time_returns_the_result_and_the_hold() {
        let spawn = thread_spawner();
        let r = run_within(
            &spawn,
            Instant::now() + Duration::from_secs(30),
            "hold",
            || 7,
            |_, _| panic!("not late"),
        );
        assert_eq!(r.unwrap(), (7, "hold"));
    }

    #[test]
    fn an_overrun_hands_the_hold_and_the_late_result_to_the_runner() {
        let spawn = thread_spawner();
        let (release, gate) = mpsc::channel::<()>();
        let (late_tx, late_rx) = mpsc::channel();
        // The hold is dropped only after `late` ran: the episode stays busy until then.
        let (held_tx, held_rx) = mpsc::channel::<()>();
        struct Hold(mpsc::Sender<()>);
        impl Drop for Hold {
            fn drop(&mut self) {
                let _ = self.0.send(());
            }
        }
        let r = run_within(
            &spawn,
            Instant::now() + Duration::from_millis(50),
            Hold(held_tx),
            move || {
                gate.recv().unwrap();
                "late output"
            },
            move |out, hold| {
                late_tx.send(out).unwrap();
                drop(hold);
            },
        );
        assert!(r.is_err());
        assert!(held_rx.try_recv().is_err(), "the hold was released early");
        release.send(()).unwrap();
        assert_eq!(
            late_rx.recv_timeout(Duration::from_secs(30)).unwrap(),
            "late output"
        );
        held_rx.recv_timeout(Duration::from_secs(30)).unwrap();
    }
}
