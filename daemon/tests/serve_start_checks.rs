//! What `worldd serve` (and `quickstart`) check at start-up before they make, remove, mint or
//! print anything: two starts at once on a new store, the remains of a store, limits past what
//! the edge can hold, a store another daemon serves, a `$NOTIFY_SOCKET` nobody listens on, and
//! the lines that name what the operator gave. The real binary, real stores.

mod common;

use std::io::BufRead;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;

const WS: &[&str] = &["worldd_workspace"];

/// `worldd serve` on the store `db` with its own workspace root `root`, on a free port, in
/// `cwd`, its output piped.
fn serve_on(cwd: &Path, db: &Path, root: &Path, extra: &[&str]) -> Command {
    let mut cmd = Command::new(WORLDD);
    cmd.arg("serve")
        .arg("--db")
        .arg(db)
        .arg("--workspace-root")
        .arg(root)
        .args(["--bind", "127.0.0.1:0", "--plugin-dir"])
        .arg(cwd.join("no-plugins"))
        .args(extra)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Two `serve` started in the same instant on one new store (each with its own workspace root)
/// are decided by the store's lock: one serves, the other stops with `another worldd already
/// serves`. The one refused removed, on its way out, the store the other had just made and
/// served ("it was absent when I started" was true for both), and the serving daemon then
/// refused every call. Many rounds: the race was lost in 7 of 8.
/// A start in `dir` with `world.toml` holding `text` (and `--bind 127.0.0.1:0`), refused.
fn refused_with_config(dir: &Path, text: &str) -> Refusal {
    let config = dir.join("world.toml");
    std::fs::write(&config, text).unwrap();
    refused_start(
        &["--config", path_str(&config), "--bind", "127.0.0.1:0"],
        dir,
    )
}

#[test]
fn two_serves_started_together_on_a_new_store_leave_the_serving_ones_store_in_place() {
    for round in 0..8 {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("no-plugins")).unwrap();
        let db = dir.path().join("db");
        let mut children: Vec<_> = ["wt1", "wt2"]
            .iter()
            .map(|root| {
                serve_on(dir.path(), &db, &dir.path().join(root), &[])
                    .spawn()
                    .unwrap()
            })
            .collect();
        // Each one's first line on stdout: the ready line, or nothing (it stopped).
        let firsts: Vec<String> = children
            .iter_mut()
            .map(|c| {
                let mut line = String::new();
                std::io::BufReader::new(c.stdout.take().unwrap())
                    .read_line(&mut line)
                    .unwrap();
                line
            })
            .collect();
        let serving: Vec<usize> = (0..2)
            .filter(|&i| firsts[i].starts_with("worldd listening on http://"))
            .collect();
        assert_eq!(serving.len(), 1, "round {round}: {firsts:?}");
        let (winner, loser) = (serving[0], 1 - serving[0]);
        let refused = children.remove(loser).wait_with_output().unwrap();
        let refused_err = String::from_utf8_lossy(&refused.stderr).into_owned();
        assert_eq!(
            refused.status.code(),
            Some(2),
            "round {round}: {refused_err}"
        );
        assert!(
            refused_err.ends_with(&format!(
                "worldd: daemon startup failed at store-open: another worldd already serves {} (one daemon per store: it orders each episode's calls)\n",
                db.display()
            )),
            "round {round}: {refused_err}"
        );
        assert!(
            !refused_err.contains("could not remove"),
            "round {round}: {refused_err}"
        );
        assert!(
            db.join("data.mdb").is_file() && db.join("lock.mdb").is_file(),
            "round {round}: the refused start removed the served store"
        );
        // The serving daemon's store watch (every second) finds its store where it was.
        std::thread::sleep(broker_core::store::Store::WATCH_EVERY * 2);
        let addr = firsts[winner]
            .trim()
            .strip_prefix("worldd listening on http://")
            .unwrap()
            .to_owned();
        let health = get(&format!("http://{addr}/v1/health"), None);
        assert_eq!(health.status, 200, "round {round}");
        assert_eq!(health.json()["status"], "ok", "round {round}");
        let served = children.remove(0);
        // SAFETY: a plain kill(2) of our own child.
        unsafe { libc::kill(served.id() as libc::pid_t, libc::SIGTERM) };
        let out = served.wait_with_output().unwrap();
        let log = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "round {round}: {log}");
        assert!(!log.contains("replaced or removed"), "round {round}: {log}");
        let (code, _, err) = worldd(&["doctor", "--db", db.to_str().unwrap()], None);
        assert_eq!(code, 0, "round {round}: {err}");
    }
}

