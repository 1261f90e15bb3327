//! The closed-loop load generator: one OS thread per simulated client, each with its own
//! ureq agent (one keep-alive connection) and its own episode, sending the next request as
//! soon as the previous answer has been read in full.

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use crate::daemon::Client;
use crate::stats::Summary;

/// What each request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `GET /v1/health` (no session, no store access).
    Health,
    /// MCP `tools/call` `ailang-read` of the episode's 1 KiB `f.txt`.
    Read,
    /// MCP `tools/call` `ailang-write` of 1 KiB (unique content per call) to `w.txt`.
    Write,
    /// MCP `tools/call` `ailang-read` with an unknown argument: refused by the plan.
    Refusal,
    /// MCP `ping` with the session's credential: the protocol edge alone (authentication,
    /// JSON-RPC, the SSE answer), no plan and no store. The floor of every MCP row.
    Ping,
    /// Alternating `ailang-write` of unique 1 KiB to `f.txt` and `ailang-read` of it back,
    /// so that no two calls store the same objects (used to fill a store).
    Mix,
}

/// When a run ends.
#[derive(Debug, Clone, Copy)]
pub enum Stop {
    /// Run `warmup` unrecorded, then record answers that arrive during `measure`.
    Timed { warmup: Duration, measure: Duration },
    /// Run until this many successful calls in total (all recorded).
    Count(u64),
}

/// Result of one run.
pub struct Outcome {
    /// Per call: first attempt to successful answer, retries and back-off included.
    pub summary: Summary,
    /// Per successful attempt only.
    pub attempts: Summary,
    /// The first unexpected answer, for the report.
    pub first_error: Option<String>,
}

const WRITE_BYTES: usize = 1024;

const PING_BODY: &str = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;

fn mcp_body(name: &str, arguments: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"{name}","arguments":{arguments}}}}}"#
    )
}

