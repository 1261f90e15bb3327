//! `GET /v1/log/stream`, `GET /v1/log/summaries`, the budgets and the workbench's assets, in
//! process (`common/in_process.rs`: the real router, a real LMDB store, the real coordinator
//! and the se-tools registry with an in-process handler). Stream bodies are pulled frame by
//! frame, so what the server produced before the client asked is observable.
//!
//! Last, records in disguise: objects are stored once and the first writer's kind sticks to
//! the bytes, so an agent can send as a call's arguments the exact bytes of something stored
//! later under another kind (another episode's invocation record, a transition document about
//! to be published). Who may read, list or see summarised what must follow the role the log
//! gives those bytes, never the kind they were stored as first.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use broker_core::journal::{self, Intent};
use broker_core::log;
use broker_core::object::{Object, Ref};
use broker_core::transition::Transition;
use broker_core::{registry, session};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tower::ServiceExt;
use worldd::edge::ServerConfig;
use worldd::log_stream::{KEEP_ALIVE, STREAM_BATCH};

#[path = "common/in_process.rs"]
mod in_process;

use in_process::{bulk_append, harness, harness_with, se_tools, Harness};

impl Harness {
    async fn get_json(&self, token: Option<&str>, path: &str) -> (StatusCode, Value) {
        let res = self.get(token, path, &[]).await;
        let status = res.status();
        let bytes = res.into_body().collect().await.unwrap().to_bytes();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    /// Open a stream and check its framing headers.
    async fn stream(&self, token: Option<&str>, query: &str, headers: &[(&str, &str)]) -> Events {
        let res = self
            .get(token, &format!("/v1/log/stream{query}"), headers)
            .await;
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(
            res.headers()["content-type"].to_str().unwrap(),
            "text/event-stream"
        );
        Events {
            body: res.into_body(),
            buf: String::new(),
        }
    }

    /// Stop the store's writer after its next commit, before it syncs or answers anything,
    /// until the gate is opened.
    fn hold_the_writer_after_its_next_commit(&self) -> Gate {
        let (entered, committed) = std::sync::mpsc::channel::<()>();
        let (go, open) = std::sync::mpsc::channel::<()>();
        let open = std::sync::Mutex::new(open);
        let held = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let holding = held.clone();
        self.store.observe_commits(Some(Box::new(move |_, _| {
            if holding.load(std::sync::atomic::Ordering::SeqCst) {
                let _ = entered.send(());
                let _ = open.lock().unwrap().recv();
            }
        })));
        Gate {
            committed,
            go,
            held,
        }
    }
}

impl Harness {
    /// Append one entry and stop the writer once it is committed, before it is durable; the
    /// append's caller waits until the gate opens.
    async fn append_one_and_hold_it_before_it_is_durable(
        &self,
    ) -> (Gate, tokio::task::JoinHandle<()>) {
        let gate = self.hold_the_writer_after_its_next_commit();
        let store = self.store.clone();
        let append = tokio::task::spawn_blocking(move || bulk_append(&store, 1));
        let gate = tokio::task::spawn_blocking(move || {
            gate.committed.recv().unwrap();
            gate
        })
        .await
        .unwrap();
        (gate, append)
    }
}

struct Gate {
    committed: std::sync::mpsc::Receiver<()>,
    go: std::sync::mpsc::Sender<()>,
    held: Arc<std::sync::atomic::AtomicBool>,
}

impl Gate {
    fn open(&self) {
        self.held.store(false, std::sync::atomic::Ordering::SeqCst);
        let _ = self.go.send(());
    }
}

#[derive(Debug)]
struct Event {
    id: Option<u64>,
    event: String,
    data: Value,
}

struct Events {
    body: Body,
    buf: String,
}

impl Events {
    /// The next event; `None` when the stream ended. A stream that stays silent fails the
    /// test after a generous bound instead of hanging it.
    async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..end + 2).collect();
                let (mut id, mut event, mut data) = (None, String::new(), String::new());
                let mut id_hash = None;
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("id: ") {
                        // The entry's index, a space, its entry hash.
                        let (index, hash) = v.split_once(' ').expect("an id names index and hash");
                        id = Some(index.parse().unwrap());
                        id_hash = Some(hash.to_owned());
                    } else if let Some(v) = line.strip_prefix("event: ") {
                        event = v.to_owned();
                    } else if let Some(v) = line.strip_prefix("data: ") {
                        data.push_str(v);
                    }
                }
                if event.is_empty() && data.is_empty() {
                    continue; // a keep-alive comment
                }
                let data: Value = serde_json::from_str(&data).unwrap();
                if let Some(hash) = id_hash {
                    assert_eq!(data["entryHash"], hash.as_str(), "{block}");
                }
                return Some(Event { id, event, data });
            }
            let frame = tokio::time::timeout(Duration::from_secs(30), self.body.frame())
                .await
                .expect("the stream sent nothing for 30 s");
            match frame {
                None => return None,
                Some(f) => {
                    if let Ok(data) = f.unwrap().into_data() {
                        self.buf.push_str(std::str::from_utf8(&data).unwrap());
                    }
                }
            }
        }
    }

    async fn entry(&mut self) -> Event {
        let e = self.next().await.expect("the stream ended");
        assert_eq!(e.event, "entry", "{e:?}");
        e
    }
}

/// The entry indexes of a page's `items` (summaries or entries: both carry the header).
fn entry_indexes(v: &Value) -> Vec<u64> {
    v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["header"]["entryIndex"].as_u64().unwrap())
        .collect()
}

fn error_body(class: &str, message: &str) -> Value {
    json!({"error": {"class": class, "message": message}})
}

#[tokio::test]
async fn a_stream_sends_each_new_entry_with_its_summary() {
    let h = harness(false);
    let t = h.token("ep1", &["Workspace.Read=worktree:10"]);
    // Without `from` or `Last-Event-ID` only new entries: the genesis is not replayed.
    let mut s = h.stream(Some(&t), "", &[]).await;
    let out = h.call(&t, "hello.txt").await;
    assert_eq!(out["ok"], true);
    let e = s.entry().await;
    assert_eq!(e.id, Some(1));
    let entry = h.store.read(|r| log::entry(r, 1)).unwrap().unwrap();
    let world_ref = h.store.read(|r| log::world_ref_at(r, 1)).unwrap().unwrap();
    let d = &e.data;
    assert_eq!(d["header"], entry.to_value()["header"]);
    assert_eq!(d["entryHash"], json!(entry.entry_hash));
    assert_eq!(d["transitionRef"], json!(entry.transition_ref));
    assert_eq!(d["worldRef"], json!(world_ref));
    assert_eq!(d["tool"], "ailang-read");
    assert_eq!(d["episode"], "ep1");
    assert_eq!(d["outcome"], "ok");
    assert_eq!(d["reason"], Value::Null);
    let id = d["invocationId"].as_str().unwrap();
    assert!(id.starts_with("mcp:ep1:"), "{id}");
    // The world it names selects this entry.
    let world = h
        .store
        .read(|r| log::world(r, &world_ref))
        .unwrap()
        .unwrap();
    assert_eq!(world.revision, 1);
    assert_eq!(world.log_head, entry.entry_hash);

    h.call(&t, "second.txt").await;
    assert_eq!(s.entry().await.id, Some(2));
}

