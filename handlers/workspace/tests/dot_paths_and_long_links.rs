//! Two ways a path used to mean something else than it says to the kernel: a final `/.` (or a
//! symlink whose target ends in `/`) after a regular file, which names a directory; and a
//! chain of deep symlinks whose expansion passes PATH_MAX, which made one read cost most of a
//! second of the daemon's CPU.

mod common;

use std::fs;

use common::*;
use handler_kit::serde_json::json;

#[test]
fn a_path_ending_in_slash_dot_after_a_file_names_a_directory_and_is_refused_not_read_or_written() {
    let f = Fixture::new();
    f.put("hello.ail", "module m\n");
    f.link("ts", "hello.ail/");
    f.link("tsd", "hello.ail/.");
    for path in ["hello.ail/.", "hello.ail/./", "./hello.ail/.", "ts", "tsd"] {
        assert_eq!(
            refused(&f.read(path)),
            format!("read {path}: openat {path}: not a directory")
        );
        assert_eq!(
            refused(&f.write(path, "OVER")),
            format!("write {path}: openat {path}: not a directory")
        );
        assert_eq!(
            refused(&f.edit(path, "module", "EDIT")),
            format!("edit {path}: openat {path}: not a directory")
        );
    }
    assert_eq!(
        fs::read_to_string(f.path("hello.ail")).unwrap(),
        "module m\n"
    );
    // A directory that is not there: the answer `nd2/` gets, in the path's own words, and no
    // file named nd2, also through a link whose target ends in `/`.
    assert_eq!(
        refused(&f.write("nd2/.", "Q")),
        "write nd2/.: a path ending in /. names a directory, and nothing is there; give the file's path, without the trailing /."
    );
    f.link("to-nd3", "nd3/");
    assert_eq!(
        refused(&f.write("to-nd3", "Q")),
        "write to-nd3: the path leads through a symbolic link whose target ends in / or /., which names a directory, and nothing is there; give the file's path"
    );
    assert!(!f.path("nd2").exists() && !f.path("nd3").exists());
    // A file named plainly is still a file.
    assert!(is_ok(&f.read("hello.ail")));
    assert!(is_ok(&f.read("./hello.ail")));
}

#[test]
fn a_chain_of_deep_symlinks_expanding_past_path_max_is_refused_as_too_long_to_check() {
    let f = Fixture::new();
    let depth = 680;
    fs::create_dir_all(f.path(&"a/".repeat(depth))).unwrap();
    f.put("target.txt", "hi\n");
    for n in 0..38 {
        let next = if n == 37 {
            "target.txt".to_string()
        } else {
            format!("l{}", n + 1)
        };
        f.link(
            &format!("l{n}"),
            format!("{}{}{next}", "a/".repeat(depth), "../".repeat(depth)),
        );
    }
    let started = std::time::Instant::now();
    for (effect, payload, op) in [
        (
            "Workspace.Read",
            json!({"op": "read", "path": "l0"}),
            "read",
        ),
        (
            "Workspace.Write",
            json!({"op": "write", "path": "l0", "content": "x"}),
            "write",
        ),
        (
            "Workspace.Write",
            json!({"op": "edit", "path": "l0", "old_text": "hi", "new_text": "ho"}),
            "edit",
        ),
    ] {
        assert_eq!(
            refused(&f.out(effect, payload)),
            format!("{op} l0: the path's links expand past 4096 bytes; cannot be checked")
        );
    }
    assert_eq!(
        f.preflight("Workspace.Read", json!({"op": "read", "path": "l0"})),
        None,
        "the preflight leaves it to the effect's refusal"
    );
    eprintln!("three refusals in {:?}", started.elapsed());
    assert_eq!(fs::read_to_string(f.path("target.txt")).unwrap(), "hi\n");
    // The last link alone is short enough to check, and read.
    assert_eq!(f.read("l37")["content"], json!("hi\n"));
}
