//! What a call is told when the episode's worktree is not a directory.

use std::os::unix::net::UnixListener;

use broker_core::coordinator::{worktree_of, CallError};

fn said(root: &std::path::Path, episode: &str) -> String {
    match worktree_of(root, episode) {
        Err(e @ CallError::NoWorktree(_)) => e.to_string(),
        other => panic!("expected NoWorktree, got {other:?}"),
    }
}

/// A regular file, a FIFO or a socket where an episode's worktree should be is named as a file,
/// as `session new` names it, not said not to exist (the operator sees it there with `ls`). The
/// error names that cause alone: R8's text before it read as a missing plugin in the log (the
/// A2A refusal, whose text the contract fixes, puts it back in front).
#[test]
fn a_file_fifo_or_socket_where_the_worktree_should_be_is_a_file_not_a_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    std::fs::write(root.join("plain"), "x").unwrap();
    let fifo =
        std::ffi::CString::new(root.join("fifo").into_os_string().into_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path; mkfifo touches nothing else.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    let _socket = UnixListener::bind(root.join("sock")).unwrap();
    for episode in ["plain", "fifo", "sock"] {
        assert_eq!(
            said(&root, episode),
            format!(
                "episode {episode}'s worktree is a file, not a directory: a worktree must be a directory in the workspace root (an operator removes the file {episode} there and puts the directory in its place)"
            )
        );
    }
    // Nothing there at all is still "does not exist"; a directory is the worktree.
    assert_eq!(
        said(&root, "absent"),
        format!(
            "episode absent's worktree does not exist: an operator creates it (the directory absent in the workspace root; worldd session new makes a worktree and a credential together, for an episode that has neither)"
        )
    );
    std::fs::create_dir(root.join("dir")).unwrap();
    assert_eq!(worktree_of(&root, "dir").unwrap(), root.join("dir"));
}
