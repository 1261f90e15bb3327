//! Hostile clients against the real binary: forged log entries, commits without the operator's
//! credential or grant, oversized commits, and entries `why` and `doctor` must refuse to
//! verify. Each test is named for the attack it pins.

mod common;

use base64::Engine;
use common::*;
use serde_json::{json, Value};
use sha2::Digest;

const WS: &[&str] = &["worldd_workspace"];

fn sha(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)))
}

fn canon(v: &Value) -> Vec<u8> {
    broker_core::canon::to_vec(v).unwrap()
}

fn object_json(payload: &[u8], semantic_id: &str) -> Value {
    json!({"hash": sha(payload), "interfaceHash": sha(semantic_id.as_bytes()),
           "semanticId": semantic_id, "provenance": "rest:test",
           "payload": base64::engine::general_purpose::STANDARD.encode(payload)})
}

/// What a client's entry says.
struct Claim<'a> {
    written_by: &'a str,
    transition_fn: &'a str,
    interpreter: &'a str,
    /// The invocation record (`transitionRef`).
    record_ref: &'a str,
    /// The world's `stateRoot`.
    output_ref: &'a str,
}

/// A commit body on the daemon's current head: the entry `claim` describes, with `objects`
/// (payload, semantic id).
fn commit_body(d: &Daemon, token: &str, claim: &Claim<'_>, objects: &[(Vec<u8>, &str)]) -> Value {
    let Claim {
        written_by,
        transition_fn,
        interpreter,
        record_ref,
        output_ref,
    } = *claim;
    let head = get(&d.url("/v1/head"), Some(token)).text();
    let world0 = get(&d.url(&format!("/v1/worlds/{head}")), Some(token)).json();
    let index = world0["revision"].as_u64().unwrap() + 1;
    let fields = json!({
        "entryIndex": index, "semanticsEpoch": 1, "transitionFn": transition_fn,
        "interpreter": interpreter, "prevEntryHash": world0["logHead"], "writtenBy": written_by,
        "transitionRef": record_ref,
    });
    let entry_hash = sha(&canon(&fields));
    let world = json!({"revision": index, "stateRoot": output_ref, "logHead": entry_hash});
    let mut header = fields.clone();
    header.as_object_mut().unwrap().remove("transitionRef");
    json!({
        "observedHead": head,
        "objects": objects.iter().map(|(p, s)| object_json(p, s)).collect::<Vec<_>>(),
        "nextWorld": {"ref": sha(&canon(&world)), "revision": index, "stateRoot": output_ref,
                      "logHead": entry_hash},
        "entry": {"header": header, "entryHash": entry_hash, "transitionRef": record_ref},
    })
}

/// An opaque client commit (a note), valid on the current head.
fn note_commit(d: &Daemon, token: &str, tag: &str) -> Value {
    note_commit_as(d, token, tag, "world/note/v1")
}

