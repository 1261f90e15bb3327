//! `session new --repo` runs git on the repository it names, and only as the git plugin runs
//! git: not steered by the operator's `GIT_*` environment, without the repository's hooks or
//! fsmonitor program, and without the operator's user config or user attributes file (whose
//! filters git-commit never applies). And `session new` beside a daemon that serves another workspace root says so.

mod common;

use std::path::Path;

use common::*;

/// A repository at `at` whose one commit holds `WHO` = `who`.
fn repository(at: &Path, who: &str) {
    std::fs::create_dir_all(at).unwrap();
    git(at, &["init", "-q"]);
    std::fs::write(at.join("WHO"), format!("{who}\n")).unwrap();
    git(at, &["add", "WHO"]);
    git(at, &["commit", "-q", "-m", "first"]);
}

/// A store in `dir/db`, and `session new EP --repo REPO` run there at a terminal with `env`
/// (shell assignments) before it, answering `y`.
fn session_new(dir: &Path, episode: &str, repo: &Path, env: &str) -> (i32, String) {
    let db = dir.join("db");
    if !db.exists() {
        drop(broker_core::store::Store::create(&db).unwrap());
    }
    at_terminal(
        &format!(
            "{env} {WORLDD} session new {episode} --db {} --workspace-root {} --repo {} --preset se-tools --out {}",
            db.display(),
            dir.join("wt").display(),
            repo.display(),
            dir.join(format!("{episode}.session")).display()
        ),
        b"y\n",
    )
}

/// `GIT_DIR` (and `GIT_WORK_TREE`) in the operator's shell beat `git -C REPO`: the worktree
/// was checked out of that other repository, and a `--repo` that is no repository passed.
#[test]
fn session_new_checks_out_the_repo_it_names_whatever_git_dir_the_environment_sets() {
    let dir = tempfile::tempdir().unwrap();
    let (wanted, other) = (dir.path().join("wanted"), dir.path().join("other"));
    repository(&wanted, "wanted");
    repository(&other, "other");
    let env = format!(
        "GIT_DIR={0}/.git GIT_WORK_TREE={0} GIT_INDEX_FILE={0}/.git/index GIT_CONFIG_PARAMETERS=\"'core.hookspath'='/nowhere'\"",
        other.display()
    );
    let (code, shown) = session_new(dir.path(), "ep1", &wanted, &env);
    assert_eq!(code, 0, "{shown}");
    let worktree = dir.path().join("wt/ep1");
    assert_eq!(
        std::fs::read_to_string(worktree.join("WHO")).unwrap(),
        "wanted\n"
    );
    let gitfile = std::fs::read_to_string(worktree.join(".git")).unwrap();
    assert_eq!(
        gitfile,
        format!(
            "gitdir: {}/.git/worktrees/ep1\n",
            wanted.canonicalize().unwrap().display()
        )
    );
    // A plain directory is refused by name, whatever repository GIT_DIR names.
    let plain = dir.path().join("plain");
    std::fs::create_dir(&plain).unwrap();
    let (code, shown) = session_new(dir.path(), "ep2", &plain, &env);
    assert_eq!(code, 1, "{shown}");
    assert_eq!(
        said(&shown, "y"),
        [format!(
            "worldd: --repo {}: not a git repository (git says: fatal: not a git repository (or any of the parent directories): .git); give the repository the worktree is checked out from",
            plain.display()
        )]
    );
    assert!(!dir.path().join("wt/ep2").exists(), "{shown}");
    // `other` got no worktree.
    let listed = git(&other, &["worktree", "list", "--porcelain"]);
    assert_eq!(listed.matches("worktree ").count(), 1, "{listed}");
}

/// The repository's `post-checkout` hook and `core.fsmonitor` program ran as the operator at
/// `session new`, though git-commit never runs either.
#[test]
fn session_new_runs_no_hook_or_fsmonitor_program_of_the_repo() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    repository(&repo, "repo");
    let (hooked, monitored) = (
        dir.path().join("HOOK-RAN"),
        dir.path().join("FSMONITOR-RAN"),
    );
    let hook = repo.join(".git/hooks/post-checkout");
    std::fs::write(&hook, format!("#!/bin/sh\nid > {}\n", hooked.display())).unwrap();
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    git(
        &repo,
        &[
            "config",
            "core.fsmonitor",
            &format!("sh -c 'id > {}'", monitored.display()),
        ],
    );
    let (code, shown) = session_new(dir.path(), "ep", &repo, "");
    assert_eq!(code, 0, "{shown}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("wt/ep/WHO")).unwrap(),
        "repo\n"
    );
    assert!(!hooked.exists(), "post-checkout ran");
    assert!(!monitored.exists(), "core.fsmonitor ran");
    // The hook is a real one: git run the ordinary way runs it.
    git(&repo, &["checkout", "-q", "--detach"]);
    assert!(hooked.exists(), "the hook does not run at all");
}

