//! Git.Commit against real repositories made with the `git` CLI.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;

use common::*;
use handler_kit::serde_json::{json, Value};
use handler_kit::{EffectHandler, Host, Outcome, Plugin};
use worldd_git::{GitPlugin, NOTHING_IN_PATHS, NOTHING_TO_COMMIT};

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

// ----------------------------------------------------------------- commits

#[test]
fn commit_without_paths_commits_every_change_with_the_configured_author() {
    let f = Fixture::new();
    let before = f.head();
    f.put("README.md", "# hello, world\n");
    f.put("src/a.txt", "alpha\n");
    let out = f.commit(json!({"op": "commit", "message": "Add alpha\n\nAnd a body."}));
    assert_eq!(out["ok"], json!(true), "{out:?}");
    let id = out["commit"].as_str().unwrap();
    assert!(is_hex_id(id), "{id}");
    assert_eq!(id, f.head());
    assert_ne!(id, before);
    assert_eq!(files(&out), ["README.md", "src/a.txt"]);
    assert!(out["tool"].as_str().unwrap().starts_with("sha256:"));
    assert_eq!(out["policy_digest"], json!(f.handler.policy_digest()));
    assert_eq!(out.len(), 5, "{out:?}");

    let repo = f.repo();
    assert_eq!(
        git(&repo, &["log", "-1", "--format=%an <%ae>"]).trim(),
        AUTHOR
    );
    assert_eq!(
        git(&repo, &["log", "-1", "--format=%cn <%ce>"]).trim(),
        AUTHOR
    );
    assert_eq!(
        git(&repo, &["log", "-1", "--format=%B"]).trim_end(),
        "Add alpha\n\nAnd a body."
    );
    // One new commit on top of the old one: history is appended, not rewritten.
    assert_eq!(git(&repo, &["rev-parse", "HEAD~1"]).trim(), before);
    assert_eq!(git(&repo, &["rev-list", "--count", "HEAD"]).trim(), "2");
    assert_eq!(
        git(&repo, &["rev-parse", "--abbrev-ref", "HEAD"]).trim(),
        "main"
    );
    assert_eq!(
        f.status(),
        "",
        "the worktree is clean after committing everything"
    );
}

#[test]
fn commit_with_paths_commits_only_those() {
    let f = Fixture::new();
    f.put("a.txt", "a\n");
    f.put("b.txt", "b\n");
    f.put("c.txt", "c\n");
    f.commit(json!({"op": "commit", "message": "three files"}));
    f.put("a.txt", "a2\n");
    f.put("b.txt", "b2\n");
    f.put("c.txt", "c2\n");
    // Something staged by someone else stays staged and out of the commit.
    git(&f.repo(), &["add", "c.txt"]);
    let out = f.commit(json!({"op": "commit", "message": "only a", "paths": ["a.txt"]}));
    assert_eq!(out["ok"], json!(true), "{out:?}");
    assert_eq!(files(&out), ["a.txt"]);
    assert_eq!(
        git(&f.repo(), &["show", "HEAD:a.txt"]),
        "a2\n",
        "the new content is committed"
    );
    assert_eq!(git(&f.repo(), &["show", "HEAD:b.txt"]), "b\n");
    assert_eq!(f.status(), " M b.txt\nM  c.txt\n");
}

#[test]
fn commit_with_paths_takes_directories_deletions_and_new_files() {
    let f = Fixture::new();
    f.put("old.txt", "old\n");
    f.put("keep.txt", "keep\n");
    f.commit(json!({"op": "commit", "message": "setup"}));
    fs::remove_file(f.repo().join("old.txt")).unwrap();
    f.put("docs/guide/intro.md", "intro\n");
    f.put("docs/index.md", "index\n");
    f.put("keep.txt", "changed\n");
    let out = f.commit(json!({
        "op": "commit", "message": "docs and a deletion",
        "paths": ["old.txt", "docs/", "./docs/index.md"]
    }));
    assert_eq!(
        files(&out),
        ["docs/guide/intro.md", "docs/index.md", "old.txt"]
    );
    assert_eq!(f.status(), " M keep.txt\n");
}

#[test]
fn an_empty_commit_is_refused_and_nothing_changes() {
    let f = Fixture::new();
    let before = f.head();
    let outcome = f.run(json!({"op": "commit", "message": "nothing"}));
    // The effect ran and said no: status ok, ok:false.
    let out = ok_output(outcome);
    assert_eq!(
        out.get("refused"),
        Some(&json!("nothing to commit: the worktree has no changes"))
    );
    assert_eq!(refused(&out), NOTHING_TO_COMMIT);
    assert_eq!(out["policy_digest"], json!(f.handler.policy_digest()));
    assert_eq!(f.head(), before);

    // Changes elsewhere do not make the named paths committable.
    f.put("other.txt", "x\n");
    let out = f.commit(json!({"op": "commit", "message": "m", "paths": ["README.md"]}));
    assert_eq!(refused(&out), NOTHING_IN_PATHS);
    assert_eq!(f.head(), before);
}

