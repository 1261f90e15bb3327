//! The plugin ABI's acceptance test: plugins built OUTSIDE the worldd workspace, loaded by the
//! real `worldd` binary over real HTTP.
//!
//! - `tests/fixtures/echo-plugin` is a third-party plugin written from the handler-author guide
//!   (its own `[workspace]`, only `handler-kit` as a dependency). It adds the effects
//!   `Echo.Say` and `Echo.Panic` and the tools `echo-say` and `echo-panic`, which the daemon
//!   serves with no change to its code.
//! - `tests/fixtures/incompatible-plugin` is built against a scratch copy of `handler-api` whose
//!   package version is moved to the next `0.y` minor: the daemon must refuse it with one line.
//!
//! The fixtures are built once per test process (one `OnceLock` each, one build at a time) with
//! `cargo build --manifest-path … --target-dir <target>/fixtures` (`common/fixtures.rs`).

mod common;
// The executed-docs runner: the guide's commands run on a terminal, as a person runs them.
#[allow(dead_code)]
#[path = "common/transcript.rs"]
mod transcript;

use std::path::Path;
use std::process::{Command, Stdio};

use base64::Engine;
use common::fixtures::{
    cargo_build, cargo_test, echo_library, fixtures_target, incompatible_plugin, library_file,
    share_echo_lock, write_if_changed,
};
use common::*;
use serde_json::{json, Value};
use sha2::Digest;

const WS: &str = "worldd_workspace";
const R8: &str = "transition declares an effect this daemon has no handler for";

// -------------------------------------------------------------------------------------------
// Daemons with plugin libraries from anywhere.

/// `worldd serve` on `dir` with `libs` copied into `dir/plugins` plus the named libraries from
/// the main target directory.
fn start_with(dir: tempfile::TempDir, libs: &[&Path], names: &[&str]) -> Daemon {
    let plugins = dir.path().join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    for lib in libs {
        std::fs::copy(lib, plugins.join(lib.file_name().unwrap())).unwrap();
    }
    Daemon::start_in(dir, names, &[])
}

/// Kill `d` and start another daemon on its store with these plugins only.
fn restart_with(mut d: Daemon, libs: &[&Path], names: &[&str]) -> Daemon {
    let _ = d.child.kill();
    let _ = d.child.wait();
    let dir = std::mem::replace(&mut d.dir, tempfile::tempdir().unwrap());
    drop(d);
    std::fs::remove_dir_all(dir.path().join("plugins")).unwrap();
    start_with(dir, libs, names)
}

/// The JSON-RPC reply of an MCP POST, plain JSON or one SSE `message` event.
fn rpc(a: &Answer) -> Value {
    assert_eq!(a.status, 200, "{}", a.text());
    if a.content_type.starts_with("text/event-stream") {
        a.sse_json()
    } else {
        a.json()
    }
}

/// The data part of an A2A `tasks/send` result.
fn a2a_data(v: &Value) -> &Value {
    assert_eq!(v["result"]["status"]["state"], "completed", "{v}");
    &v["result"]["artifacts"][0]["parts"][0]["data"]
}

