//! `worldd completions SHELL` and `worldd man`: generated from the clap tree itself, so they
//! cannot drift from the verbs and flags.

use std::path::PathBuf;

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
            clap_mangen::generate_to(cmd, &dir)
                .map_err(|e| Failure::usage(format!("{}: {e}", dir.display())))?;
            outln!("man pages written to {}", dir.display());
            Ok(())
        }
    }
}
