//! A temporary file the workspace plugin leaves when a write is killed part-way
//! (`.worldd-tmp-<pid>-<n>-<hex>`, beside the file being written, holding part of its content)
//! was committed by git-commit with the agent's change: nothing excluded it, and the workspace
//! removes it only on its next write into that directory. Staging now leaves such files out
//! with an exclude pathspec (the repository's own ignore files are neither read for it nor
//! changed), with or without `paths`, at any depth.

mod common;

use common::*;
use handler_kit::serde_json::json;
use worldd_git::NOTHING_IN_PATHS;

fn files(out: &handler_kit::JsonObject) -> Vec<String> {
    let mut f: Vec<String> = out["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    f.sort();
    f
}

const LEFT: &str = "src/.worldd-tmp-4000001-7-1a2b3c";
const LEFT_TOP: &str = ".worldd-tmp-4000001-8-2b3c4d";

#[test]
fn a_temporary_file_left_by_a_killed_write_is_never_committed() {
    let f = Fixture::new();
    f.put("src/app.py", "print('hi')\n");
    f.put(LEFT, "API_KEY=secret-123\npartial conte");
    f.put(LEFT_TOP, "partial");
    let out = f.commit(json!({"op": "commit", "message": "app"}));
    assert_eq!(out["ok"], json!(true), "{out:?}");
    assert_eq!(files(&out), ["src/app.py"]);
    let repo = f.repo();
    assert_eq!(
        git(&repo, &["show", "--name-only", "--format=", "HEAD"]),
        "src/app.py\n"
    );
    // Still there, untracked: the workspace's to sweep, the repository's ignore files untouched.
    assert_eq!(
        f.status(),
        format!("?? {LEFT_TOP}\n?? {LEFT}\n"),
        "{}",
        f.status()
    );
    assert!(!repo.join(".gitignore").exists());

    // With paths: the directory holding one, and the file itself.
    f.put("src/app.py", "print('hello')\n");
    let out = f.commit(json!({"op": "commit", "message": "app 2", "paths": ["src"]}));
    assert_eq!(out["ok"], json!(true), "{out:?}");
    assert_eq!(files(&out), ["src/app.py"]);
    let out = f.commit(json!({"op": "commit", "message": "tmp", "paths": [LEFT]}));
    assert_eq!(refused(&out), NOTHING_IN_PATHS);
    assert_eq!(
        git(&repo, &["ls-tree", "-r", "--name-only", "HEAD"])
            .lines()
            .filter(|l| l.contains(".worldd-tmp-"))
            .count(),
        0
    );
}

/// The exclude is pathspec magic; the agent's own paths are still names, not patterns.
#[test]
fn paths_given_to_a_commit_are_still_literal_names() {
    let f = Fixture::new();
    f.put("a*.txt", "star\n");
    f.put("ab.txt", "b\n");
    let out = f.commit(json!({"op": "commit", "message": "star", "paths": ["a*.txt"]}));
    assert_eq!(out["ok"], json!(true), "{out:?}");
    assert_eq!(files(&out), ["a*.txt"]);
    let out = f.commit(json!({"op": "commit", "message": "magic", "paths": [":(glob)*.txt"]}));
    assert_eq!(
        refused(&out),
        "commit: git add refused: fatal: pathspec ':(glob)*.txt' did not match any files"
    );
}
