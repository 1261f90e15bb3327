//! The real `worldd` binary with the workspace, git and registry plugins over real HTTP:
//! git-commit makes real commits, registry-publish adds tools that the next request serves.
//!
//! Needs `libworldd_git.so` and `libworldd_registry.so` in the target directory (`cargo build
//! --workspace`, or `cargo build -p worldd-handler-git -p worldd-handler-registry`).

mod common;

use std::path::Path;

use common::*;
use serde_json::{json, Value};

const PLUGINS: &[&str] = &["worldd_workspace", "worldd_git", "worldd_registry"];
const AUTHOR: &str = "World Test <world@example.invalid>";
const R8: &str = "transition declares an effect this daemon has no handler for";

fn start() -> Daemon {
    Daemon::start(
        PLUGINS,
        &["--plugin-config", &format!("git.author={AUTHOR}")],
    )
}

// ------------------------------------------------------------------ helpers

/// Make an episode's worktree a repository with one commit.
fn init_repo(worktree: &Path) {
    git(worktree, &["init", "-q"]);
    std::fs::write(worktree.join("README.md"), "# episode\n").unwrap();
    git(worktree, &["add", "-A"]);
    git(worktree, &["commit", "-q", "-m", "initial"]);
}

/// MCP `tools/call`; the structured result of a committed call.
fn mcp_call(d: &Daemon, token: &str, tool: &str, args: Value) -> Value {
    let a = mcp(
        d,
        token,
        "tools/call",
        json!({"name": tool, "arguments": args}),
    );
    assert_eq!(a.status, 200, "{}", a.text());
    let v = a.sse_json();
    assert!(v.get("error").is_none(), "{v}");
    v["result"]["structuredContent"].clone()
}

