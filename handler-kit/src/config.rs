//! The operator's config object, and the canonical JSON of the policy it
//! becomes.

use std::sync::OnceLock;

use handler_api::serde_json::Value;

use crate::JsonObject;

/// The operator's config as an object, with only `keys` in it. `null` is the
/// empty object. Errors are one line, for the daemon to print before refusing
/// to start:
///
/// - `<plugin> config must be a JSON object`
/// - `<plugin> config: unknown key "<key>"; <plugin> accepts only: <keys, joined by ", ">`
pub fn object<'a>(
    config: &'a Value,
    plugin: &str,
    keys: &[&str],
) -> Result<&'a JsonObject, String> {
    static EMPTY: OnceLock<JsonObject> = OnceLock::new();
    let object = match config {
        Value::Null => EMPTY.get_or_init(JsonObject::new),
        Value::Object(o) => o,
        _ => return Err(format!("{plugin} config must be a JSON object")),
    };
    if let Some(key) = object.keys().find(|k| !keys.contains(&k.as_str())) {
        return Err(format!(
            "{plugin} config: unknown key \"{key}\"; {plugin} accepts only: {}",
            keys.join(", ")
        ));
    }
    Ok(object)
}

/// `s` as a JSON string literal, for a policy's canonical JSON (RFC 8785):
/// [`dialect::quote::json_string`].
pub use dialect::quote::json_string;
