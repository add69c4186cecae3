//! The energies Hyper-SET descends, evaluated as the diagnostics of notes-hyperset.md §5:
//! on RMS-normalised projections without learnable gains, one value per sample.

use crate::block::{linear, split_heads, RMS_EPS};
use plugin_api::candle::{Tensor, D};
use plugin_api::ops::rms_norm;
use plugin_api::Result;

/// `Z_h = RMSNorm(W_h^T X)` for every head, `[B, H, N, p]`, so that `||z_i^h|| = sqrt(p)`.
pub fn normalised_heads(x: &Tensor, w: &Tensor, heads: usize) -> Result<Tensor> {
    let head_dim = w.dim(1)? / heads;
    Ok(rms_norm(&split_heads(&linear(x, w)?, heads, head_dim)?, None, RMS_EPS)?)
}

/// `E_ATTN = beta^-1 sum_h sum_i log sum_j exp(beta z_i^T z_j)` per sample (Eq. 3-4),
/// with `beta = 1 / sqrt(p)`.
pub fn attention(x: &Tensor, w: &Tensor, heads: usize) -> Result<Tensor> {
    let z = normalised_heads(x, w, heads)?;
    let beta = 1.0 / (z.dim(3)? as f64).sqrt();
    let scores = (z.matmul(&z.t()?)? * beta)?;
    let max = scores.max_keepdim(D::Minus1)?;
    let lse = (scores.broadcast_sub(&max)?.exp()?.sum_keepdim(D::Minus1)?.log()? + max)?;
    Ok((lse.flatten_from(1)?.sum(1)? / beta)?)
}

/// `E_FF = -1/2 sum_i ||ReLU(RMSNorm(D^T x_i))||^2` per sample (Eq. 5 under its constraint).
pub fn feedforward(x: &Tensor, d_ff: &Tensor) -> Result<Tensor> {
    let u = rms_norm(&linear(x, d_ff)?, None, RMS_EPS)?;
    Ok((u.relu()?.sqr()?.flatten_from(1)?.sum(1)? * -0.5)?)
}
