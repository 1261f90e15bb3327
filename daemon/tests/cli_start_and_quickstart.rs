//! What `quickstart`, `session new` and `serve` check before they make anything, through the
//! real binary: arguments first (an episode that would name a directory outside `--dir`, a
//! bind `serve` refuses, a `--repo` that is no repository), the question before the store and
//! the worktree (so an interrupted question leaves nothing), and a failed start that takes
//! away what it made.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command};
use std::sync::mpsc;

use common::*;

/// An episode is a name, and it names the worktree and the credential file: `../../evil` made
/// `<dir>/worktrees/../../evil`, a directory outside `--dir`, and the store, before it was
/// checked; with a live credential in the file it named, it was never checked at all.
#[test]
fn quickstart_checks_its_episode_before_it_makes_anything_even_with_a_live_credential() {
    let dir = tempfile::tempdir().unwrap();
    let world = dir.path().join("a/w");
    let (code, shown) = quickstart_at_terminal(&world, "--episode ../../evil", b"y\n");
    assert_eq!(code, 1, "{shown}");
    assert_eq!(
        said(&shown, "y"),
        [r#"worldd: invalid episode "../../evil": want ^[a-z0-9][a-z0-9-]{0,63}$"#]
    );
    assert_eq!(names_in(dir.path()), Vec::<String>::new());

    // A live credential of the store in `<dir>/Bad.session`: still refused, nothing made.
    let world = dir.path().join("w");
    store_with_credential_file(&world, "demo", "Bad.session");
    let (code, out, err) = worldd(
        &[
            "quickstart",
            "--dir",
            path_str(&world),
            "--episode",
            "Bad",
            "--print-only",
            "--bind",
            "127.0.0.1:7999",
        ],
        None,
    );
    assert_eq!(code, 1, "{out}{err}");
    assert_eq!(out, "");
    assert_eq!(
        err,
        "worldd: invalid episode \"Bad\": want ^[a-z0-9][a-z0-9-]{0,63}$\n"
    );
    assert_eq!(names_in(&world), ["Bad.session", "db"]);

    // A `--dir` that cannot be made is said before the question, which comes before it is made.
    let (code, shown) = quickstart_at_terminal(&world.join("Bad.session/w"), "", b"y\n");
    assert_eq!(code, 1, "{shown}");
    assert_eq!(
        said(&shown, "y"),
        [format!(
            "worldd: --dir {}: {} is not a directory",
            world.join("Bad.session/w").display(),
            world.join("Bad.session").display()
        )]
    );
}

/// `quickstart` with its question on the terminal, as `script` gives it one: the child and
/// a receiver told once the question shows.
fn quickstart_asking(world: &Path) -> (Child, mpsc::Receiver<()>) {
    let cmd = format!(
        "{WORLDD} quickstart --dir {} --print-only --bind 127.0.0.1:7999",
        world.display()
    );
    asking_at_terminal(&cmd)
}

/// Quickstart made the store and the worktree before its question: Ctrl-C there (or a closed
/// terminal's SIGHUP) left them, and the next run, finding them, took them for not its own, so
/// even an `n` then left them. It now asks before it makes anything.
#[test]
fn ctrl_c_or_a_hangup_at_quickstarts_question_leaves_nothing_and_a_later_n_neither() {
    let dir = tempfile::tempdir().unwrap();
    let world = dir.path().join("w");

    // Ctrl-C typed at the terminal: SIGINT from its line discipline.
    let (mut script, _shown) = quickstart_asking(&world);
    script.stdin.as_mut().unwrap().write_all(b"\x03").unwrap();
    let status = script.wait().unwrap();
    assert!(!status.success());
    assert_eq!(names_in(dir.path()), Vec::<String>::new());

    // A closed terminal: SIGHUP.
    let (mut script, _shown) = quickstart_asking(&world);
    let pid = worldd_pid(path_str(&world));
    let hung = Command::new("kill")
        .args(["-HUP", &pid.to_string()])
        .status()
        .unwrap();
    assert!(hung.success());
    drop(script.stdin.take());
    script.wait().unwrap();
    assert_eq!(names_in(dir.path()), Vec::<String>::new());

    // An `n` makes nothing either, and says only that.
    let (code, shown) = quickstart_at_terminal(&world, "", b"n\n");
    assert_eq!(code, 1, "{shown}");
    assert_eq!(
        said(&shown, "n"),
        ["Confirm mint for episode demo (8 grant(s), expiry +86400s) with a session credential? [y/N] worldd: aborted (not confirmed)"]
    );
    assert_eq!(names_in(dir.path()), Vec::<String>::new());

    // And `y` sets it all up.
    let (code, shown) = quickstart_at_terminal(&world, "", b"y\n");
    assert_eq!(code, 0, "{shown}");
    assert_eq!(names_in(&world), ["db", "demo.session", "worktrees"]);
    assert!(world.join("worktrees/demo").is_dir());
    assert!(world.join("db/data.mdb").is_file());
}

/// `--print-only` printed any `--bind` into the client configuration (`http://nonsense/mcp/`,
/// an address `serve` refuses): it is refused as `serve` refuses it, before anything is made
/// or asked.
#[test]
fn quickstart_print_only_refuses_a_bind_serve_refuses_before_making_anything() {
    let dir = tempfile::tempdir().unwrap();
    let world = dir.path().join("w");
    for (bind, line) in [
        ("nonsense", r#"--bind "nonsense" is not HOST:PORT"#),
        (
            "0.0.0.0:27396",
            r#"--bind "0.0.0.0:27396": host "0.0.0.0" is not loopback: the daemon binds loopback only, 127.0.0.1:PORT, [::1]:PORT or localhost:PORT (to reach it from another machine, see operators.md "Network exposure")"#,
        ),
        (
            "example.com:80",
            r#"--bind "example.com:80": host "example.com" is not loopback: the daemon binds loopback only, 127.0.0.1:PORT, [::1]:PORT or localhost:PORT (to reach it from another machine, see operators.md "Network exposure")"#,
        ),
    ] {
        let (code, shown) = at_terminal(
            &format!(
                "{WORLDD} quickstart --dir {} --print-only --bind {bind}",
                world.display()
            ),
            b"y\n",
        );
        assert_eq!(code, 2, "{bind}: {shown}");
        assert_eq!(
            said(&shown, "y"),
            [format!(
                "worldd: daemon startup failed at bind-policy: {line}"
            )],
            "{bind}"
        );
        assert_eq!(names_in(dir.path()), Vec::<String>::new(), "{bind}");
    }
}

/// `--bind example.com:80` is HOST:PORT; what it breaks is the loopback rule, and that is said.
#[test]
fn a_bind_of_a_name_other_than_localhost_is_told_the_loopback_rule() {
    let dir = tempfile::tempdir().unwrap();
    let r = refused_start(&["--bind", "example.com:80"], dir.path());
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert_eq!(
        r.line,
        r#"worldd: daemon startup failed at bind-policy: --bind "example.com:80": host "example.com" is not loopback: the daemon binds loopback only, 127.0.0.1:PORT, [::1]:PORT or localhost:PORT (to reach it from another machine, see operators.md "Network exposure")"#
    );
    assert_eq!(names_in(dir.path()), Vec::<String>::new());
}

/// `session new --repo` that names no git repository was asked about, and after `y` failed
/// with git's own words (`git worktree add failed (exit status: 128)`): it is refused by name
/// before the question, and a repository still works.
#[test]
fn session_new_refuses_a_repo_that_is_no_git_repository_before_the_question() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    drop(broker_core::store::Store::create(&db).unwrap());
    let root = dir.path().join("wt");
    let plain = dir.path().join("plain");
    std::fs::create_dir(&plain).unwrap();
    let missing = dir.path().join("missing");
    let new_with = |repo: &Path| {
        at_terminal(
            &format!(
                "{WORLDD} session new ep --db {} --workspace-root {} --repo {} --preset se-tools --out {}",
                db.display(),
                root.display(),
                repo.display(),
                dir.path().join("ep.session").display()
            ),
            b"y\n",
        )
    };
    for (repo, git_says) in [
        (
            &missing,
            format!(
                "fatal: cannot change to '{}': No such file or directory",
                missing.display()
            ),
        ),
        (
            &plain,
            "fatal: not a git repository (or any of the parent directories): .git".to_owned(),
        ),
    ] {
        let (code, shown) = new_with(repo);
        assert_eq!(code, 1, "{shown}");
        assert_eq!(
            said(&shown, "y"),
            [format!(
                "worldd: --repo {}: not a git repository (git says: {git_says}); give the repository the worktree is checked out from",
                repo.display()
            )]
        );
        assert!(!root.exists(), "{shown}");
        assert!(!dir.path().join("ep.session").exists(), "{shown}");
    }
    let repo = dir.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    git(&repo, &["init", "-q"]);
    git(&repo, &["commit", "-q", "--allow-empty", "-m", "first"]);
    let (code, shown) = new_with(&repo);
    assert_eq!(code, 0, "{shown}");
    assert!(root.join("ep/.git").is_file(), "{shown}");
}

/// A start that cannot make its store (a file where its parent should be) left the workspace
/// root, and the directory above it, that it had just made.
#[test]
fn serve_that_cannot_create_its_store_leaves_no_workspace_root_it_made() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("srvfile"), "").unwrap();
    let r = refused_start(
        &[
            "--db",
            "srvfile/db",
            "--workspace-root",
            "new/wt",
            "--bind",
            "127.0.0.1:0",
        ],
        dir.path(),
    );
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert_eq!(
        r.line,
        "worldd: daemon startup failed at store-open: store I/O error: srvfile/db: Not a directory (os error 20)"
    );
    assert_eq!(names_in(dir.path()), ["srvfile"]);
}

