//! Answers in flight: the bytes of answers not yet handed to the kernel share one budget
//! ([`ServerConfig::reply_budget_bytes`]), as request bodies share theirs, and no one
//! credential may hold more than a quarter of it.
//!
//! An answer waits in the daemon while its client does not read it (past the kernel's send
//! buffer, see [`super::send`]). Without a bound, clients that request large objects on many
//! connections and read nothing would hold all of them at once. So an answer of known size
//! takes its bytes from the budget before it is sent, and gives them back when the last of
//! it has been handed over or its connection ends. When the budget is full the answer is
//! replaced by `503` with `Retry-After`, and its memory is freed at once; or, for an MCP or A2A
//! answer to calls that already ran, by its [`Withheld`] form (at most
//! [`WITHHELD_MOST_BYTES`], and a client's forms together at most a sixteenth of the budget:
//! [`WITHHELD_SHARE_DIVISOR`]), which says what ran. The first
//! [`UNCOUNTED_BYTES`] of each answer are not counted, so ordinary answers never wait or fail
//! for it. Streams of unknown length (the log stream) are not counted: they are produced
//! only as fast as their client reads.
//!
//! Each credential (the bearer token of the request's `Authorization` header, however the
//! header spaces it; requests without one share an anonymous share) may hold at most a
//! quarter of the budget: one session reading nothing
//! cannot take the large answers of every other. Within the anonymous share each peer address
//! holds at most a quarter of it ([`ANONYMOUS_PEER_TEXT`]), so that one client without a
//! credential reading nothing cannot refuse every other one (readers under `--open-reads`,
//! browsers loading the workbench). Answers whose body is compiled into the binary
//! ([`Static`]: the workbench's page and scripts) hold no memory and are not counted at all, and once its share is full its further
//! requests are refused before they run ([`ReplyBudget::refuse_early`]), so it cannot make the
//! daemon build answers only to throw them away. Nor can it with a share not quite full: once
//! an answer of its has been replaced because its share or the budget had no room for it, its
//! requests are refused before they run for [`REFUSED_HOLD`] (the `Retry-After` it was told),
//! while there is still no room for an answer that size. Without that, eight sessions each
//! holding unread megabyte answers had the daemon spend three fifths of its CPU encoding
//! answers that were then thrown away (bench row 9).
//!
//! A counted answer is handed to hyper in [`CHUNK_BYTES`] frames, so that what hyper buffers
//! per connection stays small and the unsent rest stays counted here until it leaves.
//!
//! [`ServerConfig::reply_budget_bytes`]: super::ServerConfig::reply_budget_bytes

use std::collections::HashMap;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use broker_core::session::Session;
use hyper::body::{Frame, SizeHint};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::edge::credential;
use crate::metrics::{Limit, Metrics};
use crate::quota::{Held, Quota};
use crate::rest::ApiError;

const KIB: usize = 1024;

/// Answers up to this size are never counted (they fit the kernel's send buffer).
pub const UNCOUNTED_BYTES: usize = 16 * KIB;

/// The most bytes a [`Withheld`] form may take: past it, the answer it stands for gets the
/// `503` as if it had none. A withheld form is not counted against its credential's share
/// (the share is what was full), so without a bound of its own one form could hold much of
/// the budget (a batch's replies kept whole, or long ids echoed): a batch's withheld form
/// keeps its replies of up to 4 KiB as they are, each larger one replaced by a stand-in of
/// about 1 KiB plus its id, and 64 of them can pass this. An answer past it gets the `503`,
/// as before withheld forms. How many forms one credential holds is bounded by
/// [`WITHHELD_SHARE_DIVISOR`].
pub const WITHHELD_MOST_BYTES: usize = 64 * KIB;

/// The withheld forms one client holds unread take at most this fraction of the budget (a
/// sixteenth: 4 MiB of the default 64 MiB, some 85 forms of 64 KiB), beside its share: the
/// bound of one form alone did not stop a credential whose share was full from holding
/// form after form on connections that read nothing (A2A sends with long ids, batches of
/// reads), until the budget was full and every other credential's large answers got the
/// `503`, which the share exists to prevent. Past it, the answer gets its share's `503`.
pub const WITHHELD_SHARE_DIVISOR: usize = 16;

/// The frame size of a counted answer.
pub const CHUNK_BYTES: usize = 16 * KIB;

/// How long after one of its answers was replaced by 503 a client's requests are refused
/// before they run, while there is still no room for that answer: the `Retry-After` it was
/// told. So a client that keeps asking for what cannot be sent costs at most one answer built
/// in vain a second.
pub const REFUSED_HOLD: Duration = Duration::from_secs(1);

/// Clients remembered at once for an answer refused ([`REFUSED_HOLD`]); past it, those whose
/// hold is over are forgotten.
const REFUSED_KEPT: usize = 4096;

/// Why an answer was replaced by 503: the budget is full.
pub const BUSY_TEXT: &str =
    "too many answers waiting for their clients to read them ([server] reply_budget_bytes); retry shortly";

/// Why a request was refused or its answer replaced by 503: its credential's share is full.
pub const SHARE_TEXT: &str =
    "too many answers to this credential are waiting unread (a quarter of [server] reply_budget_bytes); read them, then retry";

/// Why an answer to a request without a credential was replaced by 503: the anonymous share,
/// which every client without a credential shares (each address holding at most a quarter of
/// it), is full. Not "this credential": the request had none, and other addresses may hold it.
pub const ANONYMOUS_SHARE_TEXT: &str =
    "too many answers to requests without a credential are waiting unread (a quarter of [server] reply_budget_bytes, shared by every client without one); retry shortly, or send a session's credential";

