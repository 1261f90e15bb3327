//! What the command line prints as JSON and finds by it, through the real binary and a real
//! daemon: `call --json-out` into a pipe is the committed bytes, whatever characters they hold,
//! and `why -` finds a result a terminal showed escaped; `why` of another episode's call says
//! what `calls get` says, and never claims a scan longer than the log.

#[allow(dead_code)]
#[path = "common/transcript.rs"]
mod transcript;

mod common;

use std::path::Path;

use base64::Engine;
use common::why::{b64, online, session_file, sha};
use common::*;
use serde_json::Value;

const WS: &[&str] = &["worldd_workspace"];

/// The characters the terminal filter escapes and canonical JSON keeps raw: the line and
/// paragraph separators, bidirectional controls, a C1 control and DEL.
const KEPT_RAW: &[char] = &[
    '\u{2028}', '\u{2029}', '\u{202e}', '\u{2066}', '\u{0085}', '\u{007f}',
];

/// `worldd call TOOL --arg … --json-out` with stdout a pipe: (exit code, stdout bytes, stderr).
fn call_json_out(d: &Daemon, session: &Path, tool: &str, args: &[&str]) -> (i32, Vec<u8>, String) {
    let addr = d.url("");
    let mut all = vec![
        "call",
        tool,
        "--json-out",
        "--addr",
        &addr,
        "--session",
        path_str(session),
    ];
    for a in args {
        all.extend(["--arg", a]);
    }
    let out = std::process::Command::new(WORLDD)
        .args(&all)
        .env_remove("WORLD_ADDR")
        .env_remove("WORLD_SESSION")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        out.stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `worldd ARGS` against the daemon `d` with `session`, no `$WORLD_*` inherited.
fn client(
    d: &Daemon,
    session: &Path,
    args: &[&str],
    stdin: Option<&[u8]>,
) -> (i32, String, String) {
    let addr = d.url("");
    let mut all = args.to_vec();
    all.extend(["--addr", &addr, "--session", path_str(session)]);
    worldd(&all, stdin)
}

/// The invocation id of the call at entry `index`.
fn invocation_at(d: &Daemon, token: &str, index: u64) -> String {
    let e = get(&d.url(&format!("/v1/log/{index}")), Some(token)).json();
    let reference = e["transitionRef"].as_str().unwrap();
    let o = get(
        &d.url(&format!("/v1/objects/{reference}?payload=true")),
        Some(token),
    )
    .json();
    let record: Value =
        serde_json::from_slice(&b64().decode(o["payload"].as_str().unwrap()).unwrap()).unwrap();
    record["invocationId"].as_str().unwrap().to_owned()
}

/// `call --json-out` promises "exactly the committed output bytes", but every write went
/// through the terminal filter, which printed these characters as `\u2028` and the like: the
/// bytes hashed to another ref, and `call --json-out | why -` said "not found … raise --scan".
/// Into a pipe the committed bytes now go out untouched, and `why -` verifies them as they
/// are, online and offline, with nothing said on stderr.
#[test]
fn call_json_out_into_a_pipe_is_the_committed_bytes_for_every_character_a_terminal_escapes() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:50"]);
    let file = session_file(d.dir.path(), "ep1.session", &token);
    let db = d.db();
    for (n, c) in KEPT_RAW.iter().enumerate() {
        let name = format!("c{n}.txt");
        std::fs::write(d.root().join("ep1").join(&name), format!("x{c}y")).unwrap();
        let (code, out, err) = call_json_out(&d, &file, "ailang-read", &[&format!("path={name}")]);
        assert_eq!((code, err.as_str()), (0, ""), "U+{:04X}", u32::from(*c));
        let text = String::from_utf8(out.clone()).unwrap();
        assert!(
            text.starts_with(&format!("{{\"content\":\"x{c}y\",\"ok\":true,")),
            "U+{:04X}: {text:?}",
            u32::from(*c)
        );
        // The bytes are the stored output object's, whose ref the entry's world names.
        let entry = n as u64 + 1;
        let world = get(&d.url(&format!("/v1/log/{entry}/world")), Some(&token)).json();
        assert_eq!(world["stateRoot"], sha(&out[..out.len() - 1]).as_str());
        let (code, said, err) = online(&d.addr, &file, &["-"], Some(&out));
        assert_eq!(
            (code, err.as_str()),
            (0, ""),
            "U+{:04X}: {said}",
            u32::from(*c)
        );
        assert!(
            said.starts_with(&format!(
                "why: entry {entry} (matched by output (sha256 of the result))\n"
            )),
            "{said}"
        );
        assert!(said.ends_with("all 10 link(s) verified\n"), "{said}");
        let (code, said, err) = worldd(&["why", "-", "--db", path_str(&db)], Some(&out));
        assert_eq!(
            (code, err.as_str()),
            (0, ""),
            "U+{:04X}: {said}",
            u32::from(*c)
        );
        assert!(said.ends_with("all 10 link(s) verified\n"), "{said}");
    }
}

