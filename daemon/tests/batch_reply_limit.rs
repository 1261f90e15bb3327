//! `[limits] reply_bytes` of an MCP batch through the real `worldd` binary and real HTTP: the
//! limit trips, and is counted, only when a request of the batch was held back.

mod common;

use common::*;
use serde_json::{json, Value};

/// `worldd_limit_trips_total{limit="reply_bytes"}` (0 when absent).
fn reply_bytes_trips(d: &Daemon) -> u64 {
    get(&d.url("/v1/metrics"), None)
        .text()
        .lines()
        .find_map(|l| l.strip_prefix("worldd_limit_trips_total{limit=\"reply_bytes\"} "))
        .map_or(0, |v| v.trim().parse().unwrap())
}

/// A 2025-03-26 batch of three `ailang-read`s of `big.txt` (ids 1 to 3): its replies, which
/// must come as a 200.
fn three_reads_of_big_txt(d: &Daemon, token: &str) -> Value {
    let read = |id: u64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": "ailang-read", "arguments": {"path": "big.txt"}}})
    };
    let items = json!([read(1), read(2), read(3)]);
    let a = mcp_text(d, token, "2025-03-26", &serde_json::to_vec(&items).unwrap());
    assert_eq!(a.status, 200, "{}", a.text());
    a.sse_json()
}

/// A batch whose replies reached the limit with its last request was counted as tripped
/// although every item ran (a one-item batch; a call and a notification): an operator alerting
/// on the metric saw trips where nothing was held back. Counted now once a batch, when a
/// request of it is answered `not run`.
#[test]
fn reply_bytes_is_counted_only_when_an_item_was_not_run() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("world.toml");
    std::fs::write(&config, "[limits]\nreply_bytes = 100\n").unwrap();
    let d = Daemon::start(&["worldd_workspace"], &["--config", path_str(&config)]);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let batch = |items: Value| {
        let a = mcp_text(
            &d,
            &token,
            "2025-03-26",
            &serde_json::to_vec(&items).unwrap(),
        );
        assert_eq!(a.status, 200, "{}", a.text());
        a.sse_json()
    };
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let ping = |id: u64| json!({"jsonrpc": "2.0", "id": id, "method": "ping"});
    // The list's reply alone passes 100 bytes: every item ran.
    let v = batch(json!([list]));
    assert!(v[0]["result"]["tools"].is_array(), "{v}");
    let v = batch(json!([list, note]));
    assert_eq!(v.as_array().unwrap().len(), 1, "{v}");
    assert!(v[0]["result"]["tools"].is_array(), "{v}");
    assert_eq!(reply_bytes_trips(&d), 0);
    // Two requests held back: one trip for the batch.
    let v = batch(json!([list, ping(2), ping(3)]));
    let not_run = "invalid request: not run: the replies to this batch reached the 100-byte limit ([limits] reply_bytes); send it again in another POST";
    assert_eq!(
        v[1],
        json!({"jsonrpc": "2.0", "id": 2, "error": {"code": -32600, "message": not_run}})
    );
    assert_eq!(v[2]["id"], json!(3));
    assert_eq!(reply_bytes_trips(&d), 1);
}

/// `reply_bytes` defaulted to exactly one credential's quarter of the reply budget, so a batch
/// cut at it (its answer a little over) ran, spent its units, and was answered `503` whenever
/// its credential had any other answer unread. It is at most half that quarter: an unset one
/// follows a smaller budget (a larger one set is lowered at start and said:
/// `limit_pairs_at_start.rs`).
#[test]
fn reply_bytes_stays_within_half_a_credentials_reply_share() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("world.toml");
    // Unset under a 4 MiB reply budget: 512 KiB.
    std::fs::write(&config, "[server]\nreply_budget_bytes = \"4MiB\"\n").unwrap();
    let d = Daemon::start(&["worldd_workspace"], &["--config", path_str(&config)]);
    let token = d.session("ep1", &["Workspace.Read=worktree:10"]);
    std::fs::write(d.root().join("ep1/big.txt"), "x".repeat(150_000)).unwrap();
    let v = three_reads_of_big_txt(&d, &token);
    assert!(v[1]["result"].is_object(), "{}", v[1]);
    assert_eq!(
        v[2],
        json!({"jsonrpc": "2.0", "id": 3, "error": {"code": -32600, "message": "invalid request: not run: the replies to this batch reached the 524288-byte limit ([limits] reply_bytes); send it again in another POST"}})
    );
}