/// A store directory holding what is left of a store (its `data.mdb` emptied, or gone beside
/// `lock.mdb` and `plugin-state/`: a restore gone wrong) is refused at store-open, exit 2, as
/// `doctor` refuses it, and left as it was: `serve` used to make a new, empty world there
/// without a word. A new store (in an absent or empty directory) is still made, and said once.
#[test]
fn serve_refuses_the_remains_of_a_store_and_says_when_it_makes_a_new_one() {
    let d = Daemon::start(WS, &[]);
    let made = format!(
        "made a new world store in {}",
        std::path::absolute(d.db()).unwrap().display()
    );
    d.wait_for_log(&made);
    assert_eq!(d.log().matches(&made).count(), 1, "{}", d.log());
    let d = d.restart(WS, &[]);
    // Written after the store is opened (where a new one is said): once it is read, that
    // line would have been too.
    d.wait_for_log("loaded plugin");
    assert!(!d.log().contains("made a new world store"), "{}", d.log());
    let dir = d.halt();
    let db = dir.path().join("db");
    let args = |db: &Path| {
        vec![
            "--db".to_owned(),
            db.display().to_string(),
            "--workspace-root".to_owned(),
            dir.path().join("worktrees").display().to_string(),
            "--bind".to_owned(),
            "127.0.0.1:0".to_owned(),
        ]
    };
    let refusal = "refusing to make a new store in its place: restore the directory from a backup, or remove it to start a new world";

    std::fs::File::create(db.join("data.mdb")).unwrap();
    let r = refused_start(&args(&db), dir.path());
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert_eq!(
        r.line,
        format!(
            "worldd: daemon startup failed at store-open: world store {} has an empty data.mdb: no store was ever written there, or the file was emptied; {refusal}",
            db.display()
        ),
        "{}",
        r.stderr
    );
    assert_eq!(std::fs::metadata(db.join("data.mdb")).unwrap().len(), 0);

    std::fs::remove_file(db.join("data.mdb")).unwrap();
    std::fs::create_dir_all(db.join("plugin-state")).unwrap();
    let r = refused_start(&args(&db), dir.path());
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert_eq!(
        r.line,
        format!(
            "worldd: daemon startup failed at store-open: world store {} has no data.mdb, only lock.mdb, plugin-state/: its data file was lost (a restore or copy gone wrong?); {refusal}",
            db.display()
        ),
        "{}",
        r.stderr
    );
    assert!(!db.join("data.mdb").exists() && db.join("lock.mdb").is_file());

    // An empty directory (made by the operator, say) is a new store's place.
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    std::fs::create_dir(dir.path().join("no-plugins")).unwrap();
    let cmd = serve_on(dir.path(), &empty, &dir.path().join("worktrees"), &[]);
    let d = Daemon::spawn(dir, cmd);
    d.wait_for_log(&format!(
        "INFO made a new world store in {}",
        std::path::absolute(&empty).unwrap().display()
    ));
    assert!(empty.join("data.mdb").is_file());
}

