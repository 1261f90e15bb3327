//! Pieces of a [`Manifest`](crate::Manifest).

use handler_api::serde_json::Value;

/// Parse transition documents embedded in the plugin (`(file name, text)`,
/// usually `include_str!`), in order, for [`Manifest::transitions`](crate::Manifest::transitions).
/// The error names the file: `embedded transition <file> is not valid JSON: …`.
pub fn embedded_transitions(documents: &[(&str, &str)]) -> Result<Vec<Value>, String> {
    documents
        .iter()
        .map(|(file, text)| {
            serde_json::from_str::<Value>(text)
                .map_err(|e| format!("embedded transition {file} is not valid JSON: {e}"))
        })
        .collect()
}
