//! `--attacks`: the hostile clients of the edge issue against the release daemon, one at a
//! time on a fresh daemon with the default configuration, while one legitimate client of
//! another episode keeps calling `ailang-read`. For each attack: the legitimate calls' p50 and
//! p99 and how many failed, and the daemon's peak RSS (`VmHWM`) and peak open descriptors
//! (`/proc/PID/fd`). Every attacker stops by itself when its attack ends; all traffic goes to
//! the loopback daemon this process started.
//!
//! The regression tests in `daemon/tests/edge_attacks.rs` prove each limit trips; this mode
//! reports the figures.

use std::io::Write;
use std::net::TcpStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::daemon::{proc_status_kib, Client, Daemon, ProcSampler};
use crate::stats::Summary;

/// One attack's figures.
pub struct AttackRow {
    pub name: &'static str,
    pub legit: Summary,
    /// The first unexpected answer the legitimate client got, if any: why it is counted.
    pub legit_first_error: Option<String>,
    /// `VmHWM`: everything resident, the pages of the store's map that were touched included.
    pub peak_rss_kib: Option<u64>,
    /// The most `RssAnon` seen (sampled every 25 ms): the daemon's own memory, without the
    /// store's file pages, which the kernel can drop.
    pub peak_anon_kib: u64,
    /// `RssAnon` [`SETTLE`] after the attack stopped: what the daemon goes on holding.
    pub anon_after_kib: Option<u64>,
    pub peak_fds: u64,
    /// The daemon's user and system CPU seconds while the legitimate client was measured.
    pub daemon_cpu_s: Option<f64>,
    /// What the attackers saw, in words.
    pub note: String,
}

/// Attackers running on their own threads until told to stop.
struct Attack {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    /// Answers the attackers counted (meaning depends on the attack).
    counters: Arc<[AtomicU64; 4]>,
    /// The first answer an attacker counted as none of the kinds its row expects: shown in the
    /// row's note, so that "other answers" always says what they were.
    first_other: Arc<Mutex<Option<String>>>,
}

impl Attack {
    fn new() -> Attack {
        Attack {
            stop: Arc::new(AtomicBool::new(false)),
            threads: Vec::new(),
            counters: Arc::new(Default::default()),
            first_other: Arc::default(),
        }
    }

    fn spawn(&mut self, f: impl FnOnce(Arc<AtomicBool>, Arc<[AtomicU64; 4]>) + Send + 'static) {
        let (stop, counters) = (self.stop.clone(), self.counters.clone());
        self.threads
            .push(std::thread::spawn(move || f(stop, counters)));
    }

    fn finish(self) -> ([u64; 4], Option<String>) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads {
            let _ = t.join();
        }
        let counts = [0, 1, 2, 3].map(|i| self.counters[i].load(Ordering::Relaxed));
        let other = self
            .first_other
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        (counts, other)
    }
}

/// How long after an attack its daemon's memory is read again: past one look of the daemon's
/// memory trim (`[server] memory_trim_ms`, 5 s by default).
const SETTLE: Duration = Duration::from_secs(6);

const NAMES: [&str; 24] = [
    "none (baseline)",
    "held 4 MiB bodies x300, no credentials",
    "held 4 MiB bodies x300, with credentials",
    "huge MCP batch (80,000 tools/list) x4 clients",
    "300 half-sent heads + 2,000 idle connections",
    "Host/Origin rebinding x8 clients",
    "one episode looping a slow tool x16",
    "hung plugins: 200 calls past their deadline",
    "1 MiB arguments, each new, x16 episodes",
    "slow readers: a 1 MiB object x400 connections (8 sessions), unread",
    "4,000 request heads held just under the 16 KiB head limit",
    "1 MB writes from 32 episodes, 9 in flight each",
    "6,000 idle connections, past the 4,096 connection limit",
    "5,000 connections whose refused small body never comes",
    "64 log pages in flight from one credential, each scanning 5,000 entries it cannot see",
    "hung finish functions: 200 calls past their deadline",
    "a plugin flooding the log: 100,000 messages per call x16 episodes",
    "1 MB writes over A2A from 32 episodes, 9 in flight each",
    "row 13 against a client that connects for every call",
    "row 18 at a limit of 64 connections",
    "200 threads each reconnecting at once with a head whose body never comes, at a limit of 64, against a client writing each request 5 ms after it connects",
    "bodies of small objects at the byte limits (4 MiB MCP, 1 MiB A2A) x16 episodes",
    "1 MB bodies in one-byte chunks x16 episodes",
    "calls of 16,380 values in small objects (64 KiB) x16 episodes, 9 in flight each",
];

/// Rows whose attackers hang handlers: their daemons get a 2 s handler deadline, and the
/// measuring starts past it.
const HUNG_ROWS: [usize; 2] = [7, 15];

/// Rows whose legitimate client opens a new connection for every call, as a client without a
/// connection pool does: at the connection limit each of its calls must find a place to wait
/// for room, where the other rows' client keeps its one connection.
const FRESH_CONNECTION_ROWS: [usize; 2] = [18, 19];

/// The row whose legitimate client opens a new connection for every call and writes its
/// request [`LATE_WRITE`] after connecting, as a client on a busy machine may: the daemon
/// accepts its connection before anything has arrived on it.
const LATE_WRITE_ROW: usize = 20;

/// How long [`LATE_WRITE_ROW`]'s client waits between connecting and writing its request.
const LATE_WRITE: Duration = Duration::from_millis(5);

/// The rows whose daemon has a limit of 64 connections: 4 places to wait for room, 1 for
/// connections that have sent bytes, 1 for those with a known credential.
const SMALL_LIMIT_ROWS: [usize; 2] = [19, 20];

