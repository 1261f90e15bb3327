//! `session mint` takes `--preset` and `--budget` as `session new` does: re-issuing an episode's
//! se-tools credential took eight `--grant` flags.

mod common;

use common::*;

/// The grants of the one credential `session list --json` lists in `db`.
fn listed_grants(db: &std::path::Path) -> Vec<String> {
    let (code, out, err) = worldd(&["session", "list", "--json", "--db", path_str(db)], None);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 1, "{v}");
    v[0]["grants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g.as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn session_mint_grants_a_preset_with_grants_over_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    drop(broker_core::store::Store::create(&db).unwrap());
    std::fs::create_dir_all(dir.path().join("wt/demo")).unwrap();
    let (code, shown) = mint_at_terminal(
        &db,
        &format!(
            "--episode demo --preset se-tools --budget 7 --grant Workspace.Read=worktree:3 --workspace-root {} --out {}",
            dir.path().join("wt").display(),
            dir.path().join("demo.session").display()
        ),
    );
    assert_eq!(code, 0, "{shown}");
    assert_eq!(
        listed_grants(&db),
        [
            "Workspace.Write=worktree:7",
            "Ailang.Check=worktree:7",
            "Ailang.Run=worktree:7",
            "Ailang.RunEnv=worktree:7",
            "Ailang.RunNet=worktree:7",
            "Ailang.Discover=worktree:7",
            "Ailang.CLI=worktree:7",
            "Workspace.Read=worktree:3",
        ]
    );
}

#[test]
fn session_mint_refuses_an_unknown_preset_and_no_grant_at_all() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    drop(broker_core::store::Store::create(&db).unwrap());
    for (args, expected) in [
        (
            "--episode demo --preset se-tool",
            "worldd: unknown --preset \"se-tool\"; known: se-tools",
        ),
        (
            "--episode demo",
            "worldd: at least one --grant EFFECT=SCOPE:BUDGET is required",
        ),
        (
            "--episode demo --preset se-tools --grant Ailang.Run=worktree:1 --grant Ailang.Run=worktree:2",
            "worldd: --grant Ailang.Run=worktree:1 and --grant Ailang.Run=worktree:2 both grant Ailang.Run at scope worktree: give each effect and scope once",
        ),
    ] {
        let (code, shown) = mint_at_terminal(&db, args);
        assert_eq!(code, 1, "{shown}");
        assert_eq!(said(&shown, "y"), [expected.to_owned()], "{args}");
    }
}
