//! The documentation runs: the `console` transcripts of the README, `docs/cli.md`,
//! `docs/agents.md` (including the Python MCP SDK, TypeScript SDK and curl clients of the
//! latter), `docs/http-api.md` (every curl example of the HTTP API), `docs/operators.md` (with
//! its table of start-up failures, each caused) and the worked examples of
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

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
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
        let text = std::fs::read_to_string(repo_root().join(page)).unwrap();
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

/// The code spans of a Markdown table cell: `` `a` `` and, for text holding a backtick,
/// ``` `` a `b` `` ```.
fn code_spans(cell: &str) -> Vec<String> {
    let mut spans = Vec::new();
    let mut rest = cell;
    while let Some(at) = rest.find('`') {
        let ticks = rest[at..].len() - rest[at..].trim_start_matches('`').len();
        let fence = "`".repeat(ticks);
        let body = &rest[at + ticks..];
        let Some(end) = body.find(&fence) else { break };
        spans.push(body[..end].trim().to_owned());
        rest = &body[end + ticks..];
    }
    spans
}

/// One way to cause a row of the start-up failures table.
struct Provoked {
    /// The row's code span this causes, exactly as the page writes it.
    span: &'static str,
    /// The page's placeholders, each with what it stands for here.
    names: Vec<(&'static str, String)>,
    args: Vec<String>,
}

/// Every start-up failure the operator guide's table names that a test can cause is caused,
/// against the real binary: the daemon exits 2 and its last stderr line is the row's line (with
/// `…` any text and the row's placeholders what they stand for here). A row reworded, or a
/// message changed, breaks this test instead of an operator's search of the page.
#[test]
fn the_operator_guides_start_up_failures_are_what_the_daemon_prints() {
    let page = std::fs::read_to_string(repo_root().join("docs/operators.md")).unwrap();
    let table = transcript::section(&page, "### Start-up failures");
    let rows: Vec<Vec<String>> = table
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| code_spans(l.split(" | ").next().unwrap()))
        .collect();
    assert!(rows.len() > 20, "the table has only {} rows", rows.len());

    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let at = |p: &str| d.join(p).display().to_string();
    let s = |v: &[&str]| v.iter().map(|a| a.to_string()).collect::<Vec<_>>();
    let plugins = |name: &str, libs: &[&str]| {
        let own = d.join(name);
        std::fs::create_dir_all(&own).unwrap();
        let made = plugin_dir_with(&own, libs);
        made.display().to_string()
    };
    std::fs::write(d.join("unknown-key.toml"), "[serve]\nbindd = \"x\"\n").unwrap();
    std::fs::write(d.join("a-file"), "").unwrap();
    let world_writable = plugins("p-0666", &["worldd_workspace"]);
    let lib_0666 = format!("{world_writable}/libworldd_workspace.so");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&lib_0666, std::fs::Permissions::from_mode(0o666)).unwrap();
    let open_dir = plugins("p-0777", &["worldd_workspace"]);
    std::fs::set_permissions(&open_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let stale = plugins("p-stale", &["worldd_workspace"]);
    std::fs::write(format!("{stale}/libstale.so"), "x").unwrap();
    let workspace = plugins("p-workspace", &["worldd_workspace"]);
    let git = plugins("p-git", &["worldd_git"]);
    let twice = plugins("p-twice", &["worldd_workspace"]);
    std::fs::copy(
        format!("{twice}/libworldd_workspace.so"),
        format!("{twice}/libworldd_workspace2.so"),
    )
    .unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_port = taken.local_addr().unwrap().port().to_string();
    let serving = Daemon::start(&["worldd_workspace"], &[]);
    let served_db = serving.db().display().to_string();

    let own_lib = format!("{workspace}/libworldd_workspace.so");
    let mut cases = vec![
        Provoked {
            span: r#"… at bind-policy: bind host "0.0.0.0" is not loopback"#,
            names: vec![],
            args: s(&["--bind", "0.0.0.0:7644"]),
        },
        Provoked {
            span: r#"… at bind-policy: --bind "foo" is not HOST:PORT"#,
            names: vec![],
            args: s(&["--bind", "foo"]),
        },
        Provoked {
            span: r#"bad port in "localhost:x""#,
            names: vec![],
            args: s(&["--bind", "localhost:x"]),
        },
        Provoked {
            span: "… at config: world.toml: No such file or directory (os error 2)",
            names: vec![("world.toml", at("nope.toml"))],
            args: s(&["--config", &at("nope.toml")]),
        },
        Provoked {
            span: "… at config: workspace root DIR: …",
            names: vec![("DIR", at("a-file/worktrees"))],
            args: s(&["--workspace-root", &at("a-file/worktrees")]),
        },
        Provoked {
            span: "… at config: the store DB is inside the workspace root ROOT",
            names: vec![("DB", at("wt/db")), ("ROOT", at("wt"))],
            args: s(&["--workspace-root", &at("wt"), "--db", &at("wt/db")]),
        },
        Provoked {
            span: "… at config: [limits] commit_body_bytes N is out of range (1 to 8388608)",
            names: vec![(" N ", " 8388609 ".into())],
            args: s(&["--commit-body-bytes", "8388609"]),
        },
        Provoked {
            span: "… at config: the store reserve (R bytes) must be smaller than its ceiling (C bytes)",
            names: vec![("(R ", "(2000000 ".into()), ("(C ", "(1000000 ".into())],
            args: s(&["--store-ceiling", "1000000", "--store-reserve", "2000000"]),
        },
        Provoked {
            span: "… at config: the refusal burst must be at least 1",
            names: vec![],
            args: s(&["--refusal-burst", "0"]),
        },
        Provoked {
            span: "the refusal rate must be …",
            names: vec![],
            args: s(&["--refusals-per-minute", "-1"]),
        },
        Provoked {
            span: "… at store-open: another worldd already serves DB (one daemon per store: it orders each episode's calls)",
            names: vec![("DB", served_db.clone())],
            args: s(&["--db", &served_db]),
        },
        Provoked {
            span: "… at plugins: plugin DIR: cannot read the plugin directory: …",
            names: vec![("DIR", at("no-plugins"))],
            args: s(&["--plugin-dir", &at("no-plugins")]),
        },
        Provoked {
            span: "… at plugins: plugin FILE: refusing to load a library every user may write (mode 0666); `chmod o-w` it",
            names: vec![("FILE", lib_0666)],
            args: s(&["--plugin-dir", &world_writable]),
        },
        Provoked {
            span: "plugin DIR: refusing a plugin directory every user may write, without the sticky bit (mode 0777): …",
            names: vec![("DIR", open_dir.clone())],
            args: s(&["--plugin-dir", &open_dir]),
        },
        Provoked {
            span: "cannot be opened: …",
            names: vec![],
            args: s(&["--plugin-dir", &stale]),
        },
        Provoked {
            span: r#"… at plugins: plugin FILE: unknown config key "k" (known: …)"#,
            names: vec![("FILE", own_lib.clone())],
            args: s(&["--plugin-dir", &workspace, "--plugin-config", "workspace.k=1"]),
        },
        Provoked {
            span: r#"config key "k" must be of type T"#,
            names: vec![(r#""k""#, r#""maxReadBytes""#.into()), (" T", " integer".into())],
            args: s(&["--plugin-dir", &workspace, "--plugin-config", "workspace.maxReadBytes=true"]),
        },
        Provoked {
            span: "… must be at least N",
            names: vec![(" N", " 0".into())],
            args: s(&["--plugin-dir", &workspace, "--plugin-config", "workspace.maxReadBytes=-1"]),
        },
        Provoked {
            span: "… must be at most N",
            names: vec![(" N", " 1048576".into())],
            args: s(&["--plugin-dir", &workspace, "--plugin-config", "workspace.maxReadBytes=2000000"]),
        },
        Provoked {
            span: r#"… at plugins: plugin …/libworldd_git.so: the plugin rejected its config: git config: "stateDir" must be an absolute path, not "…""#,
            names: vec![],
            args: s(&[
                "--plugin-dir",
                &git,
                "--plugin-config",
                "git.stateDir=relative",
                "--plugin-config",
                "git.author=Ada Lovelace <ada@example.com>",
            ]),
        },
        Provoked {
            span: "… at plugins: plugin FILE: effect E is already claimed by OTHER",
            names: vec![
                ("FILE", format!("{twice}/libworldd_workspace2.so")),
                (" E ", " Workspace.Read ".into()),
                ("OTHER", format!("{twice}/libworldd_workspace.so")),
            ],
            args: s(&["--plugin-dir", &twice]),
        },
        Provoked {
            span: "… at plugins: plugin DIR: --handler NAME: no plugin of that name here (found: …)",
            names: vec![("DIR", workspace.clone()), ("NAME", "nope".into())],
            args: s(&["--plugin-dir", &workspace, "--handler", "nope"]),
        },
        Provoked {
            span: "… (found: …); not loadable: …",
            names: vec![],
            args: s(&["--plugin-dir", &stale, "--handler", "nope"]),
        },
        Provoked {
            span: "… at listen: 127.0.0.1:7644: Address already in use (os error 98); is another worldd already serving here? Stop it, or pick a free port with --bind 127.0.0.1:PORT (nothing was created)",
            names: vec![("7644", taken_port.clone())],
            args: s(&["--bind", &format!("127.0.0.1:{taken_port}")]),
        },
    ];
    // A library another user owns can only be made by root.
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        let theirs = plugins("p-theirs", &["worldd_workspace"]);
        let lib = format!("{theirs}/libworldd_workspace.so");
        std::os::unix::fs::chown(&lib, Some(65534), None).unwrap();
        cases.push(Provoked {
            span: "refusing to load a library owned by uid N, neither this process's user (uid M) nor root",
            names: vec![("uid N", "uid 65534".into()), ("uid M", "uid 0".into())],
            args: s(&["--plugin-dir", &theirs]),
        });
    } else {
        eprintln!("*** not root: the row of a library another user owns is not caused ***");
    }

    let mut wrong = Vec::new();
    for case in &cases {
        assert!(
            rows.iter().flatten().any(|span| span == case.span),
            "the table has no line {:?}",
            case.span
        );
        // `… at STAGE: …` is the whole line; a span without its stage is the line's end.
        let mut line = match case.span.strip_prefix("… at ") {
            Some(rest) => format!("worldd: daemon startup failed at {rest}"),
            None if case.span.starts_with('…') => {
                format!("worldd: daemon startup failed at {}", case.span)
            }
            None => format!("worldd: daemon startup failed at …{}", case.span),
        };
        for (name, value) in &case.names {
            assert!(line.contains(name), "{name:?} is not in {:?}", case.span);
            line = line.replace(name, value);
        }
        let cwd = tempfile::tempdir().unwrap();
        let mut args = case.args.clone();
        if !args.contains(&"--bind".to_owned()) {
            args.extend(s(&["--bind", "127.0.0.1:0"]));
        }
        if !args.contains(&"--plugin-dir".to_owned()) {
            args.extend(s(&["--plugin-dir", &workspace]));
        }
        let out = Command::new(WORLDD)
            .arg("serve")
            .args(&args)
            .current_dir(cwd.path())
            .env("WORLDD_LOG", "warn")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let last = stderr.trim_end().lines().last().unwrap_or("");
        if out.status.code() != Some(2) || !transcript::matches(&[line.clone()], &[last]) {
            wrong.push(format!(
                "{:?}\n  expected (exit 2): {line}\n  printed (exit {:?}): {}",
                case.span,
                out.status.code(),
                stderr.trim_end()
            ));
        }
    }
    drop((taken, serving));
    assert!(
        wrong.is_empty(),
        "rows that are not what the daemon prints:\n{}",
        wrong.join("\n")
    );
    let spans: usize = rows.iter().map(Vec::len).sum();
    eprintln!(
        "{} of the table's {spans} lines caused and matched",
        cases.len()
    );
}

/// The keys `[table]` of the config file accepts, as the daemon lists them when it refuses one
/// it does not know.
fn accepted_keys(table: &str) -> std::collections::BTreeSet<String> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("probe.toml");
    std::fs::write(&file, format!("[{table}]\nno_such_key = 1\n")).unwrap();
    let out = Command::new(WORLDD)
        .args(["handlers", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let list = err
        .split("expected one of ")
        .nth(1)
        .unwrap_or_else(|| panic!("[{table}]: no list of keys in {err}"));
    list.lines()
        .next()
        .unwrap()
        .split(", ")
        .map(|k| k.trim_matches('`').to_owned())
        .collect()
}

/// The code spans of the first cell of each row of the Markdown table under `heading`.
fn first_cells(page: &str, heading: &str) -> Vec<Vec<String>> {
    transcript::section(page, heading)
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("|---"))
        .skip(1)
        .map(|l| code_spans(l.split(" | ").next().unwrap()))
        .collect()
}

/// The operator guide's tables of settings are the daemon's: every key `[serve]`, `[server]`
/// and `[limits]` accept has its row, no row names a key the daemon refuses, and every flag the
/// tables give is one `worldd serve` takes. A setting added, renamed or dropped in the code
/// fails this test until the guide says so.
#[test]
fn the_operator_guides_settings_tables_are_the_keys_and_flags_the_daemon_takes() {
    let page = std::fs::read_to_string(repo_root().join("docs/operators.md")).unwrap();
    let keys = |cells: Vec<Vec<String>>| -> std::collections::BTreeSet<String> {
        cells
            .into_iter()
            .filter_map(|spans| spans.into_iter().next())
            .collect()
    };
    for (table, heading) in [("server", "### `[server]`"), ("limits", "### `[limits]`")] {
        assert_eq!(
            keys(first_cells(&page, heading)),
            accepted_keys(table),
            "the guide's [{table}] table and the keys the daemon takes"
        );
    }
    // `[serve]` is the `serve` flags table's `serve.KEY` column, old names included.
    let flags_table = transcript::section(&page, "### `worldd serve` flags");
    let mut serve_keys = std::collections::BTreeSet::new();
    let mut flags = Vec::new();
    let mut old_flags = Vec::new();
    for row in flags_table.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = row.split(" | ").collect();
        for span in code_spans(cells[1]) {
            let key = span.strip_prefix("serve.").unwrap_or(&span);
            if span.starts_with("serve.") || cells[1].contains("old name") {
                serve_keys.insert(key.to_owned());
            }
        }
        let (now, old) = cells[0].split_once("(old name").unwrap_or((cells[0], ""));
        flags.extend(code_spans(now));
        old_flags.extend(code_spans(old));
    }
    assert_eq!(
        serve_keys,
        accepted_keys("serve"),
        "the guide's serve flags table and the [serve] keys the daemon takes"
    );
    for heading in ["### `[server]`", "### `[limits]`"] {
        for row in transcript::section(&page, heading)
            .lines()
            .filter(|l| l.starts_with("| `"))
        {
            flags.extend(code_spans(row.split(" | ").nth(1).unwrap()));
        }
    }
    let help = Command::new(WORLDD)
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    let flags: std::collections::BTreeSet<&str> = flags
        .iter()
        .filter_map(|f| f.split_whitespace().next())
        .filter(|f| f.starts_with("--"))
        .collect();
    assert!(flags.len() > 20, "only {} flags in the tables", flags.len());
    let unknown: Vec<&&str> = flags
        .iter()
        .filter(|f| !help.contains(&format!("{} ", f)) && !help.contains(&format!("{}\n", f)))
        .collect();
    assert!(
        unknown.is_empty(),
        "flags `worldd serve` does not take: {unknown:?}"
    );
    // An old name is a hidden alias: parsed (the start then stops at the bind policy, exit 2),
    // not refused as unknown (exit 1).
    assert!(!old_flags.is_empty());
    for old in &old_flags {
        let out = Command::new(WORLDD)
            .args(["serve", &format!("{old}=1"), "--bind", "0.0.0.0:1"])
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(2),
            "{old}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The operator guide's table of metrics is what `GET /v1/metrics` serves: every family the
/// daemon exports has its row with its type, and no row names one it does not export.
#[test]
fn the_operator_guides_metrics_table_is_what_the_daemon_exports() {
    let page = std::fs::read_to_string(repo_root().join("docs/operators.md")).unwrap();
    let section = transcript::section(&page, "## Metrics");
    let documented: std::collections::BTreeSet<(String, String)> = section
        .lines()
        .filter(|l| l.starts_with("| `worldd_"))
        .map(|l| {
            let cells: Vec<&str> = l.split(" | ").collect();
            (code_spans(cells[0]).remove(0), cells[1].trim().to_owned())
        })
        .collect();
    let d = Daemon::start(&["worldd_workspace"], &[]);
    let text = get(&d.url("/v1/metrics"), None).text();
    let exported: std::collections::BTreeSet<(String, String)> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| {
            let (name, kind) = l.split_once(' ').unwrap();
            (name.to_owned(), kind.to_owned())
        })
        .collect();
    assert!(exported.len() > 30, "{text}");
    let missing: Vec<_> = exported.difference(&documented).collect();
    let extra: Vec<_> = documented.difference(&exported).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "exported but not in the guide's table: {missing:?}\nin the table but not exported: {extra:?}"
    );
}
