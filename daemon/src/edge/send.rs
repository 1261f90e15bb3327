//! The send deadline: a client that keeps the daemon waiting to hand it an answer must take
//! at least [`MIN_PROGRESS_BYTES`] (or what is left) in every [`ServerConfig::send_timeout`]
//! of that waiting, or its connection is cut.
//!
//! Without it a client that sends a request and never reads the answer holds its connection,
//! the answer's unsent bytes and the kernel's send buffer forever: the header-read timer only
//! runs between requests. The clock runs only while a write is blocked (the socket's send
//! buffer is full), so an idle keep-alive connection or a quiet log stream is never charged,
//! and a client that reads at any ordinary speed resets it long before it fires. A client
//! trickling a few bytes at a time is cut as surely as one that reads nothing.
//!
//! The progress counted is what the writer hands the socket, and, when the clock is about to
//! run out, what left the socket's send queue while the writer waited (`SIOCOUTQ`). Linux wakes
//! a blocked writer only once about a third of its send queue has drained: at the default
//! 256 KiB send buffer (512 KiB once the kernel doubles it) that is ~170 KiB, so a client taking
//! 64 KiB every 4 s under the default 10 s was reset after 20 s, the writer never woken in time
//! to see 64 KiB taken. Now a wait whose timer fires with 64 KiB or more gone from the queue
//! since it began starts a new one: a client taking less than 64 KiB in a timeout of waiting is
//! reset within two timeouts of its last 64 KiB.
//!
//! Once the daemon drains ([`Draining`]) progress no longer resets the clock: a client has
//! one send timeout of waiting, in all, for the rest of its answer. A client taking 64 KiB
//! just inside each send timeout otherwise held the drain for as long as its answer lasted at
//! that pace (ten minutes for 4 MiB at the default 10 s), far past a service manager's stop
//! timeout, which then killed the daemon before its late handlers could journal.
//!
//! On a trip the socket is closed with a reset (`SO_LINGER` 0): the kernel drops the data it
//! still held for that client instead of keeping it, possibly for as long as the client keeps
//! its receive window shut.
//!
//! [`ServerConfig::send_timeout`]: super::ServerConfig::send_timeout

use std::future::Future;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use crate::metrics::{Limit, Metrics};

/// Bytes a client must take in each send timeout of waiting to reset it (or the rest of the
/// answer). At the default 10 s this is a floor of 6.4 KiB/s while the daemon waits.
pub const MIN_PROGRESS_BYTES: u64 = 64 * 1024;

/// The error a cut connection's pending write ends with.
pub const SEND_TIMEOUT_MESSAGE: &str =
    "client took too little of its answer in time ([server] send_timeout_ms)";

/// Set once the daemon drains: from then on the send deadlines of its connections count every
/// wait, progress or not.
#[derive(Clone, Default)]
pub struct Draining(Arc<AtomicBool>);