/// A quiet stream sends a comment every `KEEP_ALIVE` (15 s), so that proxies and clients
/// watching for a silent peer (`worldd log tail --follow` waits 45 s) keep it open, and it
/// still carries the next entry after them.
#[tokio::test(start_paused = true)]
async fn a_quiet_stream_sends_a_keep_alive_comment_every_15_seconds() {
    let h = harness(false);
    let t = h.token("ep1", &["Workspace.Read=worktree:10"]);
    let mut s = h.stream(Some(&t), "", &[]).await;
    let opened = tokio::time::Instant::now();
    for n in 1..=3u32 {
        let due = opened + KEEP_ALIVE * n + Duration::from_secs(1);
        let frame = tokio::time::timeout_at(due, s.body.frame())
            .await
            .unwrap_or_else(|_| panic!("no keep-alive comment {n} by {:?}", due - opened))
            .expect("the stream ended")
            .unwrap();
        let text = String::from_utf8(frame.into_data().unwrap().to_vec()).unwrap();
        assert!(text.starts_with(':') && text.ends_with("\n\n"), "{text:?}");
        assert_eq!(opened.elapsed(), KEEP_ALIVE * n);
    }
    // A call's handler and commit run on threads of their own: let real time pass for them.
    tokio::time::resume();
    h.call(&t, "after-the-quiet.txt").await;
    assert_eq!(s.entry().await.id, Some(1));
}

#[tokio::test]
async fn every_outcome_class_is_named() {
    let h = harness(false);
    let t = h.token("ep1", &["Workspace.Read=worktree:10"]);
    let poor = h.token("ep1", &["Workspace.Read=worktree:0"]);
    h.call(&t, "fine.txt").await; // 1 ok
    h.call(&t, "/etc/passwd").await; // 2 refused by the plan
    h.call(&t, "refuse-me").await; // 3 refused by policy
    h.call(&poor, "fine.txt").await; // 4 denied: budget
    h.call(&t, "break-me").await; // 5 failed
    h.call(&t, "unsure").await; // 6 indeterminate
    let (status, page) = h
        .get_json(Some(&t), "/v1/log/summaries?from=0&limit=10")
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let got: Vec<(Value, Value, Value)> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["header"]["entryIndex"].clone(),
                s["outcome"].clone(),
                s["reason"].clone(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (json!(0), Value::Null, Value::Null),
            (json!(1), json!("ok"), Value::Null),
            (json!(2), json!("refused"), json!("plan")),
            (json!(3), json!("refused"), json!("policy")),
            (json!(4), json!("denied"), json!("denied:budget")),
            (json!(5), json!("failed"), json!("handler")),
            (json!(6), json!("indeterminate"), json!("handler")),
        ]
    );
    // The genesis is no call.
    let g = &page["items"][0];
    assert_eq!(g["tool"], Value::Null);
    assert_eq!(g["episode"], Value::Null);
    assert_eq!(g["invocationId"], Value::Null);
    assert_eq!(g["header"]["writtenBy"], "world:genesis");
    assert_eq!(page["from"], 0);
    assert_eq!(page["next"], 7);
    assert_eq!(page["head"], 6);
}

#[tokio::test]
async fn another_episodes_entries_never_reach_a_stream_or_a_page() {
    let h = harness(false);
    let mine = h.token("ep1", &["Workspace.Read=worktree:10"]);
    let theirs = h.token("ep2", &["Workspace.Read=worktree:10"]);
    let mut s = h.stream(Some(&mine), "?from=0", &[]).await;
    assert_eq!(
        s.entry().await.id,
        Some(0),
        "the genesis belongs to no episode"
    );
    h.call(&theirs, "secret-1.txt").await; // 1
    h.call(&theirs, "secret-2.txt").await; // 2
    h.call(&mine, "mine.txt").await; // 3
    let e = s.entry().await;
    assert_eq!(e.id, Some(3), "entries 1 and 2 belong to ep2: {e:?}");
    assert_eq!(e.data["episode"], "ep1");

    let (_, page) = h.get_json(Some(&mine), "/v1/log/summaries?from=0").await;
    let seen: Vec<&Value> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| &s["header"]["entryIndex"])
        .collect();
    assert_eq!(seen, [&json!(0), &json!(3)]);
    assert_eq!(page["next"], 4, "the page scanned past what it hid");
    assert!(!page.to_string().contains("secret"));
    let (_, page) = h.get_json(Some(&theirs), "/v1/log/summaries").await;
    assert_eq!(page["items"].as_array().unwrap().len(), 3);

    // Under --open-reads everyone sees everything, without a credential.
    let open = harness(true);
    let a = open.token("ep1", &["Workspace.Read=worktree:10"]);
    let b = open.token("ep2", &["Workspace.Read=worktree:10"]);
    open.call(&a, "x").await;
    open.call(&b, "y").await;
    let (status, page) = open.get_json(None, "/v1/log/summaries").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(page["items"].as_array().unwrap().len(), 3);
    let mut s = open.stream(None, "?from=1", &[]).await;
    assert_eq!(s.entry().await.data["episode"], "ep1");
    assert_eq!(s.entry().await.data["episode"], "ep2");
}

