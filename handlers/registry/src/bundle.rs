//! The handler's own check of a bundle, before the host sees it.
//!
//! The host (the daemon) validates every document fully with the broker's
//! validator; this pass catches what an agent most often gets wrong with a
//! refusal that names the document's index, and keeps malformed bundles from
//! ever reaching the host.

use std::collections::HashMap;

use handler_kit::serde_json::Value;

pub use handler_kit::dialect::names::{mcp_name, MAX_MCP_NAME};

/// `^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$`.
pub fn valid_id(id: &str) -> bool {
    let bytes = id.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 128
        && bytes[0].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'/' | b'-'))
}

/// Caller text quoted JSON-style and cut after 256 bytes (then `…`), as the
/// plan language quotes values ([`handler_kit::dialect::quote::quote`]).
pub use handler_kit::dialect::quote::quote;

/// Check a bundle. `Ok(n)` = the number of documents; `Err` = the refusal.
pub fn check(bundle: &Value, max_documents: u64) -> Result<usize, String> {
    const SHAPE: &str = "bundle must be {\"transitions\":[…]} with at least one document";
    let Some(object) = bundle.as_object() else {
        return Err(SHAPE.to_string());
    };
    if let Some(key) = object.keys().find(|k| *k != "transitions") {
        return Err(format!(
            "bundle has key {}; a bundle holds only \"transitions\"",
            quote(key)
        ));
    }
    let docs = match object.get("transitions") {
        Some(Value::Array(docs)) if !docs.is_empty() => docs,
        _ => return Err(SHAPE.to_string()),
    };
    if docs.len() as u64 > max_documents {
        return Err(format!(
            "bundle holds {} documents; the limit is {max_documents}",
            docs.len()
        ));
    }
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (i, doc) in docs.iter().enumerate() {
        let Some(doc) = doc.as_object() else {
            return Err(format!(
                "transitions[{i}]: a transition document must be a JSON object"
            ));
        };
        let id = match doc.get("id") {
            None => return Err(format!("transitions[{i}]: id is missing")),
            Some(Value::String(id)) => id.as_str(),
            Some(_) => return Err(format!("transitions[{i}]: id must be a string")),
        };
        if !valid_id(id) {
            return Err(format!(
                "transitions[{i}]: id {} must match ^[A-Za-z0-9][A-Za-z0-9._/-]{{0,127}}$",
                quote(id)
            ));
        }
        if let Some(first) = seen.insert(id, i) {
            return Err(format!(
                "transitions[{i}]: id \"{id}\" is also the id of transitions[{first}]; a bundle names each tool once"
            ));
        }
        let name = mcp_name(id);
        if name.len() > MAX_MCP_NAME {
            return Err(format!(
                "transitions[{i}]: tool \"{id}\" has an MCP name of {} bytes; the limit is {MAX_MCP_NAME}",
                name.len()
            ));
        }
        match doc.get("declaredEffects") {
            None => {
                return Err(format!(
                    "transitions[{i}] (\"{id}\"): declaredEffects is missing; list every effect the tool may request"
                ))
            }
            Some(Value::Array(list)) if !list.is_empty() => {}
            Some(_) => {
                return Err(format!(
                    "transitions[{i}] (\"{id}\"): declaredEffects must be a non-empty array of {{effect, scope, cost}}"
                ))
            }
        }
    }
    Ok(docs.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_names() {
        assert!(valid_id("docs-read"));
        assert!(valid_id("a/b.c_d"));
        assert!(!valid_id(""));
        assert!(!valid_id("-x"));
        assert!(!valid_id("a b"));
        assert!(!valid_id(&"a".repeat(129)));
        assert!(valid_id(&"a".repeat(128)));
        assert_eq!(mcp_name("a_b/c.d"), "a_ub_sc_dd");
    }

    #[test]
    fn quoting_escapes_and_cuts() {
        assert_eq!(quote("a\"b\n"), "\"a\\\"b\\n\"");
        let long = "é".repeat(200);
        let q = quote(&long);
        assert!(q.ends_with("…\""), "{q}");
        assert!(q.len() < 270);
    }
}
