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

//!
//! It also counts what a connection reads while one of its request bodies is being read
//! ([`watch_body`]). Chunked framing can cost the daemon CPU without delivering any body: a
//! chunk-size line of endless `0` digits (or blanks) is read a byte at a time, and no data
//! frame ever reaches the body's reader, so neither its size limit nor its small-pieces limit
//! sees it. Once the connection has read more than the body's allowance since the body began,
//! its reads end (an end of stream, which the HTTP layer takes as a broken body), and the body's
//! reader refuses it ([`BodyWatch::overran`]).
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Nothing written yet: a first head not complete.
const FRESH: u8 = 0;
/// An answer written, and nothing read since.
const IDLE: u8 = 1;
/// Bytes read after the last answer: a further head begun.
const BEGUN: u8 = 2;

/// A connection's IO, watched for what came last: an answer, or bytes of a request; and for
/// how much it read while a request body was being read.
pub struct IdleWatch<S> {
    inner: S,
    shared: Arc<Shared>,
}

/// What a connection's IO and its requests share.
struct Shared {
    state: AtomicU8,
    /// Whether a body is being read now: a read looks at [`Shared::body`] only then.
    reading_body: AtomicBool,
    body: Mutex<BodyReads>,
}

/// What the connection read since the body being read began.
#[derive(Default)]
struct BodyReads {
    read: u64,
    allowance: u64,
}

/// What the watched connection did last, read after it ended; and, for its requests, the
/// handle through which a body's reader watches the connection's reads ([`reading_bodies`]).
#[derive(Clone)]
pub struct Watched(Arc<Shared>);

impl Watched {
    /// It had answered and read nothing since: it was idle between requests.
    pub fn idle(&self) -> bool {
        self.0.state.load(Ordering::Relaxed) == IDLE
    }
}

impl<S> IdleWatch<S> {
    pub fn new(inner: S) -> (IdleWatch<S>, Watched) {
        let shared = Arc::new(Shared {
            state: AtomicU8::new(FRESH),
            reading_body: AtomicBool::new(false),
            body: Mutex::default(),
        });
        (
            IdleWatch {
                inner,
                shared: shared.clone(),
            },
            Watched(shared),
        )
    }
}

tokio::task_local! {
    /// The connection whose request is being answered.
    static CONNECTION: Watched;
}

/// Answer a request of the `watched` connection: a body read within `answer`
/// ([`watch_body`]) is watched on that connection's reads.
pub async fn reading_bodies<F: Future>(watched: Watched, answer: F) -> F::Output {
    CONNECTION.scope(watched, answer).await
}

/// Watch the reads of the connection whose request is being answered (none outside
/// [`reading_bodies`]) while its body is read, allowing it `allowance` bytes from now: past
/// them, its reads end. Dropped when the body's reading ends.
pub fn watch_body(allowance: u64) -> Option<BodyWatch> {
    CONNECTION
        .try_with(|watched| {
            let shared = watched.0.clone();
            if let Ok(mut body) = shared.body.lock() {
                *body = BodyReads { read: 0, allowance };
            }
            shared.reading_body.store(true, Ordering::Relaxed);
            BodyWatch(shared)
        })
        .ok()
}

/// A body being read, whose connection's reads are counted ([`watch_body`]).
pub struct BodyWatch(Arc<Shared>);

impl BodyWatch {
    /// The bytes the connection read since the body began, when they passed its allowance
    /// (its reads have ended since).
    pub fn overran(&self) -> Option<u64> {
        let body = self.0.body.lock().ok()?;
        (body.read > body.allowance).then_some(body.read)
    }
}

impl Drop for BodyWatch {
    fn drop(&mut self) {
        self.0.reading_body.store(false, Ordering::Relaxed);
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for IdleWatch<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let body = this.shared.reading_body.load(Ordering::Relaxed);
        if body && this.shared.overran() {
            // The read that passed the allowance was delivered; no more is read. An end of
            // stream: the HTTP layer stops decoding the body and the reader is told.
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        let read = buf.filled().len().saturating_sub(before);
        if matches!(polled, Poll::Ready(Ok(()))) && read > 0 {
            let _ = this.shared.state.compare_exchange(
                IDLE,
                BEGUN,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
            if body {
                if let Ok(mut reads) = this.shared.body.lock() {
                    reads.read = reads.read.saturating_add(read as u64);
                }
            }
        }
        polled
    }
}

impl Shared {
    fn overran(&self) -> bool {
        self.body
            .lock()
            .is_ok_and(|body| body.read > body.allowance)
    }
}

impl<S: AsyncWrite + Unpin> IdleWatch<S> {
    fn wrote(&self, polled: &Poll<io::Result<usize>>) {
        if matches!(polled, Poll::Ready(Ok(n)) if *n > 0) {
            self.shared.state.store(IDLE, Ordering::Relaxed);
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

    #[tokio::test]
    async fn a_body_s_reads_end_once_they_pass_its_allowance() {
        let (near, mut far) = tokio::io::duplex(64);
        let (mut io, watched) = IdleWatch::new(near);
        let mut buf = [0u8; 64];
        // Outside a request's answer there is no connection to watch.
        assert!(watch_body(10).is_none());
        reading_bodies(watched.clone(), async {
            // Reads before the body began are not counted.
            far.write_all(b"POST / HTTP/1.1\r\n\r\n").await.unwrap();
            let _ = io.read(&mut buf).await.unwrap();
            let watch = watch_body(10).expect("in a request's answer");
            far.write_all(b"00000000").await.unwrap();
            assert_eq!(io.read(&mut buf).await.unwrap(), 8);
            assert_eq!(watch.overran(), None, "8 of 10");
            // The read that passes the allowance is delivered; none after it.
            far.write_all(b"00000000").await.unwrap();
            assert_eq!(io.read(&mut buf).await.unwrap(), 8);
            assert_eq!(watch.overran(), Some(16));
            far.write_all(b"0000").await.unwrap();
            assert_eq!(io.read(&mut buf).await.unwrap(), 0, "an end of stream");
            drop(watch);
            // The body's reading over, the connection reads again, uncounted; the next body
            // starts from nothing.
            assert_eq!(io.read(&mut buf).await.unwrap(), 4);
            let watch = watch_body(10).unwrap();
            far.write_all(b"0000").await.unwrap();
            assert_eq!(io.read(&mut buf).await.unwrap(), 4);
            assert_eq!(watch.overran(), None);
        })
        .await;
    }
}
