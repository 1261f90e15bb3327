//! A plugin whose start goes wrong, against the real binary: one that hangs inside the dynamic
//! loader (its library's load-time initialiser), and one that declines to start
//! (`tests/fixtures/startup-plugin`, built on its own as the other fixtures are); and manifests
//! that would have broken other plugins' tools, spent the daemon's own grant or lied in
//! `worldd handlers` (`tests/fixtures/misfit-plugin`).

mod common;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use common::fixtures::{cargo_build, echo_library, misfit_library, share_echo_lock};
use common::*;
use serde_json::{json, Value};

/// `tests/fixtures/startup-plugin`, built once per test process.
fn startup_library() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let crate_dir = repo_root().join("tests/fixtures/startup-plugin");
        share_echo_lock(&crate_dir);
        cargo_build(&crate_dir.join("Cargo.toml"), "worldd_startup")
    })
}

/// A plugin directory in `dir` holding `lib` under its own file name; the copy's path.
fn plugin_dir(dir: &Path, lib: &Path) -> (PathBuf, PathBuf) {
    let plugins = dir.join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    let copy = plugins.join(lib.file_name().unwrap());
    std::fs::copy(lib, &copy).unwrap();
    (plugins, copy)
}

/// A config file in `dir` holding `text`.
fn config(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("world.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// The daemon gave up a plugin whose library's initialiser hangs inside `dlopen`, said so, and
/// then never exited: `exit` ran the dynamic loader's destructors, which wait for the lock the
/// abandoned thread holds inside `dlopen`. It must end, exit 2, as for a manifest that hangs.
#[test]
fn a_plugin_that_hangs_inside_dlopen_does_not_keep_serve_from_exiting() {
    let dir = tempfile::tempdir().unwrap();
    let (plugins, lib) = plugin_dir(dir.path(), startup_library());
    let file = config(dir.path(), "[limits]\nplugin_start_ms = 1000\n");
    let hang = [("WORLDD_STARTUP_INIT", "hang".to_owned())];
    let (code, _, err, took) =
        worldd_with_plugins("serve", &plugins, &["--config", path_str(&file)], &hang);
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(
        err.lines().last().unwrap_or_default(),
        format!(
            "worldd: daemon startup failed at plugins: plugin {}: still loading after 1000 ms ([limits] plugin_start_ms); the daemon does not start beside a plugin that hangs",
            lib.display()
        )
    );
    assert!(took < Duration::from_secs(20), "took {took:?}");
    // Without the variable the same library loads and the daemon starts.
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Daemon::serve_command(&dir, &[]);
    std::fs::copy(
        startup_library(),
        dir.path().join("plugins/libworldd_startup.so"),
    )
    .unwrap();
    cmd.env_remove("WORLDD_STARTUP_INIT");
    let (_, log) = Daemon::spawn(dir, cmd).halt_with_log();
    assert!(log.contains("loaded plugin plugin=startup"), "{log}");
}

/// `worldd handlers` waited the default 30 s whatever `[limits] plugin_start_ms` the
/// `--config` file set, said that "the daemon does not start" (it starts no daemon), and then
/// never exited either.
#[test]
fn worldd_handlers_beside_a_plugin_that_hangs_inside_dlopen_keeps_the_configs_deadline_and_exits() {
    let dir = tempfile::tempdir().unwrap();
    let (plugins, lib) = plugin_dir(dir.path(), startup_library());
    let file = config(dir.path(), "[limits]\nplugin_start_ms = 500\n");
    let hang = [("WORLDD_STARTUP_INIT", "hang".to_owned())];
    let (code, out, err, took) =
        worldd_with_plugins("handlers", &plugins, &["--config", path_str(&file)], &hang);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(out, "");
    // The library is named before its code runs, then the limit it overran.
    assert_eq!(
        err,
        format!(
            "worldd handlers: loading {0}\nworldd: plugin {0}: still loading after 500 ms ([limits] plugin_start_ms); worldd handlers stops at a plugin that hangs, and worldd serve would not start beside it; remove it from the plugin directory, or raise the limit if it is only slow\n",
            lib.display()
        )
    );
    assert!(took < Duration::from_secs(20), "took {took:?}");
}

/// A plugin that declines to start was reported as if none had been found ("no plugin loaded
/// …: Build the plugins"), sending the operator to rebuild what was there all along.
#[test]
fn a_plugin_that_declines_is_not_reported_as_no_plugin_found() {
    let dir = tempfile::tempdir().unwrap();
    let file = config(dir.path(), "[plugins.startup]\ndecline = true\n");
    let mut cmd = Daemon::serve_command(&dir, &[]);
    let plugins = dir.path().join("plugins");
    std::fs::copy(startup_library(), plugins.join("libworldd_startup.so")).unwrap();
    cmd.arg("--config").arg(&file);
    let (_, log) = Daemon::spawn(dir, cmd).halt_with_log();
    assert!(
        log.contains(
            " WARN plugin startup not started: declined: asked to by its config (decline = true)"
        ),
        "{log}"
    );
    assert!(
        log.contains(&format!(
            " WARN no plugin started from {}: every tool call will be refused (rule R8). Found, but declined to start: startup (each says why in its line `plugin NAME not started: declined: …`); give a plugin what its line asks for, then restart\n",
            plugins.display()
        )),
        "{log}"
    );
    assert!(!log.contains("Build the plugins"), "{log}");
}

/// A misspelled `[plugins.NAME]` table was looked for only after every plugin's constructor
/// had run: a plugin refusing the empty config the typo left it stopped the start first, and
/// the operator was told to set a key they had set (a typo of another plugin's table was never
/// named at all). The table is named before any constructor runs, by `serve` as by `handlers`.
#[test]
fn a_misspelled_plugin_table_is_named_before_any_plugin_refuses_the_config_it_was_left() {
    let dir = tempfile::tempdir().unwrap();
    let (plugins, _) = plugin_dir(dir.path(), echo_library());
    let (_, misfit) = plugin_dir(dir.path(), misfit_library());
    // The misfit plugin takes a `greeting` and, as the guide has a plugin do, refuses to start
    // without one.
    let env = [
        ("WORLDD_MISFIT_REQUIRE", "greeting".to_owned()),
        (
            "WORLDD_MISFIT_MANIFEST",
            json!({"configSchema": {"type": "object", "properties": {"greeting": {"type": "string"}}}})
                .to_string(),
        ),
    ];
    let failed = |line: &str| format!("worldd: daemon startup failed at plugins: {line}");
    // Without the key the plugin's refusal stops the start: the refusal the typo must not hide.
    let refusal = format!(
        r#"plugin {}: the plugin rejected its config: misfit config: "greeting" is required; set it in [plugins.misfit] greeting"#,
        misfit.display()
    );
    let (code, _, err, _) = worldd_with_plugins("serve", &plugins, &[], &env);
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(err.lines().last().unwrap_or_default(), failed(&refusal));
    let typo = |table: &str, near: &str| {
        format!(
            "[plugins.{table}] (or --plugin-config {table}.KEY=…) names no plugin here; did you mean [plugins.{near}]? (found: echo, misfit)"
        )
    };
    for (file, flags, table, near) in [
        // The refusing plugin's own table, misspelled: in the file, and as a flag.
        (
            "[plugins.misfti]\ngreeting = \"hi\"\n",
            &[][..],
            "misfti",
            "misfit",
        ),
        (
            "",
            &["--plugin-config", "misfti.greeting=hi"][..],
            "misfti",
            "misfit",
        ),
        // Another plugin's table, misspelled, beside the refusing plugin.
        ("[plugins.ehco]\nloud = true\n", &[][..], "ehco", "echo"),
    ] {
        let file = config(dir.path(), file);
        let mut args = vec!["--config", path_str(&file)];
        args.extend_from_slice(flags);
        let (code, _, err, _) = worldd_with_plugins("serve", &plugins, &args, &env);
        assert_eq!(code, Some(2), "{args:?}\n{err}");
        assert_eq!(
            err.lines().last().unwrap_or_default(),
            failed(&format!(
                "plugin {}: {}",
                plugins.display(),
                typo(table, near)
            )),
            "{args:?}"
        );
        assert!(!err.contains("rejected its config"), "{args:?}\n{err}");
        let (code, out, err, _) = worldd_with_plugins("handlers", &plugins, &args, &env);
        assert_eq!(code, Some(0), "{args:?}\n{err}");
        assert!(
            out.contains(&format!("\nproblem: {}\n", typo(table, near))),
            "{args:?}\n{out}"
        );
    }
}

/// `worldd handlers` and `worldd serve` with the misfit plugin's manifest changed by `changes`:
/// `handlers` lists `problem` (exit 0), `serve` stops on the same words (exit 2).
fn refused(changes: Value, problem: &str) {
    let dir = tempfile::tempdir().unwrap();
    let (plugins, lib) = plugin_dir(dir.path(), misfit_library());
    let env = [("WORLDD_MISFIT_MANIFEST", changes.to_string())];
    let (code, out, err, _) = worldd_with_plugins("handlers", &plugins, &[], &env);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains(&format!("  problem: {problem}\n")),
        "{changes}\n{out}"
    );
    let (code, _, err, _) = worldd_with_plugins("serve", &plugins, &[], &env);
    assert_eq!(code, Some(2), "{changes}\n{err}");
    assert_eq!(
        err.lines().last().unwrap_or_default(),
        format!(
            "worldd: daemon startup failed at plugins: plugin {}: {problem}",
            lib.display()
        ),
        "{changes}"
    );
}

/// A tool whose MCP name passed 64 bytes loaded, and then refused the tool list, and every
/// call, of each session granted its access effect: other plugins' tools with it.
#[test]
fn a_shipped_tool_whose_mcp_name_is_too_long_is_refused_at_load_not_on_every_tools_list() {
    let id = format!("misfit.{}", "d".repeat(57));
    refused(
        json!({"transitions": [common::fixtures::misfit_tool("misfit-do", &id)]}),
        &format!(
            r#"shipped transition "{id}" has an MCP name of 65 bytes (misfit_d{}); the limit is 64: every session granted its access effect would be refused its tool list; give it a shorter id"#,
            "d".repeat(57)
        ),
    );
}

/// A plugin declared the daemon's own effect `World.Commit` and shipped a tool that needs it:
/// an operator's commit grant was spent on the plugin's tool.
#[test]
fn a_plugin_declaring_world_commit_cannot_spend_the_operators_commit_grant() {
    let tool = common::fixtures::misfit_tool("Misfit.Do", "World.Commit");
    refused(
        json!({"effects": [{"name": "World.Commit", "class": "write", "ops": ["do"]}], "transitions": [tool]}),
        "plugin misfit declares the effect World.Commit, in the namespace World, which the daemon reserves for its own effects (a World.Commit=log:N grant pays for operator commits): name it under your plugin's own namespace",
    );
}

/// An effect declared twice showed twice in `worldd handlers`, and `serve` refused it as
/// "claimed by both" the same plugin.
#[test]
fn an_effect_declared_twice_is_named_as_such_by_handlers_and_serve() {
    let effect = json!({"name": "Misfit.Do", "class": "read", "ops": ["do"]});
    refused(
        json!({"effects": [effect, effect]}),
        "plugin misfit declares the effect Misfit.Do twice: declare each effect once",
    );
}

/// A version of megabytes (in every effect record; here 100 KB, what one environment variable
/// may hold), an effect name no grant could name, and a line
/// break in the description that printed a forged `problem: none` line in `worldd handlers`.
#[test]
fn a_manifest_forging_lines_or_carrying_megabytes_is_refused_and_printed_one_line_each() {
    refused(
        json!({"version": "9".repeat(100_000)}),
        &format!(
            r#"plugin misfit's version "{}"… (100000 bytes in all) is not a version: it must be 1 to 64 bytes of letters, digits and . + - _ (such as 0.1.0; every effect record carries it)"#,
            "9".repeat(64)
        ),
    );
    for (bad, shown) in [
        ("", r#""""#),
        ("Misfit.Do\nproblem: none", r#""Misfit.Do\nproblem: none""#),
    ] {
        refused(
            json!({"effects": [{"name": bad, "class": "read", "ops": ["do"]}], "transitions": []}),
            &format!("plugin misfit declares the effect {shown}, which is not an effect name: it must be dot-separated names, each a letter and then letters, digits and _, at most 128 bytes in all (such as Notes.Append), as grants name it"),
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let (plugins, _) = plugin_dir(dir.path(), misfit_library());
    // `handlers` shows the start of such a version, not all of it.
    let changes = json!({"version": "9".repeat(100_000)});
    let env = [("WORLDD_MISFIT_MANIFEST", changes.to_string())];
    let (code, out, err, _) = worldd_with_plugins("handlers", &plugins, &[], &env);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains(&format!(
            "\nmisfit {}… (100000 bytes in all) (abi {})\n",
            "9".repeat(64),
            handler_api::ABI_VERSION
        )),
        "{out}"
    );
    assert!(out.len() < 4096, "{out}");
    // A description is printed, escaped: it adds no line of its own.
    let changes = json!({"description": "misfit\n  problem: none\u{1b}[2J"});
    let env = [("WORLDD_MISFIT_MANIFEST", changes.to_string())];
    let (code, out, err, _) = worldd_with_plugins("handlers", &plugins, &[], &env);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("\n  misfit\\n  problem: none\\u001b[2J\n  effect Misfit.Do [read] ops: do\n"),
        "{out}"
    );
    assert!(!out.contains("\n  problem:"), "{out}");
}

/// A C library `plugins/LIB` (of `source`, after a declaration of `companion_value`) linked
/// with `flags` against `libcompanion.so`, built into `companion_dir` (`plugins` or another
/// directory of the same temporary one): the directory and its `plugins`.
fn with_companion(
    source: &str,
    companion_dir: &str,
    flags: &[&str],
    lib: &str,
) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::create_dir_all(dir.path().join(companion_dir)).unwrap();
    let cc = |args: &[&str]| {
        let built = std::process::Command::new("cc")
            .current_dir(dir.path())
            .args(args)
            .status()
            .unwrap();
        assert!(built.success(), "cc {args:?}");
    };
    std::fs::write(
        dir.path().join("companion.c"),
        "int companion_value(void) { return 7; }\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("plugin.c"),
        format!("int companion_value(void);\n{source}"),
    )
    .unwrap();
    let companion = format!("{companion_dir}/libcompanion.so");
    cc(&["-shared", "-fPIC", "-o", &companion, "companion.c"]);
    let out = format!("plugins/{lib}");
    let search = format!("-L{companion_dir}");
    let mut args = vec![
        "-shared",
        "-fPIC",
        "-o",
        &out,
        "plugin.c",
        &search,
        "-lcompanion",
    ];
    args.extend_from_slice(flags);
    cc(&args);
    (dir, plugins)
}

/// `worldd handlers --plugin-dir PLUGINS`, which must succeed: what it lists.
fn handlers_listing(plugins: &std::path::Path) -> String {
    let (code, out, err) = worldd(
        &["handlers", "--plugin-dir", plugins.to_str().unwrap()],
        None,
    );
    assert_eq!(code, 0, "{err}");
    out
}

/// A library whose RUNPATH is `$ORIGIN` and which needs a companion library shipped beside it
/// could not load, and the loader's words (`libcompanion.so: cannot open shared object file`)
/// gave no hint why: loaded through `/proc/self/fd/N`, its `$ORIGIN` is `/proc/self/fd`. The
/// load error names `$ORIGIN` and what to do.
#[test]
fn a_library_needing_a_companion_through_origin_is_told_why_it_cannot_load() {
    let (_dir, plugins) = with_companion(
        "int plugin_value(void) { return companion_value(); }\n",
        "plugins",
        &["-Wl,-rpath,$ORIGIN"],
        "libworldd_dep.so",
    );
    let out = handlers_listing(&plugins);
    assert!(
        out.contains(&format!(
            "\n{}/libworldd_dep.so\n  not loadable: cannot be opened: libcompanion.so: cannot open shared object file: No such file or directory (the library names $ORIGIN, as a RUNPATH or RPATH does: the daemon loads a sealed copy of it through /proc/self/fd/N, where $ORIGIN is /proc/self/fd, so a library beside it is not found; link it statically or install it where the system's loader looks: docs/handler-authors.md, Your plugin in provenance)\n",
            plugins.display()
        )),
        "{out}"
    );
    // The companion itself, a library of no plugin, says only that.
    assert!(
        !out.contains(&format!(
            "{}/libcompanion.so\n  not loadable: cannot be opened",
            plugins.display()
        )),
        "{out}"
    );
}

/// The hint was given to any library holding the bytes `$ORIGIN` anywhere (the whole file was
/// searched): one that names it only in a message, with no RUNPATH or RPATH at all, was told
/// its `$ORIGIN` pointed elsewhere. Only the dynamic section's search paths count.
#[test]
fn a_library_holding_origin_only_as_text_is_not_told_its_origin_misleads() {
    let (_dir, plugins) = with_companion(
        "const char *why = \"set RUNPATH to $ORIGIN\";\nint plugin_value(void) { return companion_value(); }\n",
        "elsewhere",
        &[],
        "libworldd_text.so",
    );
    let library = std::fs::read(plugins.join("libworldd_text.so")).unwrap();
    assert!(library.windows(7).any(|w| w == b"$ORIGIN"));
    let out = handlers_listing(&plugins);
    assert!(
        out.contains(&format!(
            "\n{}/libworldd_text.so\n  not loadable: cannot be opened: libcompanion.so: cannot open shared object file: No such file or directory\n",
            plugins.display()
        )),
        "{out}"
    );
}
