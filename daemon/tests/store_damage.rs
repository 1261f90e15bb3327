//! A store that cannot be opened says why and what to do, through the real binary: a torn
//! copy is a damaged store to restore from a backup, and a ceiling the host cannot map is
//! named with the way to lower it.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;

/// Point the main table of both meta pages of the store in `db` past its last page: what a
/// copy taken while a daemon wrote can hold (`cp -a` while serving).
fn tear(db: &Path) {
    let path = db.join("data.mdb");
    let mut bytes = std::fs::read(&path).unwrap();
    let page = 4096;
    for meta in [0, page] {
        // Page header (16 bytes), magic, version, address, map size (24), the free table
        // (48): the main table's root is its last field; the last page number follows it.
        let root = meta + 16 + 24 + 48 + 40;
        let last = u64::from_le_bytes(bytes[root + 8..root + 16].try_into().unwrap());
        bytes[root..root + 8].copy_from_slice(&(last + 1000).to_le_bytes());
    }
    std::fs::write(&path, bytes).unwrap();
}

/// A torn copy of a store gave `LMDB error: MDB_PAGE_NOTFOUND: Requested page not found`,
/// with no word of a damaged store or a backup, at every verb that opens it.
/// `worldd serve` on the store `db` (run in `dir`) stops at store-open with exit 2, saying it is
/// `damaged` as the other verbs do.
fn serve_refuses_as_damaged(db: &Path, dir: &Path, damaged: &str) {
    let refusal = refused_start(
        &[
            "--db",
            path_str(db),
            "--workspace-root",
            path_str(&dir.join("wt")),
            "--bind",
            "127.0.0.1:0",
        ],
        dir,
    );
    assert_eq!(
        (refusal.code, refusal.line),
        (
            Some(2),
            format!("worldd: daemon startup failed at store-open: {damaged}")
        ),
        "{}",
        refusal.stderr
    );
}

#[test]
fn a_torn_copy_of_a_store_is_said_damaged_with_the_way_out() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    drop(broker_core::store::Store::create(&db).unwrap());
    tear(&db);
    let shown = db.display();
    let damaged = format!(
        "world store {shown} is damaged: MDB_PAGE_NOTFOUND: Requested page not found: a page the store names is missing or malformed (a copy taken while a daemon wrote it, or a failing disk?); restore the directory from a backup"
    );
    let db_arg = db.to_str().unwrap();
    for args in [
        vec!["session", "list", "--db", db_arg],
        vec!["doctor", "--db", db_arg],
    ] {
        let (code, _, err) = worldd(&args, None);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(&damaged), "{args:?}: {err}");
        assert!(!err.contains("LMDB error"), "{args:?}: {err}");
    }
    let dest = dir.path().join("copy");
    let (code, _, err) = worldd(&["backup", "--db", db_arg, dest.to_str().unwrap()], None);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(&damaged), "{err}");
    serve_refuses_as_damaged(&db, dir.path(), &damaged);
}

/// A ceiling larger than the host can map gave `store I/O error: Cannot allocate memory
/// (os error 12)`, naming neither the ceiling nor what to do.
#[test]
fn a_ceiling_the_host_cannot_map_is_named_with_the_way_out() {
    let dir = tempfile::tempdir().unwrap();
    let refused = |ceiling: &str| {
        let args = [
            "--db",
            "db",
            "--workspace-root",
            "wt",
            "--bind",
            "127.0.0.1:0",
        ];
        let refusal = refused_start(
            &[&args[..], &["--store-ceiling", ceiling]].concat(),
            dir.path(),
        );
        assert_eq!(refusal.code, Some(2), "{}", refusal.stderr);
        // Nothing was left behind.
        assert!(!dir.path().join("db").exists());
        refusal.line
    };
    let way_out = "cannot be reserved: Cannot allocate memory (os error 12); lower the ceiling (serve --store-ceiling, or store_ceiling in [serve] of world.toml) to what this host can map";
    assert_eq!(
        refused("1000000TiB"),
        format!("worldd: daemon startup failed at store-open: the store's map of 1099511627776000000 bytes (976.6PiB, its ceiling) {way_out}")
    );
    // A ceiling within a page of 2^64 was rounded up to a size that is no page multiple, and
    // LMDB refused it in its own words (`map size (…) must be a multiple of the system page
    // size`); it is the largest page multiple, refused as any ceiling too large to map.
    let line = refused("18446744073709551615");
    assert!(
        line.starts_with("worldd: daemon startup failed at store-open: the store's map of 18446744073709547520 bytes (")
            && line.ends_with(&format!(", its ceiling) {way_out}")),
        "{line}"
    );
}

