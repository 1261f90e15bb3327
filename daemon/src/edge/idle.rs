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
//! It also counts what a connection reads from each request's head on ([`Watched::request`]).
//! Chunked framing can cost the daemon CPU without delivering any body: a chunk-size line of
//! endless `0` digits (or blanks) is decoded a byte at a time, and no data frame ever reaches a
//! body's reader, so neither its size limit nor its small-pieces limit sees it. The HTTP layer
//! decodes it whether or not the route reads the body: it reads ahead before the route runs,
//! and it drains a body the route left unread after the answer, to keep the connection. So
//! each request may have its connection read a small allowance, which a body's reader raises
//! to the body's own while it reads it ([`watch_body`]); once the connection has read past the
//! allowance in force its reads end for good (an end of stream, which the HTTP layer takes as
//! a broken body or a closed connection), the trip is counted
//! (`limit_trips_total{limit="body_framing"}`), and a body's reader refuses its body
//! ([`BodyWatch::overran`]).
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::metrics::{Limit, Metrics};

/// Nothing written yet: a first head not complete.
const FRESH: u8 = 0;
/// An answer written, and nothing read since.
const IDLE: u8 = 1;
/// Bytes read after the last answer: a further head begun.
const BEGUN: u8 = 2;

/// A connection's IO, watched for what came last: an answer, or bytes of a request; and for
/// how much it read since its request's head, or since the body being read began.
pub struct IdleWatch<S> {
    inner: S,
    shared: Arc<Shared>,
}

/// What a connection's IO and its requests share.
struct Shared {
    state: AtomicU8,
    /// Whether reads are counted: from the first request's head on (before it, the header
    /// timeout and `max_head_bytes` bound them).
    watching: AtomicBool,
    reads: Mutex<Reads>,
    /// Where the trip is counted.
    metrics: Metrics,
}

/// What the connection read since its request's head, or since the body being read began.
#[derive(Default)]
struct Reads {
    read: u64,
    /// The allowance in force: the request's, or the body's being read.
    allowance: u64,
    /// The request's own allowance, in force again once a body's reading ends.
    request: u64,
    /// Past the allowance: nothing more is read on this connection.
    overran: bool,
}

/// What the watched connection did last, read after it ended; and, for its requests, the
/// handle through which its reads are allowed ([`Watched::request`], [`reading_bodies`]).
#[derive(Clone)]
pub struct Watched(Arc<Shared>);

impl Watched {
    /// It had answered and read nothing since: it was idle between requests.
    pub fn idle(&self) -> bool {
        self.0.state.load(Ordering::Relaxed) == IDLE
    }

    /// A request's head has arrived: from now until the next one, the connection may read
    /// `allowance` bytes (unless a body being read allows more, [`watch_body`]). What it reads
    /// after the answer (an unread body drained, the next head) counts against it too.
    pub fn request(&self, allowance: u64) {
        let mut reads = self.0.lock();
        if !reads.overran {
            *reads = Reads {
                read: 0,
                allowance,
                request: allowance,
                overran: false,
            };
        }
        self.0.watching.store(true, Ordering::Relaxed);
    }
}

