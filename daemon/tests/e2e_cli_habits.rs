//! What a newcomer meets first, through the real binary: why a tool cannot run
//! (`GET /v1/handlers`, `worldd tools list`, `worldd call`), JSON answers for wrong paths and
//! methods, clear errors for session and address mistakes, the daemon's log lines, quickstart's
//! order of work, completions, man pages and examples in every verb's help.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use broker_core::coordinator::R8_MESSAGE;
use common::*;
use serde_json::{json, Value};

const WS_AILANG: &[&str] = &["worldd_workspace", "worldd_ailang"];
const DECLINED: &str =
    "declined: no ailang binary configured (start worldd serve with --plugin-config ailang.bin=PATH)";
const R8_RUN: &str =
    "transition declares an effect this daemon has no handler for (Ailang.Run, Ailang.RunEnv, Ailang.RunNet)";

/// Wait for a stderr line containing every needle; the bound only turns a hang into a failure.
fn expect_line(rx: &mpsc::Receiver<String>, needles: &[&str]) -> String {
    let mut seen = Vec::new();
    loop {
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(line) if needles.iter().all(|n| line.contains(n)) => return line,
            Ok(line) => seen.push(line),
            Err(_) => panic!("no log line with {needles:?}; saw:\n{}", seen.join("\n")),
        }
    }
}

fn cli(d: &Daemon, token: &str, args: &[&str]) -> (i32, String, String) {
    let addr = d.url("");
    let mut all = args.to_vec();
    all.extend(["--addr", addr.as_str(), "--session", token]);
    worldd(&all, None)
}

#[test]
fn handlers_route_lists_the_plugins_and_says_why_a_tool_cannot_run() {
    let d = Daemon::start(WS_AILANG, &[]);
    let token = d.session(
        "demo",
        &["Workspace.Read=worktree:5", "Ailang.Run=worktree:5"],
    );
    let a = get(&d.url("/v1/handlers"), Some(&token));
    assert_eq!(a.status, 200, "{}", a.text());
    let v = a.json();
    let plugins = v["plugins"].as_array().unwrap();
    assert_eq!(plugins.len(), 1, "{v}");
    let ws = &plugins[0];
    assert_eq!(ws["name"], "workspace");
    assert_eq!(ws["version"], "0.1.0");
    // An agent is told the library's file name, not where on the host it lies; an operator
    // the absolute path it was loaded from.
    assert_eq!(ws["path"], "libworldd_workspace.so", "{ws}");
    assert_eq!(v["declined"][0]["path"], "libworldd_ailang.so", "{v}");
    let ops = d.operator_session("ops", &[]);
    let full = get(&d.url("/v1/handlers"), Some(&ops)).json();
    let path = full["plugins"][0]["path"].as_str().unwrap();
    assert!(Path::new(path).is_absolute(), "{path}");
    assert!(path.ends_with("/plugins/libworldd_workspace.so"), "{path}");
    assert!(
        ws["identity"]
            .as_str()
            .unwrap()
            .starts_with("workspace 0.1.0 (sha256:"),
        "{ws}"
    );
    assert_eq!(
        ws["effects"],
        json!([{"effect": "Workspace.Read", "class": "read"},
               {"effect": "Workspace.Write", "class": "write"}])
    );
    assert_eq!(v["declined"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["declined"][0]["name"], "ailang");
    assert_eq!(v["declined"][0]["reason"], DECLINED);
    assert_eq!(v["unselected"], json!([]), "{v}");
    let tools: Vec<&Value> = v["tools"].as_array().unwrap().iter().collect();
    let find = |name: &str| {
        tools
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("{name} not in {v}"))
    };
    assert_eq!(
        *find("ailang-read"),
        &json!({"name": "ailang-read", "effects": ["Workspace.Read"], "canRun": true})
    );
    assert_eq!(
        *find("ailang-run"),
        &json!({"name": "ailang-run", "effects": ["Ailang.Run", "Ailang.RunEnv", "Ailang.RunNet"],
                "canRun": false, "reason": R8_RUN, "plugin": "ailang"})
    );
    // Only the session's tools: no Workspace.Write grant, no ailang-write.
    assert!(tools.iter().all(|t| t["name"] != "ailang-write"), "{v}");

    let anonymous = get(&d.url("/v1/handlers"), None);
    assert_eq!(anonymous.status, 401);
    assert_eq!(anonymous.json()["error"]["class"], "SessionAbsent");
}

