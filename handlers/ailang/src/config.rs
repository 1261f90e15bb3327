//! The operator's config object, validated, and its JSON Schema.
//!
//! Validation here is pure (no file system): [`Config::parse`] checks keys, types and values
//! and decides whether the plugin declines. What needs the file system (the binary exists and
//! is executable, the corpus is a directory, the state directory can be made) is checked by
//! the constructor afterwards, see `crate::setup`.

use std::net::SocketAddr;
use std::path::PathBuf;

use handler_kit::config::object as config_object;
use handler_kit::serde_json::{json, Value};

/// The error the constructor returns when no `bin` is configured. It starts with the daemon's
/// `declined: ` prefix, so the loader skips the plugin with one log line (its tools stay
/// published and are refused by R8) instead of stopping start-up as for a bad config.
pub const DECLINE: &str =
    "declined: no ailang binary configured (start worldd serve with --plugin-config ailang.bin=PATH)";

/// Every capability a run may name, in the canonical order used for policy files, file
/// names and outputs (the base policy lists `["IO", "FS"]` in this order).
pub const CAPS: [&str; 5] = ["IO", "FS", "Declassify", "Env", "Net"];

/// What one `ailang` child may allocate unless the operator says otherwise (`memoryMiB`).
pub const DEFAULT_MEMORY_MIB: u64 = 4096;

/// The range `memoryMiB` accepts: at least 256 MiB, since a Go runtime such as `ailang`'s
/// takes its heap from the system 64 MiB at a time and may not start under much less; at most
/// 1 TiB.
pub const MEMORY_MIB: std::ops::RangeInclusive<u64> = 256..=1 << 20;

/// Capabilities an operator must enable (`runAllowCaps`); IO and FS always are.
pub const OPERATOR_CAPS: [&str; 3] = ["Declassify", "Env", "Net"];

const KEYS: [&str; 8] = [
    "allowHardLinks",
    "bin",
    "examplesDir",
    "memoryMiB",
    "runAllowCaps",
    "runNetAllow",
    "runNetAllowHttp",
    "stateDir",
];

/// The validated config (paths as given; the constructor resolves them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The operator's `ailang` binary.
    pub bin: PathBuf,
    /// An AILANG examples corpus (`AILANG_EXAMPLES`), if any.
    pub examples_dir: Option<PathBuf>,
    /// Capabilities beyond IO and FS that runs may use, in canonical order, no duplicates.
    pub run_allow_caps: Vec<&'static str>,
    /// Loopback `IP:PORT`s a Net run may reach, in the operator's order, no duplicates.
    pub run_net_allow: Vec<String>,
    /// Whether Net runs may use plain HTTP to those hosts.
    pub run_net_allow_http: bool,
    /// Where policy files, caches and the archived binary live.
    pub state_dir: PathBuf,
    /// The most each child process may allocate, in MiB (its `RLIMIT_DATA`).
    pub memory_mib: u64,
    /// Whether path arguments may name files with more than one hard link.
    pub allow_hard_links: bool,
}

fn err(message: impl std::fmt::Display) -> String {
    format!("ailang config: {message}")
}

fn path_key(object: &handler_kit::JsonObject, key: &str) -> Result<Option<PathBuf>, String> {
    match object.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Err(err(format!("\"{key}\" is empty"))),
        Some(Value::String(s)) if s.contains('\0') => {
            Err(err(format!("\"{key}\" contains a NUL byte")))
        }
        Some(Value::String(s)) => Ok(Some(PathBuf::from(s))),
        Some(_) => Err(err(format!("\"{key}\" must be a path string"))),
    }
}

fn string_list<'a>(
    object: &'a handler_kit::JsonObject,
    key: &str,
    what: &str,
) -> Result<Vec<&'a str>, String> {
    match object.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_str()
                    .ok_or_else(|| err(format!("\"{key}\" must be an array of {what}")))
            })
            .collect(),
        Some(_) => Err(err(format!("\"{key}\" must be an array of {what}"))),
    }
}

/// One `runNetAllow` entry: a canonical loopback `IP:PORT`, port 1–65535. Canonical means
/// it reads back exactly as written (`127.0.0.1:8080`, `[::1]:8080`), so the policy file, the
/// summary check and the operator all see the same text.
pub fn net_allow_entry(entry: &str) -> Result<String, String> {
    let bad = || {
        err(format!(
            "runNetAllow entry {entry:?} must be a canonical loopback IP:PORT with a port from 1 to 65535 (e.g. 127.0.0.1:8080 or [::1]:8080)"
        ))
    };
    let addr: SocketAddr = entry.parse().map_err(|_| bad())?;
    if !addr.ip().is_loopback() || addr.port() == 0 || addr.to_string() != entry {
        return Err(bad());
    }
    Ok(entry.to_string())
}

impl Config {
    /// Validate the operator's config object (`null` = empty). Unknown keys and bad values
    /// are errors; a missing `bin` is the [`DECLINE`] (checked after the other keys, so a
    /// typo elsewhere is still reported as the config error it is).
    pub fn parse(config: &Value) -> Result<Config, String> {
        if !matches!(config, Value::Null | Value::Object(_)) {
            return Err(err("the config must be a JSON object"));
        }
        let object = config_object(config, "ailang", &KEYS)?;
        let bin = path_key(object, "bin")?;
        let examples_dir = path_key(object, "examplesDir")?;
        let state_dir = path_key(object, "stateDir")?;

        let mut run_allow_caps: Vec<&'static str> = Vec::new();
        for cap in string_list(object, "runAllowCaps", "capability names")? {
            let Some(known) = OPERATOR_CAPS.iter().find(|c| **c == cap) else {
                return Err(err(format!(
                    "runAllowCaps names {cap:?}; it admits only: {} (IO and FS are always enabled)",
                    OPERATOR_CAPS.join(", ")
                )));
            };
            if !run_allow_caps.contains(known) {
                run_allow_caps.push(known);
            }
        }
        run_allow_caps.sort_by_key(|c| CAPS.iter().position(|k| k == c));

        let mut run_net_allow: Vec<String> = Vec::new();
        for entry in string_list(object, "runNetAllow", "IP:PORT strings")? {
            let entry = net_allow_entry(entry)?;
            if !run_net_allow.contains(&entry) {
                run_net_allow.push(entry);
            }
        }
        let run_net_allow_http = match object.get("runNetAllowHttp") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(err("\"runNetAllowHttp\" must be true or false")),
        };

