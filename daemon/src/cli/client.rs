//! Client verbs: talk to a running daemon over loopback HTTP.
//!
//! The session comes from `--session` or `$WORLD_SESSION`: either the 64-hex credential itself
//! (discouraged: it lands in shell history) or a file holding it.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Read};
use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::{json, Value};

use super::{CliResult, Failure};

pub const DEFAULT_ADDR: &str = "http://127.0.0.1:7644";

#[derive(Args, Debug, Clone)]
pub struct ClientArgs {
    /// The daemon's address, http://HOST:PORT.
    #[arg(long, env = "WORLD_ADDR", default_value = DEFAULT_ADDR)]
    pub addr: String,
    /// Session credential, or a file holding it (default: $WORLD_SESSION).
    // An OS string: a session file's name need not be UTF-8.
    #[arg(long)]
    pub session: Option<std::ffi::OsString>,
    /// How long to wait for the daemon's answer, in seconds (a call runs for up to the
    /// daemon's `[limits] call_deadline_ms`, 20 s by default).
    #[arg(long, value_name = "SECS", default_value = DEFAULT_TIMEOUT, value_parser = seconds)]
    pub timeout: Duration,
}

/// How long a client verb waits for an answer unless `--timeout` says otherwise, in seconds.
pub const DEFAULT_TIMEOUT: &str = "30";

/// `--timeout SECS` and its kin: a positive number of seconds, fractions allowed, at most a day.
pub(super) fn seconds(text: &str) -> Result<Duration, String> {
    let secs: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds (e.g. 30 or 0.5)"))?;
    if !(secs > 0.0 && secs <= 86_400.0) {
        return Err(format!(
            "{text} is out of range: more than 0 and at most 86400 seconds"
        ));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// How a failure for a daemon that was reached but did not answer in time ends.
const TOO_SLOW: &str = " (--timeout SECS waits longer)";
/// Said when the daemon closed a connection that carried a request before it answered.
const CUT_OFF: &str = "closed the connection before it answered";

/// A duration as the user wrote it in seconds: `30 s`, `0.5 s`.
pub(super) fn in_seconds(d: Duration) -> String {
    format!("{} s", d.as_secs_f64())
}

/// Whether an error (a transport failure's source, or the `io::Error` reading a body) is the
/// `--timeout` deadline passing.
fn timed_out(e: &(dyn std::error::Error + 'static)) -> bool {
    e.downcast_ref::<io::Error>()
        .is_some_and(|e| e.kind() == io::ErrorKind::TimedOut)
}

#[derive(Subcommand, Debug)]
pub enum LogCommand {
    /// One log entry.
    #[command(
        after_help = "Examples:\n  worldd log get 2\n  worldd log get 0 --session .world/demo.session"
    )]
    Get {
        /// The entry's log index (0 is the genesis).
        index: u64,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Consecutive entries.
    #[command(after_help = "Examples:\n  worldd log range --from 10 --limit 5")]
    Range {
        /// The first log index to read.
        #[arg(long, default_value_t = 0)]
        from: u64,
        /// The most entries to print (default 100, at most 500); the answer's `next` says
        /// where the next page starts.
        #[arg(long)]
        limit: Option<u64>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// The newest entries, one line each; `--follow` prints new ones as they are committed.
    #[command(
        after_help = "Examples:\n  worldd log tail\n  worldd log tail -n 50 --follow --session .world/demo.session\n  worldd log tail -f --json | jq -c 'select(.outcome != \"ok\")'"
    )]
    Tail(super::tail::TailArgs),
}

#[derive(Subcommand, Debug)]
pub enum ObjectCommand {
    /// One object's metadata (and payload with --payload).
    #[command(
        after_help = "Examples:\n  worldd object get sha256:ed302aa6e4b6d3cc1cc7bfae4c3ef6a2c4b0b8e7b7bcd5d5f7c4b8a0e1d2c3b4\n  worldd object get sha256:ed302aa6e4b6d3cc1cc7bfae4c3ef6a2c4b0b8e7b7bcd5d5f7c4b8a0e1d2c3b4 --payload"
    )]
    Get {
        reference: String,
        #[arg(long)]
        payload: bool,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Objects with a semantic id.
    #[command(after_help = "Examples:\n  worldd object find world/effect-record/v1 --limit 10")]
    Find {
        semantic_id: String,
        #[arg(long)]
        after: Option<String>,
        #[arg(long)]
        limit: Option<u64>,
        #[command(flatten)]
        client: ClientArgs,
    },
}

#[derive(Subcommand, Debug)]
pub enum ToolsCommand {
    /// The tools your session sees.
    #[command(
        after_help = "Examples:\n  worldd tools list\n  worldd tools list --json --session .world/demo.session"
    )]
    List {
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        client: ClientArgs,
    },
}

