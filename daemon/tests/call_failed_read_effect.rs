//! A handler that fails on a read-class effect changed nothing, but `worldd call` said "a
//! write may have partly run", sending the operator to look for damage there is none of. The
//! note names what the effect's class allows.

mod common;

use common::*;

#[test]
fn a_failed_read_effect_is_not_said_to_have_partly_written() {
    let dir = tempfile::tempdir().unwrap();
    let cmd = Daemon::serve_command(&dir, &[]);
    let lib = fixtures::echo_library();
    std::fs::copy(
        lib,
        dir.path().join("plugins").join(lib.file_name().unwrap()),
    )
    .unwrap();
    let d = Daemon::spawn(dir, cmd);
    let token = d.session("demo", &["Echo.Panic=any:5"]);
    let session = d.session_file("demo", &token);
    let (code, out, err) = worldd(
        &[
            "call",
            "echo-panic",
            "--arg",
            "text=boom",
            "--addr",
            &d.addr,
            "--session",
            path_str(&session),
        ],
        None,
    );
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        err,
        "worldd: effect e1 (Echo.Panic) failed — its handler failed; the effect only reads, so nothing was changed (the daemon's log says why, `effect failed: …`)\n"
    );
}
