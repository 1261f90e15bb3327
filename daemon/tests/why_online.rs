//! `worldd why --addr` against the real binary and a real daemon: the same walk as offline, over
//! the REST routes, with every answer checked against its address. A small proxy in front of
//! the daemon plays a daemon that lies; each lie is a test named for it.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;

use base64::Engine;
use common::why::{b64, call_json_out, canon, online, session_file, sha};
use common::*;
use serde_json::{json, Value};

const WS: &[&str] = &["worldd_workspace"];

/// `worldd why` offline on the daemon's store.
fn offline(d: &Daemon, args: &[&str], stdin: Option<&[u8]>) -> (i32, String, String) {
    let db = d.db();
    let mut all = vec!["why", "--db", path_str(&db)];
    all.extend_from_slice(args);
    worldd(&all, stdin)
}

fn payload(d: &Daemon, token: &str, reference: &str) -> Value {
    let o = get(
        &d.url(&format!("/v1/objects/{reference}?payload=true")),
        Some(token),
    )
    .json();
    serde_json::from_slice(&b64().decode(o["payload"].as_str().unwrap()).unwrap()).unwrap()
}

fn entry(d: &Daemon, token: &str, index: u64) -> Value {
    get(&d.url(&format!("/v1/log/{index}")), Some(token)).json()
}

