//! `worldd why HANDLE`: find the entry of one call and re-verify its whole provenance chain from
//! the stored bytes, the plan's replay and the coordinator's journal included. `-` reads the
//! result bytes themselves from stdin (as printed by `worldd call … --json-out`). When several
//! entries carry the handle, each is listed and verified; any that fails makes the exit code 3.
//!
//! Two sources, one walk: a store offline (`--db`), or what a running daemon serves (`--addr`,
//! through [`why_remote`](super::why_remote)), so an agent on a machine without the store can
//! verify its own calls. Which one runs without either flag is decided by [`mode`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use broker_core::verify::{self, Explanation, Handle, Report, VerifyError};
use clap::Args;

use super::client::{seconds, ClientArgs, Connection, DEFAULT_ADDR, DEFAULT_TIMEOUT};
use super::session::{open_to_read, seen_is_durable};
use super::why_remote::{RemoteSource, Trouble};
use super::{CliResult, Failure};

/// Where `why` looks when neither `--db` nor `--addr` (nor `$WORLD_ADDR`) is given, if a store
/// is there.
const DEFAULT_DB: &str = ".world/db";

#[derive(Args, Debug)]
pub struct WhyArgs {
    /// `head`, an entry index, a sha256: ref from a result, an invocation id, or `-` for the
    /// result bytes on stdin.
    pub handle: String,
    /// Verify a store offline: its directory [default: .world/db when it exists and no
    /// daemon is named].
    #[arg(long, conflicts_with_all = ["addr", "session"])]
    pub db: Option<PathBuf>,
    /// Verify what a running daemon serves, http://HOST:PORT [default: $WORLD_ADDR; else
    /// http://127.0.0.1:7644 with --session or when there is no .world/db].
    #[arg(long)]
    pub addr: Option<String>,
    /// With a daemon: session credential, or a file holding it (default: $WORLD_SESSION).
    // An OS string: a session file's name need not be UTF-8.
    #[arg(long)]
    pub session: Option<std::ffi::OsString>,
    /// With a daemon: how long to wait for each of its answers, in seconds.
    #[arg(long, value_name = "SECS", default_value = DEFAULT_TIMEOUT, value_parser = seconds, conflicts_with = "db")]
    pub timeout: Duration,
    /// How many entries to scan back from the head to find a ref.
    #[arg(long, default_value_t = verify::DEFAULT_SCAN)]
    pub scan: u64,
    /// Print the chain as JSON.
    #[arg(long)]
    pub json: bool,
}

/// What `why` verifies.
enum Mode {
    /// A store, offline.
    Store(PathBuf),
    /// What a running daemon serves; `fallback`: chosen because no store was found.
    Daemon { client: ClientArgs, fallback: bool },
}

/// `--db` when given; a daemon when `--addr`, `$WORLD_ADDR` or `--session` names one (a
/// credential only means something to a daemon); else `.world/db` when it holds a store; else
/// the daemon at the default address.
fn mode(a: &WhyArgs) -> Mode {
    let daemon = |addr: String, fallback| Mode::Daemon {
        client: ClientArgs {
            addr,
            session: a.session.clone(),
            timeout: a.timeout,
        },
        fallback,
    };
    if let Some(db) = &a.db {
        return Mode::Store(db.clone());
    }
    if let Some(addr) = &a.addr {
        return daemon(addr.clone(), false);
    }
    if let Some(addr) = std::env::var("WORLD_ADDR")
        .ok()
        .filter(|v| !v.trim().is_empty())
    {
        return daemon(addr, false);
    }
    if a.session.is_some() {
        return daemon(DEFAULT_ADDR.to_owned(), false);
    }
    if Path::new(DEFAULT_DB).join("data.mdb").exists() {
        return Mode::Store(DEFAULT_DB.into());
    }
    daemon(DEFAULT_ADDR.to_owned(), true)
}