/// `[server]` limits that size a semaphore past what it can hold (`log_streams`,
/// `reads_per_client`, `log_streams_per_episode`, `max_connections`) are a config failure,
/// exit 2, with nothing made: `log_streams` panicked the daemon at start (exit 101, the new
/// store left behind) and `reads_per_client` panicked every REST read.
#[test]
fn server_limits_past_a_semaphores_bound_are_a_config_failure_not_a_panic() {
    for key in [
        "log_streams",
        "reads_per_client",
        "log_streams_per_episode",
        "max_connections",
    ] {
        let dir = tempfile::tempdir().unwrap();
        let r = refused_with_config(
            dir.path(),
            &format!("[server]\n{key} = 9000000000000000000\n"),
        );
        assert_eq!(r.code, Some(2), "{key}: {}", r.stderr);
        assert_eq!(
            r.line,
            format!("worldd: daemon startup failed at config: [server] {key} is too large (at most 2305843009213693951)"),
            "{key}: {}",
            r.stderr
        );
        assert!(!r.stderr.contains("panicked"), "{key}: {}", r.stderr);
        assert!(!dir.path().join(".world").exists(), "{key}");
    }
    // The flag too, named as the flag.
    let dir = tempfile::tempdir().unwrap();
    let r = refused_start(
        &[
            "--max-connections",
            "9000000000000000000",
            "--bind",
            "127.0.0.1:0",
        ],
        dir.path(),
    );
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert_eq!(
        r.line,
        "worldd: daemon startup failed at config: --max-connections is too large (at most 2305843009213693951)"
    );
}

/// `quickstart` on a store another daemon serves stops first, as `serve` does, with nothing
/// minted, made or printed: it minted a credential, made the episode's worktree and printed a
/// client configuration naming an address where nothing would serve, and only then stopped.
#[test]
fn quickstart_on_a_store_another_daemon_serves_stops_before_it_mints_or_prints() {
    let d = Daemon::start(WS, &[]);
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = free.local_addr().unwrap().port();
    drop(free);
    let dir = d.dir.path();
    let (code, shown) = at_terminal(
        &format!(
            "{WORLDD} quickstart --dir {} --bind 127.0.0.1:{port}",
            dir.display()
        ),
        b"y\n",
    );
    assert_eq!(code, 2, "{shown}");
    // The terminal echoes what was typed ahead; quickstart asked nothing.
    let said: Vec<&str> = shown
        .lines()
        .map(|l| l.trim_end_matches('\r'))
        .filter(|l| *l != "y")
        .collect();
    assert_eq!(
        said,
        [format!(
            "worldd: daemon startup failed at store-open: another worldd already serves {} (one daemon per store: it orders each episode's calls)",
            d.db().display()
        )]
    );
    assert!(!dir.join("demo.session").exists());
    assert!(!d.root().join("demo").exists());
    assert_eq!(get(&d.url("/v1/health"), None).status, 200);
}

/// A `$NOTIFY_SOCKET` nothing listens on (the variable leaks into a shell started from a
/// notify-type unit) is no service manager: SIGHUP drains the daemon as from a terminal, and
/// the warning about READY=1 says so. The daemon said "a service manager runs this daemon" and
/// went on running after its terminal closed.
#[test]
fn a_notify_socket_nobody_listens_on_is_no_service_manager_and_sighup_drains() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("nobody/notify");
    let mut cmd = Daemon::serve_command(&dir, WS);
    cmd.env("NOTIFY_SOCKET", &socket);
    // SIGHUP caught by default, whatever this test was started with (a suite run under `nohup`
    // ignores it in every process it starts, and a daemon started so keeps it ignored).
    // SAFETY: signal(2) is async-signal-safe, as pre_exec requires.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            libc::signal(libc::SIGHUP, libc::SIG_DFL);
            Ok(())
        });
    }
    let d = Daemon::spawn(dir, cmd);
    d.wait_for_log(&format!(
        "could not tell the service manager READY=1 through NOTIFY_SOCKET {}: No such file or directory (os error 2); no service manager runs this daemon as far as it can tell, so SIGHUP stops it (drains) as without one",
        socket.display()
    ));
    let (status, log) = d.stop_by(libc::SIGHUP, Duration::from_secs(10));
    assert!(status.success(), "{status:?}\n{log}");
    assert!(
        log.contains("shutting down: draining in-flight calls"),
        "{log}"
    );
    assert!(!log.contains("SIGHUP ignored"), "{log}");
}