/// An event's id is its entry's index and hash. A client that resumes with it is sent on from
/// the next entry when entry N still has that hash; when it has another, or the log no longer
/// reaches N (a rolled-back log), the stream sends one `rewound` event saying so and ends,
/// rather than resuming at an index that holds other entries now. A bare index resumes
/// unchecked, as before.
#[tokio::test]
async fn a_resume_naming_an_entry_hash_the_log_no_longer_holds_is_told_rewound_and_ends() {
    let h = harness(false);
    let t = h.token("ep1", &["Workspace.Read=worktree:10"]);
    for p in ["a", "b", "c"] {
        h.call(&t, p).await;
    }
    let mut s = h.stream(Some(&t), "?from=1", &[]).await;
    let first = s.entry().await;
    assert_eq!(first.id, Some(1));
    let hash1 = first.data["entryHash"].as_str().unwrap().to_owned();

    drop(s);
    // The hash it saw: resumed after it.
    let mut s = h
        .stream(Some(&t), "", &[("last-event-id", &format!("1 {hash1}"))])
        .await;
    assert_eq!(s.entry().await.id, Some(2));
    drop(s);
    // A bare index: resumed after it, unchecked.
    let mut s = h.stream(Some(&t), "", &[("last-event-id", "1")]).await;
    assert_eq!(s.entry().await.id, Some(2));

    drop(s);
    // Entry 2 is not the entry 1 it saw: rewound, one event, then the end.
    let mut s = h
        .stream(Some(&t), "", &[("last-event-id", &format!("2 {hash1}"))])
        .await;
    let hash2 = h
        .store
        .read(|r| log::entry(r, 2))
        .unwrap()
        .unwrap()
        .entry_hash;
    let e = s.next().await.expect("a rewound event");
    assert_eq!(e.event, "rewound", "{e:?}");
    assert_eq!(e.id, None);
    assert_eq!(
        e.data,
        json!({
            "entryIndex": 2,
            "seen": hash1,
            "now": hash2.to_string(),
            "head": 3,
            "message": format!(
                "entry 2 is no longer the one this client saw ({hash1}): entry 2 is now {hash2}; \
                 the log was rolled back (a restore from a backup?), so entries this client saw \
                 may no longer exist and new ones may stand at their indexes; re-read the log \
                 from an index you trust"
            ),
        })
    );
    assert!(s.next().await.is_none(), "the stream ends");
    // An index the log no longer reaches: rewound too, `now` null.
    let mut s = h
        .stream(Some(&t), "", &[("last-event-id", &format!("9 {hash1}"))])
        .await;
    let e = s.next().await.expect("a rewound event");
    assert_eq!(e.event, "rewound", "{e:?}");
    assert_eq!(e.data["now"], Value::Null);
    assert_eq!(e.data["head"], 3);
    assert!(
        e.data["message"].as_str().unwrap().starts_with(&format!(
            "entry 9 is no longer the one this client saw ({hash1}): there is no entry 9 now; "
        )),
        "{}",
        e.data
    );
    assert!(s.next().await.is_none(), "the stream ends");
    // The two rewound streams (still unread here) hold no place: as many streams as the
    // episode may open still open.
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(h.stream(Some(&t), "", &[]).await);
    }

    let res = h
        .get(
            Some(&t),
            "/v1/log/stream",
            &[("last-event-id", "1 sha256:xyz")],
        )
        .await;
    assert_eq!(res.status(), StatusCode::BAD_REQUEST);
    let body = res.into_body().collect().await.unwrap().to_bytes();
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["error"]["class"], "BadRequest");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("Last-Event-ID: the entry hash after the index: "),
        "{v}"
    );
}

#[tokio::test]
async fn last_event_id_resumes_after_that_entry_and_from_starts_at_it() {
    let h = harness(false);
    let t = h.token("ep1", &["Workspace.Read=worktree:10"]);
    for p in ["a", "b", "c"] {
        h.call(&t, p).await;
    }
    let mut s = h.stream(Some(&t), "?from=2", &[]).await;
    assert_eq!(s.entry().await.id, Some(2));
    assert_eq!(s.entry().await.id, Some(3));
    // A reconnecting client: Last-Event-ID wins over the URL's `from`.
    let mut s = h
        .stream(Some(&t), "?from=0", &[("last-event-id", "1")])
        .await;
    assert_eq!(s.entry().await.id, Some(2));
    // A cursor past the head waits for that entry.
    let mut s = h.stream(Some(&t), "?from=5", &[]).await;
    h.call(&t, "d").await; // 4: not sent
    h.call(&t, "e").await; // 5
    assert_eq!(s.entry().await.id, Some(5));

    for (query, headers, message) in [
        ("?from=-1", vec![], "from must be a non-negative integer"),
        ("?from=x", vec![], "from must be a non-negative integer"),
        (
            "",
            vec![("last-event-id", "two")],
            "Last-Event-ID must be an entry index (a non-negative integer), optionally followed by a space and that entry's hash",
        ),
    ] {
        let res = h
            .get(Some(&t), &format!("/v1/log/stream{query}"), &headers)
            .await;
        assert_eq!(res.status(), StatusCode::BAD_REQUEST);
        let body = res.into_body().collect().await.unwrap().to_bytes();
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v, error_body("BadRequest", message));
    }
}

#[tokio::test]
async fn reading_the_log_live_needs_a_credential_unless_reads_are_open() {
    let h = harness(false);
    for path in ["/v1/log/stream", "/v1/log/summaries"] {
        let (status, v) = h.get_json(None, path).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}");
        assert_eq!(
            v,
            error_body(
                "SessionAbsent",
                "a session credential is required: no Authorization Bearer header was present"
            )
        );
        let (status, v) = h.get_json(Some(&"0".repeat(64)), path).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}");
        assert_eq!(
            v,
            error_body("SessionUnknown", "unknown session credential")
        );
    }
}

#[tokio::test]
async fn a_revoked_credential_ends_an_open_stream_with_an_error_event() {
    let h = harness(false);
    let t = h.token("ep1", &["Workspace.Read=worktree:10"]);
    let mut s = h.stream(Some(&t), "", &[]).await;
    h.call(&t, "a").await;
    assert_eq!(s.entry().await.id, Some(1));
    // Revoking is itself a commit: it wakes the stream, which checks the credential again.
    session::revoke(&h.store, &session::credential_id(&t)).unwrap();
    let e = s.next().await.expect("an error event");
    assert_eq!(e.event, "error");
    assert_eq!(e.id, None);
    assert_eq!(
        e.data,
        error_body("SessionUnknown", "unknown session credential")
    );
    assert!(s.next().await.is_none(), "the stream ends after the error");
}

#[tokio::test]
async fn a_stream_reads_the_log_only_as_fast_as_its_client_takes_events() {
    let h = harness(false);
    // Bulk entries are client-built: only an operator lists them.
    let t = h.operator_token();
    let n = 4 * STREAM_BATCH;
    h.bulk_append(n);
    let hub = h.state.log_stream().clone();
    let mut s = h.stream(Some(&t), "?from=0", &[]).await;
    // A client that takes one event: one event was produced, whatever the backlog.
    assert_eq!(s.entry().await.id, Some(0));
    assert_eq!(hub.events_produced(), 1);
    for i in 1..10 {
        assert_eq!(s.entry().await.id, Some(i));
    }
    assert_eq!(hub.events_produced(), 10);
    // Nothing was lost by going slowly: the rest follows in order.
    for i in 10..=n as u64 {
        assert_eq!(s.entry().await.id, Some(i));
    }
    assert_eq!(hub.events_produced(), n as u64 + 1);
    drop(s);
    assert_eq!(hub.open_streams(), 0, "a dropped client frees its slot");
}

