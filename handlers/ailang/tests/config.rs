//! The constructor: the decline without `bin`, config errors, the archived binary and the
//! manifest.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;

use common::*;
use handler_kit::serde_json::{json, Value};
use handler_kit::{EffectClass, Host, LoadedPlugin, Plugin};
use worldd_ailang::{AilangPlugin, DECLINE};

fn new(config: Value) -> Result<(), String> {
    AilangPlugin::new(config, Host::noop()).map(drop)
}

#[test]
fn without_bin_the_plugin_declines_with_one_clear_line() {
    assert_eq!(
        DECLINE,
        "declined: no ailang binary configured (start worldd serve with --plugin-config ailang.bin=PATH)"
    );
    for config in [
        json!({}),
        json!(null),
        json!({"stateDir": "/nonexistent/state"}),
        json!({"bin": null, "examplesDir": "/x", "runAllowCaps": ["Env"]}),
    ] {
        assert_eq!(new(config).unwrap_err(), DECLINE);
    }
    // Through the FFI entry the daemon calls, too.
    let plugin = LoadedPlugin::from_module(handler_kit::plugin_module::<AilangPlugin>());
    let err = plugin
        .new_handler(&json!({}), Host::noop().callbacks())
        .unwrap_err();
    assert!(err.starts_with("declined: "), "{err}");
}

#[test]
fn bad_config_is_an_error_not_a_decline() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state").display().to_string();
    let bin = standin().display().to_string();
    let not_exec = tmp.path().join("not-exec");
    fs::write(&not_exec, "#!/bin/sh\n").unwrap();
    let failing = tmp.path().join("failing");
    fs::write(&failing, "#!/bin/sh\necho broken >&2\nexit 1\n").unwrap();
    fs::set_permissions(&failing, fs::Permissions::from_mode(0o755)).unwrap();
    let cases = [
        (json!({"bin": bin, "nope": 1}), "ailang config: unknown key \"nope\"; ailang accepts only: allowHardLinks, bin, examplesDir, memoryMiB, runAllowCaps, runNetAllow, runNetAllowHttp, stateDir".to_string()),
        // An unknown key is reported even when bin is missing.
        (json!({"nope": 1}), "ailang config: unknown key \"nope\"; ailang accepts only: allowHardLinks, bin, examplesDir, memoryMiB, runAllowCaps, runNetAllow, runNetAllowHttp, stateDir".to_string()),
        (json!([1]), "ailang config: the config must be a JSON object".to_string()),
        (json!({"bin": 3}), "ailang config: \"bin\" must be a path string".to_string()),
        (json!({"bin": ""}), "ailang config: \"bin\" is empty".to_string()),
        (json!({"bin": bin, "runAllowCaps": ["IO"]}), "ailang config: runAllowCaps names \"IO\"; it admits only: Declassify, Env, Net (IO and FS are always enabled)".to_string()),
        (json!({"bin": bin, "runAllowCaps": "Env"}), "ailang config: \"runAllowCaps\" must be an array of capability names".to_string()),
        (json!({"bin": bin, "runNetAllow": ["10.0.0.1:80"]}), "ailang config: runNetAllow entry \"10.0.0.1:80\" must be a canonical loopback IP:PORT with a port from 1 to 65535 (e.g. 127.0.0.1:8080 or [::1]:8080)".to_string()),
        (json!({"bin": bin, "runNetAllow": ["127.0.0.1:0"]}), "ailang config: runNetAllow entry \"127.0.0.1:0\" must be a canonical loopback IP:PORT with a port from 1 to 65535 (e.g. 127.0.0.1:8080 or [::1]:8080)".to_string()),
        (json!({"bin": bin, "runNetAllowHttp": "yes"}), "ailang config: \"runNetAllowHttp\" must be true or false".to_string()),
        (json!({"bin": bin, "allowHardLinks": "yes"}), "ailang config: \"allowHardLinks\" must be true or false".to_string()),
        (json!({"bin": bin, "memoryMiB": 255}), "ailang config: \"memoryMiB\" must be a whole number of MiB from 256 to 1048576".to_string()),
        (json!({"bin": bin, "memoryMiB": 1_048_577}), "ailang config: \"memoryMiB\" must be a whole number of MiB from 256 to 1048576".to_string()),
        (json!({"bin": bin, "memoryMiB": 64.5}), "ailang config: \"memoryMiB\" must be a whole number of MiB from 256 to 1048576".to_string()),
        (json!({"bin": bin, "memoryMiB": "64"}), "ailang config: \"memoryMiB\" must be a whole number of MiB from 256 to 1048576".to_string()),
        (json!({"bin": bin}), "ailang config: \"stateDir\" is not set; the daemon sets it to <db>/plugin-state/ailang (set it yourself when building the handler outside worldd serve)".to_string()),
        (json!({"bin": "/nonexistent/ailang", "stateDir": state}), "ailang config: bin /nonexistent/ailang: No such file or directory (os error 2)".to_string()),
        // A bare name is not looked up in PATH, and the refusal said only ENOENT.
        (json!({"bin": "ailang-not-here", "stateDir": state}), "ailang config: bin ailang-not-here: No such file or directory (os error 2); a relative bin is taken from the daemon's working directory, not looked up in PATH: give its absolute path (--plugin-config ailang.bin=$(command -v ailang-not-here))".to_string()),
        (json!({"bin": tmp.path().display().to_string(), "stateDir": state}), format!("ailang config: bin {} is not a regular file", tmp.path().display())),
        (json!({"bin": not_exec.display().to_string(), "stateDir": state}), format!("ailang config: bin {} is not executable", not_exec.display())),
        (json!({"bin": bin, "stateDir": state, "examplesDir": "/nonexistent/corpus"}), "ailang config: examplesDir /nonexistent/corpus: No such file or directory (os error 2)".to_string()),
        (json!({"bin": failing.display().to_string(), "stateDir": state}), format!("ailang plugin: {} --version did not print a version (rc 1; stderr: broken)", failing.display())),
    ];
    for (config, message) in cases {
        let err = new(config.clone()).unwrap_err();
        assert_eq!(err, message, "{config}");
        assert!(!err.starts_with("declined: "));
    }
}

