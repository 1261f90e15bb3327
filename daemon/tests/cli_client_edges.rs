//! The client verbs and the command line's edges, through the real binary: `log tail -f` whose
//! reader goes away on a quiet daemon, `--db` naming a file, `--addr` and `$WORLD_ADDR` with a
//! query or an upper-case scheme, a non-UTF-8 `$WORLD_SESSION`, `man --out` on a full disk,
//! `--help` into a full stdout, `calls get` of a handle with a `/` and of a call still running,
//! and a backup whose copy was never checked.

mod common;

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::os::unix::ffi::OsStrExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// Run `worldd` with `args` and the environment `env` (values as bytes: a file name need not be
/// UTF-8); (exit code, stdout, stderr).
fn worldd_env<A: AsRef<OsStr>>(args: &[A], env: &[(&str, &[u8])]) -> (i32, String, String) {
    let mut cmd = Command::new(WORLDD);
    cmd.args(args)
        .env_remove("WORLD_ADDR")
        .env_remove("WORLD_SESSION");
    for (k, v) in env {
        cmd.env(k, OsStr::from_bytes(v));
    }
    let out = run_to_exit(&mut cmd, Duration::from_secs(60));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Wait for `child` to exit within `within`; `None` (and the child killed) if it did not.
fn exit_within(child: &mut std::process::Child, within: Duration) -> Option<i32> {
    let until = Instant::now() + within;
    while Instant::now() < until {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status.code().unwrap_or(-1));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

/// `worldd log tail -f | head -n 1` on a quiet daemon printed its line and then hung, because
/// only a failed write noticed the reader gone, and nothing was written until the next entry
/// (keep-alives are not printed). It now watches stdout and ends with exit 0 once the reader
/// has gone, with no entry committed meanwhile.
#[test]
fn log_tail_follow_ends_when_its_reader_goes_away_on_a_quiet_daemon() {
    let d = Daemon::start(&["worldd_workspace"], &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let file = d.session_file("ep1", &token);
    let addr = d.url("");
    let mut tail = Command::new(WORLDD)
        .args(["log", "tail", "-f", "-n", "1", "--addr", &addr, "--session"])
        .arg(&file)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut reader = BufReader::new(tail.stdout.take().unwrap());
    let mut first = String::new();
    reader.read_line(&mut first).unwrap();
    assert!(first.contains("genesis"), "{first:?}");
    // The reader goes away, as `head -n 1` does after its line.
    drop(reader);
    let code = exit_within(&mut tail, Duration::from_secs(10));
    let mut err = String::new();
    std::io::Read::read_to_string(&mut tail.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(
        code,
        Some(0),
        "log tail -f went on after its reader had gone; stderr: {err}"
    );
    assert_eq!(err, "");
}

/// `--db` naming a regular file was "does not exist; refusing to create one" for every store
/// verb but serve, which sent the operator looking for a missing directory.
#[test]
fn a_db_that_is_a_file_is_said_to_be_no_directory_by_every_store_verb() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("afile");
    std::fs::write(&file, "").unwrap();
    let db = path_str(&file);
    let said = format!(
        "worldd: world store {db} is not a directory (a store is a directory holding data.mdb and lock.mdb)\n"
    );
    let backup_dest = dir.path().join("bk1");
    for verb in [
        vec!["doctor", "--db", db],
        vec!["usage", "--db", db],
        vec!["session", "list", "--db", db],
        vec!["why", "1", "--db", db],
        vec!["session", "revoke", "--episode", "zz", "--db", db],
        vec!["backup", "--db", db, path_str(&backup_dest)],
    ] {
        let (code, out, err) = worldd(&verb, None);
        assert_eq!(
            (code, out.as_str(), err.as_str()),
            (1, "", said.as_str()),
            "{verb:?}"
        );
    }
    assert!(!backup_dest.exists());
}

/// An address with a query or a fragment after the port was taken, and every request went to
/// `/?x=1/v1/…`, answered "no route"; it is refused as an address with a path is, naming where
/// it came from. An upper-case scheme is the same scheme (RFC 3986) and is taken.
#[test]
fn an_address_with_a_query_or_fragment_is_refused_and_an_upper_case_scheme_is_taken() {
    let d = Daemon::start(&["worldd_workspace"], &[]);
    let host = d.addr.clone();
    for (addr, base) in [
        (format!("http://{host}?x=1"), host.clone()),
        (format!("http://{host}#frag"), host.clone()),
        (format!("{host}?"), host.clone()),
    ] {
        let said = |name: &str| {
            format!("worldd: {name} {addr}: give the daemon's base address without a query or fragment, e.g. http://{base} (the verbs add /v1/… and /mcp/ themselves)\n")
        };
        let got = worldd_env(&["health", "--addr", &addr], &[]);
        assert_eq!(got, (1, String::new(), said("--addr")), "{addr}");
        let got = worldd_env(&["health"], &[("WORLD_ADDR", addr.as_bytes())]);
        assert_eq!(got, (1, String::new(), said("$WORLD_ADDR")), "{addr}");
    }
    let health = get(&d.url("/v1/health"), None).text();
    for addr in [format!("HTTP://{host}"), format!("Http://{host}/")] {
        let (code, out, err) = worldd_env(&["health", "--addr", &addr], &[]);
        assert_eq!((code, err.as_str()), (0, ""), "{addr}");
        assert_eq!(out.trim_end(), health.trim_end(), "{addr}");
    }
}

/// `worldd health` exited 0 on any 200, so `worldd health && echo healthy` said healthy of a
/// daemon whose store was swapped under it and which refuses every call. The body is still
/// printed; the exit is 1, with a line naming the status and where operators read about it.
#[test]
fn health_of_a_daemon_refusing_every_call_exits_1_naming_its_status() {
    let d = Daemon::start(&["worldd_workspace"], &[]);
    let addr = format!("http://{}", d.addr);
    std::fs::remove_file(d.db().join("lock.mdb")).unwrap();
    d.wait_for_log("was replaced or removed while this daemon served it");
    let health = get(&d.url("/v1/health"), None).text();
    let (code, out, err) = worldd_env(&["health", "--addr", &addr], &[]);
    assert_eq!(out.trim_end(), health.trim_end());
    assert!(out.contains(r#""status":"store-replaced""#), "{out}");
    assert_eq!(
        (code, err.as_str()),
        (
            1,
            format!("worldd: the daemon at {addr} is not healthy: status store-replaced: it refuses new calls; see docs/operators.md#running-problems\n").as_str()
        )
    );
}

/// A `$WORLD_SESSION` naming a session file by a name that is not UTF-8 was taken for no
/// variable at all: the request went out without a credential, and the error told the user to
/// set what they had set. It is read as the path it is. A non-UTF-8 `$WORLD_ADDR` got clap's
/// "invalid UTF-8 was detected in one or more arguments", naming nothing; it is named. The same
/// file name given as `--session` got clap's unnamed error; it is read too, and a name that
/// names no file is shown in the `$'…'` quoting that names it, not with a replacement
/// character that names another.
#[test]
fn a_world_session_or_world_addr_that_is_not_utf8_is_read_or_named() {
    let d = Daemon::start(&["worldd_workspace"], &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let plain = d.session_file("ep1", &token);
    let mut name = d.dir.path().as_os_str().as_bytes().to_vec();
    name.extend_from_slice(b"/\xff.session");
    std::fs::copy(&plain, OsStr::from_bytes(&name)).unwrap();
    let addr = d.url("");
    let head = get(&d.url("/v1/head"), Some(&token)).text();
    let (code, out, err) = worldd_env(&["head", "--addr", &addr], &[("WORLD_SESSION", &name)]);
    assert_eq!((code, err.as_str()), (0, ""));
    assert_eq!(out.trim_end(), head.trim_end());
    let (code, out, err) = worldd_env(
        &[
            OsStr::new("head"),
            OsStr::new("--addr"),
            OsStr::new(&addr),
            OsStr::new("--session"),
            OsStr::from_bytes(&name),
        ],
        &[],
    );
    assert_eq!((code, err.as_str()), (0, ""));
    assert_eq!(out.trim_end(), head.trim_end());
    // Not a file: named as given, in the variable's name.
    let mut missing = d.dir.path().as_os_str().as_bytes().to_vec();
    missing.extend_from_slice(b"/\xfe.session");
    let (code, _, err) = worldd_env(&["head", "--addr", &addr], &[("WORLD_SESSION", &missing)]);
    assert_eq!(code, 1);
    assert_eq!(
        err,
        format!(
            "worldd: $WORLD_SESSION $'{}/\\xfe.session': no such session file (`worldd session new EPISODE --preset se-tools --out FILE` writes a session file)\n",
            d.dir.path().display()
        )
    );
    let got = worldd_env(&["health"], &[("WORLD_ADDR", b"http://127.0.0.1:\xff")]);
    assert_eq!(
        got,
        (
            1,
            String::new(),
            "worldd: $WORLD_ADDR is not UTF-8 text: give the daemon's address as http://HOST:PORT, e.g. http://127.0.0.1:7644\n".to_owned()
        )
    );
}

/// `man --out DIR` on a full disk left a truncated page (`man` shows it blank) and named only
/// the directory. Each page is written whole or not at all, and the failure names the page.
#[test]
fn man_out_on_a_full_disk_leaves_no_truncated_page_and_names_the_page() {
    let Some(fs) = Tmpfs::mount(200 << 10) else {
        eprintln!("skipped: cannot mount a tmpfs here (not root)");
        return;
    };
    let fill = fs.dir.path().join("fill");
    let mut filler = std::fs::File::create(&fill).unwrap();
    let chunk = vec![0u8; 4096];
    while std::io::Write::write_all(&mut filler, &chunk).is_ok() {}
    drop(filler);
    // Room for a few small pages, not for all of them.
    let len = std::fs::metadata(&fill).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&fill)
        .unwrap()
        .set_len(len - (8 << 10))
        .unwrap();
    let out = fs.dir.path().join("man");
    let (code, stdout, err) = worldd(&["man", "--out", path_str(&out)], None);
    assert_eq!((code, stdout.as_str()), (1, ""), "{err}");
    let page = err
        .strip_prefix("worldd: ")
        .and_then(|e| e.strip_suffix(": No space left on device (os error 28)\n"))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(
        page.starts_with(&format!("{}/worldd", out.display())) && page.ends_with(".1"),
        "{err}"
    );
    assert!(!std::path::Path::new(page).exists(), "{page} was left");
    // What is there is whole: each page as `worldd man --out` writes it with room to spare.
    let roomy = tempfile::tempdir().unwrap();
    let (code, _, err) = worldd(&["man", "--out", path_str(roomy.path())], None);
    assert_eq!(code, 0, "{err}");
    for entry in std::fs::read_dir(&out).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        assert_eq!(
            std::fs::read(entry.path()).unwrap(),
            std::fs::read(roomy.path().join(&name)).unwrap(),
            "{name:?} is not whole"
        );
    }
}

/// `--help` and `--version` into a full stdout exited 0 without a word (clap's printing drops
/// the write error), so `worldd --version > file` on a full disk made an empty file and
/// succeeded. They say it as every verb does, and exit 1.
#[test]
fn help_and_version_into_a_full_stdout_say_so_and_exit_1() {
    for args in [
        &["--help"][..],
        &["--version"],
        &["-V"],
        &["serve", "--help"],
        &["why", "--help"],
        &["help", "calls"],
    ] {
        let out = Command::new(WORLDD)
            .args(args)
            .stdout(
                std::fs::OpenOptions::new()
                    .write(true)
                    .open("/dev/full")
                    .unwrap(),
            )
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            "worldd: cannot write to stdout: No space left on device (os error 28)\n",
            "{args:?}"
        );
    }
    // Where stdout takes it, as before.
    let (code, out, err) = worldd(&["--version"], None);
    assert_eq!((code, err.as_str()), (0, ""));
    assert!(out.starts_with("worldd "), "{out}");
}

/// `calls get a/b` split the handle into path segments and met "no route", naming neither the
/// handle nor the rule; it is checked by the task-id rule before anything is sent. And `call
/// --json @` said `: No such file or directory`, naming no flag.
#[test]
fn calls_get_of_a_handle_with_a_slash_is_refused_by_the_task_id_rule() {
    // No daemon listens there: the refusal comes before any request.
    let addr = "http://127.0.0.1:1";
    for handle in ["a/b", "a b", "?x", "/"] {
        let (code, out, err) = worldd(&["calls", "get", handle, "--addr", addr], None);
        assert_eq!(
            (code, out.as_str(), err),
            (
                1,
                "",
                format!("worldd: calls get \"{handle}\": a task id must be 1-128 characters of A-Z a-z 0-9 . _ - (an invocation id is mcp:<episode>:<task id> or a2a:<episode>:<task id>)\n")
            )
        );
    }
    let long = "k".repeat(129);
    let (code, _, err) = worldd(&["calls", "get", &long, "--addr", addr], None);
    assert_eq!(code, 1);
    assert!(
        err.starts_with(&format!("worldd: calls get \"{long}\": a task id must be")),
        "{err}"
    );
    let (code, _, err) = worldd(
        &["call", "ailang-read", "--json", "@", "--addr", addr],
        None,
    );
    assert_eq!(
        (code, err.as_str()),
        (1, "worldd: --json @: no file named after the @ (--json @FILE reads FILE; --json - reads stdin)\n")
    );
    let (code, _, err) = worldd(
        &[
            "call",
            "ailang-read",
            "--json",
            "@/nonexistent/args.json",
            "--addr",
            addr,
        ],
        None,
    );
    assert_eq!(
        (code, err.as_str()),
        (
            1,
            "worldd: --json @/nonexistent/args.json: No such file or directory (os error 2)\n"
        )
    );
}

/// `worldd calls get` of a call the daemon is still running told the agent what it tells of a
/// call nothing runs any more: "do not retry, inspect the worktree", where the effect is
/// half done. In flight, it says to ask again later and not to resend.
#[test]
fn calls_get_of_a_call_still_running_says_ask_again_later_not_inspect_the_worktree() {
    let bin = format!("ailang.bin={}", path_str(&fixtures::ailang_standin()));
    let d = Daemon::start(
        &["worldd_workspace", "worldd_ailang"],
        &["--plugin-config", &bin],
    );
    let token = d.session("ep1", &["Ailang.Run=worktree:5"]);
    let mut caller = fixtures::start_a_hanging_run(&d, "ep1", &token);
    let file = d.session_file("ep1", &token);
    let addr = d.url("");
    let (code, out, err) = worldd(
        &[
            "calls",
            "get",
            "h1",
            "--addr",
            &addr,
            "--session",
            path_str(&file),
        ],
        None,
    );
    let _ = caller.kill();
    let _ = caller.wait();
    assert_eq!((code, err.as_str()), (0, ""), "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines.first().copied(),
        Some("mcp:ep1:h1  ailang-run  indeterminate"),
        "{out}"
    );
    assert_eq!(
        lines.get(1).copied(),
        Some("  outcome   indeterminate (in-flight)  retryable: false"),
        "{out}"
    );
    assert_eq!(
        lines.last().copied(),
        Some("indeterminate (in-flight): the daemon is still running it; ask again later, and do not resend it"),
        "{out}"
    );
}

/// A finished backup leaves no marker; a destination holding a copy whose backup never
/// finished its check (killed during it) is refused as such, not as any occupied directory.
#[test]
fn a_backup_marks_its_copy_unchecked_until_its_check_passes() {
    let d = Daemon::start(&["worldd_workspace"], &[]);
    let _ = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("bk");
    let backup = || {
        worldd(
            &[
                "backup",
                "--db",
                path_str(&d.db()),
                "--workspace-root",
                path_str(&d.root()),
                path_str(&dest),
            ],
            None,
        )
    };
    let (code, out, err) = backup();
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("✓ the copy opens and doctor's checks pass"),
        "{out}"
    );
    let mut names: Vec<String> = std::fs::read_dir(&dest)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["data.mdb", "lock.mdb"]);
    // Where a backup killed while it checked the copy leaves it.
    std::fs::write(dest.join(".unverified"), "").unwrap();
    let (code, out, err) = backup();
    assert_eq!((code, out.as_str()), (1, ""));
    assert_eq!(
        err,
        format!("worldd: backup: destination {} holds a backup that was never checked (its .unverified marker: the backup that wrote it was interrupted, or its copy failed the check); do not restore from it: remove the directory, then back up again\n", dest.display())
    );
}

/// `map_size` beside `store_ceiling` in world.toml was "duplicate field `store_ceiling`" at the
/// table's header, and `--map-size` beside `--store-ceiling` "'--store-ceiling' cannot be used
/// multiple times": each was given once. Both are said as the old name and the new, the file's
/// at the `map_size` line; either old name alone is still the ceiling.
#[test]
fn map_size_beside_store_ceiling_is_said_to_be_its_old_name_not_a_duplicate() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("world.toml");
    std::fs::write(
        &config,
        "[serve]\nstore_ceiling = \"2GiB\"\nmap_size = \"1GiB\"\n",
    )
    .unwrap();
    let r = refused_start(
        &["--config", "world.toml", "--bind", "127.0.0.1:0"],
        dir.path(),
    );
    assert_eq!(
        (r.code, r.line.as_str()),
        (
            Some(2),
            "worldd: daemon startup failed at config: world.toml: line 3: map_size is the old name of store_ceiling: give one"
        ),
        "{}",
        r.stderr
    );
    let r = refused_start(
        &[
            "--map-size",
            "1GiB",
            "--store-ceiling",
            "2GiB",
            "--bind",
            "127.0.0.1:0",
        ],
        dir.path(),
    );
    assert_eq!(
        (r.code, r.line.as_str()),
        (
            Some(2),
            "worldd: daemon startup failed at config: --map-size is the old name of --store-ceiling: give one"
        ),
        "{}",
        r.stderr
    );
    // The old names alone are the ceiling: too small a one is refused as the ceiling.
    let too_small = "worldd: daemon startup failed at config: the store ceiling (100 bytes) is below 1048576 bytes, the least a store is given (a size without a unit is in bytes: write 64GiB, for example)";
    let r = refused_start(&["--map-size", "100", "--bind", "127.0.0.1:0"], dir.path());
    assert_eq!(
        (r.code, r.line.as_str()),
        (Some(2), too_small),
        "{}",
        r.stderr
    );
    std::fs::write(&config, "[serve]\nmap_size = 100\n").unwrap();
    let r = refused_start(
        &["--config", "world.toml", "--bind", "127.0.0.1:0"],
        dir.path(),
    );
    assert_eq!(
        (r.code, r.line.as_str()),
        (Some(2), too_small),
        "{}",
        r.stderr
    );
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "a refused start left something behind"
    );
}

