//! The open connections: each one's slot under the connection limit, whether it has a request
//! in flight, and closing an idle one to make room for a new client at the limit.
//!
//! A new connection at the limit used to be closed at once. Then anyone who opened
//! `max_connections` sockets and sent nothing, or half a request head, locked every other
//! client out, and kept them out by reconnecting each time the header deadline closed a
//! socket. Now a new connection at the limit closes an idle connection instead (one with no
//! request in flight): first one whose refusal is only waiting for the rest of a small body
//! that has not come ([`super::linger`]), then one that never completed a request, oldest
//! first, then the one idle longest. Only when every connection has a request in flight, or
//! too many new ones already wait for room, is the new one closed at once. A keep-alive
//! connection closed this way costs its client a reconnect. The closed connection hands its
//! slot to the one it was closed for, so a new connection does not queue behind every one that
//! made room before it.
//!
//! A flood of connections that send nothing keeps the places to wait for room taken; a new
//! connection whose request has already arrived when it is accepted (as an HTTP client's does:
//! it writes its request as soon as it connects) may then wait in a few places kept for such
//! connections ([`for_senders`]), so that the flood cannot shut a new client out. A flood that
//! sends request heads takes those too; a new connection whose head has arrived with a
//! credential the daemon knows may then wait in as many places again (at least four, taken
//! from the general places under a limit of 256), kept for such connections
//! ([`for_credentials`]), which no flood without a session can take, and of which one
//! credential holds at most a quarter (at least one).
//!
//! A client's request may arrive a little after its connection is accepted (a client on a busy
//! machine writes it a few milliseconds after connecting), so a new connection on which nothing
//! has arrived, with every place it could wait in taken, is not closed at once: it may wait up
//! to [`FIRST_BYTES_WAIT`] for its first bytes in places kept for that ([`for_first_bytes`]),
//! and is then placed by what arrived, or closed if nothing has
//! ([`Connections::room_after_look`]).
//!
//! The registry keeps the idle connections in the order they are closed in, updated as each
//! one begins and ends a request, so that finding the one to close costs the same however many
//! are open. It used to look at every open connection for each new one at the limit: a flood
//! of connections that send nothing, each reconnecting as it is closed, then spent half the
//! daemon's CPU in that search (bench row 12, `docs/benchmarks.md`).
//!
//! One credential may have at most a quarter of the connections' requests in flight at once
//! ([`requests_share`]): a request of any kind holds its connection from its head until its
//! answer is sent, and waits of many kinds (a read's turn, a call's place in its episode's
//! queue, a body trickled in, an answer read slowly) hold it meanwhile. Without the share,
//! one credential sending slow reads on `max_connections` connections kept every one of them
//! busy (each read waiting up to `read_wait_ms` for its turn), and every other client was shut
//! out. A request past its credential's share is answered `503` at once
//! ([`REQUESTS_TEXT`]), and its connection counts as idle while it is (closed first to make
//! room, as a refusal waiting for a small body is), so that a client sending such requests
//! back to back, pipelined even, cannot keep the connection busy with them either.
//!
//! The same registry drains the daemon at shutdown: every connection is told to finish the
//! request it has in flight and close, and [`Connections::drain`] waits until all have. What
//! bounds that wait is each request's own deadline, and for its answer the send deadline,
//! which counts every wait without reset once the daemon drains ([`super::send`]).

use std::collections::{BTreeSet, HashMap};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes, HttpBody};
use axum::response::Response;
use hyper::body::{Frame, SizeHint};
use tokio::sync::{oneshot, watch, Notify, OwnedSemaphorePermit, Semaphore};

use crate::quota::{Held, Quota};

/// How long a new connection that closed an idle one waits for its slot (the idle one closes
/// as soon as it is told; a request that slipped in first has to finish).
pub const MAKE_ROOM_WAIT: Duration = Duration::from_secs(1);

/// The most new connections that may wait at once for an idle one to close ([`making_room`]).
pub const MAKING_ROOM: usize = 256;

/// New connections that may wait at once for an idle one to close, under a connection limit
/// of `limit`: a sixteenth of it, from 4 to [`MAKING_ROOM`]. Each holds a descriptor beside
/// the limit's, so the limit is kept this far below the descriptor limit too. Past it a new
/// connection is closed at once, so this is also how many a flood of new connections must
/// keep waiting to shut a new client out: at 32 under the default 4,096, thousands of idle
/// connections past the limit reset a new client's connection in four of nine bench runs
/// (rows 12 and 13), at 256 in none of six (`docs/benchmarks.md`).
pub fn making_room(limit: usize) -> usize {
    (limit / 16).clamp(4, MAKING_ROOM)
}

/// Places kept, besides [`making_room`]'s, for new connections that have sent bytes by the
/// time they are accepted: a quarter as many, at least 1. With every other place taken by a
/// flood of connections that sent nothing, a new HTTP client still got `Connection reset by
/// peer` on its first request in one run of bench row 12 with the daemon in a CPU group of its
/// own (`docs/benchmarks.md`).
pub fn for_senders(limit: usize) -> usize {
    (making_room(limit) / 4).max(1)
}

/// Places kept, besides the others, for new connections whose request head had arrived with
/// a credential the daemon knows when they were accepted: as many as [`for_senders`], and at
/// least [`MIN_FOR_CREDENTIALS`]. A flood of connections that each send a head and never
/// finish it takes every other place: against it, a client that connects for every call lost
/// 2–18 % of its calls at the default limit and three in four at a limit of 64 (bench rows 18
/// and 19, `docs/benchmarks.md`), and none with these places. A flood without a session
/// cannot take them, and one credential holds at most [`credential_share`] of them.
pub fn for_credentials(limit: usize) -> usize {
    for_senders(limit).max(MIN_FOR_CREDENTIALS)
}

/// The fewest places kept for new connections whose head carries a known credential. Below a
/// limit of 256 there was one, and one credential's share of it (at least 1) was all of it: a
/// session reconnecting on more connections than the limit held it nearly always, and another
/// client that connects for every call found no place and was closed at once (88–95 of 100
/// calls lost at a limit of 64, `connection_churn_at_the_limit.rs`). With four, one credential
/// holds one and leaves three. They are taken from the general places ([`general_places`]), so
/// that the descriptors kept beside the limit are as many as before.
pub const MIN_FOR_CREDENTIALS: usize = 4;

