//! The operator's config, validated into the effective [`Policy`], and the
//! policy's digest.

use handler_kit::config::object as config_object;
use handler_kit::identity::sha256_hex;
use handler_kit::serde_json::{json, Value};

/// Default largest bundle file read from the worktree: 1 MiB.
pub const DEFAULT_MAX_BUNDLE_BYTES: u64 = 1 << 20;

/// Upper bound for `maxBundleBytes` (64 MiB).
pub const MAX_BUNDLE_BYTES_CEILING: u64 = 64 << 20;

/// Default most documents one bundle may hold.
pub const DEFAULT_MAX_DOCUMENTS: u64 = 256;

/// Upper bound for `maxDocuments`.
pub const MAX_DOCUMENTS_CEILING: u64 = 4096;

const KEYS: [&str; 2] = ["maxBundleBytes", "maxDocuments"];

/// The effective policy one handler enforces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Largest bundle file read from the worktree, in bytes.
    pub max_bundle_bytes: u64,
    /// Most documents in one bundle.
    pub max_documents: u64,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            max_bundle_bytes: DEFAULT_MAX_BUNDLE_BYTES,
            max_documents: DEFAULT_MAX_DOCUMENTS,
        }
    }
}

impl Policy {
    /// Validate the operator's config object (`null` = all defaults).
    /// Errors are one line, for the daemon to print before refusing to start.
    pub fn from_config(config: &Value) -> Result<Policy, String> {
        let object = config_object(config, "registry", &KEYS)?;
        Ok(Policy {
            max_bundle_bytes: limit(
                object.get("maxBundleBytes"),
                "maxBundleBytes",
                DEFAULT_MAX_BUNDLE_BYTES,
                MAX_BUNDLE_BYTES_CEILING,
            )?,
            max_documents: limit(
                object.get("maxDocuments"),
                "maxDocuments",
                DEFAULT_MAX_DOCUMENTS,
                MAX_DOCUMENTS_CEILING,
            )?,
        })
    }

    /// The canonical JSON (RFC 8785: sorted keys, no whitespace) of the
    /// effective policy. No host path: the same on every host.
    pub fn canonical_json(&self) -> String {
        format!(
            "{{\"maxBundleBytes\":{},\"maxDocuments\":{},\
             \"policy\":\"worldd/registry-policy/v1\",\"sandbox\":\"worktree\"}}",
            self.max_bundle_bytes, self.max_documents
        )
    }

    /// Lowercase hex SHA-256 of [`Policy::canonical_json`].
    pub fn digest(&self) -> String {
        sha256_hex(self.canonical_json())
    }
}

fn limit(value: Option<&Value>, key: &str, default: u64, ceiling: u64) -> Result<u64, String> {
    match value {
        None => Ok(default),
        Some(v) => match v.as_u64() {
            Some(n) if (1..=ceiling).contains(&n) => Ok(n),
            _ => Err(format!(
                "registry config: \"{key}\" must be an integer from 1 to {ceiling}"
            )),
        },
    }
}

/// The JSON Schema of the config object (the manifest's `configSchema`).
pub fn config_schema() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "maxBundleBytes": {
                "description": "Largest bundle file registry-publish reads from the worktree (`path`), in bytes.",
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_BUNDLE_BYTES_CEILING,
                "default": DEFAULT_MAX_BUNDLE_BYTES
            },
            "maxDocuments": {
                "description": "Most transition documents one bundle may hold.",
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_DOCUMENTS_CEILING,
                "default": DEFAULT_MAX_DOCUMENTS
            }
        }
    })
}