/// `WORLD_ADDR=` (set but empty) was refused as `--addr "": want http://HOST:PORT`, an `--addr`
/// nobody gave. An empty variable is taken as unset: the default address is asked. An empty
/// `--addr ""`, which was given, is still refused as itself.
#[test]
fn an_empty_world_addr_is_taken_as_unset_and_an_empty_addr_flag_is_refused() {
    // Whatever answers at the default address (nothing, as a rule, in a test run): it is the
    // one asked.
    let (code, _, err) = worldd_env(&["health", "--timeout", "2"], &[("WORLD_ADDR", b"")]);
    assert!(
        code == 0
            || err.starts_with("worldd: cannot reach the daemon at http://127.0.0.1:7644 ")
            || err.starts_with("worldd: the daemon at http://127.0.0.1:7644 "),
        "{code}: {err}"
    );
    let (code, _, err) = worldd_env(&["health", "--addr", ""], &[]);
    assert_eq!(
        (code, err.as_str()),
        (
            1,
            "worldd: --addr \"\": want http://HOST:PORT, e.g. http://127.0.0.1:7644\n"
        )
    );
}

/// `worldd call … > /dev/full` said only `cannot write to stdout: …`, exit 1, after the call
/// had run and committed, so a script on a full disk ran the write again. It names the call it
/// committed (its invocation id and entry) and how to see it without running it again: `calls
/// get` of the invocation id, or of the key, which a resend with the same key answers from.
#[test]
fn a_call_whose_output_cannot_be_written_says_it_committed_and_how_to_find_it() {
    let d = Daemon::start(&["worldd_workspace"], &[]);
    let token = d.session("ep1", &["Workspace.Write=worktree:5"]);
    let file = d.session_file("ep1", &token);
    let addr = d.url("");
    let client = |args: &[&str], stdout: Stdio| {
        let out = Command::new(WORLDD)
            .args(args)
            .args(["--addr", &addr, "--session", path_str(&file)])
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let full = || {
        Stdio::from(
            std::fs::OpenOptions::new()
                .write(true)
                .open("/dev/full")
                .unwrap(),
        )
    };
    let entry_of = |handle: &str| {
        let (code, out, err) = client(&["calls", "get", handle], Stdio::piped());
        assert_eq!((code, err.as_str()), (Some(0), ""), "{out}");
        assert!(out.contains("  ailang-write  committed\n"), "{out}");
        out.lines()
            .find_map(|l| l.strip_prefix("  entry     "))
            .unwrap_or_else(|| panic!("{out}"))
            .to_owned()
    };

    // Without a key, the committed bytes (`--json-out`): named by its invocation id.
    let (code, out, err) = client(
        &[
            "call",
            "ailang-write",
            "--arg",
            "path=full.txt",
            "--arg",
            "content=x",
            "--json-out",
        ],
        full(),
    );
    assert_eq!((code, out.as_str()), (Some(1), ""), "{err}");
    let id = err
        .strip_prefix("worldd: the call was committed as ")
        .and_then(|rest| rest.split(' ').next())
        .unwrap_or_else(|| panic!("{err}"))
        .to_owned();
    assert!(id.starts_with("mcp:ep1:"), "{err}");
    let entry = entry_of(&id);
    assert_eq!(
        err,
        format!(
            "worldd: the call was committed as {id} (entry {entry}), but its output could not be written: cannot write to stdout: No space left on device (os error 28); do not run it again: `worldd calls get {id}` shows the commit\n"
        )
    );
    assert_eq!(
        std::fs::read_to_string(d.root().join("ep1/full.txt")).unwrap(),
        "x"
    );

    // With a key, pretty-printed: the key is named, and a resend answers from the commit.
    let keyed = [
        "call",
        "ailang-write",
        "--arg",
        "path=full2.txt",
        "--arg",
        "content=y",
        "--idempotency-key",
        "full-1",
    ];
    let (code, out, err) = client(&keyed, full());
    assert_eq!((code, out.as_str()), (Some(1), ""), "{err}");
    let entry = entry_of("full-1");
    assert_eq!(
        err,
        format!(
            "worldd: the call was committed as mcp:ep1:full-1 (entry {entry}), but its output could not be written: cannot write to stdout: No space left on device (os error 28); do not run it again: `worldd calls get full-1` shows the commit, and resending it with the same key returns its result without running it\n"
        )
    );
    let head = get(&d.url("/v1/head"), Some(&token)).text();
    let (code, out, err) = client(&keyed, Stdio::piped());
    assert_eq!((code, err.as_str()), (Some(0), ""), "{out}");
    assert!(out.contains("\"bytes\": 1"), "{out}");
    assert_eq!(get(&d.url("/v1/head"), Some(&token)).text(), head);
}