/// A tool whose plugin the selection leaves out is refused by R8 like one whose plugin
/// declined, and the route and `worldd call` say which plugin it was and why.
#[test]
fn a_tool_of_a_plugin_left_out_by_the_selection_says_so() {
    let d = Daemon::start(WS_AILANG, &["--handler", "workspace"]);
    let token = d.session("demo", &["Ailang.Run=worktree:5"]);
    let v = get(&d.url("/v1/handlers"), Some(&token)).json();
    assert_eq!(v["declined"], json!([]), "{v}");
    assert_eq!(v["unselected"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["unselected"][0]["name"], "ailang", "{v}");
    let run = v["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "ailang-run")
        .unwrap();
    assert_eq!(run["plugin"], "ailang", "{v}");
    let session = d.session_file("demo", &token);
    let (code, _, err) = worldd(
        &[
            "call",
            "ailang-run",
            "--arg",
            "path=m.ail",
            "--addr",
            &d.addr,
            "--session",
            path_str(&session),
        ],
        None,
    );
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(
            "plugin ailang is not selected here: --handler or [serve] handlers leave it out"
        ),
        "{err}"
    );
}

#[test]
fn handlers_route_names_a_missing_worktree() {
    let d = Daemon::start(&["worldd_workspace"], &[]);
    let token = d.session_without_worktree("nowhere", &["Workspace.Read=worktree:5"]);
    let v = get(&d.url("/v1/handlers"), Some(&token)).json();
    assert_eq!(
        v["tools"],
        json!([{"name": "ailang-read", "effects": ["Workspace.Read"], "canRun": false,
                "reason": "no usable worktree for this episode: episode nowhere's worktree does not exist: an operator creates it (the directory nowhere in the workspace root; worldd session new makes a worktree and a credential together, for an episode that has neither)"}])
    );
    // `worldd call` says it under the worktree's lead-in, not as a missing handler.
    let session = d.session_file("nowhere", &token);
    let (code, out, err) = worldd(
        &[
            "call",
            "ailang-read",
            "--arg",
            "path=a.txt",
            "--addr",
            &d.addr,
            "--session",
            path_str(&session),
        ],
        None,
    );
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert_eq!(
        err,
        "worldd: ailang-read cannot run in this daemon: no usable worktree for this episode: episode nowhere's worktree does not exist: an operator creates it (the directory nowhere in the workspace root; worldd session new makes a worktree and a credential together, for an episode that has neither); nothing ran and nothing was spent (rule R8)\n"
    );
}

#[test]
fn call_of_a_tool_without_a_handler_names_rule_r8_not_the_log_hint() {
    let d = Daemon::start(WS_AILANG, &[]);
    let log = d.log_lines();
    let token = d.session("demo", &["Ailang.Run=worktree:5"]);
    let (code, out, err) = cli(
        &d,
        &token,
        &["call", "ailang-run", "--arg", "path=main.ail"],
    );
    assert_eq!(code, 1, "{out}{err}");
    assert_eq!(out, "");
    assert!(
        err.ends_with(&format!(
            "worldd: ailang-run cannot run in this daemon: {R8_RUN}; nothing ran and nothing was spent (rule R8)\n  plugin ailang did not start: {DECLINED}\n"
        )),
        "{err}"
    );
    assert!(!err.contains("check the log"), "{err}");
    // Nothing ran: the log holds only the genesis and the plugin publication.
    let head = get(&d.url("/v1/log?from=0"), Some(&token)).json();
    assert_eq!(head["items"].as_array().unwrap().len(), 1, "{head}");
    // The operator's log names it as the deployment's gap (a warning), not a fault.
    let line = expect_line(
        &log,
        &["mcp tools/call: host callback failed: ", R8_MESSAGE],
    );
    assert!(line.contains(" WARN "), "{line}");
}

/// On a machine with no git identity the git plugin declines too, and `call ailang-run`'s R8
/// explanation named it as well (`plugin git did not start: … git.author=…`), as did `tools
/// list` of a session that sees no git tool: a newcomer was sent to configure a git author to
/// run an AILANG program. Only a plugin that declares an effect the tool lacks is named; the
/// route lists each declined plugin's effects, which is how the command line knows.
#[test]
fn the_r8_explanation_names_only_the_declined_plugins_that_declare_the_missing_effects() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir(&home).unwrap();
    let mut cmd = Daemon::serve_command(&dir, &["worldd_workspace", "worldd_ailang", "worldd_git"]);
    cmd.current_dir(&home)
        .env("HOME", &home)
        .env("XDG_CONFIG_HOME", &home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null");
    let d = Daemon::spawn(dir, cmd);
    let token = d.session(
        "demo",
        &["Workspace.Read=worktree:5", "Ailang.Run=worktree:5"],
    );
    let v = get(&d.url("/v1/handlers"), Some(&token)).json();
    let declined: Vec<&str> = v["declined"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(declined, ["ailang", "git"], "{v}");
    assert_eq!(
        v["declined"][1]["effects"],
        json!([{"effect": "Git.Commit", "class": "write"}]),
        "{v}"
    );
    let ailang = v["declined"][0]["effects"].as_array().unwrap();
    assert!(
        ailang.contains(&json!({"effect": "Ailang.Run", "class": "unknown"})),
        "{v}"
    );

    // The credential from a file, as a person keeps it: stderr holds only what is said.
    let cli = |d: &Daemon, token: &str, args: &[&str]| {
        let file = d.session_file(&token[..8], token);
        let addr = d.url("");
        let mut all = args.to_vec();
        all.extend(["--addr", addr.as_str(), "--session", path_str(&file)]);
        worldd(&all, None)
    };
    let (code, out, err) = cli(
        &d,
        &token,
        &["call", "ailang-run", "--arg", "path=main.ail"],
    );
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert_eq!(
        err,
        format!(
            "worldd: ailang-run cannot run in this daemon: {R8_RUN}; nothing ran and nothing was spent (rule R8)\n  plugin ailang did not start: {DECLINED}\n"
        )
    );
    let (code, out, err) = cli(&d, &token, &["tools", "list"]);
    assert_eq!((code, err.as_str()), (0, ""));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[lines.len() - 2..],
        [
            "2 tool(s), 1 cannot run here".to_owned(),
            format!("plugin ailang did not start: {DECLINED}")
        ],
        "{out}"
    );
    // A session that sees only tools that can run is told of no plugin at all.
    let reader = d.session("reader", &["Workspace.Read=worktree:5"]);
    let (code, out, err) = cli(&d, &reader, &["tools", "list"]);
    assert_eq!((code, err.as_str()), (0, ""));
    assert!(out.ends_with("\n1 tool(s)\n"), "{out}");
}

#[test]
fn tools_list_marks_the_tools_that_cannot_run() {
    let d = Daemon::start(WS_AILANG, &[]);
    let token = d.session(
        "demo",
        &["Workspace.Read=worktree:5", "Ailang.Run=worktree:5"],
    );
    let (code, out, err) = cli(&d, &token, &["tools", "list"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("ailang-read  Read one file"), "{out}");
    assert!(
        lines[1].starts_with("ailang-run  Execute one AILANG program"),
        "{out}"
    );
    assert_eq!(lines[2], format!("    cannot run here: {R8_RUN}"));
    assert_eq!(lines[3], "2 tool(s), 1 cannot run here");
    assert_eq!(lines[4], format!("plugin ailang did not start: {DECLINED}"));
    assert_eq!(lines.len(), 5, "{out}");
}

#[test]
fn wrong_paths_and_methods_get_json_that_names_the_endpoints() {
    let d = Daemon::start(&["worldd_workspace"], &[]);
    let endpoints = "worldd serves MCP at POST /mcp/, A2A at POST /a2a/ (agent card at GET /.well-known/agent-card.json), the REST API under /v1/ (GET /v1/health needs no session) and the workbench at /workbench";
    for path in ["/", "/sse", "/mcp/sse", "/v2/health"] {
        let a = get(&d.url(path), None);
        assert_eq!(a.status, 404, "{path}");
        assert_eq!(a.content_type, "application/json");
        assert_eq!(
            a.json(),
            json!({"error": {"class": "NotFound",
                             "message": format!("no route for GET {path}; {endpoints}")}})
        );
    }
    for (method, path) in [("GET", "/mcp/"), ("GET", "/a2a/"), ("POST", "/v1/health")] {
        let a = request(method, &d.url(path), None, &[], None);
        assert_eq!(a.status, 405, "{method} {path}");
        assert_eq!(
            a.json(),
            json!({"error": {"class": "MethodNotAllowed",
                             "message": format!("{method} is not served at {path} (the Allow header lists what is); {endpoints}")}})
        );
    }
    let ureq_res = ureq::get(&d.url("/mcp/")).call();
    let Err(ureq::Error::Status(405, r)) = ureq_res else {
        panic!("GET /mcp/ was not 405")
    };
    assert_eq!(r.header("allow"), Some("POST"));
}

#[test]
fn session_and_address_mistakes_get_clear_errors() {
    let d = Daemon::start(&["worldd_workspace"], &[]);
    let addr = d.url("");
    let run = |args: &[&str], env_session: Option<&str>| {
        let mut c = Command::new(WORLDD);
        c.args(args)
            .env_remove("WORLD_SESSION")
            .env_remove("WORLD_ADDR");
        if let Some(s) = env_session {
            c.env("WORLD_SESSION", s);
        }
        let out = c.output().unwrap();
        (
            out.status.code().unwrap(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let a = addr.as_str();
    assert_eq!(
        run(&["head", "--addr", a, "--session", "deadbeef"], None),
        (1, "worldd: --session deadbeef: not a credential (a credential is 64 hex digits; this has 8) and no file of that name exists\n".into())
    );
    assert_eq!(
        run(&["head", "--addr", a], Some("nope.session")),
        (1, "worldd: $WORLD_SESSION nope.session: no such session file (`worldd session new EPISODE --preset se-tools --out FILE` writes a session file)\n".into())
    );
    assert_eq!(
        run(&["head", "--addr", a], None),
        (1, "worldd: /v1/head needs a session credential and none was given: pass --session FILE (or set $WORLD_SESSION); `worldd session new EPISODE --preset se-tools --out FILE` makes one\n".into())
    );
    assert_eq!(
        run(&["tools", "list", "--addr", a], None),
        (1, "worldd: /mcp/ needs a session credential and none was given: pass --session FILE (or set $WORLD_SESSION); `worldd session new EPISODE --preset se-tools --out FILE` makes one\n".into())
    );
    let with_path = format!("{addr}/mcp/");
    assert_eq!(
        run(&["health", "--addr", &with_path], None),
        (1, format!("worldd: --addr {with_path}: give the daemon's base address without a path, e.g. http://{} (the verbs add /v1/… and /mcp/ themselves)\n", d.addr))
    );
    let tls = format!("https://{}", d.addr);
    assert_eq!(
        run(&["health", "--addr", &tls], None),
        (1, format!("worldd: --addr {tls}: worldd serves plain HTTP on loopback; give http://HOST:PORT\n"))
    );
    // No scheme is fine, and so is $WORLD_ADDR.
    let (code, err) = run(&["health", "--addr", &d.addr], None);
    assert_eq!((code, err.as_str()), (0, ""));
    let out = Command::new(WORLDD)
        .arg("health")
        .env("WORLD_ADDR", &addr)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    // A file that does not hold a credential is named as such.
    let file = d.dir.path().join("garbage.session");
    std::fs::write(&file, "hello\n").unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let f = file.display().to_string();
    assert_eq!(
        run(&["head", "--addr", a, "--session", &f], None),
        (
            1,
            format!(
                "worldd: session file {f} does not hold a session credential (64 hex digits)\n"
            )
        )
    );
    // Nothing listens: say so, and where.
    let dead = "http://127.0.0.1:9";
    let (code, err) = run(&["health", "--addr", dead], None);
    assert_eq!(code, 1);
    assert!(
        err.starts_with("worldd: cannot reach the daemon at http://127.0.0.1:9 (")
            && err.ends_with("); is `worldd serve` running there? (--addr or $WORLD_ADDR names another address)\n"),
        "{err}"
    );
}

/// `worldd call … --json-out | worldd why -` after a failed call: why says its stdin was
/// empty instead of looking for the hash of no bytes.
#[test]
fn why_of_an_empty_pipe_says_the_call_before_it_printed_nothing() {
    let d = Daemon::start(&["worldd_workspace"], &[]);
    let (code, out, err) = worldd(&["why", "--addr", &d.url(""), "-"], Some(b""));
    assert_eq!(
        (code, out.as_str(), err.as_str()),
        (1, "", "worldd: why -: nothing on stdin (did the command before the pipe fail? `worldd call TOOL --json-out | worldd why -` verifies the result it prints)\n")
    );
}

#[test]
fn the_daemon_logs_each_call_and_each_refused_credential() {
    let d = Daemon::start(&["worldd_workspace"], &[]);
    let rx = d.log_lines();
    let token = d.session(
        "logged",
        &["Workspace.Read=worktree:5", "Workspace.Write=worktree:5"],
    );
    let (code, _, err) = cli(
        &d,
        &token,
        &[
            "call",
            "ailang-write",
            "--arg",
            "path=a.txt",
            "--arg",
            "content=x",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let line = expect_line(
        &rx,
        &[" INFO call tool=ailang-write episode=logged outcome=ok ms="],
    );
    assert!(!line.contains(&token), "{line}");
    let unknown = "0".repeat(64);
    let a = mcp(&d, &unknown, "tools/list", json!({}));
    assert_eq!(a.status, 401);
    let line = expect_line(
        &rx,
        &[" WARN refused a request: unknown session credential"],
    );
    assert!(!line.contains(&unknown), "{line}");
    let a = mcp(
        &d,
        &token,
        "tools/call",
        json!({"name": "ailang-read", "arguments": {"nope": 1}}),
    );
    assert_eq!(a.status, 200);
    expect_line(
        &rx,
        &["INFO call tool=ailang-read episode=logged outcome=refused ms="],
    );
}

#[test]
fn a_daemon_with_no_plugin_says_so() {
    let d = Daemon::start(&[], &[]);
    let rx = d.log_lines();
    let dir = d.plugin_dir().display().to_string();
    expect_line(
        &rx,
        &[&format!(
            " WARN no plugin loaded from {dir}: every tool call will be refused (rule R8)"
        )],
    );
}

/// `worldd serve` with no `--plugin-dir` loads every library beside its executable, where
/// `cargo build` puts the library of every workspace member that builds one. The test plugin
/// that hangs on request (`tests/fixtures/stall-plugin`) was such a member, so that `cargo
/// build --workspace`, or `worldd-bench --attacks` in `target/release`, left its tools in every
/// default daemon's `tools/list`. The workspace's libraries are the shipped plugins' alone, and
/// what the directory beside this build's `worldd` loads is among them.
#[test]
fn a_build_leaves_no_test_plugin_where_serve_looks_by_default() {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let metadata: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut libraries: Vec<&str> = metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| {
            p["targets"].as_array().unwrap().iter().any(|t| {
                t["crate_types"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|c| c == "cdylib")
            })
        })
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    libraries.sort();
    assert_eq!(
        libraries,
        [
            "worldd-handler-ailang",
            "worldd-handler-git",
            "worldd-handler-registry",
            "worldd-handler-workspace"
        ],
        "the workspace builds a library that is not a shipped plugin into the directory `worldd serve` loads by default"
    );

    let (code, out, err) = worldd(&["handlers"], None);
    assert_eq!(code, 0, "{out}{err}");
    let dir = Path::new(WORLDD).parent().unwrap();
    let loaded: Vec<&str> = out
        .lines()
        .filter(|l| l.contains(" (abi ") && !l.starts_with(' '))
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    assert!(
        loaded
            .iter()
            .all(|p| ["ailang", "git", "registry", "workspace"].contains(p)),
        "{} holds a library that is not a shipped plugin (one left by an older build? remove \
         it):\n{out}",
        dir.display()
    );
}

#[test]
fn quickstart_on_a_taken_port_creates_nothing() {
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = holder.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let world = dir.path().join("w");
    let bind = format!("127.0.0.1:{port}");
    let (code, out, err) = worldd(
        &["quickstart", "--dir", path_str(&world), "--bind", &bind],
        None,
    );
    assert_eq!(code, 2, "{out}{err}");
    assert_eq!(out, "");
    assert_eq!(
        err,
        format!("worldd: daemon startup failed at listen: {bind}: Address already in use (os error 98); is another worldd already serving here? Stop it, or pick a free port with --bind 127.0.0.1:PORT (nothing was created)\n")
    );
    assert!(!world.exists(), "quickstart created {}", world.display());
}

/// `serve` on a port another daemon holds stops before it opens or creates the store.
#[test]
fn serve_on_a_taken_port_creates_nothing() {
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let bind = holder.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let (db, root) = (dir.path().join("db"), dir.path().join("wt"));
    let (code, out, err) = worldd(
        &[
            "serve",
            "--db",
            path_str(&db),
            "--workspace-root",
            path_str(&root),
            "--bind",
            &bind,
        ],
        None,
    );
    assert_eq!((code, out.as_str()), (2, ""), "{err}");
    assert!(
        err.ends_with(&format!("worldd: daemon startup failed at listen: {bind}: Address already in use (os error 98); is another worldd already serving here? Stop it, or pick a free port with --bind 127.0.0.1:PORT (nothing was created)\n")),
        "{err}"
    );
    assert!(
        !db.exists() && !root.exists(),
        "serve created its store or root"
    );
}

/// A second `serve` on a store a daemon serves is told that, even when it asks for the port
/// that daemon holds: the store's lock is certain, a taken port only a guess.
#[test]
fn a_second_serve_on_a_served_store_and_its_port_is_told_the_store_is_served() {
    let first = Daemon::start(&[], &[]);
    let db = first.db();
    let (code, out, err) = worldd(
        &[
            "serve",
            "--db",
            path_str(&db),
            "--workspace-root",
            path_str(&first.root()),
            "--bind",
            &first.addr,
        ],
        None,
    );
    assert_eq!((code, out.as_str()), (2, ""), "{err}");
    assert!(
        err.ends_with(&format!("worldd: daemon startup failed at store-open: another worldd already serves {} (one daemon per store: it orders each episode's calls)\n", db.display())),
        "{err}"
    );
    // The first daemon still serves.
    assert_eq!(get(&first.url("/v1/health"), None).status, 200);
}

/// The daemon's store lock was a `worldd.lock` beside the store. Removed while the daemon ran
/// (as lock files are, by hand, after a crash), it let a second daemon start on the same store,
/// and per-episode ordering lives in one daemon. The lock is now held on the store's data file.
#[test]
fn a_second_serve_is_refused_when_every_lock_file_beside_the_store_was_removed() {
    let first = Daemon::start(&[], &[]);
    let db = first.db();
    for entry in std::fs::read_dir(&db).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "lock") {
            std::fs::remove_file(path).unwrap();
        }
    }
    let refusal = refused_start(
        &[
            "--db",
            path_str(&db),
            "--workspace-root",
            path_str(&first.root()),
            "--bind",
            "127.0.0.1:0",
        ],
        first.dir.path(),
    );
    assert_eq!(refusal.code, Some(2), "{}", refusal.stderr);
    assert_eq!(
        refusal.line,
        format!("worldd: daemon startup failed at store-open: another worldd already serves {} (one daemon per store: it orders each episode's calls)", db.display())
    );
    assert_eq!(get(&first.url("/v1/health"), None).status, 200);
}

#[test]
fn quickstart_print_only_prints_the_configuration_alone_on_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let world = dir.path().join("w");
    let token = store_with_credential_file(&world, "demo", "demo.session");
    let (code, out, err) = worldd(
        &[
            "quickstart",
            "--dir",
            path_str(&world),
            "--print-only",
            "--bind",
            "127.0.0.1:7999",
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    let config: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        config,
        json!({"mcpServers": {"worldd": {"type": "http", "url": "http://127.0.0.1:7999/mcp/",
               "headers": {"Authorization": format!("Bearer {token}")}}}})
    );
    assert!(
        err.contains("worldd quickstart: the MCP client configuration follows on stdout"),
        "{err}"
    );
    assert!(world.join("worktrees/demo").is_dir());
    // The worktrees are the daemon's user's alone, as serve and session new make them (they
    // followed the umask: 0755, any local user read every episode's files).
    use std::os::unix::fs::PermissionsExt;
    for made in ["worktrees", "worktrees/demo"] {
        let mode = std::fs::metadata(world.join(made))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700, "{made}: {mode:o}");
    }
}

/// The first run mints the credential at the terminal; what it reports of that goes to
/// stderr too, so `quickstart > mcp.json` holds the configuration alone on a first run as well.
#[test]
fn quickstart_on_a_first_run_still_prints_the_configuration_alone_on_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let world = dir.path().join("w");
    let captured = dir.path().join("mcp.json");
    let (code, shown) = at_terminal(
        &format!(
            "{WORLDD} quickstart --dir {} --print-only --bind 127.0.0.1:7999 > {}",
            world.display(),
            captured.display()
        ),
        b"y\n",
    );
    assert_eq!(code, 0, "{shown}");
    assert!(
        shown.contains("Confirm mint for episode demo (8 grant(s), expiry +86400s)"),
        "{shown}"
    );
    assert!(
        shown.contains("minted session credential for episode demo: 8 grant(s)"),
        "{shown}"
    );
    let text = std::fs::read_to_string(&captured).unwrap();
    let config: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    let token = std::fs::read_to_string(world.join("demo.session")).unwrap();
    assert_eq!(
        config["mcpServers"]["worldd"]["headers"]["Authorization"],
        format!("Bearer {}", token.trim())
    );
}

/// A grant for a misspelled effect gives nothing (`0 tool(s)`), so it is named, with the
/// likely spelling, before the question; a grant no tool could ask for (a scope holding an
/// escape sequence) is refused, and said with the sequence escaped.
#[test]
fn a_misspelled_grant_is_named_before_the_question_and_an_impossible_one_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    drop(broker_core::store::Store::create(&db).unwrap());
    let out = dir.path().join("typo.session");
    let (code, shown) = mint_at_terminal(
        &db,
        &format!(
            "--episode typo --grant Workspace.Raed=worktree:5 --grant Workspace.Write=worktre:5 --out {}",
            out.display()
        ),
    );
    assert_eq!(code, 0, "{shown}");
    let warned = shown
        .find("warning: --grant Workspace.Raed=worktree:5: no shipped tool uses the effect Workspace.Raed; did you mean Workspace.Read?")
        .unwrap_or_else(|| panic!("{shown}"));
    assert!(
        shown.contains("no shipped tool uses the scope worktre; did you mean worktree?"),
        "{shown}"
    );
    assert!(warned < shown.find("Confirm mint").unwrap(), "{shown}");
    let (code, _, err) = mint_one_grant(&db, "typo", "Workspace.Read=work\u{1b}]0;x\u{7}tree:1");
    assert_eq!(code, 1);
    assert_eq!(err, "worldd: invalid --grant \"Workspace.Read=work\\u{1b}]0;x\\u{7}tree:1\": the scope \"work\\u{1b}]0;x\\u{7}tree\" holds '\\u{1b}': a scope starts with a letter or digit, then letters, digits and . _ / - (at most 128 bytes), e.g. worktree (the episode's worktree; a scope is no filesystem path)\n");
}

/// The session credentials listed in `db`, by their lines.
fn listed(db: &Path) -> String {
    let (code, out, err) = worldd(&["session", "list", "--db", path_str(db)], None);
    assert_eq!(code, 0, "{err}");
    out
}

/// A new store with no session (the tempdir holding it, its path) and where worktrees go.
fn an_empty_store() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    drop(broker_core::store::Store::create(&db).unwrap());
    let root = dir.path().join("worktrees");
    (dir, db, root)
}