/// Run the attacks numbered in `only` (every one when empty); `measure` is how long the
/// legitimate client runs during each, and `serve_args` go to every attacked daemon.
pub fn run_all(
    worldd: &Path,
    plugin_dir: &Path,
    dir: &Path,
    log: Option<&str>,
    measure: Duration,
    only: &[usize],
    serve_args: &[String],
) -> Result<Vec<AttackRow>, String> {
    let mut rows = Vec::new();
    for (i, name) in NAMES.iter().enumerate() {
        if !only.is_empty() && !only.contains(&i) {
            continue;
        }
        let run = dir.join(format!("attack-{i}"));
        // Hung handlers get a 2 s deadline so the measured window lies past it.
        let mut extra: Vec<String> = if HUNG_ROWS.contains(&i) {
            vec!["--handler-deadline-ms".into(), "2000".into()]
        } else if SMALL_LIMIT_ROWS.contains(&i) {
            vec!["--max-connections".into(), "64".into()]
        } else {
            Vec::new()
        };
        extra.extend_from_slice(serve_args);
        let d = Daemon::start_with(
            &[],
            worldd,
            &run,
            plugin_dir,
            log,
            &["workspace", "stall"],
            &extra,
        )?;
        let legit = d.mint("legit", 1, 1024)?.remove(0);
        let attackers = mint_stall(&d, 200)?;
        eprintln!("  attack: {name}");
        let stored_before = store_bytes(&d);
        let mut attack = Attack::new();
        start(i, &mut attack, &d, &legit, &attackers);
        // Let the attack take hold before measuring.
        std::thread::sleep(if HUNG_ROWS.contains(&i) {
            Duration::from_millis(2500)
        } else {
            Duration::from_millis(500)
        });
        d.reset_peak_rss();
        let sampler = ProcSampler::start(d.pid());
        let cpu_before = crate::daemon_cpu_seconds(d.pid());
        let connecting = if i == LATE_WRITE_ROW {
            Connecting::FreshWritingLate
        } else if FRESH_CONNECTION_ROWS.contains(&i) {
            Connecting::Fresh
        } else {
            Connecting::Kept
        };
        let (legit_summary, legit_first_error) = legit_calls(&d.addr, &legit, measure, connecting);
        let daemon_cpu_s = crate::daemon_cpu_seconds(d.pid())
            .zip(cpu_before)
            .map(|(after, before)| after - before);
        let peaks = sampler.finish();
        let (peak_fds, peak_anon_kib) = (peaks.fds, peaks.anon_kib.unwrap_or(0));
        let peak_rss_kib = d.peak_rss_kib();
        let (c, first_other) = attack.finish();
        std::thread::sleep(SETTLE);
        let anon_after_kib = proc_status_kib(d.pid(), "RssAnon:");
        let note = match i {
            0 => String::new(),
            1 | 2 => format!(
                "{} answered before the body, {} refused busy (503), {} reconnects",
                c[0], c[1], c[2]
            ),
            3 => format!("{} batches refused whole, {} other answers", c[0], c[1]),
            4 | 10 | 12 | 13 | 18..=20 => format!("{} connections opened, {} closed by the daemon", c[0], c[1]),
            14 => format!(
                "{} pages answered, {} refused busy (503: waited past their turn), {} other answers",
                c[0], c[1], c[2]
            ),
            11 | 17 => format!(
                "{} written, {} refused busy (503: the body budget or its share), {} connections closed while sending, {} other answers",
                c[0], c[1], c[2], c[3]
            ),
            5 => format!("{} refused 403, {} other answers", c[0], c[1]),
            6 => format!(
                "{} ran, {} refused at once (episode busy), {} other",
                c[0], c[1], c[2]
            ),
            7 | 15 => format!(
                "{} timed out at the deadline, {} refused for capacity (every slot held by a hung call), {} other answers",
                c[0], c[1], c[2]
            ),
            8 => format!(
                "{} refused plans, {} refused for capacity or rate, {} other answers; the store grew by {:.1} MiB",
                c[0],
                c[1],
                c[2],
                store_bytes(&d).saturating_sub(stored_before) as f64 / (1u64 << 20) as f64
            ),
            23 => format!(
                "{} refused plans, {} refused busy (the body budget or its share), {} connections closed under a busy answer, {} other answers",
                c[0], c[1], c[2], c[3]
            ),
            22 => format!(
                "{} refused at [server] body_small_pieces, {} connections closed while sending, {} other answers",
                c[0], c[1], c[2]
            ),
            21 => format!(
                "{} refused at [limits] json_values, {} refused busy (the body budget or its share), {} connections closed while sending, {} other answers",
                c[0], c[1], c[2], c[3]
            ),
            16 => format!(
                "{} calls answered ({} messages sent), {} other answers; the daemon's log grew by {} KiB",
                c[0],
                c[0] * FLOOD_LINES,
                c[1],
                log_bytes(&d) / 1024
            ),
            9 => format!(
                "{} requests sent, {} answered 200 (then unread), {} refused busy (503), {} closed by the daemon",
                c[0], c[1], c[2], c[3]
            ),
            _ => format!(
                "{} refused plans, {} refused for capacity or rate, {} other answers",
                c[0], c[1], c[2]
            ),
        };
        let note = with_first_other(note, first_other);
        rows.push(AttackRow {
            name,
            legit: legit_summary,
            legit_first_error,
            peak_rss_kib,
            peak_anon_kib,
            anon_after_kib,
            peak_fds,
            daemon_cpu_s,
            note,
        });
        d.stop().or_else(|e| {
            // Hung handlers keep the drain waiting; the figures are taken.
            eprintln!("    ({e})");
            Ok::<(), String>(())
        })?;
    }
    Ok(rows)
}

/// Sessions with a `Stall.Wait` grant, one episode each.
fn mint_stall(d: &Daemon, count: usize) -> Result<Vec<Client>, String> {
    let store = broker_core::store::Store::open(&d.db, Default::default())
        .map_err(|e| format!("open store: {e}"))?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|e| e.to_string())?
        .as_secs() as i64;
    (0..count)
        .map(|i| {
            let episode = format!("attacker{i}");
            let grants = ["Stall.Wait=any:1000000", "Stall.Log=any:1000000"]
                .iter()
                .map(|g| g.parse().map_err(|e| format!("{e}")))
                .collect::<Result<Vec<_>, String>>()?;
            let m = broker_core::session::mint(&store, &episode, grants, 24 * 3600, now)
                .map_err(|e| format!("mint: {e}"))?;
            Ok(Client {
                episode,
                token: m.token,
            })
        })
        .collect()
}

fn head(addr: &str, path: &str, auth: Option<&str>, length: usize) -> String {
    let auth = auth
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    format!("POST {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {length}\r\n\r\n")
}

fn mcp_call(tool: &str, args: Value) -> String {
    json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":tool,"arguments":args}})
        .to_string()
}

fn post(agent: &ureq::Agent, addr: &str, token: &str, body: &str) -> Result<String, String> {
    post_to(agent, addr, "/mcp/", token, body)
}

