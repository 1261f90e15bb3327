//! The verbs' output on stdout. A failed write is never a panic (`println!` panics on one):
//! a closed pipe ends the verb quietly, as the reader chose (`worldd session list | head -1`),
//! and any other failure (a full disk under `> file`) is the verb's failure, named. What is
//! written is shown, never acted on, by a terminal ([`super::terminal`]); committed bytes a
//! verb promises exactly go into a pipe or a file untouched ([`write_committed`]).

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
/// [`write`] shows text on a terminal, where a person reads them.
pub fn write_committed(bytes: &str) -> CliResult {
    if std::io::IsTerminal::is_terminal(&std::io::stdout()) {
        return write(format!("{bytes}\n"));
    }
    let mut out = std::io::stdout().lock();
    out.write_all(bytes.as_bytes())
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush())
        .map_err(failure)
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
