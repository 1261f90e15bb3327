//! Panics in a plugin's code outside its calls, against the real binary and the real library
//! (`tests/fixtures/misfit-plugin`): in its handler's `Drop`, which the daemon ran when another
//! plugin stopped start-up and at shutdown, and which aborted it across the FFI boundary; and
//! in its `manifest`, whose place was said nowhere.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::fixtures::{misfit_library, stall_library};
use common::*;
use serde_json::json;

/// A plugin directory in `dir` holding `libs` under their own file names; the copies' paths.
fn plugin_dir(dir: &Path, libs: &[&Path]) -> (PathBuf, Vec<PathBuf>) {
    let plugins = dir.join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    let copies = libs
        .iter()
        .map(|lib| {
            let copy = plugins.join(lib.file_name().unwrap());
            std::fs::copy(lib, &copy).unwrap();
            copy
        })
        .collect();
    (plugins, copies)
}

/// A config file in `dir` holding `text`.
fn config(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("world.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// The misfit plugin (whose handler's drop panics) started, then the stall plugin (after it
/// in the directory) refused: the daemon dropped misfit's handler, the panic crossed the FFI
/// boundary and aborted it with exit 1 and a backtrace, and the operator never read why it
/// did not start. It stops at the stall plugin, exit 2, and never runs the handler's drop.
#[test]
fn a_panic_in_a_handlers_drop_does_not_hide_why_startup_failed() {
    let dir = tempfile::tempdir().unwrap();
    let (plugins, libs) = plugin_dir(dir.path(), &[misfit_library(), stall_library()]);
    let file = config(
        dir.path(),
        "[plugins.misfit]\ndropPanic = true\n\n[plugins.stall]\nstartMs = -1\n",
    );
    let (code, _, err, _) =
        worldd_with_plugins("serve", &plugins, &["--config", path_str(&file)], &[]);
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(
        err.lines().last().unwrap_or_default(),
        format!(
            "worldd: daemon startup failed at plugins: plugin {}: [plugins.stall]: config key \"startMs\" must be at least 0",
            libs[1].display()
        ),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

/// SIGTERM drained the calls, then dropped the coordinator and with it the handler: the panic
/// aborted the daemon, exit 1, where a clean shutdown exits 0.
#[test]
fn a_panic_in_a_handlers_drop_does_not_turn_a_clean_shutdown_into_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Daemon::serve_command(&dir, &[]);
    plugin_dir(dir.path(), &[misfit_library()]);
    cmd.args(["--plugin-config", "misfit.dropPanic=true"]);
    let d = Daemon::spawn(dir, cmd);
    let token = d.session("ep", &["Misfit.Do=any:10"]);
    let v = a2a(&d, &token, "t1", "misfit-do", json!({}));
    let data = &v["result"]["artifacts"][0]["parts"][0]["data"];
    assert_eq!(data["ok"], true, "{v}");
    let (status, _, log, _) = d.stop_with_log(Duration::from_secs(10));
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(!log.contains("panicked"), "{log}");
}

/// Where `manifest` panicked was said nowhere: `the plugin could not describe itself: manifest
/// panicked: <message>`, and the plugin's own std no longer printed it. It is said in that line.
#[test]
fn a_panic_in_manifest_is_located_in_the_line_that_stops_the_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let (plugins, libs) = plugin_dir(dir.path(), &[misfit_library()]);
    // The fixture's `panic!` in `manifest`, as rustc locates it.
    let source =
        std::fs::read_to_string(repo_root().join("tests/fixtures/misfit-plugin/src/lib.rs"))
            .unwrap();
    let (line, text) = source
        .lines()
        .enumerate()
        .find(|(_, l)| l.contains("panic!(\"{text}\")"))
        .expect("the fixture's manifest panics");
    let place = format!(
        "src/lib.rs:{}:{}",
        line + 1,
        text.find("panic!").unwrap() + 1
    );
    let env = [(
        "WORLDD_MISFIT_MANIFEST_PANIC",
        "misfit: manifest panicked on purpose".to_owned(),
    )];
    let cause = format!(
        "the plugin could not describe itself: manifest panicked at {place}: misfit: manifest panicked on purpose"
    );
    let (code, _, err, _) = worldd_with_plugins("serve", &plugins, &[], &env);
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(
        err.lines().last().unwrap_or_default(),
        format!(
            "worldd: daemon startup failed at plugins: plugin {}: {cause}",
            libs[0].display()
        ),
        "{err}"
    );
    let (_, out, err, _) = worldd_with_plugins("handlers", &plugins, &[], &env);
    assert!(
        out.contains(&format!("\n  not loadable: {cause}\n")),
        "stdout:\n{out}\nstderr:\n{err}"
    );
}
