//! The fused kernels (`kernels = fused`, the default) against candle's composition
//! (`kernels = composed`): the same layer, the same parameters, the same outputs and
//! gradients for every variant that the fused ops touch.

use crate::test_support::{build, s, small};
use plugin_api::candle::DType;
use plugin_api::candle_nn::{VarBuilder, VarMap};
use plugin_api::{Config, Layer, Pass, Value};
use plugin_testkit::{named_vars, normal, perturb_seeded, relative_max_diff, rng};

/// A layer of `cfg` with `kernels = name` whose parameters are those of `map`.
fn with_kernels(cfg: &Config, name: &str, map: &VarMap, dtype: DType) -> crate::model::HyperSet {
    let mut cfg = cfg.clone();
    cfg.set("kernels", s(name));
    let vb = VarBuilder::from_varmap(map, dtype, &plugin_api::candle::Device::Cpu);
    crate::model::HyperSet::new(&crate::config::HyperSetConfig::from_config(&cfg).unwrap(), vb).unwrap()
}

/// The largest relative differences (output, worst parameter gradient) between the fused and
/// the composed layer of `cfg` on one random input.
fn fused_vs_composed(cfg: &Config, dtype: DType, seed: u64) -> (f64, f64) {
    let map = VarMap::new();
    let composed = with_kernels(cfg, "composed", &map, dtype);
    perturb_seeded(&map, 0.1, &mut rng(seed));
    let fused = with_kernels(cfg, "fused", &map, dtype);
    let x = normal(&[2, 9, 16], 1.0, &mut rng(seed + 1)).to_dtype(dtype).unwrap();
    let r = normal(&[2, 9, 16], 1.0, &mut rng(seed + 2)).to_dtype(dtype).unwrap();
    let run = |layer: &crate::model::HyperSet| {
        let y = layer.forward(&x, &mut Pass::new(layer.train_iterations())).unwrap();
        let grads = (&y * &r).unwrap().sum_all().unwrap().backward().unwrap();
        (y, grads)
    };
    let ((y_c, g_c), (y_f, g_f)) = (run(&composed), run(&fused));
    let mut worst_grad = 0f64;
    for (name, var) in named_vars(&map) {
        let (a, b) = (g_f.get(var.as_tensor()), g_c.get(var.as_tensor()));
        let (a, b) = (a.unwrap_or_else(|| panic!("{name}: no fused gradient")), b.unwrap());
        worst_grad = plugin_testkit::larger(worst_grad, relative_max_diff(a, b));
    }
    (relative_max_diff(&y_f, &y_c), worst_grad)
}

fn variants() -> Vec<Vec<(&'static str, Value)>> {
    vec![
        vec![],
        vec![("feedforward", s("gelu"))],
        vec![("feedforward", s("softmax"))],
        vec![("feedforward", s("gated"))],
        vec![("attention", s("sigmoid"))],
        vec![("attention", s("linear"))],
        vec![("norm_gain", Value::Bool(false))],
        vec![("qkv_gains", Value::Bool(true))],
        vec![("step_net", s("normed_cond"))],
        vec![("lora_rank", Value::Int(2)), ("layers", Value::Int(2)), ("iterations", Value::Int(2))],
    ]
}

/// In f32 (the training dtype) the fused layer's output and every parameter's gradient
/// agree with the composition within 1e-5 (relative to the largest entry).
#[test]
fn fused_layer_matches_the_composition_in_f32() {
    for (k, options) in variants().into_iter().enumerate() {
        let (output, gradient) = fused_vs_composed(&small(&options), DType::F32, 100 + 3 * k as u64);
        assert!(output <= 1e-5 && gradient <= 1e-5, "{options:?}: output {output:e}, gradient {gradient:e}");
    }
}

/// In f64 the outputs agree to rounding (the fused ops compute the same function, not an
/// approximation of it). The gradients agree within 1e-6: candle's backward of `gelu_erf`
/// (the step network's GELU in the composition) rounds `1/sqrt(2 pi)` to 0.398942, a
/// relative 7e-7 on that term, where the fused GELU uses the exact constant.
#[test]
fn fused_layer_matches_the_composition_in_f64() {
    for (k, options) in variants().into_iter().enumerate() {
        let (output, gradient) = fused_vs_composed(&small(&options), DType::F64, 200 + 3 * k as u64);
        assert!(output <= 1e-12 && gradient <= 1e-6, "{options:?}: output {output:e}, gradient {gradient:e}");
    }
    // Without the step network's GELU the gradients agree to rounding too.
    for (k, feedforward) in ["relu", "softmax", "gated"].into_iter().enumerate() {
        let options = [("step_sizes", s("fixed")), ("feedforward", s(feedforward))];
        let (output, gradient) = fused_vs_composed(&small(&options), DType::F64, 300 + 3 * k as u64);
        assert!(output <= 1e-12 && gradient <= 1e-12, "{options:?}: output {output:e}, gradient {gradient:e}");
    }
}

/// The fused default keeps every `N x N` score matrix inside its op: the recorded graph of a
/// pass over 81 tokens (Sudoku) has no node of `N^2` entries per head.
#[test]
fn fused_attention_records_no_score_matrix() {
    let n = 81;
    let cfg = small(&[("iterations", Value::Int(2))]);
    for (kernels, expect_square) in [("fused", false), ("composed", true)] {
        let mut cfg = cfg.clone();
        cfg.set("kernels", s(kernels));
        let (map, layer) = build(&cfg, DType::F32);
        perturb_seeded(&map, 0.05, &mut rng(7));
        let x = normal(&[1, n, 16], 1.0, &mut rng(8)).to_dtype(DType::F32).unwrap();
        let y = layer.forward(&x, &mut Pass::new(2)).unwrap();
        let square = y.sorted_nodes().iter().any(|t| t.dims().iter().filter(|&&d| d == n).count() >= 2);
        assert_eq!(square, expect_square, "kernels = {kernels}");
    }
}

#[test]
fn unknown_kernels_are_refused_with_the_choices() {
    let err = crate::config::HyperSetConfig::from_config(&small(&[("kernels", s("fast"))])).unwrap_err().to_string();
    assert!(err.contains("kernels = fast is unknown") && err.contains("fused | composed"), "{err}");
}
