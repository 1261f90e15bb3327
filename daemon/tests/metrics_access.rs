//! Who may read `GET /v1/metrics` (`[server] metrics_for`). Its counters tell, per call of every
//! episode, which tool ran and how it ended, which the filtered log routes hide from other
//! episodes. By default the route stays open (the common scrape setup, and the docs say what it
//! tells); `metrics_for = "operators"` keeps it to operator credentials: no credential is 401,
//! an agent's 403, as the other routes answer them.

mod common;

use common::*;
use serde_json::{json, Value};

const WS: &[&str] = &["worldd_workspace"];
const WRITE_OK: &str = "worldd_calls_total{tool=\"ailang-write\",outcome=\"ok\"} 1";

/// A daemon whose config file's `[server]` table is `server`, and one call of episode `ep-b`.
fn daemon_after_one_call(server: &str) -> Daemon {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("world.toml");
    std::fs::write(&config, format!("[server]\n{server}")).unwrap();
    let mut cmd = Daemon::serve_command(&dir, WS);
    cmd.arg("--config").arg(&config);
    let d = Daemon::spawn(dir, cmd);
    let b = d.session("ep-b", &["Workspace.Write=worktree:5"]);
    let done = tools_call(
        &d,
        &b,
        "ailang-write",
        json!({"path": "b.txt", "content": "b"}),
    );
    assert_eq!(done["result"]["isError"], false, "{done}");
    d
}

fn error(class: &str, message: &str) -> Value {
    json!({"error": {"class": class, "message": message}})
}

#[test]
fn metrics_for_operators_refuses_no_credential_with_401_and_an_agents_with_403() {
    let d = daemon_after_one_call("metrics_for = \"operators\"\n");
    let url = d.url("/v1/metrics");

    let anonymous = get(&url, None);
    assert_eq!(anonymous.status, 401, "{}", anonymous.text());
    assert_eq!(
        anonymous.json(),
        error(
            "SessionAbsent",
            "a session credential is required: no Authorization Bearer header was present"
        )
    );
    assert_eq!(
        anonymous.field("www-authenticate"),
        Some("Bearer realm=\"worldd\"")
    );

    let agent = d.session("ep-a", &["Workspace.Read=worktree:5"]);
    let refused = get(&url, Some(&agent));
    assert_eq!(refused.status, 403, "{}", refused.text());
    assert_eq!(
        refused.json(),
        error(
            "Forbidden",
            "GET /v1/metrics is for operators on this daemon ([server] metrics_for = \
             \"operators\"): this session credential is not an operator credential (mint one \
             with worldd session mint --operator)"
        )
    );

    let unknown = get(&url, Some(&"0".repeat(64)));
    assert_eq!(unknown.status, 401, "{}", unknown.text());
    assert_eq!(
        unknown.json(),
        error("SessionUnknown", "unknown session credential")
    );

    let operator = d.operator_session("ops", &[]);
    let read = get(&url, Some(&operator));
    assert_eq!(read.status, 200, "{}", read.text());
    assert_eq!(read.content_type, "text/plain; version=0.0.4");
    assert!(
        read.text().lines().any(|l| l == WRITE_OK),
        "{}",
        read.text()
    );
}

#[test]
fn metrics_for_everyone_is_the_default_and_tells_anyone_every_calls_tool_and_outcome() {
    for server in ["", "metrics_for = \"everyone\"\n"] {
        let d = daemon_after_one_call(server);
        let read = get(&d.url("/v1/metrics"), None);
        assert_eq!(read.status, 200, "{server:?}: {}", read.text());
        assert!(
            read.text().lines().any(|l| l == WRITE_OK),
            "{server:?}: {}",
            read.text()
        );
    }
}

#[test]
fn a_metrics_for_value_other_than_everyone_or_operators_stops_the_start_at_config() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("world.toml");
    std::fs::write(&config, "[server]\nmetrics_for = \"agents\"\n").unwrap();
    let mut cmd = Daemon::serve_command(&dir, WS);
    cmd.arg("--config").arg(&config);
    let out = run_to_exit(&mut cmd, std::time::Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unknown variant `agents`, expected `everyone` or `operators`"),
        "{err}"
    );
}