/// A workspace root inside the store was refused on a fresh start as "its data file was lost"
/// (the root it had made there taken for a store's remains), and served once the store
/// existed, agents' worktrees beside its data file. One rule now, at `config`.
#[test]
fn a_workspace_root_inside_the_store_is_refused_at_config_fresh_or_not() {
    let dir = tempfile::tempdir().unwrap();
    let at = dir.path().canonicalize().unwrap();
    let start = |db: &str, root: &str| {
        refused_start(
            &[
                "--db",
                db,
                "--workspace-root",
                root,
                "--bind",
                "127.0.0.1:0",
            ],
            dir.path(),
        )
    };
    for (db, root) in [("db2", "db2/wt"), (".world/db", ".world/db/wt")] {
        let r = start(db, root);
        assert_eq!(r.code, Some(2), "{}", r.stderr);
        assert_eq!(
            r.line,
            format!(
                "worldd: daemon startup failed at config: the workspace root {} is inside the store {}",
                at.join(root).display(),
                at.join(db).display()
            )
        );
        assert_eq!(names_in(dir.path()), Vec::<String>::new(), "{db}");
    }
    drop(broker_core::store::Store::create(&dir.path().join("db")).unwrap());
    let r = start("db", "db/wt");
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert_eq!(
        r.line,
        format!(
            "worldd: daemon startup failed at config: the workspace root {} is inside the store {}",
            at.join("db/wt").display(),
            at.join("db").display()
        )
    );
    assert_eq!(names_in(&dir.path().join("db")), ["data.mdb", "lock.mdb"]);
}

