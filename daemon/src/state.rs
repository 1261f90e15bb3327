//! Shared state of a running daemon and the two operations every surface needs:
//! authenticate a request and invoke a tool.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use axum::http::HeaderMap;
use broker_core::coordinator::{Begun, Call, CallError, CallOutput, Coordinator};
use broker_core::session::{self, AuthError, AuthenticateError, Session};
use broker_core::store::Store;
use handler_api::EffectClass;
use tokio::time::Instant;

use crate::admission::{Admission, Refusal, Ticket};
use crate::edge::body::Bodies;
use crate::edge::credential;
use crate::edge::host::HostPolicy;
use crate::edge::ServerConfig;
use crate::limits::Limits;
use crate::log_stream::LogStreamHub;
use crate::metrics::{Limit, Metrics};
use crate::watched::{self, CallResult, Ended, WatchedCall};

/// Why authentication did not produce a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthFailure {
    Denied(AuthError),
    /// The store failed underneath; logged.
    Internal,
}

/// Why an invocation produced no committed result.
#[derive(Debug)]
pub enum InvokeFailure {
    /// The coordinator refused or failed the call.
    Call(CallError),
    /// Every global execution slot stayed busy; nothing ran.
    Capacity,
    /// The call would commit a plan refusal or a denial, and the credential's refusal rate was
    /// spent: nothing was committed. Answered with the capacity error's text, classified apart.
    RefusalRate,
    /// The episode's queue was full, or the call's deadline passed while an earlier call of
    /// its episode was still running; nothing ran.
    Busy,
    /// The deadline passed: the handler overran its own (its outcome is journaled when it
    /// returns, never committed), or the call as a whole did (it may still commit).
    TimedOut,
    /// The task running the call was cancelled or panicked.
    Canceled,
    /// The session's credential was revoked after its request arrived (while its body came,
    /// or while the call waited for its turn): nothing ran and nothing was journaled, so its
    /// task id is unused ([`REVOKED_WHILE_WAITING`]).
    Revoked,
}

/// What a call whose credential was revoked while it waited is told (A2A and MCP alike, with
/// the authentication errors' code, -32001).
pub const REVOKED_WHILE_WAITING: &str = "session credential was revoked while this call waited: nothing ran and nothing was journaled (its task id is unused); send it again with a valid credential";

/// Static facts shown by `/v1/health`.
#[derive(Debug, Clone)]
pub struct DaemonInfo {
    pub db_path: String,
    pub version: &'static str,
    pub open_reads: bool,
}

struct Inner {
    /// Effect name → class, from the loaded plugins' manifests.
    classes: HashMap<String, EffectClass>,
    store: Store,
    /// Decoded sessions, checked against their records on every request.
    sessions: session::SessionCache,
    coordinator: Arc<Coordinator>,
    admission: Admission,
    limits: Limits,
    server: ServerConfig,
    host_policy: HostPolicy,
    bodies: Bodies,
    turns: crate::edge::turns::Turns,
    info: DaemonInfo,
    metrics: Metrics,
    catalog: crate::catalog::Catalog,
    log_stream: LogStreamHub,
}

/// Cheap to clone; one per daemon.
#[derive(Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

/// Builds an [`AppState`]: every setting is given before the state exists, so none can be
/// lost on a state already shared (as a `with_*` on a cloned `Arc` once silently was).
pub struct AppStateBuilder {
    store: Store,
    coordinator: Arc<Coordinator>,
    info: DaemonInfo,
    classes: HashMap<String, EffectClass>,
    limits: Limits,
    server: ServerConfig,
    catalog: crate::catalog::Catalog,
    metrics: Metrics,
}

impl AppStateBuilder {
    /// The effect classes of the loaded plugins (default: none).
    pub fn classes(mut self, classes: HashMap<String, EffectClass>) -> Self {
        self.classes = classes;
        self
    }

