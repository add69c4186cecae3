//! The command line.

use crate::commands;
use clap::{Parser, Subcommand};
use std::path::PathBuf;

/// A research workbench for Transformer layers derived from energy minimisation.
#[derive(Parser, Debug)]
#[command(name = "workbench", version, about)]
pub struct Cli {
    /// Run database (SQLite). Default: runs.db in the repository root when run from the
    /// workspace, else in the current directory.
    #[arg(long, global = true, env = "WORKBENCH_DB")]
    pub db: Option<PathBuf>,

    /// Extra directory to search for plugin libraries (repeatable; WORKBENCH_PLUGIN_PATH adds more).
    #[arg(long = "plugin-dir", global = true)]
    pub plugin_dirs: Vec<PathBuf>,

    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// List plugins: name, kind, version, fingerprint, path, hyperparameters, load errors.
    Plugins {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Train a layer on a task in a worker process, recording the run in the database.
    Train {
        /// Layer plugin.
        #[arg(long, default_value = "hyperset")]
        layer: String,
        /// Task plugin.
        #[arg(long, default_value = "sudoku")]
        task: String,
        /// Overrides `key=value` (prefix with layer., task. or train. when a key is ambiguous).
        overrides: Vec<String>,
        /// Print the worker's JSON events instead of a progress bar.
        #[arg(long)]
        json: bool,
    },
    /// Continue an interrupted or failed run from its last checkpoint.
    Resume {
        /// Run id.
        run: i64,
        /// Print the worker's JSON events instead of a progress bar.
        #[arg(long)]
        json: bool,
    },
    /// List runs, or show one.
    Runs {
        #[command(subcommand)]
        action: Option<RunsAction>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Check numerically that each energy-derived layer's updates are its energies' gradients.
    Verify {
        /// Only this layer plugin.
        #[arg(long)]
        layer: Option<String>,
        /// Layer overrides `key=value` (with --layer).
        overrides: Vec<String>,
        /// Seed of the random parameters and inputs.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Measure training throughput (samples/s, GFLOP/s) of a configuration.
    Bench {
        /// Layer plugin.
        #[arg(long, default_value = "hyperset")]
        layer: String,
        /// Timed steps (after two warm-up steps).
        #[arg(long, default_value_t = 10)]
        steps: usize,
        /// Overrides `key=value` as for `train`.
        overrides: Vec<String>,
    },
    /// Draw runs side by side in one PNG or SVG image: loss, metrics, energy, rank, angle, depth.
    Plot {
        /// Run ids, comma-separated (e.g. 3,4,7).
        #[arg(long)]
        runs: String,
        /// Panels, comma-separated: loss, metric, energy, erank, angle, depth.
        #[arg(long, default_value = "loss,metric,energy,erank,angle,depth")]
        panels: String,
        /// Output file, `.png` or `.svg`.
        #[arg(long)]
        out: PathBuf,
        /// Image size in pixels, WIDTHxHEIGHT.
        #[arg(long, default_value = "1600x900")]
        size: String,
    },
    /// Ablation table of runs: one row per configuration, metrics as mean ± std over seeds.
    Ablation {
        /// Run ids, comma-separated (e.g. 3,4,7); default: every finished run.
        #[arg(long)]
        runs: Option<String>,
        /// Output format: md, latex or csv.
        #[arg(long, default_value = "md")]
        format: String,
        /// Write to this file instead of standard output.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Open the terminal workbench (the default when no command is given).
    Tui,
    /// Internal: train stored run N (started by `train` and `resume`).
    #[command(hide = true)]
    Worker {
        #[arg(long)]
        run: i64,
        #[arg(long)]
        resume: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum RunsAction {
    /// Configuration, status and metric summary of one run.
    Show {
        /// Run id.
        run: i64,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
}

/// Parses the command line and runs the command; returns the process exit code.
pub fn main() -> i32 {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return 1;
        }
    };
    match runtime.block_on(commands::run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            1
        }
    }
}
