//! The operator's limits: sizes, counts and deadlines of calls (`[limits]` in the config file).
//!
//! Every limit here trips in a test and is counted in `/v1/metrics` when it does; the table in
//! `docs/operators.md` lists each key with its default. The connection-level limits of the
//! edge are in [`crate::edge::ServerConfig`] (`[server]`).

use std::time::Duration;

use serde::Deserialize;

use crate::byte_size::ByteSize;

/// Default number of global execution slots. Measured on the 2-core benchmark machine, 128
/// lets the store's group commit gather tens of calls per LMDB commit at 128 clients without
/// refusing any; more slots only add threads (see `docs/benchmarks.md`).
pub const DEFAULT_EXECUTION_SLOTS: usize = 128;

/// Default size past which a call's request body makes it a large call: 64 KiB, about sixty
/// times an ordinary tool call's.
pub const DEFAULT_LARGE_CALL_BYTES: usize = 64 * 1024;

/// Default number of large calls executing at once. Measured with 1 MB writes from 32
/// episodes on the 2-core benchmark machine (`docs/benchmarks.md`, attacks): with one, a small
/// call of another episode waited a median of 8–17 ms instead of 68–238 ms, and the daemon's
/// anonymous memory peaked under 80 MiB instead of 193–219 MiB; with two, 17–52 ms and 96 MiB.
pub const DEFAULT_LARGE_CALLS: usize = 1;

/// Default number of JSON values one request body may hold. Measured on the release daemon: a
/// 64 KiB MCP call of 16,386 values in one-member objects (the costliest value per byte) took
/// 5.3 MiB of anonymous memory while it ran, and a 4 MiB body of them 346 MiB without the
/// limit. Ordinary calls hold tens of values; a transition published with two 64 KiB schemas,
/// a few thousand.
pub const DEFAULT_JSON_VALUES: usize = 16 * 1024;

/// The most `reply_bytes` may be under `server`'s reply budget: half of one credential's share
/// (a quarter of the budget), so that a batch's answer, which passes `reply_bytes` by its last
/// reply and is counted only after its items ran, leaves half that share to the credential's
/// other answers waiting unread (past it, the answer is sent withheld:
/// [`crate::edge::reply::Withheld`]). A larger value is lowered to it at start, with a WARN.
pub fn most_reply_bytes(server: &crate::edge::ServerConfig) -> usize {
    (server.reply_budget_bytes / 8).max(1)
}

/// The largest `commit_body_bytes` an operator may configure (the reference's only limit).
pub const MAX_COMMIT_BODY_BYTES: usize = 8 * 1024 * 1024;