fn mcp_tool_names(d: &Daemon, token: &str) -> Vec<String> {
    let v = rpc(&mcp(d, token, "tools/list", json!({})));
    v["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{v}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

/// A stored object's payload, decoded as JSON (`GET /v1/objects/<ref>?payload=true`).
fn object_payload(d: &Daemon, token: &str, reference: &str) -> (Value, Value) {
    let a = get(
        &d.url(&format!("/v1/objects/{reference}?payload=true")),
        Some(token),
    );
    assert_eq!(a.status, 200, "{}", a.text());
    let object = a.json();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(object["payload"].as_str().unwrap())
        .unwrap();
    (object, serde_json::from_slice(&bytes).unwrap())
}

fn head(d: &Daemon, token: &str) -> String {
    let a = get(&d.url("/v1/head"), Some(token));
    assert_eq!(a.status, 200, "{}", a.text());
    a.text()
}

fn revision(d: &Daemon, token: &str) -> u64 {
    let w = get(
        &d.url(&format!("/v1/worlds/{}", head(d, token))),
        Some(token),
    )
    .json();
    w["revision"].as_u64().unwrap_or_else(|| panic!("{w}"))
}

/// Units spent in `episode`, read from the store beside the running daemon.
fn spent(d: &Daemon, episode: &str) -> Vec<((String, String), u64)> {
    let store = broker_core::store::Store::open(&d.db(), Default::default()).unwrap();
    store
        .read(|r| broker_core::journal::spent(r, episode))
        .unwrap()
        .into_iter()
        .collect()
}

fn sha256_ref(path: &Path) -> String {
    format!(
        "sha256:{}",
        hex::encode(sha2::Sha256::digest(std::fs::read(path).unwrap()))
    )
}

fn fixture_transition(name: &str) -> Value {
    let path = repo_root()
        .join("tests/fixtures/echo-plugin/transitions")
        .join(name);
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

// -------------------------------------------------------------------------------------------
// 1. A third-party plugin loads and serves, with no change to the daemon.

#[test]
fn a_plugin_built_outside_the_workspace_loads_and_serves_its_tool() {
    let echo = echo_library();

    // `worldd handlers` describes it.
    let listing = tempfile::tempdir().unwrap();
    let lib = listing.path().join(library_file("worldd_echo"));
    std::fs::copy(echo, &lib).unwrap();
    let (code, out, err) = worldd(
        &["handlers", "--plugin-dir", path_str(listing.path())],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        format!(
            "plugin directory {dir}\n\
             \n\
             echo 0.1.0 (abi 3)\n\
            \x20 file {lib}\n\
            \x20 library {file_ref}\n\
            \x20 Echoes a text back (echo-say); panics on request (echo-panic).\n\
            \x20 effect Echo.Say [read] ops: say\n\
            \x20 effect Echo.Panic [read] ops: panic\n\
            \x20 tools: echo-say, echo-panic\n\
            \x20 config {{}}\n\
             \n\
             1 plugin(s), 0 library(ies) not loadable\n",
            dir = listing.path().display(),
            lib = lib.display(),
            file_ref = sha256_ref(&lib),
        )
    );

    // `worldd serve` with it and the workspace plugin.
    let d = start_with(tempfile::tempdir().unwrap(), &[echo], &[WS]);
    let token = d.session("ep1", &["Echo.Say=any:5"]);
    let reader = d.session("ep2", &["Workspace.Read=worktree:5"]);

    // A2A.
    let text = "hello from a plugin built elsewhere: \"quoted\" é ✓";
    let v = a2a(&d, &token, "s1", "echo-say", json!({"text": text}));
    let data = a2a_data(&v);
    assert_eq!(
        data,
        &json!({"ok": true, "echo": text, "world": data["world"].clone()}),
        "{v}"
    );
    let world = &data["world"];
    assert_eq!(world["effects"].as_array().unwrap().len(), 1, "{world}");
    assert_eq!(world["effects"][0]["id"], "e1");
    assert_eq!(world["effects"][0]["status"], "ok");
    assert!(world["effects"][0]["record"]
        .as_str()
        .unwrap()
        .starts_with("sha256:"));
    assert!(world["plan"].as_str().unwrap().starts_with("sha256:"));
    assert_eq!(v["result"]["metadata"]["invocation_id"], "a2a:ep1:s1");
    let entry = v["result"]["metadata"]["entry_index"].as_u64().unwrap();

    // Its effect record: allowed, not failed, one unit spent.
    let record = world["effects"][0]["record"].as_str().unwrap();
    let (object, rec) = object_payload(&d, &token, record);
    assert_eq!(object["semanticId"], "world/effect-record/v1");
    // It names the plugin that ran it: name, version and the sha256 of the library loaded.
    assert_eq!(
        rec,
        json!({"effect": "Echo.Say", "scope": "any", "cost": 1, "budgetBefore": 5,
               "budgetAfter": 4, "allowed": true, "failed": false, "denial": "",
               "requestRef": rec["requestRef"].clone(), "resultRef": rec["resultRef"].clone(),
               "handler": {"plugin": "echo", "version": "0.1.0", "library": sha256_ref(echo)}})
    );
    assert!(rec["resultRef"].as_str().unwrap().starts_with("sha256:"));

    // The plugin's plan section refuses bad arguments before any effect.
    let v = a2a(
        &d,
        &token,
        "s2",
        "echo-say",
        json!({"text": "x", "loud": true}),
    );
    assert_eq!(
        a2a_data(&v),
        &json!({"ok": false,
                "refused": "unknown argument \"loud\"; echo-say admits only: text",
                "world": {"effects": [], "plan": a2a_data(&v)["world"]["plan"].clone()}})
    );

    // `worldd why` re-verifies the echo call's whole chain.
    let db = d.db();
    let (code, out, err) = worldd(&["why", "--db", path_str(&db), &entry.to_string()], None);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.starts_with(&format!("why: entry {entry} (matched by ")),
        "{out}"
    );
    assert!(out.contains("all 10 link(s) verified"), "{out}");
    assert!(
        out.contains(&format!(
            "\n  ✓ plugin  {}…  echo 0.1.0 ran e1\n",
            &sha256_ref(echo)[..15]
        )),
        "{out}"
    );

    // MCP: the Echo.Say grant sees echo-say (and only it); a workspace session does not.
    assert_eq!(mcp_tool_names(&d, &token), ["echo-say"]);
    assert_eq!(mcp_tool_names(&d, &reader), ["ailang-read"]);
    let list = rpc(&mcp(&d, &token, "tools/list", json!({})));
    let doc = fixture_transition("echo-say.json");
    let mut tool = list["result"]["tools"][0].clone();
    // The guide promises the effect class as MCP annotations; the daemon does not publish
    // them yet. When it does, Echo.Say is a read.
    if let Some(annotations) = tool.as_object_mut().unwrap().remove("annotations") {
        assert_eq!(annotations["readOnlyHint"], true, "{annotations}");
    }
    assert_eq!(
        tool,
        json!({"name": "echo-say", "title": doc["title"], "description": doc["description"],
               "inputSchema": doc["inputSchema"], "outputSchema": doc["outputSchema"]})
    );
    let v = rpc(&mcp(
        &d,
        &token,
        "tools/call",
        json!({"name": "echo-say", "arguments": {"text": "over MCP"}}),
    ));
    let result = &v["result"];
    assert_eq!(result["isError"], false, "{v}");
    let structured = &result["structuredContent"];
    assert_eq!(
        structured,
        &json!({"ok": true, "echo": "over MCP", "world": structured["world"].clone()})
    );
    assert_eq!(structured["world"]["effects"][0]["status"], "ok");
    let committed: Value =
        serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(&committed, structured);

    // The workspace plugin serves beside it.
    std::fs::write(d.root().join("ep2/a.txt"), "alpha").unwrap();
    let v = a2a(&d, &reader, "r1", "ailang-read", json!({"path": "a.txt"}));
    assert_eq!(a2a_data(&v)["content"], "alpha", "{v}");

    assert!(d.stop().success());
}

// -------------------------------------------------------------------------------------------
// 2. A panic inside `execute` is a failed effect; the daemon keeps serving.

#[test]
fn a_panic_inside_execute_is_a_failed_effect_and_the_next_call_works() {
    let mut d = start_with(tempfile::tempdir().unwrap(), &[echo_library()], &[]);
    let token = d.session("ep1", &["Echo.Say=any:5", "Echo.Panic=any:2"]);

    let v = a2a(&d, &token, "p1", "echo-panic", json!({"text": "boom"}));
    let data = a2a_data(&v);
    // No output but the world block: the agent sees only the effect's status.
    assert_eq!(
        data.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["world"],
        "{v}"
    );
    assert_eq!(data["world"]["effects"][0]["status"], "failed", "{v}");
    let entry = v["result"]["metadata"]["entry_index"].as_u64().unwrap();

    let record = data["world"]["effects"][0]["record"].as_str().unwrap();
    let (object, rec) = object_payload(&d, &token, record);
    assert_eq!(object["semanticId"], "world/effect-record/v1");
    assert_eq!(
        rec,
        json!({"effect": "Echo.Panic", "scope": "any", "cost": 1, "budgetBefore": 2,
               "budgetAfter": 1, "allowed": true, "failed": true, "denial": "",
               "requestRef": rec["requestRef"].clone(), "resultRef": "",
               "handler": {"plugin": "echo", "version": "0.1.0",
                           "library": sha256_ref(echo_library())}})
    );
    assert!(rec["requestRef"].as_str().unwrap().starts_with("sha256:"));

    // The panic was caught at the plugin boundary and reported to the operator, after the
    // plugin's own Host::log line.
    d.wait_for_log("panicking on purpose");
    d.wait_for_log("effect failed: handler panicked: echo-panic: asked to panic with \"boom\"");
    // Where it panicked is said once, through the daemon's log and tagged with the plugin; the
    // plugin's own std printed it raw to the daemon's stderr (several lines, a backtrace under
    // RUST_BACKTRACE, no plugin named).
    d.wait_for_log("panicked at src/lib.rs:");
    let log = d.log();
    let said = log
        .lines()
        .find(|l| l.contains("panicked at src/lib.rs:"))
        .unwrap();
    assert!(
        said.ends_with(
            ": echo-panic: asked to panic with \"boom\" (the call fails with this message) plugin=echo"
        ),
        "{said}"
    );
    assert!(!log.contains("thread '"), "{log}");

    // Still alive, and the next call works.
    assert!(d.child.try_wait().unwrap().is_none(), "the daemon exited");
    assert_eq!(get(&d.url("/v1/health"), None).status, 200);
    let v = a2a(&d, &token, "s1", "echo-say", json!({"text": "still here"}));
    let data = a2a_data(&v);
    assert_eq!(data["ok"], true, "{v}");
    assert_eq!(data["echo"], "still here");
    assert_eq!(data["world"]["effects"][0]["status"], "ok");

    // Again over MCP: a second panic, then a call on the same handler object.
    let v = rpc(&mcp(
        &d,
        &token,
        "tools/call",
        json!({"name": "echo-panic", "arguments": {"text": "again"}}),
    ));
    let structured = &v["result"]["structuredContent"];
    assert_eq!(
        structured.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["world"],
        "{v}"
    );
    assert_eq!(structured["world"]["effects"][0]["status"], "failed");
    d.wait_for_log("handler panicked: echo-panic: asked to panic with \"again\"");
    let v = rpc(&mcp(
        &d,
        &token,
        "tools/call",
        json!({"name": "echo-say", "arguments": {"text": "and again"}}),
    ));
    assert_eq!(v["result"]["structuredContent"]["echo"], "and again", "{v}");

    // The failed call's entry verifies like any other.
    let (code, out, err) = worldd(
        &["why", "--db", path_str(&d.db()), &entry.to_string()],
        None,
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("all 10 link(s) verified"), "{out}");
    assert!(
        out.contains("; journal: intent e1 Echo.Panic@any cost 1, outcome failed\n"),
        "{out}"
    );

    assert!(d.child.try_wait().unwrap().is_none(), "the daemon exited");
    assert!(d.stop().success());
}

// -------------------------------------------------------------------------------------------
// 3. A plugin built against another handler-api minor is refused with one line.

#[test]
fn a_plugin_built_against_another_handler_api_minor_is_refused() {
    let bad = incompatible_plugin();
    let cause = format!(
        "incompatible ABI: handler-api {} expected, {} found; rebuild the plugin against handler-api {}, the version this worldd expects",
        bad.expected, bad.found, bad.expected
    );
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    let lib = plugins.join(library_file("worldd_incompatible"));
    std::fs::copy(&bad.library, &lib).unwrap();
    let ws = plugin_library(WS);
    std::fs::copy(&ws, plugins.join(ws.file_name().unwrap())).unwrap();

    // `worldd handlers`: listed as not loadable, the good plugin beside it still described.
    let (code, out, err) = worldd(&["handlers", "--plugin-dir", path_str(&plugins)], None);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!("\n{}\n  not loadable: {cause}\n", lib.display())),
        "{out}"
    );
    assert!(out.contains("\nworkspace "), "{out}");
    assert!(
        out.ends_with("\n1 plugin(s), 1 library(ies) not loadable\n"),
        "{out}"
    );

    // `worldd serve`: exit 2, one line naming the file and the cause, nothing served.
    let (code, out, err) = worldd(
        &[
            "serve",
            "--db",
            path_str(&dir.path().join("db")),
            "--workspace-root",
            path_str(&dir.path().join("worktrees")),
            "--bind",
            "127.0.0.1:0",
            "--plugin-dir",
            path_str(&plugins),
        ],
        None,
    );
    assert_eq!(code, 2, "{out}{err}");
    assert_eq!(out, "", "nothing may be served");
    let failures: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("daemon startup failed"))
        .collect();
    assert_eq!(
        failures,
        [format!(
            "worldd: daemon startup failed at plugins: plugin {}: {cause}",
            lib.display()
        )],
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

// -------------------------------------------------------------------------------------------
// 4. R8 through real plugins.

#[test]
fn r8_a_published_tool_whose_effect_no_loaded_plugin_handles_is_refused_without_a_trace() {
    let echo = echo_library();
    // The echo plugin publishes echo-say; the next daemon loads only the workspace plugin.
    let d = start_with(tempfile::tempdir().unwrap(), &[echo], &[WS]);
    let token = d.session("ep1", &["Echo.Say=any:1"]);
    let d = d.restart(&[WS], &[]);

    let before = head(&d, &token);
    let rev = revision(&d, &token);
    // Still published, so the session sees it and may try it.
    assert_eq!(mcp_tool_names(&d, &token), ["echo-say"]);
    let v = a2a(&d, &token, "t1", "echo-say", json!({"text": "anyone?"}));
    assert_eq!(v["error"], json!({"code": -32603, "message": R8}), "{v}");
    let a = mcp(
        &d,
        &token,
        "tools/call",
        json!({"name": "echo-say", "arguments": {"text": "anyone?"}}),
    );
    assert_eq!(
        a.text(),
        r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32603,"message":"host callback failed"}}"#
    );

    // No log entry, no spend.
    assert_eq!(head(&d, &token), before);
    let next = get(&d.url(&format!("/v1/log/{}", rev + 1)), Some(&token));
    assert_eq!(next.status, 404, "{}", next.text());
    assert!(spent(&d, "ep1").is_empty(), "{:?}", spent(&d, "ep1"));

    // With the echo plugin back, the one unit of the grant is still there.
    let d = restart_with(d, &[echo], &[WS]);
    let v = a2a(&d, &token, "t2", "echo-say", json!({"text": "here"}));
    let data = a2a_data(&v);
    assert_eq!(data["echo"], "here", "{v}");
    let (_, rec) = object_payload(
        &d,
        &token,
        data["world"]["effects"][0]["record"].as_str().unwrap(),
    );
    assert_eq!(
        (&rec["budgetBefore"], &rec["budgetAfter"]),
        (&json!(1), &json!(0))
    );
    assert_eq!(revision(&d, &token), rev + 1);
    assert_eq!(
        spent(&d, "ep1"),
        vec![(("Echo.Say".to_owned(), "any".to_owned()), 1)]
    );
}

