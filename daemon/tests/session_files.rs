//! Session credential files, through the real binary at a real terminal (`script` gives the
//! child a pty to confirm on): created 0600, replaced atomically, never written through a
//! symbolic link. Each test is named for the attack it pins.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::*;

/// `worldd session mint … --out <out>`, answering `y` at the terminal; (success, output).
fn mint_to(db: &Path, out: &Path) -> (bool, String) {
    let args = format!(
        "--episode ep1 --grant Workspace.Read=worktree:3 --out {}",
        out.display()
    );
    let (code, shown) = mint_at_terminal(db, &args);
    (code == 0, shown)
}

fn sessions(db: &Path) -> String {
    let (code, out, err) = worldd(&["session", "list", "--db", path_str(db)], None);
    assert_eq!(code, 0, "{err}");
    out
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn session_mint_onto_an_existing_0644_file_replaces_it_with_a_0600_one() {
    let d = Daemon::start(&["worldd_workspace"], &[]);
    let out = d.dir.path().join("ep1.session");
    std::fs::write(&out, "old\n").unwrap();
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (ok, text) = mint_to(&d.db(), &out);
    assert!(ok, "{text}");
    assert_eq!(mode(&out), 0o600);
    let token = std::fs::read_to_string(&out).unwrap();
    assert_eq!(token.trim().len(), 64, "{token}");
    assert!(sessions(&d.db())
        .trim_end()
        .ends_with("1 session credential(s)"));
    // No temporary file is left beside it.
    let names: Vec<String> = std::fs::read_dir(d.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("ep1.session"))
        .collect();
    assert_eq!(names, vec!["ep1.session".to_string()]);
}

#[test]
fn session_mint_onto_a_symlink_is_refused_and_mints_nothing() {
    let d = Daemon::start(&["worldd_workspace"], &[]);
    let victim = d.dir.path().join("victim.txt");
    std::fs::write(&victim, "victim\n").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = d.dir.path().join("ep1.session");
    std::os::unix::fs::symlink(&victim, &out).unwrap();
    let (ok, text) = mint_to(&d.db(), &out);
    assert!(!ok, "{text}");
    assert!(
        text.contains(&format!(
            "refusing to write the credential to {}: it is a symbolic link (a credential is never written through a link; name the file itself)",
            out.display()
        )),
        "{text}"
    );
    // Refused before the confirmation: nothing was asked, nothing minted, nothing written.
    assert!(!text.contains("Confirm mint"), "{text}");
    assert!(sessions(&d.db())
        .trim_end()
        .ends_with("0 session credential(s)"));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "victim\n");
    assert_eq!(mode(&victim), 0o644);
    assert!(std::fs::symlink_metadata(&out)
        .unwrap()
        .file_type()
        .is_symlink());
}

/// `--out nodir/ep9.session` was asked, answered `y`, and only then refused: a directory that
/// does not exist (or is a file) is refused before the question, and nothing is made.
#[test]
fn session_new_out_into_a_missing_directory_is_refused_before_the_question() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    drop(broker_core::store::Store::create(&db).unwrap());
    let root = dir.path().join("worktrees");
    let out = dir.path().join("nodir/ep9.session");
    let (code, shown) = at_terminal(
        &format!(
            "{WORLDD} session new ep9 --db {} --workspace-root {} --preset se-tools --out {}",
            db.display(),
            root.display(),
            out.display()
        ),
        b"y\n",
    );
    assert_eq!(code, 1, "{shown}");
    assert!(
        shown.contains(&format!(
            "worldd: cannot write {}: the directory {} does not exist (create it first, or name a file in an existing directory)",
            out.display(),
            dir.path().join("nodir").display()
        )),
        "{shown}"
    );
    assert!(!shown.contains("Confirm mint"), "{shown}");
    assert!(!root.join("ep9").exists());
    std::fs::write(dir.path().join("afile"), "").unwrap();
    let under_a_file = dir.path().join("afile/ep9.session");
    let (code, shown) = mint_at_terminal(
        &db,
        &format!(
            "--episode ep9 --grant Workspace.Read=worktree:1 --out {}",
            under_a_file.display()
        ),
    );
    assert_eq!(code, 1, "{shown}");
    assert!(
        shown.contains(&format!(
            "worldd: cannot write {}: {} is not a directory",
            under_a_file.display(),
            dir.path().join("afile").display()
        )),
        "{shown}"
    );
    assert!(sessions(&db)
        .trim_end()
        .ends_with("0 session credential(s)"));
}