/// `session new ep … ARGS` at a terminal, answering `y`.
fn new_at_terminal(db: &Path, root: &Path, args: &str) -> (i32, String) {
    at_terminal(
        &format!(
            "{WORLDD} session new ep --db {} --workspace-root {} {args}",
            db.display(),
            root.display()
        ),
        b"y\n",
    )
}

/// `text` without its SGR colour sequences (`ESC [ … m`).
fn plain(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("\x1b[") {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        rest = rest.find('m').map_or("", |m| &rest[m + 1..]);
    }
    out.push_str(rest);
    out
}

/// A budget or `--ttl` no session record can hold (beyond 2^53−1, or an expiry centuries away)
/// is refused by name before the question, exit 1, at `session mint`, `session new` and
/// `quickstart` alike: it used to be asked, answered `y`, and then called a damaged record
/// (exit 2), or for a long TTL minted to expire in the year 285200673.
#[test]
fn a_budget_or_ttl_no_record_can_hold_is_refused_before_the_question_not_called_damaged() {
    let (dir, db, root) = an_empty_store();
    let too_big = "the budget is at most 9007199254740991 (2^53−1, the largest integer a session record stores exactly)";
    let new = |args: &str| new_at_terminal(&db, &root, args);
    for (shown, said) in [
        (
            mint_at_terminal(&db, "--episode huge2 --grant Workspace.Read=worktree:9007199254740992"),
            format!("worldd: invalid --grant \"Workspace.Read=worktree:9007199254740992\": {too_big}"),
        ),
        (
            mint_at_terminal(&db, "--episode huge2 --grant Workspace.Read=worktree:99999999999999999999999"),
            format!("worldd: invalid --grant \"Workspace.Read=worktree:99999999999999999999999\": {too_big}"),
        ),
        (
            mint_at_terminal(&db, "--episode huge2 --grant Workspace.Read=worktree:1 --ttl 9007199254740991"),
            "worldd: --ttl 9007199254740991 is too long: at most 315360000 seconds (ten years)".to_owned(),
        ),
        (
            mint_at_terminal(&db, "--episode huge2 --grant Workspace.Read=worktree:1 --ttl 9000000000000000"),
            "worldd: --ttl 9000000000000000 is too long: at most 315360000 seconds (ten years)".to_owned(),
        ),
        (
            new("--grant Workspace.Read=worktree:9007199254740992"),
            format!("worldd: invalid --grant \"Workspace.Read=worktree:9007199254740992\": {too_big}"),
        ),
        (
            new("--preset se-tools --budget 9007199254740992"),
            format!("error: invalid value '9007199254740992' for '--budget <BUDGET>': {too_big}"),
        ),
        (
            new("--preset se-tools --ttl 315360001"),
            "worldd: --ttl 315360001 is too long: at most 315360000 seconds (ten years)".to_owned(),
        ),
    ] {
        let (code, shown) = shown;
        // clap colours its own refusals at a terminal.
        let shown = plain(&shown);
        assert_eq!(code, 1, "{shown}");
        assert!(shown.contains(&said), "{shown}");
        assert!(!shown.contains("Confirm mint"), "asked first: {shown}");
        assert!(!shown.contains("damaged"), "{shown}");
    }
    assert!(!root.join("ep").exists(), "a worktree was made");
    assert_eq!(
        listed(&db),
        "0 session credential(s)\n",
        "something was minted"
    );

    let (code, _, err) = worldd(
        &[
            "quickstart",
            "--dir",
            path_str(&dir.path().join("qs")),
            "--budget",
            "9007199254740992",
            "--print-only",
        ],
        None,
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains(too_big), "{err}");
    assert!(
        !dir.path().join("qs").exists(),
        "quickstart made its directory"
    );

    // The bounds themselves are minted.
    let (code, shown) = mint_at_terminal(
        &db,
        "--episode edge --grant Workspace.Read=worktree:9007199254740991 --ttl 315360000",
    );
    assert_eq!(code, 0, "{shown}");
    assert!(
        shown.contains("Confirm mint for episode edge (1 grant(s), expiry +315360000s)"),
        "{shown}"
    );
    assert!(listed(&db).contains("Workspace.Read=worktree:9007199254740991"));
}

/// Two `--grant`s of one effect and scope are refused before the question, naming both: minted,
/// the broker took the first that allowed a call while `/v1/budget` listed both, so five reads
/// under `worktree:1` and `worktree:4` reported `budgetAfter` 0, 2, 1, 0 and then a denial.
/// `session new` still lets a `--grant` replace a preset grant.
#[test]
fn two_grants_of_one_effect_and_scope_are_refused_before_the_question() {
    let (_dir, db, root) = an_empty_store();
    let said = "worldd: --grant Workspace.Read=worktree:1 and --grant Workspace.Read=worktree:4 both grant Workspace.Read at scope worktree: give each effect and scope once";
    let new = |args: &str| new_at_terminal(&db, &root, args);
    for (code, shown) in [
        mint_at_terminal(
            &db,
            "--episode dup --grant Workspace.Read=worktree:1 --grant Workspace.Write=worktree:2 --grant Workspace.Read=worktree:4",
        ),
        mint_at_terminal(
            &db,
            "--operator --episode dup --grant Workspace.Read=worktree:1 --grant Workspace.Read=worktree:4",
        ),
        new("--preset se-tools --grant Workspace.Read=worktree:1 --grant Workspace.Read=worktree:4"),
    ] {
        assert_eq!(code, 1, "{shown}");
        assert!(shown.contains(said), "{shown}");
        assert!(!shown.contains("Confirm mint"), "asked first: {shown}");
    }
    assert!(!root.join("ep").exists(), "a worktree was made");
    assert_eq!(
        listed(&db),
        "0 session credential(s)\n",
        "something was minted"
    );

    // Another scope is another grant; a --grant replaces the preset's grant of its effect.
    let (code, shown) = mint_at_terminal(
        &db,
        "--episode two --grant Workspace.Read=worktree:1 --grant Workspace.Read=log:4",
    );
    assert_eq!(code, 0, "{shown}");
    let (code, shown) = new("--preset se-tools --grant Workspace.Read=worktree:7");
    assert_eq!(code, 0, "{shown}");
    assert!(shown.contains("(8 grant(s),"), "{shown}");
    let list = listed(&db);
    assert!(list.contains("Workspace.Read=worktree:7"), "{list}");
    assert!(!list.contains("Workspace.Read=worktree:50"), "{list}");
}