/// [`note_commit`] with the note's object under `semantic_id`.
fn note_commit_as(d: &Daemon, token: &str, tag: &str, semantic_id: &str) -> Value {
    let out = format!(r#"{{"note":"{tag}"}}"#).into_bytes();
    let rec = format!(r#"{{"record":"{tag}"}}"#).into_bytes();
    commit_body(
        d,
        token,
        &Claim {
            written_by: "rest:ops",
            transition_fn: &sha(b"fn"),
            interpreter: &sha(b"interp"),
            record_ref: &sha(&rec),
            output_ref: &sha(&out),
        },
        &[
            (out.clone(), semantic_id),
            (rec.clone(), "world/note-record/v1"),
        ],
    )
}

fn commit(d: &Daemon, token: &str, body: &Value) -> Answer {
    post_json(&d.url("/v1/commit"), Some(token), body)
}

fn error_of(a: &Answer) -> (u16, Value) {
    (a.status, a.json())
}

/// A genuine call, and its log entry and invocation record.
fn genuine_read(d: &Daemon, token: &str, task: &str) -> (Value, Value, Value) {
    std::fs::write(d.root().join("ep1/a.txt"), "alpha").unwrap();
    let v = a2a(d, token, task, "ailang-read", json!({"path": "a.txt"}));
    let index = v["result"]["metadata"]["entry_index"].as_u64().unwrap();
    let entry = get(&d.url(&format!("/v1/log/{index}")), Some(token)).json();
    let record = payload(d, token, entry["transitionRef"].as_str().unwrap());
    (v, entry, record)
}

fn payload(d: &Daemon, token: &str, reference: &str) -> Value {
    let o = get(
        &d.url(&format!("/v1/objects/{reference}?payload=true")),
        Some(token),
    )
    .json();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(o["payload"].as_str().unwrap())
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

fn metric(d: &Daemon, line_prefix: &str) -> Option<String> {
    let text = get(&d.url("/v1/metrics"), None).text();
    text.lines()
        .find(|l| l.starts_with(line_prefix))
        .map(str::to_owned)
}

// -------------------------------------------------------------------------------------------
// POST /v1/commit is an operator's act.

#[test]
fn forged_coordinator_entry_is_refused_at_commit() {
    let d = Daemon::start(WS, &[]);
    let agent = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let ops = d.operator_session("ops", &["World.Commit=log:5"]);
    let (v, entry, record) = genuine_read(&d, &agent, "r1");
    let head = get(&d.url("/v1/head"), Some(&ops)).text();

    // The attack of issue 11: relabelled as the coordinator, with an invented invocation of
    // another episode, reusing the real plan, effect and output refs.
    let mut invented = record.clone();
    invented["invocationId"] = json!("mcp:ep1:never-happened");
    let invented_bytes = canon(&invented);
    let output = v["result"]["artifacts"][0]["parts"][0]["data"].clone();
    let output_ref = sha(&canon(&output));
    for writer in ["coordinator:mcp", "coordinator:a2a"] {
        let claim = Claim {
            written_by: writer,
            transition_fn: entry["header"]["transitionFn"].as_str().unwrap(),
            interpreter: entry["header"]["interpreter"].as_str().unwrap(),
            record_ref: &sha(&invented_bytes),
            output_ref: &output_ref,
        };
        let body = commit_body(
            &d,
            &ops,
            &claim,
            &[(invented_bytes.clone(), "world/invocation-record/v2")],
        );
        let (status, e) = error_of(&commit(&d, &ops, &body));
        assert_eq!(
            (status, e),
            (
                400,
                json!({"error": {"class": "BadRequest", "message": format!(
                    "invalid commit: writtenBy {writer:?} is reserved: coordinator:* and world:* entries are written only by the daemon itself")}})
            )
        );
    }
    // The same invented record under a client's label: the record itself is the claim.
    let claim = Claim {
        written_by: "rest:mallory",
        transition_fn: entry["header"]["transitionFn"].as_str().unwrap(),
        interpreter: entry["header"]["interpreter"].as_str().unwrap(),
        record_ref: &sha(&invented_bytes),
        output_ref: &output_ref,
    };
    let body = commit_body(
        &d,
        &ops,
        &claim,
        &[(invented_bytes.clone(), "world/invocation-record/v2")],
    );
    let (status, e) = error_of(&commit(&d, &ops, &body));
    assert_eq!(status, 400);
    assert_eq!(
        e["error"]["message"],
        "invalid commit: transitionRef is an invocation record of the coordinator (mcp:ep1:never-happened); only the coordinator commits those"
    );
    // Nothing landed, nothing was spent, every refusal was counted.
    assert_eq!(get(&d.url("/v1/head"), Some(&ops)).text(), head);
    let budget = get(&d.url("/v1/budget"), Some(&ops)).json();
    assert_eq!(budget["grants"][0]["spent"], 0, "{budget}");
    assert_eq!(
        metric(&d, "worldd_commits_total{result=\"reserved\"}").as_deref(),
        Some("worldd_commits_total{result=\"reserved\"} 3")
    );
}

#[test]
fn a_session_without_the_commit_grant_gets_403() {
    let d = Daemon::start(WS, &[]);
    let agent = d.session("ep1", &["Workspace.Read=worktree:5"]);
    // An agent credential holding the commit grant is still not an operator.
    let agent_with_grant = d.session("ep2", &["World.Commit=log:5"]);
    let operator_without = d.operator_session("ops", &["Workspace.Read=worktree:5"]);
    let operator = d.operator_session("ops2", &["World.Commit=log:1"]);
    let head = get(&d.url("/v1/head"), Some(&agent)).text();
    let not_operator = json!({"error": {"class": "Forbidden", "message":
        "POST /v1/commit is an operator's act: this session credential is not an operator credential (mint one with worldd session mint --operator)"}});
    for token in [&agent, &agent_with_grant] {
        let a = commit(&d, token, &note_commit(&d, token, "x"));
        assert_eq!(error_of(&a), (403, not_operator.clone()));
    }
    let a = commit(
        &d,
        &operator_without,
        &note_commit(&d, &operator_without, "x"),
    );
    assert_eq!(
        error_of(&a),
        (
            403,
            json!({"error": {"class": "Forbidden", "message":
                "denied:effect-name: POST /v1/commit needs a World.Commit=log:N grant; this operator credential has none"}})
        )
    );
    // The rules come before the body: a malformed body is not even read.
    let a = request(
        "POST",
        &d.url("/v1/commit"),
        Some(&agent),
        &[("Content-Type", "application/json")],
        Some(b"{not json"),
    );
    assert_eq!(a.status, 403);
    assert_eq!(get(&d.url("/v1/head"), Some(&agent)).text(), head);

    // With the grant: one commit per unit, and the unit stays spent across a restart.
    let a = commit(&d, &operator, &note_commit(&d, &operator, "one"));
    assert_eq!(a.status, 200, "{}", a.text());
    let spent_out = json!({"error": {"class": "Forbidden", "message":
        "denied:budget: the World.Commit=log grant has 0 commit(s) left"}});
    let a = commit(&d, &operator, &note_commit(&d, &operator, "two"));
    assert_eq!(error_of(&a), (403, spent_out.clone()));
    assert_eq!(
        metric(&d, "worldd_commits_total{result=\"accepted\"}").as_deref(),
        Some("worldd_commits_total{result=\"accepted\"} 1")
    );
    for (result, n) in [("not_operator", 3), ("no_grant", 1), ("budget", 1)] {
        let line = format!("worldd_commits_total{{result=\"{result}\"}} {n}");
        assert_eq!(metric(&d, &line).as_deref(), Some(line.as_str()));
    }
    let d = d.restart(WS, &[]);
    let a = commit(&d, &operator, &note_commit(&d, &operator, "two"));
    assert_eq!(error_of(&a), (403, spent_out));
}

#[test]
fn an_oversized_commit_is_refused_before_it_spends() {
    // A size with a unit, as an operator writes it.
    let d = Daemon::start(WS, &["--commit-body-bytes", "4KiB"]);
    let operator = d.operator_session("ops", &["World.Commit=log:1"]);
    let big = "x".repeat(4096);
    let a = commit(&d, &operator, &note_commit(&d, &operator, &big));
    assert_eq!(
        error_of(&a),
        (
            413,
            json!({"error": {"class": "PayloadTooLarge", "message": "commit body exceeds 4096 bytes"}})
        )
    );
    // The one unit is still there for a commit within the limit.
    let a = commit(&d, &operator, &note_commit(&d, &operator, "small"));
    assert_eq!(a.status, 200, "{}", a.text());
    assert_eq!(
        metric(&d, "worldd_commits_total{result=\"too_large\"}").as_deref(),
        Some("worldd_commits_total{result=\"too_large\"} 1")
    );

    // The limit is the operator's, within the reference's 8 MiB.
    let dir = tempfile::tempdir().unwrap();
    let (code, out, err) = worldd(
        &[
            "serve",
            "--db",
            path_str(&dir.path().join("db")),
            "--workspace-root",
            path_str(&dir.path().join("wt")),
            "--bind",
            "127.0.0.1:0",
            "--commit-body-bytes",
            "8388609",
        ],
        None,
    );
    assert_eq!((code, out.as_str()), (2, ""), "{err}");
    assert!(
        err.contains(
            "worldd: daemon startup failed at config: --commit-body-bytes 8388609 is out of range (1 to 8388608)"
        ),
        "{err}"
    );
}

// -------------------------------------------------------------------------------------------
// `why` and `doctor` check what only the coordinator writes, and replay plans.

#[test]
fn hand_made_client_entry_whose_plan_does_not_match_its_input_fails_why_and_doctor() {
    let d = Daemon::start(WS, &[]);
    let agent = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let ops = d.operator_session("ops", &["World.Commit=log:5"]);
    let (_, entry, _) = genuine_read(&d, &agent, "r1");
    // A refused call leaves a genuine refusal plan in the store.
    let refused = a2a(&d, &agent, "r2", "ailang-read", json!({"nope": 1}));
    let plan_ref = refused["result"]["artifacts"][0]["parts"][0]["data"]["world"]["plan"]
        .as_str()
        .unwrap()
        .to_owned();

    // By hand: an input that reads secret.txt, and that refusal as its "plan".
    let input = canon(&json!({"path": "secret.txt"}));
    let output = canon(&json!({"ok": false, "refused": "nothing to see",
                               "world": {"effects": [], "plan": plan_ref}}));
    let transition_fn = entry["header"]["transitionFn"].as_str().unwrap();
    let interpreter = entry["header"]["interpreter"].as_str().unwrap();
    let record = canon(&json!({
        "invocationId": "rest:by-hand", "episodeId": "ops", "skillId": "ailang-read",
        "transitionFn": transition_fn, "interpreter": interpreter, "semanticsEpoch": 1,
        "input": sha(&input), "output": sha(&output), "plan": plan_ref, "effects": []}));
    let claim = Claim {
        written_by: "rest:ops",
        transition_fn,
        interpreter,
        record_ref: &sha(&record),
        output_ref: &sha(&output),
    };
    let body = commit_body(
        &d,
        &ops,
        &claim,
        &[
            (input, "world/invocation-input/v1"),
            (output, "world/invocation-output/v1"),
            (record.clone(), "world/invocation-record/v2"),
        ],
    );
    let a = commit(&d, &ops, &body);
    assert_eq!(a.status, 200, "{}", a.text());
    let index = body["entry"]["header"]["entryIndex"].as_u64().unwrap();

    let db = d.db();
    let (code, out, err) = worldd(&["why", "--db", path_str(&db), &index.to_string()], None);
    assert_eq!(code, 3, "{out}{err}");
    assert!(
        out.contains(&format!(
            "\n  ✓ record  {}…  client commit by rest:ops: world/invocation-record/v2 invocation rest:by-hand",
            &sha(&record)[..15]
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "\n  ✗ replay  {}…  the stored plan is not what ailang-read plans for this input (recomputed sha256:",
            &plan_ref[..15]
        )),
        "{out}"
    );
    assert_eq!(out.matches('✗').count(), 1, "{out}");
    assert!(err.contains("why: 1 of 7 link(s) broken"), "{err}");
    let (code, out, err) = worldd(&["doctor", "--db", path_str(&db)], None);
    assert_eq!(code, 3, "{out}{err}");
    assert!(out.contains(", 1 broken ("), "{out}");
    assert!(
        out.contains(&format!(
            "      entry {index}: replay: the stored plan is not what ailang-read plans"
        )),
        "{out}"
    );
}

#[test]
fn why_of_a_genuine_output_that_a_forged_entry_duplicates_lists_both_and_flags_the_forged_one() {
    let d = Daemon::start(WS, &[]);
    let agent = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let (v, entry, record) = genuine_read(&d, &agent, "r1");
    let genuine_at = entry["header"]["entryIndex"].as_u64().unwrap();
    let output = v["result"]["artifacts"][0]["parts"][0]["data"].clone();
    let output_ref = sha(&canon(&output));

    // What an earlier build let any session commit: the coordinator's label, an invented
    // invocation, the real plan, effect and output. Written into the store directly.
    let kept = d.halt();
    let db = kept.path().join("db");
    let forged_at = forge_coordinator_entry(&db, &entry, &record, &output_ref);

    let (code, out, err) = worldd(&["why", "--db", path_str(&db), &output_ref], None);
    assert_eq!(code, 3, "{out}{err}");
    assert!(
        out.starts_with("why: 2 entries carry this handle; each is verified on its own\n"),
        "{out}"
    );
    let genuine = format!("why: entry {genuine_at} (matched by output)\n");
    let forged = format!("why: entry {forged_at} (matched by output)\n");
    let (g, f) = (out.find(&genuine).unwrap(), out.find(&forged).unwrap());
    assert!(g < f, "{out}");
    assert!(out[g..f].ends_with("all 10 link(s) verified\n"), "{out}");
    assert!(
        out[f..].contains("\n  ✗ journal -  no task state for a2a:ep1:never-happened: the coordinator never committed this invocation\n"),
        "{out}"
    );
    assert!(
        out.ends_with(&format!(
            "✗ entry {forged_at}: 1 of 10 link(s) broken: it is not what it claims\n"
        )),
        "{out}"
    );
    assert!(
        err.contains(&format!(
            "why: 1 of 2 entries carrying this handle do not verify (entry {forged_at}): do not trust them"
        )),
        "{err}"
    );
    // --json: both, each with its verdict.
    let (code, out, _) = worldd(&["why", "--db", path_str(&db), "--json", &output_ref], None);
    assert_eq!(code, 3);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["matches"].clone(), v["verified"].clone()),
        (json!(2), json!(false))
    );
    assert_eq!(v["entries"][0]["verified"], true);
    assert_eq!(v["entries"][1]["entryIndex"], forged_at);
    assert_eq!(v["entries"][1]["verified"], false);

    let (code, out, err) = worldd(&["doctor", "--db", path_str(&db)], None);
    assert_eq!(code, 3, "{out}{err}");
    assert!(
        out.contains(&format!(
            "      entry {forged_at}: journal: no task state for a2a:ep1:never-happened"
        )),
        "{out}"
    );
}

#[test]
fn a_tampered_plan_or_journal_row_makes_why_and_doctor_exit_3() {
    use broker_core::store::{RawTable, Store};
    let d = Daemon::start(WS, &[]);
    let agent = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let (_, entry, record) = genuine_read(&d, &agent, "r1");
    let index = entry["header"]["entryIndex"].as_u64().unwrap().to_string();
    let kept = d.halt();
    let db = kept.path().join("db");
    let run = |verb: &str| {
        let mut args = vec![verb, "--db", path_str(&db)];
        if verb == "why" {
            args.push(&index);
        }
        worldd(&args, None)
    };
    assert_eq!(run("why").0, 0);
    assert_eq!(run("doctor").0, 0);

    // One byte of the stored plan.
    let plan: broker_core::object::Ref = record["plan"].as_str().unwrap().parse().unwrap();
    let original = {
        let store = Store::open(&db, Default::default()).unwrap();
        let original = store
            .raw_get(RawTable::Objects, plan.as_bytes())
            .unwrap()
            .unwrap();
        let mut bytes = original.clone();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        store
            .raw_overwrite(RawTable::Objects, plan.as_bytes().to_vec(), bytes)
            .unwrap();
        original
    };
    let (code, out, err) = run("why");
    assert_eq!(code, 3, "{out}{err}");
    assert!(out.contains("\n  ✗ plan    "), "{out}");
    // The ref the record names is still what the interpreter computes; the bytes are not it.
    assert!(out.contains("\n  ✓ replay  "), "{out}");
    assert_eq!(out.matches('✗').count(), 1, "{out}");
    let (code, out, _) = run("doctor");
    assert_eq!(code, 3, "{out}");
    assert!(
        out.contains(&format!("      entry {index}: plan: stored bytes hash to")),
        "{out}"
    );

    // The journal's intent row of the call, its cost rewritten (still valid JSON).
    {
        let store = Store::open(&db, Default::default()).unwrap();
        store
            .raw_overwrite(RawTable::Objects, plan.as_bytes().to_vec(), original)
            .unwrap();
        let key = 1u64.to_be_bytes().to_vec();
        let mut row: Value =
            serde_json::from_slice(&store.raw_get(RawTable::Journal, &key).unwrap().unwrap())
                .unwrap();
        assert_eq!(row["invocationId"], "a2a:ep1:r1");
        row["cost"] = json!(0);
        store
            .raw_overwrite(RawTable::Journal, key, canon(&row))
            .unwrap();
    }
    let (code, out, err) = run("why");
    assert_eq!(code, 3, "{out}{err}");
    assert!(
        out.contains("\n  ✗ journal -  journal of a2a:ep1:r1: journal is damaged: journal row #1 is not the intent the index records for a2a:ep1:r1\n"),
        "{out}"
    );
    let (code, out, _) = run("doctor");
    assert_eq!(code, 3, "{out}");
    assert!(
        out.contains("spend counters DISAGREE with the journal"),
        "{out}"
    );
    assert!(
        out.contains(&format!("      entry {index}: journal: ")),
        "{out}"
    );
}

#[test]
fn an_mcp_call_is_written_by_coordinator_a2a() {
    let d = Daemon::start(WS, &[]);
    let agent = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let a = mcp(
        &d,
        &agent,
        "tools/call",
        json!({"name": "ailang-read", "arguments": {"nope": 1}}),
    );
    assert_eq!(a.status, 200, "{}", a.text());
    let head = get(&d.url("/v1/head"), Some(&agent)).text();
    let world = get(&d.url(&format!("/v1/worlds/{head}")), Some(&agent)).json();
    let entry = get(
        &d.url(&format!("/v1/log/{}", world["revision"])),
        Some(&agent),
    )
    .json();
    assert_eq!(entry["header"]["writtenBy"], "coordinator:a2a");
    let record = payload(&d, &agent, entry["transitionRef"].as_str().unwrap());
    assert!(
        record["invocationId"]
            .as_str()
            .unwrap()
            .starts_with("mcp:ep1:"),
        "{record}"
    );
}

// -------------------------------------------------------------------------------------------
// The plugin named in provenance is the code that was loaded.

#[cfg(target_os = "linux")]
#[test]
fn a_library_replaced_after_it_was_hashed_is_not_what_loads() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("libworldd_plugin.so");
    let workspace = plugin_library("worldd_workspace");
    std::fs::copy(&workspace, &path).unwrap();
    let opened = worldd::plugins::OpenedLibrary::open(&path).unwrap();
    assert_eq!(
        opened.file_ref().to_string(),
        sha(&std::fs::read(&workspace).unwrap())
    );
    // Between the hash and the load, another plugin takes the path.
    let swap = dir.path().join("swap.so");
    std::fs::copy(plugin_library("worldd_registry"), &swap).unwrap();
    std::fs::rename(&swap, &path).unwrap();
    let (file_ref, plugin) = opened.load().unwrap();
    assert_eq!(
        file_ref.to_string(),
        sha(&std::fs::read(&workspace).unwrap())
    );
    assert_eq!(plugin.manifest().unwrap().name, "workspace");
}