/// Why an answer to a request without a credential was replaced by 503: its peer address's
/// part of the anonymous share is full.
pub const ANONYMOUS_PEER_TEXT: &str =
    "too many answers to this address without a credential are waiting unread (a sixteenth of [server] reply_budget_bytes); read them, then retry";

/// Marks an answer whose body is compiled into the binary (`&'static` bytes): it holds no
/// memory while it waits for its client, so the budget does not count it.
#[derive(Debug, Clone, Copy)]
pub struct Static;

/// Whose answer it is: the session named by the bearer token of the request's
/// `Authorization` header ([`Client::named`]), or nobody. Within the daemon's edge the token
/// alone also serves, once the request is authenticated ([`Client::of`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Client(Option<String>);

impl Client {
    /// The credential of the request's `Authorization` header, by its credential id, or
    /// nobody (no header, or one that is not a bearer token): the id, not the header as sent,
    /// since the header may spell one credential many ways (spaces and tabs around its fields,
    /// hex digits in either case, which authenticate alike), and each spelling must not get a
    /// share of its own; and the same id [`Client::of_session`] keys by, so one credential is
    /// one client whichever way it was named, and no token is kept as a key. For requests
    /// already authenticated (their bodies are read only then); before that, see
    /// [`Client::named`].
    pub fn of(headers: &HeaderMap) -> Client {
        let header = credential::authorization(headers).ok().flatten();
        Client(
            broker_core::session::parse_authorization(header)
                .ok()
                .map(broker_core::session::credential_id),
        )
    }

    /// The session the request's `Authorization` header names, by its credential id, as
    /// `known` finds it (a live session's, [`super::arrived::KnownCredential`]); a token that
    /// names none is nobody's, as a request without one is. For what is counted before a
    /// request is authenticated, or where it never is (reads under `--open-reads`, which
    /// ignore the header): keyed by the token as sent, every made-up token had a share, and
    /// a turn, of its own.
    pub fn named(headers: &HeaderMap, known: impl Fn(&str) -> Option<Arc<Session>>) -> Client {
        let header = credential::authorization(headers).ok().flatten();
        Client::of_session(header.and_then(known).as_deref())
    }

    /// [`Client::named`] once the session is found: the live session's client, or nobody.
    pub fn of_session(session: Option<&Session>) -> Client {
        Client(session.map(|s| s.credential_id.clone()))
    }
}

/// The budget, in KiB.
#[derive(Clone)]
pub struct ReplyBudget {
    kib: Arc<Semaphore>,
    /// KiB each client holds now, at most a quarter of the budget.
    shares: Quota<Client>,
    /// KiB each peer address holds now of the anonymous share, at most a quarter of it.
    anonymous_peers: Quota<IpAddr>,
    /// KiB each client holds now in withheld forms, outside its share: at most a sixteenth of
    /// the budget ([`WITHHELD_SHARE_DIVISOR`]).
    withheld: Quota<Client>,
    /// Clients whose answer was replaced by 503: the KiB it needed, and when.
    refused: Arc<Mutex<HashMap<Client, (usize, Instant)>>>,
    metrics: Metrics,
}

impl ReplyBudget {
    pub fn new(bytes: usize, metrics: Metrics) -> Self {
        let total_kib = (bytes / KIB).clamp(1, Semaphore::MAX_PERMITS);
        let share = (total_kib / 4).max(1);
        ReplyBudget {
            kib: Arc::new(Semaphore::new(total_kib)),
            shares: Quota::new(share),
            anonymous_peers: Quota::new((share / 4).max(1)),
            withheld: Quota::new((total_kib / WITHHELD_SHARE_DIVISOR).max(1)),
            refused: Arc::default(),
            metrics,
        }
    }

    /// KiB of the budget free now (tests and metrics).
    pub fn free_kib(&self) -> usize {
        self.kib.available_permits()
    }

    /// 503 before the request runs when its credential's share is already full, or when an
    /// answer of its was replaced by 503 less than [`REFUSED_HOLD`] ago and its share or the
    /// budget still has no room for one that size. Requests without a credential always run
    /// (health probes among them); with reads open, their large answers are still bounded by
    /// the anonymous share in [`ReplyBudget::bound`].
    pub fn refuse_early(&self, client: &Client) -> Option<Response> {
        // Without a credential: always run.
        client.0.as_ref()?;
        if self.shares.is_full(client) {
            self.metrics.limit_tripped(Limit::ReplyShare);
            return Some(busy(SHARE_TEXT));
        }
        let mut refused = self.refused.lock().ok()?;
        let &(kib, at) = refused.get(client)?;
        if at.elapsed() >= REFUSED_HOLD {
            refused.remove(client);
            return None;
        }
        if self.shares.held(client) + kib > self.shares.cap() {
            self.metrics.limit_tripped(Limit::ReplyShare);
            return Some(busy(SHARE_TEXT));
        }
        if self.free_kib() < kib {
            self.metrics.limit_tripped(Limit::ReplyBudget);
            return Some(busy(BUSY_TEXT));
        }
        refused.remove(client);
        None
    }

