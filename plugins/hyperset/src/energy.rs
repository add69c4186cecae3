//! The energies Hyper-SET descends, evaluated as the diagnostics of notes-hyperset.md §5:
//! on RMS-normalised projections without learnable gains, one value per sample, for the
//! attention and feedforward variants the layer is configured with.

use crate::attention::AttentionKind;
use crate::block::{linear, split_heads};
use crate::config::RMS_EPS;
use crate::feedforward::FeedforwardKind;
use plugin_api::candle::Tensor;
use plugin_api::ops::rms_norm;
use plugin_api::Result;

/// `Z_h = RMSNorm(W_h^T X)` for every head, `[B, H, N, p]`, so that `||z_i^h|| = sqrt(p)`.
pub fn normalised_heads(x: &Tensor, w: &Tensor, heads: usize) -> Result<Tensor> {
    let head_dim = w.dim(1)? / heads;
    Ok(rms_norm(&split_heads(&linear(x, w)?, heads, head_dim)?, None, RMS_EPS)?)
}

/// The attention energy of `kind` per sample on `Z = RMSNorm(W_h^T X)`; for bi-softmax
/// `E_ATTN = beta^-1 sum_h sum_i log sum_j exp(beta z_i^T z_j)` (Eq. 3-4), `beta = 1 / sqrt(p)`.
pub fn attention(x: &Tensor, w: &Tensor, heads: usize, kind: AttentionKind) -> Result<Tensor> {
    let z = normalised_heads(x, w, heads)?;
    kind.energy(&z, &z)
}

/// The feedforward energy of `kind` per sample on `U = RMSNorm(D^T X)`; for ReLU
/// `E_FF = -1/2 sum_i ||ReLU(RMSNorm(D^T x_i))||^2` (Eq. 5 under its constraint).
pub fn feedforward(x: &Tensor, d_ff: &Tensor, kind: FeedforwardKind) -> Result<Tensor> {
    let u = rms_norm(&linear(x, d_ff)?, None, RMS_EPS)?;
    kind.energy(&u)
}