/// The global cap, at its default: 32 streams from eight episodes (four each), then an
/// episode with none open is refused; a place comes back when a stream ends.
#[tokio::test]
async fn streams_beyond_the_limit_are_refused() {
    let h = harness(false);
    let (limit, per_episode) = (32, 4);
    let tokens: Vec<String> = (0..limit / per_episode + 1)
        .map(|i| h.token(&format!("ep{i}"), &["Workspace.Read=worktree:10"]))
        .collect();
    let mut open = Vec::new();
    for i in 0..limit {
        let t = &tokens[i / per_episode];
        open.push(h.stream(Some(t), "", &[]).await);
    }
    // An episode with no stream open meets the global limit.
    let t = tokens.last().unwrap();
    let (status, v) = h.get_json(Some(t), "/v1/log/stream").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        v,
        error_body("Unavailable", "too many open log streams: the limit is 32")
    );
    assert_eq!(
        h.state.metrics().trips(worldd::metrics::Limit::LogStreams),
        1
    );
    assert_eq!(
        h.state
            .metrics()
            .trips(worldd::metrics::Limit::LogStreamsPerEpisode),
        0
    );
    open.pop();
    let mut s = h.stream(Some(t), "", &[]).await;
    h.call(t, "a").await;
    assert_eq!(s.entry().await.id, Some(1));
}

/// One session opening streams it never reads takes at most four places (the default): its
/// fifth is refused while another episode still opens one, and a place comes back when a
/// stream ends.
#[tokio::test]
async fn one_episode_cannot_hold_every_log_stream() {
    let h = harness(false);
    let t = h.token("ep1", &["Workspace.Read=worktree:10"]);
    let other = h.token("ep2", &["Workspace.Read=worktree:10"]);
    let mut open = Vec::new();
    for _ in 0..4 {
        open.push(h.stream(Some(&t), "", &[]).await);
    }
    // A stream that opened would never end: bound the wait so a missing limit fails.
    let (status, v) = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        h.get_json(Some(&t), "/v1/log/stream"),
    )
    .await
    .expect("a fifth stream of one episode was opened");
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        v,
        error_body(
            "Unavailable",
            "too many open log streams for this episode: the limit is 4"
        )
    );
    assert_eq!(
        h.state
            .metrics()
            .trips(worldd::metrics::Limit::LogStreamsPerEpisode),
        1
    );
    assert_eq!(h.state.log_stream().open_streams(), 4);
    let mut theirs = h.stream(Some(&other), "", &[]).await;
    h.call(&other, "a").await;
    assert_eq!(theirs.entry().await.id, Some(1));
    open.pop();
    let mut again = h.stream(Some(&t), "", &[]).await;
    h.call(&t, "b").await;
    assert_eq!(again.entry().await.id, Some(2));
}

/// `[server] log_streams` and `log_streams_per_episode` set the caps and their messages.
#[tokio::test]
async fn the_configured_stream_limits_are_the_ones_enforced() {
    let h = harness_with(
        false,
        ServerConfig {
            log_streams: 3,
            log_streams_per_episode: 2,
            ..ServerConfig::default()
        },
    );
    let a = h.token("ep1", &["Workspace.Read=worktree:10"]);
    let b = h.token("ep2", &["Workspace.Read=worktree:10"]);
    let mut open = vec![
        h.stream(Some(&a), "", &[]).await,
        h.stream(Some(&a), "", &[]).await,
    ];
    let refused = |message: &str| error_body("Unavailable", message);
    let (status, v) = h.get_json(Some(&a), "/v1/log/stream").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        v,
        refused("too many open log streams for this episode: the limit is 2")
    );
    open.push(h.stream(Some(&b), "", &[]).await);
    // The operator is capped by the global limit only, and it is reached.
    let (status, v) = h
        .get_json(Some(&h.operator_token()), "/v1/log/stream")
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(v, refused("too many open log streams: the limit is 3"));
    assert_eq!(h.state.log_stream().open_streams(), 3);
    let m = h.state.metrics();
    assert_eq!(
        (
            m.trips(worldd::metrics::Limit::LogStreamsPerEpisode),
            m.trips(worldd::metrics::Limit::LogStreams)
        ),
        (1, 1)
    );
}

#[tokio::test]
async fn closing_the_hub_ends_open_streams_and_refuses_new_ones() {
    let h = harness(false);
    let t = h.token("ep1", &["Workspace.Read=worktree:10"]);
    let mut s = h.stream(Some(&t), "", &[]).await;
    h.state.log_stream().close();
    assert!(s.next().await.is_none());
    let (status, v) = h.get_json(Some(&t), "/v1/log/stream").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(v, error_body("Unavailable", "the daemon is shutting down"));
}

/// A page size past `i64::MAX` (a client asking for "as many as possible" with `u64::MAX`)
/// was refused as "not an integer", though any integer above 500 is served as 500. Every
/// integer is clamped now, however many digits it has; only what is not one is refused.
#[tokio::test]
async fn a_page_size_of_any_integer_is_clamped_and_only_a_non_integer_is_refused() {
    let h = harness(false);
    let t = h.operator_token();
    h.bulk_append(600);
    for (limit, items) in [
        ("18446744073709551615", 500),
        ("9223372036854775808", 500),
        ("%2B000000000000000000000000000000000000000000501", 500),
        ("99999999999999999999999999999999999999999999999999", 500),
        ("-9223372036854775809", 100),
        ("-18446744073709551616", 100),
        ("-0", 100),
        ("7", 7),
    ] {
        for path in ["/v1/log?from=0&limit=", "/v1/log/summaries?from=0&limit="] {
            let (status, v) = h.get_json(Some(&t), &format!("{path}{limit}")).await;
            assert_eq!(status, StatusCode::OK, "{path}{limit}: {v}");
            assert_eq!(
                v["items"].as_array().map(Vec::len),
                Some(items),
                "{path}{limit}"
            );
        }
    }
    for limit in [
        "",
        "-",
        "+",
        "1e3",
        "5.0",
        "0x10",
        "%2B-1",
        "1%20",
        "%EF%BC%91",
    ] {
        for path in ["/v1/log?from=0&limit=", "/v1/log/summaries?limit="] {
            let (status, v) = h.get_json(Some(&t), &format!("{path}{limit}")).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{path}{limit}");
            assert_eq!(v, error_body("BadRequest", "limit must be an integer"));
        }
    }
}