/// The limits in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Calls that may execute at once, across all episodes (`execution_slots`).
    pub execution_slots: usize,
    /// Calls of one episode that may wait behind its running call (`episode_queue`).
    pub episode_queue: usize,
    /// How long a call at the head of its episode's queue waits for a slot (`slot_wait_ms`).
    pub slot_wait: Duration,
    /// A call whose request body is larger than this is a large call (`large_call_bytes`).
    pub large_call_bytes: usize,
    /// Large calls that may execute at once, across all episodes (`large_calls`): each holds
    /// several copies of its body in memory and makes its group commit long, so a few of
    /// them at a time keep small calls of other episodes from waiting behind them. The
    /// others wait in arrival order until their deadline.
    pub large_calls: usize,
    /// How long a handler may run before its caller is answered (`handler_deadline_ms`).
    pub handler_deadline: Duration,
    /// The aggregate deadline of one MCP POST or A2A call, credential to reply
    /// (`call_deadline_ms`).
    pub call_deadline: Duration,
    /// Largest `POST /mcp/` body (`mcp_body_bytes`).
    pub mcp_body_bytes: usize,
    /// Largest `POST /a2a/` body (`a2a_body_bytes`).
    pub a2a_body_bytes: usize,
    /// Largest `POST /v1/commit` body (`commit_body_bytes`).
    pub commit_body_bytes: usize,
    /// Most messages in one JSON-RPC batch (`batch_items`).
    pub batch_items: usize,
    /// Most JSON values in one request body (`json_values`): every scalar, array and object
    /// counts one, at any depth. A value costs far more parsed than written (`{"a":0}` is 7
    /// bytes and several hundred parsed), so the byte limits alone would let a body of small
    /// objects take hundreds of megabytes.
    pub json_values: usize,
    /// Bytes of replies one MCP batch may gather before its further items are not run
    /// (`reply_bytes`); a single reply is bounded by the output limit of a call instead.
    pub reply_bytes: usize,
    /// Longest log message a plugin may send; longer ones are cut (`plugin_log_bytes`).
    pub plugin_log_bytes: usize,
    /// Log messages one plugin may send a second, in bursts of as many; the rest are dropped
    /// (`plugin_log_per_second`).
    pub plugin_log_per_second: u32,
    /// How long a plugin may take to load and start (its library's initialisers, manifest and
    /// constructor) before the daemon gives up starting (`plugin_start_ms`).
    pub plugin_start: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            execution_slots: DEFAULT_EXECUTION_SLOTS,
            episode_queue: 8,
            slot_wait: Duration::from_millis(500),
            large_call_bytes: DEFAULT_LARGE_CALL_BYTES,
            large_calls: DEFAULT_LARGE_CALLS,
            handler_deadline: broker_core::coordinator::HANDLER_DEADLINE,
            call_deadline: Duration::from_secs(20),
            mcp_body_bytes: 4 * 1024 * 1024,
            a2a_body_bytes: 1024 * 1024,
            // An operator's commit carries a few records, not bulk data.
            commit_body_bytes: 1024 * 1024,
            batch_items: 64,
            json_values: DEFAULT_JSON_VALUES,
            // Half of one credential's share of the default reply budget (64 MiB): the
            // batch's answer, a little over this, must fit beside that credential's others.
            reply_bytes: 8 * 1024 * 1024,
            plugin_log_bytes: 4096,
            plugin_log_per_second: 100,
            plugin_start: Duration::from_secs(30),
        }
    }
}

/// `[limits]` as written in the config file; absent keys keep their defaults.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsSection {
    pub execution_slots: Option<usize>,
    pub episode_queue: Option<usize>,
    pub slot_wait_ms: Option<u64>,
    pub large_call_bytes: Option<ByteSize>,
    pub large_calls: Option<usize>,
    pub handler_deadline_ms: Option<u64>,
    pub call_deadline_ms: Option<u64>,
    pub mcp_body_bytes: Option<ByteSize>,
    pub a2a_body_bytes: Option<ByteSize>,
    pub commit_body_bytes: Option<ByteSize>,
    pub batch_items: Option<usize>,
    pub json_values: Option<usize>,
    pub reply_bytes: Option<ByteSize>,
    pub plugin_log_bytes: Option<ByteSize>,
    pub plugin_log_per_second: Option<u32>,
    pub plugin_start_ms: Option<u64>,
}

impl LimitsSection {
    /// The limits in force: the defaults with this section's keys applied, checked.
    pub fn resolve(&self) -> Result<Limits, String> {
        let limits = self.values();
        limits.check()?;
        Ok(limits)
    }

    /// The defaults with this section's keys applied, not yet checked: `serve` applies its
    /// flags over them first, and checks once ([`Limits::check`]), so that a file's value a
    /// flag overrides or makes valid is not refused.
    pub fn values(&self) -> Limits {
        let d = Limits::default();
        let ms =
            |v: Option<u64>, default: Duration| v.map(Duration::from_millis).unwrap_or(default);
        Limits {
            execution_slots: self.execution_slots.unwrap_or(d.execution_slots),
            episode_queue: self.episode_queue.unwrap_or(d.episode_queue),
            slot_wait: ms(self.slot_wait_ms, d.slot_wait),
            large_call_bytes: self
                .large_call_bytes
                .map_or(d.large_call_bytes, ByteSize::get_usize),
            large_calls: self.large_calls.unwrap_or(d.large_calls),
            handler_deadline: ms(self.handler_deadline_ms, d.handler_deadline),
            call_deadline: ms(self.call_deadline_ms, d.call_deadline),
            mcp_body_bytes: self
                .mcp_body_bytes
                .map_or(d.mcp_body_bytes, ByteSize::get_usize),
            a2a_body_bytes: self
                .a2a_body_bytes
                .map_or(d.a2a_body_bytes, ByteSize::get_usize),
            commit_body_bytes: self
                .commit_body_bytes
                .map_or(d.commit_body_bytes, ByteSize::get_usize),
            batch_items: self.batch_items.unwrap_or(d.batch_items),
            json_values: self.json_values.unwrap_or(d.json_values),
            reply_bytes: self.reply_bytes.map_or(d.reply_bytes, ByteSize::get_usize),
            plugin_log_bytes: self
                .plugin_log_bytes
                .map_or(d.plugin_log_bytes, ByteSize::get_usize),
            plugin_log_per_second: self
                .plugin_log_per_second
                .unwrap_or(d.plugin_log_per_second),
            plugin_start: ms(self.plugin_start_ms, d.plugin_start),
        }
    }
}

