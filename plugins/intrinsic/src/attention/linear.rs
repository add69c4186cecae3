//! Unnormalised linear attention: one gradient step on a negative sum of squared
//! inner-product energies (seed 001, Eq. 3, Case i).
//!
//! `LA(z) = z + sum_i (z^T W_Q^T W_K h_i) W_V h_i` (Eq. 3). Recipe: `E_i = |z^T W h_i|`,
//! `F = -(T/2) sum_i E_i^2`, one step `z - eta grad F = z + sum_i (z^T W h_i) eta T W h_i`, so
//! Eq. 3 holds with `W_Q^T W_K = W` and `W_V = eta T W`. There is no normaliser (the seed
//! omits it for stability, citing Qin et al. 2022).
//!
//! Multi-head form (the seed gives only one head): per head `q_h . k_{i,h}` and the energy
//! averaged over heads, `F = -(1/(2H)) sum_h sum_i (q_h . k_{i,h})^2` (`T = 1`, absorbed in
//! `W_V` as the seed does), so the matching is the one of Eq. 6, [`Projections::tied`].
//! Causal form: `O = ((Q K^T) * M) V` with the 0/1 lower-triangular `M` (notes §2.1).

use super::Projections;
use crate::ops::lower_triangle;
use plugin_api::candle::{Result, Tensor};

/// Unnormalised multi-head linear attention (Eq. 3).
pub struct LinearAttention {
    /// `W_Q, W_K, W_V, W_O`.
    pub proj: Projections,
}

impl LinearAttention {
    /// Linear attention over `proj`.
    pub fn new(proj: Projections) -> Self {
        LinearAttention { proj }
    }

    /// `f(z) = sum_h W_{O,h} sum_i (q_h . k_{i,h}) v_{i,h}`.
    pub fn forward(&self, queries: &Tensor, context: &Tensor, causal: bool) -> Result<Tensor> {
        let scores = masked_scores(&self.proj.queries(queries)?, &self.proj.keys(context)?, causal)?;
        self.proj.output(&scores.matmul(&self.proj.values(context)?)?)
    }

    /// `F = -(1/(2H)) sum_h sum_t sum_i (q_{t,h} . k_{i,h})^2` per sample, `[B]`.
    pub fn energy(&self, queries: &Tensor, context: &Tensor, causal: bool) -> Result<Tensor> {
        let scores = masked_scores(&self.proj.queries(queries)?, &self.proj.keys(context)?, causal)?;
        let heads = scores.dim(1)? as f64;
        scores.sqr()?.flatten_from(1)?.sum(1)? * (-0.5 / heads)
    }

    /// The same attention with `W_{O,h} W_{V,h} = W_{Q,h}^T W_{K,h} / H`.
    pub fn tied(&self) -> Result<LinearAttention> {
        Ok(LinearAttention { proj: self.proj.tied()? })
    }
}

/// `q_t . k_i` per head, zeroed for `i > t` when `causal`, `[B, H, N, N]`.
fn masked_scores(q: &Tensor, k: &Tensor, causal: bool) -> Result<Tensor> {
    let scores = q.matmul(&k.t()?)?;
    if causal {
        scores.broadcast_mul(&lower_triangle(scores.dim(2)?, scores.dtype(), scores.device())?)
    } else {
        Ok(scores)
    }
}
