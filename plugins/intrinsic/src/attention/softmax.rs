//! Multi-head softmax attention: one gradient step on the average Helmholtz free energy
//! (seed 001, Eq. 5 single-head, Eq. 6 multi-head).
//!
//! With local energies `E_{h,i} = -q_h . k_{i,h}` (`q_h = W_{Q,h} z`, `k_{i,h} = W_{K,h} h_i`)
//! and `F = -(1/H) sum_h T log sum_i exp(-E_{h,i} / T)`, one step `z - eta grad F` is
//!
//! `z + sum_h sum_i softmax_i(q_h . k_{i,h} / T) (eta / H) W_{Q,h}^T k_{i,h}`,
//!
//! which is Eq. 6 once `W_{O,h} W_{V,h} = (eta / H) W_{Q,h}^T W_{K,h}`. The layer frees
//! `W_V`, `W_O`; [`Projections::tied`] restores the matching for the gradient identity.
//! Temperature `T = sqrt(d_h)` (Section 3.1).

use super::Projections;
use crate::dropout::Dropout;
use crate::ops::logsumexp;
use kernels::{softmax, Kernels};
use plugin_api::candle::{Result, Tensor, D};
use plugin_api::ops::causal_mask;

/// Multi-head softmax attention (Eq. 6).
pub struct SoftmaxAttention {
    /// `W_Q, W_K, W_V, W_O`.
    pub proj: Projections,
}

impl SoftmaxAttention {
    /// Softmax attention over `proj`.
    pub fn new(proj: Projections) -> Self {
        SoftmaxAttention { proj }
    }

    /// `T = sqrt(d_h)`.
    pub fn temperature(&self) -> Result<f64> {
        Ok((self.proj.head_dim()? as f64).sqrt())
    }

    /// `f(z) = sum_h W_{O,h} sum_i p_{i,h} v_{i,h}` with `p_{i,h} = softmax_i(q_h . k_{i,h} / T)`,
    /// the `p` dropped by `dropout`.
    pub fn forward(&self, queries: &Tensor, context: &Tensor, causal: bool, dropout: Dropout) -> Result<Tensor> {
        // One fused op on the merged projections (the scores are never stored, the dropout
        // mask is drawn as `Dropout::apply` would draw it on the `[B, H, N, N]` weights); it
        // composes candle's ops itself where it does not apply (other devices).
        let p = &self.proj;
        let scale = 1.0 / self.temperature()?;
        let mixed = if queries.id() == context.id() {
            // Self-attention: one product for the three projections, whose gradient the op
            // returns in that product's layout.
            Kernels::Fused.softmax_attention_packed(
                &p.packed_qkv(queries)?,
                p.heads,
                scale,
                causal,
                dropout.on_weights(),
            )?
        } else {
            let (q, k, v) = (p.q.forward(queries)?, p.k.forward(context)?, p.v.forward(context)?);
            Kernels::Fused.softmax_attention(&q, &k, &v, p.heads, scale, causal, dropout.on_weights())?
        };
        p.o.forward(&mixed)
    }

    /// `F = -(1/H) sum_h sum_t T log sum_i exp(q_{t,h} . k_{i,h} / T)` per sample, `[B]`.
    pub fn energy(&self, queries: &Tensor, context: &Tensor, causal: bool) -> Result<Tensor> {
        let q = self.proj.queries(queries)?;
        let k = self.proj.keys(context)?;
        dot_free_energy(&q, &k, self.temperature()?, causal)?.mean(1)
    }

    /// The same attention with the seed's matching `W_{O,h} W_{V,h} = W_{Q,h}^T W_{K,h} / H`.
    pub fn tied(&self) -> Result<SoftmaxAttention> {
        Ok(SoftmaxAttention { proj: self.proj.tied()? })
    }
}

/// `softmax_i(q_t . k_i / T)` per head, `[B, H, N, N]`; with `causal`, `i <= t` only.
pub fn attention_weights(q: &Tensor, k: &Tensor, temperature: f64, causal: bool) -> Result<Tensor> {
    let mut scores = (q.matmul(&k.t()?)? / temperature)?;
    if causal {
        scores = scores.broadcast_add(&causal_mask(scores.dim(2)?, scores.dtype(), scores.device())?)?;
    }
    softmax(&scores, D::Minus1)
}

/// `F_h = -sum_t T log sum_i exp(q_{t,h} . k_{i,h} / T)` per sample and head, `[B, H]`: the
/// free energy of Eq. 6's recipe (the upper bound `F~` of App. A.3.2).
pub fn dot_free_energy(q: &Tensor, k: &Tensor, temperature: f64, causal: bool) -> Result<Tensor> {
    let mut scores = (q.matmul(&k.t()?)? / temperature)?;
    if causal {
        scores = scores.broadcast_add(&causal_mask(scores.dim(2)?, scores.dtype(), scores.device())?)?;
    }
    logsumexp(&scores)?.sum(D::Minus1)? * -temperature
}
