//! `workbench train` and `workbench resume`.

use crate::executor::Executor;
use crate::host::{PluginHost, PLUGIN_PATH_VAR};
use crate::ops;
use crate::run_config::RunConfig;
use crate::store::{RunStatus, Store};
use crate::train::launch::{follow, follow_store, spawn_worker, Display};
use anyhow::{Context, Result};
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
    let layer_plugin = host.get(layer, PluginKind::Layer).with_context(hint_plugin_path)?;
    let task_plugin = host.get(task, PluginKind::Task).with_context(hint_plugin_path)?;
    let config = RunConfig::resolve(&layer_plugin.declaration, &task_plugin.declaration, overrides)?;
    executor.check(store)?;
    store.artifacts_dir()?;
    let run_id = store
        .create_claimed_run(&ops::launch::new_run(layer_plugin, task_plugin, &config)?, std::process::id())
        .await?;
    if !json {
        tracing::info!("run {run_id} queued in {}", store.location());
    }
    if let Executor::Slurm(_) = executor {
        let run = store.run(run_id).await?;
        executor.start(store, dirs, &run, false, |_, _| {}).await?;
        let job = store.run(run_id).await?.supervision.job_id.unwrap_or_default();
        if !json {
            tracing::info!("run {run_id} submitted as Slurm job {job}; following it through the store");
        }
        return finish(store, follow_store(store, run_id, display(json)).await?, run_id, json).await;
    }
    let child = spawn_worker(store, dirs, run_id, false)?;
    finish(store, follow(store, child, run_id, display(json)).await?, run_id, json).await
}

/// Requeues an interrupted or failed run and continues it from its checkpoint.
pub async fn resume(store: &Store, dirs: &[PathBuf], run_id: i64, json: bool) -> Result<i32> {
    ops::runs::requeue(store, run_id).await?;
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
    Ok(if status == RunStatus::Finished { 0 } else { 1 })
}

fn hint_plugin_path() -> String {
    format!("plugins are searched next to the executable, in --plugin-dir and in {PLUGIN_PATH_VAR}; `workbench plugins` lists them")
}
