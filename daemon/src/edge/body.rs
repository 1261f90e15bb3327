//! Reading a request body: after authentication, never more than the route's limit, and
//! whole within a deadline.
//!
//! A declared `Content-Length` over the limit is refused before a byte is buffered; otherwise
//! the body is read frame by frame and refused as soon as it grows past the limit, so an
//! oversized upload is never buffered whole. A body that overshoots by at most
//! [`LINGER_BYTES`] is read to its end (and dropped) before the refusal, so its client reads
//! the 413 rather than a reset connection (unless its request waits for `100 Continue`: then
//! the 413 goes out at once, and what the client sends anyway is read after it,
//! [`super::linger`]). A body may arrive in at most
//! [`ServerConfig::body_small_pieces`](super::ServerConfig::body_small_pieces) pieces under
//! [`SMALL_PIECE_BYTES`]: every piece costs a hand-over between two tasks, so one-byte chunks
//! would cost the daemon hundreds of times what their bytes do. The deadline covers the whole
//! body (a client trickling one byte at a time cannot hold the connection and its buffer),
//! measured from when reading starts, which is right after the request head arrived and was
//! authenticated.
//!
//! All bodies being read or processed at once share one budget of bytes
//! ([`ServerConfig::body_budget_bytes`](super::ServerConfig::body_budget_bytes)): a body that
//! would take the total past it is refused at once (503) instead of being buffered, so
//! authenticated clients holding many large uploads open cannot exhaust memory either. The
//! first [`UNCOUNTED_BYTES`] of each body are not counted, so that ordinary small calls are
//! never refused while someone holds the budget with large uploads. One credential (as the
//! answer budget keys it, [`Client`]) holds at most a quarter of the budget, so that one
//! session holding large uploads open cannot refuse every other session's; a single body
//! larger than a quarter may take the whole quarter and the rest from the budget, and one
//! larger than the whole budget takes all of it when it is free. (How many bodies one
//! credential has being read at once is bounded by its share of requests in flight,
//! [`super::connections`]: every route authenticates before it reads a body.)

use std::borrow::Cow;
use std::sync::Arc;

use axum::body::{Body, Bytes, HttpBody};
use axum::http::header::{CONTENT_ENCODING, CONTENT_LENGTH, TRANSFER_ENCODING};
use axum::http::{HeaderMap, StatusCode};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::reply::Client;
use crate::metrics::{Limit, Metrics};
use crate::quota::{Held, Quota};

/// The unit of the body budget.
const KIB: usize = 1024;

/// The first bytes of every body are not counted against the budget, so small requests (the
/// common tool call) are never refused for it while large uploads fill it. Bounded all the
/// same: at most `max_connections` × this.
pub const UNCOUNTED_BYTES: usize = 16 * KIB;

/// A piece of a body (a chunk of chunked framing, or what one read of the connection brought)
/// under this many bytes is a small one, and
/// [`ServerConfig::body_small_pieces`](super::ServerConfig::body_small_pieces) bounds how many
/// a body may arrive in. A client over a slow link sends pieces of a network
/// packet (about 1,400 bytes); one that means harm sends chunks of one byte, six bytes each on
/// the wire, each of which costs the daemon a hand-over between two tasks.
pub const SMALL_PIECE_BYTES: usize = 512;

/// What a connection may read beyond a body's limit while the body is read, for its framing
/// ([`framing_allowance`]): 16 KiB of chunk extensions and 16 KiB of trailers (the HTTP layer's
/// own bounds), chunk-size lines, and what a client sends behind the body.
pub const FRAMING_BYTES: usize = 64 * KIB;

/// Most bytes a connection may read while a body of at most `limit` bytes, in at most
/// `small_pieces` small pieces, is read: the limit, its sixteenth (a chunk-size line of 16
/// digits and its two line ends for every 512 bytes of chunks that are not small), 20 bytes
/// for each small piece, and [`FRAMING_BYTES`]. A chunk-size line of endless `0` digits or
/// blanks delivers no byte of the body, and the daemon reads it a byte at a time: past this,
/// the body is refused (`limit_trips_total{limit="body_framing"}`). It replaces the smaller
/// allowance of every request ([`super::listener::request_allowance`]) while the body is read.
pub fn framing_allowance(limit: usize, small_pieces: usize) -> u64 {
    let limit = limit as u64;
    limit
        .saturating_add(limit / 16)
        .saturating_add((small_pieces as u64).saturating_mul(20))
        .saturating_add(FRAMING_BYTES as u64)
}

