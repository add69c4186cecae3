//! The layer's descent checks (`workbench verify`): a small step of each sub-layer lowers its
//! energy, in every preconditioner form, and the check notices a step the wrong way.

use super::*;
use plugin_api::candle::{DType, Device, Tensor};
use plugin_api::candle_nn::{VarBuilder, VarMap};
use plugin_api::{Config, Layer, Value};

fn layer(preconditioner: &str) -> Cem {
    let mut cfg = Config::defaults(&params());
    for (k, v) in [
        ("d", Value::Int(16)),
        ("heads", Value::Int(2)),
        ("layers", Value::Int(2)),
        ("iterations", Value::Int(2)),
        ("mlp_ratio", Value::Float(2.0)),
        ("precond_rank", Value::Int(2)),
        ("mlp_precond_rank", Value::Int(3)),
        ("preconditioner", Value::Str(preconditioner.into())),
    ] {
        cfg.set(k, v);
    }
    let map = VarMap::new();
    let vb = VarBuilder::from_varmap(&map, DType::F64, &Device::Cpu);
    let layer = Cem::new(&CemConfig::from_config(&cfg).unwrap(), vb).unwrap();
    // Off the initial values (gains not 1, zero-initialised matrices not 0), as verify does.
    for var in map.all_vars() {
        let noise = Tensor::randn(0f64, 0.3, var.shape(), &Device::Cpu).unwrap();
        var.set(&(var.as_tensor() + noise).unwrap()).unwrap();
    }
    layer
}

#[test]
fn small_steps_lower_both_energies_and_reversed_steps_raise_them() {
    for preconditioner in ["none", "diagonal", "diagonal_low_rank"] {
        let layer = layer(preconditioner);
        let x = Tensor::randn(0f64, 1.0, (2, 5, 16), &Device::Cpu).unwrap();
        let down = layer.descent_checks(&x, 1e-3).unwrap();
        assert_eq!(down.len(), 2, "{preconditioner}: one check per sub-layer");
        for check in &down {
            assert!(check.after < check.before, "{preconditioner}: {} rose: {} -> {}", check.name, check.before, check.after);
        }
        for check in layer.descent_checks(&x, -1e-3).unwrap() {
            assert!(check.after > check.before, "{preconditioner}: a reversed step must raise {}", check.name);
        }
    }
}
