//! What a plugin's author got wrong in its manifest, found when the real daemon loads the real
//! library (`tests/fixtures/misfit-plugin`, whose manifest is what the test puts in
//! `WORLDD_MISFIT_MANIFEST`): `worldd handlers` lists it as `problem: …` (exit 0), and
//! `worldd serve` refuses to start with the same words (exit 2), instead of publishing a tool
//! every call of which fails.

mod common;

use std::path::{Path, PathBuf};

use common::fixtures::{echo_library, misfit_library};
use common::*;
use serde_json::{json, Value};

/// A plugin directory holding `libs` (copied under their own file names).
fn plugin_dir(dir: &Path, libs: &[&Path]) -> PathBuf {
    let plugins = dir.join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    for lib in libs {
        std::fs::copy(lib, plugins.join(lib.file_name().unwrap())).unwrap();
    }
    plugins
}

/// `worldd VERB --plugin-dir PLUGINS ARGS` with the misfit plugin's manifest changed by `changes`.
fn worldd_with(
    changes: &Value,
    verb: &str,
    plugins: &Path,
    args: &[&str],
) -> (Option<i32>, String, String) {
    let env = [("WORLDD_MISFIT_MANIFEST", changes.to_string())];
    let (code, out, err, _) = worldd_with_plugins(verb, plugins, args, &env);
    (code, out, err)
}

/// `handlers` lists `problem` (and exits 0); `serve` stops at start-up on the same words,
/// naming `file`.
fn refused(changes: Value, plugins: &Path, args: &[&str], file: &Path, problem: &str) {
    let (code, out, err) = worldd_with(&changes, "handlers", plugins, args);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains(&format!("  problem: {problem}\n")),
        "{changes}\n{out}"
    );
    let (code, _, err) = worldd_with(&changes, "serve", plugins, args);
    assert_eq!(code, Some(2), "{changes}\n{err}");
    assert_eq!(
        err.lines().last().unwrap_or_default(),
        format!(
            "worldd: daemon startup failed at plugins: plugin {}: {problem}",
            file.display()
        ),
        "{changes}"
    );
}

