//! A path argument naming a FIFO (or a socket) passed the check of path arguments, which looked
//! at the final file only for its link count: the binary opened the FIFO and blocked on it
//! until the effect's time limit (a failed effect, its unit spent, a worker held), where
//! `ailang-read` of the same path is refused at once as "not a regular file". It is now
//! declined by the preflight in the workspace plugin's words, and refused by the effect if it
//! comes anyway; the binary never runs.

mod common;

use std::ffi::CString;
use std::os::unix::net::UnixListener;

use common::*;
use handler_kit::serde_json::{json, Value};
use handler_kit::{EffectHandler, Preflight};
use worldd_ailang::{CHECK, CLI, RUN};

fn mkfifo(path: &std::path::Path) {
    let c = CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path; mkfifo touches nothing else.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

#[test]
fn a_path_argument_naming_a_fifo_or_socket_is_declined_as_not_a_regular_file_and_nothing_runs() {
    let f = Fixture::new();
    mkfifo(&f.root.join("pipe.ail"));
    let _socket = UnixListener::bind(f.root.join("sock.ail")).unwrap();
    std::os::unix::fs::symlink("pipe.ail", f.root.join("lnk.ail")).unwrap();
    let cases = [
        (
            CHECK,
            json!({"op": "ai_check", "path": "pipe.ail"}),
            "path",
            "pipe.ail",
        ),
        (
            RUN,
            json!({"op": "run", "path": "pipe.ail"}),
            "path",
            "pipe.ail",
        ),
        (
            CLI,
            json!({"op": "fmt", "path": "sock.ail"}),
            "path",
            "sock.ail",
        ),
        (
            CLI,
            json!({"op": "fmt", "path": "lnk.ail"}),
            "path",
            "lnk.ail",
        ),
    ];
    for (effect, payload, key, path) in cases {
        let why = format!("argument \"{key}\" \"{path}\": {path} is not a regular file");
        match f.handler.preflight(&f.request(effect, payload.clone())) {
            Preflight::Decline(answer) => assert_eq!(
                Value::Object(answer),
                json!({"ok": false, "refused": why}),
                "{effect} {payload}"
            ),
            other => panic!("{effect} {payload}: not declined: {other:?}"),
        }
        assert_eq!(
            f.failed(effect, payload.clone()),
            format!("broker: {effect} refused: {why}")
        );
    }
    assert!(f.log().is_empty(), "the binary ran: {:?}", f.log());
}
