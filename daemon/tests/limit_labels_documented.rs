//! The metrics reference of `docs/operators.md` against the daemon's source: every `limit`
//! label `worldd_limit_trips_total` is counted under is listed in the Metrics table, where a
//! dashboard is built from.

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

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, into: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, into);
        } else if path.extension().is_some_and(|e| e == "rs") {
            into.push(std::fs::read_to_string(&path).unwrap());
        }
    }
}

/// The labels the daemon counts: the literals given to `limit_tripped` and
/// `limit_tripped_times`, and those the refusal kinds name in their `fn limit` (the body
/// budget's and the Host/Origin checks').
fn emitted() -> BTreeSet<String> {
    let mut texts = Vec::new();
    sources(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut texts,
    );
    let mut labels = BTreeSet::new();
    for text in &texts {
        literals_after(text, "limit_tripped(\"", &mut labels);
        literals_after(text, "limit_tripped_times(\"", &mut labels);
        for (at, _) in text.match_indices("pub fn limit(") {
            let body = &text[at..];
            let end = body.find("\n    }\n").unwrap();
            literals_after(&body[..end], "=> \"", &mut labels);
        }
    }
    labels
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
    let emitted = emitted();
    assert!(emitted.len() > 20, "{emitted:?}");
    for label in [
        "body_budget",
        "body_share",
        "body_readers",
        "host",
        "origin",
    ] {
        assert!(emitted.contains(label), "{label} not found in the source");
    }
    let missing: Vec<&String> = emitted.difference(&listed).collect();
    assert!(missing.is_empty(), "not in the Metrics table: {missing:?}");
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
