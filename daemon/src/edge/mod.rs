//! The HTTP edge: everything between a TCP connection and a route handler, composed here.
//!
//! | layer | what it bounds | where |
//! |---|---|---|
//! | connection limit | at most [`ServerConfig::max_connections`] open; at the limit a new connection closes an idle one (no request in flight), and when none is idle it is accepted and closed at once; a listen backlog of [`listener::LISTEN_BACKLOG`] queues bursts; the places to wait for room go by what a new connection has sent, and some are kept for heads with a known credential; one credential has at most a quarter of `max_connections` requests in flight (past it 503 at once, its connection closable meanwhile) | [`listener`], [`connections`], [`arrived`] |
//! | file descriptors | the soft `RLIMIT_NOFILE` is raised to the hard limit at start, and the connection limit kept below it | [`listener`] |
//! | request head | hyper's header-read timeout: a complete request head within [`ServerConfig::header_timeout`] of the connection being accepted or finishing its previous response (so it is also the idle keep-alive timeout); heads over [`ServerConfig::max_head_bytes`] are answered 431 | [`listener`] |
//! | Host and Origin | loopback names and the operator's lists only (the Host header, and a request target's authority in absolute form), on every route, before anything else (403) | [`host`] |
//! | cross-origin answers | in the Host and Origin check: a browser's preflight from an accepted origin answered before authentication (204, the methods and headers the daemon reads); every answer to a request from one names its origin, refusals included; none allows credentials | [`cors`], [`host`] |
//! | authentication | every route that reads a body authenticates from its headers first; a request with two `Authorization` fields is refused as malformed | the routes, [`credential`] |
//! | singleton fields | `Authorization`, `Content-Type`, `MCP-Protocol-Version`, `A2A-Version`, `Last-Event-ID` and the routing headers are read once or refused, never first-of-two | [`fields`] |
//! | unread bodies | an answer sent before its request body was read waits (at most 2 s) for a remainder of at most 64 KiB, so the client reads it instead of a reset connection | [`linger`] |
//! | request body | no coding but `chunked` framing (415 for a `Content-Encoding`, 501 for another `Transfer-Encoding`), a per-route size limit, at most [`ServerConfig::body_small_pieces`] pieces of under 512 bytes, a whole-body deadline ([`ServerConfig::body_timeout`]) and one byte budget for all bodies in flight and what their parses built ([`ServerConfig::body_budget_bytes`]), of which one credential holds at most a quarter | [`body`] |
//! | reads per client | one credential's REST reads run [`ServerConfig::reads_per_client`] at a time (1); the rest wait in arrival order, at most [`ServerConfig::read_wait`], then 503; at most a quarter of `max_connections` running or waiting, past it 503 at once | [`turns`] |
//! | answers in flight | answers of known size over 16 KiB share one budget of bytes until they are handed to the kernel ([`ServerConfig::reply_budget_bytes`]); past it an answer is replaced by 503 | [`reply`] |
//! | answers | a fixed kernel send buffer per connection ([`ServerConfig::send_buffer_bytes`]), and a client that keeps the daemon waiting must take 64 KiB (or the rest) in every [`ServerConfig::send_timeout`] of waiting, or its connection is reset; once the daemon drains, one `send_timeout` of waiting in all for the rest of its answer | [`send`] |
//!
//! Limits of calls (admission, handler deadlines, batch sizes) are in [`crate::limits`].

use std::time::Duration;

use serde::Deserialize;

use crate::byte_size::ByteSize;

pub mod arrived;
pub mod body;
pub mod connections;
pub mod cors;
pub mod credential;
pub mod fields;
pub mod host;
pub mod idle;
pub mod linger;
pub mod listener;
pub mod reply;
pub mod send;
pub mod turns;

/// Default most connections open at once.
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;

