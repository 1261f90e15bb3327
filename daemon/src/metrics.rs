//! Operator metrics, rendered in the Prometheus text format at `GET /v1/metrics`.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use broker_core::capacity::{Usage, WARN_PERCENT};
use broker_core::coordinator::{CallError, CallOutput, Overruns};
use broker_core::session::AuthError;
use broker_core::store::Store;
use serde::Deserialize;

use crate::admission::Refusal;
use crate::log_throttle::Throttle;

/// Who may read `GET /v1/metrics` (`[server] metrics_for`). Its counters say, per call of
/// every episode, which tool ran and how it ended, which the filtered log routes hide from
/// other episodes; the open route is the common scrape setup, so it stays the default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MetricsFor {
    /// No credential needed.
    Everyone,
    /// An operator credential (`worldd session mint --operator`), also under `--open-reads`.
    Operators,
}

/// Declares [`Limit`] from one list of variants and their labels, so that [`Limit::ALL`] and
/// [`Limit::label`] cannot leave one out.
macro_rules! limits {
    ($($(#[$doc:meta])* $variant:ident => $label:literal,)*) => {
        /// A limit of the edge or of a protocol that tripped: the `limit` label of
        /// `worldd_limit_trips_total`, as `docs/operators.md` lists them.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Limit {
            $($(#[$doc])* $variant,)*
        }

        impl Limit {
            /// Every limit, in the order `docs/operators.md` lists them.
            pub const ALL: &'static [Limit] = &[$(Limit::$variant,)*];

            /// The `limit` label.
            pub const fn label(self) -> &'static str {
                match self {
                    $(Limit::$variant => $label,)*
                }
            }
        }
    };
}

limits! {
    /// A request whose Host is not allowed (403).
    Host => "host",
    /// A request whose Origin is not allowed (403).
    Origin => "origin",
    /// A connection closed at once: `[server] max_connections` open, none idle.
    Connections => "connections",
    /// An idle connection closed to make room for a new one.
    ConnectionsIdle => "connections_idle",
    /// A new connection at `[server] max_connections` waited for its first bytes while the
    /// listener looked for an idle one to close.
    ConnectionsLook => "connections_look",
    /// A request head not received within `[server] header_timeout_ms`.
    HeaderTimeout => "header_timeout",
    /// A request body not received within `[server] body_timeout_ms`.
    BodyTimeout => "body_timeout",
    /// A request body over its route's limit (413).
    BodySize => "body_size",
    /// A request body sent in too many small pieces.
    BodySmallPieces => "body_small_pieces",
    /// A connection that read past its request's allowance, or its body's limit and an
    /// allowance for chunked framing, before the body was whole or drained (a chunk-size line
    /// of endless zeros), and was closed.
    BodyFraming => "body_framing",
    /// A request body refused for the whole body budget (`[server] body_budget_bytes`).
    BodyBudget => "body_budget",
    /// A request body refused for its credential's share of the body budget.
    BodyShare => "body_share",
    /// A request refused: its credential's requests in flight already take a quarter of
    /// `[server] max_connections`.
    RequestsInFlight => "requests_in_flight",
    /// A request head over its size limit (431).
    HeadSize => "head_size",
    /// An answer its client did not read within `[server] send_timeout_ms`.
    SendTimeout => "send_timeout",
    /// An answer refused or replaced for the whole reply budget (503).
    ReplyBudget => "reply_budget",
    /// An answer refused or replaced for its credential's share of the reply budget (503).
    ReplyShare => "reply_share",
    /// A REST read that waited `[server] read_wait_ms` for its turn (503).
    ReadWait => "read_wait",
    /// A log stream refused: `[server] log_streams` open.
    LogStreams => "log_streams",
    /// A log stream refused: `[server] log_streams_per_episode` open for its episode.
    LogStreamsPerEpisode => "log_streams_per_episode",
    /// An MCP batch of more items than `[limits] batch_items`.
    BatchItems => "batch_items",
    /// A body of more JSON values than `[limits] json_values`.
    JsonValues => "json_values",
    /// A body nested deeper than its parser reads (128 levels, fixed).
    JsonDepth => "json_depth",
    /// A batch whose replies reached `[limits] reply_bytes` (once a batch).
    ReplyBytes => "reply_bytes",
    /// A call or batch still under way at `[limits] call_deadline_ms`.
    CallDeadline => "call_deadline",
    /// `accept` failed (out of descriptors or memory), and the listener backed off.
    AcceptError => "accept_error",
    /// A plugin log line cut at its length limit.
    PluginLogBytes => "plugin_log_bytes",
    /// A plugin log line dropped for its rate.
    PluginLogRate => "plugin_log_rate",
}

/// Latency buckets, in seconds.
const BUCKETS: [f64; 10] = [
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 2.0,
];

#[derive(Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    sum: f64,
    total: u64,
}

impl Histogram {
    fn observe(&mut self, secs: f64) {
        for (i, b) in BUCKETS.iter().enumerate() {
            if secs <= *b {
                self.counts[i] += 1;
            }
        }
        self.sum += secs;
        self.total += 1;
    }

    fn render(&self, out: &mut String, name: &str) {
        for (i, b) in BUCKETS.iter().enumerate() {
            let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {}", self.counts[i]);
        }
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", self.total);
        let _ = writeln!(out, "{name}_sum {}", self.sum);
        let _ = writeln!(out, "{name}_count {}", self.total);
    }
}

/// How often each [`Limit`] tripped, one counter per variant (indexed by it): counted without
/// a lock, as a flood of refusals (or of a plugin's log messages) is many threads at once.
struct LimitTrips([AtomicU64; Limit::ALL.len()]);

impl Default for LimitTrips {
    fn default() -> Self {
        LimitTrips([const { AtomicU64::new(0) }; Limit::ALL.len()])
    }
}

impl LimitTrips {
    fn of(&self, limit: Limit) -> &AtomicU64 {
        // The variants carry no explicit discriminants: 0, 1, … in the order of `Limit::ALL`.
        &self.0[limit as usize]
    }
}

#[derive(Default)]
struct Inner {
    /// Tool → outcome → count: keyed by tool first, so a call finds its row without copying
    /// the tool's name.
    calls: Mutex<BTreeMap<String, BTreeMap<&'static str, u64>>>,
    denials: Mutex<BTreeMap<String, u64>>,
    latency: Mutex<Histogram>,
    callbacks_rejected: AtomicU64,
    admission_refused: Mutex<BTreeMap<&'static str, u64>>,
    limit_trips: LimitTrips,
    connections_open: AtomicI64,
    body_bytes_held: AtomicI64,
    plugin_failures: AtomicU64,
    memory_trims: AtomicU64,
    memory_trimmed_bytes: AtomicU64,
    /// `POST /v1/commit` answers by result (`accepted` or the refusal's reason).
    commits: Mutex<BTreeMap<&'static str, u64>>,
    /// Requests refused for their credential, by reason ([`refusal_reason`]).
    credentials_refused: Mutex<BTreeMap<&'static str, u64>>,
    /// When each reason's refusal was last logged.
    refusal_lines: Throttle,
    /// When each episode's calls of each kind that stored nothing were last logged.
    free_lines: FreeLines,
}

/// The lines of calls that ran nothing and stored nothing, throttled by episode and kind
/// ([`free_kind`]).
struct FreeLines(Throttle<(String, &'static str)>);

impl Default for FreeLines {
    fn default() -> FreeLines {
        FreeLines(Throttle::per(
            crate::log_throttle::LOG_EVERY,
            crate::log_throttle::MAX_KEYS,
        ))
    }
}

/// The kind of a call's result that ran nothing, stored nothing and spent nothing, so its
/// agent can cause it as fast as it can send: a tool under rule R8, no world, a reused key
/// (other arguments, or its call still running), a key whose first call is pending or was
/// withdrawn, a replay of a committed call. `None` for every other result.
pub fn free_kind(result: &Result<CallOutput, CallError>) -> Option<&'static str> {
    match result {
        Ok(out) if out.replayed => Some("replayed"),
        Ok(_) => None,
        Err(CallError::NoHandler | CallError::NoWorktree(_)) => Some("no_handler"),
        Err(CallError::NoWorld) => Some("no_world"),
        Err(CallError::TaskIdReused) => Some("key_reused"),
        // Only a resend: a first call answered NotCommitted may hold an intent and its units.
        Err(CallError::KeyPending) => Some("key_pending"),
        Err(CallError::Withdrawn) => Some("key_withdrawn"),
        Err(_) => None,
    }
}

/// The `reason` label of a request refused for its credential.
fn refusal_reason(denial: &AuthError) -> &'static str {
    match denial {
        AuthError::Absent => "absent",
        AuthError::Malformed => "malformed",
        AuthError::Unknown => "unknown",
        AuthError::Expired => "expired",
    }
}

/// Shared counters; cheap to clone.
#[derive(Clone, Default)]
pub struct Metrics {
    inner: Arc<Inner>,
}

/// The outcome label of one call.
pub fn outcome_label(result: &Result<CallOutput, CallError>) -> &'static str {
    match result {
        Ok(out) if out.replayed => "replayed",
        Ok(out) => match out.effects.first() {
            None => "refused",
            Some(e) => match e.status.as_str() {
                "ok" if crate::outcome::refused_by_policy(&out.output) => "policy_refused",
                "ok" => "ok",
                "denied" => "denied",
                _ => "failed",
            },
        },
        // An effect ran and the call was not committed, its record stored or not.
        Err(CallError::EffectsUnrecorded { .. } | CallError::EffectUnrecordable) => "unrecorded",
        Err(CallError::HandlerTimedOut) => "timed_out",
        // Nothing ran and no unit stays spent (refused before its intent, or withdrawn after
        // it), unlike `timed_out`.
        Err(
            CallError::NoTimeToStart
            | CallError::NotStarted
            | CallError::Withdrawn
            | CallError::PreflightTimedOut,
        ) => "too_late",
        Err(CallError::NoHandler | CallError::NoWorktree(_)) => "no_handler",
        Err(CallError::RefusalRate) => "refusal_rate",
        // Not full: the daemon stopped writing because its store's files were swapped.
        Err(CallError::StoreFull(
            broker_core::capacity::Full::Replaced | broker_core::capacity::Full::RolledBack,
        )) => "store_replaced",
        Err(CallError::StoreFull(_)) => "store_full",
        Err(_) => "error",
    }
}