    /// The sizes, counts and deadlines of calls (default: [`Limits::default`]).
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// The edge settings (default: [`ServerConfig::default`]).
    pub fn server(mut self, server: ServerConfig) -> Self {
        self.server = server;
        self
    }

    /// The plugins the daemon loaded (default: none).
    pub fn catalog(mut self, catalog: crate::catalog::Catalog) -> Self {
        self.catalog = catalog;
        self
    }

    /// Where the daemon's counters are kept (default: new ones). `serve` makes them before it
    /// loads the plugins, which count their own trips there.
    pub fn metrics(mut self, metrics: Metrics) -> Self {
        self.metrics = metrics;
        self
    }

    pub fn build(self) -> AppState {
        let metrics = self.metrics;
        crate::durable_answers::note_reads(&self.store);
        AppState {
            inner: Arc::new(Inner {
                classes: self.classes,
                log_stream: LogStreamHub::new(
                    &self.store,
                    self.server.log_streams,
                    self.server.log_streams_per_episode,
                    metrics.clone(),
                ),
                store: self.store,
                sessions: session::SessionCache::default(),
                coordinator: self.coordinator,
                admission: Admission::new(self.limits.clone()),
                limits: self.limits,
                host_policy: HostPolicy::new(&self.server),
                turns: crate::edge::turns::Turns::new(&self.server),
                bodies: Bodies::new(self.server.body_budget_bytes, metrics.clone())
                    .small_pieces(self.server.body_small_pieces),
                server: self.server,
                info: self.info,
                metrics,
                catalog: self.catalog,
            }),
        }
    }
}

impl AppState {
    /// A state with every setting at its default: `AppState::builder(…).build()`.
    pub fn new(store: Store, coordinator: Arc<Coordinator>, info: DaemonInfo) -> AppState {
        AppState::builder(store, coordinator, info).build()
    }

    /// Start building a state; set what differs from the defaults, then `build`.
    pub fn builder(
        store: Store,
        coordinator: Arc<Coordinator>,
        info: DaemonInfo,
    ) -> AppStateBuilder {
        AppStateBuilder {
            store,
            coordinator,
            info,
            classes: HashMap::new(),
            limits: Limits::default(),
            server: ServerConfig::default(),
            catalog: Default::default(),
            metrics: Metrics::default(),
        }
    }

    pub fn server(&self) -> &ServerConfig {
        &self.inner.server
    }

    /// The turns of each client's REST reads.
    pub fn turns(&self) -> &crate::edge::turns::Turns {
        &self.inner.turns
    }

    /// Request bodies, read within the shared budget ([`crate::edge::body`]).
    pub fn bodies(&self) -> &Bodies {
        &self.inner.bodies
    }

    pub fn host_policy(&self) -> &HostPolicy {
        &self.inner.host_policy
    }

    pub fn limits(&self) -> &Limits {
        &self.inner.limits
    }

    pub fn admission(&self) -> &Admission {
        &self.inner.admission
    }

    pub fn catalog(&self) -> &crate::catalog::Catalog {
        &self.inner.catalog
    }

    /// The class of an effect; `None` when no loaded plugin declares it.
    pub fn effect_class(&self, effect: &str) -> Option<EffectClass> {
        self.inner.classes.get(effect).copied()
    }

    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    pub fn coordinator(&self) -> &Arc<Coordinator> {
        &self.inner.coordinator
    }

    pub fn info(&self) -> &DaemonInfo {
        &self.inner.info
    }

    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// What the open `GET /v1/log/stream` streams share.
    pub fn log_stream(&self) -> &LogStreamHub {
        &self.inner.log_stream
    }