/// A ceiling of 0 is said as the ceiling's own mistake, not as a reserve (never given) too large
/// for it.
#[test]
fn a_zero_store_ceiling_is_said_as_a_ceiling_below_the_least() {
    let dir = tempfile::tempdir().unwrap();
    let line = "worldd: daemon startup failed at config: the store ceiling (0 bytes) is below 1048576 bytes, the least a store is given (a size without a unit is in bytes: write 64GiB, for example)";
    let r = refused_start(
        &["--store-ceiling", "0", "--bind", "127.0.0.1:0"],
        dir.path(),
    );
    assert_eq!((r.code, r.line.as_str()), (Some(2), line), "{}", r.stderr);
    let r = refused_with_config(dir.path(), "[serve]\nstore_ceiling = 0\n");
    assert_eq!((r.code, r.line.as_str()), (Some(2), line), "{}", r.stderr);
    assert!(!dir.path().join(".world").exists());
}

/// An address from the config file is named as the file's key, not as a flag the operator did
/// not give; a port past 65535 is said to be the problem.
#[test]
fn a_bad_bind_in_the_config_file_is_named_as_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("world.toml");
    for (bind, said) in [
        (
            "127.0.0.1:99999",
            r#"[serve] bind "127.0.0.1:99999": port 99999 is out of range (0 to 65535)"#,
        ),
        ("foo", r#"[serve] bind "foo" is not HOST:PORT"#),
        (
            "7644",
            r#"[serve] bind "7644" names a port alone: give HOST:PORT, e.g. 127.0.0.1:7644"#,
        ),
    ] {
        std::fs::write(&config, format!("[serve]\nbind = \"{bind}\"\n")).unwrap();
        let r = refused_start(&["--config", config.to_str().unwrap()], dir.path());
        assert_eq!(r.code, Some(2), "{}", r.stderr);
        assert_eq!(
            r.line,
            format!("worldd: daemon startup failed at bind-policy: {said}")
        );
    }
    let r = refused_start(&["--bind", "127.0.0.1:99999"], dir.path());
    assert_eq!(
        r.line,
        r#"worldd: daemon startup failed at bind-policy: --bind "127.0.0.1:99999": port 99999 is out of range (0 to 65535)"#
    );
    assert!(!dir.path().join(".world").exists());
}

/// `--bind 0.0.0.0:PORT` (the usual first try at reaching the daemon from elsewhere) was told
/// only `bind host "0.0.0.0" is not loopback`, the same words from the flag and from the file:
/// an address of any IP that is not loopback is named by where it came from, with the
/// addresses the daemon binds and where remote access is explained, as a host name is.
#[test]
fn a_bind_of_an_ip_that_is_not_loopback_names_its_source_and_the_fix() {
    const FIX: &str = r#"the daemon binds loopback only, 127.0.0.1:PORT, [::1]:PORT or localhost:PORT (to reach it from another machine, see operators.md "Network exposure")"#;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("world.toml");
    for (bind, host) in [
        ("0.0.0.0:26322", "0.0.0.0"),
        ("192.168.1.5:26322", "192.168.1.5"),
        ("[::]:26322", "::"),
        ("[::ffff:10.0.0.1]:26322", "::ffff:10.0.0.1"),
    ] {
        let r = refused_start(&["--bind", bind], dir.path());
        assert_eq!(r.code, Some(2), "{}", r.stderr);
        assert_eq!(
            r.line,
            format!(
                "worldd: daemon startup failed at bind-policy: --bind {bind:?}: host {host:?} is not loopback: {FIX}"
            )
        );
        std::fs::write(&config, format!("[serve]\nbind = \"{bind}\"\n")).unwrap();
        let r = refused_start(&["--config", config.to_str().unwrap()], dir.path());
        assert_eq!(r.code, Some(2), "{}", r.stderr);
        assert_eq!(
            r.line,
            format!(
                "worldd: daemon startup failed at bind-policy: [serve] bind {bind:?}: host {host:?} is not loopback: {FIX}"
            )
        );
    }
    let r = refused_start(&["--bind", "example.com:80"], dir.path());
    assert_eq!(
        r.line,
        format!(
            r#"worldd: daemon startup failed at bind-policy: --bind "example.com:80": host "example.com" is not loopback: {FIX}"#
        )
    );
    assert!(!dir.path().join(".world").exists());
}

