//! A store whose disk fails under the daemon: an ext4 that an I/O error turns read-only
//! (`errors=remount-ro`), made here in a loop-mounted image and failed through the kernel's
//! own `trigger_fs_error`, which is what ext4 does on a real I/O error. Root only.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::*;
use serde_json::json;

/// An ext4 image on a tmpfs, loop-mounted with `errors=remount-ro`; unmounted on drop.
struct FailingDisk {
    at: PathBuf,
    /// Unmounted after the image (fields drop after [`Drop::drop`]).
    _back: Tmpfs,
}

impl FailingDisk {
    fn mount() -> Option<FailingDisk> {
        let back = Tmpfs::mount(96 << 20)?;
        let image = back.dir.path().join("img");
        let made = Command::new("truncate")
            .args(["-s", "64M"])
            .arg(&image)
            .status()
            .is_ok_and(|s| s.success())
            && Command::new("mkfs.ext4")
                .args(["-q", "-F"])
                .arg(&image)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
        let at = back.dir.path().join("ext");
        std::fs::create_dir(&at).ok()?;
        let mounted = made
            && Command::new("mount")
                .args(["-o", "loop,errors=remount-ro"])
                .arg(&image)
                .arg(&at)
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
        let disk = FailingDisk { at, _back: back };
        if !mounted {
            drop(disk);
            return mount_failed("making and loop-mounting an ext4 image");
        }
        Some(disk)
    }

    /// Fail the filesystem as an I/O error does: ext4 turns itself read-only.
    fn fail(&self) {
        let source = Command::new("findmnt")
            .args(["-no", "SOURCE"])
            .arg(&self.at)
            .output()
            .unwrap();
        let device = String::from_utf8(source.stdout).unwrap();
        let device = Path::new(device.trim()).file_name().unwrap().to_owned();
        let trigger = Path::new("/sys/fs/ext4")
            .join(device)
            .join("trigger_fs_error");
        std::fs::write(&trigger, "1\n").unwrap();
    }
}

impl Drop for FailingDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.at).status();
    }
}

fn health_status(d: &Daemon) -> String {
    get(&d.url("/v1/health"), None).json()["status"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// An ext4 that an I/O error turned read-only under the daemon failed every call with `host
/// callback failed` while health said `ok` indefinitely (monitoring saw nothing), one ERROR
/// line per call saying only "store I/O error". Health now says `store-failing`, the metrics
/// gauge is 1, and the log says once what happened and what to do. Then, with the daemon
/// stopped, `doctor` refused the store with serve's "cannot open one on a read-only
/// filesystem", since `statvfs` still calls such a filesystem writable: it now reads the store
/// where it is, read-only, as on a read-only mount.
#[test]
fn a_store_whose_disk_turns_read_only_under_the_daemon_is_said_failing_and_doctor_still_reads_it() {
    let Some(disk) = FailingDisk::mount() else {
        eprintln!("skipped: mounting a loop ext4 image needs root and loop devices");
        return;
    };
    let dir = tempfile::tempdir_in(&disk.at).unwrap();
    let d = Daemon::start_in(dir, &["worldd_workspace"], &["--store-reserve", "1MiB"]);
    let token = d.session(
        "ep",
        &["Workspace.Read=worktree:10", "Workspace.Write=worktree:10"],
    );
    let v = tools_call(
        &d,
        &token,
        "ailang-write",
        json!({"path": "a.txt", "content": "a"}),
    );
    assert_eq!(v["result"]["structuredContent"]["ok"], true, "{v}");
    assert_eq!(health_status(&d), "ok");

    disk.fail();
    for _ in 0..3 {
        let v = tools_call(&d, &token, "ailang-read", json!({"path": "a.txt"}));
        assert_eq!(
            v["error"],
            json!({"code": -32603, "message": "host callback failed"}),
            "{v}"
        );
    }
    assert_eq!(health_status(&d), "store-failing");
    let metrics = get(&d.url("/v1/metrics"), None).text();
    assert!(metrics.contains("\nworldd_store_failing 1\n"), "{metrics}");
    let said = "the store's writes fail (";
    d.wait_for_log(said);
    let log = d.log();
    assert_eq!(log.matches(said).count(), 1, "{log}");
    assert!(
        log.contains("new calls are answered as failed until a write succeeds, nothing run or spent for them (a call whose effect ran before its commit failed is answered as not confirmed committed, its effect may have run: reconcile it); health says store-failing meanwhile."),
        "{log}"
    );

    let kept = d.halt();
    let db = kept.path().join("db");
    let (code, out, err) = worldd(&["doctor", "--db", path_str(&db)], None);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        !err.contains("cannot open one on a read-only filesystem"),
        "{err}"
    );
    drop(kept);
}
