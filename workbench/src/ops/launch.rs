//! Creating runs: the stored form of a new run from a resolved configuration (refused when it
//! cannot fit in memory where it will run, see [`crate::memory`]), and queueing new runs
//! (alone, or grouped as a sweep) for the queue to start.

use crate::host::{LoadedPlugin, PluginHost};
use crate::run_config::RunConfig;
use crate::store::{NewRun, PluginRef, Store};
use anyhow::Result;
use plugin_api::PluginKind;

/// The stored form of a new run of `config` with these plugins.
pub fn new_run(layer: &LoadedPlugin, task: &LoadedPlugin, config: &RunConfig) -> Result<NewRun> {
    let settings = config.settings()?;
    crate::memory::check(&layer.declaration, &task.declaration, config, crate::memory::Budget::current())?;
    let plugin_ref = |p: &LoadedPlugin| PluginRef {
        name: p.declaration.name.clone(),
        version: p.declaration.version.clone(),
        fingerprint: plugin_api::FINGERPRINT.to_string(),
        build: crate::host::build_of(p),
    };
    Ok(NewRun {
        layer: plugin_ref(layer),
        task: plugin_ref(task),
        config: config.to_json(),
        seed: settings.seed,
        device: settings.device.clone(),
        git_rev: git_revision(),
        total_steps: Some(settings.steps),
    })
}

/// The stored form of a new run of `config`, with the plugins it names.
pub fn new_run_of(host: &PluginHost, config: &RunConfig) -> Result<NewRun> {
    let layer = host.get(&config.layer, PluginKind::Layer)?;
    let task = host.get(&config.task, PluginKind::Task)?;
    new_run(layer, task, config)
}

/// The stored form of a new run of `layer` on `task` with `key=value` overrides, refused with
/// the plugins' reason when the configuration is invalid.
pub fn resolve_run(host: &PluginHost, layer: &str, task: &str, overrides: &[String]) -> Result<NewRun> {
    let layer = host.get(layer, PluginKind::Layer)?;
    let task = host.get(task, PluginKind::Task)?;
    new_run(layer, task, &RunConfig::resolve(&layer.declaration, &task.declaration, overrides)?)
}

/// The current git revision of the working directory, if any.
pub fn git_revision() -> Option<String> {
    let out = std::process::Command::new("git").args(["rev-parse", "--short=12", "HEAD"]).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string()).filter(|s| !s.is_empty())
}

/// Stores one run as queued, in no sweep; the queue starts it. Returns its id.
pub async fn queue_run(store: &Store, run: &NewRun) -> Result<i64> {
    Ok(store.create_run(run).await?)
}

/// A sweep stored with its queued runs (ids in the order given).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedSweep {
    pub sweep: i64,
    pub runs: Vec<i64>,
}

/// Stores `runs` as the queued runs of a new sweep `name`, declared by `spec` (kept with the
/// sweep); the queue starts them in this order.
pub async fn queue_sweep(store: &Store, name: &str, spec: &serde_json::Value, runs: &[NewRun]) -> Result<QueuedSweep> {
    let sweep = store.create_sweep(name, spec).await?;
    let mut ids = Vec::with_capacity(runs.len());
    for (index, run) in runs.iter().enumerate() {
        ids.push(store.create_run_in_sweep(run, sweep, index as u32).await?);
    }
    Ok(QueuedSweep { sweep, runs: ids })
}
