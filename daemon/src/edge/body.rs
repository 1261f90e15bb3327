//! Reading a request body: after authentication, never more than the route's limit, and
//! whole within a deadline.
//!
//! A declared `Content-Length` over the limit is refused before a byte is read; otherwise the
//! body is read frame by frame and refused as soon as it grows past the limit, so an oversized
//! upload is never buffered whole. The deadline covers the whole body (a client trickling one
//! byte at a time cannot hold the connection and its buffer), measured from when reading
//! starts, which is right after the request head arrived and was authenticated.

use axum::body::{Body, Bytes, HttpBody};
use axum::http::header::CONTENT_LENGTH;
use axum::http::HeaderMap;
use tokio::time::Instant;

use crate::metrics::Metrics;

/// Why a body was not read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyError {
    /// Over the route's limit (`limit_trips_total{limit="body_size"}`).
    TooLarge,
    /// Not complete before the deadline (`limit_trips_total{limit="body_timeout"}`).
    TimedOut,
    /// The connection failed or the framing was broken.
    Unreadable,
}

/// Read at most `limit` bytes, complete by `deadline`; trips are counted in `metrics`.
pub async fn read(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
    deadline: Instant,
    metrics: &Metrics,
) -> Result<Bytes, BodyError> {
    let result = match tokio::time::timeout_at(deadline, read_limited(headers, body, limit)).await {
        Ok(r) => r,
        Err(_) => Err(BodyError::TimedOut),
    };
    match result {
        Err(BodyError::TooLarge) => metrics.limit_tripped("body_size"),
        Err(BodyError::TimedOut) => metrics.limit_tripped("body_timeout"),
        _ => {}
    }
    result
}

async fn read_limited(headers: &HeaderMap, body: Body, limit: usize) -> Result<Bytes, BodyError> {
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(BodyError::TooLarge);
    }
    let mut body = std::pin::pin!(body);
    // Reserve what was declared (already known to be within the limit).
    let mut buf: Vec<u8> = Vec::with_capacity(declared.unwrap_or(0) as usize);
    while let Some(frame) = std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
        let frame = frame.map_err(|_| BodyError::Unreadable)?;
        // Trailers carry nothing for JSON; only data frames count.
        if let Ok(data) = frame.into_data() {
            if buf.len() + data.len() > limit {
                return Err(BodyError::TooLarge);
            }
            buf.extend_from_slice(&data);
        }
    }
    Ok(Bytes::from(buf))
}

/// The REST envelope of a body that was not read (`POST /v1/commit`).
pub fn rest_error(e: BodyError, limit: usize) -> crate::rest::ApiError {
    use crate::rest::ApiError;
    use axum::http::StatusCode;
    match e {
        BodyError::TooLarge => ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "PayloadTooLarge",
            format!("commit body exceeds {limit} bytes"),
        ),
        BodyError::TimedOut => ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "RequestTimeout",
            "request body not received in time ([server] body_timeout_ms)",
        ),
        BodyError::Unreadable => ApiError::bad_request("request body could not be read"),
    }
}

/// A limit in words: `4 MiB` when it is a whole number of MiB, else `N bytes`.
pub fn describe(limit: usize) -> String {
    const MIB: usize = 1024 * 1024;
    if limit >= MIB && limit & (MIB - 1) == 0 {
        format!("{} MiB", limit / MIB)
    } else {
        format!("{limit} bytes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn length(n: usize) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(CONTENT_LENGTH, n.to_string().parse().unwrap());
        h
    }

    /// A body that sends one chunk and then nothing, like a client holding its upload.
    struct Stalled(Option<Bytes>);

    impl HttpBody for Stalled {
        type Data = Bytes;
        type Error = std::io::Error;
        fn poll_frame(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, std::io::Error>>> {
            match self.0.take() {
                Some(b) => std::task::Poll::Ready(Some(Ok(hyper::body::Frame::data(b)))),
                None => std::task::Poll::Pending,
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_never_finishes_times_out_at_the_deadline() {
        let metrics = Metrics::default();
        let body = Body::new(Stalled(Some(Bytes::from_static(b"{\"jsonrpc\""))));
        let deadline = Instant::now() + Duration::from_secs(10);
        let r = read(&length(4096), body, 4096, deadline, &metrics).await;
        assert_eq!(r, Err(BodyError::TimedOut));
        assert_eq!(Instant::now(), deadline);
        assert_eq!(metrics.trips("body_timeout"), 1);
    }

    #[tokio::test]
    async fn declared_or_streamed_bodies_over_the_limit_are_refused() {
        let metrics = Metrics::default();
        let far = Instant::now() + Duration::from_secs(60);
        let r = read(&length(11), Body::from(vec![b'x'; 11]), 10, far, &metrics).await;
        assert_eq!(r, Err(BodyError::TooLarge));
        let r = read(
            &HeaderMap::new(),
            Body::from(vec![b'x'; 11]),
            10,
            far,
            &metrics,
        )
        .await;
        assert_eq!(r, Err(BodyError::TooLarge));
        assert_eq!(metrics.trips("body_size"), 2);
        let r = read(&length(10), Body::from(vec![b'x'; 10]), 10, far, &metrics).await;
        assert_eq!(r.unwrap().len(), 10);
        assert_eq!(describe(4 * 1024 * 1024), "4 MiB");
        assert_eq!(describe(1000), "1000 bytes");
    }
}
