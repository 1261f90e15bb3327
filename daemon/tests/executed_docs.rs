//! The documentation runs: the `console` transcripts of the README, `docs/cli.md`,
//! `docs/agents.md` (including the Python MCP SDK, A2A Python SDK, TypeScript SDK and curl
//! clients of the latter), `docs/http-api.md` (every curl example of the HTTP API),
//! `docs/operators.md` and
//! the worked examples of
//! `docs/plugins/registry.md` and `docs/plugins/git.md` are executed against the real binary
//! and a real daemon, and their output must match what the page shows. The rules of a page are
//! in `common/transcript.rs` and `docs/testing.md`.

mod common;
// The executed-docs reader; each test file uses the part of it it needs.
#[allow(dead_code)]
#[path = "common/transcript.rs"]
mod transcript;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

const PLUGINS: &[&str] = &[
    "worldd_workspace",
    "worldd_ailang",
    "worldd_git",
    "worldd_registry",
];

/// A page's working directory: a daemon serving `.world/db` with the shipped plugins, and the
/// environment its commands run in.
struct Stage {
    daemon: Daemon,
    cwd: PathBuf,
    env: Vec<(String, String)>,
}

impl Stage {
    fn new() -> Stage {
        let dir = tempfile::tempdir().unwrap();
        let cwd = dir.path().join("project");
        std::fs::create_dir_all(cwd.join("target/release")).unwrap();
        // The README's `./target/release/worldd` is this build's binary.
        std::os::unix::fs::symlink(WORLDD, cwd.join("target/release/worldd")).unwrap();
        let plugins = plugin_dir_with(dir.path(), PLUGINS);
        // A fixed git identity, as on a developer's machine: the git plugin takes it as its
        // default author.
        let gitconfig = dir.path().join("gitconfig");
        std::fs::write(
            &gitconfig,
            "[user]\n\tname = Ada Lovelace\n\temail = ada@example.com\n",
        )
        .unwrap();
        let gitconfig = gitconfig.display().to_string();
        let quiet_git = [
            ("GIT_CONFIG_GLOBAL", gitconfig.as_str()),
            ("GIT_CONFIG_NOSYSTEM", "1"),
        ];
        let mut child = Command::new(WORLDD);
        child
            .args(["serve", "--bind", "127.0.0.1:0", "--plugin-dir"])
            .arg(&plugins)
            .current_dir(&cwd)
            .envs(quiet_git)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null());
        let daemon = Daemon::spawn(dir, child);
        let bin = Path::new(WORLDD).parent().unwrap().display().to_string();
        let path = format!(
            "{bin}:{}:{}",
            clients::python_bin().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut env: Vec<(String, String)> = vec![
            ("PATH".into(), path),
            ("WORLD_ADDR".into(), daemon.url("")),
            ("NO_COLOR".into(), "1".into()),
            ("WORLDD_LOG".into(), "warn".into()),
        ];
        env.extend(quiet_git.map(|(k, v)| (k.to_owned(), v.to_owned())));
        Stage { daemon, cwd, env }
    }

