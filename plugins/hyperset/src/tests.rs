use super::*;
use crate::test_support::{build, config};
use plugin_api::candle::{DType, Device};
use plugin_api::candle_nn::VarMap;
use plugin_api::{Layer, Pass, Value};
use plugin_testkit::{gradient_sizes, param_count, random_projection_gradients};

/// notes-hyperset.md §8: the Sudoku model (d = 768, 12 heads, M = 4d, time embedding 512)
/// has 5,195,584 parameters; the task's share (token embedding 10*768, positions 81*768,
/// head RMSNorm 768 and Linear 768*9) is 77,568, leaving 5,118,016 for the layer.
#[test]
fn sudoku_paper_configuration_layer_parameter_count() {
    let cfg = config(&[
        ("d", Value::Int(768)),
        ("heads", Value::Int(12)),
        ("iterations", Value::Int(24)),
        ("ff_ratio", Value::Int(4)),
        ("time_dim", Value::Int(512)),
    ]);
    let (map, _) = build(&cfg, DType::F32);
    assert_eq!(param_count(&map), 5_195_584 - 77_568);
}

fn randomise(map: &VarMap) {
    for var in map.all_vars() {
        let t = plugin_testkit::randn(0f32, 0.05, var.shape(), &Device::Cpu).unwrap().to_dtype(var.dtype()).unwrap();
        var.set(&t).unwrap();
    }
}

fn grads_by_name(map: &VarMap, layer: &HyperSet) -> Vec<(String, f64)> {
    let x = plugin_testkit::randn(0f32, 1.0, (2, 5, 16), &Device::Cpu).unwrap();
    let y = layer.forward(&x, &mut Pass::new(4)).unwrap();
    gradient_sizes(map, &random_projection_gradients(&y))
}

/// Once the step sizes are non-zero (after the first optimiser step), every parameter of the
/// layer receives a gradient: no op on the path is forward-only.
#[test]
fn every_parameter_receives_a_gradient() {
    let cfg = config(&[
        ("d", Value::Int(16)),
        ("heads", Value::Int(2)),
        ("iterations", Value::Int(4)),
        ("layers", Value::Int(2)),
        ("time_dim", Value::Int(8)),
    ]);
    let (map, layer) = build(&cfg, DType::F32);
    randomise(&map);
    let grads = grads_by_name(&map, &layer);
    assert_eq!(grads.len(), 2 * 4 + 6);
    for (name, g) in grads {
        assert!(g > 0.0, "parameter {name} received no gradient");
    }
}

/// With every Linear of the step network zero-initialised (the authors' code), the time
/// Linears' weights get no gradient at initialisation: the reason `step_init=last` is the default.
#[test]
fn all_zero_step_network_starves_the_time_mlp() {
    let cfg = config(&[
        ("d", Value::Int(16)),
        ("heads", Value::Int(2)),
        ("time_dim", Value::Int(8)),
        ("step_init", Value::Str("all".into())),
    ]);
    let (map, layer) = build(&cfg, DType::F32);
    let grads = grads_by_name(&map, &layer);
    let get = |n: &str| grads.iter().find(|(k, _)| k == n).unwrap().1;
    assert_eq!(get("step.time_in.weight"), 0.0);
    assert_eq!(get("step.time_out.weight"), 0.0);
    assert!(get("step.out.weight") > 0.0, "the output Linear must still learn");
}

/// At initialisation the step sizes are zero, so the layer is the identity (ReZero).
#[test]
fn starts_as_identity() {
    let cfg = config(&[("d", Value::Int(16)), ("heads", Value::Int(4)), ("time_dim", Value::Int(8))]);
    let (_, layer) = build(&cfg, DType::F32);
    let x = plugin_testkit::randn(0f32, 1.0, (2, 7, 16), &Device::Cpu).unwrap();
    let y = layer.forward(&x, &mut Pass::new(5)).unwrap();
    assert_eq!(plugin_testkit::max_abs_diff(&y, &x), 0.0);
}

#[test]
fn bad_shapes_are_refused_with_the_fix() {
    let cfg = config(&[("d", Value::Int(10)), ("heads", Value::Int(4))]);
    let err = HyperSetConfig::from_config(&cfg).unwrap_err().to_string();
    assert!(err.contains("not divisible by heads"), "{err}");
    let cfg = config(&[("iterations", Value::Int(6)), ("layers", Value::Int(4))]);
    assert!(HyperSetConfig::from_config(&cfg).unwrap_err().to_string().contains("cannot be split over 4 layers"));
}

/// Energies are per sample and finite; the diagnostics of later iterations use the block
/// that produced them.
#[test]
fn energies_are_per_sample() {
    let cfg = config(&[("d", Value::Int(16)), ("heads", Value::Int(2)), ("time_dim", Value::Int(8))]);
    let (_, layer) = build(&cfg, DType::F32);
    let x = plugin_testkit::randn(0f32, 1.0, (3, 6, 16), &Device::Cpu).unwrap();
    let energies = layer.energies(1, 1, &x, &x).unwrap();
    let names: Vec<_> = energies.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["attention", "feedforward", "total"]);
    for e in &energies {
        assert_eq!(e.per_sample.dims(), &[3]);
        assert!(plugin_testkit::entries(&e.per_sample).iter().all(|v| v.is_finite()), "{}", e.name);
    }
    let heads = layer.head_projections(1, 1, &x).unwrap().unwrap();
    assert_eq!(heads.dims(), &[3, 2, 6, 8]);
}
