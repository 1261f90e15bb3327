//! Entries that are not what they claim: `why` and the store audit must refuse to verify them.
//!
//! Forged coordinator entries cannot be committed any more (see `operator_commits.rs`); these
//! tests write them straight into the store, as earlier builds accepted them, and check that
//! verification names each one.

mod common;

use broker_core::commit::{self, CommitGrant, RestCommit};
use broker_core::coordinator::{Call, Surface};
use broker_core::log::{self, Append, Entry, EntryHeader, HeadBinding, World as WorldDoc};
use broker_core::object::{sid, Object, Ref};
use broker_core::store::RawTable;
use broker_core::task::{self, TaskPhase, TaskState};
use broker_core::verify::{self, Handle, Report};
use common::*;
use serde_json::{json, Value};

fn entry_at(w: &World, i: u64) -> Entry {
    w.store.read(|r| log::entry(r, i)).unwrap().unwrap()
}

fn payload(w: &World, r: &Ref) -> Value {
    let o = w.store.read(|rd| rd.object(r)).unwrap().unwrap();
    serde_json::from_slice(&o.payload).unwrap()
}

fn record_of(w: &World, i: u64) -> Value {
    payload(w, &entry_at(w, i).transition_ref)
}

/// Append an entry whose record is `record`, bound at the head, without any of the rules of a
/// REST commit.
fn append_raw(w: &World, written_by: &str, record: &Value) -> u64 {
    let rec = Object::json(sid::INVOCATION_RECORD, written_by, record).unwrap();
    let r = |k: &str| record[k].as_str().unwrap().parse::<Ref>().unwrap();
    let a = Append {
        objects: vec![rec.clone()],
        transition_fn: r("transitionFn"),
        interpreter: r("interpreter"),
        written_by: written_by.into(),
        transition_ref: rec.hash,
        state_root: r("output"),
        binding: HeadBinding::AtHead,
    };
    w.store
        .write(move |wc| log::append(wc, &a))
        .unwrap()
        .entry
        .header
        .entry_index
}

fn broken(report: &Report) -> Vec<(&'static str, String)> {
    report
        .links
        .iter()
        .filter(|l| !l.ok)
        .map(|l| (l.kind, l.detail.clone()))
        .collect()
}

fn read_call(w: &World, task_id: &str) -> broker_core::coordinator::CallOutput {
    let s = w.mint("ep1", &["Workspace.Read=worktree:50"]);
    w.call_task(&s, "ailang-read", json!({"path": "a"}), Some(task_id))
        .unwrap()
}

#[test]
fn forged_coordinator_entry_with_an_invented_invocation_fails_why_and_the_audit() {
    let w = World::new();
    let out = read_call(&w, "t1");
    let mut forged = record_of(&w, out.entry_index);
    forged["invocationId"] = json!("mcp:ep1:never-happened");
    for writer in ["coordinator:mcp", "coordinator:a2a"] {
        let i = append_raw(&w, writer, &forged);
        let report = verify::verify_entry(&w.store, i).unwrap();
        assert_eq!(
            broken(&report),
            [(
                "journal",
                "no task state for mcp:ep1:never-happened: the coordinator never committed this invocation".to_string()
            )],
            "{report:?}"
        );
    }
    let audit = verify::audit_store(&w.store).unwrap();
    assert!(!audit.consistent());
    let at: Vec<u64> = audit.broken.iter().map(|(i, _)| *i).collect();
    assert_eq!(at, [out.entry_index + 1, out.entry_index + 2]);
    assert!(audit.broken[0].1.starts_with("journal: no task state"));
}

