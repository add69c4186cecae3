use super::*;
use plugin_api::candle::{DType, Device, Tensor};
use plugin_api::candle_nn::VarMap;
use plugin_api::{Layer, Pass, Value};
use plugin_testkit::{config, gradient_sizes, max_abs_diff, param_count};

fn build(pairs: &[(&str, Value)]) -> (VarMap, Mlp) {
    let cfg = config(&params(), pairs);
    plugin_testkit::build(DType::F32, |vb| Mlp::new(&MlpConfig::from_config(&cfg).unwrap(), vb))
}

#[test]
fn parameter_counts_follow_the_two_forms() {
    let (d, h, k) = (16usize, 24usize, 2usize);
    let pairs = |kind: &str| {
        vec![
            ("d", Value::Int(d as i64)),
            ("hidden", Value::Int(h as i64)),
            ("layers", Value::Int(k as i64)),
            ("iterations", Value::Int(4)),
            ("kind", Value::Str(kind.into())),
        ]
    };
    assert_eq!(param_count(&build(&pairs("plain")).0), k * (d + 2 * d * h));
    assert_eq!(param_count(&build(&pairs("gated")).0), k * (d + 3 * d * h));
}

#[test]
fn every_parameter_receives_a_gradient() {
    for kind in ["plain", "gated"] {
        let (map, layer) =
            build(&[("d", Value::Int(8)), ("hidden", Value::Int(12)), ("kind", Value::Str(kind.into()))]);
        let x = plugin_testkit::randn(0f32, 1.0, (2, 5, 8), &Device::Cpu).unwrap();
        let y = layer.forward(&x, &mut Pass::new(4)).unwrap();
        let grads = y.sqr().unwrap().sum_all().unwrap().backward().unwrap();
        for (name, g) in gradient_sizes(&map, &grads) {
            assert!(g > 0.0, "{name} ({kind}) received no gradient");
        }
    }
}

/// The gated block computes `x + W_d((W_g u) * gelu(W_u u))` of seed 002 Eq. 6, checked
/// against the formula written out with candle's own ops.
#[test]
fn a_gated_block_is_equation_6() {
    let (map, layer) = build(&[
        ("d", Value::Int(6)),
        ("hidden", Value::Int(10)),
        ("layers", Value::Int(1)),
        ("iterations", Value::Int(1)),
        ("init_std", Value::Float(0.5)),
    ]);
    let vars = map.data().lock().unwrap().clone();
    let get = |suffix: &str| vars.iter().find(|(k, _)| k.ends_with(suffix)).unwrap().1.as_tensor().clone();
    let x = plugin_testkit::randn(0f32, 1.0, (1, 3, 6), &Device::Cpu).unwrap();
    let u = x.broadcast_div(&(x.sqr().unwrap().mean_keepdim(2).unwrap() + 1e-6).unwrap().sqrt().unwrap()).unwrap();
    let u = u.broadcast_mul(&get("norm")).unwrap();
    let up = u.broadcast_matmul(&get("w_up")).unwrap().gelu_erf().unwrap();
    let gate = u.broadcast_matmul(&get("w_gate")).unwrap();
    let expected = (&x + (gate * up).unwrap().broadcast_matmul(&get("w_down")).unwrap()).unwrap();
    let got = layer.forward(&x, &mut Pass::new(1)).unwrap();
    assert!(max_abs_diff(&got, &expected) < 1e-5, "differs by {}", max_abs_diff(&got, &expected));
}

/// Tokens never mix: changing the last token leaves the others' outputs unchanged.
#[test]
fn tokens_are_transformed_independently() {
    let (_, layer) = build(&[("d", Value::Int(8))]);
    let x = plugin_testkit::randn(0f32, 1.0, (1, 4, 8), &Device::Cpu).unwrap();
    let mut changed = x.to_vec3::<f32>().unwrap();
    changed[0][3][0] += 2.0;
    let changed = Tensor::new(changed, &Device::Cpu).unwrap();
    let first = |x: &Tensor| layer.forward(x, &mut Pass::new(4)).unwrap().narrow(1, 0, 3).unwrap();
    assert!(max_abs_diff(&first(&x), &first(&changed)) < 1e-7);
}

#[test]
fn iterations_not_a_multiple_of_layers_are_refused_with_the_fix() {
    let cfg = config(&params(), &[("layers", Value::Int(3)), ("iterations", Value::Int(4))]);
    let err = MlpConfig::from_config(&cfg).unwrap_err().to_string();
    assert!(err.contains("cannot be split over 3 layers"), "{err}");
}
