//! Bi-softmax attention, Hyper-SET's default (seed 000, Eq. 3-4, 7, 9).
//!
//! Energy per head (Eq. 3): `E^h = beta^-1 sum_i log sum_j exp(beta z_i^T z_j)`.
//! Its gradient (Eq. 7) in row-major form is `(P + P^T) Z` with `P = softmax_row(beta Z Z^T)`;
//! because the scores are symmetric, `softmax(A, -2) = P^T` (notes-hyperset.md §1.6).

use plugin_api::candle::{Result, Tensor, D};
use plugin_api::ops::bi_softmax;

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
