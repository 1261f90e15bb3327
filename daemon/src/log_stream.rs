//! The log, live: `GET /v1/log/stream` (Server-Sent Events, one `entry` event per new entry)
//! and `GET /v1/log/summaries` (the same summaries, a page at a time).
//!
//! # How new entries are noticed
//!
//! The store's writer raises its [`broker_core::commit_signal::CommitSignal`] after every
//! durable group commit; the [`LogStreamHub`] turns that into a `tokio::sync::watch` bump (a
//! few nanoseconds on the writer thread). A stream that has caught up waits on the watch, then
//! reads what is new in its own read transaction. A burst of commits wakes it once.
//!
//! # Why a slow client costs nothing
//!
//! A stream holds no queue of events: each batch (at most [`STREAM_BATCH`] summaries) is read
//! from the log when the HTTP layer asks for the next event, and the HTTP layer asks only when
//! the connection can take more. A reader that may see few of the entries (an agent replaying a
//! log made of other episodes') would otherwise read batch after batch with nothing to send,
//! never handing the HTTP layer anything: one such step could scan a million-entry log (about
//! 7 s of a core) for a client that reads nothing, or has gone. So one step examines at most
//! [`QUIET_SCAN`] positions (as many as one `GET /v1/log` page, [`MAX_LOG_SCAN`]); when they
//! held nothing to send, the stream sends a comment line instead, and reads on only when the
//! HTTP layer asks again: a client gone, shutdown, the connection's flow control and the send
//! deadline then stop it as they stop a stream of entries (a comment is a few bytes, so the
//! kernel's buffers take many before flow control holds it). A client that stops reading leaves its stream parked behind a
//! full socket holding at most one batch; the entries it has not read stay where they always
//! are, in the log, and it resumes exactly where it stopped. No event is ever dropped, so no
//! gap needs marking. Open streams are capped (`[server] log_streams`, 32 by default), and
//! capped again for one agent episode (`log_streams_per_episode`, 4), so that one session
//! opening streams it never reads cannot take every other follower's place (operators and open
//! reads share only the global cap). A stream whose client stops reading while entries keep coming is cut by
//! the edge's send deadline ([`crate::edge::send`]).
//!
//! # Resuming
//!
//! Each event's `id` is its entry index, a space and its entry hash (`17202 sha256:…`). A
//! client that reconnects with `Last-Event-ID: N H` resumes at entry `N + 1` when entry `N` is
//! still the entry `H` it saw; when it is not (the log was rolled back, e.g. a restore from a
//! backup, and index `N` may hold another entry or none), the stream sends one `rewound` event
//! and ends, since resuming by index would silently skip the new entries at the reused indexes.
//! The hash chain makes one entry's hash vouch for every entry before it. A bare index
//! (`Last-Event-ID: N`) resumes at `N + 1` unchecked, as before. `?from=N` starts at entry `N`
//! (for clients that cannot set headers; `Last-Event-ID` wins when both are sent). Without
//! either, the stream starts after the current head: only new entries.
//!
//! A row that no longer decodes as an entry cannot be an event: the stream sends the entries
//! before it, then one `error` event (`Damaged`, with the row's `index`) and ends; the client
//! resumes past it with `?from=I+1` or `Last-Event-ID: I`.
//!
//! # Who sees what
//!
//! Entries are filtered by [`crate::visibility`]. A session's credential is checked again
//! before every batch, and by a caught-up stream when it expires and every
//! [`CREDENTIAL_RECHECK`] (a revocation made by another process commits nothing this daemon
//! sees): when it is revoked or expires, the stream sends one `error` event with the REST
//! error envelope and ends, freeing its places.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use broker_core::access::MAX_LOG_SCAN;
use broker_core::log::{self, LogError};
use broker_core::object::Ref;
use broker_core::store::Store;
use futures_util::stream::{BoxStream, StreamExt};
use serde_json::{json, Value};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

use crate::extract::Params;
use crate::log_summary::{self, Summary};
use crate::metrics::{Limit, Metrics};
use crate::quota::{Held, Quota};
use crate::rest::{page_limit, ApiError};
use crate::state::AppState;
use crate::visibility::{self, Reader};

