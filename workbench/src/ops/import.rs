//! `workbench import`: a published PyTorch checkpoint as a finished run. The weights fill the
//! model the configuration builds ([`crate::import`]), the run's checkpoint holds them, and
//! one evaluation at every evaluation depth records its metrics and diagnostics, so that
//! `runs show`, Compare, Ablation and `plot` treat it as any other run.

use crate::host::PluginHost;
use crate::import::{self, published_sudoku, source};
use crate::ops::evaluate::{adam_config, Scoring};
use crate::params::Params;
use crate::run_config::RunConfig;
use crate::store::{MetricDirection, RunStatus, Store};
use crate::train::optim::AdamW;
use crate::train::{checkpoint, worker};
use anyhow::{anyhow, Result};
use candle_core::DType;
use plugin_api::PluginKind;
use std::collections::BTreeMap;
use std::path::Path;

/// What an import stored.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Imported {
    pub run: i64,
    /// Scalar parameters set from the checkpoint (all of the model's).
    pub parameters: usize,
    /// The options the import set from the checkpoint, before the command line's.
    pub options: Vec<String>,
    /// The metrics of the evaluation at the training depth.
    pub eval: BTreeMap<String, f64>,
}

/// Checks `file` against the published layout of `layer` on `task` and the configuration
/// (read options, then `overrides`), and only then stores the run. Errors before the run is
/// stored leave the store untouched; an evaluation that fails leaves the run `failed` with
/// the reason.
pub async fn import(
    store: &Store,
    host: &PluginHost,
    file: &Path,
    layer: &str,
    task: &str,
    overrides: &[String],
) -> Result<Imported> {
    let layout = published_sudoku::layout(layer, task).ok_or_else(|| {
        anyhow!(
            "no published model of layer `{layer}` on task `{task}` is known; import reads: {}",
            published_sudoku::KNOWN
        )
    })?;
    let layer_plugin = host.get(layer, PluginKind::Layer)?;
    let task_plugin = host.get(task, PluginKind::Task)?;
    let tensors = source::read(file)?;
    let options = (layout.options)(&tensors).map_err(|e| anyhow!("{}: {e}", file.display()))?;
    let all: Vec<String> = options.iter().chain(overrides).cloned().collect();
    let config = RunConfig::resolve(&layer_plugin.declaration, &task_plugin.declaration, &all)?;
    let mut new_run = crate::ops::launch::new_run(layer_plugin, task_plugin, &config)?;
    // Trained elsewhere: no step of this run's own.
    new_run.total_steps = Some(0);
    let s = config.settings()?;
    let device = crate::device::parse(&s.device)?;
    let built_task = host.build_task(&config.task, &config.task_config, s.seed)?;
    let info = built_task.info().map_err(|e| anyhow!("task `{task}`: {e}"))?;
    let params = Params::new(s.seed);
    let vb = params.var_builder(DType::F32, &device);
    let built_layer = host.build_layer(&config.layer, &config.layer_config, vb.pp("layer"))?;
    // Building the model creates the task's parameters, which the import fills; the
    // evaluation below uses a model built again over the filled values.
    built_task.build_model(vb.pp("task"), built_layer.width()).map_err(|e| anyhow!("task `{task}`: {e}"))?;
    // A head the layer lacks would only show as a note on the evaluation's diagnostics.
    s.sphere.check(&*built_layer, &device)?;
    let slots = (layout.slots)(published_sudoku::block_count(&tensors));
    let parameters = import::fill(&params, &tensors, &slots).map_err(|e| anyhow!("{}: {e}", file.display()))?;

    let pid = std::process::id();
    let run = store.create_claimed_run(&new_run, pid).await?;
    store.mark_running(run, pid).await?;
    let stored = async {
        worker::record_builds(store, host, run, &config).await?;
        store.set_param_count(run, params.count() as u64).await?;
        store.set_metric_specs(run, &MetricDirection::of_task(&info)).await?;
        checkpoint::save(&worker::checkpoint_path(store, run)?, &AdamW::new(params.vars(), adam_config(&s))?, 0)?;
        let file_name = worker::checkpoint_file(run).to_string_lossy().to_string();
        store.add_artifact(run, "checkpoint", &file_name, Some(0)).await?;

        let first = format!("imported {} ({parameters} parameters) with {}", file.display(), options.join(" "));
        let scoring =
            Scoring { host, config: &config, params: &params, task: &built_task, info: &info, device: &device };
        let (eval, _) = scoring.record(store, run, 0, built_layer.train_iterations(), first).await?;
        store.set_tags(run, &["imported".to_string()]).await?;
        store.set_notes(run, &format!("imported from {}", file.display())).await?;
        anyhow::Ok(eval)
    }
    .await;
    match stored {
        Ok(eval) => {
            store.finish(run, RunStatus::Finished, None).await?;
            Ok(Imported { run, parameters, options, eval })
        }
        Err(e) => {
            let why = format!("the import stopped: {e:#}");
            store.finish(run, RunStatus::Failed, Some(&why)).await?;
            Err(anyhow!("run {run}: {why}"))
        }
    }
}