/// A write of exactly 1 KiB of content, unique by `(thread, k)`.
fn write_body(path: &str, thread: usize, k: u64) -> String {
    let tag = format!("{thread:05}-{k:010}-");
    let pad = "y".repeat(WRITE_BYTES - tag.len());
    mcp_body(
        "ailang-write",
        &format!(r#"{{"path":"{path}","content":"{tag}{pad}"}}"#),
    )
}

enum Answer {
    Ok,
    Rejected,
    Error(String),
}

fn classify(kind: Kind, mcp_ok: bool, result: Result<ureq::Response, ureq::Error>) -> Answer {
    let response = match result {
        Ok(r) => r,
        Err(ureq::Error::Status(code, r)) => {
            let body = r.into_string().unwrap_or_default();
            return Answer::Error(format!("HTTP {code}: {}", clip(&body)));
        }
        Err(e) => return Answer::Error(format!("transport: {e}")),
    };
    let status = response.status();
    let body = match response.into_string() {
        Ok(b) => b,
        Err(e) => return Answer::Error(format!("body: {e}")),
    };
    if status != 200 {
        return Answer::Error(format!("HTTP {status}: {}", clip(&body)));
    }
    if kind == Kind::Health {
        return Answer::Ok;
    }
    if body.contains("host callback capacity exceeded") {
        return Answer::Rejected;
    }
    let expected = if kind == Kind::Ping {
        body.starts_with("event: message") && body.contains(r#""result":{}"#)
    } else if mcp_ok {
        // The structured content is unescaped JSON; the text copy has `\"ok\":true`.
        body.starts_with("event: message") && body.contains(r#""ok":true"#)
    } else {
        body.contains(r#""refused":"unknown argument"#)
    };
    if expected {
        Answer::Ok
    } else {
        Answer::Error(format!("unexpected answer: {}", clip(&body)))
    }
}

fn clip(s: &str) -> String {
    s.chars().take(400).collect()
}

struct Shared {
    committed: AtomicU64,
    first_error: Mutex<Option<String>>,
}

/// Run `kind` with one thread per client (`clients.len()` is the concurrency). After a
/// capacity rejection a client retries the same call after a jittered exponential back-off
/// starting at `backoff` (doubling per consecutive rejection, at most 64 × `backoff`).
pub fn run(addr: &str, kind: Kind, clients: &[Client], stop: Stop, backoff: Duration) -> Outcome {
    let n = clients.len();
    let shared = Arc::new(Shared {
        committed: AtomicU64::new(0),
        first_error: Mutex::new(None),
    });
    let barrier = Arc::new(Barrier::new(n + 1));
    let threads: Vec<_> = clients
        .iter()
        .enumerate()
        .map(|(t, client)| {
            let client = client.clone();
            let (shared, barrier) = (shared.clone(), barrier.clone());
            let addr = addr.to_owned();
            std::thread::Builder::new()
                .name(format!("client-{t}"))
                .stack_size(256 * 1024)
                .spawn(move || {
                    client_loop(t, &addr, kind, &client, stop, backoff, &shared, &barrier)
                })
                .expect("spawn client thread")
        })
        .collect();
    barrier.wait();
    let started = Instant::now();
    let mut latencies = Vec::new();
    let mut attempt_latencies = Vec::new();
    let (mut rejected, mut errors) = (0u64, 0u64);
    for th in threads {
        let r = th.join().expect("client thread");
        latencies.extend(r.calls);
        attempt_latencies.extend(r.attempts);
        rejected += r.rejected;
        errors += r.errors;
    }
    let seconds = match stop {
        Stop::Timed { measure, .. } => measure.as_secs_f64(),
        Stop::Count(_) => started.elapsed().as_secs_f64(),
    };
    let summary = Summary::from_latencies(&mut latencies, rejected, errors, seconds);
    let attempts = Summary::from_latencies(&mut attempt_latencies, rejected, errors, seconds);
    let first_error = shared.first_error.lock().map(|e| e.clone()).unwrap_or(None);
    Outcome {
        summary,
        attempts,
        first_error,
    }
}

struct ClientResult {
    calls: Vec<u64>,
    attempts: Vec<u64>,
    rejected: u64,
    errors: u64,
}

/// A polite agent's wait before retrying a rejected call: `base` × 2^n (n capped at 6, so at
/// most 64 × `base`) × a jitter in [0.5, 1.5), n counting the call's rejections so far.
struct Backoff {
    base: Duration,
    rejections: u32,
    /// xorshift64 state: the jitter.
    rng: u64,
}

impl Backoff {
    fn new(base: Duration, thread: usize) -> Backoff {
        Backoff {
            base,
            rejections: 0,
            rng: 0x9E37_79B9_7F4A_7C15u64 ^ (thread as u64).wrapping_mul(0xBF58_476D_1CE4_E5B9),
        }
    }

    /// The wait after one more rejection of the same call.
    fn next(&mut self) -> Duration {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let jitter = 0.5 + (self.rng >> 11) as f64 / (1u64 << 53) as f64;
        let wait = self.base.as_secs_f64() * f64::from(1u32 << self.rejections.min(6)) * jitter;
        self.rejections += 1;
        Duration::from_secs_f64(wait)
    }

    /// The call is done (answered or failed): the next one starts from `base`.
    fn reset(&mut self) {
        self.rejections = 0;
    }
}

/// Requests `from..from + calls` of `kind` from one client (a write's content is unique by
/// its number), one after the other, each answered before the next is sent; the first
/// answer that is not a success ends them.
pub fn in_sequence(
    addr: &str,
    client: &Client,
    kind: Kind,
    from: u64,
    calls: u64,
) -> Result<(), String> {
    let requester = Requester::new(addr, client);
    for k in from..from + calls {
        match requester.call(kind, 0, k) {
            Answer::Ok => {}
            Answer::Rejected => return Err(format!("{kind:?} call {k}: refused for capacity")),
            Answer::Error(e) => return Err(format!("{kind:?} call {k}: {e}")),
        }
    }
    Ok(())
}

/// One client's requests: its own agent (one keep-alive connection), credential and bodies.
struct Requester {
    agent: ureq::Agent,
    health_url: String,
    mcp_url: String,
    auth: String,
    read_body: String,
    refusal_body: String,
}

impl Requester {
    fn new(addr: &str, client: &Client) -> Requester {
        Requester {
            agent: ureq::AgentBuilder::new()
                .timeout(Duration::from_secs(60))
                .max_idle_connections_per_host(1)
                .build(),
            health_url: format!("http://{addr}/v1/health"),
            mcp_url: format!("http://{addr}/mcp/"),
            auth: format!("Bearer {}", client.token),
            read_body: mcp_body("ailang-read", r#"{"path":"f.txt"}"#),
            refusal_body: mcp_body("ailang-read", r#"{"path":"f.txt","limit":1}"#),
        }
    }

    /// Send client `t`'s `k`-th request of `kind` and classify its answer.
    fn call(&self, kind: Kind, t: usize, k: u64) -> Answer {
        // Mix alternates write (even k) and read-back (odd k) of the same file.
        let (body, mcp_ok): (Cow<str>, bool) = match kind {
            Kind::Health => return classify(kind, true, self.agent.get(&self.health_url).call()),
            Kind::Read => (Cow::Borrowed(&self.read_body), true),
            Kind::Write => (Cow::Owned(write_body("w.txt", t, k)), true),
            Kind::Refusal => (Cow::Borrowed(&self.refusal_body), false),
            Kind::Ping => (Cow::Borrowed(PING_BODY), true),
            Kind::Mix if k % 2 == 0 => (Cow::Owned(write_body("f.txt", t, k)), true),
            Kind::Mix => (Cow::Borrowed(&self.read_body), true),
        };
        let result = self
            .agent
            .post(&self.mcp_url)
            .set("Content-Type", "application/json")
            .set("Accept", "application/json, text/event-stream")
            .set("MCP-Protocol-Version", "2025-11-25")
            .set("Authorization", &self.auth)
            .send_string(&body);
        classify(kind, mcp_ok, result)
    }
}

#[allow(clippy::too_many_arguments)]
fn client_loop(
    t: usize,
    addr: &str,
    kind: Kind,
    client: &Client,
    stop: Stop,
    backoff: Duration,
    shared: &Shared,
    barrier: &Barrier,
) -> ClientResult {
    let requester = Requester::new(addr, client);
    let mut backoff = Backoff::new(backoff, t);
    let mut out = ClientResult {
        calls: Vec::with_capacity(1 << 14),
        attempts: Vec::with_capacity(1 << 14),
        rejected: 0,
        errors: 0,
    };
    let mut k = 0u64;
    // When the call being attempted sent its first attempt.
    let mut first_sent: Option<Instant> = None;

    barrier.wait();
    let start = Instant::now();
    let (record_from, end) = match stop {
        Stop::Timed { warmup, measure } => (start + warmup, Some(start + warmup + measure)),
        Stop::Count(_) => (start, None),
    };
    loop {
        match (stop, end) {
            (_, Some(end)) if Instant::now() >= end => break,
            (Stop::Count(total), _) if shared.committed.load(Ordering::Relaxed) >= total => break,
            _ => {}
        }
        let sent = Instant::now();
        let call_start = *first_sent.get_or_insert(sent);
        let answer = requester.call(kind, t, k);
        let done = Instant::now();
        let recorded = done >= record_from && end.is_none_or(|e| done <= e);
        match answer {
            Answer::Ok => {
                k += 1;
                first_sent = None;
                backoff.reset();
                if recorded {
                    out.attempts.push((done - sent).as_nanos() as u64);
                    out.calls.push((done - call_start).as_nanos() as u64);
                    shared.committed.fetch_add(1, Ordering::Relaxed);
                }
            }
            Answer::Rejected => {
                if recorded {
                    out.rejected += 1;
                }
                std::thread::sleep(backoff.next());
            }
            Answer::Error(e) => {
                first_sent = None;
                backoff.reset();
                if recorded {
                    out.errors += 1;
                }
                if let Ok(mut first) = shared.first_error.lock() {
                    first.get_or_insert_with(|| format!("episode {}: {e}", client.episode));
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rejected_call_waits_twice_as_long_each_time_up_to_64_times_the_base_with_jitter() {
        let base = Duration::from_millis(1);
        let mut b = Backoff::new(base, 7);
        for n in 0..10u32 {
            let nominal = base.as_secs_f64() * f64::from(1u32 << n.min(6));
            let wait = b.next().as_secs_f64();
            assert!(
                wait >= 0.5 * nominal && wait < 1.5 * nominal,
                "rejection {n}: {wait} s against {nominal} s"
            );
        }
        b.reset();
        let first = b.next().as_secs_f64();
        assert!((0.0005..0.0015).contains(&first), "{first}");
        // Clients draw different jitters.
        let (mut x, mut y) = (Backoff::new(base, 1), Backoff::new(base, 2));
        assert_ne!(x.next(), y.next());
    }

    #[test]
    fn write_bodies_carry_exactly_one_kib_of_unique_content() {
        let a = write_body("w.txt", 3, 7);
        let b = write_body("w.txt", 3, 8);
        assert_ne!(a, b);
        let v: serde_json::Value = serde_json::from_str(&a).unwrap();
        assert_eq!(v["params"]["name"], "ailang-write");
        assert_eq!(
            v["params"]["arguments"]["content"].as_str().unwrap().len(),
            WRITE_BYTES
        );
    }
}
