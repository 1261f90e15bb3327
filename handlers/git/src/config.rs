//! The operator's config, validated into the effective [`Policy`], and the
//! policy's digest.

use std::path::PathBuf;

use handler_api::serde_json::{json, Value};
use handler_api::support::config::{json_string, object as config_object};
use handler_api::support::identity::sha256_hex;

/// The prefix of a constructor error that means "not started" (the daemon
/// skips the plugin with one log line) rather than "bad config".
pub const DECLINED: &str = "declined: ";

/// The constructor's answer when no author is configured.
pub const NO_AUTHOR: &str =
    "declined: no commit author configured (start worldd serve with --git-author \"Name <email>\")";

/// Default time one commit (all its git runs together) may take: under the
/// daemon's 10 s handler deadline, so a slow repository is a clear `failed`
/// rather than an indeterminate effect.
pub const DEFAULT_TIMEOUT_MS: u64 = 8_000;

/// Largest `timeoutMs` accepted (10 minutes).
pub const MAX_TIMEOUT_MS: u64 = 600_000;

/// Longest `author` value, in bytes.
pub const MAX_AUTHOR_BYTES: usize = 256;

const KEYS: [&str; 3] = ["author", "stateDir", "timeoutMs"];

/// A commit identity, parsed from `"Name <email>"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Author {
    /// The name, trimmed (non-empty).
    pub name: String,
    /// The address between the angle brackets (non-empty).
    pub email: String,
}

impl Author {
    /// Parse `"Name <email>"`. The name may hold spaces; neither part may
    /// hold `<`, `>`, a control character or a NUL; the email no whitespace.
    pub fn parse(text: &str) -> Result<Author, String> {
        let bad = |why: &str| {
            Err(format!(
                "git config: \"author\" must be \"Name <email>\" ({why})"
            ))
        };
        if text.len() > MAX_AUTHOR_BYTES {
            return bad(&format!(
                "it is {} bytes; the limit is {MAX_AUTHOR_BYTES}",
                text.len()
            ));
        }
        if text.chars().any(char::is_control) {
            return bad("it contains a control character");
        }
        let text = text.trim();
        let Some(rest) = text.strip_suffix('>') else {
            return bad("it does not end with \">\"");
        };
        let Some((name, email)) = rest.split_once('<') else {
            return bad("there is no \"<\" before the email");
        };
        let name = name.trim();
        if name.is_empty() {
            return bad("the name is empty");
        }
        if name.contains(['<', '>']) {
            return bad("the name contains \"<\" or \">\"");
        }
        if email.is_empty() {
            return bad("the email is empty");
        }
        if email.contains(['<', '>']) || email.chars().any(char::is_whitespace) {
            return bad("the email contains \"<\", \">\" or whitespace");
        }
        Ok(Author {
            name: name.to_string(),
            email: email.to_string(),
        })
    }

    /// `Name <email>`.
    pub fn display(&self) -> String {
        format!("{} <{}>", self.name, self.email)
    }
}

/// The effective policy one handler enforces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Author and committer of every commit.
    pub author: Author,
    /// Where the handler keeps its empty `HOME` (`<stateDir>/home`); a
    /// temporary directory when absent.
    pub state_dir: Option<PathBuf>,
    /// Time budget of one commit, in milliseconds.
    pub timeout_ms: u64,
}

impl Policy {
    /// Validate the operator's config object (`null` = `{}`). No `author`
    /// gives [`NO_AUTHOR`], an error starting with [`DECLINED`]; every other
    /// problem is a plain one-line error.
    pub fn from_config(config: &Value) -> Result<Policy, String> {
        let object = config_object(config, "git", &KEYS)?;
        let author = match object.get("author") {
            None | Some(Value::Null) => return Err(NO_AUTHOR.to_string()),
            Some(Value::String(s)) if s.trim().is_empty() => return Err(NO_AUTHOR.to_string()),
            Some(Value::String(s)) => Author::parse(s)?,
            Some(_) => {
                return Err("git config: \"author\" must be a string \"Name <email>\"".to_string())
            }
        };
        let state_dir = match object.get("stateDir") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => {
                let path = PathBuf::from(s);
                if !path.is_absolute() {
                    return Err(format!(
                        "git config: \"stateDir\" must be an absolute path, not {s:?}"
                    ));
                }
                Some(path)
            }
            Some(_) => return Err("git config: \"stateDir\" must be a string".to_string()),
        };
        let timeout_ms = match object.get("timeoutMs") {
            None => DEFAULT_TIMEOUT_MS,
            Some(v) => match v.as_u64() {
                Some(n) if (1..=MAX_TIMEOUT_MS).contains(&n) => n,
                _ => {
                    return Err(format!(
                        "git config: \"timeoutMs\" must be an integer from 1 to {MAX_TIMEOUT_MS}"
                    ))
                }
            },
        };
        Ok(Policy {
            author,
            state_dir,
            timeout_ms,
        })
    }

    /// The canonical JSON (RFC 8785: sorted keys, no whitespace) of what
    /// decides a commit: the identity, the time budget and the fixed rules.
    /// No host path: the digest is the same on every host with this policy.
    pub fn canonical_json(&self) -> String {
        format!(
            "{{\"author\":{},\"gitlinks\":false,\"hooks\":false,\"policy\":\"worldd/git-policy/v2\",\
             \"push\":false,\"rewrite\":false,\"sandbox\":\"worktree\",\"timeoutMs\":{}}}",
            json_string(&self.author.display()),
            self.timeout_ms
        )
    }

    /// Lowercase hex SHA-256 of [`Policy::canonical_json`].
    pub fn digest(&self) -> String {
        sha256_hex(self.canonical_json())
    }
}

/// The JSON Schema of the config object (the manifest's `configSchema`).
pub fn config_schema() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "author": {
                "description": "Author and committer of every Git.Commit commit, \"Name <email>\" (worldd serve --git-author). Required: without it the plugin does not start and git-commit is refused (R8).",
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_AUTHOR_BYTES
            },
            "stateDir": {
                "description": "Absolute directory for the plugin's files (an empty HOME for git). Injected by the daemon; a temporary directory when absent.",
                "type": "string"
            },
            "timeoutMs": {
                "description": "How long one commit (all its git runs together) may take, in milliseconds; the daemon's own deadline still applies.",
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_TIMEOUT_MS,
                "default": DEFAULT_TIMEOUT_MS
            }
        }
    })
}