/// `cp` over an installed library writes the same inode in place. The loader maps a library
/// privately, and a private mapping shows later writes to its file wherever the process has not
/// written the page itself: a library rewritten between its hash and its load became another
/// build's code under the old hash.
#[cfg(target_os = "linux")]
#[test]
fn a_library_rewritten_in_place_after_it_was_hashed_is_not_what_loads() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("libworldd_plugin.so");
    let workspace = std::fs::read(plugin_library("worldd_workspace")).unwrap();
    std::fs::write(&path, &workspace).unwrap();
    let inode = std::fs::metadata(&path).unwrap().ino();
    let opened = worldd::plugins::OpenedLibrary::open(&path).unwrap();
    // Between the hash and the load, another plugin's bytes are written into the same file.
    std::fs::write(
        &path,
        std::fs::read(plugin_library("worldd_registry")).unwrap(),
    )
    .unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().ino(), inode);
    let (file_ref, plugin) = opened.load().unwrap();
    assert_eq!(file_ref.to_string(), sha(&workspace));
    assert_eq!(plugin.manifest().unwrap().name, "workspace");
}

/// The same, while the daemon runs: a plugin copied over with `cp` (another build's bytes in
/// the same inode) killed the daemon with a general protection fault at its next call. The
/// daemon runs the sealed copy it loaded, and its records name that copy's hash.
#[cfg(target_os = "linux")]
#[test]
fn a_plugin_rewritten_in_place_while_the_daemon_runs_changes_nothing_it_runs() {
    use std::os::unix::fs::MetadataExt;
    let d = Daemon::start(&["worldd_workspace"], &[]);
    let token = d.session(
        "ep1",
        &["Workspace.Read=worktree:5", "Workspace.Write=worktree:5"],
    );
    let lib = d.plugin_dir().join("libworldd_workspace.so");
    let loaded = sha(&std::fs::read(&lib).unwrap());
    let before = a2a(
        &d,
        &token,
        "w1",
        "ailang-write",
        json!({"path": "a.txt", "content": "alpha"}),
    );
    assert_eq!(before["result"]["status"]["state"], "completed", "{before}");

    let inode = std::fs::metadata(&lib).unwrap().ino();
    std::fs::write(
        &lib,
        std::fs::read(plugin_library("worldd_registry")).unwrap(),
    )
    .unwrap();
    assert_eq!(std::fs::metadata(&lib).unwrap().ino(), inode);

    let (v, _, record) = genuine_read(&d, &token, "r1");
    assert_eq!(v["result"]["status"]["state"], "completed", "{v}");
    let effect = payload(&d, &token, record["effects"][0].as_str().unwrap());
    assert_eq!(
        effect["handler"],
        json!({"plugin": "workspace", "version": env!("CARGO_PKG_VERSION"), "library": loaded})
    );
    // What the daemon maps is its sealed copy, not the file in the plugin directory.
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", d.child.id())).unwrap();
    assert!(
        maps.contains("/memfd:worldd-plugin:libworldd_workspace.so"),
        "{maps}"
    );
    assert!(!maps.contains(lib.to_str().unwrap()), "{maps}");
}

