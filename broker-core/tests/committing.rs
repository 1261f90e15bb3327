//! A call's commit as a value: [`Coordinator::begin`] submits a refused plan's entry and returns
//! without waiting for the writer, and the call's episode stays busy until the returned
//! `Committing` resolves.

mod common;

use std::sync::{mpsc, Mutex};
use std::time::Duration;

use broker_core::coordinator::{Begun, Call, Committing, Surface};
use broker_core::session::Session;
use broker_core::store::{Store, StoreError, Submitted};
use common::*;
use serde_json::json;

/// Hold the store's writer inside an operation until the returned sender sends.
fn hold_writer(store: &Store) -> (mpsc::Sender<()>, Submitted<(), StoreError>) {
    let (release, released) = mpsc::channel::<()>();
    let (entered, writer_in) = mpsc::channel::<()>();
    let released = Mutex::new(released);
    let held = store.submit(move |_w| -> Result<(), StoreError> {
        let _ = entered.send(());
        let _ = released.lock().unwrap().recv();
        Ok(())
    });
    writer_in
        .recv_timeout(Duration::from_secs(30))
        .expect("the writer never ran the holding operation");
    (release, held)
}

/// `ailang-read` with an argument its plan refuses.
fn refused_read(session: &Session) -> Call {
    Call {
        surface: Surface::A2a,
        session: session.clone().into(),
        skill_id: "ailang-read".into(),
        task_id: None,
        args: json!({"path": "a", "limit": 1}),
        transition_fn: None,
    }
}

fn committing(begun: Begun) -> Committing {
    match begun {
        Begun::Committing(c) => c,
        Begun::Replayed(_) => panic!("a new call was replayed"),
        Begun::Effect(_) => panic!("a refused plan asked for an effect"),
    }
}

#[test]
fn begin_submits_a_refused_plan_and_its_episode_stays_busy_until_the_commit_resolves() {
    let w = World::new();
    let s = w.mint("ep1", &["Workspace.Read=worktree:5"]);
    let before = w.store.read(broker_core::log::head).unwrap().unwrap();
    let (release, held) = hold_writer(&w.store);

    // Returns while the writer is held: nothing here waits for a commit.
    let first = committing(w.coordinator.begin(refused_read(&s), ()).unwrap());

    let (coordinator, session) = (&w.coordinator, &s);
    std::thread::scope(|scope| {
        // Dropped if an assertion below fails, so the writer and the second call can end.
        let release = release;
        let (begun_tx, begun_rx) = mpsc::channel();
        scope.spawn(move || {
            let second = committing(coordinator.begin(refused_read(session), ()).unwrap());
            begun_tx.send(()).unwrap();
            second.wait()
        });
        assert!(
            begun_rx.recv_timeout(Duration::from_millis(300)).is_err(),
            "a second call of the episode began while the first one's commit was pending"
        );
        release.send(()).unwrap();
        held.wait().unwrap();
        let out = first.wait().unwrap();
        assert!(out.effects.is_empty(), "a refused plan commits no effect");
        assert_eq!(out.entry_index, before.world.revision + 1);
        begun_rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the episode stayed busy after its commit resolved");
    });
    let after = w.store.read(broker_core::log::head).unwrap().unwrap();
    assert_eq!(after.world.revision, before.world.revision + 2);
}