/// An operator's opaque commit (a note) on the current head; returns its entry index.
fn note_commit(d: &Daemon, operator: &str, tag: &str) -> u64 {
    let out = format!(r#"{{"note":"{tag}"}}"#).into_bytes();
    let rec = format!(r#"{{"record":"{tag}"}}"#).into_bytes();
    let head = get(&d.url("/v1/head"), Some(operator)).text();
    let world0 = get(&d.url(&format!("/v1/worlds/{head}")), Some(operator)).json();
    let index = world0["revision"].as_u64().unwrap() + 1;
    let fields = json!({
        "entryIndex": index, "semanticsEpoch": 1, "transitionFn": sha(b"fn"),
        "interpreter": sha(b"interp"), "prevEntryHash": world0["logHead"], "writtenBy": "rest:ops",
        "transitionRef": sha(&rec),
    });
    let entry_hash = sha(&canon(&fields));
    let world = json!({"revision": index, "stateRoot": sha(&out), "logHead": entry_hash});
    let mut header = fields.clone();
    header.as_object_mut().unwrap().remove("transitionRef");
    let object = |p: &[u8], s: &str| {
        json!({"hash": sha(p), "interfaceHash": sha(s.as_bytes()), "semanticId": s,
               "provenance": "rest:test", "payload": b64().encode(p)})
    };
    let body = json!({
        "observedHead": head,
        "objects": [object(&out, "world/note/v1"), object(&rec, "world/note-record/v1")],
        "nextWorld": {"ref": sha(&canon(&world)), "revision": index, "stateRoot": sha(&out),
                      "logHead": entry_hash},
        "entry": {"header": header, "entryHash": entry_hash, "transitionRef": sha(&rec)},
    });
    let a = post_json(&d.url("/v1/commit"), Some(operator), &body);
    assert_eq!(a.status, 200, "{}", a.text());
    index
}

/// Offline and online agree: same exit code, byte-identical stdout, and stderr identical but
/// for naming what was verified, and for the warning a store gives when opened with
/// indeterminate intents (a daemon gives it in its own log).
fn assert_agree(d: &Daemon, session: &Path, args: &[&str], stdin: Option<&[u8]>) -> (i32, String) {
    let (code, out, err) = offline(d, args, stdin);
    let err: String = err
        .split_inclusive('\n')
        .filter(|l| !l.contains(" WARN ") || !l.contains("indeterminate effect(s)"))
        .collect();
    let (code2, out2, err2) = online(&d.addr, session, args, stdin);
    let err2 = err2.replace(
        &format!("what the daemon at http://{} serves", d.addr),
        "what the store holds",
    );
    assert_eq!(
        (code, &out, &err),
        (code2, &out2, &err2),
        "why {args:?}: offline (left) and online (right) disagree"
    );
    (code, out)
}

// -------------------------------------------------------------------------------------------
// The same answer from the store and from the daemon.

#[test]
fn online_and_offline_why_agree_on_every_handle_kind() {
    let d = Daemon::start(WS, &[]);
    let agent_token = d.session(
        "ep1",
        &["Workspace.Read=worktree:1", "Workspace.Write=worktree:5"],
    );
    let ops_token = d.operator_session("ops", &["World.Commit=log:5"]);
    let agent = session_file(d.dir.path(), "agent.session", &agent_token);
    let ops = session_file(d.dir.path(), "ops.session", &ops_token);

    // A write, a read (its result bytes kept), a refusal, an operator's note, then a read
    // its budget denies: every kind of entry, the note not at the head.
    call_json_out(&d, &agent, "ailang-write", &["path=a.txt", "content=alpha"]);
    let result = call_json_out(&d, &agent, "ailang-read", &["path=a.txt"]);
    let refused = a2a(&d, &agent_token, "r1", "ailang-read", json!({"nope": 1}));
    assert_eq!(
        refused["result"]["status"]["state"], "completed",
        "{refused}"
    );
    let note = note_commit(&d, &ops_token, "n1");
    let denied = a2a(
        &d,
        &agent_token,
        "r2",
        "ailang-read",
        json!({"path": "a.txt"}),
    );
    let denied_at = denied["result"]["metadata"]["entry_index"]
        .as_u64()
        .unwrap();
    assert_eq!(denied_at, note + 1, "{denied}");
    let denied_out = &denied["result"]["artifacts"][0]["parts"][0]["data"];
    assert_eq!(
        denied_out["world"]["effects"][0]["status"], "denied",
        "{denied}"
    );

    let out: Value = serde_json::from_slice(&result).unwrap();
    let read_at = 2;
    let read_entry = entry(&d, &agent_token, read_at);
    let record_ref = read_entry["transitionRef"].as_str().unwrap().to_owned();
    let record = payload(&d, &agent_token, &record_ref);
    let world_ref = {
        let world = json!({"revision": read_at, "stateRoot": record["output"],
                           "logHead": read_entry["entryHash"]});
        sha(&canon(&world))
    };
    let result_handles: Vec<(String, String)> = vec![
        ("output ref".into(), sha(&result[..result.len() - 1])),
        (
            "world.plan".into(),
            out["world"]["plan"].as_str().unwrap().into(),
        ),
        (
            "world.effects[].record".into(),
            out["world"]["effects"][0]["record"]
                .as_str()
                .unwrap()
                .into(),
        ),
        (
            "tool (a plugin library)".into(),
            out["tool"].as_str().unwrap().into(),
        ),
        ("record".into(), record_ref.clone()),
        ("input".into(), record["input"].as_str().unwrap().into()),
        ("world".into(), world_ref),
        (
            "entry hash".into(),
            read_entry["entryHash"].as_str().unwrap().into(),
        ),
        (
            "invocation id".into(),
            record["invocationId"].as_str().unwrap().into(),
        ),
        ("head".into(), "head".into()),
    ];

    // The agent verifies its own calls online exactly as the store verifies them.
    let mut verified = 0;
    for (what, handle) in &result_handles {
        for json in [false, true] {
            let mut args = vec![handle.as_str()];
            if json {
                args.push("--json");
            }
            let (code, out) = assert_agree(&d, &agent, &args, None);
            match what.as_str() {
                // The library's sha256 is in no record: not found in both modes.
                "tool (a plugin library)" => assert_eq!(code, 1, "{what}"),
                _ => {
                    assert_eq!(code, 0, "{what}: {out}");
                    verified += 1;
                }
            }
        }
    }
    assert_eq!(verified, 18);
    for json in [false, true] {
        let args: &[&str] = if json { &["--json", "-"] } else { &["-"] };
        let (code, out) = assert_agree(&d, &agent, args, Some(&result));
        assert_eq!(code, 0, "{out}");
        if !json {
            assert!(
                out.starts_with("why: entry 2 (matched by output (sha256 of the result))\n"),
                "{out}"
            );
            assert!(out.ends_with("all 10 link(s) verified\n"), "{out}");
        }
    }
    for index in [0, 1, 2, 3, denied_at] {
        let (code, out) = assert_agree(&d, &agent, &[&index.to_string()], None);
        assert_eq!(code, 0, "entry {index}: {out}");
    }
    let (code, out) = assert_agree(&d, &agent, &["999"], None);
    assert_eq!((code, out.as_str()), (1, ""));

    // The operator reads every entry, the note (a client commit below the head) included:
    // its world is found through GET /v1/log/{i}/world, as offline through the world index.
    for index in 0..=denied_at {
        for json in [false, true] {
            let i = index.to_string();
            let args: Vec<&str> = if json { vec![&i, "--json"] } else { vec![&i] };
            let (code, out) = assert_agree(&d, &ops, &args, None);
            assert_eq!(code, 0, "entry {index}: {out}");
        }
    }
    let (_, out) = assert_agree(&d, &ops, &[&note.to_string()], None);
    assert!(
        out.contains("\n  ✓ record  ")
            && out.contains("client commit by rest:ops: world/note-record/v1"),
        "{out}"
    );
    assert!(out.ends_with("all 4 link(s) verified\n"), "{out}");
}

// -------------------------------------------------------------------------------------------
// A daemon that lies.

/// What the proxy changes in one route's answer.
#[derive(Clone)]
enum Lie {
    /// One byte of the object's payload.
    ObjectPayload(String),
    /// The object answer names another ref than the one asked for.
    ObjectHash(String),
    /// One hex digit of the world's `stateRoot`.
    World(String),
    /// One hex digit of the entry's `transitionRef`.
    Entry(u64),
    /// One hex digit of `outputRef` in the task state of the served resolution row.
    TaskRow(String),
    /// The served rows without the resolution: the call as its intent left it.
    NoResolution(String),
    /// The route is unknown, as on a daemon older than the route.
    NoRoute(String),
}

impl Lie {
    fn path(&self) -> String {
        match self {
            Lie::ObjectPayload(r) | Lie::ObjectHash(r) => format!("/v1/objects/{r}?payload=true"),
            Lie::World(r) => format!("/v1/worlds/{r}"),
            Lie::Entry(i) => format!("/v1/log/{i}"),
            Lie::TaskRow(id) | Lie::NoResolution(id) | Lie::NoRoute(id) => {
                format!("/v1/invocations/{id}/rows")
            }
        }
    }

    /// The lie told in `body` (the route's JSON answer), or a whole new answer.
    fn tell(&self, body: &[u8]) -> (u16, Vec<u8>) {
        let mut v: Value = serde_json::from_slice(body).unwrap();
        match self {
            Lie::ObjectPayload(_) => {
                let mut p = b64().decode(v["payload"].as_str().unwrap()).unwrap();
                let last = p.len() - 1;
                p[last] ^= 0x01;
                v["payload"] = json!(b64().encode(&p));
            }
            Lie::ObjectHash(_) => v["hash"] = json!(sha(b"another object")),
            Lie::World(_) => v["stateRoot"] = json!(flip_hex(v["stateRoot"].as_str().unwrap())),
            Lie::Entry(_) => {
                v["transitionRef"] = json!(flip_hex(v["transitionRef"].as_str().unwrap()))
            }
            Lie::TaskRow(_) => {
                // A committed call's task state is in its intent's resolution.
                let row = b64().decode(v["resolution"].as_str().unwrap()).unwrap();
                let (intent, journal, task) = row_parts(&row);
                let mut task: Value = serde_json::from_slice(&task.unwrap()).unwrap();
                task["outputRef"] = json!(flip_hex(task["outputRef"].as_str().unwrap()));
                let lied = row_of(intent, journal.as_deref(), Some(&canon(&task)));
                v["resolution"] = json!(b64().encode(lied));
            }
            Lie::NoResolution(_) => v["resolution"] = Value::Null,
            Lie::NoRoute(_) => {
                let path = self.path();
                return (
                    404,
                    serde_json::to_vec(&json!({"error": {"class": "NotFound",
                        "message": format!("no route for GET {path}; worldd serves …")}}))
                    .unwrap(),
                );
            }
        }
        (200, serde_json::to_vec(&v).unwrap())
    }
}

/// An invocation or resolution row's parts (`docs/data-model.md` §8.2): `u64 BE intent
/// sequence (0: none) | u32 BE journal length (u32::MAX: none) | journal | task`.
fn row_parts(row: &[u8]) -> (u64, Option<Vec<u8>>, Option<Vec<u8>>) {
    let intent = u64::from_be_bytes(row[..8].try_into().unwrap());
    let len = u32::from_be_bytes(row[8..12].try_into().unwrap());
    let (journal, task) = if len == u32::MAX {
        (None, &row[12..])
    } else {
        let len = len as usize;
        (Some(row[12..12 + len].to_vec()), &row[12 + len..])
    };
    (intent, journal, (!task.is_empty()).then(|| task.to_vec()))
}

/// The row [`row_parts`] reads.
fn row_of(intent: u64, journal: Option<&[u8]>, task: Option<&[u8]>) -> Vec<u8> {
    let mut out = intent.to_be_bytes().to_vec();
    let len = journal.map_or(u32::MAX, |j| u32::try_from(j.len()).unwrap());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(journal.unwrap_or_default());
    out.extend_from_slice(task.unwrap_or_default());
    out
}

/// The last hex digit of a ref, changed: one byte.
fn flip_hex(reference: &str) -> String {
    let (head, last) = reference.split_at(reference.len() - 1);
    format!("{head}{}", if last == "0" { "1" } else { "0" })
}

/// A loopback HTTP proxy in front of the daemon that tells one lie and forwards everything
/// else unchanged.
struct LyingProxy {
    addr: String,
}

impl LyingProxy {
    fn start(upstream: &str, lie: Option<Lie>) -> LyingProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let upstream = upstream.to_owned();
        let lie = Arc::new(lie);
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let (upstream, lie) = (upstream.clone(), lie.clone());
                std::thread::spawn(move || {
                    let _ = proxy_one(client, &upstream, lie.as_ref().as_ref());
                });
            }
        });
        LyingProxy { addr }
    }
}