/// The places any new connection may wait for room in, whatever it has sent: [`making_room`]'s,
/// less those [`for_credentials`] keeps past [`for_senders`]'s number (none from a limit of
/// 256), at least 1.
pub fn general_places(limit: usize) -> usize {
    let extra = for_credentials(limit) - for_senders(limit);
    making_room(limit).saturating_sub(extra).max(1)
}

/// The most of [`for_credentials`]'s places one credential holds at once: a quarter, at least
/// 1, as with the edge's other shares. Past it, its connection may still take a place kept for
/// connections that have sent bytes.
pub fn credential_share(limit: usize) -> usize {
    (for_credentials(limit) / 4).max(1)
}

/// How long a new connection on which nothing had arrived, with every place to wait for room
/// taken, waits for its first bytes ([`for_first_bytes`]). A client writes its request as soon
/// as it connects; on a busy machine it may write it milliseconds later, and those connections
/// were then closed at once (bench row 20, `docs/benchmarks.md`).
pub const FIRST_BYTES_WAIT: Duration = Duration::from_millis(100);

/// Places kept for new connections waiting up to [`FIRST_BYTES_WAIT`] for their first bytes
/// when every place to wait for room is taken: four times as many as [`making_room`]'s. A
/// flood that writes its heads a few milliseconds after connecting takes them too, for those
/// milliseconds. At a limit of 64, against 200 threads of such a flood, a client that connects
/// for every call lost 0.2–0.7 % of its calls with as many places as `making_room`'s, 0.1–0.2 %
/// with twice as many, and none with four times as many (`docs/benchmarks.md`). A flood of
/// connections that send nothing keeps them taken for the whole wait; a new connection on
/// which nothing has arrived is then closed at once, as it was before there were any.
pub fn for_first_bytes(limit: usize) -> usize {
    making_room(limit) * 4
}

/// The most requests one credential may have in flight at once, under a connection limit of
/// `limit`: a quarter, at least 1, as with the edge's other shares (the bodies being read,
/// the answer budget). Requests without a live credential are not counted here: the only one
/// of them that waits is a read under `--open-reads`, whose turns have a quarter of their
/// own ([`super::turns`]).
pub fn requests_share(limit: usize) -> usize {
    (limit / 4).max(1)
}

/// What a request past its credential's [`requests_share`] is told (`503`, `Retry-After: 1`).
pub const REQUESTS_TEXT: &str = "too many requests from this credential in flight (a quarter of [server] max_connections); retry shortly";

/// Marks a request past its credential's [`requests_share`]: the router answers it
/// [`REQUESTS_TEXT`] past its Host and Origin checks, with the headers every answer carries
/// ([`super::reply::within`]), and runs nothing else.
#[derive(Debug, Clone, Copy)]
pub struct OverShare;

/// Every descriptor a new connection may hold beside the limit while it waits for room.
pub fn waiting_places(limit: usize) -> usize {
    general_places(limit) + for_senders(limit) + for_credentials(limit) + for_first_bytes(limit)
}

/// What a new connection had sent when it was accepted, as far as the places to wait for room
/// go ([`Connections::room`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Arrived {
    /// Nothing yet.
    Nothing,
    /// Bytes, but not a request head carrying a credential the daemon knows.
    Bytes,
    /// A request head with one `Authorization` field whose credential names a live session:
    /// the session's credential id, by which its share of the places is kept.
    Credential(String),
}

/// A new connection's place among those waiting for room, and the share of the places it
/// counts against; both are given back when it is dropped. With [`Room::Made`], it also
/// receives the slot of the connection closed for it.
pub struct Waiting {
    _place: OwnedSemaphorePermit,
    _share: Option<Held<String>>,
    /// Where the slot of the connection closed for it arrives.
    handed_over: Option<oneshot::Receiver<OwnedSemaphorePermit>>,
}

/// A new connection's place among those waiting for its first bytes ([`for_first_bytes`]),
/// given back when it is dropped.
pub struct Looking {
    _place: OwnedSemaphorePermit,
}

/// Every open connection, under the limit.
pub struct Connections {
    slots: Arc<Semaphore>,
    /// Connections waiting for the slot of one they closed, at most [`general_places`].
    making_room: Arc<Semaphore>,
    /// Further places for new connections that had sent bytes when accepted ([`for_senders`]).
    for_senders: Arc<Semaphore>,
    /// Further places for new connections whose head had arrived with a known credential
    /// ([`for_credentials`]).
    for_credentials: Arc<Semaphore>,
    /// What each credential holds of them ([`credential_share`]).
    credential_shares: Quota<String>,
    /// Places for new connections waiting for their first bytes ([`for_first_bytes`]).
    for_first_bytes: Arc<Semaphore>,
    registry: Arc<Mutex<Registry>>,
    /// Requests each credential has in flight ([`requests_share`]).
    requests: Quota<String>,
    next: AtomicU64,
    /// `true` once the daemon drains: a receiver made after that still sees it.
    shutdown: watch::Sender<bool>,
}

/// Where a new connection stands.
pub enum Room {
    /// A free slot, taken: the connection is registered.
    Free(Registered),
    /// The limit was reached and an idle connection was told to close: wait (at most
    /// [`MAKE_ROOM_WAIT`]) for its slot with [`Connections::slot`].
    Made(Waiting),
    /// Nothing has arrived on the new connection and every place to wait for room is taken:
    /// wait (at most [`FIRST_BYTES_WAIT`]) for its first bytes, then ask again with
    /// [`Connections::room_after_look`].
    Look(Looking),
    /// Every connection has a request in flight, or every place the new one may wait in is
    /// taken: close it at once.
    Full,
}

/// Where a new connection may wait for room.
enum Place {
    Wait(Waiting),
    Look(Looking),
}