impl Limits {
    /// Refuse values that would make the daemon unusable.
    pub fn check(&self) -> Result<(), String> {
        let positive = [
            ("execution_slots", self.execution_slots as u128),
            ("large_call_bytes", self.large_call_bytes as u128),
            ("large_calls", self.large_calls as u128),
            ("handler_deadline_ms", self.handler_deadline.as_millis()),
            ("call_deadline_ms", self.call_deadline.as_millis()),
            ("mcp_body_bytes", self.mcp_body_bytes as u128),
            ("a2a_body_bytes", self.a2a_body_bytes as u128),
            ("commit_body_bytes", self.commit_body_bytes as u128),
            ("batch_items", self.batch_items as u128),
            ("json_values", self.json_values as u128),
            ("reply_bytes", self.reply_bytes as u128),
            ("plugin_log_bytes", self.plugin_log_bytes as u128),
            (
                "plugin_log_per_second",
                u128::from(self.plugin_log_per_second),
            ),
            ("plugin_start_ms", self.plugin_start.as_millis()),
        ];
        for (key, v) in positive {
            if v == 0 {
                return Err(format!("[limits] {key} must be at least 1"));
            }
        }
        if self.commit_body_bytes > MAX_COMMIT_BODY_BYTES {
            return Err(format!(
                "[limits] commit_body_bytes {} is out of range (1 to {MAX_COMMIT_BODY_BYTES})",
                self.commit_body_bytes
            ));
        }
        // A call left less than this is refused before its handler starts (it would spend a
        // unit on an effect that had no time to run): a call deadline under it refuses every
        // call that has an effect.
        let least = broker_core::coordinator::MIN_HANDLER_TIME.min(self.handler_deadline);
        if self.call_deadline < least {
            return Err(format!(
                "[limits] call_deadline_ms {} is under the {} ms a handler is started with (1000, or handler_deadline_ms when that is shorter): every call with an effect would be answered timed out; set it to {} or more",
                self.call_deadline.as_millis(),
                least.as_millis(),
                least.as_millis()
            ));
        }
        // Tokio's semaphore holds at most this many permits.
        for (key, permits) in [
            ("execution_slots", self.execution_slots),
            ("large_calls", self.large_calls),
        ] {
            if permits > tokio::sync::Semaphore::MAX_PERMITS {
                return Err(format!("[limits] {key} is too large"));
            }
        }
        Ok(())
    }