/// quickstart printed whatever live credential `<dir>/<episode>.session` held into the agent's
/// configuration: `.world/ops.session` is where operators.md mints an operator credential, so
/// `quickstart --episode ops` handed an agent a credential that reads every episode. A live
/// credential there is printed again only when it is an agent's of that very episode.
#[test]
fn quickstart_never_hands_an_agent_an_operator_credential_or_another_episodes() {
    let dir = tempfile::tempdir().unwrap();
    let world = dir.path().join("w");
    let (code, shown) = quickstart_at_terminal(&world, "", b"y\n");
    assert_eq!(code, 0, "{shown}");
    let db = world.join("db");
    let (code, shown) = mint_at_terminal(
        &db,
        &format!(
            "--operator --episode ops --grant World.Commit=log:10 --out {}",
            world.join("ops.session").display()
        ),
    );
    assert_eq!(code, 0, "{shown}");
    let (code, shown) = quickstart_at_terminal(&world, "--episode ops", b"y\n");
    assert_eq!(code, 1, "{shown}");
    assert_eq!(
        said(&shown, "y"),
        [format!("worldd: {}/ops.session holds a live OPERATOR credential (episode ops; it reads every episode), which quickstart does not hand to episode ops's agent; nothing was made or printed: move the file away (quickstart then mints one for ops), or give another --episode", world.display())]
    );
    assert!(!world.join("worktrees/ops").exists());
    // Another episode's credential, copied into this episode's file.
    std::fs::copy(world.join("demo.session"), world.join("other.session")).unwrap();
    let (code, shown) = quickstart_at_terminal(&world, "--episode other", b"y\n");
    assert_eq!(code, 1, "{shown}");
    assert_eq!(
        said(&shown, "y"),
        [format!("worldd: {}/other.session holds a live credential of episode demo, which quickstart does not hand to episode other's agent; nothing was made or printed: move the file away (quickstart then mints one for other), or give another --episode", world.display())]
    );
    // Its own credential is printed again without a question.
    let (code, shown) = quickstart_at_terminal(&world, "", b"");
    assert_eq!(code, 0, "{shown}");
    assert!(!shown.contains("Confirm mint"), "{shown}");
}

