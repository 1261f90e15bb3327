//! A store-side verb given the daemon's `--config` from another directory takes a relative
//! `[serve] db` against its own working directory, as `serve` does, and its "does not exist"
//! named only the resolved path: nothing said it came from the config file, nor against what
//! it was taken. The message names the key as written and the file.

mod common;

use common::*;

const TAIL: &str = "; refusing to create one: run this in the directory the daemon was started in, or pass --db with the daemon's store (worldd serve creates a store, for a new world only)\n";

#[test]
fn a_missing_store_from_a_config_file_says_where_its_path_came_from() {
    let cfg = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let config = cfg.path().join("world.toml");
    std::fs::write(&config, "[serve]\ndb = \"srv/db\"\n").unwrap();
    let (code, out, err) = worldd_in(
        elsewhere.path(),
        &[],
        &["session", "list", "--config", path_str(&config)],
    );
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert_eq!(
        err,
        format!(
            "worldd: world store {}/srv/db does not exist (`[serve] db = \"srv/db\"` of {}, taken against the working directory, as worldd serve takes it){TAIL}",
            elsewhere.path().display(),
            config.display()
        )
    );
    // A relative config path is named as an absolute one; an absolute `[serve] db` is taken
    // against nothing.
    let absolute = cfg.path().join("gone/db");
    std::fs::write(
        &config,
        format!("[serve]\ndb = \"{}\"\n", absolute.display()),
    )
    .unwrap();
    let (code, _, err) = worldd_in(cfg.path(), &[], &["doctor", "--config", "world.toml"]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(
        err,
        format!(
            "worldd: world store {} does not exist (`[serve] db = \"{}\"` of {}){TAIL}",
            absolute.display(),
            absolute.display(),
            config.display()
        )
    );
    // `--db` given beside `--config` is the flag's, and named as before.
    let (code, _, err) = worldd_in(
        elsewhere.path(),
        &[],
        &[
            "session",
            "list",
            "--config",
            path_str(&config),
            "--db",
            "other",
        ],
    );
    assert_eq!(code, 1, "{err}");
    assert_eq!(
        err,
        format!(
            "worldd: world store {}/other does not exist{TAIL}",
            elsewhere.path().display()
        )
    );
}