/// One request per connection (a GET, no body): forward it with `Connection: close`, read the
/// whole answer, tell the lie if it is the lie's route, and send it back.
fn proxy_one(mut client: TcpStream, upstream: &str, lie: Option<&Lie>) -> std::io::Result<()> {
    let Some((path, mut server)) = forward_request_head(&mut client, upstream)? else {
        return Ok(());
    };
    let mut answer = Vec::new();
    server.read_to_end(&mut answer)?;
    let split = answer.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let (status_line, headers) = {
        let head = String::from_utf8_lossy(&answer[..split]).into_owned();
        let mut lines = head.lines().map(str::to_owned);
        let status_line = lines.next().unwrap();
        let headers: Vec<String> = lines
            .filter(|l| {
                let l = l.to_ascii_lowercase();
                !l.starts_with("content-length:") && !l.starts_with("connection:")
            })
            .collect();
        (status_line, headers)
    };
    let mut body = answer[split + 4..].to_vec();
    let mut status_line = status_line;
    if let Some(lie) = lie.filter(|l| l.path() == path) {
        let (status, lied) = lie.tell(&body);
        if status != 200 {
            status_line = format!("HTTP/1.1 {status} Not Found");
        }
        body = lied;
    }
    let mut out = format!("{status_line}\r\n");
    for h in headers {
        out.push_str(&h);
        out.push_str("\r\n");
    }
    out.push_str(&format!(
        "content-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    ));
    client.write_all(out.as_bytes())?;
    client.write_all(&body)
}

#[test]
fn online_why_exits_3_when_the_daemon_serves_tampered_bytes() {
    let d = Daemon::start(WS, &[]);
    // A write, whose outcome is always in its intent's resolution (see above).
    let token = d.session("ep1", &["Workspace.Write=worktree:5"]);
    let agent = session_file(d.dir.path(), "agent.session", &token);
    let result = call_json_out(&d, &agent, "ailang-write", &["path=a.txt", "content=alpha"]);
    let e = entry(&d, &token, 1);
    let record = payload(&d, &token, e["transitionRef"].as_str().unwrap());
    let world_ref = get(&d.url("/v1/head"), Some(&token)).text();
    let id = record["invocationId"].as_str().unwrap().to_owned();
    let s = |v: &Value| v.as_str().unwrap().to_owned();

    // The proxy itself is transparent.
    let honest = LyingProxy::start(&d.addr, None);
    let (code, out, err) = online(&honest.addr, &agent, &["1"], None);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.ends_with("all 10 link(s) verified\n"), "{out}");

    let broken_link = "why: 1 of 10 link(s) broken in what the daemon at http://";
    let disagrees = format!("the task state of {id} disagrees with this entry on: output");
    let uncommitted = format!("the coordinator committed {id} at entry none, not at this one");
    let cases: Vec<(Lie, &str, &str)> = vec![
        (
            Lie::ObjectPayload(s(&record["output"])),
            "\n  ✗ output  ",
            "stored bytes hash to sha256:",
        ),
        (
            Lie::ObjectPayload(s(&record["plan"])),
            "\n  ✗ plan    ",
            "stored bytes hash to sha256:",
        ),
        (
            Lie::World(world_ref.clone()),
            "\n  ✗ world   ",
            "stored world bytes hash to sha256:",
        ),
        (Lie::TaskRow(id.clone()), "\n  ✗ journal -  ", &disagrees),
        (
            Lie::NoResolution(id.clone()),
            "\n  ✗ journal -  ",
            &uncommitted,
        ),
    ];
    for (lie, line, detail) in cases {
        let path = lie.path();
        let proxy = LyingProxy::start(&d.addr, Some(lie));
        let (code, out, err) = online(&proxy.addr, &agent, &["1"], None);
        assert_eq!(code, 3, "{path}: {out}{err}");
        let at = out.find(line).unwrap_or_else(|| panic!("{path}: {out}"));
        assert!(
            out[at..].lines().nth(1).unwrap().contains(detail),
            "{path}: {out}"
        );
        assert_eq!(out.matches('✗').count(), 1, "{path}: {out}");
        assert!(err.contains(broken_link), "{path}: {err}");
        assert!(
            err.ends_with(" serves; do not trust this answer\n"),
            "{err}"
        );
    }

    // The head's world, when the handle starts from it: not even an entry to walk.
    let proxy = LyingProxy::start(&d.addr, Some(Lie::World(world_ref.clone())));
    let (code, out, err) = online(&proxy.addr, &agent, &["head"], None);
    assert_eq!((code, out.as_str()), (3, ""), "{err}");
    assert!(
        err.starts_with("worldd: why: the head world's bytes hash to sha256:"),
        "{err}"
    );
    assert!(
        err.ends_with(&format!(
            ", not to the head ref {world_ref}; do not trust this answer\n"
        )),
        "{err}"
    );

    // The entry itself: its hash no longer recomputes, and nothing past it is walked.
    let proxy = LyingProxy::start(&d.addr, Some(Lie::Entry(1)));
    let (code, out, err) = online(&proxy.addr, &agent, &["1"], None);
    assert_eq!(code, 3, "{out}{err}");
    assert!(
        out.contains(&format!(
            "\n  ✗ entry   -  entryHash {} does not match the recomputed sha256:",
            s(&e["entryHash"])
        )),
        "{out}"
    );
    assert!(
        err.contains("why: 1 of 1 link(s) broken in what the daemon at http://"),
        "{err}"
    );

    // The agent's pipe through a daemon that serves a tampered result.
    let proxy = LyingProxy::start(&d.addr, Some(Lie::ObjectPayload(s(&record["output"]))));
    let (code, out, err) = online(&proxy.addr, &agent, &["-"], Some(&result));
    assert_eq!(code, 3, "{out}{err}");
    assert!(out.contains("\n  ✗ output  "), "{out}");

    // An answer for another object than the one asked for is not a broken link but a daemon
    // that does not serve what it claims: exit 3 all the same, saying so.
    let proxy = LyingProxy::start(&d.addr, Some(Lie::ObjectHash(s(&record["input"]))));
    let (code, out, err) = online(&proxy.addr, &agent, &["1"], None);
    assert_eq!(code, 3, "{out}{err}");
    assert!(out.contains("\n  ✗ input   "), "{out}");
    assert!(
        err.contains(&format!(
            "the answer is the object {}, not {}",
            sha(b"another object"),
            s(&record["input"])
        )),
        "{out}{err}"
    );

    // A daemon that predates the rows route: nothing can be verified, and why says so.
    let proxy = LyingProxy::start(&d.addr, Some(Lie::NoRoute(id.clone())));
    let (code, out, err) = online(&proxy.addr, &agent, &["1"], None);
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert_eq!(
        err,
        format!(
            "worldd: why: the daemon at http://{} does not serve GET /v1/invocations/{id}/rows (it is older than this worldd); verify its store with --db instead\n",
            proxy.addr
        )
    );
}

/// One payload byte of a stored object changed while the daemon was stopped: the objects route
/// names the damage (and logs it) instead of serving the changed bytes under the address.
#[test]
fn the_objects_route_does_not_serve_a_tampered_payload_under_its_address() {
    use broker_core::object::Ref;
    use broker_core::store::{RawTable, Store};
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    std::fs::write(d.root().join("ep1/a.txt"), "alpha").unwrap();
    let v = a2a(&d, &token, "r1", "ailang-read", json!({"path": "a.txt"}));
    let at = v["result"]["metadata"]["entry_index"].as_u64().unwrap();
    let record = payload(
        &d,
        &token,
        entry(&d, &token, at)["transitionRef"].as_str().unwrap(),
    );
    let output = record["output"].as_str().unwrap().to_owned();
    let kept = d.halt();
    let key: Ref = output.parse().unwrap();
    {
        let store = Store::open(&kept.path().join("db"), Default::default()).unwrap();
        let mut row = store
            .raw_get(RawTable::Objects, key.as_bytes())
            .unwrap()
            .unwrap();
        *row.last_mut().unwrap() ^= 0x01;
        store
            .raw_overwrite(RawTable::Objects, key.as_bytes().to_vec(), row)
            .unwrap();
    }
    let d = Daemon::start_in(kept, WS, &[]);
    let a = get(
        &d.url(&format!("/v1/objects/{output}?payload=true")),
        Some(&token),
    );
    assert_eq!(a.status, 500, "{}", a.text());
    let body = a.json();
    assert_eq!(body["error"]["class"], "Damaged", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    let said = format!("object {output} is damaged: its stored payload hashes to sha256:");
    assert!(message.starts_with(&said), "{message}");
    assert!(body.get("payload").is_none(), "{body}");
    // Without the payload nothing is vouched for by the address: the labels are served.
    let a = get(&d.url(&format!("/v1/objects/{output}")), Some(&token));
    assert_eq!(a.status, 200, "{}", a.text());
    let (_, log) = d.halt_with_log();
    assert!(log.contains(&said), "{log}");
}

/// `POST /v1/commit` of `record` (a new object; the objects it names already stored) as
/// `writer`, on the current head.
fn commit_record(d: &Daemon, operator: &str, record: &Value, writer: &str) -> Answer {
    let rec = canon(record);
    let head = get(&d.url("/v1/head"), Some(operator)).text();
    let world0 = get(&d.url(&format!("/v1/worlds/{head}")), Some(operator)).json();
    let index = world0["revision"].as_u64().unwrap() + 1;
    let fields = json!({
        "entryIndex": index, "semanticsEpoch": 1, "transitionFn": record["transitionFn"],
        "interpreter": record["interpreter"], "prevEntryHash": world0["logHead"],
        "writtenBy": writer, "transitionRef": sha(&rec),
    });
    let entry_hash = sha(&canon(&fields));
    let world = json!({"revision": index, "stateRoot": record["output"], "logHead": entry_hash});
    let mut header = fields.clone();
    header.as_object_mut().unwrap().remove("transitionRef");
    let s = "world/invocation-record/v2";
    let body = json!({
        "observedHead": head,
        "objects": [{"hash": sha(&rec), "interfaceHash": sha(s.as_bytes()), "semanticId": s,
                     "provenance": "rest:test", "payload": b64().encode(&rec)}],
        "nextWorld": {"ref": sha(&canon(&world)), "revision": index, "stateRoot": record["output"],
                      "logHead": entry_hash},
        "entry": {"header": header, "entryHash": entry_hash, "transitionRef": sha(&rec)},
    });
    post_json(&d.url("/v1/commit"), Some(operator), &body)
}

/// An operator's commit that passes for the coordinator's with lookalike letters or another
/// letter case is refused; one that honestly says it is a client's shows its effect as a claim.
#[test]
fn a_client_commit_of_an_effect_that_never_ran_is_shown_as_claimed_not_verified() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("demo", &["Workspace.Write=worktree:5"]);
    let ops = d.operator_session("ops", &["World.Commit=log:5"]);
    let v = a2a(
        &d,
        &token,
        "w1",
        "ailang-write",
        json!({"path": "a.txt", "content": "alpha"}),
    );
    let at = v["result"]["metadata"]["entry_index"].as_u64().unwrap();
    let genuine = payload(
        &d,
        &token,
        entry(&d, &token, at)["transitionRef"].as_str().unwrap(),
    );
    let with_id = |id: &str| {
        let mut r = genuine.clone();
        r["invocationId"] = json!(id);
        r
    };
    let refused = |a: Answer| {
        assert_eq!(a.status, 400, "{}", a.text());
        a.json()["error"]["message"].as_str().unwrap().to_owned()
    };
    let m = refused(commit_record(
        &d,
        &ops,
        &with_id("rest:x"),
        "coordinat\u{3bf}r:a2a",
    ));
    assert!(
        m.starts_with("invalid commit: writtenBy holds U+03BF, which is not ASCII"),
        "{m}"
    );
    let m = refused(commit_record(
        &d,
        &ops,
        &with_id("m\u{441}p:demo:7f3a9c"),
        "rest:ops",
    ));
    assert!(
        m.starts_with("invalid commit: the record's invocationId holds U+0441, which is not ASCII"),
        "{m}"
    );
    let upper = format!("MCP{}", &genuine["invocationId"].as_str().unwrap()[3..]);
    let m = refused(commit_record(&d, &ops, &with_id(&upper), "rest:ops"));
    assert!(
        m.starts_with(&format!(
            "invalid commit: the record's invocationId {upper:?} is spelled like a daemon's id"
        )),
        "{m}"
    );

    // Said honestly to be a client's: accepted, and its effect is the committer's word.
    let a = commit_record(&d, &ops, &with_id("rest:copy-1"), "rest:ops");
    assert_eq!(a.status, 200, "{}", a.text());
    let copy_at = (at + 1).to_string();
    let (code, out, err) = offline(&d, &[&copy_at], None);
    assert_eq!(code, 0, "{out}{err}");
    let claimed = " (claimed by a client commit, not journaled)\n";
    let effect = out
        .lines()
        .find(|l| l.starts_with("  ? effect  "))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        effect.contains(" e1 allowed Workspace.Write@worktree cost 1 "),
        "{out}"
    );
    assert!(
        out.contains(&format!("{effect}\n")) && effect.ends_with(claimed.trim_end()),
        "{out}"
    );
    let plugin = out
        .lines()
        .find(|l| l.starts_with("  ? plugin  "))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        plugin.ends_with(&format!(" ran e1{}", claimed.trim_end())),
        "{out}"
    );
    assert!(
        !out.contains("✓ effect") && !out.contains("✓ plugin") && !out.contains("all "),
        "{out}"
    );
    assert!(out.ends_with("7 of 9 link(s) verified; 2 only claimed by a client commit, not journaled: nothing shows its effects happened\n"), "{out}");
    let (code, out, _) = offline(&d, &[&copy_at, "--json"], None);
    assert_eq!(code, 0);
    let j: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (&j["verified"], &j["claimed"]),
        (&json!(false), &json!(2)),
        "{j}"
    );
    // Online, the same.
    let ops_file = session_file(d.dir.path(), "ops.session", &ops);
    assert_agree(&d, &ops_file, &[&copy_at], None);
    // The genuine call still verifies in full.
    let (code, out, _) = offline(&d, &[&at.to_string()], None);
    assert_eq!(code, 0);
    assert!(out.ends_with("all 10 link(s) verified\n"), "{out}");

    let (code, out, err) = worldd(&["doctor", "--db", path_str(&d.db())], None);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("\n  ? 1 client commit(s) claim effects that nothing journaled (not verified: the committer's word)\n"), "{out}");
    assert!(
        out.contains(&format!(
            "\n      entry {copy_at}: effect: e1 allowed Workspace.Write@worktree"
        )),
        "{out}"
    );
}

