//! Answers sent before the request body was read still reach their client.
//!
//! Many refusals come before the body is read: a foreign `Host` or `Origin` (403), a missing
//! or unknown credential (401), an unknown route (404), a declared length over the limit
//! (413). hyper then closes the connection with the unread body still arriving, the kernel
//! answers those bytes with a reset, and the reset can destroy the client's copy of the
//! refusal before it is read; clients that write their head and body separately see "broken
//! pipe" instead of the reason. So every request's body is tracked while the route handles it,
//! and when the answer is ready with a small remainder still unread (a declared
//! `Content-Length` at most [`LINGER_BYTES`] past what was read), that remainder is read and
//! dropped, within [`LINGER_TIME`], before the answer goes out. Large or chunked remainders
//! are not waited for: an attacker declaring megabytes gets its answer and a closed
//! connection at once, as before. A chunked remainder could be a chunk-size line of endless
//! `0`s, which delivers no byte that [`LINGER_BYTES`] counts; it has no declared length even
//! with a `Content-Length` beside its `Transfer-Encoding: chunked` (the HTTP layer removes that
//! header), so it is never drained here. (The HTTP layer itself still decodes such a body ahead
//! of the route and drains it after the answer, to keep the connection: that is bounded by the
//! request's allowance of its connection's reads, [`super::idle`].)
//!
//! A request that carries `Expect: 100-continue` and whose body the route never asked for is
//! different: its client is not sending (it waits for `100 Continue`, which hyper sends on the
//! first read of the body), so the answer goes out at once, without the `100` (RFC 9110
//! §10.1.1), and the rest is read and dropped only after it ([`Remainder::after_answer`]), for
//! a client that sends its body anyway without waiting. Reading it before the answer would
//! invite the upload of a body already refused, or wait the whole linger for one never sent.
//!
//! A body the route stopped reading because it was not complete by `body_timeout_ms`
//! ([`body_timed_out`]) is not waited for either: its client has just failed to send the rest
//! for the whole body deadline, so its `408` goes out at that deadline and the connection is
//! closed, not held [`LINGER_TIME`] longer.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::HttpBody;
use axum::body::{Body, Bytes};
use axum::http::header::EXPECT;
use axum::http::{HeaderMap, Request};
use hyper::body::{Frame, Incoming, SizeHint};

pub use super::body::LINGER_BYTES;
use super::body::{declared_length, discard};

/// The longest an answer waits for the rest of a small unread body.
pub const LINGER_TIME: Duration = Duration::from_secs(2);

/// A request body shared between the route (which reads it through [`Tracked`]) and the edge
/// (which drains what the route left).
struct Shared {
    body: Incoming,
    read: u64,
    ended: bool,
    /// Whether the body was asked for at all (the `100 Continue` of a request that expects
    /// one is sent then).
    polled: bool,
}

tokio::task_local! {
    /// The most a route allows read after its answer, of a body it refused unread
    /// ([`allow_after_answer`]).
    static ALLOWED: Arc<AtomicU64>;
    /// Whether the route gave up on the body at its deadline ([`body_timed_out`]).
    static TIMED_OUT: Arc<AtomicBool>;
}

/// Whether the request waits for `100 Continue` before it sends its body.
pub fn expects_continue(headers: &HeaderMap) -> bool {
    headers
        .get_all(EXPECT)
        .iter()
        .any(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"))
}

/// A route refusing, unread, a body of a request that expects `100 Continue` allows up to
/// `bytes` of it to be read (and dropped) after the answer, for a client that sends it anyway
/// (more than [`LINGER_BYTES`]: a body a little over the route's limit, which it would
/// otherwise have read before its `413`).
pub fn allow_after_answer(bytes: u64) {
    let _ = ALLOWED.try_with(|allowed| allowed.fetch_max(bytes, Ordering::Relaxed));
    // Its connection may read them beyond what every request may ([`super::idle`]).
    super::idle::allow_request(bytes);
}

/// The route gave up on the request body at `body_timeout_ms`: what is left of it is not
/// waited for.
pub fn body_timed_out() {
    let _ = TIMED_OUT.try_with(|timed_out| timed_out.store(true, Ordering::Relaxed));
}

/// The route's view of a request body: every frame it reads is counted.
struct Tracked(Arc<Mutex<Shared>>);

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let mut shared = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        shared.polled = true;
        let polled = Pin::new(&mut shared.body).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                shared.read += frame.data_ref().map_or(0, |d| d.len() as u64);
            }
            Poll::Ready(None) => shared.ended = true,
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        let shared = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        shared.ended || shared.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let shared = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        shared.body.size_hint()
    }
}