#[derive(Args, Debug)]
pub struct CallArgs {
    /// The tool id (or its MCP name, as `tools list` shows it beside the id).
    pub tool: String,
    /// A string argument, KEY=VALUE (repeatable).
    #[arg(long = "arg")]
    pub args: Vec<String>,
    /// A JSON argument, KEY=JSON (repeatable).
    #[arg(long = "arg-json")]
    pub args_json: Vec<String>,
    /// All arguments as one JSON object, `@FILE`, or `-` for stdin.
    #[arg(long)]
    pub json: Option<String>,
    /// Print exactly the committed output bytes (and a newline), e.g. for `worldd why -`.
    #[arg(long)]
    pub json_out: bool,
    /// Exit 3 when the committed result says `ok:false`.
    #[arg(long)]
    pub strict: bool,
    /// An idempotency key (1–128 of A-Z a-z 0-9 . _ -): the same call resent with the same key
    /// returns its committed result and runs nothing again; `worldd calls get KEY` says
    /// whether it landed.
    #[arg(long, value_name = "KEY")]
    pub idempotency_key: Option<String>,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Resolve the session credential text from `--session`, else `$WORLD_SESSION`: the 64-hex
/// credential itself, or a file holding it. Each mistake gets its own sentence.
pub(super) fn credential(arg: &Option<std::ffi::OsString>) -> Result<Option<String>, Failure> {
    let (given, source): (std::ffi::OsString, _) = match arg {
        Some(v) => (v.clone(), "--session"),
        // Read as the path it may be: a file name need not be UTF-8, and a variable set to one
        // was otherwise taken for no variable at all.
        None => match std::env::var_os("WORLD_SESSION") {
            Some(v) => (v, "$WORLD_SESSION"),
            None => return Ok(None),
        },
    };
    // The name as shown in a sentence; the path as given when it is not UTF-8 (no credential
    // is, so it can only name a file).
    let (raw, path) = match given.to_str() {
        Some(text) => {
            let text = text.trim().to_owned();
            (text.clone(), std::path::PathBuf::from(text))
        }
        // Shown quoted as a shell would need it, its bytes escaped.
        None => (
            crate::text::shell_path(std::path::Path::new(&given)),
            std::path::PathBuf::from(&given),
        ),
    };
    const MAKE_ONE: &str =
        "`worldd session new EPISODE --preset se-tools --out FILE` writes a session file";
    if raw.is_empty() {
        return Err(Failure::usage(format!(
            "{source} is empty: give a session file or the 64-hex credential ({MAKE_ONE})"
        )));
    }
    if broker_core::session::is_64_hex(&raw) {
        // Once a process, however many requests a verb makes.
        static WARNED: std::sync::Once = std::sync::Once::new();
        WARNED.call_once(|| errln!("worldd: warning: a credential on the command line or in the environment is visible to other processes; prefer a file"));
        return Ok(Some(raw));
    }
    let path = path.as_path();
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let looks_hex = raw.bytes().all(|b| b.is_ascii_hexdigit());
            return Err(Failure::usage(if looks_hex {
                format!(
                    "{source} {raw}: not a credential (a credential is 64 hex digits; this has {}) and no file of that name exists",
                    raw.len()
                )
            } else {
                format!("{source} {raw}: no such session file ({MAKE_ONE})")
            }));
        }
        Err(e) => return Err(Failure::usage(format!("session file {raw}: {e}"))),
    };
    if meta.is_dir() {
        return Err(Failure::usage(format!(
            "{source} {raw} is a directory, not a session file ({MAKE_ONE})"
        )));
    }
    // Read to its bound (a size says nothing of a device) before anything is said of it.
    let text = super::input::file_text(
        path,
        super::input::SESSION_FILE_BYTES,
        &format!("session file {raw}"),
    )?;
    {
        use std::os::unix::fs::PermissionsExt;
        // Once a process, as for a credential on the command line: a verb that makes several
        // requests read the file for each and said it each time.
        static WARNED: std::sync::Once = std::sync::Once::new();
        if let Some(loose) = loose_session_file(meta.permissions().mode()) {
            WARNED.call_once(|| {
                errln!(
                    "worldd: warning: session file {raw} is {loose} by group or others; `chmod 600 {}`",
                    crate::text::shell_path(path)
                )
            });
        }
    }
    let token = super::input::credential(&text);
    if !broker_core::session::is_64_hex(token) {
        return Err(Failure::usage(format!(
            "session file {raw} does not hold a session credential (64 hex digits)"
        )));
    }
    Ok(Some(token.to_owned()))
}

/// What others may do with a session file of `mode` that they should not: read the credential,
/// or replace it with theirs (a file only its owner writes is no risk to run under). `None` for
/// a file only its owner reads and writes.
fn loose_session_file(mode: u32) -> Option<&'static str> {
    match (mode & 0o044 != 0, mode & 0o022 != 0) {
        (false, false) => None,
        (true, false) => Some("readable"),
        (false, true) => Some("writable"),
        (true, true) => Some("readable and writable"),
    }
}

/// Where a client verb's daemon address came from: `--addr` on the command line,
/// `$WORLD_ADDR`, or neither (the default address).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AddrSource {
    Flag,
    Env,
    Default,
}

impl AddrSource {
    /// Read from this process's command line and environment, as clap took the value.
    pub(super) fn of_this_process() -> AddrSource {
        let flagged = std::env::args_os()
            .skip(1)
            .take_while(|a| a != "--")
            .any(|a| a == "--addr" || a.to_string_lossy().starts_with("--addr="));
        if flagged {
            AddrSource::Flag
        } else if std::env::var_os("WORLD_ADDR").is_some_and(|v| !v.is_empty()) {
            AddrSource::Env
        } else {
            AddrSource::Default
        }
    }

    /// The name a refusal of the address gives it: `--addr` or `$WORLD_ADDR`.
    fn name(self) -> &'static str {
        match self {
            AddrSource::Env => "$WORLD_ADDR",
            AddrSource::Flag | AddrSource::Default => "--addr",
        }
    }

    /// Where the address came from, for a sentence naming the daemon asked.
    fn origin(self) -> &'static str {
        match self {
            AddrSource::Flag => "from --addr",
            AddrSource::Env => "from $WORLD_ADDR",
            AddrSource::Default => "the default address",
        }
    }
}

/// The daemon's base URL from `--addr`: `http://HOST:PORT` (the scheme may be left out), with
/// no path: the verbs add `/v1/…` and `/mcp/` themselves. A refusal names where the address
/// came from (`--addr` or `$WORLD_ADDR`).
pub(super) fn base_url(addr: &str) -> Result<String, Failure> {
    let source = AddrSource::of_this_process();
    let flag = source.name();
    // `WORLD_ADDR=` (set but empty) is taken as unset, as most tools take an empty variable:
    // it was refused as an `--addr ""` nobody gave.
    let addr = if addr.trim().is_empty() && source != AddrSource::Flag {
        DEFAULT_ADDR
    } else {
        addr
    };
    let trimmed = addr.trim().trim_end_matches('/');
    // A scheme is case-insensitive (RFC 3986 3.1): `HTTP://` is `http://`.
    let rest = if let Some(r) = trimmed
        .get(..7)
        .filter(|s| s.eq_ignore_ascii_case("http://"))
        .map(|_| &trimmed[7..])
    {
        r
    } else if trimmed.contains("://") {
        return Err(Failure::usage(format!(
            "{flag} {addr}: worldd serves plain HTTP on loopback; give http://HOST:PORT"
        )));
    } else if trimmed
        .get(..5)
        .is_some_and(|s| s.eq_ignore_ascii_case("http:"))
    {
        // `http:/HOST` would be read as a host named `http` with a path.
        return Err(Failure::usage(format!(
            "{flag} {addr}: the scheme wants two slashes: want http://HOST:PORT, e.g. {DEFAULT_ADDR}"
        )));
    } else {
        trimmed
    };
    // The URL parser reads `\` as `/` (WHATWG), so it would put a path before the route.
    if rest.contains('\\') {
        return Err(Failure::usage(format!(
            "{flag} {addr}: a backslash has no place in the address: want http://HOST:PORT, e.g. {DEFAULT_ADDR}"
        )));
    }
    // A query or a fragment would end up before the route the verbs add (`/?x=1/v1/head`).
    let authority = rest.split('/').next().unwrap_or(rest);
    if let Some(at) = authority.find(['?', '#']) {
        return Err(Failure::usage(format!(
            "{flag} {addr}: give the daemon's base address without a query or fragment, e.g. http://{} (the verbs add /v1/… and /mcp/ themselves)",
            &authority[..at]
        )));
    }
    if let Some((host, _)) = rest.split_once('/') {
        return Err(Failure::usage(format!(
            "{flag} {addr}: give the daemon's base address without a path, e.g. http://{host} (the verbs add /v1/… and /mcp/ themselves)"
        )));
    }
    if rest.is_empty() {
        return Err(Failure::usage(format!(
            "{flag} {addr:?}: want http://HOST:PORT, e.g. {DEFAULT_ADDR}"
        )));
    }
    // `HOST:` with no port would go to port 80, where no daemon listens by default.
    if rest.ends_with(':') {
        return Err(Failure::usage(format!(
            "{flag} {addr}: the port is empty: want http://HOST:PORT, e.g. {DEFAULT_ADDR}"
        )));
    }
    Ok(format!("http://{rest}"))
}

