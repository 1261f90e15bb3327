//! Plugins built on their own, outside the worldd workspace (`tests/fixtures/*`): a third-party
//! plugin, one built against another ABI, the test plugin that hangs on request.
//!
//! They are built with `cargo build --manifest-path … --target-dir <target>/fixtures`: a target
//! directory of their own, because the `cargo test` running us holds the lock on the main one,
//! and so that no library of theirs lands in `<target>/debug` or `<target>/release`, where
//! `worldd serve` looks for its plugins by default. Every fixture shares the echo plugin's lock
//! file, so they resolve the same dependencies and share their compiled artifacts.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use super::{repo_root, target_dir};

/// `<target>/fixtures`, next to `<target>/debug` (found from this test executable).
pub fn fixtures_target() -> PathBuf {
    target_dir().parent().unwrap().join("fixtures")
}

/// `libNAME.so` (or the platform's spelling of it).
pub fn library_file(lib: &str) -> String {
    format!(
        "{}{lib}{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    )
}

/// One fixture build at a time (cargo would serialise them on its lock anyway).
static BUILD: Mutex<()> = Mutex::new(());

/// `cargo SUBCOMMAND --manifest-path MANIFEST --target-dir <target>/fixtures`, which must
/// succeed; one at a time.
fn cargo(subcommand: &str, manifest: &Path) {
    let _one_at_a_time = BUILD.lock().unwrap_or_else(|p| p.into_inner());
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
    let started = Instant::now();
    let out = Command::new(cargo)
        .arg(subcommand)
        .arg("--manifest-path")
        .arg(manifest)
        .arg("--target-dir")
        .arg(fixtures_target())
        .env("CARGO_TERM_COLOR", "never")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET_DIR")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cargo {subcommand} --manifest-path {} failed:\n{}\n{}",
        manifest.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!(
        "cargo {subcommand} of fixture {} in {:.1}s",
        manifest.display(),
        started.elapsed().as_secs_f64()
    );
}

/// `cargo test` of a fixture crate: its own tests, which must pass.
#[allow(dead_code)] // not every test binary that shares this module runs a crate's tests
pub fn cargo_test(manifest: &Path) {
    cargo("test", manifest);
}

/// `cargo build` of a fixture crate; returns its cdylib `lib`.
pub fn cargo_build(manifest: &Path, lib: &str) -> PathBuf {
    cargo("build", manifest);
    let path = fixtures_target().join("debug").join(library_file(lib));
    assert!(path.is_file(), "{} was not built", path.display());
    path
}

/// Give the crate in `dir` the echo plugin's lock file (when it has none).
pub fn share_echo_lock(dir: &Path) {
    let lock = dir.join("Cargo.lock");
    if lock.exists() {
        return;
    }
    let root = repo_root();
    let echo_lock = root.join("tests/fixtures/echo-plugin/Cargo.lock");
    let from = if echo_lock.exists() {
        echo_lock
    } else {
        root.join("Cargo.lock")
    };
    std::fs::copy(from, &lock).unwrap();
}

/// The fixture `tests/fixtures/<dir>`, built once per test process.
fn built(cell: &'static OnceLock<PathBuf>, dir: &str, lib: &str) -> &'static Path {
    cell.get_or_init(|| {
        let crate_dir = repo_root().join("tests/fixtures").join(dir);
        share_echo_lock(&crate_dir);
        cargo_build(&crate_dir.join("Cargo.toml"), lib)
    })
}

/// The echo plugin (`tests/fixtures/echo-plugin`), a third party's plugin.
pub fn echo_library() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    built(&LIB, "echo-plugin", "worldd_echo")
}

/// The test plugin that hangs or floods the log on request (`tests/fixtures/stall-plugin`).
pub fn stall_library() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    built(&LIB, "stall-plugin", "worldd_stall")
}

/// The test plugin whose manifest is what `WORLDD_MISFIT_MANIFEST` says
/// (`tests/fixtures/misfit-plugin`).
pub fn misfit_library() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    built(&LIB, "misfit-plugin", "worldd_misfit")
}

