//! `workbench train` and `workbench resume`.

use crate::executor::slurm::SubmitLimit;
use crate::executor::Executor;
use crate::exit_code::{self, refused};
use crate::host::PluginHost;
use crate::ops;
use crate::queue::SUBMIT_LIMIT_RETRY;
use crate::run_config::RunConfig;
use crate::store::{RunStatus, Store};
use crate::train::launch::{follow, follow_store, spawn_worker, Display};
use anyhow::{anyhow, Result};
use plugin_api::PluginKind;
use std::path::PathBuf;

/// Validates the configuration, stores a queued run, and trains it in a worker process.
#[allow(clippy::too_many_arguments)]
pub async fn train(
    store: &Store,
    host: &PluginHost,
    dirs: &[PathBuf],
    executor: &Executor,
    layer: &str,
    task: &str,
    overrides: &[String],
    json: bool,
) -> Result<i32> {
    host.refuse_plugin_names(overrides).map_err(refused)?;
    let layer_plugin = host.get(layer, PluginKind::Layer).map_err(refused)?;
    let task_plugin = host.get(task, PluginKind::Task).map_err(refused)?;
    let config = RunConfig::resolve(&layer_plugin.declaration, &task_plugin.declaration, overrides).map_err(refused)?;
    executor.check(store).map_err(refused)?;
    // Refused when it cannot fit in memory, before anything is stored.
    let new_run = ops::launch::new_run(layer_plugin, task_plugin, &config).map_err(refused)?;
    executor.check_runs(std::slice::from_ref(&new_run)).map_err(refused)?;
    ops::launch::check_starting_points(store, std::slice::from_ref(&new_run)).await.map_err(refused)?;
    store.artifacts_dir()?;
    let run_id = store.create_claimed_run(&new_run, std::process::id()).await?;
    if !json {
        tracing::info!("run {run_id} queued in {}", store.location());
    }
    if let Executor::Slurm(_) = executor {
        let Some(job) = submit_to_slurm(store, dirs, executor, run_id).await? else {
            return Ok(exit_code::INTERRUPTED);
        };
        if !json {
            tracing::info!("run {run_id} submitted as Slurm job {job}; following it through the store");
        }
        return finish(store, follow_store(store, run_id, display(json)).await?, run_id, json).await;
    }
    let child = spawn_worker(store, dirs, run_id, false)?;
    finish(store, follow(store, child, run_id, display(json)).await?, run_id, json).await
}

/// Submits run `run_id`'s Slurm job. Under a submit limit (the lab's cap on jobs per user in
/// Slurm's queue) the run waits, said once, and is submitted again every
/// [`SUBMIT_LIMIT_RETRY`] until Slurm takes it; Ctrl-C meanwhile cancels it (returns `None`).
/// Returns the job's id.
/// Any other refusal fails the run with Slurm's words, so that no queued run is left behind
/// for a later runner to start unasked.
async fn submit_to_slurm(store: &Store, dirs: &[PathBuf], executor: &Executor, run_id: i64) -> Result<Option<String>> {
    let run = store.run(run_id).await?;
    let mut told = false;
    loop {
        let e = match executor.start(store, dirs, &run, false, |_, _| {}).await {
            Ok(job) => return Ok(job),
            Err(e) => e,
        };
        let Some(limit) = e.downcast_ref::<SubmitLimit>() else {
            store.finish(run_id, RunStatus::Failed, Some(&format!("cannot submit its Slurm job: {e:#}"))).await?;
            return Err(e);
        };
        if !std::mem::replace(&mut told, true) {
            tracing::warn!(
                "run {run_id} waits: {limit}. It is submitted as soon as Slurm takes it (Ctrl-C cancels it)"
            );
        }
        tokio::select! {
            _ = tokio::time::sleep(SUBMIT_LIMIT_RETRY) => {}
            _ = tokio::signal::ctrl_c() => {
                crate::train::stop::cancel_queued(store, run_id).await?;
                tracing::info!("run {run_id} cancelled before Slurm took it");
                return Ok(None);
            }
        }
    }
}

/// Requeues an interrupted or failed run and continues it from its checkpoint.
pub async fn resume(store: &Store, dirs: &[PathBuf], run_id: i64, json: bool) -> Result<i32> {
    let status = store.run(run_id).await?.status;
    if matches!(status, RunStatus::Finished | RunStatus::Diverged | RunStatus::Queued | RunStatus::Running) {
        return Err(refused(anyhow!("{}", nothing_to_resume(run_id, status))));
    }
    ops::runs::requeue(store, run_id).await.map_err(refused)?;
    store.claim(run_id, std::process::id()).await?;
    let child = spawn_worker(store, dirs, run_id, true)?;
    finish(store, follow(store, child, run_id, display(json)).await?, run_id, json).await
}

fn display(json: bool) -> Display {
    if json {
        Display::Json
    } else {
        Display::Bar
    }
}

async fn finish(store: &Store, status: RunStatus, run_id: i64, json: bool) -> Result<i32> {
    let record = store.run(run_id).await?;
    if !json {
        match &record.error {
            Some(error) => tracing::info!("run {run_id} {status}: {error}"),
            None => tracing::info!("run {run_id} {status} (details: workbench runs show {run_id})"),
        }
    }
    Ok(exit_code::of_run(status))
}

/// Why `resume` has nothing to do for a run in `status`, and what to do instead.
fn nothing_to_resume(run_id: i64, status: RunStatus) -> String {
    match status {
        RunStatus::Finished => format!(
            "run {run_id} is finished: it trained all its steps, nothing is left to resume \
             (to train longer, start a new run: `workbench runs show {run_id} --config` gives its configuration)"
        ),
        RunStatus::Diverged => format!(
            "run {run_id} diverged: resuming would diverge again; start a new run with a lower lr \
             (`workbench runs show {run_id} --config` gives its configuration)"
        ),
        RunStatus::Queued => {
            format!("run {run_id} is queued, not stopped: `workbench queue` (or the TUI) starts it")
        }
        _ => format!("run {run_id} is still running: `workbench runs show {run_id}` follows it"),
    }
}
