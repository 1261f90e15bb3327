//! A store that cannot be opened says why and what to do, through the real binary: a torn
//! copy is a damaged store to restore from a backup, and a ceiling the host cannot map is
//! named with the way to lower it.

mod common;

use std::path::Path;

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
    let refusal = refused_start(
        &[
            "--db",
            db_arg,
            "--workspace-root",
            dir.path().join("wt").to_str().unwrap(),
            "--bind",
            "127.0.0.1:0",
        ],
        dir.path(),
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