/// A body whose connection read past its [`framing_allowance`] before the body was whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the connection sent {read} bytes while its body was read, past the {allowance} its limit and chunked framing allow, before the body was whole (a chunk-size line of endless zeros or blanks?)")]
pub struct FramingOverrun {
    pub read: u64,
    pub allowance: u64,
}

/// What one parsed JSON value is counted as in the body budget ([`BodyShare::hold_parsed`]).
/// Measured on the release daemon with one-member objects, the costliest value there is: a
/// call of 16,386 of them took 5.3 MiB while it was parsed and copied, 340 bytes a value, and
/// forty-five such calls waiting their turn held 140 MiB, 200 bytes a value.
pub const PARSED_VALUE_BYTES: usize = 256;

/// Default most small pieces of one body: at about 2 µs each, a body costs at most about 9 ms
/// of CPU for its framing, as a large ordinary call does to parse.
pub const DEFAULT_SMALL_PIECES: usize = 4096;

/// How much of an oversized body is still read, and thrown away, before the refusal is sent.
/// Closing a connection with unread bytes in its receive buffer makes the kernel reset it, and
/// a reset can destroy the client's copy of the 413 before it reads it: a client that overshot
/// by a little (an honest mistake) gets its answer; one that declares megabytes does not keep
/// the daemon reading.
pub const LINGER_BYTES: usize = 64 * KIB;

/// Reads request bodies within one shared budget of bytes.
#[derive(Clone)]
pub struct Bodies {
    budget: Arc<Semaphore>,
    /// The whole budget, in its units.
    budget_units: usize,
    /// KiB each credential's bodies hold now, at most a quarter of the budget.
    shares: Quota<Client>,
    /// Most pieces under [`SMALL_PIECE_BYTES`] one body may arrive in.
    small_pieces: usize,
    /// Set once the daemon drains: a body still being read is refused then, rather than
    /// waited for until its deadline (a client sending half a body held every stop up for
    /// the whole `body_timeout_ms`).
    closing: Arc<tokio::sync::watch::Sender<bool>>,
    metrics: Metrics,
}

/// A body read, and its share of the budget: keep it while the body (or what is parsed from
/// it) is in use.
pub struct ReadBody {
    pub bytes: Bytes,
    _budget: Option<Share>,
}

impl ReadBody {
    /// The body's bytes, and what keeps its place in the budget: for a caller that parses
    /// the bytes, drops them, and must still count against the budget while what it parsed
    /// is in use (an A2A call, until it is answered).
    pub fn split(self) -> (Bytes, BodyShare) {
        (
            self.bytes,
            BodyShare {
                _share: self._budget,
            },
        )
    }
}

/// A body's place in the budget, kept after its bytes are gone.
pub struct BodyShare {
    _share: Option<Share>,
}

impl BodyShare {
    /// Count the `values` JSON values a parse of this share's body of `body_len` bytes builds
    /// (at most) against the budget, at [`PARSED_VALUE_BYTES`] each, beyond what the body's
    /// bytes already hold there (or hold uncounted, [`UNCOUNTED_BYTES`]): a parsed value costs
    /// far more than its text, and a call waiting for its turn holds what was parsed. `Err`
    /// when the budget or the credential's share has no room for it: the caller answers busy
    /// without parsing.
    pub fn hold_parsed(
        &mut self,
        bodies: &Bodies,
        headers: &HeaderMap,
        body_len: usize,
        values: usize,
    ) -> Result<(), Busy> {
        // At most the whole budget: a call that needs more takes all of it, when it is free,
        // rather than never running.
        let parsed = values
            .saturating_mul(PARSED_VALUE_BYTES)
            .min(bodies.budget_units * KIB);
        let extra = parsed.saturating_sub(body_len.max(UNCOUNTED_BYTES));
        if extra == 0 {
            // An ordinary call: nothing to count, and no credential to read for it.
            return Ok(());
        }
        bodies
            .take(&mut self._share, &Client::of(headers), extra)
            .inspect_err(|busy| bodies.metrics.limit_tripped(busy.limit()))
    }
}

/// Part of the budget, counted in `worldd_body_budget_bytes_held` while it is held.
struct Share {
    permit: OwnedSemaphorePermit,
    /// The part of its credential's share this body holds (none once it was all taken).
    quota: Option<Held<Client>>,
    metrics: Metrics,
}

