//! AILANG policy files: their text, their names, and the check of `policy-tool`'s summary
//! against what was written.
//!
//! Every episode gets a base policy `policies/<ep>.toml` (used by the policy-tool ops:
//! ai_check, builtins_list, examples_search and the CLI ops) and one run variant per set of
//! capabilities, `policies/<ep>.run-<caps joined by "-">.toml` (caps in the order IO, FS,
//! Declassify, Env, Net). The texts follow the reference daemon's base policy exactly, with
//! `fs_sandbox` = the episode's worktree.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use handler_kit::identity::sha256_hex;
use handler_kit::serde_json::Value;

use crate::config::CAPS;

/// The reference's `fs_deny_write` list.
pub const DENY_WRITE: [&str; 6] = [
    ".github/**",
    ".pi/**",
    ".claude/**",
    ".gitmodules",
    ".gitattributes",
    ".ailang/**",
];

/// The AILANG supervisor's own timeout, below the handler's 10 s hard cap so that a slow
/// program normally ends as a recognised `limit` (exit 3), not as a killed process.
pub const TIMEOUT_MS: u64 = 8000;

/// AILANG's FS operation budget per run.
pub const FS_BUDGET: u64 = 1000;

/// One policy: which capabilities it allows and what else follows from them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicySpec {
    /// Allowed capabilities, canonical order.
    pub caps: Vec<&'static str>,
    /// `net_allow` (Net runs only).
    pub net_allow: Vec<String>,
    /// `net_allow_http = true` (Net runs only, when the operator allows it).
    pub net_allow_http: bool,
    /// `true` for a run variant (named `<ep>.run-…`), `false` for the base policy.
    pub run: bool,
}

impl PolicySpec {
    /// The base policy: restricted, IO and FS.
    pub fn base() -> PolicySpec {
        PolicySpec {
            caps: vec!["IO", "FS"],
            net_allow: Vec::new(),
            net_allow_http: false,
            run: false,
        }
    }

    /// The run variant for `caps` (already checked: known, distinct, not Env and Net).
    pub fn for_run(caps: &[&str], net_allow: &[String], net_allow_http: bool) -> PolicySpec {
        let caps: Vec<&'static str> = CAPS.iter().copied().filter(|c| caps.contains(c)).collect();
        let net = caps.contains(&"Net");
        PolicySpec {
            net_allow: if net { net_allow.to_vec() } else { Vec::new() },
            net_allow_http: net && net_allow_http,
            caps,
            run: true,
        }
    }

    fn has(&self, cap: &str) -> bool {
        self.caps.contains(&cap)
    }

    /// `trusted_host` for Env runs (restricted mode has no Env), else `restricted`.
    pub fn security_mode(&self) -> &'static str {
        if self.has("Env") {
            "trusted_host"
        } else {
            "restricted"
        }
    }

    /// The file name under `policies/`.
    pub fn file_name(&self, episode: &str) -> String {
        if self.run {
            format!("{episode}.run-{}.toml", self.caps.join("-"))
        } else {
            format!("{episode}.toml")
        }
    }

    /// The policy file's text for a worktree.
    ///
    /// Trusted-host (Env) runs lose the restricted mode's built-in limits, so the variant
    /// spells them out and also makes `.git/**` read-only. The FS budget is 0 when FS was not
    /// requested, so the `[budgets]` table always has the same shape.
    pub fn text(&self, worktree: &str) -> String {
        let list = |items: &mut dyn Iterator<Item = &str>| {
            items.map(toml_string).collect::<Vec<_>>().join(", ")
        };
        let mut deny: Vec<&str> = Vec::new();
        if self.has("Env") {
            deny.push(".git/**");
        }
        deny.extend(DENY_WRITE);
        let mut t = String::new();
        t.push_str(&format!("security_mode = \"{}\"\n", self.security_mode()));
        t.push_str(&format!(
            "allowed_caps = [{}]\n",
            list(&mut self.caps.iter().copied())
        ));
        t.push_str(&format!("fs_sandbox = {}\n", toml_string(worktree)));
        t.push_str(&format!("timeout_ms = {TIMEOUT_MS}\n"));
        t.push_str(&format!(
            "fs_deny_write = [{}]\n",
            list(&mut deny.iter().copied())
        ));
        t.push_str("entry = \"main\"\n");
        if self.has("Net") {
            t.push_str(&format!(
                "net_allow = [{}]\n",
                list(&mut self.net_allow.iter().map(String::as_str))
            ));
            if self.net_allow_http {
                t.push_str("net_allow_http = true\n");
            }
        }
        if self.has("Env") {
            t.push_str("max_source_bytes = 1048576\n");
            t.push_str("max_module_graph_bytes = 16777216\n");
            t.push_str("max_output_bytes = 8388608\n");
            t.push_str("max_fs_transfer_bytes = 8388608\n");
        }
        let fs = if self.has("FS") { FS_BUDGET } else { 0 };
        t.push_str(&format!("\n[budgets]\nFS = {fs}\n"));
        t
    }
}

