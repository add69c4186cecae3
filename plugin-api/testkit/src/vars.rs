//! Parameters: building on a fresh `VarMap`, counting, listing in a fixed order, and moving
//! them off their initial values with noise.

use plugin_api::candle::{self, DType, Device, Shape, Tensor, Var};
use plugin_api::candle_nn::var_builder::SimpleBackend;
use plugin_api::candle_nn::{Init, VarBuilder, VarMap};
use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Normal};
use std::fmt::Debug;

/// Builds something (a layer, one block, a task model) on the CPU with its parameters in a
/// fresh `VarMap`, returned with it so that a test can count, perturb and inspect them.
/// Initial values are seeded (by this test thread's draws and each parameter's name), so a test
/// sees the same parameters on every run. Panics with `make`'s error: a test configuration
/// that does not build is a broken test.
pub fn build<T, E: Debug>(dtype: DType, make: impl FnOnce(VarBuilder<'static>) -> Result<T, E>) -> (VarMap, T) {
    let map = VarMap::new();
    let backend = SeededMap { map: map.clone(), seed: crate::draws::next_seed() };
    let built = make(VarBuilder::from_backend(Box::new(backend), dtype, Device::Cpu)).unwrap();
    (map, built)
}

/// A `VarMap` whose new parameters take seeded initial values.
struct SeededMap {
    map: VarMap,
    seed: u64,
}

impl SimpleBackend for SeededMap {
    fn get(&self, shape: Shape, name: &str, init: Init, dtype: DType, device: &Device) -> candle::Result<Tensor> {
        let mut data = self.map.data().lock().unwrap();
        if let Some(var) = data.get(name) {
            if var.shape() != &shape {
                candle::bail!("parameter `{name}` requested with shape {shape:?} but exists with {:?}", var.shape());
            }
            return Ok(var.as_tensor().clone());
        }
        let values = crate::seeded_vars::initial_values(self.seed, name, &shape, init)?;
        let var = Var::from_tensor(&Tensor::from_vec(values, shape, device)?.to_dtype(dtype)?)?;
        data.insert(name.to_string(), var.clone());
        Ok(var.as_tensor().clone())
    }

    fn get_unchecked(&self, name: &str, _: DType, _: &Device) -> candle::Result<Tensor> {
        match self.map.data().lock().unwrap().get(name) {
            Some(var) => Ok(var.as_tensor().clone()),
            None => candle::bail!("no parameter `{name}`"),
        }
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.map.data().lock().unwrap().contains_key(name)
    }
}

/// Number of scalar parameters in `map`: the figure the papers' parameter counts give.
pub fn param_count(map: &VarMap) -> usize {
    map.all_vars().iter().map(|v| v.elem_count()).sum()
}

/// The parameters of `map` sorted by name. A `VarMap` iterates in hash order; seeded draws over
/// its parameters must visit them in a fixed order to give the same values on every run.
pub fn named_vars(map: &VarMap) -> Vec<(String, Var)> {
    let mut vars: Vec<(String, Var)> = map.data().lock().unwrap().iter().map(|(n, v)| (n.clone(), v.clone())).collect();
    vars.sort_by(|a, b| a.0.cmp(&b.0));
    vars
}

/// A seeded generator for reproducible draws (candle's own `randn` on the CPU cannot be seeded).
pub fn rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}

/// A reproducible `N(0, std^2)` tensor of `shape` in f64 (convert it with `to_dtype`).
pub fn normal(shape: &[usize], std: f64, rng: &mut StdRng) -> Tensor {
    let dist = Normal::new(0.0, std).unwrap();
    let values: Vec<f64> = (0..shape.iter().product()).map(|_| dist.sample(rng)).collect();
    Tensor::from_vec(values, shape, &Device::Cpu).unwrap()
}

/// Adds `N(0, std^2)` noise from this test thread's seeded draws to every parameter (in name
/// order), as `workbench verify` does: at initialisation gains are 1 and step sizes or low-rank
/// factors 0, where a wrong gradient identity can hold by accident.
pub fn perturb(map: &VarMap, std: f64) {
    for (_, var) in named_vars(map) {
        let noise = crate::randn(0f64, std, var.shape(), var.device()).unwrap().to_dtype(var.dtype()).unwrap();
        var.set(&(var.as_tensor() + noise).unwrap()).unwrap();
    }
}

/// `perturb` with seeded noise, drawn parameter by parameter in name order, for tests whose
/// figures must not change from run to run.
pub fn perturb_seeded(map: &VarMap, std: f64, rng: &mut StdRng) {
    for (_, var) in named_vars(map) {
        let noise = normal(var.dims(), std, rng).to_dtype(var.dtype()).unwrap();
        var.set(&(var.as_tensor() + noise).unwrap()).unwrap();
    }
}