fn agent(timeout: Duration) -> ureq::Agent {
    ureq::AgentBuilder::new().timeout(timeout).build()
}

/// A daemon's address and the session credential, resolved once, and one HTTP agent that
/// keeps its connection open across requests (for verbs that make many).
pub(super) struct Connection {
    base: String,
    token: Option<String>,
    agent: ureq::Agent,
    timeout: Duration,
}

impl Connection {
    pub(super) fn open(c: &ClientArgs) -> Result<Connection, Failure> {
        Ok(Connection {
            base: base_url(&c.addr)?,
            token: credential(&c.session)?,
            agent: agent(c.timeout),
            timeout: c.timeout,
        })
    }

    /// The daemon's base URL, `http://HOST:PORT`.
    pub(super) fn base(&self) -> &str {
        &self.base
    }

    /// Send a request; `Ok((status, body))` for any HTTP answer.
    pub(super) fn send(
        &self,
        method: &str,
        path: &str,
        body: Option<(&str, &[u8])>,
        extra: &[(&str, &str)],
    ) -> Result<(u16, Vec<u8>), Failure> {
        let base = &self.base;
        let url = format!("{base}{path}");
        let mut req = self.agent.request(method, &url);
        if let Some(token) = &self.token {
            req = req.set("Authorization", &format!("Bearer {token}"));
        }
        for (k, v) in extra {
            req = req.set(k, v);
        }
        // Whether the whole body was handed over: a connection closed before it was did not
        // carry the request whole, so the daemon ran nothing.
        let drained = std::cell::Cell::new(body.is_none_or(|(_, bytes)| bytes.is_empty()));
        let res = match body {
            Some((ct, bytes)) => req
                .set("Content-Type", ct)
                .set("Content-Length", &bytes.len().to_string())
                .send(Sending {
                    rest: bytes,
                    drained: &drained,
                }),
            None => req.call(),
        };
        let res = match res {
            Ok(r) => r,
            // The daemon answered before it had read the whole body (a body over its limit is
            // answered 413 at once) and closed, so the rest met a closed connection: what it
            // said is asked again with the request's head alone, which cannot run anything.
            Err(ureq::Error::Transport(t))
                if t.kind() == ureq::ErrorKind::Io && !drained.get() =>
            {
                let (ct, bytes) = body.unwrap_or_default();
                // A send timeout is `WouldBlock` from the socket (a read's is `TimedOut`).
                let stalled = std::error::Error::source(&t).is_some_and(|e| {
                    timed_out(e)
                        || e.downcast_ref::<io::Error>()
                            .is_some_and(|e| e.kind() == io::ErrorKind::WouldBlock)
                });
                if stalled {
                    return Err(Failure::usage(format!(
                        "the daemon at {base} did not take the whole request to {path} ({} bytes) within {} (--timeout SECS waits longer): it never received it whole, so nothing ran",
                        bytes.len(),
                        in_seconds(self.timeout)
                    )));
                }
                return Err(match self.answer_to_head(method, path, ct, bytes.len(), extra) {
                    Some((status, answer)) => Failure::usage(format!(
                        "{path} returned HTTP {status}: {}; the daemon answered before it read the whole request, so nothing ran",
                        String::from_utf8_lossy(&answer).trim()
                    )),
                    None => Failure::usage(format!(
                        "the daemon at {base} closed the connection while the request to {path} ({} bytes) was still being sent ({t}): it never received it whole, so nothing ran",
                        bytes.len()
                    )),
                });
            }
            Err(ureq::Error::Status(_, r)) => r,
            Err(ureq::Error::Transport(t))
                if t.kind() == ureq::ErrorKind::Io
                    && std::error::Error::source(&t).is_some_and(timed_out) =>
            {
                return Err(self.too_slow(&format!("did not answer {path}")))
            }
            // Connected, sent, and the connection closed with no answer: the daemon took the
            // request, then stopped (killed, crashed, restarted). Not "cannot reach".
            Err(ureq::Error::Transport(t)) if t.kind() == ureq::ErrorKind::Io => {
                return Err(Failure::usage(format!(
                    "the daemon at {base} {CUT_OFF} {path} ({t}); it may have stopped or restarted"
                )))
            }
            Err(ureq::Error::Transport(t)) => {
                return Err(Failure::usage(format!(
                    "cannot reach the daemon at {base} ({t}); is `worldd serve` running there? (--addr or $WORLD_ADDR names another address)"
                )))
            }
        };
        let status = res.status();
        if status == 401 && self.token.is_none() {
            return Err(Failure::usage(format!(
                "{path} needs a session credential and none was given: pass --session FILE (or set $WORLD_SESSION); `worldd session new EPISODE --preset se-tools --out FILE` makes one"
            )));
        }
        let mut out = Vec::new();
        res.into_reader()
            .take(64 << 20)
            .read_to_end(&mut out)
            .map_err(|e| {
                if timed_out(&e) {
                    self.too_slow(&format!("began its answer to {path} but did not finish it"))
                } else {
                    Failure::usage(format!("{path}: {e}"))
                }
            })?;
        Ok((status, out))
    }

    /// The daemon's answer to the head of a request whose body it would not take (`None`
    /// when it gives none within a few seconds): the head names the body's length and no body
    /// follows, so nothing can run.
    fn answer_to_head(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        length: usize,
        extra: &[(&str, &str)],
    ) -> Option<(u16, Vec<u8>)> {
        use std::io::Write;
        use std::net::ToSocketAddrs;
        let authority = self.base.strip_prefix("http://")?;
        let wait = self.timeout.min(Duration::from_secs(5));
        let addr = authority
            .to_socket_addrs()
            .or_else(|_| format!("{authority}:80").to_socket_addrs())
            .ok()?
            .next()?;
        let mut stream = std::net::TcpStream::connect_timeout(&addr, wait).ok()?;
        stream.set_read_timeout(Some(wait)).ok()?;
        stream.set_write_timeout(Some(wait)).ok()?;
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: {content_type}\r\nContent-Length: {length}\r\nConnection: close\r\n"
        );
        if let Some(token) = &self.token {
            head.push_str(&format!("Authorization: Bearer {token}\r\n"));
        }
        for (k, v) in extra {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes()).ok()?;
        let mut answer = Vec::new();
        // What the daemon writes before it closes; a daemon that waits for the body answers
        // nothing and the read times out.
        let _ = (&stream).take(64 << 10).read_to_end(&mut answer);
        let end = answer.windows(4).position(|w| w == b"\r\n\r\n")?;
        let status_line = String::from_utf8_lossy(&answer[..end]).into_owned();
        let status: u16 = status_line
            .strip_prefix("HTTP/1.1 ")?
            .get(..3)?
            .parse()
            .ok()?;
        Some((status, answer[end + 4..].to_vec()))
    }

    /// The daemon was reached, but `what` within `--timeout`.
    fn too_slow(&self, what: &str) -> Failure {
        Failure::usage(format!(
            "the daemon at {} {what} within {}{TOO_SLOW}",
            self.base,
            in_seconds(self.timeout)
        ))
    }
}