/// On a terminal the same output is still shown escaped (a person reads it there), and what a
/// terminal showed, copied into `why -`, was "not found": `why -` now also looks for the
/// canonical form of JSON it reads, and says that it found the result by that form.
#[test]
fn why_finds_a_result_a_terminal_showed_escaped_by_its_canonical_form_and_says_so() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:50"]);
    let file = session_file(d.dir.path(), "ep1.session", &token);
    std::fs::write(d.root().join("ep1/ls.txt"), "a\u{2028}b\u{202e}c\u{7f}").unwrap();
    let (code, shown) = transcript::run_on_terminal(
        &format!(
            "{WORLDD} call ailang-read --arg path=ls.txt --json-out --addr {} --session {}",
            d.url(""),
            path_str(&file)
        ),
        d.dir.path(),
        &[],
    );
    assert_eq!(code, 0, "{shown}");
    assert!(
        shown.starts_with("{\"content\":\"a\\u2028b\\u202ec\\u007f\",\"ok\":true,"),
        "{shown:?}"
    );
    let copied = shown.lines().next().unwrap().as_bytes().to_vec();
    let committed = canonical(&copied);
    assert_ne!(copied, committed);
    let expected_note = format!(
        "worldd: why -: stdin is not the committed bytes themselves, but JSON whose canonical form ({}) is: verified by that form (a terminal shows some characters escaped; `worldd call … --json-out` into a pipe or a file writes the bytes themselves)\n",
        sha(&committed)
    );
    let (code, said, err) = online(&d.addr, &file, &["-"], Some(&copied));
    assert_eq!((code, err.as_str()), (0, expected_note.as_str()), "{said}");
    assert!(
        said.starts_with("why: entry 1 (matched by output (sha256 of the result))\n"),
        "{said}"
    );
    assert!(said.ends_with("all 10 link(s) verified\n"), "{said}");
    let (code, said, err) = worldd(&["why", "-", "--db", path_str(&d.db())], Some(&copied));
    assert_eq!((code, err.as_str()), (0, expected_note.as_str()), "{said}");
    assert!(said.ends_with("all 10 link(s) verified\n"), "{said}");
    // JSON that is no committed result is still not found, by either form.
    let other = b"{\"content\":\"a\\u2028\",\"ok\":true}";
    let (code, _, err) = online(&d.addr, &file, &["-"], Some(other));
    assert_eq!(code, 1);
    assert_eq!(
        err,
        format!(
            "worldd: why: a result with {} not found (scanned back all 2 entries of the log)\n",
            sha(other)
        )
    );
}

fn canonical(bytes: &[u8]) -> Vec<u8> {
    broker_core::canon::canonicalize(bytes).unwrap()
}

/// `why --addr` of another episode's invocation id said "not found (scanned back 100000
/// entries; raise --scan to look further)" of a two-entry log, though no scan can find it:
/// another episode's calls read as absent to this session. It now says what `calls get` says,
/// the same whether or not the call exists; and a scan is said as far as it went, never past
/// the log's first entry, with no advice to raise it when it read the whole log.
#[test]
fn why_of_another_episodes_invocation_says_it_is_not_yours_and_never_claims_more_entries_than_the_log_holds(
) {
    let d = Daemon::start(WS, &[]);
    let t1 = d.session("ep1", &["Workspace.Read=worktree:50"]);
    let t2 = d.session("ep2", &["Workspace.Read=worktree:50"]);
    let ops = d.operator_session("ops", &[]);
    let f1 = session_file(d.dir.path(), "ep1.session", &t1);
    let f2 = session_file(d.dir.path(), "ep2.session", &t2);
    let fo = session_file(d.dir.path(), "ops.session", &ops);
    std::fs::write(d.root().join("ep1/a.txt"), "alpha").unwrap();
    let (code, _, err) = call_json_out(&d, &f1, "ailang-read", &["path=a.txt"]);
    assert_eq!(code, 0, "{err}");
    let id = invocation_at(&d, &t1, 1);
    assert!(id.starts_with("mcp:ep1:"), "{id}");

    let not_yours = |id: &str| {
        format!("worldd: why: invocation {id} not found: it is not a call of your episode (ep2); another episode's calls are its own, and this answer is the same whether or not it exists\n")
    };
    for (handle, expected) in [
        (id.as_str(), not_yours(&id)),
        ("mcp:ep1:never-sent", not_yours("mcp:ep1:never-sent")),
        (
            "mcp:ep2:never-sent",
            "worldd: why: invocation mcp:ep2:never-sent not found (scanned back all 2 entries of the log)\n".to_owned(),
        ),
        (
            "99",
            "worldd: why: entry 99 not found (the log's last entry is 1)\n".to_owned(),
        ),
    ] {
        let (code, out, err) = online(&d.addr, &f2, &[handle, "--scan", "100000"], None);
        assert_eq!((code, out.as_str(), err.as_str()), (1, "", expected.as_str()), "{handle}");
    }
    // `calls get` says the same of the same id.
    let (code, _, err) = client(&d, &f2, &["calls", "get", &id], None);
    assert_eq!(code, 1);
    assert!(err.ends_with(&format!("worldd: calls get: not found: {id} is not a call of your episode (ep2); another episode's calls are its own, and this answer is the same whether or not it exists\n")), "{err}");
    // A scan shorter than the log is said as such, and may be raised.
    let missing = sha(b"no such result");
    let (code, _, err) = online(&d.addr, &f2, &[&missing, "--scan", "1"], None);
    assert_eq!(code, 1);
    assert_eq!(
        err,
        format!("worldd: why: {missing} not found (scanned back 1 entries; raise --scan to look further)\n")
    );
    // Offline alike: the whole log is two entries.
    let (code, _, err) = worldd(
        &[
            "why",
            "mcp:ep1:never-sent",
            "--scan",
            "100000",
            "--db",
            path_str(&d.db()),
        ],
        None,
    );
    assert_eq!(code, 1);
    assert_eq!(
        err,
        "worldd: why: invocation mcp:ep1:never-sent not found (scanned back all 2 entries of the log)\n"
    );
    // An operator reads every episode: the call verifies.
    let (code, out, err) = online(&d.addr, &fo, &[&id], None);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.ends_with("all 10 link(s) verified\n"), "{out}");
}