/// A start refused where it could make nothing (the store's parent is a file) does not warn of
/// a store "this failed start made" that it could not remove.
#[test]
fn a_start_that_made_no_store_does_not_warn_it_could_not_remove_one() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("afile"), "x").unwrap();
    let r = refused_start(&["--db", "afile/db", "--bind", "127.0.0.1:0"], dir.path());
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert_eq!(
        r.line,
        "worldd: daemon startup failed at store-open: store I/O error: afile/db: Not a directory (os error 20)"
    );
    assert!(!r.stderr.contains("could not remove"), "{}", r.stderr);
}

/// `doctor` on a store directory that is there without its `data.mdb` (beside `lock.mdb` and
/// `plugin-state/`) says the data file is missing: it said the store "does not exist", of a
/// directory the operator could list.
#[test]
fn doctor_on_a_store_directory_without_its_data_file_says_the_file_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().canonicalize().unwrap().join("db");
    std::fs::create_dir_all(db.join("plugin-state")).unwrap();
    std::fs::write(db.join("lock.mdb"), "").unwrap();
    let (code, out, err) = worldd(&["doctor", "--db", db.to_str().unwrap()], None);
    assert_eq!((code, out.as_str()), (2, ""), "{err}");
    assert_eq!(
        err,
        format!(
            "worldd: world store {} has no data.mdb, only lock.mdb, plugin-state/: its data file was lost (a restore or copy gone wrong?); refusing to create one: restore the directory from a backup, or pass --db with the daemon's store\n",
            db.display()
        )
    );
    assert!(!db.join("data.mdb").exists());

    let empty = dir.path().canonicalize().unwrap().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let (code, _, err) = worldd(&["doctor", "--db", empty.to_str().unwrap()], None);
    assert_eq!(code, 1, "{err}");
    assert_eq!(
        err,
        format!(
            "worldd: world store {} is an empty directory (no data.mdb); refusing to create one: run this in the directory the daemon was started in, or pass --db with the daemon's store (worldd serve creates a store, for a new world only)\n",
            empty.display()
        )
    );
}

/// A selection from the config file that names no plugin here is named as the file's key, not
/// as a `--handler` flag the operator did not give.
#[test]
fn a_misspelled_handler_in_the_config_file_is_named_as_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = plugin_dir_with(dir.path(), WS);
    let config = dir.path().join("world.toml");
    std::fs::write(&config, "[serve]\nhandlers = [\"workspce\"]\n").unwrap();
    let args = [
        "--config",
        config.to_str().unwrap(),
        "--plugin-dir",
        plugins.to_str().unwrap(),
        "--bind",
        "127.0.0.1:0",
    ];
    let r = refused_start(&args, dir.path());
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert_eq!(
        r.line,
        format!(
            "worldd: daemon startup failed at plugins: plugin {}: [serve] handlers \"workspce\": no plugin of that name here (found: workspace); did you mean workspace?",
            plugins.display()
        )
    );
    let flagged = [&args[..], &["--handler", "workspce"]].concat();
    let r = refused_start(&flagged, dir.path());
    assert_eq!(
        r.line,
        format!(
            "worldd: daemon startup failed at plugins: plugin {}: --handler workspce: no plugin of that name here (found: workspace); did you mean workspace?",
            plugins.display()
        )
    );
}

/// A start that failed at plugins in a new directory (`--handler nope`) removed the store and
/// the workspace root it made, and left the `.world` directory it had made above them: the
/// command fixed and run again did not start as the first attempt would have, for `ls -a`.
#[test]
fn a_failed_start_in_a_new_directory_leaves_not_even_the_directory_above_its_store() {
    let dir = tempfile::tempdir().unwrap();
    let r = refused_start(&["--handler", "nope", "--bind", "127.0.0.1:0"], dir.path());
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(
        r.line
            .starts_with("worldd: daemon startup failed at plugins: "),
        "{}",
        r.stderr
    );
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "{left:?}");
    // One that was there before stays, with what it held.
    std::fs::create_dir(dir.path().join(".world")).unwrap();
    std::fs::write(dir.path().join(".world/notes"), "mine").unwrap();
    let r = refused_start(&["--handler", "nope", "--bind", "127.0.0.1:0"], dir.path());
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    let left: Vec<_> = std::fs::read_dir(dir.path().join(".world"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["notes"]);
}

