//! AdamW with decoupled weight decay, and global gradient-norm clipping.
//!
//! Written here rather than taken from candle-nn because a resumable run must checkpoint the
//! moment estimates, which candle-nn's `AdamW` keeps private.

use super::optim_update::{Descend, Moment};
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
        let AdamWConfig { beta1, beta2, .. } = self.cfg;
        let descend = self.descend(lr);
        for slot in &self.slots {
            let Some(g) = grads.get(slot.var.as_tensor()) else { continue };
            if !slot.var.device().is_cpu() {
                slot.step_composed(g, grad_scale, (beta1, beta2), &descend)?;
                continue;
            }
            // In place, three passes (`optim_update.rs`), the same values as the composition.
            let g = g.contiguous()?;
            slot.m.as_tensor().inplace_op2(&g, &Moment { beta: beta1, grad_scale, square: false })?;
            slot.v.as_tensor().inplace_op2(&g, &Moment { beta: beta2, grad_scale, square: true })?;
            slot.var.as_tensor().inplace_op3(slot.m.as_tensor(), slot.v.as_tensor(), &descend)?;
        }
        Ok(())
    }

    /// The parameter update of step `t` at learning rate `lr`, with its bias corrections.
    fn descend(&self, lr: f64) -> Descend {
        let AdamWConfig { beta1, beta2, eps, weight_decay } = self.cfg;
        let (correction1, correction2) = (1.0 - beta1.powi(self.t as i32), 1.0 - beta2.powi(self.t as i32));
        Descend { lr, weight_decay, correction1, correction2, eps }
    }
}

impl Slot {
    /// The update as candle's ops (on devices without the in-place passes).
    fn step_composed(&self, g: &Tensor, grad_scale: f64, (beta1, beta2): (f64, f64), d: &Descend) -> Result<()> {
        let g = (g * grad_scale)?;
        let m = ((self.m.as_tensor() * beta1)? + (&g * (1.0 - beta1))?)?;
        let v = ((self.v.as_tensor() * beta2)? + (g.sqr()? * (1.0 - beta2))?)?;
        let m_hat = (&m / d.correction1)?;
        let v_hat = (&v / d.correction2)?;
        let decayed = (self.var.as_tensor() * (1.0 - d.lr * d.weight_decay))?;
        let update = (m_hat / (v_hat.sqrt()? + d.eps)?)?;
        self.var.set(&(decayed - (update * d.lr)?)?)?;
        self.m.set(&m)?;
        self.v.set(&v)
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

    /// The in-place update gives the composition's values to the last bit, over several
    /// steps with clipping, in f32 and f64; a parameter without a gradient stays as it is.
    #[test]
    fn the_in_place_update_equals_the_composition() -> Result<()> {
        use candle_core::DType;
        for dtype in [DType::F32, DType::F64] {
            let cfg = AdamWConfig { beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.05 };
            let start = |seed: u64| -> Result<Var> {
                let values: Vec<f64> =
                    (0..37).map(|i| ((i * 7919 + seed as usize * 104_729) % 997) as f64 / 498.5 - 1.0).collect();
                Var::from_tensor(&Tensor::from_vec(values, 37, &Device::Cpu)?.to_dtype(dtype)?)
            };
            let (fused, composed) = ((start(1)?, start(2)?), (start(1)?, start(2)?));
            let mut opt_fused = AdamW::new(vec![("a".into(), fused.0.clone()), ("b".into(), fused.1.clone())], cfg)?;
            let mut opt_composed =
                AdamW::new(vec![("a".into(), composed.0.clone()), ("b".into(), composed.1.clone())], cfg)?;
            for step in 1..=5 {
                // Only `a` takes part in the loss: `b` gets no gradient.
                let loss = |w: &Var| -> Result<GradStore> {
                    (w.as_tensor().sqr()? * w.as_tensor().sin()?)?.sum_all()?.backward()
                };
                let (lr, scale) = (0.01 * step as f64, 1.0 / step as f64);
                opt_fused.step(&loss(&fused.0)?, lr, scale)?;
                let grads = loss(&composed.0)?;
                opt_composed.t += 1;
                let descend = opt_composed.descend(lr);
                let slot = &opt_composed.slots[0];
                slot.step_composed(grads.get(slot.var.as_tensor()).unwrap(), scale, (cfg.beta1, cfg.beta2), &descend)?;
                for (f, c) in [(&fused.0, &composed.0), (&fused.1, &composed.1)] {
                    let bits = |v: &Var| -> Result<Vec<u64>> {
                        Ok(v.as_tensor().to_dtype(DType::F64)?.to_vec1::<f64>()?.iter().map(|x| x.to_bits()).collect())
                    };
                    assert_eq!(bits(f)?, bits(c)?, "{dtype:?} step {step}");
                }
                for (f, c) in opt_fused.slots.iter().zip(&opt_composed.slots) {
                    let values = |v: &Var| v.as_tensor().to_dtype(DType::F64)?.to_vec1::<f64>();
                    assert_eq!(values(&f.m)?, values(&c.m)?, "{dtype:?} step {step}: m of {}", f.name);
                    assert_eq!(values(&f.v)?, values(&c.v)?, "{dtype:?} step {step}: v of {}", f.name);
                }
            }
            assert_eq!(
                fused.1.as_tensor().to_dtype(DType::F64)?.to_vec1::<f64>()?,
                start(2)?.as_tensor().to_dtype(DType::F64)?.to_vec1::<f64>()?
            );
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
