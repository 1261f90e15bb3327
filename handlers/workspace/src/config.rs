//! The operator's config, validated into the effective [`Policy`], and the
//! policy's digest.

use handler_kit::config::{json_string, object as config_object};
use handler_kit::dialect::glob::Glob;
use handler_kit::identity::sha256_hex;
use handler_kit::protect::fold_path;
use handler_kit::serde_json::{json, Value};

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

/// The coordinator's cap on a whole tool result (its canonical JSON bytes, `world` block
/// included): a larger result is refused after the effect ran, as an EffectsUnrecorded host
/// failure. Reads are therefore bounded by the size of their *result*, checked before anything
/// is returned.
pub const RESULT_CAP: u64 = 1 << 20;

/// Default read limit: the largest result a read may produce, in bytes of canonical JSON with
/// the `world` block the daemon adds: the coordinator's cap, 1 MiB.
pub const DEFAULT_MAX_READ_BYTES: u64 = RESULT_CAP;

/// Default write limit: 8 MiB, the reference's `max_fs_transfer_bytes`.
pub const DEFAULT_MAX_WRITE_BYTES: u64 = 8_388_608;

/// The longest worktree-relative path any op accepts, in bytes. Past it a path is refused
/// before anything is opened or created: one write of `a/a/…/x` could otherwise make
/// thousands of nested directories whose files lie beyond `PATH_MAX` (4096) from the
/// worktree's root, where git skips them (`could not open directory`) and the operator's
/// own tools cannot name them. 1024 leaves the root up to 3,000 bytes of its own.
pub const MAX_PATH_BYTES: usize = 1024;

/// Upper bound for `maxWriteBytes` (1 GiB): a handler holds a whole file in memory, and the
/// policy digest must stay exactly representable in JSON.
pub const LIMIT_CEILING: u64 = 1 << 30;

const KEYS: [&str; 4] = [
    "allowHardLinks",
    "denyWrite",
    "maxReadBytes",
    "maxWriteBytes",
];

/// The effective policy one handler enforces.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Deny-write globs, as configured (reported in refusals).
    pub deny_write: Vec<String>,
    /// The globs folded and applied at every depth (`**/` + glob), index for index.
    deny_globs: Vec<Glob>,
    /// Largest result `read` produces (canonical JSON bytes, `world` block included).
    pub max_read_bytes: u64,
    /// Largest content `write` stores (and largest file `edit` touches).
    pub max_write_bytes: u64,
    /// Whether reads and edits may open a file with more than one hard link.
    pub allow_hard_links: bool,
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
            RESULT_CAP,
        )
        .map_err(|e| format!("{e} (a tool result is at most 1 MiB)"))?;
        let max_write_bytes = limit(
            object.get("maxWriteBytes"),
            "maxWriteBytes",
            DEFAULT_MAX_WRITE_BYTES,
            LIMIT_CEILING,
        )?;
        let allow_hard_links = match object.get("allowHardLinks") {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                return Err("workspace config: \"allowHardLinks\" must be true or false".to_string())
            }
        };
        let mut policy = Policy::new(deny_write, max_read_bytes, max_write_bytes)?;
        policy.allow_hard_links = allow_hard_links;
        Ok(policy)
    }

    /// Build a policy from its parts (globs are compiled and checked).
    pub fn new(
        deny_write: Vec<String>,
        max_read_bytes: u64,
        max_write_bytes: u64,
    ) -> Result<Policy, String> {
        let deny_globs = deny_write
            .iter()
            .map(|pattern| compile(pattern))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Policy {
            deny_write,
            deny_globs,
            max_read_bytes,
            max_write_bytes,
            allow_hard_links: false,
        })
    }

    /// The first configured deny glob matching any of `paths` (worktree-
    /// relative, `/`-separated), at any depth and after folding (see
    /// [`compile`]).
    pub fn denied_by(&self, paths: &[&str]) -> Option<&str> {
        let folded: Vec<String> = paths.iter().map(|p| fold_path(p)).collect();
        self.deny_globs
            .iter()
            .position(|glob| folded.iter().any(|path| glob.is_match(path)))
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
            "{{\"allowHardLinks\":{},\"denyWrite\":[{}],\"maxReadBytes\":{},\"maxWriteBytes\":{},\
             \"names\":\"nfkc-casefold\",\"noRead\":[\".git/\"],\
             \"policy\":\"worldd/workspace-policy/v3\",\"readOnly\":[\".git/\"],\
             \"sandbox\":\"worktree\"}}",
            self.allow_hard_links,
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

/// Compile one deny glob: worldd's glob dialect ([`handler_kit::dialect::glob`], the code the
/// plan language's `path-glob` rule runs; `*` and `?` stay inside one component, `**` crosses
/// them; `[ ] { } \\` reserved), folded like the paths it is matched against, and applied at every
/// depth: `G` refuses a path when it matches the whole path or any tail of it that starts at a
/// component (`**/G`).
pub fn compile(pattern: &str) -> Result<Glob, String> {
    if pattern.is_empty() {
        return Err("workspace config: denyWrite holds an empty glob".to_string());
    }
    let reserved = |why: String| format!("workspace config: denyWrite glob \"{pattern}\" {why}");
    handler_kit::dialect::glob::check(pattern).map_err(reserved)?;
    if pattern.starts_with('/') {
        return Err(format!(
            "workspace config: denyWrite glob \"{pattern}\" starts with \"/\"; globs are relative to the worktree and apply at every depth"
        ));
    }
    let folded = fold_path(pattern);
    let anywhere = if folded == "**" || folded.starts_with("**/") {
        folded
    } else {
        format!("**/{folded}")
    };
    // Folding can turn a look-alike (`［`) into a reserved character: checked again.
    Glob::new(&anywhere).map_err(reserved)
}

fn limit(value: Option<&Value>, key: &str, default: u64, ceiling: u64) -> Result<u64, String> {
    match value {
        None => Ok(default),
        Some(v) => match v.as_u64() {
            Some(n) if n <= ceiling => Ok(n),
            _ => Err(format!(
                "workspace config: \"{key}\" must be an integer from 0 to {ceiling}"
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
            "allowHardLinks": {
                "description": "Let reads and edits open files with more than one hard link. Off by default: a hard link placed in the worktree can name a file outside it.",
                "type": "boolean",
                "default": false
            },
            "denyWrite": {
                "description": "Globs (worktree-relative, `/`-separated; `*` and `?` stay within a component, `**` crosses them; `[ ] { } \\` reserved) that Workspace.Write refuses at every depth, compared after NFKC and case folding. Replaces the default list. Names like `.git` are always read-only.",
                "type": "array",
                "items": {"type": "string", "minLength": 1},
                "default": DEFAULT_DENY_WRITE
            },
            "maxReadBytes": {
                "description": "Largest result Workspace.Read returns, in bytes of the JSON the agent receives (escaped content, stamps and world block); a read whose result would be larger is refused with both sizes. At most the coordinator's 1 MiB cap on a tool result.",
                "type": "integer",
                "minimum": 0,
                "maximum": RESULT_CAP,
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
