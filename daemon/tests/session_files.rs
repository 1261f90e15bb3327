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