impl Share {
    fn bytes(&self) -> i64 {
        (self.permit.num_permits() * KIB) as i64
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        self.metrics.body_bytes_held(-self.bytes());
    }
}

/// Why a body was not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyError {
    /// Coded in a way nothing here decodes (`Content-Encoding: gzip`, `Transfer-Encoding:
    /// gzip, chunked`): parsed as JSON, the coded bytes would only answer "Parse error", and a
    /// plain body under such a label would run as if the label were not there.
    Coded(Coding),
    /// Over the route's limit (`limit_trips_total{limit="body_size"}`).
    TooLarge,
    /// Arriving in more small pieces than this
    /// (`limit_trips_total{limit="body_small_pieces"}`).
    TooManyPieces(usize),
    /// Not complete before the deadline (`limit_trips_total{limit="body_timeout"}`).
    TimedOut,
    /// Not complete before its call's deadline, which came before the body timeout
    /// (`limit_trips_total{limit="call_deadline"}`).
    PastCallDeadline,
    /// Not complete when the daemon began to drain ([`SHUTTING_DOWN`], 503).
    ShuttingDown,
    /// The connection failed or the framing was broken: the cause, as the HTTP layer names it
    /// (`invalid chunk size line`, `chunk extensions over limit`, …), or its connection read
    /// past the body's [`framing_allowance`] ([`FramingOverrun`],
    /// `limit_trips_total{limit="body_framing"}`).
    Unreadable(String),
    /// The bodies in flight already fill the budget, or the credential's share of it.
    Busy(Busy),
}

/// Which budget was full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Busy {
    /// All bodies in flight (`limit_trips_total{limit="body_budget"}`).
    Budget,
    /// This credential's bodies in flight: a quarter of the budget
    /// (`limit_trips_total{limit="body_share"}`).
    Share,
}

impl From<Busy> for BodyError {
    fn from(busy: Busy) -> BodyError {
        BodyError::Busy(busy)
    }
}

impl Busy {
    /// The `limit` label it is counted under in `worldd_limit_trips_total`.
    pub fn limit(self) -> Limit {
        match self {
            Busy::Budget => Limit::BodyBudget,
            Busy::Share => Limit::BodyShare,
        }
    }

    /// What the client is told (503, with `Retry-After: 1` over HTTP).
    pub fn text(self) -> &'static str {
        match self {
            Busy::Budget => BUSY_TEXT,
            Busy::Share => SHARE_TEXT,
        }
    }
}

impl Bodies {
    /// A budget of `budget_bytes`.
    pub fn new(budget_bytes: usize, metrics: Metrics) -> Bodies {
        let units = budget_bytes.div_ceil(KIB).clamp(1, Semaphore::MAX_PERMITS);
        Bodies {
            budget: Arc::new(Semaphore::new(units)),
            budget_units: units,
            shares: Quota::new((units / 4).max(1)),
            small_pieces: DEFAULT_SMALL_PIECES,
            closing: Arc::new(tokio::sync::watch::Sender::new(false)),
            metrics,
        }
    }

    /// The daemon drains: every body still being read is refused
    /// ([`BodyError::ShuttingDown`]), now and from now on.
    pub fn close(&self) {
        self.closing.send_replace(true);
    }

    /// At most `n` pieces under [`SMALL_PIECE_BYTES`] per body.
    pub fn small_pieces(mut self, n: usize) -> Bodies {
        self.small_pieces = n.max(1);
        self
    }

    /// Read at most `limit` bytes, complete by `deadline` (the body timeout's), within the
    /// shared budget.
    pub async fn read(
        &self,
        headers: &HeaderMap,
        body: Body,
        limit: usize,
        deadline: Instant,
    ) -> Result<ReadBody, BodyError> {
        self.read_by(headers, body, limit, deadline, BodyError::TimedOut)
            .await
    }

    /// [`Bodies::read`] of a call's body: complete within `body_timeout` from now, and by
    /// `call_deadline`. When the call's deadline comes first and passes, the body is refused
    /// as [`BodyError::PastCallDeadline`], under the name of the limit that fired.
    pub async fn read_for_call(
        &self,
        headers: &HeaderMap,
        body: Body,
        limit: usize,
        body_timeout: std::time::Duration,
        call_deadline: Instant,
    ) -> Result<ReadBody, BodyError> {
        let by_body = Instant::now() + body_timeout;
        if call_deadline < by_body {
            self.read_by(
                headers,
                body,
                limit,
                call_deadline,
                BodyError::PastCallDeadline,
            )
            .await
        } else {
            self.read_by(headers, body, limit, by_body, BodyError::TimedOut)
                .await
        }
    }

