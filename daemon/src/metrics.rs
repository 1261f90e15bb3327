//! Operator metrics, rendered in the Prometheus text format at `GET /v1/metrics`.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use broker_core::coordinator::{CallError, CallOutput};
use broker_core::store::Store;

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

#[derive(Default)]
struct Inner {
    calls: Mutex<BTreeMap<(String, String), u64>>,
    denials: Mutex<BTreeMap<String, u64>>,
    latency: Mutex<Histogram>,
    callbacks_rejected: AtomicU64,
    plugin_failures: AtomicU64,
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
                "ok" => "ok",
                "denied" => "denied",
                _ => "failed",
            },
        },
        Err(CallError::EffectsUnrecorded { .. }) => "unrecorded",
        Err(CallError::NoHandler) => "no_handler",
        Err(_) => "error",
    }
}

impl Metrics {
    pub fn observe_call(
        &self,
        tool: &str,
        result: &Result<CallOutput, CallError>,
        elapsed: Duration,
    ) {
        let label = outcome_label(result);
        if let Ok(mut calls) = self.inner.calls.lock() {
            *calls
                .entry((tool.to_owned(), label.to_owned()))
                .or_default() += 1;
        }
        if let Ok(out) = result {
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

    pub fn callback_rejected(&self) {
        self.inner
            .callbacks_rejected
            .fetch_add(1, Ordering::Relaxed);
    }

    /// The Prometheus text exposition.
    pub fn render(&self, store: &Store) -> String {
        let mut out = String::new();
        out.push_str("# HELP worldd_calls_total Tool calls by tool and outcome.\n# TYPE worldd_calls_total counter\n");
        if let Ok(calls) = self.inner.calls.lock() {
            for ((tool, outcome), n) in calls.iter() {
                let _ = writeln!(
                    out,
                    "worldd_calls_total{{tool=\"{}\",outcome=\"{outcome}\"}} {n}",
                    escape(tool)
                );
            }
        }
        out.push_str("# HELP worldd_denials_total Broker denials by label.\n# TYPE worldd_denials_total counter\n");
        if let Ok(denials) = self.inner.denials.lock() {
            for (label, n) in denials.iter() {
                let _ = writeln!(out, "worldd_denials_total{{label=\"{label}\"}} {n}");
            }
        }
        out.push_str("# HELP worldd_call_seconds Latency of a whole call (plan, journal, effect, commit).\n# TYPE worldd_call_seconds histogram\n");
        if let Ok(h) = self.inner.latency.lock() {
            h.render(&mut out, "worldd_call_seconds");
        }
        let stats = store.stats();
        let _ = writeln!(
            out,
            "# HELP worldd_commit_batches_total Group commits made by the store writer.\n# TYPE worldd_commit_batches_total counter\nworldd_commit_batches_total {}",
            stats.batches.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP worldd_commit_operations_total Operations committed by the store writer.\n# TYPE worldd_commit_operations_total counter\nworldd_commit_operations_total {}",
            stats.operations.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP worldd_commit_batch_max Largest group commit so far.\n# TYPE worldd_commit_batch_max gauge\nworldd_commit_batch_max {}",
            stats.largest_batch.load(Ordering::Relaxed)
        );
        let secs = |n: &AtomicU64| n.load(Ordering::Relaxed) as f64 / 1e9;
        let _ = writeln!(
            out,
            "# HELP worldd_commit_build_seconds_total Store writer time running the operations of its batches.\n# TYPE worldd_commit_build_seconds_total counter\nworldd_commit_build_seconds_total {}",
            secs(&stats.build_nanos)
        );
        let _ = writeln!(
            out,
            "# HELP worldd_commit_sync_seconds_total Store writer time inside LMDB commits: page writes, data sync and meta sync.\n# TYPE worldd_commit_sync_seconds_total counter\nworldd_commit_sync_seconds_total {}",
            secs(&stats.commit_nanos)
        );
        let _ = writeln!(
            out,
            "# HELP worldd_commit_rebuilt_batches_total Group commits built a second time because one of their operations failed.\n# TYPE worldd_commit_rebuilt_batches_total counter\nworldd_commit_rebuilt_batches_total {}",
            stats.rebuilt_batches.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP worldd_callbacks_rejected_total Calls refused because all host callback slots were busy.\n# TYPE worldd_callbacks_rejected_total counter\nworldd_callbacks_rejected_total {}",
            self.inner.callbacks_rejected.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP worldd_effect_failures_total Effects whose handler failed.\n# TYPE worldd_effect_failures_total counter\nworldd_effect_failures_total {}",
            self.inner.plugin_failures.load(Ordering::Relaxed)
        );
        out
    }
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
