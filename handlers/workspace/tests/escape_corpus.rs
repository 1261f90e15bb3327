//! The escape corpus: every way we could think of to make the handler read or
//! write outside the worktree. Zero escapes allowed: the canary beside the
//! worktree is never read (its text never appears in an output), never
//! written, and nothing new appears outside; no output leaks the host path.

mod common;

use std::fs;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use common::*;
use handler_api::serde_json::{json, Value};
use handler_api::{JsonObject, Outcome};

/// What a case must produce.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Expect {
    /// `{ok:false}` with the exact `escapes sandbox "<worktree>"` text.
    Escape,
    /// `{ok:false}` with a refusal containing this text.
    Refused(&'static str),
    /// `{ok:true}`: the path is an ordinary name inside the worktree.
    Inside,
}

use Expect::*;

struct Case {
    name: &'static str,
    effect: &'static str,
    payload: Value,
    expect: Expect,
}

fn read(name: &'static str, path: &str, expect: Expect) -> Case {
    Case {
        name,
        effect: "Workspace.Read",
        payload: json!({"op": "read", "path": path}),
        expect,
    }
}

fn write(name: &'static str, path: &str, expect: Expect) -> Case {
    Case {
        name,
        effect: "Workspace.Write",
        payload: json!({"op": "write", "path": path, "content": "PWNED"}),
        expect,
    }
}

fn edit(name: &'static str, path: &str, expect: Expect) -> Case {
    Case {
        name,
        effect: "Workspace.Write",
        payload: json!({"op": "edit", "path": path, "old_text": "CANARY", "new_text": "PWNED"}),
        expect,
    }
}

/// Lay out the worktree's traps. `outside` is the canary directory.
fn plant(f: &Fixture) {
    let outside = &f.outside;
    let canary = outside.join("canary.txt");
    f.put("a/b/inside.txt", "inside");
    f.put("sub/ok.txt", "ok");
    f.link("abs_file", &canary);
    f.link("rel_file", "../outside/canary.txt");
    f.link("abs_dir", outside);
    f.link("rel_dir", "../outside");
    f.link("chain1", "chain2");
    f.link("chain2", "sub/chain3");
    f.link("sub/chain3", "../../outside/canary.txt");
    f.link("dangling_abs", "/nonexistent-worldd/x");
    f.link("dangling_rel", "../outside/not-there.txt");
    f.link("sub/parent_out", "../../outside");
    f.link("root", "/");
    f.link("proc_root", "/proc/self/root");
    f.link("loop_a", "loop_b");
    f.link("loop_b", "loop_a");
    f.link("up", "..");
    f.link("a/b/up2", "../../..");
    f.link("climb", "sub/../..");
    f.link("abs_inside", f.path("sub/ok.txt"));
    f.link("dangling_out_new", outside.join("created-by-link.txt"));
}