    /// Read at most `limit` bytes by `deadline`, or `late`.
    async fn read_by(
        &self,
        headers: &HeaderMap,
        body: Body,
        limit: usize,
        deadline: Instant,
        late: BodyError,
    ) -> Result<ReadBody, BodyError> {
        let read = self.read_limited(headers, body, limit);
        let mut closing = self.closing.subscribe();
        let result = tokio::select! {
            read = tokio::time::timeout_at(deadline, read) => match read {
                Ok(r) => r,
                Err(_) => Err(late),
            },
            _ = closing.wait_for(|closing| *closing) => Err(BodyError::ShuttingDown),
        };
        match &result {
            Err(BodyError::TooLarge) => self.metrics.limit_tripped(Limit::BodySize),
            Err(BodyError::TooManyPieces(_)) => self.metrics.limit_tripped(Limit::BodySmallPieces),
            Err(BodyError::TimedOut) => {
                self.metrics.limit_tripped(Limit::BodyTimeout);
                super::linger::body_timed_out();
            }
            Err(BodyError::PastCallDeadline) => {
                self.metrics.limit_tripped(Limit::CallDeadline);
                super::linger::body_timed_out();
            }
            // Its answer does not wait for the rest of the body either.
            Err(BodyError::ShuttingDown) => super::linger::body_timed_out(),
            Err(BodyError::Busy(busy)) => self.metrics.limit_tripped(busy.limit()),
            _ => {}
        }
        result
    }

    /// Take `bytes` more of `client`'s share and of the budget, now or never.
    fn take(&self, held: &mut Option<Share>, client: &Client, bytes: usize) -> Result<(), Busy> {
        // At most the whole budget: a body larger than it (a route's limit may be) takes all
        // of it, when it is free, rather than being refused as busy on an idle daemon.
        let holds = held.as_ref().map_or(0, |h| h.permit.num_permits());
        let units = bytes
            .div_ceil(KIB)
            .min(self.budget_units.saturating_sub(holds));
        if units == 0 {
            return Ok(());
        }
        // The share first. A body larger than a whole share takes all of it and the rest
        // only from the budget.
        let in_share = held
            .as_ref()
            .and_then(|h| h.quota.as_ref())
            .map_or(0, Held::amount);
        let from_share = units.min(self.shares.cap().saturating_sub(in_share));
        let quota = match from_share {
            0 => None,
            n => Some(self.shares.take(client, n).ok_or(Busy::Share)?),
        };
        let permits = u32::try_from(units).map_err(|_| Busy::Budget)?;
        let more = self
            .budget
            .clone()
            .try_acquire_many_owned(permits)
            .map_err(|_| Busy::Budget)?;
        self.metrics
            .body_bytes_held((more.num_permits() * KIB) as i64);
        match held {
            Some(share) => {
                share.permit.merge(more);
                match (&mut share.quota, quota) {
                    (Some(q), Some(more)) => q.merge(more),
                    (q @ None, more) => *q = more,
                    (Some(_), None) => {}
                }
            }
            None => {
                *held = Some(Share {
                    permit: more,
                    quota,
                    metrics: self.metrics.clone(),
                })
            }
        }
        Ok(())
    }

