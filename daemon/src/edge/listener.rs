//! The accept loop: a bounded number of connections, each served by hyper's HTTP/1.1
//! connection with a header-read timeout, drained gracefully at shutdown.
//!
//! `axum::serve` exposes none of these bounds, so connections are served here with
//! hyper-util's glue. At the limit a new connection closes an idle one to make room
//! ([`super::connections`]); when none is idle it is accepted and closed at once (never left
//! in the kernel's backlog to pile up), so the daemon never runs out of file descriptors while
//! attackers hold connections open. The limit is kept below the process's descriptor limit,
//! whose soft value is raised to the hard one at start.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tower::ServiceExt;

use super::arrived::{arrived, KnownCredential};
use super::connections::{
    waiting_places, Conn, Connections, Looking, OverShare, Registered, Room, Waiting,
    FIRST_BYTES_WAIT,
};
use super::credential::{self, Resolved};
use super::idle::{IdleWatch, Watched};
use super::reply::{Budgeted, Client, ReplyBudget};
use super::send::{Draining, SendDeadline};
use super::{linger, ServerConfig};
use crate::log_throttle::Throttle;
use crate::metrics::{Limit, Metrics};

/// Descriptors kept free for everything that is not a client connection: the store, plugin
/// libraries and their child processes, logs.
pub const RESERVED_FDS: u64 = 128;

/// Connections the kernel completes and queues for `accept` (capped by `net.core.somaxconn`).
/// The standard library's 128 is overrun by a burst of clients while the accept loop yields
/// to the connections it has just spawned; the kernel then drops SYNs, and each of those
/// clients waits a whole second for its retransmission.
pub const LISTEN_BACKLOG: i32 = 4096;

/// A listening socket on `addr` with [`LISTEN_BACKLOG`] (address reuse and close-on-exec as
/// the standard library sets them).
pub fn bind(addr: std::net::SocketAddr) -> std::io::Result<std::net::TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(LISTEN_BACKLOG)?;
    Ok(socket.into())
}

/// Raise the soft `RLIMIT_NOFILE` to the hard limit; returns the soft limit now in force.
pub fn raise_fd_limit() -> std::io::Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own; no other memory is touched.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: setrlimit reads the struct we own; raising the soft limit up to the hard
        // one needs no privilege.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            return Ok(raised.rlim_cur);
        }
    }
    Ok(lim.rlim_cur)
}

/// The connection limit in force: the configured one, lowered to stay below `fd_limit` with
/// the connections that may wait for room ([`waiting_places`]) beside it.
pub fn connection_limit(configured: usize, fd_limit: u64) -> usize {
    let room = usize::try_from(fd_limit.saturating_sub(RESERVED_FDS)).unwrap_or(usize::MAX);
    let allowed = room.saturating_sub(waiting_places(room)).max(1);
    configured.min(allowed)
}

/// Serve `app` on `listener` until `shutdown` resolves, then let open requests finish.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    config: &ServerConfig,
    metrics: Metrics,
    known: KnownCredential,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let draining = Draining::default();
    let shared = Shared {
        connections: Arc::new(Connections::new(config.max_connections)),
        http: http1_builder(config),
        replies: ReplyBudget::new(config.reply_budget_bytes, metrics.clone()),
        app,
        metrics,
        known,
        small_pieces: config.body_small_pieces,
        request_allowance: request_allowance(config.max_head_bytes),
    };
    let mut shutdown = std::pin::pin!(shutdown);
    let mut accept_errors = AcceptErrors::default();
    while let Some(stream) = accept(
        &listener,
        shutdown.as_mut(),
        &mut accept_errors,
        &shared.metrics,
    )
    .await
    {
        let found = find_room(&shared.connections, &stream, &shared.known, &shared.metrics);
        match found {
            Found::Place(room) => {
                let stream = prepare(stream, config, &shared.metrics, &draining);
                tokio::spawn(serve_connection(stream, room, shared.clone()));
            }
            Found::Look(looking) => {
                let stream = prepare(stream, config, &shared.metrics, &draining);
                tokio::spawn(look_then_serve(stream, looking, shared.clone()));
            }
            Found::None => drop(stream),
        }
    }
    shut_down(listener, &shared.connections, &draining).await;
    Ok(())
}

