//! The archived copy of the operator's binary (`stateDir/bin/<sha256>/ailang`) was checked
//! only at start: bytes written into it afterwards (by anything running as the daemon's user,
//! a program run with `FS` included) ran under the original `tool` stamp, which the plugin
//! promises names exactly the bytes that ran. Each call now `stat`s the copy and, when what
//! `stat` says changed, hashes it again: changed bytes are declined before anything is spent
//! (and fail the effect for a daemon that skips the preflight), the log naming the file, both
//! digests and the fix; the same bytes written back run again.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

use common::*;
use handler_kit::serde_json::{json, Value};
use handler_kit::{EffectHandler, Host, Preflight};
use handler_test_support::LogLines;
use worldd_ailang::{ARCHIVE_CHANGED, CHECK, CLI, RUN};

/// Write `bytes` into the archived copy in place (same inode), as a tamperer would.
fn rewrite_in_place(path: &std::path::Path, bytes: &[u8]) {
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(path, bytes).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o555)).unwrap();
}

#[test]
fn an_archived_binary_changed_after_start_is_declined_and_never_runs_under_the_original_stamp() {
    let logs = Arc::new(LogLines::default());
    let f = Fixture::hosted(json!({}), Host::from_services(logs.clone()));
    f.put("a.ail", HELLO);
    let archived = f.handler.binary().to_path_buf();
    let original = fs::read(&archived).unwrap();
    let payloads = [
        (CHECK, json!({"op": "ai_check", "path": "a.ail"})),
        (RUN, json!({"op": "run", "path": "a.ail", "caps": ["IO"]})),
        (CLI, json!({"op": "fmt", "path": "a.ail"})),
    ];
    let out = f.ok(CLI, json!({"op": "fmt", "path": "a.ail"}));
    assert_eq!(out["tool"], f.tool());
    let ran = f.log().len();
    assert!(ran > 0);

    let mut tampered = original.clone();
    tampered.extend_from_slice(b"\n# TAMPERED\n");
    rewrite_in_place(&archived, &tampered);
    let now = format!("sha256:{}", sha256_hex(&tampered));
    for (effect, payload) in &payloads {
        match f.handler.preflight(&f.request(effect, payload.clone())) {
            Preflight::Decline(answer) => assert_eq!(
                Value::Object(answer),
                json!({"ok": false, "refused": ARCHIVE_CHANGED})
            ),
            other => panic!("{effect}: not declined: {other:?}"),
        }
        let line = format!(
            "error: ailang: {effect} declined: the archived binary {} was changed after it was archived: its bytes are {now}, not the {} its outputs are stamped with; restart worldd to archive bin again",
            archived.display(),
            f.tool()
        );
        assert!(
            logs.lines().contains(&line),
            "{:?}\nwanted: {line}",
            logs.lines()
        );
        // A daemon that skips the preflight: the effect fails and nothing runs.
        assert_eq!(
            f.failed(effect, payload.clone()),
            format!("broker: {effect} failed: {ARCHIVE_CHANGED}; nothing ran")
        );
    }
    assert_eq!(f.log().len(), ran, "the changed binary ran");
    assert_eq!(
        ARCHIVE_CHANGED,
        "the ailang binary this daemon runs was changed after it was archived, so no output could name the bytes that ran; an operator must restart worldd to archive it again"
    );

    // The same bytes written back (mtime and ctime changed, bytes not): hashed, and run again.
    rewrite_in_place(&archived, &original);
    assert!(matches!(
        f.handler
            .preflight(&f.request(CLI, json!({"op": "fmt", "path": "a.ail"}))),
        Preflight::Proceed
    ));
    let out = f.ok(CLI, json!({"op": "fmt", "path": "a.ail"}));
    assert_eq!(out["tool"], f.tool());
    assert!(f.log().len() > ran);
}