/// Every open connection, and the idle ones in the order they are closed in to make room.
#[derive(Default)]
struct Registry {
    open: HashMap<u64, Arc<Conn>>,
    /// Each open connection that may be closed to make room, by [`State::eviction_order`]
    /// and id: the first is the next to close. Changed only with this lock held and then the
    /// connection's own, so it is always what the connections' states say.
    idle: BTreeSet<(Order, u64)>,
}

/// Where an idle connection stands in the order of closing: its rank, then since when.
type Order = (u8, Instant);

/// One connection's state, shared between its task, its requests and the registry.
pub struct Conn {
    id: u64,
    registry: Arc<Mutex<Registry>>,
    /// The requests each credential has in flight, shared by every connection.
    requests: Quota<String>,
    state: Mutex<State>,
    close: Notify,
}

#[derive(Debug)]
struct State {
    in_request: bool,
    /// The request's answer is ready, and waits only for the rest of a small body.
    lingering: bool,
    /// The request is past its credential's share of requests in flight: it is refused, and
    /// its connection may be closed meanwhile to make room.
    over_share: bool,
    /// A request of this connection was answered in full.
    served: bool,
    /// When the connection was opened or last finished a request.
    idle_since: Instant,
    /// Told to close to make room.
    closing: bool,
    /// Where its slot goes when it closes: to the connection it was closed for.
    heir: Option<oneshot::Sender<OwnedSemaphorePermit>>,
    /// Out of the registry: its slot is given up.
    gone: bool,
}

impl State {
    /// The order idle connections are closed in (smallest first), or `None` when this one
    /// is busy, already closing or gone.
    fn eviction_order(&self) -> Option<Order> {
        #[cfg(test)]
        tests::LOOKED_AT.with(|n| n.set(n.get() + 1));
        let closable = self.lingering || self.over_share;
        if self.gone || self.closing || (self.in_request && !closable) {
            return None;
        }
        let rank = match (closable, self.served) {
            (true, _) => 0,
            (false, false) => 1,
            (false, true) => 2,
        };
        Some((rank, self.idle_since))
    }
}

impl Conn {
    /// A request began; the connection is busy until the returned guard is dropped (keep it
    /// with the answer's body, [`InRequest::track`]).
    pub fn request(self: &Arc<Conn>) -> InRequest {
        self.update(|s| s.in_request = true);
        InRequest {
            conn: self.clone(),
            _share: None,
        }
    }

    /// A request of `credential` (the live session's credential id, if any) began: counted
    /// against the credential's [`requests_share`] and busy, as [`Conn::request`]; or, past
    /// the share, over it ([`InRequest::over_share`]), its connection closable all the while.
    pub fn request_of(self: &Arc<Conn>, credential: Option<&String>) -> InRequest {
        let Some(credential) = credential else {
            return self.request();
        };
        match self.requests.take(credential, 1) {
            Some(share) => {
                let mut request = self.request();
                request._share = Some(share);
                request
            }
            None => {
                // Both at once: the connection is never busy for a request it refuses.
                self.update(|s| {
                    s.in_request = true;
                    s.over_share = true;
                });
                InRequest {
                    conn: self.clone(),
                    _share: None,
                }
            }
        }
    }

    /// Closing this connection loses no answer worth waiting for: nothing was ever begun on
    /// it (it may hold part of a head), its answer waits only for a body that has not come,
    /// or its request is refused for its credential's share.
    pub fn nothing_to_finish(&self) -> bool {
        self.state
            .lock()
            .is_ok_and(|s| s.lingering || s.over_share || (!s.served && !s.in_request))
    }

    /// Change this connection's state, and its place among the idle ones with it. The
    /// registry's lock is taken first, as where a connection is chosen to close.
    fn update(&self, change: impl FnOnce(&mut State)) {
        if let Ok(mut registry) = self.registry.lock() {
            self.update_in(&mut registry, change);
        }
    }

    /// [`Conn::update`] with the registry's lock already held.
    fn update_in(&self, registry: &mut Registry, change: impl FnOnce(&mut State)) {
        let Ok(mut s) = self.state.lock() else {
            return;
        };
        let before = s.eviction_order();
        change(&mut s);
        registry.reorder(self.id, before, s.eviction_order());
    }
}

impl Registry {
    /// Move connection `id` in the order of closing from `before` to `after` (`None`: not
    /// among the idle ones).
    fn reorder(&mut self, id: u64, before: Option<Order>, after: Option<Order>) {
        if before == after {
            return;
        }
        if let Some(order) = before {
            self.idle.remove(&(order, id));
        }
        if let Some(order) = after {
            self.idle.insert((order, id));
        }
    }
}

/// A request in flight on its connection, and its place in its credential's share.
pub struct InRequest {
    conn: Arc<Conn>,
    _share: Option<Held<String>>,
}

impl Drop for InRequest {
    fn drop(&mut self) {
        self.conn.update(|s| {
            s.in_request = false;
            s.lingering = false;
            s.over_share = false;
            s.served = true;
            s.idle_since = Instant::now();
        });
    }
}

impl InRequest {
    /// The answer is ready and waits only for the rest of a small body (`true`), or no
    /// longer (`false`): meanwhile the connection may be closed to make room.
    pub fn lingering(&self, now: bool) {
        self.conn.update(|s| s.lingering = now);
    }

    /// Past its credential's [`requests_share`]: to be answered [`REQUESTS_TEXT`].
    pub fn over_share(&self) -> bool {
        self.conn.state.lock().is_ok_and(|s| s.over_share)
    }

    /// Keep the connection busy until `answer`'s body is sent (or dropped): a stream stays
    /// in flight for as long as it runs.
    pub fn track(self, answer: Response) -> Response {
        answer.map(|body| {
            Body::new(Tracked {
                body,
                _request: self,
            })
        })
    }
}