/// What every connection is served with.
#[derive(Clone)]
struct Shared {
    connections: Arc<Connections>,
    http: http1::Builder,
    replies: ReplyBudget,
    app: Router,
    metrics: Metrics,
    /// The live session a credential names, if any ([`super::arrived`], [`Client::named`]).
    known: KnownCredential,
    /// `[server] body_small_pieces`, which also bounds the drain of a refused body's rest.
    small_pieces: usize,
    /// What a connection may read from each request's head on ([`request_allowance`]).
    request_allowance: u64,
}

/// What a connection may read from a request's head until the next one's, unless a body its
/// route reads allows more ([`super::idle`], [`super::body::framing_allowance`]): the rest of
/// a body refused unread that is lingered on ([`LINGER_BYTES`](super::body::LINGER_BYTES)),
/// [`FRAMING_BYTES`](super::body::FRAMING_BYTES), and the next request's head
/// (`max_head_bytes`, read before that request begins). Past it (a chunk-size line of endless
/// `0`s behind a request answered unread, which the HTTP layer decodes a byte at a time
/// before the route runs and after the answer) the connection's reads end and it closes.
pub fn request_allowance(max_head_bytes: usize) -> u64 {
    (super::body::LINGER_BYTES as u64)
        .saturating_add(super::body::FRAMING_BYTES as u64)
        .saturating_add(max_head_bytes as u64)
}

/// A new connection's place under the limit: registered in a free slot, or waiting (in this
/// place) for the slot of the idle connection told to close for it.
type Place = Result<Registered, Waiting>;

/// HTTP/1.1 with keep-alive, a header-read timeout and a bound on the request head.
///
/// No half-close: the end of a client's stream is taken for the client gone, and its request
/// in flight dropped. That is how a caller that leaves mid-call frees its place at once (a
/// FIN cannot tell "done writing" from "gone"); the price is that a client that half-closes
/// right after its request gets no answer, and its request does not run (docs/http-api.md,
/// tests/edge_half_close.rs).
fn http1_builder(config: &ServerConfig) -> http1::Builder {
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(config.header_timeout)
        .max_buf_size(config.max_head_bytes)
        .half_close(false)
        .keep_alive(true);
    http
}

/// The next connection accepted on `listener`, or `None` once `shutdown` resolves.
async fn accept(
    listener: &TcpListener,
    mut shutdown: Pin<&mut impl Future<Output = ()>>,
    errors: &mut AcceptErrors,
    metrics: &Metrics,
) -> Option<TcpStream> {
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => return Some(stream),
                Err(e) => {
                    errors.report(&e, metrics);
                    // Out of descriptors (or a transient error): back off instead of spinning.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            () = &mut shutdown => return None,
        }
    }
}

/// What the accept loop found for a new connection.
enum Found {
    Place(Place),
    /// Wait for its first bytes, then look for a place again ([`look_then_serve`]).
    Look(Looking),
    /// None: close it at once.
    None,
}

/// Room for a new connection ([`Connections::room`]), counting each time the limit is
/// reached.
fn find_room(
    connections: &Connections,
    stream: &TcpStream,
    known: &KnownCredential,
    metrics: &Metrics,
) -> Found {
    match connections.room(|| arrived(stream, known)) {
        Room::Look(looking) => {
            metrics.limit_tripped(Limit::ConnectionsLook);
            Found::Look(looking)
        }
        room => placed(room, metrics).map_or(Found::None, Found::Place),
    }
}

/// The place `room` gives, counted; `None` when the new connection is to be closed at once.
fn placed(room: Room, metrics: &Metrics) -> Option<Place> {
    match room {
        Room::Full | Room::Look(_) => {
            metrics.limit_tripped(Limit::Connections);
            None
        }
        Room::Made(waiting) => {
            metrics.limit_tripped(Limit::ConnectionsIdle);
            Some(Err(waiting))
        }
        Room::Free(registered) => Some(Ok(registered)),
    }
}

/// A new connection on which nothing had arrived when every place to wait for room was taken:
/// wait for its first bytes (at most [`FIRST_BYTES_WAIT`]) in `looking`'s place, then serve it
/// in the place what arrived finds, if any.
async fn look_then_serve(stream: SendDeadline<TcpStream>, looking: Looking, shared: Shared) {
    let (connections, known, metrics) = (&shared.connections, &shared.known, &shared.metrics);
    let place = look(
        stream.get_ref(),
        looking,
        connections,
        known,
        metrics,
        FIRST_BYTES_WAIT,
    );
    if let Some(place) = place.await {
        serve_connection(stream, place, shared).await;
    }
}

