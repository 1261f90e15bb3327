//! What a plugin may write to the daemon's log.
//!
//! A plugin logs through the host's `log` callback, as often and as much as it likes; each
//! message became a line on the daemon's stderr. A plugin that logs a megabyte per message, or
//! a million messages per call, fills the operator's disk or log collector, and hides every
//! other line. So each plugin's messages pass through a gate of its own:
//!
//! - a message longer than `[limits] plugin_log_bytes` is cut at that size (on a character
//!   boundary), saying how many bytes were left out (`limit="plugin_log_bytes"`);
//! - a plugin may send `[limits] plugin_log_per_second` messages a second, in bursts of as
//!   many; past that rate its messages are dropped (`limit="plugin_log_rate"`). One line says
//!   so when a flood starts; while it lasts, one line every [`REPORT_EVERY`] counts what was
//!   dropped, and one more when the plugin's rate has fallen (its next message finds its
//!   whole burst available again). A flood costs the log a few lines, not one per message.
//!
//! A flood is many threads calling at once, so the gate takes no lock: the rate is a
//! generic cell rate algorithm (one atomic "theoretical arrival time" moved forward by compare
//! and swap; a message is let through while that time stays within one second of now), and
//! a dropped message costs two atomic increments: it reaches `/v1/metrics` as it is dropped,
//! and the log with the next count.
//!
//! Control characters cannot forge a line either way: every field the daemon logs is escaped
//! (`crate::cli` sets that up).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use handler_api::LogLevel;

use crate::limits::Limits;
use crate::metrics::{Limit, Metrics};

/// How often a flood's dropped messages are counted in the log while it lasts.
pub const REPORT_EVERY: Duration = Duration::from_secs(10);

/// One plugin's gate. Times are nanoseconds since `origin`.
pub struct PluginLog {
    plugin: String,
    message_bytes: usize,
    per_second: u32,
    metrics: Metrics,
    origin: Instant,
    /// Nanoseconds between two messages at the allowed rate.
    interval: u64,
    /// When the plugin's messages so far would have ended at the allowed rate; a message is
    /// let through while this stays within a burst (one second) of now.
    tat: AtomicU64,
    flooding: AtomicBool,
    /// Dropped since the last count was logged.
    dropped: AtomicU64,
    /// When the flood started or was last counted.
    reported: AtomicU64,
}

/// What the gate decided for one message, and what to tell the operator first.
#[derive(Debug, PartialEq, Eq)]
struct Pass {
    /// Log the message (or drop it).
    log: bool,
    /// A flood starts with this message: say so.
    starts: bool,
    /// Count these dropped messages in the log first.
    report: Option<u64>,
}

impl PluginLog {
    pub fn new(plugin: &str, limits: &Limits, metrics: Metrics) -> PluginLog {
        PluginLog {
            plugin: plugin.to_owned(),
            message_bytes: limits.plugin_log_bytes,
            per_second: limits.plugin_log_per_second,
            metrics,
            origin: Instant::now(),
            interval: 1_000_000_000 / u64::from(limits.plugin_log_per_second.max(1)),
            tat: AtomicU64::new(0),
            flooding: AtomicBool::new(false),
            dropped: AtomicU64::new(0),
            reported: AtomicU64::new(0),
        }
    }

    /// Log `message` from this gate's plugin, if its rate allows, cut to the size limit. A
    /// message at a level the daemon does not log takes no share of the rate.
    pub fn log(&self, level: LogLevel, message: &str) {
        if !PluginLog::shown(level) {
            return;
        }
        let pass = self.pass(Instant::now());
        let plugin = &self.plugin;
        if let Some(dropped) = pass.report {
            tracing::warn!(
                plugin = %plugin,
                "{dropped} log messages of the plugin were dropped ([limits] plugin_log_per_second)"
            );
        }
        if pass.starts {
            tracing::warn!(
                plugin = %plugin,
                "the plugin sends more than {} log messages a second ([limits] plugin_log_per_second); past that rate its messages are dropped and counted",
                self.per_second
            );
        }
        if !pass.log {
            return;
        }
        let message = self.cut(message);
        match level {
            LogLevel::Error => tracing::error!(plugin = %plugin, "{message}"),
            LogLevel::Warn => tracing::warn!(plugin = %plugin, "{message}"),
            LogLevel::Info => tracing::info!(plugin = %plugin, "{message}"),
            _ => tracing::debug!(plugin = %plugin, "{message}"),
        }
    }

    /// Whether the daemon logs messages at `level` at all.
    pub fn shown(level: LogLevel) -> bool {
        match level {
            LogLevel::Error => tracing::enabled!(tracing::Level::ERROR),
            LogLevel::Warn => tracing::enabled!(tracing::Level::WARN),
            LogLevel::Info => tracing::enabled!(tracing::Level::INFO),
            _ => tracing::enabled!(tracing::Level::DEBUG),
        }
    }

