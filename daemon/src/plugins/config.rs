//! What the operator wrote for the plugins, against what was found: each plugin's effective
//! config (its `[plugins.NAME]` table, and `stateDir` where it wants one) checked against the
//! top of its schema, a table that names no plugin found, and a `--handler` that names none.

use handler_api::Manifest;
use serde_json::{Map, Value};

use super::{authored, PluginError, PluginOptions};

/// The effective config of one plugin: the operator's table plus `stateDir` when the plugin
/// declares that key and the operator did not set it.
pub fn effective_config(opts: &PluginOptions, manifest: &Manifest) -> Value {
    let mut config = opts
        .configs
        .get(&manifest.name)
        .cloned()
        .unwrap_or_else(|| Value::Object(Map::new()));
    let wants_state = manifest
        .config_schema
        .get("properties")
        .and_then(|p| p.get("stateDir"))
        .is_some();
    if let (true, Some(root), Some(obj)) = (wants_state, &opts.state_root, config.as_object_mut()) {
        obj.entry("stateDir")
            .or_insert_with(|| Value::String(root.join(&manifest.name).display().to_string()));
    }
    config
}

/// Check the operator's config object against the top level of the plugin's schema (unknown
/// keys when `additionalProperties` is false, JSON types, and the `minimum` and `maximum` of
/// numbers). The plugin validates fully.
pub fn check_config(schema: &Value, config: &Value) -> Result<(), String> {
    let Some(obj) = config.as_object() else {
        return Err("config must be a table (a JSON object)".into());
    };
    let props = schema.get("properties").and_then(Value::as_object);
    let closed = schema.get("additionalProperties") == Some(&Value::Bool(false));
    for (k, v) in obj {
        match props.and_then(|p| p.get(k)) {
            None if closed => {
                let known: Vec<&str> = props
                    .map(|p| p.keys().map(String::as_str).collect())
                    .unwrap_or_default();
                return Err(format!(
                    "unknown config key {k:?} (known: {})",
                    known.join(", ")
                ));
            }
            None => {}
            Some(p) => {
                // The schema was checked at load (`authored::check_schema`): `t` is a known type.
                if let Some(t) = p.get("type").and_then(Value::as_str) {
                    if !authored::of_type(t, v) {
                        return Err(format!(
                            "config key {k:?} must be of type {t}{}",
                            size_hint(t, v)
                        ));
                    }
                }
                authored::within_bounds(k, v, p)?;
            }
        }
    }
    Ok(())
}

/// For a size written with a unit where a plugin wants an integer: the number to write. The
/// daemon's own tables take units; a plugin's schema says what its keys take.
fn size_hint(wanted: &str, value: &Value) -> String {
    match value.as_str().map(str::parse::<crate::byte_size::ByteSize>) {
        Some(Ok(size)) if wanted == "integer" => format!(
            " (a plugin's keys take plain numbers, not units: write {})",
            size.get()
        ),
        _ => String::new(),
    }
}

/// A plugin table (`[plugins.NAME]`, `--plugin-config NAME.KEY=…`) that names no plugin found
/// here, and whether it is most likely a misspelling of one that is (at most two edits
/// away): that one stops the start, since its plugin would otherwise run on its defaults
/// unnoticed; any other is a table for a plugin this deployment does not have, said and
/// ignored.
pub(super) fn stray_tables(
    opts: &PluginOptions,
    found: &[String],
) -> Vec<(String, Option<String>)> {
    opts.configs
        .keys()
        .filter(|name| !found.contains(name))
        .map(|name| {
            let near = crate::spelling::nearest(name, found.iter().map(String::as_str), false);
            (name.clone(), near.map(str::to_owned))
        })
        .collect()
}

/// What [`stray_tables`] says of one table.
pub(super) fn stray_table_text(name: &str, near: Option<&str>, found: &[String]) -> String {
    match near {
        Some(near) => format!(
            "[plugins.{name}] (or --plugin-config {name}.KEY=…) names no plugin here; did you mean [plugins.{near}]? (found: {})",
            listed(found)
        ),
        None => format!(
            "[plugins.{name}] names no plugin here (found: {}): its keys are ignored",
            listed(found)
        ),
    }
}

/// The names of the plugins found, or `none`.
fn listed(found: &[String]) -> String {
    if found.is_empty() {
        "none".to_owned()
    } else {
        found.join(", ")
    }
}

/// The plugins found but not selected whose table the operator set: written, most likely, to
/// serve the plugin (the example config's `[plugins.ailang]` with a `bin`), which the
/// selection then leaves out.
pub(super) fn unselected_tables<'a>(opts: &'a PluginOptions, found: &[String]) -> Vec<&'a str> {
    opts.configs
        .iter()
        .filter(|(name, table)| {
            found.contains(name)
                && !opts.is_selected(name)
                && table.as_object().is_some_and(|t| !t.is_empty())
        })
        .map(|(name, _)| name.as_str())
        .collect()
}

/// What [`unselected_tables`] says of one table.
pub(super) fn unselected_table_text(opts: &PluginOptions, name: &str) -> String {
    let selection = if opts.selected_in_file {
        "[serve] handlers"
    } else {
        "--handler"
    };
    format!(
        "[plugins.{name}] is set, but {selection} leaves {name} out: its tools are refused (rule R8); add {name:?} to {selection} to serve them"
    )
}

/// A misspelled plugin table stops the start; a table for an absent plugin, or for one the
/// selection leaves out, is warned of.
pub(super) fn check_tables(opts: &PluginOptions, found: &[String]) -> Result<(), PluginError> {
    for (name, near) in stray_tables(opts, found) {
        let text = stray_table_text(&name, near.as_deref(), found);
        if near.is_some() {
            return Err(PluginError::new(&opts.dir, text));
        }
        tracing::warn!("{text}");
    }
    for name in unselected_tables(opts, found) {
        tracing::warn!("{}", unselected_table_text(opts, name));
    }
    Ok(())
}

/// Every `--handler NAME` names a plugin that was found; else the error lists what was found
/// and the libraries that would not load.
pub(super) fn check_selected(
    opts: &PluginOptions,
    found: &[String],
    broken: &[String],
) -> Result<(), PluginError> {
    match opts.selected.iter().find(|s| !found.contains(s)) {
        None => Ok(()),
        Some(s) => Err(PluginError::new(
            &opts.dir,
            format!(
                "{}: no plugin of that name here (found: {}){}{}",
                if opts.selected_in_file {
                    format!("[serve] handlers {s:?}")
                } else {
                    format!("--handler {s}")
                },
                listed(found),
                // A plugin a letter or two away, as a misspelled [plugins.NAME] table gets.
                crate::spelling::nearest(s, found.iter().map(String::as_str), false)
                    .map(|near| format!("; did you mean {near}?"))
                    .unwrap_or_default(),
                if broken.is_empty() {
                    String::new()
                } else {
                    format!("; not loadable: {}", broken.join("; "))
                }
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    #[test]
    fn a_handler_name_with_nothing_found_says_none_not_an_empty_list() {
        let opts = PluginOptions {
            dir: PathBuf::from("/plugins"),
            selected: vec!["notes".into()],
            ..PluginOptions::default()
        };
        assert_eq!(
            check_selected(&opts, &[], &[]).unwrap_err().to_string(),
            "plugin /plugins: --handler notes: no plugin of that name here (found: none)"
        );
    }
}
