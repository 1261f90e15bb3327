//! Whether a connection that hyper's header-read timer closed was waiting for a request head
//! its client had begun, or only idle between requests.
//!
//! `[server] header_timeout_ms` is also the keep-alive idle timeout (hyper's header-read timer
//! covers both, and its error does not tell them apart). An HTTP client pool or an MCP SDK
//! keeps its connection open between calls, so counting every such close as a
//! `header_timeout` trip filled the metric an operator watches for slow heads with ordinary
//! idleness. A connection that has written an answer and read nothing since is idle. (Bytes
//! of a further head that arrived with the previous request, pipelined, were read before its
//! answer and are not seen: such a connection is still closed at the timeout, not counted.)

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Nothing written yet: a first head not complete.
const FRESH: u8 = 0;
/// An answer written, and nothing read since.
const IDLE: u8 = 1;
/// Bytes read after the last answer: a further head begun.
const BEGUN: u8 = 2;

/// A connection's IO, watched for what came last: an answer, or bytes of a request.
pub struct IdleWatch<S> {
    inner: S,
    state: Arc<AtomicU8>,
}

/// What the watched connection did last, read after it ended.
#[derive(Clone)]
pub struct Watched(Arc<AtomicU8>);

impl Watched {
    /// It had answered and read nothing since: it was idle between requests.
    pub fn idle(&self) -> bool {
        self.0.load(Ordering::Relaxed) == IDLE
    }
}

impl<S> IdleWatch<S> {
    pub fn new(inner: S) -> (IdleWatch<S>, Watched) {
        let state = Arc::new(AtomicU8::new(FRESH));
        (
            IdleWatch {
                inner,
                state: state.clone(),
            },
            Watched(state),
        )
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for IdleWatch<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            let _ = this
                .state
                .compare_exchange(IDLE, BEGUN, Ordering::Relaxed, Ordering::Relaxed);
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> IdleWatch<S> {
    fn wrote(&self, polled: &Poll<io::Result<usize>>) {
        if matches!(polled, Poll::Ready(Ok(n)) if *n > 0) {
            self.state.store(IDLE, Ordering::Relaxed);
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for IdleWatch<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.wrote(&polled);
        polled
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.wrote(&polled);
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn a_connection_is_idle_once_it_answered_and_read_nothing_since() {
        let (near, mut far) = tokio::io::duplex(64);
        let (mut io, watched) = IdleWatch::new(near);
        assert!(!watched.idle(), "nothing answered yet");
        far.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        let mut buf = [0u8; 64];
        let _ = io.read(&mut buf).await.unwrap();
        assert!(!watched.idle());
        io.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await.unwrap();
        assert!(watched.idle(), "answered, nothing read since");
        far.write_all(b"GET").await.unwrap();
        let _ = io.read(&mut buf).await.unwrap();
        assert!(!watched.idle(), "a further head begun");
        io.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await.unwrap();
        assert!(watched.idle());
    }
}