/// A request body handed to the HTTP agent, saying when it has all been taken.
struct Sending<'a> {
    rest: &'a [u8],
    drained: &'a std::cell::Cell<bool>,
}

impl Read for Sending<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.rest.read(buf)?;
        if self.rest.is_empty() {
            self.drained.set(true);
        }
        Ok(n)
    }
}

/// Send a request; `Ok((status, body))` for any HTTP answer.
pub(super) fn send(
    c: &ClientArgs,
    method: &str,
    path: &str,
    body: Option<(&str, &[u8])>,
    extra: &[(&str, &str)],
) -> Result<(u16, Vec<u8>), Failure> {
    Connection::open(c)?.send(method, path, body, extra)
}

/// GET a REST route and fail with the daemon's error envelope on non-2xx.
pub(super) fn get(c: &ClientArgs, path: &str) -> Result<Vec<u8>, Failure> {
    let (status, body) = send(c, "GET", path, None, &[])?;
    if (200..300).contains(&status) {
        return Ok(body);
    }
    Err(refused(c, path, status, &body))
}

/// A REST route's error answer, said: `{path} returned HTTP {status} {class}: {message}`
/// from its envelope (the body itself when it is none), and what to do about a refused
/// credential (naming the daemon asked).
pub(super) fn refused(c: &ClientArgs, path: &str, status: u16, body: &[u8]) -> Failure {
    let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let class = v["error"]["class"].as_str().unwrap_or("Error");
    let message = match v["error"]["message"].as_str() {
        Some(m) => m.to_owned(),
        None => String::from_utf8_lossy(body).trim().to_owned(),
    };
    Failure::usage(format!(
        "{path} returned HTTP {status} {class}: {message}{}",
        credential_hint(
            &base_url(&c.addr).unwrap_or_else(|_| c.addr.clone()),
            status,
            class
        )
    ))
}

/// What to do about a credential the daemon refused (401, but sent), keyed on the class it
/// answered: `SessionExpired` was found and is past its expiry, so a new one is all it takes;
/// `SessionUnknown` has no record there (revoked, or minted for another store); a refusal
/// without a class keeps all three causes open. The daemon asked is named, and where its
/// address came from: another daemon answering on the default address refuses a credential
/// that is fine where it was minted.
pub(super) fn credential_hint(base: &str, status: u16, class: &str) -> String {
    if status != 401 || class == "SessionAbsent" {
        return String::new();
    }
    let asked = format!(
        "the daemon at {base}, {}",
        AddrSource::of_this_process().origin()
    );
    let elsewhere = "if your daemon listens elsewhere, give its address with --addr or $WORLD_ADDR; else mint a new one with worldd session mint";
    match class {
        "SessionExpired" => format!(
            " ({asked}, says this credential has expired: mint a new one with worldd session mint)"
        ),
        "SessionUnknown" => format!(
            " ({asked}, does not know this credential: revoked, or minted for another store; {elsewhere})"
        ),
        _ => format!(
            " ({asked}, does not know this credential or no longer honours it: revoked, expired, or minted for another store; {elsewhere})"
        ),
    }
}

/// The class of a `/mcp/` 401, whose body is the refusal's text alone (no envelope): the
/// daemon's words for an unknown and an expired credential, as the REST envelope's message.
fn mcp_refusal_class(text: &str) -> &'static str {
    match text.trim() {
        "unknown session credential" => "SessionUnknown",
        "session credential has expired" => "SessionExpired",
        _ => "",
    }
}

/// `text` as one path segment (or query value): every byte but letters, digits, `-`, `.`,
/// `_`, `~` and `:` percent-encoded, so that what the operator typed (`../../v1/budget`) names the one
/// resource it was given for and no other route. (A whole segment `.` or `..` would still be
/// a step up to a URL parser, encoded or not: see [`pieces`].)
pub(super) fn segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b':') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `text` as path segments, its `/`s kept (a semantic id's are the route's own); `what` names
/// it in the refusal of a piece that is empty, `.` or `..`, which no name has and a URL parser
/// would take as a step.
pub(super) fn pieces(text: &str, what: &str) -> Result<String, Failure> {
    let mut out = Vec::new();
    for piece in text.split('/') {
        if matches!(piece, "" | "." | "..") {
            return Err(Failure::usage(format!(
                "{what} {}: no part of it between slashes may be empty, . or ..",
                super::terminal::one_line(text)
            )));
        }
        out.push(segment(piece));
    }
    Ok(out.join("/"))
}

fn print_body(body: &[u8]) -> CliResult {
    outln!("{}", String::from_utf8_lossy(body).trim_end());
    Ok(())
}

/// Prints the body, then fails unless its `status` is `ok`: a daemon past its store's reserve,
/// on a failing disk or whose store was swapped answers 200 yet refuses every call, and
/// `worldd health && …` must not read that as healthy.
pub fn health(c: ClientArgs) -> CliResult {
    let body = get(&c, "/v1/health")?;
    print_body(&body)?;
    let base = base_url(&c.addr)?;
    let status = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v.get("status").and_then(Value::as_str).map(str::to_owned));
    match status.as_deref() {
        Some("ok") => Ok(()),
        Some(other) => Err(Failure::usage(format!(
            "the daemon at {base} is not healthy: status {}: it refuses new calls; see docs/operators.md#running-problems",
            super::terminal::one_line(other)
        ))),
        None => Err(Failure::usage(format!(
            "the daemon at {base} answered /v1/health without a status: not a worldd daemon, or one this worldd does not know"
        ))),
    }
}

pub fn head(c: ClientArgs) -> CliResult {
    print_body(&get(&c, "/v1/head")?)
}

pub fn log(cmd: LogCommand) -> CliResult {
    match cmd {
        LogCommand::Get { index, client } => {
            print_body(&get(&client, &format!("/v1/log/{index}"))?)?
        }
        LogCommand::Range {
            from,
            limit,
            client,
        } => {
            let mut path = format!("/v1/log?from={from}");
            if let Some(l) = limit {
                path.push_str(&format!("&limit={l}"));
            }
            print_body(&get(&client, &path)?)?
        }
        LogCommand::Tail(a) => return super::tail::run(a),
    }
    Ok(())
}

pub fn object(cmd: ObjectCommand) -> CliResult {
    match cmd {
        ObjectCommand::Get {
            reference,
            payload,
            client,
        } => {
            let q = if payload { "?payload=true" } else { "" };
            print_body(&get(
                &client,
                &format!("/v1/objects/{}{q}", pieces(&reference, "ref")?),
            )?)?
        }
        ObjectCommand::Find {
            semantic_id,
            after,
            limit,
            client,
        } => {
            let mut q = Vec::new();
            if let Some(a) = after {
                q.push(format!("after={}", segment(&a)));
            }
            if let Some(l) = limit {
                q.push(format!("limit={l}"));
            }
            let q = if q.is_empty() {
                String::new()
            } else {
                format!("?{}", q.join("&"))
            };
            print_body(&get(
                &client,
                // A semantic id's `/`s are the route's own; each piece is encoded.
                &format!(
                    "/v1/objects/by-semantic-id/{}{q}",
                    pieces(&semantic_id, "semantic id")?
                ),
            )?)?
        }
    }
    Ok(())
}