/// A response body that holds its request's [`InRequest`].
struct Tracked {
    body: Body,
    _request: InRequest,
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A connection's slot and its place in the registry; both are given up when this is
/// dropped.
pub struct Registered {
    pub conn: Arc<Conn>,
    slot: Option<OwnedSemaphorePermit>,
    /// Dropped with the connection, so [`Connections::drain`] knows when all are gone.
    shutdown: watch::Receiver<bool>,
}

impl Registered {
    /// Resolves once this connection is asked to close: to make room, or because the daemon
    /// drains.
    pub async fn told_to_close(&mut self) {
        tokio::select! {
            () = self.conn.close.notified() => {}
            _ = self.shutdown.wait_for(|draining| *draining) => {}
        }
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        let conn = &self.conn;
        let mut heir = None;
        if let Ok(mut registry) = conn.registry.lock() {
            registry.open.remove(&conn.id);
            // Out of the order of closing too; a request still held (its answer's body) finds
            // it gone and puts it back nowhere.
            conn.update_in(&mut registry, |s| {
                s.gone = true;
                heir = s.heir.take();
            });
        }
        // Closed to make room: the slot goes to the connection it was closed for. Had that one
        // given up waiting, the slot comes back here and is dropped into the pool.
        if let (Some(heir), Some(slot)) = (heir, self.slot.take()) {
            let _ = heir.send(slot);
        }
    }
}

impl Connections {
    pub fn new(limit: usize) -> Connections {
        Connections {
            slots: Arc::new(Semaphore::new(limit)),
            making_room: Arc::new(Semaphore::new(general_places(limit))),
            for_senders: Arc::new(Semaphore::new(for_senders(limit))),
            for_credentials: Arc::new(Semaphore::new(for_credentials(limit))),
            credential_shares: Quota::new(credential_share(limit)),
            for_first_bytes: Arc::new(Semaphore::new(for_first_bytes(limit))),
            registry: Arc::default(),
            requests: Quota::new(requests_share(limit)),
            next: AtomicU64::new(0),
            shutdown: watch::channel(false).0,
        }
    }

    /// A slot for a new connection, or room made for one by telling an idle connection to
    /// close. `arrived` says what the new connection has sent so far; it is asked only when
    /// every place of [`making_room`] is taken, and at most once.
    pub fn room(&self, arrived: impl FnOnce() -> Arrived) -> Room {
        self.room_for(arrived)
    }

    /// [`Connections::room`] for a connection that has waited for its first bytes in
    /// `looked`'s place ([`Room::Look`]): with still nothing arrived it takes a free slot if
    /// there is one, and is otherwise closed at once, neither offered another look nor a place
    /// to wait for room. A flood of connections that send nothing would otherwise have each
    /// close an idle connection after its wait: the legitimate client of bench row 12 made a
    /// quarter fewer calls that way.
    pub fn room_after_look(&self, looked: Looking, arrived: impl FnOnce() -> Arrived) -> Room {
        let room = match arrived() {
            Arrived::Nothing => self.free_slot().map_or(Room::Full, Room::Free),
            arrived => self.room_for(|| arrived),
        };
        // Held until the connection has its next place, so that it never holds none of them
        // while it still has a descriptor.
        drop(looked);
        room
    }

    fn room_for(&self, arrived: impl FnOnce() -> Arrived) -> Room {
        if let Some(registered) = self.free_slot() {
            return Room::Free(registered);
        }
        let mut waiting = match self.place_to_wait(arrived) {
            Some(Place::Wait(waiting)) => waiting,
            Some(Place::Look(looking)) => return Room::Look(looking),
            None => return Room::Full,
        };
        let Ok(mut registry) = self.registry.lock() else {
            return Room::Full;
        };
        // Told to close with the registry held, so that it cannot begin a request between
        // being chosen and being told.
        let victim = loop {
            let Some((_, id)) = registry.idle.pop_first() else {
                return Room::Full;
            };
            if let Some(c) = registry.open.get(&id) {
                break c.clone();
            }
        };
        if let Ok(mut s) = victim.state.lock() {
            s.closing = true;
            let (heir, handed_over) = oneshot::channel();
            s.heir = Some(heir);
            waiting.handed_over = Some(handed_over);
        }
        drop(registry);
        victim.close.notify_one();
        Room::Made(waiting)
    }

    /// A place to wait for room: a general one while they last, then one of those kept for
    /// what the connection has sent; with nothing sent, one to wait for its first bytes in
    /// (after such a wait, [`Connections::room_after_look`] never asks with nothing sent).
    fn place_to_wait(&self, arrived: impl FnOnce() -> Arrived) -> Option<Place> {
        let take = |places: &Arc<Semaphore>, share: Option<Held<String>>| {
            let place = places.clone().try_acquire_owned().ok()?;
            Some(Waiting {
                _place: place,
                _share: share,
                handed_over: None,
            })
        };
        if let Some(waiting) = take(&self.making_room, None) {
            return Some(Place::Wait(waiting));
        }
        let waiting = match arrived() {
            Arrived::Nothing => {
                let place = self.for_first_bytes.clone().try_acquire_owned().ok()?;
                return Some(Place::Look(Looking { _place: place }));
            }
            Arrived::Bytes => take(&self.for_senders, None),
            // Its own places first, within its share, so that it leaves the others to clients
            // without a session.
            Arrived::Credential(id) => self
                .credential_shares
                .take(&id, 1)
                .and_then(|share| take(&self.for_credentials, Some(share)))
                .or_else(|| take(&self.for_senders, None)),
        };
        waiting.map(Place::Wait)
    }

    /// The slot a connection that made room waits for (holding `waiting`, its place among
    /// those making room), registered; `None` after [`MAKE_ROOM_WAIT`] or at shutdown. It is
    /// the slot of the connection closed for it, handed over as that one closes, so that
    /// connections closed for others earlier do not go first; or any slot freed before that,
    /// as when the connection closed by itself before it was told (its slot then went back to
    /// the pool). A slot handed over too late goes back to the pool.
    pub async fn slot(&self, mut waiting: Waiting) -> Option<Registered> {
        let mut shutdown = self.shutdown.subscribe();
        let handed_over = waiting.handed_over.take();
        let taken = async {
            let freed = self.slots.clone().acquire_owned();
            match handed_over {
                Some(handed_over) => tokio::select! {
                    Ok(slot) = handed_over => Some(slot),
                    slot = freed => slot.ok(),
                },
                None => freed.await.ok(),
            }
        };
        let slot = tokio::select! {
            slot = tokio::time::timeout(MAKE_ROOM_WAIT, taken) => slot.ok()??,
            _ = shutdown.wait_for(|draining| *draining) => return None,
        };
        Some(self.enter(slot))
    }