/// The MCP tool names the session sees.
fn mcp_tools(d: &Daemon, token: &str) -> Vec<String> {
    let a = mcp(d, token, "tools/list", json!({}));
    assert_eq!(a.status, 200, "{}", a.text());
    let mut names: Vec<String> = a.sse_json()["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

/// The data part of an A2A task result.
fn a2a_data(v: &Value) -> Value {
    v["result"]["artifacts"][0]["parts"][0]["data"].clone()
}

/// A read-only tool limited to `docs/**`, served by Workspace.Read (no code).
fn docs_read(id: &str, glob: &str) -> Value {
    json!({
        "id": id,
        "title": "Read a document",
        "description": format!("Read one file matching {glob} in this episode's worktree. Returns {{ok, content}} or {{ok:false, refused}}. Costs one Workspace.Read unit."),
        "inputSchema": {"type": "object", "additionalProperties": false, "required": ["path"],
                        "properties": {"path": {"type": "string", "description": format!("A file matching {glob}")}}},
        "outputSchema": {"type": "object", "required": ["world"],
                         "properties": {"ok": {"type": "boolean"}, "content": {"type": "string"},
                                        "refused": {"type": "string"}, "world": {"type": "object"}}},
        "access": {"effect": "Workspace.Read", "scope": "worktree", "cost": 0},
        "declaredEffects": [{"effect": "Workspace.Read", "scope": "worktree", "cost": 1}],
        "plan": {
            "language": "world/plan-language/v1",
            "arguments": [{"name": "path", "type": "string", "required": true,
                           "rules": [{"rule": "relative-path"}, {"rule": "path-glob", "globs": [glob]}]}],
            "effect": {"effect": "Workspace.Read", "scope": "worktree", "cost": 1},
            "payload": {"fields": {"op": {"const": "read"}, "path": {"argument": "path"}}}
        }
    })
}

/// A tool whose effect no loaded plugin handles.
fn model_ask() -> Value {
    json!({
        "id": "model-ask",
        "title": "Ask a model",
        "description": "Ask a language model one question. Returns {ok, answer}.",
        "inputSchema": {"type": "object", "additionalProperties": false, "required": ["question"],
                        "properties": {"question": {"type": "string", "description": "The question"}}},
        "outputSchema": {"type": "object"},
        "access": {"effect": "Model.Infer", "scope": "worktree", "cost": 0},
        "declaredEffects": [{"effect": "Model.Infer", "scope": "worktree", "cost": 1}],
        "plan": {
            "language": "world/plan-language/v1",
            "arguments": [{"name": "question", "type": "string", "required": true,
                           "rules": [{"rule": "max-bytes", "limit": 4096}]}],
            "effect": {"effect": "Model.Infer", "scope": "worktree", "cost": 1},
            "payload": {"fields": {"op": {"const": "infer"}, "question": {"argument": "question"}}}
        }
    })
}

// --------------------------------------------------------------- git-commit

#[test]
fn git_commit_makes_a_real_commit_and_refuses_an_empty_one() {
    let d = start();
    let token = d.session(
        "ep1",
        &["Git.Commit=worktree:10", "Workspace.Write=worktree:10"],
    );
    let wt = d.root().join("ep1");
    init_repo(&wt);
    let initial = git(&wt, &["rev-parse", "HEAD"]);
    assert!(mcp_tools(&d, &token).contains(&"git-commit".to_owned()));

    // An agent writes a file with ailang-write and commits it with git-commit.
    let w = a2a(
        &d,
        &token,
        "w1",
        "ailang-write",
        json!({"path": "notes/hello.txt", "content": "hello\n"}),
    );
    assert_eq!(a2a_data(&w)["ok"], true, "{w}");
    let out = mcp_call(&d, &token, "git-commit", json!({"message": "Add notes"}));
    assert_eq!(out["ok"], true, "{out}");
    let id = out["commit"].as_str().unwrap();
    assert_eq!(id.len(), 40);
    assert_eq!(out["files"], json!(["notes/hello.txt"]));
    assert!(out["tool"].as_str().unwrap().starts_with("sha256:"));
    assert_eq!(out["world"]["effects"][0]["status"], "ok", "{out}");

    // Visible to git log in the worktree, with the operator's author, on top of the old HEAD.
    assert_eq!(git(&wt, &["rev-parse", "HEAD"]).trim(), id);
    assert_eq!(
        git(&wt, &["log", "-1", "--format=%an <%ae>"]).trim(),
        AUTHOR
    );
    assert_eq!(
        git(&wt, &["log", "-1", "--format=%cn <%ce>"]).trim(),
        AUTHOR
    );
    assert_eq!(git(&wt, &["log", "-1", "--format=%s"]).trim(), "Add notes");
    assert_eq!(git(&wt, &["rev-parse", "HEAD~1"]), initial);
    assert_eq!(git(&wt, &["status", "--porcelain"]), "");

    // Nothing left: refused by the handler (the effect ran and said no).
    let out = mcp_call(&d, &token, "git-commit", json!({"message": "again"}));
    assert_eq!(out["ok"], false, "{out}");
    assert_eq!(
        out["refused"],
        "nothing to commit: the worktree has no changes"
    );
    assert_eq!(out["world"]["effects"][0]["status"], "ok", "{out}");
    assert_eq!(git(&wt, &["rev-parse", "HEAD"]).trim(), id);

    // With paths, over A2A: only the named file is committed.
    std::fs::write(wt.join("a.txt"), "a\n").unwrap();
    std::fs::write(wt.join("b.txt"), "b\n").unwrap();
    let v = a2a(
        &d,
        &token,
        "c2",
        "git-commit",
        json!({"message": "Add a", "paths": ["a.txt"]}),
    );
    let data = a2a_data(&v);
    assert_eq!(data["ok"], true, "{v}");
    assert_eq!(data["files"], json!(["a.txt"]));
    assert_eq!(git(&wt, &["status", "--porcelain"]), "?? b.txt\n");

    // The plan refuses an escaping path before any effect is spent.
    let out = mcp_call(
        &d,
        &token,
        "git-commit",
        json!({"message": "m", "paths": ["../ep2/x"]}),
    );
    assert_eq!(
        out["refused"],
        "path \"../ep2/x\" refused: it must be relative and non-empty, with no \"..\" segment and no leading \"-\""
    );
    assert_eq!(out["world"]["effects"], json!([]), "{out}");
}

#[test]
fn git_commit_in_a_worktree_that_is_not_a_repository_is_refused() {
    let d = start();
    let token = d.session("ep1", &["Git.Commit=worktree:3"]);
    std::fs::write(d.root().join("ep1/a.txt"), "a\n").unwrap();
    let out = mcp_call(&d, &token, "git-commit", json!({"message": "m"}));
    assert_eq!(
        out["refused"],
        "commit: the worktree is not a git repository (the operator must make it one, e.g. with git init or git worktree add)"
    );
}

#[test]
fn without_an_author_the_git_plugin_declines_and_git_commit_is_r8() {
    // No git.author and no identity in git's configuration either.
    let d = Daemon::start_env(
        PLUGINS,
        &[],
        &[
            ("GIT_CONFIG_GLOBAL", "/dev/null"),
            ("GIT_CONFIG_NOSYSTEM", "1"),
        ],
    );
    let token = d.session("ep1", &["Git.Commit=worktree:3"]);
    init_repo(&d.root().join("ep1"));
    let v = a2a(&d, &token, "t1", "git-commit", json!({"message": "m"}));
    assert_eq!(v["error"]["code"], -32603, "{v}");
    assert_eq!(v["error"]["message"], R8);
    assert_eq!(
        git(&d.root().join("ep1"), &["rev-list", "--count", "HEAD"]).trim(),
        "1"
    );
}

#[test]
fn the_deprecated_git_author_flag_still_sets_the_author_and_warns() {
    let d = Daemon::start(PLUGINS, &["--git-author", "Old Flag <old@example.invalid>"]);
    let token = d.session("ep1", &["Git.Commit=worktree:3"]);
    let wt = d.root().join("ep1");
    init_repo(&wt);
    std::fs::write(wt.join("a.txt"), "a\n").unwrap();
    let out = mcp_call(&d, &token, "git-commit", json!({"message": "m"}));
    assert_eq!(out["ok"], true, "{out}");
    assert_eq!(
        git(&wt, &["log", "-1", "--format=%an <%ae>"]).trim(),
        "Old Flag <old@example.invalid>"
    );
    let (_dir, log) = d.halt_with_log();
    assert!(
        log.contains("--git-author is deprecated and will be removed in the next release: use --plugin-config git.author=VALUE"),
        "{log}"
    );
}

#[test]
fn without_an_author_the_git_plugin_takes_the_identity_git_config_gives_and_says_so() {
    // The daemon starts in a repository whose own config names an identity; the global one is
    // hidden, so that identity is the only one there is.
    let here = tempfile::tempdir().unwrap();
    git(here.path(), &["init", "-q"]);
    git(here.path(), &["config", "user.name", "Local Identity"]);
    git(
        here.path(),
        &["config", "user.email", "local@example.invalid"],
    );
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Daemon::serve_command(&dir, PLUGINS);
    cmd.current_dir(here.path())
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1");
    let d = Daemon::spawn(dir, cmd);
    let token = d.session("ep1", &["Git.Commit=worktree:3"]);
    let wt = d.root().join("ep1");
    init_repo(&wt);
    std::fs::write(wt.join("a.txt"), "a\n").unwrap();
    let out = mcp_call(&d, &token, "git-commit", json!({"message": "m"}));
    assert_eq!(out["ok"], true, "{out}");
    assert_eq!(
        git(&wt, &["log", "-1", "--format=%an <%ae>"]).trim(),
        "Local Identity <local@example.invalid>"
    );
    let (_dir, log) = d.halt_with_log();
    assert!(
        log.contains("git plugin: commits are authored by Local Identity <local@example.invalid>, the identity `git config user.name` / `user.email` gives here"),
        "{log}"
    );
}

// --------------------------------------------------------- registry-publish

#[test]
fn a_published_docs_only_tool_is_served_on_the_next_request() {
    let d = start();
    let token = d.session(
        "ep1",
        &["Registry.Publish=worktree:10", "Workspace.Read=worktree:10"],
    );
    let wt = d.root().join("ep1");
    std::fs::create_dir_all(wt.join("docs/guide")).unwrap();
    std::fs::create_dir_all(wt.join("src")).unwrap();
    std::fs::write(wt.join("docs/guide/intro.md"), "# Intro\n").unwrap();
    std::fs::write(wt.join("src/main.rs"), "fn main() {}\n").unwrap();
    let before = mcp_tools(&d, &token);
    assert!(
        before.contains(&"registry-publish".to_owned()),
        "{before:?}"
    );
    assert!(!before.contains(&"docs-read".to_owned()));

    // Over MCP, inline.
    let out = mcp_call(
        &d,
        &token,
        "registry-publish",
        json!({"bundle": {"transitions": [docs_read("docs-read", "docs/**")]}}),
    );
    assert_eq!(out["ok"], true, "{out}");
    assert_eq!(out["published"], json!(["docs-read"]));
    assert_eq!(out["unserved"], json!([]));
    assert_eq!(out["changed"], true);
    assert!(out["registry"].as_str().unwrap().starts_with("sha256:"));
    let revision = out["revision"].as_u64().unwrap();
    assert_eq!(out["world"]["effects"][0]["status"], "ok");

    // The next request sees it, and its plan keeps it inside docs/**.
    assert!(mcp_tools(&d, &token).contains(&"docs-read".to_owned()));
    let r = mcp_call(
        &d,
        &token,
        "docs-read",
        json!({"path": "docs/guide/intro.md"}),
    );
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["content"], "# Intro\n");
    let r = mcp_call(&d, &token, "docs-read", json!({"path": "src/main.rs"}));
    assert_eq!(r["ok"], false);
    assert_eq!(
        r["refused"],
        "path \"src/main.rs\" refused: it must match one of: docs/**"
    );
    assert_eq!(r["world"]["effects"], json!([]), "no effect was spent: {r}");
    let r = mcp_call(
        &d,
        &token,
        "docs-read",
        json!({"path": "docs/../src/main.rs"}),
    );
    assert_eq!(
        r["refused"],
        "path \"docs/../src/main.rs\" refused: it must be relative and non-empty, with no \"..\" segment and no leading \"-\""
    );

    // Over A2A, from a bundle file in the worktree; an id with a slash gets an escaped MCP name.
    std::fs::create_dir_all(wt.join("tools")).unwrap();
    std::fs::write(
        wt.join("tools/guide.bundle.json"),
        serde_json::to_vec_pretty(
            &json!({"transitions": [docs_read("guide/read", "docs/guide/**")]}),
        )
        .unwrap(),
    )
    .unwrap();
    let v = a2a(
        &d,
        &token,
        "p1",
        "registry-publish",
        json!({"path": "tools/guide.bundle.json"}),
    );
    let data = a2a_data(&v);
    assert_eq!(data["ok"], true, "{v}");
    assert_eq!(data["published"], json!(["guide/read"]));
    assert_eq!(data["revision"].as_u64().unwrap(), revision + 1);
    assert!(mcp_tools(&d, &token).contains(&"guide_sread".to_owned()));
    let r = mcp_call(
        &d,
        &token,
        "guide_sread",
        json!({"path": "docs/guide/intro.md"}),
    );
    assert_eq!(r["content"], "# Intro\n", "{r}");
    let v = a2a(
        &d,
        &token,
        "r1",
        "guide/read",
        json!({"path": "docs/other.md"}),
    );
    assert_eq!(
        a2a_data(&v)["refused"],
        "path \"docs/other.md\" refused: it must match one of: docs/guide/**"
    );

    // Publishing the same document again changes nothing.
    let out = mcp_call(
        &d,
        &token,
        "registry-publish",
        json!({"bundle": {"transitions": [docs_read("docs-read", "docs/**")]}}),
    );
    assert_eq!(out["ok"], true, "{out}");
    assert_eq!(out["changed"], false, "{out}");
}

#[test]
fn bundles_that_do_not_validate_are_refused_and_publish_nothing() {
    let d = start();
    let token = d.session(
        "ep1",
        &["Registry.Publish=worktree:10", "Workspace.Read=worktree:10"],
    );
    let before = mcp_tools(&d, &token);
    // The handler's own check: the escaped MCP name is too long.
    let long = format!("{}_", "x".repeat(63));
    let out = mcp_call(
        &d,
        &token,
        "registry-publish",
        json!({"bundle": {"transitions": [docs_read("ok-tool", "docs/**"), docs_read(&long, "docs/**")]}}),
    );
    assert_eq!(
        out["refused"],
        format!("transitions[1]: tool \"{long}\" has an MCP name of 65 bytes; the limit is 64")
    );
    assert_eq!(out["world"]["effects"][0]["status"], "ok");
    // The broker's validator, through the host: a glob without a relative-path rule first.
    let mut bad = docs_read("bad-glob", "docs/**");
    bad["plan"]["arguments"][0]["rules"] = json!([{"rule": "path-glob", "globs": ["docs/**"]}]);
    let out = mcp_call(
        &d,
        &token,
        "registry-publish",
        json!({"bundle": {"transitions": [bad]}}),
    );
    assert_eq!(
        out["refused"],
        "transitions[0]: transition \"bad-glob\": plan.arguments[0].rules[0] is a path-glob rule with no relative-path rule before it in the same list; globs match text, so the relative-path rule must refuse \"..\" segments first"
    );
    // The plan: exactly one of path and bundle.
    let out = mcp_call(&d, &token, "registry-publish", json!({}));
    assert_eq!(
        out["refused"],
        "registry-publish needs \"path\" (a bundle file in the worktree) or \"bundle\" (the bundle object)"
    );
    assert_eq!(out["world"]["effects"], json!([]));
    let out = mcp_call(
        &d,
        &token,
        "registry-publish",
        json!({"path": "b.json", "bundle": {"transitions": []}}),
    );
    assert_eq!(
        out["refused"],
        "registry-publish takes either \"path\" or \"bundle\", not both"
    );
    assert_eq!(mcp_tools(&d, &token), before, "nothing was published");
}

#[test]
fn a_tool_whose_effect_no_plugin_serves_is_listed_unserved_and_refused_by_r8() {
    let d = start();
    let token = d.session(
        "ep1",
        &["Registry.Publish=worktree:10", "Model.Infer=worktree:10"],
    );
    let v = a2a(
        &d,
        &token,
        "p1",
        "registry-publish",
        json!({"bundle": {"transitions": [model_ask(), docs_read("docs-read", "docs/**")]}}),
    );
    let data = a2a_data(&v);
    assert_eq!(data["ok"], true, "{v}");
    assert_eq!(data["published"], json!(["model-ask", "docs-read"]));
    assert_eq!(data["unserved"], json!(["model-ask"]));
    // Listed (the session holds a Model.Infer grant) ...
    assert!(mcp_tools(&d, &token).contains(&"model-ask".to_owned()));
    // ... and refused by R8 when called.
    let v = a2a(&d, &token, "q1", "model-ask", json!({"question": "why?"}));
    assert_eq!(v["error"]["code"], -32603, "{v}");
    assert_eq!(v["error"]["message"], R8);
    // MCP answers a host failure with its fixed envelope.
    let a = mcp(
        &d,
        &token,
        "tools/call",
        json!({"name": "model-ask", "arguments": {"question": "why?"}}),
    );
    assert_eq!(a.status, 200);
    let v = a.json();
    assert_eq!(v["error"]["code"], -32603, "{v}");
    assert_eq!(v["error"]["message"], "host callback failed");
}

#[test]
fn worldd_publish_from_the_terminal() {
    let d = start();
    let token = d.session(
        "ep1",
        &["Registry.Publish=worktree:10", "Workspace.Read=worktree:10"],
    );
    std::fs::create_dir_all(d.root().join("ep1/docs")).unwrap();
    std::fs::write(d.root().join("ep1/docs/a.md"), "alpha\n").unwrap();
    let token_file = d.dir.path().join("ep1.session");
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let bundle = d.dir.path().join("docs-read.bundle.json");
    std::fs::write(
        &bundle,
        serde_json::to_vec_pretty(&json!({"transitions": [docs_read("docs-read", "docs/**")]}))
            .unwrap(),
    )
    .unwrap();
    let addr = format!("http://{}", d.addr);
    let (code, out, err) = worldd(
        &[
            "publish",
            path_str(&bundle),
            "--addr",
            &addr,
            "--session",
            path_str(&token_file),
        ],
        None,
    );
    assert_eq!(code, 0, "{out}{err}");
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["published"], json!(["docs-read"]));
    assert_eq!(v["unserved"], json!([]));
    assert!(err.is_empty(), "{err}");
    let r = mcp_call(&d, &token, "docs-read", json!({"path": "docs/a.md"}));
    assert_eq!(r["content"], "alpha\n", "{r}");

    // A refused bundle exits 1 with the refusal on stderr.
    let bad = d.dir.path().join("bad.bundle.json");
    std::fs::write(&bad, r#"{"transitions": [{"id": "a b"}]}"#).unwrap();
    let (code, out, err) = worldd(
        &[
            "publish",
            path_str(&bad),
            "--addr",
            &addr,
            "--session",
            path_str(&token_file),
        ],
        None,
    );
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains(
            "publish refused: transitions[0]: id \"a b\" must match ^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$"
        ),
        "{err}"
    );
}

