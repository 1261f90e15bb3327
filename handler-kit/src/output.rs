//! Output objects stamped with the handler's identity, policy refusals, and
//! error texts.
//!
//! worldd's plugins put two keys on every `ok` output, successes and
//! refusals alike: `tool` (which build of the handler ran, e.g. the
//! `sha256:` of its library, see `identity`) and
//! `policy_digest` (hex SHA-256 of the canonical JSON of the effective
//! policy). [`Stamp`] holds both and builds those outputs.

use std::io;

use handler_api::serde_json::json;

use crate::{JsonObject, Outcome, Preflight};

/// `Outcome::ok(fields)` with `tool` and `policy_digest` added (after the
/// fields, replacing keys of those names).
pub fn stamped(mut fields: JsonObject, tool: &str, policy_digest: &str) -> Outcome {
    fields.insert("tool".into(), json!(tool));
    fields.insert("policy_digest".into(), json!(policy_digest));
    Outcome::ok(fields)
}

/// `{"ok":false,"refused":<message>}`: a policy refusal, the effect ran and
/// said no (an `ok` outcome; see the crate docs).
pub fn refusal(message: impl Into<String>) -> JsonObject {
    let mut fields = JsonObject::new();
    fields.insert("ok".into(), json!(false));
    fields.insert("refused".into(), json!(message.into()));
    fields
}

/// The identity every output of one handler carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamp {
    tool: String,
    policy_digest: String,
}

impl Stamp {
    /// A stamp with this `tool` and `policy_digest`.
    pub fn new(tool: impl Into<String>, policy_digest: impl Into<String>) -> Stamp {
        Stamp {
            tool: tool.into(),
            policy_digest: policy_digest.into(),
        }
    }

    /// The `tool` every output carries.
    pub fn tool(&self) -> &str {
        &self.tool
    }

    /// The `policy_digest` every output carries.
    pub fn policy_digest(&self) -> &str {
        &self.policy_digest
    }

    /// `Outcome::ok(fields)`, stamped.
    pub fn ok(&self, fields: JsonObject) -> Outcome {
        stamped(fields, &self.tool, &self.policy_digest)
    }

    /// `{"ok":false,"refused":<message>}`, stamped.
    pub fn refuse(&self, message: impl Into<String>) -> Outcome {
        self.ok(refusal(message))
    }

    /// The same refusal as [`Stamp::refuse`], as a preflight's decline: the request is
    /// committed as declined with this answer, and nothing is spent.
    pub fn decline(&self, message: impl Into<String>) -> Preflight {
        let mut fields = refusal(message);
        fields.insert("tool".into(), json!(self.tool));
        fields.insert("policy_digest".into(), json!(self.policy_digest));
        Preflight::Decline(fields)
    }
}

/// An I/O error as Go prints it: lowercase first letter, no
/// ` (os error N)` suffix (`no such file or directory`).
pub fn errno_text(e: &io::Error) -> String {
    let text = e.to_string();
    let text = match text.find(" (os error ") {
        Some(i) => text[..i].to_string(),
        None => text,
    };
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => text,
    }
}
