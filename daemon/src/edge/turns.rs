//! Reads take turns per client: one client's REST reads run at most
//! [`ServerConfig::reads_per_client`] at a time, the rest wait their turn in arrival order.
//!
//! A read costs the daemon far more than the request that asks for it: `GET /v1/log` from an
//! episode that sees few entries scans up to 5,000 of them (about 35 ms of a core), and every
//! read runs on the blocking pool, which grows to hundreds of threads. Sixty-four such requests
//! in flight from one credential took a legitimate caller of another episode from 1.7 ms to
//! 217 ms at p50 (1.1 s at p99). With turns, one client's reads hold at most
//! `reads_per_client` threads whatever it sends, and a request that has waited
//! [`ServerConfig::read_wait`] for its turn is answered 503 with `Retry-After: 1`
//! (`worldd_limit_trips_total{limit="read_wait"}`).
//!
//! Nor may one client have more than a quarter of `max_connections` reads running or waiting
//! (or `reads_per_client`, if that is more): a read waiting for its turn holds its
//! connection busy, and one credential sending slow reads on every connection kept them all
//! busy, shutting every other client out. A read past that is answered the same 503 at once.
//! (A credential's requests of every kind are held to the same quarter by the listener,
//! [`super::connections::requests_share`]; this bounds the reads without one.)
//!
//! The client is the request's bearer credential ([`Client`]); requests without one (under
//! `--open-reads`) share one turn. The log stream, health and metrics do not take turns: the
//! stream has its own limits, and the other two read nothing from the store.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::reply::Client;
use super::ServerConfig;
use crate::metrics::Limit;
use crate::quota::{Held, Quota};
use crate::state::AppState;

/// What a client whose reads waited too long is told.
pub const WAIT_TEXT: &str =
    "too many reads from this credential in flight ([server] reads_per_client); retry shortly";

/// The turns of every client with a read running or waiting. A client is forgotten when its
/// last read ends, so the map holds only clients with reads in flight.
#[derive(Clone)]
pub struct Turns {
    clients: Arc<Mutex<HashMap<Client, Arc<Semaphore>>>>,
    per_client: usize,
    /// Reads each client has running or waiting ([`Turns::in_flight_cap`]).
    in_flight: Quota<Client>,
}

/// One read's turn: held while the read runs.
pub struct Turn {
    permit: Option<OwnedSemaphorePermit>,
    _in_flight: Held<Client>,
    client: Client,
    turns: Turns,
}

impl Turns {
    pub fn new(config: &ServerConfig) -> Turns {
        Turns {
            clients: Arc::default(),
            per_client: config.reads_per_client,
            in_flight: Quota::new(Turns::in_flight_cap(config)),
        }
    }

    /// The most reads one client may have running or waiting: a quarter of the connections
    /// (at least 1), as many as it may run at once if that is more.
    pub fn in_flight_cap(config: &ServerConfig) -> usize {
        (config.max_connections / 4)
            .max(1)
            .max(config.reads_per_client)
    }

    /// Wait until `client` may run one more read, or `deadline` passes (`None`); `None` at
    /// once when `client` already has [`Turns::in_flight_cap`] reads running or waiting.
    pub async fn take(&self, client: Client, deadline: Instant) -> Option<Turn> {
        let in_flight = self.in_flight.take(&client, 1)?;
        let queue = {
            let mut clients = self.clients.lock().ok()?;
            clients
                .entry(client.clone())
                .or_insert_with(|| Arc::new(Semaphore::new(self.per_client)))
                .clone()
        };
        // Tokio's semaphore serves waiters in arrival order. The wait holds the queue until
        // it ends (a permit then holds it instead).
        let permit = tokio::time::timeout_at(deadline, queue.acquire_owned()).await;
        let turn = Turn {
            permit: permit.ok().and_then(Result::ok),
            _in_flight: in_flight,
            client,
            turns: self.clone(),
        };
        // A turn that timed out still forgets the client on drop if nothing else holds it.
        turn.permit.is_some().then_some(turn)
    }

    /// Clients with reads running or waiting.
    #[cfg(test)]
    fn clients(&self) -> usize {
        self.clients.lock().map_or(0, |c| c.len())
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        drop(self.permit.take());
        let Ok(mut clients) = self.turns.clients.lock() else {
            return;
        };
        // Only the map holds this client's queue: no read of it runs or waits.
        if clients
            .get(&self.client)
            .is_some_and(|q| Arc::strong_count(q) == 1)
        {
            clients.remove(&self.client);
        }
    }
}