impl Metrics {
    /// Count one finished call and log it: one info line per call, so an operator sees the
    /// daemon working at the default level (`call tool=… episode=… outcome=… ms=…`). Calls
    /// turned away by the refusal rate are logged at most once per
    /// [`crate::log_throttle::LOG_EVERY`], and calls that stored nothing ([`free_kind`]) at
    /// most once per interval for each episode and kind, with how many went unlogged since.
    pub fn observe_call(
        &self,
        tool: &str,
        episode: &str,
        result: &Result<CallOutput, CallError>,
        elapsed: Duration,
    ) {
        let label = outcome_label(result);
        let ms = elapsed.as_millis() as u64;
        // Turned away before anything was stored or spent: the caller pays nothing, so it can
        // cause these as fast as it can send, like a bad credential's refusals.
        let due = match (result, free_kind(result)) {
            (Err(CallError::RefusalRate), _) => self.inner.refusal_lines.due("refusal_rate"),
            (_, Some(kind)) => self.free_line_due(episode, kind),
            _ => Some(0),
        };
        match (result, due) {
            (_, None) => {}
            (Err(e), Some(unlogged)) if unlogged > 0 => {
                tracing::info!(%tool, %episode, outcome = %label, ms, unlogged, "call: {e}")
            }
            (Ok(_), Some(unlogged)) if unlogged > 0 => {
                tracing::info!(%tool, %episode, outcome = %label, ms, unlogged, "call")
            }
            // The agent's words ("the world store is full") would send the operator to free
            // disk space; the log says what the daemon found.
            (
                Err(CallError::StoreFull(
                    full @ (broker_core::capacity::Full::Replaced
                    | broker_core::capacity::Full::RolledBack),
                )),
                _,
            ) => {
                tracing::info!(%tool, %episode, outcome = %label, ms, "call: {full}")
            }
            (Err(e), _) => tracing::info!(%tool, %episode, outcome = %label, ms, "call: {e}"),
            (Ok(_), _) => tracing::info!(%tool, %episode, outcome = %label, ms, "call"),
        }
        if let Ok(mut calls) = self.inner.calls.lock() {
            match calls.get_mut(tool) {
                Some(outcomes) => *outcomes.entry(label).or_default() += 1,
                None => {
                    calls.insert(tool.to_owned(), BTreeMap::from([(label, 1)]));
                }
            }
        }
        // A replay decided and ran nothing: its denial or failure was counted when it happened
        // (an agent resending its keys would otherwise count one denial over and over).
        if let Some(out) = result.as_ref().ok().filter(|out| !out.replayed) {
            for e in &out.effects {
                if let Some(d) = &e.denial {
                    if let Ok(mut denials) = self.inner.denials.lock() {
                        *denials.entry(d.clone()).or_default() += 1;
                    }
                }
                if e.status == "failed" {
                    self.inner.plugin_failures.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        if let Ok(mut h) = self.inner.latency.lock() {
            h.observe(elapsed.as_secs_f64());
        }
    }

    /// Count a request refused for its credential, and log it (the credential itself never):
    /// each reason's first refusal at once, then at most one line per reason every
    /// [`crate::log_throttle::LOG_EVERY`], with how many went unlogged since. Anyone can
    /// cause these, thousands a second.
    /// `whose` names the credential in a line that is due, when its record was found: its
    /// public id and episode, so that an operator can tell whose it is.
    pub fn credential_refused(
        &self,
        denial: &AuthError,
        whose: impl FnOnce() -> Option<(String, String)>,
    ) {
        let reason = refusal_reason(denial);
        if let Ok(mut m) = self.inner.credentials_refused.lock() {
            *m.entry(reason).or_default() += 1;
        }
        let Some(unlogged) = self.inner.refusal_lines.due(reason) else {
            return;
        };
        match (whose(), unlogged) {
            (Some((credential_id, episode)), 0) => {
                tracing::warn!(%credential_id, %episode, "refused a request: {denial}")
            }
            (Some((credential_id, episode)), unlogged) => {
                tracing::warn!(%credential_id, %episode, unlogged, "refused a request: {denial}")
            }
            (None, 0) => tracing::warn!("refused a request: {denial}"),
            (None, unlogged) => tracing::warn!(unlogged, "refused a request: {denial}"),
        }
    }

    /// Whether a line of `kind` that anyone can cause is due now (shared with the credential
    /// refusals' lines: [`crate::log_throttle::Throttle::due`]), with how many went unlogged
    /// since the last.
    pub fn log_due(&self, kind: &'static str) -> Option<u64> {
        self.inner.refusal_lines.due(kind)
    }

    /// Whether a line of `kind` about a call of `episode` that stored nothing ([`free_kind`])
    /// is due now, with how many of them went unlogged since the last: at most one per
    /// episode and kind every [`crate::log_throttle::LOG_EVERY`].
    pub fn free_line_due(&self, episode: &str, kind: &'static str) -> Option<u64> {
        self.inner.free_lines.0.due((episode.to_owned(), kind))
    }

    /// One `POST /v1/commit` answer: `accepted`, or why it was refused.
    pub fn observe_commit(&self, result: &'static str) {
        if let Ok(mut commits) = self.inner.commits.lock() {
            *commits.entry(result).or_default() += 1;
        }
    }

    /// A call admission refused ([`crate::admission`]).
    pub fn admission_refused(&self, refusal: Refusal) {
        if refusal == Refusal::NoSlot {
            self.inner
                .callbacks_rejected
                .fetch_add(1, Ordering::Relaxed);
        }
        if let Ok(mut m) = self.inner.admission_refused.lock() {
            *m.entry(refusal.label()).or_default() += 1;
        }
    }

    /// A limit of the edge or of a protocol tripped.
    pub fn limit_tripped(&self, limit: Limit) {
        self.inner
            .limit_trips
            .of(limit)
            .fetch_add(1, Ordering::Relaxed);
    }

    /// A plugin log message dropped for its rate (`limit="plugin_log_rate"`).
    pub fn plugin_log_dropped(&self) {
        self.limit_tripped(Limit::PluginLogRate);
    }

    /// How often `limit` tripped so far.
    pub fn trips(&self, limit: Limit) -> u64 {
        self.inner.limit_trips.of(limit).load(Ordering::Relaxed)
    }

    /// Bytes of the request-body budget taken (`+`) or given back (`-`).
    pub fn body_bytes_held(&self, delta: i64) {
        self.inner
            .body_bytes_held
            .fetch_add(delta, Ordering::Relaxed);
    }

    /// Bytes of the request-body budget held now.
    pub fn body_bytes_in_flight(&self) -> u64 {
        self.inner.body_bytes_held.load(Ordering::Relaxed).max(0) as u64
    }

    /// Free heap was handed back to the kernel ([`crate::memory`]): `bytes` less anonymous
    /// memory after it.
    pub fn memory_trimmed(&self, bytes: u64) {
        self.inner.memory_trims.fetch_add(1, Ordering::Relaxed);
        self.inner
            .memory_trimmed_bytes
            .fetch_add(bytes, Ordering::Relaxed);
    }

    /// A connection was accepted (`+1`) or closed (`-1`).
    pub fn connections(&self, delta: i64) {
        self.inner
            .connections_open
            .fetch_add(delta, Ordering::Relaxed);
    }

    /// The Prometheus text exposition.
    pub fn render(&self, store: &Store, overruns: &Overruns) -> String {
        let mut out = String::new();
        out.push_str("# HELP worldd_calls_total Tool calls by tool and outcome.\n# TYPE worldd_calls_total counter\n");
        if let Ok(calls) = self.inner.calls.lock() {
            for (tool, outcome, n) in calls
                .iter()
                .flat_map(|(tool, outcomes)| outcomes.iter().map(move |(o, n)| (tool, o, n)))
            {
                let _ = writeln!(
                    out,
                    "worldd_calls_total{{tool=\"{}\",outcome=\"{outcome}\"}} {n}",
                    escape(tool)
                );
            }
        }
        by_label(
            &mut out,
            "worldd_denials_total",
            "Denials by label (the broker's, and denied:handler).",
            "label",
            &self.inner.denials,
        );
        out.push_str("# HELP worldd_call_seconds Latency of a whole call (plan, journal, effect, commit).\n# TYPE worldd_call_seconds histogram\n");
        if let Ok(h) = self.inner.latency.lock() {
            h.render(&mut out, "worldd_call_seconds");
        }
        let stats = store.stats();
        let load = |n: &AtomicU64| n.load(Ordering::Relaxed);
        let secs = |n: &AtomicU64| n.load(Ordering::Relaxed) as f64 / 1e9;
        let inner = &self.inner;
        let counter = |out: &mut String, name, help, value: &dyn std::fmt::Display| {
            one(out, name, "counter", help, value)
        };
        let gauge = |out: &mut String, name, help, value: &dyn std::fmt::Display| {
            one(out, name, "gauge", help, value)
        };
        counter(
            &mut out,
            "worldd_commit_batches_total",
            "Group commits made by the store writer.",
            &load(&stats.batches),
        );
        counter(
            &mut out,
            "worldd_commit_operations_total",
            "Operations committed by the store writer.",
            &load(&stats.operations),
        );
        gauge(
            &mut out,
            "worldd_commit_batch_max",
            "Largest group commit so far.",
            &load(&stats.largest_batch),
        );
        counter(
            &mut out,
            "worldd_commit_build_seconds_total",
            "Store writer time running the operations of its batches.",
            &secs(&stats.build_nanos),
        );
        counter(
            &mut out,
            "worldd_commit_sync_seconds_total",
            "Store writer time inside LMDB commits: page writes, data sync and meta page write.",
            &secs(&stats.commit_nanos),
        );
        counter(
            &mut out,
            "worldd_commit_syncs_total",
            "Syncs that made committed batches durable before their callers were answered.",
            &load(&stats.syncs),
        );
        counter(
            &mut out,
            "worldd_commit_syncs_seconds_total",
            "Time the store's syncing thread spent in those syncs.",
            &secs(&stats.sync_nanos),
        );
        render_store_usage(&mut out, &store.usage(), store.replaced());
        gauge(
            &mut out,
            "worldd_store_failing",
            "1 while the store's last commit or sync failed for its disk (no space, a read-only filesystem, an I/O error) and none has succeeded since.",
            &u8::from(store.writes_failing()),
        );
        counter(
            &mut out,
            "worldd_commit_rebuilt_batches_total",
            "Group commits built a second time because one of their operations failed.",
            &load(&stats.rebuilt_batches),
        );
        counter(
            &mut out,
            "worldd_commit_split_batches_total",
            "Group commits that failed for room (a full disk, the store's ceiling) and whose operations were then committed in parts, so that only those that did not fit failed.",
            &load(&stats.split_batches),
        );
        counter(
            &mut out,
            "worldd_commit_split_commits_total",
            "Commits those parts took (their time is in worldd_commit_seconds_total).",
            &load(&stats.split_commits),
        );
        counter(
            &mut out,
            "worldd_store_map_releases_total",
            "Times the store's map was released because file-backed resident memory grew by serve.store_resident_bytes.",
            &load(&stats.map_releases),
        );
        counter(
            &mut out,
            "worldd_store_map_released_bytes_total",
            "File-backed resident memory those releases gave back.",
            &load(&stats.map_released_bytes),
        );
        counter(
            &mut out,
            "worldd_store_stale_readers_cleared_total",
            "Reader slots of processes that died holding a read snapshot of the store (a backup killed mid-copy), cleared by the daemon's periodic look; while held, no freed page could be reused.",
            &load(&stats.stale_readers_cleared),
        );
        counter(
            &mut out,
            "worldd_callbacks_rejected_total",
            "Calls refused because all host callback slots were busy.",
            &load(&inner.callbacks_rejected),
        );
        by_label(
            &mut out,
            "worldd_admission_refused_total",
            "Calls refused by admission, by reason: episode_queue_full, episode_busy, no_execution_slot, no_large_call_lane. Nothing ran.",
            "reason",
            &inner.admission_refused,
        );
        by_label(
            &mut out,
            "worldd_credentials_refused_total",
            "Requests refused for their credential, by reason: absent, malformed, unknown, expired.",
            "reason",
            &inner.credentials_refused,
        );
        // The limits that tripped, in label order.
        let trips: BTreeMap<&str, u64> = Limit::ALL
            .iter()
            .map(|&l| (l.label(), self.trips(l)))
            .filter(|&(_, n)| n > 0)
            .collect();
        counts_by_label(
            &mut out,
            "worldd_limit_trips_total",
            "Requests and connections stopped by a limit, by limit.",
            "limit",
            &trips,
        );
        gauge(
            &mut out,
            "worldd_body_budget_bytes_held",
            "Bytes of request bodies counted against [server] body_budget_bytes now.",
            &self.body_bytes_in_flight(),
        );
        gauge(
            &mut out,
            "worldd_connections_open",
            "Connections open now.",
            &inner.connections_open.load(Ordering::Relaxed).max(0),
        );
        gauge(
            &mut out,
            "worldd_calls_detached",
            "Calls whose client left that still run or commit on their own (a stop waits for them).",
            &crate::watched::detached(),
        );
        counter(
            &mut out,
            "worldd_handler_overruns_total",
            "Handlers that overran their deadline (their callers were answered timed out).",
            &overruns.total(),
        );
        gauge(
            &mut out,
            "worldd_handlers_overrunning",
            "Handlers past their deadline that have not returned yet; each keeps its episode busy.",
            &overruns.running(),
        );
        counter(
            &mut out,
            "worldd_effect_failures_total",
            "Effects whose handler failed.",
            &load(&inner.plugin_failures),
        );
        if let Some(anon) = crate::memory::anonymous_bytes() {
            gauge(
                &mut out,
                "worldd_memory_anonymous_bytes",
                "The daemon's anonymous resident memory (RssAnon).",
                &anon,
            );
        }
        counter(
            &mut out,
            "worldd_memory_trims_total",
            "Times free heap was handed back to the kernel after a burst ([server] memory_trim_ms).",
            &load(&inner.memory_trims),
        );
        counter(
            &mut out,
            "worldd_memory_trimmed_bytes_total",
            "Anonymous memory those trims gave back.",
            &load(&inner.memory_trimmed_bytes),
        );
        by_label(
            &mut out,
            "worldd_commits_total",
            "POST /v1/commit answers: accepted, or refused by reason.",
            "result",
            &inner.commits,
        );
        out
    }
}

/// A metric of one value: its HELP and TYPE lines, then the value.
fn one(out: &mut String, name: &str, kind: &str, help: &str, value: &dyn std::fmt::Display) {
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
    );
}

/// A counter by one label: its HELP and TYPE lines, then a line per value of the label.
fn by_label<K: std::fmt::Display>(
    out: &mut String,
    name: &str,
    help: &str,
    label: &str,
    counts: &Mutex<BTreeMap<K, u64>>,
) {
    match counts.lock() {
        Ok(counts) => counts_by_label(out, name, help, label, &counts),
        Err(_) => counts_by_label::<K>(out, name, help, label, &BTreeMap::new()),
    }
}

/// [`by_label`] of counts not behind a lock.
fn counts_by_label<K: std::fmt::Display>(
    out: &mut String,
    name: &str,
    help: &str,
    label: &str,
    counts: &BTreeMap<K, u64>,
) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
    for (value, n) in counts {
        let _ = writeln!(out, "{name}{{{label}=\"{value}\"}} {n}");
    }
}

/// The store's size against its ceiling: gauges, and the warnings at 80 % and 95 %.
fn render_store_usage(out: &mut String, u: &Usage, replaced: bool) {
    let gauge = |out: &mut String, name: &str, help: &str, value: String| {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
        );
    };
    gauge(
        out,
        "worldd_store_used_bytes",
        "Bytes the store occupies (LMDB high-water mark).",
        u.used.to_string(),
    );
    gauge(
        out,
        "worldd_store_ceiling_bytes",
        "The most the store may occupy (serve --store-ceiling).",
        u.limits.ceiling.to_string(),
    );
    gauge(
        out,
        "worldd_store_reserve_bytes",
        "Room kept below the ceiling; past it new calls are refused.",
        u.limits.reserve.to_string(),
    );
    if let Some(free) = u.disk_free {
        gauge(
            out,
            "worldd_store_disk_free_bytes",
            "Bytes free on the store's filesystem.",
            free.to_string(),
        );
    }
    gauge(
        out,
        "worldd_store_used_ratio",
        "Used bytes over the ceiling.",
        format!("{:.4}", u.ratio()),
    );
    let _ = writeln!(
        out,
        "# HELP worldd_store_warning 1 when the store has reached this percentage of its ceiling.\n# TYPE worldd_store_warning gauge"
    );
    for p in WARN_PERCENT {
        let on = u.warning().is_some_and(|w| w >= p);
        let _ = writeln!(
            out,
            "worldd_store_warning{{threshold=\"{p}\"}} {}",
            u8::from(on)
        );
    }
    gauge(
        out,
        "worldd_store_refusing",
        "1 while new client calls are refused (past the reserve, the disk is short, or the store was replaced).",
        u8::from(replaced || u.refusal().is_some()).to_string(),
    );
    gauge(
        out,
        "worldd_store_replaced",
        "1 once the store's files were replaced or removed under the daemon: it writes nothing more until restarted.",
        u8::from(replaced).to_string(),
    );
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A first call answered NotCommitted (its withdrawal could not be written: an intent
    /// open, its units spent) was throttled as a resend of a pending key, which stores
    /// nothing. Only the resend (`KeyPending`) is.
    #[test]
    fn only_a_resend_of_a_pending_key_is_free_not_a_first_call_not_committed() {
        assert_eq!(free_kind(&Err(CallError::KeyPending)), Some("key_pending"));
        assert_eq!(free_kind(&Err(CallError::NotCommitted)), None);
        assert_eq!(free_kind(&Err(CallError::IntentNotDurable)), None);
    }

    /// The trips were a map behind a lock keyed by each limit's label, with the plugin log's
    /// drops in a counter of their own that both readers added in: one counter per variant
    /// now, which `trips` and the rendered metric both read, each limit on its own, the
    /// metric listing those that tripped in label order as before.
    #[test]
    fn each_limit_trips_its_own_counter_which_trips_and_the_metric_both_read() {
        let m = Metrics::default();
        for (i, &limit) in Limit::ALL.iter().enumerate() {
            // The index of a limit's counter is its place in `Limit::ALL`.
            assert_eq!(limit as usize, i, "{}", limit.label());
            for _ in 0..=i {
                m.limit_tripped(limit);
            }
        }
        m.plugin_log_dropped();
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(&dir.path().join("db")).unwrap();
        let text = m.render(&store, &Overruns::default());
        let mut expected: Vec<(&str, u64)> = Vec::new();
        for (i, &limit) in Limit::ALL.iter().enumerate() {
            let n = i as u64 + 1 + u64::from(limit == Limit::PluginLogRate);
            assert_eq!(m.trips(limit), n, "{}", limit.label());
            expected.push((limit.label(), n));
        }
        expected.sort();
        let rendered: Vec<String> = text
            .lines()
            .filter(|l| l.starts_with("worldd_limit_trips_total{"))
            .map(str::to_owned)
            .collect();
        let expected: Vec<String> = expected
            .iter()
            .map(|(label, n)| format!("worldd_limit_trips_total{{limit=\"{label}\"}} {n}"))
            .collect();
        assert_eq!(rendered, expected);
        // A limit that never tripped is not listed.
        let quiet = Metrics::default();
        quiet.limit_tripped(Limit::BodySize);
        let text = quiet.render(&store, &Overruns::default());
        let rendered: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("worldd_limit_trips_total"))
            .collect();
        assert_eq!(
            rendered,
            ["worldd_limit_trips_total{limit=\"body_size\"} 1"]
        );
        assert_eq!(quiet.trips(Limit::PluginLogRate), 0);
    }
}