fn corpus(f: &Fixture) -> Vec<Case> {
    let canary_abs = f.outside.join("canary.txt").to_string_lossy().into_owned();
    let inside_abs = f.path("sub/ok.txt").to_string_lossy().into_owned();
    let long_name = "n".repeat(5000);
    let deep = "a/".repeat(300) + "x";
    vec![
        // Absolute paths.
        read("absolute /etc/hosts", "/etc/hosts", Escape),
        read("absolute /etc/passwd", "/etc/passwd", Escape),
        read("/proc/self/root", "/proc/self/root/etc/hosts", Escape),
        read("/proc/self/cwd/..", "/proc/self/cwd/..", Escape),
        read("/proc/self/fd/0", "/proc/self/fd/0", Escape),
        read("double slash", "//etc/hosts", Escape),
        read("absolute canary", &canary_abs, Escape),
        read("absolute path into the worktree", &inside_abs, Escape),
        // `..` variants.
        read("dotdot", "..", Escape),
        read("dotdot canary", "../outside/canary.txt", Escape),
        read("dotdot twice", "../../etc/passwd", Escape),
        read("inner dotdot", "a/../../outside/canary.txt", Escape),
        read("dot then dotdot", "./../outside/canary.txt", Escape),
        read(
            "dotdot back in and out",
            "../wt/../outside/canary.txt",
            Escape,
        ),
        read("deep dotdot", "a/b/../../../outside/canary.txt", Escape),
        // Symlinks.
        read("symlink to absolute outside file", "abs_file", Escape),
        read("symlink to relative outside file", "rel_file", Escape),
        read(
            "symlink to outside dir (absolute)",
            "abs_dir/canary.txt",
            Escape,
        ),
        read(
            "symlink to outside dir (relative)",
            "rel_dir/canary.txt",
            Escape,
        ),
        read("symlink chain out", "chain1", Escape),
        read("dangling absolute symlink", "dangling_abs", Escape),
        read("dangling relative symlink", "dangling_rel", Escape),
        read("symlinked parent dir", "sub/parent_out/canary.txt", Escape),
        read("symlink to /", "root/etc/hosts", Escape),
        read("symlink to /proc/self/root", "proc_root/etc/hosts", Escape),
        read("symlink to ..", "up/outside/canary.txt", Escape),
        read("symlink to ../../..", "a/b/up2/outside/canary.txt", Escape),
        read(
            "symlink climbing via sub/../..",
            "climb/outside/canary.txt",
            Escape,
        ),
        read(
            "absolute symlink even into the worktree",
            "abs_inside",
            Escape,
        ),
        read(
            "symlink loop",
            "loop_a",
            Refused("too many levels of symbolic links"),
        ),
        // Writes.
        write("write absolute", "/tmp/worldd-escape-test.txt", Escape),
        write("write dotdot", "../outside/new.txt", Escape),
        write("write over outside canary via symlink", "abs_file", Escape),
        write("write over canary via relative symlink", "rel_file", Escape),
        write(
            "write into symlinked outside dir",
            "abs_dir/new.txt",
            Escape,
        ),
        write(
            "write creating dirs under outside dir",
            "rel_dir/new/deeper/f.txt",
            Escape,
        ),
        write(
            "write through dangling absolute symlink",
            "dangling_out_new",
            Escape,
        ),
        write(
            "write through dangling relative symlink",
            "dangling_rel",
            Escape,
        ),
        write(
            "write via symlinked parent",
            "sub/parent_out/canary.txt",
            Escape,
        ),
        write("write via /proc symlink", "proc_root/tmp/x", Escape),
        write(
            "write past a missing dir with ..",
            "new/../../outside/x.txt",
            Refused("no such file or directory"),
        ),
        edit("edit via symlink", "abs_file", Escape),
        edit("edit dotdot", "../outside/canary.txt", Escape),
        edit("edit via chain", "chain1", Escape),
        // Names that only look dangerous.
        read(
            "NUL byte",
            "canary\0/../../outside/canary.txt",
            Refused("NUL byte"),
        ),
        write("NUL byte write", "x\0y", Refused("NUL byte")),
        read("5000-byte name", &long_name, Refused("file name too long")),
        write(
            "5000-byte name write",
            &long_name,
            Refused("file name too long"),
        ),
        read(
            "300 components",
            &deep,
            Refused("no such file or directory"),
        ),
        read(
            "U+2215 division slash",
            "..\u{2215}outside\u{2215}canary.txt",
            Refused("no such file or directory"),
        ),
        read(
            "U+FF0E fullwidth dots",
            "\u{ff0e}\u{ff0e}/outside/canary.txt",
            Refused("no such file or directory"),
        ),
        write(
            "U+FF0E write stays inside",
            "\u{ff0e}\u{ff0e}/x.txt",
            Inside,
        ),
        write("U+2215 write stays inside", "..\u{2215}x.txt", Inside),
        write("U+2024 one dot leader", "\u{2024}\u{2024}/y.txt", Inside),
        read(
            "percent-encoded dots",
            "%2e%2e/outside/canary.txt",
            Refused("no such file or directory"),
        ),
        read(
            "backslashes",
            "..\\outside\\canary.txt",
            Refused("no such file or directory"),
        ),
        read("tilde", "~/.bashrc", Refused("no such file or directory")),
        read(
            "dollar HOME",
            "$HOME/.bashrc",
            Refused("no such file or directory"),
        ),
        read(
            "leading space",
            " /etc/hosts",
            Refused("no such file or directory"),
        ),
        read(
            "relative proc",
            "proc/self/root/etc/hosts",
            Refused("no such file or directory"),
        ),
        // Policy paths.
        write(".git", ".git/config", Refused(".git/ is read-only")),
        write(
            "dotdot into .git",
            "sub/../.git/config",
            Refused(".git/ is read-only"),
        ),
        write(
            "deny glob",
            ".ailang/x.ail",
            Refused("matches fs_deny_write"),
        ),
        write(".GIT is a plain name here", ".GIT/x", Inside),
    ]
}

fn output_of(f: &Fixture, case: &Case) -> JsonObject {
    match f.run(case.effect, case.payload.clone()) {
        Outcome::Ok { output } => output,
        other => panic!("{}: expected an ok outcome, got {other:?}", case.name),
    }
}