#[tokio::test]
async fn summaries_page_from_the_end_by_default_and_bound_their_limit() {
    let h = harness(false);
    // Bulk entries are client-built: only an operator lists them.
    let t = h.operator_token();
    h.bulk_append(600);
    let (_, v) = h.get_json(Some(&t), "/v1/log/summaries?limit=3").await;
    assert_eq!(entry_indexes(&v), [598, 599, 600]);
    assert_eq!(
        (v["from"].clone(), v["next"].clone(), v["head"].clone()),
        (json!(598), json!(601), json!(600))
    );
    let (_, v) = h.get_json(Some(&t), "/v1/log/summaries").await;
    assert_eq!(v["items"].as_array().unwrap().len(), 100);
    let (_, v) = h
        .get_json(Some(&t), "/v1/log/summaries?from=0&limit=100000")
        .await;
    assert_eq!(v["items"].as_array().unwrap().len(), 500);
    assert_eq!(v["next"], 500);
    let (_, v) = h.get_json(Some(&t), "/v1/log/summaries?from=900").await;
    assert_eq!(entry_indexes(&v), Vec::<u64>::new());
    assert_eq!(v["next"], 900);
    let (status, v) = h.get_json(Some(&t), "/v1/log/summaries?limit=ten").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(v, error_body("BadRequest", "limit must be an integer"));
    let (status, v) = h.get_json(Some(&t), "/v1/log/summaries?from=-3").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        v,
        error_body("BadRequest", "from must be a non-negative integer")
    );
}

#[tokio::test]
async fn the_budget_lists_the_episodes_indeterminate_intents() {
    let h = harness(false);
    let t = h.token("ep1", &["Workspace.Read=worktree:10"]);
    let request = Ref::of(b"request");
    // Intents journaled, outcomes never written (a crash between the two): one of ep1, one
    // of another episode.
    h.store
        .write(move |w| -> Result<(), journal::JournalError> {
            for (id, ep) in [("mcp:ep1:lost", "ep1"), ("mcp:ep2:lost", "ep2")] {
                let intent = Intent {
                    invocation_id: id.into(),
                    episode: ep.into(),
                    effect: "Workspace.Read".into(),
                    scope: "worktree".into(),
                    cost: 1,
                    request_ref: request,
                };
                journal::append_intent(w, &intent, 10)?;
            }
            Ok(())
        })
        .unwrap();
    let (status, v) = h.get_json(Some(&t), "/v1/budget").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        v["indeterminate"],
        json!([{"invocationId": "mcp:ep1:lost", "effect": "Workspace.Read", "scope": "worktree",
                "cost": 1, "requestRef": request}])
    );
    assert_eq!(v["grants"][0]["spent"], 1);
}

#[tokio::test]
async fn an_operator_reads_another_episodes_spend_and_indeterminate_intents() {
    let h = harness(false);
    let t = h.token("ep1", &["Workspace.Read=worktree:10"]);
    let ops = h.operator_token();
    assert_eq!(h.call(&t, "a.txt").await["ok"], true);
    assert_eq!(h.call(&t, "b.txt").await["ok"], true);
    let request = Ref::of(b"request");
    h.store
        .write(move |w| -> Result<(), journal::JournalError> {
            let intent = Intent {
                invocation_id: "mcp:ep2:lost".into(),
                episode: "ep2".into(),
                effect: "Workspace.Read".into(),
                scope: "worktree".into(),
                cost: 3,
                request_ref: request,
            };
            journal::append_intent(w, &intent, 10)?;
            Ok(())
        })
        .unwrap();

    let (status, v) = h.get_json(Some(&ops), "/v1/budget?episode=ep1").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        v,
        json!({"episode": "ep1",
               "spent": [{"effect": "Workspace.Read", "scope": "worktree", "spent": 2}],
               "indeterminate": []})
    );
    let (status, v) = h.get_json(Some(&ops), "/v1/budget?episode=ep2").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        v,
        json!({"episode": "ep2",
               "spent": [{"effect": "Workspace.Read", "scope": "worktree", "spent": 3}],
               "indeterminate": [{"invocationId": "mcp:ep2:lost", "effect": "Workspace.Read",
                                  "scope": "worktree", "cost": 3, "requestRef": request}]})
    );
    // An episode nobody has used spent nothing.
    let (status, v) = h.get_json(Some(&ops), "/v1/budget?episode=quiet").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        v,
        json!({"episode": "quiet", "spent": [], "indeterminate": []})
    );
    // Without the parameter, or naming its own episode: the operator credential's own grants.
    let (status, own) = h.get_json(Some(&ops), "/v1/budget").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(own["episode"], "ops");
    assert_eq!(own["operator"], true);
    assert_eq!(own["grants"], json!([]));
    assert_eq!(
        h.get_json(Some(&ops), "/v1/budget?episode=ops").await.1,
        own
    );
}

#[tokio::test]
async fn an_agent_naming_another_episode_learns_nothing_of_its_budget() {
    let h = harness(false);
    let t1 = h.token("ep1", &["Workspace.Read=worktree:10"]);
    let t2 = h.token("ep2", &["Workspace.Read=worktree:10"]);
    assert_eq!(h.call(&t2, "secret.txt").await["ok"], true);
    // Another episode with spend, and one that never existed: one answer, byte for byte.
    let used = h.get(Some(&t1), "/v1/budget?episode=ep2", &[]).await;
    let never = h.get(Some(&t1), "/v1/budget?episode=never", &[]).await;
    assert_eq!(
        (used.status(), never.status()),
        (StatusCode::NOT_FOUND, StatusCode::NOT_FOUND)
    );
    let used = used.into_body().collect().await.unwrap().to_bytes();
    let never = never.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(used, never);
    assert_eq!(
        serde_json::from_slice::<Value>(&used).unwrap(),
        error_body(
            "NotFound",
            "only an operator credential reads another episode's budget; this credential's episode is ep1"
        )
    );
    // Its own episode, named or not: its grants, nothing spent.
    let (status, own) = h.get_json(Some(&t1), "/v1/budget?episode=ep1").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(own["operator"], false);
    assert_eq!(own["grants"][0]["spent"], 0);
    assert_eq!(h.get_json(Some(&t1), "/v1/budget").await.1, own);
    // Under --open-reads too: a budget is not a public read.
    let open = harness(true);
    let t = open.token("ep1", &["Workspace.Read=worktree:10"]);
    let (status, _) = open.get_json(Some(&t), "/v1/budget?episode=ep2").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_budget_query_with_a_bad_episode_or_parameter_is_refused() {
    let h = harness(false);
    let ops = h.operator_token();
    let (status, v) = h.get_json(Some(&ops), "/v1/budget?episode=Not%20One").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        v,
        error_body(
            "BadRequest",
            "invalid episode \"Not One\": want ^[a-z0-9][a-z0-9-]{0,63}$"
        )
    );
    let (status, v) = h.get_json(Some(&ops), "/v1/budget?episod=ep1").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        v,
        error_body(
            "BadRequest",
            "unknown parameter \"episod\": /v1/budget takes only episode"
        )
    );
    let (status, v) = h.get_json(None, "/v1/budget?episode=ep1").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(v["error"]["class"], "SessionAbsent");
}

