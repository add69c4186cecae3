//! LightMHA2nd1st: a Newton step on the dot-product upper bound `F~`, "parameterisation-
//! then-preconditioning" (seed 001, App. A.3.2).
//!
//! `F~ = -(1/H) sum_h T log sum_i exp(z^T W_{1,h}^T W_{2,h} h_i / T)`. Replacing `W_1^T W_2`
//! by `W_Q^T W_K` in the scores and by `W_V` elsewhere: `grad F~_h = -v^_h` and
//! `grad^2 F~_h = -(1/T) sum_i p_{i,h} (v_{i,h} - v^_h)(v_{i,h} - v^_h)^T`, with
//! `v_{i,h} = W_{V,h} h_i`, `v^_h = sum_i p_{i,h} v_{i,h}`, `p = softmax(q . k / T)`. A
//! regularised Newton step `[eps I + Cov_h]^-1 v^_h`, expanded to first order, gives
//!
//! `LightMHA2nd1st(z) = z + sum_h W_{O,h} (v^_h + tau_h b_h)`,
//! `b_h = sum_i p_{i,h} v_{i,h} (v_{i,h}^T v^_h) - v^_h (v^_h^T v^_h) = Cov_h v^_h`,
//!
//! `tau_h` learnable per head, initialised to 0.01 (it stands for `-1/eps`; `-eta eps/(HT)` is
//! absorbed in `W_O`). The temperature is not given for this variant (notes §3.4,
//! UNSPECIFIED): `T = sqrt(d_h)` as for MHA. With `tau = 0` this is softmax attention.

use super::softmax::{attention_weights, dot_free_energy};
use super::Projections;
use crate::config::IntrinsicConfig;
use crate::dropout::Dropout;
use crate::ops::per_head;
use plugin_api::candle::{Result, Tensor, D};
use plugin_api::candle_nn::{Init, VarBuilder};

/// LightMHA2nd1st (App. A.3.2).
pub struct LightNewtonAttention {
    /// `W_Q, W_K, W_V, W_O`.
    pub proj: Projections,
    /// Head-wise `tau_h`, `[H]`.
    tau: Tensor,
}

impl LightNewtonAttention {
    /// LightMHA2nd1st over `proj`, with `vb.tau`.
    pub fn new(proj: Projections, cfg: &IntrinsicConfig, vb: &VarBuilder) -> Result<Self> {
        let tau = vb.get_with_hints(cfg.heads, "tau", Init::Const(cfg.light_tau))?;
        Ok(LightNewtonAttention { proj, tau })
    }

    /// `T = sqrt(d_h)`.
    pub fn temperature(&self) -> Result<f64> {
        Ok((self.proj.head_dim()? as f64).sqrt())
    }

    /// `f(z) = sum_h W_{O,h} (v^_h + tau_h b_h)`, the `p` of both terms dropped by `dropout`.
    pub fn forward(&self, queries: &Tensor, context: &Tensor, causal: bool, dropout: Dropout) -> Result<Tensor> {
        let q = self.proj.queries(queries)?;
        let k = self.proj.keys(context)?;
        let v = self.proj.values(context)?;
        let p = dropout.apply(attention_weights(&q, &k, self.temperature()?, causal)?)?;
        let mean_value = p.matmul(&v)?;
        let b = covariance_product(&p, &v, &mean_value)?;
        self.proj.output(&(&mean_value + b.broadcast_mul(&per_head(&self.tau)?)?)?)
    }

    /// `F~ = -(1/H) sum_h sum_t T log sum_i exp(q_{t,h} . k_{i,h} / T)` per sample, `[B]`.
    pub fn energy(&self, queries: &Tensor, context: &Tensor, causal: bool) -> Result<Tensor> {
        let q = self.proj.queries(queries)?;
        let k = self.proj.keys(context)?;
        dot_free_energy(&q, &k, self.temperature()?, causal)?.mean(1)
    }

    /// The attention without its second-order term (`tau = 0`) and with the matching
    /// `W_{O,h} W_{V,h} = W_{Q,h}^T W_{K,h} / H` of Eq. 6.
    pub fn tied_first_order(&self) -> Result<LightNewtonAttention> {
        Ok(LightNewtonAttention { proj: self.proj.tied()?, tau: self.tau.zeros_like()? })
    }
}

/// `b = sum_i p_i v_i (v_i . v^) - v^ (v^ . v^) = (sum_i p_i (v_i - v^)(v_i - v^)^T) v^` for
/// weights `[B, H, N, N]`, values `[B, H, N, d_h]` and their means `v^ = p v`. Inner products
/// first (App. A.3.2: "prioritize the computation of vector-vector inner products").
pub fn covariance_product(p: &Tensor, v: &Tensor, mean_value: &Tensor) -> Result<Tensor> {
    let value_dot_mean = mean_value.matmul(&v.t()?)?; // [t, i] = v_i . v^_t
    let spread = (p * value_dot_mean)?.matmul(v)?;
    let mean_sq = mean_value.sqr()?.sum_keepdim(D::Minus1)?;
    spread - mean_value.broadcast_mul(&mean_sq)?
}
