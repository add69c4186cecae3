//! The command line.

use crate::commands;
use crate::executor::Executor;
use crate::host::{self, PluginHost};
use crate::store::Claims;
use crate::store::StoreLocation;
use clap::{Parser, Subcommand};
use std::path::PathBuf;

/// Where every command's help lists the options that apply to all commands, apart from its own.
const GLOBAL: &str = "Global options";

/// A research workbench for Transformer layers derived from energy minimisation.
#[derive(Parser, Debug)]
#[command(name = "workbench", version, about)]
pub struct Cli {
    /// Run store: an SQLite file, or a PostgreSQL URL (postgres://user:password@host/db) shared
    /// by a cluster. Default: runs.db in the repository root when run from the workspace, else
    /// in the current directory.
    #[arg(long, global = true, help_heading = GLOBAL, env = "WORKBENCH_DB", value_parser = StoreLocation::parse_arg)]
    pub db: Option<StoreLocation>,

    /// Directory for run files (checkpoints, worker logs), reachable from every machine that
    /// runs workers. Default: next to an SQLite file; required with a PostgreSQL store.
    #[arg(long, global = true, help_heading = GLOBAL, env = "WORKBENCH_ARTIFACTS")]
    pub artifacts: Option<PathBuf>,

    /// Where `train`, `sweep`, `eval`, `queue` and the TUI run workers: `local` (processes on this
    /// machine) or `slurm` (one batch job per run; needs a store every node reaches).
    #[arg(long, global = true, help_heading = GLOBAL, env = "WORKBENCH_EXECUTOR", default_value = "local")]
    pub executor: String,

    /// Options for Slurm jobs, passed to sbatch: `partition=gpu,time=04:00:00,gres=gpu:1,mem=32G`.
    #[arg(long, global = true, help_heading = GLOBAL, env = "WORKBENCH_SLURM")]
    pub slurm: Option<String>,

    /// Extra directory to search for plugin libraries (repeatable; WORKBENCH_PLUGIN_PATH adds more).
    #[arg(long = "plugin-dir", global = true, help_heading = GLOBAL)]
    pub plugin_dirs: Vec<PathBuf>,

    /// The workspace whose plugins are built and watched. Default: the one holding the
    /// current directory, else the one this binary was built from.
    #[arg(long, global = true, help_heading = GLOBAL, env = "WORKBENCH_WORKSPACE")]
    pub workspace: Option<PathBuf>,

    /// More messages on stderr: -v adds the workbench's debug messages, -vv its trace
    /// messages. Workers started by the command inherit it.
    #[arg(short, long, global = true, help_heading = GLOBAL, action = clap::ArgAction::Count, conflicts_with = "quiet")]
    pub verbose: u8,

    /// Only errors on stderr (results on stdout are unchanged).
    #[arg(short, long, global = true, help_heading = GLOBAL)]
    pub quiet: bool,

    #[command(subcommand)]
    pub command: Option<Command>,

