//! Attack: a missing directory followed by `..` in a path argument. `module` carries no plan
//! rule, so `ailang-cli iface missing/../od/secret` reached the handler, whose walk stopped at
//! the missing name (the binary's to answer) before judging the `..` after it: the call ran,
//! a unit spent, and the binary got the string as is. The kernel fails `missing/..`, but a
//! binary that shortens the path as text (Go's `filepath.Clean`) reads `od/secret`, through a
//! link out of the worktree, into another episode's, a hard-linked outside file or a FIFO,
//! each of which the same path without the detour is refused. A `..` segment in any path
//! argument is now declined by the preflight (nothing spent) and refused by the effect if it
//! comes anyway; the binary never runs.

mod common;

use std::ffi::CString;
use std::fs;

use common::*;
use handler_kit::serde_json::{json, Value};
use handler_kit::{EffectHandler, Preflight};
use worldd_ailang::{CHECK, CLI, DOT_DOT, RUN};

fn mkfifo(path: &std::path::Path) {
    let c = CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path; mkfifo touches nothing else.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// The worktree with a link out of it (`od`), a link to another episode's worktree (`eb`), a
/// hard link to a file outside (`hl.ail`) and a FIFO (`ff`).
fn planted() -> Fixture {
    let f = Fixture::new();
    let worktrees = f.root.parent().unwrap().to_path_buf();
    fs::create_dir_all(worktrees.join("epb")).unwrap();
    fs::write(worktrees.join("epb/README"), "SECRET-EPB").unwrap();
    let outside = f.tmp.path().join("outside");
    fs::create_dir_all(&outside).unwrap();
    fs::write(outside.join("secret"), "SECRET").unwrap();
    std::os::unix::fs::symlink(&outside, f.root.join("od")).unwrap();
    std::os::unix::fs::symlink("../epb", f.root.join("eb")).unwrap();
    fs::hard_link(outside.join("secret"), f.root.join("hl.ail")).unwrap();
    mkfifo(&f.root.join("ff"));
    f.put("inside/hello.ail", HELLO);
    f
}

#[test]
fn a_dot_dot_segment_in_a_path_argument_is_declined_and_the_binary_never_runs() {
    let f = planted();
    let mut cases = Vec::new();
    for module in [
        "missing/../od/secret",
        "missing/../eb/README",
        "missing/../hl.ail",
        "missing/../ff",
        "inside/../od/secret",
        "..",
    ] {
        for op in ["iface", "pkg_docs", "builtins_show"] {
            cases.push((CLI, json!({"op": op, "module": module}), "module", module));
        }
    }
    // The plans refuse `..` in `path` and `package`; a daemon that calls the handler anyway
    // (or another transition's plan) gets the same answer.
    for path in ["missing/../od/secret", "missing/../hl.ail"] {
        cases.push((CLI, json!({"op": "fmt", "path": path}), "path", path));
        cases.push((CLI, json!({"op": "test", "package": path}), "package", path));
        cases.push((CHECK, json!({"op": "ai_check", "path": path}), "path", path));
        cases.push((RUN, json!({"op": "run", "path": path}), "path", path));
    }
    for (effect, payload, key, value) in cases {
        let why = format!("argument \"{key}\" \"{value}\": {DOT_DOT}");
        match f.handler.preflight(&f.request(effect, payload.clone())) {
            Preflight::Decline(answer) => assert_eq!(
                Value::Object(answer),
                json!({"ok": false, "refused": why}),
                "{effect} {payload}"
            ),
            other => panic!("{effect} {payload}: not declined: {other:?}"),
        }
        // A daemon that skips the preflight still runs nothing.
        assert_eq!(
            f.failed(effect, payload.clone()),
            format!("broker: {effect} refused: {why}"),
            "{payload}"
        );
    }
    assert!(f.log().is_empty(), "the binary ran: {:?}", f.log());
    assert_eq!(
        DOT_DOT,
        "a \"..\" segment is not admitted in a path argument (the binary may shorten the path as text, not as the kernel resolves it); nothing ran"
    );
}

/// A name that only starts with dots is no `..` segment, and a missing name without one is
/// still the binary's to answer.
#[test]
fn names_with_dots_and_missing_names_without_dot_dot_still_run() {
    let f = planted();
    f.put("..a/m.ail", HELLO);
    for payload in [
        json!({"op": "iface", "module": "..a/m"}),
        json!({"op": "iface", "module": "std/fs"}),
        json!({"op": "iface", "module": "missing/x..y"}),
    ] {
        let request = f.request(CLI, payload.clone());
        assert!(
            matches!(f.handler.preflight(&request), Preflight::Proceed),
            "{payload}"
        );
        assert_eq!(f.ok(CLI, payload.clone())["ok"], true, "{payload}");
    }
}
