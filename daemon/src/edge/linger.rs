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
//! connection at once, as before.

use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::HttpBody;
use axum::body::{Body, Bytes};
use axum::http::Request;
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
    let shared = Arc::new(Mutex::new(Shared {
        body,
        read: 0,
        ended: false,
    }));
    let req = Request::from_parts(parts, Body::new(Tracked(shared.clone())));
    (
        req,
        Remainder {
            shared,
            declared,
            small_pieces,
        },
    )
}

/// What the route did not read of a request body.
pub struct Remainder {
    shared: Arc<Mutex<Shared>>,
    declared: Option<u64>,
    small_pieces: usize,
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

    /// Whether [`Remainder::drain`] will wait for a small unread remainder.
    pub fn waits(&self) -> bool {
        self.unread().is_some_and(|n| n <= LINGER_BYTES as u64)
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