/// Loading copies a library into memory first (the two tests above), so a file in the plugin
/// directory far larger than any plugin would have cost its size in memory before the loader
/// could refuse it. It is refused from its size, and nothing is read.
#[test]
fn a_file_too_large_to_be_a_plugin_is_refused_before_it_is_copied() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = plugin_dir_with(dir.path(), &["worldd_workspace"]);
    let big = plugins.join("libbig.so");
    // Sparse: it takes no room on the disk.
    let file = std::fs::File::create(&big).unwrap();
    file.set_len(worldd::plugin_image::MAX_LIBRARY_BYTES + 1)
        .unwrap();
    let (code, out, err) = worldd(&["handlers", "--plugin-dir", path_str(&plugins)], None);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!(
            "not a worldd plugin: the file is {} bytes, more than the {} a plugin library may be",
            worldd::plugin_image::MAX_LIBRARY_BYTES + 1,
            worldd::plugin_image::MAX_LIBRARY_BYTES
        )),
        "{out}"
    );
    assert!(out.contains("workspace 0.1.0"), "{out}");
}

/// `worldd serve` on `db` with the plugins of `plugins` and `extra` flags, run until it exits
/// (these tests expect it to refuse to start).
fn serve_once(
    db: &std::path::Path,
    plugins: &std::path::Path,
    extra: &[&str],
) -> (i32, String, String) {
    // A workspace root beside the store, not the default one under the test's directory,
    // whatever another run left there.
    let root = db.with_file_name("worktrees");
    let mut args = vec![
        "serve",
        "--db",
        path_str(db),
        "--workspace-root",
        path_str(&root),
        "--bind",
        "127.0.0.1:0",
        "--plugin-dir",
        path_str(plugins),
    ];
    args.extend_from_slice(extra);
    worldd(&args, None)
}

