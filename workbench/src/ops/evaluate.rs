//! Evaluating trained parameters outside training: `workbench eval N` scores a stored run's
//! checkpoint again with other evaluation settings (deeper iterations, more examples, other
//! evaluation data) as a new finished run, and [`Scoring::record`] is the scoring and
//! storing that it shares with `workbench import`.
//!
//! The evaluation is a run of its own, not rows added to the trained run, so the trained
//! run's record stays as training left it, and Compare, Ablation, `runs diff` and `plot` set
//! the two side by side, the settings that differ named as for any two runs.

use crate::exit_code::refused;
use crate::host::{Plugged, PluginHost};
use crate::params::Params;
use crate::run_config::{qualified_config, RunConfig, TrainSettings};
use crate::store::{MetricDirection, MetricRow, RunRecord, RunStatus, Store};
use crate::train::evaluation::{evaluate_depths, frozen_model, DepthReport};
use crate::train::optim::{AdamW, AdamWConfig};
use crate::train::{checkpoint, parallel, system, worker};
use anyhow::{anyhow, bail, Context, Result};
use candle_core::{DType, Device};
use plugin_api::{PluginKind, Task, TaskInfo};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The trainer's keys an evaluation may change: they decide how the parameters are scored,
/// not what they are. Every layer and task key may change too, as long as the checkpoint
/// still fits the model they build.
pub const EVALUATION_KEYS: [&str; 7] =
    ["eval_depths", "eval_examples", "eval_batch", "device", "threads", "sphere_head", "sphere_tokens"];

/// What `workbench eval` stored.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Evaluated {
    /// The new run.
    pub run: i64,
    /// The run whose checkpoint was scored, and the training step it was saved at.
    pub source: i64,
    pub step: u64,
    /// The settings that differ from the source run's, as given.
    pub overrides: Vec<String>,
    /// The metrics at the training depth.
    pub eval: BTreeMap<String, f64>,
    /// The log lines: one per depth scored, and any note.
    pub lines: Vec<String>,
}

/// A run found fit to evaluate by [`check`]: the configuration it is evaluated with, and its
/// checkpoint.
pub struct Checked {
    pub source: i64,
    pub config: RunConfig,
    pub checkpoint: PathBuf,
}

/// Whether run `source` can be evaluated with `overrides` applied: the settings are ones
/// `eval` takes and `train` accepts, and the run has a checkpoint. Cheap (no model is built),
/// so that several runs are all checked before any is evaluated. Each error is a refusal
/// naming the fix.
pub fn check(store: &Store, host: &PluginHost, source: &RunRecord, overrides: &[String]) -> Result<Checked> {
    let id = source.id;
    let trained = RunConfig::from_json(&source.config)?;
    let config = with_overrides(host, &trained, overrides).map_err(|e| refused(anyhow!("run {id}: {e:#}")))?;
    let Some(checkpoint) = worker::existing_checkpoint(store, id)? else {
        return Err(refused(anyhow!(
            "run {id} has no checkpoint to evaluate ({} does not exist): a run keeps one from its \
             first evaluation on, unless it was trained with checkpoint=false",
            worker::checkpoint_path(store, id)?.display()
        )));
    };
    Ok(Checked { source: id, config, checkpoint })
}

/// Scores a checked run's checkpoint as a new finished run tagged `eval`. A configuration the
/// checkpoint does not fit is refused before anything is stored; an evaluation that fails
/// leaves the new run `failed` with the reason.
pub async fn evaluate(store: &Store, host: &PluginHost, checked: Checked, overrides: &[String]) -> Result<Evaluated> {
    let Checked { source, config, checkpoint: checkpoint_file } = checked;
    let model = Model::build(host, &config).map_err(refused)?;
    let opt = AdamW::new(model.params.vars(), adam_config(&model.settings))?;
    let step = checkpoint::load_parameters(&checkpoint_file, &opt, &model.device)
        .with_context(|| {
            format!(
                "run {source}'s checkpoint does not fit the model this configuration builds: `eval` takes \
                 settings that keep the model's parameters (evaluation depths and examples, the task's \
                 evaluation data, the layer's iterations)"
            )
        })
        .map_err(refused)?;

    let layer_plugin = host.get(&config.layer, PluginKind::Layer)?;
    let task_plugin = host.get(&config.task, PluginKind::Task)?;
    let mut new_run = crate::ops::launch::new_run(layer_plugin, task_plugin, &config)?;
    new_run.total_steps = Some(0);
    let pid = std::process::id();
    let run = store.create_claimed_run(&new_run, pid).await?;
    store.mark_running(run, pid).await?;
    let given = if overrides.is_empty() { "its own settings".to_string() } else { overrides.join(" ") };
    let first = format!("evaluating run {source}'s checkpoint (step {step}) with {given}");
    let stored = async {
        worker::record_builds(store, host, run, &config).await?;
        store.set_param_count(run, model.params.count() as u64).await?;
        store.set_metric_specs(run, &MetricDirection::of_task(&model.info)).await?;
        link_or_copy(&checkpoint_file, &worker::checkpoint_path(store, run)?)?;
        let file_name = worker::checkpoint_file(run).to_string_lossy().to_string();
        store.add_artifact(run, "checkpoint", &file_name, Some(step)).await?;
        let (eval, lines) = model.scoring(host, &config).record(store, run, step, first).await?;
        store.set_tags(run, &["eval".to_string()]).await?;
        store.set_notes(run, &format!("evaluation of run {source}'s checkpoint at step {step} with {given}")).await?;
        anyhow::Ok((eval, lines))
    }
    .await;
    match stored {
        Ok((eval, lines)) => {
            store.finish(run, RunStatus::Finished, None).await?;
            Ok(Evaluated { run, source, step, overrides: overrides.to_vec(), eval, lines })
        }
        Err(e) => {
            let why = format!("the evaluation stopped: {e:#}");
            store.finish(run, RunStatus::Failed, Some(&why)).await?;
            Err(anyhow!("run {run}: {why}"))
        }
    }
}