/// The place for `stream` once its first bytes have arrived, or `wait` has passed without
/// them; `None` (counted) when there is none, or when the daemon drains meanwhile.
async fn look(
    stream: &TcpStream,
    looking: Looking,
    connections: &Connections,
    known: &KnownCredential,
    metrics: &Metrics,
    wait: Duration,
) -> Option<Place> {
    let mut first = [0u8; 1];
    tokio::select! {
        // Bytes, the peer's close or an error: whichever, look at what is there.
        _ = tokio::time::timeout(wait, stream.peek(&mut first)) => {}
        () = connections.draining() => return None,
    }
    let room = connections.room_after_look(looking, || arrived(stream, known));
    placed(room, metrics)
}

/// An accepted socket set up for serving: no delay for small writes, the configured send
/// buffer, and the send deadline (which counts every wait once `draining` is set).
fn prepare(
    stream: TcpStream,
    config: &ServerConfig,
    metrics: &Metrics,
    draining: &Draining,
) -> SendDeadline<TcpStream> {
    let _ = stream.set_nodelay(true);
    if config.send_buffer_bytes > 0 {
        set_send_buffer(&stream, config.send_buffer_bytes);
    }
    SendDeadline::new(stream, config.send_timeout, metrics.clone()).drained_by(draining.clone())
}

/// One connection's task: take its slot, then answer its requests until it ends or is told
/// to close.
async fn serve_connection(stream: SendDeadline<TcpStream>, room: Place, shared: Shared) {
    let Shared {
        connections,
        http,
        replies,
        app,
        metrics,
        known,
        small_pieces,
        request_allowance,
    } = shared;
    let Some(mut registered) = take_slot(room, &connections, &metrics).await else {
        return;
    };
    // Requests without a credential are counted by their peer address ([`super::reply`]).
    let peer = stream.get_ref().peer_addr().ok().map(|a| a.ip());
    let (stream, watched) = IdleWatch::new(stream, metrics.clone());
    let service = service(
        app,
        replies,
        known,
        (small_pieces, request_allowance),
        (peer, watched.clone()),
        registered.conn.clone(),
    );
    let conn = http.serve_connection(TokioIo::new(stream), service);
    let mut conn = std::pin::pin!(conn);
    metrics.connections(1);
    // Told to close (to make room, or at shutdown): finish the request in flight, if
    // any, and close. A connection with nothing to finish is dropped at once: hyper
    // would keep one that has not completed a request head waiting for one, and a
    // refusal waiting for the rest of a body that does not come for up to 2 s.
    let ended = tokio::select! {
        ended = conn.as_mut() => ended,
        () = registered.told_to_close() => {
            if registered.conn.nothing_to_finish() {
                Ok(())
            } else {
                conn.as_mut().graceful_shutdown();
                conn.await
            }
        }
    };
    if let Err(e) = ended {
        count_end(&e, &watched, &metrics);
    }
    metrics.connections(-1);
}

/// The connection's registration: at once in a free slot, or once the idle connection it
/// closed has given up its slot; `None` (counted) when that does not happen in time.
async fn take_slot(
    room: Place,
    connections: &Connections,
    metrics: &Metrics,
) -> Option<Registered> {
    match room {
        Ok(registered) => Some(registered),
        Err(waiting) => match connections.slot(waiting).await {
            Some(registered) => Some(registered),
            None => {
                metrics.limit_tripped(Limit::Connections);
                None
            }
        },
    }
}

/// Count a connection that ended in a limit; log any other error. The header-read timer
/// also closes a keep-alive connection idle between requests: that is no trip.
fn count_end(e: &hyper::Error, watched: &Watched, metrics: &Metrics) {
    if e.is_timeout() {
        if !watched.idle() {
            metrics.limit_tripped(Limit::HeaderTimeout);
        }
    } else if e.is_parse_too_large() {
        // hyper has answered 431 (head, URI or header count too large).
        metrics.limit_tripped(Limit::HeadSize);
    } else {
        tracing::debug!("connection ended: {e}");
    }
}

