//! `workbench eval N`: a stored run's checkpoint scored again with other evaluation settings
//! (deeper iterations, more examples, other evaluation data) as a new run. The command and the
//! TUI check the settings and the checkpoint here, then queue the run; a worker started by the
//! executor (a local process, a Slurm job) scores it ([`crate::train::scoring`]), so that an
//! evaluation of a model trained on the cluster runs on the cluster too.

use crate::exit_code::refused;
use crate::host::PluginHost;
use crate::run_config::{qualified_config, RunConfig};
use crate::store::{NewRun, RunRecord, Store};
use crate::train::scoring::Model;
use crate::train::worker;
use anyhow::{anyhow, bail, Result};
use candle_core::Device;
use plugin_api::PluginKind;
use std::collections::BTreeMap;

/// The trainer's keys an evaluation may change: they decide how the parameters are scored,
/// not what they are. Every layer and task key may change too, as long as the checkpoint
/// still fits the model they build.
pub const EVALUATION_KEYS: [&str; 7] =
    ["eval_depths", "eval_examples", "eval_batch", "device", "threads", "sphere_head", "sphere_tokens"];

/// The tag of every evaluation run.
pub const TAG: &str = "eval";

/// A run found fit to evaluate by [`check`]: the run that evaluates it, ready to queue.
pub struct Checked {
    pub source: i64,
    pub run: NewRun,
}

/// Whether run `source` can be evaluated with `overrides` applied: the settings are ones
/// `eval` takes and `train` accepts, the run has a checkpoint, and the checkpoint fits the
/// model they build (built on the CPU, so that a login node without the run's GPU can tell).
/// Each error is a refusal naming the fix; nothing is stored.
pub fn check(store: &Store, host: &PluginHost, source: &RunRecord, overrides: &[String]) -> Result<Checked> {
    let id = source.id;
    let trained = RunConfig::from_json(&source.config)?;
    let mut config = with_overrides(host, &trained, overrides).map_err(|e| refused(anyhow!("run {id}: {e:#}")))?;
    let Some(checkpoint) = worker::existing_checkpoint(store, id)? else {
        return Err(refused(anyhow!(
            "run {id} has no checkpoint to evaluate ({} does not exist): a run keeps one from its \
             first evaluation on, unless it was trained with checkpoint=false",
            worker::checkpoint_path(store, id)?.display()
        )));
    };
    let model = Model::build_on(host, &config, Device::Cpu).map_err(refused)?;
    model.load_checkpoint(&checkpoint, id).map_err(refused)?;
    config.evaluates = Some(id);
    let layer = host.get(&config.layer, PluginKind::Layer)?;
    let task = host.get(&config.task, PluginKind::Task)?;
    let mut run = crate::ops::launch::new_run(layer, task, &config).map_err(refused)?;
    // It trains no steps: its progress is the step of the checkpoint it scores.
    run.total_steps = None;
    Ok(Checked { source: id, run })
}

/// Queues a checked evaluation, tagged [`TAG`]; returns its run's id. The queue runner starts
/// it like any run (`workbench queue`, the TUI's, `eval`'s own).
pub async fn queue(store: &Store, checked: &Checked) -> Result<i64> {
    let id = store.create_run(&checked.run).await?;
    store.set_tags(id, &[TAG.to_string()]).await?;
    store.set_notes(id, &format!("evaluation of run {}'s checkpoint", checked.source)).await?;
    Ok(id)
}

/// What an evaluation run stored, read back once it ended.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Evaluated {
    /// The evaluation's run.
    pub run: i64,
    /// The run whose checkpoint was scored, and the training step it was saved at.
    pub source: i64,
    pub step: u64,
    /// How the run ended (`finished`, `failed`, ...), and why if it did not finish.
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The metrics at the training depth.
    pub eval: BTreeMap<String, f64>,
    /// The log lines: one per depth scored, and any note.
    pub lines: Vec<String>,
}

/// Evaluation run `run` as it is stored; an error if it is not an evaluation.
pub async fn evaluated(store: &Store, run: i64) -> Result<Evaluated> {
    let record = store.run(run).await?;
    let Some(source) = RunConfig::from_json(&record.config)?.evaluates else {
        bail!("run {run} is not an evaluation of another run's checkpoint");
    };
    let metrics = store.metrics(run).await?;
    let step = metrics.iter().map(|m| m.step).max().unwrap_or(0);
    let eval =
        metrics.iter().filter(|m| m.step == step && m.split == "eval").map(|m| (m.name.clone(), m.value)).collect();
    let lines = store.logs(run, usize::MAX).await?;
    let status = record.status.to_string();
    Ok(Evaluated { run, source, step, status, error: record.error, eval, lines })
}

/// `trained` with `overrides` applied and checked as `train` checks them; a trainer setting
/// outside [`EVALUATION_KEYS`] that would change is refused.
fn with_overrides(host: &PluginHost, trained: &RunConfig, overrides: &[String]) -> Result<RunConfig> {
    let layer = host.get(&trained.layer, PluginKind::Layer)?;
    let task = host.get(&trained.task, PluginKind::Task)?;
    let stored = qualified_config(&trained.to_json()).into_iter().map(|(k, v)| format!("{k}={v}"));
    let all: Vec<String> = stored.chain(overrides.iter().cloned()).collect();
    let config = RunConfig::resolve(&layer.declaration, &task.declaration, &all)?;
    let before = trained.train.with_defaults(&crate::run_config::train_schema());
    for (key, value) in &config.train.0 {
        if !EVALUATION_KEYS.contains(&key.as_str()) && before.0.get(key) != Some(value) {
            bail!(
                "`{key}` is a training setting: the checkpoint was trained as it is, and `eval` scores it; \
                 the trainer's keys `eval` takes are {}",
                EVALUATION_KEYS.join(", ")
            );
        }
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::EVALUATION_KEYS;
    use crate::run_config::train_schema;

    #[test]
    fn the_evaluation_keys_are_trainer_keys() {
        let schema = train_schema();
        for key in EVALUATION_KEYS {
            assert!(schema.iter().any(|p| p.name == key), "`{key}` is not a trainer key");
        }
    }
}
