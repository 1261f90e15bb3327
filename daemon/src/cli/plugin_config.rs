//! Plugin settings from the command line: `--plugin-config NAME.KEY=VALUE`, one key of one
//! plugin's config table, over the config file.
//!
//! The daemon knows no plugin by name: a plugin's settings are its `[plugins.NAME]` table and
//! these overrides, both checked against the schema its manifest declares (and then by the
//! plugin itself). `VALUE` is read as JSON when it parses as JSON (`true`, `8000`,
//! `'["Env","Net"]'`), else taken as a string (`/usr/local/bin/tool`, `Ada <ada@example.com>`);
//! write a JSON string (`'"true"'`) for a string that would parse as something else.
//!
//! The plugin-specific flags of earlier releases are hidden aliases of this option for one
//! release; each use prints a deprecation warning naming its replacement. Their table is the
//! one place in the daemon's source that names plugins ([`DeprecatedFlags`]).

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::Args;
use serde_json::{Map, Value};

/// One `--plugin-config` setting.
#[derive(Debug, Clone, PartialEq)]
pub struct Override {
    pub plugin: String,
    pub key: String,
    pub value: Value,
}

/// Why a `--plugin-config` argument cannot be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("--plugin-config {given:?}: {why}; write NAME.KEY=VALUE, e.g. --plugin-config hello.greeting=hi")]
pub struct OverrideError {
    given: String,
    why: &'static str,
}

impl Override {
    /// Parse `NAME.KEY=VALUE`.
    pub fn parse(text: &str) -> Result<Override, OverrideError> {
        let error = |why| OverrideError {
            given: text.to_owned(),
            why,
        };
        let (target, raw) = text.split_once('=').ok_or_else(|| error("no \"=\""))?;
        let (plugin, key) = target
            .split_once('.')
            .ok_or_else(|| error("no \".\" between the plugin's name and the key"))?;
        if plugin.is_empty() {
            return Err(error("the plugin's name is empty"));
        }
        if key.is_empty() {
            return Err(error("the key is empty"));
        }
        let value =
            serde_json::from_str::<Value>(raw).unwrap_or_else(|_| Value::String(raw.to_owned()));
        Ok(Override {
            plugin: plugin.to_owned(),
            key: key.to_owned(),
            value,
        })
    }
}

/// Set each override's key in its plugin's table (created when absent), in order: a later
/// override of the same key wins.
pub fn apply(configs: &mut BTreeMap<String, Value>, overrides: Vec<Override>) {
    for o in overrides {
        let table = configs
            .entry(o.plugin)
            .or_insert_with(|| Value::Object(Map::new()));
        match table {
            Value::Object(t) => {
                t.insert(o.key, o.value);
            }
            // A table that is not an object is refused by the schema check anyway; replace it
            // rather than lose the override silently.
            other => *other = Value::Object(Map::from_iter([(o.key, o.value)])),
        }
    }
}

/// Plugin flags of earlier releases: hidden aliases of `--plugin-config`, kept for one release.
#[derive(Args, Debug, Clone, Default)]
pub struct DeprecatedFlags {
    #[arg(long, hide = true)]
    pub tool_ailang_bin: Option<PathBuf>,
    #[arg(long, hide = true)]
    pub examples_dir: Option<PathBuf>,
    #[arg(long, hide = true, value_delimiter = ',')]
    pub run_allow_caps: Vec<String>,
    #[arg(long, hide = true)]
    pub run_net_allow: Vec<String>,
    #[arg(long, hide = true)]
    pub run_net_allow_http: bool,
    #[arg(long, hide = true)]
    pub git_author: Option<String>,
}

impl DeprecatedFlags {
    /// The override each flag given stands for, with the flag's name and its replacement.
    fn used(&self) -> Vec<(&'static str, Override)> {
        let mut out = Vec::new();
        let mut push = |flag, plugin: &str, key: &str, value: Value| {
            out.push((
                flag,
                Override {
                    plugin: plugin.to_owned(),
                    key: key.to_owned(),
                    value,
                },
            ))
        };
        let path = |p: &PathBuf| Value::String(p.display().to_string());
        if let Some(b) = &self.tool_ailang_bin {
            push("--tool-ailang-bin", "ailang", "bin", path(b));
        }
        if let Some(d) = &self.examples_dir {
            push("--examples-dir", "ailang", "examplesDir", path(d));
        }
        if !self.run_allow_caps.is_empty() {
            let caps = Value::from(self.run_allow_caps.clone());
            push("--run-allow-caps", "ailang", "runAllowCaps", caps);
        }
        if !self.run_net_allow.is_empty() {
            let hosts = Value::from(self.run_net_allow.clone());
            push("--run-net-allow", "ailang", "runNetAllow", hosts);
        }
        if self.run_net_allow_http {
            push(
                "--run-net-allow-http",
                "ailang",
                "runNetAllowHttp",
                Value::Bool(true),
            );
        }
        if let Some(a) = &self.git_author {
            push("--git-author", "git", "author", Value::String(a.clone()));
        }
        out
    }