/// An answer of `token`'s held unread (two writes of its, under `Workspace.Write`), sized to
/// leave about 2 KiB of its 1 MiB share (of [`small_share_daemon`]'s budget): its requests
/// run (the share is not full), and no answer past about 18 KiB fits what is left. The
/// connection that holds it.
fn hold_all_but_2_kib_of_the_share(d: &Daemon, token: &str) -> std::net::TcpStream {
    let object = |n: usize| {
        let args = json!({"path": "held.txt", "content": "z".repeat(n)});
        let v = tools_call(d, token, "ailang-write", args.clone());
        assert_eq!(v["result"]["structuredContent"]["ok"], true, "{v}");
        let path = format!(
            "/v1/objects/{}?payload=true",
            broker_core::object::Ref::of_json(&args).unwrap()
        );
        let size = get(&d.url(&path), Some(token)).body.len();
        (path, size)
    };
    // KiB of the share an answer of `size` bytes takes (its first 16 KiB are not counted).
    let kib = |size: usize| (size - 16 * 1024).div_ceil(1024);
    let (_, size) = object(780_000);
    let n = 780_000 + (1022 - kib(size)) * 1024 * 3 / 4;
    let (path, size) = object(n);
    assert!((1021..=1023).contains(&kib(size)), "{size}");
    let (holder, status) = unread_get(d, &path, token);
    assert_eq!(status, "HTTP/1.1 200");
    holder
}

/// What a credential whose share is full is told.
const SHARE_TEXT: &str = "too many answers to this credential are waiting unread (a quarter of [server] reply_budget_bytes); read them, then retry";

/// What a withheld call's reply says.
const WITHHELD_CALL: &str = "not sent: this call's reply was too large to hold while the reply budget has no room for it ([server] reply_budget_bytes, a quarter of it per credential); the call was answered and committed: `data` is its result's _meta (world/outcome says how it ended); read its output by world/outputRef (GET /v1/objects/REF?payload=true), or reconcile it by world/invocationId; sending it again with its idempotency key runs nothing twice";

/// A batch (or a single call) whose answer did not fit what its credential's other answers
/// waiting unread left of its share was replaced by `503` after its calls ran: their units were
/// spent and the agent learned nothing of what had run. It gets its answer in a withheld form
/// now: each large reply replaced by an error of its id that says it ran, with its result's
/// `_meta` as `data`, by which the result is read once the other answers are.
#[test]
fn calls_whose_answer_finds_no_room_in_the_reply_share_are_answered_withheld_not_503() {
    let d = small_share_daemon();
    let grants = [
        "Workspace.Read=worktree:100",
        "Workspace.Write=worktree:100",
    ];
    let token = d.session("ep1", &grants);
    std::fs::write(d.root().join("ep1/big.txt"), "x".repeat(150_000)).unwrap();
    // A 700 KB object of this credential's, read by a client that reads nothing of it.
    let args = json!({"path": "held.txt", "content": "z".repeat(700_000)});
    let v = tools_call(&d, &token, "ailang-write", args.clone());
    assert_eq!(v["result"]["structuredContent"]["ok"], true, "{v}");
    let held = broker_core::object::Ref::of_json(&args).unwrap();
    let (holder, status) = unread_get(&d, &format!("/v1/objects/{held}?payload=true"), &token);
    assert_eq!(status, "HTTP/1.1 200");

    let v = three_reads_of_big_txt(&d, &token);
    for i in 0..2 {
        let error = &v[i]["error"];
        assert_eq!(v[i]["id"], json!(i + 1), "{v}");
        assert_eq!(error["code"], -32603, "{v}");
        assert_eq!(error["message"], WITHHELD_CALL, "{v}");
        assert!(
            error["data"]["world/invocationId"]
                .as_str()
                .is_some_and(|id| id.starts_with("mcp:ep1:")),
            "{v}"
        );
        assert_eq!(error["data"]["world/outcome"]["kind"], "ok", "{v}");
    }
    // The third was held back by reply_bytes, as ever.
    assert_eq!(v[2]["error"]["code"], -32600, "{v}");
    let output = v[0]["error"]["data"]["world/outputRef"]
        .as_str()
        .unwrap()
        .to_owned();

    // A single call is answered the same way (once the second the refusal holds is over), a
    // keyed one too; its resend runs nothing, so it gets the 503 (a withheld form is counted
    // outside the share: free resends would fill the budget with it).
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let keyed = json!({"name": "ailang-read", "arguments": {"path": "big.txt"},
                       "_meta": {"world/idempotencyKey": "big-once"}});
    let a = mcp(&d, &token, "tools/call", keyed.clone());
    assert_eq!(a.status, 200, "{}", a.text());
    let v = a.rpc_json();
    assert_eq!(v["error"]["code"], -32603, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("not sent: this call's reply was too large"),
        "{v}"
    );
    assert_eq!(v["error"]["data"]["world/replayed"], false, "{v}");
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let again = mcp(&d, &token, "tools/call", keyed);
    assert_eq!(again.status, 503, "{}", again.text());

    // Under 2026-07-28 too, with that revision's status for the error.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let a = modern_tools_call(&d, &token, 9, "ailang-read", json!({"path": "big.txt"}));
    assert_eq!(a.status, 500, "{}", a.text());
    let v = a.json();
    assert_eq!(
        (v["id"].clone(), v["error"]["code"].clone()),
        (json!(9), json!(-32603)),
        "{v}"
    );
    assert!(v["error"]["data"]["world/invocationId"].is_string(), "{v}");

    // Once the held answer is gone, the result is read by its output ref.
    let object = object_once_the_held_answer_is_gone(&d, &token, &output, holder);
    assert!(object["payload"].as_str().unwrap().len() > 150_000);
}

