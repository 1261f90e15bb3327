//! The answer of a call whose entry is submitted: a future that resolves once the commit is
//! durable, awaited on a runtime or waited for on a thread.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use super::{CallError, CallOutput};

/// A call whose entry is submitted for commit: its answer once that commit is durable (or
/// failed). Await it on an async runtime, or [`Committing::wait`] on a thread. Its episode
/// stays busy until it resolves, so whoever starts one drives it to its end.
#[must_use = "the call's episode stays busy until its commit is driven to its end"]
pub struct Committing(
    pub(super) Pin<Box<dyn Future<Output = Result<CallOutput, CallError>> + Send>>,
);

impl Committing {
    /// Block this thread until the commit is durable (or failed).
    pub fn wait(self) -> Result<CallOutput, CallError> {
        block_on(self.0)
    }
}

impl Future for Committing {
    type Output = Result<CallOutput, CallError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.0.as_mut().poll(cx)
    }
}

/// Drive `future` to its end on this thread, parking between polls.
fn block_on<F: Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let Poll::Ready(v) = future.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}