#[test]
fn mistakes_in_a_manifest_are_problems_for_handlers_and_stop_serve() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = plugin_dir(dir.path(), &[misfit_library()]);
    let lib = plugins.join(misfit_library().file_name().unwrap());
    // The fixture as it is passes: each case below is its one mistake.
    let (code, out, err) = worldd_with(&json!({}), "handlers", &plugins, &[]);
    assert_eq!(code, Some(0), "{err}");
    assert!(!out.contains("problem:"), "{out}");
    let schema = |property: Value| json!({"configSchema": {"type": "object", "properties": {"maxLineBytes": property}}});
    for (changes, problem) in [
        // A tool for an effect its plugin does not declare: every call refused by R8, which
        // reads like a missing plugin.
        (
            json!({"transitions": [fixtures::misfit_tool("Misfit.Do", "Misfit.Delete")]}),
            r#"shipped transition "misfit-do" names effect Misfit.Delete, which plugin misfit does not declare (it declares Misfit.Do)"#,
        ),
        // A payload op outside the allowlist: every call a failed effect, each spending budget.
        (
            json!({"transitions": [fixtures::misfit_tool(r#"{"const":"do"}"#, r#"{"const":"od"}"#)]}),
            r#"shipped transition "misfit-do" sends Misfit.Do the op "od", which is not in its op allowlist (do): the daemon would refuse every call"#,
        ),
        // Config schemas the daemon's check would misread.
        (
            schema(json!({"type": "integer", "default": "4096"})),
            r#"configSchema of plugin misfit: key "maxLineBytes": its default "4096" is not of its type integer"#,
        ),
        (
            schema(json!({"type": "integr"})),
            r#"configSchema of plugin misfit: key "maxLineBytes": type "integr" is not one the daemon knows (string, integer, number, boolean, array, object); did you mean integer?"#,
        ),
        (
            json!({"configSchema": {"type": "object", "additionalPropertes": false}}),
            r#"configSchema of plugin misfit: keyword "additionalPropertes" is not one the daemon's config check knows; did you mean additionalProperties? (known here: type, properties, additionalProperties, $schema, title, description, default, examples)"#,
        ),
        // A name no operator could type in --handler or [plugins.NAME].
        (
            json!({"name": "My Notes!"}),
            r#"manifest name "My Notes!" is not a plugin name: it must match ^[a-z0-9][a-z0-9-]{0,63}$ (operators type it in --handler NAME and [plugins.NAME])"#,
        ),
    ] {
        refused(changes, &plugins, &[], &lib, problem);
    }
}

/// The keywords a key may carry, said in the message for an unknown one.
const KEY_KEYWORDS: &str = "type, minimum, maximum, $schema, title, description, default, examples, items, enum, const, minLength, maxLength, pattern, minItems, maxItems, uniqueItems";

#[test]
fn a_mistake_nested_in_a_keys_items_schema_is_a_problem_naming_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = plugin_dir(dir.path(), &[misfit_library()]);
    let lib = plugins.join(misfit_library().file_name().unwrap());
    let schema = |property: Value| json!({"configSchema": {"type": "object", "properties": {"paths": property}}});
    // `items` nested `depth` deep around `inner`.
    let nested = |depth: usize, inner: Value| {
        (0..depth).fold(inner, |s, _| json!({"type": "array", "items": s}))
    };
    // Arrays of arrays nested as deep as the check reads pass.
    let (code, out, err) = worldd_with(
        &schema(nested(8, json!({"type": "string", "minLength": 1}))),
        "handlers",
        &plugins,
        &[],
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(!out.contains("problem:"), "{out}");
    for (changes, problem) in [
        // The same mistakes as at a key, one and two schemas down.
        (
            schema(json!({"type": "array", "items": {"type": "strng"}})),
            r#"configSchema of plugin misfit: key "paths".items: type "strng" is not one the daemon knows (string, integer, number, boolean, array, object); did you mean string?"#.to_owned(),
        ),
        (
            schema(nested(2, json!({"type": "string", "minLenght": 1}))),
            format!(r#"configSchema of plugin misfit: key "paths".items.items: keyword "minLenght" is not one the daemon's config check knows; did you mean minLength? (known here: {KEY_KEYWORDS})"#),
        ),
        (
            schema(json!({"type": "array", "items": {"type": "integer", "default": "1"}})),
            r#"configSchema of plugin misfit: key "paths".items: its default "1" is not of its type integer"#.to_owned(),
        ),
        (
            schema(json!({"type": "array", "items": {"type": "integer", "maximum": 10, "default": 11}})),
            r#"configSchema of plugin misfit: key "paths".items: its default 11 must be at most 10"#.to_owned(),
        ),
        (
            schema(json!({"type": "array", "items": {"type": "integer", "minimum": "1"}})),
            r#"configSchema of plugin misfit: key "paths".items: "minimum" must be a number"#.to_owned(),
        ),
        (
            schema(json!({"type": "array", "items": "string"})),
            r#"configSchema of plugin misfit: key "paths".items: its schema must be an object"#.to_owned(),
        ),
        // A table's keys are not a schema the daemon reads, at a key or below one.
        (
            schema(json!({"type": "array", "items": {"type": "object", "properties": {"p": {"type": "strng"}}}})),
            format!(r#"configSchema of plugin misfit: key "paths".items: keyword "properties" is not one the daemon's config check knows (known here: {KEY_KEYWORDS})"#),
        ),
    ] {
        refused(changes, &plugins, &[], &lib, &problem);
    }
}

#[test]
fn a_schema_nested_past_the_depth_the_check_reads_is_refused_not_recursed_into() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = plugin_dir(dir.path(), &[misfit_library()]);
    let lib = plugins.join(misfit_library().file_name().unwrap());
    let nested = |depth: usize| {
        (0..depth).fold(
            json!({"type": "string"}),
            |s, _| json!({"type": "array", "items": s}),
        )
    };
    let path = ".items".repeat(9);
    // One past the bound, and as deep as the plugin's own JSON reader lets a manifest go.
    for depth in [9, 100] {
        refused(
            json!({"configSchema": {"properties": {"grid": nested(depth)}}}),
            &plugins,
            &[],
            &lib,
            &format!(
                r#"configSchema of plugin misfit: key "grid"{path}: schemas nested more than 8 deep; the daemon's config check reads no deeper"#
            ),
        );
    }
}

#[test]
fn two_plugins_sharing_a_name_or_a_tool_id_are_refused_naming_both_files() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = plugin_dir(dir.path(), &[echo_library(), misfit_library()]);
    let echo = plugins.join(echo_library().file_name().unwrap());
    let misfit = plugins.join(misfit_library().file_name().unwrap());
    // Another plugin's name, with its own effects and tools: `--handler echo` would pick both.
    refused(
        json!({"name": "echo"}),
        &plugins,
        &[],
        &misfit,
        &format!(
            "plugin name echo is also the name of {}: --handler echo and [plugins.echo] would select and configure both; remove one, or give one another name",
            echo.display()
        ),
    );
    // Another plugin's tool id, with an effect of its own: the publication would hold it twice.
    let echo_say = fixtures::misfit_tool("misfit-do", "echo-say");
    refused(
        json!({"transitions": [echo_say]}),
        &plugins,
        &["--handler", "misfit"],
        &plugins,
        &format!(
            r#"shipped transition "echo-say" is shipped by two plugins, echo ({}) and misfit ({}): tool ids are one namespace, and every plugin's tools are published, selected or not; remove one of the two libraries from the plugin directory"#,
            echo.display(),
            misfit.display()
        ),
    );
    // The same library under a second file name says so.
    let twice = plugins.join("libworldd_misfit_copy.so");
    std::fs::copy(&misfit, &twice).unwrap();
    std::fs::remove_file(&echo).unwrap();
    let library = format!("sha256:{}", sha256_hex(&std::fs::read(&misfit).unwrap()));
    refused(
        json!({}),
        &plugins,
        &[],
        &twice,
        &format!(
            "this is the same library as {} (both {library}), under another file name: remove one",
            misfit.display()
        ),
    );
}

/// The lines `worldd handlers` prints of the plugin `name`: from its heading to the blank line
/// (each ending in a line break).
fn section(out: &str, name: &str) -> String {
    out.split("\n\n")
        .find(|s| s.starts_with(&format!("{name} ")))
        .map(|s| format!("{s}\n"))
        .unwrap_or_else(|| panic!("no section of {name} in\n{out}"))
}

/// Two plugins taking one effect or one tool id: the refusal was said of whichever library
/// sorted second, as if the other were in the right (a third party's plugin sorting first made
/// a shipped one look broken), `worldd handlers` listed it under that one only, and the effect
/// clash said nothing of what to do. Both are named alike, with the fix, and listed under both.
#[test]
fn a_clash_between_two_plugins_names_both_says_what_to_do_and_is_listed_under_both() {
    for misfit_file in ["libworldd_misfit.so", "libaaa_misfit.so"] {
        let dir = tempfile::tempdir().unwrap();
        let plugins = plugin_dir(dir.path(), &[echo_library()]);
        let echo = plugins.join(echo_library().file_name().unwrap());
        let misfit = plugins.join(misfit_file);
        std::fs::copy(misfit_library(), &misfit).unwrap();
        // In file-name order: the misfit plugin first under its second name.
        let both = if misfit < echo {
            format!(
                "misfit ({}) and echo ({})",
                misfit.display(),
                echo.display()
            )
        } else {
            format!(
                "echo ({}) and misfit ({})",
                echo.display(),
                misfit.display()
            )
        };
        let effect = |leave_out: &str| {
            format!("effect Echo.Say is claimed by two plugins, {both}: an effect has one handler; remove one of the two libraries from the plugin directory, or leave one of them out {leave_out}")
        };
        let claims_echo_say = json!({
            "effects": [{"name": "Echo.Say", "class": "read", "ops": ["say"]}],
            "transitions": []
        });
        let echo_say = fixtures::misfit_tool("misfit-do", "echo-say");
        for (changes, args, problem) in [
            (
                &claims_echo_say,
                &[][..],
                effect("by naming the plugins to serve with --handler NAME (or [serve] handlers)"),
            ),
            (
                &claims_echo_say,
                &["--handler", "echo", "--handler", "misfit"][..],
                effect("of --handler"),
            ),
            (
                &json!({"transitions": [echo_say]}),
                &[][..],
                format!(
                    r#"shipped transition "echo-say" is shipped by two plugins, {both}: tool ids are one namespace, and every plugin's tools are published, selected or not; remove one of the two libraries from the plugin directory"#
                ),
            ),
        ] {
            let (code, out, err) = worldd_with(changes, "handlers", &plugins, args);
            assert_eq!(code, Some(0), "{err}");
            for name in ["echo", "misfit"] {
                assert!(
                    section(&out, name).contains(&format!("\n  problem: {problem}\n")),
                    "{name} {args:?}\n{out}"
                );
            }
            let (code, _, err) = worldd_with(changes, "serve", &plugins, args);
            assert_eq!(code, Some(2), "{err}");
            assert_eq!(
                err.lines().last().unwrap_or_default(),
                format!(
                    "worldd: daemon startup failed at plugins: plugin {}: {problem}",
                    plugins.display()
                ),
                "{args:?}"
            );
        }
    }
}

#[test]
fn an_incompatible_abi_is_refused_with_the_handler_api_version_to_rebuild_against() {
    let bad = fixtures::incompatible_plugin();
    let dir = tempfile::tempdir().unwrap();
    let plugins = plugin_dir(dir.path(), &[&bad.library]);
    let lib = plugins.join(bad.library.file_name().unwrap());
    let cause = format!(
        "incompatible ABI: handler-api {} expected, {} found; rebuild the plugin against handler-api {}, the version this worldd expects",
        bad.expected, bad.found, bad.expected
    );
    let (code, out, err) = worldd_with(&json!({}), "handlers", &plugins, &[]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains(&format!("\n{}\n  not loadable: {cause}\n", lib.display())),
        "{out}"
    );
    let (code, _, err) = worldd_with(&json!({}), "serve", &plugins, &[]);
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(
        err.lines().last().unwrap_or_default(),
        format!(
            "worldd: daemon startup failed at plugins: plugin {}: {cause}",
            lib.display()
        )
    );
}

#[test]
fn a_panic_in_the_plugins_constructor_is_not_called_a_config_rejection() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = plugin_dir(dir.path(), &[misfit_library()]);
    let lib = plugins.join(misfit_library().file_name().unwrap());
    let (code, _, err) = worldd_with(
        &json!({}),
        "serve",
        &plugins,
        &["--plugin-config", "misfit.panic=true"],
    );
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(
        err.lines().last().unwrap_or_default(),
        format!(
            "worldd: daemon startup failed at plugins: plugin {}: the plugin's constructor (Plugin::new) panicked: misfit: new() panicked on purpose",
            lib.display()
        )
    );
}

#[test]
fn a_handler_name_with_no_plugin_found_says_found_none() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = plugin_dir(dir.path(), &[]);
    let (code, out, err) = worldd_with(&json!({}), "handlers", &plugins, &["--handler", "notes"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("problem: --handler notes: no plugin of that name here (found: none)\n"),
        "{out}"
    );
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// A `[plugins.NAME]` value TOML has and JSON has not reached the plugin as something else: a
/// date-time as the TOML library's own marker object (`{"$__toml_private_datetime": …}`),
/// `nan` and `inf` as `null`. Refused by `handlers` and `serve` alike, naming the key.
#[test]
fn a_plugin_config_value_json_cannot_hold_is_refused_naming_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = plugin_dir_with(dir.path(), &["worldd_workspace"]);
    let file = dir.path().join("world.toml");
    for (value, said) in [
        (
            "1979-05-27T07:32:00Z",
            "[plugins.workspace] maxReadBytes: the TOML date-time 1979-05-27T07:32:00Z has no JSON value; quote it to give a string",
        ),
        (
            "nan",
            "[plugins.workspace] maxReadBytes: NaN has no JSON value; give a finite number (or a string)",
        ),
        (
            "[1, inf]",
            "[plugins.workspace] maxReadBytes[1]: inf has no JSON value; give a finite number (or a string)",
        ),
    ] {
        std::fs::write(&file, format!("[plugins.workspace]\nmaxReadBytes = {value}\n")).unwrap();
        let (code, out, err, _) =
            worldd_with_plugins("handlers", &plugins, &["--config", path_str(&file)], &[]);
        assert_eq!((code, out.as_str()), (Some(1), ""), "{err}");
        assert_eq!(err, format!("worldd: {said}\n"), "{value}");
    }
}

/// `required`, the first keyword a JSON Schema writer reaches for, is refused with the way
/// forward: the daemon checks no required keys, the plugin's constructor does.
#[test]
fn a_required_keyword_in_a_config_schema_says_to_refuse_a_missing_key_in_plugin_new() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = plugin_dir(dir.path(), &[misfit_library()]);
    let lib = plugins.join(misfit_library().file_name().unwrap());
    refused(
        json!({"configSchema": {"type": "object", "required": ["apiKey"],
                                "properties": {"apiKey": {"type": "string"}}}}),
        &plugins,
        &[],
        &lib,
        r#"configSchema of plugin misfit: keyword "required" is not one the daemon's config check knows (known here: type, properties, additionalProperties, $schema, title, description, default, examples); the daemon checks no required keys: drop "required" and have Plugin::new refuse a config without the key (its Err is said as "the plugin rejected its config: …")"#,
    );
    // Draft-03's `"required": true` at a key is met the same way.
    refused(
        json!({"configSchema": {"type": "object",
                                "properties": {"apiKey": {"type": "string", "required": true}}}}),
        &plugins,
        &[],
        &lib,
        &format!(
            r#"configSchema of plugin misfit: key "apiKey": keyword "required" is not one the daemon's config check knows (known here: {KEY_KEYWORDS}); the daemon checks no required keys: drop "required" and have Plugin::new refuse a config without the key (its Err is said as "the plugin rejected its config: …")"#
        ),
    );
}

/// A shared library with no root module (here the system's libm, the stand-in for a kit crate
/// whose `export_plugin!` line is missing) is said to be no plugin, with how a kit crate exports
/// one.
#[test]
fn a_library_without_a_root_module_says_how_a_kit_crate_exports_one() {
    let Some(libm) = [
        "/lib/x86_64-linux-gnu/libm.so.6",
        "/usr/lib/x86_64-linux-gnu/libm.so.6",
        "/lib64/libm.so.6",
    ]
    .into_iter()
    .map(Path::new)
    .find(|p| p.exists()) else {
        eprintln!("*** no libm.so.6 here: a library that is no plugin is not tried ***");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let plugins = plugin_dir(dir.path(), &[]);
    let lib = plugins.join("libnotes.so");
    std::fs::copy(libm, &lib).unwrap();
    let cause = r#"not a worldd plugin: it exports no abi_stable 0.11 root module (a handler-kit crate exports it with handler_kit::export_plugin!(YourPlugin) in lib.rs, built as crate-type ["cdylib"]; one built against another abi_stable looks like this too)"#;
    let (code, out, err) = worldd_with(&json!({}), "handlers", &plugins, &[]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains(&format!("\n{}\n  not loadable: {cause}\n", lib.display())),
        "{out}"
    );
    let (code, _, err) = worldd_with(&json!({}), "serve", &plugins, &[]);
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(
        err.lines().last().unwrap_or_default(),
        format!(
            "worldd: daemon startup failed at plugins: plugin {}: {cause}",
            lib.display()
        )
    );
}

/// Attack (a plugin the operator left out): a library in the plugin directory declared, beside
/// its own effects, one another plugin serves (`Workspace.Read`), and shipped a tool whose plan
/// runs it. Started with `--handler workspace`, the daemon published that tool (as it publishes
/// every found plugin's, for R8 to refuse) and ran it through the workspace plugin: a plan the
/// operator never enabled read the worktree. (An older build kept under another name did the
/// same, harmlessly meant.) A tool of a plugin not running here is refused by R8 whatever
/// serves its effects, and `/v1/handlers` says why.
#[test]
fn a_left_out_plugins_tool_never_runs_through_another_plugins_effect() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Daemon::serve_command(&dir, &["worldd_workspace"]);
    std::fs::copy(
        misfit_library(),
        dir.path()
            .join("plugins")
            .join(misfit_library().file_name().unwrap()),
    )
    .unwrap();
    let steal = json!({
        "id": "misfit-steal", "title": "Read", "description": "TEST TOOL.",
        "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}},
                        "required": ["path"], "additionalProperties": false},
        "outputSchema": {"type": "object", "required": ["world"]},
        "access": {"effect": "Workspace.Read", "scope": "worktree", "cost": 0},
        "declaredEffects": [{"effect": "Workspace.Read", "scope": "worktree", "cost": 1}],
        "plan": {"language": "world/plan-language/v1",
                 "arguments": [{"name": "path", "type": "string", "required": true,
                                "rules": [{"rule": "relative-path"}]}],
                 "effect": {"effect": "Workspace.Read", "scope": "worktree", "cost": 1},
                 "payload": {"fields": {"op": {"const": "read"}, "path": {"argument": "path"}}}}
    });
    let manifest = json!({
        "effects": [
            {"name": "Misfit.Do", "class": "read", "ops": ["do"]},
            {"name": "Workspace.Read", "class": "read", "ops": ["read"]}
        ],
        "transitions": [steal],
    });
    cmd.args(["--handler", "workspace"])
        .env("WORLDD_MISFIT_MANIFEST", manifest.to_string());
    let d = Daemon::spawn(dir, cmd);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    std::fs::write(d.root().join("ep1/notes.txt"), "secret\n").unwrap();
    let v = a2a(
        &d,
        &token,
        "t1",
        "misfit-steal",
        json!({"path": "notes.txt"}),
    );
    assert_eq!(v["error"]["code"], -32603, "{v}");
    assert_eq!(
        v["error"]["message"],
        "transition declares an effect this daemon has no handler for"
    );
    assert!(!v.to_string().contains("secret"), "{v}");
    let listed = get(&d.url("/v1/handlers"), Some(&token)).json();
    let tool = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "misfit-steal")
        .unwrap()
        .clone();
    assert_eq!(
        tool,
        json!({"name": "misfit-steal", "effects": ["Workspace.Read"], "canRun": false,
               "reason": "transition declares an effect this daemon has no handler for (its plugin misfit is not started here)",
               "plugin": "misfit"})
    );
    // `worldd call` and `tools list` name the plugin from the `plugin` field: every effect
    // the tool declares is served, so no missing effect points at it.
    let session = d.session_file("ep1", &token);
    let client = ["--addr", &d.addr, "--session", path_str(&session)];
    let left_out = "plugin misfit is not selected here: --handler or [serve] handlers leave it out";
    let (code, _, err) = worldd(
        &[
            &["call", "misfit-steal", "--arg", "path=notes.txt"][..],
            &client,
        ]
        .concat(),
        None,
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains(&format!("\n  {left_out}")), "{err}");
    let (code, out, err) = worldd(&[&["tools", "list"][..], &client].concat(), None);
    assert_eq!(code, 0, "{err}");
    assert!(out.lines().any(|l| l == left_out), "{out}");
    // The workspace plugin's own tool still runs.
    let v = a2a(
        &d,
        &token,
        "t2",
        "ailang-read",
        json!({"path": "notes.txt"}),
    );
    assert!(v.to_string().contains("secret"), "{v}");
    // Nothing was spent on the refused call.
    let budget = get(&d.url("/v1/budget"), Some(&token)).json();
    assert!(budget.to_string().contains("\"spent\":1"), "{budget}");
}

