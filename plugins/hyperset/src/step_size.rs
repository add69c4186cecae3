//! The step-size network of Eq. 12: per-token, channel-wise `alpha_t`, `gamma_t` from the
//! iteration index and the layer input (ICLR Table 6; notes-hyperset.md §1.7 and §9):
//! `e = Linear(GELU(Linear(sinusoid(t))))`, `cond = e + X`, `[alpha, gamma] = Linear(GELU(cond))`.

use crate::model::HyperSetConfig;
use plugin_api::candle::{Module, Tensor, D};
use plugin_api::candle_nn::{Init, Linear, VarBuilder};
use plugin_api::ops::sinusoidal_embedding;
use plugin_api::Result;

pub struct StepSizeNet {
    time_in: Linear,
    time_out: Linear,
    step_out: Linear,
    time_dim: usize,
}

impl StepSizeNet {
    /// The output Linear is zero-initialised (ReZero: every iteration starts as the identity).
    /// With `zero_init_all` the two time Linears are zero too, as in the authors' code; their
    /// weights then never receive a gradient, which the plugin's tests demonstrate.
    pub fn new(cfg: &HyperSetConfig, vb: VarBuilder) -> Result<Self> {
        let hidden = if cfg.zero_init_all { Init::Const(0.0) } else { Init::Randn { mean: 0.0, stdev: cfg.init_std } };
        Ok(StepSizeNet {
            time_in: linear_init(cfg.time_dim, cfg.d, hidden, vb.pp("time_in"))?,
            time_out: linear_init(cfg.d, cfg.d, hidden, vb.pp("time_out"))?,
            step_out: linear_init(cfg.d, 2 * cfg.d, Init::Const(0.0), vb.pp("out"))?,
            time_dim: cfg.time_dim,
        })
    }

    /// `(alpha_t, gamma_t)`, each `[B, N, d]`, for iteration `t` (1-based) given `cond`
    /// (`X0` or `X_t`, `[B, N, d]`).
    pub fn forward(&self, t: usize, cond: &Tensor) -> Result<(Tensor, Tensor)> {
        let sinusoid = sinusoidal_embedding(t as f64, self.time_dim, cond.dtype(), cond.device())?;
        let e = self.time_out.forward(&self.time_in.forward(&sinusoid.unsqueeze(0)?)?.gelu_erf()?)?;
        let c = cond.broadcast_add(&e.squeeze(0)?)?;
        let s = self.step_out.forward(&c.gelu_erf()?)?;
        let d = cond.dim(D::Minus1)?;
        Ok((s.narrow(D::Minus1, 0, d)?, s.narrow(D::Minus1, d, d)?))
    }
}

/// A Linear layer with bias whose weight uses `init` and whose bias starts at zero.
fn linear_init(input: usize, output: usize, init: Init, vb: VarBuilder) -> Result<Linear> {
    let weight = vb.get_with_hints((output, input), "weight", init)?;
    let bias = vb.get_with_hints(output, "bias", Init::Const(0.0))?;
    Ok(Linear::new(weight, Some(bias)))
}