/// The edge's settings (`[server]` in the config file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// Host names accepted beside the loopback names (`allowed_hosts`).
    pub allowed_hosts: Vec<String>,
    /// Origins accepted beside loopback origins (`allowed_origins`), e.g.
    /// `https://agents.example.com`.
    pub allowed_origins: Vec<String>,
    /// The URL the agent card advertises (`public_url`); by default the bound address.
    pub public_url: Option<String>,
    /// Most connections open at once (`max_connections`).
    pub max_connections: usize,
    /// A request head must arrive within this long (`header_timeout_ms`).
    pub header_timeout: Duration,
    /// A request body must arrive within this long of its head (`body_timeout_ms`).
    pub body_timeout: Duration,
    /// Bytes of request bodies that may be held at once, across connections
    /// (`body_budget_bytes`), what their parses built included (at
    /// [`body::PARSED_VALUE_BYTES`] a JSON value). A call holds several parsed copies of its body while it runs
    /// (arguments, the canonical input, the effect request, the plugin's copy), so the
    /// memory this bounds is several times the budget: with 1 MB writes from 32 episodes the
    /// daemon's anonymous memory peaked at 318 MiB under a 64 MiB budget and 141 MiB under
    /// the default 16 MiB, with the same number of writes done.
    pub body_budget_bytes: usize,
    /// Pieces of under [`body::SMALL_PIECE_BYTES`] in which one request body may arrive
    /// (`body_small_pieces`): chunks of chunked framing, or reads of a body trickled in. Each
    /// piece costs the daemon a hand-over between two tasks (about 2 µs) however few its
    /// bytes, so a megabyte sent in one-byte chunks took 2.2 s of CPU.
    pub body_small_pieces: usize,
    /// A client that keeps the daemon waiting to send it an answer must take 64 KiB (or what
    /// is left) in every this long of waiting (`send_timeout_ms`).
    pub send_timeout: Duration,
    /// The kernel's send buffer of each connection (`send_buffer_bytes`; 0 leaves the
    /// kernel's autotuning on). Bounds what an unread answer holds in the kernel.
    pub send_buffer_bytes: usize,
    /// Bytes of answers that may wait for their clients at once, across connections
    /// (`reply_budget_bytes`).
    pub reply_budget_bytes: usize,
    /// The largest request head (request line and headers) read from a client
    /// (`max_head_bytes`); a larger one is answered `431` and its connection closed.
    pub max_head_bytes: usize,
    /// Log streams open at once, over all clients (`log_streams`).
    pub log_streams: usize,
    /// Log streams one agent episode may hold open at once (`log_streams_per_episode`).
    pub log_streams_per_episode: usize,
    /// REST reads one credential may have running at once (`reads_per_client`); the rest
    /// wait their turn ([`turns`]).
    pub reads_per_client: usize,
    /// How long a REST read may wait for its turn before it is answered 503 (`read_wait_ms`).
    pub read_wait: Duration,
    /// How often the daemon checks whether a burst left freed heap to hand back to the kernel
    /// (`memory_trim_ms`; `0` turns it off): [`crate::memory`].
    pub memory_trim: Option<Duration>,
    /// Who may read `GET /v1/metrics` (`metrics_for`): its counters tell every call's tool
    /// and outcome ([`crate::metrics::MetricsFor`]).
    pub metrics_for: crate::metrics::MetricsFor,
}

/// Default largest request head. A connection may hold a head this large until the header
/// timeout, so `max_connections` of them is the memory partial heads can take: 4096 × 16 KiB
/// = 64 MiB by default (64 KiB heads let 4,000 connections take the daemon past 300 MiB).
/// Agents' and browsers' heads are a few hundred bytes.
pub const DEFAULT_MAX_HEAD_BYTES: usize = 16 * 1024;
/// hyper's smallest read buffer: a head limit below it cannot be set.
pub const MIN_HEAD_BYTES: usize = 8 * 1024;
/// The largest head limit accepted: past this, one connection could hold that much memory
/// for a single head.
pub const MAX_HEAD_BYTES: usize = 16 * 1024 * 1024;

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            public_url: None,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(10),
            body_budget_bytes: 16 * 1024 * 1024,
            body_small_pieces: 4096,
            send_timeout: Duration::from_secs(10),
            send_buffer_bytes: 256 * 1024,
            reply_budget_bytes: 64 * 1024 * 1024,
            max_head_bytes: DEFAULT_MAX_HEAD_BYTES,
            log_streams: 32,
            log_streams_per_episode: 4,
            reads_per_client: 1,
            read_wait: Duration::from_secs(10),
            memory_trim: Some(Duration::from_secs(5)),
            metrics_for: crate::metrics::MetricsFor::Everyone,
        }
    }
}