/// A configuration's model built over fresh parameters (drawn from its seed), for the values
/// of a checkpoint (`eval`) or of a published model (`import`) to fill.
pub struct Model {
    pub settings: TrainSettings,
    pub device: Device,
    pub task: Plugged<dyn Task>,
    pub info: TaskInfo,
    pub params: Params,
    /// The training depth of the layer built.
    pub train_depth: usize,
}

impl Model {
    /// Builds the layer and the task's model; a sphere head the layer lacks is refused.
    pub fn build(host: &PluginHost, config: &RunConfig) -> Result<Model> {
        let settings = config.settings()?;
        let device = crate::device::parse(&settings.device)?;
        let task = host.build_task(&config.task, &config.task_config, settings.seed)?;
        let info = task.info().map_err(|e| anyhow!("task `{}`: {e}", config.task))?;
        let params = Params::new(settings.seed);
        let vb = params.var_builder(DType::F32, &device);
        let layer = host.build_layer(&config.layer, &config.layer_config, vb.pp("layer"))?;
        // Building the model creates the task's parameters; the evaluation builds it again
        // over the values filled in.
        task.build_model(vb.pp("task"), layer.width()).map_err(|e| anyhow!("task `{}`: {e}", config.task))?;
        settings.sphere.check(&*layer, &device)?;
        Ok(Model { settings, device, task, info, params, train_depth: layer.train_iterations() })
    }

    /// What scores these parameters with `config`'s evaluation settings.
    pub fn scoring<'a>(&'a self, host: &'a PluginHost, config: &'a RunConfig) -> Scoring<'a> {
        Scoring { host, config, model: self }
    }
}

/// The optimiser a checkpoint is read into (its moments are read and kept, not used).
pub fn adam_config(s: &TrainSettings) -> AdamWConfig {
    AdamWConfig { beta1: s.beta1, beta2: s.beta2, eps: 1e-8, weight_decay: s.weight_decay }
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

/// The checkpoint of the new run: the source's file linked (it is replaced, never written
/// in place, so the link keeps these values), or copied where a link cannot be made.
fn link_or_copy(from: &std::path::Path, to: &std::path::Path) -> Result<()> {
    if let Some(dir) = to.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    if std::fs::hard_link(from, to).is_err() {
        std::fs::copy(from, to).with_context(|| format!("cannot copy {} to {}", from.display(), to.display()))?;
    }
    Ok(())
}

/// Trained parameters and what scoring them needs.
pub struct Scoring<'a> {
    host: &'a PluginHost,
    config: &'a RunConfig,
    model: &'a Model,
}

impl Scoring<'_> {
    /// Scores the parameters at every evaluation depth of the configuration and stores the
    /// metrics and diagnostics at `step` in `run`, with the log (`first`, then a line per
    /// depth and every note). Returns the metrics at the training depth, and the log.
    pub async fn record(
        &self,
        store: &Store,
        run: i64,
        step: u64,
        first: String,
    ) -> Result<(BTreeMap<String, f64>, Vec<String>)> {
        let Model { settings: s, device, task, info, params, train_depth } = self.model;
        let train_depth = *train_depth;
        let batches = task
            .eval_batches(s.eval_batch, s.eval_examples, device)
            .map_err(|e| anyhow!("task `{}`: {e}", self.config.task))?;
        let examples: usize = batches.iter().map(|b| b.size).sum();
        let depths = worker::eval_depths(train_depth, &s.eval_depths);
        let threads = parallel::shard_count(s.threads, usize::MAX, device.is_cpu());
        let (layer, model) = frozen_model(self.host, params, self.config, task, device)?;
        let reports =
            evaluate_depths(&layer, &model, &batches, &depths, train_depth, info.causal, threads, step, s.sphere)?;
        let mut lines = vec![first];
        let (mut rows, mut diagnostics, mut eval) = (Vec::new(), Vec::new(), BTreeMap::new());
        // What `runs show` and the Live screen say each evaluation scored, as a worker records it.
        let (split, name) = (system::SPLIT.to_string(), system::EVAL_EXAMPLES.to_string());
        rows.push(MetricRow { step, split, name, value: examples as f64, wall_time: 0.0 });
        for report in reports {
            match report {
                DepthReport::Skipped(line) => lines.push(line),
                DepthReport::Scored(scored) => {
                    lines.push(scored.log_line(step, examples));
                    for (name, value) in &scored.means {
                        let (split, name) = (scored.split.clone(), name.clone());
                        rows.push(MetricRow { step, split, name, value: *value, wall_time: 0.0 });
                    }
                    diagnostics.extend(scored.diagnostics);
                    lines.extend(scored.notes);
                    if scored.iterations == train_depth {
                        eval = scored.means;
                    }
                }
            }
        }
        store.insert_metrics(run, &rows).await?;
        if !diagnostics.is_empty() {
            store.insert_diagnostics(run, &diagnostics).await?;
        }
        store.append_logs(run, &lines).await?;
        Ok((eval, lines))
    }
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
