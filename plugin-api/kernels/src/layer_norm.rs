//! A LayerNorm layer with learnable gain and bias, as PyTorch's `nn.LayerNorm` (eps 1e-5),
//! over [`crate::layer_norm`]: candle_nn's fused `layer_norm` has no backward pass.

use candle_core::{Result, Tensor};
use plugin_api::candle_nn::{Init, VarBuilder};

/// PyTorch's default epsilon, which the seed authors' models keep.
pub const LAYER_NORM_EPS: f64 = 1e-5;

/// `gain * (x - mean) / sqrt(var + eps) + bias` over the last dimension.
pub struct LayerNorm {
    gain: Tensor,
    bias: Tensor,
}

impl LayerNorm {
    /// Gain 1 and bias 0 over `width` channels (`weight` and `bias` under `vb`), as
    /// `nn.LayerNorm` starts.
    pub fn new(width: usize, vb: VarBuilder) -> Result<Self> {
        Ok(LayerNorm {
            gain: vb.get_with_hints(width, "weight", Init::Const(1.0))?,
            bias: vb.get_with_hints(width, "bias", Init::Const(0.0))?,
        })
    }

    /// Normalises `x` over its last dimension.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        crate::layer_norm(x, Some(&self.gain), Some(&self.bias), LAYER_NORM_EPS)
    }
}
