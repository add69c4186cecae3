//! Building, seeding and measuring layers: shared by the variant and parameter-count tests.

use crate::model::{HyperSet, HyperSetConfig};
use plugin_api::candle::{DType, Device, Tensor, Var};
use plugin_api::candle_nn::{VarBuilder, VarMap};
use plugin_api::{Config, GradientIdentity, Value};
use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Normal};

/// The defaults with `pairs` set.
pub fn config(pairs: &[(&str, Value)]) -> Config {
    let mut cfg = Config::defaults(&crate::params());
    for (k, v) in pairs {
        cfg.set(k, v.clone());
    }
    cfg
}

/// A small layer: d = 16, 2 heads, time_dim = 8, 4 iterations, then `pairs`.
pub fn small(pairs: &[(&str, Value)]) -> Config {
    let mut all = vec![
        ("d", Value::Int(16)),
        ("heads", Value::Int(2)),
        ("time_dim", Value::Int(8)),
        ("iterations", Value::Int(4)),
    ];
    all.extend(pairs.iter().cloned());
    config(&all)
}

/// `Value::Str` shorthand.
pub fn s(v: &str) -> Value {
    Value::Str(v.into())
}

/// Builds the layer on the CPU, its parameters in a fresh `VarMap`.
pub fn build(cfg: &Config, dtype: DType) -> (VarMap, HyperSet) {
    let map = VarMap::new();
    let vb = VarBuilder::from_varmap(&map, dtype, &Device::Cpu);
    let layer = HyperSet::new(&HyperSetConfig::from_config(cfg).unwrap(), vb).unwrap();
    (map, layer)
}

/// Number of scalar parameters.
pub fn param_count(map: &VarMap) -> usize {
    map.all_vars().iter().map(|v| v.elem_count()).sum()
}

/// The variables sorted by name.
pub fn named_vars(map: &VarMap) -> Vec<(String, Var)> {
    let mut vars: Vec<(String, Var)> = map.data().lock().unwrap().iter().map(|(n, v)| (n.clone(), v.clone())).collect();
    vars.sort_by(|a, b| a.0.cmp(&b.0));
    vars
}

/// A reproducible `N(0, std^2)` tensor.
pub fn normal(shape: &[usize], std: f64, rng: &mut StdRng) -> Tensor {
    let dist = Normal::new(0.0, std).unwrap();
    let values: Vec<f64> = (0..shape.iter().product()).map(|_| dist.sample(rng)).collect();
    Tensor::from_vec(values, shape, &Device::Cpu).unwrap()
}

/// A seeded generator.
pub fn rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}

/// Adds `N(0, std^2)` noise to every parameter (as `workbench verify` does), so that gains
/// and step sizes are not trivially 1 or 0.
pub fn perturb(map: &VarMap, std: f64, rng: &mut StdRng) {
    for (_, var) in named_vars(map) {
        let noise = normal(var.dims(), std, rng).to_dtype(var.dtype()).unwrap();
        var.set(&(var.as_tensor() + noise).unwrap()).unwrap();
    }
}

/// `||descent + grad|| / ||grad||` with the gradient of the identity's energy taken by
/// autograd (the measure of `workbench verify`).
pub fn relative_error(identity: &GradientIdentity, descent: &Tensor) -> f64 {
    let grads = identity.energy.backward().unwrap();
    let grad = grads.get(&identity.variable).expect("the energy does not depend on the variable");
    let norm =
        |t: &Tensor| t.sqr().unwrap().sum_all().unwrap().to_dtype(DType::F64).unwrap().to_scalar::<f64>().unwrap();
    (norm(&(descent + grad).unwrap()) / norm(grad)).sqrt()
}

/// Largest absolute element of `a - b`.
pub fn max_abs_diff(a: &Tensor, b: &Tensor) -> f64 {
    (a - b).unwrap().abs().unwrap().max_all().unwrap().to_dtype(DType::F64).unwrap().to_scalar::<f64>().unwrap()
}