    /// An operator's preparation for the agent guide: episode `demo` with the se-tools grants,
    /// its worktree holding `hello.txt`, and the credential in `.world/demo.session`.
    fn with_demo_session(self) -> Stage {
        let grants: Vec<String> = [
            "Workspace.Read",
            "Workspace.Write",
            "Ailang.Check",
            "Ailang.Run",
            "Ailang.RunEnv",
            "Ailang.RunNet",
            "Ailang.Discover",
            "Ailang.CLI",
        ]
        .iter()
        .map(|e| format!("{e}=worktree:50"))
        .collect();
        let grants: Vec<&str> = grants.iter().map(String::as_str).collect();
        let db = self.cwd.join(".world/db");
        let store = broker_core::store::Store::open(&db, Default::default()).unwrap();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        let grants = grants.iter().map(|g| g.parse().unwrap()).collect();
        let token = broker_core::session::mint(&store, "demo", grants, 3600, now)
            .unwrap()
            .token;
        let worktree = self.cwd.join(".world/worktrees/demo");
        std::fs::create_dir_all(&worktree).unwrap();
        std::fs::write(worktree.join("hello.txt"), "hi there").unwrap();
        let file = self.cwd.join(".world/demo.session");
        std::fs::write(&file, format!("{token}\n")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        self
    }

    /// The history the HTTP API reference's examples read: in episode `demo`, a write of
    /// `hello.txt` under the idempotency key `write-1` and a read of it, both over MCP.
    fn with_http_api_history(self) -> Stage {
        for args in [
            &[
                "call",
                "ailang-write",
                "--arg",
                "path=hello.txt",
                "--arg",
                "content=hi\n",
                "--idempotency-key",
                "write-1",
            ][..],
            &["call", "ailang-read", "--arg", "path=hello.txt"],
        ] {
            let out = Command::new(WORLDD)
                .args(args)
                .args(["--session", ".world/demo.session"])
                .current_dir(&self.cwd)
                .envs(self.env.iter().map(|(k, v)| (k, v)))
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        self
    }

    /// A `plugins` directory in the working directory holding these plugins alone, for a page
    /// that lists what a plugin directory holds.
    fn with_own_plugin_dir(self, libs: &[&str]) -> Stage {
        plugin_dir_with(&self.cwd, libs);
        self
    }

    /// Run every block of the page in order; panic at the first transcript that differs.
    fn run_page(mut self, page: &str) {
        let text = transcript::page(page);
        let real = self.daemon.addr.as_str();
        let mut ran = 0;
        for block in transcript::blocks(&text) {
            let words: Vec<&str> = block.info.split_whitespace().collect();
            if let Some(name) = words.iter().find_map(|w| w.strip_prefix("file=")) {
                std::fs::write(self.cwd.join(name), block.body.join("\n") + "\n").unwrap();
                continue;
            }
            if words.first() != Some(&"console") {
                continue;
            }
            if words.contains(&"requires=node") {
                match clients::node_modules() {
                    Some(modules) => {
                        let link = self.cwd.join("node_modules");
                        if !link.exists() {
                            std::os::unix::fs::symlink(modules, link).unwrap();
                        }
                    }
                    None => {
                        eprintln!("*** SKIPPED {page}:{}: needs node and npm ***", block.line);
                        continue;
                    }
                }
            }
            for step in transcript::steps(&block) {
                let command = step.command.replace("127.0.0.1:7644", real);
                // `export NAME=VALUE` holds for the rest of the page, as in one terminal.
                if let Some((name, value)) = command
                    .strip_prefix("export ")
                    .and_then(|a| a.split_once('='))
                {
                    // The shell expands the value (`$(cat FILE)`), as it would at a terminal.
                    let quoted = if value.starts_with(['\'', '"']) {
                        value.to_owned()
                    } else {
                        format!("\"{value}\"")
                    };
                    let (code, value) = transcript::run_on_terminal(
                        &format!("printf '%s' {quoted}"),
                        &self.cwd,
                        &self.env,
                    );
                    assert_eq!(code, 0, "{page}:{}: {value}", step.line);
                    self.env.retain(|(k, _)| k != name);
                    self.env.push((name.to_owned(), value));
                    ran += 1;
                    continue;
                }
                let (code, shown) = transcript::run_on_terminal(&command, &self.cwd, &self.env);
                let shown = shown.replace(real, "127.0.0.1:7644");
                let lines: Vec<&str> = shown.trim_end().lines().collect();
                // For page authors: see what every command printed.
                if std::env::var_os("WORLDD_DOCS_SHOW").is_some() {
                    eprintln!(
                        "{page}:{}\n$ {}\n{}\n[exit {code}]\n",
                        step.line,
                        step.command,
                        shown.trim_end()
                    );
                }
                if code != step.exit || !transcript::matches(&step.expected, &lines) {
                    panic!(
                        "{page}:{}: the example does not do what the page says.\n$ {}\n--- the page expects (exit {}):\n{}\n--- the command printed (exit {code}):\n{}\n",
                        step.line,
                        step.command,
                        step.exit,
                        step.expected.join("\n"),
                        shown.trim_end()
                    );
                }
                ran += 1;
            }
        }
        assert!(ran > 0, "{page} has no console transcript");
        eprintln!("{page}: {ran} command(s) ran as documented");
    }
}

#[test]
fn readme_first_call_runs_as_written() {
    Stage::new().run_page("README.md");
}

#[test]
fn cli_reference_examples_run_as_written() {
    Stage::new().run_page("docs/cli.md");
}

#[test]
fn agent_guide_clients_run_as_written() {
    Stage::new().with_demo_session().run_page("docs/agents.md");
}

#[test]
fn http_api_examples_run_as_written() {
    Stage::new()
        .with_demo_session()
        .with_http_api_history()
        .run_page("docs/http-api.md");
}

#[test]
fn registry_worked_example_runs_as_written() {
    Stage::new().run_page("docs/plugins/registry.md");
}

#[test]
fn git_example_runs_as_written() {
    Stage::new().run_page("docs/plugins/git.md");
}

#[test]
fn transcript_wildcards() {
    transcript::self_test();
}

/// The anchors GitHub gives a page's headings: lower case, every character that is not a
/// letter, digit, `_`, `-` or space dropped, spaces made hyphens, a repeated anchor numbered.
fn heading_anchors(markdown: &str) -> std::collections::HashSet<String> {
    let mut seen: std::collections::HashMap<String, usize> = Default::default();
    let mut anchors = std::collections::HashSet::new();
    let mut fenced = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let Some(title) = line
            .strip_prefix('#')
            .map(|l| l.trim_start_matches('#'))
            .and_then(|l| l.strip_prefix(' '))
        else {
            continue;
        };
        if fenced {
            continue;
        }
        let anchor: String = title
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | ' '))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let n = seen.entry(anchor.clone()).or_default();
        anchors.insert(if *n == 0 {
            anchor.clone()
        } else {
            format!("{anchor}-{n}")
        });
        *n += 1;
    }
    anchors
}

