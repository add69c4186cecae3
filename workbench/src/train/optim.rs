//! AdamW with decoupled weight decay, and global gradient-norm clipping.
//!
//! Written here rather than taken from candle-nn because a resumable run must checkpoint the
//! moment estimates, which candle-nn's `AdamW` keeps private.

use candle_core::backprop::GradStore;
use candle_core::{Result, Tensor, Var};

/// AdamW hyperparameters (the learning rate is given per step by the schedule).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamWConfig {
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

/// One parameter and its moment estimates.
pub struct Slot {
    pub name: String,
    pub var: Var,
    pub m: Var,
    pub v: Var,
}

/// AdamW state for a set of named parameters.
pub struct AdamW {
    pub cfg: AdamWConfig,
    pub slots: Vec<Slot>,
    /// Number of updates applied so far (for bias correction).
    pub t: u64,
}

impl AdamW {
    pub fn new(vars: Vec<(String, Var)>, cfg: AdamWConfig) -> Result<Self> {
        let slots = vars
            .into_iter()
            .map(|(name, var)| {
                let m = Var::zeros(var.shape(), var.dtype(), var.device())?;
                let v = Var::zeros(var.shape(), var.dtype(), var.device())?;
                Ok(Slot { name, var, m, v })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(AdamW { cfg, slots, t: 0 })
    }

    /// One update with learning rate `lr`, gradients scaled by `grad_scale` (for clipping).
    /// Parameters without a gradient are left unchanged (no decay either).
    pub fn step(&mut self, grads: &GradStore, lr: f64, grad_scale: f64) -> Result<()> {
        self.t += 1;
        let AdamWConfig { beta1, beta2, eps, weight_decay } = self.cfg;
        let correction1 = 1.0 - beta1.powi(self.t as i32);
        let correction2 = 1.0 - beta2.powi(self.t as i32);
        for slot in &self.slots {
            let Some(g) = grads.get(slot.var.as_tensor()) else { continue };
            let g = (g * grad_scale)?;
            let m = ((slot.m.as_tensor() * beta1)? + (&g * (1.0 - beta1))?)?;
            let v = ((slot.v.as_tensor() * beta2)? + (g.sqr()? * (1.0 - beta2))?)?;
            let m_hat = (&m / correction1)?;
            let v_hat = (&v / correction2)?;
            let decayed = (slot.var.as_tensor() * (1.0 - lr * weight_decay))?;
            let update = (m_hat / (v_hat.sqrt()? + eps)?)?;
            slot.var.set(&(decayed - (update * lr)?)?)?;
            slot.m.set(&m)?;
            slot.v.set(&v)?;
        }
        Ok(())
    }
}

/// The global L2 norm of the gradients of `vars`.
pub fn global_grad_norm(grads: &GradStore, vars: impl IntoIterator<Item = Tensor>) -> Result<f64> {
    let mut total = 0f64;
    for var in vars {
        if let Some(g) = grads.get(&var) {
            total += g.sqr()?.sum_all()?.to_dtype(candle_core::DType::F64)?.to_scalar::<f64>()?;
        }
    }
    Ok(total.sqrt())
}

/// The factor that brings a gradient of norm `norm` down to `max_norm` (1 if already below,
/// or if clipping is off with `max_norm = 0`).
pub fn clip_scale(norm: f64, max_norm: f64) -> f64 {
    if max_norm > 0.0 && norm > max_norm {
        max_norm / (norm + 1e-6)
    } else {
        1.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// One AdamW step checked against the update written out by hand.
    #[test]
    fn matches_hand_computed_update() -> Result<()> {
        let w = Var::new(&[1.0f64, -2.0], &Device::Cpu)?;
        let cfg = AdamWConfig { beta1: 0.9, beta2: 0.99, eps: 1e-8, weight_decay: 0.1 };
        let mut opt = AdamW::new(vec![("w".into(), w.clone())], cfg)?;
        let loss = w.as_tensor().sqr()?.sum_all()?; // grad = 2w
        opt.step(&loss.backward()?, 0.01, 1.0)?;
        let got: Vec<f64> = w.as_tensor().to_vec1()?;
        for (i, w0) in [1.0f64, -2.0].iter().enumerate() {
            let g = 2.0 * w0;
            let m_hat = 0.1 * g / 0.1;
            let v_hat = 0.01 * g * g / 0.01;
            let expected = w0 * (1.0 - 0.01 * 0.1) - 0.01 * m_hat / (v_hat.sqrt() + 1e-8);
            assert!((got[i] - expected).abs() < 1e-12, "{} vs {expected}", got[i]);
        }
        Ok(())
    }

    #[test]
    fn clipping_scale() {
        assert_eq!(clip_scale(0.5, 1.0), 1.0);
        assert!((clip_scale(4.0, 1.0) - 0.25).abs() < 1e-6);
        assert_eq!(clip_scale(4.0, 0.0), 1.0);
    }
}