/// Lowercase hex SHA-256.
pub fn digest(bytes: &[u8]) -> String {
    sha256_hex(bytes)
}

/// A TOML basic string. The escapes used (`\"`, `\\`, `\b`, `\t`, `\n`, `\f`, `\r`,
/// `\u00XX`, `\u007F`) are also valid JSON, which keeps the file trivially readable by tools.
pub fn toml_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\u{c}' => out.push_str("\\f"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\u{:04X}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// What a verified summary tells the handler beyond "it matches".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// Hex SHA-256 of the policy file's bytes.
    pub digest: String,
    /// The summary's `cli` op list (the base policy's is Ailang.CLI's allowlist).
    pub cli: Vec<String>,
}

/// Most policy files remembered as verified. One file per episode and run variant, so a
/// daemon that serves many episodes over its life would otherwise keep one entry for each
/// forever; a file forgotten is only verified again (one policy-tool summary) at its next use.
pub const MAX_VERIFIED: usize = 1024;

/// Policy files whose summary matched, by path, at most [`MAX_VERIFIED`] of them.
#[derive(Debug, Default)]
pub struct VerifiedFiles {
    files: HashMap<PathBuf, Verified>,
}

impl VerifiedFiles {
    /// What `path` was verified as, if it is remembered.
    pub fn get(&self, path: &Path) -> Option<&Verified> {
        self.files.get(path)
    }

    /// Remember `path` as verified; when full, one other file is forgotten to make room.
    pub fn insert(&mut self, path: PathBuf, verified: Verified) {
        if self.files.len() >= MAX_VERIFIED && !self.files.contains_key(&path) {
            if let Some(other) = self.files.keys().next().cloned() {
                self.files.remove(&other);
            }
        }
        self.files.insert(path, verified);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.files.len()
    }
}

fn string_set(v: Option<&Value>) -> Option<Vec<String>> {
    let mut items: Vec<String> = match v {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|x| x.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()?,
        Some(_) => return None,
    };
    items.sort();
    items.dedup();
    Some(items)
}

fn same_dir(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    match (Path::new(a).canonicalize(), Path::new(b).canonicalize()) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}

