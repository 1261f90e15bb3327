//! The writer's answer to one queued write: waited for by a thread ([`Submitted::wait`]) or
//! awaited by a task (`Submitted` is a `Future`).
//!
//! Why not a channel: a task that awaits its commit lets the writer wake one runtime thread
//! for a whole batch of answers, where a blocked thread per caller costs one wake-up per
//! caller; and a thread that waits must still be able to. The writer's side is dropped with
//! its job, so a writer that goes away answers [`StoreError::WriterGone`].

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

use super::StoreError;

/// The writer's half: answers once, or says the writer is gone when dropped unanswered.
pub(super) struct Answer<T> {
    shared: Arc<Shared<T>>,
}

struct Shared<T> {
    state: Mutex<State<T>>,
    ready: Condvar,
}

struct State<T> {
    value: Option<T>,
    /// The writer answered or went away: nothing more will come.
    settled: bool,
    /// The writer went away without answering.
    gone: bool,
    /// A task awaiting the answer.
    waker: Option<Waker>,
    /// A thread blocked in `wait` (the condition variable is notified only then).
    blocked: bool,
}

/// A new answer slot: the writer's half and the caller's.
pub(super) fn slot<T>() -> (Answer<T>, Pending<T>) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            value: None,
            settled: false,
            gone: false,
            waker: None,
            blocked: false,
        }),
        ready: Condvar::new(),
    });
    (
        Answer {
            shared: shared.clone(),
        },
        Pending { shared },
    )
}

impl<T> Answer<T> {
    pub(super) fn send(self, value: T) {
        self.shared.settle(Some(value));
    }
}

impl<T> Drop for Answer<T> {
    fn drop(&mut self) {
        self.shared.settle(None);
    }
}

impl<T> Shared<T> {
    /// Store the answer (or mark the writer gone) unless already settled, then wake whoever
    /// waits, outside the lock.
    fn settle(&self, value: Option<T>) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.settled {
            return;
        }
        state.settled = true;
        match value {
            Some(v) => state.value = Some(v),
            None => state.gone = true,
        }
        let waker = state.waker.take();
        let blocked = state.blocked;
        drop(state);
        if blocked {
            self.ready.notify_one();
        }
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// The caller's half of one answer.
pub(super) struct Pending<T> {
    shared: Arc<Shared<T>>,
}

impl<T> Pending<T> {
    /// Block this thread until the answer; `None` when the writer is gone.
    fn wait(self) -> Option<T> {
        let mut state = self
            .shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        state.blocked = true;
        loop {
            if let Some(v) = state.value.take() {
                return Some(v);
            }
            if state.gone {
                return None;
            }
            state = self
                .shared
                .ready
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    fn poll_answer(&self, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let mut state = self
            .shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(v) = state.value.take() {
            return Poll::Ready(Some(v));
        }
        if state.gone {
            return Poll::Ready(None);
        }
        match &state.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => state.waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

/// A write queued for the next group commit ([`super::Store::submit`]): its result once that
/// commit is durable (or failed).
pub struct Submitted<R, E> {
    inner: Inner<R, E>,
}

enum Inner<R, E> {
    /// Not queued (the writer is gone): the error, until taken.
    Failed(Option<E>),
    Queued(Pending<Result<R, E>>),
}

impl<R, E: From<StoreError>> Submitted<R, E> {
    pub(super) fn queued(pending: Pending<Result<R, E>>) -> Self {
        Submitted {
            inner: Inner::Queued(pending),
        }
    }

    pub(super) fn failed(err: E) -> Self {
        Submitted {
            inner: Inner::Failed(Some(err)),
        }
    }

    /// Block this thread until the commit is durable (or failed).
    pub fn wait(self) -> Result<R, E> {
        match self.inner {
            Inner::Failed(e) => Err(e.unwrap_or_else(|| StoreError::WriterGone.into())),
            Inner::Queued(pending) => pending
                .wait()
                .unwrap_or_else(|| Err(StoreError::WriterGone.into())),
        }
    }
}

// Nothing in a `Submitted` is pinned: the answer lives behind an `Arc` and the error is moved
// out by value.
impl<R, E> Unpin for Submitted<R, E> {}

impl<R, E: From<StoreError>> Future for Submitted<R, E> {
    type Output = Result<R, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.get_mut().inner {
            Inner::Failed(e) => Poll::Ready(Err(e
                .take()
                .unwrap_or_else(|| StoreError::WriterGone.into()))),
            Inner::Queued(pending) => pending
                .poll_answer(cx)
                .map(|answer| answer.unwrap_or_else(|| Err(StoreError::WriterGone.into()))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn poll(
        s: &mut Submitted<u32, StoreError>,
        count: &Arc<Count>,
    ) -> Poll<Result<u32, StoreError>> {
        let waker = Waker::from(count.clone());
        Pin::new(s).poll(&mut Context::from_waker(&waker))
    }

    #[test]
    fn a_task_is_woken_once_by_the_answer_and_then_has_it() {
        let (answer, pending) = slot::<Result<u32, StoreError>>();
        let mut submitted = Submitted::queued(pending);
        let count = Arc::new(Count(AtomicUsize::new(0)));
        assert!(poll(&mut submitted, &count).is_pending());
        assert!(poll(&mut submitted, &count).is_pending());
        answer.send(Ok(7));
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        assert_eq!(poll(&mut submitted, &count), Poll::Ready(Ok(7)));
    }

    #[test]
    fn a_writer_that_drops_its_answer_is_gone_for_tasks_and_threads() {
        let (answer, pending) = slot::<Result<u32, StoreError>>();
        let mut submitted = Submitted::queued(pending);
        let count = Arc::new(Count(AtomicUsize::new(0)));
        assert!(poll(&mut submitted, &count).is_pending());
        drop(answer);
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        assert_eq!(
            poll(&mut submitted, &count),
            Poll::Ready(Err(StoreError::WriterGone))
        );

        let (answer, pending) = slot::<Result<u32, StoreError>>();
        let waiting = std::thread::spawn(move || Submitted::queued(pending).wait());
        std::thread::sleep(std::time::Duration::from_millis(20));
        drop(answer);
        assert_eq!(waiting.join().unwrap(), Err(StoreError::WriterGone));
    }

    #[test]
    fn a_blocked_thread_gets_the_answer() {
        let (answer, pending) = slot::<Result<u32, StoreError>>();
        let waiting = std::thread::spawn(move || Submitted::queued(pending).wait());
        std::thread::sleep(std::time::Duration::from_millis(20));
        answer.send(Ok(3));
        assert_eq!(waiting.join().unwrap(), Ok(3));
    }
}