#[test]
fn the_binary_is_archived_and_stamped_by_its_sha256() {
    let f = Fixture::new();
    let bytes = fs::read(standin()).unwrap();
    let hex = sha256_hex(&bytes);
    let archived = f
        .state
        .canonicalize()
        .unwrap()
        .join(format!("bin/{hex}/ailang"));
    assert_eq!(f.handler.binary(), archived);
    assert_eq!(fs::read(&archived).unwrap(), bytes);
    assert_eq!(
        fs::metadata(&archived).unwrap().permissions().mode() & 0o777,
        0o555
    );
    assert_eq!(f.handler.tool(), format!("sha256:{hex}"));
    assert!(f.handler.version().starts_with("AILANG v0.52.1"));
    for dir in ["", "policies", "cache", "bin"] {
        assert_eq!(
            fs::metadata(f.state.join(dir))
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o700,
            "{dir}"
        );
    }
    // A second handler on the same state reuses the intact copy.
    let again = AilangPlugin::new(Fixture::config(&f.state, json!({})), Host::noop()).unwrap();
    assert_eq!(again.binary(), archived);
}

#[test]
fn the_manifest_declares_effects_classes_tools_and_finish_functions() {
    let m = AilangPlugin::manifest().unwrap();
    assert_eq!(m.name, "ailang");
    let effects: Vec<(&str, EffectClass)> = m
        .effects
        .iter()
        .map(|e| (e.name.as_str(), e.class))
        .collect();
    assert_eq!(
        effects,
        [
            ("Ailang.Check", EffectClass::Read),
            ("Ailang.Run", EffectClass::Unknown),
            ("Ailang.RunEnv", EffectClass::Unknown),
            ("Ailang.RunNet", EffectClass::Unknown),
            ("Ailang.Discover", EffectClass::Read),
            ("Ailang.CLI", EffectClass::Unknown),
        ]
    );
    assert_eq!(m.effects[0].ops, ["ai_check"]);
    assert_eq!(m.effects[4].ops, ["builtins_list", "examples_search"]);
    assert_eq!(m.effects[5].ops.len(), 20);
    let ids: Vec<&str> = m
        .transitions
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            "ailang-check",
            "ailang-run",
            "builtins-search",
            "examples-search",
            "ailang-cli"
        ]
    );
    // Shipped byte for byte from transitions/se-tools/.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../transitions/se-tools");
    for (id, doc) in ids.iter().zip(&m.transitions) {
        let file: Value =
            handler_kit::serde_json::from_slice(&fs::read(dir.join(format!("{id}.json"))).unwrap())
                .unwrap();
        assert_eq!(&file, doc);
    }
    assert_eq!(m.finish, ["check-report", "builtins-inventory"]);
    // stateDir is declared, so worldd serve injects <db>/plugin-state/ailang.
    let props = m.config_schema["properties"].as_object().unwrap();
    let keys: Vec<&str> = props.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "allowHardLinks",
            "bin",
            "examplesDir",
            "memoryMiB",
            "runAllowCaps",
            "runNetAllow",
            "runNetAllowHttp",
            "stateDir"
        ]
    );
    assert_eq!(m.config_schema["additionalProperties"], false);
}

/// `--version` is probed when the handler is built: a binary that never answers is refused
/// once the handler's 10 s hard cap has passed, not waited for, and its process group is gone.
#[test]
fn a_binary_whose_version_probe_hangs_is_refused_at_the_hard_cap() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state").display().to_string();
    let hanging = tmp.path().join("hanging");
    fs::write(&hanging, "#!/bin/sh\nexec sleep 300\n").unwrap();
    fs::set_permissions(&hanging, fs::Permissions::from_mode(0o755)).unwrap();
    let started = std::time::Instant::now();
    let err = new(json!({"bin": hanging.display().to_string(), "stateDir": state})).unwrap_err();
    let took = started.elapsed();
    assert_eq!(
        err,
        format!(
            "ailang plugin: {} --version did not answer within 10000 ms; its process group was killed",
            hanging.display()
        )
    );
    assert!(took >= worldd_ailang::HARD_CAP, "{took:?}");
    assert!(took < worldd_ailang::HARD_CAP * 3, "{took:?}");
}