#[test]
fn a_plugin_library_another_user_could_write_is_refused_at_start() {
    // Loading a library runs its code inside the daemon, beside the store and every
    // credential: one that another user could have written is not loaded.
    use std::os::unix::fs::{chown, PermissionsExt};
    let dir = tempfile::tempdir().unwrap();
    let plugins = plugin_dir_with(dir.path(), &["worldd_workspace"]);
    let lib = plugins.join("libworldd_workspace.so");
    let db = dir.path().join("db");
    let serve = || serve_once(&db, &plugins, &[]);
    let mode = |path: &std::path::Path, mode: u32| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap()
    };
    mode(&lib, 0o666);
    let (code, _, err) = serve();
    assert_eq!(code, 2, "{err}");
    assert_eq!(
        err.lines().last().unwrap_or_default(),
        format!("worldd: daemon startup failed at plugins: plugin {}: refusing to load a library every user may write (mode 0666); `chmod o-w` it", lib.display())
    );
    let (_, out, _) = worldd(&["handlers", "--plugin-dir", path_str(&plugins)], None);
    assert!(
        out.contains("not loadable: refusing to load a library every user may write (mode 0666)"),
        "{out}"
    );
    mode(&lib, 0o755);
    // A directory anyone may write to, where anyone could swap the library.
    mode(&plugins, 0o777);
    let (code, _, err) = serve();
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!("plugin {}: refusing a plugin directory every user may write, without the sticky bit (mode 0777)", plugins.display())),
        "{err}"
    );
    // Sticky, as /tmp is: others cannot swap this library, and one they plant is theirs.
    mode(&plugins, 0o1777);
    let (_, out, _) = worldd(&["handlers", "--plugin-dir", path_str(&plugins)], None);
    assert!(
        out.contains("1 plugin(s), 0 library(ies) not loadable"),
        "{out}"
    );
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        chown(&lib, Some(4242), None).unwrap();
        let (code, _, err) = serve();
        assert_eq!(code, 2, "{err}");
        assert!(
            err.contains("refusing to load a library owned by uid 4242, neither this process's user (uid 0) nor root"),
            "{err}"
        );
    }
}

/// Loading a plugin runs its code: one whose constructor hangs stops the start at
/// `plugin_start_ms`, named, instead of leaving a daemon that never answers and never says why.
#[test]
fn a_plugin_that_hangs_while_the_daemon_starts_stops_the_start_at_its_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = plugin_dir_with(dir.path(), &["worldd_workspace", "worldd_stall"]);
    let lib = plugins.join("libworldd_stall.so");
    let config = dir.path().join("world.toml");
    let db = dir.path().join("db");
    std::fs::write(
        &config,
        "[limits]\nplugin_start_ms = 300\n\n[plugins.stall]\nstartMs = 600000\n",
    )
    .unwrap();
    let began = std::time::Instant::now();
    let (code, _, err) = serve_once(&db, &plugins, &["--config", path_str(&config)]);
    let took = began.elapsed();
    assert_eq!(code, 2, "{err}");
    assert_eq!(
        err.lines().last().unwrap_or_default(),
        format!("worldd: daemon startup failed at plugins: plugin {}: still starting after 300 ms ([limits] plugin_start_ms); the daemon does not start beside a plugin that hangs", lib.display())
    );
    assert!(took < std::time::Duration::from_secs(30), "took {took:?}");
    // A constructor that takes less than the deadline starts as before.
    std::fs::write(
        &config,
        "[limits]\nplugin_start_ms = 5000\n\n[plugins.stall]\nstartMs = 100\n",
    )
    .unwrap();
    let d = Daemon::start(
        &["worldd_workspace", "worldd_stall"],
        &["--config", path_str(&config)],
    );
    let token = d.session("ep", &["Stall.Wait=any:1"]);
    let a = mcp(
        &d,
        &token,
        "tools/call",
        json!({"name": "stall-wait", "arguments": {"ms": "0"}}),
    );
    assert_eq!(a.status, 200, "{}", a.text());
    assert_eq!(a.sse_json()["result"]["structuredContent"]["slept_ms"], 0);
}