impl Draining {
    /// The daemon drains, from now on.
    pub fn begin(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    fn on(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// A blocked write's wait.
struct Wait {
    since: Instant,
    /// Fires when the time left before the deadline has passed.
    timer: Pin<Box<Sleep>>,
    /// The socket's send queue when the wait began ([`SendQueue::unsent`]).
    queued: Option<u64>,
}

/// A connection whose writes are bounded by the send deadline.
pub struct SendDeadline<S> {
    inner: S,
    timeout: Duration,
    metrics: Metrics,
    draining: Draining,
    /// Time spent blocked since the last reset, not counting the current wait.
    waited: Duration,
    /// Bytes taken since the last reset.
    taken: u64,
    /// The current wait, if a write is blocked.
    waiting: Option<Wait>,
    tripped: bool,
}

impl<S: ResetOnClose + SendQueue> SendDeadline<S> {
    pub fn new(inner: S, timeout: Duration, metrics: Metrics) -> Self {
        SendDeadline {
            inner,
            timeout,
            metrics,
            draining: Draining::default(),
            waited: Duration::ZERO,
            taken: 0,
            waiting: None,
            tripped: false,
        }
    }

    /// Count every wait without reset once `draining` is set.
    pub fn drained_by(mut self, draining: Draining) -> Self {
        self.draining = draining;
        self
    }

    /// The stream written to.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// A write moved `n` bytes: the current wait (if any) ends and is charged.
    fn took(&mut self, n: usize) {
        if let Some(wait) = self.waiting.take() {
            self.waited += wait.since.elapsed();
        }
        self.taken += n as u64;
        if self.taken >= MIN_PROGRESS_BYTES && !self.draining.on() {
            self.waited = Duration::ZERO;
            self.taken = 0;
        }
    }

    /// A write is blocked: start (or keep) the clock; past the deadline, cut the connection.
    fn blocked<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        if self.tripped {
            return Poll::Ready(Err(timed_out()));
        }
        loop {
            let left = self.timeout.saturating_sub(self.waited);
            let inner = &self.inner;
            let wait = self.waiting.get_or_insert_with(|| Wait {
                since: Instant::now(),
                timer: Box::pin(tokio::time::sleep(left)),
                queued: inner.unsent(),
            });
            if wait.timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            // The client took 64 KiB while the writer waited, unwoken: a new wait, with the
            // whole timeout. Not once the daemon drains: then every wait counts.
            let drained = wait
                .queued
                .zip(self.inner.unsent())
                .map_or(0, |(before, now)| before.saturating_sub(now));
            if drained < MIN_PROGRESS_BYTES || self.draining.on() {
                break;
            }
            self.waiting = None;
            self.waited = Duration::ZERO;
            self.taken = 0;
        }
        self.tripped = true;
        self.metrics.limit_tripped(Limit::SendTimeout);
        self.inner.reset_on_close();
        Poll::Ready(Err(timed_out()))
    }

    /// One write through `write`, under the deadline.
    fn write_with(
        &mut self,
        cx: &mut Context<'_>,
        write: impl FnOnce(Pin<&mut S>, &mut Context<'_>) -> Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>>
    where
        S: Unpin,
    {
        if self.tripped {
            return Poll::Ready(Err(timed_out()));
        }
        match write(Pin::new(&mut self.inner), cx) {
            Poll::Ready(Ok(n)) => {
                self.took(n);
                Poll::Ready(Ok(n))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => self.blocked(cx),
        }
    }
}

fn timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, SEND_TIMEOUT_MESSAGE)
}

/// A connection whose send queue can be measured.
pub trait SendQueue {
    /// Bytes written to the connection and not yet taken by its peer, if known.
    fn unsent(&self) -> Option<u64>;
}

impl SendQueue for tokio::net::TcpStream {
    /// The socket's send queue (`SIOCOUTQ`: bytes not yet sent, or sent and not acknowledged).
    #[cfg(target_os = "linux")]
    fn unsent(&self) -> Option<u64> {
        use std::os::fd::AsRawFd;
        let mut queued: libc::c_int = 0;
        // SAFETY: `TIOCOUTQ` (`SIOCOUTQ` for a TCP socket) writes one int through the pointer,
        // which points at one; the descriptor is this stream's, open while it is borrowed.
        let done = unsafe { libc::ioctl(self.as_raw_fd(), libc::TIOCOUTQ, &mut queued) };
        if done == 0 {
            u64::try_from(queued).ok()
        } else {
            None
        }
    }

    /// Not measured: progress is what the writer hands the socket.
    #[cfg(not(target_os = "linux"))]
    fn unsent(&self) -> Option<u64> {
        None
    }
}

/// A connection that can be told to reset, rather than close gracefully, when it is dropped.
pub trait ResetOnClose {
    fn reset_on_close(&self);
}

impl ResetOnClose for tokio::net::TcpStream {
    /// `SO_LINGER` 0: closing the socket sends a reset and drops its unsent data.
    fn reset_on_close(&self) {
        let _ = self.set_zero_linger();
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for SendDeadline<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + ResetOnClose + SendQueue + Unpin> AsyncWrite for SendDeadline<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut()
            .write_with(cx, |inner, cx| inner.poll_write(cx, buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.get_mut()
            .write_with(cx, |inner, cx| inner.poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_flush(cx) {
            Poll::Pending => this.blocked(cx),
            ready => ready,
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::task::Waker;

    use super::*;

    /// A socket stand-in: a write takes at most the room given so far and blocks without it;
    /// [`Room::give`] adds room and wakes the blocked writer, as a client reading would. Its
    /// send queue is what [`Room::queue`] last said (unknown before), and changing it wakes
    /// no one, as a client taking less than a third of Linux's queue does not.
    #[derive(Clone, Default)]
    struct Room(Arc<Mutex<(usize, Option<Waker>)>>, Arc<Mutex<Option<u64>>>);

    impl SendQueue for Room {
        fn unsent(&self) -> Option<u64> {
            *self.1.lock().unwrap()
        }
    }

    impl Room {
        fn give(&self, bytes: usize) {
            let mut r = self.0.lock().unwrap();
            r.0 += bytes;
            if let Some(w) = r.1.take() {
                w.wake();
            }
        }
    }

    impl Room {
        fn queue(&self, bytes: u64) {
            *self.1.lock().unwrap() = Some(bytes);
        }
    }

    impl ResetOnClose for Room {
        fn reset_on_close(&self) {}
    }

    impl AsyncRead for Room {
        fn poll_read(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            _: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            Poll::Pending
        }
    }

    impl AsyncWrite for Room {
        fn poll_write(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            let mut r = self.0.lock().unwrap();
            if r.0 == 0 {
                r.1 = Some(cx.waker().clone());
                return Poll::Pending;
            }
            let n = buf.len().min(r.0);
            r.0 -= n;
            Poll::Ready(Ok(n))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    fn conn(timeout_ms: u64) -> (SendDeadline<Room>, Room, Metrics) {
        let room = Room::default();
        let metrics = Metrics::default();
        let c = SendDeadline::new(
            room.clone(),
            Duration::from_millis(timeout_ms),
            metrics.clone(),
        );
        (c, room, metrics)
    }

    /// One write of `len` bytes, polled until it ends.
    async fn write(c: &mut SendDeadline<Room>, len: usize) -> io::Result<usize> {
        let buf = vec![0u8; len];
        std::future::poll_fn(|cx| Pin::new(&mut *c).poll_write(cx, &buf)).await
    }

    /// Give `bytes` of room after `ms` of paused time.
    fn give_after(room: &Room, ms: u64, bytes: usize) {
        let room = room.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            room.give(bytes);
        });
    }

    /// Set `room`'s send queue to `bytes` after `ms` of paused time.
    fn queue_after(room: &Room, ms: u64, bytes: u64) {
        let room = room.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            room.queue(bytes);
        });
    }

    /// The writer is never woken, but 64 KiB leave the send queue in each timeout of waiting
    /// (at 900 and 1800 ms): each timer that fires begins a new wait, and the first with less
    /// gone (32 KiB by 3000 ms) is cut: at 1000 + 1000 + 1000 ms.
    #[tokio::test(start_paused = true)]
    async fn what_leaves_the_send_queue_while_the_writer_waits_counts_as_progress() {
        let (mut c, room, metrics) = conn(1000);
        let kib = 1024;
        room.queue(512 * kib);
        queue_after(&room, 900, 448 * kib);
        queue_after(&room, 1800, 384 * kib);
        queue_after(&room, 2500, 352 * kib);
        let start = Instant::now();
        let e = write(&mut c, 10).await.unwrap_err();
        assert_eq!(e.to_string(), SEND_TIMEOUT_MESSAGE);
        assert_eq!(start.elapsed(), Duration::from_millis(3000));
        assert_eq!(metrics.trips(Limit::SendTimeout), 1);
    }

    /// Less than 64 KiB gone from the queue in a timeout of waiting: cut at the timeout.
    #[tokio::test(start_paused = true)]
    async fn less_than_64_kib_leaving_the_send_queue_is_cut_at_the_timeout() {
        let (mut c, room, _) = conn(1000);
        room.queue(512 * 1024);
        queue_after(&room, 500, 512 * 1024 - MIN_PROGRESS_BYTES + 1);
        let start = Instant::now();
        assert!(write(&mut c, 10).await.is_err());
        assert_eq!(start.elapsed(), Duration::from_millis(1000));
    }

    /// Once the daemon drains, what leaves the queue begins no new wait either.
    #[tokio::test(start_paused = true)]
    async fn once_the_daemon_drains_what_leaves_the_send_queue_begins_no_new_wait() {
        let (c, room, _) = conn(1000);
        let draining = Draining::default();
        let mut c = c.drained_by(draining.clone());
        draining.begin();
        room.queue(512 * 1024);
        queue_after(&room, 500, 256 * 1024);
        let start = Instant::now();
        assert!(write(&mut c, 10).await.is_err());
        assert_eq!(start.elapsed(), Duration::from_millis(1000));
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_takes_nothing_is_cut_at_the_send_timeout() {
        let (mut c, _room, metrics) = conn(1000);
        let start = Instant::now();
        let e = write(&mut c, 10).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert_eq!(e.to_string(), SEND_TIMEOUT_MESSAGE);
        assert_eq!(start.elapsed(), Duration::from_millis(1000));
        assert_eq!(metrics.trips(Limit::SendTimeout), 1);
        // Every later write fails at once, and the trip is counted once.
        let e = write(&mut c, 1).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert_eq!(start.elapsed(), Duration::from_millis(1000));
        assert_eq!(metrics.trips(Limit::SendTimeout), 1);
    }

    /// The clock runs only while a write is blocked: 900 ms blocked, an hour idle, and the
    /// next write has 100 ms left.
    #[tokio::test(start_paused = true)]
    async fn only_time_spent_blocked_counts() {
        let (mut c, room, metrics) = conn(1000);
        give_after(&room, 900, 1024);
        assert_eq!(write(&mut c, 4096).await.unwrap(), 1024);
        tokio::time::sleep(Duration::from_secs(3600)).await;
        let start = Instant::now();
        assert!(write(&mut c, 10).await.is_err());
        assert_eq!(start.elapsed(), Duration::from_millis(100));
        assert_eq!(metrics.trips(Limit::SendTimeout), 1);
    }

    /// 64 KiB taken resets the clock: after 900 ms blocked and 64 KiB taken, the next wait
    /// gets the whole timeout again.
    #[tokio::test(start_paused = true)]
    async fn enough_progress_resets_the_clock() {
        let (mut c, room, _) = conn(1000);
        let kib64 = MIN_PROGRESS_BYTES as usize;
        give_after(&room, 900, kib64);
        assert_eq!(write(&mut c, kib64).await.unwrap(), kib64);
        let start = Instant::now();
        assert!(write(&mut c, 10).await.is_err());
        assert_eq!(start.elapsed(), Duration::from_millis(1000));
    }

    /// A trickle is cut too: 1 KiB every 400 ms never adds up to 64 KiB, so the waits add up
    /// to the timeout: 400 + 400 + 200 ms.
    #[tokio::test(start_paused = true)]
    async fn a_client_that_trickles_is_cut_when_its_waits_add_up() {
        let (mut c, room, metrics) = conn(1000);
        for k in 1..=10 {
            give_after(&room, 400 * k, 1024);
        }
        let start = Instant::now();
        let mut taken = 0;
        let err = loop {
            match write(&mut c, 4096).await {
                Ok(n) => taken += n,
                Err(e) => break e,
            }
        };
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert_eq!(taken, 2048);
        assert_eq!(start.elapsed(), Duration::from_millis(1000));
        assert_eq!(metrics.trips(Limit::SendTimeout), 1);
    }

    /// Once the daemon drains, a client keeping pace with the progress rule is cut all the
    /// same when its waits add up to the timeout: 64 KiB every 900 ms kept the clock reset,
    /// and held the drain for as long as the answer lasted.
    #[tokio::test(start_paused = true)]
    async fn once_the_daemon_drains_every_wait_counts_and_a_steady_trickle_is_cut() {
        let (c, room, metrics) = conn(1000);
        let draining = Draining::default();
        let mut c = c.drained_by(draining.clone());
        let kib64 = MIN_PROGRESS_BYTES as usize;
        for k in 1..=66 {
            give_after(&room, 900 * k, kib64);
        }
        // Before the drain, a minute of it is not cut.
        let mut taken = 0;
        while taken < 10 * kib64 {
            taken += write(&mut c, kib64).await.unwrap();
        }
        assert_eq!(metrics.trips(Limit::SendTimeout), 0);
        draining.begin();
        let start = Instant::now();
        let err = loop {
            match write(&mut c, kib64).await {
                Ok(n) => taken += n,
                Err(e) => break e,
            }
        };
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        // 900 ms waited (and 64 KiB taken, no reset), then 100 ms more: cut.
        assert_eq!(start.elapsed(), Duration::from_millis(1000));
        assert_eq!(taken, 11 * kib64);
        assert_eq!(metrics.trips(Limit::SendTimeout), 1);
    }

    /// A client keeping pace is never cut, however long the answer takes in all.
    #[tokio::test(start_paused = true)]
    async fn a_client_that_keeps_pace_is_never_cut() {
        let (mut c, room, metrics) = conn(1000);
        // 64 KiB every 900 ms for a minute: the clock resets each time.
        for k in 1..=66 {
            give_after(&room, 900 * k, MIN_PROGRESS_BYTES as usize);
        }
        let mut taken = 0;
        while taken < 66 * MIN_PROGRESS_BYTES as usize {
            taken += write(&mut c, MIN_PROGRESS_BYTES as usize).await.unwrap();
        }
        assert_eq!(metrics.trips(Limit::SendTimeout), 0);
    }
}