#[test]
fn the_first_commit_of_an_unborn_branch_works() {
    let f = Fixture::new();
    let fresh = f.tmp.path().join("fresh");
    fs::create_dir_all(&fresh).unwrap();
    git(&fresh, &["init", "-q"]);
    fs::write(fresh.join("a.txt"), "a\n").unwrap();
    let out = ok_output(f.run_in(&fresh, json!({"op": "commit", "message": "root"})));
    assert_eq!(out["ok"], json!(true), "{out:?}");
    assert_eq!(files(&out), ["a.txt"]);
    assert_eq!(git(&fresh, &["log", "--format=%an <%ae>"]).trim(), AUTHOR);
}

#[test]
fn nothing_is_pushed() {
    let f = Fixture::new();
    let remote_before = git(&f.remote(), &["rev-parse", "main"]);
    let refs_before = git(&f.remote(), &["for-each-ref"]);
    f.put("x.txt", "x\n");
    f.commit(json!({"op": "commit", "message": "local only"}));
    f.put("y.txt", "y\n");
    f.commit(json!({"op": "commit", "message": "still local", "paths": ["y.txt"]}));
    assert_eq!(git(&f.remote(), &["rev-parse", "main"]), remote_before);
    assert_eq!(git(&f.remote(), &["for-each-ref"]), refs_before);
    // The local branch is two ahead of what origin last saw.
    assert_eq!(
        git(&f.repo(), &["rev-list", "--count", "origin/main..main"]).trim(),
        "2"
    );
}

#[test]
fn hooks_never_run() {
    let f = Fixture::new();
    let marker = f.tmp.path().join("hook-ran");
    let hook = format!("#!/bin/sh\ntouch {}\nexit 1\n", marker.display());
    let hooks = f.repo().join(".git/hooks");
    let custom = f.tmp.path().join("custom-hooks");
    fs::create_dir_all(&custom).unwrap();
    for dir in [&hooks, &custom] {
        for name in [
            "pre-commit",
            "commit-msg",
            "prepare-commit-msg",
            "post-commit",
        ] {
            let p = dir.join(name);
            fs::write(&p, &hook).unwrap();
            fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
        }
    }
    // Even a repository that points core.hooksPath somewhere runs none.
    git(
        &f.repo(),
        &["config", "core.hooksPath", custom.to_str().unwrap()],
    );
    f.put("x.txt", "x\n");
    let out = f.commit(json!({"op": "commit", "message": "no hooks"}));
    assert_eq!(out["ok"], json!(true), "{out:?}");
    assert!(!marker.exists(), "a hook ran");
}

#[test]
fn a_linked_worktree_is_committed_without_touching_the_other_worktrees() {
    let f = Fixture::new();
    let main_before = f.head();
    let linked = f.linked_worktree("linked", &["-b", "feature"]);
    fs::write(linked.join("feature.txt"), "feature\n").unwrap();
    f.put("main-only.txt", "untouched\n");
    let out = ok_output(f.run_in(&linked, json!({"op": "commit", "message": "feature work"})));
    assert_eq!(out["ok"], json!(true), "{out:?}");
    assert_eq!(files(&out), ["feature.txt"]);
    assert_eq!(
        git(&linked, &["rev-parse", "HEAD"]).trim(),
        out["commit"].as_str().unwrap()
    );
    assert_eq!(git(&f.repo(), &["rev-parse", "main"]).trim(), main_before);
    assert_eq!(f.status(), "?? main-only.txt\n");

    // A detached worktree (what `worldd session new --repo` makes) commits on its detached HEAD.
    let detached = f.linked_worktree("detached", &["--detach"]);
    fs::write(detached.join("d.txt"), "d\n").unwrap();
    let out = ok_output(f.run_in(
        &detached,
        json!({"op": "commit", "message": "detached work"}),
    ));
    assert_eq!(out["ok"], json!(true), "{out:?}");
    assert_eq!(git(&detached, &["rev-parse", "HEAD~1"]).trim(), main_before);
    assert_eq!(git(&f.repo(), &["rev-parse", "main"]).trim(), main_before);
    assert_eq!(
        git(&f.repo(), &["rev-parse", "feature"]).trim(),
        out_feature(&linked)
    );
}

fn out_feature(linked: &std::path::Path) -> String {
    git(linked, &["rev-parse", "HEAD"]).trim().to_string()
}

// --------------------------------------------------------------- refusals