/// `session revoke` given the credential itself echoed the secret on stderr; given a session
/// file or an id's first eight digits it refused. The credential is revoked by its id and
/// never printed; a file is read; a prefix is answered with the whole id to give.
#[test]
fn session_revoke_given_the_credential_a_file_or_a_prefix_never_prints_the_secret() {
    let d = Daemon::start(&["worldd_workspace"], &[]);
    let db = d.db();
    let revoke = |what: &str| worldd(&["session", "revoke", "--db", path_str(&db), what], None);
    // The credential itself.
    let token = d.session("one", &["Workspace.Read=worktree:1"]);
    let id = broker_core::session::credential_id(&token);
    let (code, out, err) = revoke(&token);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        format!("revoked session credential {id} (given the credential itself, not its id: keep credentials out of command lines)\n")
    );
    assert!(!out.contains(&token) && !err.contains(&token));
    // Again: it is gone, and the value is still not printed.
    let (code, out, err) = revoke(&token);
    assert_eq!((code, out.as_str()), (1, ""));
    assert_eq!(
        err,
        format!("worldd: refusing: no session credential {}… in {}, by that id or as the credential itself (already revoked, or minted in another store); nothing was revoked (only the first 8 digits are shown: the value may be a credential)\n", &token[..8], db.display())
    );
    assert!(!err.contains(&token));
    // A session file.
    let token = d.session("two", &["Workspace.Read=worktree:1"]);
    let id = broker_core::session::credential_id(&token);
    let file = d.session_file("two", &token);
    let (code, out, err) = revoke(path_str(&file));
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        format!(
            "revoked session credential {id} (the credential in {})\n",
            file.display()
        )
    );
    // The first eight digits of a live id.
    let token = d.session("three", &["Workspace.Read=worktree:1"]);
    let id = broker_core::session::credential_id(&token);
    let (code, out, err) = revoke(&id[..8]);
    assert_eq!((code, out.as_str()), (1, ""));
    assert_eq!(
        err,
        format!("worldd: refusing: {} is the start of credential {id} (episode three); give the whole id: worldd session revoke {id}\n", &id[..8])
    );
    assert!(sessions(&db).contains(&id));
}