        let allow_hard_links = match object.get("allowHardLinks") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(err("\"allowHardLinks\" must be true or false")),
        };

        let memory_mib = match object.get("memoryMiB") {
            None | Some(Value::Null) => DEFAULT_MEMORY_MIB,
            Some(v) => v
                .as_u64()
                .filter(|n| MEMORY_MIB.contains(n))
                .ok_or_else(|| {
                    err(format!(
                        "\"memoryMiB\" must be a whole number of MiB from {} to {}",
                        MEMORY_MIB.start(),
                        MEMORY_MIB.end()
                    ))
                })?,
        };

        let Some(bin) = bin else {
            return Err(DECLINE.to_string());
        };
        let Some(state_dir) = state_dir else {
            return Err(err(
                "\"stateDir\" is not set; the daemon sets it to <db>/plugin-state/ailang (set it yourself when building the handler outside worldd serve)",
            ));
        };
        Ok(Config {
            bin,
            examples_dir,
            run_allow_caps,
            run_net_allow,
            run_net_allow_http,
            state_dir,
            memory_mib,
            allow_hard_links,
        })
    }
}

/// The JSON Schema of the config object, published in the manifest. `stateDir` is declared
/// so that `worldd serve` injects `<db>/plugin-state/ailang`.
pub fn config_schema() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "ailang plugin config",
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "allowHardLinks": {
                "description": "Let path arguments (path, module, package) name files with more than one hard link (--plugin-config ailang.allowHardLinks=true). Off by default, as the workspace plugin's switch of the same name: a hard link placed in the worktree can name a file outside it, and the binary would read it.",
                "type": "boolean",
                "default": false
            },
            "bin": {
                "description": "The operator's `ailang` binary (--plugin-config ailang.bin=PATH). Without it the plugin declines to start and its tools are refused by R8. It is copied into stateDir/bin/<sha256>/ailang at start-up and runs from there, so the `tool` ref in outputs names exactly the bytes that ran.",
                "type": "string"
            },
            "examplesDir": {
                "description": "An AILANG examples corpus (manifest.json plus runnable/), passed to every ailang child as AILANG_EXAMPLES (--plugin-config ailang.examplesDir=DIR). Without it examples-search is refused without running anything.",
                "type": "string"
            },
            "memoryMiB": {
                "description": "The most memory, in MiB, that each ailang child process (check, run, policy-tool) may allocate: its RLIMIT_DATA, the heap and private writable mappings (--plugin-config ailang.memoryMiB=N). The limit is per process: every process a child starts inherits it and may allocate as much again, so it does not bound a run's total. At least 256: a Go runtime takes its heap 64 MiB at a time. An allocation past it fails inside ailang, and the call fails with ailang's own error. Every child also starts first in line for the kernel's OOM killer (oom_score_adj 1000) and without core files.",
                "type": "integer",
                "minimum": *MEMORY_MIB.start(),
                "maximum": *MEMORY_MIB.end(),
                "default": DEFAULT_MEMORY_MIB
            },
            "runAllowCaps": {
                "description": "Capabilities beyond IO and FS that ailang-run may grant a program: Declassify, Env, Net (ailang config runAllowCaps).",
                "type": "array",
                "items": {"type": "string", "enum": OPERATOR_CAPS},
                "default": []
            },
            "runNetAllow": {
                "description": "Canonical loopback IP:PORT entries (port 1-65535) a Net run may reach (ailang config runNetAllow). A Net run needs at least one.",
                "type": "array",
                "items": {"type": "string"},
                "default": []
            },
            "runNetAllowHttp": {
                "description": "Allow plain HTTP to the runNetAllow hosts (--plugin-config ailang.runNetAllowHttp=true).",
                "type": "boolean",
                "default": false
            },
            "stateDir": {
                "description": "Where per-episode policy files (policies/), per-episode caches (cache/) and the archived binary (bin/) live. worldd serve sets it to <db>/plugin-state/ailang. It must not lie inside any episode's worktree.",
                "type": "string"
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn net_allow_entries_must_be_canonical_loopback() {
        for ok in ["127.0.0.1:8080", "127.1.2.3:1", "[::1]:65535"] {
            assert_eq!(net_allow_entry(ok).unwrap(), ok);
        }
        for bad in [
            "127.0.0.1:0",
            "127.0.0.1:65536",
            "127.0.0.1:080",
            "localhost:80",
            "10.0.0.1:80",
            "0.0.0.0:80",
            "127.0.0.1",
            "[::1]:80 ",
            "[0:0:0:0:0:0:0:1]:80",
            "",
        ] {
            assert!(net_allow_entry(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn operator_caps_are_sorted_and_deduplicated() {
        let c = Config::parse(&json!({"bin": "/x", "stateDir": "/s",
            "runAllowCaps": ["Net", "Declassify", "Net"]}))
        .unwrap();
        assert_eq!(c.run_allow_caps, ["Declassify", "Net"]);
    }
}
