//! The verbs' output on stdout. A failed write is never a panic (`println!` panics on one):
//! a closed pipe ends the verb quietly, as the reader chose (`worldd session list | head -1`),
//! and any other failure (a full disk under `> file`) is the verb's failure, named. What is
//! written is shown, never acted on, by a terminal ([`super::terminal`]); committed bytes a
//! verb promises exactly go into a pipe or a file untouched ([`try_write_committed`]).

use std::io::Write;

use super::{CliResult, Failure};

/// Write `text` to stdout and flush it. A closed pipe is `Err` with exit 0 and no message, so
/// that the verb stops there and the command exits as if it had finished; another failure is
/// `cannot write to stdout: …`, exit 1.
pub fn write(text: impl AsRef<[u8]>) -> CliResult {
    try_write(text).map_err(failure)
}

/// Write `text` to stdout and flush it, for a caller with its own answer to a failure.
pub fn try_write(text: impl AsRef<[u8]>) -> std::io::Result<()> {
    let text = String::from_utf8_lossy(text.as_ref());
    let mut out = std::io::stdout().lock();
    out.write_all(super::terminal::shown(&text).as_bytes())
        .and_then(|()| out.flush())
}

/// Write bytes the daemon committed (and a newline), for a verb that promises them exactly
/// (`call --json-out`): as they are when stdout is not a terminal (a pipe or a file, which
/// `worldd why -` hashes: an escaped U+2028 or DEL is other bytes, another ref), and shown as
/// [`write`] shows text on a terminal, where a person reads them. A failure is the caller's
/// to say: the call has committed by then ([`unwritten_after_commit`]).
pub fn try_write_committed(bytes: &str) -> std::io::Result<()> {
    if std::io::IsTerminal::is_terminal(&std::io::stdout()) {
        return try_write(format!("{bytes}\n"));
    }
    let mut out = std::io::stdout().lock();
    out.write_all(bytes.as_bytes())
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush())
}

/// Whether a failed write met a pipe whose reader has gone.
pub fn reader_gone(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::BrokenPipe
}

/// A failed write to stdout, said: `cannot write to stdout: …`.
pub fn unwritten(e: &std::io::Error) -> String {
    if reader_gone(e) {
        "cannot write to stdout: its reader has closed it".to_owned()
    } else {
        format!("cannot write to stdout: {e}")
    }
}

/// A failed write of the answer to a call that has already committed: the call is named (its
/// invocation id and entry) with how to get its result without running it again, since a
/// script told only `cannot write to stdout` runs the write again. Exit 1; a closed pipe
/// still ends the verb quietly, as its reader chose.
pub fn unwritten_after_commit(
    e: std::io::Error,
    invocation: Option<&str>,
    entry: Option<u64>,
    key: Option<&str>,
) -> Failure {
    if reader_gone(&e) {
        return failure(e);
    }
    let named = invocation.map_or_else(String::new, |id| format!(" as {id}"));
    let entry = entry.map_or_else(String::new, |n| format!(" (entry {n})"));
    let again = match (key, invocation) {
        (Some(key), _) => format!(
            "`worldd calls get {key}` shows the commit, and resending it with the same key returns its result without running it"
        ),
        (None, Some(id)) => format!("`worldd calls get {id}` shows the commit"),
        (None, None) => "`worldd log tail` shows the commit".to_owned(),
    };
    Failure::usage(format!(
        "the call was committed{named}{entry}, but its output could not be written: {}; do not run it again: {again}",
        unwritten(&e)
    ))
}

/// What a failed write to stdout makes of the verb.
pub fn failure(e: std::io::Error) -> Failure {
    if reader_gone(&e) {
        Failure {
            code: 0,
            message: String::new(),
        }
    } else {
        Failure::usage(unwritten(&e))
    }
}