// -------------------------------------------------------------------------------------------
// The handler-author guide, executed.

/// The text of the section of `page` under the heading `title`, and its fenced blocks.
fn section_blocks(page: &str, title: &str) -> (String, Vec<transcript::Block>) {
    let text = transcript::section(page, title);
    (text.to_owned(), transcript::blocks(text))
}

/// The body of the one block of `info` among `blocks`.
fn block_body(blocks: &[transcript::Block], info: &str, title: &str) -> String {
    let mut found = blocks.iter().filter(|b| b.info == info);
    let block = found
        .next()
        .unwrap_or_else(|| panic!("{title} has no ```{info} block"));
    assert!(found.next().is_none(), "{title} has two ```{info} blocks");
    block.body.join("\n") + "\n"
}

/// `actual` is the JSON `expected` shows, where a string with `…` stands for any text there.
fn json_like(expected: &Value, actual: &Value) -> bool {
    match (expected, actual) {
        (Value::String(e), Value::String(a)) => transcript::matches(std::slice::from_ref(e), &[a]),
        (Value::Array(e), Value::Array(a)) => {
            e.len() == a.len() && e.iter().zip(a).all(|(e, a)| json_like(e, a))
        }
        (Value::Object(e), Value::Object(a)) => {
            e.len() == a.len()
                && e.iter()
                    .all(|(k, e)| a.get(k).is_some_and(|a| json_like(e, a)))
        }
        _ => expected == actual,
    }
}

