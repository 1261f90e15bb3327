//! Crash tests with real process death: a child process (this test binary, re-executed) runs
//! one effectful call and SIGKILLs itself at a named point. The parent reopens the store and
//! checks the receipt law, that no committed entry is lost, that the budget was debited exactly
//! once, and that resending the task id never runs the effect again.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use broker_core::coordinator::{
    Call, CallError, Coordinator, CoordinatorConfig, CrashPoint, Surface,
};
use broker_core::journal::{self, Receipt};
use broker_core::log;
use broker_core::session;
use broker_core::store::{Store, StoreOptions};
use broker_core::verify;
use common::*;
use serde_json::json;

const POINT_VAR: &str = "BROKER_CRASH_POINT";
const DIR_VAR: &str = "BROKER_CRASH_DIR";

fn point_named(name: &str) -> CrashPoint {
    match name {
        "after-intent" => CrashPoint::AfterIntent,
        "after-handler" => CrashPoint::AfterHandler,
        "mid-commit" => CrashPoint::MidCommit,
        "after-commit" => CrashPoint::AfterCommit,
        other => panic!("unknown crash point {other}"),
    }
}

fn call(session: &session::Session) -> Call {
    Call {
        surface: Surface::A2a,
        session: session.clone().into(),
        skill_id: "ailang-write".into(),
        task_id: Some("crash-task".into()),
        args: json!({"path": "a.txt", "content": "hello"}),
        transition_fn: None,
    }
}

/// The child's body; only runs when re-executed by `crash_at_named_points`.
#[test]
#[ignore = "run by crash_at_named_points in a child process"]
fn crash_child() {
    let (Ok(point), Ok(dir)) = (std::env::var(POINT_VAR), std::env::var(DIR_VAR)) else {
        return;
    };
    let dir = Path::new(&dir);
    let store = Store::open(&dir.join("db"), StoreOptions::default()).unwrap();
    let handler = TestHandler::with_log(dir.join("effects.log"));
    let config = CoordinatorConfig {
        hooks: Arc::new(KillAt(point_named(&point))),
        ..CoordinatorConfig::default()
    };
    let c = Coordinator::new(store.clone(), handlers_for(handler), config);
    let s = session::list(&store).unwrap().sessions.remove(0);
    let _ = c.invoke(&call(&s));
    // Reaching here means the kill point was never hit.
    std::process::exit(42);
}

fn effects_run(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("effects.log"))
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

#[test]
fn crash_at_named_points() {
    for point in [
        "after-intent",
        "after-handler",
        "mid-commit",
        "after-commit",
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let session = {
            let store = Store::create(&dir.join("db")).unwrap();
            publish_se_tools(&store);
            // One committed call first: it must survive every crash.
            let handler = TestHandler::with_log(dir.join("effects.log"));
            let c = Coordinator::new(
                store.clone(),
                handlers_for(handler),
                CoordinatorConfig::default(),
            );
            let g = vec!["Workspace.Write=worktree:5".parse().unwrap()];
            let now = broker_core::coordinator::Clock::now(&broker_core::coordinator::SystemClock);
            let s = session::mint(&store, "ep1", g, 3600, now).unwrap().session;
            let mut first = call(&s);
            first.task_id = Some("before".into());
            c.invoke(&first).unwrap();
            s
        };
        let head_before = {
            let store = Store::open(&dir.join("db"), StoreOptions::default()).unwrap();
            store.read(log::head).unwrap().unwrap()
        };

        let status = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "crash_child",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(POINT_VAR, point)
            .env(DIR_VAR, dir)
            .status()
            .unwrap();
        assert_eq!(
            status.signal(),
            Some(libc::SIGKILL),
            "{point}: child did not die by SIGKILL: {status:?}"
        );

        let store = Store::open(&dir.join("db"), StoreOptions::default()).unwrap();
        let id = "a2a:ep1:crash-task";
        let receipt = store.read(|r| journal::receipt(r, id)).unwrap();
        let head = store.read(log::head).unwrap().unwrap();
        let spent = store.read(|r| journal::spent(r, "ep1")).unwrap();
        let spent = spent[&("Workspace.Write".to_string(), "worktree".to_string())];
        let pending = store.read(journal::pending).unwrap();
        assert_eq!(
            effects_run(dir),
            if point == "after-intent" { 1 } else { 2 },
            "{point}"
        );

        // No committed entry is lost, and the chain still verifies.
        assert!(head.world.revision >= head_before.world.revision, "{point}");
        for i in 0..=head.world.revision {
            assert!(
                verify::verify_entry(&store, i).unwrap().all_ok(),
                "{point}: entry {i}"
            );
        }
        // Budget debited exactly once per intent: the first call and the crashed one.
        assert_eq!(spent, 2, "{point}");
        let (findings, _) = store.read(journal::audit).unwrap();
        assert!(findings.is_empty(), "{point}: {findings:?}");

        let handler = TestHandler::with_log(dir.join("effects.log"));
        let c = Coordinator::new(
            store.clone(),
            handlers_for(handler.clone()),
            CoordinatorConfig::default(),
        );
        let resend = c.invoke(&call(&session));
        match point {
            "after-commit" => {
                assert!(
                    matches!(receipt, Receipt::Resolved { .. }),
                    "{point}: {receipt:?}"
                );
                assert!(pending.is_empty());
                assert_eq!(head.world.revision, head_before.world.revision + 1);
                let out = resend.unwrap();
                assert!(out.replayed, "{point}");
                assert_eq!(out.entry_index, head.world.revision);
            }
            _ => {
                // Intent without outcome ⇒ indeterminate, never re-run.
                assert_eq!(receipt, Receipt::Indeterminate, "{point}");
                assert_eq!(pending.len(), 1, "{point}");
                assert_eq!(pending[0].intent.invocation_id, id);
                assert_eq!(head, head_before, "{point}: nothing may be half-committed");
                let err = resend.unwrap_err();
                assert!(matches!(err, CallError::KeyPending), "{point}: {err}");
            }
        }
        assert_eq!(handler.runs(), 0, "{point}: the effect ran again");
        assert_eq!(
            effects_run(dir),
            if point == "after-intent" { 1 } else { 2 },
            "{point}"
        );
    }
}