/// An expired credential authenticates nothing, but its record stayed until revoked one by
/// one: a store that mints a credential per agent run gathered them for good (567 bytes each,
/// every one listed). `session revoke --expired` removes every expired record, and only those.
#[test]
fn expired_credentials_are_revoked_together_and_live_ones_are_kept() {
    let d = Daemon::start(&["worldd_workspace"], &[]);
    let db = d.db();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let (old, old_id) = {
        let store = broker_core::store::Store::open(&db, Default::default()).unwrap();
        let grants = vec!["Workspace.Read=worktree:1".parse().unwrap()];
        // Minted two hours ago for one hour.
        let minted = broker_core::session::mint(&store, "old", grants, 3600, now - 7200).unwrap();
        (
            minted.token.clone(),
            broker_core::session::credential_id(&minted.token),
        )
    };
    let live = d.session("live", &["Workspace.Read=worktree:1"]);
    let expired = get(&d.url("/v1/budget"), Some(&old));
    assert_eq!(expired.status, 401, "{}", expired.text());
    let revoke = |args: &[&str]| {
        let mut all = vec!["session", "revoke", "--db", path_str(&db)];
        all.extend_from_slice(args);
        worldd(&all, None)
    };
    // Its expiry as `session list` gives it.
    let (code, listed, err) = worldd(&["session", "list", "--db", path_str(&db), "--json"], None);
    assert_eq!(code, 0, "{err}");
    let listed: serde_json::Value = serde_json::from_str(&listed).unwrap();
    let expiry = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["credentialId"] == old_id.as_str())
        .map(|s| s["expiresAt"].as_str().unwrap().to_owned())
        .unwrap();
    let (code, out, err) = revoke(&["--expired"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        format!("revoked session credential {old_id} (episode old, expired {expiry})\n")
    );
    let listed = sessions(&db);
    assert!(!listed.contains(&old_id), "{listed}");
    assert!(
        listed.contains(&broker_core::session::credential_id(&live)),
        "{listed}"
    );
    assert_eq!(get(&d.url("/v1/budget"), Some(&live)).status, 200);
    // The record is gone: the daemon no longer knows the credential.
    let gone = get(&d.url("/v1/budget"), Some(&old));
    assert_eq!(gone.status, 401);
    assert!(
        gone.text().contains("unknown session credential"),
        "{}",
        gone.text()
    );
    // None left: a periodic clean-up is told so, and succeeds.
    let (code, out, err) = revoke(&["--expired"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        format!(
            "no session credential in {} has expired; nothing was revoked\n",
            db.display()
        )
    );
    // One way at a time.
    let (code, out, err) = revoke(&["--expired", "--episode", "live"]);
    assert_eq!((code, out.as_str()), (1, ""));
    assert_eq!(
        err,
        "worldd: give one of: a credential id, --episode EP, --expired\n"
    );
}

/// A credential copied in upper case passed every shape check (the header, `--session` files,
/// the workbench's form) and was then "unknown" everywhere, its holder told to mint a new one;
/// `session revoke` of it refused while revoking its upper-case id worked. Hex is read without
/// regard to case: the upper-case copy is the same credential.
#[test]
fn a_credential_written_in_upper_case_is_the_same_credential() {
    let d = Daemon::start(&["worldd_workspace"], &[]);
    let db = d.db();
    let token = d.session("up", &["Workspace.Read=worktree:1"]);
    let upper = token.to_uppercase();
    assert_ne!(upper, token);
    let budget = get(&d.url("/v1/budget"), Some(&upper));
    assert_eq!(budget.status, 200, "{}", budget.text());
    assert_eq!(budget.json()["episode"], "up", "{}", budget.text());
    let id = broker_core::session::credential_id(&token);
    let (code, out, err) = worldd(&["session", "revoke", "--db", path_str(&db), &upper], None);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        format!("revoked session credential {id} (given the credential itself, not its id: keep credentials out of command lines)\n")
    );
    assert_eq!(get(&d.url("/v1/budget"), Some(&token)).status, 401);
}

/// A shipped effect at a scope its tools do not use (`worktree/src`, a scope read as a path:
/// "writes under src/ only") was minted without a word, and gave the agent no tool at all; so
/// was an agent's `World.Commit`, which only an operator's credential may use. Both are said
/// before the question.
#[test]
fn a_grant_no_shipped_tool_can_use_is_warned_of_before_the_question() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    broker_core::store::Store::create(&db).unwrap();
    let out = dir.path().join("s.session");
    let (code, shown) = mint_at_terminal(
        &db,
        &format!(
            "--episode ep1 --grant Workspace.Write=worktree/src:5 --grant World.Commit=log:3 --grant Workspace.Read=worktree:5 --out {}",
            out.display()
        ),
    );
    assert_eq!(code, 0, "{shown}");
    let before = &shown[..shown
        .find("Confirm mint")
        .unwrap_or_else(|| panic!("{shown}"))];
    assert!(
        before.contains("worldd session: warning: --grant Workspace.Write=worktree/src:5: no shipped tool uses Workspace.Write at scope worktree/src; its tools use worktree (a scope is a label, not a path: worktree is the whole worktree), so this grant gives them nothing (a tool you published at that scope is fine: answer n to stop here)"),
        "{shown}"
    );
    assert!(
        before.contains("worldd session: warning: --grant World.Commit=log:3: only an operator credential (--operator) may commit, so this grant gives an agent's credential nothing (answer n to stop here)"),
        "{shown}"
    );
    // The grant its tools use is not warned of.
    assert!(!before.contains("Workspace.Read=worktree:5:"), "{shown}");
}