/// One MCP request; returns the JSON-RPC reply object.
fn mcp(c: &ClientArgs, method: &str, params: Value) -> Result<Value, Failure> {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let bytes = serde_json::to_vec(&body).map_err(|e| Failure::usage(e.to_string()))?;
    let (status, reply) = send(
        c,
        "POST",
        "/mcp/",
        Some(("application/json", &bytes)),
        &[
            ("Accept", "application/json, text/event-stream"),
            ("MCP-Protocol-Version", "2025-11-25"),
        ],
    )?;
    let text = String::from_utf8_lossy(&reply).into_owned();
    if status != 200 {
        return Err(Failure::usage(format!(
            "/mcp/ returned HTTP {status}: {}{}",
            text.trim(),
            credential_hint(
                &base_url(&c.addr).unwrap_or_else(|_| c.addr.clone()),
                status,
                mcp_refusal_class(&text)
            )
        )));
    }
    let json_text = text
        .lines()
        .find_map(|l| l.strip_prefix("data: "))
        .map(str::to_owned)
        .unwrap_or(text);
    let v: Value = serde_json::from_str(&json_text)
        .map_err(|e| Failure::usage(format!("/mcp/: unreadable reply: {e}")))?;
    if let Some(err) = v.get("error") {
        return Err(Failure::usage(format!(
            "/mcp/ {method}: error {}: {}",
            err["code"],
            err["message"].as_str().unwrap_or("")
        )));
    }
    Ok(v)
}

/// `GET /v1/handlers`, or `None` when the daemon does not answer it (an older daemon).
fn handlers_report(c: &ClientArgs) -> Option<Value> {
    let body = get(c, "/v1/handlers").ok()?;
    serde_json::from_slice(&body).ok()
}

/// Tool id → why it cannot run, from a `/v1/handlers` answer.
fn cannot_run(report: &Value) -> BTreeMap<String, String> {
    report["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| t["canRun"] == Value::Bool(false))
        .filter_map(|t| {
            Some((
                t["name"].as_str()?.to_owned(),
                t["reason"].as_str().unwrap_or("").to_owned(),
            ))
        })
        .collect()
}

/// One line per plugin that declined to start (in its own words) or is left out by the
/// selection, of those that bear on one of the tools `stuck` (ids the report says cannot run):
/// a plugin declaring an effect such a tool needs and no loaded plugin serves, or named by
/// such a tool's `plugin` field as its own plugin, not started here (a field, not the reason's
/// words, which may be reworded). Every other plugin is left out: a git plugin without an
/// author has nothing to do with `ailang-run`, and naming it as a cause sent a newcomer to
/// configure it. A daemon whose report lists no plugin's effects gets every line.
fn declined_lines(report: &Value, stuck: &[&str]) -> Vec<String> {
    let names = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e["effect"].as_str().or(e.as_str()).map(str::to_owned))
            .collect()
    };
    let served: BTreeSet<String> = report["plugins"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|p| names(&p["effects"]))
        .collect();
    let tools: Vec<&Value> = report["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| t["name"].as_str().is_some_and(|n| stuck.contains(&n)))
        .collect();
    let missing: BTreeSet<String> = tools
        .iter()
        .flat_map(|t| names(&t["effects"]))
        .filter(|e| !served.contains(e))
        .collect();
    let bears = |p: &Value| {
        let Some(declares) = p.get("effects") else {
            return true;
        };
        let name = p["name"].as_str().unwrap_or("");
        names(declares).iter().any(|e| missing.contains(e))
            || tools.iter().any(|t| t["plugin"].as_str() == Some(name))
    };
    let list = |key: &str| {
        report[key]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| bears(p))
            .cloned()
            .collect::<Vec<Value>>()
    };
    let declined = list("declined").into_iter().map(|d| {
        // The plugin's own words, one line: a line break in them must not start a line that
        // reads as the listing's.
        format!(
            "plugin {} did not start: {}",
            super::terminal::one_line(d["name"].as_str().unwrap_or("?")),
            super::terminal::one_line(d["reason"].as_str().unwrap_or(""))
        )
    });
    let unselected = list("unselected").into_iter().map(|u| {
        format!(
            "plugin {} is not selected here: --handler or [serve] handlers leave it out",
            u["name"].as_str().unwrap_or("?")
        )
    });
    declined.chain(unselected).collect()
}