#[test]
fn escape_corpus_has_zero_escapes() {
    let f = Fixture::new();
    plant(&f);
    let before = f.outside_snapshot();
    let host_path = f.tmp.path().to_string_lossy().into_owned();
    let cases = corpus(&f);
    assert!(cases.len() >= 40, "the corpus has {} cases", cases.len());
    for case in &cases {
        let out = output_of(&f, case);
        let text = handler_api::serde_json::to_string(&out).unwrap();
        let path = case.payload["path"].as_str().unwrap();
        assert!(
            !text.contains(CANARY),
            "{}: canary leaked: {text}",
            case.name
        );
        // The requested path is echoed; nothing else may name a host path.
        let quoted = handler_api::serde_json::to_string(path).unwrap();
        let without_request = text.replace(&quoted[1..quoted.len() - 1], "");
        assert!(
            !without_request.contains(&host_path),
            "{}: host path leaked: {text}",
            case.name
        );
        let op = case.payload["op"].as_str().unwrap();
        match case.expect {
            Escape => assert_eq!(
                refused(&out),
                format!("{op} {path}: path \"{path}\" escapes sandbox \"<worktree>\""),
                "{}",
                case.name
            ),
            Refused(part) => {
                let r = refused(&out);
                assert!(r.contains(part), "{}: {r:?} lacks {part:?}", case.name);
                assert!(!r.contains("escapes sandbox"), "{}: {r}", case.name);
            }
            Inside => assert!(is_ok(&out), "{}: {out:?}", case.name),
        }
        assert_eq!(
            f.outside_snapshot(),
            before,
            "{}: the outside changed",
            case.name
        );
    }
    // The look-alike writes landed inside, under their literal names.
    assert_eq!(
        fs::read_to_string(f.path("\u{ff0e}\u{ff0e}/x.txt")).unwrap(),
        "PWNED"
    );
    assert_eq!(
        fs::read_to_string(f.path("..\u{2215}x.txt")).unwrap(),
        "PWNED"
    );
    assert!(!Path::new("/tmp/worldd-escape-test.txt").exists());
    assert!(!f.outside.join("created-by-link.txt").exists());
    // Symlinks that were refused are still symlinks (never replaced or followed).
    assert!(fs::symlink_metadata(f.path("abs_file"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(
        fs::read_to_string(f.outside.join("canary.txt")).unwrap(),
        CANARY
    );
}

/// Atomically exchange two names (RENAME_EXCHANGE), so there is never a
/// moment without either.
fn exchange(a: &Path, b: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let a = std::ffi::CString::new(a.as_os_str().as_bytes()).unwrap();
    let b = std::ffi::CString::new(b.as_os_str().as_bytes()).unwrap();
    // SAFETY: two valid NUL-terminated paths; AT_FDCWD-relative (absolute).
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    assert_eq!(rc, 0, "renameat2: {}", std::io::Error::last_os_error());
}

#[test]
fn racing_symlink_swaps_never_escape() {
    let f = Fixture::new();
    // `d` flips between a real directory and a symlink to the outside dir;
    // `g` flips between a regular file and a symlink to the canary.
    fs::write(f.outside.join("f"), CANARY).unwrap();
    f.put("d/f", "INSIDE");
    f.link("d.alt", &f.outside);
    f.put("g", "INSIDE");
    f.link("g.alt", f.outside.join("canary.txt"));
    let before = f.outside_snapshot();

    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicUsize::new(0));
    let swapper = {
        let (stop, swaps) = (stop.clone(), swaps.clone());
        let (d, d_alt, g, g_alt) = (f.path("d"), f.path("d.alt"), f.path("g"), f.path("g.alt"));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                exchange(&d, &d_alt);
                exchange(&g, &g_alt);
                swaps.fetch_add(1, Ordering::Relaxed);
            }
        })
    };

    let iterations = 1500;
    let (mut inside_reads, mut refusals, mut writes) = (0, 0, 0);
    for i in 0..iterations {
        let payloads = [
            ("Workspace.Read", json!({"op": "read", "path": "d/f"})),
            ("Workspace.Read", json!({"op": "read", "path": "g"})),
            (
                "Workspace.Write",
                json!({"op": "write", "path": "d/f", "content": format!("INSIDE {i}")}),
            ),
            (
                "Workspace.Write",
                json!({"op": "write", "path": "g", "content": format!("INSIDE {i}")}),
            ),
            (
                "Workspace.Write",
                json!({"op": "edit", "path": "d/f", "old_text": "INSIDE", "new_text": "INSIDE"}),
            ),
        ];
        for (effect, payload) in payloads {
            let Outcome::Ok { output } = f.run(effect, payload.clone()) else {
                panic!("{payload}: not an ok outcome")
            };
            let text = handler_api::serde_json::to_string(&output).unwrap();
            assert!(
                !text.contains(CANARY),
                "iteration {i}: {payload} read the canary: {text}"
            );
            if is_ok(&output) {
                if payload["op"] == "read" {
                    assert!(
                        output["content"].as_str().unwrap().starts_with("INSIDE"),
                        "{text}"
                    );
                    inside_reads += 1;
                } else {
                    writes += 1;
                }
            } else {
                refusals += 1;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();

    assert_eq!(
        f.outside_snapshot(),
        before,
        "something outside the worktree changed"
    );
    assert_eq!(fs::read_to_string(f.outside.join("f")).unwrap(), CANARY);
    assert_eq!(
        fs::read_to_string(f.outside.join("canary.txt")).unwrap(),
        CANARY
    );
    eprintln!(
        "race: {} swaps, {inside_reads} inside reads, {writes} writes, {refusals} refusals, 0 escapes",
        swaps.load(Ordering::Relaxed)
    );
    assert!(
        swaps.load(Ordering::Relaxed) > 100,
        "the swapper barely ran"
    );
}
