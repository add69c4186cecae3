//! Scoring trained parameters outside training: the worker's job for a run that evaluates
//! another run's checkpoint (`workbench eval`, [`evaluate_checkpoint`]), and the
//! [`Scoring::record`] it shares with `workbench import`.
//!
//! An evaluation is a run of its own, not rows added to the trained run, so the trained
//! run's record stays as training left it, and Compare, Ablation, `runs diff` and `plot` set
//! the two side by side, the settings that differ named as for any two runs.

use super::evaluation::{evaluate_depths, frozen_model, DepthReport};
use super::optim::{AdamW, AdamWConfig};
use super::{checkpoint, parallel, system, worker};
use crate::host::{Plugged, PluginHost};
use crate::params::Params;
use crate::run_config::{flatten_configs, RunConfig, TrainSettings};
use crate::store::{MetricDirection, MetricRow, Store};
use anyhow::{anyhow, Context, Result};
use candle_core::{DType, Device};
use plugin_api::{Task, TaskInfo};
use std::collections::BTreeMap;
use std::path::Path;

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
    /// Builds the layer and the task's model on the configuration's device; a sphere head the
    /// layer lacks is refused.
    pub fn build(host: &PluginHost, config: &RunConfig) -> Result<Model> {
        let settings = config.settings()?;
        Model::build_on(host, config, crate::device::parse(&settings.device)?)
    }

    /// [`Model::build`] on `device` (the CPU, to check on a machine without the run's GPU
    /// that a checkpoint fits).
    pub fn build_on(host: &PluginHost, config: &RunConfig, device: Device) -> Result<Model> {
        let settings = config.settings()?;
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

    /// Fills the parameters with those of run `source`'s checkpoint `file`; returns the
    /// training step it was saved at. A checkpoint of another shape is an error naming the
    /// parameter.
    pub fn load_checkpoint(&self, file: &Path, source: i64) -> Result<u64> {
        let opt = AdamW::new(self.params.vars(), adam_config(&self.settings))?;
        checkpoint::load_parameters(file, &opt, &self.device).with_context(|| {
            format!(
                "run {source}'s checkpoint does not fit the model this configuration builds: `eval` takes \
                 settings that keep the model's parameters (evaluation depths and examples, the task's \
                 evaluation data, the layer's iterations)"
            )
        })
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

/// The worker's job for run `run`, whose configuration evaluates run `source`'s checkpoint:
/// the checkpoint as it is now, scored at every evaluation depth, stored at its training step
/// with the log, the notes, and the checkpoint as the run's own.
pub async fn evaluate_checkpoint(
    store: &Store,
    host: &PluginHost,
    run: i64,
    source: i64,
    config: &RunConfig,
) -> Result<()> {
    let Some(file) = worker::existing_checkpoint(store, source)? else {
        anyhow::bail!(
            "run {source} has no checkpoint any more ({} is gone): nothing to evaluate",
            worker::checkpoint_path(store, source)?.display()
        );
    };
    let model = Model::build(host, config)?;
    let step = model.load_checkpoint(&file, source)?;
    // The run tables show the step scored where a training run shows its progress.
    store.set_progress(run, step).await?;
    let given = settings_given(store, source, config).await?;
    store.set_param_count(run, model.params.count() as u64).await?;
    store.set_metric_specs(run, &MetricDirection::of_task(&model.info)).await?;
    link_or_copy(&file, &worker::checkpoint_path(store, run)?)?;
    let file_name = worker::checkpoint_file(run).to_string_lossy().to_string();
    store.add_artifact(run, "checkpoint", &file_name, Some(step)).await?;
    let first = format!("evaluating run {source}'s checkpoint (step {step}) with {given}");
    model.scoring(host, config).record(store, run, step, first).await?;
    store.set_notes(run, &format!("evaluation of run {source}'s checkpoint at step {step} with {given}")).await?;
    Ok(())
}

/// The settings of `config` that differ from run `source`'s, as `key=value` words (`its own
/// settings` when none does).
async fn settings_given(store: &Store, source: i64, config: &RunConfig) -> Result<String> {
    let trained = store.run(source).await?.config;
    let own = config.to_json();
    let [theirs, ours] = <[_; 2]>::try_from(flatten_configs(&[&trained, &own])).expect("two configurations");
    let given: Vec<String> =
        ours.iter().filter(|(key, value)| theirs.get(*key) != Some(value)).map(|(k, v)| format!("{k}={v}")).collect();
    Ok(if given.is_empty() { "its own settings".to_string() } else { given.join(" ") })
}

/// The checkpoint of the new run: the source's file linked (it is replaced, never written
/// in place, so the link keeps these values), or copied where a link cannot be made.
fn link_or_copy(from: &Path, to: &Path) -> Result<()> {
    if let Some(dir) = to.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    // A job run again (Slurm requeued it) finds its link made.
    if to.exists() {
        std::fs::remove_file(to).with_context(|| format!("cannot replace {}", to.display()))?;
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
