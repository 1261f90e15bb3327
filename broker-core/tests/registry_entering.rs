//! The entering checks (`Transition::check_entering`) hang on the registry's one way in:
//! `publish` and `publish_shipped` refuse a document that may not enter, whoever publishes it.
//! Each publisher used to call the check itself, so one that read its documents with
//! `Transition::from_value` alone published a tool whose `outputSchema` no validating client
//! can use.

mod common;

use broker_core::registry;
use broker_core::transition::Transition;
use serde_json::{json, Value};

fn read_tool(id: &str) -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../transitions/se-tools/ailang-read.json"
    );
    let mut doc: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    doc["id"] = json!(id);
    doc
}

#[test]
fn a_document_that_may_not_enter_is_refused_by_publish_and_publish_shipped_and_nothing_is_published(
) {
    let w = common::World::new();
    let good = Transition::from_value(read_tool("fine-read")).unwrap();
    let mut doc = read_tool("int-read");
    doc["outputSchema"]["properties"]["lines"] = json!({"type": "int"});
    // A valid document: only the entering checks refuse it.
    let bad = Transition::from_value(doc).unwrap();
    let head = || {
        w.store
            .read(|r| registry::head(r, registry::DEFAULT_REGISTRY))
            .unwrap()
    };
    let before = head();
    let expected = "transitions[1]: transition \"int-read\": outputSchema.properties.lines.type is \"int\", which is not a JSON Schema type (object, array, string, number, integer, boolean, null): a client that validates results refuses the schema, and so every call's result; did you mean integer?";
    let err = registry::publish(
        &w.store,
        registry::DEFAULT_REGISTRY,
        vec![good.clone(), bad.clone()],
        "test",
    )
    .unwrap_err();
    assert!(
        matches!(err, registry::RegistryError::NotEntering { index: 1, .. }),
        "{err:?}"
    );
    assert_eq!(err.to_string(), expected);
    let err = registry::publish_shipped(
        &w.store,
        registry::DEFAULT_REGISTRY,
        vec![good, bad],
        "test",
    )
    .unwrap_err();
    assert_eq!(err.to_string(), expected);
    assert_eq!(head(), before, "a refused publication stores nothing");
    let tools = registry::load(&w.store, registry::DEFAULT_REGISTRY).unwrap();
    assert!(tools.get("fine-read").is_none() && tools.get("int-read").is_none());
}
