//! The plan interpreter over the shipped transition documents: any arguments give a plan
//! (never a panic), the same arguments give the same plan, and an effect plan only ever asks
//! for a declared effect. Arbitrary bytes as a transition document never panic either.
#![no_main]

use std::sync::OnceLock;

use broker_core::plan::Plan;
use broker_core::transition::Transition;
use libfuzzer_sys::fuzz_target;

const DOCS: [&str; 8] = [
    include_str!("../../transitions/se-tools/ailang-read.json"),
    include_str!("../../transitions/se-tools/ailang-write.json"),
    include_str!("../../transitions/se-tools/ailang-edit.json"),
    include_str!("../../transitions/se-tools/ailang-check.json"),
    include_str!("../../transitions/se-tools/ailang-run.json"),
    include_str!("../../transitions/se-tools/builtins-search.json"),
    include_str!("../../transitions/se-tools/examples-search.json"),
    include_str!("../../transitions/se-tools/ailang-cli.json"),
];

fn tools() -> &'static [Transition] {
    static TOOLS: OnceLock<Vec<Transition>> = OnceLock::new();
    TOOLS.get_or_init(|| DOCS.iter().map(|d| Transition::from_slice(d.as_bytes()).expect("shipped document")).collect())
}

fuzz_target!(|data: &[u8]| {
    let _ = Transition::from_slice(data);
    let Some((&selector, rest)) = data.split_first() else { return };
    let Ok(args) = serde_json::from_slice::<serde_json::Value>(rest) else { return };
    let t = &tools()[selector as usize % DOCS.len()];
    let first = t.plan_call(&args);
    assert_eq!(first, t.plan_call(&args), "the interpreter is not deterministic");
    if let Plan::Effect { effect, .. } = &first {
        assert!(t
            .declared_effects
            .iter()
            .any(|d| d.effect == effect.effect && d.scope == effect.scope && d.cost == effect.cost));
    }
    let _ = first.to_value();
});