/// A person following docs/handler-authors.md: the page's own `Cargo.toml` and `src/lib.rs`
/// (section 1, the `handler-kit` path pointed at this checkout) build a plugin outside the
/// workspace; section 5's test passes under `cargo test`; with the library in
/// `target/release` and a daemon started by section 4's command, the commands of section 4
/// run on a terminal print what the page shows, and the `why` pipeline the page gives verifies
/// the call, naming the plugin as section 3 says. The page's code is what a reader copies:
/// were it to drift from the kit, this would fail where a reader would.
#[test]
fn the_handler_author_guides_plugin_builds_and_answers_as_the_guide_says() {
    let page = transcript::page("docs/handler-authors.md");

    let title = "## 1. A minimal plugin";
    let (_, blocks) = section_blocks(&page, title);
    let manifest = block_body(&blocks, "toml", title);
    let source = block_body(&blocks, "rust", title);
    let placeholder = r#"handler-kit = { path = "/path/to/worldd/handler-kit" }"#;
    assert!(manifest.contains(placeholder), "{manifest}");
    let kit = repo_root().join("handler-kit").display().to_string();
    let manifest = manifest.replace(placeholder, &format!("handler-kit = {{ path = {kit:?} }}"));
    let crate_dir = fixtures_target().join("guide-hello");
    std::fs::create_dir_all(crate_dir.join("src")).unwrap();
    write_if_changed(&crate_dir.join("Cargo.toml"), manifest.as_bytes());
    write_if_changed(&crate_dir.join("src/lib.rs"), source.as_bytes());
    share_echo_lock(&crate_dir);
    let library = cargo_build(&crate_dir.join("Cargo.toml"), "worldd_hello");

    // Section 5's test, added as the page says (`tests/greet.rs`) and run with `cargo test`.
    let title = "## 5. Test";
    let (_, blocks) = section_blocks(&page, title);
    let test = block_body(&blocks, "rust", title);
    std::fs::create_dir_all(crate_dir.join("tests")).unwrap();
    write_if_changed(&crate_dir.join("tests/greet.rs"), test.as_bytes());
    cargo_test(&crate_dir.join("Cargo.toml"));

    // Section 4's setting: the library in target/release, the daemon started as the page says
    // (on a free port instead of the default), on .world/db.
    let title = "## 4. Grant it and call it";
    let (_, blocks) = section_blocks(&page, title);
    let start = block_body(&blocks, "", title);
    let words: Vec<&str> = start.split_whitespace().collect();
    assert_eq!(
        words[..2],
        ["worldd", "serve"],
        "{title} starts the daemon with: {start}"
    );
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path().join("project");
    let release = cwd.join("target/release");
    std::fs::create_dir_all(&release).unwrap();
    std::fs::copy(&library, release.join(library_file("worldd_hello"))).unwrap();
    let mut serve = Command::new(WORLDD);
    serve
        .args(&words[1..])
        .args(["--bind", "127.0.0.1:0"])
        .current_dir(&cwd)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let daemon = Daemon::spawn(dir, serve);
    let bin = Path::new(WORLDD).parent().unwrap().display().to_string();
    let env: Vec<(String, String)> = vec![
        (
            "PATH".into(),
            format!("{bin}:{}", std::env::var("PATH").unwrap_or_default()),
        ),
        ("WORLD_ADDR".into(), daemon.url("")),
        ("NO_COLOR".into(), "1".into()),
        ("WORLDD_LOG".into(), "warn".into()),
    ];
    let run = |command: &str| {
        let (code, shown) = transcript::run_on_terminal(command, &cwd, &env);
        assert_eq!(code, 0, "$ {command}\n{shown}");
        shown
    };

    let title = "## 4. Grant it and call it";
    let (text, blocks) = section_blocks(&page, title);
    let commands = block_body(&blocks, "sh", title);
    let shown_json: Value = serde_json::from_str(&block_body(&blocks, "json", title)).unwrap();
    let mut last = String::new();
    for line in commands.lines() {
        let (command, comment) = match line.split_once(" # ") {
            Some((command, comment)) => (command.trim(), Some(comment.trim())),
            None => (line.trim(), None),
        };
        last = run(command);
        if let Some(comment) = comment {
            // The comment abridges the listing: its parts appear in order.
            let listing = last.lines().collect::<Vec<_>>().join(" ");
            assert!(
                transcript::matches(&[format!("…{comment}…")], &[&listing]),
                "$ {command}: the page says {comment:?}; it printed:\n{last}"
            );
        }
    }
    let answer: Value = serde_json::from_str(&last).unwrap_or_else(|e| panic!("{e}: {last}"));
    assert!(
        json_like(&shown_json, &answer),
        "the page shows:\n{shown_json:#}\nthe call printed:\n{last}"
    );

    // The pipeline the prose gives, and the plugin line section 3 describes.
    let why = text
        .split('`')
        .find(|s| s.starts_with("worldd call") && s.contains("| worldd why -"))
        .unwrap_or_else(|| panic!("{title} gives no `worldd call … | worldd why -` pipeline"));
    let verified = run(why);
    let lines: Vec<&str> = verified.lines().collect();
    assert!(
        transcript::matches(
            &[
                "…".into(),
                "  ✓ plugin  sha256:…  hello 0.1.0 ran e1".into(),
                "…".into(),
                "all 10 link(s) verified".into(),
            ],
            &lines
        ),
        "$ {why}\n{verified}"
    );
}