/// Whether `text` holds a character a terminal acts on, line breaks and tabs apart.
fn acted_on_by_a_terminal(text: &str) -> Vec<char> {
    text.chars()
        .filter(|c| *c != '\n' && *c != '\t' && broker_core::plain_text::acted_on(*c))
        .collect()
}

/// A daemon that answers one request with `body` (JSON, 200) and closes.
fn lying_daemon(body: Value) -> String {
    lying_daemon_with("200 OK", body)
}

/// A daemon that answers one request with `status` and `body` (JSON) and closes.
fn lying_daemon_with(status: &'static str, body: Value) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        let (mut s, _) = listener.accept().unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") && s.read(&mut byte).unwrap_or(0) == 1 {
            head.push(byte[0]);
        }
        let body = body.to_string();
        let _ = write!(
            s,
            "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
    });
    addr
}

/// Text written by someone else reaches the operator's terminal shown, never acted on: a
/// client commit cannot put an escape sequence or a line break in `writtenBy` or an object's
/// semantic id (which `log tail` and `why` print); what an agent's arguments hold is escaped
/// in `why`; and a daemon that serves such text anyway (a store from before the check, or a
/// daemon that lies) gets it escaped, each entry on its own line.
#[test]
fn text_from_commits_calls_and_a_lying_daemon_reaches_the_operators_terminal_escaped() {
    let d = Daemon::start(WS, &[]);
    let ops = d.operator_session("ops", &["World.Commit=log:5"]);
    let before = get(&d.url("/v1/head"), Some(&ops)).text();
    let hostile = "rest:ops\u{1b}]0;pwned\u{7}\n    27  ok   forged";
    let mut body = note_commit(&d, &ops, "t1");
    body["entry"]["header"]["writtenBy"] = json!(hostile);
    let (status, v) = error_of(&commit(&d, &ops, &body));
    assert_eq!(status, 400, "{v}");
    assert_eq!(
        v["error"]["message"],
        "invalid commit: writtenBy holds U+001B, which a terminal acts on instead of showing (operators read it in worldd log tail and worldd why); write it as plain text"
    );
    let body = note_commit_as(&d, &ops, "t2", "world/note/v1\u{202e}");
    let (status, v) = error_of(&commit(&d, &ops, &body));
    assert_eq!(status, 400, "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("invalid commit: the semanticId of object sha256:")
            && message.contains(" holds U+202E, which a terminal acts on"),
        "{message}"
    );
    assert_eq!(get(&d.url("/v1/head"), Some(&ops)).text(), before);

    // An agent's arguments, in `why`'s excerpt of the call's input.
    let agent = d.session("ep1", &["Workspace.Write=worktree:5"]);
    let v = a2a(
        &d,
        &agent,
        "w1",
        "ailang-write",
        json!({"path": "x.txt", "content": "a\u{9b}2J\u{202e}b\u{1b}[2Jc"}),
    );
    let index = v["result"]["metadata"]["entry_index"].as_u64().unwrap();
    let (code, out, err) = worldd(
        &["why", "--db", path_str(&d.db()), &index.to_string()],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(acted_on_by_a_terminal(&out), Vec::<char>::new(), "{out}");
    assert!(out.contains("a\\u009b2J\\u202eb\\u001b[2Jc"), "{out}");

    // A daemon that serves such text anyway.
    let session = d.session_file("ops", &ops);
    let addr = lying_daemon(json!({"items": [{
        "header": {"entryIndex": 26, "writtenBy": hostile},
        "entryHash": "sha256:00", "outcome": "-"}], "next": 27}));
    let (code, out, err) = worldd(
        &[
            "log",
            "tail",
            "--addr",
            &addr,
            "--session",
            path_str(&session),
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 1, "{out}");
    assert_eq!(acted_on_by_a_terminal(&out), Vec::<char>::new(), "{out}");
    assert!(
        out.contains("commit by rest:ops\\u001b]0;pwned\\u0007\\n    27  ok   forged"),
        "{out}"
    );
}

/// A client commit belongs to no episode, and what an operator commits is the operators' to
/// read: an agent's log listing leaves it out (the genesis stays in), an operator's has it.
#[test]
fn an_operators_commit_is_listed_to_operators_and_not_to_agents() {
    let d = Daemon::start(WS, &[]);
    let ops = d.operator_session("ops", &["World.Commit=log:5"]);
    let agent = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let (status, v) = error_of(&commit(&d, &ops, &note_commit(&d, &ops, "listed")));
    assert_eq!(status, 200, "{v}");
    let indexes = |token: &str| -> Vec<u64> {
        get(&d.url("/v1/log?from=0"), Some(token)).json()["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["header"]["entryIndex"].as_u64().unwrap())
            .collect()
    };
    assert_eq!(indexes(&ops), [0, 1]);
    assert_eq!(indexes(&agent), [0]);
}

/// An operator's commit whose record (`transitionRef`) was one of an agent's own objects (the
/// input of its call) was listed to that agent, on `/v1/log`, the summaries and the stream,
/// because the agent may read those bytes: what an operator commits is the operators' to read,
/// and a commit is listed to an agent only when its record is of a public kind.
#[test]
fn an_operators_commit_naming_an_agents_own_object_is_not_listed_to_the_agent() {
    let d = Daemon::start(WS, &[]);
    let ops = d.operator_session("ops", &["World.Commit=log:5"]);
    let agent = d.session("ep1", &["Workspace.Read=worktree:5"]);
    std::fs::write(d.root().join("ep1/a.txt"), "alpha").unwrap();
    let v = a2a(&d, &agent, "t1", "ailang-read", json!({"path": "a.txt"}));
    let call = v["result"]["metadata"]["entry_index"].as_u64().unwrap();
    let inputs = get(
        &d.url("/v1/objects/by-semantic-id/world/invocation-input/v1"),
        Some(&agent),
    )
    .json();
    let own = inputs["items"][0]["hash"].as_str().unwrap().to_owned();
    let body = commit_body(
        &d,
        &ops,
        &Claim {
            written_by: "rest:ops",
            transition_fn: &sha(b"fn"),
            interpreter: &sha(b"interp"),
            record_ref: &own,
            output_ref: &own,
        },
        &[],
    );
    let (status, v) = error_of(&commit(&d, &ops, &body));
    assert_eq!(status, 200, "{v}");
    let committed = call + 1;
    let listed = |route: &str, token: &str| -> Vec<u64> {
        get(&d.url(&format!("{route}?from=0")), Some(token)).json()["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["header"]["entryIndex"].as_u64().unwrap())
            .collect()
    };
    for route in ["/v1/log", "/v1/log/summaries"] {
        assert_eq!(listed(route, &agent), [0, call], "{route}");
        assert_eq!(listed(route, &ops), [0, call, committed], "{route}");
    }
    // The stream from the commit on: the agent's next own call comes first, not the commit.
    let v = a2a(&d, &agent, "t2", "ailang-read", json!({"path": "a.txt"}));
    let next = v["result"]["metadata"]["entry_index"].as_u64().unwrap();
    let id = first_stream_id(&d, &agent, committed);
    assert!(id.starts_with(&format!("id: {next} sha256:")), "{id}");
}

/// The first `id:` line of `GET /v1/log/stream?from=N` as `token` reads it.
fn first_stream_id(d: &Daemon, token: &str, from: u64) -> String {
    use std::io::{BufRead, BufReader, Write};
    let mut conn = std::net::TcpStream::connect(&d.addr).unwrap();
    conn.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    write!(
        conn,
        "GET /v1/log/stream?from={from} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\n\r\n",
        d.addr
    )
    .unwrap();
    BufReader::new(conn)
        .lines()
        .map(Result::unwrap)
        .find(|l| l.starts_with("id: "))
        .unwrap()
}

/// An error message quoting what a daemon answered stops after 8 KiB: a daemon that answers a
/// megabyte (or endlessly) does not make the operator's terminal a line of megabytes.
#[test]
fn a_megabyte_error_message_from_a_lying_daemon_is_cut_to_8_kib() {
    let addr = lying_daemon_with(
        "404 Not Found",
        json!({"error": {"class": "NotFound", "message": "x".repeat(1 << 20)}}),
    );
    let dir = tempfile::tempdir().unwrap();
    let session = dir.path().join("s.session");
    std::fs::write(&session, format!("{}\n", "a".repeat(64))).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&session, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (code, _, err) = worldd(
        &["head", "--addr", &addr, "--session", path_str(&session)],
        None,
    );
    assert_eq!(code, 1, "{}", &err[..200.min(err.len())]);
    assert_eq!(err.lines().count(), 1);
    assert!(err.len() < 8192 + 100, "{} bytes", err.len());
    assert!(
        err.starts_with("worldd: /v1/head returned HTTP 404 NotFound: xxx"),
        "{}",
        &err[..100]
    );
    assert!(
        err.ends_with(" more bytes not shown)\n"),
        "{}",
        &err[err.len() - 100..]
    );
}

/// A daemon that took a call's request and then died (the connection closed with no answer)
/// was reported as one that could not be reached (`is worldd serve running there?`), with no
/// word that the call may have run. It is now said as the cut-off it is, with the hint a call
/// that timed out gets.
#[test]
fn a_daemon_that_hangs_up_after_taking_a_call_is_not_said_unreachable() {
    use std::io::Read;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            // Take the request, answer nothing, hang up.
            let mut buf = [0u8; 65536];
            let _ = conn.set_read_timeout(Some(std::time::Duration::from_millis(500)));
            let _ = conn.read(&mut buf);
            drop(conn);
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let session = dir.path().join("s.session");
    std::fs::write(&session, format!("{}\n", "a".repeat(64))).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&session, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (code, _, err) = worldd(
        &[
            "call",
            "ailang-write",
            "--arg",
            "path=a.txt",
            "--arg",
            "content=x",
            "--addr",
            &addr,
            "--session",
            path_str(&session),
        ],
        None,
    );
    assert_eq!(code, 1, "{err}");
    assert!(!err.contains("is `worldd serve` running there?"), "{err}");
    assert!(
        err.starts_with(&format!(
            "worldd: the daemon at {addr} closed the connection before it answered /mcp/ ("
        )),
        "{err}"
    );
    assert!(
        err.trim_end().ends_with(
            "it may have stopped or restarted — the call may still run and commit; `worldd log tail` shows what committed: check it before retrying a write"
        ),
        "{err}"
    );
}

/// The store of a daemon stopped after two reads in ep1 (`r1`, then `r2`), its log cut after
/// its last entry, `r2`'s (a bad restore, a lost end), and a daemon started on it: the daemon,
/// ep1's credential, and the index `r2`'s task state still names.
fn serving_a_log_cut_after_r2() -> (Daemon, String, u64) {
    use broker_core::store::{RawTable, Store};
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:50"]);
    std::fs::write(d.root().join("ep1/a.txt"), "alpha").unwrap();
    a2a(&d, &token, "r1", "ailang-read", json!({"path": "a.txt"}));
    let v = a2a(&d, &token, "r2", "ailang-read", json!({"path": "a.txt"}));
    let cut = v["result"]["metadata"]["entry_index"].as_u64().unwrap();
    let kept = d.halt();
    let store = Store::open(&kept.path().join("db"), Default::default()).unwrap();
    store
        .raw_overwrite(RawTable::LogRow, cut.to_be_bytes().to_vec(), Vec::new())
        .unwrap();
    drop(store);
    (Daemon::start_in(kept, WS, &[]), token, cut)
}

/// A log that lost its end: the reconcile routes answered the lost call `committed` at an
/// entry the log no longer holds and, once the log grew again, at an entry that holds another
/// call, so an agent took a call the log does not hold for landed. The entry its task state
/// names is now read and must hold that call; when it does not, the answer is `500 Damaged`
/// naming the call and the entry, and `worldd calls get` exits 3.
#[test]
fn reconciling_a_call_the_log_lost_does_not_answer_committed() {
    let (d, token, cut) = serving_a_log_cut_after_r2();
    let damaged = |a: &Answer, said: &str| {
        assert_eq!(a.status, 500, "{}", a.text());
        assert_eq!(
            a.json(),
            json!({"error": {"class": "Damaged", "message": format!(
                "call a2a:ep1:r2 is damaged: {said}; it is not answered as committed (run worldd doctor, and restore the store from a backup)"
            )}})
        );
    };
    let session = d.session_file("ep1", &token);
    let calls_get = |handle: &str| {
        let url = d.url("");
        let args = [
            "calls",
            "get",
            handle,
            "--surface",
            "a2a",
            "--addr",
            &url,
            "--session",
            path_str(&session),
        ];
        worldd(&args, None)
    };
    let lost = format!(
        "the task state of a2a:ep1:r2 says it committed at entry {cut}, which the log does not hold (its last entry is {}): the log lost its end",
        cut - 1
    );
    damaged(&get(&d.url("/v1/calls/a2a/r2"), Some(&token)), &lost);
    damaged(
        &get(&d.url("/v1/invocations/a2a:ep1:r2"), Some(&token)),
        &lost,
    );
    for handle in ["r2", "a2a:ep1:r2"] {
        let (code, out, err) = calls_get(handle);
        assert_eq!(code, 3, "calls get {handle}: {out}{err}");
        assert_eq!(out, "", "calls get {handle}");
        assert_eq!(
            err,
            format!("worldd: calls get: call a2a:ep1:r2 is damaged: {lost}; it is not answered as committed (run worldd doctor, and restore the store from a backup)\n"),
            "calls get {handle}"
        );
    }
    // The call still in the log is answered as before.
    let a = get(&d.url("/v1/calls/a2a/r1"), Some(&token));
    assert_eq!(
        (a.status, a.json()["state"].clone()),
        (200, json!("committed"))
    );
    assert_eq!(a.json()["entryIndex"], json!(cut - 1));

    // The log grows again over the lost index: the entry is there, but another call's.
    let v = a2a(&d, &token, "r3", "ailang-read", json!({"path": "a.txt"}));
    assert_eq!(
        v["result"]["metadata"]["entry_index"],
        json!(cut),
        "the index is reused"
    );
    let reused = format!(
        "the task state of a2a:ep1:r2 says it committed at entry {cut}, but entry {cut}'s record is a2a:ep1:r3's: the log lost its end or was rewritten"
    );
    damaged(&get(&d.url("/v1/calls/a2a/r2"), Some(&token)), &reused);
    damaged(
        &get(&d.url("/v1/invocations/a2a:ep1:r2"), Some(&token)),
        &reused,
    );
    let (code, out, err) = calls_get("r2");
    assert_eq!(code, 3, "{out}{err}");
    assert_eq!(
        err,
        format!("worldd: calls get: call a2a:ep1:r2 is damaged: {reused}; it is not answered as committed (run worldd doctor, and restore the store from a backup)\n")
    );
    let a = get(&d.url("/v1/calls/a2a/r3"), Some(&token));
    assert_eq!(
        (a.status, a.json()["entryIndex"].clone()),
        (200, json!(cut))
    );
}

/// A log that lost its end: resending the lost call under its key replayed it as committed at
/// the entry its task state names (`"replayed": true`), an entry the log no longer holds or,
/// once the log grew again, another call's. A replay now reads that entry first; when it does
/// not hold the call, the call is answered as the host's failure it is (nothing runs again,
/// and the daemon's log says why), before and after the index is reused.
#[test]
fn resending_a_call_the_log_lost_is_not_replayed_as_committed() {
    let (d, token, cut) = serving_a_log_cut_after_r2();
    let resend = |d: &Daemon| {
        let body = json!({
            "jsonrpc": "2.0", "id": 1, "method": "tasks/send",
            "params": {"id": "r2", "metadata": {"skill_id": "ailang-read"},
                       "message": {"role": "user", "parts": [{"type": "data", "data": {"path": "a.txt"}}]}}
        });
        let a = post_json(&d.url("/a2a/"), Some(&token), &body);
        assert_eq!(a.status, 200, "{}", a.text());
        a.json()
    };
    let refused = json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32603,
        "message": "transition invocation is not available in this daemon"}});
    assert_eq!(resend(&d), refused, "the entry is gone");
    let v = a2a(&d, &token, "r3", "ailang-read", json!({"path": "a.txt"}));
    assert_eq!(v["result"]["metadata"]["entry_index"], json!(cut));
    assert_eq!(resend(&d), refused, "the entry is another call's");
    d.wait_for_log(&format!("the task state of a2a:ep1:r2 says it committed at entry {cut}, but entry {cut}'s record is a2a:ep1:r3's: the log lost its end or was rewritten; it is not replayed as committed"));
}

/// A committed call whose entry's record was tampered with (one payload byte) was still
/// answered `committed` by the reconcile routes, and replayed when its key was resent: the
/// check of the entry its task state names left a record it could not vouch for to `why`,
/// which nothing behind these answers runs. It is damage now: `500 Damaged` naming the record,
/// and the resend is refused.
#[test]
fn a_call_whose_record_was_tampered_with_is_not_answered_or_replayed_as_committed() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:50"]);
    std::fs::write(d.root().join("ep1/a.txt"), "alpha").unwrap();
    let v = a2a(&d, &token, "r1", "ailang-read", json!({"path": "a.txt"}));
    let at = v["result"]["metadata"]["entry_index"].as_u64().unwrap();
    let operator = d.operator_session("ops", &[]);
    let record = get(&d.url(&format!("/v1/log/{at}")), Some(&operator)).json()["transitionRef"]
        .as_str()
        .unwrap()
        .to_owned();
    let kept = d.halt();
    flip_object_byte(&kept.path().join("db"), &record.parse().unwrap(), 0, true);
    let d = Daemon::start_in(kept, WS, &[]);
    let a = get(&d.url("/v1/calls/a2a/r1"), Some(&token));
    assert_eq!(a.status, 500, "{}", a.text());
    assert_eq!(
        a.json(),
        json!({"error": {"class": "Damaged", "message": format!(
            "call a2a:ep1:r1 is damaged: the task state of a2a:ep1:r1 says it committed at entry {at}, but entry {at}'s record {record} does not hash to its address; it is not answered as committed (run worldd doctor, and restore the store from a backup)"
        )}})
    );
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "tasks/send",
        "params": {"id": "r1", "metadata": {"skill_id": "ailang-read"},
                   "message": {"role": "user", "parts": [{"type": "data", "data": {"path": "a.txt"}}]}}
    });
    let resent = post_json(&d.url("/a2a/"), Some(&token), &body).json();
    assert_eq!(
        resent["error"],
        json!({"code": -32603, "message": "transition invocation is not available in this daemon"}),
        "{resent}"
    );
}
