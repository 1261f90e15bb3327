//! Sentences of the operator's pages checked against what the real binary does: the comments
//! of `docs/world.example.toml` (an operator copies the file and reads them as the rules) and
//! the exit codes `docs/cli.md` gives.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::*;

fn page(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../docs")
        .join(name);
    std::fs::read_to_string(path).unwrap()
}

/// The page's text with its line breaks and comment marks folded into single spaces.
fn folded(text: &str) -> String {
    text.lines()
        .map(|l| l.trim_start_matches('#').trim())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The example file said that a library in `plugin_dir` that is not a loadable plugin stops
/// start-up, while the file's own `handlers` selection makes the daemon skip it with a
/// warning; and that a table for a plugin not present is ignored, while one a letter or two
/// from a plugin's name stops start-up. Its comments now say what it does, and it does it.
#[test]
fn the_example_config_says_what_its_selection_does_with_a_broken_library() {
    let example_path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/world.example.toml");
    let example = folded(&page("world.example.toml"));
    assert!(
        example.contains("Without a selection, one that is not a loadable plugin stops start-up; with one (handlers below), it is skipped with a warning."),
        "{example}"
    );
    assert!(
        !example.contains(
            "whether or not it is selected below; one that is not a loadable plugin stops start-up"
        ),
        "{example}"
    );
    assert!(
        example.contains("A table whose name is a letter or two from a plugin's ([plugins.workspce]) stops start-up"),
        "{example}"
    );
    assert!(
        !example.contains("A table for a plugin that is not selected, or not present, is ignored."),
        "{example}"
    );
    // The file's selection, with a junk library beside the shipped ones: skipped, said, served.
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path().join("project");
    std::fs::create_dir_all(&cwd).unwrap();
    let plugins = plugin_dir_with(
        dir.path(),
        &["worldd_workspace", "worldd_git", "worldd_registry"],
    );
    let stale = plugins.join("libstale.so");
    std::fs::write(&stale, "junk\n").unwrap();
    let mut cmd = Command::new(WORLDD);
    cmd.arg("serve")
        .arg("--config")
        .arg(&example_path)
        .args(["--bind", "127.0.0.1:0", "--plugin-dir"])
        .arg(&plugins)
        .current_dir(&cwd)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let d = Daemon::spawn(dir, cmd);
    d.wait_for_log(&format!(
        "skipping plugin {}: cannot be opened: file too short",
        stale.display()
    ));
    assert_eq!(get(&d.url("/v1/health"), None).status, 200);
}

/// cli.md said `worldd handlers` exits 2 when `--config` cannot be read or parsed; it exits 1
/// (it starts nothing, so the file is its own failure, not a start-up failure). The page now
/// gives the code the verb returns.
#[test]
fn the_handlers_exit_code_for_a_config_it_cannot_parse_is_the_one_cli_md_gives() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("x.toml");
    std::fs::write(&config, "foo=1\n").unwrap();
    let (code, out, err) = worldd(&["handlers", "--config", path_str(&config)], None);
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert!(
        err.starts_with(&format!("worldd: {}: ", config.display())),
        "{err}"
    );
    let (code, _, _) = worldd(
        &["handlers", "--config", path_str(Path::new(dir.path()))],
        None,
    );
    assert_eq!(code, 1);
    let cli = folded(&page("cli.md"));
    assert!(
        cli.contains("1 when the directory cannot be read, a `--plugin-config` is malformed, or `--config` cannot be read or parsed"),
        "cli.md §handlers"
    );
    assert!(!cli.contains("2 when `--config` cannot be read or parsed"));
}