/// `[server]` as written in the config file; absent keys keep their defaults.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSection {
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    #[serde(default)]
    pub allowed_origins: Vec<String>,
    pub public_url: Option<String>,
    pub max_connections: Option<usize>,
    pub header_timeout_ms: Option<u64>,
    pub body_timeout_ms: Option<u64>,
    pub body_budget_bytes: Option<ByteSize>,
    pub body_small_pieces: Option<usize>,
    pub send_timeout_ms: Option<u64>,
    pub send_buffer_bytes: Option<ByteSize>,
    pub reply_budget_bytes: Option<ByteSize>,
    pub max_head_bytes: Option<ByteSize>,
    pub log_streams: Option<usize>,
    pub log_streams_per_episode: Option<usize>,
    pub reads_per_client: Option<usize>,
    pub read_wait_ms: Option<u64>,
    pub memory_trim_ms: Option<u64>,
    pub metrics_for: Option<crate::metrics::MetricsFor>,
}

impl ServerSection {
    /// The settings in force: the defaults with this section's keys applied, checked.
    pub fn resolve(&self) -> Result<ServerConfig, String> {
        let config = self.values();
        config.check()?;
        Ok(config)
    }

    /// The defaults with this section's keys applied, not yet checked: `serve` applies its
    /// flags over them first, and checks once ([`ServerConfig::check`]).
    pub fn values(&self) -> ServerConfig {
        let d = ServerConfig::default();
        let ms =
            |v: Option<u64>, default: Duration| v.map(Duration::from_millis).unwrap_or(default);
        ServerConfig {
            allowed_hosts: self.allowed_hosts.clone(),
            allowed_origins: self.allowed_origins.clone(),
            public_url: self.public_url.clone(),
            max_connections: self.max_connections.unwrap_or(d.max_connections),
            header_timeout: ms(self.header_timeout_ms, d.header_timeout),
            body_timeout: ms(self.body_timeout_ms, d.body_timeout),
            body_budget_bytes: self
                .body_budget_bytes
                .map_or(d.body_budget_bytes, ByteSize::get_usize),
            body_small_pieces: self.body_small_pieces.unwrap_or(d.body_small_pieces),
            send_timeout: ms(self.send_timeout_ms, d.send_timeout),
            send_buffer_bytes: self
                .send_buffer_bytes
                .map_or(d.send_buffer_bytes, ByteSize::get_usize),
            reply_budget_bytes: self
                .reply_budget_bytes
                .map_or(d.reply_budget_bytes, ByteSize::get_usize),
            max_head_bytes: self
                .max_head_bytes
                .map_or(d.max_head_bytes, ByteSize::get_usize),
            log_streams: self.log_streams.unwrap_or(d.log_streams),
            // Unset, it follows a smaller `log_streams`; set, one over it is lowered to it at
            // start, with a WARN (`Limits::fit`).
            log_streams_per_episode: self.log_streams_per_episode.unwrap_or(
                d.log_streams_per_episode
                    .min(self.log_streams.unwrap_or(d.log_streams)),
            ),
            reads_per_client: self.reads_per_client.unwrap_or(d.reads_per_client),
            read_wait: ms(self.read_wait_ms, d.read_wait),
            memory_trim: match self.memory_trim_ms {
                Some(0) => None,
                Some(ms) => Some(Duration::from_millis(ms)),
                None => d.memory_trim,
            },
            metrics_for: self.metrics_for.unwrap_or(d.metrics_for),
        }
    }
}

