//! Sigmoid attention (seed 000, Appendix G.1, Table 19 "Sigmoid-Softmax"; Table 4 ablation).
//!
//! Eq. 19 with `f(x) = beta^-1 x / 2` and `K(x, y) = σ(beta x^T y)`:
//!
//! `E^h = 1/2 beta^-1 sum_i sum_j σ(beta z_i^T z_j)`.
//!
//! With `A = beta Z Z^T` symmetric, `dE^h/dZ = [σ(A) ⊙ (1 - σ(A))] Z` (Table 19's last
//! column, which is `+grad E`; the layer subtracts it, notes-hyperset.md §2.1). Minimising
//! the energy lowers every pairwise similarity: tokens repel, as in the bi-softmax case.

use crate::phi::{phi, phi_prime};
use plugin_api::candle::{Result, Tensor};

/// `[σ(A) (1 - σ(A))] v` with `A = beta q k^T`.
pub fn mix(query: &Tensor, key: &Tensor, value: &Tensor, beta: f64) -> Result<Tensor> {
    let scores = (query.matmul(&key.t()?)? * beta)?;
    phi_prime(&scores)?.matmul(value)
}

/// `1/2 beta^-1 sum_h sum_i sum_j σ(beta q_i^T k_j)` per sample.
pub fn energy(query: &Tensor, key: &Tensor, beta: f64) -> Result<Tensor> {
    let scores = (query.matmul(&key.t()?)? * beta)?;
    phi(&scores)?.flatten_from(1)?.sum(1)? * (0.5 / beta)
}