    /// A free slot, taken and registered, if there is one.
    fn free_slot(&self) -> Option<Registered> {
        let slot = self.slots.clone().try_acquire_owned().ok()?;
        Some(self.enter(slot))
    }

    /// Enter a connection that holds `slot`. Registered at once, so that the next one at the
    /// limit can find it idle.
    fn enter(&self, slot: OwnedSemaphorePermit) -> Registered {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let state = State {
            in_request: false,
            lingering: false,
            over_share: false,
            served: false,
            idle_since: Instant::now(),
            closing: false,
            heir: None,
            gone: false,
        };
        let conn = Arc::new(Conn {
            id,
            registry: self.registry.clone(),
            requests: self.requests.clone(),
            close: Notify::new(),
            state: Mutex::new(state),
        });
        if let Ok(mut registry) = self.registry.lock() {
            registry.open.insert(id, conn.clone());
            let order = conn.state.lock().ok().and_then(|s| s.eviction_order());
            registry.reorder(id, None, order);
        }
        Registered {
            conn,
            slot: Some(slot),
            shutdown: self.shutdown.subscribe(),
        }
    }

    /// Resolves once the daemon drains. While this waits, [`Connections::drain`] waits for
    /// it too.
    pub async fn draining(&self) {
        let mut shutdown = self.shutdown.subscribe();
        let _ = shutdown.wait_for(|draining| *draining).await;
    }

    /// Tell every connection to finish what it has in flight and close, and wait until all
    /// have.
    pub async fn drain(&self) {
        self.shutdown.send_replace(true);
        self.shutdown.closed().await;
    }