/// Summaries one stream reads from the log at a time (and so holds at most).
pub const STREAM_BATCH: usize = 64;
/// A comment line is sent after this long without an event, so idle connections stay open
/// and a dead peer is noticed.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// How often a caught-up stream looks its credential up again while nothing is committed: a
/// credential revoked by `worldd session revoke` (another process, whose commit this daemon's
/// commit signal does not see) ends its streams within this, and frees their places.
pub const CREDENTIAL_RECHECK: Duration = Duration::from_secs(5);
/// Most log positions one step of a stream examines without an event to send; then it sends a
/// comment line and waits for the HTTP layer to ask again.
pub const QUIET_SCAN: u64 = MAX_LOG_SCAN;

struct HubInner {
    commits: Arc<watch::Sender<u64>>,
    closed: watch::Sender<bool>,
    slots: Arc<Semaphore>,
    /// The global cap `slots` was made with.
    limit: usize,
    /// Open streams per agent episode.
    per_episode: Quota<String>,
    produced: AtomicU64,
    /// Log positions read by all streams.
    positions_read: AtomicU64,
    metrics: Metrics,
}

/// What all streams of one daemon share: the commit watch, the shutdown switch, the slots.
#[derive(Clone)]
pub struct LogStreamHub {
    inner: Arc<HubInner>,
}

impl LogStreamHub {
    /// A hub fed by `store`'s commit signal, for at most `limit` open streams and
    /// `per_episode` of one agent episode; refusals are counted in `metrics`.
    pub fn new(store: &Store, limit: usize, per_episode: usize, metrics: Metrics) -> LogStreamHub {
        let commits = Arc::new(watch::channel(0u64).0);
        let tx = commits.clone();
        store
            .commit_signal()
            .listen(move || tx.send_modify(|n| *n = n.wrapping_add(1)));
        LogStreamHub {
            inner: Arc::new(HubInner {
                commits,
                closed: watch::channel(false).0,
                slots: Arc::new(Semaphore::new(limit)),
                limit,
                per_episode: Quota::new(per_episode),
                produced: AtomicU64::new(0),
                positions_read: AtomicU64::new(0),
                metrics,
            }),
        }
    }

    /// End every open stream and refuse new ones (graceful shutdown: open streams would
    /// otherwise keep their connections, and the daemon, alive).
    pub fn close(&self) {
        self.inner.closed.send_replace(true);
    }

    /// Streams open now.
    pub fn open_streams(&self) -> usize {
        self.inner.limit - self.inner.slots.available_permits()
    }

    /// `entry` events handed to the HTTP layer so far, over all streams.
    pub fn events_produced(&self) -> u64 {
        self.inner.produced.load(Ordering::Relaxed)
    }

    /// Log positions read so far, over all streams: entries sent and entries the reader may
    /// not see alike.
    pub fn positions_read(&self) -> u64 {
        self.inner.positions_read.load(Ordering::Relaxed)
    }
}

/// The stream, with limits of its own.
pub fn routes() -> Router<AppState> {
    Router::new().route("/v1/log/stream", get(stream))
}

/// The summaries: a read that takes its client's turn ([`crate::edge::turns`]).
pub fn read_routes() -> Router<AppState> {
    Router::new().route("/v1/log/summaries", get(summaries))
}

/// What a `Last-Event-ID` the stream cannot read is refused with.
const LAST_EVENT_ID: &str = "Last-Event-ID must be an entry index (a non-negative integer), optionally followed by a space and that entry's hash";

/// `Last-Event-ID`: an index, or an index and the entry hash the client saw there (the event
/// ids this stream sends).
fn parse_last_event_id(text: &str) -> Result<(u64, Option<Ref>), ApiError> {
    let text = text.trim();
    let (index, hash) = match text.split_once(' ') {
        Some((i, h)) => (i, Some(h.trim_start())),
        None => (text, None),
    };
    let index = index
        .trim()
        .parse()
        .map_err(|_| ApiError::bad_request(LAST_EVENT_ID))?;
    let hash = hash
        .map(|h| {
            h.parse::<Ref>().map_err(|e| {
                ApiError::bad_request(format!(
                    "Last-Event-ID: the entry hash after the index: {e}"
                ))
            })
        })
        .transpose()?;
    Ok((index, hash))
}