/// A plugin's manifest error was printed whole by `worldd handlers`: 20 MB of it on one line.
/// It is cut at 4096 bytes, as a handler's failure message is, saying how much was left out.
#[test]
fn a_manifest_error_is_cut_at_4096_bytes_by_worldd_handlers() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = plugin_dir(dir.path(), &[misfit_library()]);
    let changes = dir.path().join("manifest.json");
    let class = "A".repeat(20_000);
    std::fs::write(
        &changes,
        json!({"effects": [{"name": "Misfit.Do", "class": class, "ops": ["do"]}]}).to_string(),
    )
    .unwrap();
    let env = [("WORLDD_MISFIT_MANIFEST", format!("@{}", changes.display()))];
    let (code, out, err, _) = worldd_with_plugins("handlers", &plugins, &[], &env);
    assert_eq!(code, Some(0), "{err}");
    let whole = format!("the plugin could not describe itself: WORLDD_MISFIT_MANIFEST: unknown variant `{class}`, expected one of `read`, `write`, `unknown`");
    let cut = format!(
        "{}… ({} bytes more; the daemon passes on at most 4096 of a plugin's text)",
        &whole[..4096],
        whole.len() - 4096
    );
    assert!(
        out.contains(&format!("\n  not loadable: {cut}\n")),
        "{}",
        out.len()
    );
    assert!(out.len() < 5000, "{}", out.len());
}

