//! Publishing refuses documents whose listing would be absurd: every session's `tools/list`
//! and agent card carry the title, description and schemas of each visible tool.

mod common;

use broker_core::registry::{self, MAX_REGISTRY_BYTES};
use broker_core::transition::{
    Transition, MAX_DESCRIPTION_BYTES, MAX_SCHEMA_BYTES, MAX_TITLE_BYTES,
};
use serde_json::{json, Value};

fn read_tool() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../transitions/se-tools/ailang-read.json"
    );
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

#[test]
fn huge_descriptions_and_schemas_are_refused_at_publishing() {
    let mut doc = read_tool();
    doc["description"] = json!("d".repeat(MAX_DESCRIPTION_BYTES));
    assert!(Transition::from_value(doc.clone()).is_ok());
    doc["description"] = json!("d".repeat(MAX_DESCRIPTION_BYTES + 1));
    assert_eq!(
        Transition::from_value(doc).unwrap_err().to_string(),
        format!(
            "transition \"ailang-read\": description is {} bytes; the limit is {MAX_DESCRIPTION_BYTES}",
            MAX_DESCRIPTION_BYTES + 1
        )
    );

    let mut doc = read_tool();
    doc["title"] = json!("t".repeat(MAX_TITLE_BYTES + 1));
    assert!(Transition::from_value(doc)
        .unwrap_err()
        .to_string()
        .contains("title is 257 bytes; the limit is 256"));

    let mut doc = read_tool();
    doc["outputSchema"]["description"] = json!("s".repeat(MAX_SCHEMA_BYTES));
    let err = Transition::from_value(doc).unwrap_err().to_string();
    assert!(
        err.contains("outputSchema is ")
            && err.contains(&format!("the limit is {MAX_SCHEMA_BYTES}")),
        "{err}"
    );
}

#[test]
fn the_shipped_tools_fit() {
    for id in common::SE_TOOLS {
        common::se_tool(id);
    }
}