/// A third party's effect granted at a scope none of its tools uses (`Echo.Say=worktree`, the
/// scope every shipped example shows, where echo-say declares `any`): `session mint` warned
/// only that the episode had no worktree, and to make one, which would change nothing; the
/// credential then saw none of the plugin's tools. It now says, from the store's published
/// tools, that no tool uses the effect at that scope and which scopes they use.
#[test]
fn a_grant_at_a_scope_no_published_tool_uses_is_said_and_no_worktree_is_asked_for() {
    let echo = echo_library();
    let d = start_with(tempfile::tempdir().unwrap(), &[echo], &[WS]);
    let mint = |grant: &str, out: &str| {
        transcript::run_on_terminal(
            &format!(
                "{WORLDD} session mint --db {} --workspace-root {} --episode ep9 --grant {grant} --out {out}",
                path_str(&d.db()),
                path_str(&d.root())
            ),
            d.dir.path(),
            &[],
        )
    };
    let (code, shown) = mint("Echo.Say=worktree:5", "wrong.session");
    assert_eq!(code, 0, "{shown}");
    assert!(
        shown.contains("worldd session: warning: --grant Echo.Say=worktree:5: no published tool uses Echo.Say at scope worktree; its tools use any (a scope is the label a tool declares, not a place), so this grant gives them nothing (answer n to stop here)\n"),
        "{shown}"
    );
    assert!(!shown.contains("has no worktree"), "{shown}");
    // At the scope its tools use, nothing is said of it.
    let (code, shown) = mint("Echo.Say=any:5", "right.session");
    assert_eq!(code, 0, "{shown}");
    assert!(!shown.contains("warning"), "{shown}");
}