/// `session new` asks before it makes anything: killed at its prompt (as an interrupt or a
/// closed terminal would end it; SIGKILL, which no handler can catch), it leaves no worktree
/// and no temporary credential file, and the same command then runs.
#[test]
fn session_new_killed_at_its_prompt_leaves_nothing_and_runs_again() {
    let (dir, db, root) = an_empty_store();
    let out = dir.path().join("ep.session");
    let cmd = format!(
        "{WORLDD} session new ep --preset se-tools --db {} --workspace-root {} --out {}",
        db.display(),
        root.display(),
        out.display()
    );
    let (mut script, _asked) = asking_at_terminal(&cmd);
    let pid = worldd_pid(path_str(&out));
    let killed = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    drop(script.stdin.take());
    script.wait().unwrap();
    assert!(!root.join("ep").exists(), "a worktree was left behind");
    let left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains("ep.session"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    let (code, shown) = at_terminal(&cmd, b"y\n");
    assert_eq!(code, 0, "{shown}");
    assert!(shown.contains("worldd session new: worktree"), "{shown}");
    assert!(root.join("ep").is_dir());
    assert!(out.is_file());
}

#[test]
fn completions_man_pages_and_examples_in_every_verbs_help() {
    let (code, out, _) = worldd(&["completions", "bash"], None);
    assert_eq!(code, 0);
    assert!(
        out.contains("_worldd()") && out.contains("quickstart"),
        "{out}"
    );
    let (code, out, _) = worldd(&["completions", "zsh"], None);
    assert_eq!(code, 0);
    assert!(out.starts_with("#compdef worldd"), "{out}");
    let (code, out, _) = worldd(&["man"], None);
    assert_eq!(code, 0);
    assert!(out.contains(".TH worldd 1"), "{out}");
    let dir = tempfile::tempdir().unwrap();
    let (code, _, err) = worldd(&["man", "--out", path_str(dir.path())], None);
    assert_eq!(code, 0, "{err}");
    for page in [
        "worldd.1",
        "worldd-serve.1",
        "worldd-session-mint.1",
        "worldd-call.1",
    ] {
        assert!(dir.path().join(page).is_file(), "{page}");
    }
    // Every verb of the clap tree (a leaf: `session mint`, not `session`), so that a verb added
    // later is held to the same.
    fn leaves(cmd: &clap::Command, above: &str, into: &mut Vec<String>) {
        for sub in cmd.get_subcommands().filter(|c| c.get_name() != "help") {
            let name = format!("{above}{}", sub.get_name());
            if sub.has_subcommands() {
                leaves(sub, &format!("{name} "), into);
            } else {
                into.push(name);
            }
        }
    }
    let mut verbs = Vec::new();
    leaves(&worldd::cli::command_line(), "", &mut verbs);
    assert!(verbs.len() > 20, "{verbs:?}");
    let page = std::fs::read_to_string(repo_root().join("docs/cli.md")).unwrap();
    for verb in &verbs {
        assert!(
            page.contains(&format!("`{verb}`")),
            "docs/cli.md does not name the verb `{verb}`"
        );
        let mut args: Vec<&str> = verb.split(' ').collect();
        args.push("--help");
        let (code, out, _) = worldd(&args, None);
        assert_eq!(code, 0, "{verb}");
        assert!(
            out.contains("\nExamples:\n  worldd "),
            "{verb} --help has no examples:\n{out}"
        );
    }
}

/// `worldd handlers` from `cwd` with only the git plugin, and no global or system git config.
fn git_handlers_config(cwd: &Path, plugins: &Path) -> String {
    let out = Command::new(WORLDD)
        .args(["handlers", "--plugin-dir"])
        .arg(plugins)
        .current_dir(cwd)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .find_map(|l| l.strip_prefix("  config "))
        .unwrap_or_else(|| panic!("no config line in {text}"))
        .to_owned()
}

/// The daemon fills in no plugin's settings: the git plugin takes its default author from git's
/// configuration itself when it starts (`e2e_git_registry.rs` shows it does), so `worldd
/// handlers` shows the operator's table as given, identity or not.
#[test]
fn handlers_shows_the_git_table_as_given_whatever_identity_git_config_has() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = plugin_dir_with(dir.path(), &["worldd_git"]);
    let repo = dir.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    let git = |args: &[&str]| {
        let ok = Command::new("git")
            .args(args)
            .current_dir(&repo)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .status()
            .unwrap()
            .success();
        assert!(ok, "git {args:?}");
    };
    git(&["init", "-q"]);
    assert_eq!(git_handlers_config(&repo, &plugins), "{}");
    git(&["config", "user.name", "Ada Lovelace"]);
    git(&["config", "user.email", "ada@example.com"]);
    assert_eq!(git_handlers_config(&repo, &plugins), "{}");
}

#[test]
fn the_example_config_serves_as_documented_for_a_normal_user() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/world.example.toml");
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path().join("project");
    std::fs::create_dir_all(&cwd).unwrap();
    let plugins = plugin_dir_with(
        dir.path(),
        &["worldd_workspace", "worldd_git", "worldd_registry"],
    );
    let out = Command::new(WORLDD)
        .arg("handlers")
        .arg("--config")
        .arg(&example)
        .arg("--plugin-dir")
        .arg(&plugins)
        .current_dir(&cwd)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(!text.contains("problem"), "{text}");
    let mut cmd = Command::new(WORLDD);
    cmd.arg("serve")
        .arg("--config")
        .arg(&example)
        .args(["--bind", "127.0.0.1:0", "--plugin-dir"])
        .arg(&plugins)
        .current_dir(&cwd)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let d = Daemon::spawn(dir, cmd);
    let rx = d.log_lines();
    // The file's author starts the git plugin; the store is where the file says.
    expect_line(&rx, &["loaded plugin plugin=git"]);
    assert!(cwd.join(".world/db/data.mdb").is_file());
    assert!(cwd.join(".world/db/plugin-state/git").is_dir());
    assert_eq!(get(&d.url("/v1/health"), None).status, 200);
}

