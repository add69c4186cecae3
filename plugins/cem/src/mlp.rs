//! CEM MLP: recursive preconditioned gradient steps on the element-wise energy
//! (seed 002 Eq. 6-11, 15, 17; Algorithm 1 "Subroutine: MLP").
//!
//! Energy of token `i`'s state given its block input `h_i` (Eq. 7), at `u_i = RMSNorm(x_i)`:
//!
//! `xi(u_i | h_i) = -gamma_i^T phi(V u_i)`, `gamma_i = W RMSNorm(h_i)`, `phi' = SiLU` ([`crate::phi`]).
//!
//! Its gradient is `-V^T (gamma_i o SiLU(V u_i))` (Eq. 8); one step from `x = h` is the gated
//! MLP of Eq. 6 with `W^g = W`, `W^u = V` and the down projection tied to `V^T` (Eq. 11), so
//! the MLP has `2 D D_m` weights instead of `3 D D_m`. Each step (Eq. 15, 17) is
//!
//! `x <- x + eta P_mlp V^T (gamma o SiLU(V RMSNorm(x)))`,
//!
//! with `gamma` computed once from the block input. The in-loop RMSNorm shares the pre-norm's
//! gain (notes-cem.md §3.6), so one step with `P = I` is exactly the tied gated MLP.

use crate::block::{step, RMS_EPS};
use crate::model::CemConfig;
use crate::phi::phi;
use crate::preconditioner::{Preconditioner, PreparedSingle};
use kernels::rms_norm;
use plugin_api::candle::Tensor;
use plugin_api::candle_nn::{Init, VarBuilder};
use plugin_api::Result;

/// The parameters of one CEM MLP sub-layer.
pub struct CemMlp {
    /// RMSNorm gain `[D]`, shared by the pre-norm (`gamma`) and the in-loop norm.
    norm_gain: Tensor,
    /// `W` `[D, D_m]` in row form (`gamma = hn w`): the linear ("gate", Eq. 6) branch.
    w: Tensor,
    /// `V` `[D, D_m]` in row form: the SiLU branch, and transposed the down projection (Eq. 11).
    v: Tensor,
    /// `P_mlp` (Eq. 15).
    preconditioner: Preconditioner,
    steps: usize,
    step_size: f64,
}

impl CemMlp {
    /// Creates `norm`, `w`, `v` and `precond_*` in `vb`.
    pub fn new(cfg: &CemConfig, vb: VarBuilder) -> Result<Self> {
        let init = Init::Randn { mean: 0.0, stdev: cfg.init_std };
        Ok(CemMlp {
            norm_gain: vb.get_with_hints(cfg.d, "norm", Init::Const(1.0))?,
            w: vb.get_with_hints((cfg.d, cfg.mlp_width), "w", init)?,
            v: vb.get_with_hints((cfg.d, cfg.mlp_width), "v", init)?,
            preconditioner: Preconditioner::new(cfg.preconditioner, 1, cfg.d, cfg.mlp_rank, vb)?,
            steps: cfg.mlp_steps,
            step_size: cfg.mlp_step_size,
        })
    }

    /// `P_mlp`.
    pub fn preconditioner(&self) -> &Preconditioner {
        &self.preconditioner
    }

    /// Eq. 17: `T_xi` steps from `x^(0) = h`, returning `x^(T)`.
    pub fn forward(&self, h: &Tensor) -> Result<Tensor> {
        let gamma = self.gamma(h)?;
        let p = self.preconditioner.prepare_single()?;
        let mut x = h.clone();
        for _ in 0..self.steps {
            let u = self.normalise(&x)?;
            x = step(&x, &self.update_with(&p, &gamma, &u)?, self.step_size)?;
        }
        Ok(x)
    }

    /// The energies `xi` (per sample) at the start and after each of the `T_xi` steps from
    /// `x^(0) = h`, and the final state.
    pub fn energy_trajectory(&self, h: &Tensor) -> Result<(Vec<Tensor>, Tensor)> {
        let gamma = self.gamma(h)?;
        let p = self.preconditioner.prepare_single()?;
        let mut x = h.clone();
        let mut energies = Vec::with_capacity(self.steps + 1);
        for s in 0..=self.steps {
            let u = self.normalise(&x)?;
            energies.push(self.energy(&gamma, &u)?);
            if s < self.steps {
                x = step(&x, &self.update_with(&p, &gamma, &u)?, self.step_size)?;
            }
        }
        Ok((energies, x))
    }

    /// `gamma = W RMSNorm(h)` `[B, N, D_m]`, fixed for the whole recursion (Eq. 7).
    pub fn gamma(&self, h: &Tensor) -> Result<Tensor> {
        Ok(kernels::linear(&self.normalise(h)?, &self.w, None)?)
    }

    /// `u = RMSNorm(x)` with the sub-layer's gain.
    pub fn normalise(&self, x: &Tensor) -> Result<Tensor> {
        Ok(rms_norm(x, Some(&self.norm_gain), RMS_EPS)?)
    }

    /// `V^T (gamma o SiLU(V u))` `[B, N, D]`: minus the gradient of `xi` in `u` (Eq. 8).
    pub fn gradient_direction(&self, gamma: &Tensor, u: &Tensor) -> Result<Tensor> {
        let hidden = kernels::linear(u, &self.v, None)?;
        let gated = kernels::gated_activation(&hidden, gamma, kernels::Activation::Silu)?;
        Ok(kernels::linear_transposed(&gated, &self.v, None)?)
    }

    /// The step direction `-Delta x^xi = P_mlp V^T (gamma o SiLU(V u))` (Eq. 15).
    pub fn update(&self, gamma: &Tensor, u: &Tensor) -> Result<Tensor> {
        self.update_with(&self.preconditioner.prepare_single()?, gamma, u)
    }

    /// [`update`](Self::update) with `P_mlp`'s matrices built once for the recursion.
    fn update_with(&self, p: &PreparedSingle, gamma: &Tensor, u: &Tensor) -> Result<Tensor> {
        p.apply(&self.gradient_direction(gamma, u)?)
    }

    /// `xi = -sum_i gamma_i^T phi(V u_i)` per sample, `[B]` (Eq. 7).
    pub fn energy(&self, gamma: &Tensor, u: &Tensor) -> Result<Tensor> {
        let potential = phi(&kernels::linear(u, &self.v, None)?)?;
        Ok((gamma * potential)?.flatten_from(1)?.sum(1)?.neg()?)
    }
}
