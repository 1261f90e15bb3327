//! What is checked of one plugin at load, before any of its code beyond the manifest runs, and
//! what `worldd handlers` reports: what its author declared (`authored`), set against the
//! plugins before it (names, tool ids, claimed effects) and against the operator's config.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use broker_core::object::Ref;
use broker_core::transition::Transition;
use serde_json::Value;

use super::config::{check_config, effective_config};
use super::scan::PluginInfo;
use super::{authored, PluginError, PluginOptions};

fn shipped_transitions(info: &PluginInfo) -> Result<Vec<Transition>, PluginError> {
    info.manifest
        .transitions
        .iter()
        .map(|doc| {
            broker_core::registry::entering(doc.clone())
                .map_err(|e| PluginError::new(&info.path, format!("shipped transition: {e}")))
        })
        .collect()
}

/// What the plugins checked before one hold, for the checks across plugins: their names and
/// tool ids (every plugin's), and the effects the selected ones claim.
#[derive(Debug, Default)]
pub struct Seen {
    names: HashMap<String, (PathBuf, Ref)>,
    tools: HashMap<String, (String, PathBuf)>,
    claimed: HashMap<String, (String, PathBuf)>,
    /// What the shipped tools of the plugins before take of a registry revision.
    shipped_bytes: usize,
}

/// Two plugins by name and file, in file-name order: which one was loaded second is no cause
/// of the clash, and neither is singled out.
fn both(a: (&str, &Path), b: (&str, &Path)) -> String {
    let (first, second) = if a.1 <= b.1 { (a, b) } else { (b, a) };
    format!(
        "{} ({}) and {} ({})",
        first.0,
        first.1.display(),
        second.0,
        second.1.display()
    )
}

/// What `serve` checks of one plugin before it runs any of the plugin's code beyond the
/// manifest, and what `worldd handlers` reports: its name is a plugin name no plugin before it
/// carries; the transitions it ships are valid documents, whose ids no plugin before it ships,
/// naming only effects it declares, with payload ops they accept; and, when it is selected, its
/// config schema is one the daemon can read, its effective config passes the top level of that
/// schema, and no plugin selected before it claims one of its effects. `seen` collects what the
/// plugins hold, in scan order. (The plugin's constructor then validates its config fully and
/// may decline; only `serve` runs it.)
pub fn check(
    info: &PluginInfo,
    opts: &PluginOptions,
    seen: &mut Seen,
) -> Result<Checked, PluginError> {
    let fail = |cause: String| PluginError::new(&info.path, cause);
    let name = &info.manifest.name;
    authored::check_name(name).map_err(fail)?;
    authored::check_manifest(&info.manifest).map_err(fail)?;
    // A name is what the operator selects and configures a plugin by: two plugins under one
    // name would both be selected and configured, and could not be told apart in the log.
    if let Some((other, library)) = seen.names.get(name) {
        return Err(fail(if *library == info.file_ref {
            format!(
                "this is the same library as {} (both {library}), under another file name: remove one",
                other.display()
            )
        } else {
            format!(
                "plugin name {name} is also the name of {}: --handler {name} and [plugins.{name}] would select and configure both; remove one, or give one another name",
                other.display()
            )
        }));
    }
    seen.names
        .insert(name.clone(), (info.path.clone(), info.file_ref));
    let transitions = shipped_transitions(info)?;
    // All found plugins' tools are published together, selected or not.
    for t in &transitions {
        if let Some((plugin, other)) = seen.tools.get(&t.id) {
            if other == &info.path {
                return Err(fail(format!(
                    "ships transition {} twice",
                    dialect::quote::quote(&t.id)
                )));
            }
            // Said of the directory, not of one library: neither is more at fault.
            let cause = format!(
                "shipped transition {} is shipped by two plugins, {}: tool ids are one namespace, and every plugin's tools are published, selected or not; remove one of the two libraries from the plugin directory",
                dialect::quote::quote(&t.id),
                both((plugin, other), (name, &info.path))
            );
            return Err(PluginError::clash(&opts.dir, cause, other));
        }
        seen.tools
            .insert(t.id.clone(), (name.clone(), info.path.clone()));
    }
    for (doc, t) in info.manifest.transitions.iter().zip(&transitions) {
        authored::check_transition(&info.manifest, doc, t).map_err(fail)?;
    }
    check_shipped_size(&transitions, seen).map_err(fail)?;
    let config = effective_config(opts, &info.manifest);
    let selected = opts.is_selected(name);
    if selected {
        authored::check_schema(&info.manifest.config_schema)
            .map_err(|e| fail(format!("configSchema of plugin {name}: {e}")))?;
        check_config(&info.manifest.config_schema, &config)
            .map_err(|e| fail(format!("[plugins.{name}]: {e}")))?;
        for e in &info.manifest.effects {
            if let Some((plugin, other)) = seen.claimed.get(&e.name) {
                let leave_out = match (opts.selected.is_empty(), opts.selected_in_file) {
                    (true, _) => {
                        "by naming the plugins to serve with --handler NAME (or [serve] handlers)"
                    }
                    (false, false) => "of --handler",
                    (false, true) => "of [serve] handlers",
                };
                // Said of the directory, not of one library: neither is more at fault.
                let cause = format!(
                    "effect {} is claimed by two plugins, {}: an effect has one handler; remove one of the two libraries from the plugin directory, or leave one of them out {leave_out}",
                    e.name,
                    both((plugin, other), (name, &info.path))
                );
                return Err(PluginError::clash(&opts.dir, cause, other));
            }
        }
        for e in &info.manifest.effects {
            seen.claimed
                .insert(e.name.clone(), (name.clone(), info.path.clone()));
        }
    }
    Ok(Checked {
        config,
        transitions,
        selected,
    })
}

