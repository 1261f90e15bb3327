//! Publishing refuses documents whose listing would be absurd: every session's `tools/list`
//! and agent card carry the title, description and schemas of each visible tool.

mod common;

use broker_core::transition::{
    Transition, MAX_DESCRIPTION_BYTES, MAX_SCHEMA_BYTES, MAX_TITLE_BYTES,
};
use serde_json::{json, Value};

fn read_tool() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../transitions/se-tools/ailang-read.json"
    );
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

#[test]
fn huge_descriptions_and_schemas_are_refused_at_publishing() {
    let mut doc = read_tool();
    doc["description"] = json!("d".repeat(MAX_DESCRIPTION_BYTES));
    assert!(Transition::from_value(doc.clone()).is_ok());
    doc["description"] = json!("d".repeat(MAX_DESCRIPTION_BYTES + 1));
    assert_eq!(
        Transition::from_value(doc).unwrap_err().to_string(),
        format!(
            "transition \"ailang-read\": description is {} bytes; the limit is {MAX_DESCRIPTION_BYTES}",
            MAX_DESCRIPTION_BYTES + 1
        )
    );

    let mut doc = read_tool();
    doc["title"] = json!("t".repeat(MAX_TITLE_BYTES + 1));
    assert!(Transition::from_value(doc)
        .unwrap_err()
        .to_string()
        .contains("title is 257 bytes; the limit is 256"));

    let mut doc = read_tool();
    doc["outputSchema"]["description"] = json!("s".repeat(MAX_SCHEMA_BYTES));
    let err = Transition::from_value(doc).unwrap_err().to_string();
    assert!(
        err.contains("outputSchema is ")
            && err.contains(&format!("the limit is {MAX_SCHEMA_BYTES}")),
        "{err}"
    );
}

#[test]
fn the_shipped_tools_fit() {
    for id in common::SE_TOOLS {
        common::se_tool(id);
    }
}