#[test]
fn paths_outside_the_worktree_are_refused_and_nothing_is_staged() {
    let f = Fixture::new();
    let before = f.head();
    let outside = f.tmp.path().join("outside");
    fs::create_dir_all(&outside).unwrap();
    fs::write(outside.join("secret.txt"), "s\n").unwrap();
    std::os::unix::fs::symlink(&outside, f.repo().join("out")).unwrap();
    f.put("inside.txt", "i\n");
    let cases = [
        (
            "/etc/passwd",
            "commit /etc/passwd: path \"/etc/passwd\" escapes sandbox \"<worktree>\"",
        ),
        (
            "../outside/secret.txt",
            "commit ../outside/secret.txt: path \"../outside/secret.txt\" escapes sandbox \"<worktree>\"",
        ),
        (
            "a/../../x",
            "commit a/../../x: the path has a \"..\" segment; name the file directly",
        ),
        (
            "out/secret.txt",
            "commit out/secret.txt: \"out\" is a symbolic link; git commits a link itself, never what lies beyond it",
        ),
        (
            ".git/config",
            "commit .git/config: .git/ is git's own data, not worktree content",
        ),
        (
            "./.git/hooks",
            "commit ./.git/hooks: .git/ is git's own data, not worktree content",
        ),
    ];
    for (path, text) in cases {
        let out = f.commit(json!({"op": "commit", "message": "m", "paths": ["inside.txt", path]}));
        assert_eq!(refused(&out), text, "{path}");
    }
    let out = f.commit(json!({"op": "commit", "message": "m", "paths": ["nope.txt"]}));
    assert_eq!(
        refused(&out),
        "commit: git add refused: fatal: pathspec 'nope.txt' did not match any files"
    );
    assert_eq!(f.head(), before);
    assert_eq!(f.status(), "?? inside.txt\n?? out\n", "nothing was staged");
}

#[test]
fn pathspec_magic_is_literal() {
    let f = Fixture::new();
    f.put("a.txt", "a\n");
    f.put(":(glob)*", "odd name\n");
    let out = f.commit(json!({"op": "commit", "message": "m", "paths": [":(glob)*"]}));
    assert_eq!(files(&out), [":(glob)*"]);
    assert_eq!(f.status(), "?? a.txt\n");
}

#[test]
fn a_worktree_that_is_not_a_repository_is_refused() {
    let f = Fixture::new();
    let plain = f.tmp.path().join("plain");
    fs::create_dir_all(&plain).unwrap();
    fs::write(plain.join("a.txt"), "a\n").unwrap();
    let text = "commit: the worktree is not a git repository (the operator must make it one, e.g. with git init or git worktree add)";
    let out = ok_output(f.run_in(&plain, json!({"op": "commit", "message": "m"})));
    assert_eq!(refused(&out), text);
    // A subdirectory of someone else's repository is not a repository of its own.
    f.put("sub/a.txt", "a\n");
    let before = f.head();
    let out = ok_output(f.run_in(
        &f.repo().join("sub"),
        json!({"op": "commit", "message": "m"}),
    ));
    assert_eq!(refused(&out), text);
    assert_eq!(f.head(), before);
    assert_eq!(f.status(), "?? sub/\n");
}

/// A linked worktree (`git worktree add`, as `worldd session new --repo` makes) whose
/// repository the daemon cannot see, as under a service unit's `ProtectHome=`: git says only
/// "not a git repository", and the agent was told the operator must make one, which the
/// operator had done. The refusal says what is wrong; the operator's log names the path.
#[test]
fn a_linked_worktree_whose_repository_the_daemon_cannot_reach_is_refused_as_such() {
    let (f, log) = Fixture::logged();
    let linked = f.linked_worktree("linked", &["--detach"]);
    fs::write(linked.join("a.txt"), "a\n").unwrap();
    // The repository out of the daemon's sight.
    let hidden = f.tmp.path().join("hidden");
    fs::rename(f.repo(), &hidden).unwrap();
    let out = ok_output(f.run_in(&linked, json!({"op": "commit", "message": "m"})));
    assert_eq!(
        refused(&out),
        "commit: the worktree's .git names a git directory this daemon cannot reach (no such file or directory); nothing was committed (the operator must keep the repository where the daemon can read and write it)"
    );
    let gone = f.repo().join(".git/worktrees/linked");
    assert_eq!(
        log.lines(),
        [format!(
            "git: the worktree {} has a .git file naming {}, which this daemon cannot reach (no such file or directory): a service unit's ProtectHome= or PrivateTmp= hides /home and /tmp, and a repository the daemon commits to must be where it can read and write (its ReadWritePaths)",
            linked.display(),
            gone.display()
        )]
    );
    // Back in sight, the same worktree commits.
    fs::rename(&hidden, f.repo()).unwrap();
    let out = ok_output(f.run_in(&linked, json!({"op": "commit", "message": "m"})));
    assert_eq!(files(&out), ["a.txt"]);
}

