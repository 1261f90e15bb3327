//! `worldd handlers --check`: a pre-flight before a restart exits as `serve` with the same
//! flags and config would at start-up, with its refusal in its words, where the listing exits 0
//! whatever it lists.

mod common;

use common::{path_str, plugin_dir_with, refused_serve_on, worldd};

/// The `worldd: …` line of a verb's stderr (tracing lines aside).
fn refusal(err: &str) -> Vec<&str> {
    err.lines().filter(|l| l.starts_with("worldd: ")).collect()
}

/// What `serve` says with `flags` on a fresh store: its exit code and refusal lines.
fn serve_with(dir: &std::path::Path, flags: &[&str]) -> (i32, Vec<String>) {
    let r = refused_serve_on(&dir.join("db"), &dir.join("worktrees"), flags, dir);
    let lines = refusal(&r.stderr).into_iter().map(str::to_owned).collect();
    (r.code.unwrap_or(-1), lines)
}

#[test]
fn a_library_serve_would_refuse_fails_the_check_with_serves_words_and_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = plugin_dir_with(dir.path(), &["worldd_workspace"]);
    std::fs::write(plugins.join("libstale.so"), b"not a library").unwrap();
    let stale = plugins.join("libstale.so");
    let said = format!(
        "worldd: daemon startup failed at plugins: plugin {}: cannot be opened: file too short",
        stale.display()
    );

    // The listing says it and exits 0, as it always has.
    let (code, out, err) = worldd(&["handlers", "--plugin-dir", path_str(&plugins)], None);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("  not loadable: cannot be opened: file too short\n"),
        "{out}"
    );

    let (code, out, err) = worldd(
        &["handlers", "--check", "--plugin-dir", path_str(&plugins)],
        None,
    );
    assert_eq!((code, out.as_str()), (2, ""), "{err}");
    assert_eq!(refusal(&err), [said.as_str()], "{err}");
    // `serve` refuses the same start, in the same words.
    let (code, lines) = serve_with(dir.path(), &["--plugin-dir", path_str(&plugins)]);
    assert_eq!((code, lines), (2, vec![said.clone()]));

    // With --handler, serve skips the stale library and starts: so does the check.
    let (code, out, err) = worldd(
        &[
            "handlers",
            "--check",
            "--plugin-dir",
            path_str(&plugins),
            "--handler",
            "workspace",
        ],
        None,
    );
    assert_eq!((code, out.as_str()), (0, ""), "{err}");
    assert!(refusal(&err).is_empty(), "{err}");
}

#[test]
fn a_config_serve_would_refuse_fails_the_check_as_serve_says_it() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = plugin_dir_with(dir.path(), &["worldd_workspace"]);
    let config = dir.path().join("world.toml");
    std::fs::write(
        &config,
        format!(
            "[serve]\nplugin_dir = {:?}\n\n[plugins.workspce]\nx = 1\n",
            path_str(&plugins)
        ),
    )
    .unwrap();
    let (code, out, err) = worldd(&["handlers", "--config", path_str(&config)], None);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\nproblem: [plugins.workspce] "), "{out}");
    let (code, out, err) = worldd(
        &["handlers", "--check", "--config", path_str(&config)],
        None,
    );
    assert_eq!((code, out.as_str()), (2, ""), "{err}");
    let (serve_code, serve_lines) = serve_with(dir.path(), &["--config", path_str(&config)]);
    assert_eq!(serve_code, 2);
    assert_eq!(refusal(&err), serve_lines, "{err}");
    assert!(
        serve_lines[0].starts_with("worldd: daemon startup failed at plugins: ")
            && serve_lines[0].contains("did you mean [plugins.workspace]?"),
        "{serve_lines:?}"
    );

    // A file that does not parse: `serve`'s start-up failure (exit 2), not the listing's own
    // failure to read it (exit 1).
    std::fs::write(&config, "[serve\n").unwrap();
    let (code, _, err) = worldd(
        &["handlers", "--check", "--config", path_str(&config)],
        None,
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.starts_with(&format!(
            "worldd: daemon startup failed at config: {}: TOML parse error",
            config.display()
        )),
        "{err}"
    );
    let (code, _, _) = worldd(&["handlers", "--config", path_str(&config)], None);
    assert_eq!(code, 1);

    // A config serve starts with passes.
    std::fs::write(
        &config,
        format!("[serve]\nplugin_dir = {:?}\n", path_str(&plugins)),
    )
    .unwrap();
    let (code, out, err) = worldd(
        &["handlers", "--check", "--config", path_str(&config)],
        None,
    );
    assert_eq!((code, out.as_str(), err.as_str()), (0, "", ""));
}

