//! Answers in flight: the bytes of answers not yet handed to the kernel share one budget
//! ([`ServerConfig::reply_budget_bytes`]), as request bodies share theirs.
//!
//! An answer waits in the daemon while its client does not read it (past the kernel's send
//! buffer, see [`super::send`]). Without a bound, clients that request large objects on many
//! connections and read nothing would hold all of them at once. So an answer of known size
//! takes its bytes from the budget before it is sent, and gives them back when the last of
//! it has been handed over or its connection ends; when the budget is full, the answer is
//! replaced by `503` with `Retry-After`, and its memory is freed at once. The first
//! [`UNCOUNTED_BYTES`] of each answer are not counted, so ordinary answers never wait or fail
//! for it. Streams of unknown length (the log stream) are not counted: they are produced
//! only as fast as their client reads.
//!
//! A counted answer is handed to hyper in [`CHUNK_BYTES`] frames, so that what hyper buffers
//! per connection stays small and the unsent rest stays counted here until it leaves.
//!
//! [`ServerConfig::reply_budget_bytes`]: super::ServerConfig::reply_budget_bytes

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes, HttpBody};
use axum::http::header::RETRY_AFTER;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use hyper::body::{Frame, SizeHint};
use serde_json::json;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::metrics::Metrics;

const KIB: usize = 1024;

/// Answers up to this size are never counted (they fit the kernel's send buffer).
pub const UNCOUNTED_BYTES: usize = 16 * KIB;

/// The frame size of a counted answer.
pub const CHUNK_BYTES: usize = 16 * KIB;

/// Why an answer was replaced by 503.
pub const BUSY_TEXT: &str =
    "too many answers waiting for their clients to read them ([server] reply_budget_bytes); retry shortly";

/// The budget, in KiB.
#[derive(Clone)]
pub struct ReplyBudget {
    kib: Arc<Semaphore>,
    total_kib: usize,
    metrics: Metrics,
}

impl ReplyBudget {
    pub fn new(bytes: usize, metrics: Metrics) -> Self {
        let total_kib = (bytes / KIB).clamp(1, Semaphore::MAX_PERMITS);
        ReplyBudget {
            kib: Arc::new(Semaphore::new(total_kib)),
            total_kib,
            metrics,
        }
    }

    /// KiB of the budget free now (tests and metrics).
    pub fn free_kib(&self) -> usize {
        self.kib.available_permits()
    }

    /// Count `answer` against the budget, or replace it by 503 when the budget is full.
    pub async fn bound(&self, answer: Response) -> Response {
        let Some(size) = answer.body().size_hint().exact() else {
            return answer;
        };
        let size = usize::try_from(size).unwrap_or(usize::MAX);
        if size <= UNCOUNTED_BYTES {
            return answer;
        }
        // An answer larger than the whole budget takes all of it.
        let kib = (size - UNCOUNTED_BYTES).div_ceil(KIB).min(self.total_kib);
        let Ok(permit) = self
            .kib
            .clone()
            .try_acquire_many_owned(u32::try_from(kib).unwrap_or(u32::MAX))
        else {
            self.metrics.limit_tripped("reply_budget");
            return busy();
        };
        let (parts, body) = answer.into_parts();
        // A body of exact size is already in memory: collecting it does not wait.
        match axum::body::to_bytes(body, size).await {
            Ok(bytes) => Response::from_parts(
                parts,
                Body::new(Counted {
                    rest: bytes,
                    permit: Some(permit),
                }),
            ),
            Err(e) => {
                tracing::error!("an answer of {size} bytes could not be collected: {e}");
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "answer could not be sent",
                )
                    .into_response()
            }
        }
    }
}

fn busy() -> Response {
    let mut r = (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(json!({"error": {"class": "Unavailable", "message": BUSY_TEXT}})),
    )
        .into_response();
    r.headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from_static("1"));
    r
}

/// A counted answer: handed out in [`CHUNK_BYTES`] frames; its share of the budget returns
/// when the last frame is taken or the answer is dropped (its connection ended).
struct Counted {
    rest: Bytes,
    permit: Option<OwnedSemaphorePermit>,
}