// -------------------------------------------------------------------------------------------
// Forgeries, other episodes, errors.

#[test]
fn online_why_of_a_forged_entry_exits_3_like_offline() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let ops_token = d.operator_session("ops", &[]);
    std::fs::write(d.root().join("ep1/a.txt"), "alpha").unwrap();
    let v = a2a(&d, &token, "r1", "ailang-read", json!({"path": "a.txt"}));
    let genuine_at = v["result"]["metadata"]["entry_index"].as_u64().unwrap();
    let e = entry(&d, &token, genuine_at);
    let record = payload(&d, &token, e["transitionRef"].as_str().unwrap());
    let output_ref = record["output"].as_str().unwrap().to_owned();

    // The coordinator's label on an invented invocation, written into the store directly.
    let kept = d.halt();
    let forged_at = forge_coordinator_entry(&kept.path().join("db"), &e, &record, &output_ref);
    let d = Daemon::start_in(kept, WS, &[]);
    let ops = session_file(d.dir.path(), "ops.session", &ops_token);
    let agent = session_file(d.dir.path(), "agent.session", &token);

    for args in [
        vec![output_ref.as_str()],
        vec![output_ref.as_str(), "--json"],
        vec!["head"],
    ] {
        let (code, out) = assert_agree(&d, &ops, &args, None);
        assert_eq!(code, 3, "{args:?}: {out}");
    }
    let (_, out) = assert_agree(&d, &ops, &[&output_ref], None);
    assert!(
        out.starts_with("why: 2 entries carry this handle; each is verified on its own\n"),
        "{out}"
    );
    assert!(
        out.contains("\n  ✗ journal -  no task state for a2a:ep1:never-happened: the coordinator never committed this invocation\n"),
        "{out}"
    );
    assert!(
        out.ends_with(&format!(
            "✗ entry {forged_at}: 1 of 10 link(s) broken: it is not what it claims\n"
        )),
        "{out}"
    );
    // No episode was granted the forged record: to the agent it is another's, not found,
    // and its own genuine entry still verifies.
    let (code, out, err) = online(&d.addr, &agent, &[&forged_at.to_string()], None);
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert!(
        err.starts_with(&format!(
            "worldd: why: entry {forged_at} not found: the daemon at http://"
        )),
        "{err}"
    );
    let (code, out, err) = online(&d.addr, &agent, &[&output_ref], None);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.starts_with(&format!("why: entry {genuine_at} (matched by output)\n")),
        "{out}"
    );
}

