//! The experiment files shipped in `experiments/`: each is checked exactly as `workbench
//! train --config` (or `sweep --config`, with a [sweep] table) checks it, without training,
//! and its model has the parameter count its seed gives, or the count derived from the seed's
//! where this project's model differs (each case says why).

use crate::common;

use candle_core::{DType, Device};
use plugin_api::Value;
use std::path::{Path, PathBuf};
use workbench::experiment_file::Experiment;
use workbench::host::PluginHost;
use workbench::ops::grid;
use workbench::params::Params;
use workbench::run_config::RunConfig;

fn experiments_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../experiments")
}

fn host() -> PluginHost {
    let crates = ["hyperset", "sudoku", "image-task", "masked-image", "intrinsic", "cem", "language"];
    common::load_plugins("experiments", &crates)
}

/// The configurations `train` (one) or `sweep` (every point) would store for `file`.
fn configurations(host: &PluginHost, file: &Path) -> anyhow::Result<Vec<RunConfig>> {
    let exp = Experiment::load(&[file.to_path_buf()])?;
    if exp.axes.is_empty() {
        let (layer, task) = exp.train_plugins(None, None)?;
        let layer = host.get(&layer, plugin_api::PluginKind::Layer)?;
        let task = host.get(&task, plugin_api::PluginKind::Task)?;
        Ok(vec![RunConfig::resolve(&layer.declaration, &task.declaration, &exp.train_overrides(&[]))?])
    } else {
        let spec = exp.sweep_spec(None, None, &[])?;
        Ok(grid::plan(host, &spec)?.into_iter().map(|p| p.config).collect())
    }
}

/// Parameters of the model a run of `config` trains (layer and task model). The data sets
/// are made tiny first: their size does not change the model.
fn parameter_count(host: &PluginHost, config: &RunConfig) -> usize {
    let mut task_config = config.task_config.clone();
    for (key, small) in
        [("train_puzzles", 2), ("eval_puzzles", 1), ("train_images", 32), ("test_images", 4), ("kmeans_iterations", 0)]
    {
        if task_config.0.contains_key(key) {
            task_config.set(key, Value::Int(small));
        }
    }
    let params = Params::new(0);
    let vb = params.var_builder(DType::F32, &Device::Cpu);
    let task = host.build_task(&config.task, &task_config, 0).unwrap();
    let layer = host.build_layer(&config.layer, &config.layer_config, vb.pp("layer")).unwrap();
    let _model = task.build_model(vb.pp("task"), layer.width()).unwrap();
    params.count()
}

/// The expected count of every point of each file; a file missing here fails the test.
fn expected_count(file: &str, config: &RunConfig) -> Option<usize> {
    let d = |c: &RunConfig| int(c, "d");
    match file {
        // Seed 000 Table 8 (5.20M; notes-hyperset.md 8 gives every term).
        "sudoku-hyperset.toml" => Some(5_195_584),
        // Seed 000 Table 15 (3.94M; notes 8): positions are fixed sinusoids and the codebook
        // has the seeds' 1024 entries, so the 32x32 images change nothing.
        "mim-hyperset.toml" => Some(3_937_856),
        // The seeds count the classifier on ImageNet only (Table 1 and 5: 1,934,268 for
        // ImageNet-100, notes 8): 14x14-pixel patches (f = 588 features) and 100 classes.
        // CIFAR's 4x4-pixel patches (f = 48) and 10 classes change the patch LayerNorm
        // (2f), the patch projection (f d + d) and the head (d c + c). The CIFAR model's step
        // network also normalises its condition once more than the ImageNet model's
        // (`step_net = normed_cond`; notes 9, "RMSNorm (Basic only)"): d more gains.
        "cifar10-hyperset.toml" => {
            let d = d(config);
            let embedding_and_head = |f: usize, classes: usize| 2 * f + f * d + d + d * classes + classes;
            Some(1_934_268 - embedding_and_head(588, 100) + embedding_and_head(48, 10) + d)
        }
        // Seed 001: ~30.5M (notes 4, to 0.1M) with GPT-2's 50,257 tokens, an embedding and
        // an untied head; the file reads bytes (256 tokens).
        "intrinsic-optimizers-30m.toml" => None,
        // notes-cem.md 5.2: 70,082,208 with Llama's 32,000 tokens, an embedding and an
        // untied head; the file reads bytes (256 tokens).
        // The notes also leave out ALiBi's learnable biases: one self and one cross bias per
        // head and block.
        "cem-86m.toml" => {
            let alibi = 2 * int(config, "heads") * int(config, "layers");
            Some(70_082_208 - 2 * (32_000 - 256) * d(config) + alibi)
        }
        other => panic!("{other}: add its expected parameter count to this test"),
    }
}

/// An integer of the layer's configuration.
fn int(config: &RunConfig, key: &str) -> usize {
    match config.layer_config.0.get(key) {
        Some(Value::Int(v)) => *v as usize,
        other => panic!("layer key {key} is not an integer: {other:?}"),
    }
}

#[test]
fn every_experiment_file_is_valid_and_has_its_seeds_parameter_count() {
    let host = host();
    let mut files: Vec<PathBuf> = std::fs::read_dir(experiments_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "experiments/ holds {files:?}");
    let mut wrong = Vec::new();
    for file in &files {
        let name = file.file_name().unwrap().to_str().unwrap();
        let text = std::fs::read_to_string(file).unwrap();
        assert!(text.starts_with("# "), "{name}: starts with a comment citing its source");
        let configs = configurations(&host, file).unwrap_or_else(|e| panic!("{name}: {e:#}"));
        assert!(!configs.is_empty(), "{name}");
        for config in &configs {
            let count = parameter_count(&host, config);
            let attention = config.layer_config.0.get("attention").map(|v| v.to_string()).unwrap_or_default();
            let what = format!("{name} ({} attention {attention})", config.layer);
            match expected_count(name, config) {
                Some(expected) if count != expected => wrong.push(format!("{what}: {count}, expected {expected}")),
                None => {
                    // Seed 001's ~30.5M, rounded to 0.1M, once the GPT-2 vocabulary is back.
                    let gpt2 = count + 2 * (50_257 - 256) * int(config, "d");
                    if (gpt2 as f64 / 1e5).round() as u64 != 305 {
                        wrong.push(format!("{what}: {count}, {gpt2} with GPT-2's tokens, expected ~30.5M"));
                    }
                }
                Some(_) => {}
            }
        }
    }
    assert!(wrong.is_empty(), "parameter counts:\n{}", wrong.join("\n"));
}