#[test]
fn handlers_reports_exactly_what_stops_serve() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = plugin_dir_with(dir.path(), &["worldd_workspace"]);
    let lib = plugins.join(plugin_library("worldd_workspace").file_name().unwrap());
    let known = "known: allowHardLinks, denyWrite, maxReadBytes, maxWriteBytes";
    for (args, problem) in [
        (
            vec!["--plugin-config", "workspace.nope=1"],
            format!("[plugins.workspace]: unknown config key \"nope\" ({known})"),
        ),
        (
            vec!["--plugin-config", "workspace.maxReadBytes=many"],
            "[plugins.workspace]: config key \"maxReadBytes\" must be of type integer".to_owned(),
        ),
        (
            vec!["--plugin-config", "workspace.maxReadBytes=-1"],
            "[plugins.workspace]: config key \"maxReadBytes\" must be at least 0".to_owned(),
        ),
        (
            vec!["--plugin-config", "workspace.maxWriteBytes=1e12"],
            "[plugins.workspace]: config key \"maxWriteBytes\" must be of type integer".to_owned(),
        ),
        (
            vec!["--plugin-config", "workspace.maxReadBytes=2000000"],
            "[plugins.workspace]: config key \"maxReadBytes\" must be at most 1048576".to_owned(),
        ),
        // The daemon's own tables take sizes with units; a plugin's keys, what its schema says.
        (
            vec!["--plugin-config", "workspace.maxWriteBytes=8MiB"],
            "[plugins.workspace]: config key \"maxWriteBytes\" must be of type integer (a plugin's keys take plain numbers, not units: write 8388608)".to_owned(),
        ),
    ] {
        let (code, out, err) = worldd(
            &[&["handlers", "--plugin-dir", path_str(&plugins)], &args[..]].concat(),
            None,
        );
        assert_eq!(code, 0, "{err}");
        assert!(out.contains(&format!("  problem: {problem}\n")), "{out}");
        // `serve` stops on the same check, with the same words.
        let db = dir.path().join("db");
        let (code, _, err) = worldd(
            &[
                &[
                    "serve",
                    "--db",
                    path_str(&db),
                    "--workspace-root",
                    path_str(&dir.path().join("wt")),
                    "--bind",
                    "127.0.0.1:0",
                    "--plugin-dir",
                    path_str(&plugins),
                ],
                &args[..],
            ]
            .concat(),
            None,
        );
        assert_eq!(code, 2, "{err}");
        assert_eq!(
            err.lines().last(),
            Some(
                format!(
                    "worldd: daemon startup failed at plugins: plugin {}: {problem}",
                    lib.display()
                )
                .as_str()
            ),
            "{err}"
        );
    }
    // A --handler name no plugin carries: listed last by `handlers`, fatal to `serve`.
    let (code, out, _) = worldd(
        &[
            "handlers",
            "--plugin-dir",
            path_str(&plugins),
            "--handler",
            "git",
        ],
        None,
    );
    assert_eq!(code, 0);
    assert!(
        out.contains("\nproblem: --handler git: no plugin of that name here (found: workspace)\n"),
        "{out}"
    );
    // A plugin table whose name is a letter or two from a plugin's: its plugin would run on
    // its defaults unnoticed, so `serve` stops; a table for a plugin not here is said.
    let config = dir.path().join("world.toml");
    std::fs::write(
        &config,
        "[plugins.workspce]\ndenyWrite = [\"*.lock\"]\n\n[plugins.ailang]\nbin = \"/usr/bin/ailang\"\n",
    )
    .unwrap();
    let typo = "[plugins.workspce] (or --plugin-config workspce.KEY=…) names no plugin here; did you mean [plugins.workspace]? (found: workspace)";
    let absent = "[plugins.ailang] names no plugin here (found: workspace): its keys are ignored";
    let (code, out, _) = worldd(
        &[
            "handlers",
            "--plugin-dir",
            path_str(&plugins),
            "--config",
            path_str(&config),
        ],
        None,
    );
    assert_eq!(code, 0);
    assert!(out.contains(&format!("\nproblem: {typo}\n")), "{out}");
    assert!(out.contains(&format!("\nnote: {absent}\n")), "{out}");
    // `serve` of this config, on a store and root of its own (`n`).
    let serve_args = |n: &str| -> Vec<String> {
        [
            "serve",
            "--db",
            path_str(&dir.path().join(format!("db{n}"))),
            "--workspace-root",
            path_str(&dir.path().join(format!("wt{n}"))),
            "--bind",
            "127.0.0.1:0",
            "--plugin-dir",
            path_str(&plugins),
            "--config",
            path_str(&config),
        ]
        .map(str::to_owned)
        .to_vec()
    };
    let args = serve_args("2");
    let (code, _, err) = worldd(&args.iter().map(String::as_str).collect::<Vec<_>>(), None);
    assert_eq!(code, 2, "{err}");
    assert_eq!(
        err.lines().last().unwrap(),
        format!(
            "worldd: daemon startup failed at plugins: plugin {}: {typo}",
            plugins.display()
        )
    );
    // The absent plugin's table alone is warned of, and the daemon serves.
    std::fs::write(&config, "[plugins.ailang]\nbin = \"/usr/bin/ailang\"\n").unwrap();
    let mut cmd = Command::new(WORLDD);
    cmd.args(serve_args("3"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let d = Daemon::spawn(tempfile::tempdir().unwrap(), cmd);
    expect_line(&d.log_lines(), &[absent]);
    assert_eq!(get(&d.url("/v1/health"), None).status, 200);
}

/// What the operator types as a ref, a task id or a semantic id names that one resource:
/// `object get ../../v1/budget?episode=ep` printed the budget as if it were the object.
#[test]
fn a_ref_typed_as_a_path_reaches_no_other_route() {
    let d = Daemon::start(&["worldd_workspace"], &[]);
    let token = d.operator_session("ops", &[]);
    let session = d.session_file("ops", &token);
    let addr = d.addr.clone();
    for args in [
        &["object", "get", "../../v1/budget?episode=ops"][..],
        &["object", "get", "../../v1/head"],
        &["object", "find", "../../../v1/head"],
        &["calls", "get", "x/../../head"],
    ] {
        let (code, out, err) = worldd(
            &[args, &["--addr", &addr, "--session", path_str(&session)]].concat(),
            None,
        );
        assert_eq!((code, out.as_str()), (1, ""), "{args:?}: {err}");
        assert!(!err.contains("sha256:"), "{args:?}: {err}");
    }
}

/// A start that fails once it has made the store or the workspace root takes them away
/// again (a mistyped `--handler` left a new store with its genesis entry behind); a store
/// that was there before is left as it was.
#[test]
fn a_start_that_fails_leaves_no_store_or_workspace_root_it_made() {
    let dir = tempfile::tempdir().unwrap();
    let (db, root) = (dir.path().join("db"), dir.path().join("wt"));
    // A plugin directory of its own: what `serve` finds by default depends on the build.
    let plugins = plugin_dir_with(dir.path(), &["worldd_workspace"]);
    let serve = |extra: &[&str]| {
        worldd(
            &[
                &[
                    "serve",
                    "--db",
                    path_str(&db),
                    "--workspace-root",
                    path_str(&root),
                    "--bind",
                    "127.0.0.1:0",
                    "--plugin-dir",
                    path_str(&plugins),
                ][..],
                extra,
            ]
            .concat(),
            None,
        )
    };
    for extra in [
        &["--handler", "nope"][..],
        &["--plugin-config", "workspace.nope=1"],
    ] {
        let (code, _, err) = serve(extra);
        assert_eq!(code, 2, "{extra:?}: {err}");
        assert!(err.contains("daemon startup failed at plugins"), "{err}");
        assert!(
            !db.exists() && !root.exists(),
            "{extra:?} left {:?}",
            std::fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect::<Vec<_>>()
        );
    }
    // The store inside the workspace root: refused, and the root it made is gone.
    let inside = root.join("db");
    let (code, _, err) = worldd(
        &[
            "serve",
            "--db",
            path_str(&inside),
            "--workspace-root",
            path_str(&root),
            "--bind",
            "127.0.0.1:0",
        ],
        None,
    );
    assert_eq!(code, 2, "{err}");
    assert!(!root.exists(), "{err}");
    // A store that existed stays.
    drop(broker_core::store::Store::create(&db).unwrap());
    let (code, _, err) = serve(&["--handler", "nope"]);
    assert_eq!(code, 2, "{err}");
    assert!(db.join("data.mdb").is_file());
    let (code, _, err) = worldd(&["doctor", "--db", path_str(&db)], None);
    assert_eq!(code, 0, "{err}");
}

/// A credential the daemon refuses is said with what to do about it, on REST and MCP verbs.
#[test]
fn a_revoked_credential_is_refused_with_what_to_do() {
    let d = Daemon::start(&["worldd_workspace"], &[]);
    let token = d.session("gone", &["Workspace.Read=worktree:5"]);
    let session = d.session_file("gone", &token);
    let (code, _, err) = worldd(
        &[
            "session",
            "revoke",
            "--db",
            path_str(&d.db()),
            "--episode",
            "gone",
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    let hint = format!("(the daemon at http://{}, from --addr, does not know this credential: revoked, or minted for another store; if your daemon listens elsewhere, give its address with --addr or $WORLD_ADDR; else mint a new one with worldd session mint)\n", d.addr);
    for verb in [&["head"][..], &["budget"], &["tools", "list"]] {
        let (code, _, err) = worldd(
            &[verb, &["--addr", &d.addr, "--session", path_str(&session)]].concat(),
            None,
        );
        assert_eq!(code, 1, "{verb:?}: {err}");
        assert!(
            err.contains("HTTP 401") && err.ends_with(&hint),
            "{verb:?}: {err}"
        );
    }
}

/// `handlers` starts nothing, so a config file it cannot read is its own failure (exit 1),
/// not a daemon's start-up failure (exit 2) as `serve` says it.
#[test]
fn handlers_on_a_config_that_does_not_parse_fails_as_itself() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("world.toml");
    std::fs::write(&config, "[serve\n").unwrap();
    let (code, out, err) = worldd(&["handlers", "--config", path_str(&config)], None);
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    let prefix = format!("worldd: {}: ", config.display());
    assert!(err.starts_with(&prefix), "{err}");
    assert!(!err.contains("daemon startup failed"), "{err}");
}

#[test]
fn malformed_plugin_config_stops_serve_before_anything_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let (code, out, err) = worldd(
        &[
            "serve",
            "--db",
            path_str(&db),
            "--workspace-root",
            path_str(&dir.path().join("wt")),
            "--plugin-config",
            "ailang.bin",
        ],
        None,
    );
    assert_eq!((code, out.as_str()), (2, ""));
    assert_eq!(
        err.trim_end(),
        "worldd: daemon startup failed at config: --plugin-config \"ailang.bin\": no \"=\"; write NAME.KEY=VALUE, e.g. --plugin-config hello.greeting=hi"
    );
    assert!(!db.exists() && !dir.path().join("wt").exists());
    // `worldd handlers` refuses it as a usage error.
    let (code, _, err) = worldd(&["handlers", "--plugin-config", "=x"], None);
    assert_eq!(code, 1);
    assert!(
        err.contains("--plugin-config \"=x\": no \".\" between the plugin's name and the key"),
        "{err}"
    );
}

/// `worldd call --idempotency-key`: resent, the call returns its committed result and runs
/// nothing again; other arguments under the same key are refused; `calls get KEY` finds it.
#[test]
fn a_keyed_call_from_the_cli_runs_once_and_is_found_by_its_key() {
    let d = Daemon::start(&["worldd_workspace"], &[]);
    let token = d.session("ep1", &["Workspace.Write=worktree:5"]);
    let write = |content: &str| {
        cli(
            &d,
            &token,
            &[
                "call",
                "ailang-write",
                "--arg",
                "path=a.txt",
                "--arg",
                &format!("content={content}"),
                "--idempotency-key",
                "w-1",
                "--json-out",
            ],
        )
    };
    let (code, first, err) = write("one");
    assert_eq!(code, 0, "{err}");
    let (_, head, _) = cli(&d, &token, &["head"]);
    let (code, again, err) = write("one");
    assert_eq!(code, 0, "{err}");
    assert_eq!(again, first, "the committed bytes, not a second run");
    assert_eq!(
        cli(&d, &token, &["head"]).1,
        head,
        "nothing new was committed"
    );

    let (code, _, err) = write("two");
    assert_eq!(code, 1);
    assert!(
        err.contains(
            "idempotency key \"w-1\" was already used with other arguments in this episode"
        ),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(d.root().join("ep1/a.txt")).unwrap(),
        "one"
    );

    let (code, out, err) = cli(&d, &token, &["calls", "get", "w-1"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("mcp:ep1:w-1  ailang-write  committed\n"),
        "{out}"
    );
}

/// The keys `.` and `..` are valid, and `worldd call` sends them, but `worldd calls get ..`
/// refused them (a URL parser takes such a segment for a step, encoded or not), so the call
/// could not be reconciled by its key. They are now asked by the invocation id, the session's
/// episode read first. And `calls get` of another episode's invocation id said "it is safe to
/// send", advice that session cannot act on: it now says the id is not of its episode.
#[test]
fn calls_get_finds_the_keys_dot_and_dot_dot_and_does_not_call_another_episodes_id_safe_to_send() {
    let d = Daemon::start(&["worldd_workspace"], &[]);
    let token = d.session("ep1", &["Workspace.Write=worktree:5"]);
    for key in [".", ".."] {
        let args = [
            "call",
            "ailang-write",
            "--arg",
            "path=a.txt",
            "--arg",
            "content=x",
            "--idempotency-key",
            key,
        ];
        let (code, _, err) = cli(&d, &token, &args);
        assert_eq!(code, 0, "{err}");
        let (code, out, err) = cli(&d, &token, &["calls", "get", key]);
        assert_eq!(code, 0, "calls get {key}: {err}");
        assert!(
            out.starts_with(&format!("mcp:ep1:{key}  ailang-write  committed\n")),
            "{out}"
        );
    }
    // Not sent over A2A, but sent over MCP: not "safe to send", which would run it again.
    let (code, out, err) = cli(&d, &token, &["calls", "get", "--surface", "a2a", ".."]);
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert_eq!(err.lines().last(), Some("worldd: calls get: not found: a2a:ep1:.. (nothing was journaled under it over a2a), but mcp:ep1:.. was sent over mcp: do not send it over a2a, which would run it again; `worldd calls get .. --surface mcp` says how it ended"));
    // A key sent over neither surface is safe to send.
    let (code, out, err) = cli(&d, &token, &["calls", "get", "--surface", "a2a", "never"]);
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert_eq!(err.lines().last(), Some("worldd: calls get: not found: a2a:ep1:never (nothing was journaled under it in your episode, over a2a or over mcp; it is safe to send)"));

    let other = d.session("ep2", &["Workspace.Write=worktree:5"]);
    cli(
        &d,
        &other,
        &[
            "call",
            "ailang-write",
            "--arg",
            "path=b.txt",
            "--arg",
            "content=y",
            "--idempotency-key",
            "k",
        ],
    );
    for id in ["mcp:ep2:k", "mcp:ep3:never"] {
        let (code, out, err) = cli(&d, &token, &["calls", "get", id]);
        assert_eq!((code, out.as_str()), (1, ""), "{err}");
        assert!(
            err.ends_with(&format!("\nworldd: calls get: not found: {id} is not a call of your episode (ep1); another episode's calls are its own, and this answer is the same whether or not it exists\n")),
            "{err}"
        );
        // Two requests (the call, then the session's episode), one warning for the
        // credential given on the command line.
        assert_eq!(err.matches("worldd: warning:").count(), 1, "{err}");
    }
    // An operator reads every episode's calls: another episode's call it does not find was
    // said to be "not a call of your episode (ops)", as if it could not look.
    let ops = d.operator_session("ops", &["Workspace.Read=worktree:1"]);
    let (code, out, err) = cli(&d, &ops, &["calls", "get", "mcp:ep2:k"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("mcp:ep2:k  ailang-write  committed\n"),
        "{out}"
    );
    let (code, out, err) = cli(&d, &ops, &["calls", "get", "mcp:ep3:never"]);
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert!(
        err.ends_with("\nworldd: calls get: not found: mcp:ep3:never (nothing was journaled under it in episode ep3, and the daemon holds no such call: that episode may send it)\n"),
        "{err}"
    );
}

/// `--commit-body-bytes -1` used to be answered `unexpected argument '-1' found`, as if the
/// number were a stray word: a negative number after a flag that takes a value is that flag's
/// value, refused by the flag's own parser or check with what it wants, and nothing starts.
#[test]
fn a_negative_number_after_a_flag_is_its_value_refused_by_the_flags_own_check() {
    let dir = tempfile::tempdir().unwrap();
    let in_dir = |args: &[&str]| {
        let out = Command::new(WORLDD)
            .args(args)
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = in_dir(&["serve", "--commit-body-bytes", "-1"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.starts_with(
            "error: invalid value '-1' for '--commit-body-bytes <SIZE>': \"-1\" is not a size: a size cannot be negative"
        ),
        "{err}"
    );
    let (code, err) = in_dir(&[
        "serve",
        "--bind",
        "127.0.0.1:0",
        "--refusals-per-minute",
        "-1",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(
        err.trim_end(),
        "worldd: daemon startup failed at config: the refusal rate must be a finite number of refusals per minute, 0 or more (0 turns the limit off), not -1"
    );
    let (code, err) = in_dir(&[
        "session",
        "mint",
        "--episode",
        "ep",
        "--grant",
        "A.B=s:1",
        "--ttl",
        "-5",
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(err.trim_end(), "worldd: --ttl must be at least 1 second");
    // A word that is no flag is still one.
    let (code, err) = in_dir(&["serve", "--bogus"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.starts_with("error: unexpected argument '--bogus' found"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "nothing is created"
    );
}

/// The write end of a pipe whose read end is already closed: every write to it fails with a
/// broken pipe, as `worldd … | head -1` does once `head` has its line.
fn closed_pipe() -> std::fs::File {
    use std::os::fd::FromRawFd;
    let mut fds = [0i32; 2];
    // SAFETY: a fresh pipe into an array with room for both descriptors.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: both descriptors are new and owned here: the read end is closed at once, the
    // write end handed to a `File`.
    unsafe {
        libc::close(fds[0]);
        std::fs::File::from_raw_fd(fds[1])
    }
}

/// Run `worldd args` with stdin, stdout and stderr where given (stdin empty, the others piped
/// otherwise); its exit code and what stdout and stderr caught.
fn run_with(
    args: &[&str],
    stdin: Option<std::fs::File>,
    stdout: Option<std::fs::File>,
    stderr: Option<std::fs::File>,
) -> (i32, String, String) {
    let out = Command::new(WORLDD)
        .args(args)
        .stdin(stdin.map_or_else(Stdio::null, Stdio::from))
        .stdout(stdout.map_or_else(Stdio::piped, Stdio::from))
        .stderr(stderr.map_or_else(Stdio::piped, Stdio::from))
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `println!` panics when stdout takes nothing, and every verb printed with it: `worldd
/// session list | head -0` ended in `failed printing to stdout: Broken pipe` and exit 101, and
/// `> /dev/full` the same with "No space left on device". A closed pipe now ends the verb
/// quietly (exit 0, as the reader chose), any other failure to write is named (exit 1), and a
/// stderr that takes nothing leaves the exit code the verb's own.
#[test]
fn output_into_a_closed_pipe_or_a_full_disk_is_never_a_panic() {
    let d = Daemon::start(&["worldd_workspace"], &[]);
    d.session("ep1", &["Workspace.Read=worktree:5"]);
    let db = d.db();
    let plugins = d.plugin_dir();
    let full = || {
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap()
    };
    let verbs: [&[&str]; 4] = [
        &["session", "list", "--db", path_str(&db)],
        &["doctor", "--db", path_str(&db)],
        &["handlers", "--plugin-dir", path_str(&plugins)],
        &["completions", "bash"],
    ];
    // `handlers` names each library on stderr before it loads it: those lines are its own.
    let said = |err: String| -> String {
        err.lines()
            .filter(|l| !l.starts_with("worldd handlers: loading "))
            .map(|l| format!("{l}\n"))
            .collect()
    };
    for args in verbs {
        let (code, _, err) = run_with(args, None, Some(closed_pipe()), None);
        let err = said(err);
        assert_eq!((code, err.as_str()), (0, ""), "{args:?} into a closed pipe");
        let (code, _, err) = run_with(args, None, Some(full()), None);
        let err = said(err);
        assert_eq!(
            (code, err.as_str()),
            (
                1,
                "worldd: cannot write to stdout: No space left on device (os error 28)\n"
            ),
            "{args:?} into a full disk"
        );
    }
    // A credential printed where no one can read it is revoked, and said so, whatever the
    // cause: a closed pipe is no quiet ending for it.
    let (code, terminal) = mint_at_terminal(
        &db,
        "--episode ep2 --grant Workspace.Read=worktree:5 > /dev/full",
    );
    assert_eq!(code, 1, "{terminal}");
    assert!(
        terminal.contains("worldd: cannot write to stdout: No space left on device (os error 28); the credential was revoked"),
        "{terminal}"
    );
    let (code, terminal) = mint_at_terminal(
        &db,
        "--episode ep3 --grant Workspace.Read=worktree:5 | true",
    );
    assert_eq!(code, 0, "the pipeline's status is true's: {terminal}");
    assert!(
        terminal.contains(
            "worldd: cannot write to stdout: its reader has closed it; the credential was revoked"
        ),
        "{terminal}"
    );
    let (code, listed, err) = worldd(&["session", "list", "--db", path_str(&db)], None);
    assert_eq!(code, 0, "{err}");
    assert!(listed.contains("  ep1  live"), "{listed}");
    assert!(
        !listed.contains("  ep2  ") && !listed.contains("  ep3  "),
        "{listed}"
    );

    // A verb that fails, its message going nowhere: its own exit code, not a panic's 101.
    let (code, _, _) = run_with(
        &["why", "--db", path_str(&db), "99"],
        None,
        None,
        Some(full()),
    );
    let (expected, _, err) = worldd(&["why", "--db", path_str(&db), "99"], None);
    assert_ne!(expected, 101, "{err}");
    assert_eq!(code, expected);

    // The daemon's ready line into a closed pipe: it says so on stderr and serves.
    let dir = tempfile::tempdir().unwrap();
    let mut serve = Command::new(WORLDD)
        .args([
            "serve",
            "--db",
            path_str(&dir.path().join("db")),
            "--bind",
            "127.0.0.1:0",
        ])
        .args([
            "--workspace-root",
            path_str(&dir.path().join("wt")),
            "--plugin-dir",
        ])
        .arg(&plugins)
        .env("WORLDD_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::from(closed_pipe()))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = lines_of(serve.stderr.take().unwrap());
    let warned = next_line(&lines, "the ready line's warning");
    let addr = warned
        .split("serving: worldd listening on http://")
        .nth(1)
        .unwrap_or_else(|| panic!("{warned}"))
        .to_owned();
    assert!(
        warned.contains(
            " WARN could not print the ready line on stdout (its reader has closed it); serving: "
        ),
        "{warned}"
    );
    assert_eq!(get(&format!("http://{addr}/v1/health"), None).status, 200);
    let _ = serve.kill();
    let _ = serve.wait();
}

/// A store or workspace root that names a file was refused as `store I/O error: File exists
/// (os error 17)`, which names neither the path nor the mistake.
#[test]
fn a_store_or_workspace_root_that_names_a_file_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let f = path_str(&file);
    let serve = |extra: &[&str]| {
        let mut args = vec!["serve", "--bind", "127.0.0.1:0"];
        args.extend_from_slice(extra);
        worldd(&args, None)
    };
    let db = dir.path().join("db");
    let (code, _, err) = serve(&["--db", f]);
    assert_eq!(code, 2, "{err}");
    assert!(err.ends_with(&format!("worldd: daemon startup failed at store-open: world store {f} is not a directory (a store is a directory holding data.mdb and lock.mdb)\n")), "{err}");
    let (code, _, err) = serve(&["--db", path_str(&db), "--workspace-root", f]);
    assert_eq!(code, 2, "{err}");
    assert!(err.ends_with(&format!("worldd: daemon startup failed at config: workspace root {f}: it exists and is not a directory\n")), "{err}");
    assert!(!db.exists(), "the store was created");
    assert_eq!(std::fs::read(&file).unwrap(), b"x");
}

/// A file's size says nothing of a device or a pipe: `--session /dev/zero`, `--json @/dev/zero`,
/// `worldd why - < /dev/zero`, `--config /dev/zero` and `publish /dev/zero` read until memory ran
/// out (under a 2 GB address-space limit, `out of memory`; without one, the machine's memory).
/// Each is now read to a bound and refused past it.
#[test]
fn endless_inputs_are_read_to_a_bound_not_until_memory_runs_out() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let zero = || std::fs::File::open("/dev/zero").unwrap();
    let run = |args: &[&str]| {
        let (code, _, err) = run_with(args, Some(zero()), None, None);
        (code, err.lines().last().unwrap_or("").to_owned())
    };
    let session = "0".repeat(64);
    let cases: [(&[&str], i32, &str); 5] = [
        (
            &["tools", "list", "--session", "/dev/zero"],
            1,
            "worldd: session file /dev/zero is larger than 256 bytes",
        ),
        (
            &[
                "call",
                "ailang-read",
                "--session",
                &session,
                "--json",
                "@/dev/zero",
            ],
            1,
            "worldd: /dev/zero is larger than 67108864 bytes",
        ),
        (
            &["call", "ailang-read", "--session", &session, "--json", "-"],
            1,
            "worldd: stdin is larger than 67108864 bytes",
        ),
        (
            &["why", "--db", path_str(&db), "-"],
            1,
            "worldd: stdin is larger than 67108864 bytes",
        ),
        (
            &["serve", "--config", "/dev/zero", "--bind", "127.0.0.1:0"],
            2,
            "worldd: daemon startup failed at config: /dev/zero is larger than 1048576 bytes",
        ),
    ];
    for (args, code, line) in cases {
        assert_eq!(run(args), (code, line.to_owned()), "{args:?}");
    }
    assert!(!db.exists(), "a refused read created the store");
}

/// A library whose file name is not UTF-8 is loaded like any other (it was skipped without a
/// word, and its tools were then "no handler" with nothing to say why).
#[test]
fn a_plugin_library_whose_file_name_is_not_utf8_is_loaded_not_skipped() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    let name = std::ffi::OsStr::from_bytes(b"libworldd_\xffworkspace.so");
    std::fs::copy(plugin_library("worldd_workspace"), plugins.join(name)).unwrap();
    let (code, out, err) = worldd(&["handlers", "--plugin-dir", path_str(&plugins)], None);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\nworkspace 0.1.0 (abi "), "{out}");
    assert!(out.contains("libworldd_\u{fffd}workspace.so"), "{out}");
    assert!(
        out.contains("1 plugin(s), 0 library(ies) not loadable"),
        "{out}"
    );
}

/// A verb run in a second terminal in another directory found no `.world/db` and said only
/// `world store .world/db does not exist`; the newcomer then ran `worldd serve`, which the
/// running daemon's port refused. The refusal names the absolute path it looked in and what
/// to do, for every verb that refuses a missing store.
#[test]
fn a_verb_run_in_another_directory_than_the_daemons_names_the_store_it_looked_for() {
    let dir = tempfile::tempdir().unwrap();
    let here = dir.path().canonicalize().unwrap();
    let said = format!(
        "worldd: world store {}/.world/db does not exist; refusing to create one: run this in the directory the daemon was started in, or pass --db with the daemon's store (worldd serve creates a store, for a new world only)\n",
        here.display()
    );
    for args in [
        &[
            "session",
            "new",
            "demo",
            "--preset",
            "se-tools",
            "--out",
            "demo.session",
        ][..],
        &["session", "list"],
        &["doctor"],
        &["usage"],
    ] {
        let (code, out, err) = worldd_in(&here, &[], args);
        assert_eq!(
            (code, out.as_str(), err.as_str()),
            (1, "", said.as_str()),
            "{args:?}"
        );
    }
    assert!(!here.join(".world").exists());
}

/// A credential minted for an episode whose worktree does not exist under the workspace root
/// had every call refused, and nothing said so at the mint; `session new` with another store's
/// `--db` but the default `--workspace-root` made the worktree under this directory, not the
/// daemon's. Both are said before the question.
#[test]
fn a_mint_for_an_episode_with_no_worktree_is_warned_before_the_question() {
    let (_dir, db, root) = an_empty_store();
    std::fs::create_dir_all(&root).unwrap();
    let (code, shown) = mint_at_terminal(
        &db,
        &format!(
            "--episode nosuch --grant Workspace.Read=worktree:1 --workspace-root {}",
            root.display()
        ),
    );
    assert_eq!(code, 0, "{shown}");
    let warned = shown
        .find(&format!(
            "worldd session: warning: episode nosuch has no worktree {}/nosuch: every call of this credential is refused until it exists; `worldd session new nosuch` creates one, or pass --workspace-root with the daemon's root if it serves another",
            root.display()
        ))
        .unwrap_or_else(|| panic!("{shown}"));
    assert!(warned < shown.find("Confirm mint").unwrap(), "{shown}");
    // The default workspace root, with another store: said, with where the worktree goes.
    let cwd = tempfile::tempdir().unwrap();
    let here = cwd.path().canonicalize().unwrap();
    let (code, shown) = at_terminal(
        &format!(
            "cd {} && {WORLDD} session new ep --db {} --preset se-tools",
            here.display(),
            db.display()
        ),
        b"n\n",
    );
    assert_eq!(code, 1, "{shown}");
    let warned = shown
        .find(&format!(
            "worldd session: warning: the worktree goes to {}/.world/worktrees/ep (the default --workspace-root, under this directory) while the store is {}: if the daemon serves another workspace root, answer n and pass --workspace-root with it",
            here.display(),
            db.display()
        ))
        .unwrap_or_else(|| panic!("{shown}"));
    assert!(warned < shown.find("Confirm mint").unwrap(), "{shown}");
    assert!(!here.join(".world").exists());
}

/// A worktree that is a symbolic link serves no call (no link may redirect one), but the operator
/// was told three different things: every call said the worktree "does not exist: an operator
/// creates it" (`ls` showed it there), `session new` refused it as existing, and `session mint`
/// warned of nothing. Each now names the link.
#[test]
fn a_worktree_that_is_a_symlink_is_named_as_one_by_calls_session_new_and_mint() {
    let d = Daemon::start(&["worldd_workspace"], &[]);
    let elsewhere = d.dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, d.root().join("linked")).unwrap();
    let token = d.session_without_worktree("linked", &["Workspace.Read=worktree:5"]);
    let link = "episode linked's worktree is a symbolic link: a worktree must be a directory in the workspace root itself, which no link can redirect (an operator puts the directory linked there in place of the link)";
    let v = get(&d.url("/v1/handlers"), Some(&token)).json();
    assert_eq!(
        v["tools"],
        json!([{"name": "ailang-read", "effects": ["Workspace.Read"], "canRun": false,
                "reason": format!("no usable worktree for this episode: {link}")}])
    );
    let a = mcp(
        &d,
        &token,
        "tools/call",
        json!({"name": "ailang-read", "arguments": {"path": "a.txt"}}),
    );
    assert_eq!(a.json()["error"]["message"], "host callback failed");
    d.wait_for_log(&format!("mcp tools/call: host callback failed: {link}"));

    let (db, root) = (d.db(), d.root());
    let (code, shown) = at_terminal(
        &format!(
            "{WORLDD} session new linked --db {} --workspace-root {} --preset se-tools",
            db.display(),
            root.display()
        ),
        b"y\n",
    );
    assert_eq!(code, 1, "{shown}");
    assert!(
        shown.contains(&format!(
            "worldd: worktree {}/linked is a symbolic link, and a worktree must be a directory in the workspace root itself (a daemon refuses every call in a linked one); remove the link first, or put the directory it names there in its place and run worldd session mint --episode linked --grant EFFECT=SCOPE:BUDGET",
            root.display()
        )),
        "{shown}"
    );
    let (code, shown) = mint_at_terminal(
        &db,
        &format!(
            "--episode linked --grant Workspace.Read=worktree:1 --workspace-root {}",
            root.display()
        ),
    );
    assert_eq!(code, 0, "{shown}");
    let warned = shown
        .find(&format!(
            "worldd session: warning: episode linked's worktree {}/linked is a symbolic link: every call of this credential is refused while it is one (a worktree must be a directory in the workspace root itself, which no link can redirect); put the directory there in place of the link",
            root.display()
        ))
        .unwrap_or_else(|| panic!("{shown}"));
    assert!(warned < shown.find("Confirm mint").unwrap(), "{shown}");
}

/// What a terminal showed before the mint's question, line by line, without the echo of what
/// was typed into it (`script` may echo it before anything is printed).
fn said_before_the_question(shown: &str, typed: &str) -> Vec<String> {
    let at = shown
        .find("Confirm mint")
        .unwrap_or_else(|| panic!("no question: {shown}"));
    shown[..at]
        .lines()
        .map(|l| l.trim_end_matches('\r'))
        .filter(|l| !l.is_empty() && *l != typed)
        .map(str::to_owned)
        .collect()
}

/// `session mint --grant Hello.Greet=any:10` for an episode with no worktree warned that every
/// call of the credential is refused until the worktree exists; but a grant of scope `any`
/// needs no worktree, and its calls succeed. Only a `worktree` grant is warned of, at `mint`
/// and, for where the worktree goes, at `session new`.
#[test]
fn a_mint_whose_grants_need_no_worktree_warns_of_none() {
    let (_dir, db, root) = an_empty_store();
    std::fs::create_dir_all(&root).unwrap();
    let (code, shown) = mint_at_terminal(
        &db,
        &format!(
            "--episode demo --grant Hello.Greet=any:10 --workspace-root {}",
            root.display()
        ),
    );
    assert_eq!(code, 0, "{shown}");
    assert_eq!(
        said_before_the_question(&shown, "y"),
        Vec::<String>::new(),
        "{shown}"
    );
    // One worktree grant among them: warned, as before.
    let (code, shown) = mint_at_terminal(
        &db,
        &format!(
            "--episode demo --grant Hello.Greet=any:10 --grant Workspace.Read=worktree:1 --workspace-root {}",
            root.display()
        ),
    );
    assert_eq!(code, 0, "{shown}");
    assert_eq!(
        said_before_the_question(&shown, "y"),
        [format!(
            "worldd session: warning: episode demo has no worktree {}/demo: every call of this credential is refused until it exists; `worldd session new demo` creates one, or pass --workspace-root with the daemon's root if it serves another",
            root.display()
        )],
        "{shown}"
    );
    // `session new` with another store and the default root: where the worktree goes matters
    // to no grant here, so it asks at once.
    let cwd = tempfile::tempdir().unwrap();
    let here = cwd.path().canonicalize().unwrap();
    let (code, shown) = at_terminal(
        &format!(
            "cd {} && {WORLDD} session new ep --db {} --grant Hello.Greet=any:10",
            here.display(),
            db.display()
        ),
        b"n\n",
    );
    assert_eq!(code, 1, "{shown}");
    assert_eq!(
        said_before_the_question(&shown, "n"),
        Vec::<String>::new(),
        "{shown}"
    );
    assert!(!here.join(".world").exists());
}

/// A client verb sent to the default address reached another daemon there, and its refusal
/// of the credential did not say which daemon was asked: the address, and where it came from
/// (`--addr`, `$WORLD_ADDR`, the default), are named; a bad `$WORLD_ADDR` is named as itself.
#[test]
fn a_refused_credential_names_the_daemon_asked_and_where_its_address_came_from() {
    let d = Daemon::start(&["worldd_workspace"], &[]);
    let file = d.session_file("stranger", &"ab".repeat(32));
    let here = d.dir.path();
    let addr = d.url("");
    let hint = |from: &str| {
        format!(" (the daemon at {addr}, {from}, does not know this credential: revoked, or minted for another store; if your daemon listens elsewhere, give its address with --addr or $WORLD_ADDR; else mint a new one with worldd session mint)\n")
    };
    let (code, _, err) = worldd_in(
        here,
        &[],
        &[
            "tools",
            "list",
            "--addr",
            &addr,
            "--session",
            path_str(&file),
        ],
    );
    assert_eq!(code, 1);
    assert_eq!(
        err,
        format!(
            "worldd: /mcp/ returned HTTP 401: unknown session credential{}",
            hint("from --addr")
        )
    );
    let (code, _, err) = worldd_in(
        here,
        &[("WORLD_ADDR", &addr)],
        &["head", "--session", path_str(&file)],
    );
    assert_eq!(code, 1);
    assert_eq!(
        err,
        format!(
            "worldd: /v1/head returned HTTP 401 SessionUnknown: unknown session credential{}",
            hint("from $WORLD_ADDR")
        )
    );
    let (code, _, err) = worldd_in(here, &[("WORLD_ADDR", "https://x")], &["health"]);
    assert_eq!(
        (code, err.as_str()),
        (
            1,
            "worldd: $WORLD_ADDR https://x: worldd serves plain HTTP on loopback; give http://HOST:PORT\n"
        )
    );
}

/// Quickstart on another port printed no `export WORLD_ADDR=…`, so the client verbs asked the
/// default address; it prints the two exports, and warns when the configuration (a bearer
/// token) goes to a file others can read.
#[test]
fn quickstart_on_another_port_prints_the_exports_and_warns_of_a_readable_stdout_file() {
    let dir = tempfile::tempdir().unwrap();
    let here = dir.path().canonicalize().unwrap();
    let world = here.join("w");
    let db = world.join("db");
    let store = broker_core::store::Store::create(&db).unwrap();
    let token = broker_core::session::mint(
        &store,
        "demo",
        vec!["Workspace.Read=worktree:5".parse().unwrap()],
        3600,
        now(),
    )
    .unwrap()
    .token;
    drop(store);
    std::fs::write(world.join("demo.session"), format!("{token}\n")).unwrap();
    let captured = here.join("mcp.json");
    let file = std::fs::File::create(&captured).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&captured, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let out = Command::new(WORLDD)
        .args(["quickstart", "--dir", path_str(&world), "--print-only"])
        .args(["--bind", "127.0.0.1:7999"])
        .stdout(file)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "worldd quickstart: for the client verbs (worldd tools list, call, why) in another terminal:\n  export WORLD_ADDR=http://127.0.0.1:7999\n  export WORLD_SESSION={}/demo.session\n",
            world.display()
        )),
        "{err}"
    );
    assert!(
        err.contains("worldd quickstart: warning: stdout is a file others can read (mode 0644), and the configuration holds the credential: chmod 600 it, or write it with umask 077\n"),
        "{err}"
    );
    let text = std::fs::read_to_string(&captured).unwrap();
    assert!(text.contains(&format!("Bearer {token}")), "{text}");
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// A call whose effect the broker denied printed `"status": "denied"` and exited 0 with no
/// reason anywhere on the command line; the reason (`denied:budget`, what is left) is said on
/// stderr, one line per effect, stdout and the exit code unchanged.
#[test]
fn a_denied_effect_says_why_on_stderr_with_stdout_and_exit_unchanged() {
    let d = Daemon::start(&["worldd_workspace"], &[]);
    let token = d.session("spent", &["Workspace.Read=worktree:0"]);
    std::fs::write(d.root().join("spent/a.txt"), "hi\n").unwrap();
    let file = d.session_file("spent", &token);
    let (code, out, err) = cli(
        &d,
        path_str(&file),
        &["call", "ailang-read", "--arg", "path=a.txt"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"status\": \"denied\""), "{out}");
    assert_eq!(
        err,
        "worldd: effect e1 (Workspace.Read) denied: denied:budget — this grant has 0 left; nothing ran (worldd budget shows what is left)\n"
    );
}

/// `worldd call ailang_read` (an underscore for the dash) was answered `unknown tool
/// "ailang_uread"`: the escaped MCP name leaked. The id as typed is said, with the nearest of
/// the session's tools.
#[test]
fn a_misspelled_tool_id_is_said_as_typed_with_the_nearest_tool() {
    let d = Daemon::start(&["worldd_workspace"], &[]);
    let token = d.session("typo", &["Workspace.Read=worktree:5"]);
    let file = d.session_file("typo", &token);
    let (code, out, err) = cli(
        &d,
        path_str(&file),
        &["call", "ailang_read", "--arg", "path=a.txt"],
    );
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert_eq!(
        err,
        "worldd: unknown tool \"ailang_read\": this session has no tool of that id; did you mean ailang-read? (worldd tools list shows them)\n"
    );
    let (code, _, err) = cli(&d, path_str(&file), &["call", "nothing-like-it"]);
    assert_eq!(code, 1);
    assert_eq!(
        err,
        "worldd: unknown tool \"nothing-like-it\": this session has no tool of that id (worldd tools list shows them)\n"
    );
}

/// `worldd session mint --db DB --episode EPISODE --grant GRANT`, with no terminal to confirm
/// on: (exit code, stdout, stderr).
fn mint_one_grant(db: &Path, episode: &str, grant: &str) -> (i32, String, String) {
    let args = [
        "session",
        "mint",
        "--db",
        path_str(db),
        "--episode",
        episode,
    ];
    worldd(&[&args[..], &["--grant", grant]].concat(), None)
}

/// A scope written as a path was refused as if its characters were wrong; the real rule (it
/// starts with a letter or digit) is said. `--bind 7644` and `--bind :7644` get an example.
#[test]
fn a_scope_written_as_a_path_and_a_bind_of_a_port_alone_are_told_the_real_rule() {
    let (_dir, db, _root) = an_empty_store();
    let (code, _, err) = mint_one_grant(&db, "p", "Workspace.Read=/tmp:5");
    assert_eq!(code, 1);
    assert_eq!(err, "worldd: invalid --grant \"Workspace.Read=/tmp:5\": the scope \"/tmp\" starts with '/': a scope starts with a letter or digit, then letters, digits and . _ / - (at most 128 bytes), e.g. worktree (the episode's worktree; a scope is no filesystem path)\n");
    for bind in ["7644", ":7644"] {
        let dir = tempfile::tempdir().unwrap();
        let (code, _, err) = worldd_in(dir.path(), &[], &["serve", "--bind", bind]);
        assert_eq!(code, 2);
        assert_eq!(
            err,
            format!("worldd: daemon startup failed at bind-policy: --bind {bind:?} names a port alone: give HOST:PORT, e.g. 127.0.0.1:7644\n")
        );
    }
}

/// `--handler workspce` was told only what the directory holds; like a misspelled plugin
/// table, it is now told the nearest plugin's name, by `serve` and by `handlers` alike.
#[test]
fn a_misspelled_handler_is_told_the_nearest_plugin() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = plugin_dir_with(dir.path(), &["worldd_workspace"]);
    let said = "--handler workspce: no plugin of that name here (found: workspace); did you mean workspace?";
    let (code, out, err) = worldd(
        &[
            "handlers",
            "--plugin-dir",
            path_str(&plugins),
            "--handler",
            "workspce",
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&format!("\nproblem: {said}\n")), "{out}");
    let (db, root) = (dir.path().join("db"), dir.path().join("wt"));
    let flags = ["--plugin-dir", path_str(&plugins), "--handler", "workspce"];
    let r = refused_serve_on(&db, &root, &flags, dir.path());
    let err = r.stderr;
    assert_eq!(r.code, Some(2), "{err}");
    assert!(
        err.ends_with(&format!(
            "worldd: daemon startup failed at plugins: plugin {}: {said}\n",
            plugins.display()
        )),
        "{err}"
    );
}

/// Ctrl-C while `worldd call` waited for its answer ended it without a word, though the
/// request had reached the daemon and the call may still run and commit. It now says so, and
/// how to check, then dies by SIGINT as before; a call started with SIGINT ignored (a
/// background job) still ignores it.
#[test]
fn ctrl_c_during_a_call_says_the_call_may_still_run_and_how_to_check() {
    use std::io::Read;
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = format!("http://{}", listener.local_addr().unwrap());
    // Reads each request's first bytes, says so, and never answers.
    let (arrived, requests) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for mut s in listener.incoming().flatten() {
            let mut buf = [0u8; 4096];
            let n = s.read(&mut buf).unwrap_or(0);
            let _ = arrived.send(String::from_utf8_lossy(&buf[..n]).into_owned());
            held.push(s);
        }
    });
    // The call's request has reached the server: the call is in flight.
    let in_flight = || {
        let head = requests
            .recv_timeout(Duration::from_secs(60))
            .expect("the call never reached the server");
        assert!(head.starts_with("POST /mcp/"), "{head}");
    };
    let token = "ab".repeat(32);
    let start = |ignore_sigint: bool| {
        let mut cmd = Command::new(WORLDD);
        cmd.args([
            "call",
            "ailang-write",
            "--arg",
            "path=a",
            "--arg",
            "content=x",
        ])
        .args(["--idempotency-key", "w-9", "--addr", &addr])
        .env("WORLD_SESSION", &token)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        // Set either way: a suite run as a background job of a shell inherits SIGINT ignored.
        let disposition = if ignore_sigint {
            libc::SIG_IGN
        } else {
            libc::SIG_DFL
        };
        // SAFETY: only signal(2), which is async-signal-safe, between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                libc::signal(libc::SIGINT, disposition);
                Ok(())
            });
        }
        cmd.spawn().unwrap()
    };
    let child = start(false);
    in_flight();
    // SAFETY: kill(2) of the child this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGINT),
        "{:?}: {err}",
        out.status
    );
    assert!(
        err.ends_with("\nworldd: interrupted while the call was in flight: it may still run and commit; `worldd calls get w-9` says whether it landed, and resending it with the same key never runs it twice\n"),
        "{err}"
    );

    let mut child = start(true);
    in_flight();
    // SAFETY: kill(2) of the child this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        child.try_wait().unwrap().is_none(),
        "an ignored SIGINT ended the call"
    );
    child.kill().unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(!String::from_utf8_lossy(&out.stderr).contains("interrupted"));
}

