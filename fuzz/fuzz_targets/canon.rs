//! Canonical JSON: the strict parser never panics, and canonical output is a fixed point.
#![no_main]

use broker_core::canon;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = canon::parse(data) else { return };
    let Ok(bytes) = canon::to_vec(&value) else { return };
    let again = canon::parse(&bytes).expect("canonical output must parse");
    assert_eq!(canon::to_vec(&again).expect("re-serialise"), bytes, "canonical form is not a fixed point");
    assert!(canon::is_canonical(&bytes));
});
