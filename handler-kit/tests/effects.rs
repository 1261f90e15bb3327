//! Effects declared with `effect!` reach the manifest in declaration order, with their doc
//! comment as description, and only in the crate that declared them.

use handler_kit::effect::{declared_in, Effect};
use handler_kit::EffectClass;

handler_kit::effect! {
    /// Second by name, first by declaration.
    pub const ZULU = "Test.Zulu" { class: Write, ops: &["z"] }
    /// A description on
    /// two lines.
    pub const ALPHA = "Test.Alpha" { class: Read, ops: &["a", "b"] }
    pub const NOOP = "Test.Noop" { class: Unknown, ops: &[] }
}

handler_kit::effect! {
    /// Declared in a later block.
    const LATER = "Test.Later" { class: Read, ops: &["l"] }
}

#[test]
fn declared_effects_keep_declaration_order_and_their_docs() {
    let effects = handler_kit::declared_effects!();
    let names: Vec<&str> = effects.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, [ZULU, ALPHA, NOOP, LATER]);
    assert_eq!(effects[0].class, EffectClass::Write);
    assert_eq!(effects[1].ops, ["a", "b"]);
    assert_eq!(effects[1].description, "A description on two lines.");
    assert!(effects[2].ops.is_empty());
    assert_eq!(effects[2].description, "");
}

#[test]
fn lookups_find_only_this_crates_effects() {
    let found: &Effect = handler_kit::declared!(ALPHA).expect("declared here");
    assert_eq!(found.ops, ["a", "b"]);
    assert!(handler_kit::declared!("Test.Missing").is_none());
    // Another crate linked into the same program sees none of these registrations.
    assert!(declared_in("another_plugin::handler").is_empty());
    assert!(handler_kit::effect::find("another_plugin", ALPHA).is_none());
}