impl ServerConfig {
    /// Refuse values the edge cannot work with.
    pub fn check(&self) -> Result<(), String> {
        if self.body_budget_bytes == 0 {
            return Err("[server] body_budget_bytes must be at least 1".into());
        }
        if self.body_small_pieces == 0 {
            return Err("[server] body_small_pieces must be at least 1".into());
        }
        if self.reply_budget_bytes < 1024 {
            return Err("[server] reply_budget_bytes must be at least 1024".into());
        }
        if self.max_connections == 0 {
            return Err("[server] max_connections must be at least 1".into());
        }
        if self.header_timeout.is_zero() || self.body_timeout.is_zero() {
            return Err("[server] header_timeout_ms and body_timeout_ms must be at least 1".into());
        }
        if self.send_timeout.is_zero() {
            return Err("[server] send_timeout_ms must be at least 1".into());
        }
        if i32::try_from(self.send_buffer_bytes).is_err() {
            return Err("[server] send_buffer_bytes must be below 2 GiB".into());
        }
        if !(MIN_HEAD_BYTES..=MAX_HEAD_BYTES).contains(&self.max_head_bytes) {
            return Err(format!(
                "[server] max_head_bytes must be between {MIN_HEAD_BYTES} and {MAX_HEAD_BYTES}"
            ));
        }
        if self.log_streams == 0 || self.log_streams_per_episode == 0 {
            return Err(
                "[server] log_streams and log_streams_per_episode must be at least 1".into(),
            );
        }
        if self.reads_per_client == 0 || self.read_wait.is_zero() {
            return Err("[server] reads_per_client and read_wait_ms must be at least 1".into());
        }
        // Each of these is the size of a semaphore, which holds at most `MAX_PERMITS`: more
        // panicked the daemon at start (`log_streams`) or on every read (`reads_per_client`).
        for (key, permits) in [
            ("max_connections", self.max_connections),
            ("log_streams", self.log_streams),
            ("log_streams_per_episode", self.log_streams_per_episode),
            ("reads_per_client", self.reads_per_client),
        ] {
            if permits > tokio::sync::Semaphore::MAX_PERMITS {
                return Err(format!(
                    "[server] {key} is too large (at most {})",
                    tokio::sync::Semaphore::MAX_PERMITS
                ));
            }
        }
        if self
            .memory_trim
            .is_some_and(|t| t < Duration::from_millis(100))
        {
            return Err("[server] memory_trim_ms must be 0 (off) or at least 100".into());
        }
        for h in &self.allowed_hosts {
            host::check_host_entry(h).map_err(|e| format!("[server] allowed_hosts: {e}"))?;
        }
        for o in &self.allowed_origins {
            host::parse_origin(o).ok_or_else(|| {
                format!("[server] allowed_origins: {o:?} is not SCHEME://HOST[:PORT]")
            })?;
        }
        if let Some(u) = &self.public_url {
            if host::parse_origin(u.trim_end_matches('/')).is_none()
                && !u.starts_with("http://")
                && !u.starts_with("https://")
            {
                return Err(format!("[server] public_url: {u:?} is not an http(s) URL"));
            }
        }
        Ok(())
    }

    /// Lower `log_streams` to half of `max_connections` (and `log_streams_per_episode` to
    /// it): a log stream is a request that never ends, so its connection is never idle and
    /// never closed to make room, and streams past that could take every connection from
    /// everyone else. With one connection, no stream is let open. The warning to log, when
    /// lowered.
    pub fn fit_log_streams(&mut self) -> Option<String> {
        let most = self.max_connections / 2;
        if self.log_streams <= most {
            return None;
        }
        let (streams, per_episode) = (self.log_streams, self.log_streams_per_episode);
        self.log_streams = most;
        self.log_streams_per_episode = per_episode.min(most);
        Some(format!(
            "log_streams lowered from {streams} to {most} (log_streams_per_episode from {per_episode} to {}) to keep half of max_connections ({}) for other requests: a log stream holds its connection while it is open",
            self.log_streams_per_episode, self.max_connections
        ))
    }

