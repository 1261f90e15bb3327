//! `GET /v1/log/stream` for a reader that may see few of the entries: an agent replaying, with
//! `?from=0`, a log made of entries it may not see. One step of its stream reads at most
//! `QUIET_SCAN` positions, then hands the HTTP layer a comment line and reads on only when the
//! client takes it: a client that reads nothing costs one share, not the whole log. In
//! process (`common/in_process.rs`); the body is pulled frame by frame, so what the server read
//! before the client asked is observable.

use std::time::Duration;

use axum::body::Body;
use axum::http::StatusCode;
use broker_core::log;
use http_body_util::BodyExt;
use serde_json::Value;
use worldd::log_stream::{QUIET_SCAN, STREAM_BATCH};

#[path = "common/in_process.rs"]
mod in_process;

use in_process::{harness, Harness};

const GRANTS: &[&str] = &["Workspace.Read=worktree:10"];

impl Harness {
    fn head(&self) -> u64 {
        self.store.read(log::last_index).unwrap().unwrap()
    }

    async fn stream(&self, token: &str, query: &str) -> Body {
        let res = self
            .get(Some(token), &format!("/v1/log/stream{query}"), &[])
            .await;
        assert_eq!(res.status(), StatusCode::OK);
        res.into_body()
    }
}

/// The next frame of a stream's body, as text; a stream silent for 30 s fails the test.
async fn frame(body: &mut Body) -> String {
    let f = tokio::time::timeout(Duration::from_secs(30), body.frame())
        .await
        .expect("the stream sent nothing for 30 s")
        .expect("the stream ended")
        .unwrap();
    String::from_utf8(f.into_data().unwrap().to_vec()).unwrap()
}

/// The `(event, entryIndex)` of an entry event's text.
fn entry_of(text: &str) -> (String, u64) {
    let event = text
        .lines()
        .find_map(|l| l.strip_prefix("event: "))
        .unwrap_or_else(|| panic!("not an event: {text:?}"));
    let data = text.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
    let v: Value = serde_json::from_str(data).unwrap();
    (
        event.to_owned(),
        v["header"]["entryIndex"].as_u64().unwrap(),
    )
}

#[test]
fn a_share_is_the_rest_scan_bound_and_ends_inside_a_batch() {
    // The share is the REST scan bound; batches stop at it exactly, not one batch past.
    assert_eq!(QUIET_SCAN, broker_core::access::MAX_LOG_SCAN);
    assert_ne!(
        QUIET_SCAN % STREAM_BATCH as u64,
        0,
        "the test below needs a partial batch"
    );
}

/// An agent's stream over three shares of entries it may not see, and one more: each frame
/// the client takes costs one share (a comment naming where it read to), none is read before
/// the client asks, and the agent's own entry still arrives after them, in order.
#[tokio::test]
async fn an_agents_stream_reads_entries_it_may_not_see_only_as_fast_as_its_client_takes_frames() {
    let h = harness(false);
    let t = h.token("ep1", GRANTS);
    let start = h.head() + 1;
    h.bulk_append(3 * QUIET_SCAN as usize + 1);
    let hub = h.state.log_stream().clone();
    let mut body = h.stream(&t, &format!("?from={start}")).await;
    // Opened, nothing asked: nothing read.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(hub.positions_read(), 0);
    for share in 1..=3 {
        assert_eq!(
            frame(&mut body).await,
            format!(": read to {}\n\n", start + share * QUIET_SCAN)
        );
        assert_eq!(hub.positions_read(), share * QUIET_SCAN);
        // A client that takes nothing more has nothing more read for it.
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(hub.positions_read(), share * QUIET_SCAN);
    }
    assert_eq!(hub.events_produced(), 0);
    // The last bulk entry and the agent's own, which comes next.
    h.call(&t, "mine.txt").await;
    let (event, index) = entry_of(&frame(&mut body).await);
    assert_eq!(
        (event.as_str(), index),
        ("entry", start + 3 * QUIET_SCAN + 1)
    );
    assert_eq!(hub.events_produced(), 1);
    assert_eq!(hub.positions_read(), 3 * QUIET_SCAN + 2);
}

/// An operator sees every entry: its stream sends them one by one, never a comment, and reads
/// a batch at a time, as before.
#[tokio::test]
async fn an_operators_stream_of_visible_entries_sends_no_comment() {
    let h = harness(false);
    let t = h.operator_token();
    let start = h.head() + 1;
    h.bulk_append(QUIET_SCAN as usize + 10);
    let hub = h.state.log_stream().clone();
    let mut body = h.stream(&t, &format!("?from={start}")).await;
    for i in 0..QUIET_SCAN + 10 {
        let (event, index) = entry_of(&frame(&mut body).await);
        assert_eq!((event.as_str(), index), ("entry", start + i));
    }
    assert_eq!(hub.events_produced(), QUIET_SCAN + 10);
    assert_eq!(hub.positions_read(), QUIET_SCAN + 10);
}
