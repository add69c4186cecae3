//! The implementation of each command.

pub mod ablation;
mod bench;
mod bench_reference;
pub mod datasets;
mod db;
pub mod plot;
mod plugin_new;
mod plugins;
mod runs;
pub mod sweep;
pub mod train;
pub mod verify;
mod watch;

use crate::cli::{Cli, Command, DbAction, RunsAction, SweepsAction};
use crate::executor::Executor;
use crate::host::{self, BuildOutcome, PluginHost};
use crate::store::{process_alive, Store, StoreLocation};
use anyhow::Result;
use std::path::{Path, PathBuf};

/// Runs the parsed command line; returns the process exit code.
pub async fn run(cli: Cli) -> Result<i32> {
    let db = cli.db.clone().unwrap_or_else(|| StoreLocation::Sqlite(default_db_path()));
    let artifacts = cli.artifacts.clone();
    let dirs = cli.plugin_dirs.clone();
    let executor = Executor::from_args(&cli.executor, cli.slurm.as_deref())?;
    match cli.command {
        None => {
            let host = load_plugins(&dirs);
            let store = open_store(&db, &artifacts).await?;
            crate::tui::run(store, host, dirs, crate::queue::default_jobs(), executor).await
        }
        Some(Command::Tui { jobs }) => {
            let host = load_plugins(&dirs);
            let store = open_store(&db, &artifacts).await?;
            crate::tui::run(store, host, dirs, jobs.unwrap_or_else(crate::queue::default_jobs), executor).await
        }
        Some(Command::Ablation { runs, sweep, metrics, format, out }) => {
            let store = open_store(&db, &artifacts).await?;
            let selection = match (&runs, &sweep) {
                (_, Some(s)) => ablation::Selection::Sweeps(s),
                (Some(r), None) => ablation::Selection::Runs(r),
                (None, None) => ablation::Selection::Finished,
            };
            ablation::run(&store, selection, metrics.as_deref(), &format, out.as_deref()).await
        }
        Some(Command::Sweep { layer, task, axes, name, jobs, detach }) => {
            let host = load_plugins(&dirs);
            let store = open_store(&db, &artifacts).await?;
            let jobs = jobs.unwrap_or_else(crate::queue::default_jobs);
            let args = sweep::SweepArgs {
                layers: &layer,
                task: &task,
                axes: &axes,
                name: name.as_deref(),
                jobs,
                detach,
                executor: &executor,
            };
            sweep::sweep(&store, &host, &dirs, args).await
        }
        Some(Command::Sweeps { action, json }) => {
            let store = open_store(&db, &artifacts).await?;
            match action {
                None => sweep::list(&store, json).await,
                Some(SweepsAction::Pause { sweep: id }) => sweep::hold_sweep(&store, id, true).await,
                Some(SweepsAction::Resume { sweep: id }) => sweep::hold_sweep(&store, id, false).await,
                Some(SweepsAction::Cancel { sweep: id }) => sweep::cancel_sweep(&store, id).await,
            }
        }
        Some(Command::Queue { jobs }) => {
            let store = open_store(&db, &artifacts).await?;
            let jobs = jobs.unwrap_or_else(crate::queue::default_jobs);
            sweep::run_until_done(&store, &dirs, jobs, &executor, None).await
        }
        Some(Command::Plugins { json }) => plugins::list(&load_plugins(&dirs), json),
        Some(Command::Watch) => {
            let host = load_plugins(&dirs);
            tokio::task::block_in_place(|| watch::run(host, &dirs))
        }
        Some(Command::Plugin { action: crate::cli::PluginAction::New { name, kind, no_build } }) => {
            tokio::task::block_in_place(|| plugin_new::run(&name, kind, !no_build, &dirs))
        }
        Some(Command::Train { layer, task, overrides, json }) => {
            let host = load_plugins(&dirs);
            let store = open_store(&db, &artifacts).await?;
            train::train(&store, &host, &dirs, &executor, &layer, &task, &overrides, json).await
        }
        Some(Command::Resume { run, json }) => {
            let store = open_store(&db, &artifacts).await?;
            train::resume(&store, &dirs, run, json).await
        }
        Some(Command::Runs { action, json }) => {
            let store = open_store(&db, &artifacts).await?;
            match action {
                None => runs::list(&store, json).await,
                Some(RunsAction::Show { run, json: show_json }) => runs::show(&store, run, json || show_json).await,
                Some(RunsAction::Cancel { run, grace }) => runs::cancel(&store, run, grace_period(grace)?).await,
                Some(RunsAction::Pause { run }) => runs::hold(&store, run, true).await,
                Some(RunsAction::Unpause { run }) => runs::hold(&store, run, false).await,
                Some(RunsAction::Requeue { run }) => runs::requeue(&store, run).await,
            }
        }
        Some(Command::Plot { runs, panels, out, size }) => {
            let store = open_store(&db, &artifacts).await?;
            plot::run(&store, &runs, &panels, &out, &size).await
        }
        Some(Command::Verify { layer, overrides, seed, json }) => {
            verify::run(&load_plugins(&dirs), layer.as_deref(), &overrides, seed, json)
        }
        Some(Command::Bench { layer, steps, reference, overrides }) => {
            bench::run(&load_plugins(&dirs), &layer, steps, reference, &overrides)
        }
        Some(Command::Datasets(args)) => datasets::run(args),
        Some(Command::Db { action: DbAction::Copy { from, to, json } }) => db::copy(&from, &to, json).await,
        Some(Command::Worker { run, resume }) => {
            let host = PluginHost::load_dirs(&host::search_path(&dirs));
            let store = Store::connect(&db).await?.with_artifacts_dir(artifacts);
            crate::train::worker::run(&store, &host, run, resume).await?;
            Ok(0)
        }
    }
}

/// `runs.db` in the repository root when the binary runs from this workspace's build
/// output, else in the current directory.
pub fn default_db_path() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf);
    match (root, host::build_output_dir()) {
        (Some(root), Some(out)) if out.starts_with(root.join("target")) => root.join("runs.db"),
        _ => PathBuf::from("runs.db"),
    }
}

/// A `--grace` value as a duration, refusing what cannot be one.
fn grace_period(seconds: f64) -> Result<std::time::Duration> {
    std::time::Duration::try_from_secs_f64(seconds)
        .map_err(|_| anyhow::anyhow!("--grace {seconds} is not a number of seconds; give e.g. --grace 10"))
}

/// Opens the store and marks runs whose worker died as interrupted.
async fn open_store(db: &StoreLocation, artifacts: &Option<PathBuf>) -> Result<Store> {
    let store = Store::connect(db).await?.with_artifacts_dir(artifacts.clone());
    // Runs whose Slurm jobs ended are brought in line first (nothing to do without Slurm).
    for id in Executor::Slurm(Default::default()).reconcile(&store).await? {
        eprintln!("run {id}: its Slurm job ended; marked accordingly (`workbench runs show {id}`)");
    }
    for id in store.reap_orphans(process_alive).await? {
        eprintln!("run {id}: its worker is gone; marked interrupted (`workbench resume {id}` continues it)");
    }
    Ok(store)
}

/// Builds stale workspace plugins if needed, then loads every plugin on the search path.
fn load_plugins(extra_dirs: &[PathBuf]) -> PluginHost {
    if let BuildOutcome::Failed(why) = host::ensure_workspace_plugins_built() {
        eprintln!("warning: rebuilding the workspace plugins failed ({why}); using the libraries already built");
    }
    let mut plugins = PluginHost::load_dirs(&host::search_path(extra_dirs));
    host::stamp_builds(&mut plugins);
    plugins
}