/// `session new` with a workspace root that is a file was told to `chmod 700` it, asked, and
/// only then failed (`cannot create afile: File exists`); a worktree path that is a file was
/// called an existing worktree, and `session mint` recommended for it. Both are said as what
/// they are, before the question.
#[test]
fn session_new_names_a_file_where_the_root_or_the_worktree_should_be_before_the_question() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    drop(broker_core::store::Store::create(&db).unwrap());
    let new = |root: &Path| {
        at_terminal(
            &format!(
                "{WORLDD} session new ep9 --db {} --workspace-root {} --preset se-tools",
                db.display(),
                root.display()
            ),
            b"y\n",
        )
    };
    let afile = dir.path().join("afile");
    std::fs::write(&afile, "").unwrap();
    let (code, shown) = new(&afile);
    assert_eq!(code, 1, "{shown}");
    assert!(
        shown.contains(&format!("worldd: --workspace-root {} is not a directory (the workspace root holds one directory per episode)", afile.display())),
        "{shown}"
    );
    assert!(
        !shown.contains("Confirm mint") && !shown.contains("chmod"),
        "{shown}"
    );
    let root = dir.path().join("worktrees");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("ep9"), "").unwrap();
    let (code, shown) = new(&root);
    assert_eq!(code, 1, "{shown}");
    assert!(
        shown.contains(&format!(
            "worldd: {}/ep9 is a file, not a worktree (a worktree is a directory); remove it first",
            root.display()
        )),
        "{shown}"
    );
    assert!(!shown.contains("Confirm mint"), "{shown}");
}

/// Budgets belong to the episode: a credential minted with `Workspace.Read=worktree:2` for an
/// episode that had spent 3 reads was dead on arrival (every call `denied:budget`), and the
/// mint said nothing. It is said before the question; a grant with room left is not.
#[test]
fn a_grant_whose_budget_the_episode_has_already_spent_is_warned_of_before_the_question() {
    let dir = store_where_spent_three_reads("ep1");
    let db = dir.path().join("db");
    let (code, shown) = at_terminal(
        &format!(
            "{WORLDD} session mint --db {} --workspace-root {} --episode ep1 --grant Workspace.Read=worktree:2 --grant Workspace.Write=worktree:2",
            db.display(),
            dir.path().join("worktrees").display()
        ),
        b"n\n",
    );
    assert_eq!(code, 1, "{shown}");
    let before = &shown[..shown
        .find("Confirm mint")
        .unwrap_or_else(|| panic!("{shown}"))];
    assert!(
        before.contains("worldd session: warning: --grant Workspace.Read=worktree:2: episode ep1 has already spent 3 of Workspace.Read@worktree, so this budget of 2 leaves it none and every call of it is denied:budget (budgets belong to the episode: a budget above 3 allows more; answer n to stop here)"),
        "{shown}"
    );
    assert!(!before.contains("Workspace.Write=worktree:2:"), "{shown}");
}

