//! A `git config --get filter.<driver>.clean` run that failed (stopped at the time limit, a
//! config git could not read) counted as "not set": the agent was refused with a filter the
//! repository "does not define" and the operator sent to `git lfs install --local`. Only exit
//! status 1 is "not set"; a run that did not finish is the time limit's failure, and any other
//! status is git's own refusal, passed on.
//!
//! The git the handler runs is a wrapper first on `PATH` (the handler takes the first `git`
//! there): it makes the lookups of two drivers misbehave and runs the real git for the rest.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::OnceLock;

use common::*;
use handler_kit::serde_json::json;

/// Put the wrapper first on this process's `PATH`, once: `filter.slow.clean` sleeps past any
/// time limit, `filter.broken.clean` exits with 3 as git does for a config it cannot parse.
fn wrapper_first_on_path() {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let path = std::env::var_os("PATH").unwrap();
        let real: PathBuf = std::env::split_paths(&path)
            .map(|dir| dir.join("git"))
            .find(|git| git.is_file())
            .expect("git on PATH");
        let dir = tempfile::tempdir().unwrap();
        let wrapper = dir.path().join("git");
        std::fs::write(
            &wrapper,
            format!(
                "#!/bin/sh\n\
                 for a in \"$@\"; do\n\
                 case \"$a\" in\n\
                 filter.slow.clean) exec sleep 60 ;;\n\
                 filter.broken.clean) echo 'fatal: bad config line 3 in file .git/config' >&2; exit 3 ;;\n\
                 esac\n\
                 done\n\
                 exec '{}' \"$@\"\n",
                real.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut dirs = vec![dir.path().to_path_buf()];
        dirs.extend(std::env::split_paths(&path));
        std::env::set_var("PATH", std::env::join_paths(dirs).unwrap());
        dir
    });
}

/// A repository whose own attributes give `*.txt` the filter `driver`, with `a.txt` new in
/// its worktree; the handler's time limit is 1500 ms.
fn with_filter(driver: &str) -> Fixture {
    wrapper_first_on_path();
    let f = Fixture::with_config(
        |state| json!({"author": AUTHOR, "stateDir": state, "timeoutMs": 1500}),
    );
    std::fs::write(
        f.repo().join(".git/info/attributes"),
        format!("*.txt filter={driver}\n"),
    )
    .unwrap();
    f.put("a.txt", "a\n");
    f
}

#[test]
fn a_filter_lookup_stopped_at_the_time_limit_is_the_time_limits_failure() {
    let f = with_filter("slow");
    let before = f.head();
    assert_eq!(
        failed(f.run(json!({"op": "commit", "message": "m"}))),
        "commit: git config did not finish within the time limit (1500 ms); nothing was committed"
    );
    assert_eq!(f.head(), before);
}

#[test]
fn a_filter_lookup_git_fails_is_passed_on_not_said_as_an_undefined_filter() {
    let f = with_filter("broken");
    let before = f.head();
    let out = f.commit(json!({"op": "commit", "message": "m"}));
    assert_eq!(
        refused(&out),
        "commit: git config --get filter.broken.clean failed (exit status: 3): fatal: bad config line 3 in file .git/config"
    );
    assert_eq!(f.head(), before);
}