#[test]
fn why_of_a_genuine_output_that_a_forged_entry_duplicates_lists_both_and_flags_the_forged_one() {
    let w = World::new();
    let out = read_call(&w, "t1");
    let genuine = record_of(&w, out.entry_index);
    // A copy of the genuine record (same invocation id) under a client's label, and an invented
    // one: both select the genuine output.
    let copy_at = append_raw(&w, "rest:mallory", &genuine);
    let mut invented = genuine.clone();
    invented["invocationId"] = json!("a2a:ep1:never-happened");
    let invented_at = append_raw(&w, "coordinator:a2a", &invented);

    let why = verify::why(&w.store, &Handle::Output(out.output.clone()), 10).unwrap();
    let at: Vec<u64> = why.reports.iter().map(|r| r.entry_index).collect();
    assert_eq!(at, [out.entry_index, copy_at, invented_at]);
    assert!(why.reports[0].all_ok(), "{:?}", why.reports[0]);
    assert!(!why.all_ok());
    assert_eq!(
        broken(&why.reports[1]),
        [(
            "journal",
            format!(
                "the coordinator committed {} at entry {}, not at this one",
                out.invocation_id, out.entry_index
            )
        )]
    );
    assert_eq!(broken(&why.reports[2])[0].0, "journal");
    // By invocation id: the genuine entry and the copy that claims it.
    let why = verify::why(&w.store, &Handle::Invocation(out.invocation_id.clone()), 10).unwrap();
    let at: Vec<(u64, bool)> = why
        .reports
        .iter()
        .map(|r| (r.entry_index, r.all_ok()))
        .collect();
    assert_eq!(at, [(out.entry_index, true), (copy_at, false)]);
    let json = why.to_json();
    assert_eq!(json["matches"], 2);
    assert_eq!(json["verified"], false);
}

/// A commit through the REST rules of a client's own invocation record.
fn client_invocation(w: &World, args: Value, planned_for: Value) -> u64 {
    let t = se_tool("ailang-read");
    let transition_fn = registry_fn(w, "ailang-read");
    let input = Object::json(sid::INVOCATION_INPUT, "rest:ops", &args).unwrap();
    let plan_obj = Object::json(
        sid::EFFECT_PLAN,
        "rest:ops",
        &t.plan_call(&planned_for).to_value(),
    )
    .unwrap();
    let output = Object::json(
        sid::INVOCATION_OUTPUT,
        "rest:ops",
        &json!({"ok": false, "refused": "by hand", "world": {"effects": [], "plan": plan_obj.hash}}),
    )
    .unwrap();
    let record = Object::json(
        sid::INVOCATION_RECORD,
        "rest:ops",
        &json!({"invocationId": "rest:hand-1", "episodeId": "ops", "skillId": "ailang-read",
                "transitionFn": transition_fn, "interpreter": log::interpreter_ref().unwrap(),
                "semanticsEpoch": 1, "input": input.hash, "output": output.hash,
                "plan": plan_obj.hash, "effects": []}),
    )
    .unwrap();
    let (record_ref, state_root) = (record.hash, output.hash);
    commit_as_ops(
        w,
        (transition_fn, log::interpreter_ref().unwrap()),
        (record_ref, state_root),
        vec![input, plan_obj, output, record],
    )
}

/// A commit by an operator (`rest:ops`) at the head, through the REST rules: an entry naming
/// `record` (and `transition_fn`, `interpreter`), a world whose state root is `state_root`, and
/// `objects` stored with it. Its index.
fn commit_as_ops(
    w: &World,
    (transition_fn, interpreter): (Ref, Ref),
    (record, state_root): (Ref, Ref),
    objects: Vec<Object>,
) -> u64 {
    let head = w.store.read(log::head).unwrap().unwrap();
    let entry = Entry::new(
        EntryHeader {
            entry_index: head.world.revision + 1,
            semantics_epoch: 1,
            transition_fn,
            interpreter,
            prev_entry_hash: head.world.log_head,
            written_by: "rest:ops".into(),
        },
        record,
    )
    .unwrap();
    let world = WorldDoc {
        revision: entry.header.entry_index,
        state_root,
        log_head: entry.entry_hash,
    };
    let c = RestCommit {
        invocation_id: None,
        observed_head: Some(head.world_ref),
        objects,
        world_ref: world.reference().unwrap(),
        entry,
        world,
    };
    let grant = CommitGrant {
        episode: "ops".into(),
        budget: 10,
    };
    commit::rest_commit(&w.store, c, &grant).unwrap();
    head.world.revision + 1
}

fn registry_fn(w: &World, id: &str) -> Ref {
    broker_core::registry::load(&w.store, broker_core::registry::DEFAULT_REGISTRY)
        .unwrap()
        .get(id)
        .unwrap()
        .transition_fn
}