    /// Folder the TUI's exports (figures, ablation tables) and `plot`'s without `--out` are
    /// written to, created on demand.
    /// Default: `exports` next to an SQLite run store, else in the current directory.
    #[arg(long, global = true, help_heading = GLOBAL, env = "WORKBENCH_EXPORTS")]
    pub exports: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Check that this machine, with these settings, can do what the other commands need: the
    /// run store opens, run files can be written, workers can start where they are to run (a
    /// Slurm controller answers and would take the jobs), the plugins load; and say what runs
    /// the CPU kernels and which CUDA devices are seen. Exit code 1 when a check fails.
    Doctor {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// List plugins: name, kind, version, fingerprint, path, hyperparameters, load errors.
    Plugins {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Train a layer on a task in a worker process, recording the run in the database.
    Train {
        /// Layer plugin (default: the experiment file's, else hyperset).
        #[arg(long)]
        layer: Option<String>,
        /// Task plugin (default: the experiment file's, else sudoku).
        #[arg(long)]
        task: Option<String>,
        // `[layer]` and the like are TOML tables in the help text, not links.
        #[allow(rustdoc::broken_intra_doc_links)]
        /// Experiment file (TOML with [layer], [task], [train]); repeatable, later files win.
        #[arg(long = "config", value_name = "FILE")]
        configs: Vec<PathBuf>,
        /// Overrides `key=value` (prefix with layer., task. or train. when a key is ambiguous);
        /// they win over the experiment files.
        overrides: Vec<String>,
        /// Print the worker's JSON events instead of a progress bar.
        #[arg(long)]
        json: bool,
    },
    /// Store a published PyTorch checkpoint (.safetensors, .pth, .pt) as a finished, evaluated run.
    Import {
        /// The checkpoint: a safetensors file or a PyTorch state dict saved with torch.save.
        file: PathBuf,
        /// Layer plugin of the published model (hyperset or transformer).
        #[arg(long)]
        layer: String,
        /// Task plugin of the published model (sudoku).
        #[arg(long)]
        task: String,
        /// Overrides `key=value`, after the options read off the checkpoint (e.g. iterations=8).
        overrides: Vec<String>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Score a stored run's checkpoint again with other evaluation settings (deeper
    /// iterations, more examples, other evaluation data) as a new run tagged `eval`, run by the
    /// executor as any run is: `workbench eval 12 eval_depths=2,4 eval_examples=1000`.
    Eval {
        /// The runs whose checkpoints are scored (`12`, `12,13` or `12 13`), then the settings
        /// that differ from theirs, `key=value`: the trainer's evaluation keys (eval_depths,
        /// eval_examples, eval_batch, device, threads, sphere_head, sphere_tokens) and any layer
        /// or task key the checkpoint still fits (iterations, difficulty, eval_puzzles,
        /// eval_csv, ...).
        #[arg(value_name = "RUNS|KEY=VALUE")]
        args: Vec<String>,
        #[command(flatten)]
        pick: commands::runs::RunPick,
        /// Evaluations at once (default: one per CUDA device, else 1; with --executor slurm,
        /// 256 jobs).
        #[arg(long, value_parser = at_least_one)]
        jobs: Option<usize>,
        /// Only queue the evaluations; `workbench queue` or the TUI starts them.
        #[arg(long)]
        detach: bool,
        /// JSON lines on stdout: the queued evaluations, each start and end, then what each
        /// scored.
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
    /// List runs, or show, compare, annotate or export them.
    Runs {
        #[command(subcommand)]
        action: Option<RunsAction>,
        /// Run ids (`runs 3,4`) or filter terms (`runs status:finished 'd>=64'`): the runs
        /// listed, as --runs and --filter pick them.
        #[arg(value_name = "IDS|FILTER")]
        terms: Vec<String>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
        /// List only these runs (`--runs`, `--sweep`, `--filter`, `--last`).
        #[command(flatten)]
        pick: commands::runs::RunPick,
        /// The list's order: a column (id, status, layer, task, steps, params, time), a
        /// metric's last evaluation value (cell_acc) or best (best:cell_acc), best first;
        /// -KEY reverses. Default: by id.
        #[arg(long, value_name = "KEY", allow_hyphen_values = true)]
        sort: Option<String>,
    },
    /// Check numerically that each energy-derived layer's updates are its energies' gradients.
    Verify {
        /// Only this layer plugin.
        #[arg(long, conflicts_with = "run")]
        layer: Option<String>,
        /// The layer of this stored run, with its checkpoint's parameters (trained or imported).
        #[arg(long)]
        run: Option<i64>,
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
    #[command(group(clap::ArgGroup::new("paired").args(["reference", "peak"]).multiple(true)))]
    Bench {
        /// Layer plugin.
        #[arg(long, default_value = "hyperset")]
        layer: String,
        /// Task plugin.
        #[arg(long, default_value = "sudoku")]
        task: String,
        /// Timed steps (after two warm-up steps).
        #[arg(long, default_value_t = 10, value_parser = at_least_one)]
        steps: usize,
        /// Time the same model in PyTorch CPU eager too, in turn with the workbench's steps
        /// (needs python3 with torch, or WORKBENCH_PYTHON), and print the ratio.
        #[arg(long)]
        reference: bool,
        /// Frame the timed steps with 1024² matrix products on as many threads as the step
        /// has shards, and print the step's GFLOP/s as a share of theirs (the gemm peak).
        #[arg(long)]
        peak: bool,
        /// With --reference or --peak: this many blocks of --steps timed steps, each beside
        /// PyTorch's block (PyTorch first every other round) and framed by the products; prints
        /// each round's ratio and share.
        #[arg(long, default_value_t = 1, value_parser = at_least_one, requires = "paired")]
        rounds: usize,
        /// Overrides `key=value` as for `train`.
        overrides: Vec<String>,
        /// The measurements as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Draw runs side by side in one PNG or SVG image: loss, metrics, energy, rank, angle, depth
    /// (or, with --sphere, one run's token trajectories on the hypersphere).
    Plot {
        /// Run ids (e.g. `plot 3 4 7 --out fig.png`), as --runs gives them.
        #[arg(conflicts_with = "runs", required_unless_present = "runs")]
        ids: Vec<String>,
        /// Run ids, comma-separated (e.g. 3,4,7).
        #[arg(long)]
        runs: Option<String>,
        /// Panels, comma-separated: loss, metric, energy, erank, angle, depth.
        #[arg(long, default_value = "loss,metric,energy,erank,angle,depth")]
        panels: String,
        /// Output file, `.png` or `.svg`; default: a PNG in the exports folder (`--exports`)
        /// named after the runs (`compare-runs-3-4-7.png`, `sphere-run-3.png`), numbered
        /// rather than overwriting one there.
        #[arg(short, long)]
        out: Option<PathBuf>,
        /// Image size in pixels, WIDTHxHEIGHT.
        #[arg(long, default_value = "1600x900")]
        size: String,
        /// Instead of the panels: one run's token trajectories on the hypersphere, in 3-D.
        #[arg(long, conflicts_with = "panels")]
        sphere: bool,
        /// With --sphere: the evaluation step to draw (default: the last one).
        #[arg(long, requires = "sphere")]
        step: Option<u64>,
        /// Print what was written as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Ablation table of runs: one row per configuration, metrics as mean ± std over seeds.
    Ablation {
        /// Run ids (e.g. `ablation 3 4 7`), as --runs gives them.
        #[arg(conflicts_with_all = ["runs", "sweep"])]
        ids: Vec<String>,
        /// Run ids, comma-separated (e.g. 3,4,7); default: every finished run.
        #[arg(long)]
        runs: Option<String>,
        /// Sweep ids, comma-separated: their runs, rows in the sweeps' declared order.
        #[arg(long, conflicts_with = "runs")]
        sweep: Option<String>,
        /// Only these metrics (comma-separated, e.g. cell_acc,loss); default: all.
        #[arg(long)]
        metrics: Option<String>,
        /// Output format: md, latex, csv or json.
        #[arg(long, default_value = "md")]
        format: String,
        /// Write to this file instead of standard output.
        #[arg(short, long)]
        out: Option<PathBuf>,
        /// The table as one JSON object (as --format json).
        #[arg(long, conflicts_with = "format")]
        json: bool,
        /// One metric laid out over two keys, rows then columns (e.g. layers,iterations): a
        /// text grid, --json, or a heatmap image with --out FILE.png|.svg.
        #[arg(long, value_name = "ROWS,COLUMNS", conflicts_with = "metrics")]
        heatmap: Option<String>,
        /// The heatmap's metric: NAME (its final value) or best:NAME; default: the headline
        /// metric.
        #[arg(long, requires = "heatmap")]
        metric: Option<String>,
        /// Only runs whose configuration has KEY=VALUE; repeatable.
        #[arg(long = "where", value_name = "KEY=VALUE")]
        filters: Vec<String>,
        /// Rows sorted by this column, best first: a metric (its final value), best:NAME,
        /// params, s/step or peak MiB. Default: the order of the runs (the sweeps' grid).
        #[arg(long, value_name = "COLUMN", conflicts_with = "heatmap")]
        sort: Option<String>,
    },
    /// Open the terminal workbench (the default when no command is given).
    Tui {
        /// Workers the TUI's queue runs at once (default: one per CUDA device, else 1; with
        /// --executor slurm, 256 jobs).
        #[arg(long, value_parser = at_least_one)]
        jobs: Option<usize>,
        /// The TUI's queue starts every user's queued runs, not only yours (as `queue
        /// --all-users`).
        #[arg(long)]
        all_users: bool,
    },
    /// Queue a grid of runs: `key=a,b,c` lists and `key=lo:hi:logN` ranges, over one or more
    /// layers; every point is validated before anything is queued. Then runs the queue.
    Sweep {
        /// Layer plugins, comma-separated (baselines join the same table; default: the
        /// experiment file's, else hyperset).
        #[arg(long)]
        layer: Option<String>,
        /// Task plugin (default: the experiment file's, else sudoku).
        #[arg(long)]
        task: Option<String>,
        // `[layer]` and the like are TOML tables in the help text, not links.
        #[allow(rustdoc::broken_intra_doc_links)]
        /// Experiment file (TOML with [layer], [task], [train] and [sweep]); repeatable, later
        /// files win.
        #[arg(long = "config", value_name = "FILE")]
        configs: Vec<PathBuf>,
        /// Axes `key=a,b,c`, `key=lo:hi:logN` or `key=lo:hi:linN`; single values fix a key.
        /// They win over the experiment files.
        axes: Vec<String>,
        /// A name for the sweep (default: the experiment file's, else made from the axes).
        #[arg(long)]
        name: Option<String>,
        /// Workers at once (default: one per CUDA device, else 1, since a CPU worker uses
        /// every core; several runs on a CPU usually finish sooner as `threads=1 --jobs <cores>`;
        /// with --executor slurm, 256 jobs).
        #[arg(long, value_parser = at_least_one)]
        jobs: Option<usize>,
        /// Only queue the runs; `workbench queue` or the TUI starts them.
        #[arg(long)]
        detach: bool,
        /// Plan and check every point and print the runs it would queue; queue none.
        #[arg(long, conflicts_with = "detach")]
        dry_run: bool,
        /// JSON lines on stdout: the queued runs, each start, the end with every run's status.
        #[arg(long)]
        json: bool,
    },
    /// List sweeps, or pause, resume or cancel one.
    Sweeps {
        #[command(subcommand)]
        action: Option<SweepsAction>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Start your queued runs as workers free up, until none is left (Ctrl-C stops).
    Queue {
        /// Workers at once (default: one per CUDA device, else 1; with --executor slurm, 256
        /// jobs).
        #[arg(long, value_parser = at_least_one)]
        jobs: Option<usize>,
        /// Start every user's queued runs, not only yours (a lab's shared runner; their jobs
        /// run under this account).
        #[arg(long)]
        all_users: bool,
        /// JSON lines on stdout: each start, then the end with every run's status.
        #[arg(long)]
        json: bool,
    },
    /// Rebuild and reload plugins as their sources or libraries change; prints each rebuild
    /// and reload (Ctrl-C stops).
    Watch {
        /// One JSON object per line and event (`event`: plugin, watching, building, output,
        /// activated, not_activated, build_failed, load_failed, note).
        #[arg(long)]
        json: bool,
    },
    /// Create plugins.
    Plugin {
        #[command(subcommand)]
        action: PluginAction,
    },
    /// List the cached real data sets, or fetch one: `datasets fetch cifar10 | cifar100 | mnist |
    /// fashion-mnist | sudoku-hard` (download with resume, checksum, unpack).
    Datasets(crate::commands::datasets::DatasetsArgs),
    /// Manage run stores: copy runs between two stores (SQLite and PostgreSQL), or back one up while workers write.
    Db {
        #[command(subcommand)]
        action: DbAction,
    },
    /// Print a shell completion script: `workbench completions bash >
    /// ~/.local/share/bash-completion/completions/workbench` (also zsh, fish, elvish, powershell).
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page on standard output (`workbench man | man -l -`), or write
    /// workbench.1 and a page per command into a directory.
    Man {
        /// Directory for workbench.1, workbench-train.1, ... (created if needed).
        #[arg(short, long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
    /// Internal: load one library in this short-lived process, so a library whose loading
    /// crashes or hangs cannot take the host down (see host::probe).
    #[command(hide = true, name = "probe-plugin")]
    ProbePlugin { path: PathBuf },
    /// Internal: train stored run N (started by `train` and `resume`).
    #[command(hide = true)]
    Worker {
        #[arg(long)]
        run: i64,
        #[arg(long)]
        resume: bool,
        /// The process on this host that claimed the run for this worker.
        #[arg(long)]
        claimed_by: Option<u32>,
        /// The Slurm submission that started this worker (its batch script says so).
        #[arg(long)]
        submission: Option<String>,
    },
}

/// What `workbench db` does.
#[derive(Subcommand, Debug)]
pub enum DbAction {
    /// Copy every run (metrics, diagnostics, logs, artifact records, notes, tags) and sweep
    /// from one store to another, e.g. a laptop's runs.db into the lab's PostgreSQL store;
    /// again, only what the target does not hold yet. `--runs`, `--sweep`, `--filter` pick runs.
    Copy {
        /// Source store: an SQLite file or a postgres:// URL.
        #[arg(long, value_parser = StoreLocation::parse_arg)]
        from: StoreLocation,
        /// Target store (created and migrated if needed).
        #[arg(long, value_parser = StoreLocation::parse_arg)]
        to: StoreLocation,
        /// The source's runs to copy (default: all), each with its sweep.
        #[command(flatten)]
        pick: commands::runs::RunPick,
        /// Record the copied runs as stored by this user (your login where the target's
        /// runners run; they start their own user's runs). Default: as each was stored.
        #[arg(long, value_name = "USER", value_parser = user_name_arg)]
        as_user: Option<String>,
        /// Machine-readable report.
        #[arg(long)]
        json: bool,
    },
    /// Write a consistent copy of the store (--db) to a new SQLite file, while workers may be
    /// writing to it.
    Backup {
        /// The new file (refused if it exists).
        file: PathBuf,
    },
}

/// What `workbench plugin` does.
#[derive(Subcommand, Debug)]
pub enum PluginAction {
    /// Create plugins/NAME from a template, add it to the workspace, build and load it.
    New {
        /// Plugin and crate name (lower case, digits, `-`, `_`).
        name: String,
        /// Template: a layer derived from an energy, or a generated task.
        #[arg(long, value_enum, default_value = "layer")]
        kind: crate::scaffold::TemplateKind,
        /// Only create the crate; do not build it.
        #[arg(long)]
        no_build: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum RunsAction {
    /// The table of runs, as `workbench runs` alone prints it.
    #[command(visible_alias = "ls")]
    List {
        /// Run ids or filter terms, as `runs` takes them.
        #[arg(value_name = "IDS|FILTER")]
        terms: Vec<String>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
        /// List only these runs (`--runs`, `--sweep`, `--filter`, `--last`).
        #[command(flatten)]
        pick: commands::runs::RunPick,
        /// The list's order, as `runs --sort` takes it.
        #[arg(long, value_name = "KEY", allow_hyphen_values = true)]
        sort: Option<String>,
    },
    /// Configuration, status and metric summary of one run.
    Show {
        /// Run id.
        run: i64,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
        /// Print an experiment file that reproduces the run (`workbench train --config FILE`).
        #[arg(long, conflicts_with = "json")]
        config: bool,
    },
    /// Stop runs: a queued one is cancelled, a running one is interrupted with a checkpoint
    /// (`runs cancel 12,13`, or `--filter status:running` and the other picks, which leave
    /// ended runs as they are).
    Cancel {
        #[command(flatten)]
        pick: PickedRuns,
        /// Seconds the worker gets to stop at its next step before it is terminated
        /// (SIGTERM, then SIGKILL).
        #[arg(long, default_value_t = crate::train::stop::DEFAULT_GRACE.as_secs_f64())]
        grace: f64,
        /// Stop runs other users stored too (in a store a lab shares; without it they are
        /// named and nothing is stopped).
        #[arg(long)]
        yes: bool,
    },
    /// Keep queued runs from starting (ids, or the queued runs a pick names).
    Pause {
        #[command(flatten)]
        pick: PickedRuns,
    },
    /// Let paused runs start again.
    Unpause {
        #[command(flatten)]
        pick: PickedRuns,
    },
    /// Put interrupted or failed runs back in the queue, each continuing from its checkpoint
    /// (`runs requeue 12,13`, or `--sweep 3` for those of the sweep).
    Requeue {
        #[command(flatten)]
        pick: PickedRuns,
    },
    /// Print a run's log (its worker's lines, evaluations, Slurm's reasons for a waiting job);
    /// with --follow, the lines to come too, until the run ends (Ctrl-C stops following, the
    /// run goes on).
    #[command(alias = "logs")]
    Log {
        run: i64,
        /// Only the last N lines logged so far.
        #[arg(long, value_name = "N")]
        last: Option<usize>,
        /// Keep printing lines as they are logged until the run ends; the exit code is then
        /// the run's, as `train` gives it.
        #[arg(long, short = 'f')]
        follow: bool,
    },
    /// Delete runs and what the store records for them (metrics, diagnostics, logs, artifact
    /// records; their files stay on disk unless --files): `runs delete 12,13 --yes`, or the
    /// runs --sweep, --filter, --last pick: `runs delete --filter status:failed --yes`.
    /// Running runs are refused; cancel them first.
    Delete {
        /// The runs to delete (ids or these options; there is no default).
        #[command(flatten)]
        pick: PickedRuns,
        /// Delete without asking: without it the command names the runs and deletes none.
        #[arg(long)]
        yes: bool,
        /// Delete each run's files too: its directory `runs/<id>/` in the artifacts directory
        /// (checkpoint, worker and job logs, batch script).
        #[arg(long)]
        files: bool,
    },
    /// Replace runs' tags, `runs tag 12 baseline,paper` (an empty list clears them), or add
    /// and remove some, `runs tag 12,13 +paper,-draft`.
    Tag {
        /// Run ids, comma-separated.
        runs: String,
        /// Comma-separated tags (replacing the runs' tags), or +tag to add and -tag to remove.
        #[arg(allow_hyphen_values = true)]
        tags: String,
    },
    /// Replace a run's notes: `runs note 12 lr too high, diverges at step 300`.
    Note {
        run: i64,
        /// The notes (words are joined with spaces; an empty string clears them).
        #[arg(required = true, num_args = 1.., allow_hyphen_values = true)]
        text: Vec<String>,
    },
    /// Write runs' full metric curves and per-iteration diagnostics, one row per value with
    /// the run's configuration, as CSV or JSON lines; or as TensorBoard event files, one
    /// directory per run. Default: every run.
    Export {
        /// The runs to export (default: all).
        #[command(flatten)]
        pick: PickedRuns,
        /// csv, jsonl or tensorboard.
        #[arg(long, default_value = "csv")]
        format: String,
        /// The file to write (csv, jsonl; default: standard output), or the directory of the
        /// event files (tensorboard).
        #[arg(short, long)]
        out: Option<PathBuf>,
        /// Replace an existing file, or a run's existing event files.
        #[arg(long)]
        force: bool,
    },
    /// Compare runs side by side: the configuration keys whose values are not the same in
    /// every run, plugin builds, final metrics (`runs diff 3 4`, `runs diff --sweep 2`).
    #[command(visible_alias = "compare")]
    Diff {
        #[command(flatten)]
        pick: PickedRuns,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum SweepsAction {
    /// The sweeps with their runs by status, as `workbench sweeps` alone prints them.
    #[command(visible_alias = "ls")]
    List {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// The sweep as declared (layers, task, grid), its runs by status, the command that
    /// queues it again, and its runs with the keys that differ between them.
    Show {
        sweep: i64,
        /// Machine-readable output: the sweep and its runs.
        #[arg(long)]
        json: bool,
    },
    /// Keep the sweep's queued runs from starting.
    Pause { sweep: i64 },
    /// Let them start again.
    Resume { sweep: i64 },
    /// Cancel the queued runs and stop the running ones.
    Cancel {
        sweep: i64,
        /// Stop them even when other users stored them (without it, such a sweep is named and
        /// nothing is stopped).
        #[arg(long)]
        yes: bool,
    },
}

/// The runs a command acts on one by one: ids as arguments (`12,13` or `12 13`), or the
/// options that pick runs for `runs`.
#[derive(clap::Args, Debug)]
pub struct PickedRuns {
    /// Run ids (e.g. `12,13` or `12 13`), as --runs gives them.
    #[arg(conflicts_with_all = ["runs", "sweep"])]
    ids: Vec<String>,
    #[command(flatten)]
    pick: commands::runs::RunPick,
}

impl PickedRuns {
    /// The pick, the ids as `--runs`.
    fn into_pick(self) -> commands::runs::RunPick {
        let mut pick = self.pick;
        if !self.ids.is_empty() {
            pick.runs = Some(self.ids.join(","));
        }
        pick
    }
}

/// The runs `workbench runs [list] TERMS...` lists. A term naming one of `runs`' commands
/// came after the ids it was meant to act on (`runs 3 show`): refused with the order that works.
fn listed_runs(pick: commands::runs::RunPick, terms: &[String]) -> anyhow::Result<commands::runs::RunPick> {
    use clap::CommandFactory;
    if terms.is_empty() {
        return Ok(pick);
    }
    let cli = Cli::command();
    let runs = cli.find_subcommand("runs").expect("`runs` is a command");
    if let Some((term, command)) = terms.iter().find_map(|t| runs.find_subcommand(t).map(|c| (t, c.get_name()))) {
        anyhow::bail!(
            "`{term}` is a command of `runs` and comes right after it (`workbench runs {command} ...`); to filter \
             on the word, give it as `--filter {term}`"
        );
    }
    pick.with_terms(terms)
}

/// A count that must be at least one (workers, timed steps), refused by clap with the reason
/// before the command does anything.
fn at_least_one(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("`{text}` is not a whole number; give a count such as 2")),
    }
}

/// A user name as runs record who stored them: not empty, no spaces or commas (the runs
/// table and `user:` filters read it as one word).
fn user_name_arg(text: &str) -> Result<String, String> {
    let name = text.trim();
    if name.is_empty() {
        return Err("is empty; give the login the runs belong to, such as alice".into());
    }
    if name.chars().any(|c| c.is_whitespace() || c == ',') {
        return Err(format!("`{name}` is not one login name (it holds a space or a comma)"));
    }
    Ok(name.to_string())
}

/// Process settings measured to matter for CPU training on small machines (README,
/// Benchmarks), applied before any plugin runs a tensor op:
/// - glibc keeps freed buffers instead of returning them to the OS (mmap and trim
///   thresholds): a training step frees and reallocates the same large buffers every time,
///   and giving them back costs 15-30 % of the step in page faults. The shards' threads
///   allocate from glibc's per-thread arenas, whose heaps still shrink down to the top pad
///   when their top is freed, so the pad is raised to 64 MiB (+9 % for the Energy
///   Transformer, +24 % for the intrinsic attentions, others unchanged);
/// - training processes keep at most one such arena per core (`MALLOC_ARENA_MAX`, unless
///   set; glibc's default is eight): the shards' and evaluations' threads are new at every
///   step, and as they came to new arenas each one kept its own high-water mark, so a
///   worker's memory grew with every evaluation (1.5 GiB after four evaluations of a run that
///   needs 0.5; the same with one arena per core: 0.8 GiB after thirty, steps as fast);
/// - candle's thread pool spins only briefly between ops (`CANDLE_BARRIER_POOL_SPIN_LIMIT`,
///   unless set): every plugin carries its own copy of candle and its own pool, and their
///   spinning steals the cores the matrix products need.
fn tune_process(command: Option<&Command>) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator thresholds; it is called before other threads start.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX);
        libc::mallopt(libc::M_TOP_PAD, 64 << 20);
    }
    if std::env::var_os("CANDLE_BARRIER_POOL_SPIN_LIMIT").is_none() {
        // Single-threaded at this point, before any other thread reads the environment.
        std::env::set_var("CANDLE_BARRIER_POOL_SPIN_LIMIT", "1");
    }
    // Training processes split each batch over threads themselves (train::parallel), so each
    // op runs on one thread unless the user asks otherwise.
    let training = trains(command);
    if training && std::env::var_os("RAYON_NUM_THREADS").is_none() {
        std::env::set_var("RAYON_NUM_THREADS", "1");
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if training && std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // One per core, as `threads=0` counts them.
        let cores = crate::train::parallel::shard_count(0, usize::MAX, true);
        // SAFETY: as above; the limit applies to arenas made from now on.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, cores.min(i32::MAX as usize) as i32);
        }
    }
}

/// Whether `command` trains (a worker, or the bench), on threads of its own.
fn trains(command: Option<&Command>) -> bool {
    matches!(command, Some(Command::Worker { .. } | Command::Bench { .. }))
}

/// Commands that only print end quietly when their output is closed (`workbench runs | head`),
/// as other Unix tools do, instead of panicking on the broken pipe. Not the worker (it must
/// train on), nor the commands that follow one or own a terminal (they handle it themselves),
/// nor `bench --reference` (it writes to PyTorch's standard input and reports its end).
fn quiet_on_closed_output(command: Option<&Command>) {
    let follows = matches!(
        command,
        None | Some(
            Command::Worker { .. }
                | Command::Train { .. }
                | Command::Resume { .. }
                | Command::Tui { .. }
                | Command::Bench { reference: true, .. }
        )
    );
    if !follows {
        // SAFETY: restoring the default disposition of SIGPIPE before any thread is started.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
}

/// Parses the command line and runs the command; returns the process exit code.
pub fn main() -> i32 {
    let cli = Cli::parse();
    // First, while the process has one thread: it may start again (module `huge_pages`).
    crate::huge_pages::start(trains(cli.command.as_ref()));
    if let Some(filter) = crate::logging::verbosity_filter(cli.verbose, cli.quiet) {
        // Through the environment so that workers (local processes, Slurm jobs) inherit it;
        // single-threaded here.
        std::env::set_var(crate::logging::FILTER_VAR, filter);
    }
    crate::logging::init();
    // Checked here, before any plugin is loaded: the kernels inside the plugins read
    // WORKBENCH_KERNELS_ISA and WORKBENCH_BLAS too, and have no way to report a value they
    // cannot use.
    if let Err(problem) = plugin_api::isa::requested().and(plugin_api::blas::requested()) {
        eprintln!("error: {problem}");
        return crate::exit_code::USAGE;
    }
    if let Some(workspace) = &cli.workspace {
        // Read by the plugin host (host::workspace) and passed on to workers; single-threaded here.
        std::env::set_var("WORKBENCH_WORKSPACE", workspace);
    }
    tune_process(cli.command.as_ref());
    quiet_on_closed_output(cli.command.as_ref());
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return crate::exit_code::ERROR;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            // The command's result, printed whatever RUST_LOG filters (module `logging`).
            eprintln!("error: {e:#}");
            crate::exit_code::of_error(&e)
        }
    }
}

/// Runs the parsed command line; returns the process exit code. Stores the command opened
/// are closed at the end (an SQLite store folds its write-ahead log into the file).
async fn run(cli: Cli) -> anyhow::Result<i32> {
    let code = dispatch(cli).await;
    commands::close_stores().await;
    code
}

async fn dispatch(cli: Cli) -> anyhow::Result<i32> {
    let db = cli.db.clone().unwrap_or_else(|| {
        let default = StoreLocation::Sqlite(commands::default_db_path());
        commands::note_default_db(&default);
        default
    });
    let artifacts = cli.artifacts.clone();
    let dirs = cli.plugin_dirs.clone();
    let executor = Executor::from_args(&cli.executor, cli.slurm.as_deref())?;
    crate::memory::Budget::set(executor.memory_budget());
    let exports = cli.exports.clone().unwrap_or_else(|| commands::default_exports_dir(&db));
    match cli.command {
        None => {
            let host = commands::load_plugins(&dirs);
            let store = commands::open_store(&db, &artifacts).await?;
            let queue = crate::tui::Queue { jobs: executor.default_jobs(), claims: Claims::mine(&store), executor };
            crate::tui::run(store, host, dirs, queue, exports).await
        }
        Some(Command::Tui { jobs, all_users }) => {
            let host = commands::load_plugins(&dirs);
            let store = commands::open_store(&db, &artifacts).await?;
            let jobs = jobs.unwrap_or_else(|| executor.default_jobs());
            let claims = if all_users { Claims::Everyone } else { Claims::mine(&store) };
            crate::tui::run(store, host, dirs, crate::tui::Queue { jobs, claims, executor }, exports).await
        }
        Some(Command::Ablation { ids, runs, sweep, metrics, format, out, json, heatmap, metric, filters, sort }) => {
            let runs = runs.or_else(|| (!ids.is_empty()).then(|| ids.join(",")));
            let store = commands::open_store(&db, &artifacts).await?;
            let selection = match (&runs, &sweep) {
                (_, Some(s)) => commands::ablation::Selection::Sweeps(s),
                (Some(r), None) => commands::ablation::Selection::Runs(r),
                (None, None) => commands::ablation::Selection::Finished,
            };
            let format = if json { "json" } else { format.as_str() };
            let options = commands::ablation::Options {
                metrics: metrics.as_deref(),
                format,
                out: out.as_deref(),
                heatmap: heatmap.as_deref(),
                metric: metric.as_deref(),
                filters: &filters,
                sort: sort.as_deref(),
            };
            commands::ablation::run(&store, selection, options).await
        }
        Some(Command::Sweep { layer, task, configs, axes, name, jobs, detach, dry_run, json }) => {
            let host = commands::load_plugins(&dirs);
            let store = commands::open_store(&db, &artifacts).await?;
            let jobs_chosen = jobs.is_some();
            let jobs = jobs.unwrap_or_else(|| executor.default_jobs());
            let args = commands::sweep::SweepArgs {
                layers: layer.as_deref(),
                task: task.as_deref(),
                configs: &configs,
                axes: &axes,
                name: name.as_deref(),
                jobs,
                jobs_chosen,
                detach,
                dry_run,
                executor: &executor,
                json,
            };
            commands::sweep::sweep(&store, &host, &dirs, args).await
        }
        Some(Command::Sweeps { action, json }) => {
            let store = commands::open_store(&db, &artifacts).await?;
            match action {
                None => commands::sweep::list(&store, json).await,
                Some(SweepsAction::List { json: list_json }) => commands::sweep::list(&store, json || list_json).await,
                Some(SweepsAction::Show { sweep: id, json: show_json }) => {
                    commands::sweep::show(&store, id, json || show_json).await
                }
                Some(SweepsAction::Pause { sweep: id }) => commands::sweep::hold_sweep(&store, id, true).await,
                Some(SweepsAction::Resume { sweep: id }) => commands::sweep::hold_sweep(&store, id, false).await,
                Some(SweepsAction::Cancel { sweep: id, yes }) => commands::sweep::cancel_sweep(&store, id, yes).await,
            }
        }
        Some(Command::Queue { jobs, all_users, json }) => {
            let store = commands::open_store(&db, &artifacts).await?;
            let jobs = jobs.unwrap_or_else(|| executor.default_jobs());
            let claims = if all_users { Claims::Everyone } else { Claims::mine(&store) };
            commands::sweep::run_until_done(&store, &dirs, jobs, &executor, claims, None, json).await
        }
        Some(Command::Plugins { json }) => commands::plugins::list(&commands::load_plugins(&dirs), json),
        Some(Command::Doctor { json }) => {
            let settings = commands::doctor::Settings {
                db: &db,
                artifacts: &artifacts,
                executor: &executor,
                slurm: cli.slurm.as_deref(),
                plugin_dirs: &dirs,
            };
            commands::doctor::run(&settings, json).await
        }
        Some(Command::Watch { json }) => {
            let host = commands::load_plugins(&dirs);
            tokio::task::block_in_place(|| commands::watch::run(host, &dirs, json))
        }
        Some(Command::Plugin { action: PluginAction::New { name, kind, no_build } }) => {
            tokio::task::block_in_place(|| commands::plugin_new::run(&name, kind, !no_build, &dirs))
        }
        Some(Command::Train { layer, task, configs, overrides, json }) => {
            let host = commands::load_plugins(&dirs);
            let store = commands::open_store(&db, &artifacts).await?;
            let experiment = crate::experiment_file::Experiment::load(&configs).map_err(crate::exit_code::refused)?;
            let (layer, task) =
                experiment.train_plugins(layer.as_deref(), task.as_deref()).map_err(crate::exit_code::refused)?;
            let overrides = experiment.train_overrides(&overrides);
            commands::train::train(&store, &host, &dirs, &executor, &layer, &task, &overrides, json).await
        }
        Some(Command::Import { file, layer, task, overrides, json }) => {
            let host = commands::load_plugins(&dirs);
            let store = commands::open_store(&db, &artifacts).await?;
            commands::import::run(&store, &host, &file, &layer, &task, &overrides, json).await
        }
        Some(Command::Eval { args, pick, jobs, detach, json }) => {
            let (pick, overrides) = commands::eval::runs_and_settings(args, pick)?;
            let host = commands::load_plugins(&dirs);
            let store = commands::open_store(&db, &artifacts).await?;
            let jobs = jobs.unwrap_or_else(|| executor.default_jobs());
            let how = commands::eval::EvalArgs { dirs: &dirs, executor: &executor, jobs, detach, json };
            commands::eval::evaluate(&store, &host, &pick, &overrides, how).await
        }
        Some(Command::Resume { run, json }) => {
            let store = commands::open_store(&db, &artifacts).await?;
            commands::train::resume(&store, &dirs, run, json).await
        }
        Some(Command::Runs { action, terms, json, pick, sort }) => {
            let store = commands::open_store(&db, &artifacts).await?;
            let listing = pick.picks() || sort.is_some() || !terms.is_empty();
            if listing && matches!(action, Some(RunsAction::List { .. })) {
                anyhow::bail!(
                    "`--runs / --sweep / --filter / --last / --sort` go after `list`: `workbench runs list --sweep N`"
                );
            }
            if listing && action.is_some() {
                // Before a command they pick the runs listed; the commands that act on several
                // runs take them after their name.
                anyhow::bail!(
                    "`runs --runs / --sweep / --filter / --last / --sort` shape the list; a command takes its \
                     runs after its name: `runs export --sweep N`, `runs requeue --filter status:failed`"
                );
            }
            match action {
                None => commands::runs::list(&store, json, &listed_runs(pick, &terms)?, sort.as_deref()).await,
                Some(RunsAction::List { terms, json: list_json, pick, sort }) => {
                    commands::runs::list(&store, json || list_json, &listed_runs(pick, &terms)?, sort.as_deref()).await
                }
                Some(RunsAction::Show { run, config: true, .. }) => commands::runs::show_config(&store, run).await,
                Some(RunsAction::Show { run, json: show_json, .. }) => {
                    commands::runs::show(&store, run, json || show_json).await
                }
                Some(RunsAction::Cancel { pick, grace, yes }) => {
                    commands::runs::cancel(&store, &pick.into_pick(), commands::grace_period(grace)?, yes).await
                }
                Some(RunsAction::Pause { pick }) => commands::runs::hold(&store, &pick.into_pick(), true).await,
                Some(RunsAction::Unpause { pick }) => commands::runs::hold(&store, &pick.into_pick(), false).await,
                Some(RunsAction::Requeue { pick }) => commands::runs::requeue(&store, &pick.into_pick()).await,
                Some(RunsAction::Log { run, last, follow }) => commands::runs::log(&store, run, last, follow).await,
                Some(RunsAction::Delete { pick, yes, files }) => {
                    commands::runs::delete(&store, &pick.into_pick(), yes, files).await
                }
                Some(RunsAction::Tag { runs, tags }) => commands::runs::tag(&store, &runs, &tags).await,
                Some(RunsAction::Note { run, text }) => commands::runs::note(&store, run, &text.join(" ")).await,
                Some(RunsAction::Export { pick, format, out, force }) => {
                    commands::runs::export(&store, &pick.into_pick(), &format, out.as_deref(), force).await
                }
                Some(RunsAction::Diff { pick, json: diff_json }) => {
                    commands::runs::diff(&store, &pick.into_pick(), json || diff_json).await
                }
            }
        }
        Some(Command::Plot { ids, runs, panels, out, size, sphere, step, json }) => {
            let runs = runs.unwrap_or_else(|| ids.join(","));
            let store = commands::open_store(&db, &artifacts).await?;
            let out = commands::plot::Out { file: out, exports };
            if sphere {
                commands::plot::sphere(&store, &runs, step, &out, &size, json).await
            } else {
                commands::plot::run(&store, &runs, &panels, &out, &size, json).await
            }
        }
        Some(Command::Verify { layer, run: Some(run), overrides, seed, json }) => {
            if !overrides.is_empty() || layer.is_some() {
                return Err(crate::exit_code::refused(anyhow::anyhow!(
                    "`verify --run` checks the run's own configuration; drop the overrides"
                )));
            }
            let store = commands::open_store(&db, &artifacts).await?;
            let rows = commands::verify::check_run(&store, &commands::load_plugins(&dirs), run, seed)
                .await
                .map_err(crate::exit_code::refused)?;
            commands::verify::report(&rows, json)
        }
        Some(Command::Verify { layer, run: None, overrides, seed, json }) => {
            commands::verify::run(&commands::load_plugins(&dirs), layer.as_deref(), &overrides, seed, json)
        }
        Some(Command::Bench { layer, task, steps, reference, peak, rounds, overrides, json }) => {
            let timing = commands::bench::Timing { steps, rounds, reference, peak };
            commands::bench::run(&commands::load_plugins(&dirs), (&layer, &task), &timing, &overrides, json)
        }
        Some(Command::Completions { shell }) => commands::completions::completions(shell),
        Some(Command::Man { out }) => commands::completions::man(out.as_deref()),
        Some(Command::Datasets(args)) => commands::datasets::run(args),
        Some(Command::Db { action: DbAction::Copy { from, to, pick, as_user, json } }) => {
            commands::db::copy(&from, &to, &pick, as_user.as_deref(), json).await
        }
        Some(Command::Db { action: DbAction::Backup { file } }) => commands::db::backup(&db, &file).await,
        Some(Command::ProbePlugin { path }) => {
            // What the plugin then declares (or why it is refused) is found again by the host.
            let _ = host::load(&path);
            println!("{}", host::probe::LOADED_MARK);
            Ok(0)
        }
        Some(Command::Worker { run, resume, claimed_by, submission }) => {
            let host = PluginHost::load_dirs(&host::search_path(&dirs));
            let store = crate::train::worker::connect(&db, run).await?.with_artifacts_dir(artifacts);
            let started_by = crate::train::worker::StartedBy { claimed_by, submission };
            crate::train::worker::run(&store, &host, run, resume, &started_by).await?;
            Ok(0)
        }
    }
}
