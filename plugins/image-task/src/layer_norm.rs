//! LayerNorm with a backward pass.
//!
//! `y = (x - mean(x)) / sqrt(var(x) + eps) * weight + bias` over the last dimension, with the
//! biased variance and `eps = 1e-5` of PyTorch's `nn.LayerNorm`. candle's fused
//! `candle_nn::ops::layer_norm` (and `candle_nn::LayerNorm` on contiguous input) has no
//! backward pass: gradients would silently stop there (see plugin_api::ops), so the image
//! embedding and head use `kernels::layer_norm`, which has one.

use plugin_api::candle::{Result, Tensor};
use plugin_api::candle_nn::{Init, VarBuilder};

/// PyTorch's default epsilon.
const EPS: f64 = 1e-5;

/// A LayerNorm with a learnable gain (init 1) and bias (init 0).
pub struct LayerNorm {
    weight: Tensor,
    bias: Tensor,
}

impl LayerNorm {
    /// Creates `weight` and `bias` of size `dim` under `vb`.
    pub fn new(vb: VarBuilder, dim: usize) -> Result<Self> {
        Ok(LayerNorm {
            weight: vb.get_with_hints(dim, "weight", Init::Const(1.0))?,
            bias: vb.get_with_hints(dim, "bias", Init::Const(0.0))?,
        })
    }

    /// Normalises `x` over its last dimension.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        kernels::layer_norm(x, Some(&self.weight), Some(&self.bias), EPS)
    }
}