fn parse_index(text: &str, what: &str) -> Result<u64, ApiError> {
    text.trim()
        .parse()
        .map_err(|_| ApiError::bad_request(format!("{what} must be a non-negative integer")))
}

async fn summaries(
    State(state): State<AppState>,
    headers: HeaderMap,
    Params(q): Params,
) -> Result<Json<Value>, ApiError> {
    let reader = visibility::reader_of_request(&state, &headers).await?;
    let from = q.get("from").map(|s| parse_index(s, "from")).transpose()?;
    let limit = page_limit(&q)?;
    let store = state.store().clone();
    let page = crate::durable_answers::spawn_read(move || {
        store.read(|r| log_summary::page(r, from, limit, &reader))
    })
    .await
    .map_err(|e| ApiError::internal("summaries task", e))??;
    let mut answer = json!({
        "items": page.items.iter().map(Summary::to_json).collect::<Vec<_>>(),
        "from": page.from,
        "next": page.next,
        "head": page.head,
    });
    // Only when there is damage to name: the page of an intact log is as it always was.
    if !page.damaged.is_empty() {
        answer["damaged"] = page
            .damaged
            .iter()
            .map(log_summary::Damaged::to_json)
            .collect();
    }
    Ok(Json(answer))
}

/// One open stream.
struct Follow {
    state: AppState,
    /// The credential to check again before each batch (`None` under `--open-reads`).
    auth: Option<HeaderMap>,
    reader: Reader,
    next: u64,
    /// Positions read since the HTTP layer last asked for an event ([`QUIET_SCAN`] at most).
    quiet: u64,
    pending: VecDeque<Summary>,
    commits: watch::Receiver<u64>,
    closed: watch::Receiver<bool>,
    /// The credential's `expiresAt` when it was last found live: a caught-up stream wakes
    /// when it passes, and ends.
    expires_at: Option<i64>,
    ended: bool,
    _slot: OwnedSemaphorePermit,
    _episode_slot: Option<Held<String>>,
}

/// An event's id: the entry's index and hash, so a client resuming with it can be told that
/// the log it followed was rolled back.
fn event_id(s: &Summary) -> String {
    format!("{} {}", s.index(), s.entry.entry_hash)
}

fn entry_event(s: &Summary) -> Event {
    Event::default()
        .id(event_id(s))
        .event("entry")
        .data(s.to_json().to_string())
}

fn error_event(e: ApiError) -> Event {
    Event::default()
        .event("error")
        .data(json!({"error": {"class": e.class, "message": e.message}}).to_string())
}

/// The last event of a stream whose read reached a row that no longer decodes: the REST
/// envelope of `GET /v1/log/{index}` for that row, plus the row's `index`, so a client can
/// resume past it without parsing the message.
fn damaged_event(d: &log_summary::Damaged) -> Event {
    let e = ApiError::damaged_entry(d.index, &d.cause);
    Event::default().event("error").data(
        json!({"error": {"class": e.class, "message": e.message, "index": d.index}}).to_string(),
    )
}

/// The one event of a stream resumed from an entry the log no longer holds: entry `index` is
/// now `now` (another hash, or none), not the `seen` the client's `Last-Event-ID` named.
fn rewound_event(index: u64, seen: &Ref, now: Option<Ref>, head: Option<u64>) -> Event {
    let what = match now {
        Some(h) => format!("entry {index} is now {h}"),
        None => format!("there is no entry {index} now"),
    };
    Event::default().event("rewound").data(
        json!({
            "entryIndex": index,
            "seen": seen,
            "now": now,
            "head": head,
            "message": format!(
                "entry {index} is no longer the one this client saw ({seen}): {what}; the log \
                 was rolled back (a restore from a backup?), so entries this client saw may no \
                 longer exist and new ones may stand at their indexes; re-read the log from an \
                 index you trust"
            ),
        })
        .to_string(),
    )
}

impl Follow {
    /// How long a caught-up stream waits before it looks its credential up again: until just
    /// past its expiry (a credential is live while `now <= expiresAt`, in whole seconds), and
    /// never longer than [`CREDENTIAL_RECHECK`].
    fn recheck_in(&self) -> Duration {
        let Some(expires_at) = self.expires_at else {
            return CREDENTIAL_RECHECK;
        };
        let now = self.state.coordinator().now();
        let left = u64::try_from(expires_at.saturating_sub(now).saturating_add(1)).unwrap_or(0);
        CREDENTIAL_RECHECK.min(Duration::from_secs(left))
    }