/// A linked worktree whose repository is in sight but no longer lists it (its record under
/// the repository's `worktrees/` removed, as `git worktree prune` does): not said as a
/// repository out of the daemon's sight.
#[test]
fn a_linked_worktree_its_repository_no_longer_lists_is_refused_as_such() {
    let f = Fixture::new();
    let linked = f.tmp.path().join("pruned");
    git(
        &f.repo(),
        &[
            "worktree",
            "add",
            "-q",
            "--detach",
            linked.to_str().unwrap(),
        ],
    );
    fs::write(linked.join("a.txt"), "a\n").unwrap();
    fs::remove_dir_all(f.repo().join(".git/worktrees/pruned")).unwrap();
    let before = f.head();
    let out = ok_output(f.run_in(&linked, json!({"op": "commit", "message": "m"})));
    assert_eq!(
        refused(&out),
        "commit: the worktree's repository no longer lists it as a worktree (its record there was removed, as git worktree prune does); nothing was committed (the operator must make it a worktree of the repository again)"
    );
    assert_eq!(f.head(), before);
}

#[test]
fn message_and_paths_are_checked_by_the_handler_too() {
    let f = Fixture::new();
    f.put("a.txt", "a\n");
    let before = f.head();
    let cases = [
        (
            json!({"op": "commit", "message": ""}),
            "commit: the message is empty; a commit needs a message".to_string(),
        ),
        (
            json!({"op": "commit", "message": " \n\t"}),
            "commit: the message is empty; a commit needs a message".to_string(),
        ),
        (
            json!({"op": "commit", "message": "x".repeat(4097)}),
            "commit: the message is 4097 bytes; the limit is 4096".to_string(),
        ),
        (
            json!({"op": "commit", "message": "a\u{0}b"}),
            "commit: the message contains a NUL byte".to_string(),
        ),
        (
            json!({"op": "commit", "message": "m", "paths": []}),
            "commit: \"paths\" names no path; omit it to commit every change".to_string(),
        ),
        (
            json!({"op": "commit", "message": "m", "paths": vec!["a.txt"; 257]}),
            "commit: \"paths\" has 257 items; the limit is 256".to_string(),
        ),
        (
            json!({"op": "commit", "message": "m", "paths": [""]}),
            "commit: a path is empty".to_string(),
        ),
        (
            json!({"op": "commit", "message": "m", "paths": ["a\u{0}b"]}),
            "commit a\\0b: the path contains a NUL byte".to_string(),
        ),
        (
            json!({"op": "commit", "message": "m", "paths": ["p".repeat(4097)]}),
            "commit: a path is 4097 bytes; the limit is 4096".to_string(),
        ),
        (
            // Refused by its length, so the answer does not repeat a megabyte of path.
            json!({"op": "commit", "message": "m", "paths": [format!("{}\u{0}", "p".repeat(1 << 20))]}),
            "commit: a path is 1048577 bytes; the limit is 4096".to_string(),
        ),
    ];
    for (payload, text) in cases {
        let out = f.commit(payload.clone());
        assert_eq!(refused(&out), text, "{payload}");
    }
    assert_eq!(f.head(), before);
    let out = f.commit(json!({"op": "commit", "message": "x".repeat(4096)}));
    assert_eq!(out["ok"], json!(true), "4096 bytes is within the limit");
}

#[test]
fn malformed_requests_fail_with_the_reference_texts() {
    let f = Fixture::new();
    f.put("a.txt", "a\n");
    let before = f.head();
    let mut r = request(&f.repo(), json!({"op": "commit", "message": "m"}));
    r.scope = "x".into();
    assert_eq!(
        failed(f.handler.execute(r)),
        "broker: Git.Commit refused: scope \"x\" is not \"worktree\""
    );
    let cases = [
        (json!({"op": "push", "message": "m"}), "broker: Git.Commit refuses op \"push\": not in this effect's op allowlist"),
        (json!({"op": "amend", "message": "m"}), "broker: Git.Commit refuses op \"amend\": not in this effect's op allowlist"),
        (json!({"op": "commit", "MESSAGE": "m"}), "broker: Git.Commit refused: key \"MESSAGE\" aliases \"message\""),
        (json!({"op": "commit", "message": "m", "Paths": []}), "broker: Git.Commit refused: key \"Paths\" aliases \"paths\""),
        (json!({"Op": "commit", "message": "m"}), "broker: Git.Commit refused: key \"Op\" aliases \"op\""),
        (json!({"message": "m"}), "broker: Git.Commit refused: payload has no \"op\""),
        (json!({"op": 1, "message": "m"}), "broker: Git.Commit refused: payload key \"op\" must be a string"),
        (json!({"op": "commit"}), "broker: Git.Commit refused: op \"commit\" needs payload key \"message\""),
        (json!({"op": "commit", "message": 3}), "broker: Git.Commit refused: payload key \"message\" of op \"commit\" must be a string"),
        (json!({"op": "commit", "message": "m", "paths": "a.txt"}), "broker: Git.Commit refused: payload key \"paths\" of op \"commit\" must be an array of strings"),
        (json!({"op": "commit", "message": "m", "paths": [1]}), "broker: Git.Commit refused: payload key \"paths\" of op \"commit\" must be an array of strings"),
        (json!({"op": "commit", "message": "m", "amend": true}), "broker: Git.Commit refused: op \"commit\" takes no payload key \"amend\""),
        (json!(["commit"]), "broker: Git.Commit refused: payload is not a JSON object"),
    ];
    for (payload, text) in cases {
        assert_eq!(failed(f.run(payload.clone())), text, "{payload}");
    }
    let mut r = request(&f.repo(), json!({"op": "commit", "message": "m"}));
    r.worktree = None;
    assert_eq!(
        failed(f.handler.execute(r)),
        "broker: Git.Commit refused: the request binds no worktree (scope \"worktree\" needs one)"
    );
    let mut r = request(&f.repo(), json!({"op": "commit", "message": "m"}));
    r.worktree = Some("relative/dir".into());
    assert_eq!(
        failed(f.handler.execute(r)),
        "broker: Git.Commit refused: the bound worktree is not an absolute path"
    );
    let mut r = request(&f.repo(), json!({"op": "commit", "message": "m"}));
    r.effect = "Git.Push".into();
    assert_eq!(
        failed(f.handler.execute(r)),
        "broker: the git plugin does not handle effect \"Git.Push\""
    );
    assert_eq!(f.head(), before);
    assert_eq!(f.status(), "?? a.txt\n");
}

