//! Every layer plugin on every task plugin, as the worker assembles them: the layer keeps the
//! task's token shape, the loss is finite and reaches the parameters of both, evaluation
//! reports the task's metrics, and a layer that cannot run causally is refused by causal
//! tasks with a clear reason (the worker's check).

use crate::common;

use candle_core::{DType, Device};
use plugin_api::{Pass, PluginKind};
use workbench::host::PluginHost;
use workbench::params::Params;
use workbench::run_config::RunConfig;

const LAYERS: [&str; 7] = ["hyperset", "transformer", "crate", "energy-transformer", "intrinsic", "cem", "mlp"];
const TASKS: [(&str, &[&str]); 5] = [
    ("sudoku", &["difficulty=easy", "train_puzzles=8", "eval_puzzles=4"]),
    ("language", &["seq_len=16", "corpus_bytes=20000"]),
    ("image", &["train_images=16", "test_images=8"]),
    ("masked-image", &["train_images=16", "test_images=8", "codebook=16"]),
    ("gp-regression", &["points=8", "train_points=64", "test_points=64"]),
];

fn host() -> PluginHost {
    let crates = ["hyperset", "transformer", "crate_layer", "energy_transformer", "intrinsic", "cem", "mlp"];
    let tasks = ["sudoku", "language", "image_task", "masked_image", "gp_regression"];
    let all: Vec<&str> = crates.iter().chain(tasks.iter()).copied().collect();
    common::load_plugins("shapes", &all)
}

#[test]
fn every_layer_fits_every_task_it_can_serve() {
    let host = host();
    assert!(host.errors.is_empty(), "{:?}", host.errors);
    let mut report = Vec::new();
    for layer_name in LAYERS {
        let layer_decl = &host.get(layer_name, PluginKind::Layer).unwrap().declaration;
        let mut layer_overrides = vec!["d=16".to_string(), "layer.iterations=2".into()];
        if layer_decl.params.iter().any(|p| p.name == "layers") {
            layer_overrides.push("layer.layers=1".into());
        }
        if layer_decl.params.iter().any(|p| p.name == "heads") {
            layer_overrides.push("heads=2".into()); // the attention-free mlp has none
        }
        for (task_name, task_overrides) in TASKS {
            let task_decl = &host.get(task_name, PluginKind::Task).unwrap().declaration;
            let mut overrides = layer_overrides.clone();
            overrides.extend(task_overrides.iter().map(|o| format!("task.{o}")));
            let config = match RunConfig::resolve(layer_decl, task_decl, &overrides) {
                Ok(config) => config,
                // A layer without a causal mask on a causal task is refused before a run is
                // stored; its layer and task configurations are resolved apart to check below
                // that the layer refuses a causal pass too.
                Err(e) if format!("{e:#}").contains("cannot run causally") => {
                    let causal_layer = &host.get("transformer", PluginKind::Layer).unwrap().declaration;
                    let sudoku = &host.get("sudoku", PluginKind::Task).unwrap().declaration;
                    let task_only: Vec<String> = task_overrides.iter().map(|o| format!("task.{o}")).collect();
                    let mut config = RunConfig::resolve(causal_layer, task_decl, &task_only).unwrap();
                    config.layer_config =
                        RunConfig::resolve(layer_decl, sudoku, &layer_overrides).unwrap().layer_config;
                    config
                }
                Err(e) => panic!("{layer_name} on {task_name}: {e:#}"),
            };
            let task = host.build_task(task_name, &config.task_config, 0).unwrap();
            let info = task.info().unwrap();
            let params = Params::new(0);
            let vb = params.var_builder(DType::F32, &Device::Cpu);
            let layer = host.build_layer(layer_name, &config.layer_config, vb.pp("layer")).unwrap();
            if info.causal && !layer.supports_causal() {
                // The worker refuses this pairing before training (worker.rs); the layer itself
                // must refuse a causal pass rather than look ahead.
                let model = task.build_model(vb.pp("task"), layer.width()).unwrap();
                let batch = task.train_batch(0, 2, &Device::Cpu).unwrap();
                let mut pass = Pass::new(2);
                pass.causal = true;
                let x0 = model.embed(&batch, true).unwrap();
                assert!(layer.forward(&x0, &mut pass).is_err(), "{layer_name} ran causally on {task_name}");
                report.push(format!("{layer_name} x {task_name}: refused (not causal)"));
                continue;
            }
            let model = task.build_model(vb.pp("task"), layer.width()).unwrap();
            let batch = task.train_batch(0, 2, &Device::Cpu).unwrap();
            let x0 = model.embed(&batch, true).unwrap();
            let mut pass = Pass::new(2);
            pass.causal = info.causal;
            let h = layer.forward(&x0, &mut pass).unwrap_or_else(|e| panic!("{layer_name} on {task_name}: {e}"));
            assert_eq!(h.dims(), x0.dims(), "{layer_name} on {task_name} changed the token shape");
            let shape = fmt(h.dims());
            let loss = model.loss(&h, &batch).unwrap();
            let value = loss.to_scalar::<f32>().unwrap();
            assert!(value.is_finite(), "{layer_name} on {task_name}: loss {value}");
            let grads = loss.backward().unwrap();
            for prefix in ["layer.", "task."] {
                let reached = params
                    .vars()
                    .iter()
                    .filter(|(name, _)| name.starts_with(prefix))
                    .any(|(_, v)| grads.get(v.as_tensor()).is_some());
                assert!(reached, "{layer_name} on {task_name}: no gradient reaches the {prefix} parameters");
            }
            let eval = task.eval_batches(4, 4, &Device::Cpu).unwrap();
            let h = layer.forward(&model.embed(&eval[0], false).unwrap(), &mut pass).unwrap();
            let metrics = model.evaluate(&h, &eval[0]).unwrap().means();
            let headline = &info.metrics[0].name;
            assert!(metrics.get(headline).is_some_and(|v| v.is_finite()), "{layer_name} on {task_name}: {metrics:?}");
            report.push(format!("{layer_name} x {task_name}: {shape}, loss {value:.3}"));
        }
    }
    println!("{}", report.join("\n"));
    assert_eq!(report.len(), LAYERS.len() * TASKS.len());
}

fn fmt(dims: &[usize]) -> String {
    format!("{dims:?}")
}
