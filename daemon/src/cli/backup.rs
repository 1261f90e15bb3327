//! `worldd backup DEST`: a consistent copy of a store while the daemon serves it
//! ([`crate::backup`]), then the copy opened and checked as `worldd doctor` checks a store.

use std::path::PathBuf;

use broker_core::store::{Store, StoreOptions};
use broker_core::verify;
use clap::Args;

use super::session::open_to_read;
use super::{CliResult, DbArg, Failure};
use crate::backup;

#[derive(Args, Debug)]
pub struct BackupArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// The directory to copy into: absent (it is made, mode 0700) or empty, outside the store,
    /// and writable by this user alone.
    pub dest: PathBuf,
    /// The daemon's workspace root (default: .world/worktrees): the destination must lie
    /// outside it, since agents write there.
    #[arg(long)]
    pub workspace_root: Option<PathBuf>,
    /// Leave out the store's free pages: a copy as small as its rows, which takes longer.
    #[arg(long)]
    pub compact: bool,
}

pub fn run(a: BackupArgs) -> CliResult {
    let db = &a.db.db;
    let root = a
        .workspace_root
        .clone()
        .unwrap_or_else(|| PathBuf::from(super::session::DEFAULT_WORKSPACE_ROOT));
    backup::refuse_inside_workspace(&a.dest, &root)
        .map_err(|e| Failure::usage(format!("backup: {e}")))?;
    let store = open_to_read(db)?;
    let taken = backup::take(&store, db, &a.dest, a.compact).map_err(|e| {
        let message = format!("backup: {e}");
        if e.is_refusal() {
            Failure::usage(message)
        } else {
            Failure::fatal(format!(
                "{message}; nothing was left in {}",
                a.dest.display()
            ))
        }
    })?;
    drop(store);
    outln!("backup: {} -> {}", db.display(), a.dest.display());
    outln!("  data.mdb: {} bytes", taken.data_bytes);
    outln!(
        "  {}: {} file(s), {} bytes",
        backup::PLUGIN_STATE,
        taken.state_files,
        taken.state_bytes
    );
    for skipped in &taken.skipped {
        outln!(
            "  skipped {} (not a file, a directory or a symbolic link)",
            skipped.display()
        );
    }
    // The copy is checked as a store of its own: it opens, and doctor's checks pass.
    // The copy is this process's alone until the verb ends: it may lie on a network share.
    let options = StoreOptions {
        allow_network_filesystem: true,
        ..StoreOptions::default()
    };
    // As the store was copied: an older schema stays what it was (see `open_to_read`), so that
    // the build that wrote the store can still restore the copy.
    // The source's opening warned of its intents without an outcome already (once a run).
    let (copy, _) = super::doctor::without_pending_warning(|| {
        broker_core::migrate::keeping_schema(|| Store::open(&a.dest, options))
    });
    let copy = copy.map_err(|e| {
        Failure::integrity(format!(
            "backup: the copy in {} does not open: {e}",
            a.dest.display()
        ))
    })?;
    let audit = verify::audit_store(&copy)
        .map_err(|e| Failure::integrity(format!("backup: checking the copy: {e}")))?;
    if !audit.consistent() {
        return Err(Failure::integrity(format!(
            "backup: the copy in {} is inconsistent; `worldd doctor --db {}` says where",
            a.dest.display(),
            a.dest.display()
        )));
    }
    drop(copy);
    // Only now is the copy a checked backup: until here its marker says it is not.
    backup::checked(&a.dest).map_err(|e| {
        Failure::fatal(format!(
            "backup: the copy in {} passed its checks, but {e}",
            a.dest.display()
        ))
    })?;
    outln!(
        "  ✓ the copy opens and doctor's checks pass: {} entr(ies), {} indeterminate intent(s)",
        audit.entries,
        audit.indeterminate.len()
    );
    Ok(())
}