    /// `client`'s answer of `kib` KiB was replaced by 503: see [`ReplyBudget::refuse_early`].
    fn note_refused(&self, client: &Client, kib: usize) {
        if client.0.is_none() {
            return;
        }
        let Ok(mut refused) = self.refused.lock() else {
            return;
        };
        if refused.len() >= REFUSED_KEPT {
            refused.retain(|_, (_, at)| at.elapsed() < REFUSED_HOLD);
        }
        refused.insert(client.clone(), (kib, Instant::now()));
    }

    /// Count `answer` against `client`'s share (for a request without a credential, against
    /// its `peer` address's part of the anonymous share too) and the budget, or replace it when
    /// one is full: by its [`Withheld`] form where it has one of at most
    /// [`WITHHELD_MOST_BYTES`] (counted in turn when larger than [`UNCOUNTED_BYTES`], against
    /// the client's withheld forms and the budget), else by 503.
    pub async fn bound(&self, client: &Client, peer: Option<IpAddr>, answer: Response) -> Response {
        if answer.extensions().get::<Static>().is_some() {
            return answer;
        }
        let Some(size) = answer.body().size_hint().exact() else {
            return answer;
        };
        let size = usize::try_from(size).unwrap_or(usize::MAX);
        if size <= UNCOUNTED_BYTES {
            return answer;
        }
        match self.take(client, peer, size) {
            Ok(counted) => Self::counted(answer, size, counted).await,
            Err((limit, why)) => match answer.extensions().get::<Withheld>().cloned() {
                Some(withheld) if withheld.body.len() <= WITHHELD_MOST_BYTES => {
                    self.withheld(client, answer, withheld, limit).await
                }
                _ => {
                    self.metrics.limit_tripped(limit);
                    busy(why)
                }
            },
        }
    }

    /// `answer`'s [`Withheld`] form in its place, counted against the whole budget and
    /// `client`'s withheld forms ([`WITHHELD_SHARE_DIVISOR`]), not its share: it is small (at
    /// most [`WITHHELD_MOST_BYTES`], checked by the caller), it stands only for calls that ran
    /// (their units spent; an answer that ran nothing has none, and gets the `503`), and the
    /// share is what was full (a share with room refuses nothing). With the client's withheld
    /// forms at their bound, its share's `503`: the answers waiting are its own. `limit` is the
    /// one the answer found full: one replaced answer counts one trip, of the limit that
    /// decided its form (`limit` for a form sent, the one refusing the form for a `503`).
    async fn withheld(
        &self,
        client: &Client,
        answer: Response,
        withheld: Withheld,
        limit: Limit,
    ) -> Response {
        let (mut parts, body) = answer.into_parts();
        // A form that is the answer itself (a short output in a long answer, a batch of short
        // replies) replaces nothing: the client gets its whole answer, and no limit stopped it.
        // The answer is in memory (of exact size), and a form past the bound was never built.
        let whole = axum::body::to_bytes(body, WITHHELD_MOST_BYTES)
            .await
            .is_ok_and(|bytes| bytes == withheld.body);
        let tripped = |metrics: &Metrics| {
            if !whole {
                metrics.limit_tripped(limit);
            }
        };
        parts.status = withheld.status;
        parts.headers.remove(axum::http::header::CONTENT_LENGTH);
        parts.extensions.remove::<Withheld>();
        let size = withheld.body.len();
        let answer = Response::from_parts(parts, Body::from(withheld.body));
        if size <= UNCOUNTED_BYTES {
            tripped(&self.metrics);
            return answer;
        }
        let kib = (size - UNCOUNTED_BYTES).div_ceil(KIB);
        // A form larger than a client's whole allowance (a small budget) takes all of it,
        // rather than never passing; the budget counts it whole.
        let Some(allowance) = self.withheld.take(client, kib.min(self.withheld.cap())) else {
            self.metrics.limit_tripped(Limit::ReplyShare);
            return busy(match client.0 {
                Some(_) => SHARE_TEXT,
                None => ANONYMOUS_SHARE_TEXT,
            });
        };
        match self
            .kib
            .clone()
            .try_acquire_many_owned(u32::try_from(kib).unwrap_or(u32::MAX))
        {
            Ok(permit) => {
                tripped(&self.metrics);
                Self::counted(answer, size, (permit, Some(allowance), None)).await
            }
            Err(_) => {
                self.metrics.limit_tripped(Limit::ReplyBudget);
                busy(BUSY_TEXT)
            }
        }
    }

    /// Take an answer of `size` bytes from `client`'s share (and its `peer`'s part of the
    /// anonymous share) and the budget; where one has no room, which limit and the 503's text
    /// (the caller counts the trip once it knows what replaces the answer).
    fn take(
        &self,
        client: &Client,
        peer: Option<IpAddr>,
        size: usize,
    ) -> Result<Taken, (Limit, &'static str)> {
        // An answer larger than a whole share takes all of it.
        let mut kib = (size - UNCOUNTED_BYTES)
            .div_ceil(KIB)
            .min(self.shares.cap());
        let from_peer = match (&client.0, peer) {
            (None, Some(peer)) => {
                kib = kib.min(self.anonymous_peers.cap());
                let Some(held) = self.anonymous_peers.take(&peer, kib) else {
                    return Err((Limit::ReplyShare, ANONYMOUS_PEER_TEXT));
                };
                Some(held)
            }
            _ => None,
        };
        let Some(held) = self.shares.take(client, kib) else {
            self.note_refused(client, kib);
            return Err((
                Limit::ReplyShare,
                match client.0 {
                    Some(_) => SHARE_TEXT,
                    None => ANONYMOUS_SHARE_TEXT,
                },
            ));
        };
        let Ok(permit) = self
            .kib
            .clone()
            .try_acquire_many_owned(u32::try_from(kib).unwrap_or(u32::MAX))
        else {
            self.note_refused(client, kib);
            return Err((Limit::ReplyBudget, BUSY_TEXT));
        };
        Ok((permit, Some(held), from_peer))
    }