#[test]
fn running_out_of_time_before_the_commit_fails_and_commits_nothing() {
    let f = Fixture::new();
    f.put("a.txt", "a\n");
    let before = f.head();
    let mut r = request(&f.repo(), json!({"op": "commit", "message": "m"}));
    r.deadline_ms = 1; // less than the handler's margin: no time at all
                       // No time at all: the first git run is never started, and says so.
    assert_eq!(
        failed(f.handler.execute(r)),
        "commit: git rev-parse was not started: the time limit (0 ms: the daemon's deadline for the call less 750 ms) had run out; nothing was committed"
    );
    assert_eq!(f.head(), before);
}

// ----------------------------------------------------------------- config

#[test]
fn without_an_author_the_plugin_declines() {
    for config in [
        json!({}),
        json!(null),
        json!({"author": ""}),
        json!({"stateDir": "/tmp/x"}),
    ] {
        // No author in the config, and none in git's configuration where the daemon runs.
        let err = GitPlugin::build(config.clone(), Host::noop(), || None)
            .err()
            .unwrap();
        assert_eq!(
            err,
            "declined: no commit author configured (start worldd serve with --plugin-config git.author=\"Name <email>\")",
            "{config}"
        );
        assert!(err.starts_with(worldd_git::DECLINED));
    }
}

#[test]
fn without_an_author_key_the_identity_from_git_config_is_taken_and_logged() {
    let (log, host) = Log::host();
    let handler = GitPlugin::build(json!({"timeoutMs": 5000}), host, || {
        Some("Ada Lovelace <ada@example.com>".into())
    })
    .unwrap();
    assert_eq!(
        handler.policy().author.display(),
        "Ada Lovelace <ada@example.com>"
    );
    assert_eq!(
        log.lines(),
        ["git plugin: commits are authored by Ada Lovelace <ada@example.com>, the identity `git config user.name` / `user.email` gives here (--plugin-config git.author=\"Name <email>\" or [plugins.git] author chooses another)"]
    );
    // An author in the config wins, and the identity is never looked up.
    let handler = GitPlugin::build(json!({"author": AUTHOR}), Host::noop(), || {
        panic!("looked up")
    })
    .unwrap();
    assert_eq!(handler.policy().author.display(), AUTHOR);
}

#[test]
fn bad_config_is_refused_in_one_line() {
    let cases = [
        (json!({"author": AUTHOR, "email": "x"}), "git config: unknown key \"email\"; git accepts only: author, stateDir, timeoutMs"),
        (json!({"author": "World Test"}), "git config: \"author\" must be \"Name <email>\" (it does not end with \">\")"),
        (json!({"author": "world@example.invalid>"}), "git config: \"author\" must be \"Name <email>\" (there is no \"<\" before the email)"),
        (json!({"author": "<world@example.invalid>"}), "git config: \"author\" must be \"Name <email>\" (the name is empty)"),
        (json!({"author": "World <>"}), "git config: \"author\" must be \"Name <email>\" (the email is empty)"),
        (json!({"author": "World <a b@c>"}), "git config: \"author\" must be \"Name <email>\" (the email contains \"<\", \">\" or whitespace)"),
        (json!({"author": "Wor>ld <a@b>"}), "git config: \"author\" must be \"Name <email>\" (the name contains \"<\" or \">\")"),
        (json!({"author": "World\n <a@b>"}), "git config: \"author\" must be \"Name <email>\" (it contains a control character)"),
        (json!({"author": 7}), "git config: \"author\" must be a string \"Name <email>\""),
        (json!({"author": format!("{} <a@b>", "n".repeat(251))}), "git config: \"author\" must be \"Name <email>\" (it is 257 bytes; the limit is 256)"),
        (json!({"author": AUTHOR, "stateDir": "rel"}), "git config: \"stateDir\" must be an absolute path, not \"rel\""),
        (json!({"author": AUTHOR, "timeoutMs": 0}), "git config: \"timeoutMs\" must be an integer from 1 to 600000"),
        (json!({"author": AUTHOR, "timeoutMs": "5"}), "git config: \"timeoutMs\" must be an integer from 1 to 600000"),
        (json!([1]), "git config must be a JSON object"),
    ];
    for (config, text) in cases {
        // No author in the config, and none in git's configuration where the daemon runs.
        let err = GitPlugin::build(config.clone(), Host::noop(), || None)
            .err()
            .unwrap();
        assert_eq!(err, text, "{config}");
        assert!(!err.starts_with("declined: "));
    }
}

