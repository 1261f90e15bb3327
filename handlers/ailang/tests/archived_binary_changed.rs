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

/// The opens of one file, as inotify reports them (`IN_OPEN`; a `stat` opens nothing).
struct Opens(std::os::fd::OwnedFd);

impl Opens {
    fn watch(path: &std::path::Path) -> Opens {
        use std::os::fd::FromRawFd;
        // SAFETY: no pointer arguments; the result is checked before use.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        assert!(
            fd >= 0,
            "inotify_init1: {}",
            std::io::Error::last_os_error()
        );
        // SAFETY: `fd` was just returned by inotify_init1 and is owned by nothing else.
        let owned = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: `c` is a NUL-terminated path that outlives the call.
        let wd = unsafe { libc::inotify_add_watch(fd, c.as_ptr(), libc::IN_OPEN) };
        assert!(
            wd >= 0,
            "inotify_add_watch: {}",
            std::io::Error::last_os_error()
        );
        Opens(owned)
    }

    /// The opens since the last look (read at once: inotify folds identical events that are
    /// still unread into one).
    fn since(&self) -> usize {
        use std::os::fd::AsRawFd;
        let mut n = 0;
        let mut buf = [0u8; 4096];
        loop {
            // SAFETY: `buf` is writable for its whole length, and the fd is open.
            let got = unsafe { libc::read(self.0.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if got <= 0 {
                return n;
            }
            // Events on the watched file itself carry no name: each is one `inotify_event`.
            let size = std::mem::size_of::<libc::inotify_event>();
            let mut at = 0;
            while at + size <= got as usize {
                // SAFETY: the kernel wrote a whole event at `at`; read unaligned from the bytes.
                let ev: libc::inotify_event =
                    unsafe { std::ptr::read_unaligned(buf[at..].as_ptr().cast()) };
                if ev.mask & libc::IN_OPEN != 0 {
                    n += 1;
                }
                at += size + ev.len as usize;
            }
        }
    }
}

/// Once the copy had changed, the digest of its changed bytes was not remembered: every later
/// call (each one declined) hashed the whole binary again. A copy that stays changed is hashed
/// once; the calls after that only `stat` it, and are declined the same.
#[test]
fn an_archived_binary_that_stays_changed_is_hashed_once_not_at_every_call() {
    let f = Fixture::hosted(
        json!({}),
        Host::from_services(Arc::new(LogLines::default())),
    );
    f.put("a.ail", HELLO);
    let archived = f.handler.binary().to_path_buf();
    let mut tampered = fs::read(&archived).unwrap();
    tampered.extend_from_slice(b"\n# TAMPERED\n");
    rewrite_in_place(&archived, &tampered);
    let opens = Opens::watch(&archived);
    let mut hashed = Vec::new();
    for _ in 0..4 {
        match f
            .handler
            .preflight(&f.request(CHECK, json!({"op": "ai_check", "path": "a.ail"})))
        {
            Preflight::Decline(answer) => assert_eq!(
                Value::Object(answer),
                json!({"ok": false, "refused": ARCHIVE_CHANGED})
            ),
            other => panic!("not declined: {other:?}"),
        }
        hashed.push(opens.since());
    }
    assert_eq!(hashed, [1, 0, 0, 0], "opens of the archived copy per call");
    assert!(f.log().is_empty(), "the changed binary ran");
}