pub fn run(a: WhyArgs) -> CliResult {
    let (handle, form) = if a.handle == "-" {
        let mut bytes =
            super::input::bytes(std::io::stdin(), super::input::DOCUMENT_BYTES, "stdin")?;
        // `--json-out` adds one newline after the committed bytes.
        if bytes.last() == Some(&b'\n') {
            bytes.pop();
        }
        // Usually the command before the pipe failed: say so rather than look for the hash of
        // nothing.
        if bytes.is_empty() {
            return Err(Failure::usage(
                "why -: nothing on stdin (did the command before the pipe fail? `worldd call TOOL --json-out | worldd why -` verifies the result it prints)",
            ));
        }
        let form = canonical_form(&bytes);
        (Handle::Output(bytes), form)
    } else {
        (
            Handle::parse(&a.handle)
                .and_then(named_in_full)
                .map_err(|e| Failure::usage(e.to_string()))?,
            None,
        )
    };
    match mode(&a) {
        Mode::Store(db) => {
            let store = open_to_read(&db.into())?;
            let found = by_form(verify::why(&store, &handle, a.scan), form.as_ref(), |h| {
                verify::why(&store, h, a.scan)
            });
            let why = found.map_err(|e| {
                if let (VerifyError::NotFound(_), Handle::Invocation(id)) = (&e, &handle) {
                    if let Some(f) = uncommitted(&store, id) {
                        return f;
                    }
                }
                let last = store
                    .read(|r| Ok::<_, VerifyError>(last_entry(&verify::LocalSource::new(r))))
                    .unwrap_or(None);
                failure(e, &handle, a.scan, last)
            })?;
            seen_is_durable(&store)?;
            report(&why, a.json, "what the store holds")
        }
        Mode::Daemon { client, fallback } => {
            let (why, malformed) = online(&client, &handle, form.as_ref(), a.scan).map_err(|mut f| {
                if fallback && f.message.starts_with("why: cannot reach the daemon") {
                    f.message.push_str(&format!(
                        " (no store at {DEFAULT_DB} either: give --db DIR to verify a store offline)"
                    ));
                }
                f
            })?;
            let verdict = report(
                &why,
                a.json,
                &format!("what the daemon at {} serves", base(&client)),
            );
            // A daemon that answered with something other than what it claims is named as
            // such, whatever the links say.
            match malformed {
                Some(f) => Err(f),
                None => verdict,
            }
        }
    }
}

/// `handle`, unless it is an invocation id with an empty episode or task id (`mcp:demo:`):
/// no call has one, and it is refused as a handle before either source is read, as a daemon's
/// routes refuse it, so both sources say the same.
fn named_in_full(handle: Handle) -> Result<Handle, VerifyError> {
    if let Handle::Invocation(id) = &handle {
        let empty = broker_core::task::split_invocation_id(id)
            .is_none_or(|(_, episode, task)| episode.is_empty() || task.is_empty());
        if empty {
            return Err(VerifyError::BadHandle(id.clone()));
        }
    }
    Ok(handle)
}

fn base(client: &ClientArgs) -> String {
    super::client::base_url(&client.addr).unwrap_or_else(|_| client.addr.clone())
}

