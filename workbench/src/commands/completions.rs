//! `workbench completions SHELL` and `workbench man`: the command line described for the
//! shell's completion and for `man`, generated from the same definitions clap parses.

use crate::cli::Cli;
use anyhow::{Context, Result};
use clap::CommandFactory;
use clap_complete::Shell;
use std::path::Path;

/// Prints the completion script for `shell` on standard output.
pub fn completions(shell: Shell) -> Result<i32> {
    let mut command = Cli::command();
    clap_complete::generate(shell, &mut command, "workbench", &mut std::io::stdout());
    Ok(0)
}

/// Prints the man page (roff) on standard output, or writes `workbench.1` and one page per
/// command (`workbench-train.1`, ...) into `out`.
pub fn man(out: Option<&Path>) -> Result<i32> {
    let command = Cli::command();
    match out {
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
            clap_mangen::generate_to(command, dir)
                .with_context(|| format!("cannot write the man pages into {}", dir.display()))?;
            tracing::info!("wrote workbench.1 and a page per command into {}", dir.display());
        }
        None => {
            clap_mangen::Man::new(command).render(&mut std::io::stdout().lock()).context("cannot write the man page")?
        }
    }
    Ok(0)
}