    /// The next event, reading the log only when the previous batch has been sent.
    async fn step(mut self) -> Option<(Result<Event, Infallible>, Follow)> {
        // The HTTP layer asked: a new step may read its own share of positions.
        self.quiet = 0;
        loop {
            if self.ended {
                return None;
            }
            if let Some(s) = self.pending.pop_front() {
                let hub = self.state.log_stream();
                hub.inner.produced.fetch_add(1, Ordering::Relaxed);
                let event = entry_event(&s);
                return Some((Ok(event), self));
            }
            if *self.closed.borrow() {
                return None;
            }
            if let Some(h) = &self.auth {
                match self.state.authenticate(h).await {
                    Ok(session) => self.expires_at = Some(session.expires_at),
                    Err(f) => {
                        self.ended = true;
                        return Some((Ok(error_event(ApiError::from_auth(f))), self));
                    }
                }
            }
            // Mark the commits seen *before* reading, so one that lands during the read wakes
            // the wait below instead of being missed.
            self.commits.borrow_and_update();
            let store = self.state.store().clone();
            let (from, reader) = (self.next, self.reader.clone());
            // Never past this step's share, so one step reads at most `QUIET_SCAN` positions.
            let batch = STREAM_BATCH.min(
                usize::try_from(QUIET_SCAN.saturating_sub(self.quiet)).unwrap_or(STREAM_BATCH),
            );
            // A stream's body is read outside its request's task: it waits for its snapshot
            // itself, below.
            let read = tokio::task::spawn_blocking(move || {
                store.read(|r| {
                    log_summary::page(r, Some(from), batch, &reader)
                        .map(|page| (page, r.snapshot()))
                })
            })
            .await;
            let page = match read {
                Ok(Ok((mut page, snapshot))) => {
                    // A stream cannot carry a damaged position as an event (each event is one
                    // entry). The entries before it are sent as ever; the stream stops reading
                    // there, and ends saying which position only when a read starts at it, so
                    // a client resuming past it (`?from=I+1`) has missed nothing before it.
                    if let Some(d) = page.damaged.first() {
                        if d.index == from {
                            self.ended = true;
                            return Some((Ok(damaged_event(d)), self));
                        }
                        let at = d.index;
                        page.items.retain(|s| s.index() < at);
                        page.next = at;
                    }
                    // No entry leaves before the disk has it (`crate::durable_answers`).
                    if !page.items.is_empty() {
                        crate::durable_answers::wait_durable(self.state.store(), snapshot).await;
                    }
                    page
                }
                Ok(Err(e)) => {
                    self.ended = true;
                    return Some((Ok(error_event(ApiError::internal("log stream", e))), self));
                }
                Err(e) => {
                    self.ended = true;
                    return Some((Ok(error_event(ApiError::internal("log stream", e))), self));
                }
            };
            let read = page.next.saturating_sub(from);
            self.state
                .log_stream()
                .inner
                .positions_read
                .fetch_add(read, Ordering::Relaxed);
            self.quiet += read;
            self.next = page.next;
            self.pending.extend(page.items);
            if self.pending.is_empty() && self.next <= page.head && self.quiet >= QUIET_SCAN {
                // Nothing to send after a step's share of positions: hand the HTTP layer a
                // comment, so the next share is read only when the connection takes it.
                let comment = format!("read to {}", self.next);
                return Some((Ok(Event::default().comment(comment)), self));
            }
            if self.pending.is_empty() && self.next > page.head {
                // Caught up: wait for a commit, for shutdown, or for the credential to be
                // looked up again (its expiry, or the next recheck for a revocation).
                let recheck = self.recheck_in();
                tokio::select! {
                    changed = self.commits.changed() => {
                        if changed.is_err() {
                            return None;
                        }
                    }
                    _ = self.closed.changed() => {}
                    () = tokio::time::sleep(recheck), if self.auth.is_some() => {}
                }
                // What is read next was committed since: paced by commits, not by the log's
                // length.
                self.quiet = 0;
            }
        }
    }
}

