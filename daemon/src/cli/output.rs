//! The verbs' output on stdout. A failed write is never a panic (`println!` panics on one):
//! a closed pipe ends the verb quietly, as the reader chose (`worldd session list | head -1`),
//! and any other failure (a full disk under `> file`) is the verb's failure, named.

use std::io::Write;

use super::{CliResult, Failure};

/// Write `text` to stdout and flush it. A closed pipe is `Err` with exit 0 and no message, so
/// that the verb stops there and the command exits as if it had finished; another failure is
/// `cannot write to stdout: …`, exit 1.
pub fn write(text: impl AsRef<[u8]>) -> CliResult {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_ref())
        .and_then(|()| out.flush())
        .map_err(failure)
}

/// What a failed write to stdout makes of the verb.
pub fn failure(e: std::io::Error) -> Failure {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        Failure {
            code: 0,
            message: String::new(),
        }
    } else {
        Failure::usage(format!("cannot write to stdout: {e}"))
    }
}