/// The check never looked at the bind address: a `[serve] bind` of 0.0.0.0, or a port out of
/// range, passed it while the restart exited 2 at bind-policy. It fails where `serve` does, in
/// its words, from the config or from `--bind` (nothing is bound).
#[test]
fn a_bind_address_serve_would_refuse_fails_the_check() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = plugin_dir_with(dir.path(), &["worldd_workspace"]);
    let config = dir.path().join("world.toml");
    std::fs::write(
        &config,
        format!(
            "[serve]\nplugin_dir = {:?}\nbind = \"0.0.0.0:23644\"\n",
            path_str(&plugins)
        ),
    )
    .unwrap();
    let (code, out, err) = worldd(
        &["handlers", "--check", "--config", path_str(&config)],
        None,
    );
    assert_eq!((code, out.as_str()), (2, ""), "{err}");
    // `serve` with the config's address (no --bind over it).
    let (db, root) = (dir.path().join("db"), dir.path().join("worktrees"));
    let serve = common::refused_start(
        &[
            "--config",
            path_str(&config),
            "--db",
            path_str(&db),
            "--workspace-root",
            path_str(&root),
        ],
        dir.path(),
    );
    assert_eq!(serve.code, Some(2), "{}", serve.stderr);
    assert_eq!(refusal(&err), [serve.line.as_str()], "{err}");
    assert!(
        serve.line.starts_with(
            "worldd: daemon startup failed at bind-policy: [serve] bind \"0.0.0.0:23644\": "
        ),
        "{}",
        serve.line
    );

    // A port out of range given as `--bind`, as `serve` is given it.
    let flags = [
        "--plugin-dir",
        path_str(&plugins),
        "--bind",
        "127.0.0.1:70000",
    ];
    let (code, out, err) = worldd(&[&["handlers", "--check"][..], &flags].concat(), None);
    assert_eq!((code, out.as_str()), (2, ""), "{err}");
    let said = "worldd: daemon startup failed at bind-policy: --bind \"127.0.0.1:70000\": port 70000 is out of range (0 to 65535)";
    assert_eq!(refusal(&err), [said], "{err}");
    let serve = common::refused_start(
        &[
            &flags[..],
            &["--db", path_str(&db), "--workspace-root", path_str(&root)],
        ]
        .concat(),
        dir.path(),
    );
    assert_eq!((serve.code, serve.line.as_str()), (Some(2), said));

    // A loopback address passes.
    let (code, out, err) = worldd(
        &[
            "handlers",
            "--check",
            "--plugin-dir",
            path_str(&plugins),
            "--bind",
            "127.0.0.1:23644",
        ],
        None,
    );
    assert_eq!((code, out.as_str(), err.as_str()), (0, "", ""));
}

/// The checks of where things lie took the default workspace root whatever `serve` is given:
/// a plugin's stateDir inside `serve`'s `--workspace-root` passed. `--workspace-root` (and
/// `--db`, `--bind`) are taken with `--check`, and only with it.
#[test]
fn the_check_takes_serves_workspace_root() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = plugin_dir_with(dir.path(), &["worldd_git"]);
    let root = dir.path().join("worktrees");
    let state = format!("git.stateDir={}", root.join("state").display());
    let flags = [
        "--plugin-dir",
        path_str(&plugins),
        "--plugin-config",
        &state,
    ];
    // Against the default root the stateDir is out of its way.
    let (code, _, err) = worldd(&[&["handlers", "--check"][..], &flags].concat(), None);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = worldd(
        &[
            &["handlers", "--check"][..],
            &flags,
            &["--workspace-root", path_str(&root)],
        ]
        .concat(),
        None,
    );
    assert_eq!((code, out.as_str()), (2, ""), "{err}");
    let (serve_code, serve_lines) = serve_with(dir.path(), &flags);
    assert_eq!(serve_code, 2);
    assert_eq!(refusal(&err), serve_lines, "{err}");
    assert!(
        serve_lines[0]
            .starts_with("worldd: daemon startup failed at config: [plugins.git] stateDir "),
        "{serve_lines:?}"
    );

    // The listing takes no such flag: it checks nothing of them.
    let (code, _, err) = worldd(&["handlers", "--workspace-root", path_str(&root)], None);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.starts_with("error: the following required arguments were not provided:\n  --check"),
        "{err}"
    );
}
