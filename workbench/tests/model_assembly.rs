//! Models assembled from two plugin libraries (layer + task), each with its own copy of
//! candle: exact parameter counts and correct gradients across the copies.

use crate::common;

use candle_core::{DType, Device, Tensor};
use plugin_api::{Config, Pass, PluginKind, Value};
use workbench::host::PluginHost;
use workbench::params::Params;

fn config(host: &PluginHost, name: &str, kind: PluginKind, pairs: &[(&str, Value)]) -> Config {
    let mut cfg = Config::defaults(&host.get(name, kind).unwrap().declaration.params);
    for (k, v) in pairs {
        cfg.set(k, v.clone());
    }
    cfg
}

/// notes-hyperset.md §8: Hyper-SET on Sudoku with d = 768, 12 heads, L = 24, M = 4d and a
/// 512-dimensional time embedding has exactly 5,195,584 parameters.
#[test]
fn hyperset_sudoku_paper_configuration_has_5_195_584_parameters() {
    let host = common::load_plugins("count", &["hyperset", "sudoku"]);
    let layer_cfg = config(
        &host,
        "hyperset",
        PluginKind::Layer,
        &[
            ("d", Value::Int(768)),
            ("heads", Value::Int(12)),
            ("iterations", Value::Int(24)),
            ("ff_ratio", Value::Int(4)),
            ("time_dim", Value::Int(512)),
        ],
    );
    let task_cfg =
        config(&host, "sudoku", PluginKind::Task, &[("train_puzzles", Value::Int(2)), ("eval_puzzles", Value::Int(1))]);
    let params = Params::new(0);
    let vb = params.var_builder(DType::F32, &Device::Cpu);
    let task = host.build_task("sudoku", &task_cfg, 0).unwrap();
    let layer = host.build_layer("hyperset", &layer_cfg, vb.pp("layer")).unwrap();
    let _model = task.build_model(vb.pp("task"), layer.width()).unwrap();
    assert_eq!(params.count(), 5_195_584);
}

/// Gradients computed by the host's backward pass over a graph built by the layer plugin's
/// and the task plugin's own copies of candle agree with central finite differences (f64).
/// Without unique tensor ids across copies (vendor/README.md) the backward pass merges
/// unrelated nodes and this fails.
#[test]
fn gradients_across_plugin_copies_match_finite_differences() {
    let host = common::load_plugins("xcopy", &["hyperset", "sudoku"]);
    let layer_cfg = config(
        &host,
        "hyperset",
        PluginKind::Layer,
        &[
            ("d", Value::Int(8)),
            ("heads", Value::Int(2)),
            ("iterations", Value::Int(2)),
            ("time_dim", Value::Int(4)),
            ("ff_ratio", Value::Int(2)),
        ],
    );
    let task_cfg = config(
        &host,
        "sudoku",
        PluginKind::Task,
        &[("train_puzzles", Value::Int(4)), ("eval_puzzles", Value::Int(1)), ("difficulty", Value::Str("easy".into()))],
    );
    let params = Params::new(3);
    let vb = params.var_builder(DType::F64, &Device::Cpu);
    let task = host.build_task("sudoku", &task_cfg, 0).unwrap();
    let layer = host.build_layer("hyperset", &layer_cfg, vb.pp("layer")).unwrap();
    let model = task.build_model(vb.pp("task"), 8).unwrap();
    // Move every parameter off its initial value so no step size is zero.
    // The same shift at every run: ReLU's kinks make a finite difference wrong where a
    // pre-activation lies within eps of zero, and a random shift lands there now and then.
    for (i, (_, var)) in params.vars().iter().enumerate() {
        let shift = (var.as_tensor() + fixed_noise(var.shape(), i as u64)).unwrap();
        var.set(&shift).unwrap();
    }
    let batch = task.train_batch(0, 2, &Device::Cpu).unwrap();
    let loss = || -> Tensor {
        let x0 = model.embed(&batch, true).unwrap();
        let h = layer.forward(&x0, &mut Pass::new(2)).unwrap();
        model.loss(&h, &batch).unwrap()
    };
    let grads = loss().backward().unwrap();
    let eps = 1e-6;
    let mut checked = 0;
    for (name, var) in params.vars() {
        let grad: Vec<f64> = grads
            .get(var.as_tensor())
            .unwrap_or_else(|| panic!("no gradient for {name}"))
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        let original: Vec<f64> = var.as_tensor().flatten_all().unwrap().to_vec1().unwrap();
        // A few elements of every parameter, including the last.
        let picks = [0, original.len() / 2, original.len() - 1];
        for &k in &picks {
            let mut values = original.clone();
            let mut at = |delta: f64| -> f64 {
                values[k] = original[k] + delta;
                var.set(&Tensor::from_vec(values.clone(), var.shape(), &Device::Cpu).unwrap()).unwrap();
                loss().to_scalar::<f64>().unwrap()
            };
            let numeric = (at(eps) - at(-eps)) / (2.0 * eps);
            var.set(&Tensor::from_vec(original.clone(), var.shape(), &Device::Cpu).unwrap()).unwrap();
            let analytic = grad[k];
            // Relative agreement, plus the finite difference's own rounding: about
            // f64::EPSILON * loss / eps = 2e-10 here, which a gradient near 1e-6 would
            // otherwise have to beat by itself.
            let tolerance = 1e-4 * analytic.abs().max(numeric.abs()) + 1e-9;
            assert!(
                (analytic - numeric).abs() < tolerance,
                "{name}[{k}]: autograd {analytic} vs finite difference {numeric}"
            );
            checked += 1;
        }
    }
    assert!(checked >= 3 * 12, "checked {checked} elements");
}