/// A withheld answer was counted against its credential's share like any other, and the share
/// was what was full: a batch of 18 or more large replies (each stand-in about a kilobyte) got
/// a bare `503` after its calls ran. And a short denied reply (about 1.2 KB, nothing ran) was
/// replaced by a stand-in saying the call's reply was too large, its reason lost. A withheld
/// answer is counted against the whole budget only, and replies up to 4 KiB are kept.
#[test]
fn a_large_withheld_batch_is_sent_and_keeps_its_short_replies_whole() {
    let d = small_share_daemon();
    let token = d.session(
        "ep1",
        &["Workspace.Read=worktree:21", "Workspace.Write=worktree:5"],
    );
    std::fs::write(d.root().join("ep1/mid.txt"), "m".repeat(5_000)).unwrap();
    // The batch runs (the share is not full), and neither its answer nor, counted against
    // the share, its withheld form fits what is left.
    let _holder = hold_all_but_2_kib_of_the_share(&d, &token);

    // 22 reads of a 5 KB file: 21 within the budget, the last denied.
    let items: Vec<Value> = (1..=22)
        .map(|id| {
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                   "params": {"name": "ailang-read", "arguments": {"path": "mid.txt"}}})
        })
        .collect();
    let a = mcp_text(
        &d,
        &token,
        "2025-03-26",
        &serde_json::to_vec(&items).unwrap(),
    );
    assert_eq!(a.status, 200, "{}", a.text());
    assert!(a.body.len() > 16 * 1024, "{}", a.body.len());
    let v = a.sse_json();
    for i in 0..21 {
        assert_eq!(v[i]["error"]["message"], WITHHELD_CALL, "{}", v[i]);
        assert_eq!(
            v[i]["error"]["data"]["world/outcome"]["kind"], "ok",
            "{}",
            v[i]
        );
    }
    let denied = &v[21];
    assert_eq!(denied["id"], 22, "{denied}");
    assert_eq!(denied["result"]["isError"], true, "{denied}");
    assert_eq!(
        denied["result"]["_meta"]["world/outcome"]["reason"], "denied:budget",
        "{denied}"
    );
}

/// A POST of `items` under 2025-03-26 whose answer must be the share's `503`, with
/// `Retry-After: 1`.
fn assert_refused_for_the_share(d: &Daemon, token: &str, items: &[Value]) {
    let a = mcp_text(d, token, "2025-03-26", &serde_json::to_vec(items).unwrap());
    assert_eq!(a.status, 503, "{}", a.text());
    assert_eq!(a.retry_after.as_deref(), Some("1"));
    assert_eq!(
        a.json(),
        json!({"error": {"class": "Unavailable", "message": SHARE_TEXT}})
    );
}

