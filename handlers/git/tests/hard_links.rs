//! A file with a second hard link can be a file outside the worktree: git-commit records none,
//! as the workspace plugin reads none.

mod common;

use std::fs;

use common::*;
use handler_kit::serde_json::json;

fn outside(f: &Fixture) -> std::path::PathBuf {
    let dir = f.tmp.path().join("outside");
    fs::create_dir_all(&dir).unwrap();
    let creds = dir.join("creds.txt");
    fs::write(&creds, "TOPSECRET-GIT\n").unwrap();
    creds
}

/// Whether the repository holds an object with `content` (committed or only staged).
fn has_blob(f: &Fixture, content: &str) -> bool {
    let file = f.tmp.path().join("probe");
    fs::write(&file, content).unwrap();
    let id = git(f.tmp.path(), &["hash-object", file.to_str().unwrap()]);
    git_raw(&f.repo(), &["cat-file", "-e", id.trim()])
        .status
        .success()
}

#[test]
fn a_new_file_with_a_second_hard_link_is_never_committed_nor_staged() {
    let f = Fixture::new();
    let before = f.head();
    fs::hard_link(outside(&f), f.repo().join("notes.txt")).unwrap();
    f.put("other.txt", "fine\n");
    for payload in [
        json!({"op": "commit", "message": "all"}),
        json!({"op": "commit", "message": "one", "paths": ["notes.txt"]}),
    ] {
        let out = ok_output(f.run(payload));
        assert_eq!(
            refused(&out),
            "commit notes.txt: the file has 2 hard links; a hard link can name a file outside the worktree, so git-commit records only files with one link"
        );
    }
    assert_eq!(f.head(), before);
    assert!(!has_blob(&f, "TOPSECRET-GIT\n"));
    // Paths that leave it out commit.
    let out = f.commit(json!({"op": "commit", "message": "other", "paths": ["other.txt"]}));
    assert_eq!(out["files"], json!(["other.txt"]));
}

#[test]
fn a_tracked_file_replaced_by_a_second_hard_link_is_never_committed() {
    let f = Fixture::new();
    let before = f.head();
    fs::remove_file(f.repo().join("README.md")).unwrap();
    fs::hard_link(outside(&f), f.repo().join("README.md")).unwrap();
    let out = ok_output(f.run(json!({"op": "commit", "message": "readme"})));
    assert_eq!(
        refused(&out),
        "commit README.md: the file has 2 hard links; a hard link can name a file outside the worktree, so git-commit records only files with one link"
    );
    assert_eq!(f.head(), before);
    assert!(!has_blob(&f, "TOPSECRET-GIT\n"));
}

/// The hard link check reads the whole `git status` list: one longer than the handler keeps
/// could hide a hard-linked file past its end, so the commit is refused before anything is
/// staged.
#[test]
fn changes_too_many_to_check_for_hard_links_are_refused_and_nothing_is_staged() {
    let f = Fixture::new();
    let before = f.head();
    let index = f.repo().join(".git/index");
    let index_before = fs::read(&index).unwrap();
    // 3,218-byte `git status` records (a 3,214-byte path): 2,700 of them are 8.69 MB, past
    // the 8 MiB the handler keeps.
    deep_files(&f.repo(), 2700);
    let out = ok_output(f.run(json!({"op": "commit", "message": "m"})));
    assert_eq!(refused(&out), worldd_git::TOO_MANY_CHANGED);
    assert_eq!(f.head(), before);
    assert_eq!(fs::read(&index).unwrap(), index_before);
    // Nothing was staged: the files' content never reached the repository's objects.
    assert!(!has_blob(&f, "x"));
}