/// The misfit plugin's own tool, with `from` replaced by `to` throughout.
pub fn misfit_tool(from: &str, to: &str) -> serde_json::Value {
    let tool = serde_json::json!({
        "id": "misfit-do", "title": "Do nothing", "description": "TEST TOOL.",
        "inputSchema": {"type": "object", "additionalProperties": false},
        "outputSchema": {"type": "object", "required": ["world"]},
        "access": {"effect": "Misfit.Do", "scope": "any", "cost": 0},
        "declaredEffects": [{"effect": "Misfit.Do", "scope": "any", "cost": 1}],
        "plan": {"language": "world/plan-language/v1",
                 "effect": {"effect": "Misfit.Do", "scope": "any", "cost": 1},
                 "payload": {"fields": {"op": {"const": "do"}}}}
    });
    serde_json::from_str(&tool.to_string().replace(from, to)).unwrap()
}

/// [`misfit_tool`] as the tool `id`, taking a `mode` argument that its payload passes on (the
/// misfit plugin's `execute` acts on it).
pub fn misfit_mode_tool(id: &str) -> serde_json::Value {
    let mut tool = misfit_tool("misfit-do", id);
    tool["inputSchema"] = serde_json::json!({
        "type": "object",
        "properties": {"mode": {"type": "string"}},
        "required": ["mode"],
        "additionalProperties": false
    });
    tool["plan"]["arguments"] =
        serde_json::json!([{"name": "mode", "type": "string", "required": true}]);
    tool["plan"]["payload"]["fields"]["mode"] = serde_json::json!({"argument": "mode"});
    tool
}

/// A daemon serving the misfit plugin (copied into its plugin directory), whose manifest is
/// `manifest` (`WORLDD_MISFIT_MANIFEST`).
pub fn misfit_daemon(manifest: &serde_json::Value) -> super::Daemon {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = super::Daemon::serve_command(&dir, &[]);
    let lib = misfit_library();
    std::fs::copy(
        lib,
        dir.path().join("plugins").join(lib.file_name().unwrap()),
    )
    .unwrap();
    cmd.env("WORLDD_MISFIT_MANIFEST", manifest.to_string());
    super::Daemon::spawn(dir, cmd)
}

/// The incompatible plugin and the versions the refusal names.
pub struct Incompatible {
    pub library: PathBuf,
    /// handler-api's version, which the daemon is built against.
    pub expected: String,
    /// The version of the copy the plugin is built against.
    pub found: String,
}

/// Build `tests/fixtures/incompatible-plugin` against a copy of `handler-api/` whose package
/// version is moved to the next `0.y` minor.
///
/// Both copies live in `<target>/fixtures/incompatible-src/` (scratch space, never committed),
/// rewritten only where their content changed so that warm runs rebuild nothing:
/// - `handler-api/`: every file of `handler-api/` except `Cargo.toml`, which is rewritten with
///   the workspace-inherited keys resolved from the root manifest, the new version, no
///   dev-dependencies and an empty `[workspace]` table (it is built on its own);
/// - `incompatible-plugin/`: the fixture, its `handler-api` dependency pointed at that copy.
pub fn incompatible_plugin() -> &'static Incompatible {
    static LIB: OnceLock<Incompatible> = OnceLock::new();
    LIB.get_or_init(|| {
        let root = repo_root();
        let scratch = fixtures_target().join("incompatible-src");
        let api_dir = root.join("handler-api");

        let mut api = read_toml(&api_dir.join("Cargo.toml"));
        let workspace = read_toml(&root.join("Cargo.toml"))
            .get("workspace")
            .and_then(toml::Value::as_table)
            .cloned()
            .expect("the root Cargo.toml has a [workspace] table");
        resolve_inherited(&mut api, &workspace, &root, &api_dir);
        let package = api["package"].as_table_mut().unwrap();
        let expected = package["version"].as_str().unwrap().to_owned();
        let found = next_minor(&expected);
        package.insert("version".into(), toml::Value::String(found.clone()));
        api.remove("dev-dependencies");
        api.insert("workspace".into(), toml::Value::Table(toml::Table::new()));
        let api_copy = scratch.join("handler-api");
        sync_dir(&api_dir, &api_copy);
        write_if_changed(
            &api_copy.join("Cargo.toml"),
            toml::to_string(&api).unwrap().as_bytes(),
        );

        let fixture_dir = root.join("tests/fixtures/incompatible-plugin");
        let mut fixture = read_toml(&fixture_dir.join("Cargo.toml"));
        fixture["dependencies"]
            .as_table_mut()
            .expect("the fixture has [dependencies]")
            .insert(
                "handler-api".into(),
                toml::Value::Table(toml::Table::from_iter([(
                    "path".to_owned(),
                    toml::Value::String("../handler-api".into()),
                )])),
            );
        let fixture_copy = scratch.join("incompatible-plugin");
        sync_dir(&fixture_dir, &fixture_copy);
        write_if_changed(
            &fixture_copy.join("Cargo.toml"),
            toml::to_string(&fixture).unwrap().as_bytes(),
        );
        share_echo_lock(&fixture_copy);
        let library = cargo_build(&fixture_copy.join("Cargo.toml"), "worldd_incompatible");
        Incompatible {
            library,
            expected,
            found,
        }
    })
}