#[test]
fn state_dir_holds_an_empty_home_and_the_policy_digest_follows_the_config() {
    let f = Fixture::new();
    let home = f.tmp.path().join("state/home");
    assert_eq!(f.handler.home(), home);
    f.put("a.txt", "a\n");
    f.commit(json!({"op": "commit", "message": "m"}));
    assert!(home.is_dir());
    assert_eq!(
        fs::read_dir(&home).unwrap().count(),
        0,
        "git wrote into HOME"
    );
    assert_eq!(
        fs::metadata(&home).unwrap().permissions().mode() & 0o777,
        0o700
    );
    let p = f.handler.policy();
    assert_eq!(
        p.canonical_json(),
        "{\"author\":\"World Test <world@example.invalid>\",\"gitlinks\":false,\"hooks\":false,\"policy\":\"worldd/git-policy/v2\",\"push\":false,\"rewrite\":false,\"sandbox\":\"worktree\",\"timeoutMs\":8000}"
    );
    let other = GitPlugin::new(
        json!({"author": "Other <o@example.invalid>", "timeoutMs": 5000}),
        Host::noop(),
    )
    .unwrap();
    assert_ne!(other.policy_digest(), f.handler.policy_digest());
    assert!(other.home().is_dir(), "a temporary HOME without stateDir");
}

#[test]
fn a_repository_config_cannot_sign_or_run_programs() {
    let f = Fixture::new();
    let marker = f.tmp.path().join("program-ran");
    let program = f.tmp.path().join("prog.sh");
    fs::write(
        &program,
        format!("#!/bin/sh\ntouch {}\nexit 1\n", marker.display()),
    )
    .unwrap();
    fs::set_permissions(&program, fs::Permissions::from_mode(0o755)).unwrap();
    let prog = program.to_str().unwrap();
    for (key, value) in [
        ("commit.gpgSign", "true"),
        ("gpg.program", prog),
        ("core.fsmonitor", prog),
        ("gc.auto", "1"),
    ] {
        git(&f.repo(), &["config", key, value]);
    }
    f.put("a.txt", "a\n");
    let out = f.commit(json!({"op": "commit", "message": "m"}));
    assert_eq!(out["ok"], json!(true), "{out:?}");
    assert!(!marker.exists(), "a configured program ran");
    let sig = git(&f.repo(), &["cat-file", "commit", "HEAD"]);
    assert!(!sig.contains("gpgsig"), "{sig}");
}

#[test]
fn outputs_are_small_objects_with_no_host_paths() {
    let f = Fixture::new();
    f.put("a.txt", "a\n");
    let out = f.commit(json!({"op": "commit", "message": "m"}));
    let text = Value::Object(out).to_string();
    assert!(!text.contains(f.tmp.path().to_str().unwrap()), "{text}");
    let out = f.commit(json!({"op": "commit", "message": "m", "paths": ["zzz"]}));
    let text = Value::Object(out).to_string();
    assert!(!text.contains(f.tmp.path().to_str().unwrap()), "{text}");
}

#[test]
fn outcome_kinds_for_the_reference_refusal() {
    // The empty commit is an effect that ran and said no: `ok`, never failed.
    let f = Fixture::new();
    assert!(matches!(
        f.run(json!({"op": "commit", "message": "m"})),
        Outcome::Ok { .. }
    ));
}

#[test]
fn a_worktree_that_is_a_symlink_is_refused_and_nothing_is_committed() {
    let f = Fixture::new();
    let before = f.head();
    f.put("src/a.txt", "alpha\n");
    // Even a link to the real repository: the worktree must be the directory itself (one
    // swapped for a link since the daemon checked it would have git commit where it leads).
    let link = f.tmp.path().join("ep.link");
    std::os::unix::fs::symlink(f.repo(), &link).unwrap();
    for payload in [
        json!({"op": "commit", "message": "m"}),
        json!({"op": "commit", "message": "m", "paths": ["src/a.txt"]}),
    ] {
        assert_eq!(
            failed(f.run_in(&link, payload)),
            "broker: Git.Commit failed: the episode's worktree is a symbolic link; a worktree must be a directory in the workspace root itself"
        );
    }
    assert_eq!(f.head(), before);
    assert_eq!(f.status(), "?? src/\n");
}

