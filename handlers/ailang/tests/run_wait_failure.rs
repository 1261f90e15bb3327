//! A run whose child was started but could not be waited for may have run to its end: the
//! effect is indeterminate, never failed (which says the handler knows it did not complete).
//! Its own test binary: it sets SIGCHLD to SIG_IGN for the whole process, so the kernel reaps
//! each child at exit and waiting for it fails with ECHILD, deterministically.

mod common;

use common::*;
use handler_kit::serde_json::{json, Value};
use handler_kit::Outcome;
use worldd_ailang::RUN;

fn run(path: &str) -> Value {
    json!({"op": "run", "path": path, "stdin": "", "argv": [], "caps": ["IO", "FS"]})
}

#[test]
fn a_run_that_started_and_could_not_be_waited_for_is_indeterminate_not_failed() {
    let f = Fixture::new();
    f.put("hello.ail", HELLO);
    // The first run verifies the episode's policy file, so the next runs only `ailang run`.
    f.ok(RUN, run("hello.ail"));
    assert_eq!(f.ran("run", None), 1);

    // SAFETY: this test binary holds this one test; no other thread starts children meanwhile.
    let previous = unsafe { libc::signal(libc::SIGCHLD, libc::SIG_IGN) };
    let outcome = f.exec(RUN, run("hello.ail"));
    // SAFETY: as above; the previous disposition is put back.
    unsafe { libc::signal(libc::SIGCHLD, previous) };

    assert_eq!(
        outcome,
        Outcome::Indeterminate {
            message: "broker: Ailang.Run indeterminate: the program was started, then ailang run failed: waiting for it failed: No child processes (os error 10); it may have run".into()
        }
    );
    // It did run.
    assert_eq!(f.ran("run", None), 2);
}