    /// Resolve the `Authorization` header to a valid session.
    pub async fn authenticate(&self, headers: &HeaderMap) -> Result<Arc<Session>, AuthFailure> {
        let field = credential::authorization(headers);
        // Found live a moment ago, before the request was routed: one lookup per request.
        if let Some(found) = field
            .ok()
            .flatten()
            .and_then(credential::found_before_routing)
        {
            return Ok(found);
        }
        // Shape errors need no store access.
        let header = match field.and_then(|h| session::parse_authorization(h).map(|_| h)) {
            Ok(h) => h,
            Err(d) => {
                self.inner.metrics.credential_refused(&d, || None);
                return Err(AuthFailure::Denied(d));
            }
        };
        // An LMDB read never waits for writers and touches a few mapped pages: doing it here
        // saves a hop to the blocking pool on every request.
        let now = self.inner.coordinator.now();
        match self
            .inner
            .sessions
            .authenticate(&self.inner.store, header, now)
        {
            Ok(s) => Ok(s),
            Err(AuthenticateError::Denied(d)) => {
                let whose = || credential::whose(&self.inner.sessions, &self.inner.store, header);
                self.inner.metrics.credential_refused(&d, whose);
                Err(AuthFailure::Denied(d))
            }
            Err(AuthenticateError::Store(e)) => {
                tracing::error!("credential lookup failed: {e}");
                Err(AuthFailure::Internal)
            }
        }
    }

    /// The live session `credential` (an `Authorization` field's value) names, if any: for the
    /// accept loop, which keeps a few places for new connections that carry one, and a share of
    /// them for each session ([`crate::edge::arrived`]), and what its service finds for a
    /// request before it is routed, which [`AppState::authenticate`] then takes as found.
    /// Nothing is counted: a credential found not live is authenticated again, and refused or
    /// counted then.
    pub fn live_session(&self, credential: &str) -> Option<Arc<Session>> {
        // Looked up already for this request, before it was routed.
        if let Some(found) = credential::looked_up_before_routing(credential) {
            return found;
        }
        // `authenticate` reads the field's shape first: a malformed one costs no lookup.
        let session = self.inner.sessions.authenticate(
            &self.inner.store,
            Some(credential),
            self.inner.coordinator.now(),
        );
        session.ok()
    }

