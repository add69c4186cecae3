//! The model's parameters: a candle-nn `VarBuilder` backend with seeded initialisation.
//!
//! candle's own `VarMap` draws initial values from the device's global RNG, which cannot be
//! seeded on CPU, so runs would not be reproducible. Here every parameter is drawn from an
//! RNG seeded by the run seed and the parameter's name: the same seed gives the same model
//! whatever order the plugins create their parameters in.

use candle_core::{DType, Device, Result, Shape, Tensor, Var};
use candle_nn::init::{FanInOut, NormalOrUniform};
use candle_nn::var_builder::SimpleBackend;
use candle_nn::{Init, VarBuilder};
use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Normal, Uniform};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Named trainable variables, created on first request.
#[derive(Clone)]
pub struct Params {
    seed: u64,
    vars: Arc<Mutex<BTreeMap<String, Var>>>,
}

impl Params {
    /// An empty parameter set whose initial values derive from `seed`.
    pub fn new(seed: u64) -> Self {
        Params { seed, vars: Arc::default() }
    }

    /// A `VarBuilder` that creates (or returns) variables of this set.
    pub fn var_builder(&self, dtype: DType, device: &Device) -> VarBuilder<'static> {
        VarBuilder::from_backend(Box::new(self.clone()), dtype, device.clone())
    }

    /// All variables, sorted by name.
    pub fn vars(&self) -> Vec<(String, Var)> {
        self.lock().iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }

    /// Total number of scalar parameters.
    pub fn count(&self) -> usize {
        self.lock().values().map(|v| v.elem_count()).sum()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Var>> {
        // A poisoned lock only means another thread panicked mid-insert; the map is intact.
        self.vars.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn initial_values(&self, shape: &Shape, name: &str, init: Init) -> Vec<f64> {
        let mut rng = StdRng::seed_from_u64(self.seed ^ fnv1a(name));
        let n = shape.elem_count();
        let normal = |mean: f64, std: f64, rng: &mut StdRng| -> Vec<f64> {
            match Normal::new(mean, std.max(0.0)) {
                Ok(d) => (0..n).map(|_| d.sample(rng)).collect(),
                Err(_) => vec![mean; n],
            }
        };
        let uniform = |lo: f64, up: f64, rng: &mut StdRng| -> Vec<f64> {
            match Uniform::new(lo, up) {
                Ok(d) => (0..n).map(|_| d.sample(rng)).collect(),
                Err(_) => vec![lo; n],
            }
        };
        match init {
            Init::Const(c) => vec![c; n],
            Init::Randn { mean, stdev } => normal(mean, stdev, &mut rng),
            Init::Uniform { lo, up } => uniform(lo, up, &mut rng),
            Init::Kaiming { dist, fan, non_linearity } => {
                let fan = match fan {
                    FanInOut::FanIn | FanInOut::FanOut => fan.for_shape(shape).max(1),
                };
                let std = non_linearity.gain() / (fan as f64).sqrt();
                match dist {
                    NormalOrUniform::Normal => normal(0.0, std, &mut rng),
                    NormalOrUniform::Uniform => uniform(-(3f64.sqrt()) * std, 3f64.sqrt() * std, &mut rng),
                }
            }
        }
    }
}

/// FNV-1a, a stable string hash (std's hasher may change between releases).
fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3))
}

impl SimpleBackend for Params {
    fn get(&self, shape: Shape, name: &str, init: Init, dtype: DType, device: &Device) -> Result<Tensor> {
        let mut vars = self.lock();
        if let Some(var) = vars.get(name) {
            if var.shape() != &shape {
                candle_core::bail!(
                    "parameter `{name}` requested with shape {shape:?} but exists with {:?}",
                    var.shape()
                );
            }
            return Ok(var.as_tensor().clone());
        }
        let values = self.initial_values(&shape, name, init);
        let tensor = Tensor::from_vec(values, shape, &Device::Cpu)?.to_dtype(dtype)?.to_device(device)?;
        let var = Var::from_tensor(&tensor)?;
        vars.insert(name.to_string(), var.clone());
        Ok(var.as_tensor().clone())
    }

    fn get_unchecked(&self, name: &str, _dtype: DType, _device: &Device) -> Result<Tensor> {
        match self.lock().get(name) {
            Some(var) => Ok(var.as_tensor().clone()),
            None => candle_core::bail!("parameter `{name}` does not exist"),
        }
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.lock().contains_key(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_values_regardless_of_order() {
        let a = Params::new(7);
        let b = Params::new(7);
        let init = Init::Randn { mean: 0.0, stdev: 1.0 };
        let va = a.var_builder(DType::F32, &Device::Cpu);
        let vb = b.var_builder(DType::F32, &Device::Cpu);
        let x1 = va.get_with_hints((3, 4), "x", init).unwrap();
        let _y1 = va.get_with_hints(5, "y", init).unwrap();
        let _y2 = vb.get_with_hints(5, "y", init).unwrap();
        let x2 = vb.get_with_hints((3, 4), "x", init).unwrap();
        assert_eq!(x1.to_vec2::<f32>().unwrap(), x2.to_vec2::<f32>().unwrap());
        let c = Params::new(8);
        let x3 = c.var_builder(DType::F32, &Device::Cpu).get_with_hints((3, 4), "x", init).unwrap();
        assert_ne!(x1.to_vec2::<f32>().unwrap(), x3.to_vec2::<f32>().unwrap());
        assert_eq!(a.count(), 17);
    }

    #[test]
    fn shape_mismatch_is_an_error() {
        let p = Params::new(0);
        let vb = p.var_builder(DType::F32, &Device::Cpu);
        vb.get_with_hints((2, 2), "w", Init::Const(0.0)).unwrap();
        assert!(vb.get_with_hints((3, 2), "w", Init::Const(0.0)).is_err());
    }
}