/// The shipped tools are published at every start, past the registry's own limit: each
/// plugin's, and all plugins' together, are bounded here so that they leave room for
/// publishers (and keep every session's `tools/list` bounded).
fn check_shipped_size(transitions: &[Transition], seen: &mut Seen) -> Result<(), String> {
    use broker_core::registry::{entry_bytes, MAX_ALL_SHIPPED_BYTES, MAX_SHIPPED_BYTES};
    let mut bytes = 0usize;
    for t in transitions {
        bytes += entry_bytes(t)
            .map_err(|e| format!("shipped transition {}: {e}", dialect::quote::quote(&t.id)))?;
    }
    if bytes > MAX_SHIPPED_BYTES {
        return Err(format!(
            "its {} shipped transitions take {bytes} bytes of the tool registry; one plugin may ship at most {MAX_SHIPPED_BYTES} (an eighth of the registry's {} bytes): ship fewer or smaller tools",
            transitions.len(),
            broker_core::registry::MAX_REGISTRY_BYTES
        ));
    }
    let total = seen.shipped_bytes + bytes;
    if total > MAX_ALL_SHIPPED_BYTES {
        return Err(format!(
            "its shipped transitions ({bytes} bytes) and those of the plugins before it ({} bytes) take {total} bytes of the tool registry; all plugins together may ship at most {MAX_ALL_SHIPPED_BYTES} (half of the registry's {} bytes): remove a plugin",
            seen.shipped_bytes,
            broker_core::registry::MAX_REGISTRY_BYTES
        ));
    }
    seen.shipped_bytes = total;
    Ok(())
}

/// One plugin that passed [`check`].
#[derive(Debug)]
pub struct Checked {
    /// Its effective config.
    pub config: Value,
    /// The transitions it ships, validated.
    pub transitions: Vec<Transition>,
    /// Whether it is enabled here (`--handler`).
    pub selected: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plugin as the scan finds it: `name`, effect `Notes.Append` (op `append`), the tool
    /// `notes-append`, and the schema `{"type":"object"}`; `change` edits the manifest's JSON.
    fn plugin(file: &str, name: &str, change: impl FnOnce(&mut Value)) -> PluginInfo {
        let mut manifest = serde_json::json!({
            "name": name, "version": "0.1.0", "abi": handler_api::ABI_VERSION,
            "effects": [{"name": "Notes.Append", "class": "write", "ops": ["append"]}],
            "transitions": [{
                "id": "notes-append", "title": "t", "description": "d",
                "inputSchema": {"type": "object", "additionalProperties": false},
                "outputSchema": {"type": "object"},
                "access": {"effect": "Notes.Append", "scope": "any", "cost": 0},
                "declaredEffects": [{"effect": "Notes.Append", "scope": "any", "cost": 1}],
                "plan": {"language": "world/plan-language/v1",
                         "effect": {"effect": "Notes.Append", "scope": "any", "cost": 1},
                         "payload": {"fields": {"op": {"const": "append"}}}}
            }],
            "configSchema": {"type": "object"}
        });
        change(&mut manifest);
        PluginInfo {
            path: PathBuf::from(format!("/plugins/{file}")),
            file_ref: Ref::of(file.as_bytes()),
            manifest: serde_json::from_value(manifest).unwrap(),
        }
    }