/// `ailang-read` with `extra` string arguments declared beside its own, in the plan and in its
/// input schema.
fn with_arguments(extra: &[String]) -> Value {
    let mut doc = read_tool();
    for name in extra {
        doc["plan"]["arguments"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": name, "type": "string"}));
        doc["inputSchema"]["properties"][name] = json!({"type": "string"});
    }
    doc
}

/// A bundle published through the registry tool is an agent's input too: ids, argument
/// counts and argument names have limits, each refused one past it.
#[test]
fn over_long_ids_too_many_arguments_and_over_long_argument_names_are_refused_at_publishing() {
    let refused = |doc: Value| Transition::from_value(doc).unwrap_err().to_string();

    let mut doc = read_tool();
    doc["id"] = json!("t".repeat(128));
    Transition::from_value(doc.clone()).unwrap();
    doc["id"] = json!("t".repeat(129));
    assert_eq!(
        refused(doc),
        "transition document: id must match ^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$"
    );

    // `path` and 63 more make 64; one more is refused.
    let names: Vec<String> = (1..=64).map(|i| format!("a{i}")).collect();
    Transition::from_value(with_arguments(&names[..63])).unwrap();
    assert_eq!(
        refused(with_arguments(&names)),
        "transition \"ailang-read\": plan.arguments declares 65 arguments; the limit is 64"
    );

    Transition::from_value(with_arguments(&["n".repeat(64)])).unwrap();
    assert_eq!(
        refused(with_arguments(&["n".repeat(65)])),
        "transition \"ailang-read\": plan.arguments[1].name must match ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$"
    );
}

/// Publications merge into one revision, which every `tools/list` carries: an agent with a
/// publish grant cannot grow it past 8 MiB, however many bundles it sends; replacing a tool
/// by id still works at the limit, and a refused publication stores nothing.
#[test]
fn a_registry_cannot_be_grown_past_its_limit_by_many_publications() {
    let w = common::World::new();
    // About 129 KiB per tool: two schemas of nearly 64 KiB.
    let big = |id: String| {
        let mut doc = read_tool();
        doc["id"] = json!(id);
        doc["inputSchema"]["description"] = json!("i".repeat(MAX_SCHEMA_BYTES - 1024));
        doc["outputSchema"]["description"] = json!("o".repeat(MAX_SCHEMA_BYTES - 1024));
        Transition::from_value(doc).unwrap()
    };
    let publish = |ids: std::ops::Range<usize>| {
        registry::publish(
            &w.store,
            registry::DEFAULT_REGISTRY,
            ids.map(|i| big(format!("big-{i}"))).collect(),
            "test",
        )
    };
    for batch in 0..6 {
        publish(batch * 10..batch * 10 + 10).unwrap();
    }
    let before = w
        .store
        .read(|r| registry::head(r, registry::DEFAULT_REGISTRY))
        .unwrap();
    let err = publish(60..70).unwrap_err().to_string();
    assert!(
        err.starts_with("registry \"tools\" would be ")
            && err.ends_with(&format!(
                " bytes with this publication; the limit is {MAX_REGISTRY_BYTES}"
            )),
        "{err}"
    );
    let after = w
        .store
        .read(|r| registry::head(r, registry::DEFAULT_REGISTRY))
        .unwrap();
    assert_eq!(after, before, "a refused publication changes nothing");
    // Replacing a tool that is there, by id, is still allowed at the limit.
    let mut small = read_tool();
    small["id"] = json!("big-0");
    let replaced = registry::publish(
        &w.store,
        registry::DEFAULT_REGISTRY,
        vec![Transition::from_value(small).unwrap()],
        "test",
    )
    .unwrap();
    assert!(replaced.changed);
    // What the loaded plugins ship is admitted past the limit: a daemon publishes it at every
    // start, and a refusal would keep it from starting.
    let shipped = registry::publish_shipped(
        &w.store,
        registry::DEFAULT_REGISTRY,
        (60..70).map(|i| big(format!("big-{i}"))).collect(),
        "worldd:plugins",
    )
    .unwrap();
    assert!(shipped.changed);
    // And publications are refused again until the registry is back under it.
    assert!(publish(70..71).is_err());
}

/// A tool of about 129 KiB (two schemas of nearly 64 KiB), `ailang-read` under the id `id`.
fn big_tool(id: &str) -> Transition {
    let mut doc = read_tool();
    doc["id"] = json!(id);
    doc["inputSchema"]["description"] = json!("i".repeat(MAX_SCHEMA_BYTES - 1024));
    doc["outputSchema"]["description"] = json!("o".repeat(MAX_SCHEMA_BYTES - 1024));
    Transition::from_value(doc).unwrap()
}

/// The payload of the stored object `r`, and its semantic id.
fn stored(store: &broker_core::store::Store, r: broker_core::object::Ref) -> (String, usize) {
    let obj = store.read(|rd| rd.object(&r)).unwrap().unwrap();
    (obj.semantic_id, obj.payload.len())
}

/// Every publication stored a whole copy of the registry as its new revision, every tool's
/// descriptor again: 20 one-document publications into a 7 MiB registry added 130 MB to the
/// store. A revision now lists each tool by its refs, its descriptor being its transition
/// object, stored once: a one-document publication stores that document and a revision of a
/// few hundred bytes a tool. The registry reads as before, and its 8 MiB limit still counts
/// the descriptors every `tools/list` carries.
#[test]
fn a_one_document_publication_stores_that_document_and_refs_not_every_descriptor_again() {
    let w = common::World::new();
    let filled = registry::publish(
        &w.store,
        registry::DEFAULT_REGISTRY,
        (0..40).map(|i| big_tool(&format!("big-{i}"))).collect(),
        "test",
    )
    .unwrap();
    let tools = registry::load(&w.store, registry::DEFAULT_REGISTRY)
        .unwrap()
        .len();
    // The world's shipped tools and the 40.
    assert_eq!(tools, 48);
    let (kind, bytes) = stored(&w.store, filled.reference);
    assert_eq!(kind, "world/transition-registry/v2");
    assert!(bytes < 300 * tools, "{bytes}");
    for n in 0..5 {
        let mut doc = read_tool();
        doc["id"] = json!("small");
        doc["description"] = json!(format!("Version {n} of a small tool."));
        let p = registry::publish(
            &w.store,
            registry::DEFAULT_REGISTRY,
            vec![Transition::from_value(doc).unwrap()],
            "test",
        )
        .unwrap();
        assert!(p.changed);
        assert_eq!(p.revision, filled.revision + 1 + n);
        let (kind, bytes) = stored(&w.store, p.reference);
        assert_eq!(kind, "world/transition-registry/v2");
        assert!(
            bytes < 300 * (tools + 1),
            "revision {}: {bytes} bytes",
            p.revision
        );
    }
    let reg = registry::load(&w.store, registry::DEFAULT_REGISTRY).unwrap();
    assert_eq!(reg.len(), 49);
    assert_eq!(
        reg.get("big-7").unwrap().transition.input_schema["description"]
            .as_str()
            .unwrap()
            .len(),
        MAX_SCHEMA_BYTES - 1024
    );
    assert_eq!(
        reg.get("small").unwrap().transition.description,
        "Version 4 of a small tool."
    );
    // 40 tools of 129 KiB are some 5.2 MB of descriptors: 25 more pass the limit, as before.
    let err = registry::publish(
        &w.store,
        registry::DEFAULT_REGISTRY,
        (40..65).map(|i| big_tool(&format!("big-{i}"))).collect(),
        "test",
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.starts_with("registry \"tools\" would be ")
            && err.ends_with(&format!(
                " bytes with this publication; the limit is {MAX_REGISTRY_BYTES}"
            )),
        "{err}"
    );
}

/// A store of an earlier build holds `world/transition-registry/v1` revisions, every descriptor
/// inline: it reads as before, publishing its own tools again changes nothing, and the next
/// publication writes a `v2` revision listing them with the new tool.
#[test]
fn a_registry_of_whole_descriptors_from_an_earlier_build_reads_and_grows_by_refs() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    std::fs::create_dir_all(&db).unwrap();
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/store-v1/data.mdb"
        ),
        db.join("data.mdb"),
    )
    .unwrap();
    let store =
        broker_core::store::Store::open(&db, broker_core::store::StoreOptions::default()).unwrap();
    let old = registry::load(&store, registry::DEFAULT_REGISTRY).unwrap();
    assert!(!old.is_empty());
    let (kind, _) = stored(&store, old.reference.unwrap());
    assert_eq!(kind, "world/transition-registry/v1");
    let again = registry::publish(
        &store,
        registry::DEFAULT_REGISTRY,
        old.entries().map(|e| (*e.transition).clone()).collect(),
        "test",
    )
    .unwrap();
    assert!(!again.changed);
    assert_eq!(Some(again.reference), old.reference);
    let mut doc = read_tool();
    doc["id"] = json!("docs-read");
    let p = registry::publish(
        &store,
        registry::DEFAULT_REGISTRY,
        vec![Transition::from_value(doc).unwrap()],
        "test",
    )
    .unwrap();
    assert!(p.changed);
    assert_eq!(p.revision, old.revision + 1);
    assert_eq!(
        stored(&store, p.reference).0,
        "world/transition-registry/v2"
    );
    let new = registry::load(&store, registry::DEFAULT_REGISTRY).unwrap();
    assert_eq!(new.len(), old.len() + 1);
    for e in old.entries() {
        assert_eq!(
            new.get(&e.transition.id).unwrap().transition_fn,
            e.transition_fn
        );
    }
}