/// A filter in the operator's user config (`git lfs install` puts one there) smudged the
/// checkout, and git-commit, which reads no user config, then committed the smudged content.
/// The checkout now reads no user config either: the worktree holds what the repository holds,
/// and git as git-commit runs it sees no change.
#[test]
fn session_new_checks_out_without_the_operators_user_config_filters_as_git_commit_commits() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    git(&repo, &["init", "-q"]);
    std::fs::write(repo.join(".gitattributes"), "*.txt filter=rot\n").unwrap();
    // The repository stores "uryyb" (rot13 of "hello").
    std::fs::write(repo.join("note.txt"), "uryyb\n").unwrap();
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-q", "-m", "first"]);
    let home = dir.path().join("home");
    std::fs::create_dir(&home).unwrap();
    std::fs::write(
        home.join(".gitconfig"),
        "[filter \"rot\"]\n\tclean = tr a-zA-Z n-za-mN-ZA-M\n\tsmudge = tr a-zA-Z n-za-mN-ZA-M\n\trequired = true\n",
    )
    .unwrap();
    // The operator's git applies the filter: a checkout by it would read "hello".
    let smudged = std::process::Command::new("git")
        .args([
            "-C",
            &repo.display().to_string(),
            "cat-file",
            "--filters",
            "HEAD:note.txt",
        ])
        .env("HOME", &home)
        .env_remove("GIT_CONFIG_GLOBAL")
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&smudged.stdout), "hello\n");
    let (code, shown) = session_new(
        dir.path(),
        "ep",
        &repo,
        &format!(
            "env -u GIT_CONFIG_GLOBAL -u XDG_CONFIG_HOME HOME={}",
            home.display()
        ),
    );
    assert_eq!(code, 0, "{shown}");
    let worktree = dir.path().join("wt/ep");
    assert_eq!(
        std::fs::read_to_string(worktree.join("note.txt")).unwrap(),
        "uryyb\n"
    );
    // git without user config, as git-commit runs it, finds nothing changed.
    assert_eq!(git(&worktree, &["status", "--porcelain"]), "");
}

/// git reads the operator's user attributes file (`$XDG_CONFIG_HOME/git/attributes`, else
/// `~/.config/git/attributes`) whatever `GIT_CONFIG_GLOBAL` says: a `filter` attribute kept
/// there, naming a filter the repository's own config defines, smudged the checkout, and
/// git-commit (whose `HOME` is the plugin's) never cleaned what it committed. The checkout now
/// reads no user attributes file either, from either place.
#[test]
fn session_new_checks_out_without_the_operators_user_attributes_file_as_git_commit_commits() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    git(&repo, &["init", "-q"]);
    std::fs::write(repo.join("note.txt"), "hello\n").unwrap();
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-q", "-m", "first"]);
    // The repository's own config defines the filter, as git.md recommends.
    git(
        &repo,
        &["config", "filter.rot.clean", "tr a-zA-Z n-za-mN-ZA-M"],
    );
    git(
        &repo,
        &["config", "filter.rot.smudge", "tr a-zA-Z n-za-mN-ZA-M"],
    );
    git(&repo, &["config", "filter.rot.required", "true"]);
    let xdg = dir.path().join("xdg");
    let home = dir.path().join("home");
    for attributes in [xdg.join("git"), home.join(".config/git")] {
        std::fs::create_dir_all(&attributes).unwrap();
        std::fs::write(attributes.join("attributes"), "*.txt filter=rot\n").unwrap();
    }
    let runs = [
        (
            "ep1",
            format!("env -u GIT_CONFIG_GLOBAL XDG_CONFIG_HOME={}", xdg.display()),
        ),
        (
            "ep2",
            format!(
                "env -u GIT_CONFIG_GLOBAL -u XDG_CONFIG_HOME HOME={}",
                home.display()
            ),
        ),
    ];
    for (episode, env) in runs {
        let (code, shown) = session_new(dir.path(), episode, &repo, &env);
        assert_eq!(code, 0, "{shown}");
        let worktree = dir.path().join("wt").join(episode);
        assert_eq!(
            std::fs::read_to_string(worktree.join("note.txt")).unwrap(),
            "hello\n",
            "{episode}: the checkout was smudged"
        );
        // git without the user's attributes, as git-commit runs it, finds nothing changed.
        assert_eq!(git(&worktree, &["status", "--porcelain"]), "", "{episode}");
    }
}