impl HttpBody for Counted {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if this.rest.is_empty() {
            this.permit = None;
            return Poll::Ready(None);
        }
        let chunk = this.rest.split_to(this.rest.len().min(CHUNK_BYTES));
        if this.rest.is_empty() {
            this.permit = None;
        }
        Poll::Ready(Some(Ok(Frame::data(chunk))))
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.rest.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(bytes: usize) -> Response {
        (StatusCode::OK, "x".repeat(bytes)).into_response()
    }

    async fn next_frame(body: &mut Body) -> Option<Bytes> {
        let frame = std::future::poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx)).await?;
        frame.ok()?.into_data().ok()
    }

    #[tokio::test]
    async fn answers_up_to_16_kib_are_not_counted() {
        let b = ReplyBudget::new(64 * KIB, Metrics::default());
        let a = b.bound(answer(UNCOUNTED_BYTES)).await;
        assert_eq!(a.status(), StatusCode::OK);
        assert_eq!(b.free_kib(), 64);
    }

    /// A counted answer holds its share until its last frame is taken; it goes out in 16 KiB
    /// frames with its length intact.
    #[tokio::test]
    async fn a_counted_answer_holds_its_share_until_its_last_frame() {
        let b = ReplyBudget::new(64 * KIB, Metrics::default());
        let a = b.bound(answer(48 * KIB)).await;
        assert_eq!(a.status(), StatusCode::OK);
        assert_eq!(a.body().size_hint().exact(), Some(48 * 1024));
        assert_eq!(b.free_kib(), 64 - 32);
        let mut body = a.into_body();
        let mut sizes = Vec::new();
        while let Some(chunk) = next_frame(&mut body).await {
            sizes.push(chunk.len());
            if sizes.len() < 3 {
                assert_eq!(b.free_kib(), 32, "returned before the last frame");
            }
        }
        assert_eq!(sizes, [CHUNK_BYTES; 3]);
        assert_eq!(b.free_kib(), 64);
    }

    /// When the budget is full the answer becomes 503 with Retry-After, and the trip is
    /// counted; an answer dropped unsent (its connection ended) gives its share back.
    #[tokio::test]
    async fn a_full_budget_answers_503_and_a_dropped_answer_frees_its_share() {
        let metrics = Metrics::default();
        let b = ReplyBudget::new(64 * KIB, metrics.clone());
        let held = b.bound(answer(16 * KIB + 60 * KIB)).await;
        assert_eq!(b.free_kib(), 4);
        let refused = b.bound(answer(16 * KIB + 5 * KIB)).await;
        assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(refused.headers()[RETRY_AFTER], "1");
        let body = axum::body::to_bytes(refused.into_body(), 4096)
            .await
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["error"]["message"], BUSY_TEXT);
        assert_eq!(metrics.trips("reply_budget"), 1);
        // Small answers still pass while the budget is full.
        assert_eq!(b.bound(answer(1000)).await.status(), StatusCode::OK);
        drop(held);
        assert_eq!(b.free_kib(), 64);
        assert_eq!(
            b.bound(answer(16 * KIB + 5 * KIB)).await.status(),
            StatusCode::OK
        );
    }

    /// An answer larger than the whole budget takes all of it rather than never passing.
    #[tokio::test]
    async fn an_answer_larger_than_the_budget_takes_all_of_it() {
        let b = ReplyBudget::new(64 * KIB, Metrics::default());
        let a = b.bound(answer(1024 * KIB)).await;
        assert_eq!(a.status(), StatusCode::OK);
        assert_eq!(b.free_kib(), 0);
        let bytes = axum::body::to_bytes(a.into_body(), usize::MAX)
            .await
            .unwrap();
        assert_eq!(bytes.len(), 1024 * KIB);
        assert_eq!(b.free_kib(), 64);
    }

    /// Streams of unknown length pass uncounted.
    #[tokio::test]
    async fn streams_are_not_counted() {
        let b = ReplyBudget::new(64 * KIB, Metrics::default());
        let stream = futures_util::stream::iter([Ok::<_, std::convert::Infallible>(Bytes::from(
            vec![0u8; 100 * KIB],
        ))]);
        let a = b.bound(Response::new(Body::from_stream(stream))).await;
        assert_eq!(a.status(), StatusCode::OK);
        assert_eq!(b.free_kib(), 64);
    }
}
