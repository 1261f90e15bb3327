//! The harness's tmpfs, where it cannot be mounted: the test that asked for it skips only
//! where `WORLDD_TESTS_REQUIRE_MOUNTS` is unset. CI sets it (it runs as root), and a skip there
//! reported a pass for the only test of a full disk under the store.

mod common;

use std::process::{Command, Output};

use common::*;

/// Set in the child this test runs itself as: the child only asks for the tmpfs.
const CHILD: &str = "WORLDD_TESTS_MOUNTS_REQUIRED_CHILD";

/// This test run again in a child, with no `mount` on its `PATH` (so mounting fails whoever
/// runs it), and `WORLDD_TESTS_REQUIRE_MOUNTS` set to `require`.
fn child(require: &str) -> Output {
    let empty = tempfile::tempdir().unwrap();
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_tmpfs_that_cannot_be_mounted_fails_the_test_where_mounts_are_required",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .env("PATH", empty.path())
        .env("WORLDD_TESTS_REQUIRE_MOUNTS", require)
        .output()
        .unwrap()
}

#[test]
fn a_tmpfs_that_cannot_be_mounted_fails_the_test_where_mounts_are_required() {
    if std::env::var_os(CHILD).is_some() {
        if Tmpfs::mount(1 << 20).is_none() {
            eprintln!("skipped: mounting a tmpfs needs root");
        }
        return;
    }
    let required = child("1");
    let stderr = String::from_utf8_lossy(&required.stderr);
    assert!(!required.status.success(), "{stderr}");
    assert!(
        stderr.contains("mounting a tmpfs failed, and WORLDD_TESTS_REQUIRE_MOUNTS is set"),
        "{stderr}"
    );
    // Unset (or empty), a machine that cannot mount skips the test.
    let optional = child("");
    let stderr = String::from_utf8_lossy(&optional.stderr);
    assert!(optional.status.success(), "{stderr}");
    assert!(
        stderr.contains("skipped: mounting a tmpfs needs root"),
        "{stderr}"
    );
}