    async fn read_limited(
        &self,
        headers: &HeaderMap,
        body: Body,
        limit: usize,
    ) -> Result<ReadBody, BodyError> {
        if let Some(coding) = Coding::of(headers) {
            return Err(BodyError::Coded(coding));
        }
        // Its connection's reads, counted while it is read (none for a body that came
        // another way, as in unit tests), and refused past its allowance (counted as
        // `body_framing` where the reads end, [`super::idle`]).
        let allowance = framing_allowance(limit, self.small_pieces);
        let watch = super::idle::watch_body(allowance);
        let declared = declared_length(headers);
        if let Some(n) = declared.filter(|&n| n > limit as u64) {
            if n <= (limit + LINGER_BYTES) as u64 {
                if super::linger::expects_continue(headers) {
                    // Its client waits for `100 Continue` to send it: refused at once, and
                    // what it sends anyway is read after the answer.
                    super::linger::allow_after_answer(n);
                } else {
                    discard(body, limit + LINGER_BYTES, self.small_pieces).await;
                }
            }
            return Err(BodyError::TooLarge);
        }
        let client = Client::of(headers);
        let mut held = None;
        // A declared length is taken from the budget whole, before anything is read.
        let declared = declared.unwrap_or(0) as usize;
        self.take(&mut held, &client, declared.saturating_sub(UNCOUNTED_BYTES))?;
        let mut taken = UNCOUNTED_BYTES.max(declared.div_ceil(KIB) * KIB);
        let mut body = std::pin::pin!(body);
        let mut buf: Vec<u8> = Vec::with_capacity(declared);
        let mut small = 0usize;
        let overran = |watch: &Option<super::idle::BodyWatch>| {
            let (read, allowance) = watch.as_ref()?.overran()?;
            Some(BodyError::Unreadable(
                FramingOverrun { read, allowance }.to_string(),
            ))
        };
        while let Some(frame) = std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
            // Past its allowance the connection's reads ended, which the HTTP layer says as a
            // broken body: said as what it is.
            let frame = frame.map_err(|e| {
                overran(&watch).unwrap_or_else(|| BodyError::Unreadable(root_cause(&e)))
            })?;
            // Trailers carry nothing for JSON; only data frames count.
            if let Ok(data) = frame.into_data() {
                if buf.len() + data.len() > limit {
                    drop(buf);
                    discard(body, LINGER_BYTES, self.small_pieces.saturating_sub(small)).await;
                    return Err(BodyError::TooLarge);
                }
                if data.len() < SMALL_PIECE_BYTES {
                    small += 1;
                    if small > self.small_pieces {
                        // Read no more of it: its client is told at once, and what it
                        // still sends goes with the connection.
                        return Err(BodyError::TooManyPieces(self.small_pieces));
                    }
                }
                if buf.len() + data.len() > taken {
                    let more = buf.len() + data.len() - taken;
                    self.take(&mut held, &client, more)?;
                    taken += more.div_ceil(KIB) * KIB;
                }
                buf.extend_from_slice(&data);
            }
        }
        Ok(ReadBody {
            bytes: Bytes::from(buf),
            _budget: held,
        })
    }
}

/// The request's declared `Content-Length`, if it has a readable one.
pub(super) fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Read and drop at most `max` more bytes of `body`, in at most `max_small` pieces under
/// [`SMALL_PIECE_BYTES`] (the caller's deadline bounds the time).
pub(super) async fn discard<B>(body: B, max: usize, max_small: usize)
where
    B: HttpBody<Data = Bytes>,
{
    let mut body = std::pin::pin!(body);
    let (mut seen, mut small) = (0usize, 0usize);
    while seen <= max && small <= max_small {
        match std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
            Some(Ok(frame)) => {
                let len = frame.data_ref().map_or(0, |d| d.len());
                seen += len;
                small += usize::from(len < SMALL_PIECE_BYTES);
            }
            _ => return,
        }
    }
}

/// What a client is told of a body whose framing broke (or whose connection failed) while it
/// was read.
pub fn unreadable(cause: &str) -> String {
    format!("request body could not be read: {cause}")
}

/// The innermost error `e` was caused by: hyper's own text is only "error reading a body from
/// connection", its source says which rule of the framing the client broke.
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = e;
    while let Some(inner) = cause.source() {
        cause = inner;
    }
    cause.to_string()
}

/// What a client is told of a body still arriving when the daemon began to drain (as a log
/// stream is told).
pub const SHUTTING_DOWN: &str = "the daemon is shutting down";

/// What a client is told of a body its call's deadline cut short (before its body timeout).
pub const PAST_CALL_DEADLINE: &str =
    "request body not received within the call's deadline ([limits] call_deadline_ms)";

/// What a client is told of a body that arrived in more than `n` small pieces.
pub fn too_many_pieces(n: usize) -> String {
    format!(
        "request body arrives in more than {n} pieces of under {SMALL_PIECE_BYTES} bytes ([server] body_small_pieces); send it with a Content-Length, or in larger chunks"
    )
}

/// The REST envelope of a body that was not read (`POST /v1/commit`).
pub fn rest_error(e: BodyError, limit: usize) -> crate::rest::ApiError {
    use crate::rest::ApiError;
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
        // A commit's body has no call deadline; said all the same.
        BodyError::PastCallDeadline => ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "RequestTimeout",
            PAST_CALL_DEADLINE,
        ),
        BodyError::ShuttingDown => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "Unavailable",
            SHUTTING_DOWN,
        ),
        BodyError::Unreadable(cause) => ApiError::bad_request(unreadable(&cause)),
        BodyError::TooManyPieces(n) => ApiError::bad_request(too_many_pieces(n)),
        BodyError::Busy(busy) => ApiError::busy(busy.text()),
        BodyError::Coded(coding) => ApiError::new(coding.status(), coding.class(), coding.text()),
    }
}