/// A small store as a daemon leaves it (two calls of an episode), copied compact: every page
/// is live, so a byte flipped anywhere is damage some read meets.
fn served_and_compacted(dir: &Path) -> std::path::PathBuf {
    let d = Daemon::start(&["worldd_workspace"], &[]);
    let token = d.session(
        "demo",
        &["Workspace.Read=worktree:10", "Workspace.Write=worktree:10"],
    );
    for (tool, args) in [
        (
            "ailang-write",
            serde_json::json!({"path": "hello.txt", "content": "hi there"}),
        ),
        ("ailang-read", serde_json::json!({"path": "hello.txt"})),
    ] {
        let answer = mcp(
            &d,
            &token,
            "tools/call",
            serde_json::json!({"name": tool, "arguments": args}),
        );
        assert_eq!(
            answer.sse_json()["result"]["structuredContent"]["ok"],
            true,
            "{tool}"
        );
    }
    let db = d.db();
    let base = dir.join("base");
    let (code, out, err) = worldd(
        &[
            "backup",
            "--compact",
            "--db",
            path_str(&db),
            path_str(&base),
        ],
        None,
    );
    assert_eq!(code, 0, "{out}{err}");
    drop(d);
    base
}

/// One byte flipped at a time, at the offsets of each page where a flip reached LMDB's
/// failures (a node's offset or size, a page's last bytes), then `worldd doctor` on the copy.
/// Damage found mid-audit exited 1 (the code of a usage error) with raw `LMDB error: MDB_…`
/// lines or a garbled `a readable journal (…) not found`; at open, `MDB_CURSOR_FULL`,
/// `MDB_BAD_DBI` and `MDB_BAD_TXN` came without the damaged store's advice, and a store whose
/// version row was hit was `schema version none`. Every damage is now said as such, with the
/// way out: exit 2 when the store does not open, 3 when the audit meets it.
#[test]
fn doctor_says_every_damage_a_flipped_byte_makes_as_a_damaged_store_with_exit_2_or_3() {
    let dir = tempfile::tempdir().unwrap();
    let base = served_and_compacted(dir.path());
    let whole = std::fs::read(base.join("data.mdb")).unwrap();
    let flipped = dir.path().join("s");
    let mut seen = std::collections::BTreeMap::<i32, usize>::new();
    for page in 0..whole.len() / 4096 {
        for at in [12, 16, 4090] {
            let offset = page * 4096 + at;
            let _ = std::fs::remove_dir_all(&flipped);
            std::fs::create_dir(&flipped).unwrap();
            std::fs::set_permissions(
                &flipped,
                std::os::unix::fs::PermissionsExt::from_mode(0o700),
            )
            .unwrap();
            let mut bytes = whole.clone();
            bytes[offset] ^= 0xff;
            std::fs::write(flipped.join("data.mdb"), &bytes).unwrap();
            let (code, _, err) = worldd(&["doctor", "--db", path_str(&flipped)], None);
            *seen.entry(code).or_default() += 1;
            let last = err.lines().last().unwrap_or_default();
            let at = format!("offset {offset}: exit {code}: {err}");
            assert!(matches!(code, 0 | 2 | 3), "{at}");
            for never in [
                "LMDB error",
                "version none",
                ") not found",
                "readable journal",
            ] {
                assert!(!err.contains(never), "{at}");
            }
            match code {
                2 => assert!(
                    last.starts_with(&format!(
                        "worldd: cannot open {}: world store {} is damaged: ",
                        flipped.display(),
                        flipped.display()
                    )) && last.ends_with(
                        " (a copy taken while a daemon wrote it, or a failing disk?); restore the directory from a backup"
                    ),
                    "{at}"
                ),
                3 => assert!(
                    last == "worldd: doctor: the store is inconsistent"
                        || (last.starts_with("worldd: doctor: store is damaged: ")
                            && last.ends_with("; restore the directory from a backup"))
                        || last.starts_with("worldd: store is damaged: worldd doctor crashed reading it ("),
                    "{at}"
                ),
                _ => {}
            }
        }
    }
    // The sweep met damage both at open and mid-audit.
    assert!(seen.get(&2).is_some_and(|n| *n > 0), "{seen:?}");
    assert!(seen.get(&3).is_some_and(|n| *n > 0), "{seen:?}");
}

