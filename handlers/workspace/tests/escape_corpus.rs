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
use handler_kit::serde_json::{json, Value};
use handler_kit::{JsonObject, Outcome};
use handler_test_support::exchange;

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
    // A hard link to the outside canary (someone who could write both places planted it).
    fs::hard_link(&canary, f.path("hard_canary")).unwrap();
    f.put("sub/dir/keep.txt", "keep");
    f.put("ctl.txt", &"\u{1}".repeat(270_002));
    // Git's own data: a linked worktree's gitfile names the operator's repository by its host
    // path; a nested repository's config may hold a remote URL with credentials.
    f.put(
        ".git",
        &format!(
            "gitdir: {}\n",
            outside.join("repo/.git/worktrees/ep3").display()
        ),
    );
    f.link("gitlink", ".git");
    f.put(
        "sub/repo/.git/config",
        &format!("[remote \"origin\"]\n\turl = https://operator:{CANARY}@example.com/r.git\n"),
    );
    f.link("repolink", "sub/repo/.git");
}

fn corpus(f: &Fixture) -> Vec<Case> {
    let canary_abs = f.outside.join("canary.txt").to_string_lossy().into_owned();
    let inside_abs = f.path("sub/ok.txt").to_string_lossy().into_owned();
    // Past NAME_MAX (255), within the path limit: the file system's own refusal.
    let long_name = "n".repeat(1000);
    let huge_name = "n".repeat(5000);
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
        read("1000-byte name", &long_name, Refused("file name too long")),
        write(
            "1000-byte name write",
            &long_name,
            Refused("file name too long"),
        ),
        read(
            "5000-byte name",
            &huge_name,
            Refused("the path is 5000 bytes; the limit is 1024"),
        ),
        write(
            "5000-byte name write",
            &huge_name,
            Refused("the path is 5000 bytes; the limit is 1024"),
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
        // Names like .git, at any depth and after NFKC + case folding.
        write(".GIT", ".GIT/x", Refused("named like .git")),
        write(
            "full-width .git hook",
            "\u{ff0e}git/hooks/pre-commit",
            Refused("named like .git"),
        ),
        write(
            "full-width GIT letters",
            ".\u{ff27}\u{ff29}\u{ff34}/config",
            Refused("named like .git"),
        ),
        write(
            "zero-width space inside .git",
            ".g\u{200b}it/config",
            Refused("named like .git"),
        ),
        write(
            ".git with a trailing dot",
            ".git./config",
            Refused("named like .git"),
        ),
        write(
            "8.3 short name of .git",
            "GIT~1/config",
            Refused("named like .git"),
        ),
        write("nested gitfile", "leak1/.git", Refused("named like .git")),
        write(
            "nested .git directory",
            "sub/dir/.git/HEAD",
            Refused("named like .git"),
        ),
        edit("edit a nested .git", "sub/.GIT", Refused("named like .git")),
        write(
            "dotdot into a nested .git",
            "sub/x/../.git/config",
            Refused("named like .git"),
        ),
        // Deny globs at any depth, after folding.
        write(
            "nested .gitattributes",
            "sub/.gitattributes",
            Refused("matches fs_deny_write \".gitattributes\""),
        ),
        write(
            "nested .github",
            "sub/.github/workflows/x.yml",
            Refused("matches fs_deny_write \".github/**\""),
        ),
        write(
            "upper-case .GITHUB",
            ".GITHUB/workflows/x.yml",
            Refused("matches fs_deny_write \".github/**\""),
        ),
        write(
            "full-width .gitmodules",
            "sub/\u{ff0e}gitmodules",
            Refused("matches fs_deny_write \".gitmodules\""),
        ),
        // Reads of git's own data (the gitfile names a host path).
        read(
            "linked worktree's gitfile",
            ".git",
            Refused("git's own data, not worktree content"),
        ),
        read(
            "gitfile with a trailing slash",
            ".git/",
            Refused("git's own data, not worktree content"),
        ),
        read(
            "dotdot into the gitfile",
            "sub/../.git",
            Refused("git's own data, not worktree content"),
        ),
        read(
            "symlink to the gitfile",
            "gitlink",
            Refused("git's own data, not worktree content"),
        ),
        read(
            "nested repository's config",
            "sub/repo/.git/config",
            Refused("named like .git"),
        ),
        read(
            "case look-alike of a nested .git",
            "sub/repo/.GIT/config",
            Refused("named like .git"),
        ),
        read(
            "full-width .git read",
            "\u{ff0e}git/config",
            Refused("named like .git"),
        ),
        read(
            "symlink into a nested .git",
            "repolink/config",
            Refused("named like .git"),
        ),
        // Hard links.
        read(
            "hard link to an outside file",
            "hard_canary",
            Refused("has 2 hard links"),
        ),
        edit(
            "edit through a hard link",
            "hard_canary",
            Refused("has 2 hard links"),
        ),
        // Output size.
        read(
            "escaped result over the cap",
            "ctl.txt",
            Refused("the result would be 1620"),
        ),
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
    assert_eq!(
        cases.len(),
        documented_count(),
        "docs/plugins/workspace.md must state the corpus size"
    );
    for case in &cases {
        let out = output_of(&f, case);
        let text = handler_kit::serde_json::to_string(&out).unwrap();
        let path = case.payload["path"].as_str().unwrap();
        assert!(
            !text.contains(CANARY),
            "{}: canary leaked: {text}",
            case.name
        );
        // The requested path is echoed; nothing else may name a host path.
        let quoted = handler_kit::serde_json::to_string(path).unwrap();
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
    // No name like .git was created anywhere, and the hard link still names the canary.
    for made in [
        ".GIT",
        "\u{ff0e}git",
        "leak1",
        "GIT~1",
        ".git.",
        "sub/.GIT",
        "sub/.github",
    ] {
        assert!(!f.path(made).exists(), "{made} was created");
    }
    assert_eq!(fs::read_to_string(f.path("hard_canary")).unwrap(), CANARY);
    eprintln!("escape corpus: {} cases, 0 escapes", cases.len());
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

/// The corpus size `docs/plugins/workspace.md` states ("The escape corpus holds N cases").
fn documented_count() -> usize {
    let doc = include_str!("../../../docs/plugins/workspace.md");
    let rest = doc
        .split("The escape corpus holds ")
        .nth(1)
        .expect("docs/plugins/workspace.md states the corpus size");
    rest.split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .expect("a number of cases")
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
            let text = handler_kit::serde_json::to_string(&output).unwrap();
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

// --------------------------------------------------- regression tests named for each attack

#[test]
fn nested_gitfile_cannot_be_written() {
    // A `.git` file below the root would make git follow `gitdir:` out of the worktree.
    let f = Fixture::new();
    let gitfile = format!("gitdir: {}/.git", f.outside.display());
    for path in ["leak1/.git", "a/b/.git", "leak1/.git/HEAD"] {
        let out = f.write(path, &gitfile);
        let named = &path[..path.find(".git").unwrap() + 4];
        assert_eq!(
            refused(&out),
            format!("write {path}: \"{named}\" is named like .git (names are compared after NFKC and case folding); .git/ is read-only to the lane's tools")
        );
    }
    assert!(!f.path("leak1").exists() && !f.path("a").exists());
}

#[test]
fn look_alike_git_names_cannot_be_written() {
    let f = Fixture::new();
    for path in [
        ".GIT/hooks/pre-commit",
        "\u{ff0e}git/hooks/pre-commit",
        ".\u{ff47}\u{ff49}\u{ff54}/config",
        ".g\u{200c}it/config",
        ".git /config",
        "git~1/config",
    ] {
        let out = f.write(path, "#!/bin/sh\necho pwned\n");
        assert!(
            refused(&out).contains("is named like .git"),
            "{path}: {out:?}"
        );
    }
    assert_eq!(
        fs::read_dir(&f.root).unwrap().count(),
        0,
        "nothing was created"
    );
}

#[test]
fn deny_globs_refuse_below_the_root() {
    let f = Fixture::new();
    for (path, glob) in [
        ("sub/.gitattributes", ".gitattributes"),
        ("sub/.github/x", ".github/**"),
        ("deep/er/.claude/settings.json", ".claude/**"),
        ("vendor/.GITMODULES", ".gitmodules"),
    ] {
        assert_eq!(
            refused(&f.write(path, "x")),
            format!("write {path}: matches fs_deny_write \"{glob}\" \u{2014} read-only under this policy")
        );
    }
    assert_eq!(
        fs::read_dir(&f.root).unwrap().count(),
        0,
        "nothing was created"
    );
}

#[test]
fn hard_link_planted_in_the_worktree_is_not_read() {
    let f = Fixture::new();
    fs::hard_link(f.outside.join("canary.txt"), f.path("notes.txt")).unwrap();
    assert_eq!(
        refused(&f.read("notes.txt")),
        "read notes.txt: the file has 2 hard links; a hard link can name a file outside the worktree, so this policy reads only files with one link (the operator can allow them with allowHardLinks)"
    );
    // The operator can allow them.
    let allowed = Fixture::with_config(json!({"allowHardLinks": true}));
    fs::hard_link(
        allowed.outside.join("canary.txt"),
        allowed.path("notes.txt"),
    )
    .unwrap();
    assert_eq!(allowed.read("notes.txt")["content"], json!(CANARY));
}

#[test]
fn edit_through_a_hard_link_cannot_copy_an_outside_file_in() {
    // An edit reads the file and writes the result into the worktree: through a hard link it
    // would copy the outside file's content in, where a read could then see it.
    let f = Fixture::new();
    fs::hard_link(f.outside.join("canary.txt"), f.path("notes.txt")).unwrap();
    let out = f.edit("notes.txt", "CANARY", "COPIED");
    assert!(
        refused(&out).starts_with("edit notes.txt: the file has 2 hard links;"),
        "{out:?}"
    );
    assert_eq!(fs::read_to_string(f.path("notes.txt")).unwrap(), CANARY);
    assert_eq!(
        fs::metadata(f.path("notes.txt")).unwrap().len(),
        CANARY.len() as u64
    );
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        fs::metadata(f.path("notes.txt")).unwrap().nlink(),
        2,
        "the link is untouched"
    );
}

/// The linked worktree `worldd session new EP --repo repo` makes has a gitfile for its `.git`,
/// naming the operator's repository by its absolute host path. Reading it showed that path
/// to the agent; git's own data is not worktree content, and a read of it is declined before
/// any budget is spent.
#[test]
fn reading_dot_git_does_not_show_the_operators_host_path() {
    let f = Fixture::new();
    let gitdir = f.outside.join("repo/.git/worktrees/ep3");
    f.put(".git", &format!("gitdir: {}\n", gitdir.display()));
    f.link("gitlink", ".git");
    let host = f.tmp.path().to_string_lossy().into_owned();
    for path in [".git", "./.git", ".git/", "sub/../.git", "gitlink"] {
        let expected = format!(
            "read {path}: .git/ is git's own data, not worktree content; the lane's tools do not read it"
        );
        let payload = json!({"op": "read", "path": path});
        assert_eq!(
            f.preflight("Workspace.Read", payload).as_deref(),
            Some(expected.as_str()),
            "{path}: declined before any spend"
        );
        // The effect refuses it too (a symlink swapped in after the preflight).
        let out = f.read(path);
        assert_eq!(refused(&out), expected);
        let text = handler_kit::serde_json::to_string(&out).unwrap();
        assert!(
            !text.contains(&host) && !text.contains("gitdir"),
            "{path}: {text}"
        );
    }
}

/// A repository's `.git/` (the worktree's own, or a nested one) holds its config, whose remote
/// URLs may carry credentials, its hooks and its objects: none of it is read, however named,
/// and the rule comes before the size limit (a pack file's size is not told either).
#[test]
fn git_metadata_and_its_credentials_are_not_read() {
    let f = Fixture::new();
    let config = "[remote \"origin\"]\n\turl = https://operator:ghp_SECRET@example.com/r.git\n";
    f.put(".git/config", config);
    f.put(".git/HEAD", "ref: refs/heads/main\n");
    fs::create_dir_all(f.path(".git/objects/pack")).unwrap();
    fs::write(f.path(".git/objects/pack/big.pack"), vec![b'p'; 2_000_000]).unwrap();
    f.put("vendor/lib/.git/config", config);
    f.link("innocent", ".git/config");
    f.link("pack", ".git/objects/pack/big.pack");
    f.link("vendor/gitdir", "lib/.git");
    let own = ".git/ is git's own data, not worktree content; the lane's tools do not read it";
    let nested = format!("\"vendor/lib/.git\" is named like .git (names are compared after NFKC and case folding); {own}");
    for (path, rule) in [
        (".git/config", own.to_string()),
        (".git/HEAD", own.to_string()),
        (".git/objects/pack/big.pack", own.to_string()),
        ("a/../.git/config", own.to_string()),
        ("innocent", own.to_string()),
        ("pack", own.to_string()),
        (".git/no-such-file", own.to_string()),
        ("vendor/lib/.git/config", nested.clone()),
        ("vendor/gitdir/config", nested.clone()),
    ] {
        let expected = format!("read {path}: {rule}");
        let payload = json!({"op": "read", "path": path});
        assert_eq!(
            f.preflight("Workspace.Read", payload).as_deref(),
            Some(expected.as_str()),
            "{path}: declined before any spend"
        );
        let out = f.read(path);
        assert_eq!(refused(&out), expected);
        let text = handler_kit::serde_json::to_string(&out).unwrap();
        assert!(!text.contains("ghp_SECRET"), "{path}: {text}");
    }
    // Writes keep their own words.
    assert_eq!(
        refused(&f.write("innocent", "x")),
        "write innocent: .git/ is read-only to the lane's tools"
    );
}

/// Names that are `.git` on some file system (case, Unicode compatibility forms, ignorable
/// characters, trailing dots and spaces, the 8.3 short name) are refused to reads as `.git`
/// is, wherever they are; names that only contain `git` are read as any file.
#[test]
fn look_alike_git_names_cannot_be_read() {
    let f = Fixture::new();
    for (path, named) in [
        (".GIT/config", ".GIT"),
        (".Git/HEAD", ".Git"),
        ("\u{ff0e}git/config", "\u{ff0e}git"),
        (
            ".\u{ff47}\u{ff49}\u{ff54}/config",
            ".\u{ff47}\u{ff49}\u{ff54}",
        ),
        (".g\u{200c}it/config", ".g\u{200c}it"),
        (".git /config", ".git "),
        (".git./config", ".git."),
        ("git~1/config", "git~1"),
        ("sub/.GIT", "sub/.GIT"),
        ("deep/er/.git/config", "deep/er/.git"),
    ] {
        f.put(path, "[core]\n");
        let expected = format!(
            "read {path}: \"{named}\" is named like .git (names are compared after NFKC and case folding); .git/ is git's own data, not worktree content; the lane's tools do not read it"
        );
        let payload = json!({"op": "read", "path": path});
        assert_eq!(
            f.preflight("Workspace.Read", payload).as_deref(),
            Some(expected.as_str()),
            "{path}"
        );
        assert_eq!(refused(&f.read(path)), expected, "{path}");
    }
    for path in [
        ".gitignore",
        "x.git",
        ".github/workflows/ci.yml",
        "git/x",
        ".g-it/x",
    ] {
        f.put(path, "text\n");
        assert_eq!(
            f.preflight("Workspace.Read", json!({"op": "read", "path": path})),
            None
        );
        assert_eq!(f.read(path)["content"], json!("text\n"), "{path}");
    }
}