    /// The one place of what the daemon says once at start of the limits it serves with (each
    /// line a WARN), lowering what is safe to lower first. A pair of keys of which one can never
    /// trip is said naming both keys and where each value came from (`given`), not refused:
    /// older builds accepted every such pair, and a daemon that no longer restarts on its
    /// config is worse than a limit that never trips. Lowered where the lower value is what is
    /// in force anyway (`log_streams_per_episode` to `log_streams`) or what keeps the limit
    /// safe (`reply_bytes` to what a credential's reply share allows); kept otherwise. A handler
    /// deadline under the time a handler is started with is said too: the shipped plugins keep
    /// up to 750 ms of it back to answer a clear failure, so their calls fail having spent
    /// their unit, or time out (a plugin that needs less may be run so on purpose).
    pub fn fit(&mut self, server: &mut crate::edge::ServerConfig, given: &Given) -> Vec<String> {
        let mut said = Vec::new();
        let call_ms = self.call_deadline.as_millis();
        let call = given.name("[limits] call_deadline_ms", call_ms);
        // A deadline left at its default under a shorter call deadline is the call's to cut, as
        // it always was: said only when written (by flag or file), never for a default.
        if self.handler_deadline >= self.call_deadline && given.set("[limits] handler_deadline_ms")
        {
            said.push(format!(
                "{} is not under {call}: a handler is given at most what is left of its call's deadline, so handler_deadline_ms can never trip; serving with it as it is: set handler_deadline_ms under {call_ms}, or raise call_deadline_ms",
                given.name("[limits] handler_deadline_ms", self.handler_deadline.as_millis()),
            ));
        }
        // A call let in with less than `least` left is answered timed out before its intent:
        // a slot wait that long makes every call short of a slot end so, never refused as
        // capacity.
        let least = broker_core::coordinator::MIN_HANDLER_TIME.min(self.handler_deadline);
        let room = self.call_deadline.saturating_sub(least);
        if self.slot_wait >= room && given.set("[limits] slot_wait_ms") {
            said.push(format!(
                "{} is not under {call} less the {} ms a handler is started with: a call that waited that long for a slot would be answered timed out, never refused for capacity, so slot_wait_ms can never trip; serving with it as it is: set slot_wait_ms under {}, or raise call_deadline_ms",
                given.name("[limits] slot_wait_ms", self.slot_wait.as_millis()),
                least.as_millis(),
                room.as_millis()
            ));
        }
        // `POST /v1/commit` reads its body by the body timeout alone: it still trips there.
        if server.body_timeout >= self.call_deadline && given.set("[server] body_timeout_ms") {
            said.push(format!(
                "{} is not under {call}: MCP and A2A bodies are cut at call_deadline_ms first, and answered under its name; body_timeout_ms still bounds POST /v1/commit; serving with it as it is: set body_timeout_ms under {call_ms} for it to bound MCP and A2A bodies too",
                given.name("[server] body_timeout_ms", server.body_timeout.as_millis()),
            ));
        }
        // A call is large when its body is larger than this, and no body larger than its
        // route's limit is read.
        let largest = self.mcp_body_bytes.max(self.a2a_body_bytes);
        if self.large_call_bytes >= largest {
            said.push(format!(
                "{} is not under {} or {}: no body read can be larger, so the large-call lane is never used; serving with it as it is: set large_call_bytes under {largest} to use it",
                given.name("[limits] large_call_bytes", self.large_call_bytes),
                given.name("[limits] mcp_body_bytes", self.mcp_body_bytes),
                given.name("[limits] a2a_body_bytes", self.a2a_body_bytes),
            ));
        }
        // The global limit trips first anyway: lowered, the episode's limit says so.
        if server.log_streams_per_episode > server.log_streams {
            said.push(format!(
                "{} is over {}: an episode can never hold more streams than all clients together, so log_streams_per_episode could never trip; lowered to {}",
                given.name("[server] log_streams_per_episode", server.log_streams_per_episode),
                given.name("[server] log_streams", server.log_streams),
                server.log_streams
            ));
            server.log_streams_per_episode = server.log_streams;
        }
        let most = most_reply_bytes(server);
        if self.reply_bytes > most {
            said.push(format!(
                "{} is over {most} bytes, half of one credential's share of {}: lowered to {most}, so that a batch's answer, which passes reply_bytes by its last reply, is counted against no more than half its credential's share",
                given.name("[limits] reply_bytes", self.reply_bytes),
                given.name("[server] reply_budget_bytes", server.reply_budget_bytes),
            ));
            self.reply_bytes = most;
        }
        let started = broker_core::coordinator::MIN_HANDLER_TIME;
        if self.handler_deadline < started {
            said.push(format!(
                "handler_deadline_ms {} is under the {} ms a handler is otherwise started with: the shipped plugins keep up to 750 ms of it back to answer a clear failure, so their calls may fail (spending their unit) or time out; raise handler_deadline_ms (or --handler-deadline-ms) to {} or more unless every plugin here needs less",
                self.handler_deadline.as_millis(),
                started.as_millis(),
                started.as_millis()
            ));
        }
        said
    }
}

