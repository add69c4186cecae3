//! `workbench import`: a published PyTorch checkpoint as a finished run. The weights fill the
//! model the configuration builds ([`crate::import`]), the run's checkpoint holds them, and
//! one evaluation at every evaluation depth records its metrics and diagnostics, so that
//! `runs show`, Compare, Ablation and `plot` treat it as any other run.

use crate::host::PluginHost;
use crate::import::{self, published_sudoku, source};
use crate::params::Params;
use crate::run_config::RunConfig;
use crate::store::{MetricDirection, MetricRow, RunStatus, Store};
use crate::train::evaluation::{evaluate_depths, frozen_model, DepthReport};
use crate::train::optim::{AdamW, AdamWConfig};
use crate::train::{checkpoint, parallel, worker};
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
        let adam = AdamWConfig { beta1: s.beta1, beta2: s.beta2, eps: 1e-8, weight_decay: s.weight_decay };
        checkpoint::save(&worker::checkpoint_path(store, run)?, &AdamW::new(params.vars(), adam)?, 0)?;
        let file_name = worker::checkpoint_file(run).to_string_lossy().to_string();
        store.add_artifact(run, "checkpoint", &file_name, Some(0)).await?;

        let batches = built_task
            .eval_batches(s.eval_batch, s.eval_examples, &device)
            .map_err(|e| anyhow!("task `{task}`: {e}"))?;
        let examples: usize = batches.iter().map(|b| b.size).sum();
        let depths = worker::eval_depths(built_layer.train_iterations(), &s.eval_depths);
        let threads = parallel::shard_count(s.threads, usize::MAX, device.is_cpu());
        let train_depth = built_layer.train_iterations();
        let (eval_layer, eval_model) = frozen_model(host, &params, &config, &built_task, &device)?;
        let reports = evaluate_depths(
            &eval_layer,
            &eval_model,
            &batches,
            &depths,
            train_depth,
            info.causal,
            threads,
            0,
            s.sphere,
        )?;
        let mut lines =
            vec![format!("imported {} ({parameters} parameters) with {}", file.display(), options.join(" "))];
        let (mut rows, mut diagnostics, mut eval) = (Vec::new(), Vec::new(), BTreeMap::new());
        for report in reports {
            match report {
                DepthReport::Skipped(line) => lines.push(line),
                DepthReport::Scored(scored) => {
                    lines.push(scored.log_line(0, examples));
                    for (name, value) in &scored.means {
                        rows.push(MetricRow {
                            step: 0,
                            split: scored.split.clone(),
                            name: name.clone(),
                            value: *value,
                            wall_time: 0.0,
                        });
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
