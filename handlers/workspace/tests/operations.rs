//! read / write / edit behaviour, request checks, config and identity.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;

use common::*;
use handler_kit::serde_json::{json, Value};
use handler_kit::{EffectClass, Host, Outcome, Plugin};
use handler_test_support::sha256_hex;
use worldd_workspace::{Policy, WorkspacePlugin, DEFAULT_MAX_READ_BYTES, MAX_PATH_BYTES};

fn is_sha256_ref(s: &str) -> bool {
    s.len() == 71
        && s.starts_with("sha256:")
        && s[7..]
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

// ------------------------------------------------------------------- read

#[test]
fn read_returns_content_tool_and_policy_digest() {
    let f = Fixture::new();
    f.put("src/main.ail", "module main\n");
    let out = f.read("src/main.ail");
    assert_eq!(out["ok"], json!(true));
    assert_eq!(out["content"], json!("module main\n"));
    assert!(is_sha256_ref(out["tool"].as_str().unwrap()), "{out:?}");
    let digest = out["policy_digest"].as_str().unwrap();
    assert_eq!(digest.len(), 64);
    assert_eq!(digest, f.handler.policy_digest());
    assert_eq!(out.len(), 4, "{out:?}");
}

#[test]
fn read_missing_file_uses_the_reference_text() {
    let f = Fixture::new();
    assert_eq!(
        refused(&f.read("nope.ail")),
        "read nope.ail: openat nope.ail: no such file or directory"
    );
    assert_eq!(
        refused(&f.read("no/such/dir.ail")),
        "read no/such/dir.ail: openat no/such/dir.ail: no such file or directory"
    );
}

#[test]
fn read_outside_uses_the_reference_text() {
    let f = Fixture::new();
    let out = f.read("/etc/hosts");
    assert_eq!(
        refused(&out),
        "read /etc/hosts: path \"/etc/hosts\" escapes sandbox \"<worktree>\""
    );
    // Refusals are stamped too.
    assert!(is_sha256_ref(out["tool"].as_str().unwrap()));
    assert_eq!(out["policy_digest"], json!(f.handler.policy_digest()));
}

#[test]
fn read_refuses_non_utf8() {
    let f = Fixture::new();
    fs::write(f.path("bin.dat"), [b'o', b'k', 0xff, 0xfe]).unwrap();
    assert_eq!(
        refused(&f.read("bin.dat")),
        "read bin.dat: the file is not UTF-8 text (invalid byte at offset 2); this tool reads text files only"
    );
}

#[test]
fn read_refuses_files_over_the_limit_up_front() {
    let f = Fixture::new();
    fs::write(f.path("big.txt"), vec![b'a'; 2_000_000]).unwrap();
    assert_eq!(
        refused(&f.read("big.txt")),
        "read big.txt: file is 2000000 bytes; the limit is 1048576"
    );
    let small = Fixture::with_config(json!({"maxReadBytes": 3}));
    small.put("four.txt", "abcd");
    assert_eq!(
        refused(&small.read("four.txt")),
        "read four.txt: file is 4 bytes; the limit is 3"
    );
}

/// The `world` block the daemon adds to a read's result, written out.
const WORLD_BLOCK: &str = r#","world":{"effects":[{"id":"e1","record":"sha256:0000000000000000000000000000000000000000000000000000000000000000","status":"ok"}],"plan":"sha256:0000000000000000000000000000000000000000000000000000000000000000"}"#;

/// The committed size of a read's result, computed from the JSON itself.
fn result_size(f: &Fixture, content: &str) -> usize {
    let body = json!({"content": content, "ok": true,
                      "policy_digest": f.handler.policy_digest(), "tool": f.handler.tool()});
    handler_kit::serde_json::to_string(&body).unwrap().len() + WORLD_BLOCK.len()
}

#[test]
fn read_limit_bounds_the_result_not_the_file() {
    // The limit is the result's size: a file one byte smaller than the limit is refused,
    // because its result carries quotes, stamps and the world block.
    let f = Fixture::new();
    fs::write(
        f.path("edge.txt"),
        vec![b'a'; DEFAULT_MAX_READ_BYTES as usize - 1],
    )
    .unwrap();
    let expected = result_size(&f, &"a".repeat(DEFAULT_MAX_READ_BYTES as usize - 1));
    assert_eq!(
        refused(&f.read("edge.txt")),
        format!("read edge.txt: the result would be {expected} bytes: 1048575 of the file, 0 of JSON escaping and {} of the result's other fields (ok, tool, policy_digest, world); the limit is 1048576, so a file of plain text can be read up to {} bytes", expected - 1048575, 1048576 - (expected - 1048575))
    );
    // A result of exactly the limit is returned; one byte more is refused.
    let limit = 1000;
    let f = Fixture::with_config(json!({"maxReadBytes": limit}));
    let overhead = result_size(&f, "");
    let fits = "a\n".repeat((limit - overhead) / 3) + &"a".repeat((limit - overhead) % 3);
    assert_eq!(result_size(&f, &fits), limit);
    f.put("fits.txt", &fits);
    assert_eq!(f.read("fits.txt")["content"], json!(fits));
    f.put("over.txt", &format!("{fits}a"));
    assert_eq!(
        refused(&f.read("over.txt")),
        format!(
            "read over.txt: the result would be 1001 bytes: {} of the file, {} of JSON escaping and {overhead} of the result's other fields (ok, tool, policy_digest, world); the limit is 1000, so a file of plain text can be read up to {} bytes",
            fits.len() + 1,
            1001 - (fits.len() + 1) - overhead,
            limit - overhead
        )
    );
}

/// A file the agent just wrote, plain text under 1 MiB, is refused on read because the
/// result's other fields (ok, tool, policy_digest, world) pass the limit: the refusal names
/// them and how big a plain file may be, not an escaping that is not there.
#[test]
fn a_plain_text_read_over_the_limit_names_the_envelope_not_json_escaping_and_the_largest_readable_file(
) {
    let f = Fixture::new();
    let content = "b".repeat(1_048_500);
    assert!(is_ok(&f.write("rt.txt", &content)));
    let refusal = "read rt.txt: the result would be 1048900 bytes: 1048500 of the file, 0 of JSON escaping and 400 of the result's other fields (ok, tool, policy_digest, world); the limit is 1048576, so a file of plain text can be read up to 1048176 bytes";
    assert_eq!(
        f.preflight("Workspace.Read", json!({"op": "read", "path": "rt.txt"})),
        Some(refusal.to_string())
    );
    assert_eq!(refused(&f.read("rt.txt")), refusal);
    // The largest file the refusal names is read.
    f.put("rt.txt", &"b".repeat(1_048_176));
    assert!(is_ok(&f.read("rt.txt")));
    f.put("rt.txt", &"b".repeat(1_048_177));
    assert!(refused(&f.read("rt.txt")).starts_with(
        "read rt.txt: the result would be 1048577 bytes: 1048177 of the file, 0 of JSON escaping"
    ));
}

#[test]
fn read_of_control_characters_whose_escaped_result_exceeds_the_cap_is_refused_up_front() {
    // 270,002 bytes of U+0001 pass any raw-size limit, but each escapes to six bytes
    // (`\u0001`): the result would be 1.6 MB, over the coordinator's 1 MiB cap.
    let f = Fixture::new();
    let content = "\u{1}".repeat(270_002);
    f.put("ctl.txt", &content);
    let expected = result_size(&f, &content);
    assert_eq!(
        expected, 1_620_412,
        "the size docs/plugins/workspace.md quotes"
    );
    assert_eq!(
        refused(&f.read("ctl.txt")),
        format!("read ctl.txt: the result would be {expected} bytes: 270002 of the file, 1350010 of JSON escaping and 400 of the result's other fields (ok, tool, policy_digest, world); the limit is 1048576, so a file of plain text can be read up to 1048176 bytes")
    );
    // Every escape form is counted: short escapes, quotes, backslashes, other controls.
    let mixed = "\"\\\u{8}\t\n\u{c}\r\u{1f}\u{7f}\u{e9}\u{2028}x";
    let f = Fixture::with_config(json!({"maxReadBytes": result_size(&f, mixed)}));
    f.put("mixed.txt", mixed);
    assert!(is_ok(&f.read("mixed.txt")));
    let f2 = Fixture::with_config(json!({"maxReadBytes": result_size(&f, mixed) - 1}));
    f2.put("mixed.txt", mixed);
    assert!(refused(&f2.read("mixed.txt")).contains("the result would be"));
}

#[test]
fn preflight_declines_what_the_read_limit_would_refuse_with_the_same_words() {
    let read = |path: &str| json!({"op": "read", "path": path});
    let f = Fixture::new();
    // A result over the limit, and a file over it, are declined before the effect, in the
    // words the effect itself would use.
    f.put("ctl.txt", &"\u{1}".repeat(270_002));
    fs::write(f.path("big.txt"), vec![b'a'; 2_000_000]).unwrap();
    for path in ["ctl.txt", "big.txt"] {
        let declined = f.preflight("Workspace.Read", read(path));
        assert_eq!(declined.as_deref(), Some(refused(&f.read(path))), "{path}");
    }
    assert_eq!(
        f.preflight("Workspace.Read", read("big.txt")).unwrap(),
        "read big.txt: file is 2000000 bytes; the limit is 1048576"
    );
    // Everything else proceeds, to be answered by the effect at its usual cost: a file that
    // fits (small, or large and plain), a missing file, an escape, a hard-linked file (its
    // size is not the agent's to learn for free), text that is not UTF-8, a malformed request.
    f.put("small.txt", "hello");
    fs::write(f.path("plain.txt"), vec![b'a'; 900_000]).unwrap();
    fs::hard_link(f.path("big.txt"), f.path("linked.txt")).unwrap();
    fs::write(f.path("bin.dat"), vec![0xff; 400_000]).unwrap();
    for path in [
        "small.txt",
        "plain.txt",
        "nope",
        "../outside/canary.txt",
        "linked.txt",
        "bin.dat",
    ] {
        assert_eq!(f.preflight("Workspace.Read", read(path)), None, "{path}");
    }
    assert_eq!(
        f.preflight(
            "Workspace.Read",
            json!({"op": "read", "path": "big.txt", "Path": "x"})
        ),
        None
    );
    // A smaller limit moves the line with it.
    let f = Fixture::with_config(json!({"maxReadBytes": 1000}));
    f.put("a.txt", &"a".repeat(1000));
    assert_eq!(
        f.preflight("Workspace.Read", read("a.txt")).as_deref(),
        Some(refused(&f.read("a.txt")))
    );
}

#[test]
fn preflight_declines_a_write_over_the_write_limit_and_leaves_edits_to_the_effect() {
    let f = Fixture::with_config(json!({"maxWriteBytes": 10}));
    let big = json!({"op": "write", "path": "a.txt", "content": "x".repeat(11)});
    assert_eq!(
        f.preflight("Workspace.Write", big.clone()).as_deref(),
        Some("write a.txt: content is 11 bytes; the limit is 10")
    );
    assert_eq!(
        refused(&f.out("Workspace.Write", big)),
        "write a.txt: content is 11 bytes; the limit is 10"
    );
    let fits = json!({"op": "write", "path": "a.txt", "content": "x".repeat(10)});
    assert_eq!(f.preflight("Workspace.Write", fits), None);
    let edit = json!({"op": "edit", "path": "a.txt", "old_text": "x", "new_text": "y".repeat(20)});
    assert_eq!(f.preflight("Workspace.Write", edit), None);
    assert!(!f.path("a.txt").exists());
}

#[test]
fn read_refuses_directories_and_special_files() {
    let f = Fixture::new();
    fs::create_dir(f.path("dir")).unwrap();
    assert_eq!(
        refused(&f.read("dir")),
        "read dir: dir is a directory, not a file"
    );
    assert_eq!(
        refused(&f.read(".")),
        "read .: . is a directory, not a file"
    );
    let fifo = std::ffi::CString::new(f.path("pipe").to_string_lossy().as_bytes()).unwrap();
    // SAFETY: plain mkfifo on a path we own.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    // Must answer, not block waiting for a writer.
    assert_eq!(
        refused(&f.read("pipe")),
        "read pipe: pipe is not a regular file"
    );
    f.put("file", "x");
    assert_eq!(
        refused(&f.read("file/")),
        "read file/: openat file/: not a directory"
    );
    assert_eq!(
        refused(&f.read("file/x")),
        "read file/x: openat file/x: not a directory"
    );
}

#[test]
fn read_follows_symlinks_that_stay_inside() {
    let f = Fixture::new();
    f.put("real/a.txt", "inside");
    f.link("l1", "real/a.txt");
    f.link("dir/l2", "../l1");
    f.link("rdir", "real");
    assert_eq!(f.read("l1")["content"], json!("inside"));
    assert_eq!(f.read("dir/l2")["content"], json!("inside"));
    assert_eq!(f.read("rdir/a.txt")["content"], json!("inside"));
    assert_eq!(f.read("rdir/../real/a.txt")["content"], json!("inside"));
}

// ------------------------------------------------------------------ write

#[test]
fn write_creates_parents_and_reports_bytes() {
    let f = Fixture::new();
    let out = f.write("a/b/c.txt", "héllo");
    assert_eq!(out["ok"], json!(true));
    assert_eq!(out["bytes"], json!(6));
    assert!(is_sha256_ref(out["tool"].as_str().unwrap()));
    assert_eq!(fs::read_to_string(f.path("a/b/c.txt")).unwrap(), "héllo");
    // Overwrite, and no temporary file left behind.
    f.write("a/b/c.txt", "");
    assert_eq!(fs::read_to_string(f.path("a/b/c.txt")).unwrap(), "");
    let names: Vec<_> = fs::read_dir(f.path("a/b"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("c.txt")]);
}

#[test]
fn write_keeps_permission_bits() {
    let f = Fixture::new();
    f.put("run.sh", "#!/bin/sh\n");
    fs::set_permissions(f.path("run.sh"), fs::Permissions::from_mode(0o750)).unwrap();
    f.write("run.sh", "#!/bin/sh\necho hi\n");
    assert_eq!(
        fs::metadata(f.path("run.sh")).unwrap().permissions().mode() & 0o777,
        0o750
    );
}

/// Attack: a file planted with mode 06755 (setuid and setgid, by its owner or by a checkout)
/// and then written by the agent became a 06755 file owned by the daemon's user holding the
/// agent's content: the write kept every permission bit on the new inode it renames in. A
/// write or edit keeps the other bits and drops setuid and setgid, as the kernel does when
/// someone other than the owner writes a file.
#[test]
fn a_write_or_edit_over_a_setuid_setgid_file_leaves_it_without_those_bits() {
    let f = Fixture::new();
    let mode = |rel: &str| fs::metadata(f.path(rel)).unwrap().permissions().mode() & 0o7777;
    for (rel, op) in [("written.sh", "write"), ("edited.sh", "edit")] {
        f.put(rel, "#!/bin/sh\necho original\n");
        fs::set_permissions(f.path(rel), fs::Permissions::from_mode(0o6755)).unwrap();
        assert_eq!(mode(rel), 0o6755, "the plant took");
        let out = if op == "write" {
            f.write(rel, "#!/bin/sh\nid\n")
        } else {
            f.edit(rel, "echo original", "id")
        };
        assert!(is_ok(&out), "{op}: {out:?}");
        assert_eq!(fs::read_to_string(f.path(rel)).unwrap(), "#!/bin/sh\nid\n");
        assert_eq!(mode(rel), 0o755, "{op} {rel}: mode {:o}", mode(rel));
    }
    // The sticky bit is no privilege: kept with the rest.
    f.put("sticky.txt", "x");
    fs::set_permissions(f.path("sticky.txt"), fs::Permissions::from_mode(0o1640)).unwrap();
    f.write("sticky.txt", "y");
    assert_eq!(mode("sticky.txt"), 0o1640);
}

#[test]
fn write_through_an_inside_symlink_replaces_its_target() {
    let f = Fixture::new();
    f.put("a.txt", "old");
    f.link("link", "a.txt");
    f.write("link", "new");
    assert_eq!(fs::read_to_string(f.path("a.txt")).unwrap(), "new");
    assert!(fs::symlink_metadata(f.path("link"))
        .unwrap()
        .file_type()
        .is_symlink());
    // A dangling inside link: the write creates its target.
    f.link("dangling", "made.txt");
    f.write("dangling", "made");
    assert_eq!(fs::read_to_string(f.path("made.txt")).unwrap(), "made");
}

#[test]
fn write_refuses_git() {
    let f = Fixture::new();
    f.put(".git/config", "[core]\n");
    for path in [
        ".git/config",
        "./.git/config",
        "a/../.git/config",
        ".git/hooks/pre-commit",
        ".git",
        ".git/",
    ] {
        let text = refused(&f.write(path, "x")).to_string();
        assert_eq!(
            text,
            format!("write {path}: .git/ is read-only to the lane's tools")
        );
    }
    // Laundering through a symlink does not help.
    f.link("innocent", ".git/config");
    assert_eq!(
        refused(&f.write("innocent", "x")),
        "write innocent: .git/ is read-only to the lane's tools"
    );
    f.link("gitdir", ".git");
    assert_eq!(
        refused(&f.write("gitdir/config", "x")),
        "write gitdir/config: .git/ is read-only to the lane's tools"
    );
    assert_eq!(
        fs::read_to_string(f.path(".git/config")).unwrap(),
        "[core]\n"
    );
    // Reading .git is refused too: git's own data is not worktree content.
    assert_eq!(
        refused(&f.read(".git/config")),
        "read .git/config: .git/ is git's own data, not worktree content; the lane's tools do not read it"
    );
    // Names like .git are refused at any depth, compared after NFKC and case folding.
    for (path, named) in [
        (".GIT/x", ".GIT"),
        ("\u{ff0e}git/hooks/pre-commit", "\u{ff0e}git"),
        ("sub/.git", "sub/.git"),
        ("leak1/.git", "leak1/.git"),
        ("a/.Git/config", "a/.Git"),
        ("a/.git./x", "a/.git."),
    ] {
        assert_eq!(
            refused(&f.write(path, "gitdir: /elsewhere/.git")),
            format!("write {path}: \"{named}\" is named like .git (names are compared after NFKC and case folding); .git/ is read-only to the lane's tools")
        );
    }
    assert!(!f.path(".GIT").exists() && !f.path("leak1").exists() && !f.path("sub").exists());
    // Edits too.
    assert_eq!(
        refused(&f.edit(".git/config", "core", "x")),
        "edit .git/config: .git/ is read-only to the lane's tools"
    );
}

#[test]
fn write_refuses_default_deny_globs_with_the_reference_text() {
    let f = Fixture::new();
    assert_eq!(
        refused(&f.write(".ailang/x.ail", "x")),
        "write .ailang/x.ail: matches fs_deny_write \".ailang/**\" \u{2014} read-only under this policy"
    );
    for (path, glob) in [
        (".github/workflows/ci.yml", ".github/**"),
        (".pi/settings.json", ".pi/**"),
        (".claude/settings.json", ".claude/**"),
        (".gitmodules", ".gitmodules"),
        (".gitattributes", ".gitattributes"),
        ("./.ailang/cache/deep/x", ".ailang/**"),
    ] {
        assert_eq!(
            refused(&f.write(path, "x")),
            format!("write {path}: matches fs_deny_write \"{glob}\" — read-only under this policy")
        );
    }
    assert!(
        !f.path(".ailang").exists(),
        "a refused write must not create directories"
    );
    // Through a symlink to a denied place.
    fs::create_dir(f.path(".github")).unwrap();
    f.link("gh", ".github");
    assert_eq!(
        refused(&f.write("gh/ci.yml", "x")),
        "write gh/ci.yml: matches fs_deny_write \".github/**\" — read-only under this policy"
    );
    // Deny globs apply at every depth, after folding.
    for (path, glob) in [
        ("sub/.gitmodules", ".gitmodules"),
        ("sub/.gitattributes", ".gitattributes"),
        ("sub/.github/x", ".github/**"),
        ("a/b/.ailang/c", ".ailang/**"),
        (".GitHub/workflows/x.yml", ".github/**"),
        ("\u{ff0e}gitattributes", ".gitattributes"),
        ("sub/.GITMODULES", ".gitmodules"),
    ] {
        assert_eq!(
            refused(&f.write(path, "x")),
            format!("write {path}: matches fs_deny_write \"{glob}\" — read-only under this policy")
        );
    }
    assert!(!f.path("sub").exists() && !f.path("a").exists());
    // Names that merely contain a protected one are fine.
    assert!(is_ok(&f.write("sub/x.gitattributes", "x")));
    assert!(is_ok(&f.write("sub/.github-notes", "x")));
}

#[test]
fn custom_deny_list_replaces_the_default() {
    let f = Fixture::with_config(json!({"denyWrite": ["docs/*.md", "**/*.lock"]}));
    assert!(is_ok(&f.write(".ailang/x.ail", "x")));
    assert_eq!(
        refused(&f.write("docs/a.md", "x")),
        "write docs/a.md: matches fs_deny_write \"docs/*.md\" — read-only under this policy"
    );
    // `*` stays inside one component.
    assert!(is_ok(&f.write("docs/sub/a.md", "x")));
    assert_eq!(
        refused(&f.write("deep/er/Cargo.lock", "x")),
        "write deep/er/Cargo.lock: matches fs_deny_write \"**/*.lock\" — read-only under this policy"
    );
    let open = Fixture::with_config(json!({"denyWrite": []}));
    assert!(is_ok(&open.write(".github/x", "y")));
    // .git stays read-only whatever the list says.
    assert_eq!(
        refused(&open.write(".git/x", "y")),
        "write .git/x: .git/ is read-only to the lane's tools"
    );
}

#[test]
fn write_refuses_content_over_the_limit() {
    let f = Fixture::with_config(json!({"maxWriteBytes": 4}));
    assert_eq!(
        refused(&f.write("a.txt", "12345")),
        "write a.txt: content is 5 bytes; the limit is 4"
    );
    assert!(!f.path("a.txt").exists());
    assert!(is_ok(&f.write("a.txt", "1234")));
}

#[test]
fn write_refuses_directories() {
    let f = Fixture::new();
    fs::create_dir(f.path("d")).unwrap();
    assert_eq!(
        refused(&f.write("d", "x")),
        "write d: d is a directory, not a file"
    );
    // Nothing is at `new/`: it was said to be a directory, and an agent went looking for one.
    assert_eq!(
        refused(&f.write("new/", "x")),
        "write new/: a path ending in / names a directory, and nothing is there; give the file's path, without the trailing /"
    );
    assert_eq!(
        refused(&f.write("deep/er/", "x")),
        "write deep/er/: a path ending in / names a directory, and nothing is there; give the file's path, without the trailing /"
    );
    assert!(!f.path("new").exists() && !f.path("deep").exists());
    f.put("file", "x");
    assert_eq!(
        refused(&f.write("file/sub", "x")),
        "write file/sub: openat file/sub: not a directory"
    );
}

// ------------------------------------------------------------------- edit

#[test]
fn edit_requires_exactly_one_occurrence() {
    let f = Fixture::new();
    f.put("hello.ail", &"print(\"hi\")\n".repeat(8));
    assert_eq!(
        refused(&f.edit("hello.ail", "print", "say")),
        "edit hello.ail: old_text occurs 8 times; include more context so it is unique"
    );
    assert_eq!(
        refused(&f.edit("hello.ail", "absent", "x")),
        "edit hello.ail: old_text not found \u{2014} the file may have changed; read it again"
    );
    f.put("one.ail", "a\nb\nc\n");
    let out = f.edit("one.ail", "b\n", "B\nB2\n");
    assert_eq!(out["ok"], json!(true));
    assert_eq!(out["replacements"], json!(1));
    assert!(is_sha256_ref(out["tool"].as_str().unwrap()));
    assert_eq!(
        fs::read_to_string(f.path("one.ail")).unwrap(),
        "a\nB\nB2\nc\n"
    );
    // Two occurrences.
    f.put("two.ail", "x x");
    assert_eq!(
        refused(&f.edit("two.ail", "x", "y")),
        "edit two.ail: old_text occurs 2 times; include more context so it is unique"
    );
    assert_eq!(fs::read_to_string(f.path("two.ail")).unwrap(), "x x");
    // Overlapping occurrences are ambiguous too.
    f.put("three.ail", "a\n\n\nb");
    assert_eq!(
        refused(&f.edit("three.ail", "\n\n", "\n")),
        "edit three.ail: old_text occurs more than once (its occurrences overlap); include more context so it is unique"
    );
    f.put("ab.ail", "xaba");
    assert!(is_ok(&f.edit("ab.ail", "ab", "AB")));
    assert_eq!(fs::read_to_string(f.path("ab.ail")).unwrap(), "xABa");
    // Deleting text (empty new_text) is fine.
    f.edit("two.ail", "x x", "");
    assert_eq!(fs::read_to_string(f.path("two.ail")).unwrap(), "");
}

#[test]
fn edit_refusals() {
    let f = Fixture::new();
    f.put("a.txt", "abc");
    assert_eq!(
        refused(&f.edit("a.txt", "", "x")),
        "edit a.txt: old_text is empty; give the exact text to replace (to create or overwrite a file, write it whole instead of editing it)"
    );
    assert_eq!(
        refused(&f.edit("missing.txt", "a", "b")),
        "edit missing.txt: openat missing.txt: no such file or directory"
    );
    assert_eq!(
        refused(&f.edit("no/dir.txt", "a", "b")),
        "edit no/dir.txt: openat no/dir.txt: no such file or directory"
    );
    assert!(!f.path("no").exists());
    fs::write(f.path("bin"), [0xffu8, b'a']).unwrap();
    assert_eq!(
        refused(&f.edit("bin", "a", "b")),
        "edit bin: the file is not UTF-8 text; this tool edits text files only"
    );
    assert_eq!(
        refused(&f.edit(".ailang/x", "a", "b")),
        "edit .ailang/x: matches fs_deny_write \".ailang/**\" — read-only under this policy"
    );
    assert_eq!(
        refused(&f.edit("/etc/hosts", "a", "b")),
        "edit /etc/hosts: path \"/etc/hosts\" escapes sandbox \"<worktree>\""
    );
    let small = Fixture::with_config(json!({"maxWriteBytes": 5}));
    small.put("s.txt", "abc");
    assert_eq!(
        refused(&small.edit("s.txt", "b", "xyzw")),
        "edit s.txt: the edited file would be 6 bytes; the limit is 5"
    );
    small.put("big.txt", "abcdefgh");
    assert_eq!(
        refused(&small.edit("big.txt", "a", "b")),
        "edit big.txt: file is 8 bytes; the limit is 5"
    );
}

// --------------------------------------------------------- request checks

#[test]
fn scope_must_be_worktree() {
    let f = Fixture::new();
    let mut r = f.request("Workspace.Read", json!({"op": "read", "path": "a"}));
    r.scope = "repo".into();
    assert_eq!(
        failed(handler_kit::EffectHandler::execute(&f.handler, r)),
        "broker: Workspace.Read refused: scope \"repo\" is not \"worktree\""
    );
}

#[test]
fn ops_outside_the_allowlist_fail() {
    let f = Fixture::new();
    assert_eq!(
        failed(f.run(
            "Workspace.Read",
            json!({"op": "write", "path": "a", "content": "x"})
        )),
        "broker: Workspace.Read refuses op \"write\": not in this effect's op allowlist"
    );
    assert_eq!(
        failed(f.run("Workspace.Write", json!({"op": "read", "path": "a"}))),
        "broker: Workspace.Write refuses op \"read\": not in this effect's op allowlist"
    );
    assert_eq!(
        failed(f.run("Workspace.Write", json!({"op": "delete", "path": "a"}))),
        "broker: Workspace.Write refuses op \"delete\": not in this effect's op allowlist"
    );
    assert!(!f.path("a").exists());
}

#[test]
fn case_variant_keys_fail() {
    let f = Fixture::new();
    assert_eq!(
        failed(f.run(
            "Workspace.Read",
            json!({"OP": "read", "op": "read", "path": "a"})
        )),
        "broker: Workspace.Read refused: key \"OP\" aliases \"op\""
    );
    assert_eq!(
        failed(f.run(
            "Workspace.Write",
            json!({"op": "write", "path": "a", "Path": "/etc/passwd", "content": "x"})
        )),
        "broker: Workspace.Write refused: key \"Path\" aliases \"path\""
    );
    assert_eq!(
        failed(f.run(
            "Workspace.Write",
            json!({"op": "edit", "path": "a", "OLD_TEXT": "x", "old_text": "y", "new_text": "z"})
        )),
        "broker: Workspace.Write refused: key \"OLD_TEXT\" aliases \"old_text\""
    );
}

#[test]
fn malformed_payloads_fail() {
    let f = Fixture::new();
    assert_eq!(
        failed(f.run("Workspace.Read", json!(["op", "read"]))),
        "broker: Workspace.Read refused: payload is not a JSON object"
    );
    assert_eq!(
        failed(f.run("Workspace.Read", json!({"path": "a"}))),
        "broker: Workspace.Read refused: payload has no \"op\""
    );
    assert_eq!(
        failed(f.run("Workspace.Read", json!({"op": 1, "path": "a"}))),
        "broker: Workspace.Read refused: payload key \"op\" must be a string"
    );
    assert_eq!(
        failed(f.run("Workspace.Read", json!({"op": "read"}))),
        "broker: Workspace.Read refused: op \"read\" needs payload key \"path\""
    );
    assert_eq!(
        failed(f.run(
            "Workspace.Write",
            json!({"op": "write", "path": "a", "content": 5})
        )),
        "broker: Workspace.Write refused: payload key \"content\" of op \"write\" must be a string"
    );
    assert_eq!(
        failed(f.run(
            "Workspace.Write",
            json!({"op": "edit", "path": "a", "old_text": "x"})
        )),
        "broker: Workspace.Write refused: op \"edit\" needs payload key \"new_text\""
    );
    assert_eq!(
        failed(f.run("Workspace.Exec", json!({"op": "read", "path": "a"}))),
        "broker: the workspace plugin does not handle effect \"Workspace.Exec\""
    );
    // Unknown, non-aliasing keys are ignored (like the reference's policy tool).
    f.put("a", "A");
    assert!(is_ok(&f.out(
        "Workspace.Read",
        json!({"op": "read", "path": "a", "extra": true})
    )));
}

#[test]
fn a_missing_or_relative_worktree_fails() {
    let f = Fixture::new();
    let mut r = f.request("Workspace.Read", json!({"op": "read", "path": "a"}));
    r.worktree = None;
    assert_eq!(
        failed(handler_kit::EffectHandler::execute(&f.handler, r.clone())),
        "broker: Workspace.Read refused: the request binds no worktree (scope \"worktree\" needs one)"
    );
    r.worktree = Some("relative/wt".into());
    assert_eq!(
        failed(handler_kit::EffectHandler::execute(&f.handler, r.clone())),
        "broker: Workspace.Read refused: the bound worktree is not an absolute path"
    );
    r.worktree = Some(f.tmp.path().join("gone").to_string_lossy().into_owned());
    let message = failed(handler_kit::EffectHandler::execute(&f.handler, r));
    assert_eq!(
        message,
        "broker: Workspace.Read failed: the episode's worktree cannot be opened: no such file or directory"
    );
}

#[test]
fn empty_and_nul_paths_are_declined_before_any_spend_and_refused_by_the_effect() {
    // The shipped transitions' `relative-path` rule refuses these in the plan; a third-party
    // transition without it still reaches the handler, which declines them before the intent.
    let f = Fixture::new();
    let cases = [
        (
            "Workspace.Read",
            json!({"op": "read", "path": ""}),
            "read: the path is empty",
        ),
        (
            "Workspace.Write",
            json!({"op": "write", "path": "a\0b", "content": "x"}),
            "write a\0b: the path contains a NUL byte",
        ),
        (
            "Workspace.Write",
            json!({"op": "edit", "path": "", "old_text": "x", "new_text": "y"}),
            "edit: the path is empty",
        ),
        (
            "Workspace.Read",
            json!({"op": "read", "path": "\0"}),
            "read \0: the path contains a NUL byte",
        ),
    ];
    for (effect, payload, said) in cases {
        assert_eq!(
            f.preflight(effect, payload.clone()).as_deref(),
            Some(said),
            "{payload}"
        );
        assert_eq!(refused(&f.out(effect, payload)), said);
    }
    assert_eq!(fs::read_dir(&f.root).unwrap().count(), 0, "nothing made");
}

/// Trojan names: an agent wrote `\u{202e}sr.niam\u{202c}` (shown as `main.rs`: the bidi
/// override reverses what follows), `ma\u{200b}in.rs` (a zero-width space) and a name with a
/// newline, and every listing, diff and review, the operator's page included, showed them as
/// another file. A new file's name may hold no character that is not shown as itself; the
/// write is declined before any spend. A file already so named (from a checkout) is still
/// read and edited.
#[test]
fn a_new_file_name_that_shows_as_another_is_declined_before_any_spend() {
    let f = Fixture::new();
    for (path, code) in [
        ("\u{202e}sr.niam\u{202c}", "202E"),
        ("ma\u{200b}in.rs", "200B"),
        ("notes/\u{2067}txt.sh", "2067"),
        ("two\nlines.txt", "000A"),
        ("esc\u{1b}[31m.txt", "001B"),
    ] {
        let payload = json!({"op": "write", "path": path, "content": "x"});
        let said = format!(
            "write {path:?}: the path holds U+{code}, a character that is not shown as itself (a control, bidi or invisible character); a new file's name may hold none"
        );
        assert_eq!(
            f.preflight("Workspace.Write", payload.clone()).as_deref(),
            Some(said.as_str())
        );
        assert_eq!(refused(&f.out("Workspace.Write", payload)), said);
    }
    assert_eq!(fs::read_dir(&f.root).unwrap().count(), 0, "nothing made");
    f.put("ma\u{200b}in.rs", "old\n");
    assert_eq!(f.read("ma\u{200b}in.rs")["content"], json!("old\n"));
    let edit =
        json!({"op": "edit", "path": "ma\u{200b}in.rs", "old_text": "old", "new_text": "new"});
    assert_eq!(f.preflight("Workspace.Write", edit.clone()), None);
    assert_eq!(f.out("Workspace.Write", edit)["ok"], json!(true));
}

#[test]
fn a_megabyte_path_with_a_nul_byte_is_declined_by_its_length_and_not_echoed() {
    // The decline is the call's committed answer: a path of a megabyte must not be copied
    // into it, NUL byte or not.
    let f = Fixture::new();
    let path = format!("{}\0", "a".repeat(1 << 20));
    let said = "read: the path is 1048577 bytes; the limit is 1024";
    let read = json!({"op": "read", "path": path});
    assert_eq!(
        f.preflight("Workspace.Read", read.clone()).as_deref(),
        Some(said)
    );
    assert_eq!(refused(&f.out("Workspace.Read", read)), said);
}

#[test]
fn a_path_of_twenty_thousand_nested_directories_is_declined_and_nothing_is_made() {
    // One write of `a/a/…/x.txt` made 20,000 nested directories; git could not open the deepest
    // (past PATH_MAX from the root) and would have committed the worktree without its file.
    let f = Fixture::new();
    let deep = "a/".repeat(20_000) + "x.txt";
    let write = json!({"op": "write", "path": deep, "content": "x"});
    let said = "write: the path is 40005 bytes; the limit is 1024";
    assert_eq!(
        f.preflight("Workspace.Write", write.clone()).as_deref(),
        Some(said)
    );
    assert_eq!(refused(&f.out("Workspace.Write", write)), said);
    assert!(!f.path("a").exists());
    let edit = json!({"op": "edit", "path": deep, "old_text": "x", "new_text": "y"});
    assert_eq!(
        refused(&f.out("Workspace.Write", edit)),
        "edit: the path is 40005 bytes; the limit is 1024"
    );
    let read = json!({"op": "read", "path": deep});
    assert_eq!(
        f.preflight("Workspace.Read", read).as_deref(),
        Some("read: the path is 40005 bytes; the limit is 1024")
    );
    // The limit itself is a path that may be written.
    let longest = "b/".repeat(509) + "xyzzyz";
    assert_eq!(longest.len(), MAX_PATH_BYTES);
    assert!(is_ok(&f.write(&longest, "x")));
    assert_eq!(fs::read_to_string(f.path(&longest)).unwrap(), "x");
}

// ----------------------------------------------------------------- config

#[test]
fn config_is_validated() {
    let cases: Vec<(Value, &str)> = vec![
        (
            json!({"denyWrites": []}),
            "workspace config: unknown key \"denyWrites\"; workspace accepts only: allowHardLinks, denyWrite, maxReadBytes, maxWriteBytes",
        ),
        (json!([]), "workspace config must be a JSON object"),
        (json!({"denyWrite": ".git/**"}), "workspace config: \"denyWrite\" must be an array of glob strings"),
        (json!({"denyWrite": [1]}), "workspace config: \"denyWrite\" must be an array of glob strings"),
        (json!({"denyWrite": [""]}), "workspace config: denyWrite holds an empty glob"),
        (json!({"maxReadBytes": -1}), "workspace config: \"maxReadBytes\" must be an integer from 0 to 1048576 (a tool result is at most 1 MiB)"),
        (json!({"maxReadBytes": 1.5}), "workspace config: \"maxReadBytes\" must be an integer from 0 to 1048576 (a tool result is at most 1 MiB)"),
        (json!({"maxReadBytes": 1048577}), "workspace config: \"maxReadBytes\" must be an integer from 0 to 1048576 (a tool result is at most 1 MiB)"),
        (json!({"allowHardLinks": "yes"}), "workspace config: \"allowHardLinks\" must be true or false"),
        (json!({"denyWrite": ["a/[b"]}), "workspace config: denyWrite glob \"a/[b\" uses the reserved character \"[\"; worldd globs have only *, ** and ? (no classes, alternatives or escapes)"),
        (json!({"denyWrite": ["*.{md,txt}"]}), "workspace config: denyWrite glob \"*.{md,txt}\" uses the reserved character \"{\"; worldd globs have only *, ** and ? (no classes, alternatives or escapes)"),
        (json!({"denyWrite": ["/build/**"]}), "workspace config: denyWrite glob \"/build/**\" starts with \"/\"; globs are relative to the worktree and apply at every depth"),
        (json!({"maxWriteBytes": "8"}), "workspace config: \"maxWriteBytes\" must be an integer from 0 to 1073741824"),
        (
            json!({"maxWriteBytes": 1073741825_u64}),
            "workspace config: \"maxWriteBytes\" must be an integer from 0 to 1073741824",
        ),
    ];
    for (config, message) in cases {
        match WorkspacePlugin::new(config.clone(), Host::noop()) {
            Err(e) => assert_eq!(e, message, "{config}"),
            Ok(_) => panic!("{config} was accepted"),
        }
    }
    // Defaults, null, and the maxima are fine.
    for ok in [
        json!({}),
        Value::Null,
        json!({"maxReadBytes": 0, "maxWriteBytes": 1073741824_u64}),
        json!({"maxReadBytes": 1048576, "allowHardLinks": true}),
    ] {
        assert!(WorkspacePlugin::new(ok, Host::noop()).is_ok());
    }
}

#[test]
fn policy_digest_is_sha256_of_the_canonical_policy() {
    let policy = Policy::from_config(&json!({})).unwrap();
    let canonical = policy.canonical_json();
    assert_eq!(
        canonical,
        "{\"allowHardLinks\":false,\"denyWrite\":[\".github/**\",\".pi/**\",\".claude/**\",\".gitmodules\",\".gitattributes\",\".ailang/**\"],\
         \"maxReadBytes\":1048576,\"maxWriteBytes\":8388608,\"names\":\"nfkc-casefold\",\
         \"noRead\":[\".git/\"],\"policy\":\"worldd/workspace-policy/v3\",\"readOnly\":[\".git/\"],\
         \"sandbox\":\"worktree\"}"
    );
    assert_eq!(policy.digest(), sha256_hex(canonical.as_bytes()));
    // The canonical form is valid JSON with sorted keys.
    let parsed: Value = handler_kit::serde_json::from_str(&canonical).unwrap();
    assert_eq!(parsed["maxReadBytes"], json!(1048576));
    // Any policy change changes the digest; the same policy gives the same one.
    let other = Policy::from_config(&json!({"maxReadBytes": 1})).unwrap();
    assert_ne!(other.digest(), policy.digest());
    let links = Policy::from_config(&json!({"allowHardLinks": true})).unwrap();
    assert!(links
        .canonical_json()
        .starts_with("{\"allowHardLinks\":true,"));
    assert_ne!(links.digest(), policy.digest());
    assert_eq!(
        Policy::from_config(&Value::Null).unwrap().digest(),
        policy.digest()
    );
    let quoted = Policy::from_config(&json!({"denyWrite": ["we\"ird/glob*"]})).unwrap();
    assert!(quoted
        .canonical_json()
        .starts_with("{\"allowHardLinks\":false,\"denyWrite\":[\"we\\\"ird/glob*\"]"));
}

// --------------------------------------------------------------- manifest

#[test]
fn manifest_declares_effects_transitions_and_schema() {
    let m = WorkspacePlugin::manifest().unwrap();
    assert_eq!(m.name, "workspace");
    assert_eq!(m.abi, handler_kit::ABI_VERSION);
    assert_eq!(m.effects.len(), 2);
    assert_eq!(m.effects[0].name, "Workspace.Read");
    assert_eq!(m.effects[0].class, EffectClass::Read);
    assert_eq!(m.effects[0].ops, vec!["read"]);
    assert_eq!(m.effects[1].name, "Workspace.Write");
    assert_eq!(m.effects[1].class, EffectClass::Write);
    assert_eq!(m.effects[1].ops, vec!["write", "edit"]);
    let ids: Vec<&str> = m
        .transitions
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec!["ailang-read", "ailang-write", "ailang-edit"]);
    assert!(m.finish.is_empty());
    assert_eq!(m.config_schema["additionalProperties"], json!(false));
    assert_eq!(
        m.config_schema["properties"]["maxReadBytes"]["default"],
        json!(1048576)
    );
    assert_eq!(
        m.config_schema["properties"]["maxWriteBytes"]["default"],
        json!(8388608)
    );
    assert_eq!(
        m.config_schema["properties"]["denyWrite"]["default"]
            .as_array()
            .unwrap()
            .len(),
        6
    );
}

#[test]
fn every_output_is_stamped_and_refusals_are_ok_outcomes() {
    let f = Fixture::new();
    let outcome = f.run("Workspace.Read", json!({"op": "read", "path": "../x"}));
    let Outcome::Ok { output } = outcome else {
        panic!("refusals are ok outcomes")
    };
    assert_eq!(output["ok"], json!(false));
    assert_eq!(output["tool"], json!(f.handler.tool()));
    assert_eq!(output["policy_digest"], json!(f.handler.policy_digest()));
}
