//! Many threads racing for the last unit of one grant: exactly one wins, every run.

mod common;

use std::sync::{Arc, Barrier};

use broker_core::journal::{self, Intent, JournalError};
use broker_core::object::Ref;
use broker_core::store::Store;
use common::*;
use serde_json::json;

const RACERS: usize = 32;
const RUNS: usize = 10;

#[test]
fn racing_calls_for_the_last_unit_one_wins() {
    for run in 0..RUNS {
        let w = Arc::new(World::new());
        let s = w.mint("ep1", &["Workspace.Read=worktree:1"]);
        let barrier = Arc::new(Barrier::new(RACERS));
        let threads: Vec<_> = (0..RACERS)
            .map(|_| {
                let (w, s, barrier) = (w.clone(), s.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    let out = w.call(&s, "ailang-read", json!({"path": "a"})).unwrap();
                    output_json(&out)["world"]["effects"][0]["status"]
                        .as_str()
                        .unwrap()
                        .to_owned()
                })
            })
            .collect();
        let statuses: Vec<String> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        let ok = statuses.iter().filter(|s| *s == "ok").count();
        let denied = statuses.iter().filter(|s| *s == "denied").count();
        assert_eq!((ok, denied), (1, RACERS - 1), "run {run}: {statuses:?}");
        assert_eq!(w.handler.runs(), 1, "run {run}");
    }
}

#[test]
fn racing_intents_in_the_writer_one_wins() {
    // Below the coordinator's episode lock: the writer's own spend check must hold alone.
    for run in 0..RUNS {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(&dir.path().join("db")).unwrap();
        let barrier = Arc::new(Barrier::new(RACERS));
        let threads: Vec<_> = (0..RACERS)
            .map(|i| {
                let (store, barrier) = (store.clone(), barrier.clone());
                std::thread::spawn(move || {
                    let intent = Intent {
                        invocation_id: format!("a2a:ep1:t{i}"),
                        episode: "ep1".into(),
                        effect: "Workspace.Read".into(),
                        scope: "worktree".into(),
                        cost: 1,
                        request_ref: Ref::of(&[i as u8]),
                    };
                    barrier.wait();
                    store.write(move |w| journal::append_intent(w, &intent, 1))
                })
            })
            .collect();
        let results: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        let won = results.iter().filter(|r| r.is_ok()).count();
        let exhausted = results
            .iter()
            .filter(|r| {
                matches!(
                    r,
                    Err(JournalError::BudgetExhausted {
                        remaining: 0,
                        cost: 1
                    })
                )
            })
            .count();
        assert_eq!((won, exhausted), (1, RACERS - 1), "run {run}");
        let spent = store.read(|r| journal::spent(r, "ep1")).unwrap();
        assert_eq!(spent.values().sum::<u64>(), 1);
    }
}