    /// The problem `check` finds in `infos`, checked in order, or "" when there is none.
    fn problem(infos: &[PluginInfo]) -> String {
        let opts = PluginOptions {
            dir: PathBuf::from("/plugins"),
            ..PluginOptions::default()
        };
        let mut seen = Seen::default();
        for info in infos {
            if let Err(e) = check(info, &opts, &mut seen) {
                return e.to_string();
            }
        }
        String::new()
    }

    fn one(change: impl FnOnce(&mut Value)) -> String {
        problem(&[plugin("libnotes.so", "notes", change)])
    }
    #[test]
    fn the_fixture_plugin_of_these_tests_passes_every_check() {
        assert_eq!(one(|_| {}), "");
    }

    /// `n` copies of the fixture's tool (`notes-0`, …), each with a description of `pad` bytes
    /// in its input schema.
    fn many_tools(n: usize, pad: usize) -> impl FnOnce(&mut Value) {
        move |m: &mut Value| {
            let one = m["transitions"][0].clone();
            m["transitions"] = (0..n)
                .map(|i| {
                    let mut t = one.clone();
                    t["id"] = format!("notes-{i}").into();
                    t["inputSchema"]["description"] = "d".repeat(pad).into();
                    t
                })
                .collect();
        }
    }

    /// What the tools of `plugin` take of a registry revision.
    fn shipped_bytes(info: &PluginInfo) -> usize {
        shipped_transitions(info)
            .unwrap()
            .iter()
            .map(|t| broker_core::registry::entry_bytes(t).unwrap())
            .sum()
    }

    /// 2000 tools with 60 kB descriptions passed every check of one document, and the registry
    /// they were published into at every start then refused every publisher (and made tools/list
    /// replies of 120 MB). One plugin's shipped tools may now take an eighth of the registry.
    #[test]
    fn a_plugin_whose_shipped_tools_take_more_than_an_eighth_of_the_registry_is_refused_at_load() {
        // 17 tools of 60 kB fit in 1 MiB; 18 do not.
        assert_eq!(one(many_tools(17, 60_000)), "");
        let info = plugin("libnotes.so", "notes", many_tools(18, 60_000));
        let bytes = shipped_bytes(&info);
        assert!(bytes > broker_core::registry::MAX_SHIPPED_BYTES, "{bytes}");
        assert_eq!(
            problem(&[info]),
            format!("plugin /plugins/libnotes.so: its 18 shipped transitions take {bytes} bytes of the tool registry; one plugin may ship at most 1048576 (an eighth of the registry's 8388608 bytes): ship fewer or smaller tools")
        );
        // Many small tools count as much as a few large ones.
        let info = plugin("libnotes.so", "notes", many_tools(2000, 600));
        let bytes = shipped_bytes(&info);
        assert_eq!(
            problem(&[info]),
            format!("plugin /plugins/libnotes.so: its 2000 shipped transitions take {bytes} bytes of the tool registry; one plugin may ship at most 1048576 (an eighth of the registry's 8388608 bytes): ship fewer or smaller tools")
        );
    }