/// A store whose meta table lost its version row while its other tables hold rows was refused
/// as `store schema version none is not the version this build uses`, at doctor and at serve's
/// store-open: an operator went looking for another build. It is a damaged store.
#[test]
fn a_store_with_rows_and_no_schema_version_is_said_damaged_not_another_version() {
    let dir = tempfile::tempdir().unwrap();
    let base = served_and_compacted(dir.path());
    // The meta table's one row is the only place its key is written: flipping the key's
    // bytes leaves the table holding no schema_version.
    let mut bytes = std::fs::read(base.join("data.mdb")).unwrap();
    let key = b"schema_version";
    let at = bytes
        .windows(key.len())
        .position(|w| w == key)
        .expect("the version key is in the file");
    bytes[at] = b'S';
    std::fs::write(base.join("data.mdb"), &bytes).unwrap();
    let damaged = format!(
        "world store {} is damaged: its tables hold rows but no schema version (the schema_version key of its meta table is gone; every store is stamped with its version when it is made) (a copy taken while a daemon wrote it, or a failing disk?); restore the directory from a backup",
        base.display()
    );
    let (code, _, err) = worldd(&["doctor", "--db", path_str(&base)], None);
    assert_eq!(
        (code, err),
        (
            2,
            format!("worldd: cannot open {}: {damaged}\n", base.display())
        )
    );
    serve_refuses_as_damaged(&base, dir.path(), &damaged);
}

/// Bytes flipped where `doctor` found the store crashing its reads: `worldd serve` on such a
/// store died by SIGSEGV at start-up with nothing on stderr when LMDB, misled by the page,
/// faulted outside the store's map (the line was said only for a fault inside it). At start-up
/// it now says the store is the likely cause, without claiming more.
#[test]
fn serve_dying_by_a_fault_while_it_opens_a_damaged_store_says_the_store_is_the_likely_cause() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().unwrap();
    let base = served_and_compacted(dir.path());
    let whole = std::fs::read(base.join("data.mdb")).unwrap();
    let plugins = plugin_dir_with(dir.path(), &["worldd_workspace"]);
    let flipped = dir.path().join("s");
    let mut died = Vec::new();
    for page in 0..whole.len() / 4096 {
        let offset = page * 4096 + 16;
        let _ = std::fs::remove_dir_all(&flipped);
        std::fs::create_dir(&flipped).unwrap();
        std::fs::set_permissions(
            &flipped,
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .unwrap();
        let mut bytes = whole.clone();
        bytes[offset] ^= 0xff;
        std::fs::write(flipped.join("data.mdb"), &bytes).unwrap();
        let (_, _, err) = worldd(&["doctor", "--db", path_str(&flipped)], None);
        if !err.contains("worldd doctor crashed reading it") {
            continue;
        }
        let root = dir.path().join(format!("wt-{offset}"));
        std::fs::create_dir(&root).unwrap();
        std::fs::set_permissions(&root, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .unwrap();
        let out = run_to_exit(
            Command::new(WORLDD)
                .arg("serve")
                .arg("--db")
                .arg(&flipped)
                .arg("--workspace-root")
                .arg(&root)
                .arg("--plugin-dir")
                .arg(&plugins)
                .args(["--bind", "127.0.0.1:0"])
                .env("WORLDD_LOG", "warn"),
            std::time::Duration::from_secs(10),
        );
        let Some(signal @ (libc::SIGSEGV | libc::SIGBUS)) = out.status.signal() else {
            // It served: the damage lies where start-up does not read.
            continue;
        };
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let last = stderr.lines().last().unwrap_or_default().to_owned();
        let name = if signal == libc::SIGSEGV {
            "SIGSEGV"
        } else {
            "SIGBUS"
        };
        let sure = format!("worldd: store is damaged: worldd serve crashed reading it ({name}): ");
        let likely = format!(
            "worldd: store is likely damaged: worldd serve crashed ({name}) while it opened the store, at an address outside the store's map: a corrupt page sends LMDB's reads astray, so the store is the likely cause, though not a certain one; check the store with worldd doctor, restore it from a backup (worldd backup makes one) if doctor finds it damaged, and keep this copy for inspection"
        );
        assert!(
            last.starts_with(&sure) || last == likely,
            "offset {offset}: {stderr}"
        );
        died.push(offset);
    }
    assert!(
        !died.is_empty(),
        "no flip made serve crash at start-up: the test no longer reaches the case"
    );
}

/// `lock.mdb` a symbolic link: `doctor` (the verb that changes nothing) and `serve` followed
/// it and created its target wherever it pointed; a directory in its place gave a bare
/// `store I/O error: Is a directory (os error 21)`. Each is refused with the file's name, and
/// nothing is made where the link points.
#[test]
fn a_store_file_that_is_a_link_or_a_directory_is_refused_by_name_and_never_followed() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    drop(broker_core::store::Store::create(&db).unwrap());
    let lock = db.join("lock.mdb");
    let elsewhere = dir.path().join("elsewhere.mdb");
    std::fs::remove_file(&lock).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &lock).unwrap();
    let refused = |what: &str| {
        format!(
            "world store file {} is {what}; a store's data.mdb and lock.mdb are regular files in its directory, and neither is opened through a link or made where one points: put the store's own files there (restore the directory from a backup)",
            lock.display()
        )
    };
    let (code, out, err) = worldd(&["doctor", "--db", path_str(&db)], None);
    assert_eq!(
        (code, out.as_str(), err.as_str()),
        (
            2,
            "",
            format!(
                "worldd: cannot open {}: {}\n",
                db.display(),
                refused("a symbolic link")
            )
            .as_str()
        )
    );
    let serve = |cwd: &Path| {
        refused_start(
            &[
                "--db",
                path_str(&db),
                "--workspace-root",
                path_str(&dir.path().join("wt")),
                "--bind",
                "127.0.0.1:0",
            ],
            cwd,
        )
    };
    let refusal = serve(dir.path());
    assert_eq!(
        (refusal.code, refusal.line),
        (
            Some(2),
            format!(
                "worldd: daemon startup failed at store-open: {}",
                refused("a symbolic link")
            )
        ),
        "{}",
        refusal.stderr
    );
    assert!(std::fs::symlink_metadata(&elsewhere).is_err());
    std::fs::remove_file(&lock).unwrap();
    std::fs::create_dir(&lock).unwrap();
    let (code, _, err) = worldd(&["doctor", "--db", path_str(&db)], None);
    assert_eq!(
        (code, err),
        (
            2,
            format!(
                "worldd: cannot open {}: {}\n",
                db.display(),
                refused("a directory")
            )
        )
    );
}

