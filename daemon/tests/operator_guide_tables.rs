//! The operator guide's tables held to the daemon they describe, through the real binary: its
//! start-up failures, each caused, must be the lines the daemon prints; its settings tables must
//! name exactly the keys `[serve]`, `[server]` and `[limits]` accept and flags `worldd serve`
//! takes; its metrics table must be exactly the families `GET /v1/metrics` exports; the log
//! lines it lists that a test can cause must be lines the daemon logs; its example of an
//! unknown key and its example configuration must be what the daemon prints and takes. A setting,
//! metric or message changed in the code fails here until `docs/operators.md` says so. The page
//! is read with the executed-docs reader (`common/transcript.rs`).

mod common;
#[allow(dead_code)]
#[path = "common/transcript.rs"]
mod transcript;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::why::tamper;
use common::*;

fn operator_guide() -> String {
    transcript::page("docs/operators.md")
}

/// `line` with each of a row's placeholders replaced by what it stands for here; a placeholder
/// the row (`span`) does not hold is the test's mistake.
fn named(line: &str, span: &str, names: &[(&'static str, String)]) -> String {
    names.iter().fold(line.to_owned(), |line, (name, value)| {
        assert!(line.contains(name), "{name:?} is not in {span:?}");
        line.replace(name, value)
    })
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
/// against the real binary: the daemon exits 2 and its `worldd: …` line is the row's line (with
/// `…` any text and the row's placeholders what they stand for here). A row reworded, or a
/// message changed, breaks this test instead of an operator's search of the page.
#[test]
fn the_operator_guides_start_up_failures_are_what_the_daemon_prints() {
    let page = operator_guide();
    let table = transcript::section(&page, "### Start-up failures");
    let rows: Vec<Vec<String>> = table
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| transcript::code_spans(l.split(" | ").next().unwrap()))
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
    std::fs::write(
        d.join("big-commit.toml"),
        "[limits]\ncommit_body_bytes = 8388609\n",
    )
    .unwrap();
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
    let relative_git_state = s(&[
        "--plugin-dir",
        &git,
        "--plugin-config",
        "git.stateDir=relative",
        "--plugin-config",
        "git.author=Ada Lovelace <ada@example.com>",
    ]);
    let mut cases = vec![
        Provoked {
            span: r#"… at bind-policy: --bind "0.0.0.0:7644": host "0.0.0.0" is not loopback: the daemon binds loopback only, 127.0.0.1:PORT, [::1]:PORT or localhost:PORT (to reach it from another machine, see operators.md "Network exposure")"#,
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
            span: "… at config: world.toml: TOML parse error …",
            names: vec![("world.toml", at("unknown-key.toml"))],
            args: s(&["--config", &at("unknown-key.toml")]),
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
            // From the file: the flag's value is named as the flag (`--commit-body-bytes N …`).
            args: s(&["--config", &at("big-commit.toml")]),
        },
        Provoked {
            span: "… at config: the store reserve (R bytes) must be smaller than its ceiling (C bytes)",
            names: vec![("(R ", "(3000000 ".into()), ("(C ", "(2000000 ".into())],
            args: s(&["--store-ceiling", "2000000", "--store-reserve", "3000000"]),
        },
        Provoked {
            span: "… at config: the store ceiling (C bytes) is below 1048576 bytes, the least a store is given (a size without a unit is in bytes: write 64GiB, for example)",
            names: vec![("C bytes", "100 bytes".into())],
            args: s(&["--store-ceiling", "100", "--db", &at("tiny-ceiling")]),
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
            span: r#"… at plugins: plugin FILE: [plugins.NAME]: unknown config key "k" (known: …)"#,
            names: vec![("FILE", own_lib.clone()), ("NAME", "workspace".into())],
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
            args: relative_git_state.clone(),
        },
        Provoked {
            span: "… at plugins: plugin FILE: the plugin rejected its config: …",
            names: vec![("FILE", format!("{git}/libworldd_git.so"))],
            args: relative_git_state.clone(),
        },
        Provoked {
            span: "this is the same library as OTHER (both sha256:…), under another file name: remove one",
            names: vec![("OTHER", format!("{twice}/libworldd_workspace.so"))],
            args: s(&["--plugin-dir", &twice]),
        },
        Provoked {
            span: "… at plugins: plugin DIR: --handler NAME: no plugin of that name here (found: …)",
            names: vec![("DIR", workspace.clone()), ("NAME", "nope".into())],
            args: s(&["--plugin-dir", &workspace, "--handler", "nope"]),
        },
        Provoked {
            span: "… at plugins: plugin DIR: [plugins.NAME] (or --plugin-config NAME.KEY=…) names no plugin here; did you mean [plugins.OTHER]? (found: …)",
            names: vec![
                ("DIR", workspace.clone()),
                ("NAME", "workspce".into()),
                ("OTHER", "workspace".into()),
            ],
            args: s(&["--plugin-dir", &workspace, "--plugin-config", "workspce.denyWrite=[]"]),
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
    // Plugins built on their own: one against another handler-api, one shipping a tool
    // document that is no valid transition.
    let foreign = plugins("p-foreign", &[]);
    let foreign_lib = copied(fixtures::incompatible_plugin().library.as_path(), &foreign);
    cases.push(Provoked {
        span: "… at plugins: plugin FILE: incompatible ABI: …",
        names: vec![("FILE", foreign_lib)],
        args: s(&["--plugin-dir", &foreign]),
    });
    let broken = plugins("p-broken-tool", &[]);
    let broken_lib = copied(fixtures::broken_tool_library(), &broken);
    cases.push(Provoked {
        span: "… at plugins: plugin FILE: shipped transition: …",
        names: vec![("FILE", broken_lib)],
        args: s(&["--plugin-dir", &broken]),
    });
    // A plugin whose constructor panics (the misfit plugin, asked to).
    let misfit = plugins("p-misfit-panics", &[]);
    let misfit_lib = copied(fixtures::misfit_library(), &misfit);
    cases.push(Provoked {
        span: "… at plugins: plugin FILE: the plugin's constructor (Plugin::new) panicked: …",
        names: vec![("FILE", misfit_lib)],
        args: s(&[
            "--plugin-dir",
            &misfit,
            "--plugin-config",
            "misfit.panic=true",
        ]),
    });
    // Stores the daemon will not open: another schema, and a schema-1 store it would migrate
    // while another process has it open, or whose head lags its log.
    cases.push(Provoked {
        span: "… at store-open: world store DB is not a directory (a store is a directory holding data.mdb and lock.mdb)",
        names: vec![("DB", at("a-file"))],
        args: s(&["--db", &at("a-file")]),
    });
    // What is left of a store, refused rather than made a new world.
    let emptied = d.join("emptied");
    std::fs::create_dir(&emptied).unwrap();
    std::fs::write(emptied.join("data.mdb"), "").unwrap();
    std::fs::write(emptied.join("lock.mdb"), "").unwrap();
    cases.push(Provoked {
        span: "… at store-open: world store DB has an empty data.mdb: no store was ever written there, or the file was emptied; refusing to make a new store in its place: restore the directory from a backup, or remove it to start a new world",
        names: vec![("DB", emptied.display().to_string())],
        args: s(&["--db", &emptied.display().to_string()]),
    });
    let lost = d.join("lost");
    std::fs::create_dir_all(lost.join("plugin-state")).unwrap();
    std::fs::write(lost.join("lock.mdb"), "").unwrap();
    cases.push(Provoked {
        span: "… at store-open: world store DB has no data.mdb, only FILES: its data file was lost (a restore or copy gone wrong?); refusing to make a new store in its place: restore the directory from a backup, or remove it to start a new world",
        names: vec![
            ("DB", lost.display().to_string()),
            ("FILES", "lock.mdb, plugin-state/".to_owned()),
        ],
        args: s(&["--db", &lost.display().to_string()]),
    });
    std::fs::write(
        d.join("huge-streams.toml"),
        "[server]\nlog_streams = 9000000000000000000\n",
    )
    .unwrap();
    cases.push(Provoked {
        span: "… at config: [server] log_streams is too large (at most 2305843009213693951)",
        names: vec![],
        args: s(&["--config", &at("huge-streams.toml")]),
    });
    let other_schema = d.join("other-schema");
    store_of_schema(&other_schema, "99");
    cases.push(Provoked {
        span: "… at store-open: store schema version …",
        names: vec![],
        args: s(&["--db", &other_schema.display().to_string()]),
    });
    let held = schema_1_copy(&d.join("held"));
    let _holder = hold_open(&held);
    cases.push(Provoked {
        span: "… at store-open: store DIR uses schema 1 and another process has it open; …",
        names: vec![("DIR", held.display().to_string())],
        args: s(&["--db", &held.display().to_string()]),
    });
    let damaged = schema_1_copy(&d.join("damaged"));
    lag_head(&damaged);
    cases.push(Provoked {
        span: "… at store-open: store is damaged: cannot migrate this schema-1 store: …",
        names: vec![],
        args: s(&["--db", &damaged.display().to_string()]),
    });
    // Another store, and the worktrees the serving daemon writes.
    cases.push(Provoked {
        span: "… at config: another worldd already serves the workspace root ROOT (one daemon per workspace root: each records only its own calls to a worktree); give this daemon its own --workspace-root",
        names: vec![("ROOT", serving.root().display().to_string())],
        args: s(&[
            "--db",
            &at("second-db"),
            "--workspace-root",
            &serving.root().display().to_string(),
        ]),
    });
    // A copy of a store that stopped short (a full disk, an interrupted `cp`): its meta pages
    // name pages past the end of the file.
    let cut = d.join("cut");
    std::fs::create_dir(&cut).unwrap();
    let whole = std::fs::read(serving.db().join("data.mdb")).unwrap();
    std::fs::write(cut.join("data.mdb"), &whole[..16 << 10]).unwrap();
    cases.push(Provoked {
        span: "… at store-open: world store DB is damaged: its data.mdb holds N bytes, and its last commit names pages up to byte … (a copy or a disk that stopped short?); restore the directory from a backup",
        // "N bytes", not "N": the path put in for DB may hold an N of its own.
        names: vec![
            ("DB", cut.display().to_string()),
            ("N bytes", "16384 bytes".into()),
        ],
        args: s(&["--db", &cut.display().to_string()]),
    });
    // A disk that fills up while the store is made, or while the shipped tools are published
    // into it: a tmpfs of a few pages (root only, as the store tests' full disks).
    let small_disks = [
        (8 << 10, "… at store-open: disk full: …"),
        (112 << 10, "… at registry-bootstrap: …"),
    ];
    let mut disks = Vec::new();
    for (bytes, span) in small_disks {
        let Some(fs) = Tmpfs::mount(bytes) else {
            eprintln!("*** not root: the row {span:?} (a full disk) is not caused ***");
            continue;
        };
        let on = |p: &str| fs.dir.path().join(p).display().to_string();
        cases.push(Provoked {
            span,
            names: vec![],
            args: s(&["--db", &on("db"), "--workspace-root", &on("wt")]),
        });
        disks.push(fs);
    }
    // A real shared library that is no plugin, where the system has one.
    if let Some(libm) = [
        "/lib/x86_64-linux-gnu/libm.so.6",
        "/usr/lib/x86_64-linux-gnu/libm.so.6",
        "/lib64/libm.so.6",
    ]
    .into_iter()
    .find(|p| std::path::Path::new(p).exists())
    {
        let dir = plugins("p-libm", &[]);
        let lib = format!("{dir}/libm.so");
        std::fs::copy(libm, &lib).unwrap();
        cases.push(Provoked {
            span: "… at plugins: plugin FILE: not a worldd plugin: it exports no abi_stable 0.11 root module (…)",
            names: vec![("FILE", lib)],
            args: s(&["--plugin-dir", &dir]),
        });
    } else {
        eprintln!(
            "*** no libm.so.6 here: the row of a library that is no plugin is not caused ***"
        );
    }
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

    // Rows caused through a runner in front of the binary: a store on a network filesystem (the
    // kernel's answer faked by a preloaded `statfs`), and, root only, a store another user
    // owns, opened by `nobody` (a copy of the binary it may run).
    let mut by_runner = Vec::new();
    let shim = nfs_shim(d);
    let nfs = d.join("nfs");
    std::fs::create_dir(&nfs).unwrap();
    let on_nfs: Vec<std::ffi::OsString> = vec![
        "env".into(),
        format!("LD_PRELOAD={}", shim.display()).into(),
        format!("SHIM_NFS_UNDER={}", nfs.display()).into(),
        WORLDD.into(),
    ];
    by_runner.push((
        on_nfs,
        Provoked {
            span: "… at store-open: world store DB lies on a network filesystem (nfs): LMDB shares its locks and its map only between processes of one host, …",
            names: vec![(
                "store DB lies",
                format!("store {} lies", nfs.join("db").display()),
            )],
            args: s(&["--db", &nfs.join("db").display().to_string()]),
        },
    ));
    // Mistakes in a manifest, each made by the misfit plugin as its environment asks; the
    // placeholders that could occur in a temporary directory's name are put in last.
    let misfit_runs = |changes: serde_json::Value| -> Vec<std::ffi::OsString> {
        vec![
            "env".into(),
            format!("WORLDD_MISFIT_MANIFEST={changes}").into(),
            WORLDD.into(),
        ]
    };
    let misfit_in = |name: &str, with: &[&str]| {
        let dir = plugins(name, with);
        let lib = copied(fixtures::misfit_library(), &dir);
        (dir, lib)
    };
    let (undeclared, undeclared_lib) = misfit_in("p-undeclared", &[]);
    by_runner.push((
        misfit_runs(serde_json::json!({"transitions": [fixtures::misfit_tool("Misfit.Do", "Misfit.Delete")]})),
        Provoked {
            span: r#"… at plugins: plugin FILE: shipped transition "ID" names effect E, which plugin NAME does not declare (it declares …)"#,
            names: vec![
                ("effect E,", "effect Misfit.Delete,".into()),
                ("plugin NAME", "plugin misfit".into()),
                (r#""ID""#, r#""misfit-do""#.into()),
                ("FILE", undeclared_lib),
            ],
            args: s(&["--plugin-dir", &undeclared]),
        },
    ));
    let (wrong_op, wrong_op_lib) = misfit_in("p-wrong-op", &[]);
    by_runner.push((
        misfit_runs(serde_json::json!({"transitions": [fixtures::misfit_tool(r#"{"const":"do"}"#, r#"{"const":"od"}"#)]})),
        Provoked {
            span: r#"… at plugins: plugin FILE: shipped transition "ID" sends E the op …: the daemon would refuse every call"#,
            names: vec![
                (" E the", " Misfit.Do the".into()),
                (r#""ID""#, r#""misfit-do""#.into()),
                ("FILE", wrong_op_lib),
            ],
            args: s(&["--plugin-dir", &wrong_op]),
        },
    ));
    let (bad_schema, bad_schema_lib) = misfit_in("p-bad-schema", &[]);
    by_runner.push((
        misfit_runs(serde_json::json!({"configSchema": {"additionalPropertes": false}})),
        Provoked {
            span: "… at plugins: plugin FILE: configSchema of plugin NAME: …",
            names: vec![
                ("plugin NAME", "plugin misfit".into()),
                ("FILE", bad_schema_lib),
            ],
            args: s(&["--plugin-dir", &bad_schema]),
        },
    ));
    let (bad_name, bad_name_lib) = misfit_in("p-bad-name", &[]);
    by_runner.push((
        misfit_runs(serde_json::json!({"name": "My Notes!"})),
        Provoked {
            span: "… at plugins: plugin FILE: manifest name … is not a plugin name: it must match ^[a-z0-9][a-z0-9-]{0,63}$ (operators type it in --handler NAME and [plugins.NAME])",
            names: vec![("FILE", bad_name_lib)],
            args: s(&["--plugin-dir", &bad_name]),
        },
    ));
    let (taken_name, taken_name_lib) = misfit_in("p-taken-name", &[]);
    let echo_lib = copied(fixtures::echo_library(), &taken_name);
    by_runner.push((
        misfit_runs(serde_json::json!({"name": "echo"})),
        Provoked {
            span: "… at plugins: plugin FILE: plugin name NAME is also the name of OTHER: …",
            names: vec![
                ("name NAME", "name echo".into()),
                ("FILE", taken_name_lib.clone()),
                ("OTHER", echo_lib.clone()),
            ],
            args: s(&["--plugin-dir", &taken_name]),
        },
    ));
    by_runner.push((
        misfit_runs(serde_json::json!({"transitions": [fixtures::misfit_tool("misfit-do", "echo-say")]})),
        Provoked {
            span: r#"… at plugins: plugin DIR: shipped transition "ID" is shipped by two plugins, NAME (FILE) and OTHER (…): …"#,
            names: vec![
                (r#""ID""#, r#""echo-say""#.into()),
                ("NAME (FILE)", format!("echo ({echo_lib})")),
                ("OTHER", "misfit".into()),
                ("DIR", taken_name.clone()),
            ],
            args: s(&["--plugin-dir", &taken_name]),
        },
    ));
    // Two plugins of different names claiming one effect: the misfit plugin declares the
    // workspace plugin's, and is named first (by file name).
    let (claims, claims_lib) = misfit_in("p-claims", &["worldd_workspace"]);
    by_runner.push((
        misfit_runs(serde_json::json!({
            "effects": [{"name": "Workspace.Read", "class": "read", "ops": ["read"]}],
            "transitions": []
        })),
        Provoked {
            span: "… at plugins: plugin DIR: effect E is claimed by two plugins, NAME (FILE) and OTHER (…): an effect has one handler; remove one of the two libraries from the plugin directory, or leave one of them out …",
            names: vec![
                (" E ", " Workspace.Read ".into()),
                ("NAME (FILE)", format!("misfit ({claims_lib})")),
                ("OTHER", "workspace".into()),
                ("DIR", claims.clone()),
            ],
            args: s(&["--plugin-dir", &claims]),
        },
    ));
    // A store on a read-only mount: root only.
    let mut mounts = Vec::new();
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        use std::os::unix::fs::PermissionsExt;
        let open = |p: &Path, mode| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap()
        };
        let others = d.join("others");
        std::fs::create_dir(&others).unwrap();
        open(d, 0o755);
        open(&others, 0o755);
        let bin = others.join("worldd");
        std::fs::copy(WORLDD, &bin).unwrap();
        let theirs = others.join("db");
        drop(broker_core::store::Store::create(&theirs).unwrap());
        for file in ["data.mdb", "lock.mdb"] {
            open(&theirs.join(file), 0o644);
        }
        open(&theirs, 0o755);
        let plugins_for_nobody = others.join("plugins");
        std::fs::create_dir(&plugins_for_nobody).unwrap();
        std::fs::create_dir(others.join("wt")).unwrap();
        std::os::unix::fs::chown(others.join("wt"), Some(65534), None).unwrap();
        let runuser: Vec<std::ffi::OsString> = vec![
            "runuser".into(),
            "-u".into(),
            "nobody".into(),
            "--".into(),
            bin.into_os_string(),
        ];
        by_runner.push((
            runuser,
            Provoked {
                span: "… at store-open: store I/O error: FILE: Permission denied (os error 13) (owned by uid U, mode 0644; this process runs as uid N): run worldd as the store's owner, or give this user read and write access to the directory and its files",
                names: vec![
                    ("FILE", theirs.join("lock.mdb").display().to_string()),
                    ("uid U", "uid 0".into()),
                    ("uid N", "uid 65534".into()),
                ],
                args: s(&[
                    "--db",
                    &theirs.display().to_string(),
                    "--workspace-root",
                    &others.join("wt").display().to_string(),
                    "--plugin-dir",
                    &plugins_for_nobody.display().to_string(),
                ]),
            },
        ));
        let read_only = d.join("read-only");
        std::fs::create_dir(&read_only).unwrap();
        let source = d.join("read-only-source");
        drop(broker_core::store::Store::create(&source).unwrap());
        if let Some(mount) = BindMount::read_only(&source, &read_only) {
            cases.push(Provoked {
                span: "… at store-open: store I/O error: DB: Read-only file system (os error 30): worldd opens a store for reading and writing, so it cannot open one on a read-only filesystem (copy the directory to a writable disk)",
                names: vec![("DB", read_only.display().to_string())],
                args: s(&["--db", &read_only.display().to_string()]),
            });
            mounts.push(mount);
        }
    } else {
        eprintln!("*** not root: the rows of a store another user owns, or on a read-only mount, are not caused ***");
    }

    let mut wrong = Vec::new();
    let by_worldd = cases.iter().map(|case| (None, case));
    let by_others = by_runner.iter().map(|(runner, case)| (Some(runner), case));
    for (runner, case) in by_worldd.chain(by_others) {
        assert!(
            rows.iter().flatten().any(|span| span == case.span),
            "the table has no line {:?}",
            case.span
        );
        // `… at STAGE: …` is the whole line; a span without its stage is the line's end.
        let line = match case.span.strip_prefix("… at ") {
            Some(rest) => format!("worldd: daemon startup failed at {rest}"),
            None if case.span.starts_with('…') => {
                format!("worldd: daemon startup failed at {}", case.span)
            }
            None => format!("worldd: daemon startup failed at …{}", case.span),
        };
        let line = named(&line, case.span, &case.names);
        let cwd = tempfile::tempdir().unwrap();
        let mut args = case.args.clone();
        if !args.contains(&"--bind".to_owned()) {
            args.extend(s(&["--bind", "127.0.0.1:0"]));
        }
        if !args.contains(&"--plugin-dir".to_owned()) {
            args.extend(s(&["--plugin-dir", &workspace]));
        }
        // A daemon that starts instead is stopped and reported.
        let refusal = match runner {
            Some(argv) => {
                let mut command = Command::new(&argv[0]);
                command.args(&argv[1..]);
                refused_start_by(command, &args, cwd.path())
            }
            None => refused_start(&args, cwd.path()),
        };
        if refusal.code != Some(2)
            || !transcript::matches(std::slice::from_ref(&line), &[refusal.line.as_str()])
        {
            wrong.push(format!(
                "{:?}\n  expected (exit 2): {line}\n  printed (exit {:?}): {}",
                case.span,
                refusal.code,
                refusal.stderr.trim_end()
            ));
        }
    }
    let caused = cases.len() + by_runner.len();
    drop((taken, serving, disks, mounts));
    assert!(
        wrong.is_empty(),
        "rows that are not what the daemon prints:\n{}",
        wrong.join("\n")
    );
    let spans: usize = rows.iter().map(Vec::len).sum();
    eprintln!("{caused} of the table's {spans} lines caused and matched");
}

/// `lib` copied into `dir`; its path there.
fn copied(lib: &Path, dir: &str) -> String {
    let to = Path::new(dir).join(lib.file_name().unwrap());
    std::fs::copy(lib, &to).unwrap();
    to.display().to_string()
}

/// The schema-1 store broker-core's migration tests keep, copied to `db`.
fn schema_1_copy(db: &Path) -> PathBuf {
    std::fs::create_dir_all(db).unwrap();
    let fixture = repo_root().join("broker-core/tests/fixtures/store-v1/data.mdb");
    std::fs::copy(fixture, db.join("data.mdb")).unwrap();
    db.to_path_buf()
}

/// A store whose meta table says it is of schema `version` and holds nothing else.
fn store_of_schema(db: &Path, version: &str) {
    std::fs::create_dir_all(db).unwrap();
    tamper(db, "meta", |wtxn, meta| {
        meta.put(wtxn, b"schema_version", version.as_bytes())
            .unwrap()
    });
}

/// Point the schema-1 store's head at its first world, behind the log's last entry.
fn lag_head(db: &Path) {
    let expected: serde_json::Value = serde_json::from_slice(
        &std::fs::read(repo_root().join("broker-core/tests/fixtures/store-v1/expected.json"))
            .unwrap(),
    )
    .unwrap();
    let first = expected["entries"][0]["worldRef"].as_str().unwrap();
    let first = hex::decode(first.strip_prefix("sha256:").unwrap()).unwrap();
    tamper(db, "heads", |wtxn, heads| {
        heads.put(wtxn, b"selected", &first).unwrap()
    });
}

/// Hold the store at `db` open as any process with its LMDB environment open does: a read
/// lock on the first byte of `lock.mdb`, held until the returned file is dropped. (This test
/// process never opens the environment itself, so the daemon, another process, sees the lock.)
fn hold_open(db: &Path) -> std::fs::File {
    use std::os::fd::AsRawFd;
    // lock.mdb made by LMDB itself: the environment opened and closed again.
    {
        // SAFETY: no other handle on `db` is open in this process, and no daemon runs on it.
        let env = unsafe { heed::EnvOpenOptions::new().max_dbs(32).open(db).unwrap() };
        env.prepare_for_closing().wait();
    }
    let lock = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(db.join("lock.mdb"))
        .unwrap();
    // SAFETY: `flock` is a plain C struct for which all-zero is a valid value.
    let mut l: libc::flock = unsafe { std::mem::zeroed() };
    l.l_type = libc::F_RDLCK as libc::c_short;
    l.l_whence = libc::SEEK_SET as libc::c_short;
    l.l_len = 1;
    // SAFETY: `lock` is open for the call, and `l` a valid `flock` F_SETLK only reads.
    let rc = unsafe { libc::fcntl(lock.as_raw_fd(), libc::F_SETLK, &l) };
    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
    lock
}

/// The keys `[table]` of the config file accepts, as the daemon lists them when it refuses one
/// it does not know.
fn accepted_keys(table: &str) -> BTreeSet<String> {
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
        .map(|l| transcript::code_spans(l.split(" | ").next().unwrap()))
        .collect()
}

/// The operator guide's tables of settings are the daemon's: every key `[serve]`, `[server]`
/// and `[limits]` accept has its row, no row names a key the daemon refuses, and every flag the
/// tables give is one `worldd serve` takes. A setting added, renamed or dropped in the code
/// fails this test until the guide says so.
#[test]
fn the_operator_guides_settings_tables_are_the_keys_and_flags_the_daemon_takes() {
    let page = operator_guide();
    let keys = |cells: Vec<Vec<String>>| -> BTreeSet<String> {
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
    let mut serve_keys = BTreeSet::new();
    let mut flags = Vec::new();
    let mut old_flags = Vec::new();
    for row in flags_table.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = row.split(" | ").collect();
        for span in transcript::code_spans(cells[1]) {
            let key = span.strip_prefix("serve.").unwrap_or(&span);
            if span.starts_with("serve.") || cells[1].contains("old name") {
                serve_keys.insert(key.to_owned());
            }
        }
        let (now, old) = cells[0].split_once("(old name").unwrap_or((cells[0], ""));
        flags.extend(transcript::code_spans(now));
        old_flags.extend(transcript::code_spans(old));
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
            flags.extend(transcript::code_spans(row.split(" | ").nth(1).unwrap()));
        }
    }
    let help = Command::new(WORLDD)
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    let flags: BTreeSet<&str> = flags
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
    let page = operator_guide();
    let section = transcript::section(&page, "## Metrics");
    let documented: BTreeSet<(String, String)> = section
        .lines()
        .filter(|l| l.starts_with("| `worldd_"))
        .map(|l| {
            let cells: Vec<&str> = l.split(" | ").collect();
            (
                transcript::code_spans(cells[0]).remove(0),
                cells[1].trim().to_owned(),
            )
        })
        .collect();
    let d = Daemon::start(&["worldd_workspace"], &[]);
    let text = get(&d.url("/v1/metrics"), None).text();
    let exported: BTreeSet<(String, String)> = text
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

/// One line of the guide's log table, and what its placeholders stand for here.
struct Logged {
    level: &'static str,
    span: &'static str,
    names: Vec<(&'static str, String)>,
}

/// The guide's table of log lines is what the daemon logs: each line a test can cause (a plugin
/// loaded, declined, skipped, or none at all; the tools published; the git plugin's author; a
/// call; a call refused by rule R8; refused credentials; the shutdown) is caused, and some line
/// of the daemon's stderr must be it, at its level, with `…` any text and the row's placeholders
/// what they stand for here.
#[test]
fn the_operator_guides_log_lines_are_what_the_daemon_logs() {
    let page = operator_guide();
    let section = transcript::section(&page, "## Logs");
    let rows: Vec<(String, Vec<String>)> = section
        .lines()
        .filter(|l| l.starts_with("| INFO") || l.starts_with("| WARN") || l.starts_with("| ERROR"))
        .map(|l| {
            let cells: Vec<&str> = l.split(" | ").collect();
            (
                cells[0].trim_start_matches("| ").to_owned(),
                transcript::code_spans(cells[1]),
            )
        })
        .collect();
    assert!(rows.len() > 15, "the table has only {} rows", rows.len());

    // A daemon with the workspace, ailang (no binary: it declines) and git (an author from git's
    // configuration) plugins; a read, a call refused by R8, refused credentials, SIGTERM.
    let home = tempfile::tempdir().unwrap();
    let gitconfig = home.path().join("gitconfig");
    std::fs::write(
        &gitconfig,
        "[user]\n\tname = Ada Lovelace\n\temail = ada@example.com\n",
    )
    .unwrap();
    let gitconfig = gitconfig.display().to_string();
    let d = Daemon::start_env(
        &["worldd_workspace", "worldd_ailang", "worldd_git"],
        &[],
        &[
            ("GIT_CONFIG_GLOBAL", &gitconfig),
            ("GIT_CONFIG_NOSYSTEM", "1"),
            ("WORLDD_LOG", "info"),
        ],
    );
    let token = d.session(
        "demo",
        &["Workspace.Read=worktree:5", "Ailang.Check=worktree:5"],
    );
    std::fs::write(d.root().join("demo/hello.txt"), "hi").unwrap();
    let read = mcp(
        &d,
        &token,
        "tools/call",
        serde_json::json!({"name": "ailang-read", "arguments": {"path": "hello.txt"}}),
    );
    assert_eq!(read.status, 200);
    let _ = mcp(
        &d,
        &token,
        "tools/call",
        serde_json::json!({"name": "ailang-check", "arguments": {"path": "hello.txt"}}),
    );
    let unknown = "0".repeat(64);
    assert_eq!(get(&d.url("/v1/head"), Some(&unknown)).status, 401);
    assert_eq!(get(&d.url("/v1/head"), None).status, 401);
    let (status, _, mut log, _dir) = d.stop_with_log(std::time::Duration::from_secs(10));
    assert!(status.success());

    // A daemon with no plugin, and one with a selection beside a library that is no plugin.
    let (_, empty) = Daemon::start(&[], &[]).halt_with_log();
    log.push_str(&empty);
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Daemon::serve_command(&dir, &["worldd_workspace"]);
    let stale = dir.path().join("plugins/libstale.so");
    std::fs::write(&stale, "x").unwrap();
    cmd.args(["--handler", "workspace"]);
    let (_, selected) = Daemon::spawn(dir, cmd).halt_with_log();
    log.push_str(&selected);

    let cases = [
        Logged { level: "INFO", span: "loaded plugin plugin=workspace version=0.1.0 path=…", names: vec![] },
        Logged { level: "INFO", span: "published plugin transitions revision=N changed=true", names: vec![("=N ", "=1 ".into())] },
        Logged { level: "WARN", span: "plugin NAME not started: declined: …", names: vec![("NAME", "ailang".into())] },
        Logged { level: "WARN", span: "no plugin loaded from DIR: every tool call will be refused (rule R8). …", names: vec![("DIR", "…".into())] },
        Logged {
            level: "INFO",
            span: "git plugin: commits are authored by Name <email>, the identity … gives here (…) plugin=git",
            names: vec![("Name <email>", "Ada Lovelace <ada@example.com>".into())],
        },
        Logged {
            level: "INFO",
            span: "call tool=ailang-read episode=demo outcome=ok ms=3",
            names: vec![("ms=3", "ms=…".into())],
        },
        Logged { level: "WARN", span: "refused a request: unknown session credential", names: vec![] },
        Logged { level: "WARN", span: "… is absent", names: vec![] },
        Logged { level: "WARN", span: "skipping plugin FILE: <cause>", names: vec![("FILE", stale.display().to_string()), ("<cause>", "…".into())] },
        Logged {
            level: "WARN",
            span: "mcp tools/call: host callback <failed\\|timed out\\|canceled>: <cause> episode=… tool=… rpc_id=…",
            names: vec![("<failed\\|timed out\\|canceled>", "failed".into()), ("<cause>", "…".into())],
        },
        Logged { level: "INFO", span: "shutting down: draining in-flight calls", names: vec![] },
    ];
    let lines: Vec<&str> = log.lines().collect();
    let mut wrong = Vec::new();
    for case in &cases {
        assert!(
            rows.iter()
                .any(|(level, spans)| level.contains(case.level)
                    && spans.iter().any(|s| s == case.span)),
            "the table has no {} line {:?}",
            case.level,
            case.span
        );
        let line = named(case.span, case.span, &case.names);
        // The level, then the line; a line the table starts with `…` may start anyhow.
        let pattern = match line.strip_prefix('…') {
            Some(rest) => format!("…{} …{rest}", case.level),
            None => format!("…{} {line}", case.level),
        };
        if !lines
            .iter()
            .any(|l| transcript::matches(std::slice::from_ref(&pattern), &[l]))
        {
            wrong.push(format!("{} {:?} (as {pattern:?})", case.level, case.span));
        }
    }
    assert!(
        wrong.is_empty(),
        "lines the daemon did not log:\n{}\n--- its log:\n{log}",
        wrong.join("\n")
    );
    eprintln!(
        "{} of the table's lines caused and found in the log",
        cases.len()
    );
}

/// The operator guide's example of an unknown `[serve]` key is the daemon's own message, word
/// for word: the list of keys it names cannot fall behind the keys the daemon takes.
#[test]
fn the_operator_guides_unknown_key_example_is_what_the_daemon_prints() {
    let guide = operator_guide();
    let start = guide
        .find("  worldd: daemon startup failed at config: world.toml: TOML parse error")
        .expect("the guide's example");
    let example: Vec<&str> = guide[start..]
        .lines()
        .take_while(|l| !l.trim_start().starts_with("```"))
        .map(|l| l.strip_prefix("  ").unwrap_or(l))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("world.toml");
    std::fs::write(&config, "[serve]\nfoo = 1\n").unwrap();
    let out = Command::new(WORLDD)
        .arg("serve")
        .arg("--config")
        .arg(&config)
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let printed: Vec<&str> = stderr.trim_end().lines().collect();
    // The message names the file as it was given; the guide calls it world.toml.
    let printed: Vec<String> = printed
        .iter()
        .map(|l| l.replace(&config.display().to_string(), "world.toml"))
        .collect();
    assert_eq!(printed, example, "{stderr}");
}

/// The operator guide's short configuration (its one `toml` block) is one the daemon takes:
/// `worldd handlers --config` reads it as `serve` would, `[serve]` and `[limits]` keys and every
/// `[plugins.NAME]` table checked against the shipped plugins' schemas, and finds no problem.
#[test]
fn the_operator_guides_example_configuration_is_accepted_as_written() {
    let guide = operator_guide();
    let mut blocks = guide.split("```toml\n").skip(1);
    let block = blocks.next().expect("the guide's configuration");
    assert!(blocks.next().is_none(), "the guide has one toml block");
    let config_text = &block[..block.find("```").unwrap()];
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("world.toml");
    std::fs::write(&config, config_text).unwrap();
    let plugins = plugin_dir_with(
        dir.path(),
        &[
            "worldd_workspace",
            "worldd_ailang",
            "worldd_git",
            "worldd_registry",
        ],
    );
    let (code, out, err) = worldd(
        &[
            "handlers",
            "--plugin-dir",
            path_str(&plugins),
            "--config",
            path_str(&config),
        ],
        None,
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(!out.contains("problem:"), "{out}");
    // The three handlers it names are the ones listed, with the guide's settings.
    for name in ["workspace 0.1.0", "git 0.1.0", "registry 0.1.0"] {
        assert!(out.contains(name), "{name}: {out}");
    }
    assert!(
        out.contains(r#""author":"World Agent <agent@example.com>""#),
        "{out}"
    );
}
