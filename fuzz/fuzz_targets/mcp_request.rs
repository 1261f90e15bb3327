//! `POST /mcp/` with arbitrary bodies under each protocol version: no panic, no 5xx.
#![no_main]

#[path = "common.rs"]
mod common;

use libfuzzer_sys::fuzz_target;

const VERSIONS: [Option<&str>; 4] = [None, Some("2025-03-26"), Some("2025-06-18"), Some("2025-11-25")];

fuzz_target!(|data: &[u8]| {
    let Some((&v, body)) = data.split_first() else { return };
    common::post("/mcp/", body, VERSIONS[v as usize % VERSIONS.len()]);
});