fn post_to(
    agent: &ureq::Agent,
    addr: &str,
    path: &str,
    token: &str,
    body: &str,
) -> Result<String, String> {
    let r = agent
        .post(&format!("http://{addr}{path}"))
        .set("Authorization", &format!("Bearer {token}"))
        .set("Content-Type", "application/json")
        .set("Accept", "application/json, text/event-stream")
        .send_string(body);
    match r {
        Ok(r) => r.into_string().map_err(|e| e.to_string()),
        Err(ureq::Error::Status(code, r)) => Err(format!(
            "HTTP {code}: {}",
            r.into_string().unwrap_or_default()
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// An MCP call on a new connection whose request is written [`LATE_WRITE`] after it connects;
/// the answer's body when it is a 200.
fn post_late(addr: &str, token: &str, body: &str) -> Result<String, String> {
    use std::io::Read;
    let mut s = TcpStream::connect(addr).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|e| e.to_string())?;
    std::thread::sleep(LATE_WRITE);
    let request = format!(
        "POST /mcp/ HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(request.as_bytes()).map_err(|e| e.to_string())?;
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).map_err(|e| e.to_string())?;
    let answer = String::from_utf8_lossy(&answer);
    match answer.split_once("\r\n\r\n") {
        Some((head, body)) if head.starts_with("HTTP/1.1 200") => Ok(body.to_owned()),
        Some((head, _)) => Err(head.lines().next().unwrap_or_default().to_owned()),
        None if answer.is_empty() => Err("closed without an answer".to_owned()),
        None => Err(format!("a cut-off answer: {answer}")),
    }
}

fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(30))
        .build()
}

/// An agent that keeps no connection between calls.
fn agent_without_pool() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(30))
        .max_idle_connections(0)
        .build()
}

/// Start attack number `i` (its row in [`NAMES`]) on `a`'s threads.
fn start(i: usize, a: &mut Attack, d: &Daemon, legit: &Client, attackers: &[Client]) {
    let addr = d.addr.as_str();
    match i {
        0 => {}
        1 => held_bodies(a, addr, "/a2a/", None),
        2 => held_bodies(a, addr, "/mcp/", Some(legit_token_of(attackers))),
        3 => huge_batches(a, addr, &attackers[..4]),
        4 => half_sent_heads_and_idle(a, addr),
        5 => rebinding(a, addr, legit),
        6 => slow_tool_loop(a, addr, &attackers[0]),
        8 => large_arguments(a, addr, &attackers[..16]),
        9 => slow_readers(a, addr, &attackers[1..9]),
        10 => held_heads(a, addr),
        11 => large_writes(a, d, Surface::Mcp),
        17 => large_writes(a, d, Surface::A2a),
        12 => idle_past_limit(a, addr),
        13 | 18 | 19 => bodies_never_come(a, addr),
        20 => heads_reconnecting(a, addr),
        21 => small_objects(a, addr, &attackers[..16]),
        22 => one_byte_chunks(a, addr, &attackers[..16]),
        23 => values_at_the_limit(a, addr, &attackers[..16]),
        14 => log_scans(a, d, &attackers[0]),
        15 => hung_plugins(a, addr, attackers, "stall-finish"),
        16 => log_flood(a, addr, &attackers[..16]),
        // Row 7.
        _ => hung_plugins(a, addr, attackers, "stall-wait"),
    }
}

/// Rows 1 and 2: 10 threads of [`hold_bodies`], each sending heads of 4 MiB bodies to `path`,
/// with `auth` as the credential if there is one.
fn held_bodies(a: &mut Attack, addr: &str, path: &'static str, auth: Option<String>) {
    for t in 0..10 {
        let (addr, auth) = (addr.to_owned(), auth.clone());
        a.spawn(move |stop, c| {
            let head = head(&addr, path, auth.as_deref(), 4 * 1024 * 1024);
            hold_bodies(&addr, &head, Duration::from_millis(20 + t), &stop, &c)
        });
    }
}

/// Keep 30 connections open, each having sent `head` and the first 64 KiB of its body, until
/// told to stop, looking every `pause`; reopen each one the daemon answers or closes. Counts
/// answers before the body (`c[0]`), refusals busy (`c[1]`) and connections opened (`c[2]`).
fn hold_bodies(addr: &str, head: &str, pause: Duration, stop: &AtomicBool, c: &[AtomicU64; 4]) {
    let mut conns: Vec<Option<TcpStream>> = (0..30).map(|_| None).collect();
    let chunk = vec![b' '; 64 * 1024];
    while !stop.load(Ordering::Relaxed) {
        for slot in conns.iter_mut() {
            match slot {
                None => {
                    if let Ok(mut s) = TcpStream::connect(addr) {
                        let _ = s.set_nonblocking(true);
                        if s.write_all(head.as_bytes()).is_ok() {
                            let _ = s.write(&chunk);
                            c[2].fetch_add(1, Ordering::Relaxed);
                            *slot = Some(s);
                        }
                    }
                }
                Some(s) => {
                    // Peek for the daemon's early answer; keep the connection open.
                    let mut buf = [0u8; 512];
                    match std::io::Read::read(s, &mut buf) {
                        Ok(0) => *slot = None,
                        Ok(n) => {
                            let text = String::from_utf8_lossy(&buf[..n]);
                            if text.contains(" 503 ") {
                                c[1].fetch_add(1, Ordering::Relaxed);
                            } else {
                                c[0].fetch_add(1, Ordering::Relaxed);
                            }
                            *slot = None;
                        }
                        Err(_) => {}
                    }
                }
            }
        }
        std::thread::sleep(pause);
    }
}

/// Row 3: each of `attackers` posts batches of 80,000 `tools/list` requests back to back.
fn huge_batches(a: &mut Attack, addr: &str, attackers: &[Client]) {
    let batch = Value::Array(
        (0..80_000)
            .map(|i| json!({"jsonrpc":"2.0","id":i,"method":"tools/list"}))
            .collect(),
    )
    .to_string();
    let batch = Arc::new(batch);
    for attacker in attackers {
        keep_posting(
            a,
            addr,
            &attacker.token,
            batch.clone(),
            |answer| match answer {
                Ok(b) if b.contains("batch_items") => Ok(0),
                _ => Err(1),
            },
        );
    }
}