/// quickstart read `--config` and `--plugin-config` only when it came to serve: a mistake in
/// either, or a config a plugin itself refuses (an `ailang.bin` that is not there), was said
/// after the question was answered, the store made and the credential minted, and the
/// operator had pasted a client configuration for a daemon that never started. The config is
/// read before the question, and the plugins are tried after it (their log lines would crowd
/// it), both before anything is made.
#[test]
fn quickstart_refuses_a_config_or_plugin_config_serve_would_refuse_before_making_anything() {
    let dir = tempfile::tempdir().unwrap();
    let configs = tempfile::tempdir().unwrap();
    let bad = configs.path().join("world.toml");
    std::fs::write(&bad, "[serve]\nbogus = 1\n").unwrap();
    let plugins = plugin_dir_with(configs.path(), &["worldd_ailang"]);
    let world = dir.path().join("w");
    // A port nothing listens on, for the runs that bind before they ask.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    for (extra, line, why) in [
        (
            format!("--config {}", bad.display()),
            format!(
                "worldd: daemon startup failed at config: {}: TOML parse error at line 2, column 1",
                bad.display()
            ),
            "unknown field `bogus`",
        ),
        (
            format!(
                "--plugin-dir {} --plugin-config ailang.bin=/nonexistent/ailang",
                plugins.display()
            ),
            format!(
                "worldd: daemon startup failed at plugins: plugin {}/libworldd_ailang.so: the plugin rejected its config: ailang config: bin /nonexistent/ailang: No such file or directory (os error 2)",
                plugins.display()
            ),
            "",
        ),
        (
            "--plugin-config nonsense".to_owned(),
            "worldd: daemon startup failed at config: --plugin-config \"nonsense\": no \"=\"; write NAME.KEY=VALUE, e.g. --plugin-config hello.greeting=hi".to_owned(),
            "",
        ),
    ] {
        for print_only in ["", " --print-only"] {
            let (code, shown) = at_terminal(
                &format!(
                    "{WORLDD} quickstart --dir {} --bind 127.0.0.1:{port}{print_only} {extra}",
                    world.display()
                ),
                b"y\n",
            );
            let said: Vec<String> = said(&shown, "y")
                .into_iter()
                .filter(|l| !l.contains(" INFO ") && !l.contains("\u{1b}[32m INFO"))
                .collect();
            assert_eq!(code, 2, "{extra}{print_only}: {shown}");
            let by_plugin = extra.contains("ailang.bin");
            assert_eq!(
                shown.contains("Confirm mint"),
                by_plugin,
                "asked only when the config itself was sound: {shown}"
            );
            let refusal = said.iter().find(|l| l.starts_with("worldd: "));
            assert_eq!(refusal, Some(&line), "{extra}{print_only}: {said:?}");
            assert!(said.join("\n").contains(why), "{extra}{print_only}: {said:?}");
            assert_eq!(names_in(dir.path()), Vec::<String>::new(), "{extra}");
        }
    }
}

