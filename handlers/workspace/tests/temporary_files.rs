//! The temporary file a write stages its content in (`.worldd-tmp-<pid>-…`, beside the
//! target):
//!
//! - A file the agent names so was written (`ok`, `bytes`), then removed by the sweep of a
//!   killed write's leftovers that follows the first write into a directory: writes and edits
//!   of such a name are refused now (declined before anything is spent); reads are not.
//! - It was created 0644 and narrowed to the replaced file's bits only after the content was
//!   in it: a private file's content was readable by others meanwhile (and stayed so when the
//!   write was killed). It is created with the bits it will have now.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use common::*;
use handler_kit::serde_json::json;

fn named_like_temporaries(op: &str, path: &str, name: &str) -> String {
    format!(
        "{op} {path}: \"{name}\" is named like the workspace's temporary files (.worldd-tmp-…), which it removes as what a killed write left; give the file another name"
    )
}

#[test]
fn a_write_or_edit_of_a_file_named_like_the_temporary_files_is_refused_and_a_read_is_not() {
    let f = Fixture::new();
    let path = "notes/.worldd-tmp-4000000-draft.md";
    let write = json!({"op": "write", "path": path, "content": "my notes"});
    let said = named_like_temporaries("write", path, ".worldd-tmp-4000000-draft.md");
    assert_eq!(
        f.preflight("Workspace.Write", write.clone()),
        Some(said.clone())
    );
    assert_eq!(refused(&f.out("Workspace.Write", write)), said);
    assert!(!f.path("notes").exists(), "nothing was made");

    // A file so named already there (from a checkout) is read, never edited.
    f.put(".worldd-tmp-1-2-3", "from a checkout");
    assert_eq!(
        f.read(".worldd-tmp-1-2-3")["content"],
        json!("from a checkout")
    );
    let edit =
        json!({"op": "edit", "path": ".worldd-tmp-1-2-3", "old_text": "from", "new_text": "to"});
    let said = named_like_temporaries("edit", ".worldd-tmp-1-2-3", ".worldd-tmp-1-2-3");
    assert_eq!(
        f.preflight("Workspace.Write", edit.clone()),
        Some(said.clone())
    );
    assert_eq!(refused(&f.out("Workspace.Write", edit)), said);
    assert_eq!(
        std::fs::read_to_string(f.path(".worldd-tmp-1-2-3")).unwrap(),
        "from a checkout"
    );

    // Through a dangling link, the name it would make is the one judged.
    f.link("draft", ".worldd-tmp-77-x");
    let write = json!({"op": "write", "path": "draft", "content": "x"});
    let said = named_like_temporaries("write", "draft", ".worldd-tmp-77-x");
    assert_eq!(
        f.preflight("Workspace.Write", write.clone()),
        Some(said.clone())
    );
    assert_eq!(refused(&f.out("Workspace.Write", write)), said);
    assert!(!f.path(".worldd-tmp-77-x").exists());

    // A name that only contains the prefix is an ordinary name.
    assert!(is_ok(&f.write("notes/a.worldd-tmp-1", "fine")));
    assert!(f.path("notes/a.worldd-tmp-1").exists());
}

#[test]
fn a_private_files_content_is_never_staged_in_a_temporary_file_others_may_read() {
    let f = Fixture::new();
    f.put(".env", "API_KEY=secret-123\n");
    std::fs::set_permissions(f.path(".env"), std::fs::Permissions::from_mode(0o600)).unwrap();
    // Watch the directory while the file is written over: every temporary seen, its mode.
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let watcher = {
        let (stop, seen, root) = (stop.clone(), seen.clone(), f.root.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                for entry in std::fs::read_dir(&root).unwrap().flatten() {
                    if entry
                        .file_name()
                        .to_string_lossy()
                        .starts_with(".worldd-tmp-")
                    {
                        if let Ok(md) = entry.metadata() {
                            seen.lock().unwrap().push(md.permissions().mode() & 0o777);
                        }
                    }
                }
            }
        })
    };
    let content = format!("API_KEY=secret-123\n{}", "x".repeat(8_000_000));
    for _ in 0..20 {
        assert!(is_ok(&f.write(".env", &content)));
        if !seen.lock().unwrap().is_empty() {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    watcher.join().unwrap();
    let seen = seen.lock().unwrap();
    assert!(!seen.is_empty(), "no temporary file was seen");
    assert!(
        seen.iter().all(|mode| mode & 0o077 == 0),
        "temporary modes seen: {:?}",
        seen.iter()
            .map(|m| format!("{m:o}"))
            .collect::<std::collections::BTreeSet<_>>()
    );
    let mode = std::fs::metadata(f.path(".env"))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
}