impl<S> IdleWatch<S> {
    /// `inner` watched; a read past an allowance is counted in `metrics`.
    pub fn new(inner: S, metrics: Metrics) -> (IdleWatch<S>, Watched) {
        let shared = Arc::new(Shared {
            state: AtomicU8::new(FRESH),
            watching: AtomicBool::new(false),
            reads: Mutex::default(),
            metrics,
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

/// Allow the connection whose request is being answered (none outside [`reading_bodies`])
/// `allowance` bytes from now while its body is read: past them, its reads end. The request's
/// own allowance is in force again, from nothing read, once the returned watch is dropped.
/// A connection already past its allowance stays so.
pub fn watch_body(allowance: u64) -> Option<BodyWatch> {
    CONNECTION
        .try_with(|watched| {
            let shared = watched.0.clone();
            {
                let mut reads = shared.lock();
                if !reads.overran {
                    reads.read = 0;
                    reads.allowance = allowance;
                }
            }
            BodyWatch(shared)
        })
        .ok()
}

/// Allow the request being answered (none outside [`reading_bodies`]) `bytes` more from its
/// head to the next: a body it refused unread that its client may send anyway after the answer
/// ([`super::linger::allow_after_answer`]).
pub fn allow_request(bytes: u64) {
    let _ = CONNECTION.try_with(|watched| {
        let mut reads = watched.0.lock();
        reads.request = reads.request.saturating_add(bytes);
    });
}

/// A body being read, whose connection's reads are counted ([`watch_body`]).
pub struct BodyWatch(Arc<Shared>);

impl BodyWatch {
    /// When the connection's reads passed the allowance in force (they have ended since): the
    /// bytes it had read, and that allowance.
    pub fn overran(&self) -> Option<(u64, u64)> {
        let reads = self.0.lock();
        reads.overran.then_some((reads.read, reads.allowance))
    }
}

impl Drop for BodyWatch {
    fn drop(&mut self) {
        let mut reads = self.0.lock();
        if !reads.overran {
            reads.read = 0;
            reads.allowance = reads.request;
        }
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Reads> {
        self.reads.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the connection is past its allowance: nothing more is to be read.
    fn overran(&self) -> bool {
        self.watching.load(Ordering::Relaxed) && self.lock().overran
    }

    /// Count `read` more bytes; the read that passes the allowance trips it, once.
    fn count(&self, read: u64) {
        if !self.watching.load(Ordering::Relaxed) {
            return;
        }
        let mut reads = self.lock();
        reads.read = reads.read.saturating_add(read);
        if !reads.overran && reads.read > reads.allowance {
            reads.overran = true;
            self.metrics.limit_tripped(Limit::BodyFraming);
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for IdleWatch<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.shared.overran() {
            // The read that passed the allowance was delivered; no more is read. An end of
            // stream: the HTTP layer stops decoding, a body's reader is told, and the
            // connection closes once its answer is out.
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
            this.shared.count(read as u64);
        }
        polled
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
        let (mut io, watched) = IdleWatch::new(near, Metrics::default());
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
    async fn a_requests_reads_end_once_they_pass_its_allowance_or_its_body_s() {
        let (near, mut far) = tokio::io::duplex(64);
        let metrics = Metrics::default();
        let (mut io, watched) = IdleWatch::new(near, metrics.clone());
        let mut buf = [0u8; 64];
        // Outside a request's answer there is no connection to watch.
        assert!(watch_body(10).is_none());
        // Reads before the first request's head are not counted.
        far.write_all(&[b'x'; 40]).await.unwrap();
        assert_eq!(io.read(&mut buf).await.unwrap(), 40);
        watched.request(12);
        reading_bodies(watched.clone(), async {
            far.write_all(b"00000000").await.unwrap();
            assert_eq!(io.read(&mut buf).await.unwrap(), 8);
            // A body's allowance counts from its start.
            let watch = watch_body(10).expect("in a request's answer");
            far.write_all(b"00000000").await.unwrap();
            assert_eq!(io.read(&mut buf).await.unwrap(), 8);
            assert_eq!(watch.overran(), None, "8 of 10");
            drop(watch);
            // Its reading over, the request's allowance is in force again, from nothing read.
            far.write_all(&[b'0'; 12]).await.unwrap();
            assert_eq!(io.read(&mut buf).await.unwrap(), 12);
            assert_eq!(metrics.trips(Limit::BodyFraming), 0, "12 of 12");
        })
        .await;
        // The next head: its request's allowance starts from nothing read.
        watched.request(12);
        reading_bodies(watched.clone(), async {
            let watch = watch_body(10).unwrap();
            far.write_all(b"00000000").await.unwrap();
            assert_eq!(io.read(&mut buf).await.unwrap(), 8);
            // The read that passes the allowance is delivered; none after it.
            far.write_all(b"00000000").await.unwrap();
            assert_eq!(io.read(&mut buf).await.unwrap(), 8);
            assert_eq!(watch.overran(), Some((16, 10)));
            assert_eq!(metrics.trips(Limit::BodyFraming), 1);
            far.write_all(b"0000").await.unwrap();
            assert_eq!(io.read(&mut buf).await.unwrap(), 0, "an end of stream");
            drop(watch);
            // For good: not after the body's reading, nor at a further head.
            assert_eq!(io.read(&mut buf).await.unwrap(), 0);
        })
        .await;
        watched.request(12);
        assert_eq!(io.read(&mut buf).await.unwrap(), 0);
        assert_eq!(metrics.trips(Limit::BodyFraming), 1, "counted once");
    }

    #[tokio::test]
    async fn a_request_whose_body_is_not_read_ends_its_reads_past_its_own_allowance() {
        let (near, mut far) = tokio::io::duplex(64);
        let metrics = Metrics::default();
        let (mut io, watched) = IdleWatch::new(near, metrics.clone());
        let mut buf = [0u8; 64];
        watched.request(20);
        far.write_all(&[b'0'; 20]).await.unwrap();
        assert_eq!(io.read(&mut buf).await.unwrap(), 20);
        assert_eq!(metrics.trips(Limit::BodyFraming), 0);
        far.write_all(b"0").await.unwrap();
        assert_eq!(io.read(&mut buf).await.unwrap(), 1);
        assert_eq!(metrics.trips(Limit::BodyFraming), 1);
        far.write_all(b"0").await.unwrap();
        assert_eq!(io.read(&mut buf).await.unwrap(), 0, "an end of stream");
    }
}