/// Check `policy-tool`'s `{"op":"summary"}` reply against the policy that was written:
/// `{ok:true, summary:{security_mode, policy_digest, fs_sandbox, caps, net_allow, cli}}`
/// must report the same mode, the worktree as sandbox, the same caps and net_allow (as
/// sets) and the SHA-256 of the file's bytes. Errors name the first field that differs and
/// never a host path.
pub fn verify_summary(
    reply: &Value,
    spec: &PolicySpec,
    worktree: &str,
    file_digest: &str,
) -> Result<Verified, String> {
    let summary = match reply.get("summary") {
        Some(Value::Object(s)) if reply.get("ok") == Some(&Value::Bool(true)) => s,
        _ => {
            let why = reply
                .get("refused")
                .and_then(Value::as_str)
                .map(|r| format!(": {}", crate::process::excerpt(r)))
                .unwrap_or_default();
            return Err(format!(
                "the summary reply is not {{\"ok\":true,\"summary\":{{…}}}}{why}"
            ));
        }
    };
    let mode = summary.get("security_mode").and_then(Value::as_str);
    if mode != Some(spec.security_mode()) {
        return Err(format!(
            "security_mode is {}, expected \"{}\"",
            mode.map_or("missing".to_string(), |m| format!("{m:?}")),
            spec.security_mode()
        ));
    }
    match summary.get("fs_sandbox").and_then(Value::as_str) {
        Some(s) if same_dir(s, worktree) => {}
        _ => return Err("fs_sandbox is not the episode's worktree".to_string()),
    }
    let mut want_caps: Vec<String> = spec.caps.iter().map(|c| c.to_string()).collect();
    want_caps.sort();
    match string_set(summary.get("caps")) {
        Some(caps) if caps == want_caps => {}
        other => {
            return Err(format!(
                "caps are {}, expected [{}]",
                other.map_or("not a list of names".to_string(), |c| format!(
                    "[{}]",
                    c.join(", ")
                )),
                want_caps.join(", ")
            ))
        }
    }
    let mut want_net = spec.net_allow.clone();
    want_net.sort();
    match string_set(summary.get("net_allow")) {
        Some(net) if net == want_net => {}
        other => {
            return Err(format!(
                "net_allow is {}, expected [{}]",
                other.map_or("not a list".to_string(), |c| format!("[{}]", c.join(", "))),
                want_net.join(", ")
            ))
        }
    }
    let reported = summary.get("policy_digest").and_then(Value::as_str);
    let reported_hex = reported.map(|d| d.strip_prefix("sha256:").unwrap_or(d));
    if reported_hex != Some(file_digest) {
        return Err(format!(
            "policy_digest is {}, expected the SHA-256 of the file written ({file_digest})",
            reported.map_or("missing".to_string(), |d| format!(
                "{:?}",
                crate::process::excerpt(d)
            ))
        ));
    }
    let cli = match summary.get("cli") {
        None | Some(Value::Null) if spec.run => Vec::new(),
        Some(Value::Array(ops)) => ops
            .iter()
            .map(|o| o.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| "cli is not a list of op names".to_string())?,
        _ => return Err("cli is missing or not a list of op names".to_string()),
    };
    Ok(Verified {
        digest: file_digest.to_string(),
        cli,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_daemon_serving_many_episodes_remembers_at_most_max_verified_policy_files() {
        let verified = |n: usize| Verified {
            digest: format!("{n:064x}"),
            cli: Vec::new(),
        };
        let mut files = VerifiedFiles::default();
        for n in 0..MAX_VERIFIED + 500 {
            files.insert(PathBuf::from(format!("ep{n}.toml")), verified(n));
            assert!(files.len() <= MAX_VERIFIED);
        }
        assert_eq!(files.len(), MAX_VERIFIED);
        // The newest is kept, and a file verified again replaces itself, not another.
        let last = PathBuf::from(format!("ep{}.toml", MAX_VERIFIED + 499));
        assert_eq!(files.get(&last), Some(&verified(MAX_VERIFIED + 499)));
        files.insert(last.clone(), verified(1));
        assert_eq!(files.len(), MAX_VERIFIED);
        assert_eq!(files.get(&last), Some(&verified(1)));
    }

    #[test]
    fn base_policy_is_the_reference_text() {
        assert_eq!(
            PolicySpec::base().text("/w/ep"),
            "security_mode = \"restricted\"\n\
             allowed_caps = [\"IO\", \"FS\"]\n\
             fs_sandbox = \"/w/ep\"\n\
             timeout_ms = 8000\n\
             fs_deny_write = [\".github/**\", \".pi/**\", \".claude/**\", \".gitmodules\", \".gitattributes\", \".ailang/**\"]\n\
             entry = \"main\"\n\
             \n\
             [budgets]\n\
             FS = 1000\n"
        );
        assert_eq!(PolicySpec::base().file_name("ep"), "ep.toml");
    }

    #[test]
    fn run_variants() {
        let io = PolicySpec::for_run(&["IO"], &[], false);
        assert_eq!(io.file_name("ep"), "ep.run-IO.toml");
        assert!(io.text("/w").ends_with("[budgets]\nFS = 0\n"));

        let env = PolicySpec::for_run(&["Env", "IO", "FS"], &[], false);
        assert_eq!(env.file_name("ep"), "ep.run-IO-FS-Env.toml");
        let t = env.text("/w");
        assert!(t.starts_with("security_mode = \"trusted_host\"\n"));
        assert!(t.contains("fs_deny_write = [\".git/**\", \".github/**\""));
        assert!(t.contains("max_fs_transfer_bytes = 8388608\n"));

        let net = PolicySpec::for_run(&["Net", "IO"], &["127.0.0.1:9".into()], true);
        let t = net.text("/w");
        assert!(t.starts_with("security_mode = \"restricted\"\n"));
        assert!(t.contains("net_allow = [\"127.0.0.1:9\"]\nnet_allow_http = true\n"));
        assert_eq!(net.file_name("ep"), "ep.run-IO-Net.toml");
    }

    #[test]
    fn toml_strings_escape_quotes_backslashes_and_controls() {
        assert_eq!(
            toml_string("a\"b\\c\n\u{1}\u{7f}é"),
            "\"a\\\"b\\\\c\\n\\u0001\\u007Fé\""
        );
    }
}
