//! Crash under load: clients write through A2A while the daemon is SIGKILLed at random
//! moments, many times, and restarted on the same store. One more client reads: a read runs
//! while its intent is on its way to the disk, so a kill can also land between a read and its
//! intent's sync. After every restart:
//!
//! - every call a client saw acknowledged is in the log, at its entry, with the same output;
//! - no effect ran twice: every task id has at most one journal intent, resending a task id
//!   never runs it again, and every file a handler wrote belongs to exactly one intent;
//! - spend equals the sum of intents for every episode (`worldd doctor` passes);
//! - indeterminate intents are at most the calls in flight at the kill.
//!
//! `CRASH_KILLS` sets the number of kills (default 50).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use broker_core::journal;
use broker_core::object::Ref;
use broker_core::store::Store;
use common::*;
use serde_json::{json, Value};

const CLIENTS: usize = 4;
/// Of the clients, how many write (`c0`, `c1`, …); the last reads (`c3`, `ailang-read`).
const WRITERS: usize = CLIENTS - 1;
const READ_FILE: &str = "read-me.txt";

#[derive(Default)]
struct Ledger {
    /// task id → (entry index, output ref) for every acknowledged call.
    acked: BTreeMap<String, (u64, Ref)>,
    /// Task ids sent but not acknowledged (the daemon died or refused).
    unacked: BTreeSet<String>,
}

/// Client `c`'s call for `task`: a write of `<task>.txt` holding the task id, or (the reader)
/// a read of [`READ_FILE`].
fn call(c: usize, task: &str) -> (&'static str, Value) {
    if c < WRITERS {
        (
            "ailang-write",
            json!({"path": format!("{task}.txt"), "content": task}),
        )
    } else {
        ("ailang-read", json!({"path": READ_FILE}))
    }
}

/// One A2A call of client `c`; `Some((entry, output ref))` when acknowledged.
fn send(addr: &str, token: &str, c: usize, task: &str) -> Result<Option<(u64, Ref)>, String> {
    let (skill, data) = call(c, task);
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "tasks/send",
        "params": {"id": task, "metadata": {"skill_id": skill},
                   "message": {"role": "user", "parts": [{"type": "data", "data": data}]}}
    });
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(10))
        .build();
    let res = agent
        .post(&format!("http://{addr}/a2a/"))
        .set("Authorization", &format!("Bearer {token}"))
        .set("Content-Type", "application/json")
        .send_string(&body.to_string());
    let text = match res {
        Ok(r) => r.into_string().map_err(|e| e.to_string())?,
        Err(e) => return Err(e.to_string()),
    };
    let v: Value = serde_json::from_str(&text).map_err(|e| format!("{e}: {text}"))?;
    if v.get("error").is_some() {
        return Ok(None);
    }
    let data = &v["result"]["artifacts"][0]["parts"][0]["data"];
    let bytes = broker_core::canon::to_vec(data).map_err(|e| e.to_string())?;
    let entry = v["result"]["metadata"]["entry_index"]
        .as_u64()
        .ok_or("no entry index")?;
    Ok(Some((entry, Ref::of(&bytes))))
}