    /// Eight plugins each under its own bound still filled the registry: all plugins found
    /// together may ship half of it, and the one that passes that is refused, naming the sum.
    #[test]
    fn plugins_whose_shipped_tools_together_take_more_than_half_the_registry_are_refused_at_load() {
        let tools = |name: &str| {
            let name = name.to_owned();
            move |m: &mut Value| {
                many_tools(16, 60_000)(m);
                // Each plugin its own tool ids and effect.
                let text = m
                    .to_string()
                    .replace("notes-", &format!("{name}-"))
                    .replace("Notes.", &format!("{}.", name.to_uppercase()));
                *m = serde_json::from_str(&text).unwrap();
            }
        };
        let infos: Vec<PluginInfo> = ["a", "b", "c", "d", "e"]
            .iter()
            .map(|n| plugin(&format!("lib{n}.so"), n, tools(n)))
            .collect();
        let each = shipped_bytes(&infos[0]);
        assert!(4 * each <= broker_core::registry::MAX_ALL_SHIPPED_BYTES);
        assert_eq!(problem(&infos[..4]), "");
        assert_eq!(
            problem(&infos),
            format!(
                "plugin /plugins/libe.so: its shipped transitions ({each} bytes) and those of the plugins before it ({} bytes) take {} bytes of the tool registry; all plugins together may ship at most 4194304 (half of the registry's 8388608 bytes): remove a plugin",
                4 * each,
                5 * each
            )
        );
    }

    #[test]
    fn a_shipped_tool_naming_an_effect_its_plugin_does_not_declare_is_refused_at_load() {
        let delete = |m: &mut Value| {
            let doc = serde_json::to_string(&m["transitions"][0]).unwrap();
            let doc = doc
                .replace("Notes.Append", "Notes.Delete")
                .replace("notes-append", "notes-delete");
            m["transitions"][0] = serde_json::from_str(&doc).unwrap();
        };
        assert_eq!(
            one(delete),
            r#"plugin /plugins/libnotes.so: shipped transition "notes-delete" names effect Notes.Delete, which plugin notes does not declare (it declares Notes.Append)"#
        );
    }