/// Data-parallel training (`train::parallel`): the loss and gradients of a batch split over
/// three threads equal those of the whole batch; evaluation over threads, and over the
/// parameters detached from autograd, scores the same. Sudoku boards have different numbers of
/// blanks, so shards weighted by example count instead of `loss_weight` would differ.
#[test]
fn split_batches_give_the_whole_batch_loss_and_gradients() {
    use workbench::train::parallel::{evaluate, loss_and_grads};
    let host = common::load_plugins("shards", &["hyperset", "sudoku"]);
    let layer_cfg = config(
        &host,
        "hyperset",
        PluginKind::Layer,
        &[("d", Value::Int(8)), ("heads", Value::Int(2)), ("iterations", Value::Int(2)), ("time_dim", Value::Int(4))],
    );
    let task_cfg = config(
        &host,
        "sudoku",
        PluginKind::Task,
        &[("train_puzzles", Value::Int(16)), ("eval_puzzles", Value::Int(7))],
    );
    let params = Params::new(5);
    let vb = params.var_builder(DType::F64, &Device::Cpu);
    let task = host.build_task("sudoku", &task_cfg, 0).unwrap();
    let layer = host.build_layer("hyperset", &layer_cfg, vb.pp("layer")).unwrap();
    let model = task.build_model(vb.pp("task"), 8).unwrap();
    // Non-zero step sizes, so every parameter gets a gradient.
    for (_, var) in params.vars() {
        let noise = Tensor::randn(0f64, 0.3, var.shape(), &Device::Cpu).unwrap();
        var.set(&(var.as_tensor() + noise).unwrap()).unwrap();
    }
    let vars: Vec<Tensor> = params.vars().iter().map(|(_, v)| v.as_tensor().clone()).collect();
    let batch = task.train_batch(0, 7, &Device::Cpu).unwrap();
    let whole = loss_and_grads(&layer, &model, &batch, 2, false, 1, &vars).unwrap();
    let split = loss_and_grads(&layer, &model, &batch, 2, false, 3, &vars).unwrap();
    assert_eq!((whole.shard_seconds.len(), split.shard_seconds.len()), (1, 3));
    assert!(split.shard_seconds.iter().all(|&s| s > 0.0), "{:?}", split.shard_seconds);
    let (whole_loss, whole, split_loss, split) = (whole.loss, whole.grads, split.loss, split.grads);
    assert!((whole_loss - split_loss).abs() < 1e-12 * whole_loss.abs().max(1.0), "{whole_loss} vs {split_loss}");
    for (name, var) in params.vars() {
        let a: Vec<f64> = whole.get(var.as_tensor()).unwrap().flatten_all().unwrap().to_vec1().unwrap();
        let b: Vec<f64> = split.get(var.as_tensor()).unwrap().flatten_all().unwrap().to_vec1().unwrap();
        assert_eq!(a.len(), b.len(), "{name}");
        let scale = a.iter().map(|x| x.abs()).fold(1e-12, plugin_testkit::larger);
        let worst = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0, plugin_testkit::larger);
        assert!(worst / scale < 1e-10, "{name}: whole and split gradients differ by {worst} (scale {scale})");
    }
    // Evaluation spread over threads sums to the same metrics, batch order kept.
    let batches = task.eval_batches(2, 7, &Device::Cpu).unwrap();
    let serial = evaluate(&layer, &model, &batches, 2, false, 1, None).unwrap();
    let threaded = evaluate(&layer, &model, &batches, 3, false, 3, None).unwrap();
    let at_two = evaluate(&layer, &model, &batches, 2, false, 3, None).unwrap();
    assert_eq!(serial, at_two);
    assert_ne!(serial, threaded, "a different depth must change the metrics");
    // Workers evaluate a model built again over the parameters detached from autograd
    // (`Params::frozen_var_builder`): it must score exactly what the trained one does.
    let frozen = params.frozen_var_builder(DType::F64, &Device::Cpu);
    let frozen_layer = host.build_layer("hyperset", &layer_cfg, frozen.pp("layer")).unwrap();
    let frozen_model = task.build_model(frozen.pp("task"), 8).unwrap();
    assert_eq!(evaluate(&frozen_layer, &frozen_model, &batches, 2, false, 3, None).unwrap(), serial);
}

/// Uniform values in [-0.5, 0.5) of `shape`, the same for the same `salt` (splitmix64).
fn fixed_noise(shape: &candle_core::Shape, salt: u64) -> Tensor {
    let mut state = salt.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
    let values: Vec<f64> = (0..shape.elem_count())
        .map(|_| {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            (z >> 11) as f64 / (1u64 << 53) as f64 - 0.5
        })
        .collect();
    Tensor::from_vec(values, shape, &Device::Cpu).unwrap()
}
