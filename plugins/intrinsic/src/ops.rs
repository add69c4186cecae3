//! Small differentiable building blocks of the family: affine maps, head splitting, the
//! pre-norms, masks and a masked log-sum-exp. Only candle ops with a backward pass are used
//! (the fused `candle_nn` norms and softmax have none; see DESIGN.md "candle facts").

use crate::config::NormKind;
use kernels::{layer_norm, rms_norm};
use plugin_api::candle::{DType, Device, Result, Tensor, D};
use plugin_api::candle_nn::{Init, VarBuilder};

/// Epsilon of both pre-norms.
pub const NORM_EPS: f64 = 1e-5;

/// A learned affine map `x W + b` with `W` of shape `[in, out]` and an optional bias `[out]`.
#[derive(Clone)]
pub struct Affine {
    /// `[in, out]`.
    pub weight: Tensor,
    /// `[out]`, if the map has one.
    pub bias: Option<Tensor>,
}

impl Affine {
    /// Creates `vb.weight` (`N(0, std^2)`) and, when `bias`, `vb.bias` (zeros).
    pub fn new(vb: &VarBuilder, inputs: usize, outputs: usize, std: f64, bias: bool) -> Result<Self> {
        let weight = vb.get_with_hints((inputs, outputs), "weight", Init::Randn { mean: 0.0, stdev: std })?;
        let bias = if bias { Some(vb.get_with_hints(outputs, "bias", Init::Const(0.0))?) } else { None };
        Ok(Affine { weight, bias })
    }

    /// `x W + b` for `x` of shape `[B, N, in]`, as one fused op.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        kernels::linear(x, &self.weight, self.bias.as_ref())
    }
}

/// `[B, N, H * d_h]` to `[B, H, N, d_h]`.
pub fn split_heads(x: &Tensor, heads: usize) -> Result<Tensor> {
    let (b, n, d) = x.dims3()?;
    x.reshape((b, n, heads, d / heads))?.transpose(1, 2)?.contiguous()
}

/// `[B, H, N, d_h]` to `[B, N, H * d_h]`.
pub fn merge_heads(x: &Tensor) -> Result<Tensor> {
    let (b, h, n, p) = x.dims4()?;
    x.transpose(1, 2)?.reshape((b, n, h * p))
}

/// A head-wise vector `[H]` shaped `[1, H, 1, 1]` to scale `[B, H, N, ...]` tensors.
pub fn per_head(v: &Tensor) -> Result<Tensor> {
    v.reshape((1, v.elem_count(), 1, 1))
}

/// The pre-norm of a sub-layer: LayerNorm `(x - mean) / sqrt(var + eps) * g + b` or RMSNorm
/// `x / sqrt(mean(x^2) + eps) * g`.
pub struct Norm {
    kind: NormKind,
    gain: Tensor,
    bias: Option<Tensor>,
}

impl Norm {
    /// Creates `vb.weight` (ones) and, for a LayerNorm with biases, `vb.bias` (zeros).
    pub fn new(vb: &VarBuilder, kind: NormKind, d: usize, bias: bool) -> Result<Self> {
        let gain = vb.get_with_hints(d, "weight", Init::Const(1.0))?;
        let bias =
            if bias && kind == NormKind::Layer { Some(vb.get_with_hints(d, "bias", Init::Const(0.0))?) } else { None };
        Ok(Norm { kind, gain, bias })
    }

    /// Normalises the last dimension of `x`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self.kind {
            NormKind::Rms => rms_norm(x, Some(&self.gain), NORM_EPS),
            NormKind::Layer => layer_norm(x, Some(&self.gain), self.bias.as_ref(), NORM_EPS),
        }
    }
}

/// `[N, N]` with 1 where key `i <= t` (query `t`) and 0 elsewhere: the attended set
/// `H_{<=t}` of App. A.1 as a multiplicative mask.
pub fn lower_triangle(n: usize, dtype: DType, device: &Device) -> Result<Tensor> {
    Tensor::tril2(n, dtype, device)
}

/// Row-wise `log sum_i exp(s_i)` over the last dimension of `scores`, whose masked entries
/// are `-inf` (every row keeps at least one finite entry).
pub fn logsumexp(scores: &Tensor) -> Result<Tensor> {
    let max = scores.max_keepdim(D::Minus1)?.detach();
    let lse = scores.broadcast_sub(&max)?.exp()?.sum_keepdim(D::Minus1)?.log()?;
    (lse + max)?.squeeze(D::Minus1)
}