/// A batch of listings, which ran nothing, was sent withheld where its credential's share had
/// no room for it (each reply over 4 KiB replaced by an error saying it was answered), counted
/// against the whole budget only: a credential whose share was full could so hold more of the
/// budget than its share at no cost. It gets the share's `503` as before: asking again costs
/// nothing.
#[test]
fn a_batch_of_listings_that_finds_no_room_in_the_reply_share_still_gets_the_503() {
    let d = small_share_daemon();
    let token = d.session(
        "ep1",
        &["Workspace.Read=worktree:5", "Workspace.Write=worktree:5"],
    );
    let items: Vec<Value> = (1..=5)
        .map(|id| json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"}))
        .collect();
    // With room, each listing's reply passes 4 KiB, and the answer 16 KiB.
    let a = mcp_text(
        &d,
        &token,
        "2025-03-26",
        &serde_json::to_vec(&items).unwrap(),
    );
    assert_eq!(a.status, 200, "{}", a.text());
    assert!(a.body.len() > 16 * 1024, "{}", a.body.len());
    for reply in a.sse_json().as_array().unwrap() {
        let written = serde_json::to_vec(reply).unwrap().len();
        assert!(written > 4096, "{written}: {reply}");
    }
    let _holder = hold_all_but_2_kib_of_the_share(&d, &token);
    assert_refused_for_the_share(&d, &token, &items);
}

/// The most bytes a withheld form may take (`edge::reply::WITHHELD_MOST_BYTES`).
const WITHHELD_MOST_BYTES: usize = 64 * 1024;

/// A read of `path` with JSON-RPC id `id`, as a batch's item.
fn read(id: u64, path: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": "ailang-read", "arguments": {"path": path}}})
}

/// A withheld batch kept its replies of up to 4 KiB whole, so 63 of them beside one large
/// reply made a withheld form of about 256 KiB, counted against the whole budget only. A
/// batch whose withheld form would pass 64 KiB gets the share's `503`, as it did before
/// withheld forms: here replies of 3 to 4 KiB, kept, enough of them to pass it alone, beside
/// one larger.
#[test]
fn a_batch_whose_withheld_form_would_pass_its_bound_gets_the_503() {
    let d = small_share_daemon();
    let token = d.session(
        "ep1",
        &["Workspace.Read=worktree:60", "Workspace.Write=worktree:5"],
    );
    std::fs::write(d.root().join("ep1/small.txt"), "s".repeat(1_100)).unwrap();
    std::fs::write(d.root().join("ep1/mid.txt"), "m".repeat(5_000)).unwrap();
    // A read of small.txt is answered in under 4 KiB: kept whole in a withheld form.
    let one = tools_call(&d, &token, "ailang-read", json!({"path": "small.txt"}));
    let written = serde_json::to_vec(&one).unwrap().len();
    assert!((1024..=4000).contains(&written), "{written}");
    let kept = WITHHELD_MOST_BYTES / written + 1;
    let mut items = vec![read(1, "mid.txt")];
    items.extend((2..=kept as u64 + 1).map(|id| read(id, "small.txt")));
    // With room, the batch is answered whole: the replies a withheld form would keep as they
    // are pass its bound by themselves.
    let a = mcp_text(
        &d,
        &token,
        "2025-03-26",
        &serde_json::to_vec(&items).unwrap(),
    );
    assert_eq!(a.status, 200, "{}", a.text());
    let v = a.sse_json();
    let replies = v.as_array().unwrap();
    assert_eq!(replies.len(), kept + 1, "{v}");
    assert!(serde_json::to_vec(&replies[0]).unwrap().len() > 4096);
    let sizes: Vec<usize> = replies[1..]
        .iter()
        .map(|r| serde_json::to_vec(r).unwrap().len())
        .collect();
    assert!(sizes.iter().all(|&n| n <= 4096), "{sizes:?}");
    let kept_bytes: usize = sizes.iter().sum();
    assert!(kept_bytes > WITHHELD_MOST_BYTES, "{kept_bytes}");
    let _holder = hold_all_but_2_kib_of_the_share(&d, &token);
    assert_refused_for_the_share(&d, &token, &items);
}

/// A batch of calls whose replies were each 4 KiB or under, more than 16 KiB together, had no
/// withheld form (no reply large enough to replace), so where its credential's share had no
/// room for it, it got the share's `503` after its calls ran: their units spent and the agent
/// told nothing. Its withheld form is the answer as it is, within 64 KiB: sent, counted
/// against the budget only.
#[test]
fn a_batch_of_short_call_replies_that_finds_no_room_in_the_reply_share_is_sent_as_it_is() {
    let d = small_share_daemon();
    let token = d.session(
        "ep1",
        &["Workspace.Read=worktree:20", "Workspace.Write=worktree:5"],
    );
    std::fs::write(d.root().join("ep1/small.txt"), "s".repeat(1_100)).unwrap();
    let items: Vec<Value> = (1..=8).map(|id| read(id, "small.txt")).collect();
    let _holder = hold_all_but_2_kib_of_the_share(&d, &token);
    let a = mcp_text(
        &d,
        &token,
        "2025-03-26",
        &serde_json::to_vec(&items).unwrap(),
    );
    assert_eq!(a.status, 200, "{}", a.text());
    assert!(
        (16 * 1024..=WITHHELD_MOST_BYTES).contains(&a.body.len()),
        "{}",
        a.body.len()
    );
    let v = a.sse_json();
    let replies = v.as_array().unwrap();
    assert_eq!(replies.len(), 8, "{v}");
    for (i, reply) in replies.iter().enumerate() {
        assert_eq!(reply["id"], json!(i + 1), "{reply}");
        assert!(serde_json::to_vec(reply).unwrap().len() <= 4096, "{reply}");
        assert_ne!(reply["result"]["isError"], true, "{reply}");
        assert_eq!(
            reply["result"]["_meta"]["world/outcome"]["kind"], "ok",
            "{reply}"
        );
    }
}