/// `worldd budget` with an operator credential printed an empty table and exit 0 (an operator
/// holds no grants), and had no way to ask for an episode's spend, which `GET
/// /v1/budget?episode=` answers. `--episode EP` prints it; the empty table says why it is
/// empty; an agent's credential naming another episode is refused as the route refuses it.
#[test]
fn an_operator_reads_an_episodes_spend_with_budget_episode() {
    let d = Daemon::start(&["worldd_workspace"], &[]);
    let token = d.session("ep1", &["Workspace.Write=worktree:5"]);
    let write = [
        "call",
        "ailang-write",
        "--arg",
        "path=a",
        "--arg",
        "content=x",
    ];
    assert_eq!(cli(&d, &token, &write).0, 0);
    let ops = d.operator_session("ops", &[]);
    let (code, out, err) = cli(&d, &ops, &["budget", "--episode", "ep1"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "episode ep1\neffect                   scope           spent\nWorkspace.Write          worktree            1\n"
    );
    let (code, out, err) = cli(&d, &ops, &["budget"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("effect "), "{out}");
    assert!(
        err.contains("worldd budget: an operator credential holds no grants; --episode EP shows what an episode has spent\n"),
        "{err}"
    );
    let (code, _, err) = cli(&d, &token, &["budget", "--episode", "ops"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("only an operator credential reads another episode's budget; this credential's episode is ep1"),
        "{err}"
    );
}

/// Answering `n` at quickstart's question left the store and the demo worktree it had just
/// made behind (a second run then found a store it had not asked for). It now asks before it
/// makes anything; a store that was there before is left as it was.
#[test]
fn quickstart_declined_at_its_question_leaves_nothing_it_made_behind() {
    let dir = tempfile::tempdir().unwrap();
    let world = dir.path().join("w");
    let run = |world: &Path| {
        at_terminal(
            &format!(
                "{WORLDD} quickstart --dir {} --print-only --bind 127.0.0.1:7999",
                world.display()
            ),
            b"n\n",
        )
    };
    let (code, shown) = run(&world);
    assert_eq!(code, 1, "{shown}");
    assert!(
        shown.ends_with("[y/N] worldd: aborted (not confirmed)\r\n"),
        "{shown:?}"
    );
    assert!(!world.exists(), "{shown}");

    // A store that was there before is kept, and only the worktree this run made goes.
    let kept = dir.path().join("kept");
    std::fs::create_dir_all(&kept).unwrap();
    drop(broker_core::store::Store::create(&kept.join("db")).unwrap());
    let (code, shown) = run(&kept);
    assert_eq!(code, 1, "{shown}");
    assert!(kept.join("db/data.mdb").exists());
    assert!(!kept.join("worktrees").exists(), "{shown}");
}

/// A table for a plugin that is present but left out of the selection was ignored quietly: the
/// example config's "uncomment `[plugins.ailang]` … to serve them", followed literally under
/// its own `handlers = [...]` that leaves ailang out, served nothing of ailang and said nothing
/// until an agent's call met rule R8. `serve` warns of it and `handlers` notes it, naming the
/// selection that leaves the plugin out.
#[test]
fn a_table_for_a_plugin_the_selection_leaves_out_is_said_not_ignored_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = plugin_dir_with(dir.path(), &["worldd_workspace", "worldd_git"]);
    let config = dir.path().join("world.toml");
    let by_file = "[plugins.git] is set, but [serve] handlers leaves git out: its tools are refused (rule R8); add \"git\" to [serve] handlers to serve them";
    let by_flag = "[plugins.git] is set, but --handler leaves git out: its tools are refused (rule R8); add \"git\" to --handler to serve them";
    let table = "[plugins.git]\nauthor = \"Ops <ops@example.com>\"\n";
    for (text, flags, line) in [
        (
            format!("[serve]\nhandlers = [\"workspace\"]\n\n{table}"),
            vec![],
            by_file,
        ),
        (table.to_owned(), vec!["--handler", "workspace"], by_flag),
    ] {
        std::fs::write(&config, &text).unwrap();
        let mut args = vec![
            "handlers",
            "--plugin-dir",
            path_str(&plugins),
            "--config",
            path_str(&config),
        ];
        args.extend(&flags);
        let (code, out, _) = worldd(&args, None);
        assert_eq!(code, 0);
        assert!(out.contains(&format!("\nnote: {line}\n")), "{out}");
        let mut cmd = Command::new(WORLDD);
        cmd.args([
            "serve",
            "--db",
            path_str(&dir.path().join("db")),
            "--workspace-root",
            path_str(&dir.path().join("wt")),
            "--bind",
            "127.0.0.1:0",
            "--plugin-dir",
            path_str(&plugins),
            "--config",
            path_str(&config),
        ])
        .args(&flags)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        let d = Daemon::spawn(tempfile::tempdir().unwrap(), cmd);
        expect_line(&d.log_lines(), &[line]);
        drop(d);
    }
    // A table that sets nothing is no sign of intent, and a selected plugin's table is used.
    std::fs::write(&config, "[serve]\nhandlers = [\"workspace\", \"git\"]\n\n[plugins.git]\nauthor = \"Ops <ops@example.com>\"\n").unwrap();
    let (_, out, _) = worldd(
        &[
            "handlers",
            "--plugin-dir",
            path_str(&plugins),
            "--config",
            path_str(&config),
        ],
        None,
    );
    assert!(!out.contains("is set, but"), "{out}");
}
