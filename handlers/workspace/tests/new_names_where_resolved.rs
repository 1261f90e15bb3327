//! A write may not create a file whose name is not shown as itself (`\u{202e}sr.niam\u{202c}`
//! shows as `main.rs`). The rule looked only at the path as requested, so a write through a
//! dangling symlink (`notes -> \u{202e}sr.niam\u{202c}`, `draft -> src\u{200b}/lib.rs`, as a
//! checkout can carry) created such a file, or such a directory. The rule now applies to every
//! name the write would make where the path resolves: declined before anything is spent.

mod common;

use common::*;
use handler_kit::serde_json::json;

fn refusal(path: &str, resolved: &str, c: u32) -> String {
    format!(
        "write {path:?}: the path resolves to {resolved:?}, which holds U+{c:04X}, a character that is not shown as itself (a control, bidi or invisible character); a new file's name may hold none"
    )
}

#[test]
fn a_write_through_a_dangling_link_cannot_create_a_name_that_shows_as_another() {
    let f = Fixture::new();
    f.link("notes", "\u{202e}sr.niam\u{202c}");
    f.link("draft", "src\u{200b}/lib.rs");
    f.link("deep", "ok/n\u{85}/x.txt");
    for (path, resolved, c) in [
        ("notes", "\u{202e}sr.niam\u{202c}", 0x202e),
        ("draft", "src\u{200b}/lib.rs", 0x200b),
        ("deep", "ok/n\u{85}/x.txt", 0x85),
    ] {
        let write = json!({"op": "write", "path": path, "content": "x"});
        let said = refusal(path, resolved, c);
        assert_eq!(
            f.preflight("Workspace.Write", write.clone()),
            Some(said.clone())
        );
        assert_eq!(refused(&f.out("Workspace.Write", write)), said);
    }
    let mut names: Vec<String> = std::fs::read_dir(&f.root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["deep", "draft", "notes"], "nothing was made");

    // A file already so named (from a checkout) is written through a link as before: the write
    // makes no name.
    f.put("\u{202e}sr.niam\u{202c}", "old");
    assert!(is_ok(&f.write("notes", "new")));
    assert_eq!(
        std::fs::read_to_string(f.path("\u{202e}sr.niam\u{202c}")).unwrap(),
        "new"
    );
}
