//! One pre-norm MLP block, `x += MLP(RMSNorm(x))`, plain or gated (seed 002 Eq. 6).

use crate::model::MlpConfig;
use plugin_api::candle::Tensor;
use plugin_api::candle_nn::{Init, VarBuilder};
use plugin_api::Result;

const RMS_EPS: f64 = 1e-6;

pub struct MlpBlock {
    norm: Tensor,
    /// `[d, hidden]`: the input of σ.
    w_up: Tensor,
    /// `[d, hidden]`, gated only: the branch that multiplies σ's output.
    w_gate: Option<Tensor>,
    /// `[hidden, d]`.
    w_down: Tensor,
}

impl MlpBlock {
    pub fn new(cfg: &MlpConfig, vb: VarBuilder) -> Result<Self> {
        let init = Init::Randn { mean: 0.0, stdev: cfg.init_std };
        Ok(MlpBlock {
            norm: vb.get_with_hints(cfg.d, "norm", Init::Const(1.0))?,
            w_up: vb.get_with_hints((cfg.d, cfg.hidden), "w_up", init)?,
            w_gate: match cfg.gated {
                true => Some(vb.get_with_hints((cfg.d, cfg.hidden), "w_gate", init)?),
                false => None,
            },
            w_down: vb.get_with_hints((cfg.hidden, cfg.d), "w_down", init)?,
        })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let u = kernels::rms_norm(x, Some(&self.norm), RMS_EPS)?;
        let mut inner = kernels::gelu_erf(&kernels::linear(&u, &self.w_up, None)?)?;
        if let Some(w_gate) = &self.w_gate {
            inner = (kernels::linear(&u, w_gate, None)? * inner)?;
        }
        Ok((x + kernels::linear(&inner, &self.w_down, None)?)?)
    }
}