/// A row's note, with the first answer its attackers counted as other: one line of it, cut,
/// enough to tell a reset from a status.
fn with_first_other(note: String, first_other: Option<String>) -> String {
    match first_other {
        Some(other) => {
            let line: String = other
                .lines()
                .next()
                .unwrap_or("")
                .chars()
                .take(160)
                .collect();
            format!("{note}; the first other answer: {line}")
        }
        None => note,
    }
}

/// One thread posting `body` to `/mcp/` with `token` back to back until the attack stops,
/// counting each answer in the counter `count` picks for it: `Ok(i)` for the kinds the row
/// expects, `Err(i)` for anything else, the first of which the row's note shows.
fn keep_posting(
    a: &mut Attack,
    addr: &str,
    token: &str,
    body: Arc<String>,
    count: fn(&Result<String, String>) -> Result<usize, usize>,
) {
    keep_posting_to(a, addr, "/mcp/", token, body, count);
}

/// [`keep_posting`] to `path`.
fn keep_posting_to(
    a: &mut Attack,
    addr: &str,
    path: &'static str,
    token: &str,
    body: Arc<String>,
    count: fn(&Result<String, String>) -> Result<usize, usize>,
) {
    keep_posting_each(a, addr, path, token, move |_| body.clone(), count);
}

/// [`keep_posting_to`] with the `n`th request's body (from 1) made by `body(n)`.
fn keep_posting_each(
    a: &mut Attack,
    addr: &str,
    path: &'static str,
    token: &str,
    mut body: impl FnMut(u64) -> Arc<String> + Send + 'static,
    count: fn(&Result<String, String>) -> Result<usize, usize>,
) {
    let (addr, token) = (addr.to_owned(), token.to_owned());
    let first_other = a.first_other.clone();
    a.spawn(move |stop, c| {
        let agent = agent();
        let mut n = 0;
        while !stop.load(Ordering::Relaxed) {
            n += 1;
            let answer = post_to(&agent, &addr, path, &token, &body(n));
            let i = count(&answer).unwrap_or_else(|other| {
                let mut first = first_other.lock().unwrap_or_else(|p| p.into_inner());
                first.get_or_insert_with(|| match &answer {
                    Ok(b) | Err(b) => b.clone(),
                });
                other
            });
            c[i].fetch_add(1, Ordering::Relaxed);
        }
    });
}