/// `worldd publish … > /dev/full` said only `cannot write to stdout: …` after the publish had
/// committed, so a script on a full disk published again. It says what `call` says: committed,
/// as which invocation, and how to see it without running it again.
#[test]
fn a_publish_whose_output_cannot_be_written_says_it_committed() {
    let d = start();
    let token = d.session(
        "ep1",
        &["Registry.Publish=worktree:10", "Workspace.Read=worktree:10"],
    );
    let file = d.session_file("ep1", &token);
    let bundle = d.dir.path().join("docs-read.bundle.json");
    std::fs::write(
        &bundle,
        serde_json::to_vec(&json!({"transitions": [docs_read("docs-read", "docs/**")]})).unwrap(),
    )
    .unwrap();
    let out = std::process::Command::new(WORLDD)
        .args(["publish", path_str(&bundle), "--addr", &d.url("")])
        .args(["--session", path_str(&file)])
        .env_remove("WORLD_ADDR")
        .env_remove("WORLD_SESSION")
        .stdin(std::process::Stdio::null())
        .stdout(
            std::fs::OpenOptions::new()
                .write(true)
                .open("/dev/full")
                .unwrap(),
        )
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{err}");
    let id = err
        .strip_prefix("worldd: the call was committed as ")
        .and_then(|rest| rest.split(' ').next())
        .unwrap_or_else(|| panic!("{err}"))
        .to_owned();
    assert!(id.starts_with("mcp:ep1:"), "{err}");
    assert!(
        err.ends_with(&format!(
            "), but its output could not be written: cannot write to stdout: No space left on device (os error 28); do not run it again: `worldd calls get {id}` shows the commit\n"
        )),
        "{err}"
    );
    assert!(mcp_tools(&d, &token).contains(&"docs-read".to_owned()));
}

