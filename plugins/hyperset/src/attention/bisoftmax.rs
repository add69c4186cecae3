//! Bi-softmax attention, Hyper-SET's default (seed 000, Eq. 3-4, 7, 9).
//!
//! Energy per head (Eq. 3): `E^h = beta^-1 sum_i log sum_j exp(beta z_i^T z_j)`.
//! Its gradient (Eq. 7) in row-major form is `(P + P^T) Z` with `P = softmax_row(beta Z Z^T)`;
//! because the scores are symmetric, `softmax(A, -2) = P^T` (notes-hyperset.md §1.6).
//!
//! With fused kernels and one shared normalisation, [`fused_update`] runs Eq. 9's whole
//! attention direction as one op; the layer uses it in place of [`mix`] when it can.

use super::head_inverse_temperature;
use plugin_api::candle::{Result, Tensor, D};
use plugin_api::ops::bi_softmax;

/// Eq. 9's attention direction `((P + P^T) Z~) W^T` from the tokens `x` `[B, N, d]`, with one
/// shared RMSNorm `gain` `[p]` (or none) on the `heads` projections `Z~ = RMSNorm(W_h^T X)`:
/// the fused CPU op of `plugin-api/kernels` from `X W` to the merged heads (the same values
/// as [`mix`] on the projections within f32 rounding; a test compares).
pub fn fused_update(x: &Tensor, w: &Tensor, gain: Option<&Tensor>, heads: usize, eps: f64) -> Result<Tensor> {
    let beta = head_inverse_temperature(x.dim(2)? / heads);
    let projected = kernels::linear(x, w, None)?;
    let merged = kernels::bi_softmax_attention(&projected, gain, heads, beta, eps)?;
    kernels::linear_transposed(&merged, w, None)
}

/// `(softmax(A, -1) + softmax(A, -2)) v` with `A = beta q k^T`: Eq. 9's bracket per head.
pub fn mix(query: &Tensor, key: &Tensor, value: &Tensor, beta: f64) -> Result<Tensor> {
    let scores = (query.matmul(&key.t()?)? * beta)?;
    bi_softmax(&scores)?.matmul(value)
}

/// `beta^-1 sum_h sum_i logsumexp_j(beta q_i^T k_j)` per sample (Eq. 3-4).
pub fn energy(query: &Tensor, key: &Tensor, beta: f64) -> Result<Tensor> {
    let scores = (query.matmul(&key.t()?)? * beta)?;
    let max = scores.max_keepdim(D::Minus1)?.detach();
    let lse = (scores.broadcast_sub(&max)?.exp()?.sum_keepdim(D::Minus1)?.log()? + max)?;
    lse.flatten_from(1)?.sum(1)? / beta
}