/// Where the value in force of each key came from (its flag, the config file, or its
/// default), said with it at start so that the operator knows what to change.
#[derive(Debug, Clone, Default)]
pub struct Given(Vec<(&'static str, Option<&'static str>)>);

impl Given {
    /// The keys [`Limits::fit`] names that the file sets.
    pub fn of(limits: &LimitsSection, server: &crate::edge::ServerSection) -> Given {
        let set = [
            (
                "[limits] handler_deadline_ms",
                limits.handler_deadline_ms.is_some(),
            ),
            (
                "[limits] call_deadline_ms",
                limits.call_deadline_ms.is_some(),
            ),
            ("[limits] slot_wait_ms", limits.slot_wait_ms.is_some()),
            (
                "[limits] large_call_bytes",
                limits.large_call_bytes.is_some(),
            ),
            ("[limits] mcp_body_bytes", limits.mcp_body_bytes.is_some()),
            ("[limits] a2a_body_bytes", limits.a2a_body_bytes.is_some()),
            ("[limits] reply_bytes", limits.reply_bytes.is_some()),
            ("[server] body_timeout_ms", server.body_timeout_ms.is_some()),
            (
                "[server] reply_budget_bytes",
                server.reply_budget_bytes.is_some(),
            ),
            ("[server] log_streams", server.log_streams.is_some()),
            (
                "[server] log_streams_per_episode",
                server.log_streams_per_episode.is_some(),
            ),
        ];
        Given(
            set.into_iter()
                .filter(|(_, set)| *set)
                .map(|(key, _)| (key, None))
                .collect(),
        )
    }

    /// `key`'s value was given by `flag`, over the file's.
    pub fn flag(mut self, key: &'static str, flag: &'static str) -> Given {
        self.0.push((key, Some(flag)));
        self
    }

    /// Whether `key` was written, by a flag or in the file.
    fn set(&self, key: &'static str) -> bool {
        self.0.iter().any(|(k, _)| *k == key)
    }