pub fn tools(cmd: ToolsCommand) -> CliResult {
    let ToolsCommand::List { json, client } = cmd;
    let v = mcp(&client, "tools/list", json!({}))?;
    let tools = v["result"]["tools"].as_array().cloned().unwrap_or_default();
    if json {
        outln!("{}", Value::Array(tools));
        return Ok(());
    }
    let report = handlers_report(&client);
    let blocked: BTreeMap<String, String> = report
        .as_ref()
        .map(cannot_run)
        .unwrap_or_default()
        .into_iter()
        .map(|(id, why)| (crate::tools::mcp_name(&id), why))
        .collect();
    for t in &tools {
        let name = t["name"].as_str().unwrap_or("?");
        let required: Vec<&str> = t["inputSchema"]["required"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        outln!(
            "{}  {}{}{}",
            listed_name(name),
            super::terminal::one_line(&summary(t["description"].as_str().unwrap_or(""))),
            if required.is_empty() {
                String::new()
            } else {
                format!("  (required: {})", required.join(", "))
            },
            match blocked.get(name) {
                Some(why) => format!("\n    cannot run here: {why}"),
                None => String::new(),
            }
        );
    }
    let stuck = tools
        .iter()
        .filter(|t| blocked.contains_key(t["name"].as_str().unwrap_or("")))
        .count();
    if stuck == 0 {
        outln!("{} tool(s)", tools.len());
    } else {
        outln!("{} tool(s), {stuck} cannot run here", tools.len());
        // The report's tools are the session's, as listed: its cannot-run ones are these.
        let stuck = report.as_ref().map(cannot_run).unwrap_or_default();
        let stuck: Vec<&str> = stuck.keys().map(String::as_str).collect();
        for line in report
            .as_ref()
            .map(|r| declined_lines(r, &stuck))
            .unwrap_or_default()
        {
            outln!("{line}");
        }
    }
    Ok(())
}

/// How `tools list` names a tool: by its id, which is what `call` takes, with the MCP name
/// beside it where the two differ. Printing only the MCP name let a name copied from the list
/// run another tool: `call` escapes what it is given, and `show_dhello` (the MCP name of
/// `show.hello`) is also a valid id of its own.
fn listed_name(name: &str) -> String {
    match crate::tools::transition_id(name) {
        Some(id) if id == name => super::terminal::one_line(name).into_owned(),
        Some(id) => format!(
            "{} (MCP name {})",
            super::terminal::one_line(&id),
            super::terminal::one_line(name)
        ),
        None => super::terminal::one_line(name).into_owned(),
    }
}

/// The tool `call` was given, as the id and MCP name it resolves to: the string as a tool id
/// (its MCP name is its escape), or, when no tool has that id, the MCP name of one
/// (`tools list` shows both). A string that is the id of one of the session's tools and the
/// MCP name of another is refused: which tool runs must not depend on a guess.
fn resolve_tool(c: &ClientArgs, typed: &str) -> Result<(String, String), Failure> {
    let as_id = (typed.to_owned(), crate::tools::mcp_name(typed));
    // Only a string holding an escape (`_u`, `_d`, `_s`) can be an MCP name other than its
    // own escape: anything else needs no look at the session's tools.
    let Some(other) = crate::tools::transition_id(typed).filter(|id| id != typed) else {
        return Ok(as_id);
    };
    let Ok(v) = mcp(c, "tools/list", json!({})) else {
        return Ok(as_id);
    };
    let names: std::collections::BTreeSet<&str> = v["result"]["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str())
        .collect();
    match (names.contains(as_id.1.as_str()), names.contains(typed)) {
        (true, true) => Err(Failure::usage(format!(
            "tool {} is ambiguous: it is the id of one tool (MCP name {}) and the MCP name of another (id {}); nothing ran. Call the first by its MCP name {}, the second by its id {} (worldd tools list shows both)",
            dialect::quote::quote(typed),
            as_id.1,
            dialect::quote::quote(&other),
            as_id.1,
            other
        ))),
        (false, true) => Ok((other, typed.to_owned())),
        _ => Ok(as_id),
    }
}

/// The first sentence of a description, at most 100 characters.
fn summary(description: &str) -> String {
    let line = description.lines().next().unwrap_or("");
    let sentence = match line.find(". ") {
        Some(end) => &line[..=end],
        None => line,
    };
    if sentence.chars().count() <= 100 {
        return sentence.to_owned();
    }
    let cut: String = sentence.chars().take(99).collect();
    format!("{}…", cut.trim_end())
}

/// After a host failure: when the daemon says the tool cannot run here (rule R8, checked
/// before anything runs), the real cause; `None` when the tool could run, so the effect may
/// have run.
fn r8_cause(c: &ClientArgs, tool: &str) -> Option<String> {
    let report = handlers_report(c)?;
    let why = cannot_run(&report).remove(tool)?;
    let mut text = format!(
        "{tool} cannot run in this daemon: {why}; nothing ran and nothing was spent (rule R8)"
    );
    for line in declined_lines(&report, &[tool]) {
        text.push_str("\n  ");
        text.push_str(&line);
    }
    Some(text)
}

fn call_arguments(a: &CallArgs) -> Result<Value, Failure> {
    let mut args = match &a.json {
        None => serde_json::Map::new(),
        Some(spec) => {
            let text = if spec == "-" {
                super::input::text(std::io::stdin(), super::input::DOCUMENT_BYTES, "stdin")?
            } else if let Some(file) = spec.strip_prefix('@') {
                if file.is_empty() {
                    return Err(Failure::usage(
                        "--json @: no file named after the @ (--json @FILE reads FILE; --json - reads stdin)",
                    ));
                }
                // A file that cannot be opened is named with the flag that named it.
                let opened = std::fs::File::open(file)
                    .map_err(|e| Failure::usage(format!("--json @{file}: {e}")))?;
                super::input::text(opened, super::input::DOCUMENT_BYTES, file)?
            } else {
                spec.clone()
            };
            let source = match spec.as_str() {
                "-" => "--json -".to_owned(),
                s if s.starts_with('@') => format!("--json {s}"),
                _ => "--json".to_owned(),
            };
            match strict_json(&text, &source)? {
                Some(Value::Object(m)) => m,
                _ => return Err(Failure::usage("--json must be one JSON object")),
            }
        }
    };
    for kv in &a.args {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| Failure::usage(format!("--arg {kv:?}: want KEY=VALUE")))?;
        args.insert(k.into(), Value::String(v.into()));
    }
    for kv in &a.args_json {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| Failure::usage(format!("--arg-json {kv:?}: want KEY=JSON")))?;
        let source = format!("--arg-json {k}");
        let v = strict_json(v, &source)?.ok_or_else(|| {
            let e = serde_json::from_str::<Value>(v).err();
            Failure::usage(format!(
                "{source}: {}{}",
                e.map_or_else(|| "not JSON".to_owned(), |e| e.to_string()),
                bare_string_tip(k, v)
            ))
        })?;
        args.insert(k.into(), v);
    }
    Ok(Value::Object(args))
}

/// What to do when `--arg-json K=V` is not JSON because V is a bare word (`path=hello.txt`):
/// a JSON string is quoted, and `--arg` sends strings as they are. Nothing for what starts as
/// JSON does (an object, an array, a string, a number, a literal), which is malformed JSON.
fn bare_string_tip(key: &str, value: &str) -> String {
    let starts_as_json = value.trim_start().chars().next().is_none_or(|c| {
        matches!(c, '{' | '[' | '"' | '-' | '0'..='9')
            || ["true", "false", "null"]
                .iter()
                .any(|w| value.trim_start().starts_with(w))
    });
    if starts_as_json {
        return String::new();
    }
    let quoted = format!("{key}={}", Value::String(value.to_owned()));
    format!(
        "; a string is JSON in quotes (--arg-json {}), or give it with --arg {}",
        crate::text::shell_word(&quoted),
        crate::text::shell_word(&format!("{key}={value}"))
    )
}

/// `text` parsed as the daemon parses a body (`broker_core::canon`): `None` when it is not
/// JSON at all (each caller says that its own way); refused, naming `source` (the flag or
/// file it came from), when it is JSON the daemon refuses as ambiguous or inexact. A plain
/// parse kept the last of two members of one name, where the daemon refuses the body (its
/// parsers disagree on which counts), and made an integer beyond ±(2^53−1) a float that is
/// another number, so what was sent was not what was written.
fn strict_json(text: &str, source: &str) -> Result<Option<Value>, Failure> {
    use broker_core::canon::{self, CanonError};
    match canon::parse(text.as_bytes()) {
        Ok(v) => match inexact_float(&v) {
            // Written with a fraction or an exponent, it reads as a float the daemon takes for
            // an integer past the exact range, and refuses naming the rounded number.
            Some(read) => Err(Failure::usage(format!(
                "{source}: not strict JSON: a number written with a fraction or an exponent is the integer {read} as read, beyond ±(2^53−1), which canonical JSON cannot hold exactly (the number written may have been another); send it as a string"
            ))),
            None => Ok(Some(v)),
        },
        Err(CanonError::Syntax { .. } | CanonError::NotUtf8 | CanonError::TrailingData) => Ok(None),
        Err(e) => Err(Failure::usage(format!("{source}: not strict JSON: {e}"))),
    }
}