/// A grant for an effect a tool declares besides its access, at the scope it declares it
/// (`Echo.Panic=worktree` where echo-say's access is `Echo.Say` at `any` and it declares
/// `Echo.Panic` at `worktree` too): `session mint` looked only at each tool's access, found
/// echo-panic using `Echo.Panic` at `any`, and said the grant gave the tools nothing; it then
/// left the grant out of those needing a worktree, so the missing worktree went unsaid. Every
/// declared effect counts now: nothing is said of the grant, and the worktree is asked for.
#[test]
fn a_grant_for_an_effect_a_tool_declares_besides_its_access_is_not_said_to_give_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let root = dir.path().join("wt");
    std::fs::create_dir(&root).unwrap();
    let store = broker_core::store::Store::create(&db).unwrap();
    let doc = |name: &str| -> Value {
        let path = repo_root().join(format!(
            "tests/fixtures/echo-plugin/transitions/{name}.json"
        ));
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
    };
    // echo-say asks for Echo.Panic at worktree when told to panic, as ailang-run asks for
    // Ailang.RunEnv beside its access Ailang.Run.
    let mut say = doc("echo-say");
    say["declaredEffects"]
        .as_array_mut()
        .unwrap()
        .push(json!({"effect": "Echo.Panic", "scope": "worktree", "cost": 1}));
    say["inputSchema"]["properties"]["panic"] = json!({"type": "string"});
    say["plan"]["arguments"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "panic", "type": "string"}));
    say["plan"]["effect"]["cases"] = json!([{
        "when": [{"argument": "panic", "present": true}],
        "effect": "Echo.Panic",
        "scope": "worktree"
    }]);
    let docs = [say, doc("echo-panic")]
        .into_iter()
        .map(|d| broker_core::transition::Transition::from_value(d).unwrap())
        .collect();
    broker_core::registry::publish(
        &store,
        broker_core::registry::DEFAULT_REGISTRY,
        docs,
        "publisher",
    )
    .unwrap();
    drop(store);
    let mint = |grant: &str| {
        transcript::run_on_terminal(
            &format!(
                "{WORLDD} session mint --db {} --workspace-root {} --episode ep9 --grant {grant} --out {grant}.session",
                path_str(&db),
                path_str(&root)
            ),
            dir.path(),
            &[],
        )
    };
    let (code, shown) = mint("Echo.Panic=worktree:5");
    assert_eq!(code, 0, "{shown}");
    assert!(!shown.contains("gives them nothing"), "{shown}");
    assert!(
        shown.contains(&format!(
            "worldd session: warning: episode ep9 has no worktree {}/ep9: every call of this credential is refused until it exists; `worldd session new ep9` creates one, or pass --workspace-root with the daemon's root if it serves another\n",
            root.display()
        )),
        "{shown}"
    );
    // A scope no tool declares the effect at is still said.
    let (code, shown) = mint("Echo.Panic=log:5");
    assert_eq!(code, 0, "{shown}");
    assert!(
        shown.contains("worldd session: warning: --grant Echo.Panic=log:5: no published tool uses Echo.Panic at scope log; its tools use any, worktree (a scope is the label a tool declares, not a place), so this grant gives them nothing (answer n to stop here)\n"),
        "{shown}"
    );
}
