//! What a plugin's author wrote in its manifest, checked when it is loaded: its name, the tools
//! it ships against the effects it declares, and its config schema. Each mistake here would
//! otherwise surface later and elsewhere: as an R8 refusal that reads like a missing plugin, as
//! a failed effect that spends budget on every call, or as an operator's table checked against
//! a schema the daemon misreads.

use broker_core::transition::Transition;
use dialect::quote::quote;
use handler_api::Manifest;
use serde_json::{Map, Value};

/// The pattern of a plugin's manifest name, the one episode names follow: it is typed in
/// `--handler NAME` and `[plugins.NAME]`, and names a directory (`stateDir`) and log lines.
pub const NAME_PATTERN: &str = "^[a-z0-9][a-z0-9-]{0,63}$";

/// The manifest name against [`NAME_PATTERN`].
pub fn check_name(name: &str) -> Result<(), String> {
    let b = name.as_bytes();
    let ok = matches!(b.first(), Some(c) if c.is_ascii_lowercase() || c.is_ascii_digit())
        && b.len() <= 64
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-');
    if ok {
        return Ok(());
    }
    Err(format!(
        "manifest name {} is not a plugin name: it must match {NAME_PATTERN} (operators type it in --handler NAME and [plugins.NAME])",
        quote(name)
    ))
}

/// Longest `version` a manifest may carry, in bytes: every effect record the plugin runs
/// carries it, and `worldd handlers` and the log print it.
pub const MAX_VERSION_BYTES: usize = 64;

/// Longest `description` of a plugin or of one of its effects, in bytes: one sentence for
/// `worldd handlers`.
pub const MAX_DESCRIPTION_BYTES: usize = 1024;

/// The namespace of effects the daemon spends itself (`World.Commit`, which `POST /v1/commit`
/// spends): no plugin may declare an effect in it, or a grant meant for the daemon would be
/// spent on the plugin's tool.
pub const RESERVED_NAMESPACE: &str = "World";

/// What the manifest says of itself, beyond its name: the ABI it names is the one its library
/// answers (`abi_version()`, checked at load, is [`handler_api::ABI_VERSION`]); its version
/// and descriptions are bounded, its version printable; and each effect it declares is named
/// by the grant grammar's rule ([`broker_core::plan::valid_effect_name`], as `--grant` takes
/// it), outside the daemon's reserved namespace, and declared once.
pub fn check_manifest(manifest: &Manifest) -> Result<(), String> {
    let name = &manifest.name;
    if manifest.abi != handler_api::ABI_VERSION {
        return Err(format!(
            "plugin {name}'s manifest says abi {}, but its library answers abi_version() {}: the manifest must name the ABI it was built for (handler-api's export_plugin! sets it)",
            manifest.abi,
            handler_api::ABI_VERSION
        ));
    }
    let version = &manifest.version;
    let printable = |c: u8| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'+' | b'-' | b'_');
    if version.is_empty() || version.len() > MAX_VERSION_BYTES || !version.bytes().all(printable) {
        return Err(format!(
            "plugin {name}'s version {} is not a version: it must be 1 to {MAX_VERSION_BYTES} bytes of letters, digits and . + - _ (such as 0.1.0; every effect record carries it)",
            shown(version)
        ));
    }
    if manifest.description.len() > MAX_DESCRIPTION_BYTES {
        return Err(format!(
            "plugin {name}'s description is {} bytes, more than the {MAX_DESCRIPTION_BYTES} it may be: make it one sentence",
            manifest.description.len()
        ));
    }
    for (i, effect) in manifest.effects.iter().enumerate() {
        let effect_name = &effect.name;
        if !broker_core::plan::valid_effect_name(effect_name) {
            return Err(format!(
                "plugin {name} declares the effect {}, which is not an effect name: it must be dot-separated names, each a letter and then letters, digits and _, at most 128 bytes in all (such as Notes.Append), as grants name it",
                shown(effect_name)
            ));
        }
        let namespace = effect_name.split('.').next().unwrap_or_default();
        if namespace.eq_ignore_ascii_case(RESERVED_NAMESPACE) {
            return Err(format!(
                "plugin {name} declares the effect {effect_name}, in the namespace {RESERVED_NAMESPACE}, which the daemon reserves for its own effects (a {}=log:N grant pays for operator commits): name it under your plugin's own namespace",
                broker_core::commit::REST_EFFECT
            ));
        }
        if manifest.effects[..i].iter().any(|e| e.name == *effect_name) {
            return Err(format!(
                "plugin {name} declares the effect {effect_name} twice: declare each effect once"
            ));
        }
        if effect.description.len() > MAX_DESCRIPTION_BYTES {
            return Err(format!(
                "plugin {name}'s description of the effect {effect_name} is {} bytes, more than the {MAX_DESCRIPTION_BYTES} it may be: make it one sentence",
                effect.description.len()
            ));
        }
    }
    Ok(())
}