/// A coding of a request body that this daemon does not decode: the header that names it and
/// its fields as sent (joined by ", ").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Coding {
    layer: Layer,
    value: String,
}

/// Which header applied the coding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layer {
    Content,
    Transfer,
}

impl Coding {
    /// The first coding the request's headers apply beyond what hyper decodes: a
    /// `Content-Encoding` other than `identity`, or a `Transfer-Encoding` other than one
    /// `chunked`.
    pub fn of(headers: &HeaderMap) -> Option<Coding> {
        let codings = |fields: &[Cow<'_, str>]| -> Vec<String> {
            fields
                .iter()
                .flat_map(|f| f.split(','))
                .map(|c| c.trim().to_ascii_lowercase())
                .filter(|c| !c.is_empty())
                .collect()
        };
        let content = super::fields::texts(headers, CONTENT_ENCODING);
        if codings(&content).iter().any(|c| c != "identity") {
            return Some(Coding {
                layer: Layer::Content,
                value: content.join(", "),
            });
        }
        let transfer = super::fields::texts(headers, TRANSFER_ENCODING);
        if !transfer.is_empty() && codings(&transfer) != ["chunked"] {
            return Some(Coding {
                layer: Layer::Transfer,
                value: transfer.join(", "),
            });
        }
        None
    }

    /// 415 for a content coding; 501 for a transfer coding (RFC 9112 §6.1).
    pub fn status(&self) -> StatusCode {
        match self.layer {
            Layer::Content => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Layer::Transfer => StatusCode::NOT_IMPLEMENTED,
        }
    }

    /// The REST envelope's class for [`Coding::status`].
    pub fn class(&self) -> &'static str {
        match self.layer {
            Layer::Content => "UnsupportedMediaType",
            Layer::Transfer => "NotImplemented",
        }
    }

    /// What the client is told.
    pub fn text(&self) -> String {
        let header = match self.layer {
            Layer::Content => "Content-Encoding",
            Layer::Transfer => "Transfer-Encoding",
        };
        format!(
            "{header} {} is not supported: send the body uncompressed",
            dialect::quote::quote(&self.value)
        )
    }
}

/// Why a body was refused for the budget.
pub const BUSY_TEXT: &str =
    "too many request bodies in flight ([server] body_budget_bytes); retry shortly";