async fn stream(
    State(state): State<AppState>,
    headers: HeaderMap,
    Params(q): Params,
) -> Result<Response, ApiError> {
    let reader = visibility::reader_of_request(&state, &headers).await?;
    let resumed = crate::edge::fields::single(&headers, "last-event-id")
        .map_err(|_| ApiError::bad_request("Last-Event-ID must be sent once"))?;
    let (start, seen) = match resumed {
        Some(v) => {
            let text = v
                .to_str()
                .map_err(|_| ApiError::bad_request(LAST_EVENT_ID))?;
            let (index, hash) = parse_last_event_id(text)?;
            (Some(index.saturating_add(1)), hash.map(|h| (index, h)))
        }
        None => (
            q.get("from").map(|s| parse_index(s, "from")).transpose()?,
            None,
        ),
    };
    let hub = state.log_stream().clone();
    if *hub.inner.closed.borrow() {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "Unavailable",
            "the daemon is shutting down",
        ));
    }
    // The episode's place first, so an episode at its cap takes none of the global ones.
    let episode_slot = match &reader {
        Reader::Episode(episode) => {
            Some(hub.inner.per_episode.take(episode, 1).ok_or_else(|| {
                hub.inner.metrics.limit_tripped(Limit::LogStreamsPerEpisode);
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "Unavailable",
                    format!(
                        "too many open log streams for this episode: the limit is {}",
                        hub.inner.per_episode.cap()
                    ),
                )
            })?)
        }
        Reader::Everyone | Reader::Operator => None,
    };
    let slot = hub.inner.slots.clone().try_acquire_owned().map_err(|_| {
        hub.inner.metrics.limit_tripped(Limit::LogStreams);
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "Unavailable",
            format!(
                "too many open log streams: the limit is {}",
                hub.inner.limit
            ),
        )
    })?;
    let next = match start {
        Some(n) => n,
        None => {
            let store = state.store().clone();
            let head =
                crate::durable_answers::spawn_read(move || store.read(log_summary::head_index))
                    .await
                    .map_err(|e| ApiError::internal("log stream", e))??;
            head.map_or(0, |h| h + 1)
        }
    };
    let auth = match reader {
        Reader::Everyone => None,
        // A credential is checked again as the stream goes on: revoking it ends the stream.
        Reader::Operator | Reader::Episode(_) => {
            let mut h = HeaderMap::new();
            if let Some(v) = headers.get(axum::http::header::AUTHORIZATION) {
                h.insert(axum::http::header::AUTHORIZATION, v.clone());
            }
            Some(h)
        }
    };
    let follow = Follow {
        commits: hub.inner.commits.subscribe(),
        closed: hub.inner.closed.subscribe(),
        state,
        auth,
        reader,
        next,
        quiet: 0,
        pending: VecDeque::new(),
        expires_at: None,
        ended: false,
        _slot: slot,
        _episode_slot: episode_slot,
    };
    // Entry headers are public, so telling any reader whether entry N still has the hash it
    // names tells it nothing it could not read at /v1/log/{N}.
    let rewound = match seen {
        None => None,
        Some((index, seen)) => {
            let store = follow.state.store().clone();
            let (now, head) = crate::durable_answers::spawn_read(move || {
                store.read(|r| {
                    let now = log::entry(r, index)?.map(|e| e.entry_hash);
                    Ok::<_, LogError>((now, log::last_index(r)?))
                })
            })
            .await
            .map_err(|e| ApiError::internal("log stream", e))?
            .map_err(|e| ApiError::internal("log stream", e))?;
            (now != Some(seen)).then(|| rewound_event(index, &seen, now, head))
        }
    };
    let events: BoxStream<'static, Result<Event, Infallible>> = match rewound {
        // Said once, then the stream ends (its places with it): the client decides where to
        // read from again.
        Some(event) => futures_util::stream::once(async move { Ok(event) }).boxed(),
        None => futures_util::stream::unfold(follow, Follow::step).boxed(),
    };
    let mut response = Sse::new(events)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response();
    // Proxies must not hold events back.
    response
        .headers_mut()
        .insert("x-accel-buffering", HeaderValue::from_static("no"));
    // The events are an episode's log: not to be kept, as every other answer (the SSE default,
    // `no-cache`, only asks a cache to revalidate what it keeps).
    response.headers_mut().insert(
        axum::http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-store"),
    );
    Ok(response)
}