    /// Let a message at `now` through, or count it dropped; and what to say about a flood.
    fn pass(&self, now: Instant) -> Pass {
        let now = u64::try_from(now.saturating_duration_since(self.origin).as_nanos())
            .unwrap_or(u64::MAX / 2);
        let burst = self.interval * u64::from(self.per_second);
        // A thread that read the clock before another moved `tat` on gets nothing for the
        // time between: `tat` only ever grows.
        let mut tat = self.tat.load(Ordering::Acquire);
        let (log, calm) = loop {
            // A whole burst available again: the rate has fallen, a flood is over.
            let calm = tat <= now;
            let next = tat.max(now) + self.interval;
            if next > now + burst {
                break (false, calm);
            }
            match self
                .tat
                .compare_exchange_weak(tat, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break (true, calm),
                Err(moved) => tat = moved,
            }
        };
        let mut report = None;
        if self.flooding.load(Ordering::Acquire) {
            let last = self.reported.load(Ordering::Acquire);
            let due = now.saturating_sub(last) >= REPORT_EVERY.as_nanos() as u64;
            // One thread counts, the one that moves `reported`.
            if (calm || due)
                && self
                    .reported
                    .compare_exchange(last, now, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                let dropped = self.dropped.swap(0, Ordering::AcqRel);
                if dropped > 0 {
                    report = Some(dropped);
                }
                if calm {
                    self.flooding.store(false, Ordering::Release);
                }
            }
        }
        if log {
            return Pass {
                log: true,
                starts: false,
                report,
            };
        }
        self.dropped.fetch_add(1, Ordering::AcqRel);
        // Counted in the metrics as it is dropped: the log's count waits for the plugin's next
        // message, and a flood that ends (a crash loop that stops, a stop) sends none.
        self.metrics.plugin_log_dropped();
        let starts = !self.flooding.swap(true, Ordering::AcqRel);
        if starts {
            self.reported.store(now, Ordering::Release);
        }
        Pass {
            log: false,
            starts,
            report,
        }
    }

    /// `message` cut to `plugin_log_bytes`, saying how much was left out.
    fn cut<'m>(&self, message: &'m str) -> std::borrow::Cow<'m, str> {
        if message.len() <= self.message_bytes {
            return message.into();
        }
        self.metrics.limit_tripped(Limit::PluginLogBytes);
        let shown = crate::text::head(message, self.message_bytes);
        format!(
            "{shown}… ({} bytes more; [limits] plugin_log_bytes)",
            message.len() - shown.len()
        )
        .into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(bytes: usize, per_second: u32) -> PluginLog {
        let limits = Limits {
            plugin_log_bytes: bytes,
            plugin_log_per_second: per_second,
            ..Limits::default()
        };
        PluginLog::new("p", &limits, Metrics::default())
    }

    fn pass(log: bool, starts: bool, report: Option<u64>) -> Pass {
        Pass {
            log,
            starts,
            report,
        }
    }

    #[test]
    fn a_flood_past_the_rate_is_dropped_and_counted_in_a_few_lines() {
        let g = gate(100, 3);
        let t0 = g.origin;
        for _ in 0..3 {
            assert_eq!(g.pass(t0), pass(true, false, None));
        }
        // The burst is spent: the flood starts, said once.
        assert_eq!(g.pass(t0), pass(false, true, None));
        assert_eq!(g.pass(t0), pass(false, false, None));
        // Counted in the metrics as they are dropped; the log's count comes later.
        assert_eq!(g.metrics.trips(Limit::PluginLogRate), 2);
        // The flood goes on, a message every 100 ms: about one in three finds a token and is
        // logged, the rest are dropped, and nothing more is said until REPORT_EVERY.
        let mut dropped = 2;
        for k in 1..100 {
            let p = g.pass(t0 + Duration::from_millis(100 * k));
            assert!(!p.starts && p.report.is_none(), "{k}: {p:?}");
            dropped += u64::from(!p.log);
        }
        assert!(dropped > 60, "{dropped}");
        let due = t0 + REPORT_EVERY;
        let p = g.pass(due);
        assert_eq!((p.starts, p.report), (false, Some(dropped)));
        assert_eq!(g.metrics.trips(Limit::PluginLogRate), dropped);
        // A message that read the clock before the last one took the lock finds no more
        // tokens for the time between.
        let early = due - Duration::from_millis(500);
        let p = g.pass(early);
        let dropped_early = u64::from(!p.log);
        assert_eq!(p.report, None);
        // What is left at that instant is spent; the next message is dropped.
        while g.pass(due).log {}
        // A whole burst available again: the flood is over, the rest is counted.
        let calm = due + Duration::from_secs(2);
        assert_eq!(g.pass(calm), pass(true, false, Some(1 + dropped_early)));
        assert!(!g.flooding.load(Ordering::Acquire));
        // Nothing more to count; a new flood is said again.
        assert_eq!(g.pass(calm), pass(true, false, None));
        assert_eq!(g.pass(calm), pass(true, false, None));
        assert_eq!(g.pass(calm), pass(false, true, None));
    }

    /// Sixteen threads logging at once read the clock before they take the lock: one that
    /// read it earlier must not move the bucket's time back and so count an interval twice.
    #[test]
    fn an_earlier_clock_reading_adds_no_tokens() {
        let g = gate(100, 10);
        let t0 = g.origin;
        while g.pass(t0).log {}
        let t1 = t0 + Duration::from_secs(1);
        assert!(g.pass(t1).log);
        assert!(g.pass(t0 + Duration::from_millis(500)).log);
        let mut more = 0;
        while g.pass(t1).log {
            more += 1;
        }
        assert_eq!(
            more, 8,
            "one second gives ten tokens, however the readings interleave"
        );
    }

    #[test]
    fn a_long_message_is_cut_on_a_character_boundary_saying_what_was_left_out() {
        let g = gate(5, 10);
        assert_eq!(g.cut("12345"), "12345");
        assert_eq!(g.metrics.trips(Limit::PluginLogBytes), 0);
        assert_eq!(
            g.cut("1234567"),
            "12345… (2 bytes more; [limits] plugin_log_bytes)"
        );
        // "é" is two bytes: the cut falls before it, not inside it.
        assert_eq!(
            g.cut("1234é6"),
            "1234… (3 bytes more; [limits] plugin_log_bytes)"
        );
        assert_eq!(g.metrics.trips(Limit::PluginLogBytes), 2);
    }
}