#[test]
fn a_hand_made_client_entry_whose_plan_does_not_match_its_input_fails_the_replay() {
    let w = World::new();
    // Honest: the plan is what ailang-read plans for the input (a refusal).
    let honest = client_invocation(&w, json!({"nope": 1}), json!({"nope": 1}));
    let report = verify::verify_entry(&w.store, honest).unwrap();
    assert!(report.all_ok(), "{report:?}");
    let kinds: Vec<&str> = report.links.iter().map(|l| l.kind).collect();
    assert_eq!(
        kinds,
        ["world", "entry", "record", "input", "plan", "replay", "output"]
    );
    assert!(report.links[2].detail.starts_with(
        "client commit by rest:ops: world/invocation-record/v2 invocation rest:hand-1"
    ));

    // Dishonest: the input asks to read a file, the plan says it was refused.
    let forged = client_invocation(&w, json!({"path": "a.txt"}), json!({"nope": 1}));
    let report = verify::verify_entry(&w.store, forged).unwrap();
    let b = broken(&report);
    assert_eq!(b.len(), 1, "{report:?}");
    assert_eq!(b[0].0, "replay");
    assert!(
        b[0].1.starts_with(
            "the stored plan is not what ailang-read plans for this input (recomputed sha256:"
        ),
        "{b:?}"
    );
    let audit = verify::audit_store(&w.store).unwrap();
    let at: Vec<u64> = audit.broken.iter().map(|(i, _)| *i).collect();
    assert_eq!(at, [forged]);
}

#[test]
fn an_entry_naming_another_interpreter_cannot_be_replayed() {
    let w = World::new();
    let out = read_call(&w, "t1");
    let mut other = record_of(&w, out.entry_index);
    let elsewhere = Ref::of(b"another interpreter");
    other["interpreter"] = json!(elsewhere);
    other["invocationId"] = json!("rest:old");
    let i = append_raw(&w, "rest:ops", &other);
    let report = verify::verify_entry(&w.store, i).unwrap();
    assert_eq!(
        broken(&report),
        [(
            "replay",
            format!(
                "the entry names interpreter {}, this build's is {}: its plan cannot be replayed",
                elsewhere.short(8),
                log::interpreter_ref().unwrap().short(8)
            )
        )]
    );
}

#[test]
fn rewritten_journal_and_task_rows_break_the_entry() {
    let w = World::new();
    let out = read_call(&w, "t1");
    let index = out.entry_index;
    assert!(verify::verify_entry(&w.store, index).unwrap().all_ok());
    let id = out.invocation_id.clone();

    // The journal's index row, with the outcome pointing at another record.
    let key = id.as_bytes().to_vec();
    let original = w
        .store
        .raw_get(RawTable::JournalIndex, &key)
        .unwrap()
        .unwrap();
    let mut state: Value = serde_json::from_slice(&original).unwrap();
    state["resultRef"] = json!(Ref::of(b"elsewhere"));
    w.store
        .raw_overwrite(
            RawTable::JournalIndex,
            key.clone(),
            broker_core::canon::to_vec(&state).unwrap(),
        )
        .unwrap();
    let b = broken(&verify::verify_entry(&w.store, index).unwrap());
    assert_eq!(b[0].0, "journal", "{b:?}");
    assert!(
        b[0].1.contains("is not the outcome the index records"),
        "{b:?}"
    );
    w.store
        .raw_overwrite(RawTable::JournalIndex, key, original)
        .unwrap();

    // The intent row itself (sequence 1), with its cost rewritten: also the spend audit.
    let seq = 1u64.to_be_bytes().to_vec();
    let original = w.store.raw_get(RawTable::Journal, &seq).unwrap().unwrap();
    let mut row: Value = serde_json::from_slice(&original).unwrap();
    assert_eq!(row["kind"], "intent");
    row["cost"] = json!(0);
    w.store
        .raw_overwrite(
            RawTable::Journal,
            seq.clone(),
            broker_core::canon::to_vec(&row).unwrap(),
        )
        .unwrap();
    let b = broken(&verify::verify_entry(&w.store, index).unwrap());
    assert_eq!(b[0].0, "journal", "{b:?}");
    let audit = verify::audit_store(&w.store).unwrap();
    assert_eq!(audit.broken.len(), 1);
    assert!(!audit.journal_findings.is_empty());
    // An unreadable row is a finding, not an error that stops the audit.
    w.store
        .raw_overwrite(RawTable::Journal, seq.clone(), b"{damaged".to_vec())
        .unwrap();
    let audit = verify::audit_store(&w.store).unwrap();
    assert!(audit
        .journal_findings
        .iter()
        .any(|f| f.starts_with("journal #1: unreadable")));
    w.store
        .raw_overwrite(RawTable::Journal, seq, original)
        .unwrap();

    // The task state, moved to another entry.
    let mut tkey = b"ep1\0a2a:t1".to_vec();
    let original = w.store.raw_get(RawTable::Tasks, &tkey).unwrap().unwrap();
    let mut t: Value = serde_json::from_slice(&original).unwrap();
    t["entryIndex"] = json!(index + 7);
    w.store
        .raw_overwrite(
            RawTable::Tasks,
            tkey.clone(),
            broker_core::canon::to_vec(&t).unwrap(),
        )
        .unwrap();
    let b = broken(&verify::verify_entry(&w.store, index).unwrap());
    assert_eq!(
        b,
        [(
            "journal",
            format!(
                "the coordinator committed {id} at entry {}, not at this one",
                index + 7
            )
        )]
    );
    w.store
        .raw_overwrite(RawTable::Tasks, std::mem::take(&mut tkey), original)
        .unwrap();
    assert!(verify::verify_entry(&w.store, index).unwrap().all_ok());
}

