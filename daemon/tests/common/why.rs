//! What the tests of `worldd why` against a real daemon share: addresses computed as the
//! daemon computes them, credential files, and the verbs run as a user runs them.

use std::path::{Path, PathBuf};

use serde_json::Value;
use sha2::Digest;

use super::{path_str, worldd, Daemon};

/// `sha256:` and the hex digest of `bytes`: an object's address.
pub fn sha(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)))
}

/// `v` in canonical JSON, the bytes an address is taken of.
pub fn canon(v: &Value) -> Vec<u8> {
    broker_core::canon::to_vec(v).unwrap()
}

/// The base64 the REST routes carry payloads in.
pub fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

/// A credential in a file, as an agent keeps it.
pub fn session_file(dir: &Path, name: &str, token: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let file = dir.join(name);
    std::fs::write(&file, format!("{token}\n")).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    file
}

/// `worldd why --addr URL --session FILE ARGS`.
pub fn online(
    addr: &str,
    session: &Path,
    args: &[&str],
    stdin: Option<&[u8]>,
) -> (i32, String, String) {
    let url = format!("http://{addr}");
    let mut all = vec!["why", "--addr", &url, "--session", path_str(session)];
    all.extend_from_slice(args);
    worldd(&all, stdin)
}

/// `worldd call TOOL --arg … --json-out`: the committed output bytes (and a newline).
pub fn call_json_out(d: &Daemon, session: &Path, tool: &str, args: &[&str]) -> Vec<u8> {
    let addr = d.url("");
    let mut all = vec![
        "call",
        tool,
        "--json-out",
        "--addr",
        &addr,
        "--session",
        path_str(session),
    ];
    for a in args {
        all.extend(["--arg", a]);
    }
    let (code, out, err) = worldd(&all, None);
    assert_eq!(code, 0, "{out}{err}");
    out.into_bytes()
}