    /// Connections open now.
    #[cfg(test)]
    fn open(&self) -> usize {
        self.registry.lock().map_or(0, |r| r.open.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        /// How many times a connection's state was looked at for its place in the order of
        /// closing, on this thread.
        pub(super) static LOOKED_AT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    /// What `task` returned, within 5 s (`what` says what that means).
    async fn joined<T>(task: tokio::task::JoinHandle<T>, what: &str) -> T {
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect(what)
            .unwrap()
    }

    /// Whether `r` was told to close to make room.
    fn closing(r: &Registered) -> bool {
        r.conn.state.lock().unwrap().closing
    }

    /// A connection that found a free slot.
    fn free(conns: &Connections) -> Registered {
        let Room::Free(registered) = conns.room(|| Arrived::Nothing) else {
            panic!("a free slot below the limit");
        };
        registered
    }

    #[tokio::test]
    async fn at_the_limit_a_new_connection_closes_the_idle_one_that_never_finished_a_request() {
        let conns = Connections::new(3);
        let mut held: Vec<Registered> = (0..3).map(|_| free(&conns)).collect();
        assert_eq!(conns.open(), 3);
        // The first has been served and is idle; the second never sent a whole request; the
        // third has one in flight.
        drop(held[0].conn.request());
        let busy = held[2].conn.request();
        let Room::Made(waiting) = conns.room(|| Arrived::Nothing) else {
            panic!("room made by closing an idle connection");
        };
        assert!(held[1].conn.state.lock().unwrap().closing);
        tokio::time::timeout(Duration::from_secs(1), held[1].told_to_close())
            .await
            .expect("the never-served connection is told to close");
        // Next the one served and idle; then nothing is idle. (Under a limit of 64 there is
        // one general place: these wait in those kept for what they sent.)
        assert!(matches!(conns.room(|| Arrived::Bytes), Room::Made(_)));
        assert!(held[0].conn.state.lock().unwrap().closing);
        let known = Arrived::Credential("1".repeat(64));
        assert!(matches!(conns.room(|| known), Room::Full));
        // A connection told to close gives its slot to the one waiting.
        drop(held.remove(1));
        assert!(conns.slot(waiting).await.is_some());
        assert_eq!(conns.open(), 2);
        drop(busy);
    }

    /// One credential sending requests on every connection kept them all busy. Past its share
    /// (a quarter of the limit) a request is refused, and its connection is the first closed
    /// to make room; requests without a credential are not counted.
    #[tokio::test]
    async fn a_request_past_its_credentials_share_is_refused_and_its_connection_closed_first() {
        let conns = Connections::new(8);
        assert_eq!(requests_share(8), 2);
        let held: Vec<Registered> = (0..8).map(|_| free(&conns)).collect();
        let (me, you) = ("1".repeat(64), "2".repeat(64));
        let a = held[0].conn.request_of(Some(&me));
        let b = held[1].conn.request_of(Some(&me));
        let theirs = held[2].conn.request_of(Some(&you));
        assert!(!a.over_share() && !b.over_share() && !theirs.over_share());
        let past = held[3].conn.request_of(Some(&me));
        assert!(past.over_share());
        assert!(held[3].conn.nothing_to_finish());
        let anonymous: Vec<InRequest> = held[4..].iter().map(|r| r.conn.request_of(None)).collect();
        assert!(anonymous.iter().all(|r| !r.over_share()));
        // Every other connection is busy: the refused one is closed, then none.
        assert!(matches!(conns.room(|| Arrived::Nothing), Room::Made(_)));
        assert!(closing(&held[3]));
        assert!(matches!(conns.room(|| Arrived::Nothing), Room::Full));
        // The share comes back as the credential's requests end.
        drop(a);
        let again = held[0].conn.request_of(Some(&me));
        assert!(!again.over_share());
        assert!(!held[0].conn.nothing_to_finish());
        drop((b, theirs, past, anonymous, again, held));
        assert_eq!(conns.requests.holders(), 0);
    }

    #[tokio::test]
    async fn a_refusal_waiting_for_a_body_that_does_not_come_makes_room_first() {
        let conns = Connections::new(3);
        let (first, second, waiting) = (free(&conns), free(&conns), free(&conns));
        let request = waiting.conn.request();
        assert!(!waiting.conn.nothing_to_finish());
        assert!(matches!(conns.room(|| Arrived::Nothing), Room::Made(_)));
        assert!(closing(&first), "the oldest of those never served");
        assert!(!closing(&waiting), "a request in flight");
        // Its answer now waits only for the rest of a small body: it goes before the second,
        // which never finished a request either and has been idle longer.
        request.lingering(true);
        assert!(waiting.conn.nothing_to_finish());
        assert!(matches!(conns.room(|| Arrived::Nothing), Room::Made(_)));
        assert!(closing(&waiting));
        assert!(!closing(&second));
        // Once its body came, the request is busy again.
        request.lingering(false);
        assert!(!waiting.conn.nothing_to_finish());
    }

    /// What a test does to the connections of [`the_order_of_closing_is_always_what_the_connections_states_say`].
    #[derive(Debug, Clone)]
    enum Step {
        /// A new connection: a free slot, or room made at the limit.
        Open,
        Begin(usize),
        Linger(usize, bool),
        End(usize),
        /// The connection closes; a request it had in flight may still be held.
        Close(usize),
    }

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        prop_oneof![
            3 => Just(Step::Open),
            2 => any::<usize>().prop_map(Step::Begin),
            1 => (any::<usize>(), any::<bool>()).prop_map(|(i, b)| Step::Linger(i, b)),
            2 => any::<usize>().prop_map(Step::End),
            2 => any::<usize>().prop_map(Step::Close),
        ]
    }

    /// Every open connection that may be closed to make room, found by looking at each.
    fn idle_by_looking(conns: &Connections) -> BTreeSet<(Order, u64)> {
        let registry = conns.registry.lock().unwrap();
        registry
            .open
            .iter()
            .filter_map(|(id, c)| Some((c.state.lock().unwrap().eviction_order()?, *id)))
            .collect()
    }

    proptest::proptest! {
        /// The registry keeps the idle connections in order instead of looking at every one
        /// for each new connection at the limit. Whatever the connections do, its order is
        /// what looking at each would find, and the one it closes is the first of them.
        #[test]
        fn the_order_of_closing_is_always_what_the_connections_states_say(
            steps in proptest::collection::vec(step(), 1..120),
        ) {
            let conns = Connections::new(6);
            let mut held: Vec<(Registered, Option<InRequest>)> = Vec::new();
            let mut orphans: Vec<InRequest> = Vec::new();
            for step in steps {
                let first = idle_by_looking(&conns).first().map(|(_, id)| *id);
                match step {
                    Step::Open => match conns.room(|| Arrived::Nothing) {
                        Room::Free(r) => held.push((r, None)),
                        Room::Made(_) => {
                            let id = first.expect("room made only with a connection idle");
                            let (victim, _) = held.iter().find(|(r, _)| r.conn.id == id).unwrap();
                            proptest::prop_assert!(closing(victim));
                        }
                        Room::Look(_) | Room::Full => proptest::prop_assert!(first.is_none()),
                    },
                    Step::Begin(i) if !held.is_empty() => {
                        let n = held.len();
                        let (r, request) = &mut held[i % n];
                        if request.is_none() {
                            *request = Some(r.conn.request());
                        }
                    }
                    Step::Linger(i, now) if !held.is_empty() => {
                        if let (_, Some(request)) = &held[i % held.len()] {
                            request.lingering(now);
                        }
                    }
                    Step::End(i) if !held.is_empty() => {
                        let n = held.len();
                        held[i % n].1 = None;
                    }
                    Step::End(_) => drop(orphans.pop()),
                    Step::Close(i) if !held.is_empty() => {
                        let (r, request) = held.remove(i % held.len());
                        drop(r);
                        orphans.extend(request);
                    }
                    _ => {}
                }
                let registry = conns.registry.lock().unwrap().idle.clone();
                proptest::prop_assert_eq!(registry, idle_by_looking(&conns));
            }
            drop(held);
            drop(orphans);
            proptest::prop_assert!(conns.registry.lock().unwrap().idle.is_empty());
            proptest::prop_assert_eq!(conns.open(), 0);
        }
    }

    /// Bench row 12's attack: thousands of connections that send nothing, each reopened as
    /// soon as it is closed, past the limit. Each new one closes the oldest; the registry used
    /// to find it by looking at every open connection, and the daemon spent half its CPU
    /// doing that. Now each is found without looking at the others.
    #[tokio::test]
    async fn a_flood_reconnecting_at_the_limit_finds_each_connection_to_close_without_looking_at_the_others(
    ) {
        let conns = Connections::new(4096);
        let mut held: std::collections::VecDeque<Registered> =
            (0..4096).map(|_| free(&conns)).collect();
        LOOKED_AT.set(0);
        for _ in 0..1000 {
            let Room::Made(waiting) = conns.room(|| Arrived::Nothing) else {
                panic!("room made at the limit");
            };
            let oldest = held.pop_front().unwrap();
            assert!(closing(&oldest), "the oldest is closed first");
            drop(oldest);
            held.push_back(conns.slot(waiting).await.expect("its slot"));
        }
        let looked = LOOKED_AT.get();
        assert!(
            looked <= 4 * 1000,
            "{looked} looks at connections' states for 1,000 new connections at a limit of 4,096"
        );
    }

    #[tokio::test]
    async fn the_idle_connection_closed_is_the_one_idle_longest() {
        let conns = Connections::new(2);
        let (a, b) = (free(&conns), free(&conns));
        drop(a.conn.request());
        std::thread::sleep(Duration::from_millis(5));
        drop(b.conn.request());
        assert!(matches!(conns.room(|| Arrived::Nothing), Room::Made(_)));
        assert!(a.conn.state.lock().unwrap().closing);
        assert!(!b.conn.state.lock().unwrap().closing);
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_that_made_room_waits_a_second_at_most() {
        let conns = Connections::new(1);
        let _held = free(&conns);
        let Room::Made(waiting) = conns.room(|| Arrived::Nothing) else {
            panic!("room made");
        };
        let started = tokio::time::Instant::now();
        assert!(conns.slot(waiting).await.is_none());
        assert_eq!(started.elapsed(), MAKE_ROOM_WAIT);
    }

    #[tokio::test]
    async fn at_most_making_room_new_connections_wait_for_room_at_once() {
        let conns = Connections::new(4096);
        let held: Vec<Registered> = (0..4096).map(|_| free(&conns)).collect();
        assert_eq!(making_room(4096), MAKING_ROOM);
        let waiting: Vec<Room> = (0..MAKING_ROOM)
            .map(|_| conns.room(|| Arrived::Nothing))
            .collect();
        assert!(waiting.iter().all(|r| matches!(r, Room::Made(_))));
        // Idle connections remain, but no more that sent nothing may wait for room.
        assert!(matches!(conns.room(|| Arrived::Nothing), Room::Look(_)));
        // A connection whose request has arrived takes one of the places kept for them, while
        // they last.
        assert_eq!(for_senders(4096), MAKING_ROOM / 4);
        let senders: Vec<Room> = (0..MAKING_ROOM / 4)
            .map(|_| conns.room(|| Arrived::Bytes))
            .collect();
        assert!(senders.iter().all(|r| matches!(r, Room::Made(_))));
        assert!(matches!(conns.room(|| Arrived::Bytes), Room::Full));
        drop(senders);
        assert!(matches!(conns.room(|| Arrived::Nothing), Room::Look(_)));
        assert!(matches!(conns.room(|| Arrived::Bytes), Room::Made(_)));
        drop(waiting);
        // The general places are taken first: `sent` is not even asked.
        assert!(matches!(
            conns.room(|| unreachable!("asked with a general place free")),
            Room::Made(_)
        ));
        drop(held);
    }

    #[tokio::test]
    async fn a_new_connection_with_nothing_arrived_waits_for_its_first_bytes_when_every_place_is_taken(
    ) {
        let conns = Connections::new(4096);
        let held: Vec<Registered> = (0..4096).map(|_| free(&conns)).collect();
        let mut general: Vec<Room> = (0..MAKING_ROOM)
            .map(|_| conns.room(|| Arrived::Nothing))
            .collect();
        let heads: Vec<Room> = (0..for_senders(4096))
            .map(|_| conns.room(|| Arrived::Bytes))
            .collect();
        assert!(matches!(conns.room(|| Arrived::Bytes), Room::Full));
        // Nothing has arrived: it may wait for its first bytes, while those places last. No idle
        // connection is told to close for it yet.
        assert_eq!(for_first_bytes(4096), 4 * MAKING_ROOM);
        let mut looks: Vec<Looking> = (0..4 * MAKING_ROOM)
            .map(|_| match conns.room(|| Arrived::Nothing) {
                Room::Look(looking) => looking,
                _ => panic!("a place to wait for first bytes"),
            })
            .collect();
        let closing = held
            .iter()
            .filter(|r| r.conn.state.lock().unwrap().closing)
            .count();
        assert_eq!(closing, MAKING_ROOM + for_senders(4096));
        assert!(matches!(conns.room(|| Arrived::Nothing), Room::Full));
        // Then it is placed by what arrived: a head with a known credential finds its place, one
        // without none, and with still nothing it is closed, never offered a second look.
        let known = Arrived::Credential("1".repeat(64));
        let looked = looks.pop().unwrap();
        assert!(matches!(
            conns.room_after_look(looked, || known.clone()),
            Room::Made(_)
        ));
        let looked = looks.pop().unwrap();
        assert!(matches!(
            conns.room_after_look(looked, || Arrived::Bytes),
            Room::Full
        ));
        // Still nothing: closed, though a place to wait for room is free again.
        drop(general.pop());
        let looked = looks.pop().unwrap();
        assert!(matches!(
            conns.room_after_look(looked, || Arrived::Nothing),
            Room::Full
        ));
        // The places given back are there for the next: the one to wait for room, then those
        // to wait for first bytes in.
        let again = (
            conns.room(|| Arrived::Nothing),
            conns.room(|| Arrived::Nothing),
        );
        assert!(matches!(again, (Room::Made(_), Room::Look(_))));
        drop((general, heads, looks, held, again));
    }

    #[tokio::test]
    async fn a_client_with_a_known_credential_finds_a_place_when_heads_without_one_take_the_rest() {
        let conns = Connections::new(4096);
        let held: Vec<Registered> = (0..4096).map(|_| free(&conns)).collect();
        let places = |n: usize, arrived: Arrived| -> Vec<Room> {
            (0..n).map(|_| conns.room(|| arrived.clone())).collect()
        };
        let made = |rooms: &[Room]| rooms.iter().all(|r| matches!(r, Room::Made(_)));
        let silent = places(MAKING_ROOM, Arrived::Nothing);
        let heads = places(for_senders(4096), Arrived::Bytes);
        assert!(made(&silent) && made(&heads));
        // A flood of heads without a session has taken every place it may wait in.
        assert!(matches!(conns.room(|| Arrived::Bytes), Room::Full));
        // Clients whose heads carry a credential the daemon knows still find places, those
        // kept for them, a quarter of them per credential.
        assert_eq!(for_credentials(4096), MAKING_ROOM / 4);
        assert_eq!(credential_share(4096), MAKING_ROOM / 16);
        let token = |i: usize| Arrived::Credential(format!("{i:064x}"));
        let known: Vec<Room> = (0..4)
            .flat_map(|i| places(credential_share(4096), token(i)))
            .collect();
        assert_eq!(known.len(), for_credentials(4096));
        assert!(made(&known));
        assert!(matches!(conns.room(|| token(4)), Room::Full));
        // They take their own places first, leaving those of clients without a session...
        drop((heads, known));
        let known: Vec<Room> = (0..4)
            .flat_map(|i| places(credential_share(4096), token(i)))
            .collect();
        let heads = places(for_senders(4096), Arrived::Bytes);
        assert!(made(&known) && made(&heads));
        assert!(matches!(conns.room(|| Arrived::Bytes), Room::Full));
        // ...and one of theirs once their own are gone.
        drop(heads);
        assert!(matches!(conns.room(|| token(4)), Room::Made(_)));
        drop((silent, known, held));
    }

    /// Below a limit of 256 one place was kept for credentials, and one credential's share was
    /// all of it: a session reconnecting past the limit held it, and every other client with a
    /// credential was closed at once. Four are kept, taken from the general places, so that as
    /// many descriptors as before are kept beside the limit.
    #[tokio::test]
    async fn at_a_low_limit_one_credential_leaves_other_credentials_places_to_wait_for_room() {
        let conns = Connections::new(64);
        let held: Vec<Registered> = (0..64).map(|_| free(&conns)).collect();
        assert_eq!(
            (making_room(64), for_senders(64), for_credentials(64)),
            (4, 1, 4)
        );
        assert_eq!((general_places(64), credential_share(64)), (1, 1));
        let alice = Arrived::Credential("1".repeat(64));
        // The general place, her share of the credentials' places, the senders' place: then
        // none.
        let hers: Vec<Room> = (0..3).map(|_| conns.room(|| alice.clone())).collect();
        assert!(hers.iter().all(|r| matches!(r, Room::Made(_))));
        assert!(matches!(conns.room(|| alice.clone()), Room::Full));
        // Three other credentials each still find a place.
        let others: Vec<Room> = (2..5)
            .map(|i| conns.room(|| Arrived::Credential(i.to_string().repeat(64))))
            .collect();
        assert!(others.iter().all(|r| matches!(r, Room::Made(_))));
        assert!(matches!(
            conns.room(|| Arrived::Credential("5".repeat(64))),
            Room::Full
        ));
        for limit in 1..=5000 {
            assert_eq!(
                waiting_places(limit),
                making_room(limit) + 2 * for_senders(limit) + for_first_bytes(limit),
                "descriptors kept beside a limit of {limit}"
            );
        }
        drop((hers, others, held));
    }

    #[tokio::test]
    async fn one_credential_holds_at_most_its_share_of_the_places_kept_for_credentials() {
        let conns = Connections::new(4096);
        let held: Vec<Registered> = (0..4096).map(|_| free(&conns)).collect();
        let silent: Vec<Room> = (0..MAKING_ROOM)
            .map(|_| conns.room(|| Arrived::Nothing))
            .collect();
        let one = Arrived::Credential("1".repeat(64));
        let mine: Vec<Room> = (0..credential_share(4096))
            .map(|_| conns.room(|| one.clone()))
            .collect();
        assert!(mine.iter().all(|r| matches!(r, Room::Made(_))));
        // Past its share it is a sender like any other: it takes their places while they last,
        // and leaves the rest of its own kind's to other credentials.
        let more: Vec<Room> = (0..for_senders(4096))
            .map(|_| conns.room(|| one.clone()))
            .collect();
        assert!(more.iter().all(|r| matches!(r, Room::Made(_))));
        assert!(matches!(conns.room(|| one.clone()), Room::Full));
        let other = Arrived::Credential("2".repeat(64));
        let theirs: Vec<Room> = (0..credential_share(4096))
            .map(|_| conns.room(|| other.clone()))
            .collect();
        assert!(theirs.iter().all(|r| matches!(r, Room::Made(_))));
        // Its share comes back as its places do.
        drop(mine);
        assert!(matches!(conns.room(|| one.clone()), Room::Made(_)));
        drop((silent, more, theirs, held));
    }

    #[tokio::test]
    async fn a_connection_that_made_room_takes_the_slot_of_the_one_it_closed() {
        let conns = Arc::new(Connections::new(2));
        let (first, second) = (free(&conns), free(&conns));
        // Each new connection closes the oldest idle one still open: the first, then the second.
        let Room::Made(early) = conns.room(|| Arrived::Nothing) else {
            panic!("room made");
        };
        // In the senders' place: the one general place is taken.
        let Room::Made(late) = conns.room(|| Arrived::Bytes) else {
            panic!("room made");
        };
        assert!(first.conn.state.lock().unwrap().closing);
        assert!(second.conn.state.lock().unwrap().closing);
        let wait = |waiting: Waiting| {
            let conns = conns.clone();
            tokio::spawn(async move { conns.slot(waiting).await })
        };
        let (early, late) = (wait(early), wait(late));
        tokio::task::yield_now().await;
        // The second closes first: its slot goes to the later connection, which closed it, not
        // to the one that has waited longest.
        drop(second);
        let late = joined(late, "the later connection has the slot it made").await;
        assert!(late.is_some());
        assert!(
            !early.is_finished(),
            "the earlier one still waits for its own"
        );
        drop(first);
        let early = joined(early, "the earlier connection has its slot too").await;
        assert!(early.is_some());
        assert_eq!(conns.open(), 2);
    }

    #[tokio::test]
    async fn a_slot_handed_to_a_connection_that_gave_up_waiting_goes_back_to_the_pool() {
        let conns = Connections::new(1);
        let held = free(&conns);
        let Room::Made(waiting) = conns.room(|| Arrived::Nothing) else {
            panic!("room made");
        };
        drop(waiting);
        drop(held);
        assert!(matches!(conns.room(|| Arrived::Nothing), Room::Free(_)));
    }

    #[tokio::test]
    async fn draining_waits_for_every_connection_to_close() {
        let conns = Arc::new(Connections::new(4));
        let mut registered = free(&conns);
        let drain = tokio::spawn({
            let conns = conns.clone();
            async move { conns.drain().await }
        });
        tokio::time::timeout(Duration::from_secs(5), registered.told_to_close())
            .await
            .expect("told to close when the daemon drains");
        // One registered after the drain began is told at once.
        let mut late = free(&conns);
        tokio::time::timeout(Duration::from_secs(5), late.told_to_close())
            .await
            .expect("a late connection is told too");
        drop(late);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!drain.is_finished(), "a connection is still open");
        drop(registered);
        tokio::time::timeout(Duration::from_secs(5), drain)
            .await
            .expect("drained once the last connection closed")
            .unwrap();
    }
}