/// A start that failed at plugins with `--db` an existing, empty directory left the store it
/// had made there (`data.mdb`, `lock.mdb`): only a store directory the start made itself was
/// removed. The directory stays, as empty as it was.
#[test]
fn a_failed_start_leaves_no_store_files_in_the_existing_empty_directory_it_was_given() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("e");
    std::fs::create_dir(&db).unwrap();
    let r = refused_start(
        &[
            "--handler",
            "nope",
            "--bind",
            "127.0.0.1:0",
            "--db",
            path_str(&db),
        ],
        dir.path(),
    );
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(
        r.line
            .starts_with("worldd: daemon startup failed at plugins: "),
        "{}",
        r.stderr
    );
    assert!(db.is_dir());
    let left: Vec<_> = std::fs::read_dir(&db)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "{left:?}");
    // The store made there by a start that serves is the store: kept.
    std::fs::create_dir(dir.path().join("no-plugins")).unwrap();
    let cmd = serve_on(dir.path(), &db, &dir.path().join("wt"), &[]);
    let daemon = Daemon::spawn(tempfile::tempdir().unwrap(), cmd);
    assert_eq!(get(&daemon.url("/v1/health"), None).status, 200);
    drop(daemon);
    assert!(db.join("data.mdb").is_file());
}

/// A store one level (or more) below a directory every user may write without the sticky bit
/// was served: only its own parent was looked at, though anyone could rename the directory
/// between and swap the whole store. Refused at start, naming that directory, nothing made;
/// the same for the workspace root. Under a sticky one (as /tmp) it serves.
#[test]
fn a_store_or_workspace_root_below_a_directory_every_user_may_write_however_deep_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("no-plugins")).unwrap();
    let open = d.join("open");
    std::fs::create_dir_all(open.join("sub")).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let db = open.join("sub/db");
    let no_plugins = d.join("no-plugins");
    let refused = |db: &Path, root: &Path| {
        refused_serve_on(db, root, &["--plugin-dir", path_str(&no_plugins)], d)
    };
    let r = refused(&db, &d.join("wt"));
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert_eq!(
        r.line,
        format!(
            "worldd: daemon startup failed at store-open: store {}: refusing it inside {}, a directory every user may write, without the sticky bit (mode 0777): anyone could swap it for their own; `chmod o-w {}`",
            db.display(),
            open.display(),
            open.display()
        )
    );
    assert!(!db.exists());
    assert!(!d.join("wt").exists());
    let root = open.join("sub/wt");
    let r = refused(&d.join("db"), &root);
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert_eq!(
        r.line,
        format!(
            "worldd: daemon startup failed at config: workspace root {}: refusing it inside {}, a directory every user may write, without the sticky bit (mode 0777): anyone could swap it for their own; `chmod o-w {}`",
            root.display(),
            open.display(),
            open.display()
        )
    );
    assert!(!d.join("db").exists());
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let daemon = Daemon::spawn(tempfile::tempdir().unwrap(), serve_on(d, &db, &root, &[]));
    assert_eq!(get(&daemon.url("/v1/health"), None).status, 200);
}

/// A store or workspace root whose path is not UTF-8 was served, and the plugins, told the
/// path as text with U+FFFD in place of its bytes, worked in another directory (a worktree
/// "that does not exist", plugin state in a sibling directory outside the store). It is
/// refused at start, naming the flag; nothing is made.
#[test]
fn a_store_or_workspace_root_whose_path_is_not_utf8_is_refused_at_start() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let at = dir.path().canonicalize().unwrap();
    let odd = std::ffi::OsStr::from_bytes(b"db\xff");
    for (flag, args) in [
        ("--db", vec![std::ffi::OsStr::new("--db"), odd]),
        (
            "--workspace-root",
            vec![std::ffi::OsStr::new("--workspace-root"), odd],
        ),
    ] {
        let mut args = args;
        args.extend(["--bind", "127.0.0.1:0"].map(std::ffi::OsStr::new));
        let r = refused_start(&args, dir.path());
        assert_eq!(r.code, Some(2), "{}", r.stderr);
        assert_eq!(
            r.line,
            format!(
                "worldd: daemon startup failed at config: {flag} {}/db\u{fffd}: the path is not UTF-8, and plugins are given paths as text; rename it (or the directory it is in)",
                at.display()
            )
        );
        assert_eq!(names_in(dir.path()), Vec::<String>::new(), "{flag}");
    }
}