/// The first float in `v` whose value is an integer beyond ±(2^53−1), as read.
fn inexact_float(v: &Value) -> Option<String> {
    const EXACT: f64 = 9_007_199_254_740_991.0;
    match v {
        Value::Number(n) if n.is_f64() => n
            .as_f64()
            .filter(|f| f.fract() == 0.0 && f.abs() > EXACT)
            .map(|f| format!("{f:.0}")),
        Value::Array(items) => items.iter().find_map(inexact_float),
        Value::Object(members) => members.values().find_map(inexact_float),
        _ => None,
    }
}

/// What Ctrl-C during a call leaves behind, said on stderr by the signal handler
/// ([`interrupt_note`]); set once, before the handler is installed.
static INTERRUPTED: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Ctrl-C while a call is in flight ended `worldd call` without a word, though the request may
/// have reached the daemon. Until the returned guard drops, SIGINT first says so (and how to
/// check), then ends the process by SIGINT as before.
fn interrupt_note(key: Option<&str>) -> impl Drop {
    let check = match key {
        Some(key) => format!("`worldd calls get {key}` says whether it landed, and resending it with the same key never runs it twice"),
        None => "`worldd log tail` shows what committed: check it before retrying a write".to_owned(),
    };
    let _ = INTERRUPTED.set(format!(
        "\nworldd: interrupted while the call was in flight: it may still run and commit; {check}\n"
    ));
    extern "C" fn said_then_default(_: libc::c_int) {
        if let Some(text) = INTERRUPTED.get() {
            // SAFETY: write(2) is async-signal-safe; the text is a static set before the
            // handler was installed.
            unsafe {
                libc::write(2, text.as_ptr().cast(), text.len());
            }
        }
        // SAFETY: signal(2) and raise(3) are async-signal-safe: the default disposition back,
        // and the signal again, so the process ends by it as it would have.
        unsafe {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            libc::raise(libc::SIGINT);
        }
    }
    struct Restore(libc::sighandler_t);
    impl Drop for Restore {
        fn drop(&mut self) {
            // SAFETY: puts back the disposition this guard replaced.
            unsafe {
                libc::signal(libc::SIGINT, self.0);
            }
        }
    }
    // SAFETY: the handler only makes async-signal-safe calls.
    let before = unsafe {
        libc::signal(
            libc::SIGINT,
            said_then_default as extern "C" fn(libc::c_int) as libc::sighandler_t,
        )
    };
    // A call started with SIGINT ignored (a background job of a shell) keeps ignoring it.
    if before == libc::SIG_IGN {
        // SAFETY: as above.
        unsafe {
            libc::signal(libc::SIGINT, libc::SIG_IGN);
        }
    }
    Restore(before)
}

/// Whether a tool call's request reached the daemon and got no whole answer (the timeout, or a
/// connection cut): the call may be running, and may commit.
fn went_unanswered(f: &Failure) -> bool {
    f.message.ends_with(TOO_SLOW) || f.message.contains(CUT_OFF)
}

/// `f` of a tool call that [`went_unanswered`], saying how to find out whether it committed
/// before retrying it: a script must not run a write twice.
fn may_still_commit(mut f: Failure, key: Option<&str>) -> Failure {
    f.message.push_str(&match key {
        Some(key) => format!(
            " — the call may still run and commit; `worldd calls get {key}` says whether it landed, and resending it with the same key never runs it twice"
        ),
        None => " — the call may still run and commit; `worldd log tail` shows what committed: check it before retrying a write".to_owned(),
    });
    f
}

pub fn call(a: CallArgs) -> CliResult {
    let args = call_arguments(&a)?;
    let (id, name) = resolve_tool(&a.client, &a.tool)?;
    let mut params = json!({"name": name, "arguments": args});
    if let Some(key) = &a.idempotency_key {
        params["_meta"] = json!({ crate::mcp::IDEMPOTENCY_KEY: key });
    }
    let sent = {
        let _note = interrupt_note(a.idempotency_key.as_deref());
        mcp(&a.client, "tools/call", params)
    };
    let v = match sent {
        Ok(v) => v,
        Err(f) if went_unanswered(&f) => {
            return Err(may_still_commit(f, a.idempotency_key.as_deref()))
        }
        Err(f) if f.message.contains("error -32602: unknown tool ") => {
            return Err(unknown_tool(&a.client, &a.tool))
        }
        Err(f) if !f.message.contains("error -32603") => return Err(f),
        Err(f) => {
            // A host failure. Rule R8 refuses before anything runs, and the daemon can say so.
            if let Some(cause) = r8_cause(&a.client, &id) {
                return Err(Failure::usage(cause));
            }
            // Otherwise the effect may have run. Say what the log shows.
            let probe = get(&a.client, "/v1/head").ok();
            let hint = match probe {
                Some(h) => format!(
                    " — the log head is now {}; check the log before retrying a write",
                    String::from_utf8_lossy(&h).trim()
                ),
                None => " — no world head could be read".into(),
            };
            return Err(Failure::usage(format!("{}{hint}", f.message)));
        }
    };
    let text = v["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    let written = if a.json_out {
        super::output::try_write_committed(&text)
    } else {
        let pretty = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|o| serde_json::to_string_pretty(&o).ok())
            .unwrap_or(text.clone());
        super::output::try_write(format!("{pretty}\n"))
    };
    if let Err(e) = written {
        // The call has committed: said so, or a script would run the write again.
        let meta = &v["result"]["_meta"];
        return Err(super::output::unwritten_after_commit(
            e,
            meta["world/invocationId"].as_str(),
            meta["world/entryIndex"].as_u64(),
            a.idempotency_key.as_deref(),
        ));
    }
    // The output says an effect was denied or failed, not why: the reason travels in
    // `_meta`. Said on stderr; stdout and the exit code stay as they were.
    let meta = &v["result"]["_meta"];
    let failed = meta["world/effects"]
        .as_array()
        .is_some_and(|effects| effects.iter().any(|e| e["status"] == "failed"));
    // Only a failed effect needs the effects' classes, which `_meta` does not carry.
    let reads = if failed {
        handlers_report(&a.client)
            .map(|report| read_effects(&report))
            .unwrap_or_default()
    } else {
        BTreeSet::new()
    };
    for line in effect_notes(meta, &reads) {
        errln!("worldd: {line}");
    }
    if a.strict {
        let out = &v["result"]["structuredContent"];
        if out["ok"] == Value::Bool(false) {
            return Err(Failure::integrity("the tool answered ok:false"));
        }
        // Denied and failed effects of tools without a finish phase carry no `ok`.
        if let Some(bad) = out["world"]["effects"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|e| e["status"] != "ok")
        {
            return Err(Failure::integrity(format!(
                "the effect ended {}",
                bad["status"].as_str().unwrap_or("badly")
            )));
        }
    }
    Ok(())
}