/// An agent holding a publish grant keeps adding tools: the merged registry, which every
/// session's `tools/list` carries, stops at 8 MiB with a refusal, and nothing is published.
#[test]
fn a_registry_grown_past_8_mib_is_refused_and_publishes_nothing() {
    let d = Daemon::start(
        PLUGINS,
        &[
            "--plugin-config",
            &format!("git.author={AUTHOR}"),
            "--plugin-config",
            "registry.maxBundleBytes=16777216",
        ],
    );
    let token = d.session(
        "ep1",
        &["Registry.Publish=worktree:10", "Workspace.Read=worktree:10"],
    );
    let before = mcp_tools(&d, &token);
    // 72 tools of about 120 KB each (two schemas near their 64 KiB limit): 8.7 MB.
    let tools: Vec<Value> = (0..72)
        .map(|i| {
            let mut t = docs_read(&format!("big-{i}"), "docs/**");
            t["inputSchema"]["description"] = json!("i".repeat(60_000));
            t["outputSchema"]["description"] = json!("o".repeat(60_000));
            t
        })
        .collect();
    let bundle = json!({"transitions": tools}).to_string();
    std::fs::write(d.root().join("ep1").join("big.json"), &bundle).unwrap();
    let out = mcp_call(&d, &token, "registry-publish", json!({"path": "big.json"}));
    let refused = out["refused"]
        .as_str()
        .unwrap_or_else(|| panic!("{out:.300}"));
    assert!(
        refused.starts_with("registry \"tools\" would be ")
            && refused.ends_with(" bytes with this publication; the limit is 8388608"),
        "{refused}"
    );
    assert_eq!(mcp_tools(&d, &token), before, "nothing was published");
}