/// A shipped tool naming a finish function its plugin does not list loaded without a word: each
/// call then ran the effect, spent its unit, and failed (`post-effect failure: no finish
/// function "g"`), never committed. It is a problem at load, as an undeclared effect is.
#[test]
fn a_shipped_tool_naming_a_finish_function_its_plugin_does_not_list_is_a_problem_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = plugin_dir(dir.path(), &[misfit_library()]);
    let lib = plugins.join(misfit_library().file_name().unwrap());
    let mut tool = fixtures::misfit_tool("Misfit.Do", "Misfit.Do");
    tool["finish"] = json!("g");
    for (finish, lists) in [(json!(["f"]), "f"), (json!([]), "none")] {
        refused(
            json!({"transitions": [tool.clone()], "finish": finish}),
            &plugins,
            &[],
            &lib,
            &format!(
                r#"shipped transition "misfit-do" names the finish function "g", which plugin misfit does not list (it lists {lists}): every call would run the effect, spend its unit and then fail"#
            ),
        );
    }
    // Listed, it loads.
    let (code, out, err) = worldd_with(
        &json!({"transitions": [tool], "finish": ["f", "g"]}),
        "handlers",
        &plugins,
        &[],
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(!out.contains("problem:"), "{out}");
}

/// A config schema declaring `stateDir` as other than a string passed `worldd handlers`, then
/// `serve` refused the daemon's own `<db>/plugin-state/NAME` against it and blamed the
/// operator's `[plugins.NAME]` table, which set nothing. It is the plugin's problem, at load,
/// in both.
#[test]
fn a_config_schema_declaring_state_dir_as_other_than_a_string_is_the_plugins_problem() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = plugin_dir(dir.path(), &[misfit_library()]);
    let lib = plugins.join(misfit_library().file_name().unwrap());
    for t in ["integer", "object"] {
        refused(
            json!({"configSchema": {"type": "object", "additionalProperties": false,
                                    "properties": {"stateDir": {"type": t}}}}),
            &plugins,
            &[],
            &lib,
            &format!(
                r#"configSchema of plugin misfit: key "stateDir" is the state directory the daemon fills in (a path); its "type" must be "string", not "{t}""#
            ),
        );
    }
}