/// `db = "~/worldd/db"` in a config file made a directory named `~` and a new, empty world in
/// it (every credential then unknown), and `$HOME/...` one named `$HOME`: no shell expands a
/// config file. Both are refused, naming the key; the same path from a flag, which a shell
/// would have expanded, is the operator's to mean.
#[test]
fn a_config_files_tilde_or_variable_in_a_path_is_refused_not_made_into_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    for (text, said) in [
        (
            "[serve]\ndb = \"~/worldd/db\"\n",
            r#"[serve] db "~/worldd/db": a config file's paths are not expanded as a shell would (`~` is a directory named ~ here); write the path in full"#,
        ),
        (
            "[serve]\nworkspace_root = \"$HOME/worldd/wt\"\n",
            r#"[serve] workspace_root "$HOME/worldd/wt": a config file's paths are not expanded as a shell would (`$` names no variable here); write the path in full"#,
        ),
        (
            "[serve]\ndb = \"${STATE}/db\"\n",
            r#"[serve] db "${STATE}/db": a config file's paths are not expanded as a shell would (`$` names no variable here); write the path in full"#,
        ),
        (
            "[serve]\nplugin_dir = \"~/plugins\"\n",
            r#"[serve] plugin_dir "~/plugins": a config file's paths are not expanded as a shell would (`~` is a directory named ~ here); write the path in full"#,
        ),
        (
            "[plugins.git]\nstateDir = \"$STATE/git\"\n",
            r#"[plugins.git] stateDir "$STATE/git": a config file's paths are not expanded as a shell would (`$` names no variable here); write the path in full"#,
        ),
    ] {
        let r = refused_with_config(dir.path(), text);
        assert_eq!(r.code, Some(2), "{}", r.stderr);
        assert_eq!(
            r.line,
            format!("worldd: daemon startup failed at config: {said}")
        );
        assert_eq!(names_in(dir.path()), ["world.toml"], "{text}");
    }
    // A flag no shell expanded (a service manager's command line): the same.
    let r = refused_start(
        &["--db", "~/worldd/db", "--bind", "127.0.0.1:0"],
        dir.path(),
    );
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert_eq!(
        r.line,
        r#"worldd: daemon startup failed at config: --db "~/worldd/db": no shell expanded this path (`~` is a directory named ~ here: a service manager's command line, or a quoted argument); write the path in full"#
    );
    assert_eq!(names_in(dir.path()), ["world.toml"]);
}

/// A relative `plugin_dir` the daemon could not read was said as `plugin plugins: cannot read
/// the plugin directory: No such file or directory`, naming neither where it looked nor why
/// there (the directory worldd starts in, not the config file's): both are said.
#[test]
fn a_relative_plugin_dir_that_cannot_be_read_says_where_it_was_looked_for() {
    let dir = tempfile::tempdir().unwrap();
    let at = dir.path().canonicalize().unwrap();
    let r = refused_with_config(dir.path(), "[serve]\nplugin_dir = \"plugins\"\n");
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert_eq!(
        r.line,
        format!(
            "worldd: daemon startup failed at plugins: plugin plugins: cannot read the plugin directory: No such file or directory (os error 2) (looked for at {}/plugins: a relative plugin directory is taken from the directory worldd starts in); [serve] plugin_dir names no directory: give the directory that holds the plugin libraries (libworldd_*.so), or leave it out to load those beside the worldd executable ({})",
            at.display(),
            std::path::Path::new(WORLDD).parent().unwrap().display()
        )
    );
}