/// Stop accepting, then let every open connection finish what it has in flight: each answer
/// within one send timeout of waiting for its client, from now on ([`super::send`]).
async fn shut_down(listener: TcpListener, connections: &Connections, draining: &Draining) {
    drop(listener);
    draining.begin();
    connections.drain().await;
}

/// One connection's service: each request's body is tracked, so that a small remainder the
/// route did not read is drained before its answer goes out (`linger`); the connection's reads
/// are counted from each request's head, within `request_allowance` or what a body read
/// allows (`idle`); each answer is
/// counted while it waits for its client (`reply`, inside the router: [`super::reply::within`]); the connection is busy from a request's
/// head until its answer is sent (`connections`).
fn service(
    app: Router,
    replies: ReplyBudget,
    known: KnownCredential,
    (small_pieces, request_allowance): (usize, u64),
    (peer, watched): (Option<std::net::IpAddr>, Watched),
    conn: Arc<Conn>,
) -> impl hyper::service::Service<
    hyper::Request<hyper::body::Incoming>,
    Response = axum::response::Response,
    Error = std::convert::Infallible,
    Future = impl Future + Send,
> + Clone {
    hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let (app, replies) = (app.clone(), replies.clone());
        let watched = watched.clone();
        // Its head is in: from here, before the HTTP layer reads any of its body ahead of the
        // route, the connection's reads are counted against the request's allowance.
        watched.request(request_allowance);
        // Looked up once: the read turns and the routes take what was found here
        // ([`credential::routed_with`]) instead of looking the credential up again.
        let found = credential::authorization(req.headers())
            .ok()
            .flatten()
            .map(|c| Resolved::new(c, known(c)));
        let session = found.as_ref().and_then(Resolved::session);
        let client = Client::of_session(session);
        // Counted against its credential's share of requests in flight from its head on.
        let in_request = conn.request_of(session.map(|s| &s.credential_id));
        async move {
            let (mut req, remainder) = linger::track(req, small_pieces);
            req.extensions_mut().insert(super::host::FromConnection);
            if in_request.over_share() {
                // Counted where its 503 is built ([`super::reply::within`]).
                req.extensions_mut().insert(OverShare);
            }
            // Refused early or counted inside the router, past its Host and Origin checks
            // ([`super::reply::within`]).
            req.extensions_mut().insert(Budgeted {
                replies,
                client,
                peer,
            });
            // A body it reads is watched on this connection's reads ([`super::idle`]).
            let routed = super::idle::reading_bodies(
                watched,
                credential::routed_with(found, app.oneshot(req)),
            );
            let answer = match remainder.routing(routed).await {
                Ok(answer) => answer,
                Err(never) => match never {},
            };
            // Waiting for the rest of a small body only so that a refusal can be read: the
            // connection may be closed meanwhile to make room.
            if remainder.waits() {
                in_request.lingering(true);
                remainder.drain().await;
                in_request.lingering(false);
            } else {
                remainder.after_answer();
            }
            Ok::<_, std::convert::Infallible>(in_request.track(answer))
        }
    })
}

/// A fixed `SO_SNDBUF` (which also turns the kernel's autotuning of it off), so an answer a
/// client does not read waits in the daemon, under the send deadline, rather than in a
/// kernel buffer grown to megabytes.
fn set_send_buffer(stream: &tokio::net::TcpStream, bytes: usize) {
    if let Err(e) = socket2::SockRef::from(stream).set_send_buffer_size(bytes) {
        tracing::debug!("send buffer not set: {e}");
    }
}

/// Accept errors are counted always and logged at most once every ten seconds.
#[derive(Default)]
struct AcceptErrors(Throttle);