    /// Admit one call ([`crate::admission`]), open and plan it on this task, and answer by
    /// `until` at the latest. A call with an effect runs its effect steps on the blocking pool,
    /// where its handler runs too; this task watches it ([`crate::watched`]) and answers as
    /// timed out at the handler's deadline, freeing the global slot then, while the episode
    /// stays busy until the handler really returns. Every commit is driven to its end, by this
    /// task or, once nobody waits, by a task of its own. `body_bytes` is the size of the
    /// request body the call came in: past [`crate::limits::Limits::large_call_bytes`] it is a
    /// large call.
    pub async fn invoke(
        &self,
        call: Call,
        until: Instant,
        body_bytes: usize,
    ) -> Result<CallOutput, InvokeFailure> {
        // A resent task id whose call is still running is named now, not queued behind it.
        if let Some(task) = &call.task_id {
            let coordinator = &self.inner.coordinator;
            if coordinator.in_flight(call.surface, &call.session.episode, task) {
                // Counted (`outcome="error"`, a reused task id) and logged as every resend of
                // a used key is, though it leaves before the call is admitted.
                let reused = Err(CallError::TaskIdReused);
                let (tool, episode) = (&call.skill_id, &call.session.episode);
                let metrics = &self.inner.metrics;
                metrics.observe_call(tool, episode, &reused, std::time::Duration::ZERO);
                return Err(InvokeFailure::Call(CallError::TaskIdReused));
            }
        }
        let episode = call.session.episode.clone();
        let key = call
            .task_id
            .as_ref()
            .map(|task| call.surface.invocation_id(&episode, task));
        let admit = self
            .inner
            .admission
            .admit_keyed(&episode, key, until, body_bytes);
        let admitted = admit.await;
        let mut call = call;
        if admitted.is_ok() {
            // A call runs on its credential as it is now, not as it was when its request head
            // arrived: one revoked meanwhile runs nothing. It may have waited behind its
            // episode's running call or for a slot, or for its body, trickled in for up to
            // `body_timeout_ms`. One read of the session's record (a few mapped pages; the
            // decoded session is cached), which a call's opening and planning far outweigh.
            call.session = self.session_now(&call.session)?;
        }
        let Ticket { turn, slot } = match admitted {
            Ok(t) => t,
            Err(refusal) => {
                self.inner.metrics.admission_refused(refusal);
                return Err(match refusal {
                    Refusal::NoSlot | Refusal::NoLargeLane => InvokeFailure::Capacity,
                    Refusal::QueueFull | Refusal::EpisodeBusy => InvokeFailure::Busy,
                });
            }
        };
        let coordinator = self.inner.coordinator.clone();
        let metrics = self.inner.metrics.clone();
        let tool = call.skill_id.clone();
        let episode = call.session.episode.clone();
        let started = std::time::Instant::now();
        let observe =
            move |result: &_| metrics.observe_call(&tool, &episode, result, started.elapsed());
        // Opening and planning read the store and never wait for a writer or a handler. A
        // panic there is answered as one on a blocking thread would be, not by dropping the
        // connection.
        let begun = std::panic::catch_unwind(AssertUnwindSafe(|| coordinator.begin(call, turn)));
        let Ok(begun) = begun else {
            tracing::error!("opening or planning a call panicked");
            return Err(InvokeFailure::Canceled);
        };
        let driven = match begun {
            Ok(Begun::Committing(committing)) => watched::drive(committing, slot, observe),
            Ok(Begun::Effect(effect)) => {
                let until_std = until.into_std();
                let mut running = WatchedCall::start(coordinator, effect, until_std, slot, observe);
                match running.ended(until).await {
                    Ended::Abandoned => return Err(InvokeFailure::TimedOut),
                    Ended::CallDeadline => return Err(self.past_call_deadline()),
                    Ended::Returned(Err(_)) => return Err(InvokeFailure::Canceled),
                    Ended::Returned(Ok(Err(err))) => return answer(Err(err)),
                    Ended::Returned(Ok(Ok(driven))) => driven,
                }
            }
            Ok(Begun::Replayed(out)) => return observed(Ok(out), observe),
            Err(err) => return observed(Err(err), observe),
        };
        tokio::select! {
            biased;
            driven = driven => match driven {
                Ok(result) => answer(result),
                Err(watched::Panicked) => Err(InvokeFailure::Canceled),
            },
            () = tokio::time::sleep_until(until) => Err(self.past_call_deadline()),
        }
    }

    /// `session` as its record is now. A revoked one is [`InvokeFailure::Revoked`]: its call
    /// runs nothing and writes nothing, so its task id stays free for a resend with a valid
    /// credential. (One that expired meanwhile reaches the broker, which denies it
    /// `denied:expired`, in the log like any denial.)
    pub fn session_now(&self, session: &Arc<Session>) -> Result<Arc<Session>, InvokeFailure> {
        match self
            .inner
            .sessions
            .current(&self.inner.store, &session.credential_id)
        {
            Ok(Some(now)) => Ok(now),
            Ok(None) => Err(InvokeFailure::Revoked),
            Err(e) => {
                tracing::error!("credential lookup failed: {e}");
                Err(InvokeFailure::Canceled)
            }
        }
    }

    /// The call deadline passed first. The handler's deadline is the watch's; this one bounds
    /// the rest of the call (a store that does not answer), which may then still commit.
    fn past_call_deadline(&self) -> InvokeFailure {
        self.inner.metrics.limit_tripped(Limit::CallDeadline);
        InvokeFailure::TimedOut
    }
}

/// A call answered without a commit to wait for: counted, then answered.
fn observed(
    result: CallResult,
    observe: impl FnOnce(&CallResult),
) -> Result<CallOutput, InvokeFailure> {
    observe(&result);
    answer(result)
}

/// The coordinator's answer, as the surfaces see it.
fn answer(result: CallResult) -> Result<CallOutput, InvokeFailure> {
    match result {
        Ok(out) => Ok(out),
        Err(CallError::HandlerTimedOut) => Err(InvokeFailure::TimedOut),
        // A refusal or denial over the session's rate is answered with the capacity error's
        // text, classified as what it is.
        Err(CallError::RefusalRate) => Err(InvokeFailure::RefusalRate),
        Err(e) => Err(InvokeFailure::Call(e)),
    }
}