/// Two daemons given one plugin `stateDir` (an absolute path in a config file both use) both
/// started, and the ailang plugin's files, named by episode, were overwritten by the other
/// daemon's same-named episodes: a sixth of the calls failed. The second daemon is refused at
/// start, naming the key; the first serves on.
#[test]
fn two_daemons_given_one_plugin_state_dir_are_refused_the_second() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = plugin_dir_with(dir.path(), &["worldd_git"]);
    let state = dir.path().join("shared-state");
    let config = dir.path().join("world.toml");
    std::fs::write(
        &config,
        format!(
            "[plugins.git]\nstateDir = \"{}\"\nauthor = \"Ops <ops@example.com>\"\n",
            state.display()
        ),
    )
    .unwrap();
    let start = |n: &str| {
        let mut cmd = Command::new(WORLDD);
        cmd.args(["serve", "--bind", "127.0.0.1:0", "--db"])
            .arg(dir.path().join(format!("db{n}")))
            .arg("--workspace-root")
            .arg(dir.path().join(format!("wt{n}")))
            .arg("--plugin-dir")
            .arg(&plugins)
            .arg("--config")
            .arg(&config)
            .current_dir(dir.path());
        cmd
    };
    let mut first = start("1");
    first.stdout(Stdio::piped()).stderr(Stdio::piped());
    let first = Daemon::spawn(tempfile::tempdir().unwrap(), first);
    let out = run_to_exit(&mut start("2"), Duration::from_secs(30));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(
        err.lines().last().unwrap(),
        format!(
            "worldd: daemon startup failed at plugins: [plugins.git] stateDir {} is in use by another worldd (a plugin keeps its episodes' files there by episode name, so two daemons would overwrite each other's): give each daemon its own, or leave stateDir out (it is then <db>/plugin-state/git)",
            state.display()
        )
    );
    assert_eq!(get(&first.url("/v1/health"), None).status, 200);
    // A daemon's default stateDir (in its store) is held too: another daemon's config may
    // name it as its own.
    std::fs::write(
        &config,
        "[plugins.git]\nauthor = \"Ops <ops@example.com>\"\n",
    )
    .unwrap();
    let mut third = start("3");
    third.stdout(Stdio::piped()).stderr(Stdio::piped());
    let _third = Daemon::spawn(tempfile::tempdir().unwrap(), third);
    let default = dir.path().join("db3/plugin-state/git");
    assert!(default.is_dir());
    std::fs::write(
        &config,
        format!(
            "[plugins.git]\nstateDir = \"{}\"\nauthor = \"Ops <ops@example.com>\"\n",
            default.display()
        ),
    )
    .unwrap();
    let out = run_to_exit(&mut start("4"), Duration::from_secs(30));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.lines().last().unwrap().starts_with(&format!(
            "worldd: daemon startup failed at plugins: [plugins.git] stateDir {} is in use by another worldd",
            default.display()
        )),
        "{err}"
    );
}

/// A plugin `stateDir` inside the workspace root (or above it) started without a word, and the
/// ailang plugin then refused every call of every episode ("stateDir overlaps the episode's
/// worktree"), a unit spent each time. It is refused at start, naming the key.
#[test]
fn a_plugin_state_dir_overlapping_the_workspace_root_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let at = dir.path().canonicalize().unwrap();
    let plugins = plugin_dir_with(dir.path(), &["worldd_git"]);
    for state in ["wt/state", "."] {
        let state = at.join(state);
        let config = dir.path().join("world.toml");
        std::fs::write(
            &config,
            format!("[plugins.git]\nstateDir = \"{}\"\n", state.display()),
        )
        .unwrap();
        let r = refused_start(
            &[
                "--db",
                "db",
                "--workspace-root",
                "wt",
                "--bind",
                "127.0.0.1:0",
                "--plugin-dir",
                path_str(&plugins),
                "--config",
                path_str(&config),
            ],
            dir.path(),
        );
        assert_eq!(r.code, Some(2), "{}", r.stderr);
        assert_eq!(
            r.line,
            format!(
                "worldd: daemon startup failed at config: [plugins.git] stateDir {} overlaps the workspace root {}/wt: agents write their worktrees there and could rewrite what the plugin keeps; put it outside the workspace root, or leave it out (it is then <db>/plugin-state/git)",
                state.display(),
                at.display()
            )
        );
        assert!(!dir.path().join("db").exists());
    }
}
