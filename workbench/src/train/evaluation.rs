//! One evaluation of a model on the evaluation set at each evaluation depth: the metrics, and
//! the per-iteration diagnostics of the first batch ([`crate::diagnostics`]). The training
//! worker runs it at every `eval_every` steps; `workbench import` once, on imported weights.

use super::parallel;
use crate::diagnostics::StateRecorder;
use crate::host::{Plugged, PluginHost};
use crate::params::Params;
use crate::run_config::RunConfig;
use crate::store::DiagnosticRow;
use anyhow::{anyhow, Result};
use candle_core::{DType, Device};
use plugin_api::{Batch, Layer, Task, TaskModel};
use std::collections::BTreeMap;

/// The run's layer and task model built again over its parameters detached from autograd
/// ([`Params::frozen_var_builder`]): the same values, and no recorded graph, so an
/// evaluation frees each intermediate tensor once it has been used instead of keeping the
/// whole forward pass until its output is dropped (the welcome experiment's Hyper-SET run,
/// evaluated at 2 and 8 iterations: peak memory 0.78 GiB before, 0.13 after). Built at each
/// evaluation, so nothing a plugin derives from its weights when it builds can go stale.
pub fn frozen_model(
    host: &PluginHost,
    params: &Params,
    config: &RunConfig,
    task: &Plugged<dyn Task>,
    device: &Device,
) -> Result<(Plugged<dyn Layer>, Plugged<dyn TaskModel>)> {
    let vb = params.frozen_var_builder(DType::F32, device);
    let layer = host.build_layer(&config.layer, &config.layer_config, vb.pp("layer"))?;
    let model = task.build_model(vb.pp("task"), layer.width()).map_err(|e| anyhow!("task `{}`: {e}", config.task))?;
    Ok((layer, model))
}

/// The metrics of one depth, its diagnostics, and why some are missing.
pub struct Scored {
    pub iterations: usize,
    /// `eval` at the training depth, `eval@K` at depth `K`.
    pub split: String,
    pub means: BTreeMap<String, f64>,
    pub diagnostics: Vec<DiagnosticRow>,
    /// Log lines for what could not be measured.
    pub notes: Vec<String>,
}

impl Scored {
    /// The run log's line for this evaluation.
    pub fn log_line(&self, step: u64, examples: usize) -> String {
        let summary: Vec<String> = self.means.iter().map(|(k, v)| format!("{k} {v:.4}")).collect();
        format!(
            "step {step} {} ({} iterations, {examples} examples): {}",
            self.split,
            self.iterations,
            summary.join(", ")
        )
    }
}

/// What the evaluation at one depth gave.
pub enum DepthReport {
    Scored(Scored),
    /// An extra depth the layer could not run (the log line says why); the training depth
    /// failing is an error instead.
    Skipped(String),
}

/// Evaluates at each of `depths` (the first being the training depth `train_iterations` or
/// not), at training step `step`, recording the token trajectories of `sphere`.
#[allow(clippy::too_many_arguments)]
pub fn evaluate_depths(
    layer: &Plugged<dyn Layer>,
    model: &Plugged<dyn TaskModel>,
    batches: &[Batch],
    depths: &[usize],
    train_iterations: usize,
    causal: bool,
    threads: usize,
    step: u64,
    sphere: crate::sphere::Selection,
) -> Result<Vec<DepthReport>> {
    let mut reports = Vec::with_capacity(depths.len());
    for &iterations in depths {
        let split = if iterations == train_iterations { "eval".to_string() } else { format!("eval@{iterations}") };
        let mut recorder = StateRecorder::default();
        let evaluated = parallel::evaluate(layer, model, batches, iterations, causal, threads, Some(&mut recorder));
        let means = match evaluated {
            Ok(tally) => tally.means(),
            Err(e) if iterations != train_iterations => {
                reports.push(DepthReport::Skipped(format!(
                    "step {step}: skipping evaluation at {iterations} iterations: {e:#}"
                )));
                continue;
            }
            Err(e) => return Err(e),
        };
        // From the states the first batch's forward pass just recorded; a failure is noted,
        // not fatal.
        let (mut diagnostics, mut notes) = (Vec::new(), Vec::new());
        match crate::diagnostics::measure_states(&**layer, &recorder.states) {
            Ok(measured) => diagnostics.extend(crate::diagnostics::rows(step, iterations, train_iterations, measured)),
            Err(e) => notes.push(format!("step {step}: no diagnostics at {iterations} iterations: {e:#}")),
        }
        // Token trajectories on the sphere (crate::sphere), at the training depth only, from
        // the same states (none when the diagnostics already found none).
        if iterations == train_iterations && notes.is_empty() {
            match crate::sphere::measure(&**layer, &recorder.states, sphere) {
                Ok(Some(measured)) => {
                    diagnostics.extend(crate::diagnostics::rows(step, iterations, train_iterations, measured))
                }
                Ok(None) => {}
                Err(e) => notes.push(format!("step {step}: no token trajectories: {e:#}")),
            }
        }
        reports.push(DepthReport::Scored(Scored { iterations, split, means, diagnostics, notes }));
    }
    Ok(reports)
}
