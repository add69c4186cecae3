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

    /// A `VarBuilder` over this set's variables as they are now, detached from autograd.
    ///
    /// A model built from it computes what the trained one does (the tensors share the
    /// variables' storage, so later updates show too) but records no autograd graph: each
    /// op's result is freed once the next op has used it, instead of living until the
    /// output is dropped. Evaluations use it. Asking for a parameter the set does not hold
    /// is an error: such a model would not be the trained one.
    pub fn frozen_var_builder(&self, dtype: DType, device: &Device) -> VarBuilder<'static> {
        VarBuilder::from_backend(Box::new(Frozen(self.clone())), dtype, device.clone())
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

/// The backend of [`Params::frozen_var_builder`].
struct Frozen(Params);

impl Frozen {
    fn existing(&self, name: &str) -> Result<Var> {
        match self.0.lock().get(name) {
            Some(var) => Ok(var.clone()),
            None => candle_core::bail!(
                "parameter `{name}` is not among the trained model's parameters; \
                 the plugin must create the same parameters every time it builds the model"
            ),
        }
    }
}

impl SimpleBackend for Frozen {
    fn get(&self, shape: Shape, name: &str, _: Init, _: DType, _: &Device) -> Result<Tensor> {
        let var = self.existing(name)?;
        if var.shape() != &shape {
            candle_core::bail!("parameter `{name}` requested with shape {shape:?} but exists with {:?}", var.shape());
        }
        Ok(var.as_tensor().detach())
    }

    fn get_unchecked(&self, name: &str, _dtype: DType, _device: &Device) -> Result<Tensor> {
        Ok(self.existing(name)?.as_tensor().detach())
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.0.contains_tensor(name)
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
    fn the_frozen_builder_shares_values_and_records_no_graph() {
        let p = Params::new(3);
        let trained = p.var_builder(DType::F32, &Device::Cpu).get_with_hints((2, 2), "w", Init::Const(1.0)).unwrap();
        let frozen = p.frozen_var_builder(DType::F32, &Device::Cpu);
        let w = frozen.get_with_hints((2, 2), "w", Init::Const(9.0)).unwrap();
        assert!(!w.is_variable() && !w.track_op(), "a frozen parameter must record no graph");
        assert_eq!(w.to_vec2::<f32>().unwrap(), trained.to_vec2::<f32>().unwrap());
        assert!(!(&w * 2.0).unwrap().track_op());
        // Updates of the variable show through the frozen tensor (shared storage).
        let (_, var) = &p.vars()[0];
        var.set(&Tensor::full(5f32, (2, 2), &Device::Cpu).unwrap()).unwrap();
        assert_eq!(w.to_vec2::<f32>().unwrap(), [[5.0, 5.0], [5.0, 5.0]]);
        // A parameter the trained model lacks, or of another shape, is an error, never a new one.
        let missing = frozen.get_with_hints(3, "other", Init::Const(0.0)).unwrap_err().to_string();
        assert!(missing.contains("`other` is not among the trained model's parameters"), "{missing}");
        assert!(frozen.get_with_hints((3, 2), "w", Init::Const(0.0)).is_err());
        assert_eq!(p.count(), 4);
    }

    #[test]
    fn shape_mismatch_is_an_error() {
        let p = Params::new(0);
        let vb = p.var_builder(DType::F32, &Device::Cpu);
        vb.get_with_hints((2, 2), "w", Init::Const(0.0)).unwrap();
        assert!(vb.get_with_hints((3, 2), "w", Init::Const(0.0)).is_err());
    }
}