/// A string of the plugin's, quoted (its control characters escaped), and cut short past
/// [`MAX_VERSION_BYTES`] bytes: a message names it without repeating megabytes of it.
fn shown(text: &str) -> String {
    let start = crate::text::head(text, MAX_VERSION_BYTES);
    if start.len() == text.len() {
        quote(text)
    } else {
        format!("{}… ({} bytes in all)", quote(start), text.len())
    }
}

/// One shipped tool against the plugin's own declarations: its id makes an MCP name the tool
/// surface can carry (at most [`crate::tools::MAX_MCP_NAME`] bytes, as the registry publisher
/// requires: one longer refuses the tool list of every session that may see the tool, other
/// plugins' tools with it), every effect its `access` and `declaredEffects` name is one the
/// plugin declares, and the payload's `op` is one that effect accepts. Each mistake fails
/// every call of the tool.
pub fn check_transition(manifest: &Manifest, doc: &Value, t: &Transition) -> Result<(), String> {
    let mcp_name_len = crate::tools::mcp_name_len(&t.id);
    if mcp_name_len > crate::tools::MAX_MCP_NAME {
        return Err(format!(
            "shipped transition {} has an MCP name of {mcp_name_len} bytes ({}); the limit is {}: every session granted its access effect would be refused its tool list; give it a shorter id",
            quote(&t.id),
            crate::tools::mcp_name(&t.id),
            crate::tools::MAX_MCP_NAME
        ));
    }
    let declared: Vec<&str> = manifest.effects.iter().map(|e| e.name.as_str()).collect();
    let named = std::iter::once(&t.access).chain(&t.declared_effects);
    for spec in named {
        if !declared.contains(&spec.effect.as_str()) {
            return Err(format!(
                "shipped transition {} names effect {}, which plugin {} does not declare (it declares {})",
                quote(&t.id),
                spec.effect,
                manifest.name,
                if declared.is_empty() { "none".to_owned() } else { declared.join(", ") }
            ));
        }
    }
    // The finish function runs after the effect: one the plugin does not serve would fail
    // every call after its effect ran and its unit was spent, the call never committed.
    if let Some(finish) = &t.finish {
        if !manifest.finish.contains(finish) {
            return Err(format!(
                "shipped transition {} names the finish function {}, which plugin {} does not list (it lists {}): every call would run the effect, spend its unit and then fail",
                quote(&t.id),
                quote(finish),
                manifest.name,
                if manifest.finish.is_empty() {
                    "none".to_owned()
                } else {
                    manifest.finish.join(", ")
                }
            ));
        }
    }
    let payload = doc.pointer("/plan/payload");
    let op = payload.and_then(|p| p.pointer("/fields/op"));
    for spec in &t.declared_effects {
        let Some(effect) = manifest.effects.iter().find(|e| e.name == spec.effect) else {
            continue;
        };
        let ops = &effect.ops;
        let sends = |what: String| {
            Err(format!(
                "shipped transition {} sends {} {what}: the daemon would refuse every call",
                quote(&t.id),
                spec.effect
            ))
        };
        match op.and_then(|o| o.get("const")) {
            Some(c) if ops.is_empty() => {
                return sends(format!(
                    "the op {c}, but plugin {} declares no ops for it",
                    manifest.name
                ))
            }
            Some(Value::String(c)) if !ops.contains(c) => {
                return sends(format!(
                    "the op {}, which is not in its op allowlist ({})",
                    quote(c),
                    ops.join(", ")
                ))
            }
            Some(c) if !c.is_string() => {
                return sends(format!("the op {c}, which is not a string"))
            }
            Some(_) => {}
            None if !ops.is_empty() && op.is_none() && !copies_op(payload) => {
                return sends(format!(
                    "a payload without \"op\", but it accepts only the ops {}",
                    ops.join(", ")
                ))
            }
            None => {}
        }
    }
    Ok(())
}

