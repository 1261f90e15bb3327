//! `worldd completions SHELL` and `worldd man`: generated from the clap tree itself, so they
//! cannot drift from the verbs and flags.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use clap::{Args, CommandFactory};
use clap_complete::Shell;

use super::{Cli, CliResult, Failure};

#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    pub shell: Shell,
}

#[derive(Args, Debug)]
pub struct ManArgs {
    /// Write worldd.1 and one page per verb (worldd-session-mint.1, …) into this directory
    /// instead of printing worldd.1 on stdout.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

pub fn completions(a: CompletionsArgs) -> CliResult {
    let mut cmd = Cli::command();
    // Into a buffer first: clap_complete panics when its writer fails (`| head`).
    let mut script = Vec::new();
    clap_complete::generate(a.shell, &mut cmd, "worldd", &mut script);
    super::output::write(&script)
}

pub fn man(a: ManArgs) -> CliResult {
    let cmd = Cli::command();
    match a.out {
        None => {
            let mut page = Vec::new();
            clap_mangen::Man::new(cmd)
                .render(&mut page)
                .map_err(|e| Failure::usage(format!("cannot render the man page: {e}")))?;
            super::output::write(&page)
        }
        Some(dir) => {
            std::fs::create_dir_all(&dir)
                .map_err(|e| Failure::usage(format!("{}: {e}", dir.display())))?;
            // As clap_mangen's generate_to names and orders the pages, but each written whole
            // or not at all: in place, a full disk left a truncated page `man` shows blank.
            let mut cmd = cmd.disable_help_subcommand(true);
            cmd.build();
            write_pages(cmd, &dir)?;
            // The renames are entries of the directory: synced once all are made, or a crash
            // after "written" could leave the old pages, or none.
            std::fs::File::open(&dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| {
                    Failure::usage(format!("{}: cannot sync the directory: {e}", dir.display()))
                })?;
            outln!("man pages written to {}", dir.display());
            Ok(())
        }
    }
}

/// The page of `cmd` and of each of its visible subcommands, into `dir`.
fn write_pages(cmd: clap::Command, dir: &Path) -> CliResult {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned() {
        write_pages(sub, dir)?;
    }
    let man = clap_mangen::Man::new(cmd);
    let mut page = Vec::new();
    man.render(&mut page)
        .map_err(|e| Failure::usage(format!("cannot render the man page: {e}")))?;
    write_whole(&dir.join(man.get_filename()), &page)
}

/// Write `bytes` to `file` through a temporary file beside it, renamed over it once whole; a
/// failure removes the temporary file, leaves what `file` held, and names `file`.
fn write_whole(file: &Path, bytes: &[u8]) -> CliResult {
    let said = |e: std::io::Error| Failure::usage(format!("{}: {e}", file.display()));
    let name = file.file_name().unwrap_or_default().to_string_lossy();
    let temp = file.with_file_name(format!(".{name}.{}.partial", std::process::id()));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&temp)
        .and_then(|mut f| {
            f.write_all(bytes)?;
            f.sync_all()
        })
        .and_then(|()| std::fs::rename(&temp, file));
    written.map_err(|e| {
        let _ = std::fs::remove_file(&temp);
        said(e)
    })
}