    /// `answer`, of `size` bytes, holding what was taken for it until it has been sent.
    async fn counted(answer: Response, size: usize, counted: Taken) -> Response {
        let (parts, body) = answer.into_parts();
        // A body of exact size is already in memory: collecting it does not wait.
        match axum::body::to_bytes(body, size).await {
            Ok(bytes) => Response::from_parts(
                parts,
                Body::new(Counted {
                    rest: bytes,
                    counted: Some(counted),
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

/// What an answer holds of the budget while it waits to be sent: its KiB of the whole budget,
/// of its credential's share (for a withheld form, of its credential's withheld forms), of its
/// address's anonymous part.
type Taken = (
    OwnedSemaphorePermit,
    Option<Held<Client>>,
    Option<Held<IpAddr>>,
);

/// What to send in place of an answer the budget has no room for, when the calls it answers
/// already ran (their units spent): an MCP answer holding a call's result, with each reply too
/// large to keep replaced by an error that says it was answered (for a call, where its result
/// is) ([`crate::mcp`]), or an A2A answer carrying a committed task, with its output left out
/// and a statement of the same in its place ([`crate::a2a`]). A bare `503` told the agent
/// nothing of what had run. Answers that ran nothing carry none. One of more than
/// [`WITHHELD_MOST_BYTES`] is not sent: the answer gets the `503`.
#[derive(Debug, Clone)]
pub struct Withheld {
    /// Its status (the revision's status of the replacing error).
    pub status: StatusCode,
    pub body: Bytes,
}

/// The budget and the client a request's answer is counted against, handed by the listener
/// to the router in the request's extensions, so that the budget acts inside the router's
/// edge ([`super::host::guard`] calls [`within`]): after the Host and Origin checks, and
/// under the headers every answer carries (CORS for an accepted origin, `nosniff`,
/// `no-store`), which a 503 built outside the router lacked.
#[derive(Clone)]
pub struct Budgeted {
    pub replies: ReplyBudget,
    pub client: Client,
    /// The connection's peer address: requests without a credential are counted by it too.
    pub peer: Option<IpAddr>,
}

/// Run `request` under its [`Budgeted`] extension: refused before it runs
/// ([`ReplyBudget::refuse_early`]), or its answer counted ([`ReplyBudget::bound`]). Without
/// one (a router served in process), it just runs.
pub async fn within<F, Fut>(mut request: axum::extract::Request, run: F) -> Response
where
    F: FnOnce(axum::extract::Request) -> Fut,
    Fut: std::future::Future<Output = Response>,
{
    let Some(budgeted) = request.extensions_mut().remove::<Budgeted>() else {
        return run(request).await;
    };
    // Past its credential's share of requests in flight: refused here, like the budget's,
    // and counted here, past the Host and Origin checks (a request they refuse, or a
    // preflight, never reaches this).
    if request
        .extensions()
        .get::<super::connections::OverShare>()
        .is_some()
    {
        budgeted
            .replies
            .metrics
            .limit_tripped(Limit::RequestsInFlight);
        return busy(super::connections::REQUESTS_TEXT);
    }
    if let Some(refused) = budgeted.replies.refuse_early(&budgeted.client) {
        return refused;
    }
    let answer = run(request).await;
    budgeted
        .replies
        .bound(&budgeted.client, budgeted.peer, answer)
        .await
}

fn busy(message: &str) -> Response {
    ApiError::busy(message).into_response()
}

/// A counted answer: handed out in [`CHUNK_BYTES`] frames; its share of the budget returns
/// when the last frame is taken or the answer is dropped (its connection ended).
struct Counted {
    rest: Bytes,
    counted: Option<Taken>,
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
            this.counted = None;
            return Poll::Ready(None);
        }
        let chunk = this.rest.split_to(this.rest.len().min(CHUNK_BYTES));
        if this.rest.is_empty() {
            this.counted = None;
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
    use axum::http::header::{AUTHORIZATION, RETRY_AFTER};
    use axum::http::HeaderValue;

    fn answer(bytes: usize) -> Response {
        (StatusCode::OK, "x".repeat(bytes)).into_response()
    }

    fn client(name: &str) -> Client {
        Client(Some(name.to_owned()))
    }

    fn headers(authorization: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(AUTHORIZATION, HeaderValue::from_str(authorization).unwrap());
        h
    }

    /// A session that spells its `Authorization` header another way (more spaces, a tab) is
    /// still one client with one share; a header that is no bearer token is nobody's.
    #[test]
    fn every_spelling_of_one_credential_is_one_client() {
        let token = "ab".repeat(32);
        let one = Client::of(&headers(&format!("Bearer {token}")));
        // Keyed by the credential id, as a session's client is: never by the token itself.
        assert_eq!(
            one,
            Client::of_session(Some(&crate::edge::credential::session_of(
                &broker_core::session::credential_id(&token)
            )))
        );
        for spelling in [format!("Bearer\t{token}"), format!("Bearer  \t {token}")] {
            assert_eq!(Client::of(&headers(&spelling)), one, "{spelling:?}");
        }
        assert_eq!(Client::of(&headers("Basic dXNlcg==")), Client(None));
        assert_eq!(Client::of(&HeaderMap::new()), Client(None));
    }

    /// A credential authenticates in either case of its hex digits, and the body quotas
    /// (the body budget's quarter, the readers' quarter) key their clients by `Client::of`:
    /// each case spelling had a quota of its own, so one session could hold the whole body
    /// budget under four spellings and refuse every other session's calls.
    #[test]
    fn a_credential_respelled_in_upper_case_is_one_client_for_the_body_quotas() {
        let token = "8e98fd6df81ee432".repeat(4);
        let one = Client::of(&headers(&format!("Bearer {token}")));
        for spelling in [
            token.to_ascii_uppercase(),
            format!("8E98fD6Df81Ee432{}", &token[16..]),
        ] {
            assert_eq!(
                Client::of(&headers(&format!("Bearer {spelling}"))),
                one,
                "{spelling}"
            );
        }
    }

    /// A made-up token is nobody's: it shares the anonymous share and turn, as a request
    /// without one does, instead of taking a share of its own; a live session's token is
    /// its session's, however the header spells it.
    #[test]
    fn a_client_is_named_by_the_session_its_token_names_or_is_nobody() {
        let token = "ab".repeat(32);
        let known = |header: &str| {
            let parsed = broker_core::session::parse_authorization(Some(header)).ok()?;
            (parsed == token).then(|| crate::edge::credential::session_of("cred-1"))
        };
        let one = Client::named(&headers(&format!("Bearer {token}")), known);
        assert_eq!(one, Client(Some("cred-1".to_owned())));
        assert_eq!(
            Client::named(&headers(&format!("Bearer \t {token}")), known),
            one
        );
        for other in ["Bearer made-up", "Basic dXNlcg=="] {
            assert_eq!(
                Client::named(&headers(other), known),
                Client(None),
                "{other}"
            );
        }
        assert_eq!(Client::named(&HeaderMap::new(), known), Client(None));
    }

    async fn next_frame(body: &mut Body) -> Option<Bytes> {
        let frame = std::future::poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx)).await?;
        frame.ok()?.into_data().ok()
    }

    async fn message(r: Response) -> String {
        let body = axum::body::to_bytes(r.into_body(), 4096).await.unwrap();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        v["error"]["message"].as_str().unwrap().to_owned()
    }

    #[tokio::test]
    async fn answers_up_to_16_kib_are_not_counted() {
        let b = ReplyBudget::new(256 * KIB, Metrics::default());
        let a = b.bound(&client("a"), None, answer(UNCOUNTED_BYTES)).await;
        assert_eq!(a.status(), StatusCode::OK);
        assert_eq!(b.free_kib(), 256);
    }

    /// A counted answer holds its KiB until its last frame is taken; it goes out in 16 KiB
    /// frames with its length intact.
    #[tokio::test]
    async fn a_counted_answer_holds_its_share_until_its_last_frame() {
        let b = ReplyBudget::new(256 * KIB, Metrics::default());
        let a = b.bound(&client("a"), None, answer(48 * KIB)).await;
        assert_eq!(a.status(), StatusCode::OK);
        assert_eq!(a.body().size_hint().exact(), Some(48 * 1024));
        assert_eq!(b.free_kib(), 256 - 32);
        let mut body = a.into_body();
        let mut sizes = Vec::new();
        while let Some(chunk) = next_frame(&mut body).await {
            sizes.push(chunk.len());
            if sizes.len() < 3 {
                assert_eq!(b.free_kib(), 224, "returned before the last frame");
            }
        }
        assert_eq!(sizes, [CHUNK_BYTES; 3]);
        assert_eq!(b.free_kib(), 256);
    }

    /// When the budget is full an answer becomes 503 with Retry-After and the trip is
    /// counted; small answers still pass; an answer dropped unsent (its connection ended)
    /// gives its KiB back.
    #[tokio::test]
    async fn a_full_budget_answers_503_and_a_dropped_answer_frees_its_share() {
        let metrics = Metrics::default();
        let b = ReplyBudget::new(256 * KIB, metrics.clone());
        let mut held = Vec::new();
        for name in ["a", "b", "c", "d"] {
            let a = b
                .bound(&client(name), None, answer(16 * KIB + 60 * KIB))
                .await;
            assert_eq!(a.status(), StatusCode::OK);
            held.push(a);
        }
        assert_eq!(b.free_kib(), 16);
        let refused = b
            .bound(&client("e"), None, answer(16 * KIB + 20 * KIB))
            .await;
        assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(refused.headers()[RETRY_AFTER], "1");
        assert_eq!(message(refused).await, BUSY_TEXT);
        assert_eq!(metrics.trips(Limit::ReplyBudget), 1);
        assert_eq!(metrics.trips(Limit::ReplyShare), 0);
        assert_eq!(
            b.bound(&client("e"), None, answer(1000)).await.status(),
            StatusCode::OK
        );
        held.pop();
        assert_eq!(b.free_kib(), 76);
        assert_eq!(
            b.bound(&client("e"), None, answer(16 * KIB + 20 * KIB))
                .await
                .status(),
            StatusCode::OK
        );
    }

    /// One credential holds at most a quarter of the budget: past it, its answers are
    /// replaced and its next requests refused before they run, while another credential's
    /// large answer passes.
    #[tokio::test]
    async fn one_credential_holds_at_most_a_quarter_of_the_budget() {
        let metrics = Metrics::default();
        let b = ReplyBudget::new(256 * KIB, metrics.clone());
        let (a, other) = (client("a"), client("b"));
        let first = b.bound(&a, None, answer(16 * KIB + 40 * KIB)).await;
        assert_eq!(first.status(), StatusCode::OK);
        assert!(b.refuse_early(&a).is_none(), "40 of 64 KiB held");
        let second = b.bound(&a, None, answer(16 * KIB + 40 * KIB)).await;
        assert_eq!(second.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(message(second).await, SHARE_TEXT);
        assert_eq!(metrics.trips(Limit::ReplyShare), 1);
        let full = b.bound(&a, None, answer(16 * KIB + 24 * KIB)).await;
        assert_eq!(full.status(), StatusCode::OK);
        let early = b.refuse_early(&a).expect("64 of 64 KiB held");
        assert_eq!(early.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(message(early).await, SHARE_TEXT);
        assert_eq!(metrics.trips(Limit::ReplyShare), 2);
        assert!(b.refuse_early(&other).is_none());
        assert_eq!(
            b.bound(&other, None, answer(16 * KIB + 64 * KIB))
                .await
                .status(),
            StatusCode::OK
        );
        drop((first, full));
        assert!(b.refuse_early(&a).is_none());
        assert_eq!(b.free_kib(), 256);
        assert_eq!(
            b.shares.holders(),
            0,
            "no client is kept once it holds nothing"
        );
    }

    /// Bench row 9's attack: sessions that each hold unread megabyte answers, their shares not
    /// quite full, asking again and again. Each answer was built and then thrown away; now a
    /// client whose answer did not fit is refused before its requests run for a second, while
    /// its share or the budget still has no room for one that size.
    #[tokio::test(start_paused = true)]
    async fn a_client_whose_large_answer_did_not_fit_is_refused_before_its_next_requests_run() {
        let metrics = Metrics::default();
        let b = ReplyBudget::new(256 * KIB, metrics.clone());
        let a = client("a");
        let held = b.bound(&a, None, answer(16 * KIB + 40 * KIB)).await;
        assert_eq!(held.status(), StatusCode::OK);
        let refused = b.bound(&a, None, answer(16 * KIB + 40 * KIB)).await;
        assert_eq!(message(refused).await, SHARE_TEXT);
        // 40 of its 64 KiB held: not full, but no room for another 40.
        let early = b.refuse_early(&a).expect("refused before it runs");
        assert_eq!(message(early).await, SHARE_TEXT);
        assert!(
            b.refuse_early(&client("b")).is_none(),
            "another client runs"
        );
        assert_eq!(metrics.trips(Limit::ReplyShare), 2);
        // The hold ends after the second it was told to wait: it may try again.
        tokio::time::advance(REFUSED_HOLD).await;
        assert!(b.refuse_early(&a).is_none());
        let refused = b.bound(&a, None, answer(16 * KIB + 40 * KIB)).await;
        assert_eq!(message(refused).await, SHARE_TEXT);
        assert!(b.refuse_early(&a).is_some());
        // Room again: its requests run at once.
        drop(held);
        assert!(b.refuse_early(&a).is_none());
        assert!(b.refuse_early(&a).is_none(), "forgotten once it ran");

        // The same when the budget, not its share, has no room.
        let mut others = Vec::new();
        for c in ["c", "d", "e", "f"] {
            others.push(b.bound(&client(c), None, answer(16 * KIB + 64 * KIB)).await);
        }
        assert_eq!(b.free_kib(), 0);
        let refused = b.bound(&a, None, answer(16 * KIB + 40 * KIB)).await;
        assert_eq!(message(refused).await, BUSY_TEXT);
        let early = b.refuse_early(&a).expect("refused before it runs");
        assert_eq!(message(early).await, BUSY_TEXT);
        drop(others);
        assert!(b.refuse_early(&a).is_none());
    }

    /// The clients remembered for a refused answer are forgotten once their hold is over and
    /// the map has reached [`REFUSED_KEPT`], so that it grows no further than the clients
    /// refused within one hold.
    #[tokio::test(start_paused = true)]
    async fn clients_whose_hold_is_over_are_forgotten_past_refused_kept() {
        let b = ReplyBudget::new(256 * KIB, Metrics::default());
        let kept = |b: &ReplyBudget| b.refused.lock().unwrap().len();
        for i in 0..REFUSED_KEPT {
            b.note_refused(&client(&i.to_string()), 1);
        }
        b.note_refused(&Client(None), 1);
        assert_eq!(
            kept(&b),
            REFUSED_KEPT,
            "nobody's refusals are not remembered"
        );
        // Within their hold none is forgotten.
        b.note_refused(&client("within"), 1);
        assert_eq!(kept(&b), REFUSED_KEPT + 1);
        tokio::time::advance(REFUSED_HOLD).await;
        b.note_refused(&client("after"), 1);
        assert_eq!(kept(&b), 1, "only the one refused after their hold");
    }

    /// Requests without a credential are never refused before they run, even with the
    /// anonymous share full: their large answers are bounded when they are ready.
    #[tokio::test]
    async fn requests_without_a_credential_always_run() {
        let b = ReplyBudget::new(256 * KIB, Metrics::default());
        let anonymous = Client::of(&HeaderMap::new());
        let held = b.bound(&anonymous, None, answer(16 * KIB + 64 * KIB)).await;
        assert_eq!(held.status(), StatusCode::OK);
        assert!(b.refuse_early(&anonymous).is_none());
        let refused = b.bound(&anonymous, None, answer(16 * KIB + 1024)).await;
        assert_eq!(message(refused).await, ANONYMOUS_SHARE_TEXT);
    }

    /// Four addresses without a credential, each within its own part, filled the anonymous
    /// share, and a fifth address's answer was refused with "too many answers to this
    /// credential", which it had not sent: it is told the share of every client without one
    /// is full.
    #[tokio::test]
    async fn a_full_anonymous_share_is_not_said_to_be_the_callers_credential() {
        let b = ReplyBudget::new(256 * KIB, Metrics::default());
        let anonymous = Client::of(&HeaderMap::new());
        let peer = |i: u8| Some(IpAddr::from([127, 0, 0, i]));
        let mut held = Vec::new();
        for i in 1..=4 {
            let a = b
                .bound(&anonymous, peer(i), answer(16 * KIB + 16 * KIB))
                .await;
            assert_eq!(a.status(), StatusCode::OK, "address {i}");
            held.push(a);
        }
        let refused = b.bound(&anonymous, peer(5), answer(16 * KIB + 1024)).await;
        assert_eq!(message(refused).await, ANONYMOUS_SHARE_TEXT);
        drop(held);
        let a = b.bound(&anonymous, peer(5), answer(16 * KIB + 1024)).await;
        assert_eq!(a.status(), StatusCode::OK);
    }

    /// An answer larger than a share takes the whole share rather than never passing.
    #[tokio::test]
    async fn an_answer_larger_than_a_share_takes_all_of_it() {
        let b = ReplyBudget::new(256 * KIB, Metrics::default());
        let a = b.bound(&client("a"), None, answer(1024 * KIB)).await;
        assert_eq!(a.status(), StatusCode::OK);
        assert_eq!(b.free_kib(), 192);
        let bytes = axum::body::to_bytes(a.into_body(), usize::MAX)
            .await
            .unwrap();
        assert_eq!(bytes.len(), 1024 * KIB);
        assert_eq!(b.free_kib(), 256);
    }

    /// `bytes` of answer carrying a withheld form of `withheld` bytes.
    fn answer_withheld(bytes: usize, withheld: usize) -> Response {
        let mut a = answer(bytes);
        a.extensions_mut().insert(Withheld {
            status: StatusCode::OK,
            body: Bytes::from(vec![b'w'; withheld]),
        });
        a
    }

    /// A withheld form had no bound of its own (its replies of up to 4 KiB kept, errors at any
    /// size), and it is counted against the whole budget only: a credential whose share was
    /// full could hold a quarter of a megabyte of the budget per answer. Past
    /// [`WITHHELD_MOST_BYTES`], the answer gets the `503` its share's refusal says, as one
    /// without a withheld form; at the bound it is sent, counted against the budget only.
    #[tokio::test]
    async fn a_withheld_form_past_its_bound_is_not_sent_and_the_answer_gets_the_503() {
        let metrics = Metrics::default();
        let b = ReplyBudget::new(256 * KIB, metrics.clone());
        let a = client("a");
        let held = b.bound(&a, None, answer(16 * KIB + 64 * KIB)).await;
        assert_eq!(held.status(), StatusCode::OK);
        let free = b.free_kib();
        let past = b
            .bound(
                &a,
                None,
                answer_withheld(16 * KIB + 128 * KIB, WITHHELD_MOST_BYTES + 1),
            )
            .await;
        assert_eq!(past.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(message(past).await, SHARE_TEXT);
        assert_eq!(b.free_kib(), free, "nothing is held for it");
        let within = b
            .bound(
                &a,
                None,
                answer_withheld(16 * KIB + 128 * KIB, WITHHELD_MOST_BYTES),
            )
            .await;
        assert_eq!(within.status(), StatusCode::OK);
        assert_eq!(
            within.body().size_hint().exact(),
            Some(WITHHELD_MOST_BYTES as u64)
        );
        assert_eq!(
            b.free_kib(),
            free - (WITHHELD_MOST_BYTES - UNCOUNTED_BYTES) / KIB
        );
        drop((held, within));
        assert_eq!(b.free_kib(), 256);
    }

    /// A withheld form was counted against the whole budget only, bounded per form but not per
    /// credential: a credential whose share was full could hold form after form unread until
    /// the budget was full, and every other credential's large answers got the `503`. A
    /// client's forms hold at most a sixteenth of the budget now: past it, the share's `503`,
    /// while another client's counted answer still fits.
    #[tokio::test]
    async fn one_credentials_withheld_forms_hold_at_most_a_sixteenth_of_the_budget() {
        let metrics = Metrics::default();
        let b = ReplyBudget::new(1024 * KIB, metrics.clone());
        let (a, other) = (client("a"), client("b"));
        // Its share full: 256 of 256 KiB.
        let held = b.bound(&a, None, answer(16 * KIB + 256 * KIB)).await;
        assert_eq!(held.status(), StatusCode::OK);
        assert!(b.shares.is_full(&a));
        // Forms of 32 KiB, each counting 16: four fill its 64 KiB.
        let form = || answer_withheld(16 * KIB + 64 * KIB, 32 * KIB);
        let mut forms = Vec::new();
        for i in 0..4 {
            let f = b.bound(&a, None, form()).await;
            assert_eq!(f.status(), StatusCode::OK, "form {i}");
            assert_eq!(f.body().size_hint().exact(), Some(32 * 1024));
            forms.push(f);
        }
        assert_eq!(b.free_kib(), 1024 - 256 - 4 * 16);
        let past = b.bound(&a, None, form()).await;
        assert_eq!(past.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(past.headers()[RETRY_AFTER], "1");
        assert_eq!(message(past).await, SHARE_TEXT);
        assert_eq!(b.free_kib(), 1024 - 256 - 4 * 16, "nothing held for it");
        // Another client's answer, counted against its own share, fits; so do its own forms.
        let theirs = b.bound(&other, None, answer(16 * KIB + 256 * KIB)).await;
        assert_eq!(theirs.status(), StatusCode::OK);
        let their_form = b.bound(&other, None, form()).await;
        assert_eq!(their_form.status(), StatusCode::OK);
        // A form read (or its connection gone) gives its part back.
        forms.pop();
        assert_eq!(b.bound(&a, None, form()).await.status(), StatusCode::OK);
        drop((held, forms, theirs, their_form));
        assert_eq!(b.free_kib(), 1024);
        assert_eq!(b.withheld.holders(), 0);
    }

    /// Under a budget so small that one form passes a client's withheld allowance, the form
    /// takes all of it rather than never passing; the budget counts it whole.
    #[tokio::test]
    async fn a_withheld_form_larger_than_the_allowance_takes_all_of_it() {
        let b = ReplyBudget::new(256 * KIB, Metrics::default());
        let a = client("a");
        let held = b.bound(&a, None, answer(16 * KIB + 64 * KIB)).await;
        let form = b
            .bound(&a, None, answer_withheld(16 * KIB + 64 * KIB, 48 * KIB))
            .await;
        assert_eq!(form.status(), StatusCode::OK);
        assert_eq!(b.free_kib(), 256 - 64 - 32);
        assert!(b.withheld.is_full(&a));
        assert_eq!(
            b.metrics.trips(Limit::ReplyShare),
            1,
            "the form sent in its place"
        );
        let past = b
            .bound(&a, None, answer_withheld(16 * KIB + 64 * KIB, 17 * KIB))
            .await;
        assert_eq!(message(past).await, SHARE_TEXT);
        // One answer refused is one trip, though both its share and its forms were full.
        assert_eq!(b.metrics.trips(Limit::ReplyShare), 2);
        assert_eq!(b.metrics.trips(Limit::ReplyBudget), 0);
        drop((held, form));
        assert_eq!(b.free_kib(), 256);
    }

    /// A withheld form that is the answer itself (a short output in a long answer) replaces
    /// nothing: it is sent against the client's withheld allowance, and no limit trip is
    /// counted for an answer the client got whole. A form that replaces part of its answer is.
    #[tokio::test]
    async fn a_withheld_form_that_is_the_answer_itself_counts_no_trip() {
        let b = ReplyBudget::new(1024 * KIB, Metrics::default());
        let a = client("a");
        let held = b.bound(&a, None, answer(16 * KIB + 256 * KIB)).await;
        assert_eq!(b.metrics.trips(Limit::ReplyShare), 0);
        let size = 16 * KIB + 8 * KIB;
        let mut itself = answer(size);
        itself.extensions_mut().insert(Withheld {
            status: StatusCode::OK,
            body: Bytes::from("x".repeat(size)),
        });
        let sent = b.bound(&a, None, itself).await;
        assert_eq!(sent.status(), StatusCode::OK);
        let body = axum::body::to_bytes(sent.into_body(), usize::MAX)
            .await
            .unwrap();
        assert_eq!(body, "x".repeat(size));
        assert_eq!(
            b.metrics.trips(Limit::ReplyShare),
            0,
            "nothing was replaced"
        );
        let replaced = b.bound(&a, None, answer_withheld(size, size)).await;
        assert_eq!(replaced.status(), StatusCode::OK);
        assert_eq!(b.metrics.trips(Limit::ReplyShare), 1);
        drop(held);
    }

    /// A request past its credential's share of requests in flight is refused inside the
    /// router and counted there, once: a request the Host or Origin check refuses never
    /// reaches [`within`], and is not counted as refused for the share.
    #[tokio::test]
    async fn a_request_over_its_share_is_counted_where_its_503_is_built() {
        let b = ReplyBudget::new(1024 * KIB, Metrics::default());
        let mut request = axum::extract::Request::new(Body::empty());
        request
            .extensions_mut()
            .insert(super::super::connections::OverShare);
        request.extensions_mut().insert(Budgeted {
            replies: b.clone(),
            client: client("a"),
            peer: None,
        });
        let ran = std::sync::atomic::AtomicBool::new(false);
        let answer = within(request, |_| async {
            ran.store(true, std::sync::atomic::Ordering::Relaxed);
            answer(1)
        })
        .await;
        assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            message(answer).await,
            super::super::connections::REQUESTS_TEXT
        );
        assert!(
            !ran.load(std::sync::atomic::Ordering::Relaxed),
            "nothing ran"
        );
        assert_eq!(b.metrics.trips(Limit::RequestsInFlight), 1);
    }

    /// Streams of unknown length pass uncounted.
    #[tokio::test]
    async fn streams_are_not_counted() {
        let b = ReplyBudget::new(256 * KIB, Metrics::default());
        let stream = futures_util::stream::iter([Ok::<_, std::convert::Infallible>(Bytes::from(
            vec![0u8; 100 * KIB],
        ))]);
        let a = b
            .bound(&client("a"), None, Response::new(Body::from_stream(stream)))
            .await;
        assert_eq!(a.status(), StatusCode::OK);
        assert_eq!(b.free_kib(), 256);
    }
}
