//! `workbench import`: a published PyTorch checkpoint as a finished run. The weights fill the
//! model the configuration builds ([`crate::import`]), the run's checkpoint holds them, and
//! one evaluation at every evaluation depth records its metrics and diagnostics, so that
//! `runs show`, Compare, Ablation and `plot` treat it as any other run.

use crate::host::PluginHost;
use crate::import::{self, published_sudoku, source};
use crate::run_config::RunConfig;
use crate::store::{MetricDirection, RunStatus, Store};
use crate::train::optim::AdamW;
use crate::train::scoring::{adam_config, Model};
use crate::train::{checkpoint, worker};
use anyhow::{anyhow, Result};
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
    // A sphere head the layer lacks is refused here: it would only show as a note on the
    // evaluation's diagnostics.
    let model = Model::build(host, &config)?;
    let slots = (layout.slots)(published_sudoku::block_count(&tensors));
    let parameters = import::fill(&model.params, &tensors, &slots).map_err(|e| anyhow!("{}: {e}", file.display()))?;

    let pid = std::process::id();
    let run = store.create_claimed_run(&new_run, pid).await?;
    store.mark_running(run, pid).await?;
    let stored = async {
        worker::record_builds(store, host, run, &config).await?;
        store.set_param_count(run, model.params.count() as u64).await?;
        store.set_metric_specs(run, &MetricDirection::of_task(&model.info)).await?;
        let opt = AdamW::new(model.params.vars(), adam_config(&model.settings))?;
        checkpoint::save(&worker::checkpoint_path(store, run)?, &opt, 0)?;
        let file_name = worker::checkpoint_file(run).to_string_lossy().to_string();
        store.add_artifact(run, "checkpoint", &file_name, Some(0)).await?;

        let first = format!("imported {} ({parameters} parameters) with {}", file.display(), options.join(" "));
        let (eval, _) = model.scoring(host, &config).record(store, run, 0, first).await?;
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
