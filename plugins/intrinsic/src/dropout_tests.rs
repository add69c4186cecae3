//! Dropout on the branch outputs: off unless the pass trains, and exactly the old layer at
//! rate 0.

use crate::config::{params, IntrinsicConfig};
use crate::model::Intrinsic;
use plugin_api::candle::{DType, Tensor};
use plugin_api::candle_nn::VarMap;
use plugin_api::{Config, Layer, Pass, Value};
use plugin_testkit::{gradient_sizes, max_abs_diff, named_vars, perturb_seeded};
use rand::rngs::StdRng;
use rand::SeedableRng;

fn config(attention: &str, dropout: f64) -> Config {
    plugin_testkit::config(
        &params(),
        &[
            ("attention", Value::Str(attention.into())),
            ("d", Value::Int(16)),
            ("heads", Value::Int(2)),
            ("layers", Value::Int(2)),
            ("iterations", Value::Int(4)),
            ("ff_ratio", Value::Int(2)),
            ("dropout", Value::Float(dropout)),
        ],
    )
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
        expected = (&expected + block.attention_branch(&expected, true).unwrap()).unwrap();
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
        let (reference, plain) = build(&config(attention, 0.0), None);
        let (map, dropped) = build(&config(attention, 0.3), Some(&reference));
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
}

#[test]
fn dropout_rates_outside_zero_to_one_are_refused() {
    for rate in [1.0, -0.1] {
        let err = IntrinsicConfig::from_config(&config("softmax", rate)).unwrap_err().to_string();
        assert!(err.contains("must lie in [0, 1)"), "{err}");
    }
    assert_eq!(IntrinsicConfig::from_config(&plugin_testkit::config(&params(), &[])).unwrap().dropout, 0.0);
}
