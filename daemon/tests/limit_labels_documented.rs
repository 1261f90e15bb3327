//! The metrics reference of `docs/operators.md` against the daemon: every `limit` label
//! `worldd_limit_trips_total` is counted under (`worldd::metrics::Limit`) is listed in the
//! Metrics table, where a dashboard is built from.

use std::collections::BTreeSet;
use std::path::Path;

/// The string literals of `text` that follow `prefix` (`limit_tripped("` …).
fn literals_after(text: &str, prefix: &str, into: &mut BTreeSet<String>) {
    for (at, _) in text.match_indices(prefix) {
        let rest = &text[at + prefix.len()..];
        if let Some(end) = rest.find('"') {
            into.insert(rest[..end].to_owned());
        }
    }
}

/// The Metrics table's row of `worldd_limit_trips_total` listed four fewer labels than the
/// daemon emits (`head_size`, `read_wait`, `log_streams`, `log_streams_per_episode`).
#[test]
fn the_metrics_reference_lists_every_limit_label_the_daemon_emits() {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/operators.md"))
            .unwrap();
    let row = doc
        .lines()
        .find(|l| l.starts_with("| `worldd_limit_trips_total` |"))
        .expect("the Metrics table's row");
    let listed: BTreeSet<String> = row
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect();
    let emitted: BTreeSet<String> = worldd::metrics::Limit::ALL
        .iter()
        .map(|l| l.label().to_owned())
        .collect();
    assert_eq!(
        emitted.len(),
        worldd::metrics::Limit::ALL.len(),
        "a label twice"
    );
    let missing: Vec<&String> = emitted.difference(&listed).collect();
    assert!(missing.is_empty(), "not in the Metrics table: {missing:?}");
    // And no more, in the same order: the row's words after the metric's name and `limit`.
    let in_order: Vec<&str> = row.split('`').skip(1).step_by(2).skip(2).collect();
    let all: Vec<&str> = worldd::metrics::Limit::ALL
        .iter()
        .map(|l| l.label())
        .collect();
    assert_eq!(in_order, all);
}

/// The `[limits]` row of `call_deadline_ms` named `{limit="call_deadline"}` as the metric
/// when it trips, which counts only a call still committing at the deadline: a POST cut short
/// by it in the usual ways (a batch item refused before its intent, with too little of the
/// deadline left: `batch_deadline_attacks.rs` sees it through the real binary) showed no such
/// line. The row names each counter such a call is counted under.
#[test]
fn the_call_deadline_row_names_every_counter_its_trips_are_counted_under() {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/operators.md"))
            .unwrap();
    let row = doc
        .lines()
        .find(|l| l.starts_with("| `call_deadline_ms` |"))
        .expect("the [limits] row");
    let metric = row.trim_end_matches(" |").rsplit(" | ").next().unwrap();
    for counter in [
        "worldd_limit_trips_total{limit=\"call_deadline\"}",
        "worldd_calls_total{outcome=\"too_late\"}",
    ] {
        assert!(metric.contains(counter), "{counter} not in: {metric}");
    }
}

/// The first string literal after each `prefix` in `text`, across whitespace and line breaks.
fn first_literals_after(text: &str, prefix: &str, into: &mut BTreeSet<String>) {
    for (at, _) in text.match_indices(prefix) {
        let rest = text[at + prefix.len()..].trim_start();
        if let Some(rest) = rest.strip_prefix('"') {
            if let Some(end) = rest.find('"') {
                into.insert(rest[..end].to_owned());
            }
        }
    }
}

/// The Metrics table's `worldd_commits_total` row left out three results the daemon answers
/// (`body`, `store_full`, `store`): a dashboard built from it missed commits refused for
/// their body, a full store or a refused write.
#[test]
fn the_metrics_reference_lists_every_commit_result_the_daemon_counts() {
    let src = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("src/operator_commit.rs"),
    )
    .unwrap();
    let mut results = BTreeSet::new();
    for prefix in ["Refusal::new(", "Refusal::forbidden(", "observe_commit("] {
        first_literals_after(&src, prefix, &mut results);
    }
    // The body's refusals are labelled by a match on the error.
    let at = src.find("let reason = match e {").unwrap();
    literals_after(&src[at..at + 300], "=> \"", &mut results);
    for r in ["accepted", "too_large", "body", "store", "no_grant"] {
        assert!(
            results.contains(r),
            "{r} not found in the source: {results:?}"
        );
    }
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/operators.md"))
            .unwrap();
    let row = doc
        .lines()
        .find(|l| l.starts_with("| `worldd_commits_total` |"))
        .expect("the Metrics table's row");
    let listed: BTreeSet<String> = row
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect();
    let missing: Vec<&String> = results.difference(&listed).collect();
    assert!(missing.is_empty(), "not in the Metrics table: {missing:?}");
}