// -------------------------------------------------------------------------------------------
// The workbench's assets.

fn header<'a>(h: &'a HeaderMap, name: &str) -> &'a str {
    h.get(name).map(|v| v.to_str().unwrap()).unwrap_or("")
}

#[tokio::test]
async fn the_workbench_is_served_with_its_content_types_and_a_strict_policy() {
    let h = harness(false);
    for (path, content_type) in [
        ("/workbench", "text/html; charset=utf-8"),
        ("/workbench/", "text/html; charset=utf-8"),
        ("/workbench/workbench.js", "text/javascript; charset=utf-8"),
        ("/workbench/verify.js", "text/javascript; charset=utf-8"),
        ("/workbench/canon.js", "text/javascript; charset=utf-8"),
        ("/workbench/workbench.css", "text/css; charset=utf-8"),
        ("/workbench/icon.svg", "image/svg+xml"),
    ] {
        // No credential: the page holds no data, the data routes ask for one.
        let res = h.get(None, path, &[]).await;
        assert_eq!(res.status(), StatusCode::OK, "{path}");
        let hd = res.headers().clone();
        assert_eq!(header(&hd, "content-type"), content_type, "{path}");
        assert_eq!(
            header(&hd, "content-security-policy"),
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; \
             connect-src 'self'; font-src 'none'; object-src 'none'; base-uri 'none'; \
             form-action 'none'; frame-ancestors 'none'"
        );
        assert_eq!(header(&hd, "x-content-type-options"), "nosniff");
        assert_eq!(header(&hd, "referrer-policy"), "no-referrer");
        assert!(hd.get("set-cookie").is_none());
        let body = res.into_body().collect().await.unwrap().to_bytes();
        assert!(!body.is_empty());
    }
}

/// A browser must not guess HTML in any answer: an object or an error message may hold what
/// an agent wrote. Nor keep one: answers carry an episode's log and objects, which a browser
/// client's disk cache would otherwise hold (the workbench's page sets its own policy).
#[tokio::test]
async fn every_answer_says_nosniff_and_no_store_refusals_included() {
    let h = harness(false);
    let token = h.token("ep1", &["Workspace.Read=worktree:5"]);
    for (credential, path, headers, status) in [
        (None, "/v1/health", &[][..], StatusCode::OK),
        (None, "/v1/head", &[][..], StatusCode::UNAUTHORIZED),
        (Some(token.as_str()), "/v1/head", &[][..], StatusCode::OK),
        (
            Some(token.as_str()),
            "/v1/log?from=0",
            &[][..],
            StatusCode::OK,
        ),
        (None, "/v1/nothing-here", &[][..], StatusCode::NOT_FOUND),
        (
            None,
            "/v1/health",
            &[("host", "evil.example.com")][..],
            StatusCode::FORBIDDEN,
        ),
    ] {
        let res = h.get(credential, path, headers).await;
        assert_eq!(res.status(), status, "{path} {headers:?}");
        assert_eq!(
            header(res.headers(), "x-content-type-options"),
            "nosniff",
            "{path} {headers:?}"
        );
        assert_eq!(
            header(res.headers(), "cache-control"),
            "no-store",
            "{path} {headers:?}"
        );
    }
    let page = h.get(None, "/workbench", &[]).await;
    assert_eq!(header(page.headers(), "cache-control"), "no-cache");
}

#[tokio::test]
async fn the_workbench_page_has_no_inline_script_or_style_and_fetches_nothing_elsewhere() {
    let h = harness(false);
    let mut all = String::new();
    for path in [
        "/workbench",
        "/workbench/workbench.js",
        "/workbench/verify.js",
        "/workbench/canon.js",
        "/workbench/workbench.css",
    ] {
        let res = h.get(None, path, &[]).await;
        let body = res.into_body().collect().await.unwrap().to_bytes();
        all.push_str(std::str::from_utf8(&body).unwrap());
    }
    let page = {
        let res = h.get(None, "/workbench", &[]).await;
        let body = res.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(body.to_vec()).unwrap()
    };
    // Every script has a source on this origin; no inline handlers or styles.
    assert_eq!(page.matches("<script").count(), 1);
    assert!(page.contains(r#"<script type="module" src="/workbench/workbench.js"></script>"#));
    for banned in [" style=", " onclick=", " onload=", "javascript:"] {
        assert!(!page.contains(banned), "{banned}");
    }
    // No network but this daemon: no absolute URLs, no cookies, no innerHTML.
    for banned in [
        "http://",
        "https://",
        "//cdn",
        "document.cookie",
        "innerHTML",
        "eval(",
    ] {
        assert!(!all.contains(banned), "{banned}");
    }
}

#[tokio::test]
async fn workbench_refuses_query_parameters_and_unknown_assets() {
    let h = harness(false);
    let (status, v) = h.get_json(None, "/workbench?entry=4").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        v,
        error_body(
            "BadRequest",
            "the workbench takes no query parameters (its links use the fragment, e.g. /workbench#entry/42)"
        )
    );
    for path in [
        "/workbench/nope.js",
        "/workbench/..%2fCargo.toml",
        "/workbench/index.html",
    ] {
        let (status, v) = h.get_json(None, path).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(v, error_body("NotFound", "no such workbench asset"));
    }
}

/// A session paging `/v1/log` through a long stretch of entries it may not list gets an empty
/// page that moves on by 5,000 positions, never one request that walks the whole log.
#[tokio::test]
async fn a_log_page_examines_at_most_5000_positions() {
    let h = harness(false);
    let t = h.token("ep1", &["Workspace.Read=worktree:10"]);
    h.call(&t, "a").await;
    h.bulk_append(5_001);
    h.call(&t, "b").await;
    let (status, v) = h.get_json(Some(&t), "/v1/log?from=1").await;
    assert_eq!(status, StatusCode::OK);
    // Entry 1 is the session's; 2..=5000 are not, and the page stops there.
    assert_eq!((entry_indexes(&v), &v["next"]), (vec![1], &json!(5001)));
    let (_, v) = h.get_json(Some(&t), "/v1/log?from=5001").await;
    assert_eq!((entry_indexes(&v), &v["next"]), (vec![5003], &json!(5004)));
    // The operator lists everything, at most 500 entries a page whatever limit it asks.
    let (_, v) = h
        .get_json(Some(&h.operator_token()), "/v1/log?from=1&limit=100000")
        .await;
    assert_eq!((entry_indexes(&v).len(), &v["next"]), (500, &json!(501)));
}

/// A commit is visible to readers a moment before it is durable (the writer leaves its meta
/// page to the store's syncing thread). A read that saw it is answered only once it is durable, so
/// a power cut never takes back an entry someone was shown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_that_sees_a_commit_not_yet_durable_is_answered_once_it_is() {
    let h = harness(true);
    let (gate, append) = h.append_one_and_hold_it_before_it_is_durable().await;
    assert!(
        h.store.read(|r| log::entry(r, 1)).unwrap().is_some(),
        "visible"
    );
    let app = h.app.clone();
    let mut read = tokio::spawn(async move {
        let res = app
            .oneshot(Request::get("/v1/log/1").body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = res.status();
        let body = res.into_body().collect().await.unwrap().to_bytes();
        (status, serde_json::from_slice::<Value>(&body).unwrap())
    });
    let early = tokio::time::timeout(Duration::from_millis(300), &mut read).await;
    assert!(
        early.is_err(),
        "answered before the entry was durable: {early:?}"
    );
    let batches = h.store.stats().batches.load(Ordering::SeqCst);
    gate.open();
    let (status, entry) = read.await.unwrap();
    assert_eq!(status, StatusCode::OK, "{entry}");
    assert_eq!(entry["header"]["entryIndex"], 1);
    append.await.unwrap();
    // The answer waited for the append's own sync: it queued no write of its own.
    assert_eq!(h.store.stats().batches.load(Ordering::SeqCst), batches);
}

/// A stream catching up (`?from=`) reads the log straight away, and still sends no entry
/// before it is durable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_sends_an_entry_only_once_it_is_durable() {
    let h = harness(true);
    let (gate, append) = h.append_one_and_hold_it_before_it_is_durable().await;
    let mut s = h.stream(None, "?from=1", &[]).await;
    let early = tokio::time::timeout(Duration::from_millis(300), s.next()).await;
    assert!(early.is_err(), "streamed before it was durable: {early:?}");
    gate.open();
    assert_eq!(s.entry().await.id, Some(1));
    append.await.unwrap();
}

