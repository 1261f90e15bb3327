//! The operator's config, validated into the effective [`Policy`], and the
//! policy's digest.

use globset::{Glob, GlobBuilder, GlobSet, GlobSetBuilder};
use handler_api::serde_json::{json, Value};
use handler_api::support::config::{json_string, object as config_object};
use handler_api::support::identity::sha256_hex;

/// The reference daemon's `fs_deny_write` list: paths an agent may read but
/// never write (CI config, agent settings, git plumbing files, the AILANG
/// run cache).
pub const DEFAULT_DENY_WRITE: [&str; 6] = [
    ".github/**",
    ".pi/**",
    ".claude/**",
    ".gitmodules",
    ".gitattributes",
    ".ailang/**",
];

/// Default read limit: 768 KiB. The coordinator caps a whole tool output at
/// 1 MiB *after* the effect ran (a bigger output is an EffectsUnrecorded
/// failure with the budget spent), and the output also carries JSON escaping
/// of the content, `tool`, `policy_digest` and the `world` block. Refusing
/// files above 768 KiB up front leaves 256 KiB of headroom for that, so an
/// agent gets a clear refusal instead of a host failure.
pub const DEFAULT_MAX_READ_BYTES: u64 = 786_432;

/// Default write limit: 8 MiB, the reference's `max_fs_transfer_bytes`.
pub const DEFAULT_MAX_WRITE_BYTES: u64 = 8_388_608;

/// Upper bound for both limits (1 GiB): a handler holds a whole file in
/// memory, and the policy digest must stay exactly representable in JSON.
pub const LIMIT_CEILING: u64 = 1 << 30;

const KEYS: [&str; 3] = ["denyWrite", "maxReadBytes", "maxWriteBytes"];

/// The effective policy one handler enforces.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Deny-write globs, as configured (reported in refusals).
    pub deny_write: Vec<String>,
    deny_set: GlobSet,
    /// Largest file `read` returns, in bytes.
    pub max_read_bytes: u64,
    /// Largest content `write` stores (and largest file `edit` touches).
    pub max_write_bytes: u64,
}

impl Policy {
    /// Validate the operator's config object. `null` means "all defaults".
    /// Errors are one line, for the daemon to print before refusing to start.
    pub fn from_config(config: &Value) -> Result<Policy, String> {
        let object = config_object(config, "workspace", &KEYS)?;
        let deny_write = match object.get("denyWrite") {
            None => DEFAULT_DENY_WRITE.iter().map(|s| s.to_string()).collect(),
            Some(Value::Array(items)) => items
                .iter()
                .map(|item| match item {
                    Value::String(s) => Ok(s.clone()),
                    _ => Err(
                        "workspace config: \"denyWrite\" must be an array of glob strings"
                            .to_string(),
                    ),
                })
                .collect::<Result<Vec<_>, _>>()?,
            Some(_) => {
                return Err(
                    "workspace config: \"denyWrite\" must be an array of glob strings".to_string(),
                )
            }
        };
        let max_read_bytes = limit(
            object.get("maxReadBytes"),
            "maxReadBytes",
            DEFAULT_MAX_READ_BYTES,
        )?;
        let max_write_bytes = limit(
            object.get("maxWriteBytes"),
            "maxWriteBytes",
            DEFAULT_MAX_WRITE_BYTES,
        )?;
        Policy::new(deny_write, max_read_bytes, max_write_bytes)
    }

    /// Build a policy from its parts (globs are compiled and checked).
    pub fn new(
        deny_write: Vec<String>,
        max_read_bytes: u64,
        max_write_bytes: u64,
    ) -> Result<Policy, String> {
        let mut builder = GlobSetBuilder::new();
        for pattern in &deny_write {
            builder.add(compile(pattern)?);
        }
        let deny_set = builder
            .build()
            .map_err(|e| format!("workspace config: denyWrite cannot be compiled: {e}"))?;
        Ok(Policy {
            deny_write,
            deny_set,
            max_read_bytes,
            max_write_bytes,
        })
    }

    /// The first configured deny glob matching any of `paths` (worktree-
    /// relative, `/`-separated).
    pub fn denied_by(&self, paths: &[&str]) -> Option<&str> {
        let mut first: Option<usize> = None;
        for path in paths {
            if let Some(&i) = self.deny_set.matches(path).iter().min() {
                first = Some(first.map_or(i, |f| f.min(i)));
            }
        }
        first
            .and_then(|i| self.deny_write.get(i))
            .map(String::as_str)
    }

    /// The canonical JSON (RFC 8785: sorted keys, no whitespace) of the
    /// effective policy. `sandbox` names the confinement rule (the episode's
    /// worktree), not a host path, so the digest is the same for every
    /// episode and every host running the same policy.
    pub fn canonical_json(&self) -> String {
        let globs: Vec<String> = self.deny_write.iter().map(|g| json_string(g)).collect();
        format!(
            "{{\"denyWrite\":[{}],\"maxReadBytes\":{},\"maxWriteBytes\":{},\
             \"policy\":\"worldd/workspace-policy/v1\",\"readOnly\":[\".git/\"],\
             \"sandbox\":\"worktree\"}}",
            globs.join(","),
            self.max_read_bytes,
            self.max_write_bytes
        )
    }

    /// Lowercase hex SHA-256 of [`Policy::canonical_json`].
    pub fn digest(&self) -> String {
        sha256_hex(self.canonical_json())
    }
}

fn compile(pattern: &str) -> Result<Glob, String> {
    if pattern.is_empty() {
        return Err("workspace config: denyWrite holds an empty glob".to_string());
    }
    // `*` stays inside one path component; `**` crosses them.
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .map_err(|e| format!("workspace config: denyWrite glob \"{pattern}\" is invalid: {e}"))
}

fn limit(value: Option<&Value>, key: &str, default: u64) -> Result<u64, String> {
    match value {
        None => Ok(default),
        Some(v) => match v.as_u64() {
            Some(n) if n <= LIMIT_CEILING => Ok(n),
            _ => Err(format!(
                "workspace config: \"{key}\" must be an integer from 0 to {LIMIT_CEILING}"
            )),
        },
    }
}

/// The JSON Schema of the config object, published in the manifest.
pub fn config_schema() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "workspace plugin config",
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "denyWrite": {
                "description": "Globs (worktree-relative, `/`-separated; `*` stays within a component, `**` crosses them) that Workspace.Write refuses. Replaces the default list. `.git/` is always read-only.",
                "type": "array",
                "items": {"type": "string", "minLength": 1},
                "default": DEFAULT_DENY_WRITE
            },
            "maxReadBytes": {
                "description": "Largest file Workspace.Read returns; larger files are refused up front. The default leaves headroom under the coordinator's 1 MiB output cap.",
                "type": "integer",
                "minimum": 0,
                "maximum": LIMIT_CEILING,
                "default": DEFAULT_MAX_READ_BYTES
            },
            "maxWriteBytes": {
                "description": "Largest content Workspace.Write stores, and largest file an edit may touch or produce.",
                "type": "integer",
                "minimum": 0,
                "maximum": LIMIT_CEILING,
                "default": DEFAULT_MAX_WRITE_BYTES
            }
        }
    })
}