impl AcceptErrors {
    fn report(&mut self, e: &std::io::Error, metrics: &Metrics) {
        metrics.limit_tripped(Limit::AcceptError);
        if let Some(unlogged) = self.0.due("accept_error") {
            tracing::warn!(
                errors = unlogged + 1,
                "accept failed: {e}; backing off (see [server] max_connections)"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::edge::connections::{for_first_bytes, Arrived};
    use crate::edge::credential::session_of;
    use tokio::io::AsyncWriteExt;

    /// `Connections` at a limit of `limit`, every slot and every place to wait for room taken,
    /// and a new connection's place to wait for its first bytes; what holds them comes back.
    fn every_place_taken(limit: usize) -> (Connections, Looking, Vec<Room>) {
        let conns = Connections::new(limit);
        let mut held = Vec::new();
        loop {
            match conns.room(|| Arrived::Bytes) {
                Room::Full => break,
                room => held.push(room),
            }
        }
        let Room::Look(looking) = conns.room(|| Arrived::Nothing) else {
            panic!("a place to wait for first bytes");
        };
        (conns, looking, held)
    }

    /// A connected pair: the client's end, and the accepted end.
    async fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        (client, listener.accept().await.unwrap().0)
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_connection_that_sends_nothing_waits_for_its_first_bytes_no_longer_than_the_wait()
    {
        let (conns, looking, _held) = every_place_taken(64);
        let (_client, accepted) = pair().await;
        let known: KnownCredential = Arc::new(|c| Some(session_of(c)));
        let metrics = Metrics::default();
        let started = tokio::time::Instant::now();
        let place = look(
            &accepted,
            looking,
            &conns,
            &known,
            &metrics,
            FIRST_BYTES_WAIT,
        )
        .await;
        assert!(place.is_none(), "closed: nothing came");
        assert_eq!(started.elapsed(), FIRST_BYTES_WAIT);
        assert_eq!(metrics.trips(Limit::Connections), 1);
        // Its place to look in was given back.
        assert_eq!(for_first_bytes(64), 16);
        let looks: Vec<Room> = (0..16).map(|_| conns.room(|| Arrived::Nothing)).collect();
        assert!(looks.iter().all(|r| matches!(r, Room::Look(_))));
    }

    #[tokio::test]
    async fn a_request_that_arrives_while_its_connection_waits_for_it_finds_its_place() {
        let (conns, looking, _held) = every_place_taken(64);
        let (mut client, accepted) = pair().await;
        let live = format!("Bearer {}", "1".repeat(64));
        let known: KnownCredential = Arc::new({
            let live = live.clone();
            move |c| (c == live).then(|| session_of("the live session"))
        });
        let metrics = Metrics::default();
        let writer = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(30)).await;
            let head = format!("POST /mcp/ HTTP/1.1\r\nAuthorization: {live}\r\n\r\n");
            client.write_all(head.as_bytes()).await.unwrap();
            client
        });
        let wait = Duration::from_secs(30);
        let started = std::time::Instant::now();
        let place = look(&accepted, looking, &conns, &known, &metrics, wait).await;
        assert!(
            started.elapsed() < wait,
            "the look ends when the bytes come"
        );
        assert!(
            matches!(place, Some(Err(_))),
            "a place kept for a known credential, an idle connection told to close for it"
        );
        assert_eq!(metrics.trips(Limit::ConnectionsIdle), 1);
        assert_eq!(metrics.trips(Limit::Connections), 0);
        drop(writer.await.unwrap());
    }

    #[tokio::test]
    async fn a_connection_waiting_for_its_first_bytes_is_closed_when_the_daemon_drains() {
        let (conns, looking, held) = every_place_taken(64);
        let (_client, accepted) = pair().await;
        let known: KnownCredential = Arc::new(|c| Some(session_of(c)));
        let metrics = Metrics::default();
        let conns = Arc::new(conns);
        let looked = tokio::spawn({
            let conns = conns.clone();
            async move {
                let wait = Duration::from_secs(30);
                let place = look(&accepted, looking, &conns, &known, &metrics, wait).await;
                place.is_none()
            }
        });
        tokio::task::yield_now().await;
        drop(held);
        let drained = tokio::time::timeout(Duration::from_secs(5), conns.drain()).await;
        assert!(drained.is_ok(), "the drain does not wait out the look");
        assert!(looked.await.unwrap(), "no place once the daemon drains");
    }

    #[test]
    fn the_connection_limit_stays_below_the_descriptor_limit() {
        // 896 descriptors for connections: 56 places to wait for room, 14 for connections
        // that have sent their request, 14 for those whose head carries a known credential and
        // 224 for those waiting for their first bytes are kept beside the limit.
        assert_eq!(connection_limit(4096, 1024), 588);
        assert_eq!(connection_limit(100, 20_000), 100);
        assert_eq!(connection_limit(100, 10), 1);
    }
}