#[test]
fn mcp_calls_are_written_by_coordinator_a2a_and_their_id_names_the_surface() {
    let w = World::new();
    let s = w.mint("ep1", &["Workspace.Read=worktree:5"]);
    let out = w
        .coordinator
        .invoke(&Call {
            surface: Surface::Mcp,
            session: s.into(),
            skill_id: "ailang-read".into(),
            task_id: Some("k1".into()),
            args: json!({"path": "a"}),
            transition_fn: None,
        })
        .unwrap();
    assert_eq!(out.invocation_id, "mcp:ep1:k1");
    assert_eq!(
        entry_at(&w, out.entry_index).header.written_by,
        "coordinator:a2a"
    );
    assert!(verify::verify_entry(&w.store, out.entry_index)
        .unwrap()
        .all_ok());
}

/// What an earlier build committed for an MCP call refused by its plan: the same objects and
/// task state as today, under `writtenBy` `coordinator:mcp`.
fn legacy_mcp_refusal(w: &World, invocation: &str) -> u64 {
    let (_, episode, key) = task::split_invocation_id(invocation).unwrap();
    let args = json!({"nope": 1});
    let t = se_tool("ailang-read");
    let writer = "coordinator:mcp";
    let input = Object::json(sid::INVOCATION_INPUT, writer, &args).unwrap();
    let plan_obj = Object::json(sid::EFFECT_PLAN, writer, &t.plan_call(&args).to_value()).unwrap();
    let refused = t.plan_call(&args).refusal().unwrap().to_owned();
    let output = Object::json(
        sid::INVOCATION_OUTPUT,
        writer,
        &json!({"ok": false, "refused": refused, "world": {"effects": [], "plan": plan_obj.hash}}),
    )
    .unwrap();
    let transition_fn = registry_fn(w, "ailang-read");
    let record = Object::json(
        sid::INVOCATION_RECORD,
        writer,
        &json!({"invocationId": invocation, "episodeId": episode, "skillId": "ailang-read",
                "transitionFn": transition_fn, "interpreter": log::interpreter_ref().unwrap(),
                "semanticsEpoch": 1, "input": input.hash, "output": output.hash,
                "plan": plan_obj.hash, "effects": []}),
    )
    .unwrap();
    let (input_ref, output_ref, record_ref) = (input.hash, output.hash, record.hash);
    let a = Append {
        objects: vec![input, plan_obj, output, record],
        transition_fn,
        interpreter: log::interpreter_ref().unwrap(),
        written_by: writer.into(),
        transition_ref: record_ref,
        state_root: output_ref,
        binding: HeadBinding::AtHead,
    };
    let (episode, key, invocation) = (
        episode.to_owned(),
        format!("mcp:{key}"),
        invocation.to_owned(),
    );
    w.store
        .write(move |wc| -> Result<u64, broker_core::log::LogError> {
            let c = log::append(wc, &a)?;
            let state = TaskState {
                invocation_id: invocation.clone(),
                skill_id: "ailang-read".into(),
                input_ref,
                phase: TaskPhase::Committed,
                output_ref: Some(output_ref),
                entry_index: Some(c.entry.header.entry_index),
                world_ref: Some(c.world_ref),
                effect_records: Vec::new(),
            };
            task::put(wc, &episode, &key, &state)?;
            Ok(c.entry.header.entry_index)
        })
        .unwrap()
}