/// The rows a store keeps of an invocation, whatever wrote them: a schema-1 store's calls were
/// migrated into invocation rows with no intent and no resolution; a call made after the
/// migration has both. Online and offline why read both kinds alike, and a rewritten or
/// damaged row is the same broken link through the daemon as in the store.
#[test]
fn online_and_offline_why_agree_on_migrated_and_rewritten_invocation_rows() {
    use broker_core::store::{RawTable, Store};
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    std::fs::create_dir_all(&db).unwrap();
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../broker-core/tests/fixtures/store-v1");
    std::fs::copy(fixture.join("data.mdb"), db.join("data.mdb")).unwrap();
    std::fs::create_dir_all(dir.path().join("worktrees/ep9")).unwrap();
    let d = Daemon::start_in(dir, WS, &[]);
    let ops_token = d.operator_session("ops", &[]);
    // A write, whose outcome is always in its intent's resolution (a read's may be in its row).
    let token = d.session("ep9", &["Workspace.Write=worktree:5"]);
    let v = a2a(
        &d,
        &token,
        "r1",
        "ailang-write",
        json!({"path": "a.txt", "content": "after"}),
    );
    let fresh = v["result"]["metadata"]["entry_index"].as_u64().unwrap();
    assert_eq!(fresh, 14, "{v}");
    let ops = session_file(d.dir.path(), "ops.session", &ops_token);
    for index in 0..=fresh {
        let (code, out) = assert_agree(&d, &ops, &[&index.to_string()], None);
        assert_eq!(code, 0, "entry {index}: {out}");
    }

    // Entry 2 is a schema-1 call: its row names no intent, and nothing resolves it.
    let record = payload(
        &d,
        &ops_token,
        entry(&d, &ops_token, 2)["transitionRef"].as_str().unwrap(),
    );
    let migrated = record["invocationId"].as_str().unwrap().to_owned();
    let rows = get(
        &d.url(&format!("/v1/invocations/{migrated}/rows")),
        Some(&ops_token),
    )
    .json();
    let (intent, journal, task) =
        row_parts(&b64().decode(rows["invocation"].as_str().unwrap()).unwrap());
    assert_eq!((intent, journal.is_some(), task.is_some()), (0, true, true));
    assert_eq!(rows["resolution"], Value::Null);
    // The fresh call's row names its intent, whose resolution holds the outcome.
    let rows = get(&d.url("/v1/invocations/a2a:ep9:r1/rows"), Some(&token)).json();
    let (intent, _, _) = row_parts(&b64().decode(rows["invocation"].as_str().unwrap()).unwrap());
    assert!(intent > 0, "{rows}");
    assert!(rows["resolution"].is_string(), "{rows}");

    // Each call's committed task state moved to another entry, where readers find it (the
    // migrated row itself, the fresh call's resolution); then the fresh call's resolution
    // cut short.
    let kept = d.halt();
    {
        let store = Store::open(&kept.path().join("db"), Default::default()).unwrap();
        for (episode, task) in [
            ("ep1", migrated.splitn(3, ':').nth(2).unwrap()),
            ("ep9", "r1"),
        ] {
            let key = format!("{episode}\0a2a:{task}").into_bytes();
            let mut t: Value =
                serde_json::from_slice(&store.raw_get(RawTable::Tasks, &key).unwrap().unwrap())
                    .unwrap();
            t["entryIndex"] = json!(t["entryIndex"].as_u64().unwrap() + 1);
            store
                .raw_overwrite(RawTable::Tasks, key, canon(&t))
                .unwrap();
        }
    }
    let d = Daemon::start_in(kept, WS, &[]);
    for (index, id) in [(2, migrated.as_str()), (fresh, "a2a:ep9:r1")] {
        let (code, out) = assert_agree(&d, &ops, &[&index.to_string()], None);
        assert_eq!(code, 3, "entry {index}: {out}");
        assert!(
            out.contains(&format!(
                "\n  ✗ journal -  the coordinator committed {id} at entry {}, not at this one\n",
                index + 1
            )),
            "{out}"
        );
    }
    let kept = d.halt();
    let seq = {
        let store = Store::open(&kept.path().join("db"), Default::default()).unwrap();
        let row = store
            .raw_get(RawTable::Invocations, b"a2a:ep9:r1")
            .unwrap()
            .unwrap();
        let seq = row[..8].to_vec();
        let resolution = store.raw_get(RawTable::Resolutions, &seq).unwrap().unwrap();
        store
            .raw_overwrite(
                RawTable::Resolutions,
                seq.clone(),
                resolution[..10].to_vec(),
            )
            .unwrap();
        u64::from_be_bytes(seq.try_into().unwrap())
    };
    let d = Daemon::start_in(kept, WS, &[]);
    let (code, out) = assert_agree(&d, &ops, &[&fresh.to_string()], None);
    assert_eq!(code, 3, "{out}");
    assert!(
        out.contains(&format!(
            "\n  ✗ journal -  task state of a2a:ep9:r1: store is damaged: the resolution of intent {seq} is damaged: it is 10 byte(s), shorter than the 12 of its intent sequence and journal length\n"
        )),
        "{out}"
    );
}