/// quickstart set its own `--bind` default, `db` and `workspace_root` over the `[serve]` keys
/// of its `--config` without a word: it printed (and served) 127.0.0.1:7644 where the file
/// said another port, and made its store in `--dir` where the file named another. The file's
/// `bind` is taken as `serve` takes it (a flag wins), and a store or root elsewhere is refused.
#[test]
fn quickstart_takes_its_configs_bind_and_refuses_a_store_it_would_not_use() {
    let dir = tempfile::tempdir().unwrap();
    let configs = tempfile::tempdir().unwrap();
    let world = dir.path().join("w");
    let config = configs.path().join("world.toml");
    std::fs::write(&config, "[serve]\nbind = \"127.0.0.1:27647\"\n").unwrap();
    let quickstart = |extra: &str| {
        at_terminal(
            &format!(
                "{WORLDD} quickstart --dir {} --print-only --config {} {extra}",
                world.display(),
                config.display()
            ),
            b"y\n",
        )
    };
    let (code, shown) = quickstart("");
    assert_eq!(code, 0, "{shown}");
    assert!(
        shown.contains("\"url\": \"http://127.0.0.1:27647/mcp/\""),
        "{shown}"
    );
    assert!(
        shown.contains("export WORLD_ADDR=http://127.0.0.1:27647"),
        "{shown}"
    );
    std::fs::remove_dir_all(&world).unwrap();
    let (code, shown) = quickstart("--bind 127.0.0.1:27648");
    assert_eq!(code, 0, "{shown}");
    assert!(
        shown.contains("\"url\": \"http://127.0.0.1:27648/mcp/\""),
        "the flag wins: {shown}"
    );
    std::fs::remove_dir_all(&world).unwrap();

    std::fs::write(&config, "[serve]\nbind = \"nonsense\"\n").unwrap();
    let (code, shown) = quickstart("");
    assert_eq!(code, 2, "{shown}");
    assert_eq!(
        said(&shown, "y"),
        [
            r#"worldd: daemon startup failed at bind-policy: [serve] bind "nonsense" is not HOST:PORT"#
        ]
    );

    for (key, line) in [
        ("db", format!("worldd: [serve] db = \"elsewhere/db\" in --config: quickstart keeps its world in --dir ({}/db here); remove the key, give the --dir that holds it, or run `worldd serve --config` for that store", world.display())),
        ("workspace_root", format!("worldd: [serve] workspace_root = \"elsewhere/db\" in --config: quickstart keeps its world in --dir ({}/worktrees here); remove the key, give the --dir that holds it, or run `worldd serve --config` for that store", world.display())),
    ] {
        std::fs::write(&config, format!("[serve]\n{key} = \"elsewhere/db\"\n")).unwrap();
        let (code, shown) = quickstart("");
        assert_eq!(code, 1, "{shown}");
        assert_eq!(said(&shown, "y"), [line], "{key}");
        assert_eq!(names_in(dir.path()), Vec::<String>::new(), "{key}");
    }
    // The key naming what quickstart uses anyway is no mistake.
    std::fs::write(
        &config,
        format!("[serve]\ndb = \"{}/db\"\n", world.display()),
    )
    .unwrap();
    let (code, shown) = quickstart("");
    assert_eq!(code, 0, "{shown}");
}