    /// The overrides the deprecated flags stand for, warning once per flag used.
    pub fn overrides(&self) -> Vec<Override> {
        self.used()
            .into_iter()
            .map(|(flag, o)| {
                tracing::warn!(
                    "{flag} is deprecated and will be removed in the next release: use --plugin-config {}.{}=VALUE",
                    o.plugin,
                    o.key
                );
                o
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_are_json_when_they_parse_and_strings_otherwise() {
        let cases = [
            ("p.n=8000", json!(8000)),
            ("p.b=true", json!(true)),
            ("p.list=[\"Env\",\"Net\"]", json!(["Env", "Net"])),
            ("p.s=\"true\"", json!("true")),
            ("p.path=/usr/local/bin/tool", json!("/usr/local/bin/tool")),
            (
                "p.who=Ada <ada@example.com>",
                json!("Ada <ada@example.com>"),
            ),
            ("p.eq=a=b", json!("a=b")),
            ("p.empty=", json!("")),
        ];
        for (text, value) in cases {
            let o = Override::parse(text).unwrap();
            assert_eq!((o.plugin.as_str(), o.value), ("p", value), "{text}");
        }
        let o = Override::parse("git.author.name=x").unwrap();
        assert_eq!((o.plugin.as_str(), o.key.as_str()), ("git", "author.name"));
    }

    #[test]
    fn malformed_settings_say_what_to_write() {
        for (text, why) in [
            ("p.k", "no \"=\""),
            ("pk=1", "no \".\" between the plugin's name and the key"),
            (".k=1", "the plugin's name is empty"),
            ("p.=1", "the key is empty"),
        ] {
            assert_eq!(
                Override::parse(text).unwrap_err().to_string(),
                format!("--plugin-config {text:?}: {why}; write NAME.KEY=VALUE, e.g. --plugin-config hello.greeting=hi")
            );
        }
    }

    #[test]
    fn later_overrides_win_and_tables_are_created() {
        let mut configs = BTreeMap::from([("a".to_owned(), json!({"x": 1, "y": 2}))]);
        let parse = |t: &str| Override::parse(t).unwrap();
        apply(
            &mut configs,
            vec![parse("a.x=3"), parse("b.z=hi"), parse("a.x=4")],
        );
        assert_eq!(configs["a"], json!({"x": 4, "y": 2}));
        assert_eq!(configs["b"], json!({"z": "hi"}));
    }

    #[test]
    fn every_deprecated_flag_maps_onto_one_override() {
        let flags = DeprecatedFlags {
            tool_ailang_bin: Some("/bin/a".into()),
            examples_dir: Some("/ex".into()),
            run_allow_caps: vec!["Env".into(), "Net".into()],
            run_net_allow: vec!["127.0.0.1:80".into()],
            run_net_allow_http: true,
            git_author: Some("Ada <a@b>".into()),
        };
        let got: Vec<(&str, String, Value)> = flags
            .used()
            .into_iter()
            .map(|(f, o)| (f, format!("{}.{}", o.plugin, o.key), o.value))
            .collect();
        assert_eq!(
            got,
            [
                ("--tool-ailang-bin", "ailang.bin".into(), json!("/bin/a")),
                ("--examples-dir", "ailang.examplesDir".into(), json!("/ex")),
                (
                    "--run-allow-caps",
                    "ailang.runAllowCaps".into(),
                    json!(["Env", "Net"])
                ),
                (
                    "--run-net-allow",
                    "ailang.runNetAllow".into(),
                    json!(["127.0.0.1:80"])
                ),
                (
                    "--run-net-allow-http",
                    "ailang.runNetAllowHttp".into(),
                    json!(true)
                ),
                ("--git-author", "git.author".into(), json!("Ada <a@b>")),
            ]
        );
        assert!(DeprecatedFlags::default().used().is_empty());
    }
}
