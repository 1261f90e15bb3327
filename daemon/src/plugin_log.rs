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
//!   many; past that, its messages are dropped (`limit="plugin_log_rate"`), one line says so
//!   when the dropping starts, and one line counts what was dropped once the plugin's next
//!   message is let through.
//!
//! Control characters cannot forge a line either way: every field the daemon logs is escaped
//! (`crate::cli` sets that up).

use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use handler_api::LogLevel;

use crate::limits::Limits;
use crate::metrics::Metrics;

/// One plugin's gate.
pub struct PluginLog {
    plugin: String,
    message_bytes: usize,
    per_second: u32,
    metrics: Metrics,
    bucket: Mutex<Bucket>,
}

/// The token bucket: messages the plugin may still send now, and what it dropped since.
struct Bucket {
    tokens: f64,
    refilled: Instant,
    dropped: u64,
}

/// What the gate decided for one message.
#[derive(Debug, PartialEq, Eq)]
enum Pass {
    /// Log it, after saying how many messages were dropped before it (if any).
    Log { dropped_before: u64 },
    /// Drop it; `first` when it starts a run of drops (say so once).
    Drop { first: bool },
}

impl PluginLog {
    pub fn new(plugin: &str, limits: &Limits, metrics: Metrics) -> PluginLog {
        PluginLog {
            plugin: plugin.to_owned(),
            message_bytes: limits.plugin_log_bytes,
            per_second: limits.plugin_log_per_second,
            metrics,
            bucket: Mutex::new(Bucket {
                tokens: f64::from(limits.plugin_log_per_second),
                refilled: Instant::now(),
                dropped: 0,
            }),
        }
    }

    /// Log `message` from this gate's plugin, if its rate allows, cut to the size limit. A
    /// message at a level the daemon does not log takes no share of the rate.
    pub fn log(&self, level: LogLevel, message: &str) {
        let shown = match level {
            LogLevel::Error => tracing::enabled!(tracing::Level::ERROR),
            LogLevel::Warn => tracing::enabled!(tracing::Level::WARN),
            LogLevel::Info => tracing::enabled!(tracing::Level::INFO),
            _ => tracing::enabled!(tracing::Level::DEBUG),
        };
        if !shown {
            return;
        }
        match self.pass(Instant::now()) {
            Pass::Drop { first: false } => {}
            Pass::Drop { first: true } => tracing::warn!(
                plugin = %self.plugin,
                "the plugin sends more than {} log messages a second ([limits] plugin_log_per_second); its further messages are dropped until its rate falls",
                self.per_second
            ),
            Pass::Log { dropped_before } => {
                if dropped_before > 0 {
                    tracing::warn!(
                        plugin = %self.plugin,
                        "{dropped_before} log messages of the plugin were dropped ([limits] plugin_log_per_second)"
                    );
                }
                let message = self.cut(message);
                let plugin = &self.plugin;
                match level {
                    LogLevel::Error => tracing::error!(plugin = %plugin, "{message}"),
                    LogLevel::Warn => tracing::warn!(plugin = %plugin, "{message}"),
                    LogLevel::Info => tracing::info!(plugin = %plugin, "{message}"),
                    _ => tracing::debug!(plugin = %plugin, "{message}"),
                }
            }
        }
    }

    /// Take a token for a message at `now`, or count it dropped.
    fn pass(&self, now: Instant) -> Pass {
        let mut b = self.bucket.lock().unwrap_or_else(PoisonError::into_inner);
        let rate = f64::from(self.per_second);
        let elapsed = now.saturating_duration_since(b.refilled).as_secs_f64();
        b.tokens = (b.tokens + elapsed * rate).min(rate);
        b.refilled = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            let dropped_before = std::mem::take(&mut b.dropped);
            Pass::Log { dropped_before }
        } else {
            b.dropped += 1;
            self.metrics.limit_tripped("plugin_log_rate");
            Pass::Drop {
                first: b.dropped == 1,
            }
        }
    }

    /// `message` cut to `plugin_log_bytes`, saying how much was left out.
    fn cut<'m>(&self, message: &'m str) -> std::borrow::Cow<'m, str> {
        if message.len() <= self.message_bytes {
            return message.into();
        }
        self.metrics.limit_tripped("plugin_log_bytes");
        let mut end = self.message_bytes;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        format!(
            "{}… ({} bytes more; [limits] plugin_log_bytes)",
            &message[..end],
            message.len() - end
        )
        .into()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn gate(bytes: usize, per_second: u32) -> PluginLog {
        let limits = Limits {
            plugin_log_bytes: bytes,
            plugin_log_per_second: per_second,
            ..Limits::default()
        };
        PluginLog::new("p", &limits, Metrics::default())
    }

    #[test]
    fn a_burst_past_the_rate_is_dropped_and_counted_when_the_rate_allows_again() {
        let g = gate(100, 3);
        let t0 = g.bucket.lock().unwrap().refilled;
        for _ in 0..3 {
            assert_eq!(g.pass(t0), Pass::Log { dropped_before: 0 });
        }
        assert_eq!(g.pass(t0), Pass::Drop { first: true });
        assert_eq!(g.pass(t0), Pass::Drop { first: false });
        assert_eq!(g.metrics.trips("plugin_log_rate"), 2);
        // A third of a second later one token is back: the next message says what was dropped.
        let later = t0 + Duration::from_millis(334);
        assert_eq!(g.pass(later), Pass::Log { dropped_before: 2 });
        assert_eq!(g.pass(later), Pass::Drop { first: true });
        // A long pause refills the burst, not more.
        let much_later = later + Duration::from_secs(60);
        for _ in 0..3 {
            assert!(matches!(g.pass(much_later), Pass::Log { .. }));
        }
        assert_eq!(g.pass(much_later), Pass::Drop { first: true });
    }

    #[test]
    fn a_long_message_is_cut_on_a_character_boundary_saying_what_was_left_out() {
        let g = gate(5, 10);
        assert_eq!(g.cut("12345"), "12345");
        assert_eq!(g.metrics.trips("plugin_log_bytes"), 0);
        assert_eq!(
            g.cut("1234567"),
            "12345… (2 bytes more; [limits] plugin_log_bytes)"
        );
        // "é" is two bytes: the cut falls before it, not inside it.
        assert_eq!(
            g.cut("1234é6"),
            "1234… (3 bytes more; [limits] plugin_log_bytes)"
        );
        assert_eq!(g.metrics.trips("plugin_log_bytes"), 2);
    }
}
