//! `worldd log tail [-n N] [--follow] [--json]`: the newest entries of a running daemon's
//! log, one line each, and with `--follow` every new entry as it is committed (through
//! `GET /v1/log/stream`, resumed with `Last-Event-ID` when the connection drops: the index
//! and hash of the last entry printed, so that a log rolled back meanwhile (a restore) is said,
//! and ends the verb, instead of being followed from an index that now holds other entries).

use std::io::{BufRead, BufReader, Write};
use std::time::Duration;

use clap::Args;
use serde_json::Value;

use super::client::{self, ClientArgs};
use super::terminal::{one_line, shown};
use super::{CliResult, Failure};

/// Pages of 500 positions `log tail` reads back at most looking for the session's entries: a
/// session that sees few entries of a long log would otherwise read all of it.
const SCAN_PAGES: usize = 200;

/// Reconnections in a row without an event before `--follow` gives up.
const MAX_RECONNECTS: u32 = 5;

/// `--idle-timeout`'s default, in seconds: three of the daemon's keep-alive intervals.
const IDLE_TIMEOUT: &str = "45";

#[derive(Args, Debug)]
pub struct TailArgs {
    /// How many of the newest entries to print first (at most 500).
    #[arg(short = 'n', long = "lines", default_value_t = 10)]
    pub lines: usize,
    /// Keep printing new entries as they are committed.
    #[arg(short = 'f', long)]
    pub follow: bool,
    /// One JSON summary per line instead of a table row.
    #[arg(long)]
    pub json: bool,
    /// With --follow: reconnect when the stream sends nothing for this many seconds; give more
    /// than 15 (the daemon sends a keep-alive comment every 15 s on a quiet stream).
    #[arg(long, value_name = "SECS", default_value = IDLE_TIMEOUT, value_parser = client::seconds)]
    pub idle_timeout: Duration,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// One summary as a line: index, outcome, tool, episode, invocation id, entry hash.
fn line(v: &Value, json: bool) -> String {
    if json {
        return v.to_string();
    }
    // Each field on the entry's own line, whatever the daemon served in it.
    let s = |k: &str| one_line(v[k].as_str().unwrap_or("-"));
    let tool = match (v["tool"].as_str(), v["header"]["writtenBy"].as_str()) {
        (Some(t), _) => one_line(t).into_owned(),
        (None, Some("world:genesis")) => "genesis".into(),
        (None, Some(w)) => format!("commit by {}", one_line(w)),
        (None, None) => "-".into(),
    };
    let hash = s("entryHash");
    format!(
        "{:>6}  {:<13} {:<20} {:<12} {:<40} {}",
        v["header"]["entryIndex"]
            .as_u64()
            .map_or("?".to_owned(), |i| i.to_string()),
        s("outcome"),
        tool,
        s("episode"),
        s("invocationId"),
        hash.get(..15)
            .map_or(hash.clone().into_owned(), |h| format!("{h}…"))
    )
}

/// Print; `false` when stdout is gone (the reader of a pipe quit), which ends the verb quietly;
/// any other failure to write ends it with its cause.
fn print(out: &mut impl Write, text: &str) -> Result<bool, Failure> {
    match writeln!(out, "{}", shown(text)).and_then(|_| out.flush()) {
        Ok(()) => Ok(true),
        Err(e) if super::output::reader_gone(&e) => Ok(false),
        Err(e) => Err(super::output::failure(e)),
    }
}

pub fn run(a: TailArgs) -> CliResult {
    // A quiet stream sends a keep-alive comment every 15 s: a shorter idle timeout takes a
    // healthy, quiet daemon for a dead stream and, five reconnections later, gives up on it.
    // Said before anything else (a test may want a short one; a person wants to know).
    let keep_alive = crate::log_stream::KEEP_ALIVE;
    if a.follow && a.idle_timeout <= keep_alive {
        errln!(
            "worldd: warning: --idle-timeout {} is not longer than the {} s between the daemon's keep-alive comments: a quiet log will read as a dead stream, and tail gives up after {MAX_RECONNECTS} reconnections that bring nothing; give more than {} (the default is {IDLE_TIMEOUT})",
            a.idle_timeout.as_secs_f64(),
            keep_alive.as_secs(),
            keep_alive.as_secs()
        );
    }
    let (items, next) = newest_visible(&a.client, a.lines.min(500))?;
    let mut out = std::io::stdout().lock();
    for v in &items {
        if !print(&mut out, &line(v, a.json))? {
            return Ok(());
        }
    }
    if !a.follow {
        return Ok(());
    }
    exit_when_stdout_closes();
    let mut resume = Resume {
        next,
        last: items.last().and_then(seen),
    };
    let mut failures = 0;
    loop {
        match follow_once(&a, &mut resume, &mut out) {
            Ok(Followed::OutputClosed) => return Ok(()),
            Ok(Followed::Ended { got_events }) => {
                if got_events {
                    failures = 0;
                }
                failures += 1;
                if failures > MAX_RECONNECTS {
                    return Err(Failure::usage(
                        "the log stream ended and could not be resumed",
                    ));
                }
            }
            Err(f) if f.code == 0 => {
                failures += 1;
                if failures > MAX_RECONNECTS {
                    return Err(Failure::usage(format!(
                        "the log stream ended and could not be resumed: {}",
                        f.message
                    )));
                }
            }
            Err(f) => return Err(f),
        }
        std::thread::sleep(Duration::from_millis(250 << failures.min(4)));
    }
}

/// The newest `wanted` entries this session may see, oldest first, and where the log continues
/// (`next` of the newest page). A page of `/v1/log/summaries` scans index positions, and holds
/// only the entries the session may see among them: on a daemon that serves other episodes the
/// newest positions may hold none of the agent's, which `log tail` then showed as an empty log
/// (and `worldd call` sends an agent here to see whether its write committed). Pages are read
/// back from the head, 500 positions at a time, until `wanted` are found or entry 0 is reached,
/// at most [`SCAN_PAGES`] pages (said when that stops it).
fn newest_visible(c: &ClientArgs, wanted: usize) -> Result<(Vec<Value>, u64), Failure> {
    const PAGE: u64 = 500;
    let read = |query: &str| -> Result<Value, Failure> {
        let body = client::get(c, &format!("/v1/log/summaries?{query}"))?;
        serde_json::from_slice(&body)
            .map_err(|e| Failure::usage(format!("/v1/log/summaries: unreadable reply: {e}")))
    };
    if wanted == 0 {
        // Only where the log goes on (`-n 0 -f`: what is committed from now on).
        let page = read("limit=1")?;
        return Ok((Vec::new(), page["next"].as_u64().unwrap_or(0)));
    }
    let page = read(&format!("limit={PAGE}"))?;
    let next = page["next"].as_u64().unwrap_or(0);
    let mut items = page["items"].as_array().cloned().unwrap_or_default();
    let mut from = page["from"].as_u64().unwrap_or(0);
    let mut pages = 1;
    while items.len() < wanted && from > 0 {
        if pages == SCAN_PAGES {
            errln!(
                "worldd: log tail: {} of the {wanted} entries asked for are among the newest {} log positions, as far back as it reads; `worldd log range --from N` reads from any position",
                items.len(),
                next.saturating_sub(from)
            );
            break;
        }
        pages += 1;
        let start = from.saturating_sub(PAGE);
        let older = read(&format!("from={start}&limit={}", from - start))?;
        let mut older = older["items"].as_array().cloned().unwrap_or_default();
        older.append(&mut items);
        items = older;
        from = start;
    }
    let skip = items.len().saturating_sub(wanted);
    Ok((items.split_off(skip), next))
}

/// On a quiet daemon nothing is written for minutes, so a failed write would notice the reader
/// of a pipe gone (`worldd log tail -f | head -n 1`) only at the next entry, and the pipeline
/// would not end. A thread waits on stdout itself, as `tail -f` does: when its reader goes
/// away, the verb ends, with exit 0 as when a write finds it gone.
fn exit_when_stdout_closes() {
    std::thread::spawn(|| loop {
        let mut fd = libc::pollfd {
            fd: libc::STDOUT_FILENO,
            // No events asked for: POLLERR (a pipe without a reader) and POLLHUP (a hung-up
            // terminal or socket) are reported anyway; a file or a terminal that stays never
            // wakes this thread.
            events: 0,
            revents: 0,
        };
        // SAFETY: one pollfd, on this thread's stack, for the duration of the call.
        let n = unsafe { libc::poll(&mut fd, 1, -1) };
        if n < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        if fd.revents & libc::POLLNVAL != 0 {
            // No stdout at all (`>&-`): nothing to watch.
            return;
        }
        if fd.revents & (libc::POLLERR | libc::POLLHUP) != 0 {
            std::process::exit(0);
        }
    });
}

/// Where `--follow` resumes: after the last entry printed, named by its index and hash (the
/// stream's event id), else at `next`.
struct Resume {
    next: u64,
    last: Option<(u64, String)>,
}

/// A summary's index and entry hash.
fn seen(v: &Value) -> Option<(u64, String)> {
    Some((
        v["header"]["entryIndex"].as_u64()?,
        v["entryHash"].as_str()?.to_owned(),
    ))
}

enum Followed {
    /// The stream closed (the daemon restarted or shut down): reconnect.
    Ended { got_events: bool },
    /// Stdout is gone.
    OutputClosed,
}

/// One connection to the stream. A failure with code 0 is worth retrying (the connection);
/// any other is final (the daemon's refusal).
fn follow_once(
    a: &TailArgs,
    resume: &mut Resume,
    out: &mut impl Write,
) -> Result<Followed, Failure> {
    let retry = |m: String| Failure {
        code: 0,
        message: m,
    };
    let url = format!("{}/v1/log/stream", client::base_url(&a.client.addr)?);
    // No overall deadline (the stream is endless); a read deadline past the keep-alive comment
    // notices a peer that went silent.
    let agent = ureq::AgentBuilder::new()
        .timeout_connect(a.client.timeout)
        .timeout_read(a.idle_timeout)
        .build();
    let mut req = agent.get(&url);
    if let Some(token) = client::credential(&a.client.session)? {
        req = req.set("Authorization", &format!("Bearer {token}"));
    }
    // Resume after the last entry printed, by index and hash: the daemon says `rewound` when
    // that entry is no longer in its log. Without one, after the page read (genesis is entry 0,
    // so `next` is at least 1 once a page was read).
    req = match (&resume.last, resume.next.checked_sub(1)) {
        (Some((index, hash)), _) => req.set("Last-Event-ID", &format!("{index} {hash}")),
        (None, Some(last)) => req.set("Last-Event-ID", &last.to_string()),
        (None, None) => req.query("from", "0"),
    };
    let res = match req.call() {
        Ok(r) => r,
        Err(ureq::Error::Status(status, r)) => {
            let v: Value = r
                .into_string()
                .ok()
                .and_then(|t| serde_json::from_str(&t).ok())
                .unwrap_or(Value::Null);
            return Err(Failure::usage(format!(
                "/v1/log/stream returned HTTP {status} {}: {}",
                v["error"]["class"].as_str().unwrap_or("Error"),
                v["error"]["message"].as_str().unwrap_or("")
            )));
        }
        Err(e) => return Err(retry(format!("/v1/log/stream: {e}"))),
    };
    let mut got_events = false;
    let mut event = String::new();
    let mut data = String::new();
    for text in BufReader::new(res.into_reader()).lines() {
        let Ok(text) = text else {
            return Ok(Followed::Ended { got_events });
        };
        if text.is_empty() {
            if !data.is_empty() {
                let v: Value = serde_json::from_str(&data).unwrap_or(Value::Null);
                match event.as_str() {
                    "entry" => {
                        got_events = true;
                        if let Some((i, hash)) = seen(&v) {
                            resume.next = i + 1;
                            resume.last = Some((i, hash));
                        }
                        if !print(out, &line(&v, a.json))? {
                            return Ok(Followed::OutputClosed);
                        }
                    }
                    "rewound" => {
                        return Err(Failure::usage(format!(
                            "the log stream ended: {}",
                            v["message"].as_str().unwrap_or("the log was rolled back")
                        )))
                    }
                    "error" => {
                        return Err(Failure::usage(format!(
                            "the log stream ended: {}: {}",
                            v["error"]["class"].as_str().unwrap_or("Error"),
                            v["error"]["message"].as_str().unwrap_or("")
                        )))
                    }
                    _ => {}
                }
            }
            event.clear();
            data.clear();
        } else if let Some(e) = text.strip_prefix("event:") {
            event = e.trim_start().to_owned();
        } else if let Some(d) = text.strip_prefix("data:") {
            if !data.is_empty() {
                data.push('\n');
            }
            data.push_str(d.strip_prefix(' ').unwrap_or(d));
        }
    }
    Ok(Followed::Ended { got_events })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A quiet stream is not taken for a dead one: the default waits out three keep-alives.
    #[test]
    fn the_idle_timeout_outlasts_three_keep_alive_comments() {
        assert_eq!(
            client::seconds(IDLE_TIMEOUT).unwrap(),
            crate::log_stream::KEEP_ALIVE * 3
        );
    }
}
