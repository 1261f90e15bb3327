//! `POST /v1/commit` checked the operator's credential and its commit grant only when the
//! request head arrived; its body may trickle in for up to `[server] body_timeout_ms`. A
//! credential revoked, or a grant expired, while the body came still committed and spent. Each
//! test is named for the attack it repels.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use common::*;
use serde_json::{json, Value};
use sha2::Digest;

/// Bodies may take 20 s: long enough to revoke, or to outlive a grant, while one arrives.
const SLOW_BODIES: &str = "[server]\nbody_timeout_ms = 20000\n";

fn start() -> (Daemon, tempfile::TempDir) {
    let conf_dir = tempfile::tempdir().unwrap();
    let path = conf_dir.path().join("world.toml");
    std::fs::write(&path, SLOW_BODIES).unwrap();
    (Daemon::start(&[], &["--config", path_str(&path)]), conf_dir)
}

fn sha(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)))
}

fn canon(v: &Value) -> Vec<u8> {
    broker_core::canon::to_vec(v).unwrap()
}

fn object_json(payload: &[u8], semantic_id: &str) -> Value {
    json!({"hash": sha(payload), "interfaceHash": sha(semantic_id.as_bytes()),
           "semanticId": semantic_id, "provenance": "rest:test",
           "payload": base64::engine::general_purpose::STANDARD.encode(payload)})
}

/// A valid commit of a note on the daemon's current head, journaled as `invocation_id`.
fn note_commit(d: &Daemon, token: &str, invocation_id: &str) -> Vec<u8> {
    let head = get(&d.url("/v1/head"), Some(token)).text();
    let world0 = get(&d.url(&format!("/v1/worlds/{head}")), Some(token)).json();
    let index = world0["revision"].as_u64().unwrap() + 1;
    let out = br#"{"note":"late"}"#.to_vec();
    let rec = br#"{"record":"late"}"#.to_vec();
    let fields = json!({
        "entryIndex": index, "semanticsEpoch": 1, "transitionFn": sha(b"fn"),
        "interpreter": sha(b"interp"), "prevEntryHash": world0["logHead"],
        "writtenBy": "rest:ops", "transitionRef": sha(&rec),
    });
    let entry_hash = sha(&canon(&fields));
    let world = json!({"revision": index, "stateRoot": sha(&out), "logHead": entry_hash});
    let mut header = fields.clone();
    header.as_object_mut().unwrap().remove("transitionRef");
    json!({
        "invocationId": invocation_id,
        "observedHead": head,
        "objects": [object_json(&out, "world/note/v1"), object_json(&rec, "world/note-record/v1")],
        "nextWorld": {"ref": sha(&canon(&world)), "revision": index, "stateRoot": sha(&out),
                      "logHead": entry_hash},
        "entry": {"header": header, "entryHash": entry_hash, "transitionRef": sha(&rec)},
    })
    .to_string()
    .into_bytes()
}

/// A connection that sent a commit's head with `token` and the first half of `body`; the
/// rest is for [`finish`]. Waits a moment, so that the daemon has checked the head.
fn half_sent(d: &Daemon, token: &str, body: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect(&d.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let head = format!(
        "POST /v1/commit HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        d.addr,
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(&body[..body.len() / 2]).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    s
}

/// Send the rest of `body` and read the answer.
fn finish(mut s: TcpStream, body: &[u8]) -> Answer {
    s.write_all(&body[body.len() / 2..]).unwrap();
    let (head, answer) = read_one_answer(&mut s);
    answer_of(&head, answer)
}

/// The `World.Commit=log` units episode `ops` has spent, read from the store.
fn spent(d: &Daemon) -> u64 {
    let store = broker_core::store::Store::open(&d.db(), Default::default()).unwrap();
    store
        .read(|r| broker_core::journal::spent(r, "ops"))
        .unwrap()
        .get(&("World.Commit".to_owned(), "log".to_owned()))
        .copied()
        .unwrap_or(0)
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// Attack: an operator credential, leaked, is revoked with `worldd session revoke` while a
/// commit sent with it is still sending its body. The commit was made and spent a unit all
/// the same. Now it is answered as a revoked credential is, and nothing moves.
#[test]
fn a_commit_whose_credential_is_revoked_while_its_body_trickles_in_commits_nothing() {
    let (d, _conf) = start();
    let operator = d.operator_session("ops", &["World.Commit=log:5"]);
    let reader = d.session("watcher", &["Workspace.Read=worktree:5"]);
    let body = note_commit(&d, &operator, "rest:late");
    let before = get(&d.url("/v1/head"), Some(&reader)).text();
    let s = half_sent(&d, &operator, &body);
    d.revoke_by_cli(&operator);
    let a = finish(s, &body);
    assert_eq!(
        (a.status, a.json()),
        (
            401,
            json!({"error": {"class": "SessionUnknown", "message": "unknown session credential"}})
        )
    );
    assert_eq!(get(&d.url("/v1/head"), Some(&reader)).text(), before);
    assert_eq!(spent(&d), 0);
    let refused = get(&d.url("/v1/metrics"), None).text();
    assert!(
        refused.contains("worldd_commits_total{result=\"unauthenticated\"} 1\n"),
        "{refused}"
    );
}

/// Attack: a commit is sent with an operator credential about to expire, and its body held
/// back until the commit grant is no longer live. It committed on the grant checked at its
/// head. Now it gets the answer an expired grant gets at the head, and nothing moves.
#[test]
fn a_commit_whose_grant_expires_while_its_body_trickles_in_commits_nothing() {
    let (d, _conf) = start();
    let reader = d.session("watcher", &["Workspace.Read=worktree:5"]);
    // Live for 5 s: long enough to read the head and send the request's head.
    let minted = {
        let store = broker_core::store::Store::open(&d.db(), Default::default()).unwrap();
        let grant = "World.Commit=log:5".parse().unwrap();
        broker_core::session::mint_operator(&store, "ops", vec![grant], 5, now()).unwrap()
    };
    let operator = minted.token;
    let body = note_commit(&d, &operator, "rest:late");
    let before = get(&d.url("/v1/head"), Some(&reader)).text();
    let s = half_sent(&d, &operator, &body);
    // Else the head itself met an expired grant, and the answer below would prove nothing.
    assert!(
        now() < minted.session.expires_at,
        "the request's head was sent too late to test anything"
    );
    // Its grants are live while now < expiresAt; the credential is still valid at that second.
    while now() < minted.session.expires_at {
        std::thread::sleep(Duration::from_millis(100));
    }
    let a = finish(s, &body);
    assert_eq!(
        (a.status, a.json()),
        (
            403,
            json!({"error": {"class": "Forbidden", "message":
                "denied:expired: the World.Commit=log grant is not live"}})
        )
    );
    assert_eq!(get(&d.url("/v1/head"), Some(&reader)).text(), before);
    assert_eq!(spent(&d), 0);
}