// ----------------------------------------------------------------- what git leaves out

/// A new file that `.gitignore` hides: "nothing to commit: the worktree has no changes" while
/// the agent's file was there, and with `paths` git's first line only ("The following paths
/// are ignored by one of your .gitignore files:"), naming nothing. Both now name the file and
/// say that git-commit never adds it.
#[test]
fn a_new_file_that_gitignore_hides_is_named_in_the_refusal_not_called_no_change() {
    let f = Fixture::new();
    f.put(".gitignore", "*.ail\nbuild/\n");
    git(&f.repo(), &["add", ".gitignore"]);
    git(&f.repo(), &["commit", "-q", "-m", "ignore"]);
    let before = f.head();
    f.put("main.ail", "module main\n");
    let out = f.commit(json!({"op": "commit", "message": "m"}));
    assert_eq!(
        refused(&out),
        "nothing to commit: the worktree has no changes git tracks (main.ail is ignored by .gitignore or .git/info/exclude; git-commit never adds an ignored file (take away the rule that ignores it to commit it))"
    );
    let out = f.commit(json!({"op": "commit", "message": "m", "paths": ["main.ail"]}));
    assert_eq!(
        refused(&out),
        "commit: git add refused: The following paths are ignored by one of your .gitignore files: main.ail; git-commit never adds an ignored file (take away the rule that ignores it to commit it)"
    );
    // Four ignored: three named, the rest counted.
    for name in ["a.ail", "b.ail", "build/x.o"] {
        f.put(name, "x\n");
    }
    let out = f.commit(json!({"op": "commit", "message": "m"}));
    assert_eq!(
        refused(&out),
        "nothing to commit: the worktree has no changes git tracks (a.ail, b.ail, build/ and 1 more are ignored by .gitignore or .git/info/exclude; git-commit never adds an ignored file (take away the rule that ignores it to commit it))"
    );
    assert_eq!(f.head(), before);
    // With nothing ignored and nothing changed, the refusal is the plain one.
    let plain = Fixture::new();
    let out = plain.commit(json!({"op": "commit", "message": "m"}));
    assert_eq!(refused(&out), NOTHING_TO_COMMIT);
}

