//! Gated linear attention: linear attention whose energies are weighted by importance
//! factors `gamma_i in [0, 1]` (seed 001, Eq. 4, Case ii).
//!
//! `GLA(z) = z + sum_i gamma_i (z^T W_Q^T W_K h_i) W_V h_i` (Eq. 4), one gradient step on
//! `F = -(T/2) sum_i gamma_i E_i^2` with `E_i = |z^T W h_i|`, the factors held constant in
//! `z` (notes §2.2; otherwise extra gradient terms appear).
//!
//! The seed names the family (RetNet, GLA, GateLoop, xLSTM, Mamba...) but gives no
//! parameterisation of `gamma`. Chosen here: a data-dependent scalar forget gate per head
//! and token, `alpha_{j,h} = sigmoid(h_j w_h + c_h)` (`w` is `[d, H]`, `c` is initialised to
//! `gate_bias`), and `gamma_{t,i,h} = prod_{i < j <= t} alpha_{j,h}`: the decay of a gated
//! recurrence `S_t = alpha_t S_{t-1} + v_t k_t^T` (the Mamba-2 / GLA scalar gate). In log
//! space `gamma_{t,i} = exp(L_t - L_i)` with `L_t = sum_{j <= t} log alpha_j`; without a
//! causal mask the same decay is applied in both directions, `exp(-|L_t - L_i|)`.
//! The gates are computed from the context tokens only, so in the seed's cross-attention
//! view (queries move, context fixed) they are constants, as the derivation needs.

use super::Projections;
use crate::config::IntrinsicConfig;
use crate::ops::{lower_triangle, Affine};
use plugin_api::candle::{Result, Tensor, D};
use plugin_api::candle_nn::{Init, VarBuilder};

/// Gated multi-head linear attention (Eq. 4).
pub struct GatedLinearAttention {
    /// `W_Q, W_K, W_V, W_O`.
    pub proj: Projections,
    /// The forget-gate logits `h_j w + c`, `[d] -> [H]`.
    gate: Affine,
}

impl GatedLinearAttention {
    /// Gated linear attention over `proj`, with its gate under `vb.gate`.
    pub fn new(proj: Projections, cfg: &IntrinsicConfig, vb: &VarBuilder) -> Result<Self> {
        let vb = vb.pp("gate");
        let weight = vb.get_with_hints((cfg.d, cfg.heads), "weight", Init::Randn { mean: 0.0, stdev: cfg.init_std })?;
        let bias = vb.get_with_hints(cfg.heads, "bias", Init::Const(cfg.gate_bias))?;
        Ok(GatedLinearAttention { proj, gate: Affine { weight, bias: Some(bias) } })
    }

    /// `f(z) = sum_h W_{O,h} sum_i gamma_{i,h} (q_h . k_{i,h}) v_{i,h}`.
    pub fn forward(&self, queries: &Tensor, context: &Tensor, causal: bool) -> Result<Tensor> {
        let scores = self.gated_scores(queries, context, causal)?;
        self.proj.output(&scores.matmul(&self.proj.values(context)?)?)
    }

    /// `F = -(1/(2H)) sum_h sum_t sum_i gamma_{t,i,h} (q_{t,h} . k_{i,h})^2` per sample, `[B]`.
    pub fn energy(&self, queries: &Tensor, context: &Tensor, causal: bool) -> Result<Tensor> {
        let q = self.proj.queries(queries)?;
        let k = self.proj.keys(context)?;
        let gamma = self.gamma(context, causal)?;
        let heads = q.dim(1)? as f64;
        (q.matmul(&k.t()?)?.sqr()? * gamma)?.flatten_from(1)?.sum(1)? * (-0.5 / heads)
    }

    /// `gamma_{t,i,h}`, `[B, H, N, N]`, from the context tokens `[B, N, d]`.
    pub fn gamma(&self, context: &Tensor, causal: bool) -> Result<Tensor> {
        let logits = kernels::linear(context, &self.gate.weight, None)?;
        let logits = match &self.gate.bias {
            Some(b) => logits.broadcast_add(b)?,
            None => logits,
        };
        // log alpha = log sigmoid(a) = -softplus(-a), summed over the sequence: L_t.
        let log_alpha = softplus(&logits.neg()?)?.neg()?.transpose(1, 2)?.contiguous()?; // [B, H, N]
        let cumulative = log_alpha.cumsum(D::Minus1)?;
        let gap = cumulative.unsqueeze(3)?.broadcast_sub(&cumulative.unsqueeze(2)?)?; // L_t - L_i
        let gamma = gap.abs()?.neg()?.exp()?;
        if causal {
            gamma.broadcast_mul(&lower_triangle(gamma.dim(2)?, gamma.dtype(), gamma.device())?)
        } else {
            Ok(gamma)
        }
    }

    fn gated_scores(&self, queries: &Tensor, context: &Tensor, causal: bool) -> Result<Tensor> {
        let q = self.proj.queries(queries)?;
        let k = self.proj.keys(context)?;
        q.matmul(&k.t()?)? * self.gamma(context, causal)?
    }

    /// The same attention with `W_{O,h} W_{V,h} = W_{Q,h}^T W_{K,h} / H` and detached gates.
    pub fn tied(&self) -> Result<GatedLinearAttention> {
        let gate = Affine { weight: self.gate.weight.detach(), bias: self.gate.bias.as_ref().map(|b| b.detach()) };
        Ok(GatedLinearAttention { proj: self.proj.tied()?, gate })
    }
}

/// `log(1 + e^x)`, computed as `max(x, 0) + log(1 + e^-|x|)` so it never overflows.
fn softplus(x: &Tensor) -> Result<Tensor> {
    x.relu()? + (x.abs()?.neg()?.exp()? + 1.0)?.log()?
}