#[test]
fn an_agent_cannot_verify_another_episodes_call_online_but_an_operator_can() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let other_token = d.session("ep2", &["Workspace.Read=worktree:5"]);
    let ops_token = d.operator_session("ops", &[]);
    let mine = session_file(d.dir.path(), "ep1.session", &token);
    let other = session_file(d.dir.path(), "ep2.session", &other_token);
    let ops = session_file(d.dir.path(), "ops.session", &ops_token);
    std::fs::write(d.root().join("ep1/a.txt"), "alpha").unwrap();
    let result = call_json_out(&d, &mine, "ailang-read", &["path=a.txt"]);
    let e = entry(&d, &token, 1);
    let record = payload(&d, &token, e["transitionRef"].as_str().unwrap());
    let id = record["invocationId"].as_str().unwrap().to_owned();
    let output_ref = sha(&result[..result.len() - 1]);
    let base = format!("http://{}", d.addr);

    let not_found = [
        (
            "1",
            format!(
                "worldd: why: entry 1 not found: the daemon at {base} answers its record {}… as absent to this session (another episode's calls read as absent; an operator credential reads every episode)\n",
                &record_short(e["transitionRef"].as_str().unwrap())
            ),
        ),
        (
            "head",
            format!(
                "worldd: why: entry 1 not found: the daemon at {base} answers its record {}… as absent to this session (another episode's calls read as absent; an operator credential reads every episode)\n",
                &record_short(e["transitionRef"].as_str().unwrap())
            ),
        ),
        (
            id.as_str(),
            format!("worldd: why: invocation {id} not found: it is not a call of your episode (ep2); another episode's calls are its own, and this answer is the same whether or not it exists\n"),
        ),
        (
            output_ref.as_str(),
            format!("worldd: why: {output_ref} not found (scanned back all 2 entries of the log)\n"),
        ),
    ];
    for (handle, expected) in &not_found {
        let (code, out, err) = online(&d.addr, &other, &[handle], None);
        assert_eq!(
            (code, out.as_str(), err.as_str()),
            (1, "", expected.as_str())
        );
        let (code, out, err) = online(&d.addr, &ops, &[handle], None);
        assert_eq!(code, 0, "{handle}: {out}{err}");
        assert!(out.ends_with("all 10 link(s) verified\n"), "{out}");
    }
    let (code, _, err) = online(&d.addr, &other, &["-"], Some(&result));
    assert_eq!(code, 1, "{err}");
    assert_eq!(
        err,
        format!("worldd: why: a result with {output_ref} not found (scanned back all 2 entries of the log)\n")
    );
    let (code, out, _) = online(&d.addr, &mine, &["-"], Some(&result));
    assert_eq!(code, 0, "{out}");
}

fn record_short(reference: &str) -> String {
    reference[..15].to_owned()
}