fn read_toml(path: &Path) -> toml::Table {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn is_inherited(v: &toml::Value) -> bool {
    v.get("workspace").and_then(toml::Value::as_bool) == Some(true)
}

/// Replace `key.workspace = true` in `[package]`, `[dependencies]`, `[build-dependencies]` and
/// `[lints]` by the workspace's values, and make relative dependency paths absolute, so that
/// the manifest builds outside the workspace.
fn resolve_inherited(
    manifest: &mut toml::Table,
    workspace: &toml::Table,
    root: &Path,
    crate_dir: &Path,
) {
    let absolute = |dir: &Path, dep: &mut toml::Table| {
        if let Some(toml::Value::String(p)) = dep.get("path") {
            let p = dir.join(p).display().to_string();
            dep.insert("path".into(), toml::Value::String(p));
        }
    };
    if let Some(package) = manifest
        .get_mut("package")
        .and_then(toml::Value::as_table_mut)
    {
        for (key, value) in package.iter_mut() {
            if is_inherited(value) {
                *value = workspace["package"]
                    .get(key)
                    .unwrap_or_else(|| panic!("workspace.package.{key} is missing"))
                    .clone();
            }
        }
    }
    for section in ["dependencies", "build-dependencies"] {
        let Some(deps) = manifest
            .get_mut(section)
            .and_then(toml::Value::as_table_mut)
        else {
            continue;
        };
        for (name, dep) in deps.iter_mut() {
            if !is_inherited(dep) {
                if let Some(t) = dep.as_table_mut() {
                    absolute(crate_dir, t);
                }
                continue;
            }
            let mut resolved = match workspace["dependencies"].get(name) {
                Some(toml::Value::String(version)) => toml::Table::from_iter([(
                    "version".to_owned(),
                    toml::Value::String(version.clone()),
                )]),
                Some(toml::Value::Table(t)) => t.clone(),
                _ => panic!("workspace.dependencies.{name} is missing"),
            };
            absolute(root, &mut resolved);
            for (k, v) in dep.as_table().unwrap() {
                match (k.as_str(), resolved.get_mut(k)) {
                    ("workspace", _) => {}
                    ("features", Some(toml::Value::Array(features))) => {
                        features.extend(v.as_array().unwrap().iter().cloned())
                    }
                    _ => {
                        resolved.insert(k.clone(), v.clone());
                    }
                }
            }
            *dep = toml::Value::Table(resolved);
        }
    }
    if manifest.get("lints").is_some_and(is_inherited) {
        match workspace.get("lints") {
            Some(lints) => manifest.insert("lints".into(), lints.clone()),
            None => manifest.remove("lints"),
        };
    }
}

/// The next incompatible version: `0.y.z` → `0.(y+1).0`, `x.y.z` → `(x+1).0.0`.
fn next_minor(version: &str) -> String {
    let mut parts = version.split(['.', '-', '+']).map(|p| p.parse::<u64>());
    let (Some(Ok(major)), Some(Ok(minor))) = (parts.next(), parts.next()) else {
        panic!("handler-api version {version:?} is not x.y.z");
    };
    if major == 0 {
        format!("0.{}.0", minor + 1)
    } else {
        format!("{}.0.0", major + 1)
    }
}

/// Copy `from` into `to` (files whose content changed only; no `Cargo.toml`, `Cargo.lock` or
/// `target`).
fn sync_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if ["Cargo.toml", "Cargo.lock", "target"].contains(&name.to_str().unwrap_or("")) {
            continue;
        }
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            sync_dir(&entry.path(), &to.join(&name));
        } else if kind.is_file() {
            write_if_changed(&to.join(&name), &std::fs::read(entry.path()).unwrap());
        }
    }
}