/// What `serve` refuses of a plugin `stateDir` (inside the workspace root, or held by another
/// daemon) quickstart's plugin trial did not: it minted, printed the client configuration and
/// then failed to serve. It is refused before anything is made; and a `[serve] db` naming
/// quickstart's own store as `./DIR/db` or its absolute path is the same store, not refused.
#[test]
fn quickstart_refuses_a_state_dir_serve_would_and_takes_its_own_store_however_spelt() {
    let dir = tempfile::tempdir().unwrap();
    let world = dir.path().join("w");
    let plugins = plugin_dir_with(dir.path(), &["worldd_git"]);
    let inside = world.join("worktrees/state");
    let (code, shown) = at_terminal(
        &format!(
            "{WORLDD} quickstart --dir {} --print-only --bind 127.0.0.1:7999 --plugin-dir {} --plugin-config git.stateDir={}",
            world.display(),
            plugins.display(),
            inside.display()
        ),
        b"y\n",
    );
    assert_eq!(code, 2, "{shown}");
    assert!(
        shown.contains(&format!(
            "worldd: daemon startup failed at config: [plugins.git] stateDir {} overlaps the workspace root ",
            inside.display()
        )),
        "{shown}"
    );
    assert!(!world.exists(), "{shown}");

    let config = dir.path().join("world.toml");
    for db in [
        "./w/db".to_owned(),
        format!("{}/w/db", dir.path().display()),
    ] {
        std::fs::write(&config, format!("[serve]\ndb = \"{db}\"\n")).unwrap();
        let mut child = std::process::Command::new("script")
            .args([
                "-qec",
                &format!(
                    "{WORLDD} quickstart --dir w --print-only --bind 127.0.0.1:7999 --plugin-dir {} --config {}",
                    plugins.display(),
                    config.display()
                ),
                "/dev/null",
            ])
            .current_dir(dir.path())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(b"y\n").unwrap();
        let out = child.wait_with_output().unwrap();
        let shown = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{db}: {shown}");
        std::fs::remove_dir_all(&world).unwrap();
    }
}

/// Budgets belong to the episode: quickstart run again after its credential expired (or was
/// removed) minted the se-tools grants at `--budget` for an episode that had spent more, a
/// credential dead on arrival. It says so before the question, as `session mint` does.
#[test]
fn quickstart_warns_of_a_budget_the_episode_has_already_spent_before_its_question() {
    let dir = store_where_spent_three_reads("demo");
    let (code, shown) = at_terminal(
        &format!(
            "{WORLDD} quickstart --dir {} --print-only --bind 127.0.0.1:7999 --budget 2",
            dir.path().display()
        ),
        b"n\n",
    );
    assert_eq!(code, 1, "{shown}");
    let before = &shown[..shown
        .find("Confirm mint")
        .unwrap_or_else(|| panic!("{shown}"))];
    assert!(
        before.contains("worldd session: warning: --grant Workspace.Read=worktree:2: episode demo has already spent 3 of Workspace.Read@worktree, so this budget of 2 leaves it none"),
        "{shown}"
    );
}

/// quickstart run again with a live credential in its file reused it without a word, so an
/// explicit `--budget 100` was dropped silently and the agent was handed a credential whose
/// grants the episode had spent (every call `denied:budget`). It says it reuses the credential
/// and with which budget, that `--budget` is for a credential it mints, and which reused grants
/// are spent.
#[test]
fn quickstart_reusing_a_credential_says_so_that_budget_is_for_a_new_one_and_which_grants_are_spent()
{
    let dir = store_where_spent_three_reads("demo");
    let world = dir.path();
    let (code, shown) = quickstart_at_terminal(world, "--budget 2", b"y\n");
    assert_eq!(code, 0, "{shown}");
    let file = world.join("demo.session");
    let token = std::fs::read_to_string(&file).unwrap();
    let (code, out, err) = worldd(
        &[
            "quickstart",
            "--dir",
            path_str(world),
            "--print-only",
            "--bind",
            "127.0.0.1:7999",
            "--budget",
            "100",
        ],
        None,
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(token.trim()), "{out}");
    let said: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("worldd quickstart: ") && !l.contains("MCP client"))
        .take(3)
        .collect();
    assert_eq!(
        said,
        [
            format!("worldd quickstart: reusing the live credential in {} (budget 2 for each of its 8 grant(s)); delete the file to have quickstart mint a new one", file.display()),
            format!("worldd quickstart: --budget 100 applies only to a credential quickstart mints, not to the one it reuses: delete {} and run quickstart again to mint one with it", file.display()),
            format!("worldd quickstart: warning: the reused credential's grant Workspace.Read=worktree:2: episode demo has already spent 3 of Workspace.Read@worktree, so every call of it is denied:budget (budgets belong to the episode): delete {} and run quickstart again with a --budget above 3", file.display()),
        ],
        "{err}"
    );
    // Without --budget, the reuse and the spent grant are said, and no word of --budget.
    let (code, out, err) = worldd(
        &[
            "quickstart",
            "--dir",
            path_str(world),
            "--print-only",
            "--bind",
            "127.0.0.1:7999",
        ],
        None,
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(err.contains("reusing the live credential"), "{err}");
    assert!(
        err.contains("warning: the reused credential's grant Workspace.Read=worktree:2"),
        "{err}"
    );
    assert!(!err.contains("--budget 50"), "{err}");
}

