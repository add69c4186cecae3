//! Dropout on the branch outputs and on the attention probabilities: off unless the pass
//! trains, and exactly the old layer at rate 0.

use crate::attention::softmax::attention_weights;
use crate::config::{params, IntrinsicConfig};
use crate::dropout::Dropout;
use crate::model::Intrinsic;
use plugin_api::candle::{DType, Tensor};
use plugin_api::candle_nn::VarMap;
use plugin_api::{Config, Layer, Pass, Value};
use plugin_testkit::{gradient_sizes, max_abs_diff, named_vars, perturb_seeded};
use rand::rngs::StdRng;
use rand::SeedableRng;

fn config(attention: &str, dropout: f64) -> Config {
    config_with(attention, &[("dropout", Value::Float(dropout))])
}

/// A small layer of kind `attention` with `extra` settings on top.
fn config_with(attention: &str, extra: &[(&str, Value)]) -> Config {
    let mut pairs = vec![
        ("attention", Value::Str(attention.into())),
        ("d", Value::Int(16)),
        ("heads", Value::Int(2)),
        ("layers", Value::Int(2)),
        ("iterations", Value::Int(4)),
        ("ff_ratio", Value::Int(2)),
    ];
    pairs.extend(extra.iter().cloned());
    plugin_testkit::config(&params(), &pairs)
}

/// A layer whose parameters are `reference`'s (or fresh seeded draws when `None`).
fn build(cfg: &Config, reference: Option<&VarMap>) -> (VarMap, Intrinsic) {
    let (map, layer) =
        plugin_testkit::build(DType::F32, |vb| Intrinsic::new(&IntrinsicConfig::from_config(cfg).unwrap(), vb));
    match reference {
        Some(reference) => {
            let values: std::collections::HashMap<_, _> = named_vars(reference).into_iter().collect();
            for (name, var) in named_vars(&map) {
                var.set(values[&name].as_tensor()).unwrap();
            }
        }
        None => perturb_seeded(&map, 0.1, &mut StdRng::seed_from_u64(1)),
    }
    (map, layer)
}

fn run(layer: &Intrinsic, x: &Tensor, train: bool) -> Tensor {
    let mut pass = Pass::new(4);
    pass.causal = true;
    pass.train = train;
    layer.forward(x, &mut pass).unwrap()
}

fn tokens() -> Tensor {
    plugin_testkit::normal(&[2, 6, 16], 1.0, &mut StdRng::seed_from_u64(2)).to_dtype(DType::F32).unwrap()
}

/// At rate 0 a training pass is the plain layer `z + f(z)`, `z + g(z)` written out, bit for
/// bit, and so is an evaluation pass.
#[test]
fn zero_dropout_is_the_unchanged_layer() {
    let (_, layer) = build(&config("softmax", 0.0), None);
    let x = tokens();
    let mut expected = x.clone();
    for t in 0..4 {
        let block = &layer_blocks(&layer)[t / 2];
        expected = (&expected + block.attention_branch(&expected, true, true).unwrap()).unwrap();
        expected = (&expected + block.mlp_branch(&expected).unwrap()).unwrap();
    }
    assert_eq!(max_abs_diff(&run(&layer, &x, true), &expected), 0.0);
    assert_eq!(max_abs_diff(&run(&layer, &x, false), &expected), 0.0);
}

fn layer_blocks(layer: &Intrinsic) -> &[crate::block::Block] {
    layer.blocks()
}

/// With dropout, training passes differ from the evaluation pass, and repeat exactly for the
/// same input (masks seeded by the branch outputs, so a run trains again to the same numbers),
/// while evaluation is deterministic and equals the rate-0 layer, for a plain and a
/// momentum kind; every parameter still learns through the masks.
#[test]
fn dropout_changes_training_passes_only() {
    for attention in ["softmax", "momentum", "newton"] {
        training_passes_differ_and_repeat(&config(attention, 0.0), &config(attention, 0.3), attention);
    }
}

/// The same for the attention dropout, on every kind that forms probabilities (both Newton
/// forms).
#[test]
fn attention_dropout_changes_training_passes_only() {
    let rate = ("attn_dropout", Value::Float(0.3));
    let full = ("newton", Value::Str("full".into()));
    for (name, extra) in [
        ("softmax", vec![]),
        ("momentum", vec![]),
        ("nesterov", vec![]),
        ("newton", vec![]),
        ("newton", vec![full.clone()]),
        ("light_newton", vec![]),
    ] {
        let mut with_rate = extra.clone();
        with_rate.push(rate.clone());
        let label = format!("{name} {extra:?}");
        training_passes_differ_and_repeat(&config_with(name, &extra), &config_with(name, &with_rate), &label);
    }
}

