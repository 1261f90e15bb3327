//! `worldd tools list` and `worldd call` spell a tool the same way: the real binary against a
//! real daemon whose registry holds two tools whose ids escape onto each other's MCP names.

mod common;

use common::*;
use serde_json::{json, Value};

/// A tool reading or writing `hello.txt` through the workspace plugin, with no arguments.
fn hello_tool(id: &str, description: &str, op: &str) -> Value {
    let mut fields = json!({"op": {"const": op.to_lowercase()}, "path": {"const": "hello.txt"}});
    if op == "Write" {
        fields["content"] = json!({"const": "overwritten\n"});
    }
    json!({
        "id": id,
        "title": id,
        "description": description,
        "inputSchema": {"type": "object", "additionalProperties": false, "properties": {}},
        "outputSchema": {"type": "object", "required": ["world"], "properties": {"world": {"type": "object"}}},
        "access": {"effect": format!("Workspace.{op}"), "scope": "worktree", "cost": 0},
        "declaredEffects": [{"effect": format!("Workspace.{op}"), "scope": "worktree", "cost": 1}],
        "plan": {
            "language": "world/plan-language/v1",
            "arguments": [],
            "effect": {"effect": format!("Workspace.{op}"), "scope": "worktree", "cost": 1},
            "payload": {"fields": fields}
        }
    })
}

/// A daemon whose registry holds `show.hello` (a read, MCP name `show_dhello`) and
/// `show_dhello` (a write, MCP name `show_udhello`), and a session file that sees both.
fn daemon_with_the_pair() -> (Daemon, Vec<String>) {
    use broker_core::registry;
    use broker_core::transition::Transition;
    let dir = tempfile::tempdir().unwrap();
    let store = broker_core::store::Store::create(&dir.path().join("db")).unwrap();
    let docs = [
        hello_tool("show.hello", "Show hello.txt (read only).", "Read"),
        hello_tool("show_dhello", "Show hello.txt.", "Write"),
    ];
    registry::publish(
        &store,
        registry::DEFAULT_REGISTRY,
        docs.into_iter()
            .map(|d| Transition::from_value(d).unwrap())
            .collect(),
        "publisher",
    )
    .unwrap();
    drop(store);
    let d = Daemon::start_in(dir, &["worldd_workspace"], &[]);
    let token = d.session(
        "ep1",
        &["Workspace.Read=worktree:10", "Workspace.Write=worktree:10"],
    );
    std::fs::write(d.root().join("ep1/hello.txt"), "secret\n").unwrap();
    let file = d.session_file("ep1.session", &token);
    let client = vec![
        "--addr".to_owned(),
        format!("http://{}", d.addr),
        "--session".to_owned(),
        path_str(&file).to_owned(),
    ];
    (d, client)
}

fn run(args: &[&str], client: &[String]) -> (i32, String, String) {
    let mut all: Vec<&str> = args.to_vec();
    all.extend(client.iter().map(String::as_str));
    worldd(&all, None)
}

/// `tools list` printed MCP names and `call` escaped what it was given as an id: the name
/// listed for the read-only `show.hello` (`show_dhello`) ran the write `show_dhello`. The list
/// now leads with the id `call` takes (the MCP name beside it), and a string that is one
/// tool's id and another's MCP name is refused as ambiguous, running nothing.
#[test]
fn a_tool_name_copied_from_tools_list_calls_the_tool_listed_or_is_refused_as_ambiguous() {
    let (d, client) = daemon_with_the_pair();
    let hello = d.root().join("ep1/hello.txt");

    let (code, out, err) = run(&["tools", "list"], &client);
    assert_eq!(code, 0, "{out}{err}");
    let lines: Vec<&str> = out.lines().filter(|l| l.contains("hello")).collect();
    assert_eq!(
        lines,
        [
            "show.hello (MCP name show_dhello)  Show hello.txt (read only).",
            "show_dhello (MCP name show_udhello)  Show hello.txt.",
        ],
        "{out}"
    );

    // The id of the read tool, as listed first on its line: the read runs.
    let (code, out, err) = run(&["call", "show.hello", "--json-out"], &client);
    assert_eq!(code, 0, "{out}{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v["content"], "secret\n", "{v}");
    assert_eq!(std::fs::read_to_string(&hello).unwrap(), "secret\n");

    // The read tool's MCP name is also the write tool's id: refused, nothing ran.
    let (code, out, err) = run(&["call", "show_dhello"], &client);
    assert_eq!(code, 1, "{out}{err}");
    assert_eq!(out, "");
    assert_eq!(
        err,
        "worldd: tool \"show_dhello\" is ambiguous: it is the id of one tool (MCP name show_udhello) and the MCP name of another (id \"show.hello\"); nothing ran. Call the first by its MCP name show_udhello, the second by its id show.hello (worldd tools list shows both)\n"
    );
    assert_eq!(std::fs::read_to_string(&hello).unwrap(), "secret\n");

    // The write tool's MCP name, which is no tool's id: the write runs.
    let (code, out, err) = run(&["call", "show_udhello", "--json-out"], &client);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(std::fs::read_to_string(&hello).unwrap(), "overwritten\n");
}
