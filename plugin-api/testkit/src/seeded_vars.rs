//! Initial values that are the same on every run.

use plugin_api::candle::{DType, Device, Result, Shape, Tensor, Var};
use plugin_api::candle_nn::init::NormalOrUniform;
use plugin_api::candle_nn::var_builder::SimpleBackend;
use plugin_api::candle_nn::{Init, VarBuilder};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// A `VarBuilder` backend whose initial values are drawn from a ChaCha8 RNG seeded by a seed
/// and the parameter's name (candle's `VarMap` uses the CPU's unseedable global RNG), so that a
/// learning test gives the same numbers on every run, whatever order the parameters are made in.
#[derive(Clone)]
pub struct SeededVars {
    seed: u64,
    vars: Arc<Mutex<BTreeMap<String, Var>>>,
}

impl SeededVars {
    /// An empty store whose parameters will be drawn with `seed`.
    pub fn new(seed: u64) -> Self {
        SeededVars { seed, vars: Arc::default() }
    }

    /// An f32 CPU `VarBuilder` creating its parameters in this store.
    pub fn var_builder(&self) -> VarBuilder<'static> {
        VarBuilder::from_backend(Box::new(self.clone()), DType::F32, Device::Cpu)
    }

    /// Every parameter created so far, in name order (for the optimiser).
    pub fn all(&self) -> Vec<Var> {
        self.vars.lock().unwrap().values().cloned().collect()
    }
}

/// The initial values of parameter `name` of `shape` under `init`, drawn from a ChaCha8 RNG
/// seeded by `seed` and the name.
pub(crate) fn initial_values(seed: u64, name: &str, shape: &Shape, init: Init) -> Result<Vec<f64>> {
    // FNV-1a of the name: stable across Rust releases, unlike std's hasher.
    let name_hash = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3));
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ name_hash);
    let n = shape.elem_count();
    Ok(match init {
        Init::Const(c) => vec![c; n],
        Init::Randn { mean, stdev } => {
            (0..n).map(|_| mean + stdev * rng.sample::<f64, _>(rand_distr::StandardNormal)).collect()
        }
        Init::Uniform { lo, up } => (0..n).map(|_| rng.random_range(lo..up)).collect(),
        Init::Kaiming { dist, fan, non_linearity } => {
            let std = non_linearity.gain() / (fan.for_shape(shape).max(1) as f64).sqrt();
            match dist {
                NormalOrUniform::Normal => {
                    (0..n).map(|_| std * rng.sample::<f64, _>(rand_distr::StandardNormal)).collect()
                }
                NormalOrUniform::Uniform => {
                    let bound = 3f64.sqrt() * std;
                    (0..n).map(|_| rng.random_range(-bound..bound)).collect()
                }
            }
        }
    })
}

impl SimpleBackend for SeededVars {
    fn get(&self, shape: Shape, name: &str, init: Init, dtype: DType, device: &Device) -> Result<Tensor> {
        let mut vars = self.vars.lock().unwrap();
        if let Some(var) = vars.get(name) {
            return Ok(var.as_tensor().clone());
        }
        let values = initial_values(self.seed, name, &shape, init)?;
        let var = Var::from_tensor(&Tensor::from_vec(values, shape, device)?.to_dtype(dtype)?)?;
        vars.insert(name.to_string(), var.clone());
        Ok(var.as_tensor().clone())
    }

    fn get_unchecked(&self, name: &str, _: DType, _: &Device) -> Result<Tensor> {
        match self.vars.lock().unwrap().get(name) {
            Some(var) => Ok(var.as_tensor().clone()),
            None => plugin_api::candle::bail!("no parameter `{name}`"),
        }
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.vars.lock().unwrap().contains_key(name)
    }
}