/// The middleware: run the request in its client's turn.
pub async fn take_turn(State(state): State<AppState>, request: Request, next: Next) -> Response {
    // What the accept loop's service found for the credential is taken, not looked up again
    // ([`AppState::live_session`]).
    let client = Client::named(request.headers(), |h| state.live_session(h));
    let deadline = Instant::now() + state.server().read_wait;
    let mut take = std::pin::pin!(state.turns().take(client, deadline));
    let first = std::future::poll_fn(|cx| std::task::Poll::Ready(take.as_mut().poll(cx)));
    let (turn, waited) = match first.await {
        std::task::Poll::Ready(turn) => (turn, false),
        std::task::Poll::Pending => (take.await, true),
    };
    match turn {
        // A read that waited for its turn is authenticated afresh: its session may have been
        // revoked or have expired meanwhile.
        Some(turn) if waited => {
            let response = super::credential::routed_with(None, next.run(request)).await;
            drop(turn);
            response
        }
        Some(turn) => {
            let response = next.run(request).await;
            drop(turn);
            response
        }
        None => {
            state.metrics().limit_tripped(Limit::ReadWait);
            crate::rest::ApiError::busy(WAIT_TEXT).into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn turns(per_client: usize) -> Turns {
        Turns::new(&ServerConfig {
            reads_per_client: per_client,
            ..ServerConfig::default()
        })
    }

    fn client(token: &str) -> Client {
        let mut h = axum::http::HeaderMap::new();
        h.insert(
            "authorization",
            format!("Bearer {}", token.repeat(64)).parse().unwrap(),
        );
        Client::of(&h)
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_waits_for_its_own_turn_not_for_others() {
        let t = turns(1);
        let soon = || Instant::now() + Duration::from_secs(10);
        let first = t.take(client("a"), soon()).await.unwrap();
        // Another client is not held up by the first one's read.
        let other = t.take(client("b"), soon()).await.unwrap();
        // The same client waits: past the deadline it is refused.
        let started = Instant::now();
        assert!(t.take(client("a"), soon()).await.is_none());
        assert_eq!(started.elapsed(), Duration::from_secs(10));
        // Once the first read ends, the next one of that client runs.
        let waiting = tokio::spawn({
            let t = t.clone();
            async move { t.take(client("a"), soon()).await.is_some() }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        drop(first);
        assert!(waiting.await.unwrap());
        drop(other);
        // Clients with nothing in flight are forgotten.
        assert_eq!(t.clients(), 0);
    }

    // Paused time: the spawned read is surely waiting for its turn when the held one ends.
    #[tokio::test(start_paused = true)]
    async fn a_read_that_waited_for_its_turn_looks_its_credential_up_afresh() {
        use crate::edge::credential::{self, session_of, Resolved};
        use tower::ServiceExt;

        let (_dir, _store, state) = crate::state::on_a_new_store();
        let credential = format!("Bearer {}", "a".repeat(64));
        // The route says whether the session found before routing reached it.
        let app = axum::Router::new()
            .route(
                "/",
                axum::routing::get({
                    let credential = credential.clone();
                    move || async move {
                        credential::found_before_routing(&credential)
                            .map_or("looked up", |_| "found")
                    }
                }),
            )
            .route_layer(axum::middleware::from_fn_with_state(
                state.clone(),
                take_turn,
            ))
            .with_state(state.clone());
        let read = |app: axum::Router| {
            let credential = credential.clone();
            async move {
                let mut request = Request::new(axum::body::Body::empty());
                let field = credential.parse().unwrap();
                request.headers_mut().insert("authorization", field);
                let found = Resolved::new(&credential, Some(session_of("a")));
                let answer = credential::routed_with(Some(found), app.oneshot(request)).await;
                let body = axum::body::to_bytes(answer.unwrap().into_body(), 64).await;
                String::from_utf8(body.unwrap().to_vec()).unwrap()
            }
        };
        assert_eq!(read(app.clone()).await, "found", "its turn came at once");
        let soon = Instant::now() + Duration::from_secs(10);
        let its_client = Client::of_session(Some(&session_of("a")));
        let held = state.turns().take(its_client, soon).await.unwrap();
        let waiting = tokio::spawn(read(app.clone()));
        tokio::time::sleep(Duration::from_millis(50)).await;
        drop(held);
        assert_eq!(
            waiting.await.unwrap(),
            "looked up",
            "it waited for its turn"
        );
    }

    /// One client sending slow reads on every connection kept them all busy waiting for its
    /// turn. Past a quarter of the connections running or waiting, its reads are refused at
    /// once; another client is not held up, and the refused one's turns come back as its reads
    /// end.
    #[tokio::test(start_paused = true)]
    async fn a_client_with_a_quarter_of_the_connections_reading_or_waiting_is_refused_at_once() {
        let t = Turns::new(&ServerConfig {
            reads_per_client: 1,
            max_connections: 32,
            ..ServerConfig::default()
        });
        let soon = || Instant::now() + Duration::from_secs(10);
        let running = t.take(client("a"), soon()).await.unwrap();
        let waiting: Vec<_> = (0..7)
            .map(|_| {
                let t = t.clone();
                tokio::spawn(async move { t.take(client("a"), soon()).await.is_some() })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(1)).await;
        // Eight running or waiting: the ninth is refused without waiting.
        let started = Instant::now();
        assert!(t.take(client("a"), soon()).await.is_none());
        assert_eq!(started.elapsed(), Duration::ZERO);
        let other = t.take(client("b"), soon()).await.unwrap();
        drop((running, other));
        for w in waiting {
            assert!(w.await.unwrap(), "each waiting read has its turn in time");
        }
        assert!(t.take(client("a"), soon()).await.is_some());
        assert_eq!(t.clients(), 0);
        // A client may always run as many as `reads_per_client`, above a quarter or not.
        let wide = ServerConfig {
            reads_per_client: 3,
            max_connections: 4,
            ..ServerConfig::default()
        };
        assert_eq!(Turns::in_flight_cap(&wide), 3);
        let t = Turns::new(&wide);
        let mut held = Vec::new();
        for _ in 0..3 {
            held.push(t.take(client("a"), soon()).await.expect("run at once"));
        }
        assert!(t.take(client("a"), soon()).await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn reads_per_client_run_at_once() {
        let t = turns(2);
        let soon = Instant::now() + Duration::from_secs(1);
        let a = t.take(client("a"), soon).await.unwrap();
        let b = t.take(client("a"), soon).await.unwrap();
        assert!(t.take(client("a"), soon).await.is_none());
        drop((a, b));
        assert_eq!(t.clients(), 0);
    }
}