/// An invocation no entry records because it was journaled and never committed: its intent
/// has no outcome, or was closed without an entry (withdrawn at its deadline, or unrecorded:
/// the effect ran and its record is stored, the commit failed). Said as such, as a daemon's
/// `/v1/invocations/{id}` says it, since no `--scan` finds it. `None` for any other.
fn uncommitted(store: &broker_core::store::Store, id: &str) -> Option<Failure> {
    use broker_core::coordinator::CallState;
    let open = store.indeterminate().ok()?;
    if open.iter().any(|p| p.intent.invocation_id == id) {
        return Some(Failure::usage(format!(
            "why: invocation {id} is journaled but not committed: its intent has no recorded outcome (indeterminate, or still in flight where a daemon serves the store), so no entry records it; `worldd calls get {id}` asks the daemon what became of it"
        )));
    }
    let (surface, episode, task) = broker_core::task::split_invocation_id(id)?;
    let state = store
        .read(|r| broker_core::task::get(r, episode, &format!("{surface}:{task}")))
        .ok()??;
    // The phase read as the reconciliation routes read it.
    let closed = match CallState::of(state.phase) {
        CallState::Withdrawn => {
            "withdrawn (its deadline passed before its handler started: nothing ran or was spent)"
                .to_owned()
        }
        CallState::Unrecorded => match state.effect_records.as_slice() {
            [] => "unrecorded (the effect ran)".to_owned(),
            [one] => format!("unrecorded (the effect ran; its effect record {one})"),
            many => format!(
                "unrecorded (the effects ran; their effect records {})",
                many.iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        },
        CallState::Committed | CallState::Indeterminate => return None,
    };
    Some(Failure::usage(format!(
        "why: invocation {id} is journaled but not committed: its intent was closed {closed}, so no entry records it; `worldd calls get {id}` says what to do"
    )))
}

/// The stdin of `why -` in canonical JSON, when it parses strictly and is not already that:
/// what a terminal showed of a result (`\u2028` for the character itself), or `call`'s
/// pretty-printed output, copied, is other bytes than the committed ones but the same JSON,
/// and the committed bytes are its canonical form.
fn canonical_form(bytes: &[u8]) -> Option<Handle> {
    let canonical = broker_core::canon::canonicalize(bytes).ok()?;
    (canonical != bytes).then_some(Handle::Output(canonical))
}

/// `found`, or, when it is "not found" and stdin has a canonical form other than itself
/// ([`canonical_form`]), what `again` finds by that form, said on stderr: the bytes read are
/// not the committed ones, their JSON is. The first "not found" stands when the form is not
/// found either.
fn by_form(
    found: Result<Explanation, VerifyError>,
    form: Option<&Handle>,
    again: impl FnOnce(&Handle) -> Result<Explanation, VerifyError>,
) -> Result<Explanation, VerifyError> {
    let (Err(VerifyError::NotFound(_)), Some(form @ Handle::Output(canonical))) = (&found, form)
    else {
        return found;
    };
    match again(form) {
        Ok(why) => {
            errln!(
                "worldd: why -: stdin is not the committed bytes themselves, but JSON whose canonical form ({}) is: verified by that form (a terminal shows some characters escaped; `worldd call … --json-out` into a pipe or a file writes the bytes themselves)",
                broker_core::object::Ref::of(canonical)
            );
            Ok(why)
        }
        Err(VerifyError::NotFound(_)) => found,
        Err(e) => Err(e),
    }
}

/// The index of the log's last entry, when the head and its world can be read: the log holds
/// entries 0 to it, so a scan reads at most one more than it.
fn last_entry<S: verify::Source + ?Sized>(src: &S) -> Option<u64> {
    let head = src.head().ok()??;
    let bytes = src.world(&head).ok()??;
    broker_core::log::World::from_bytes(&bytes)
        .ok()
        .map(|w| w.revision)
}

/// A verification that found nothing to walk, as the CLI reports it. `last`: the log's last
/// entry ([`last_entry`]). A scan is said as far as it went, never past the log's first entry,
/// and only a scan that stopped short of it is worth raising.
fn failure(e: VerifyError, handle: &Handle, scan: u64, last: Option<u64>) -> Failure {
    match e {
        VerifyError::NotFound(what) => Failure::usage(match (handle, last) {
            // An index is looked up, not scanned for.
            (Handle::Index(_), Some(last)) => {
                format!("why: {what} not found (the log's last entry is {last})")
            }
            (Handle::Index(_) | Handle::Head, _) => format!("why: {what} not found"),
            (_, Some(last)) if last < scan => format!(
                "why: {what} not found (scanned back all {} entries of the log)",
                last + 1
            ),
            _ => format!(
                "why: {what} not found (scanned back {scan} entries; raise --scan to look further)"
            ),
        }),
        VerifyError::Integrity(what) => {
            Failure::integrity(format!("why: {what}; do not trust this answer"))
        }
        // A damaged row is an integrity failure like a broken link (exit 3), not a usage error.
        e if e.is_integrity() => Failure::integrity(format!("why: {e}")),
        e => Failure::usage(format!("why: {e}")),
    }
}

/// Verify through a daemon's REST routes: the same walk, the daemon trusted for nothing but
/// availability. Beside the chains, the integrity failure to report when the daemon answered
/// a read with something that is not what the route serves.
fn online(
    client: &ClientArgs,
    handle: &Handle,
    form: Option<&Handle>,
    scan: u64,
) -> Result<(Explanation, Option<Failure>), Failure> {
    let remote = RemoteSource::new(Connection::open(client)?);
    // The answers read for the first walk are kept: a walk by stdin's canonical form reads
    // the same entries again.
    let result = by_form(verify::why_in(&remote, handle, scan), form, |h| {
        verify::why_in(&remote, h, scan)
    });
    match remote.trouble() {
        Some(Trouble::Unavailable(m)) => return Err(Failure::usage(format!("why: {m}"))),
        Some(Trouble::Malformed(m)) if result.is_err() => {
            return Err(malformed(remote.base(), &m));
        }
        _ => {}
    }
    let mut why = result.map_err(|e| match (&e, handle) {
        // Journaled (or held) and not committed: no `--scan` finds it; the daemon says what
        // it is, as offline the store does.
        (VerifyError::NotFound(_), Handle::Invocation(id)) => match remote.uncommitted(id) {
            Some((state, reason)) => Failure::usage(format!(
                "why: invocation {id} is not committed: the daemon at {} says it is {state}{}, so no entry records it; `worldd calls get {id}` says what to do",
                remote.base(),
                // `unrecorded`'s reason is its state's own name: said once.
                reason
                    .filter(|r| *r != state)
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default()
            )),
            // Another episode's call reads as absent to this session whatever `--scan` says,
            // and whether or not it exists: said as `calls get` says it.
            None => match foreign(client, id) {
                Some(own) => Failure::usage(format!(
                    "why: invocation {id} not found: it {}",
                    super::reconcile::not_yours(&own)
                )),
                None => failure(e, handle, scan, last_entry(&remote)),
            },
        },
        _ => failure(e, handle, scan, last_entry(&remote)),
    })?;
    // An entry whose record the daemon answers as absent is, to an agent, not this session's
    // to read (another episode's call reads exactly like a missing one): not found, not
    // broken. To an operator, who reads every object, absent means missing: damage, reported
    // as offline `why` reports it. Nor is the session's own call hidden from it.
    let withheld: Vec<(u64, String)> = why
        .reports
        .iter()
        .filter_map(|r| {
            let record = r.links.iter().find(|l| l.kind == "record" && !l.ok)?;
            let reference = record.reference?;
            remote
                .withheld(&reference)
                .then(|| (r.entry_index, reference.short(8)))
        })
        .collect();
    // Such an entry is only ever the handle's one match: a handle that matches several (an
    // input, plan or output ref) is found in records, and this one's record was not read.
    let hidden = if !withheld.is_empty() && hides_absent_records(client, handle) {
        withheld
    } else {
        Vec::new()
    };
    why.reports
        .retain(|r| !hidden.iter().any(|(i, _)| *i == r.entry_index));
    if let (true, Some((index, record))) = (why.reports.is_empty(), hidden.first()) {
        return Err(Failure::usage(format!(
            "why: entry {index} not found: the daemon at {} answers its record {record} as absent to this session (another episode's calls read as absent; an operator credential reads every episode)",
            remote.base()
        )));
    }
    let malformed = match remote.trouble() {
        Some(Trouble::Malformed(m)) => Some(malformed(remote.base(), &m)),
        _ => None,
    };
    Ok((why, malformed))
}

/// Whether an entry whose record the daemon answers as absent is left out as not this
/// session's: for an agent's session (or none, under `--open-reads`), unless `handle` is one of
/// its own invocation ids. Never for an operator's, which reads every object. A daemon that
/// does not say whose the session is (`GET /v1/budget`) is read as an agent's: hiding is what
/// `why` did before it asked.
fn hides_absent_records(client: &ClientArgs, handle: &Handle) -> bool {
    let Ok((own, operator)) = super::reconcile::own_episode(client) else {
        return true;
    };
    let own_call = match handle {
        Handle::Invocation(id) => {
            broker_core::task::split_invocation_id(id).is_some_and(|(_, episode, _)| episode == own)
        }
        _ => false,
    };
    !operator && !own_call
}

/// The session's own episode, when it is an agent's and invocation `id` names another: its
/// calls are not this session's to read. `None` for an operator (it reads every episode), an
/// id of the session's own episode, or a daemon that does not say (`GET /v1/budget`).
fn foreign(client: &ClientArgs, id: &str) -> Option<String> {
    let (_, episode, _) = broker_core::task::split_invocation_id(id)?;
    let (own, operator) = super::reconcile::own_episode(client).ok()?;
    (!operator && own != episode).then_some(own)
}

fn malformed(base: &str, detail: &str) -> Failure {
    Failure::integrity(format!(
        "why: the daemon at {base} served something that is not what it claims ({detail}); do not trust its answers"
    ))
}

/// Print the chains and decide the exit code; `source` names what was verified.
fn report(why: &Explanation, json: bool, source: &str) -> CliResult {
    let several = why.reports.len() > 1;
    if json {
        outln!("{}", why.to_json());
    } else {
        if several {
            outln!(
                "why: {} entries carry this handle; each is verified on its own",
                why.reports.len()
            );
        }
        for report in &why.reports {
            print_report(report, several)?;
        }
    }
    let failing: Vec<&Report> = why.reports.iter().filter(|r| !r.all_ok()).collect();
    match failing.as_slice() {
        [] => Ok(()),
        [only] if !several => {
            let broken = only.links.iter().filter(|l| !l.ok).count();
            Err(Failure::integrity(format!(
                "why: {broken} of {} link(s) broken in {source}; do not trust this answer",
                only.links.len()
            )))
        }
        many => Err(Failure::integrity(format!(
            "why: {} of {} entries carrying this handle do not verify (entry {}): do not trust them",
            many.len(),
            why.reports.len(),
            many.iter()
                .map(|r| r.entry_index.to_string())
                .collect::<Vec<_>>()
                .join(", entry ")
        ))),
    }
}

/// One entry's chain, then its verdict.
fn print_report(report: &Report, several: bool) -> CliResult {
    outln!(
        "why: entry {} (matched by {})",
        report.entry_index,
        report.matched_by
    );
    for l in &report.links {
        outln!(
            "  {} {:<7} {}  {}",
            // `?`: consistent, but only a client commit's word.
            match (l.ok, l.claimed) {
                (false, _) => "✗",
                (true, true) => "?",
                (true, false) => "✓",
            },
            l.kind,
            l.reference
                .map(|r| r.short(8))
                .unwrap_or_else(|| "-".into()),
            l.detail
        );
        if let Some(note) = &l.note {
            outln!("            note: {note}");
        }
    }
    let broken = report.links.iter().filter(|l| !l.ok).count();
    let claimed = report.claimed();
    if broken == 0 && claimed > 0 {
        outln!(
            "{} of {} link(s) verified; {claimed} only claimed by a client commit, not journaled: nothing shows its effects happened",
            report.links.len() - claimed,
            report.links.len()
        );
    } else if broken == 0 {
        outln!("all {} link(s) verified", report.links.len());
    } else if several {
        outln!(
            "✗ entry {}: {broken} of {} link(s) broken: it is not what it claims",
            report.entry_index,
            report.links.len()
        );
    }
    Ok(())
}