/// A shipped tool's document, as the repository holds it.
fn shipped_doc(id: &str) -> Value {
    let path = format!(
        "{}/../transitions/se-tools/{id}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// A publisher shrinks the shipped tools (replacing a tool is its right) and fills the
/// registry to within bytes of its limit: the next start publishes the shipped documents
/// again, larger than what they replace, and was refused for the registry's size, so the
/// daemon could never start again (`startup failed at registry-bootstrap`). The shipped
/// documents are always admitted: the daemon starts, serves them whole, and the store checks.
#[test]
fn a_registry_filled_to_its_limit_around_shrunk_shipped_tools_does_not_stop_the_next_start() {
    use broker_core::registry::{self, RegistryError, MAX_REGISTRY_BYTES};
    use broker_core::transition::{Transition, MAX_SCHEMA_BYTES};
    let dir = tempfile::tempdir().unwrap();
    let store = broker_core::store::Store::create(&dir.path().join("db")).unwrap();
    let publish = |docs: Vec<Value>| {
        let docs = docs
            .into_iter()
            .map(|d| Transition::from_value(d).unwrap())
            .collect();
        registry::publish(&store, registry::DEFAULT_REGISTRY, docs, "publisher")
    };
    let shrunk: Vec<Value> = ["ailang-read", "ailang-write", "ailang-edit"]
        .into_iter()
        .map(|id| {
            let mut doc = shipped_doc(id);
            doc["title"] = json!("x");
            doc["description"] = json!("x");
            doc
        })
        .collect();
    publish(shrunk).unwrap();
    let wide = MAX_SCHEMA_BYTES - 1024;
    let filler = |n: usize, input: usize, output: usize| {
        let mut doc = shipped_doc("ailang-read");
        doc["id"] = json!(format!("filler-{n}"));
        doc["inputSchema"]["description"] = json!("i".repeat(input));
        doc["outputSchema"]["description"] = json!("o".repeat(output));
        doc
    };
    let mut n = 0;
    let over = loop {
        match publish(vec![filler(n, wide, wide)]) {
            Ok(_) => n += 1,
            Err(RegistryError::TooLarge { bytes, .. }) => break bytes - MAX_REGISTRY_BYTES,
            Err(e) => panic!("{e}"),
        }
    };
    // The last filler cut to leave 64 bytes: the shrunk tools cannot grow back within them.
    let left = 2 * wide - (over + 64);
    publish(vec![filler(n, left.min(wide), left - left.min(wide))]).unwrap();
    drop(store);

    let d = Daemon::start_in(dir, &["worldd_workspace"], &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let v = mcp(&d, &token, "tools/list", json!({})).sse_json();
    let read = v["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "ailang-read")
        .cloned()
        .unwrap_or_else(|| panic!("{v}"));
    assert_eq!(
        read["description"],
        shipped_doc("ailang-read")["description"]
    );
    let db = d.db();
    let dir = d.halt();
    let (code, _, err) = worldd(&["doctor", "--db", path_str(&db)], None);
    assert_eq!(code, 0, "{err}");
    drop(dir);
}

/// A session sees a tool whose access costs more than nothing only while one of its grants
/// has that much budget left (seed 001: a grant matches "on effect name, scope, liveness and
/// cost ≤ remaining budget"): it saw, and could call, a tool whose access cost 2^53−1 with a
/// budget of 50.
#[test]
fn a_tool_whose_access_costs_more_than_the_grants_remaining_budget_is_neither_seen_nor_called() {
    use broker_core::registry;
    use broker_core::transition::Transition;
    let dir = tempfile::tempdir().unwrap();
    let store = broker_core::store::Store::create(&dir.path().join("db")).unwrap();
    let mut doc = shipped_doc("ailang-read");
    doc["id"] = json!("costly-read");
    doc["access"]["cost"] = json!(30);
    registry::publish(
        &store,
        registry::DEFAULT_REGISTRY,
        vec![Transition::from_value(doc).unwrap()],
        "publisher",
    )
    .unwrap();
    drop(store);
    let d = Daemon::start_in(dir, &["worldd_workspace"], &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:30"]);
    let names = |token: &str| -> Vec<String> {
        mcp(&d, token, "tools/list", json!({})).sse_json()["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(names(&token), ["ailang-read", "costly-read"]);
    // One read spends a unit: 29 are left, under the tool's access cost of 30.
    let read = mcp(
        &d,
        &token,
        "tools/call",
        json!({"name": "ailang-read", "arguments": {"path": "nope.txt"}}),
    )
    .sse_json();
    assert!(
        read["result"]["structuredContent"]["world"].is_object(),
        "{read}"
    );
    assert_eq!(names(&token), ["ailang-read"]);
    let call = mcp(
        &d,
        &token,
        "tools/call",
        json!({"name": "costly-read", "arguments": {"path": "nope.txt"}}),
    )
    .sse_json();
    assert_eq!(
        call["error"],
        json!({"code": -32602, "message": "unknown tool \"costly-read\"",
               "data": {"why": "no tool of this session is named \"costly-read\"; tools/list shows this session's tools"}}),
        "{call}"
    );
    // Another episode, its budget whole, sees it.
    let other = d.session("ep2", &["Workspace.Read=worktree:30"]);
    assert_eq!(names(&other), ["ailang-read", "costly-read"]);
}