/// A FIFO is skipped by `git add` without a word: "nothing to commit: the given paths have no
/// changes" (or "the worktree has no changes"). The refusal now says why, for a FIFO named,
/// one below a named directory, and any in the worktree when no paths are named.
#[test]
fn a_fifo_git_skips_is_named_in_the_refusal_not_called_no_change() {
    let f = Fixture::new();
    fs::create_dir(f.repo().join("pipes")).unwrap();
    for fifo in ["fifo", "pipes/p1"] {
        let c = std::ffi::CString::new(f.repo().join(fifo).to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    }
    let out = f.commit(json!({"op": "commit", "message": "m", "paths": ["fifo"]}));
    assert_eq!(
        refused(&out),
        "nothing to commit: the given paths have no changes git tracks (fifo is not a regular file, a directory or a symbolic link, and git records none of those)"
    );
    let out = f.commit(json!({"op": "commit", "message": "m", "paths": ["pipes"]}));
    assert_eq!(
        refused(&out),
        "nothing to commit: the given paths have no changes git tracks (pipes/p1 is not a regular file, a directory or a symbolic link, and git records none of those)"
    );
    let out = f.commit(json!({"op": "commit", "message": "m"}));
    assert_eq!(
        refused(&out),
        "nothing to commit: the worktree has no changes git tracks (fifo, pipes/p1 are not regular files, directories or symbolic links, and git records none of those)"
    );
}

/// A filter defined only in the operator's user config (as `git lfs install` defines LFS's)
/// smudged the files an operator's checkout made, and git-commit, which reads no user config,
/// committed them smudged: the repository got "hello" where it stores "uryyb". A staged file
/// whose filter the repository's own config does not define is now refused; defined there, the
/// filter cleans what is committed.
#[test]
fn a_staged_file_whose_filter_only_the_user_config_defines_is_refused_not_committed_smudged() {
    let f = Fixture::new();
    f.put(".gitattributes", "*.txt filter=rot\n");
    git(&f.repo(), &["add", ".gitattributes"]);
    git(&f.repo(), &["commit", "-q", "-m", "attributes"]);
    let before = f.head();
    // What an operator's checkout with the user-config filter leaves: the smudged text.
    f.put("note.txt", "hello\n");
    f.put("plain.md", "plain\n");
    let out = f.commit(json!({"op": "commit", "message": "m"}));
    assert_eq!(
        refused(&out),
        "commit note.txt: its attributes give it filter \"rot\", which the repository's own config does not define (git-commit reads no user or system config, so the file would be committed as the worktree holds it, not cleaned); the operator defines filter.rot in the repository's config (git lfs install --local for LFS)"
    );
    assert_eq!(f.head(), before);
    // Files without the attribute are committed as before.
    let out = f.commit(json!({"op": "commit", "message": "m", "paths": ["plain.md"]}));
    assert_eq!(out["files"], json!(["plain.md"]));
    // Defined in the repository's own config, the filter applies.
    git(
        &f.repo(),
        &["config", "filter.rot.clean", "tr a-zA-Z n-za-mN-ZA-M"],
    );
    git(
        &f.repo(),
        &["config", "filter.rot.smudge", "tr a-zA-Z n-za-mN-ZA-M"],
    );
    let out = f.commit(json!({"op": "commit", "message": "m"}));
    assert_eq!(out["files"], json!(["note.txt"]));
    assert_eq!(
        git(&f.repo(), &["cat-file", "blob", "HEAD:note.txt"]),
        "uryyb\n"
    );
}

#[test]
fn a_commit_whose_names_pass_the_answer_cap_lists_what_fits_and_counts_the_rest() {
    // 600 paths of 1,011 bytes, 1,000 of them `"`: 2,013 bytes each as JSON, 1.2 MB in all,
    // past what the daemon accepts as one answer. The commit is made; it must be `ok`.
    let f = Fixture::new();
    let quotes: std::path::PathBuf = (0..4).map(|_| "\"".repeat(250)).collect();
    fs::create_dir_all(f.repo().join(&quotes)).unwrap();
    let total = 600;
    for i in 0..total {
        fs::write(f.repo().join(&quotes).join(format!("f{i:03}")), "x").unwrap();
    }
    let before = f.head();
    let out = f.commit(json!({"op": "commit", "message": "quotes"}));
    assert_eq!(out["ok"], json!(true), "{:?}", out.get("refused"));
    assert_ne!(f.head(), before, "the commit was made");
    assert_eq!(f.status(), "");
    let listed = out["files"].as_array().unwrap().len();
    assert!(listed > 0, "{listed}");
    let bound = worldd_git::RESULT_CAP - worldd_git::WORLD_ROOM;
    let size = Value::Object(out.clone()).to_string().len();
    assert!(size <= bound, "{size} bytes, more than {bound}");
    assert_eq!(out["more_files"], json!(total - listed));
    // As many as fit: the next name (git lists them sorted) would not have.
    let next = format!("{}/f{listed:03}", quotes.to_str().unwrap());
    let mut more = out.clone();
    more["files"].as_array_mut().unwrap().push(json!(next));
    let size = Value::Object(more).to_string().len();
    assert!(size > bound, "{size} bytes fit in {bound}");
    // The names listed are the commit's first ones, as git wrote them.
    let names = files(&out);
    assert_eq!(names[0], format!("{}/f000", quotes.to_str().unwrap()));
    assert_eq!(
        names[listed - 1],
        format!("{}/f{:03}", quotes.to_str().unwrap(), listed - 1)
    );
}

#[test]
fn an_index_changed_during_the_commit_is_left_as_it_is_not_replaced_by_the_private_one() {
    // A clean filter, run by git add while the commit stages into its private index, stages
    // extra.txt into the worktree's own index: as someone running git add beside the commit.
    let (f, log) = Fixture::logged();
    let repo = f.repo();
    git(
        &repo,
        &[
            "config",
            "filter.stager.clean",
            "env -u GIT_INDEX_FILE git update-index --add extra.txt; cat",
        ],
    );
    f.put(".gitattributes", "note.txt filter=stager\n");
    git(&repo, &["add", ".gitattributes"]);
    git(&repo, &["commit", "-q", "-m", "attributes"]);
    f.put("extra.txt", "staged beside the commit\n");
    f.put("note.txt", "note\n");
    let before = f.head();
    let out = f.commit(json!({"op": "commit", "message": "m", "paths": ["note.txt"]}));
    assert_eq!(out["files"], json!(["note.txt"]), "{out:?}");
    assert_ne!(f.head(), before);
    // What was staged during the commit is still staged: the index was not replaced.
    assert_eq!(
        git(&repo, &["ls-files", "--stage", "--", "extra.txt"])
            .split_whitespace()
            .last(),
        Some("extra.txt")
    );
    assert!(!repo.join(".git/index.lock").exists());
    assert_eq!(
        log.lines()
            .iter()
            .filter(|l| l.contains("index was not updated"))
            .collect::<Vec<_>>(),
        ["git: the commit was made but the worktree's index was not updated (it changed during the commit (something staged into it or refreshed it), and is left as it is); git status may show the committed changes as staged"]
    );
}

#[test]
fn an_index_unchanged_during_the_commit_is_replaced_by_the_private_one() {
    let (f, log) = Fixture::logged();
    f.put("note.txt", "note\n");
    f.commit(json!({"op": "commit", "message": "m"}));
    assert_eq!(f.status(), "", "the index follows the commit");
    assert!(
        log.lines()
            .iter()
            .all(|l| !l.contains("index was not updated")),
        "{:?}",
        log.lines()
    );
}