#[test]
fn entries_written_as_coordinator_mcp_by_earlier_builds_still_verify() {
    let w = World::new();
    let i = legacy_mcp_refusal(&w, "mcp:ep1:old-1");
    let report = verify::verify_entry(&w.store, i).unwrap();
    assert!(report.all_ok(), "{report:?}");
    assert!(report.links[1].detail.contains("writtenBy coordinator:mcp"));
    // coordinator:mcp wrote MCP calls only.
    let j = legacy_mcp_refusal(&w, "a2a:ep1:old-2");
    assert_eq!(
        broken(&verify::verify_entry(&w.store, j).unwrap()),
        [(
            "journal",
            "writtenBy coordinator:mcp names MCP but the invocation is a2a:ep1:old-2".to_string()
        )]
    );
}

/// The log of a stopped store cut after its last entry (a bad restore, a lost end): the cut
/// call's task state still names that entry.
fn cut_last_entry(w: &World) -> u64 {
    let last = w.store.read(log::last_index).unwrap().unwrap();
    w.store
        .raw_overwrite(RawTable::LogRow, last.to_be_bytes().to_vec(), Vec::new())
        .unwrap();
    last
}

fn integrity(e: verify::VerifyError) -> String {
    match e {
        verify::VerifyError::Integrity(m) => m,
        other => panic!("not an integrity failure: {other}"),
    }
}

/// The log lost its end and grew again: the index of ep2's cut call now holds ep1's next call.
/// `why` of ep2's invocation id must not verify ep1's call in its place.
#[test]
fn why_of_a_call_cut_from_the_log_does_not_verify_the_call_that_reused_its_index() {
    let w = World::new();
    let s1 = w.mint("ep1", &["Workspace.Read=worktree:50"]);
    let s2 = w.mint("ep2", &["Workspace.Read=worktree:50"]);
    w.call_task(&s1, "ailang-read", json!({"path": "a"}), Some("a1"))
        .unwrap();
    let cut = w
        .call_task(&s2, "ailang-read", json!({"path": "b"}), Some("b1"))
        .unwrap();
    assert_eq!(cut_last_entry(&w), cut.entry_index);
    let b1 = Handle::Invocation("a2a:ep2:b1".into());
    let e = integrity(verify::why(&w.store, &b1, verify::DEFAULT_SCAN).unwrap_err());
    assert_eq!(
        e,
        format!(
            "the task state of a2a:ep2:b1 says it committed at entry {i}, which the log does not hold (its last entry is {}): the log lost its end",
            cut.entry_index - 1,
            i = cut.entry_index
        )
    );

    let next = w
        .call_task(&s1, "ailang-read", json!({"path": "a"}), Some("a2"))
        .unwrap();
    assert_eq!(next.entry_index, cut.entry_index, "the index is reused");
    let e = integrity(verify::why(&w.store, &b1, verify::DEFAULT_SCAN).unwrap_err());
    assert_eq!(
        e,
        format!(
            "the task state of a2a:ep2:b1 says it committed at entry {i}, but entry {i}'s record is a2a:ep1:a2's: the log lost its end or was rewritten",
            i = cut.entry_index
        )
    );
    // The call that holds the index now is genuine, and verifies by its own id.
    let a2 = verify::why(
        &w.store,
        &Handle::Invocation("a2a:ep1:a2".into()),
        verify::DEFAULT_SCAN,
    )
    .unwrap();
    assert!(a2.all_ok(), "{:?}", a2.reports);
}

