//! The shipped `registry-publish` document: it loads with the broker's
//! validator and plans what the handler expects; the manifest and the built
//! library describe the plugin.

use std::path::PathBuf;

use broker_core::transition::Transition;
use handler_kit::serde_json::{json, Value};
use handler_kit::{EffectClass, Host, LoadedPlugin, Outcome, Plugin, Request};
use handler_test_support::{
    built_library, file_tool_ref, planned_payload, planned_refusal, shipped_document,
};
use worldd_registry::{RegistryPlugin, REGISTRY_PUBLISH_DOCUMENT};

fn document() -> Transition {
    shipped_document("registry/registry-publish.json", REGISTRY_PUBLISH_DOCUMENT)
}

fn payload(args: Value) -> Value {
    planned_payload(&document(), &args, "Registry.Publish")
}

fn refusal(args: Value) -> String {
    planned_refusal(&document(), &args)
}

#[test]
fn the_document_validates_and_declares_registry_publish() {
    let t = document();
    assert_eq!(t.id, "registry-publish");
    assert_eq!(
        (
            t.access.effect.as_str(),
            t.access.scope.as_str(),
            t.access.cost
        ),
        ("Registry.Publish", "worktree", 0)
    );
    assert_eq!(t.declared_effects.len(), 1);
    assert_eq!(t.declared_effects[0].effect, "Registry.Publish");
    assert_eq!(t.declared_effects[0].cost, 1);
}

#[test]
fn plans_take_exactly_one_of_path_and_bundle() {
    assert_eq!(
        payload(json!({"path": "tools/b.json"})),
        json!({"op": "publish", "path": "tools/b.json"})
    );
    let bundle = json!({"transitions": [{"id": "x"}]});
    assert_eq!(
        payload(json!({"bundle": bundle.clone()})),
        json!({"op": "publish", "bundle": bundle})
    );
    let cases = [
        (json!({}), "registry-publish needs \"path\" (a bundle file in the worktree) or \"bundle\" (the bundle object)"),
        (json!({"path": "a.json", "bundle": {}}), "registry-publish takes either \"path\" or \"bundle\", not both"),
        (json!({"bundle": "{}"}), "argument \"bundle\" must be a JSON object"),
        (json!({"bundle": null}), "argument \"bundle\" must be a JSON object"),
        (json!({"path": "../b.json"}), "path \"../b.json\" refused: it must be relative and non-empty, with no \"..\" segment and no leading \"-\""),
        (json!({"path": 3}), "argument \"path\" must be a string"),
        (json!({"transitions": []}), "unknown argument \"transitions\"; registry-publish admits only: path, bundle"),
    ];
    for (args, text) in cases {
        assert_eq!(refusal(args.clone()), text, "{args}");
    }
}

#[test]
fn the_manifest_describes_the_plugin() {
    let m = RegistryPlugin::manifest().unwrap();
    assert_eq!(m.name, "registry");
    assert_eq!(m.effects.len(), 1);
    assert_eq!(m.effects[0].name, "Registry.Publish");
    assert_eq!(m.effects[0].class, EffectClass::Write);
    assert_eq!(m.effects[0].ops, ["publish"]);
    assert_eq!(m.transitions.len(), 1);
    assert_eq!(m.transitions[0]["id"], "registry-publish");
    Transition::from_value(m.transitions[0].clone()).unwrap();
    assert!(m.config_schema["properties"].get("stateDir").is_none());
}

/// `target/<profile>/libworldd_registry.so`, found from this test binary.
fn library() -> PathBuf {
    built_library("worldd_registry")
}

#[test]
fn the_built_library_loads() {
    let plugin = LoadedPlugin::load(&library()).unwrap_or_else(|e| panic!("{e}\n{}", e.detail()));
    let m = plugin.manifest().unwrap();
    assert_eq!(m.name, "registry");
    assert_eq!(m.abi, handler_kit::ABI_VERSION);
    assert!(plugin
        .new_handler(&json!({}), Host::noop().callbacks())
        .is_ok());
    let err = plugin
        .new_handler(&json!({"bogus": 1}), Host::noop().callbacks())
        .err()
        .unwrap();
    assert_eq!(
        err,
        "registry config: unknown key \"bogus\"; registry accepts only: maxBundleBytes, maxDocuments"
    );
}

#[test]
fn the_built_library_stamps_its_own_sha256() {
    let library = library();
    let plugin = LoadedPlugin::load(&library).unwrap_or_else(|e| panic!("{e}\n{}", e.detail()));
    let handler = plugin
        .new_handler(&json!({}), Host::noop().callbacks())
        .unwrap();
    // A bundle the handler itself refuses: stamped, and no host call needed.
    let request = Request {
        invocation_id: "inv-1".into(),
        episode: "ep".into(),
        worktree: None,
        effect: "Registry.Publish".into(),
        scope: "worktree".into(),
        cost: 1,
        payload: json!({"op": "publish", "bundle": {"transitions": []}}),
        deadline_ms: 10_000,
    };
    let Outcome::Ok { output } = handler.execute(&request) else {
        panic!("publish did not answer ok")
    };
    assert_eq!(output["ok"], json!(false), "{output:?}");
    // Inside the real plugin, `tool` is the SHA-256 of the library file.
    assert_eq!(output["tool"], json!(file_tool_ref(&library)));
}