/// A request whose body is tracked, and the handle that drains what is left of it, in at most
/// `small_pieces` small pieces (`[server] body_small_pieces`, as a body read by a route).
pub fn track(req: Request<Incoming>, small_pieces: usize) -> (Request<Body>, Remainder) {
    let (parts, body) = req.into_parts();
    let declared = declared_length(&parts.headers);
    let expects_continue = expects_continue(&parts.headers);
    let shared = Arc::new(Mutex::new(Shared {
        body,
        read: 0,
        ended: false,
        polled: false,
    }));
    let req = Request::from_parts(parts, Body::new(Tracked(shared.clone())));
    (
        req,
        Remainder {
            shared,
            declared,
            small_pieces,
            expects_continue,
            allowed: Arc::default(),
            timed_out: Arc::default(),
        },
    )
}

/// What the route did not read of a request body.
pub struct Remainder {
    shared: Arc<Mutex<Shared>>,
    declared: Option<u64>,
    small_pieces: usize,
    expects_continue: bool,
    /// What the route allowed read after its answer ([`allow_after_answer`]).
    allowed: Arc<AtomicU64>,
    /// Whether the route gave up on the body at its deadline ([`body_timed_out`]).
    timed_out: Arc<AtomicBool>,
}

impl Remainder {
    /// The bytes still to come, when the route stopped short of a declared length.
    fn unread(&self) -> Option<u64> {
        let shared = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        if shared.ended || shared.body.is_end_stream() {
            return None;
        }
        self.declared
            .map(|n| n.saturating_sub(shared.read))
            .filter(|&n| n > 0)
    }

    /// Whether the client waits for `100 Continue`, which nobody asked it for: it is not
    /// sending its body.
    fn unsolicited(&self) -> bool {
        self.expects_continue
            && !self
                .shared
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .polled
    }

    /// Route `request` so that it may [`allow_after_answer`].
    pub async fn routing<F: std::future::Future>(&self, request: F) -> F::Output {
        let request = TIMED_OUT.scope(self.timed_out.clone(), request);
        ALLOWED.scope(self.allowed.clone(), request).await
    }

    /// Whether [`Remainder::drain`] will wait for a small unread remainder.
    pub fn waits(&self) -> bool {
        !self.timed_out.load(Ordering::Relaxed)
            && !self.unsolicited()
            && self.unread().is_some_and(|n| n <= LINGER_BYTES as u64)
    }

    /// For a request that expects `100 Continue` and whose body was never asked for: read and
    /// drop, for at most [`LINGER_TIME`], what its client sends anyway (at most
    /// [`LINGER_BYTES`], or what the route allowed), in a task of its own started as the
    /// answer is handed over (hyper writes its head before it reads any of the body, so no
    /// `100 Continue` goes out). Nothing for any other request.
    pub fn after_answer(self) {
        if !self.unsolicited() {
            return;
        }
        let allowed = self
            .allowed
            .load(Ordering::Relaxed)
            .max(LINGER_BYTES as u64);
        if self.unread().is_none_or(|n| n > allowed) {
            return;
        }
        let max = usize::try_from(allowed).unwrap_or(usize::MAX);
        let rest = discard(Tracked(self.shared), max, self.small_pieces);
        tokio::spawn(async move {
            let _ = tokio::time::timeout(LINGER_TIME, rest).await;
        });
    }

    /// Read and drop a small unread remainder (see the module docs), for at most
    /// [`LINGER_TIME`].
    pub async fn drain(self) {
        if !self.waits() {
            return;
        }
        let rest = discard(Tracked(self.shared), LINGER_BYTES, self.small_pieces);
        let _ = tokio::time::timeout(LINGER_TIME, rest).await;
    }
}