/// The effects a `/v1/handlers` answer declares read-class: a handler of one that failed
/// changed nothing.
fn read_effects(report: &Value) -> BTreeSet<String> {
    report["plugins"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|p| p["effects"].as_array().into_iter().flatten())
        .filter(|e| e["class"] == "read")
        .filter_map(|e| Some(e["effect"].as_str()?.to_owned()))
        .collect()
}

/// One line per effect of a call's `_meta["world/effects"]` that did not end ok: its id,
/// effect, status, the broker's denial and what it means. `reads` are the effects that only
/// read: a failed one wrote nothing, and is not said to have partly written.
fn effect_notes(meta: &Value, reads: &BTreeSet<String>) -> Vec<String> {
    let outcome = &meta["world/outcome"];
    meta["world/effects"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["status"] != "ok")
        .map(|e| {
            let id = e["id"].as_str().unwrap_or("?");
            let effect = e["effect"].as_str().unwrap_or("?");
            let status = e["status"].as_str().unwrap_or("?");
            let what = match (status, e["denial"].as_str()) {
                ("denied", Some("denied:budget")) => {
                    let left = e["budgetAfter"]
                        .as_u64()
                        .or_else(|| outcome["remaining"].as_u64())
                        .map_or_else(|| "nothing".to_owned(), |n| n.to_string());
                    format!("denied: denied:budget — this grant has {left} left; nothing ran (worldd budget shows what is left)")
                }
                ("denied", Some("denied:scope")) => "denied: denied:scope — no grant of this session covers the effect at that scope; nothing ran (worldd budget lists the grants)".to_owned(),
                ("denied", Some("denied:effect-name")) => format!("denied: denied:effect-name — this session has no grant of {effect}; nothing ran (worldd budget lists the grants)"),
                ("denied", Some("denied:expired")) => "denied: denied:expired — the session credential has expired; nothing ran (mint a new one with worldd session mint)".to_owned(),
                ("denied", Some("denied:handler")) => "denied: denied:handler — its handler declined the request before it ran; nothing ran (the output says why)".to_owned(),
                ("denied", other) => format!("denied: {}; nothing ran", other.unwrap_or("no reason given")),
                ("failed", _) if reads.contains(effect) => "failed — its handler failed; the effect only reads, so nothing was changed (the daemon's log says why, `effect failed: …`)".to_owned(),
                ("failed", _) => "failed — its handler failed; a write may have partly run (worldd why shows what was recorded; the daemon's log says why, `effect failed: …`)".to_owned(),
                (other, _) => format!("ended {other}"),
            };
            format!("effect {id} ({effect}) {what}")
        })
        .collect()
}

/// The daemon knows no tool of the MCP name `tool` escapes to: say the id as typed (not its
/// escaped MCP name), and the nearest of the session's tools.
fn unknown_tool(c: &ClientArgs, tool: &str) -> Failure {
    let ids: Vec<String> = mcp(c, "tools/list", json!({}))
        .ok()
        .and_then(|v| v["result"]["tools"].as_array().cloned())
        .into_iter()
        .flatten()
        .filter_map(|t| crate::tools::transition_id(t["name"].as_str()?))
        .collect();
    let near = crate::spelling::nearest(tool, ids.iter().map(String::as_str), true)
        .map(|id| format!("; did you mean {id}?"))
        .unwrap_or_default();
    Failure::usage(format!(
        "unknown tool {}: this session has no tool of that id{near} (worldd tools list shows them)",
        dialect::quote::quote(tool)
    ))
}

#[derive(Args, Debug)]
pub struct PublishArgs {
    /// A transition bundle: `{"transitions":[…documents…]}`.
    pub bundle: std::path::PathBuf,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Publish a bundle through the broker: the `registry-publish` tool, so the session needs a
/// `Registry.Publish` grant and the call is journaled and committed like any other.
pub fn publish(a: PublishArgs) -> CliResult {
    let text = super::input::file_text(
        &a.bundle,
        super::input::DOCUMENT_BYTES,
        &a.bundle.display().to_string(),
    )?;
    let file = a.bundle.display().to_string();
    let bundle = match strict_json(&text, &file)? {
        Some(bundle) => bundle,
        None => {
            let e = serde_json::from_str::<Value>(&text)
                .err()
                .map_or_else(|| "not JSON".to_owned(), |e| e.to_string());
            return Err(Failure::usage(format!("{file}: not JSON: {e}")));
        }
    };
    // A publish is a tool call: what it lacks an answer for, or cannot print, may have
    // committed, and is said as `call` says it.
    let v = mcp(
        &a.client,
        "tools/call",
        json!({"name": "registry-publish", "arguments": {"bundle": bundle}}),
    )
    .map_err(|f| {
        if went_unanswered(&f) {
            may_still_commit(f, None)
        } else {
            f
        }
    })?;
    let out = &v["result"]["structuredContent"];
    let pretty = serde_json::to_string_pretty(out).unwrap_or_default();
    if let Err(e) = super::output::try_write(format!("{pretty}\n")) {
        let meta = &v["result"]["_meta"];
        return Err(super::output::unwritten_after_commit(
            e,
            meta["world/invocationId"].as_str(),
            meta["world/entryIndex"].as_u64(),
            None,
        ));
    }
    if out["ok"] == Value::Bool(true) {
        Ok(())
    } else {
        Err(Failure::usage(format!(
            "publish refused: {}",
            out["refused"]
                .as_str()
                .unwrap_or("the Registry.Publish effect did not succeed")
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tool's own plugin was found by matching the end of the reason's English text: a
    /// rewording dropped the "not selected" line. It is read from the tool's `plugin` field.
    #[test]
    fn a_tools_own_plugin_is_named_from_its_plugin_field_whatever_the_reason_says() {
        let report = |reason: &str| {
            json!({
                "plugins": [{"name": "workspace", "effects": [{"effect": "Workspace.Read", "class": "read"}]}],
                "declined": [],
                "unselected": [
                    {"name": "misfit", "effects": [{"effect": "Misfit.Do", "class": "read"}]},
                    {"name": "git", "effects": [{"effect": "Git.Commit", "class": "write"}]}
                ],
                "tools": [{"name": "misfit-steal", "effects": ["Workspace.Read"], "canRun": false,
                           "reason": reason, "plugin": "misfit"}]
            })
        };
        let line = "plugin misfit is not selected here: --handler or [serve] handlers leave it out";
        for reason in [
            "transition declares an effect this daemon has no handler for (its plugin misfit is not started here)",
            "transition declares an effect this daemon has no handler for (plugin misfit: not running)",
        ] {
            assert_eq!(
                declined_lines(&report(reason), &["misfit-steal"]),
                vec![line.to_owned()]
            );
        }
        // Without the field, the reason's words name no plugin.
        let mut bare = report(
            "transition declares an effect this daemon has no handler for (its plugin misfit is not started here)",
        );
        bare["tools"][0].as_object_mut().unwrap().remove("plugin");
        assert_eq!(
            declined_lines(&bare, &["misfit-steal"]),
            Vec::<String>::new()
        );
    }
}
