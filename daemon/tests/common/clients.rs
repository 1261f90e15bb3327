//! The real agent clients the end-to-end tests drive, installed by the tests themselves into
//! caches under `target/`, so that `cargo test --workspace` needs nothing installed by hand:
//!
//! - **Python**: a virtual environment built from the pinned `tests/python/requirements.txt`
//!   with the venv's own pip (never the system's pip, which Debian refuses:
//!   "externally-managed-environment"). It lives in `target/test-clients/python-<hash>`, keyed by
//!   the hash of the requirements and the interpreter, so changing either builds a new one.
//! - **Node**: the pinned `@modelcontextprotocol/sdk` (`tests/node/package-lock.json`) installed
//!   with `npm ci` into `target/test-clients/node-<hash>`.
//!
//! Several test binaries may race to build the same cache: the builder holds an exclusive
//! `flock` on `<cache>.lock` and writes a `.ready` marker last; a cache without its marker is
//! a build that died and is started again.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use sha2::{Digest, Sha256};

use super::repo_root;

/// Set (to anything but `0`) by `.ci/run`: a test that needs Node fails instead of skipping.
pub const REQUIRE_NODE_ENV: &str = "WORLDD_TESTS_REQUIRE_NODE";

fn cache_root() -> PathBuf {
    super::target_dir().parent().unwrap().join("test-clients")
}

fn short_hash(parts: &[&[u8]]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_be_bytes());
        h.update(p);
    }
    hex::encode(&h.finalize()[..8])
}

/// Holds `<dir>.lock` exclusively until dropped.
struct BuildLock(std::fs::File);

impl BuildLock {
    fn take(dir: &Path) -> BuildLock {
        use std::os::fd::AsRawFd;
        std::fs::create_dir_all(dir.parent().unwrap()).unwrap();
        let path = dir.with_extension("lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        // SAFETY: flock on a descriptor this value owns; it is released when the file closes.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
        assert_eq!(
            rc,
            0,
            "flock {}: {}",
            path.display(),
            std::io::Error::last_os_error()
        );
        BuildLock(file)
    }
}

/// Build `dir` with `build` unless a finished build is there; safe across processes.
fn cached(dir: &Path, build: impl FnOnce(&Path) -> Result<(), String>) -> Result<(), String> {
    let ready = dir.join(".ready");
    if ready.exists() {
        return Ok(());
    }
    let _lock = BuildLock::take(dir);
    if ready.exists() {
        return Ok(());
    }
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    build(dir)?;
    std::fs::write(&ready, b"").map_err(|e| format!("{}: {e}", ready.display()))
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd:?} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// The interpreters worth trying, in order: `$WORLDD_TEST_PYTHON`, `python3` on `PATH`, and
/// the distribution's `/usr/bin/python3`. The first that can build a venv is used.
fn interpreters() -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(p) = std::env::var("WORLDD_TEST_PYTHON") {
        out.push(p);
    }
    out.push("python3".into());
    if Path::new("/usr/bin/python3").exists() {
        out.push("/usr/bin/python3".into());
    }
    out
}

/// `sys.executable` and version of an interpreter, or `None` when it does not run.
fn identify(python: &str) -> Option<String> {
    let out = Command::new(python)
        .args(["-c", "import sys; print(sys.executable, sys.version)"])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn build_venv(python: &str, dir: &Path, requirements: &Path) -> Result<(), String> {
    run(Command::new(python).args(["-m", "venv"]).arg(dir))?;
    run(Command::new(dir.join("bin/python"))
        .args([
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--no-input",
            "--quiet",
            "-r",
        ])
        .arg(requirements))
}

/// The `bin/` directory of a venv holding the pinned Python clients, built on first use.
/// Panics with what to install when no interpreter can build one.
pub fn python_bin() -> PathBuf {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BIN.get_or_init(|| {
        let requirements = repo_root().join("tests/python/requirements.txt");
        let pinned =
            std::fs::read(&requirements).map_err(|e| format!("{}: {e}", requirements.display()))?;
        let mut failures = Vec::new();
        for python in interpreters() {
            let Some(identity) = identify(&python) else {
                failures.push(format!("{python}: does not run"));
                continue;
            };
            let dir = cache_root().join(format!(
                "python-{}",
                short_hash(&[&pinned, identity.as_bytes()])
            ));
            match cached(&dir, |d| build_venv(&python, d, &requirements)) {
                Ok(()) => return Ok(dir.join("bin")),
                Err(e) => failures.push(format!("{python} ({identity}): {e}")),
            }
        }
        Err(format!(
            "no Python 3 could build the test clients' virtual environment. Install Python 3 with \
             its venv module (Debian: apt-get install python3-venv), or point WORLDD_TEST_PYTHON \
             at an interpreter that has it.\n{}",
            failures.join("\n")
        ))
    })
    .clone()
    .unwrap_or_else(|e| panic!("{e}"))
}

/// The venv's interpreter.
pub fn python() -> PathBuf {
    python_bin().join("python")
}

/// Whether a missing Node must fail the test (CI) rather than skip it (a developer's machine).
pub fn node_required() -> bool {
    std::env::var(REQUIRE_NODE_ENV).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// `node_modules` holding the pinned MCP TypeScript SDK, built on first use with `npm ci`.
/// `None` (after a loud message on stderr) when node or npm is missing and CI does not
/// require them; a panic when it does, or when the install itself fails.
pub fn node_modules() -> Option<PathBuf> {
    static MODULES: OnceLock<Result<Option<PathBuf>, String>> = OnceLock::new();
    MODULES
        .get_or_init(|| {
            let has = |tool: &str| {
                Command::new(tool)
                    .arg("--version")
                    .output()
                    .is_ok_and(|o| o.status.success())
            };
            if !has("node") || !has("npm") {
                let what = "node and npm are needed for the TypeScript SDK tests";
                if node_required() {
                    return Err(format!("{what}, and {REQUIRE_NODE_ENV} is set"));
                }
                eprintln!(
                    "\n*** SKIPPED: {what} and are not on PATH; CI sets {REQUIRE_NODE_ENV}=1, \
                     which turns this skip into a failure ***\n"
                );
                return Ok(None);
            }
            let src = repo_root().join("tests/node");
            let manifest = std::fs::read(src.join("package.json")).map_err(|e| e.to_string())?;
            let lock = std::fs::read(src.join("package-lock.json")).map_err(|e| e.to_string())?;
            let dir = cache_root().join(format!("node-{}", short_hash(&[&manifest, &lock])));
            cached(&dir, |d| {
                std::fs::write(d.join("package.json"), &manifest).map_err(|e| e.to_string())?;
                std::fs::write(d.join("package-lock.json"), &lock).map_err(|e| e.to_string())?;
                run(Command::new("npm")
                    .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
                    .current_dir(d))
            })?;
            Ok(Some(dir.join("node_modules")))
        })
        .clone()
        .unwrap_or_else(|e| panic!("{e}"))
}