/// The audit walks entry → task state; a log cut after its end (and grown again over the cut
/// index) passes that walk. Each committed task state must name an entry that holds its call.
#[test]
fn the_audit_finds_a_committed_call_whose_entry_the_log_lost_or_gave_to_another_call() {
    let w = World::new();
    let s1 = w.mint("ep1", &["Workspace.Read=worktree:50"]);
    let s2 = w.mint("ep2", &["Workspace.Read=worktree:50"]);
    w.call_task(&s1, "ailang-read", json!({"path": "a"}), Some("a1"))
        .unwrap();
    w.call_task(&s2, "ailang-read", json!({"path": "b"}), Some("b1"))
        .unwrap();
    let audit = verify::audit_store(&w.store).unwrap();
    assert!(audit.consistent(), "{audit:?}");
    assert_eq!(audit.committed_calls, 2);

    let cut = cut_last_entry(&w);
    let audit = verify::audit_store(&w.store).unwrap();
    assert!(audit.broken.is_empty() && audit.head_findings.is_empty());
    assert_eq!(
        audit.call_findings,
        [format!(
            "the task state of a2a:ep2:b1 says it committed at entry {cut}, which the log does not hold (its last entry is {}): the log lost its end",
            cut - 1
        )]
    );
    assert!(!audit.consistent());

    w.call_task(&s1, "ailang-read", json!({"path": "a"}), Some("a2"))
        .unwrap();
    let audit = verify::audit_store(&w.store).unwrap();
    assert!(audit.broken.is_empty(), "{:?}", audit.broken);
    assert_eq!(audit.committed_calls, 3);
    assert_eq!(
        audit.call_findings,
        [format!(
            "the task state of a2a:ep2:b1 says it committed at entry {cut}, but entry {cut}'s record is a2a:ep1:a2's: the log lost its end or was rewritten"
        )]
    );
    assert!(!audit.consistent());
}

/// A client's commit, through the REST rules, of `record` (its objects already stored).
fn client_commit_of(w: &World, record: &Value) -> u64 {
    let rec = Object::json(sid::INVOCATION_RECORD, "rest:ops", record).unwrap();
    let r = |k: &str| record[k].as_str().unwrap().parse::<Ref>().unwrap();
    let record_ref = rec.hash;
    commit_as_ops(
        w,
        (r("transitionFn"), r("interpreter")),
        (record_ref, r("output")),
        vec![rec],
    )
}

fn write_call(w: &World) -> broker_core::coordinator::CallOutput {
    let s = w.mint("ep1", &["Workspace.Write=worktree:5"]);
    w.call_task(
        &s,
        "ailang-write",
        json!({"path": "a.txt", "content": "alpha"}),
        Some("w1"),
    )
    .unwrap()
}

fn claimed_links(report: &Report) -> Vec<&'static str> {
    report
        .links
        .iter()
        .filter(|l| l.claimed)
        .map(|l| l.kind)
        .collect()
}

#[test]
fn a_client_commit_claiming_an_effect_ran_is_a_claim_not_a_verified_effect() {
    let w = World::new();
    let out = write_call(&w);
    let genuine = verify::verify_entry(&w.store, out.entry_index).unwrap();
    assert!(genuine.verified(), "{genuine:?}");
    assert!(claimed_links(&genuine).is_empty());
    // The genuine record's effect (allowed, its plugin named) under a client's invocation id:
    // consistent with its plan, and nothing journaled it.
    let mut copy = record_of(&w, out.entry_index);
    copy["invocationId"] = json!("rest:copy-1");
    let at = client_commit_of(&w, &copy);
    let report = verify::verify_entry(&w.store, at).unwrap();
    assert!(report.all_ok(), "{report:?}");
    assert!(!report.verified());
    assert_eq!(claimed_links(&report), ["effect", "plugin"]);
    for l in report.links.iter().filter(|l| l.claimed) {
        assert!(
            l.detail
                .ends_with(" (claimed by a client commit, not journaled)"),
            "{l:?}"
        );
    }
    let json = report.to_json();
    assert_eq!(json["verified"], false);
    assert_eq!(json["claimed"], 2);
    assert_eq!(
        json["links"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|l| l["claimed"] == true)
            .count(),
        2
    );
    // The audit: nothing inconsistent, and the claims listed as claims.
    let audit = verify::audit_store(&w.store).unwrap();
    assert!(audit.consistent(), "{audit:?}");
    let at_entries: Vec<u64> = audit.claims.iter().map(|(i, _)| *i).collect();
    assert_eq!(at_entries, [at, at]);
    assert!(
        audit.claims[0]
            .1
            .starts_with("effect: e1 allowed Workspace.Write@worktree"),
        "{:?}",
        audit.claims
    );
}