    #[test]
    fn a_payload_op_constant_outside_the_effects_allowlist_is_refused_at_load() {
        let op = |value: Value| {
            move |m: &mut Value| {
                m["transitions"][0]["plan"]["payload"]["fields"]["op"]["const"] = value
            }
        };
        assert_eq!(
            one(op("apend".into())),
            r#"plugin /plugins/libnotes.so: shipped transition "notes-append" sends Notes.Append the op "apend", which is not in its op allowlist (append): the daemon would refuse every call"#
        );
        assert!(one(op(7.into())).ends_with("sends Notes.Append the op 7, which is not a string: the daemon would refuse every call"));
        let no_ops = |m: &mut Value| m["effects"][0]["ops"] = serde_json::json!([]);
        assert!(one(no_ops).ends_with(r#"sends Notes.Append the op "append", but plugin notes declares no ops for it: the daemon would refuse every call"#));
        let no_op = |m: &mut Value| m["transitions"][0]["plan"]["payload"] = serde_json::json!({});
        assert!(one(no_op).ends_with(r#"sends Notes.Append a payload without "op", but it accepts only the ops append: the daemon would refuse every call"#));
        // An op from an argument is the agent's: checked on each call, not at load.
        let from_argument = |m: &mut Value| {
            m["transitions"][0]["plan"]["arguments"] =
                serde_json::json!([{"name": "op", "type": "string", "default": "x"}]);
            m["transitions"][0]["plan"]["payload"] = serde_json::json!({"arguments": "all"});
            m["transitions"][0]["inputSchema"]["properties"] =
                serde_json::json!({"op": {"type": "string"}});
        };
        assert_eq!(one(from_argument), "");
    }

    #[test]
    fn a_config_schema_the_daemon_would_misread_is_refused_at_load() {
        let schema = |s: Value| move |m: &mut Value| m["configSchema"] = s;
        let at = "plugin /plugins/libnotes.so: configSchema of plugin notes: ";
        for (s, problem) in [
            (
                serde_json::json!({"type": "object", "properties": {"maxLineBytes": {"type": "integer", "default": "4096"}}}),
                r#"key "maxLineBytes": its default "4096" is not of its type integer"#,
            ),
            (
                serde_json::json!({"type": "object", "properties": {"maxLineBytes": {"type": "integr"}}}),
                r#"key "maxLineBytes": type "integr" is not one the daemon knows (string, integer, number, boolean, array, object); did you mean integer?"#,
            ),
            (
                serde_json::json!({"type": "object", "additionalPropertes": false}),
                r#"keyword "additionalPropertes" is not one the daemon's config check knows; did you mean additionalProperties? (known here: type, properties, additionalProperties, $schema, title, description, default, examples)"#,
            ),
            (
                serde_json::json!({"properties": {"n": {"type": "integer", "maximum": 10, "default": 11}}}),
                r#"key "n": its default 11 must be at most 10"#,
            ),
            (
                serde_json::json!({"properties": {"n": {"type": "integer", "minimum": "1"}}}),
                r#"key "n": "minimum" must be a number"#,
            ),
            (
                serde_json::json!({"additionalProperties": {"type": "string"}}),
                r#""additionalProperties" is {"type":"string"}; the daemon reads only true or false"#,
            ),
        ] {
            assert_eq!(one(schema(s)), format!("{at}{problem}"));
        }
    }
    #[test]
    fn a_manifest_name_no_operator_could_type_is_refused_at_load() {
        for bad in [
            "My Notes!",
            "",
            "notes.v2",
            "-notes",
            "Notes",
            &"n".repeat(65),
        ] {
            assert_eq!(
                problem(&[plugin("libnotes.so", bad, |_| {})]),
                format!(
                    "plugin /plugins/libnotes.so: manifest name {} is not a plugin name: it must match ^[a-z0-9][a-z0-9-]{{0,63}}$ (operators type it in --handler NAME and [plugins.NAME])",
                    dialect::quote::quote(bad)
                )
            );
        }
        assert_eq!(problem(&[plugin("libnotes.so", "notes-2", |_| {})]), "");
    }

    #[test]
    fn two_plugins_of_one_name_are_refused_naming_both_files() {
        let other_tool = |m: &mut Value| {
            let doc = serde_json::to_string(&m["transitions"][0]).unwrap();
            m["transitions"][0] =
                serde_json::from_str(&doc.replace("notes-append", "notes-other")).unwrap();
            m["effects"][0]["name"] = "Notes.Other".into();
            let doc = serde_json::to_string(&m["transitions"][0]).unwrap();
            m["transitions"][0] =
                serde_json::from_str(&doc.replace("Notes.Append", "Notes.Other")).unwrap();
        };
        assert_eq!(
            problem(&[plugin("liba.so", "notes", |_| {}), plugin("libb.so", "notes", other_tool)]),
            "plugin /plugins/libb.so: plugin name notes is also the name of /plugins/liba.so: --handler notes and [plugins.notes] would select and configure both; remove one, or give one another name"
        );
        // The same bytes under two file names: one library, twice.
        let mut twice = plugin("liba.so", "notes", |_| {});
        twice.path = PathBuf::from("/plugins/libcopy.so");
        assert_eq!(
            problem(&[plugin("liba.so", "notes", |_| {}), twice]),
            format!(
                "plugin /plugins/libcopy.so: this is the same library as /plugins/liba.so (both {}), under another file name: remove one",
                Ref::of(b"liba.so")
            )
        );
    }

    #[test]
    fn one_tool_id_shipped_by_two_plugins_is_refused_naming_both_files() {
        let other_effect = |m: &mut Value| {
            m["effects"][0]["name"] = "Other.Append".into();
            let doc = serde_json::to_string(&m["transitions"][0]).unwrap();
            m["transitions"][0] =
                serde_json::from_str(&doc.replace("Notes.Append", "Other.Append")).unwrap();
        };
        assert_eq!(
            problem(&[
                plugin("liba.so", "notes", |_| {}),
                plugin("libb.so", "other", other_effect)
            ]),
            r#"plugin /plugins: shipped transition "notes-append" is shipped by two plugins, notes (/plugins/liba.so) and other (/plugins/libb.so): tool ids are one namespace, and every plugin's tools are published, selected or not; remove one of the two libraries from the plugin directory"#
        );
        let twice = |m: &mut Value| {
            let t = m["transitions"][0].clone();
            m["transitions"].as_array_mut().unwrap().push(t);
        };
        assert_eq!(
            one(twice),
            r#"plugin /plugins/libnotes.so: ships transition "notes-append" twice"#
        );
    }
    /// A clash reached `worldd handlers` through a field of `Seen` set beside the error, which
    /// `serve` never took: the error itself now carries the other library, and only a clash's.
    #[test]
    fn a_clash_refusal_carries_the_other_library_and_no_other_refusal_does() {
        let opts = PluginOptions {
            dir: PathBuf::from("/plugins"),
            ..PluginOptions::default()
        };
        let other_effect = |m: &mut Value| {
            let doc = m.to_string().replace("Notes.Append", "Other.Append");
            *m = serde_json::from_str(&doc).unwrap();
        };
        let other_tool = |m: &mut Value| {
            let doc = m.to_string().replace("notes-append", "other-append");
            *m = serde_json::from_str(&doc).unwrap();
        };
        let second = |info: PluginInfo| {
            let mut seen = Seen::default();
            check(&plugin("liba.so", "notes", |_| {}), &opts, &mut seen).unwrap();
            check(&info, &opts, &mut seen).unwrap_err()
        };
        let tool = second(plugin("libb.so", "other", other_effect));
        assert_eq!(tool.path, "/plugins");
        assert_eq!(tool.clash_with, Some(PathBuf::from("/plugins/liba.so")));
        let effect = second(plugin("libb.so", "other", other_tool));
        assert_eq!(effect.path, "/plugins");
        assert_eq!(effect.clash_with, Some(PathBuf::from("/plugins/liba.so")));
        let name = second(plugin("libb.so", "notes", |_| {}));
        assert_eq!(name.path, "/plugins/libb.so");
        assert_eq!(name.clash_with, None);
    }

    /// The refusal named the library loaded second as the one at fault and the other as
    /// "already" there: a third party's plugin whose file sorted first made a shipped plugin
    /// look broken. Both are named alike, in file-name order, with what to do.
    #[test]
    fn an_effect_two_plugins_claim_is_refused_naming_both_alike_and_what_to_do() {
        let other_tool = |m: &mut Value| {
            let doc = serde_json::to_string(&m["transitions"][0]).unwrap();
            m["transitions"][0] =
                serde_json::from_str(&doc.replace("notes-append", "other-append")).unwrap();
        };
        let clash = |selected: &[&str], in_file: bool| {
            let opts = PluginOptions {
                dir: PathBuf::from("/plugins"),
                selected: selected.iter().map(|s| s.to_string()).collect(),
                selected_in_file: in_file,
                ..PluginOptions::default()
            };
            let mut seen = Seen::default();
            check(&plugin("liba.so", "notes", |_| {}), &opts, &mut seen).unwrap();
            let e = check(&plugin("libb.so", "other", other_tool), &opts, &mut seen).unwrap_err();
            assert_eq!(e.clash_with, Some(PathBuf::from("/plugins/liba.so")));
            e.to_string()
        };
        let said = |leave_out: &str| {
            format!("plugin /plugins: effect Notes.Append is claimed by two plugins, notes (/plugins/liba.so) and other (/plugins/libb.so): an effect has one handler; remove one of the two libraries from the plugin directory, or leave one of them out {leave_out}")
        };
        assert_eq!(
            clash(&[], false),
            said("by naming the plugins to serve with --handler NAME (or [serve] handlers)")
        );
        assert_eq!(clash(&["notes", "other"], false), said("of --handler"));
        assert_eq!(
            clash(&["notes", "other"], true),
            said("of [serve] handlers")
        );
        // The other file order: the same words.
        assert_eq!(
            problem(&[
                plugin("libb.so", "other", other_tool),
                plugin("liba.so", "notes", |_| {})
            ]),
            said("by naming the plugins to serve with --handler NAME (or [serve] handlers)")
        );
    }

    #[test]
    fn a_tool_id_too_long_for_an_mcp_name_is_refused_at_load_not_on_every_tools_list() {
        // 63 bytes with one `.` (two bytes in an MCP name): 64, the most; then 65.
        let id = |tail: &str| format!("notes.{}{tail}", "a".repeat(57));
        let rename = |to: String| {
            move |m: &mut Value| {
                let doc = serde_json::to_string(&m["transitions"][0]).unwrap();
                m["transitions"][0] =
                    serde_json::from_str(&doc.replace("notes-append", &to)).unwrap();
            }
        };
        assert_eq!(one(rename(id(""))), "");
        assert_eq!(
            one(rename(id("b"))),
            format!(
                r#"plugin /plugins/libnotes.so: shipped transition "{}" has an MCP name of 65 bytes (notes_d{}b); the limit is 64: every session granted its access effect would be refused its tool list; give it a shorter id"#,
                id("b"),
                "a".repeat(57)
            )
        );
    }

    #[test]
    fn a_plugin_declaring_the_daemons_reserved_world_commit_effect_is_refused_at_load() {
        let world = |effect: &'static str| {
            move |m: &mut Value| {
                let doc = serde_json::to_string(&m).unwrap();
                *m = serde_json::from_str(&doc.replace("Notes.Append", effect)).unwrap();
            }
        };
        for effect in ["World.Commit", "World.Anything", "world.Commit"] {
            assert_eq!(
                one(world(effect)),
                format!("plugin /plugins/libnotes.so: plugin notes declares the effect {effect}, in the namespace World, which the daemon reserves for its own effects (a World.Commit=log:N grant pays for operator commits): name it under your plugin's own namespace")
            );
        }
        assert_eq!(one(world("Worldly.Commit")), "");
    }

    #[test]
    fn an_effect_declared_twice_in_one_manifest_is_refused_as_such_not_as_claimed_by_itself() {
        let twice = |m: &mut Value| {
            let e = m["effects"][0].clone();
            m["effects"].as_array_mut().unwrap().push(e);
        };
        assert_eq!(
            one(twice),
            "plugin /plugins/libnotes.so: plugin notes declares the effect Notes.Append twice: declare each effect once"
        );
    }

    #[test]
    fn a_manifest_that_lies_about_its_abi_or_carries_unbounded_or_unprintable_fields_is_refused() {
        let set = |key: &'static str, v: Value| move |m: &mut Value| m[key] = v;
        let at = "plugin /plugins/libnotes.so: ";
        assert_eq!(
            one(set("abi", 99.into())),
            format!("{at}plugin notes's manifest says abi 99, but its library answers abi_version() {}: the manifest must name the ABI it was built for (handler-api's export_plugin! sets it)", handler_api::ABI_VERSION)
        );
        let version = |v: &str| {
            format!("{at}plugin notes's version {v} is not a version: it must be 1 to 64 bytes of letters, digits and . + - _ (such as 0.1.0; every effect record carries it)")
        };
        assert_eq!(one(set("version", "v".repeat(64).into())), "");
        assert_eq!(
            one(set("version", "v".repeat(3 << 20).into())),
            version(&format!("\"{}\"… (3145728 bytes in all)", "v".repeat(64)))
        );
        assert_eq!(one(set("version", "".into())), version("\"\""));
        assert_eq!(
            one(set("version", "1.0\nproblem: none".into())),
            version(r#""1.0\nproblem: none""#)
        );
        assert_eq!(one(set("description", "d".repeat(1024).into())), "");
        assert_eq!(
            one(set("description", "d".repeat(1025).into())),
            format!("{at}plugin notes's description is 1025 bytes, more than the 1024 it may be: make it one sentence")
        );
        let effect = |name: &str| {
            let name = name.to_owned();
            move |m: &mut Value| m["effects"][0]["name"] = name.into()
        };
        for (bad, shown) in [
            ("", r#""""#),
            (
                "Notes.Append\nproblem: none",
                r#""Notes.Append\nproblem: none""#,
            ),
            ("Notes=x", r#""Notes=x""#),
            ("Notes..Append", r#""Notes..Append""#),
        ] {
            assert_eq!(
                one(effect(bad)),
                format!("{at}plugin notes declares the effect {shown}, which is not an effect name: it must be dot-separated names, each a letter and then letters, digits and _, at most 128 bytes in all (such as Notes.Append), as grants name it")
            );
        }
        let described =
            |n: usize| move |m: &mut Value| m["effects"][0]["description"] = "d".repeat(n).into();
        assert!(one(described(1024)).is_empty());
        assert_eq!(
            one(described(1025)),
            format!("{at}plugin notes's description of the effect Notes.Append is 1025 bytes, more than the 1024 it may be: make it one sentence")
        );
    }
}