/// Checks that `dropped_cfg` (`plain_cfg` with a dropout rate) drops in training passes only.
fn training_passes_differ_and_repeat(plain_cfg: &Config, dropped_cfg: &Config, attention: &str) {
    let (reference, plain) = build(plain_cfg, None);
    let (map, dropped) = build(dropped_cfg, Some(&reference));
    let x = tokens();
    let eval = run(&dropped, &x, false);
    assert_eq!(max_abs_diff(&eval, &run(&plain, &x, false)), 0.0, "{attention}: evaluation must not drop");
    assert_eq!(max_abs_diff(&eval, &run(&dropped, &x, false)), 0.0, "{attention}");
    let (first, second) = (run(&dropped, &x, true), run(&dropped, &x, true));
    assert!(max_abs_diff(&first, &eval) > 1e-3, "{attention}: training output unchanged by dropout");
    assert_eq!(max_abs_diff(&first, &second), 0.0, "{attention}: the same input must draw the same masks");

    let r = plugin_testkit::normal(first.dims(), 1.0, &mut StdRng::seed_from_u64(3)).to_dtype(DType::F32).unwrap();
    let grads = (run(&dropped, &x, true) * r).unwrap().sum_all().unwrap().backward().unwrap();
    for (name, g) in gradient_sizes(&map, &grads) {
        assert!(g > 0.0 && g.is_finite(), "{attention}: parameter {name} gradient {g}");
    }
}

/// The attention dropout acts on the probabilities, not on the branch output: the first
/// token of a causal sequence attends to itself alone with probability 1, so with one head its
/// branch output less the output bias is 0 or `1 / (1 - rate)` = 2 times the undropped one,
/// per sample (an output dropout would also drop the bias).
#[test]
fn attention_dropout_drops_probabilities() {
    let cfg = config_with("softmax", &[("heads", Value::Int(1))]);
    let (_, layer) = build(&cfg, None);
    let attention = &layer.blocks()[0].attention;
    let bias = attention.projections().o.bias.clone().expect("GPT-2 blocks have an output bias");
    let x = plugin_testkit::normal(&[12, 6, 16], 1.0, &mut StdRng::seed_from_u64(4)).to_dtype(DType::F32).unwrap();
    let first_token = |dropout| {
        let y = attention.forward(&x, &x, true, dropout).unwrap();
        let y = y.narrow(1, 0, 1).unwrap().broadcast_sub(&bias).unwrap();
        y.squeeze(1).unwrap().to_vec2::<f32>().unwrap()
    };
    let (clean, dropped) = (first_token(Dropout::NONE), first_token(Dropout::new(0.5, 7)));
    let mut factors = Vec::new();
    for (c, d) in clean.iter().zip(&dropped) {
        let factor = if d.iter().all(|v| *v == 0.0) { 0.0 } else { 2.0 };
        for (c, d) in c.iter().zip(d) {
            assert!((d - factor * c).abs() <= 1e-5 * (1.0 + c.abs()), "{d} is not {factor} x {c}");
        }
        factors.push(factor);
    }
    assert!(factors.contains(&0.0) && factors.contains(&2.0), "12 samples at rate 0.5 kept all or none: {factors:?}");
}

/// The fused attention under dropout is the composition written out with the weights
/// `p_{i,h}` formed and dropped by [`Dropout::apply`]: the same mask on the same entries.
#[test]
fn fused_softmax_under_dropout_is_the_composition() {
    let (_, layer) = build(&config_with("softmax", &[]), None);
    let attention = &layer.blocks()[0].attention;
    let proj = attention.projections();
    let x = tokens();
    for causal in [false, true] {
        let dropout = Dropout::new(0.3, 3);
        let fused = attention.forward(&x, &x, causal, dropout).unwrap();
        let (q, k, v) = (proj.queries(&x).unwrap(), proj.keys(&x).unwrap(), proj.values(&x).unwrap());
        let temperature = (proj.head_dim().unwrap() as f64).sqrt();
        let weights = dropout.apply(attention_weights(&q, &k, temperature, causal).unwrap()).unwrap();
        let composed = proj.output(&weights.matmul(&v).unwrap()).unwrap();
        let diff = max_abs_diff(&fused, &composed);
        assert!(diff < 1e-5, "causal {causal}: fused differs from the composition by {diff}");
        let undropped = attention.forward(&x, &x, causal, Dropout::NONE).unwrap();
        assert!(max_abs_diff(&fused, &undropped) > 1e-3, "causal {causal}: the mask changes nothing");
    }
}

#[test]
fn dropout_rates_outside_zero_to_one_are_refused() {
    for rate in [1.0, -0.1] {
        for key in ["dropout", "attn_dropout"] {
            let err = IntrinsicConfig::from_config(&config_with("softmax", &[(key, Value::Float(rate))]))
                .unwrap_err()
                .to_string();
            assert!(err.contains(&format!("{key} = {rate} must lie in [0, 1)")), "{err}");
        }
    }
    let defaults = IntrinsicConfig::from_config(&plugin_testkit::config(&params(), &[])).unwrap();
    assert_eq!((defaults.dropout, defaults.attn_dropout), (0.0, 0.0));
}

/// The linear kinds form no probabilities: an attention-dropout rate for them is an error
/// naming the fix, not a setting that silently does nothing.
#[test]
fn attention_dropout_is_refused_where_there_are_no_probabilities() {
    for attention in ["linear", "gated_linear"] {
        let cfg = config_with(attention, &[("attn_dropout", Value::Float(0.1))]);
        let err = IntrinsicConfig::from_config(&cfg).unwrap_err().to_string();
        assert!(err.contains("does not form") && err.contains("attn_dropout=0"), "{err}");
        assert!(IntrinsicConfig::from_config(&config_with(attention, &[("dropout", Value::Float(0.1))])).is_ok());
    }
}