#[test]
fn a_copy_of_a_genuine_record_under_an_upper_case_mcp_id_is_held_to_the_coordinators_rows() {
    let w = World::new();
    let out = write_call(&w);
    let id = &out.invocation_id;
    let upper = format!("{}{}", id[..4].to_uppercase(), &id[4..]);
    let mut copy = record_of(&w, out.entry_index);
    copy["invocationId"] = json!(upper);
    // Written into the store directly: POST /v1/commit refuses it (operator_commits.rs).
    let at = append_raw(&w, "rest:mallory", &copy);
    let report = verify::verify_entry(&w.store, at).unwrap();
    assert_eq!(
        broken(&report),
        [(
            "journal",
            format!("no task state for {upper}: the coordinator never committed this invocation")
        )],
        "{report:?}"
    );
    assert_eq!(claimed_links(&report), ["effect", "plugin"]);
}

/// A read's entry rewritten consistently, as whoever serves or holds the store could: its
/// output says the file held other words, and the record, entry, world and task state are
/// recomputed to match. The effect record and result, and the journal, are the genuine ones.
/// Returns the forged entry's index and the output's ref.
fn reworded_read(w: &World, out: &broker_core::coordinator::CallOutput) -> (u64, Ref) {
    let mut body: Value = serde_json::from_slice(&out.output).unwrap();
    assert_eq!(body["ok"], true, "{body}");
    body["content"] = json!("the file says: wire the money");
    let output = Object::json(sid::INVOCATION_OUTPUT, "coordinator:a2a", &body).unwrap();
    let mut record = record_of(w, out.entry_index);
    record["output"] = json!(output.hash);
    let rec = Object::json(sid::INVOCATION_RECORD, "coordinator:a2a", &record).unwrap();
    let r = |k: &str| record[k].as_str().unwrap().parse::<Ref>().unwrap();
    let output_ref = output.hash;
    let a = Append {
        objects: vec![output, rec.clone()],
        transition_fn: r("transitionFn"),
        interpreter: r("interpreter"),
        written_by: "coordinator:a2a".into(),
        transition_ref: rec.hash,
        state_root: output_ref,
        binding: HeadBinding::AtHead,
    };
    let at = w
        .store
        .write(move |wc| -> Result<u64, broker_core::log::LogError> {
            let c = log::append(wc, &a)?;
            let mut state = task::get_w(wc, "ep1", "a2a:t1")?.unwrap();
            state.entry_index = Some(c.entry.header.entry_index);
            state.output_ref = Some(output_ref);
            state.world_ref = Some(c.world_ref);
            task::put(wc, "ep1", "a2a:t1", &state)?;
            Ok(c.entry.header.entry_index)
        })
        .unwrap();
    (at, output_ref)
}

#[test]
fn an_output_whose_body_is_not_the_handlers_committed_result_does_not_verify() {
    let w = World::new();
    let out = read_call(&w, "t1");
    assert!(verify::verify_entry(&w.store, out.entry_index)
        .unwrap()
        .verified());
    let record = record_of(&w, out.entry_index);
    let effect: Ref = record["effects"][0].as_str().unwrap().parse().unwrap();
    let result = payload(&w, &effect)["resultRef"]
        .as_str()
        .unwrap()
        .to_owned();

    let (at, forged) = reworded_read(&w, &out);
    let report = verify::verify_entry(&w.store, at).unwrap();
    assert_eq!(
        broken(&report),
        [(
            "output",
            format!(
                "the body of output {forged} (all but `world`) is not e1's effect result {result}: a tool without a finish phase answers with its handler's output unchanged"
            )
        )],
        "{report:?}"
    );
    // Found by the forged bytes, as an agent handed them would look them up.
    let forged_bytes = w
        .store
        .read(|r| r.object(&forged))
        .unwrap()
        .unwrap()
        .payload;
    let why = verify::why(&w.store, &Handle::Output(forged_bytes.to_vec()), 10).unwrap();
    assert!(!why.all_ok());
    // The audit names it.
    let audit = verify::audit_store(&w.store).unwrap();
    assert!(audit
        .broken
        .iter()
        .any(|(i, why)| *i == at && why.starts_with("output: the body of output ")));
}
