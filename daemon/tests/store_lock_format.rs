//! A store another program holds open with another LMDB build: its lock file is in another
//! format, and LMDB answers only `MDB_VERSION_MISMATCH`.

mod common;

use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;

use common::*;

/// `serve`, `doctor` and the other verbs that open a store said only `LMDB error:
/// MDB_VERSION_MISMATCH: Database environment version mismatch` while another program (Debian's
/// `mdb_stat` of LMDB 0.9, a Python `lmdb` script) held the store open: it read like a store
/// written by an incompatible worldd. They now say what holds it and what to do, and nothing
/// is changed.
#[test]
fn a_store_held_by_a_program_of_another_lmdb_build_is_said_so() {
    let d = Daemon::start(&["worldd_workspace"], &[]);
    let kept = d.halt();
    let db = kept.path().join("db");
    // The lock file as another LMDB build keeps it: the same magic, another format; held with a
    // shared lock on its first byte, as that program's open holds it, so that LMDB cannot take
    // it over.
    let mut lock = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(db.join("lock.mdb"))
        .unwrap();
    let mut head = [0u8; 8];
    lock.read_exact(&mut head).unwrap();
    let format = u32::from_ne_bytes(head[4..8].try_into().unwrap());
    lock.seek(SeekFrom::Start(4)).unwrap();
    lock.write_all(&(format ^ 0x0100_0000).to_ne_bytes())
        .unwrap();
    // SAFETY: a plain `flock` struct for fcntl on a descriptor this test owns.
    let held = unsafe {
        let mut l: libc::flock = std::mem::zeroed();
        l.l_type = libc::F_RDLCK as _;
        l.l_whence = libc::SEEK_SET as _;
        l.l_start = 0;
        l.l_len = 1;
        libc::fcntl(lock.as_raw_fd(), libc::F_SETLK, &l)
    };
    assert_eq!(held, 0, "{}", std::io::Error::last_os_error());
    let data = std::fs::read(db.join("data.mdb")).unwrap();

    let said = format!(
        "{}: LMDB's lock file is held in another format (MDB_VERSION_MISMATCH): a process that uses another LMDB build has the store open (mdb_stat, mdb_copy, a Python lmdb script?); stop it, then try again: nothing was changed",
        db.display()
    );
    let (code, out, err) = worldd(&["doctor", "--db", path_str(&db)], None);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains(&said), "{err}");
    assert!(
        !err.contains("Database environment version mismatch"),
        "{err}"
    );
    let root = kept.path().join("worktrees");
    let r = refused_serve_on(&db, &root, &[], kept.path());
    let err = &r.stderr;
    assert_eq!(r.code, Some(2), "{err}");
    assert!(err.contains(&said), "{err}");
    assert_eq!(std::fs::read(db.join("data.mdb")).unwrap(), data);
    drop(lock);
}