#[test]
fn invocation_rows_are_served_as_stored_to_their_episode_and_operators_only() {
    let d = Daemon::start(WS, &[]);
    // A write: its intent is durable before it runs, so its outcome is always written in a
    // later group commit, into a resolution (a read's often shares its intent's commit, and
    // then resolves the row itself).
    let token = d.session("ep1", &["Workspace.Write=worktree:5"]);
    let other = d.session("ep2", &["Workspace.Read=worktree:1"]);
    let ops = d.operator_session("ops", &["World.Commit=log:1"]);
    a2a(
        &d,
        &token,
        "r1",
        "ailang-write",
        json!({"path": "a.txt", "content": "alpha"}),
    );
    let url = d.url("/v1/invocations/a2a:ep1:r1/rows");

    let stored = {
        use broker_core::store::{RawTable, Store};
        let store = Store::open(&d.db(), Default::default()).unwrap();
        let raw = |t, k: &[u8]| store.raw_get(t, k).unwrap().unwrap();
        // The intent (journal row 1) wrote the invocation row, naming it; its outcome (row 2)
        // wrote the resolution keyed by it. Readers see the resolution's parts.
        let invocation = raw(RawTable::Invocations, b"a2a:ep1:r1");
        let resolution = raw(RawTable::Resolutions, &1u64.to_be_bytes());
        let (intent, pending, task) = row_parts(&invocation);
        let pending: Value = serde_json::from_slice(&pending.unwrap()).unwrap();
        let task: Value = serde_json::from_slice(&task.unwrap()).unwrap();
        assert_eq!(
            (intent, &pending["outcomeSeq"], &task["phase"]),
            (1, &Value::Null, &json!("pending"))
        );
        let (none, resolved, committed) = row_parts(&resolution);
        assert_eq!(none, 0);
        assert_eq!(
            resolved.unwrap(),
            raw(RawTable::JournalIndex, b"a2a:ep1:r1")
        );
        assert_eq!(committed.unwrap(), raw(RawTable::Tasks, b"ep1\0a2a:r1"));
        let enc = |b: Vec<u8>| b64().encode(b);
        json!({
            "invocationId": "a2a:ep1:r1",
            "invocation": enc(invocation),
            "resolution": enc(resolution),
            "journalRows": {"1": enc(raw(RawTable::Journal, &1u64.to_be_bytes())),
                            "2": enc(raw(RawTable::Journal, &2u64.to_be_bytes()))},
        })
    };
    for t in [&token, &ops] {
        let a = get(&url, Some(t));
        assert_eq!((a.status, a.json()), (200, stored.clone()));
    }
    // Another episode's: the same answer as an invocation that never was.
    let not_found = json!({"error": {"class": "NotFound", "message": "invocation not found"}});
    for u in [url.clone(), d.url("/v1/invocations/a2a:ep1:never/rows")] {
        let a = get(&u, Some(&other));
        assert_eq!((a.status, a.json()), (404, not_found.clone()));
    }
    // One's own that never was: nothing stored.
    let a = get(&d.url("/v1/invocations/a2a:ep1:never/rows"), Some(&token));
    assert_eq!(
        (a.status, a.json()),
        (
            200,
            json!({"invocationId": "a2a:ep1:never", "invocation": null, "resolution": null,
                   "journalRows": {}})
        )
    );
    let a = get(&d.url("/v1/invocations/rest:abc/rows"), Some(&ops));
    assert_eq!(
        (a.status, a.json()),
        (
            400,
            json!({"error": {"class": "BadRequest", "message":
                "invocation id must be mcp:<episode>:<task id> or a2a:<episode>:<task id>"}})
        )
    );
    let a = get(&url, None);
    assert_eq!(a.status, 401);
    assert_eq!(a.json()["error"]["class"], "SessionAbsent");

    // The world an entry selected, public like the entry headers.
    let note = note_commit(&d, &ops, "n1");
    let world = get(&d.url(&format!("/v1/log/{note}/world")), Some(&other)).json();
    let head = get(&d.url("/v1/head"), Some(&other)).text();
    assert_eq!(world["ref"], head.as_str());
    assert_eq!(
        world,
        get(&d.url(&format!("/v1/worlds/{head}")), Some(&other)).json()
    );
    let a = get(&d.url("/v1/log/99/world"), Some(&other));
    assert_eq!(
        (a.status, a.json()),
        (
            404,
            json!({"error": {"class": "NotFound", "message": "no world selects this log entry"}})
        )
    );

    // Under --open-reads, everyone reads them, as every other read.
    let kept = d.halt();
    let d = Daemon::start_in(kept, WS, &["--open-reads"]);
    let a = get(&d.url("/v1/invocations/a2a:ep1:r1/rows"), None);
    assert_eq!((a.status, a.json()), (200, stored));
}

#[test]
fn call_json_out_piped_to_why_verifies_online_with_only_world_addr_and_world_session() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    std::fs::write(d.root().join("ep1/hello.txt"), "hi there").unwrap();
    // A machine that does not hold the store: an empty directory, the credential in a file.
    let elsewhere = tempfile::tempdir().unwrap();
    let session = session_file(elsewhere.path(), "agent.session", &token);
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "{WORLDD} call ailang-read --arg path=hello.txt --json-out | {WORLDD} why -"
        ))
        .current_dir(elsewhere.path())
        .env("WORLD_ADDR", d.url(""))
        .env("WORLD_SESSION", &session)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(
        stdout.starts_with("why: entry 1 (matched by output (sha256 of the result))\n"),
        "{stdout}"
    );
    assert!(stdout.ends_with("all 10 link(s) verified\n"), "{stdout}");
    assert_eq!(stderr, "");
    assert!(!elsewhere.path().join(".world").exists());
}

#[test]
fn online_why_says_which_daemon_it_cannot_reach_or_that_refuses_the_credential() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let dir = tempfile::tempdir().unwrap();
    let unknown = session_file(dir.path(), "unknown.session", &"ab".repeat(32));
    let good = session_file(dir.path(), "good.session", &token);
    let base = format!("http://{}", d.addr);

    let (code, out, err) = online(&d.addr, &unknown, &["head"], None);
    assert_eq!((code, out.as_str()), (1, ""));
    assert_eq!(
        err,
        format!("worldd: why: the daemon at {base} refused the session credential: GET /v1/head returned HTTP 401 SessionUnknown: unknown session credential (the daemon at {base}, from --addr, does not know this credential: revoked, or minted for another store; if your daemon listens elsewhere, give its address with --addr or $WORLD_ADDR; else mint a new one with worldd session mint)\n")
    );
    let (code, _, err) = worldd(&["why", "--addr", &base, "0"], None);
    assert_eq!(code, 1);
    assert!(
        err.starts_with("worldd: why: /v1/log/0 needs a session credential and none was given: pass --session FILE (or set $WORLD_SESSION)"),
        "{err}"
    );

    // A port nobody listens on.
    let closed = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let (code, out, err) = online(&closed, &good, &["head"], None);
    assert_eq!((code, out.as_str()), (1, ""));
    assert!(
        err.starts_with(&format!(
            "worldd: why: cannot reach the daemon at http://{closed} ("
        )),
        "{err}"
    );
    assert!(
        err.ends_with(
            "is `worldd serve` running there? (--addr or $WORLD_ADDR names another address)\n"
        ),
        "{err}"
    );

    // --db and --addr name two different sources.
    let (code, _, err) = worldd(&["why", "--db", "x", "--addr", &base, "head"], None);
    assert_eq!(code, 1);
    assert!(
        err.contains("the argument '--db <DB>' cannot be used with '--addr <ADDR>'"),
        "{err}"
    );
}

