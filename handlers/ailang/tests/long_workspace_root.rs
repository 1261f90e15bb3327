//! The preflight walks path arguments beneath the opened worktree (`/proc/self/fd/N`), as the
//! effect does: under a long workspace root (an operator's choice), a walk from the full
//! worktree path met PATH_MAX early and declined a 1.1 KB link as "the path's links expand
//! past 4096 bytes".

mod common;

use std::fs;

use common::*;
use handler_kit::serde_json::json;
use handler_kit::{EffectHandler, Preflight};
use worldd_ailang::CHECK;

#[test]
fn a_short_link_under_a_long_workspace_root_passes_the_preflight_and_runs() {
    let Fixture {
        tmp,
        state,
        handler,
        ..
    } = Fixture::new();
    // Twelve 250-byte components: a worktree path of about 3 KB.
    let long: std::path::PathBuf = (0..12)
        .map(|i| format!("{i:02}{}", "r".repeat(248)))
        .collect();
    let root = tmp.path().join(long).join(EPISODE);
    fs::create_dir_all(&root).unwrap();
    let f = Fixture {
        tmp,
        root,
        state,
        handler,
    };
    // `l -> a/…/a/f.ail`, 550 levels: a 1,106-byte target, made beside and moved in (its
    // full path under the root is past PATH_MAX).
    let deep = vec!["a"; 550].join("/");
    let beside = f.tmp.path().join("beside");
    fs::create_dir_all(beside.join(&deep)).unwrap();
    fs::write(beside.join(&deep).join("f.ail"), program("ok", "IO")).unwrap();
    fs::rename(beside.join("a"), f.root.join("a")).unwrap();
    std::os::unix::fs::symlink(format!("{deep}/f.ail"), f.root.join("l")).unwrap();
    assert!(f.root.as_os_str().len() + 1 + deep.len() + 6 > 4096);

    let payload = json!({"op": "ai_check", "path": "l"});
    let preflight = f.handler.preflight(&f.request(CHECK, payload.clone()));
    assert!(matches!(preflight, Preflight::Proceed), "{preflight:?}");
    let out = f.ok(CHECK, payload);
    assert_eq!(out["ok"], json!(true), "{out:?}");
    assert_eq!(f.ran("policy-tool", Some("ai_check")), 1);
}

/// `depth` nested directories `a` under `root`, made with relative system calls (their path
/// passes PATH_MAX), and the files `names` at the bottom.
fn deep_dirs(root: &std::path::Path, depth: usize, names: &[&str]) {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let a = CString::new("a").unwrap();
    let root = CString::new(root.as_os_str().as_bytes()).unwrap();
    // SAFETY: a NUL-terminated path; the descriptor is closed below.
    let mut fd = unsafe { libc::open(root.as_ptr(), libc::O_DIRECTORY | libc::O_RDONLY) };
    assert!(fd >= 0);
    for _ in 0..depth {
        // SAFETY: `fd` is an open directory, `a` NUL-terminated.
        assert_eq!(unsafe { libc::mkdirat(fd, a.as_ptr(), 0o755) }, 0);
        // SAFETY: as above.
        let next = unsafe { libc::openat(fd, a.as_ptr(), libc::O_DIRECTORY | libc::O_RDONLY) };
        assert!(next >= 0);
        // SAFETY: `fd` is ours and no longer used.
        unsafe { libc::close(fd) };
        fd = next;
    }
    let text = CString::new(program("ok", "IO")).unwrap();
    for name in names {
        let name = CString::new(*name).unwrap();
        // SAFETY: `fd` is an open directory, `name` NUL-terminated.
        let file = unsafe {
            libc::openat(
                fd,
                name.as_ptr(),
                libc::O_CREAT | libc::O_WRONLY | libc::O_EXCL,
                0o644,
            )
        };
        assert!(file >= 0);
        let bytes = text.as_bytes();
        // SAFETY: `file` is open for writing, `bytes` readable for its length.
        let n = unsafe { libc::write(file, bytes.as_ptr().cast(), bytes.len()) };
        assert_eq!(n, bytes.len() as isize);
        // SAFETY: `file` is ours.
        unsafe { libc::close(file) };
    }
    // SAFETY: `fd` is ours.
    unsafe { libc::close(fd) };
}

/// The bound is the workspace plugin's: a path whose links expand to 4,096 bytes beneath the
/// worktree is checked (it was declined at 4,079 and up, the length of `/proc/self/fd/N/`
/// counted in), one of 4,097 is refused.
#[test]
fn links_expanding_to_4096_bytes_are_checked_and_to_4097_refused_as_by_the_workspace_plugin() {
    let f = Fixture::new();
    deep_dirs(&f.root, 2046, &["f", "ff", "fff"]);
    let deep = "a/".repeat(2046);
    // "X" + "/" + 4,093 bytes: 4,095; Y: 4,096; Z: 4,097.
    for (link, name) in [("X", "f"), ("Y", "ff"), ("Z", "fff")] {
        std::os::unix::fs::symlink(format!("{deep}{name}"), f.root.join(link)).unwrap();
    }
    for link in ["X", "Y"] {
        let payload = json!({"op": "ai_check", "path": link});
        let preflight = f.handler.preflight(&f.request(CHECK, payload.clone()));
        assert!(
            matches!(preflight, Preflight::Proceed),
            "{link}: {preflight:?}"
        );
        let out = f.ok(CHECK, payload);
        assert_eq!(out["ok"], json!(true), "{link}: {out:?}");
    }
    let payload = json!({"op": "ai_check", "path": "Z"});
    match f.handler.preflight(&f.request(CHECK, payload)) {
        Preflight::Decline(answer) => assert_eq!(
            answer["refused"],
            json!("argument \"path\" \"Z\": the path's links expand past 4096 bytes; cannot be checked; nothing ran")
        ),
        other => panic!("not declined: {other:?}"),
    }
    assert_eq!(f.ran("policy-tool", Some("ai_check")), 2);
}
