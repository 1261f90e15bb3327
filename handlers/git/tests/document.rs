//! The shipped `git-commit` document: it loads with the broker's validator
//! and plans what the handler expects; the manifest describes the plugin.

use broker_core::transition::Transition;
use handler_kit::serde_json::{json, Value};
use handler_kit::{EffectClass, Host, LoadedPlugin, Plugin};
use handler_test_support::{planned_payload, planned_refusal, shipped_document};
use worldd_git::{GitPlugin, GIT_COMMIT_DOCUMENT};

fn document() -> Transition {
    shipped_document("git/git-commit.json", GIT_COMMIT_DOCUMENT)
}

fn payload(args: Value) -> Value {
    planned_payload(&document(), &args, "Git.Commit")
}

fn refusal(args: Value) -> String {
    planned_refusal(&document(), &args)
}

#[test]
fn the_document_validates_and_declares_git_commit() {
    let t = document();
    assert_eq!(t.id, "git-commit");
    assert_eq!(
        (
            t.access.effect.as_str(),
            t.access.scope.as_str(),
            t.access.cost
        ),
        ("Git.Commit", "worktree", 0)
    );
    assert_eq!(t.declared_effects.len(), 1);
    assert_eq!(
        (
            t.declared_effects[0].effect.as_str(),
            t.declared_effects[0].scope.as_str(),
            t.declared_effects[0].cost
        ),
        ("Git.Commit", "worktree", 1)
    );
    assert!(t.finish.is_none());
}

#[test]
fn plans_build_the_handler_payload() {
    assert_eq!(
        payload(json!({"message": "m"})),
        json!({"op": "commit", "message": "m"})
    );
    assert_eq!(
        payload(json!({"message": "m", "paths": ["a.txt", "docs/"]})),
        json!({"op": "commit", "message": "m", "paths": ["a.txt", "docs/"]})
    );
}

#[test]
fn plans_refuse_bad_arguments() {
    let cases = [
        (json!({}), "missing required argument \"message\"".to_string()),
        (json!({"message": ""}), "argument \"message\" is empty; a commit needs a message".to_string()),
        (json!({"message": "x".repeat(4097)}), "argument \"message\" is 4097 bytes; the limit is 4096".to_string()),
        (json!({"message": "a\u{0}b"}), "argument \"message\" contains a NUL byte".to_string()),
        (json!({"message": 1}), "argument \"message\" must be a string".to_string()),
        (json!({"message": "m", "paths": []}), "argument \"paths\" names no path; omit it to commit every change".to_string()),
        (json!({"message": "m", "paths": "a"}), "argument \"paths\" must be an array of strings".to_string()),
        (json!({"message": "m", "paths": vec!["a"; 257]}), "argument \"paths\" has 257 items; the limit is 256".to_string()),
        (json!({"message": "m", "paths": ["../x"]}), "path \"../x\" refused: it must be relative and non-empty, with no \"..\" segment and no leading \"-\"".to_string()),
        (json!({"message": "m", "paths": ["/etc/passwd"]}), "path \"/etc/passwd\" refused: it must be relative and non-empty, with no \"..\" segment and no leading \"-\"".to_string()),
        (json!({"message": "m", "paths": ["a", "a"]}), "path \"a\" is listed twice".to_string()),
        (json!({"message": "m", "paths": ["a\u{0}"]}), "a path contains a NUL byte".to_string()),
        (json!({"message": "m", "amend": true}), "unknown argument \"amend\"; git-commit admits only: message, paths".to_string()),
    ];
    for (args, text) in cases {
        assert_eq!(refusal(args.clone()), text, "{args}");
    }
}

#[test]
fn the_manifest_describes_the_plugin() {
    let m = GitPlugin::manifest().unwrap();
    assert_eq!(m.name, "git");
    assert_eq!(m.effects.len(), 1);
    assert_eq!(m.effects[0].name, "Git.Commit");
    assert_eq!(m.effects[0].class, EffectClass::Write);
    assert_eq!(m.effects[0].ops, ["commit"]);
    assert_eq!(m.transitions.len(), 1);
    assert_eq!(m.transitions[0]["id"], "git-commit");
    Transition::from_value(m.transitions[0].clone()).unwrap();
    // stateDir is declared, so the daemon injects it.
    assert!(m.config_schema["properties"]["stateDir"].is_object());
    assert_eq!(m.config_schema["additionalProperties"], json!(false));
}

#[test]
fn through_the_ffi_entry_points_an_empty_author_declines() {
    let plugin = LoadedPlugin::from_module(handler_kit::plugin_module::<GitPlugin>());
    assert_eq!(plugin.manifest().unwrap().abi, handler_kit::ABI_VERSION);
    // An `author` key that is empty declines, whatever identity git's configuration has here
    // (only an absent key is filled from it; `commit.rs` and the daemon's tests cover that).
    let err = plugin
        .new_handler(&json!({"author": ""}), Host::noop().callbacks())
        .err()
        .unwrap();
    assert!(
        err.starts_with("declined: no commit author configured"),
        "{err}"
    );
    assert!(plugin
        .new_handler(&json!({"author": "A <a@b>"}), Host::noop().callbacks())
        .is_ok());
}