/// A store directory that lost its `data.mdb` (it still holds `lock.mdb` and `plugin-state/`)
/// is a store that is there and does not open: the offline verbs exited 1, the code of a
/// mistyped path, where `serve` exits 2, so a check keyed on the exit code filed the lost
/// world under a typo. They exit 2 now; an empty or absent directory stays 1.
#[test]
fn offline_verbs_on_a_store_that_lost_its_data_file_exit_2_and_on_an_empty_one_1() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    let lost = base.join("lost");
    std::fs::create_dir_all(lost.join("plugin-state")).unwrap();
    std::fs::write(lost.join("lock.mdb"), "").unwrap();
    let empty = base.join("empty");
    std::fs::create_dir(&empty).unwrap();
    for (db, code, message) in [
        (&lost, 2, format!("worldd: world store {} has no data.mdb, only lock.mdb, plugin-state/: its data file was lost (a restore or copy gone wrong?); refusing to create one: restore the directory from a backup, or pass --db with the daemon's store\n", lost.display())),
        (&empty, 1, format!("worldd: world store {} is an empty directory (no data.mdb); refusing to create one: run this in the directory the daemon was started in, or pass --db with the daemon's store (worldd serve creates a store, for a new world only)\n", empty.display())),
    ] {
        let db = path_str(db);
        for args in [
            vec!["doctor", "--db", db],
            vec!["doctor", "--json", "--db", db],
            vec!["usage", "--db", db],
            vec!["session", "list", "--db", db],
            vec!["why", "head", "--db", db],
        ] {
            let (got, out, err) = worldd(&args, None);
            assert_eq!((got, out.as_str(), err.as_str()), (code, "", message.as_str()), "{args:?}");
        }
    }
    assert!(!lost.join("data.mdb").exists() && !empty.join("data.mdb").exists());
}

/// `session new` refused an existing worktree with "to start it afresh, remove the directory
/// first", but the episode's spend stays with its name, so the credential minted after that
/// was dead on arrival (every call `denied:budget`), and nothing said so. The refusal says a
/// fresh start needs a new episode name, and `session new` warns of a budget the episode has
/// already spent before its question, as `session mint` does.
#[test]
fn session_new_says_a_fresh_start_needs_a_new_episode_name_and_warns_of_a_spent_budget() {
    let dir = store_where_spent_three_reads("ep1");
    let db = dir.path().join("db");
    let root = dir.path().join("worktrees");
    let cmd = format!(
        "{WORLDD} session new ep1 --db {} --workspace-root {} --grant Workspace.Read=worktree:2 --grant Workspace.Write=worktree:2",
        db.display(),
        root.display()
    );
    let (code, shown) = at_terminal(&cmd, b"n\n");
    assert_eq!(code, 1, "{shown}");
    assert_eq!(
        said(&shown, "n").last().map(String::as_str),
        Some(format!(
            "worldd: worktree {}/ep1 already exists; to give episode ep1 another credential, run worldd session mint --episode ep1 --grant EFFECT=SCOPE:BUDGET (its worktree stays); to start afresh, give a new episode name (what episode ep1 has spent stays with it, whatever becomes of its worktree)",
            root.display()
        ).as_str()),
        "{shown}"
    );
    // The directory removed all the same: the warning comes before the question.
    std::fs::remove_dir_all(root.join("ep1")).unwrap();
    let (code, shown) = at_terminal(&cmd, b"n\n");
    assert_eq!(code, 1, "{shown}");
    let before = &shown[..shown
        .find("Confirm mint")
        .unwrap_or_else(|| panic!("{shown}"))];
    assert!(
        before.contains("worldd session: warning: --grant Workspace.Read=worktree:2: episode ep1 has already spent 3 of Workspace.Read@worktree, so this budget of 2 leaves it none and every call of it is denied:budget (budgets belong to the episode: a budget above 3 allows more; answer n to stop here)"),
        "{shown}"
    );
    assert!(!before.contains("Workspace.Write=worktree:2:"), "{shown}");
    assert!(!root.join("ep1").exists());
}