/// Cargo rebuilds what is newer than its last build: leave unchanged files alone.
pub fn write_if_changed(path: &Path, bytes: &[u8]) {
    if std::fs::read(path).ok().as_deref() != Some(bytes) {
        std::fs::write(path, bytes).unwrap();
    }
}

/// A copy of the echo plugin whose `echo-say` tool document is not a valid transition (its id
/// has a space), built as `libworldd_broken_tool.so`: a plugin shipping an invalid tool, which
/// the daemon refuses to start beside.
///
/// The copy lives in `<target>/fixtures/broken-tool-src/` (scratch space, rewritten only where
/// its content changed), with its own package and library names so that its library never
/// takes the echo plugin's place in `<target>/fixtures/debug`.
pub fn broken_tool_library() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let root = repo_root();
        let echo = root.join("tests/fixtures/echo-plugin");
        let copy = fixtures_target().join("broken-tool-src");
        sync_dir(&echo, &copy);
        let mut manifest = read_toml(&echo.join("Cargo.toml"));
        manifest["package"]["name"] = toml::Value::String("worldd-handler-broken-tool".into());
        manifest["lib"]["name"] = toml::Value::String("worldd_broken_tool".into());
        manifest["dependencies"]["handler-kit"]["path"] =
            toml::Value::String(root.join("handler-kit").display().to_string());
        write_if_changed(
            &copy.join("Cargo.toml"),
            toml::to_string(&manifest).unwrap().as_bytes(),
        );
        let say = std::fs::read_to_string(echo.join("transitions/echo-say.json")).unwrap();
        let broken = say.replacen(r#""id": "echo-say""#, r#""id": "echo say""#, 1);
        assert_ne!(
            broken, say,
            "echo-say.json has no \"id\": \"echo-say\" to break"
        );
        write_if_changed(&copy.join("transitions/echo-say.json"), broken.as_bytes());
        share_echo_lock(&copy);
        cargo_build(&copy.join("Cargo.toml"), "worldd_broken_tool")
    })
}

/// The test stand-in for the `ailang` binary (`tests/ailang-standin/ailang`).
pub fn ailang_standin() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/ailang-standin/ailang")
        .canonicalize()
        .expect("tests/ailang-standin/ailang exists")
}

/// A program the stand-in runs as itself: it prints `hello from pi`.
pub const AILANG_HELLO: &str = "module hello\n\nimport std/io (println)\n\nexport func main() -> () ! {IO} {\n  println(\"hello from pi\")\n}\n";

/// Start `worldd call ailang-run` of episode `episode`'s `hang.ail` (the stand-in's `hang`
/// mode: it writes `./hang.pids` and sleeps past the call's deadline), under idempotency key
/// `h1` and the credential `token`, and return once its program runs: a call the daemon is
/// still running. The caller waits for or kills the returned `worldd call`.
pub fn start_a_hanging_run(d: &super::Daemon, episode: &str, token: &str) -> std::process::Child {
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};
    let wt = d.root().join(episode);
    std::fs::write(
        wt.join("hang.ail"),
        format!("-- standin: hang\n{AILANG_HELLO}"),
    )
    .unwrap();
    let file = d.session_file(episode, token);
    let caller = Command::new(super::WORLDD)
        .args([
            "call",
            "ailang-run",
            "--arg",
            "path=hang.ail",
            "--idempotency-key",
            "h1",
        ])
        .args(["--addr", &d.url(""), "--session"])
        .arg(&file)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(30);
    while !wt.join("hang.pids").exists() {
        assert!(Instant::now() < until, "the call never started its program");
        std::thread::sleep(Duration::from_millis(50));
    }
    caller
}