/// Why a body was refused for its credential's share of the budget.
pub const SHARE_TEXT: &str =
    "too many request bodies from this credential in flight (a quarter of [server] body_budget_bytes); retry shortly";

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

    /// A body dripped in one-byte pieces is refused one piece past the limit, having read no
    /// further; one that also passes the size limit is drained for at most the pieces left.
    #[tokio::test]
    async fn a_body_in_small_pieces_is_refused_one_past_the_limit_and_read_no_further() {
        let b = bodies(1 << 20).small_pieces(100);
        let far = Instant::now() + Duration::from_secs(60);
        // `left` one-byte frames, each counted in `read` as it is polled.
        let drip = |left: usize| {
            let read = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let counted = read.clone();
            let body = Body::from_stream(futures_util::stream::iter((0..left).map(move |_| {
                counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Ok::<_, std::io::Error>(Bytes::from_static(b" "))
            })));
            (body, read)
        };
        let frames = |read: &Arc<std::sync::atomic::AtomicUsize>| {
            read.load(std::sync::atomic::Ordering::Relaxed)
        };
        let (body, read) = drip(100);
        let r = b.read(&HeaderMap::new(), body, 1 << 20, far).await;
        assert_eq!(r.unwrap().bytes.len(), 100);
        assert_eq!(frames(&read), 100);
        let (body, read) = drip(10_000);
        let r = b.read(&HeaderMap::new(), body, 1 << 20, far).await;
        assert_eq!(r.err(), Some(BodyError::TooManyPieces(100)));
        assert_eq!(frames(&read), 101);
        assert_eq!(b.metrics.trips(Limit::BodySmallPieces), 1);
        // Past a 10-byte size limit at the 11th piece, then drained: 90 pieces are left of the
        // 100, and the drain stops at the one past them.
        let (body, read) = drip(10_000);
        let r = b.read(&HeaderMap::new(), body, 10, far).await;
        assert_eq!(r.err(), Some(BodyError::TooLarge));
        assert_eq!(frames(&read), 11 + 91);
        // Pieces of 512 bytes are not small.
        let big =
            Body::from_stream(futures_util::stream::iter((0..200).map(|_| {
                Ok::<_, std::io::Error>(Bytes::from(vec![b' '; SMALL_PIECE_BYTES]))
            })));
        let r = b.read(&HeaderMap::new(), big, 1 << 20, far).await;
        assert_eq!(r.unwrap().bytes.len(), 200 * SMALL_PIECE_BYTES);
    }

    fn bodies(budget: usize) -> Bodies {
        Bodies::new(budget, Metrics::default())
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_never_finishes_times_out_at_the_deadline() {
        let b = bodies(1 << 20);
        let body = Body::new(Stalled(Some(Bytes::from_static(b"{\"jsonrpc\""))));
        let deadline = Instant::now() + Duration::from_secs(10);
        let r = b.read(&length(4096), body, 4096, deadline).await;
        assert_eq!(r.err(), Some(BodyError::TimedOut));
        assert_eq!(Instant::now(), deadline);
        assert_eq!(b.metrics.trips(Limit::BodyTimeout), 1);
        // Its share of the budget is back.
        assert_eq!(b.budget.available_permits(), 1024);
    }

    /// A call's body is read within its call's deadline too: when that comes first and passes,
    /// the body is refused and counted under the call deadline's name, not the body timeout's
    /// (an operator who set a 30 s body timeout was told 2 s later that it had fired).
    #[tokio::test(start_paused = true)]
    async fn a_body_cut_by_its_calls_deadline_is_not_reported_as_the_body_timeout() {
        let b = bodies(1 << 20);
        let stalled = || Body::new(Stalled(Some(Bytes::from_static(b"{\"jsonrpc\""))));
        let start = Instant::now();
        let call_deadline = start + Duration::from_secs(2);
        let r = b
            .read_for_call(
                &length(4096),
                stalled(),
                4096,
                Duration::from_secs(30),
                call_deadline,
            )
            .await;
        assert_eq!(r.err(), Some(BodyError::PastCallDeadline));
        assert_eq!(Instant::now(), call_deadline);
        assert_eq!(
            (
                b.metrics.trips(Limit::CallDeadline),
                b.metrics.trips(Limit::BodyTimeout)
            ),
            (1, 0)
        );
        let rest = rest_error(BodyError::PastCallDeadline, 4096);
        assert_eq!(rest.status, StatusCode::REQUEST_TIMEOUT);
        assert_eq!(
            PAST_CALL_DEADLINE,
            "request body not received within the call's deadline ([limits] call_deadline_ms)"
        );
        // The body timeout first: its own name.
        let start = Instant::now();
        let r = b
            .read_for_call(
                &length(4096),
                stalled(),
                4096,
                Duration::from_secs(1),
                start + Duration::from_secs(20),
            )
            .await;
        assert_eq!(r.err(), Some(BodyError::TimedOut));
        assert_eq!(Instant::now(), start + Duration::from_secs(1));
        assert_eq!(
            (
                b.metrics.trips(Limit::CallDeadline),
                b.metrics.trips(Limit::BodyTimeout)
            ),
            (1, 1)
        );
        assert_eq!(b.budget.available_permits(), 1024);
    }

    #[tokio::test]
    async fn declared_or_streamed_bodies_over_the_limit_are_refused() {
        let b = bodies(1 << 20);
        let far = Instant::now() + Duration::from_secs(60);
        let r = b
            .read(&length(11), Body::from(vec![b'x'; 11]), 10, far)
            .await;
        assert_eq!(r.err(), Some(BodyError::TooLarge));
        let r = b
            .read(&HeaderMap::new(), Body::from(vec![b'x'; 11]), 10, far)
            .await;
        assert_eq!(r.err(), Some(BodyError::TooLarge));
        assert_eq!(b.metrics.trips(Limit::BodySize), 2);
        let r = b
            .read(&length(10), Body::from(vec![b'x'; 10]), 10, far)
            .await;
        assert_eq!(r.unwrap().bytes.len(), 10);
        assert_eq!(describe(4 * 1024 * 1024), "4 MiB");
        assert_eq!(describe(1000), "1000 bytes");
    }

    /// `headers` sent by the session whose credential is 64 × `c`.
    fn from(c: char, mut headers: HeaderMap) -> HeaderMap {
        let token = c.to_string().repeat(64);
        headers.insert(
            axum::http::header::AUTHORIZATION,
            format!("Bearer {token}").parse().unwrap(),
        );
        headers
    }

    #[tokio::test]
    async fn bodies_past_the_shared_budget_are_refused_at_once() {
        let b = bodies(8 * KIB);
        let far = Instant::now() + Duration::from_secs(60);
        let big = |n: usize| UNCOUNTED_BYTES + n * KIB;
        let body = |n: usize| Body::from(vec![b'x'; n]);
        // Larger than a credential's share (2 KiB): all of the share, the rest of the budget.
        let first = b
            .read(&from('a', length(big(6))), body(big(6)), 1 << 20, far)
            .await
            .unwrap();
        // Declared: refused before reading.
        let r = b
            .read(&from('b', length(big(4))), body(big(4)), 1 << 20, far)
            .await;
        assert_eq!(r.err(), Some(BodyError::Busy(Busy::Budget)));
        // Undeclared: refused as it grows.
        let r = b
            .read(&from('c', HeaderMap::new()), body(big(4)), 1 << 20, far)
            .await;
        assert_eq!(r.err(), Some(BodyError::Busy(Busy::Budget)));
        assert_eq!(b.metrics.trips(Limit::BodyBudget), 2);
        // Small bodies are never refused for the budget.
        let r = b
            .read(
                &from('a', length(UNCOUNTED_BYTES)),
                body(UNCOUNTED_BYTES),
                1 << 20,
                far,
            )
            .await;
        assert_eq!(r.unwrap().bytes.len(), UNCOUNTED_BYTES);
        drop(first);
        let r = b
            .read(&from('d', HeaderMap::new()), body(big(8)), 1 << 20, far)
            .await;
        assert_eq!(r.unwrap().bytes.len(), big(8));
        assert_eq!(b.metrics.trips(Limit::BodyShare), 0);
    }

    #[tokio::test]
    async fn one_credential_holds_at_most_a_quarter_of_the_budget() {
        let b = bodies(64 * KIB);
        let far = Instant::now() + Duration::from_secs(60);
        let big = |n: usize| UNCOUNTED_BYTES + n * KIB;
        let read = |c: char, declared: bool, n: usize| {
            let headers = from(
                c,
                if declared {
                    length(big(n))
                } else {
                    HeaderMap::new()
                },
            );
            let b = b.clone();
            async move {
                b.read(&headers, Body::from(vec![b'x'; big(n)]), 1 << 20, far)
                    .await
            }
        };
        let a1 = read('a', true, 10).await.unwrap();
        // A second body of the same credential would pass its 16 KiB share.
        let r = read('a', true, 10).await;
        assert_eq!(r.err(), Some(BodyError::Busy(Busy::Share)));
        assert_eq!(b.metrics.trips(Limit::BodyShare), 1);
        // However its header spells the credential.
        let mut respelled = length(big(10));
        respelled.insert(
            axum::http::header::AUTHORIZATION,
            format!("Bearer\t  {}", "a".repeat(64)).parse().unwrap(),
        );
        let r = b
            .read(&respelled, Body::from(vec![b'x'; big(10)]), 1 << 20, far)
            .await;
        assert_eq!(r.err(), Some(BodyError::Busy(Busy::Share)));
        // Others are not refused for it, and the rest of its share is still its own.
        let b1 = read('b', true, 10).await.unwrap();
        let a2 = read('a', false, 6).await.unwrap();
        // One body larger than a share takes all of it, and the rest from the budget.
        let c1 = read('c', true, 30).await.unwrap();
        assert_eq!(b.budget.available_permits(), 64 - 10 - 10 - 6 - 30);
        let r = read('c', false, 1).await;
        assert_eq!(r.err(), Some(BodyError::Busy(Busy::Share)));
        assert_eq!(b.metrics.trips(Limit::BodyShare), 3);
        // Everything comes back when the bodies are dropped.
        drop((a1, a2, b1, c1));
        assert_eq!(b.budget.available_permits(), 64);
        assert_eq!(b.shares.holders(), 0);
        assert_eq!(b.metrics.body_bytes_in_flight(), 0);
        let whole_share = read('a', false, 16).await.unwrap();
        assert_eq!(whole_share.bytes.len(), big(16));
    }
}
