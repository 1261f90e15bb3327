//! The operator's JSON (`call --json`, `--json @FILE`, `--json -`, `--arg-json`, a `publish`
//! bundle file) read as strictly as the daemon reads a body, through the real binary and a real
//! daemon.

mod common;

use std::path::Path;

use common::why::session_file;
use common::*;

const WS: &[&str] = &["worldd_workspace"];

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

/// The head the daemon serves, as text.
fn head(d: &Daemon, token: &str) -> String {
    get(&d.url("/v1/head"), Some(token)).text()
}

/// A command's arguments, its stdin and the stderr it must print.
type Case<'a> = (Vec<&'a str>, Option<&'a [u8]>, String);

/// The CLI parsed the operator's JSON with a plain parser, which kept the last of two members
/// of one name (the daemon refuses such a body as ambiguous) and made an integer beyond
/// ±(2^53−1) a float that is another number; it re-serialised the result and sent it, so the
/// daemon's check never saw what was written. Each entry point now refuses, naming the flag
/// or file and the key or number, exit 1, and nothing is sent.
#[test]
fn call_and_publish_refuse_json_with_a_duplicate_key_or_an_inexact_integer_naming_its_source() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:50"]);
    let file = session_file(d.dir.path(), "ep1.session", &token);
    std::fs::write(d.root().join("ep1/f1.txt"), "one").unwrap();
    std::fs::write(d.root().join("ep1/f2.txt"), "two").unwrap();
    let dup = r#"{"path":"f1.txt","path":"f2.txt"}"#;
    let dup_file = d.dir.path().join("dup.json");
    std::fs::write(&dup_file, dup).unwrap();
    let at_file = format!("@{}", path_str(&dup_file));
    let bundle = d.dir.path().join("dup.bundle.json");
    std::fs::write(
        &bundle,
        r#"{"transitions":[{"id":"dup-read","description":"SAFE: reads one file.","description":"EVIL: the last one wins"}]}"#,
    )
    .unwrap();
    let before = head(&d, &token);
    let cases: Vec<Case> = vec![
        (
            vec!["call", "ailang-read", "--json", dup],
            None,
            "worldd: --json: not strict JSON: duplicate key \"path\"\n".to_owned(),
        ),
        (
            vec!["call", "ailang-read", "--json", &at_file],
            None,
            format!("worldd: --json {at_file}: not strict JSON: duplicate key \"path\"\n"),
        ),
        (
            vec!["call", "ailang-read", "--json", "-"],
            Some(dup.as_bytes()),
            "worldd: --json -: not strict JSON: duplicate key \"path\"\n".to_owned(),
        ),
        (
            vec!["call", "ailang-read", "--arg", "path=f1.txt", "--arg-json", r#"extra={"a":1,"a":2}"#],
            None,
            "worldd: --arg-json extra: not strict JSON: duplicate key \"a\"\n".to_owned(),
        ),
        (
            vec!["call", "ailang-read", "--arg", "path=f1.txt", "--arg-json", "extra=123456789012345678901234567890"],
            None,
            "worldd: --arg-json extra: not strict JSON: number 123456789012345678901234567890 is outside the exact integer range of canonical JSON (±2^53−1)\n".to_owned(),
        ),
        (
            vec!["call", "ailang-read", "--json", r#"{"path":"f1.txt","n":9007199254740993}"#],
            None,
            "worldd: --json: not strict JSON: number 9007199254740993 is outside the exact integer range of canonical JSON (±2^53−1)\n".to_owned(),
        ),
        // Written with a fraction or an exponent, such an integer was sent, and the daemon's
        // refusal named the rounded number (…992), not the one written.
        (
            vec!["call", "ailang-read", "--json", r#"{"path":"f1.txt","n":9007199254740993.0}"#],
            None,
            "worldd: --json: not strict JSON: a number written with a fraction or an exponent is the integer 9007199254740992 as read, beyond ±(2^53−1), which canonical JSON cannot hold exactly (the number written may have been another); send it as a string\n".to_owned(),
        ),
        (
            vec!["call", "ailang-read", "--arg", "path=f1.txt", "--arg-json", "n=[1e16]"],
            None,
            "worldd: --arg-json n: not strict JSON: a number written with a fraction or an exponent is the integer 10000000000000000 as read, beyond ±(2^53−1), which canonical JSON cannot hold exactly (the number written may have been another); send it as a string\n".to_owned(),
        ),
        (
            vec!["publish", path_str(&bundle)],
            None,
            format!(
                "worldd: {}: not strict JSON: duplicate key \"description\"\n",
                path_str(&bundle)
            ),
        ),
    ];
    for (args, stdin, expected) in &cases {
        let (code, out, err) = client(&d, &file, args, *stdin);
        assert_eq!(
            (code, out.as_str(), err.as_str()),
            (1, "", expected.as_str()),
            "{args:?}"
        );
    }
    // Nothing reached the daemon: no call was committed.
    assert_eq!(head(&d, &token), before);
    // JSON that is strict is sent as before.
    let (code, out, err) = client(
        &d,
        &file,
        &[
            "call",
            "ailang-read",
            "--json",
            r#"{"path":"f1.txt"}"#,
            "--json-out",
        ],
        None,
    );
    assert_eq!((code, err.as_str()), (0, ""), "{out}");
    assert!(out.starts_with(r#"{"content":"one","ok":true,"#), "{out}");
}
