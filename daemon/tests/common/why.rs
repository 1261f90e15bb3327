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

/// A table of a closed store, as LMDB holds it.
pub type Table = heed::Database<'static, heed::types::Bytes, heed::types::Bytes>;

/// A stopped store in which episode `ep1` read `a.txt` as tasks `r1`..`rN` over A2A (entries
/// 1..N), and the directory that keeps it.
pub fn reads_then_stopped(n: u32) -> (tempfile::TempDir, PathBuf) {
    let d = Daemon::start(&["worldd_workspace"], &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:9"]);
    std::fs::write(d.root().join("ep1/a.txt"), "alpha").unwrap();
    for i in 1..=n {
        super::a2a(
            &d,
            &token,
            &format!("r{i}"),
            "ailang-read",
            serde_json::json!({"path": "a.txt"}),
        );
    }
    let kept = d.halt();
    let db = kept.path().join("db");
    (kept, db)
}

/// Change table `name` of the closed store at `db` in one write transaction (as a bad
/// restore, a byte-level repair or a tamper leaves it).
pub fn tamper(db: &Path, name: &str, change: impl FnOnce(&mut heed::RwTxn, Table)) {
    // SAFETY: no store handle is open on `db` in this process while this one is, and the
    // daemon that wrote it has stopped.
    let env = unsafe { heed::EnvOpenOptions::new().max_dbs(32).open(db).unwrap() };
    let table: Table = env
        .create_databases_and_commit(env.write_txn().unwrap(), |dbo, wtxn| {
            dbo.create_database(wtxn, Some(name))
                .map(heed::CommitOrAbort::<_, ()>::Commit)
        })
        .unwrap()
        .unwrap_commit();
    let mut wtxn = env.write_txn().unwrap();
    change(&mut wtxn, table);
    wtxn.commit().unwrap();
    env.prepare_for_closing().wait();
}