/// quickstart's `export WORLD_SESSION=…` line, meant to be pasted into a shell, printed the
/// path bare: from a directory with a space (or a `;`) it set a cut path, or ran the rest as a
/// command. A path that needs it is single-quoted (a `'` as `'\''`); a plain value is left as
/// it is. The lines, run by a shell, set exactly the paths.
#[test]
fn quickstarts_export_lines_paste_into_a_shell_as_the_paths_they_name() {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("it's my dir;true");
    std::fs::create_dir(&project).unwrap();
    let (code, shown) = at_terminal(
        &format!(
            "cd \"{}\" && {WORLDD} quickstart --print-only --bind 127.0.0.1:7998",
            project.display()
        ),
        b"y\n",
    );
    assert_eq!(code, 0, "{shown}");
    let lines = said(&shown, "y");
    let exports: Vec<&str> = lines
        .iter()
        .map(String::as_str)
        .filter(|l| l.starts_with("  export "))
        .collect();
    let session = project.join(".world/demo.session");
    assert_eq!(
        exports,
        [
            "  export WORLD_ADDR=http://127.0.0.1:7998".to_owned(),
            format!(
                "  export WORLD_SESSION='{}'",
                session.display().to_string().replace('\'', "'\\''")
            ),
        ],
        "{shown}"
    );
    let pasted = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "{}; printf '%s\\n' \"$WORLD_ADDR\" \"$WORLD_SESSION\"",
            exports.join(";")
        ))
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&pasted.stdout),
        format!("http://127.0.0.1:7998\n{}\n", session.display())
    );
    assert!(pasted.status.success());
}

/// `quickstart` run inside another running daemon's worktree made its store, its worktree and
/// a credential there (a bearer token the other daemon's agent could read) and printed the
/// client configuration, and only then did `serve` refuse. It is refused before its question,
/// as `serve` refuses it, with nothing made or printed (`--print-only` too).
#[test]
fn quickstart_inside_another_daemons_worktree_is_refused_before_its_question_leaving_nothing() {
    let first = Daemon::start(&["worldd_workspace"], &[]);
    first.session("demo", &["Workspace.Write=worktree:5"]);
    let worktree = first.root().join("demo");
    let real_worktree = worktree.canonicalize().unwrap();
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = free.local_addr().unwrap().port();
    drop(free);
    for print_only in ["", " --print-only"] {
        let (code, shown) = at_terminal(
            &format!(
                "cd {} && {WORLDD} quickstart --bind 127.0.0.1:{port}{print_only}",
                worktree.display()
            ),
            b"y\n",
        );
        assert_eq!(code, 2, "{shown}");
        let said: Vec<&str> = shown
            .lines()
            .map(|l| l.trim_end_matches('\r'))
            .filter(|l| *l != "y")
            .collect();
        assert_eq!(
            said,
            [format!(
                "worldd: daemon startup failed at config: the workspace root {}/.world/worktrees is inside {}, which another running worldd process holds as its own (a daemon's workspace root or store, a plugin's stateDir, a backup's destination): what writes there could write into this daemon's workspace root; give this daemon a --workspace-root outside it",
                real_worktree.display(),
                first.root().canonicalize().unwrap().display()
            )]
        );
        let left: Vec<_> = std::fs::read_dir(&worktree).unwrap().collect();
        assert!(left.is_empty(), "{print_only}: {left:?}");
    }
    assert_eq!(get(&first.url("/v1/health"), None).status, 200);
}
