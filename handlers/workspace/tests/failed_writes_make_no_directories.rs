//! A write makes the missing directories of its path, then writes the file. When that failed
//! (a full filesystem, a name too long), the directories stayed, while the answer said nothing
//! was changed. The directories a write made are now removed again when it fails (deepest
//! first, only those it made, only while empty).

mod common;

use common::*;
use handler_kit::serde_json::json;

#[test]
fn a_write_that_fails_removes_the_directories_it_made_and_only_those() {
    let f = Fixture::new();
    let long = "z".repeat(256);
    // The file's name is too long: refused at the rename, after newa/newb were made.
    let path = format!("newa/newb/{long}");
    let out = f.out(
        "Workspace.Write",
        json!({"op": "write", "path": path, "content": "x"}),
    );
    assert_eq!(
        refused(&out),
        format!("write {path}: openat {path}: file name too long")
    );
    assert!(!f.path("newa").exists(), "newa was left");

    // A directory's name is too long: refused while making them, after newc was made.
    let path = format!("newc/{long}/f.txt");
    let out = f.out(
        "Workspace.Write",
        json!({"op": "write", "path": path, "content": "x"}),
    );
    assert_eq!(
        refused(&out),
        format!("write {path}: openat {path}: file name too long")
    );
    assert!(!f.path("newc").exists(), "newc was left");

    // Directories that were there stay, with what they hold.
    f.put("kept/a.txt", "a");
    let path = format!("kept/newd/{long}");
    let out = f.out(
        "Workspace.Write",
        json!({"op": "write", "path": path, "content": "x"}),
    );
    assert_eq!(
        refused(&out),
        format!("write {path}: openat {path}: file name too long")
    );
    assert!(!f.path("kept/newd").exists());
    assert_eq!(std::fs::read_to_string(f.path("kept/a.txt")).unwrap(), "a");
    let mut names: Vec<String> = std::fs::read_dir(&f.root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["kept"]);
}