    /// The base URL served in the agent card: the operator's, or the bound address.
    pub fn public_base(&self) -> String {
        match &self.public_url {
            Some(u) => u.trim_end_matches('/').to_owned(),
            // In-process routers have no bound address; the daemon always sets one.
            None => "http://127.0.0.1:7644".to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_small_pieces_key_sets_its_limit_and_zero_is_refused() {
        let s: ServerSection = toml::from_str("body_small_pieces = 100").unwrap();
        assert_eq!(s.resolve().unwrap().body_small_pieces, 100);
        let zero: ServerSection = toml::from_str("body_small_pieces = 0").unwrap();
        assert_eq!(
            zero.resolve().unwrap_err(),
            "[server] body_small_pieces must be at least 1"
        );
    }

    #[test]
    fn the_send_keys_override_defaults_and_zero_is_refused() {
        let s: ServerSection =
            toml::from_str("send_timeout_ms = 250\nsend_buffer_bytes = 0").unwrap();
        let c = s.resolve().unwrap();
        assert_eq!(c.send_timeout, Duration::from_millis(250));
        assert_eq!(c.send_buffer_bytes, 0);
        let zero: ServerSection = toml::from_str("send_timeout_ms = 0").unwrap();
        assert_eq!(
            zero.resolve().unwrap_err(),
            "[server] send_timeout_ms must be at least 1"
        );
        let huge: ServerSection = toml::from_str("send_buffer_bytes = 4294967296").unwrap();
        assert_eq!(
            huge.resolve().unwrap_err(),
            "[server] send_buffer_bytes must be below 2 GiB"
        );
    }

    #[test]
    fn the_head_and_stream_keys_override_defaults_and_out_of_range_is_refused() {
        let s: ServerSection =
            toml::from_str("max_head_bytes = 8192\nlog_streams = 2\nlog_streams_per_episode = 1")
                .unwrap();
        let c = s.resolve().unwrap();
        assert_eq!(
            (c.max_head_bytes, c.log_streams, c.log_streams_per_episode),
            (8192, 2, 1)
        );
        let d = ServerSection::default().resolve().unwrap();
        assert_eq!(
            (d.max_head_bytes, d.log_streams, d.log_streams_per_episode),
            (16384, 32, 4)
        );
        let range = "[server] max_head_bytes must be between 8192 and 16777216";
        for bad in ["max_head_bytes = 8191", "max_head_bytes = 16777217"] {
            let s: ServerSection = toml::from_str(bad).unwrap();
            assert_eq!(s.resolve().unwrap_err(), range, "{bad}");
        }
        for bad in ["log_streams = 0", "log_streams_per_episode = 0"] {
            let s: ServerSection = toml::from_str(bad).unwrap();
            assert_eq!(
                s.resolve().unwrap_err(),
                "[server] log_streams and log_streams_per_episode must be at least 1",
                "{bad}"
            );
        }
    }

    /// A per-episode limit over the global one could never trip. Older builds served with it,
    /// so it is not refused: it is lowered to the global one at start, said naming both keys
    /// (`Limits::fit`); unset, it follows a smaller global limit.
    #[test]
    fn a_per_episode_stream_limit_over_the_global_one_is_lowered_to_it() {
        let s: ServerSection =
            toml::from_str("log_streams = 2\nlog_streams_per_episode = 10").unwrap();
        let mut c = s.resolve().unwrap();
        let given = crate::limits::Given::of(&crate::limits::LimitsSection::default(), &s);
        assert_eq!(
            crate::limits::Limits::default().fit(&mut c, &given),
            ["[server] log_streams_per_episode 10 is over [server] log_streams 2: an episode can never hold more streams than all clients together, so log_streams_per_episode could never trip; lowered to 2"]
        );
        assert_eq!((c.log_streams, c.log_streams_per_episode), (2, 2));
        let s: ServerSection = toml::from_str("log_streams_per_episode = 40").unwrap();
        let mut c = s.resolve().unwrap();
        let given = crate::limits::Given::of(&crate::limits::LimitsSection::default(), &s);
        assert_eq!(
            crate::limits::Limits::default().fit(&mut c, &given),
            ["[server] log_streams_per_episode 40 is over [server] log_streams 32 (its default): an episode can never hold more streams than all clients together, so log_streams_per_episode could never trip; lowered to 32"]
        );
        let s: ServerSection = toml::from_str("log_streams = 1").unwrap();
        let c = s.resolve().unwrap();
        assert_eq!((c.log_streams, c.log_streams_per_episode), (1, 1));
        let s: ServerSection =
            toml::from_str("log_streams = 2\nlog_streams_per_episode = 2").unwrap();
        let mut c = s.resolve().unwrap();
        assert!(crate::limits::Limits::default()
            .fit(&mut c, &crate::limits::Given::default())
            .is_empty());
    }

    /// A log stream holds its connection while it is open, and is never closed to make room:
    /// streams past half the connections could take every one from everyone else.
    #[test]
    fn log_streams_are_lowered_to_half_the_connections() {
        let mut c = ServerConfig {
            max_connections: 2,
            ..ServerConfig::default()
        };
        assert_eq!(
            c.fit_log_streams().as_deref(),
            Some("log_streams lowered from 32 to 1 (log_streams_per_episode from 4 to 1) to keep half of max_connections (2) for other requests: a log stream holds its connection while it is open")
        );
        assert_eq!((c.log_streams, c.log_streams_per_episode), (1, 1));
        assert_eq!(c.fit_log_streams(), None, "already within");
        let mut c = ServerConfig {
            max_connections: 16,
            ..ServerConfig::default()
        };
        assert!(c.fit_log_streams().is_some());
        assert_eq!((c.log_streams, c.log_streams_per_episode), (8, 4));
        let mut c = ServerConfig {
            max_connections: 1,
            ..ServerConfig::default()
        };
        assert!(c.fit_log_streams().is_some());
        assert_eq!((c.log_streams, c.log_streams_per_episode), (0, 0));
        let mut c = ServerConfig::default();
        assert_eq!(c.fit_log_streams(), None);
        assert_eq!((c.log_streams, c.log_streams_per_episode), (32, 4));
    }

    #[test]
    fn the_memory_trim_key_sets_the_interval_zero_turns_it_off_and_too_often_is_refused() {
        let every = |text: &str| {
            toml::from_str::<ServerSection>(text)
                .unwrap()
                .resolve()
                .map(|c| c.memory_trim)
        };
        assert_eq!(every(""), Ok(Some(Duration::from_secs(5))));
        assert_eq!(
            every("memory_trim_ms = 250"),
            Ok(Some(Duration::from_millis(250)))
        );
        assert_eq!(every("memory_trim_ms = 0"), Ok(None));
        assert_eq!(
            every("memory_trim_ms = 99"),
            Err("[server] memory_trim_ms must be 0 (off) or at least 100".to_owned())
        );
    }

    #[test]
    fn the_read_turn_keys_set_their_limits_and_zero_is_refused() {
        let turns = |text: &str| {
            toml::from_str::<ServerSection>(text)
                .unwrap()
                .resolve()
                .map(|c| (c.reads_per_client, c.read_wait))
        };
        assert_eq!(turns(""), Ok((1, Duration::from_secs(10))));
        assert_eq!(
            turns("reads_per_client = 3\nread_wait_ms = 250"),
            Ok((3, Duration::from_millis(250)))
        );
        for zero in ["reads_per_client = 0", "read_wait_ms = 0"] {
            assert_eq!(
                turns(zero),
                Err("[server] reads_per_client and read_wait_ms must be at least 1".to_owned()),
                "{zero}"
            );
        }
    }
}
