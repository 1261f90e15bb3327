//! What a newcomer's first tries are told: `serve --port`, a limit flag of 0, a bare string
//! to `--arg-json`, a plugin directory that is not there, and the help of `log range`. Each
//! was a bare parser message, or named a config key no file set.

mod common;

use common::*;

/// `worldd ARGS` in a fresh directory, with no daemon anywhere: (exit code, stdout, stderr).
fn run(args: &[&str]) -> (i32, String, String) {
    let dir = tempfile::tempdir().unwrap();
    worldd_in(dir.path(), &[("WORLDD_LOG", "warn")], args)
}

#[test]
fn serve_port_is_told_to_use_bind() {
    for verb in ["serve", "quickstart"] {
        let (code, out, err) = run(&[verb, "--port", "23644"]);
        assert_eq!((code, out.as_str()), (1, ""), "{err}");
        assert_eq!(
            err,
            format!("error: unexpected argument '--port' found\n\n  tip: the port is part of the address: --bind 127.0.0.1:PORT (default 127.0.0.1:7644)\n\nUsage: worldd {verb} [OPTIONS]\n\nFor more information, try '--help'.\n")
        );
    }
    // Another verb's unknown flag is as clap says it.
    let (code, _, err) = run(&["health", "--port", "1"]);
    assert_eq!(code, 1);
    assert!(!err.contains("tip: the port"), "{err}");
}

#[test]
fn a_limit_flag_out_of_range_is_named_as_the_flag() {
    for (args, said) in [
        (
            vec!["--execution-slots", "0"],
            "--execution-slots must be at least 1",
        ),
        (
            vec!["--handler-deadline-ms", "0"],
            "--handler-deadline-ms must be at least 1",
        ),
        (
            vec!["--max-connections", "0"],
            "--max-connections must be at least 1",
        ),
        (
            vec!["--commit-body-bytes", "8388609"],
            "--commit-body-bytes 8388609 is out of range (1 to 8388608)",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let r = refused_start(&args, dir.path());
        assert_eq!(r.code, Some(2), "{}", r.stderr);
        assert_eq!(
            r.line,
            format!("worldd: daemon startup failed at config: {said}")
        );
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
    // From the file, the file's key is named.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("w.toml"), "[limits]\nexecution_slots = 0\n").unwrap();
    let r = refused_start(&["--config", "w.toml"], dir.path());
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert_eq!(
        r.line,
        "worldd: daemon startup failed at config: [limits] execution_slots must be at least 1"
    );
}

#[test]
fn a_bare_string_to_arg_json_is_told_the_quotes_or_arg() {
    let (code, out, err) = run(&[
        "call",
        "ailang-read",
        "--arg-json",
        "path=hello.txt",
        "--addr",
        "http://127.0.0.1:1",
        "--session",
        &"a".repeat(64),
    ]);
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert_eq!(
        err.lines().last(),
        Some("worldd: --arg-json path: expected value at line 1 column 1; a string is JSON in quotes (--arg-json 'path=\"hello.txt\"'), or give it with --arg path=hello.txt")
    );
    // Malformed JSON is not told about strings.
    let (code, _, err) = run(&[
        "call",
        "ailang-read",
        "--arg-json",
        "n={\"a\":",
        "--addr",
        "http://127.0.0.1:1",
        "--session",
        &"a".repeat(64),
    ]);
    assert_eq!(code, 1);
    assert_eq!(
        err.lines().last(),
        Some("worldd: --arg-json n: EOF while parsing a value at line 1 column 5")
    );
}

#[test]
fn a_plugin_dir_that_is_not_there_says_which_flag_and_what_belongs_there() {
    let exe_dir = std::path::Path::new(WORLDD)
        .parent()
        .unwrap()
        .display()
        .to_string();
    let (code, out, err) = run(&["handlers", "--plugin-dir", "/nope"]);
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert_eq!(
        err,
        format!("worldd: plugin /nope: cannot read the plugin directory: No such file or directory (os error 2); --plugin-dir names no directory: give the directory that holds the plugin libraries (libworldd_*.so), or leave it out to load those beside the worldd executable ({exe_dir})\n")
    );
    let dir = tempfile::tempdir().unwrap();
    let r = refused_start(
        &["--plugin-dir", "/nope", "--bind", "127.0.0.1:0"],
        dir.path(),
    );
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert_eq!(
        r.line,
        format!("worldd: daemon startup failed at plugins: plugin /nope: cannot read the plugin directory: No such file or directory (os error 2); --plugin-dir names no directory: give the directory that holds the plugin libraries (libworldd_*.so), or leave it out to load those beside the worldd executable ({exe_dir})")
    );
}

#[test]
fn log_range_help_says_what_from_and_limit_are() {
    let (code, out, _) = run(&["log", "range", "--help"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("--from <FROM>        The first log index to read [default: 0]\n"),
        "{out}"
    );
    assert!(
        out.contains("--limit <LIMIT>      The most entries to print (default 100, at most 500); the answer's `next` says where the next page starts\n"),
        "{out}"
    );
}
