//! `POST /a2a/` with arbitrary bodies: no panic, no 5xx.
#![no_main]

#[path = "common.rs"]
mod common;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::post("/a2a/", data, None);
});
