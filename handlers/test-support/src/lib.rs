//! Test helpers shared by worldd's plugin crates (`handlers/*`): finding the
//! built plugin library, the `tool` ref a library must report, loading and
//! planning a shipped transition document with the broker's own code, a host
//! that keeps what a plugin logs, and an atomic exchange of two names for races.
//!
//! A dev-dependency only: nothing here is compiled into a plugin.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use broker_core::plan::Plan;
use broker_core::transition::Transition;
use handler_api::{HostServices, LogLevel};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// `target/<profile>/lib<lib_name>.so` (the platform's prefix and suffix),
/// found from the running test executable (`target/<profile>/deps/<test>-<hash>`).
/// Cargo builds a crate's cdylib together with the rlib its integration tests
/// link, so it is always there and current.
pub fn built_library(lib_name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let name = format!(
        "{}{lib_name}{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    );
    [deps.join(&name), deps.parent().unwrap().join(&name)]
        .into_iter()
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("{name} not found next to {}", deps.display()))
}

/// Lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The `tool` ref a plugin loaded from `library` must stamp: `sha256:` + the
/// hex SHA-256 of the file's bytes.
pub fn file_tool_ref(library: &Path) -> String {
    format!("sha256:{}", sha256_hex(&std::fs::read(library).unwrap()))
}

/// The transition document `transitions/<relative>` of this repository,
/// loaded with the broker's validator, after checking that `embedded` (the
/// copy the plugin ships, `include_str!`) is byte for byte the same file.
pub fn shipped_document(relative: &str, embedded: &str) -> Transition {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../transitions")
        .join(relative);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(bytes, embedded.as_bytes(), "the embedded copy is current");
    Transition::from_slice(&bytes).unwrap_or_else(|e| panic!("{e}"))
}

/// The payload `transition` plans for `args`, after checking that the plan
/// is one `worktree` effect named `effect`, cost 1, with no finish step
/// (panics on a refusal).
pub fn planned_payload(transition: &Transition, args: &Value, effect: &str) -> Value {
    match transition.plan_call(args) {
        Plan::Effect {
            effect: planned,
            finish,
        } => {
            assert!(!finish);
            assert_eq!(
                (
                    planned.effect.as_str(),
                    planned.scope.as_str(),
                    planned.cost
                ),
                (effect, "worktree", 1)
            );
            Value::Object(planned.payload)
        }
        Plan::Refused { message } => panic!("refused: {message}"),
    }
}

/// The refusal `transition` plans for `args` (panics when it plans an effect).
pub fn planned_refusal(transition: &Transition, args: &Value) -> String {
    transition
        .plan_call(args)
        .refusal()
        .unwrap_or_else(|| panic!("{args} was not refused"))
        .to_string()
}

/// A host that keeps every line a plugin logs, as `level: message` (`warn: …`);
/// hand it to `Host::from_services` or `host_callbacks` in an `Arc`.
#[derive(Default)]
pub struct LogLines(Mutex<Vec<String>>);

impl LogLines {
    /// Every line logged so far, in order.
    pub fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl HostServices for LogLines {
    fn log(&self, level: LogLevel, message: &str) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(format!("{}: {message}", level.as_str()));
    }
}

/// Atomically exchange two names (`renameat2(RENAME_EXCHANGE)`), so that there is never a
/// moment without either: a second process racing a plugin that resolves or opens one of them.
pub fn exchange(a: &Path, b: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let a = std::ffi::CString::new(a.as_os_str().as_bytes()).unwrap();
    let b = std::ffi::CString::new(b.as_os_str().as_bytes()).unwrap();
    // SAFETY: two valid NUL-terminated paths; AT_FDCWD-relative (absolute).
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    assert_eq!(rc, 0, "renameat2: {}", std::io::Error::last_os_error());
}