/// A log whose newest row was a stray copy of an older one (a bad partial restore, a byte-level
/// repair) was served without a word, and every call was then written over the committed
/// entry after the copy's revision, each over the one before. `serve` now refuses the store at
/// store-open, naming the row and `worldd doctor`; `doctor` still opens it and says why.
#[test]
fn serve_refuses_a_store_whose_newest_log_row_is_not_the_entry_its_key_says() {
    use broker_core::log::{self, Append, HeadBinding};
    use broker_core::object::{sid, Object};
    use broker_core::store::{RawTable, Store};
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let store = Store::create(&db).unwrap();
    for n in 1..=3u64 {
        let out =
            Object::json(sid::INVOCATION_OUTPUT, "t", &serde_json::json!({ "o": n })).unwrap();
        let rec =
            Object::json(sid::INVOCATION_RECORD, "t", &serde_json::json!({ "r": n })).unwrap();
        let a = Append {
            transition_fn: out.hash,
            interpreter: rec.hash,
            written_by: "t".into(),
            transition_ref: rec.hash,
            state_root: out.hash,
            objects: vec![out, rec],
            binding: HeadBinding::AtHead,
        };
        store.write(move |w| log::append(w, &a)).unwrap();
    }
    let stray = store
        .raw_get(RawTable::LogRow, &1u64.to_be_bytes())
        .unwrap()
        .unwrap();
    store
        .raw_overwrite(RawTable::LogRow, 4u64.to_be_bytes().to_vec(), stray)
        .unwrap();
    let committed = store
        .raw_get(RawTable::LogRow, &2u64.to_be_bytes())
        .unwrap();
    drop(store);
    std::fs::set_permissions(&db, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    serve_refuses_as_damaged(
        &db,
        dir.path(),
        &format!(
            "world store {} is damaged: the log's newest row, 4, holds the world of revision 1: a new entry would be written over committed ones or chained to no entry, so none is appended; run `worldd doctor` on the store to see what else is damaged (a copy taken while a daemon wrote it, or a failing disk?); restore the directory from a backup",
            db.display()
        ),
    );
    let (code, out, err) = worldd(&["doctor", "--db", path_str(&db)], None);
    assert_eq!(code, 3, "{out}{err}");
    assert!(out.contains("✗ head"), "{out}");
    let store = Store::open(&db, Default::default()).unwrap();
    assert_eq!(
        store
            .raw_get(RawTable::LogRow, &2u64.to_be_bytes())
            .unwrap(),
        committed
    );
}