/// `session new` beside a daemon whose root is another made the worktree where the daemon
/// never looks, and said nothing; now it warns before the question, naming the store and the
/// root, and says nothing when the daemon serves the root it uses.
#[test]
fn session_new_warns_when_the_daemon_serving_the_store_does_not_serve_its_workspace_root() {
    let d = Daemon::start(&[], &[]);
    let elsewhere = d.dir.path().join("elsewhere");
    let new_in = |root: &Path| {
        at_terminal(
            &format!(
                "{WORLDD} session new ep --db {} --workspace-root {} --preset se-tools --out {}",
                d.db().display(),
                root.display(),
                d.dir.path().join("ep.session").display()
            ),
            b"n\n",
        )
    };
    let (code, shown) = new_in(&elsewhere);
    assert_eq!(code, 1, "{shown}");
    let said = said(&shown, "n");
    assert_eq!(
        said[0],
        format!(
            "worldd session: warning: the daemon serving {} does not serve the workspace root {}: it would never look in the worktree {}/ep made there; answer n and pass --workspace-root with the daemon's",
            d.db().display(),
            elsewhere.display(),
            elsewhere.display()
        ),
        "{shown}"
    );
    assert!(!elsewhere.exists(), "{shown}");
    let (code, shown) = new_in(&d.root());
    assert_eq!(code, 1, "{shown}");
    assert!(!shown.contains("warning"), "{shown}");
}

/// A repository with no commit (HEAD unborn, as `git init` leaves it) passed the check before
/// the question, and `git worktree add` then failed after `y` with git's raw hints. It is
/// refused before the question, nothing made.
#[test]
fn session_new_refuses_a_repo_with_no_commit_before_the_question() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("empty");
    std::fs::create_dir(&repo).unwrap();
    git(&repo, &["init", "-q"]);
    let (code, shown) = session_new(dir.path(), "ep1", &repo, "");
    assert_eq!(code, 1, "{shown}");
    assert_eq!(
        said(&shown, "y"),
        [format!(
            "worldd: --repo {}: has no commit to check out (its HEAD is unborn); commit something first, or give a repository with a commit; nothing was made",
            repo.display()
        )]
    );
    assert!(!dir.path().join("wt/ep1").exists());
    assert!(!dir.path().join("ep1.session").exists());
}

/// A `--repo` worktree whose directory was removed by hand stays registered in the repository:
/// the next `session new --repo` asked, then failed after `y` with git's "missing but already
/// registered worktree". The registration of that very path is replaced (and said); a locked
/// one is refused before the question, with the git command that lifts the lock.
#[test]
fn session_new_replaces_the_registration_of_a_repo_worktree_whose_directory_was_removed() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    repository(&repo, "first");
    let (code, shown) = session_new(dir.path(), "ep1", &repo, "");
    assert_eq!(code, 0, "{shown}");
    let worktree = dir.path().join("wt/ep1");
    std::fs::remove_dir_all(&worktree).unwrap();
    let (code, shown) = session_new(dir.path(), "ep1", &repo, "");
    assert_eq!(code, 0, "{shown}");
    let before = &shown[..shown
        .find("Confirm mint")
        .unwrap_or_else(|| panic!("{shown}"))];
    assert!(
        before.contains(&format!(
            "worldd session new: --repo {} still registers the worktree {}, whose directory was removed: the registration is replaced",
            repo.display(),
            worktree.display()
        )),
        "{shown}"
    );
    assert_eq!(
        std::fs::read_to_string(worktree.join("WHO")).unwrap(),
        "first\n"
    );

    // Locked, and removed: refused before the question; lifted as told, made.
    git(&repo, &["worktree", "lock", path_str(&worktree)]);
    std::fs::remove_dir_all(&worktree).unwrap();
    let (code, shown) = session_new(dir.path(), "ep1", &repo, "");
    assert_eq!(code, 1, "{shown}");
    assert_eq!(
        said(&shown, "y"),
        [format!(
            "worldd: --repo {} still registers a locked worktree at {}, whose directory is gone; nothing was made: run git -C {} worktree unlock {}, then session new again (it replaces the registration)",
            repo.display(),
            worktree.display(),
            repo.display(),
            worktree.display()
        )]
    );
    assert!(!worktree.exists());
    git(&repo, &["worktree", "unlock", path_str(&worktree)]);
    let (code, shown) = session_new(dir.path(), "ep1", &repo, "");
    assert_eq!(code, 0, "{shown}");
    assert!(worktree.join("WHO").is_file());
}
