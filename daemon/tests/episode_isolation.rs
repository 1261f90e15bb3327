//! Episodes cannot read each other, through the real binary: another episode's object is
//! answered exactly as an absent one, and neither `/v1/objects/by-semantic-id/…` nor
//! `/v1/log` lists it; the operator credential reads everything; `--open-reads` keeps the
//! reference behaviour.

mod common;

use base64::Engine;
use common::*;
use serde_json::{json, Value};

const WS: &[&str] = &["worldd_workspace"];
const SECRET: &str = "the launch code is 0000";

fn object(d: &Daemon, token: Option<&str>, reference: &str, payload: bool) -> Answer {
    let q = if payload { "?payload=true" } else { "" };
    get(&d.url(&format!("/v1/objects/{reference}{q}")), token)
}

fn payload_json(a: &Answer) -> Value {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(a.json()["payload"].as_str().unwrap())
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

/// Every object of the call committed at `entry`, as (what, ref), read with `token`.
fn call_refs(d: &Daemon, token: &str, entry: u64) -> Vec<(String, String)> {
    let e = get(&d.url(&format!("/v1/log/{entry}")), Some(token)).json();
    let record_ref = e["transitionRef"].as_str().unwrap().to_owned();
    let record = payload_json(&object(d, Some(token), &record_ref, true));
    let s = |v: &Value| v.as_str().unwrap().to_owned();
    let mut refs = vec![
        ("invocation record".to_owned(), record_ref),
        ("input".to_owned(), s(&record["input"])),
        ("output".to_owned(), s(&record["output"])),
        ("plan".to_owned(), s(&record["plan"])),
    ];
    for r in record["effects"].as_array().unwrap() {
        let rec = payload_json(&object(d, Some(token), r.as_str().unwrap(), true));
        refs.push(("effect record".to_owned(), s(r)));
        refs.push(("effect request".to_owned(), s(&rec["requestRef"])));
        refs.push(("effect result".to_owned(), s(&rec["resultRef"])));
    }
    refs
}

fn listed(d: &Daemon, token: &str, semantic_id: &str) -> Vec<String> {
    let a = get(
        &d.url(&format!(
            "/v1/objects/by-semantic-id/{semantic_id}?limit=500"
        )),
        Some(token),
    );
    assert_eq!(a.status, 200, "{}", a.text());
    a.json()["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["hash"].as_str().unwrap().to_owned())
        .collect()
}

fn log_indexes(d: &Daemon, token: Option<&str>, query: &str) -> (Vec<u64>, u64) {
    let page = get(&d.url(&format!("/v1/log?{query}")), token).json();
    (
        page["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["header"]["entryIndex"].as_u64().unwrap())
            .collect(),
        page["next"].as_u64().unwrap(),
    )
}

#[test]
fn episode_b_cannot_read_list_or_find_episode_as_input_output_or_effect_objects() {
    let d = Daemon::start(WS, &[]);
    let a = d.session(
        "ep-a",
        &["Workspace.Write=worktree:5", "Workspace.Read=worktree:5"],
    );
    let b = d.session("ep-b", &["Workspace.Read=worktree:5"]);
    let operator = d.operator_session("ops", &[]);
    let wrote = a2a(
        &d,
        &a,
        "w1",
        "ailang-write",
        json!({"path": "secret.txt", "content": SECRET}),
    );
    let read = a2a(&d, &a, "r1", "ailang-read", json!({"path": "secret.txt"}));
    let own = a2a(&d, &b, "r1", "ailang-read", json!({"path": "mine.txt"}));
    let entry = |v: &Value| v["result"]["metadata"]["entry_index"].as_u64().unwrap();
    let (write_at, read_at, own_at) = (entry(&wrote), entry(&read), entry(&own));

    let mut refs = call_refs(&d, &operator, write_at);
    refs.extend(call_refs(&d, &operator, read_at));
    assert_eq!(refs.len(), 14);
    // The secret is in A's input, request, result and output: A and the operator read it.
    let read_output = &refs[9].1;
    assert!(payload_json(&object(&d, Some(&a), read_output, true))
        .to_string()
        .contains(SECRET));
    assert!(
        payload_json(&object(&d, Some(&operator), read_output, true))
            .to_string()
            .contains(SECRET)
    );

    // B: every one of A's objects answers exactly as an object that does not exist.
    let absent = format!("sha256:{}", "ab".repeat(32));
    for payload in [false, true] {
        let nothing = object(&d, Some(&b), &absent, payload);
        assert_eq!(
            (nothing.status, nothing.json()),
            (
                404,
                json!({"error": {"class": "NotFound", "message": "object not found"}})
            )
        );
        for (what, r) in &refs {
            let answer = object(&d, Some(&b), r, payload);
            assert_eq!(
                (answer.status, &answer.content_type, &answer.body),
                (nothing.status, &nothing.content_type, &nothing.body),
                "B reading A's {what}"
            );
            assert_eq!(object(&d, Some(&a), r, payload).status, 200, "A's {what}");
            assert_eq!(
                object(&d, Some(&operator), r, payload).status,
                200,
                "{what}"
            );
        }
    }

    // Listing by semantic id: only what the caller may read.
    let kinds = [
        ("world/invocation-input/v1", 1),
        ("world/invocation-output/v1", 2),
        ("world/invocation-record/v2", 0),
        ("world/effect-plan/v1", 3),
        ("world/effect-record/v1", 4),
        ("world/effect-request/v1", 5),
        ("world/effect-result/v1", 6),
    ];
    for (kind, i) in kinds {
        let for_b = listed(&d, &b, kind);
        let for_a = listed(&d, &a, kind);
        let for_op = listed(&d, &operator, kind);
        for (what, r) in [&refs[i], &refs[i + 7]] {
            assert!(!for_b.contains(r), "B lists A's {what}");
            assert!(for_a.contains(r), "A lists its {what}");
            assert!(for_op.contains(r), "the operator lists {what}");
        }
        assert_eq!(for_b.len(), 1, "{kind}: B's own call");
    }
    // Public kinds are listed for everyone.
    assert_eq!(
        listed(&d, &b, "world/transition/v1"),
        listed(&d, &operator, "world/transition/v1")
    );

    // The log: B's page skips A's entries and keeps indexes, so the gaps show.
    let head = get(&d.url("/v1/head"), Some(&b)).text();
    let head_rev = get(&d.url(&format!("/v1/worlds/{head}")), Some(&b)).json()["revision"]
        .as_u64()
        .unwrap();
    assert_eq!(head_rev, own_at);
    assert_eq!(
        log_indexes(&d, Some(&b), "from=0"),
        (vec![0, own_at], own_at + 1)
    );
    assert_eq!(
        log_indexes(&d, Some(&a), "from=0"),
        (vec![0, write_at, read_at], own_at + 1)
    );
    assert_eq!(
        log_indexes(&d, Some(&operator), "from=0").0,
        (0..=own_at).collect::<Vec<_>>()
    );
    assert_eq!(
        log_indexes(&d, Some(&b), "from=1&limit=1"),
        (vec![own_at], own_at + 1)
    );
    // Entry headers stay readable one by one: B can follow the chain through A's entries.
    let mine = get(&d.url(&format!("/v1/log/{own_at}")), Some(&b)).json();
    let prev = get(&d.url(&format!("/v1/log/{read_at}")), Some(&b));
    assert_eq!(prev.status, 200);
    assert_eq!(mine["header"]["prevEntryHash"], prev.json()["entryHash"]);

    // Reconciliation: A's call is not B's to learn of; the operator may look.
    let theirs = get(&d.url("/v1/invocations/a2a:ep-a:w1"), Some(&b));
    assert_eq!(theirs.status, 404);
    assert_eq!(theirs.json()["state"], "not-found");
    // It names the id asked for, not B's own call with that task id, which exists: the same
    // answer whether A's call does or not.
    a2a(&d, &b, "w1", "ailang-read", json!({"path": "b.txt"}));
    assert_eq!(
        get(&d.url("/v1/invocations/a2a:ep-b:w1"), Some(&b)).status,
        200
    );
    let theirs = get(&d.url("/v1/invocations/a2a:ep-a:w1"), Some(&b));
    assert_eq!(theirs.status, 404);
    assert_eq!(theirs.json()["invocationId"], "a2a:ep-a:w1");
    let never = get(&d.url("/v1/invocations/a2a:ep-a:never"), Some(&b));
    assert_eq!(never.status, 404);
    let mut never = never.json();
    never["invocationId"] = json!("a2a:ep-a:w1");
    never["taskId"] = json!("w1");
    never["error"]["message"] = theirs.json()["error"]["message"].clone();
    assert_eq!(never, theirs.json());
    // Ids no call could have are refused alike on both invocation routes.
    for bad in [
        "a2a:ep-b:a%2Fb",
        "a2a:ep-b:",
        "a2a::r-1",
        "a2a:Ep-b:w1",
        "mcp:ep-b:a%20b",
    ] {
        for route in [
            format!("/v1/invocations/{bad}"),
            format!("/v1/invocations/{bad}/rows"),
        ] {
            let a = get(&d.url(&route), Some(&b));
            assert_eq!(a.status, 400, "{route}: {}", a.text());
            assert_eq!(
                a.json()["error"]["message"],
                "invocation id must be mcp:<episode>:<task id> or a2a:<episode>:<task id>",
                "{route}"
            );
        }
    }
    let looked = get(&d.url("/v1/invocations/a2a:ep-a:w1"), Some(&operator));
    assert_eq!(looked.status, 200, "{}", looked.text());
    assert_eq!(looked.json()["state"], "committed");
    assert_eq!(looked.json()["entryIndex"], write_at);
    // An operator's not-found names the episode it looked in (the id's), not "this
    // session's episode", which is the operator's own.
    let never = get(&d.url("/v1/invocations/a2a:ep-a:never"), Some(&operator));
    assert_eq!(never.status, 404, "{}", never.text());
    assert_eq!(
        never.json()["error"]["message"],
        "no call with task id \"never\" on surface a2a in episode ep-a"
    );
}

#[test]
fn identical_arguments_from_another_episode_do_not_open_the_first_episodes_call() {
    let d = Daemon::start(WS, &[]);
    let a = d.session("ep-a", &["Workspace.Read=worktree:5"]);
    let b = d.session("ep-b", &["Workspace.Read=worktree:5"]);
    let operator = d.operator_session("ops", &[]);
    let at = a2a(&d, &a, "t", "ailang-read", json!({"path": "same.txt"}))["result"]["metadata"]
        ["entry_index"]
        .as_u64()
        .unwrap();
    let bt = a2a(&d, &b, "t", "ailang-read", json!({"path": "same.txt"}))["result"]["metadata"]
        ["entry_index"]
        .as_u64()
        .unwrap();
    let ra = call_refs(&d, &operator, at);
    let rb = call_refs(&d, &operator, bt);
    // One input object, stored once, read by both episodes.
    assert_eq!(ra[1], rb[1]);
    assert_eq!(object(&d, Some(&b), &ra[1].1, true).status, 200);
    assert_eq!(object(&d, Some(&a), &ra[1].1, true).status, 200);
    // A's invocation record names A's episode; B still cannot read it.
    assert_ne!(ra[0], rb[0]);
    assert_eq!(object(&d, Some(&b), &ra[0].1, false).status, 404);
}

/// The guess oracle: objects are deduplicated by content, first writer wins. Mallory sends, as
/// the arguments of a call, the exact plan it guesses the victim's read of `notes.txt` made
/// (plans are deterministic). Its call is refused, but it may now read those bytes, and their
/// stored kind (`world/effect-plan/v1`, not the `world/invocation-input/v1` it sent) would
/// confirm the guess. It reads and lists them as exactly what it stored; the victim and the
/// operator still read the victim's plan. The other way round, the victim whose plan bytes
/// Mallory stored first reads them as its plan, not as somebody's input.
#[test]
fn an_agent_cannot_confirm_a_guess_of_another_episodes_bytes_by_the_kind_they_were_first_stored_as()
{
    let d = Daemon::start(WS, &[]);
    let victim = d.session("victim", &["Workspace.Read=worktree:5"]);
    let mallory = d.session("mallory", &["Workspace.Read=worktree:5"]);
    let operator = d.operator_session("ops", &[]);
    std::fs::write(d.root().join("victim/notes.txt"), "password=hunter2\n").unwrap();
    let at = a2a(
        &d,
        &victim,
        "read",
        "ailang-read",
        json!({"path": "notes.txt"}),
    )["result"]["metadata"]["entry_index"]
        .as_u64()
        .unwrap();
    let plan_ref = call_refs(&d, &operator, at)[3].1.clone();
    let plan = payload_json(&object(&d, Some(&operator), &plan_ref, true));
    assert_eq!(plan["plan"], "world/effect-plan/v1", "{plan}");

    // Mallory's own input, made the ordinary way: what its guess must look like.
    let mine = a2a(
        &d,
        &mallory,
        "own",
        "ailang-read",
        json!({"path": "mine.txt"}),
    )["result"]["metadata"]["entry_index"]
        .as_u64()
        .unwrap();
    let own_input = object(
        &d,
        Some(&mallory),
        &call_refs(&d, &operator, mine)[1].1,
        false,
    )
    .json();
    a2a(&d, &mallory, "guess", "ailang-read", plan.clone());
    let guessed = object(&d, Some(&mallory), &plan_ref, true);
    assert_eq!(guessed.status, 200, "{}", guessed.text());
    let guessed_json = guessed.json();
    for field in ["semanticId", "provenance", "interfaceHash"] {
        assert_eq!(
            guessed_json[field], own_input[field],
            "{field}: Mallory reads the bytes it sent as its own input: {guessed_json}"
        );
    }
    assert_eq!(payload_json(&guessed), plan);
    assert!(listed(&d, &mallory, "world/invocation-input/v1").contains(&plan_ref));
    assert!(!listed(&d, &mallory, "world/effect-plan/v1").contains(&plan_ref));
    // The victim and the operator see the plan the victim's call made.
    for token in [&victim, &operator] {
        assert_eq!(
            object(&d, Some(token), &plan_ref, false).json()["semanticId"],
            "world/effect-plan/v1"
        );
    }
    assert!(listed(&d, &victim, "world/effect-plan/v1").contains(&plan_ref));
    assert!(!listed(&d, &victim, "world/invocation-input/v1").contains(&plan_ref));

    // The other way round: bytes Mallory stored first as its input are the victim's plan.
    let d = Daemon::start(WS, &[]);
    let (victim, plan, at) = a_plan_stored_first_as_another_calls_input(&d);
    let operator = d.operator_session("ops", &[]);
    let plan_ref = call_refs(&d, &operator, at)[3].1.clone();
    assert_eq!(
        payload_json(&object(&d, Some(&victim), &plan_ref, true)),
        plan
    );
    let seen = object(&d, Some(&victim), &plan_ref, false).json();
    assert_eq!(seen["semanticId"], "world/effect-plan/v1", "{seen}");
    assert!(listed(&d, &victim, "world/effect-plan/v1").contains(&plan_ref));
}

#[test]
fn open_reads_keep_the_reference_behaviour() {
    let d = Daemon::start(WS, &["--open-reads"]);
    let a = d.session("ep-a", &["Workspace.Write=worktree:5"]);
    let v = a2a(
        &d,
        &a,
        "w",
        "ailang-write",
        json!({"path": "x.txt", "content": SECRET}),
    );
    let at = v["result"]["metadata"]["entry_index"].as_u64().unwrap();
    let output = v["result"]["metadata"]["output_ref"].as_str().unwrap();
    let anyone = object(&d, None, output, true);
    assert_eq!(anyone.status, 200);
    assert_eq!(
        log_indexes(&d, None, "from=0").0,
        (0..=at).collect::<Vec<_>>()
    );
    assert!(listed_open(&d).contains(&output.to_owned()));
    // Receipts are open too.
    assert_eq!(get(&d.url("/v1/receipts/rest:x"), None).status, 200);
}

fn listed_open(d: &Daemon) -> Vec<String> {
    get(
        &d.url("/v1/objects/by-semantic-id/world/invocation-output/v1"),
        None,
    )
    .json()["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["hash"].as_str().unwrap().to_owned())
        .collect()
}