/// A state on a new store of its own, with no handlers (tests).
#[cfg(test)]
pub(crate) fn on_a_new_store() -> (tempfile::TempDir, Store, AppState) {
    use broker_core::coordinator::{CoordinatorConfig, Handlers};
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(&dir.path().join("db")).unwrap();
    let coordinator =
        Coordinator::new(store.clone(), Handlers::new(), CoordinatorConfig::default());
    let info = DaemonInfo {
        db_path: "db".into(),
        version: "test",
        open_reads: false,
    };
    let state = AppState::new(store.clone(), Arc::new(coordinator), info);
    (dir, store, state)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A session of episode `ep` minted now, by the state's clock.
    fn minted(store: &Store, state: &AppState) -> session::Minted {
        let grants = vec!["Workspace.Read=worktree:10".parse().unwrap()];
        session::mint(store, "ep", grants, 3600, state.inner.coordinator.now()).unwrap()
    }

    #[test]
    fn a_credential_is_known_to_the_accept_loop_while_its_session_lives() {
        let (_dir, store, state) = on_a_new_store();
        let minted = minted(&store, &state);
        let credential = format!("Bearer {}", minted.token);
        let live_id = |credential: &str| {
            state
                .live_session(credential)
                .map(|s| s.credential_id.clone())
        };
        assert_eq!(
            live_id(&credential),
            Some(session::credential_id(&minted.token))
        );
        // Another token, another scheme, or no token at all: unknown.
        let other = format!("Bearer {}", "a".repeat(minted.token.len()));
        assert!(live_id(&other).is_none());
        assert!(live_id(&format!("Basic {}", minted.token)).is_none());
        assert!(live_id("Bearer").is_none());
        // Revoked: unknown from then on, though it was known (and cached) before.
        assert!(session::revoke(&store, &session::credential_id(&minted.token)).unwrap());
        assert!(live_id(&credential).is_none());
    }

    #[tokio::test]
    async fn a_request_whose_session_was_found_before_routing_is_not_looked_up_again() {
        let (_dir, store, state) = on_a_new_store();
        let minted = minted(&store, &state);
        let credential = format!("Bearer {}", minted.token);
        let mut headers = HeaderMap::new();
        headers.insert(
            axum::http::header::AUTHORIZATION,
            credential.parse().unwrap(),
        );
        let found = state.live_session(&credential).expect("live");
        // Revoked between the accept loop's lookup and the route's: the request in flight
        // keeps the session it was found with, and the store is not asked again.
        assert!(session::revoke(&store, &found.credential_id).unwrap());
        let resolved = credential::Resolved::new(&credential, Some(found.clone()));
        credential::routed_with(Some(resolved), async {
            let session = state.authenticate(&headers).await.expect("found before");
            assert!(Arc::ptr_eq(&session, &found));
        })
        .await;
        // The next request, and one routed without a lookup, ask the store: revoked.
        for resolved in [
            None,
            Some(credential::Resolved::new(&credential, Some(found.clone()))),
        ] {
            let another_credential = resolved.is_some();
            let other_request = async {
                let mut stale = headers.clone();
                if another_credential {
                    // What was found for another credential is not this request's.
                    let other = format!("Bearer {}", "b".repeat(minted.token.len()));
                    stale.insert(axum::http::header::AUTHORIZATION, other.parse().unwrap());
                }
                state.authenticate(&stale).await
            };
            let refused = credential::routed_with(resolved, other_request).await;
            assert!(matches!(
                refused,
                Err(AuthFailure::Denied(AuthError::Unknown))
            ));
        }
        assert!(matches!(
            state.authenticate(&headers).await,
            Err(AuthFailure::Denied(AuthError::Unknown))
        ));
    }
}
