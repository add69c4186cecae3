//! The attentions of seed 001, one file each, and the projections they share.
//!
//! Every attention here is a *branch* `f(z; H)`: it reads queries from `queries` (`[B, N, d]`)
//! and keys and values from `context` (`[B, N, d]`), and returns the update added to the
//! residual stream. The layer calls it with the same normalised tokens for both (self-
//! attention); the gradient identities call it with the queries as the variable and the
//! context held fixed, the seed's "cross-attention view" (Section 2: the `h_i` are fixed
//! while `z` is updated).
//!
//! Row-vector convention: head `h`'s matrix `W_{Q,h}` (`d_h x d` in the seed) is the
//! transpose of columns `h d_h .. (h + 1) d_h` of the `[d, d]` weight of [`Projections::q`].

pub mod gated_linear;
pub mod light_newton;
pub mod linear;
pub mod momentum;
pub mod nesterov;
pub mod newton;
pub mod softmax;

use crate::config::{AttentionKind, IntrinsicConfig};
use crate::dropout::Dropout;
use crate::ops::{merge_heads, split_heads, Affine};
use gated_linear::GatedLinearAttention;
use light_newton::LightNewtonAttention;
use linear::LinearAttention;
use newton::NewtonAttention;
use plugin_api::candle::{Result as CandleResult, Tensor};
use plugin_api::candle_nn::VarBuilder;
use plugin_api::Result;
use softmax::SoftmaxAttention;

/// The query, key, value and output maps `W_Q, W_K, W_V, W_O` (Eq. 6) of one block.
#[derive(Clone)]
pub struct Projections {
    /// `x W_Q + b_Q`, `[d, d]`.
    pub q: Affine,
    /// `x W_K + b_K`, `[d, d]`; no bias where a softmax of dot products makes it inert.
    pub k: Affine,
    /// `x W_V + b_V`, `[d, d]`.
    pub v: Affine,
    /// `x W_O + b_O`, `[d, d]`.
    pub o: Affine,
    /// Heads `H`.
    pub heads: usize,
}

impl Projections {
    /// Creates `q`, `k`, `v`, `o` under `vb`.
    pub fn new(cfg: &IntrinsicConfig, vb: &VarBuilder) -> CandleResult<Self> {
        let (d, std) = (cfg.d, cfg.init_std);
        let key_bias = cfg.bias && !cfg.attention.key_bias_is_inert();
        Ok(Projections {
            q: Affine::new(&vb.pp("q"), d, d, std, cfg.bias)?,
            k: Affine::new(&vb.pp("k"), d, d, std, key_bias)?,
            v: Affine::new(&vb.pp("v"), d, d, std, cfg.bias)?,
            o: Affine::new(&vb.pp("o"), d, d, std, cfg.bias)?,
            heads: cfg.heads,
        })
    }

    /// Width of one head `d_h`.
    pub fn head_dim(&self) -> CandleResult<usize> {
        Ok(self.q.weight.dim(1)? / self.heads)
    }

    /// Per-head queries `q_{t,h} = W_{Q,h} z_t`, `[B, H, N, d_h]`.
    pub fn queries(&self, x: &Tensor) -> CandleResult<Tensor> {
        split_heads(&self.q.forward(x)?, self.heads)
    }

    /// Per-head keys `k_{i,h} = W_{K,h} h_i`, `[B, H, N, d_h]`.
    pub fn keys(&self, x: &Tensor) -> CandleResult<Tensor> {
        split_heads(&self.k.forward(x)?, self.heads)
    }

    /// `[x W_Q + b_Q | x W_K + b_K | x W_V + b_V]`, `[B, N, 3d]`, as one product (a missing bias
    /// as zeros): the self-attention's three projections of the same tokens.
    pub fn packed_qkv(&self, x: &Tensor) -> CandleResult<Tensor> {
        let maps = [&self.q, &self.k, &self.v];
        let weight = Tensor::cat(&maps.map(|a| &a.weight), 1)?;
        let bias = match maps.iter().any(|a| a.bias.is_some()) {
            true => {
                let zeros = Tensor::zeros(self.q.weight.dim(1)?, x.dtype(), x.device())?;
                Some(Tensor::cat(&maps.map(|a| a.bias.as_ref().unwrap_or(&zeros)), 0)?)
            }
            false => None,
        };
        kernels::linear(x, &weight, bias.as_ref())
    }

    /// Per-head values `v_{i,h} = W_{V,h} h_i`, `[B, H, N, d_h]`.
    pub fn values(&self, x: &Tensor) -> CandleResult<Tensor> {
        split_heads(&self.v.forward(x)?, self.heads)
    }