impl Harness {
    fn head(&self) -> u64 {
        self.store.read(log::head).unwrap().unwrap().world.revision
    }

    /// The object entry `index` names as its transition: its address, its payload as JSON and
    /// the semantic id it was first stored under.
    fn transition_object(&self, index: u64) -> (Ref, Value, String) {
        let entry = self.store.read(|r| log::entry(r, index)).unwrap().unwrap();
        let (payload, sid) = self
            .store
            .read(|r| {
                r.object_view(&entry.transition_ref)
                    .map(|o| o.map(|o| (o.payload.to_vec(), o.semantic_id.to_owned())))
            })
            .unwrap()
            .unwrap();
        (
            entry.transition_ref,
            serde_json::from_slice(&payload).unwrap(),
            sid,
        )
    }

    /// The summary of entry `index` as `token` reads it, or `None` when it is not listed.
    async fn summary(&self, token: &str, index: u64) -> Option<Value> {
        let (status, page) = self
            .get_json(
                Some(token),
                &format!("/v1/log/summaries?from={index}&limit=1"),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{page}");
        page["items"].as_array().unwrap().first().cloned()
    }
}

/// What a summary says of a call: invocation, tool, episode, outcome and reason.
fn call_fields(s: &Value) -> Value {
    json!([
        s["invocationId"],
        s["tool"],
        s["episode"],
        s["outcome"],
        s["reason"]
    ])
}

/// An agent sends, as the arguments of a refused call, the exact bytes its next call's record
/// will have (a plan refusal has no effects, so its record is predictable from an earlier
/// one). The store keeps one copy per content and the first writer's semantic id
/// (`world/invocation-input/v1`); the summary still reads the entry's record as the call it is.
#[tokio::test]
async fn a_call_whose_record_bytes_were_first_stored_as_arguments_is_still_summarised_as_that_call()
{
    let h = harness(false);
    let ep1 = h.token("ep1", &["Workspace.Read=worktree:10"]);
    let ops = h.operator_token();
    let refused = json!({"path": "/etc/passwd"});
    h.call_with(&ep1, &refused, Some("k1")).await;
    let first = h.head();
    let (_, mut record, sid) = h.transition_object(first);
    assert_eq!(sid, "world/invocation-record/v2");
    assert_eq!(record["invocationId"], "mcp:ep1:k1");
    record["invocationId"] = json!("mcp:ep1:k2");
    let predicted = Object::json("any", "any", &record).unwrap().hash;
    // Refused (the record is no argument list ailang-read takes), but its arguments are stored.
    let answer = h.call_with(&ep1, &record, None).await;
    assert_eq!(answer["isError"], true, "{answer}");
    h.call_with(&ep1, &refused, Some("k2")).await;
    let disguised = h.head();
    let (reference, _, sid) = h.transition_object(disguised);
    assert_eq!(reference, predicted, "the record is the bytes sent before");
    assert_eq!(
        sid, "world/invocation-input/v1",
        "the record's bytes keep their first writer's kind"
    );

    let want = json!(["mcp:ep1:k2", "ailang-read", "ep1", "refused", "plan"]);
    for token in [&ops, &ep1] {
        let s = h.summary(token, disguised).await.expect("listed");
        assert_eq!(call_fields(&s), want, "{s}");
    }
    // The stream carries the same summary.
    let mut stream = h
        .stream(Some(&ops), &format!("?from={disguised}"), &[])
        .await;
    let e = stream.entry().await;
    assert_eq!(e.id, Some(disguised));
    assert_eq!(call_fields(&e.data), want);
}

/// One agent stores, as its own arguments, the record another episode's next call will have
/// (a predictable idempotency key). The call is still summarised as the other episode's, and
/// the agent that stored the bytes first does not get that episode's entry in its listing.
#[tokio::test]
async fn an_agent_that_stores_another_episodes_record_first_neither_hides_nor_lists_that_call() {
    let h = harness(false);
    let ep1 = h.token("ep1", &["Workspace.Read=worktree:10"]);
    let ep2 = h.token("ep2", &["Workspace.Read=worktree:10"]);
    let ep3 = h.token("ep3", &["Workspace.Read=worktree:10"]);
    let ops = h.operator_token();
    let refused = json!({"path": "/etc/passwd"});
    h.call_with(&ep1, &refused, Some("k1")).await;
    let (_, mut record, _) = h.transition_object(h.head());
    record["invocationId"] = json!("mcp:ep2:step-1");
    record["episodeId"] = json!("ep2");
    let predicted = Object::json("any", "any", &record).unwrap().hash;
    h.call_with(&ep1, &record, None).await;
    h.call_with(&ep2, &refused, Some("step-1")).await;
    let theirs = h.head();
    let (reference, _, sid) = h.transition_object(theirs);
    assert_eq!(reference, predicted);
    assert_eq!(sid, "world/invocation-input/v1");

    let want = json!(["mcp:ep2:step-1", "ailang-read", "ep2", "refused", "plan"]);
    for token in [&ops, &ep2] {
        let s = h.summary(token, theirs).await.expect("listed");
        assert_eq!(call_fields(&s), want, "{s}");
    }
    assert_eq!(
        h.summary(&ep1, theirs).await,
        None,
        "ep2's call is not ep1's"
    );
    assert_eq!(h.summary(&ep3, theirs).await, None);
}

/// The grant of the agents of the disguised-record tests below.
const READS: &[&str] = &["Workspace.Read=worktree:10"];

impl Harness {
    /// The entry indexes `token` lists at `/v1/log` from `from`, one page of 100.
    async fn listed(&self, token: &str, from: u64) -> Vec<u64> {
        let (status, page) = self
            .get_json(Some(token), &format!("/v1/log?from={from}&limit=100"))
            .await;
        assert_eq!(status, StatusCode::OK, "{page}");
        page["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["header"]["entryIndex"].as_u64().unwrap())
            .collect()
    }
}

/// An object answer's payload (base64), as JSON.
fn payload(o: &Value) -> Value {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(o["payload"].as_str().unwrap())
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

/// A refused call's arguments: ailang-read plans no read outside the worktree.
fn refused() -> Value {
    json!({"path": "/etc/passwd"})
}

/// One agent stores, as its own arguments, the record another episode's next call will have
/// (a plan refusal's record is predictable from one of its own, and the idempotency key is
/// guessable). `GET /v1/log` lists that call to its episode and operators only, not to the
/// agent that stored its record's bytes first.
#[tokio::test]
async fn an_agent_that_stored_another_episodes_record_first_is_not_listed_that_call_in_the_log() {
    let h = harness(false);
    let ep1 = h.token("ep1", READS);
    let ep2 = h.token("ep2", READS);
    let ep3 = h.token("ep3", READS);
    let ops = h.operator_token();
    h.call_with(&ep1, &refused(), Some("k1")).await;
    let own = h.head();
    let (_, mut record, _) = h.transition_object(own);
    record["invocationId"] = json!("mcp:ep2:step-1");
    record["episodeId"] = json!("ep2");
    let predicted = Object::json("any", "any", &record).unwrap().hash;
    let answer = h.call_with(&ep1, &record, None).await;
    assert_eq!(answer["isError"], true, "{answer}");
    h.call_with(&ep2, &refused(), Some("step-1")).await;
    let theirs = h.head();
    let (reference, _, sid) = h.transition_object(theirs);
    assert_eq!(reference, predicted, "ep2's record is the bytes ep1 sent");
    assert_eq!(sid, "world/invocation-input/v1");

    assert_eq!(h.listed(&ep1, own).await, vec![own, own + 1]);
    assert_eq!(h.listed(&ep2, own).await, vec![theirs]);
    assert_eq!(h.listed(&ep3, own).await, Vec::<u64>::new());
    assert_eq!(h.listed(&ops, own).await, vec![own, own + 1, theirs]);
    // ep1 still reads the bytes it sent, as the arguments it sent them as.
    let (status, o) = h
        .get_json(Some(&ep1), &format!("/v1/objects/{reference}"))
        .await;
    assert_eq!(status, StatusCode::OK, "{o}");
    assert_eq!(o["semanticId"], "world/invocation-input/v1");
}

/// An agent sends, as a call's arguments, the exact bytes of a transition document a publisher
/// is about to publish (a tool's document is no secret: it is in the plugin). The store keeps
/// the first writer's kind (`world/invocation-input/v1`), but the published document is public
/// all the same: every agent reads it, as the transition it was published as, and the agent
/// that sent the bytes first still reads them as its own arguments.
#[tokio::test]
async fn a_transition_document_an_agent_stored_first_as_arguments_is_public_once_published() {
    let h = harness(false);
    let ep1 = h.token("ep1", READS);
    let ep2 = h.token("ep2", READS);
    let ops = h.operator_token();
    let mut doc = se_tools()
        .into_iter()
        .find(|t| t.to_value()["id"] == "ailang-read")
        .unwrap()
        .to_value()
        .clone();
    doc["id"] = json!("ailang-read-again");
    let next = Transition::from_value(doc.clone()).unwrap();
    let predicted = Object::json("any", "any", &doc).unwrap().hash;
    let answer = h.call_with(&ep1, &doc, None).await;
    assert_eq!(answer["isError"], true, "{answer}");
    registry::publish(&h.store, registry::DEFAULT_REGISTRY, vec![next], "test").unwrap();
    let stored = h
        .store
        .read(|r| {
            r.object_view(&predicted)
                .map(|o| o.map(|o| o.semantic_id.to_owned()))
        })
        .unwrap();
    assert_eq!(
        stored.as_deref(),
        Some("world/invocation-input/v1"),
        "the document's bytes keep their first writer's kind"
    );
    // The registry names the document: it is the tool's transition.
    let (status, head) = h.get_json(Some(&ep2), "/v1/registry/tools").await;
    assert_eq!(status, StatusCode::OK, "{head}");
    let (status, revision) = h
        .get_json(
            Some(&ep2),
            &format!(
                "/v1/objects/{}?payload=true",
                head["head"].as_str().unwrap()
            ),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{revision}");
    let entries = payload(&revision)["entries"].as_array().unwrap().clone();
    let listed = entries
        .iter()
        .find(|e| e["id"] == "ailang-read-again")
        .unwrap();
    assert_eq!(listed["transitionFn"], json!(predicted.to_string()));

    let path = format!("/v1/objects/{predicted}?payload=true");
    for token in [&ep2, &h.token("ep3", READS)] {
        let (status, o) = h.get_json(Some(token), &path).await;
        assert_eq!(status, StatusCode::OK, "{o}");
        assert_eq!(o["semanticId"], "world/transition/v1");
        assert_eq!(o["provenance"], "test");
        assert_eq!(payload(&o), doc);
    }
    let (status, o) = h.get_json(Some(&ep1), &path).await;
    assert_eq!(status, StatusCode::OK, "{o}");
    assert_eq!(o["semanticId"], "world/invocation-input/v1");
    assert_eq!(payload(&o), doc);
    // Operators read the stored object, as for every object.
    let (status, o) = h.get_json(Some(&ops), &path).await;
    assert_eq!(status, StatusCode::OK, "{o}");
    assert_eq!(o["semanticId"], "world/invocation-input/v1");
}