#[test]
fn without_addr_or_db_why_reads_world_addr_then_the_local_store_then_the_default_address() {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let dir = tempfile::tempdir().unwrap();
    let session = session_file(dir.path(), "agent.session", &token);
    let run_with = |cwd: &Path, env: &[(&str, &str)], extra: &[&str]| {
        let out = Command::new(WORLDD)
            .args(["why", "0"])
            .args(extra)
            .current_dir(cwd)
            .env_remove("WORLD_ADDR")
            .env_remove("WORLD_SESSION")
            .envs(env.iter().copied())
            .output()
            .unwrap();
        (
            out.status.code().unwrap(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let run = |cwd: &Path, env: &[(&str, &str)]| run_with(cwd, env, &[]);
    let addr = d.url("");
    let session = path_str(&session);

    // $WORLD_ADDR: the daemon, from a directory without a store.
    let (code, out, err) = run(
        dir.path(),
        &[("WORLD_ADDR", &addr), ("WORLD_SESSION", session)],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.ends_with("all 3 link(s) verified\n"), "{out}");

    // A store at .world/db and no $WORLD_ADDR: the store, offline (no credential needed).
    let project = d.dir.path().join("project");
    std::fs::create_dir_all(project.join(".world")).unwrap();
    std::os::unix::fs::symlink(d.db(), project.join(".world/db")).unwrap();
    let (code, out, err) = run(&project, &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.ends_with("all 3 link(s) verified\n"), "{out}");

    // Neither: the daemon at the default address. When nothing answers there, why says where
    // it looked.
    if TcpListener::bind("127.0.0.1:7644").is_ok() {
        let (code, out, err) = run(dir.path(), &[("WORLD_SESSION", session)]);
        assert_eq!((code, out.as_str()), (1, ""));
        assert!(
            err.starts_with("worldd: why: cannot reach the daemon at http://127.0.0.1:7644 ("),
            "{err}"
        );
        assert!(
            err.ends_with(
                " (no store at .world/db either: give --db DIR to verify a store offline)\n"
            ),
            "{err}"
        );
        // A credential only means something to a daemon: with --session, the store at
        // .world/db is not what is verified.
        let (code, out, err) = run_with(&project, &[], &["--session", session]);
        assert_eq!((code, out.as_str()), (1, ""));
        assert!(
            err.starts_with("worldd: why: cannot reach the daemon at http://127.0.0.1:7644 ("),
            "{err}"
        );
        assert!(err.ends_with("names another address)\n"), "{err}");
    } else {
        eprintln!("*** 127.0.0.1:7644 is in use here: the default-address case was not run ***");
    }
}

/// Objects are deduplicated by content, first writer wins. An agent calls a tool with
/// arguments equal to the exact plan another episode's next call will have (plans are
/// deterministic): its own call is refused, but the bytes are stored first as its
/// `world/invocation-input/v1`. The victim's genuine call must still verify — its record says
/// those bytes are its plan, and they hash to the plan ref and read as a plan — with a note
/// offline, as JSON and in doctor, and online (where the victim reads its plan as a plan)
/// without one.
#[test]
fn an_agent_storing_another_calls_plan_first_as_its_own_input_does_not_break_that_calls_why() {
    let d = Daemon::start(WS, &[]);
    let (victim, plan, index) = a_plan_stored_first_as_another_calls_input(&d);
    let plan_ref = sha(&canon(&plan));
    let operator = d.operator_session("ops", &[]);
    let stored = get(&d.url(&format!("/v1/objects/{plan_ref}")), Some(&operator)).json();
    assert_eq!(
        stored["semanticId"], "world/invocation-input/v1",
        "the attack stores the victim's plan first as an input: {stored}"
    );

    let note = format!(
        "note: {}… was first stored as world/invocation-input/v1 (objects are deduplicated by content); it reads as world/effect-plan/v1, the kind its record gives it",
        &plan_ref[..15]
    );
    let (code, out, err) = offline(&d, &[&index.to_string()], None);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!("  ✓ plan    {}…", &plan_ref[..15])),
        "{out}"
    );
    assert!(out.contains(&format!("\n            {note}\n")), "{out}");
    // Online, the victim reads its plan as the plan its call made (an episode reads bytes as
    // the kind it made of them): the same report without the note, which would tell it that
    // another episode stored those bytes first.
    let session = session_file(d.root().as_path(), "victim.session", &victim);
    let (code, online_out, err) = online(&d.addr, &session, &[&index.to_string()], None);
    let without_note = out.replace(&format!("            {note}\n"), "");
    assert_ne!(without_note, out);
    assert_eq!((code, &online_out), (0, &without_note), "{err}");

    let (code, out, err) = offline(&d, &[&index.to_string(), "--json"], None);
    assert_eq!(code, 0, "{out}{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["verified"], true);
    let link = report["links"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["kind"] == "plan")
        .unwrap();
    assert_eq!(
        (&link["ok"], &link["ref"]),
        (&json!(true), &json!(plan_ref))
    );
    assert_eq!(link["note"], note.trim_start_matches("note: "));

    let (code, out, err) = worldd(&["doctor", "--db", path_str(&d.db())], None);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!(
            "      entry {index}: note: plan: {}\n",
            note.trim_start_matches("note: ")
        )),
        "{out}"
    );
}

/// The record of `index` in the stopped store at `db`: its ref, read from `why --json`.
fn link_of(db: &Path, index: u64, kind: &str) -> String {
    let (code, out, err) = worldd(
        &["why", "--db", path_str(db), &index.to_string(), "--json"],
        None,
    );
    assert_eq!(code, 0, "{out}{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    report["links"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} link: {out}"))["ref"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The record of entry 1 removed from the store (damage). An operator reads every object, so
/// the daemon answering it as absent can only mean it is missing: online `why` reports the
/// broken link as offline does (exit 3) by every handle that finds the entry, not "not found"
/// (exit 1) as for a call of another episode. So does an agent asking after its own call by
/// its invocation id; by the entry's index, the record reads to it as another episode's would,
/// and it is told the entry is not found.
#[test]
fn online_why_of_an_entry_whose_record_is_missing_reports_the_damage_as_offline() {
    let (kept, db) = common::why::reads_then_stopped(2);
    let record = link_of(&db, 1, "record");
    let record_bytes = hex::decode(record.trim_start_matches("sha256:")).unwrap();
    common::why::tamper(&db, "object_rows", |w, table| {
        let key = table
            .iter(w)
            .unwrap()
            .map(Result::unwrap)
            .find(|(_, row)| row.starts_with(&record_bytes))
            .map(|(key, _)| key.to_vec())
            .expect("the record's row");
        assert!(table.delete(w, &key).unwrap());
    });
    std::fs::remove_dir_all(kept.path().join("plugins")).unwrap();
    let d = Daemon::start_in(kept, WS, &[]);
    let ops_token = d.operator_session("ops", &[]);
    let ops = session_file(d.dir.path(), "ops.session", &ops_token);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    let mine = session_file(d.dir.path(), "ep1.session", &token);
    // The daemon answers the removed record as absent, to the operator too.
    assert_eq!(
        get(&d.url(&format!("/v1/objects/{record}")), Some(&ops_token)).status,
        404
    );

    let broken = format!("  ✗ record  {}…", &record[..15]);
    for handle in ["1", "a2a:ep1:r1", record.as_str()] {
        let (code, out) = assert_agree(&d, &ops, &[handle], None);
        assert_eq!(code, 3, "{handle}: {out}");
        assert!(
            out.starts_with("why: entry 1 (matched by "),
            "{handle}: {out}"
        );
        assert!(out.contains(&broken), "{handle}: {out}");
    }
    // The agent's own call, named by its invocation id: damage, as offline.
    let (code, out) = assert_agree(&d, &mine, &["a2a:ep1:r1"], None);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains(&broken), "{out}");
    // By its index: not this session's to read, as another episode's call.
    let (code, out, err) = online(&d.addr, &mine, &["1"], None);
    assert_eq!(
        (code, out.as_str(), err),
        (
            1,
            "",
            format!(
                "worldd: why: entry 1 not found: the daemon at http://{} answers its record {}… as absent to this session (another episode's calls read as absent; an operator credential reads every episode)\n",
                d.addr,
                &record[..15]
            )
        )
    );
}