    /// `sum_h W_{O,h} o_h` for per-head outputs `[B, H, N, d_h]`, `[B, N, d]`.
    pub fn output(&self, heads: &Tensor) -> CandleResult<Tensor> {
        self.o.forward(&merge_heads(heads)?)
    }

    /// The seed's matching of parameters to one gradient step (Section 3, after Eq. 6):
    /// `W_{O,h} W_{V,h} = (eta / H) W_{1,h}^T W_{2,h}` with `W_1 = W_Q`, `W_2 = W_K`,
    /// `eta = 1`, realised as `W_{V,h} = W_{K,h}` (values are the keys, bias included) and
    /// `W_{O,h} = W_{Q,h}^T / H` (no output bias). Detached from the parameters.
    pub fn tied(&self) -> CandleResult<Projections> {
        let detach = |a: &Affine| Affine { weight: a.weight.detach(), bias: a.bias.as_ref().map(|b| b.detach()) };
        let k = detach(&self.k);
        let o_weight = (self.q.weight.detach().t()?.contiguous()? / self.heads as f64)?;
        Ok(Projections {
            q: detach(&self.q),
            v: k.clone(),
            k,
            o: Affine { weight: o_weight, bias: None },
            heads: self.heads,
        })
    }
}

/// The attention of one block.
pub enum Attention {
    /// Softmax (also the branch of MomenMHA and NagMHA).
    Softmax(SoftmaxAttention),
    /// Unnormalised linear attention.
    Linear(LinearAttention),
    /// Gated linear attention.
    GatedLinear(GatedLinearAttention),
    /// MHA2nd1st.
    Newton(NewtonAttention),
    /// LightMHA2nd1st.
    LightNewton(LightNewtonAttention),
}

impl Attention {
    /// Creates the attention `cfg.attention` asks for under `vb`.
    pub fn new(cfg: &IntrinsicConfig, vb: &VarBuilder) -> Result<Self> {
        let proj = Projections::new(cfg, vb)?;
        Ok(match cfg.attention {
            AttentionKind::Softmax | AttentionKind::Momentum | AttentionKind::Nesterov => {
                Attention::Softmax(SoftmaxAttention::new(proj))
            }
            AttentionKind::Linear => Attention::Linear(LinearAttention::new(proj)),
            AttentionKind::GatedLinear => Attention::GatedLinear(GatedLinearAttention::new(proj, cfg, vb)?),
            AttentionKind::Newton => Attention::Newton(NewtonAttention::new(proj, cfg, vb)?),
            AttentionKind::LightNewton => Attention::LightNewton(LightNewtonAttention::new(proj, cfg, vb)?),
        })
    }

    /// The projections of the attention.
    pub fn projections(&self) -> &Projections {
        match self {
            Attention::Softmax(a) => &a.proj,
            Attention::Linear(a) => &a.proj,
            Attention::GatedLinear(a) => &a.proj,
            Attention::Newton(a) => &a.proj,
            Attention::LightNewton(a) => &a.proj,
        }
    }

    /// The branch `f(z; H)` (`[B, N, d]`) for queries from `queries` and keys and values
    /// from `context`; with `causal`, query `t` attends to keys `i <= t` only. `dropout` acts on
    /// the attention probabilities; the linear kinds have none (the configuration refuses a
    /// rate for them).
    pub fn forward(&self, queries: &Tensor, context: &Tensor, causal: bool, dropout: Dropout) -> Result<Tensor> {
        Ok(match self {
            Attention::Softmax(a) => a.forward(queries, context, causal, dropout)?,
            Attention::Linear(a) => a.forward(queries, context, causal)?,
            Attention::GatedLinear(a) => a.forward(queries, context, causal)?,
            Attention::Newton(a) => a.forward(queries, context, causal, dropout)?,
            Attention::LightNewton(a) => a.forward(queries, context, causal, dropout)?,
        })
    }

    /// The global energy `F` whose descent the attention models, summed over the queries of
    /// each sample, `[B]`.
    pub fn energy(&self, queries: &Tensor, context: &Tensor, causal: bool) -> Result<Tensor> {
        Ok(match self {
            Attention::Softmax(a) => a.energy(queries, context, causal)?,
            Attention::Linear(a) => a.energy(queries, context, causal)?,
            Attention::GatedLinear(a) => a.energy(queries, context, causal)?,
            Attention::Newton(a) => a.energy(queries, context, causal)?,
            Attention::LightNewton(a) => a.energy(queries, context, causal)?,
        })
    }
}
