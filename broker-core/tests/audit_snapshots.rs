//! `worldd doctor` beside a busy daemon: the journal and object audits read their tables a block
//! at a time, each block in a read transaction of its own. One transaction over a whole table
//! held a snapshot for as long as the audit ran (seconds on a large store), and the serving
//! daemon could reuse no page it freed meanwhile: its data file grew by every page it rewrote,
//! for good. What the blocks read must still add up to one consistent audit, with commits
//! landing between them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use broker_core::journal::{self, Intent};
use broker_core::object::{sid, Object, Ref};
use broker_core::store::Store;
use serde_json::json;

/// Rows past the blocks' size in each table, so that each audit reads more than one block.
const ROWS: u64 = 9_000;

fn intent(i: u64) -> Intent {
    Intent {
        invocation_id: format!("a2a:ep1:t{i}"),
        episode: "ep1".into(),
        effect: "Workspace.Read".into(),
        scope: "worktree".into(),
        cost: 1,
        request_ref: Ref::of(&i.to_be_bytes()),
    }
}

#[test]
fn the_journal_and_object_audits_read_in_blocks_and_a_commit_between_them_is_no_finding() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(&dir.path().join("db")).unwrap();
    store
        .write(|w| {
            for i in 0..ROWS {
                journal::append_intent(w, &intent(i), u64::MAX >> 12)?;
                let o = Object::json(sid::EFFECT_RESULT, "test", &json!({ "n": i })).unwrap();
                w.put_object(&o)?;
            }
            Ok::<_, journal::JournalError>(())
        })
        .unwrap();
    let reads = Arc::new(AtomicUsize::new(0));
    let (count, writer) = (reads.clone(), store.clone());
    let landed = std::sync::atomic::AtomicBool::new(false);
    // At the second read transaction (the first block), a call's intent and an object land.
    assert!(store.on_read(Box::new(move |_| {
        if count.fetch_add(1, Ordering::SeqCst) == 1 && !landed.swap(true, Ordering::SeqCst) {
            writer
                .write(|w| {
                    journal::append_intent(w, &intent(ROWS), u64::MAX >> 12)?;
                    let o =
                        Object::json(sid::EFFECT_RESULT, "test", &json!({ "n": ROWS })).unwrap();
                    w.put_object(&o)?;
                    Ok::<_, journal::JournalError>(())
                })
                .unwrap();
        }
    })));
    let (findings, records) = journal::audit_store(&store).unwrap();
    assert_eq!(findings, vec![], "a commit between blocks is no finding");
    assert_eq!(
        records,
        ROWS + 1,
        "the last snapshot read the intent that landed"
    );
    let journal_reads = reads.swap(0, Ordering::SeqCst);
    assert!(journal_reads >= 3, "{journal_reads} read transactions");
    // The whole audit, the object audit's blocks among its reads: consistent, every object
    // read (the genesis' too).
    let audit = broker_core::verify::audit_store(&store).unwrap();
    assert!(audit.consistent(), "{audit:?}");
    assert!(audit.objects > ROWS, "{}", audit.objects);
    let object_rows = ROWS / 4096 + 1;
    assert!(
        reads.load(Ordering::SeqCst) as u64 >= journal_reads as u64 + object_rows,
        "{} read transactions",
        reads.load(Ordering::SeqCst)
    );
}
