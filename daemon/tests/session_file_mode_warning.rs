//! A session file others may read or write is warned of once a command, with the `chmod` that
//! fixes it: `tools list` makes two requests and said it twice, and a world-writable file
//! (whose credential anyone could swap for theirs) was called readable, or not warned of.

mod common;

use std::os::unix::fs::PermissionsExt;

use common::*;

#[test]
fn a_loose_session_file_is_warned_of_once_with_the_fix() {
    let d = Daemon::start(&["worldd_workspace"], &[]);
    let token = d.session("demo", &["Workspace.Read=worktree:5"]);
    let file = d.session_file("demo", &token);
    let shown = path_str(&file).to_owned();
    for (mode, warning) in [
        (0o644, Some("readable")),
        (0o602, Some("writable")),
        (0o666, Some("readable and writable")),
        (0o640, Some("readable")),
        (0o600, None),
        (0o700, None),
    ] {
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
        let (code, out, err) = worldd(
            &["tools", "list", "--addr", &d.addr, "--session", &shown],
            None,
        );
        assert_eq!(code, 0, "{mode:o}: {err}");
        assert!(out.contains("ailang-read"), "{mode:o}: {out}");
        let expected = match warning {
            Some(what) => format!(
                "worldd: warning: session file {shown} is {what} by group or others; `chmod 600 {shown}`\n"
            ),
            None => String::new(),
        };
        assert_eq!(err, expected, "mode {mode:o}");
    }
}