/// Row 21: each of `attackers` posts bodies of one-member objects back to back, each body just
/// under its route's byte limit: the even ones 4 MiB over MCP, the odd ones 1 MiB over A2A.
/// `{"a":0}` is 7 bytes of text and hundreds of bytes parsed: before `[limits] json_values`
/// one such MCP body took the daemon to 346 MiB. Counts refusals at that limit (`c[0]`), busy
/// refusals (`c[1]`), bodies cut off by the daemon's early answer (`c[2]`) and the rest.
fn small_objects(a: &mut Attack, addr: &str, attackers: &[Client]) {
    let objects = |head: &str, tail: &str, bytes: usize| {
        let mut body = String::with_capacity(bytes);
        body.push_str(head);
        // Each object and its comma is 8 bytes; the last, without one, 7.
        while body.len() + 8 + 7 + tail.len() <= bytes {
            body.push_str(r#"{"a":0},"#);
        }
        body.push_str(r#"{"a":0}"#);
        body.push_str(tail);
        Arc::new(body)
    };
    let mcp = objects(
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"stall-wait","arguments":{"ms":"1","a":["#,
        "]}}}",
        4 * 1024 * 1024,
    );
    let a2a = objects(
        r#"{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"role":"user","messageId":"m1","parts":[{"kind":"data","data":{"skill":"stall-wait","arguments":{"ms":"1","a":["#,
        "]}}}]}}}",
        1024 * 1024,
    );
    let count = |answer: &Result<String, String>| match answer {
        Ok(b) if b.contains("json_values") => Ok(0),
        Ok(b) | Err(b) if b.contains("body_budget_bytes") => Ok(1),
        // Refused by its declared length before its body was read, and the connection closed.
        Err(e) if e.contains("Broken pipe") || e.contains("Unexpected EOF") => Ok(2),
        _ => Err(3),
    };
    for (i, attacker) in attackers.iter().enumerate() {
        let (path, body) = if i % 2 == 0 {
            ("/mcp/", mcp.clone())
        } else {
            ("/a2a/", a2a.clone())
        };
        keep_posting_to(a, addr, path, &attacker.token, body, count);
    }
}

/// Row 4: 300 half-sent heads and 2,000 idle connections.
fn half_sent_heads_and_idle(a: &mut Attack, addr: &str) {
    let half_sent = b"POST /mcp/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty";
    hold_connections_on_threads(a, addr, half_sent, 3, 20);
}

/// Row 10: 4,000 heads of 16,000 bytes (the default limit is 16 KiB), never finished.
fn held_heads(a: &mut Attack, addr: &str) {
    let mut head = b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: ".to_vec();
    head.resize(16_000, b'a');
    hold_connections_on_threads(a, addr, &head, 40, 0);
}

/// Row 12: 6,000 idle connections, each reopened as soon as the daemon closes it.
fn idle_past_limit(a: &mut Attack, addr: &str) {
    hold_connections_on_threads(a, addr, &[], 0, 60);
}

/// Row 13: 5,000 connections whose refused small body never comes.
fn bodies_never_come(a: &mut Attack, addr: &str) {
    // No credential and a 30,000-byte body that never comes: each is refused (401),
    // and the daemon waits up to 2 s for the small remainder so that an honest client
    // could read its answer. Reopened as soon as it closes.
    let head = head(addr, "/mcp/", None, 30_000);
    hold_connections_on_threads(a, addr, head.as_bytes(), 50, 0);
}

/// Row 20: 200 threads, each sending a head without a credential whose 30,000-byte body never
/// comes on one connection at a time, and connecting again as soon as the daemon closes it.
/// Unlike row 13's, this flood opens connections only as fast as the daemon closes them, so
/// the listening socket's queue stays short and a new client's connection is accepted within
/// a millisecond or two of its handshake: before a request written late has arrived.
fn heads_reconnecting(a: &mut Attack, addr: &str) {
    let head: Arc<[u8]> = head(addr, "/mcp/", None, 30_000).into_bytes().into();
    for _ in 0..200 {
        let (addr, head) = (addr.to_owned(), head.clone());
        a.spawn(move |stop, c| {
            while !stop.load(Ordering::Relaxed) {
                let Ok(mut s) = TcpStream::connect(&addr) else {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                };
                c[0].fetch_add(1, Ordering::Relaxed);
                let _ = s.set_read_timeout(Some(Duration::from_secs(3)));
                let _ = s.write_all(&head);
                let mut buf = [0u8; 4096];
                while matches!(std::io::Read::read(&mut s, &mut buf), Ok(n) if n > 0) {}
                c[1].fetch_add(1, Ordering::Relaxed);
            }
        });
    }
}

/// `sending` threads of [`hold_connections`] whose connections each send `first`, then `idle`
/// threads whose connections send nothing.
fn hold_connections_on_threads(
    a: &mut Attack,
    addr: &str,
    first: &[u8],
    sending: usize,
    idle: usize,
) {
    let first: Arc<[u8]> = first.into();
    for t in 0..sending + idle {
        let addr = addr.to_owned();
        // Half-sent heads, or idle connections.
        let first = (t < sending).then(|| first.clone());
        a.spawn(move |stop, c| hold_connections(&addr, first.as_deref(), &stop, &c));
    }
}

/// Row 5: 8 threads posing as a rebound page: the even ones ask for health under a foreign
/// `Host`, the odd ones call a tool with the legitimate token and a foreign `Origin`.
fn rebinding(a: &mut Attack, addr: &str, legit: &Client) {
    for k in 0..8 {
        let addr = addr.to_owned();
        let token = legit.token.clone();
        a.spawn(move |stop, c| {
            let agent = agent();
            while !stop.load(Ordering::Relaxed) {
                let r = if k % 2 == 0 {
                    agent
                        .get(&format!("http://{addr}/v1/health"))
                        .set("Host", "evil.example.com")
                        .call()
                } else {
                    agent
                        .post(&format!("http://{addr}/mcp/"))
                        .set("Authorization", &format!("Bearer {token}"))
                        .set("Origin", "http://evil.example.com")
                        .set("Content-Type", "application/json")
                        .set("Accept", "application/json, text/event-stream")
                        .send_string(&mcp_call("ailang-read", json!({"path": "f.txt"})))
                };
                match r {
                    Err(ureq::Error::Status(403, _)) => c[0].fetch_add(1, Ordering::Relaxed),
                    _ => c[1].fetch_add(1, Ordering::Relaxed),
                };
            }
        });
    }
}

/// Row 6: 16 threads of one episode calling a 2 s `stall-wait` back to back.
fn slow_tool_loop(a: &mut Attack, addr: &str, attacker: &Client) {
    for _ in 0..16 {
        let (addr, token) = (addr.to_owned(), attacker.token.clone());
        a.spawn(move |stop, c| {
            let agent = agent();
            let body = mcp_call("stall-wait", json!({"ms": "2000"}));
            while !stop.load(Ordering::Relaxed) {
                match post(&agent, &addr, &token, &body) {
                    Ok(b) if b.contains("slept_ms") => c[0].fetch_add(1, Ordering::Relaxed),
                    Ok(b) if b.contains("capacity exceeded") => {
                        c[1].fetch_add(1, Ordering::Relaxed);
                        std::thread::sleep(Duration::from_millis(5));
                        0
                    }
                    _ => c[2].fetch_add(1, Ordering::Relaxed),
                };
            }
        });
    }
}

/// Rows 7 and 15: one thread per 20 of `attackers`, each attacker making one hung call of
/// `tool` on a thread of its own (its handler, or its finish function, sleeps); counts the
/// calls that timed out at the deadline (`c[0]`), those refused for capacity because every
/// execution slot was held by a hung call (`c[1]`), and the others (`c[2]`).
fn hung_plugins(a: &mut Attack, addr: &str, attackers: &[Client], tool: &'static str) {
    // 200 episodes, one hung call each (60 s, far past the 2 s deadline).
    for chunk in attackers.chunks(20) {
        let chunk: Vec<Client> = chunk.to_vec();
        let addr = addr.to_owned();
        let first_other = a.first_other.clone();
        a.spawn(move |_stop, c| {
            let handles: Vec<_> = chunk
                .into_iter()
                .map(|cl| {
                    let addr = addr.clone();
                    std::thread::spawn(move || {
                        let body = mcp_call(tool, json!({"ms": "60000"}));
                        post(&agent(), &addr, &cl.token, &body)
                    })
                })
                .collect();
            for h in handles {
                let i = match h.join() {
                    Ok(Ok(b)) if b.contains("timed out") => 0,
                    Ok(Ok(b)) if b.contains("capacity exceeded") => 1,
                    other => {
                        let mut first = first_other.lock().unwrap_or_else(|p| p.into_inner());
                        first.get_or_insert_with(|| match other {
                            Ok(Ok(b)) | Ok(Err(b)) => b,
                            Err(_) => "the calling thread panicked".into(),
                        });
                        2
                    }
                };
                c[i].fetch_add(1, Ordering::Relaxed);
            }
        });
    }
}

/// Messages each call of row 16 asks the plugin to log.
const FLOOD_LINES: u64 = 100_000;

/// Row 16: each of `attackers` calls `stall-log` back to back, each call making the plugin
/// log [`FLOOD_LINES`] messages of 100 bytes; counts the calls answered (`c[0]`).
fn log_flood(a: &mut Attack, addr: &str, attackers: &[Client]) {
    for attacker in attackers {
        let (addr, token) = (addr.to_owned(), attacker.token.clone());
        a.spawn(move |stop, c| {
            let agent = agent();
            let lines = FLOOD_LINES.to_string();
            let body = mcp_call(
                "stall-log",
                json!({"lines": lines, "bytes": "100", "text": "flood "}),
            );
            while !stop.load(Ordering::Relaxed) {
                match post(&agent, &addr, &token, &body) {
                    Ok(b) if b.contains("\"ok\":true") => c[0].fetch_add(1, Ordering::Relaxed),
                    _ => c[1].fetch_add(1, Ordering::Relaxed),
                };
            }
        });
    }
}

/// How many bytes the daemon has written to its log file.
/// The length of the daemon's store file.
fn store_bytes(d: &Daemon) -> u64 {
    std::fs::metadata(d.db.join("data.mdb")).map_or(0, |m| m.len())
}

fn log_bytes(d: &Daemon) -> u64 {
    d.db.parent()
        .and_then(|dir| std::fs::metadata(dir.join("daemon.log")).ok())
        .map_or(0, |m| m.len())
}

/// Row 8: each of `attackers` posts calls with 1 MB of arguments back to back, each call's
/// arguments new (the same bytes again would be stored once). Counts refused plans (`c[0]`),
/// capacity or rate refusals (`c[1]`) and other answers (`c[2]`).
fn large_arguments(a: &mut Attack, addr: &str, attackers: &[Client]) {
    // Arguments just under the 1 MiB input limit, from 16 episodes: each is parsed,
    // canonicalised and hashed before its plan refuses it, and a refusal stores them whole.
    let pad = Arc::new("x".repeat(1_000_000));
    for (k, attacker) in attackers.iter().enumerate() {
        let pad = pad.clone();
        // New to the store: another episode's same bytes would be stored once.
        let body = move |n: u64| {
            let args = json!({"ms": "1", "pad": format!("{k:04}{n:08}{}", &pad[12..])});
            Arc::new(mcp_call("stall-wait", args))
        };
        keep_posting_each(
            a,
            addr,
            "/mcp/",
            &attacker.token,
            body,
            |answer| match answer {
                Ok(b) if b.contains("unknown argument") => Ok(0),
                Ok(b) if b.contains("capacity exceeded") => Ok(1),
                _ => Err(2),
            },
        );
    }
}

/// Row 9: each of `attackers` runs a [`slow_reader`] of one 1 MiB object.
fn slow_readers(a: &mut Attack, addr: &str, attackers: &[Client]) {
    // Eight sessions each store (or share) a 1 MiB object, the input of a refused call,
    // then ask for it on 50 connections each and never read the answers past their
    // status line.
    let args = json!({"ms": "1", "pad": "y".repeat(1_000_000)});
    let Ok(reference) = broker_core::object::Ref::of_json(&args) else {
        return;
    };
    for attacker in attackers {
        let (addr, token, args) = (addr.to_owned(), attacker.token.clone(), args.clone());
        a.spawn(move |stop, c| {
            let _ = post(&agent(), &addr, &token, &mcp_call("stall-wait", args));
            let request = format!(
                "GET /v1/objects/{reference}?payload=true HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\r\n"
            );
            slow_reader(&addr, &request, 50, &stop, &c)
        });
    }
}

/// Row 14: eight other episodes first commit 5,000 calls between them, which the attacker
/// may not see; then 64 threads of one credential ask for the log page from entry 0, each
/// request scanning those 5,000 entries to find none. Counts pages answered (`c[0]`), refusals
/// busy (`c[1]`) and other answers (`c[2]`).
fn log_scans(a: &mut Attack, d: &Daemon, attacker: &Client) {
    let Ok(fillers) = d.mint("filler", 8, 16) else {
        return;
    };
    let body = mcp_call("ailang-read", json!({"path": "f.txt"}));
    let filling: Vec<_> = fillers
        .into_iter()
        .map(|f| {
            let (addr, body) = (d.addr.clone(), body.clone());
            std::thread::spawn(move || {
                let agent = agent();
                for _ in 0..625 {
                    let _ = post(&agent, &addr, &f.token, &body);
                }
            })
        })
        .collect();
    for f in filling {
        let _ = f.join();
    }
    for _ in 0..64 {
        let (addr, token) = (d.addr.clone(), attacker.token.clone());
        a.spawn(move |stop, c| {
            let agent = agent();
            let url = format!("http://{addr}/v1/log?from=0&limit=500");
            while !stop.load(Ordering::Relaxed) {
                let r = agent
                    .get(&url)
                    .set("Authorization", &format!("Bearer {token}"))
                    .call();
                let i = match r {
                    Ok(_) => 0,
                    Err(ureq::Error::Status(503, _)) => 1,
                    Err(_) => 2,
                };
                c[i].fetch_add(1, Ordering::Relaxed);
            }
        });
    }
}

/// Which surface an attack's calls go through.
#[derive(Clone, Copy)]
enum Surface {
    Mcp,
    A2a,
}

/// Row 23: each of `attackers` keeps nine calls in flight, each a 64 KiB body of one-member
/// objects just under `[limits] json_values` (16,380 values): byte limits let them through, and
/// a call waiting its episode's turn holds what its parse built, some 200 bytes a value.
/// `stall-wait` refuses the unknown argument once the call's turn comes. Counts those refusals
/// (`c[0]`), busy refusals (`c[1]`), connections closed under a busy answer (`c[2]`) and the
/// rest.
fn values_at_the_limit(a: &mut Attack, addr: &str, attackers: &[Client]) {
    let mut body = String::from(
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"stall-wait","arguments":{"ms":"1","a":["#,
    );
    // 8 values in the envelope and arguments, 2 in each object.
    body.push_str(&[r#"{"a":0}"#; 8_186].join(","));
    body.push_str("]}}}");
    let body = Arc::new(body);
    let count = |answer: &Result<String, String>| match answer {
        Ok(b) if b.contains("unknown argument") => Ok(0),
        Ok(b) | Err(b) if b.contains("body_budget_bytes") => Ok(1),
        // Refused busy before the body was read, which is then not waited for (it is over
        // 64 KiB), so the connection closes under the answer.
        Err(e) if e.contains("Unexpected EOF") || e.contains("reset") => Ok(2),
        _ => Err(3),
    };
    for attacker in attackers {
        for _ in 0..9 {
            keep_posting(a, addr, &attacker.token, body.clone(), count);
        }
    }
}

/// Row 22: each of `attackers` posts a 1 MB MCP call in chunks of one byte (six bytes each on
/// the wire) back to back, on a connection of its own each time. Each chunk costs the daemon a
/// hand-over between two tasks: before `[server] body_small_pieces` one such body took 2.2 s of
/// its CPU. Counts refusals at that limit (`c[0]`), connections closed while sending with no
/// answer read (`c[1]`) and other answers (`c[2]`).
fn one_byte_chunks(a: &mut Attack, addr: &str, attackers: &[Client]) {
    let pad = "y".repeat(1_000_000);
    let body = mcp_call("stall-wait", json!({"ms": "1", "pad": pad}));
    let mut chunks = Vec::with_capacity(body.len() * 6 + 8);
    for b in body.bytes() {
        chunks.extend_from_slice(b"1\r\n");
        chunks.push(b);
        chunks.extend_from_slice(b"\r\n");
    }
    chunks.extend_from_slice(b"0\r\n\r\n");
    let chunks = Arc::new(chunks);
    for attacker in attackers {
        let (addr, token, chunks) = (addr.to_owned(), attacker.token.clone(), chunks.clone());
        a.spawn(move |stop, c| {
            let head = format!(
                "POST /mcp/ HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            );
            while !stop.load(Ordering::Relaxed) {
                let Ok(mut s) = TcpStream::connect(&addr) else {
                    continue;
                };
                let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
                let sent = s.write_all(head.as_bytes()).and_then(|()| s.write_all(&chunks));
                let mut answer = Vec::new();
                let _ = std::io::Read::read_to_end(&mut s, &mut answer);
                let text = String::from_utf8_lossy(&answer);
                let k = if text.contains("body_small_pieces") {
                    0
                } else if sent.is_err() && answer.is_empty() {
                    1
                } else {
                    2
                };
                c[k].fetch_add(1, Ordering::Relaxed);
            }
        });
    }
}

/// Rows 11 (MCP) and 17 (A2A): 32 new episodes, 9 threads each of [`write_new_content`].
fn large_writes(a: &mut Attack, d: &Daemon, surface: Surface) {
    // Agents writing large files at once: 32 episodes with 9 calls in flight each,
    // every call 1 MB of new content. Bodies past the body budget are refused; the
    // row measures what the calls that run hold.
    let Ok(writers) = d.mint("writer", 32, 16) else {
        return;
    };
    for w in writers {
        for k in 0..9 {
            let (addr, token) = (d.addr.clone(), w.token.clone());
            a.spawn(move |stop, c| write_new_content(&addr, &token, k, surface, &stop, &c));
        }
    }
}

/// Write 1 MB of new content to `w{k}.txt` back to back until told to stop, over MCP or as
/// A2A `tasks/send`. Counts writes (`c[0]`), refusals busy (`c[1]`), connections closed while
/// sending (`c[2]`) and other answers (`c[3]`).
fn write_new_content(
    addr: &str,
    token: &str,
    k: usize,
    surface: Surface,
    stop: &AtomicBool,
    c: &[AtomicU64; 4],
) {
    let agent = agent();
    // One body per thread, its first 12 content bytes a counter (and, over A2A, the last 12
    // of its task id), so that every write is new content without the attacker spending its
    // CPU on building megabytes.
    let content = format!("{:012}{}", 0, "w".repeat(1_000_000 - 12));
    let args = json!({"path": format!("w{k}.txt"), "content": content});
    let (path, mut body) = match surface {
        Surface::Mcp => ("/mcp/", mcp_call("ailang-write", args)),
        Surface::A2a => (
            "/a2a/",
            json!({"jsonrpc": "2.0", "id": 1, "method": "tasks/send", "params": {
                "id": format!("w{k}-{:012}", 0), "metadata": {"skill_id": "ailang-write"},
                "message": {"role": "user", "parts": [{"type": "data", "data": args}]}}})
            .to_string(),
        ),
    };
    let Some(at) = body.find("\"content\":\"").map(|i| i + 11) else {
        return;
    };
    let task = body
        .find(&format!("\"w{k}-"))
        .map(|i| i + 3 + k.to_string().len());
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let counter = format!("{n:012}");
        body.replace_range(at..at + 12, &counter);
        if let Some(t) = task {
            body.replace_range(t..t + 12, &counter);
        }
        match post_to(&agent, addr, path, token, &body) {
            Ok(b) if b.contains("\"ok\":true") => c[0].fetch_add(1, Ordering::Relaxed),
            Err(e) if e.starts_with("HTTP 503") => c[1].fetch_add(1, Ordering::Relaxed),
            // A2A answers a full body budget as a JSON-RPC error.
            Ok(b) if b.contains("request bodies") => c[1].fetch_add(1, Ordering::Relaxed),
            Err(e) if e.starts_with("HTTP ") => c[3].fetch_add(1, Ordering::Relaxed),
            Ok(_) => c[3].fetch_add(1, Ordering::Relaxed),
            // The daemon refused before reading the body, and closed.
            Err(_) => c[2].fetch_add(1, Ordering::Relaxed),
        };
    }
}

/// Keep 100 connections open, each having sent `first` (or nothing), until told to stop;
/// reopen each one the daemon closes. Counts connections opened (`c[0]`) and closed by the
/// daemon (`c[1]`).
fn hold_connections(addr: &str, first: Option<&[u8]>, stop: &AtomicBool, c: &[AtomicU64; 4]) {
    let mut conns: Vec<Option<TcpStream>> = (0..100).map(|_| None).collect();
    while !stop.load(Ordering::Relaxed) {
        for slot in conns.iter_mut() {
            match slot {
                None => {
                    if let Ok(mut s) = TcpStream::connect(addr) {
                        let _ = s.set_nonblocking(true);
                        if let Some(bytes) = first {
                            let _ = s.write_all(bytes);
                        }
                        c[0].fetch_add(1, Ordering::Relaxed);
                        *slot = Some(s);
                    }
                }
                Some(s) => {
                    let mut buf = [0u8; 512];
                    match std::io::Read::read(s, &mut buf) {
                        Ok(0) => {
                            c[1].fetch_add(1, Ordering::Relaxed);
                            *slot = None;
                        }
                        Err(e) if e.kind() != std::io::ErrorKind::WouldBlock => {
                            c[1].fetch_add(1, Ordering::Relaxed);
                            *slot = None;
                        }
                        _ => {}
                    }
                }
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Keep `count` connections each holding an answer it does not read: send `request`, read
/// the status line (counting 200 and 503 answers), then read nothing more; reconnect when the
/// daemon closes or resets a connection.
fn slow_reader(addr: &str, request: &str, count: usize, stop: &AtomicBool, c: &[AtomicU64; 4]) {
    let mut conns: Vec<Option<TcpStream>> = (0..count).map(|_| None).collect();
    while !stop.load(Ordering::Relaxed) {
        for slot in conns.iter_mut() {
            match slot {
                None => {
                    let Some(mut s) = connect_small_window(addr) else {
                        continue;
                    };
                    if s.write_all(request.as_bytes()).is_err() {
                        continue;
                    }
                    c[0].fetch_add(1, Ordering::Relaxed);
                    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                    let mut status = [0u8; 12];
                    match std::io::Read::read_exact(&mut s, &mut status) {
                        Ok(()) if status.ends_with(b" 200") => {
                            c[1].fetch_add(1, Ordering::Relaxed);
                            let _ = s.set_nonblocking(true);
                            *slot = Some(s);
                        }
                        Ok(()) if status.ends_with(b" 503") => {
                            c[2].fetch_add(1, Ordering::Relaxed);
                        }
                        _ => {}
                    }
                }
                Some(s) => {
                    // A reset leaves an error on the socket; a close, an empty peek. Neither
                    // takes the answer's bytes.
                    let mut byte = [0u8; 1];
                    let reset = matches!(s.take_error(), Ok(Some(_)) | Err(_));
                    let closed = match s.peek(&mut byte) {
                        Ok(0) => true,
                        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
                        Ok(_) => false,
                    };
                    if reset || closed {
                        c[3].fetch_add(1, Ordering::Relaxed);
                        *slot = None;
                    }
                }
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A connection whose receive buffer is set to 4 KiB before it connects, so its advertised
/// window stays small: an answer the client does not read then waits in the daemon, as it
/// would for a remote client that keeps its window shut, instead of in loopback's
/// autotuned buffers.
fn connect_small_window(addr: &str) -> Option<TcpStream> {
    let addr: std::net::SocketAddr = addr.parse().ok()?;
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).ok()?;
    s.set_recv_buffer_size(4096).ok()?;
    s.connect(&addr.into()).ok()?;
    Some(s.into())
}

/// The token of an authenticated attacker (held bodies with credentials).
fn legit_token_of(attackers: &[Client]) -> String {
    attackers[0].token.clone()
}

/// How the legitimate client connects.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Connecting {
    /// One connection, kept from call to call.
    Kept,
    /// A new connection for every call.
    Fresh,
    /// A new connection for every call, its request written [`LATE_WRITE`] after connecting.
    FreshWritingLate,
}

/// One client of its own episode calling `ailang-read` back to back for `measure`,
/// connecting as `connecting` says; with the first unexpected answer, if any.
fn legit_calls(
    addr: &str,
    legit: &Client,
    measure: Duration,
    connecting: Connecting,
) -> (Summary, Option<String>) {
    let agent = match connecting {
        Connecting::Kept => agent(),
        Connecting::Fresh | Connecting::FreshWritingLate => agent_without_pool(),
    };
    let body = mcp_call("ailang-read", json!({"path": "f.txt"}));
    let post = |agent: &ureq::Agent, addr: &str, token: &str, body: &str| match connecting {
        Connecting::FreshWritingLate => post_late(addr, token, body),
        Connecting::Kept | Connecting::Fresh => post(agent, addr, token, body),
    };
    let mut latencies = Vec::new();
    let (mut rejected, mut errors) = (0, 0);
    let mut first_error = None;
    let start = Instant::now();
    while start.elapsed() < measure {
        let t = Instant::now();
        match post(&agent, addr, &legit.token, &body) {
            Ok(b) if b.contains(r#""ok":true"#) => latencies.push(t.elapsed().as_nanos() as u64),
            Ok(b) if b.contains("capacity exceeded") => rejected += 1,
            answer => {
                errors += 1;
                let at = start.elapsed().as_secs_f64();
                first_error.get_or_insert_with(|| match answer {
                    Ok(b) => format!("at {at:.2} s: {}", b.chars().take(300).collect::<String>()),
                    Err(e) => format!("at {at:.2} s: {e}"),
                });
            }
        }
    }
    let summary = Summary::from_latencies(
        &mut latencies,
        rejected,
        errors,
        start.elapsed().as_secs_f64(),
    );
    (summary, first_error)
}

/// The printed table.
pub fn table(rows: &[AttackRow]) -> String {
    let mut out = String::from(
        "| attack | legit ok | legit refused | legit errors | p50 ms | p99 ms | daemon CPU s | peak RSS MiB | peak anon MiB | anon MiB 6 s after | peak fds | attackers saw |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n",
    );
    for r in rows {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {:.2} | {:.2} | {} | {} | {:.1} | {} | {} | {} |\n",
            r.name,
            r.legit.ok,
            r.legit.rejected,
            r.legit.errors,
            r.legit.p50_ns as f64 / 1e6,
            r.legit.p99_ns as f64 / 1e6,
            r.daemon_cpu_s
                .map(|s| format!("{s:.2}"))
                .unwrap_or_else(|| "?".into()),
            r.peak_rss_kib
                .map(|k| format!("{:.1}", k as f64 / 1024.0))
                .unwrap_or_else(|| "?".into()),
            r.peak_anon_kib as f64 / 1024.0,
            r.anon_after_kib
                .map(|k| format!("{:.1}", k as f64 / 1024.0))
                .unwrap_or_else(|| "?".into()),
            r.peak_fds,
            r.note
        ));
    }
    for r in rows {
        if let Some(e) = &r.legit_first_error {
            out.push_str(&format!(
                "note: {}: the legitimate client's first unexpected answer: {e}\n",
                r.name
            ));
        }
    }
    out
}

/// The rows as JSON.
pub fn to_json(rows: &[AttackRow]) -> Value {
    Value::Array(
        rows.iter()
            .map(|r| {
                json!({
                    "attack": r.name, "legit_ok": r.legit.ok, "legit_refused": r.legit.rejected,
                    "legit_errors": r.legit.errors, "p50_ms": r.legit.p50_ns as f64 / 1e6,
                    "p99_ms": r.legit.p99_ns as f64 / 1e6, "peak_rss_kib": r.peak_rss_kib,
                    "peak_anon_kib": r.peak_anon_kib, "anon_after_kib": r.anon_after_kib,
                    "peak_fds": r.peak_fds, "daemon_cpu_s": r.daemon_cpu_s, "attackers": r.note,
                    "legit_first_error": r.legit_first_error,
                })
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rows_note_names_the_first_other_answer_in_one_cut_line() {
        let note = || "3 refused, 1 other answers".to_owned();
        assert_eq!(with_first_other(note(), None), note());
        assert_eq!(
            with_first_other(note(), Some("Broken pipe (os error 32)\nmore".into())),
            "3 refused, 1 other answers; the first other answer: Broken pipe (os error 32)"
        );
        let long = with_first_other(note(), Some("x".repeat(500)));
        assert!(long.ends_with(&format!(": {}", "x".repeat(160))), "{long}");
    }
}
