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

/// `cargo build --manifest-path MANIFEST --target-dir <target>/fixtures`; returns the cdylib.
pub fn cargo_build(manifest: &Path, lib: &str) -> PathBuf {
    let _one_at_a_time = BUILD.lock().unwrap_or_else(|p| p.into_inner());
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
    let target = fixtures_target();
    let started = Instant::now();
    let out = Command::new(cargo)
        .arg("build")
        .arg("--manifest-path")
        .arg(manifest)
        .arg("--target-dir")
        .arg(&target)
        .env("CARGO_TERM_COLOR", "never")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET_DIR")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cargo build --manifest-path {} failed:\n{}",
        manifest.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!(
        "built fixture {} in {:.1}s",
        manifest.display(),
        started.elapsed().as_secs_f64()
    );
    let path = target.join("debug").join(library_file(lib));
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