#[test]
fn sigkill_under_load_loses_no_acknowledged_call_and_runs_no_effect_twice() {
    let kills: usize = std::env::var("CRASH_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(50);
    let mut d = Daemon::start(&["worldd_workspace"], &[]);
    let tokens: Vec<String> = (0..CLIENTS)
        .map(|c| {
            let grant = if c < WRITERS {
                "Workspace.Write=worktree:100000"
            } else {
                "Workspace.Read=worktree:100000"
            };
            d.session(&format!("c{c}"), &[grant])
        })
        .collect();
    std::fs::write(
        d.root().join(format!("c{WRITERS}")).join(READ_FILE),
        "read under kills",
    )
    .unwrap();
    let ledgers: Vec<Arc<Mutex<Ledger>>> = (0..CLIENTS)
        .map(|_| Arc::new(Mutex::new(Ledger::default())))
        .collect();
    let mut seq = 0u64;
    let mut rng = 0x9e3779b97f4a7c15u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut indeterminate_before = 0usize;

    for round in 0..kills {
        let stop = Arc::new(AtomicBool::new(false));
        let addr = d.addr.clone();
        let threads: Vec<_> = (0..CLIENTS)
            .map(|c| {
                let (stop, addr, token, ledger) = (
                    stop.clone(),
                    addr.clone(),
                    tokens[c].clone(),
                    ledgers[c].clone(),
                );
                let base = seq + (c as u64) * 1_000_000;
                std::thread::spawn(move || {
                    // First resend what was not acknowledged before the last kill.
                    let resend: Vec<String> =
                        ledger.lock().unwrap().unacked.iter().cloned().collect();
                    for task in resend {
                        if stop.load(Ordering::Relaxed) {
                            return;
                        }
                        // A refusal (e.g. indeterminate: never re-run) or a dead daemon
                        // leaves the task unacknowledged.
                        if let Ok(Some(ack)) = send(&addr, &token, c, &task) {
                            let mut l = ledger.lock().unwrap();
                            l.unacked.remove(&task);
                            l.acked.insert(task, ack);
                        }
                    }
                    let mut n = base;
                    while !stop.load(Ordering::Relaxed) {
                        n += 1;
                        let task = format!("t{n}");
                        ledger.lock().unwrap().unacked.insert(task.clone());
                        match send(&addr, &token, c, &task) {
                            Ok(Some(ack)) => {
                                let mut l = ledger.lock().unwrap();
                                l.unacked.remove(&task);
                                l.acked.insert(task, ack);
                            }
                            Ok(None) => {}
                            Err(_) => return,
                        }
                    }
                })
            })
            .collect();
        seq += 10_000;
        std::thread::sleep(Duration::from_millis(40 + next() % 200));
        // Kill at a random moment, mid-load.
        let dir = d.halt();
        stop.store(true, Ordering::Relaxed);
        for t in threads {
            t.join().unwrap();
        }

        // Check the store offline.
        {
            let store = Store::open(&dir.path().join("db"), Default::default()).unwrap();
            let pending = store.indeterminate().unwrap();
            assert!(
                pending.len() <= indeterminate_before + CLIENTS,
                "round {round}: {} indeterminate intents after a kill with at most {CLIENTS} calls in flight (was {indeterminate_before})",
                pending.len()
            );
            indeterminate_before = pending.len();
            let (findings, _) = store.read(journal::audit).unwrap();
            assert!(findings.is_empty(), "round {round}: {findings:?}");
            for (c, ledger) in ledgers.iter().enumerate() {
                let l = ledger.lock().unwrap();
                for (task, (entry, output)) in &l.acked {
                    let e = store.read(|r| broker_core::log::entry(r, *entry)).unwrap();
                    let e = e.unwrap_or_else(|| {
                        panic!("round {round}: acknowledged {task} lost (entry {entry})")
                    });
                    let rec = store
                        .read(|r| r.object(&e.transition_ref))
                        .unwrap()
                        .unwrap();
                    let rec: Value = serde_json::from_slice(&rec.payload).unwrap();
                    assert_eq!(
                        rec["invocationId"],
                        format!("a2a:c{c}:{task}"),
                        "round {round}"
                    );
                    assert_eq!(rec["output"], output.to_string(), "round {round}: {task}");
                }
            }
        }
        d = Daemon::start_in(dir, &["worldd_workspace"], &[]);
    }

    // Final accounting: every file on disk belongs to exactly one intent; every acknowledged
    // call's file is there; the store is consistent.
    let dir = d.halt();
    let store = Store::open(&dir.path().join("db"), Default::default()).unwrap();
    let mut acked_total = 0;
    for (c, ledger) in ledgers.iter().enumerate() {
        let l = ledger.lock().unwrap();
        acked_total += l.acked.len();
        // One intent per invocation id, and spend at least the acknowledged calls.
        let spent = store.read(|r| journal::spent(r, &format!("c{c}"))).unwrap();
        let intents = spent.values().sum::<u64>();
        assert!(intents as usize >= l.acked.len());
        if c >= WRITERS {
            assert!(!l.acked.is_empty(), "the reader was never answered");
            continue;
        }
        let wt = dir.path().join("worktrees").join(format!("c{c}"));
        for entry in std::fs::read_dir(&wt).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            let Some(task) = name.strip_suffix(".txt") else {
                continue;
            };
            let id = format!("a2a:c{c}:{task}");
            let state = store.read(|r| journal::state(r, &id)).unwrap();
            assert!(
                state.is_some(),
                "{name} was written without a journaled intent"
            );
        }
        for task in l.acked.keys() {
            let content = std::fs::read_to_string(wt.join(format!("{task}.txt"))).unwrap();
            assert_eq!(&content, task);
        }
    }
    assert!(
        acked_total > kills,
        "too little load: {acked_total} acknowledged calls over {kills} kills"
    );
    drop(store);
    let (code, out, err) = worldd(&["doctor", "--db", path_str(&dir.path().join("db"))], None);
    assert_eq!(code, 0, "{out}{err}");
    eprintln!("crash under load: {kills} kills, {acked_total} acknowledged calls, {indeterminate_before} indeterminate intents, doctor: consistent");
}