/// Whether the payload's `arguments` may copy an argument named `op` (a value the daemon can
/// only check per call).
fn copies_op(payload: Option<&Value>) -> bool {
    match payload.and_then(|p| p.get("arguments")) {
        Some(Value::String(_)) => true,
        Some(Value::Array(names)) => names.iter().any(|n| n == "op"),
        _ => false,
    }
}

/// The JSON types the daemon's config check knows.
pub const TYPES: [&str; 6] = ["string", "integer", "number", "boolean", "array", "object"];

/// Whether `value` is of the JSON type `t` (one of [`TYPES`]).
pub fn of_type(t: &str, value: &Value) -> bool {
    match t {
        "string" => value.is_string(),
        "integer" => value.is_u64() || value.is_i64(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        _ => false,
    }
}

/// A number against its property's `minimum` and `maximum`, so that `worldd handlers` names an
/// out-of-range value before `serve` would stop on it.
pub fn within_bounds(key: &str, value: &Value, property: &Value) -> Result<(), String> {
    let Some(n) = value.as_f64() else {
        return Ok(());
    };
    let bound = |name: &str| property.get(name).filter(|b| b.is_number());
    if let Some(min) = bound("minimum").filter(|m| m.as_f64().is_some_and(|m| n < m)) {
        return Err(format!("config key {key:?} must be at least {min}"));
    }
    if let Some(max) = bound("maximum").filter(|m| m.as_f64().is_some_and(|m| n > m)) {
        return Err(format!("config key {key:?} must be at most {max}"));
    }
    Ok(())
}

/// Top-level keywords the daemon checks the operator's table with.
const TOP_CHECKED: [&str; 3] = ["type", "properties", "additionalProperties"];
/// Keywords of one key the daemon checks its value with.
const KEY_CHECKED: [&str; 3] = ["type", "minimum", "maximum"];
/// Annotations: read by people and tools, checked by no one (a `default` must match its type).
const ANNOTATIONS: [&str; 5] = ["$schema", "title", "description", "default", "examples"];
/// Keywords of one key the daemon passes over: the plugin's `new` must check what they say.
const KEY_LEFT_TO_PLUGIN: [&str; 9] = [
    "items",
    "enum",
    "const",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "uniqueItems",
];

/// The plugin's `configSchema` itself: only keywords the daemon knows (a misspelled one would
/// silently switch a check off), known `type` names, numeric bounds, and each `default` of its
/// key's own type and within its bounds, at each key and in the schemas nested below it (its
/// `items`, at most [`MAX_NESTING`] deep). An absent (null) schema checks nothing.
pub fn check_schema(schema: &Value) -> Result<(), String> {
    let top = match schema {
        Value::Null => return Ok(()),
        Value::Object(o) => o,
        _ => return Err("it must be a JSON object".into()),
    };
    unknown_keyword(top, &[&TOP_CHECKED[..], &ANNOTATIONS[..]].concat(), "")?;
    match top.get("type") {
        None => {}
        Some(t) if t == "object" => {}
        Some(t) => return Err(format!("\"type\" is {t}; a config is a table: \"object\"")),
    }
    match top.get("additionalProperties") {
        None | Some(Value::Bool(_)) => {}
        Some(v) => {
            return Err(format!(
                "\"additionalProperties\" is {v}; the daemon reads only true or false"
            ))
        }
    }
    let props = match top.get("properties") {
        None => return Ok(()),
        Some(Value::Object(p)) => p,
        Some(_) => return Err("\"properties\" must be an object".into()),
    };
    // The daemon fills `stateDir` in with a path: declared as anything but a string, the
    // daemon's own value would fail the plugin's schema, read as the operator's mistake.
    if let Some(t) = props.get(STATE_DIR).and_then(|p| p.get("type")) {
        if t != "string" {
            return Err(format!(
                "key \"{STATE_DIR}\" is the state directory the daemon fills in (a path); its \"type\" must be \"string\", not {t}"
            ));
        }
    }
    for (key, p) in props {
        check_key(key, &format!("key {}", quote(key)), p, 0)?;
    }
    Ok(())
}

/// The config key a plugin declares to be given a directory of its own, which the daemon fills
/// in (`<db>/plugin-state/<name>`) unless the operator sets it.
pub const STATE_DIR: &str = "stateDir";

/// How deep schemas may nest below a key (`items` within `items`): an array of arrays of
/// arrays is already a rare config, and a bound keeps a hostile schema from taking the
/// daemon's stack with it.
pub const MAX_NESTING: usize = 8;

/// The schema of one key, or of what it nests (`path` names it: `key "paths".items`), at
/// `depth` schemas below the key: the same keywords, types, bounds and defaults as a key's,
/// down through `items`. The values under `items` are the plugin's to check; the keywords
/// there are read here, since a misspelled one would switch off the plugin's check as silently.
fn check_key(key: &str, path: &str, p: &Value, depth: usize) -> Result<(), String> {
    let at = format!("{path}: ");
    if depth > MAX_NESTING {
        return Err(format!(
            "{at}schemas nested more than {MAX_NESTING} deep; the daemon's config check reads no deeper"
        ));
    }
    let Some(p) = p.as_object() else {
        return Err(format!("{at}its schema must be an object"));
    };
    let known = [&KEY_CHECKED[..], &ANNOTATIONS[..], &KEY_LEFT_TO_PLUGIN[..]].concat();
    unknown_keyword(p, &known, &at)?;
    let t = match p.get("type") {
        None => None,
        Some(Value::String(t)) if TYPES.contains(&t.as_str()) => Some(t.as_str()),
        Some(t) => {
            return Err(format!(
                "{at}type {t} is not one the daemon knows ({}){}",
                TYPES.join(", "),
                t.as_str().map(|t| near(t, &TYPES)).unwrap_or_default()
            ))
        }
    };
    for bound in ["minimum", "maximum"] {
        if p.get(bound).is_some_and(|b| !b.is_number()) {
            return Err(format!("{at}\"{bound}\" must be a number"));
        }
    }
    if let Some(d) = p.get("default") {
        if let Some(t) = t.filter(|t| !of_type(t, d)) {
            return Err(format!("{at}its default {d} is not of its type {t}"));
        }
        // `config key "k" must be at most N`, said of the default.
        let prefix = format!("config key {key:?} ");
        // Only the bounds are copied: `p` may hold a schema nested below it.
        let bounds: Map<String, Value> = ["minimum", "maximum"]
            .into_iter()
            .filter_map(|b| Some((b.to_owned(), p.get(b)?.clone())))
            .collect();
        within_bounds(key, d, &Value::Object(bounds)).map_err(|e| {
            format!(
                "{at}its default {d} {}",
                e.strip_prefix(&prefix).unwrap_or(&e)
            )
        })?;
    }
    match p.get("items") {
        Some(items) => check_key(key, &format!("{path}.items"), items, depth + 1),
        None => Ok(()),
    }
}

fn unknown_keyword(schema: &Map<String, Value>, known: &[&str], at: &str) -> Result<(), String> {
    match schema.keys().find(|k| !known.contains(&k.as_str())) {
        None => Ok(()),
        Some(k) => Err(format!(
            "{at}keyword {} is not one the daemon's config check knows{} (known here: {}){}",
            quote(k),
            near(k, known),
            known.join(", "),
            way_forward(k)
        )),
    }
}

/// What to do instead of a keyword the check does not read, where there is a usual way.
fn way_forward(keyword: &str) -> &'static str {
    match keyword {
        // The first keyword a JSON Schema writer reaches for, for a key the plugin needs.
        "required" => "; the daemon checks no required keys: drop \"required\" and have Plugin::new refuse a config without the key (its Err is said as \"the plugin rejected its config: …\")",
        _ => "",
    }
}

/// `; did you mean X?` for a word at most two edits from one of `words`.
fn near(word: &str, words: &[&str]) -> String {
    crate::spelling::nearest(word, words.iter().copied(), false)
        .map(|w| format!("; did you mean {w}?"))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hostile_schema_nested_far_past_the_bound_is_refused_without_recursing_into_it() {
        // Far deeper than any JSON text the daemon parses could nest: built here, not parsed.
        // (Not with `json!`, which would serialise each level again.)
        let wrap =
            |key: &str, inner: Value| Value::Object(Map::from_iter([(key.to_owned(), inner)]));
        let deep = (0..100_000).fold(Value::Object(Map::new()), |s, _| wrap("items", s));
        let schema = wrap("properties", wrap("k", deep));
        let problem = check_schema(&schema);
        // Dropping it would recurse as deep as it nests.
        std::mem::forget(schema);
        assert_eq!(
            problem,
            Err(format!(
                r#"key "k"{}: schemas nested more than 8 deep; the daemon's config check reads no deeper"#,
                ".items".repeat(9)
            ))
        );
    }
}
