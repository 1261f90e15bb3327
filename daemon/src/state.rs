//! Shared state of a running daemon and the two operations every surface needs:
//! authenticate a request and invoke a tool.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::http::HeaderMap;
use broker_core::coordinator::{Call, CallError, CallOutput, Coordinator};
use broker_core::session::{self, AuthError, AuthenticateError, Session};
use broker_core::store::Store;
use handler_api::EffectClass;
use tokio::sync::Semaphore;

use crate::log_stream::LogStreamHub;
use crate::metrics::Metrics;

/// One invocation (host callback), including admission, plan, effect and commit.
pub const INVOKE_DEADLINE: Duration = Duration::from_secs(20);
/// Host callbacks that may run at once.
pub const MAX_CALLBACKS: usize = 8;
/// How long a call waits for a free callback slot before it is refused with
/// `host callback capacity exceeded` (within its own deadline). A short queue turns bursts
/// into batches for the store's group commit instead of into client retries.
pub const CAPACITY_WAIT: Duration = Duration::from_millis(500);

/// Why authentication did not produce a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthFailure {
    Denied(AuthError),
    /// The store could not answer in time.
    Timeout,
    /// The store failed underneath; logged.
    Internal,
}

/// Why an invocation produced no committed result.
#[derive(Debug)]
pub enum InvokeFailure {
    /// The coordinator refused or failed the call.
    Call(CallError),
    /// All callback slots are busy.
    Capacity,
    /// The deadline passed; the call may still complete in the background.
    TimedOut,
    /// The task running the call was cancelled or panicked.
    Canceled,
}

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
    coordinator: Arc<Coordinator>,
    callbacks: Arc<Semaphore>,
    info: DaemonInfo,
    metrics: Metrics,
    log_stream: LogStreamHub,
}

/// Cheap to clone; one per daemon.
#[derive(Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

impl AppState {
    pub fn new(store: Store, coordinator: Arc<Coordinator>, info: DaemonInfo) -> AppState {
        AppState {
            inner: Arc::new(Inner {
                classes: HashMap::new(),
                log_stream: LogStreamHub::new(&store),
                store,
                coordinator,
                callbacks: Arc::new(Semaphore::new(MAX_CALLBACKS)),
                info,
                metrics: Metrics::default(),
            }),
        }
    }

    /// The same state with the effect classes of the loaded plugins (call before sharing).
    pub fn with_classes(mut self, classes: HashMap<String, EffectClass>) -> AppState {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.classes = classes;
        }
        self
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
    pub async fn authenticate(&self, headers: &HeaderMap) -> Result<Session, AuthFailure> {
        let header = match headers.get(axum::http::header::AUTHORIZATION) {
            None => None,
            Some(v) => match v.to_str() {
                Ok(s) => Some(s.to_owned()),
                Err(_) => return Err(AuthFailure::Denied(AuthError::Malformed)),
            },
        };
        // Shape errors need no store access.
        session::parse_authorization(header.as_deref()).map_err(AuthFailure::Denied)?;
        // An LMDB read never waits for writers and touches a few mapped pages: doing it here
        // saves a hop to the blocking pool on every request.
        let now = self.inner.coordinator.now();
        match session::authenticate(&self.inner.store, header.as_deref(), now) {
            Ok(s) => Ok(s),
            Err(AuthenticateError::Denied(d)) => Err(AuthFailure::Denied(d)),
            Err(AuthenticateError::Store(e)) => {
                tracing::error!("credential lookup failed: {e}");
                Err(AuthFailure::Internal)
            }
        }
    }

    /// Run one call on the blocking pool, holding one of [`MAX_CALLBACKS`] slots, within
    /// `deadline` (at most [`INVOKE_DEADLINE`]).
    pub async fn invoke(
        &self,
        call: Call,
        deadline: Duration,
    ) -> Result<CallOutput, InvokeFailure> {
        let wait = CAPACITY_WAIT.min(deadline);
        let permit = match self.inner.callbacks.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                match tokio::time::timeout(wait, self.inner.callbacks.clone().acquire_owned()).await
                {
                    Ok(Ok(p)) => p,
                    _ => {
                        self.inner.metrics.callback_rejected();
                        return Err(InvokeFailure::Capacity);
                    }
                }
            }
        };
        let coordinator = self.inner.coordinator.clone();
        let metrics = self.inner.metrics.clone();
        let tool = call.skill_id.clone();
        let started = std::time::Instant::now();
        let task = tokio::task::spawn_blocking(move || {
            // The permit is released when the call really ends, even after a timeout.
            let _permit = permit;
            let result = coordinator.invoke(&call);
            metrics.observe_call(&tool, &result, started.elapsed());
            result
        });
        match tokio::time::timeout(deadline.min(INVOKE_DEADLINE), task).await {
            Err(_) => Err(InvokeFailure::TimedOut),
            Ok(Err(_)) => Err(InvokeFailure::Canceled),
            Ok(Ok(Ok(out))) => Ok(out),
            Ok(Ok(Err(e))) => Err(InvokeFailure::Call(e)),
        }
    }
}