/// `serve` refuses a workspace root inside its store, a store inside its workspace root, and
/// either inside a directory another running worldd holds as its own; `session new` made its
/// worktree in all three without a word (in the store's `plugin-state`, where `backup` copies
/// it and no daemon would ever serve it; in another daemon's worktree, where that daemon's
/// agents write). It now refuses each before the question, and makes nothing.
#[test]
fn session_new_refuses_a_worktree_inside_a_store_or_another_daemons_directory_before_the_question()
{
    let d = Daemon::start(&[], &[]);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    drop(broker_core::store::Store::create(&db).unwrap());
    let new = |db: &Path, root: &Path| {
        at_terminal(
            &format!(
                "{WORLDD} session new ep9 --db {} --workspace-root {} --preset se-tools",
                db.display(),
                root.display()
            ),
            b"y\n",
        )
    };
    let real_db = db.canonicalize().unwrap();

    let in_store = db.join("plugin-state");
    let (code, shown) = new(&db, &in_store);
    assert_eq!(code, 1, "{shown}");
    assert!(
        shown.contains(&format!(
            "worldd: the workspace root {} is inside the store {}: a daemon refuses to serve them so, and no worktree is made there; nothing was made: pass a --workspace-root outside the store (and the store outside it)",
            real_db.join("plugin-state").display(),
            real_db.display()
        )),
        "{shown}"
    );
    assert!(!shown.contains("Confirm mint"), "{shown}");
    assert!(!in_store.join("ep9").exists());

    let root = dir.path().join("wt");
    let inner = root.join("db");
    std::fs::create_dir_all(&root).unwrap();
    drop(broker_core::store::Store::create(&inner).unwrap());
    let (code, shown) = new(&inner, &root);
    assert_eq!(code, 1, "{shown}");
    assert!(
        shown.contains(&format!(
            "worldd: the store {} is inside the workspace root {}: a daemon refuses",
            root.canonicalize().unwrap().join("db").display(),
            root.canonicalize().unwrap().display()
        )),
        "{shown}"
    );
    assert!(!root.join("ep9").exists());

    let theirs = d.root().join("shared");
    let (code, shown) = new(&db, &theirs);
    assert_eq!(code, 1, "{shown}");
    assert!(
        shown.contains(&format!(
            "worldd: the workspace root {} is inside {}, which another running worldd process holds as its own (a daemon's workspace root or store, a plugin's stateDir, a backup's destination): no daemon would serve a worktree made there; nothing was made: pass a --workspace-root outside it",
            d.root().canonicalize().unwrap().join("shared").display(),
            d.root().canonicalize().unwrap().display()
        )),
        "{shown}"
    );
    assert!(!shown.contains("Confirm mint"), "{shown}");
    assert!(!theirs.exists());

    // The other daemon's own root, for a store it does not serve: no daemon serves it, or
    // another daemon does.
    let other = Daemon::start(&[], &[]);
    for served in [db.clone(), other.db()] {
        let (code, shown) = new(&served, &d.root());
        assert_eq!(code, 1, "{shown}");
        assert!(
            shown.contains(&format!(
                "worldd: the workspace root {} is held by another running worldd as its own (its workspace root or its store), not by a daemon serving {}: no daemon serving this store would serve a worktree made there; nothing was made",
                d.root().canonicalize().unwrap().display(),
                served.display()
            )),
            "{shown}"
        );
        assert!(!d.root().join("ep9").exists());
    }
    // Its own root, with the daemon that serves its store: asked as ever (answered no).
    let own = at_terminal(
        &format!(
            "{WORLDD} session new ep9 --db {} --workspace-root {} --preset se-tools",
            other.db().display(),
            other.root().display()
        ),
        b"n\n",
    );
    assert!(own.1.contains("Confirm mint"), "{}", own.1);

    // A `..` after a directory not made yet goes back up: this root is the store's.
    let dotted = dir.path().join("nonexist/../db/wt2");
    let (code, shown) = new(&db, &dotted);
    assert_eq!(code, 1, "{shown}");
    assert!(
        shown.contains(&format!(
            "worldd: the workspace root {} is inside the store {}",
            real_db.join("wt2").display(),
            real_db.display()
        )),
        "{shown}"
    );
    assert!(!dir.path().join("nonexist").exists());
    assert!(!db.join("wt2").exists());
    // Nothing was minted in either store.
    assert!(!sessions(&db).contains("ep9"), "{}", sessions(&db));
}