/// Every relative link of the README and `docs/` names a file that exists and, with a
/// `#fragment`, a heading of that page: a page renamed, or a heading reworded, breaks the test
/// instead of a reader's click.
#[test]
fn every_link_between_the_pages_resolves() {
    let root = repo_root();
    let mut pages = vec![root.join("README.md")];
    for dir in ["docs", "docs/plugins"] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "md") {
                pages.push(path);
            }
        }
    }
    let mut checked = 0;
    let mut broken = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        // Links in prose only: a fenced block is code.
        let mut fenced = false;
        let prose: String = text
            .lines()
            .filter(|line| {
                let fence = line.trim_start().starts_with("```");
                fenced ^= fence;
                !fenced && !fence
            })
            .collect::<Vec<_>>()
            .join("\n");
        for (at, _) in prose.match_indices("](") {
            let rest = &prose[at + 2..];
            let Some(end) = rest.find(')') else { continue };
            let link = &rest[..end];
            if link.contains("://") || link.starts_with("mailto:") || link.contains(' ') {
                continue;
            }
            checked += 1;
            let (file, fragment) = link.split_once('#').unwrap_or((link, ""));
            let target = if file.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(file)
            };
            if !target.exists() {
                broken.push(format!("{}: {link} (no such file)", page.display()));
                continue;
            }
            if !fragment.is_empty() && target.extension().is_some_and(|e| e == "md") {
                let anchors = heading_anchors(&std::fs::read_to_string(&target).unwrap());
                if !anchors.contains(fragment) {
                    broken.push(format!("{}: {link} (no such heading)", page.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    assert!(checked > 300, "only {checked} links found");
}

#[test]
fn operator_guide_examples_run_as_written() {
    Stage::new()
        .with_own_plugin_dir(&["worldd_workspace"])
        .run_page("docs/operators.md");
}