    /// `key` and its value as given: `--flag V`, `[table] key V`, or `[table] key V (its
    /// default)`.
    fn name(&self, key: &'static str, value: impl std::fmt::Display) -> String {
        match self.0.iter().rev().find(|(k, _)| *k == key) {
            Some((_, Some(flag))) => format!("{flag} {value}"),
            Some((_, None)) => format!("{key} {value}"),
            None => format!("{key} {value} (its default)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A call deadline under the time a handler is started with refused every call that has
    /// an effect, each answered timed out, with nothing in the config to say why.
    #[test]
    fn a_call_deadline_too_short_to_start_a_handler_is_refused_at_start() {
        let s: LimitsSection = toml::from_str("call_deadline_ms = 999").unwrap();
        assert_eq!(
            s.resolve().unwrap_err(),
            "[limits] call_deadline_ms 999 is under the 1000 ms a handler is started with (1000, or handler_deadline_ms when that is shorter): every call with an effect would be answered timed out; set it to 1000 or more"
        );
        let s: LimitsSection =
            toml::from_str("call_deadline_ms = 1000\nhandler_deadline_ms = 999\nslot_wait_ms = 0")
                .unwrap();
        assert!(s.resolve().is_ok());
        // A shorter handler deadline is what a handler is started with.
        let s: LimitsSection =
            toml::from_str("call_deadline_ms = 300\nhandler_deadline_ms = 200\nslot_wait_ms = 50")
                .unwrap();
        assert!(s.resolve().is_ok());
        let s: LimitsSection =
            toml::from_str("call_deadline_ms = 100\nhandler_deadline_ms = 200").unwrap();
        assert!(s.resolve().unwrap_err().contains("under the 200 ms"));
    }

    /// What `fit` says of `text` (a `[limits]` and `[server]` file), with `given` as the
    /// file's keys, and the limits and edge settings then in force.
    fn fitted(text: &str, flag: bool) -> (Vec<String>, Limits, crate::edge::ServerConfig) {
        #[derive(Deserialize, Default)]
        #[serde(default)]
        struct File {
            server: crate::edge::ServerSection,
            limits: LimitsSection,
        }
        let file: File = toml::from_str(text).unwrap();
        let mut given = Given::of(&file.limits, &file.server);
        if flag {
            given = given.flag("[limits] handler_deadline_ms", "--handler-deadline-ms");
        }
        let mut limits = file.limits.resolve().unwrap();
        let mut server = file.server.resolve().unwrap();
        let said = limits.fit(&mut server, &given);
        (said, limits, server)
    }

    /// A deadline that runs inside the call's and cannot end before it never trips: the call
    /// deadline fires first. Older builds served with such values, so they are said at start,
    /// naming both keys and where each value came from, and kept; refused, a config that
    /// worked stopped the daemon's restart.
    #[test]
    fn a_deadline_that_cannot_end_before_the_calls_is_said_naming_both_keys_and_kept() {
        let (said, limits, _) = fitted("[limits]\nhandler_deadline_ms = 60000", false);
        assert_eq!(
            said,
            ["[limits] handler_deadline_ms 60000 is not under [limits] call_deadline_ms 20000 (its default): a handler is given at most what is left of its call's deadline, so handler_deadline_ms can never trip; serving with it as it is: set handler_deadline_ms under 20000, or raise call_deadline_ms"]
        );
        assert_eq!(limits.handler_deadline, Duration::from_secs(60));
        let (said, ..) = fitted("[limits]\ncall_deadline_ms = 20000", true);
        assert!(said.is_empty(), "{said:?}");
        let (said, ..) = fitted(
            "[limits]\ncall_deadline_ms = 20000\nhandler_deadline_ms = 20000",
            true,
        );
        assert_eq!(
            said,
            ["--handler-deadline-ms 20000 is not under [limits] call_deadline_ms 20000: a handler is given at most what is left of its call's deadline, so handler_deadline_ms can never trip; serving with it as it is: set handler_deadline_ms under 20000, or raise call_deadline_ms"]
        );
        assert!(fitted("[limits]\nhandler_deadline_ms = 19999", false)
            .0
            .is_empty());
        let (said, limits, _) = fitted(
            "[limits]\ncall_deadline_ms = 5000\nhandler_deadline_ms = 4000\nslot_wait_ms = 60000\n[server]\nbody_timeout_ms = 4000",
            false,
        );
        assert_eq!(
            said,
            ["[limits] slot_wait_ms 60000 is not under [limits] call_deadline_ms 5000 less the 1000 ms a handler is started with: a call that waited that long for a slot would be answered timed out, never refused for capacity, so slot_wait_ms can never trip; serving with it as it is: set slot_wait_ms under 4000, or raise call_deadline_ms"]
        );
        assert_eq!(limits.slot_wait, Duration::from_secs(60));
        assert_eq!(
            fitted("[limits]\ncall_deadline_ms = 5000\nhandler_deadline_ms = 4000\nslot_wait_ms = 4000\n[server]\nbody_timeout_ms = 4000", false).0.len(),
            1
        );
        assert!(fitted("[limits]\ncall_deadline_ms = 5000\nhandler_deadline_ms = 4000\nslot_wait_ms = 3999\n[server]\nbody_timeout_ms = 4000", false).0.is_empty());
        // `POST /v1/commit` reads its body by the body timeout alone: it still trips there.
        let (said, _, server) = fitted("[server]\nbody_timeout_ms = 30000", false);
        assert_eq!(
            said,
            ["[server] body_timeout_ms 30000 is not under [limits] call_deadline_ms 20000 (its default): MCP and A2A bodies are cut at call_deadline_ms first, and answered under its name; body_timeout_ms still bounds POST /v1/commit; serving with it as it is: set body_timeout_ms under 20000 for it to bound MCP and A2A bodies too"]
        );
        assert_eq!(server.body_timeout, Duration::from_secs(30));
        assert_eq!(
            fitted("[server]\nbody_timeout_ms = 20000", false).0.len(),
            1
        );
        assert!(fitted("[server]\nbody_timeout_ms = 19999", false)
            .0
            .is_empty());
        // Nothing said of the defaults, nor of the example file.
        assert!(fitted("", false).0.is_empty());
        assert!(fitted(include_str!("../../docs/world.example.toml"), false)
            .0
            .is_empty());
    }

    /// A handler deadline typed in the wrong unit, or too short for the shipped plugins to
    /// work, was accepted without a word: their calls failed having spent a unit.
    #[test]
    fn a_handler_deadline_under_a_second_is_said_at_start() {
        let (said, ..) = fitted("[limits]\nhandler_deadline_ms = 300", false);
        assert_eq!(
            said,
            ["handler_deadline_ms 300 is under the 1000 ms a handler is otherwise started with: the shipped plugins keep up to 750 ms of it back to answer a clear failure, so their calls may fail (spending their unit) or time out; raise handler_deadline_ms (or --handler-deadline-ms) to 1000 or more unless every plugin here needs less"]
        );
        assert!(fitted("[limits]\nhandler_deadline_ms = 1000", false)
            .0
            .is_empty());
    }

    /// `reply_bytes` defaulted to exactly one credential's share of the reply budget, so a batch
    /// cut at it ran, spent and was answered 503 whenever its credential had any other answer
    /// unread. A larger value (the example file of older builds wrote 16MiB) is lowered to half
    /// a share and said, not refused: refused, that file stopped the daemon's restart.
    #[test]
    fn reply_bytes_over_half_a_credentials_reply_share_is_lowered_and_said() {
        let (said, limits, server) = fitted("[limits]\nreply_bytes = \"16MiB\"", false);
        assert_eq!(most_reply_bytes(&server), Limits::default().reply_bytes);
        assert_eq!(
            said,
            ["[limits] reply_bytes 16777216 is over 8388608 bytes, half of one credential's share of [server] reply_budget_bytes 67108864 (its default): lowered to 8388608, so that a batch's answer, which passes reply_bytes by its last reply, is counted against no more than half its credential's share"]
        );
        assert_eq!(limits.reply_bytes, 8 * 1024 * 1024);
        let (said, limits, _) = fitted(
            "[limits]\nreply_bytes = \"1MiB\"\n[server]\nreply_budget_bytes = \"4MiB\"",
            false,
        );
        assert_eq!(
            said,
            ["[limits] reply_bytes 1048576 is over 524288 bytes, half of one credential's share of [server] reply_budget_bytes 4194304: lowered to 524288, so that a batch's answer, which passes reply_bytes by its last reply, is counted against no more than half its credential's share"]
        );
        assert_eq!(limits.reply_bytes, 512 * 1024);
        let (said, limits, _) = fitted(
            "[limits]\nreply_bytes = \"512KiB\"\n[server]\nreply_budget_bytes = \"4MiB\"",
            false,
        );
        assert!(said.is_empty(), "{said:?}");
        assert_eq!(limits.reply_bytes, 512 * 1024);
    }

    /// A call is large when its body is larger than `large_call_bytes`, and no body over its
    /// route's limit is read: a line at or past both limits switches the lane off. Said and
    /// kept, naming the three keys.
    #[test]
    fn a_large_call_line_no_body_can_pass_is_said_and_kept() {
        let (said, limits, _) = fitted("[limits]\nlarge_call_bytes = \"8MiB\"", false);
        assert_eq!(
            said,
            ["[limits] large_call_bytes 8388608 is not under [limits] mcp_body_bytes 4194304 (its default) or [limits] a2a_body_bytes 1048576 (its default): no body read can be larger, so the large-call lane is never used; serving with it as it is: set large_call_bytes under 4194304 to use it"]
        );
        assert_eq!(limits.large_call_bytes, 8 * 1024 * 1024);
        assert_eq!(
            fitted("[limits]\nlarge_call_bytes = 4194304", false)
                .0
                .len(),
            1
        );
        // Under one route's limit is enough: MCP bodies can still be large.
        assert!(fitted("[limits]\nlarge_call_bytes = 4194303", false)
            .0
            .is_empty());
        let (said, ..) = fitted(
            "[limits]\nmcp_body_bytes = 1024\na2a_body_bytes = 1024",
            false,
        );
        assert_eq!(
            said,
            ["[limits] large_call_bytes 65536 (its default) is not under [limits] mcp_body_bytes 1024 or [limits] a2a_body_bytes 1024: no body read can be larger, so the large-call lane is never used; serving with it as it is: set large_call_bytes under 1024 to use it"]
        );
    }

    /// Values contradictory in themselves are still refused.
    #[test]
    fn a_call_deadline_no_handler_can_start_in_is_still_refused() {
        let s: LimitsSection =
            toml::from_str("call_deadline_ms = 500\nhandler_deadline_ms = 600").unwrap();
        assert_eq!(
            s.resolve().unwrap_err(),
            "[limits] call_deadline_ms 500 is under the 600 ms a handler is started with (1000, or handler_deadline_ms when that is shorter): every call with an effect would be answered timed out; set it to 600 or more"
        );
    }

    #[test]
    fn keys_override_defaults_and_zero_is_refused() {
        let s: LimitsSection = toml::from_str("execution_slots = 4\nslot_wait_ms = 10").unwrap();
        let l = s.resolve().unwrap();
        assert_eq!(l.execution_slots, 4);
        assert_eq!(l.slot_wait, Duration::from_millis(10));
        assert_eq!(l.batch_items, Limits::default().batch_items);
        let zero: LimitsSection = toml::from_str("batch_items = 0").unwrap();
        assert_eq!(
            zero.resolve().unwrap_err(),
            "[limits] batch_items must be at least 1"
        );
        assert!(toml::from_str::<LimitsSection>("nope = 1").is_err());
        let s: LimitsSection =
            toml::from_str("plugin_log_bytes = 10\nplugin_log_per_second = 2").unwrap();
        let l = s.resolve().unwrap();
        assert_eq!((l.plugin_log_bytes, l.plugin_log_per_second), (10, 2));
        let s: LimitsSection = toml::from_str("plugin_start_ms = 250").unwrap();
        assert_eq!(
            s.resolve().unwrap().plugin_start,
            Duration::from_millis(250)
        );
        let s: LimitsSection = toml::from_str("large_call_bytes = 100\nlarge_calls = 3").unwrap();
        let l = s.resolve().unwrap();
        assert_eq!((l.large_call_bytes, l.large_calls), (100, 3));
        let s: LimitsSection = toml::from_str("json_values = 200").unwrap();
        assert_eq!(s.resolve().unwrap().json_values, 200);
        for key in [
            "plugin_log_bytes",
            "plugin_log_per_second",
            "plugin_start_ms",
            "large_call_bytes",
            "large_calls",
            "json_values",
        ] {
            let zero: LimitsSection = toml::from_str(&format!("{key} = 0")).unwrap();
            assert_eq!(
                zero.resolve().unwrap_err(),
                format!("[limits] {key} must be at least 1")
            );
        }
    }

    /// A semaphore holds at most `MAX_PERMITS`; more slots or places would panic at start.
    #[test]
    fn slots_and_large_call_places_past_a_semaphores_bound_are_refused() {
        let past = (tokio::sync::Semaphore::MAX_PERMITS as u64 + 1).to_string();
        for key in ["execution_slots", "large_calls"] {
            let s: LimitsSection = toml::from_str(&format!("{key} = {past}")).unwrap();
            assert_eq!(
                s.resolve().unwrap_err(),
                format!("[limits] {key} is too large")
            );
        }
    }

    #[test]
    fn the_example_config_states_the_defaults() {
        #[derive(Deserialize)]
        struct Example {
            server: crate::edge::ServerSection,
            limits: LimitsSection,
        }
        let text = include_str!("../../docs/world.example.toml");
        let e: Example = toml::from_str(text).unwrap();
        assert_eq!(e.limits.resolve().unwrap(), Limits::default());
        let server = e.server.resolve().unwrap();
        assert_eq!(server, crate::edge::ServerConfig::default());
    }
}
