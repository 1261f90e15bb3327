//! `worldd`: see the `worldd` library crate for everything; this binary only reports exits.

// No unwrap or expect outside tests: a panic here is a bug, never an answer.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

fn main() {
    // Not `std::process::exit` directly: after a plugin that hung in its library's
    // initialiser, that would wait forever for the dynamic loader (see `plugins::exit`).
    worldd::plugins::exit(worldd::cli::main());
}
