//! One Energy Transformer block (Hoover et al. 2023): an energy `E(g) = E_ATT(g) + E_HN(g)` of
//! the normalised tokens `g = LN(x)`, and its gradient `dE/dg`, derived by hand.
//!
//! Row-major throughout: tokens are the rows of `g` (`[B, N, d]`); `Q_h = g Wq_h^T`,
//! `K_h = g Wk_h^T` (`[B, H, N, p]`), memories are the rows of `Xi` (`[M, d]`).
//!
//! Attention energy (Hoover et al., the multi-head energy attention), per sample:
//!
//! ```text
//! E_ATT = -(1/beta) sum_h sum_C log sum_{B != C} exp(beta K_hB . Q_hC)
//! ```
//!
//! With `A_hCB = beta Q_hC . K_hB` and `P_h = softmax_B(A_h)` (row `C` over keys `B != C`),
//! `dE_ATT/dA_hCB = -(1/beta) P_hCB`, so
//!
//! ```text
//! dE_ATT/dQ_h = -P_h K_h,     dE_ATT/dK_h = -P_h^T Q_h,
//! dE_ATT/dg   = -sum_h (P_h K_h Wq_h + P_h^T Q_h Wk_h).
//! ```
//!
//! Hopfield network energy (Hoover et al., the dense associative memory with ReLU^2
//! activation), `E_HN = -1/2 sum_B sum_mu ReLU(xi_mu . g_B)^2`, so
//! `dE_HN/dg = -ReLU(g Xi^T) Xi`.

use crate::model::EtConfig;
use kernels::{layer_norm, rms_norm};
use plugin_api::candle::{DType, Device, Tensor, D};
use plugin_api::candle_nn::{Init, VarBuilder};
use plugin_api::{PluginError, Result};
use std::sync::Mutex;

/// LayerNorm epsilon of the seed authors' `EnergyLayerNorm`.
const LAYER_NORM_EPS: f64 = 1e-5;
/// Epsilon of the RMS normalisation applied to the head projections for the diagnostics.
const RMS_EPS: f64 = 1e-6;

/// The Energy Transformer's LayerNorm: one scalar gain `gamma` and a per-channel bias `delta`,
/// `g = gamma (x - mean) / sqrt(var + eps) + delta`. With a scalar gain its Jacobian `dg/dx` is
/// symmetric positive semi-definite (for `gamma >= 0`), which is what makes
/// `x <- x - alpha dE/dg` lower the energy for small `alpha` (Hoover et al.).
pub struct EnergyLayerNorm {
    gamma: Tensor,
    delta: Tensor,
}

impl EnergyLayerNorm {
    /// `gamma = 1`, `delta = 0`, as the authors' code starts.
    pub fn new(width: usize, vb: VarBuilder) -> Result<Self> {
        Ok(EnergyLayerNorm {
            gamma: vb.get_with_hints(1, "gamma", Init::Const(1.0))?,
            delta: vb.get_with_hints(width, "delta", Init::Const(0.0))?,
        })
    }

    /// `g = LN(x)` over the last dimension.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        // The scalar gain seen as one per channel, so that the fused norm applies it (its
        // gradient sums back to the scalar over a [D] vector, not over every entry).
        let gain = self.gamma.broadcast_as(self.delta.dims1()?)?;
        Ok(layer_norm(x, Some(&gain), Some(&self.delta), LAYER_NORM_EPS)?)
    }
}

/// The parameters of one Energy Transformer block: its LayerNorm, the per-head query and key
/// matrices `Wq`, `Wk` (`[H, p, d]`, as in the authors' `ETAttention`) and the memories `Xi`
/// (`[M, d]`, the authors' `Hopfield.proj` without bias). No value or output matrix: the
/// update is the energy gradient.
pub struct EtBlock {
    norm: EnergyLayerNorm,
    w_query: Tensor,
    w_key: Tensor,
    memories: Tensor,
    heads: usize,
    head_dim: usize,
    beta: f64,
    alpha: f64,
    attend_self: bool,
    /// The self-exclusion mask of the last token count, built once for every iteration.
    exclusion: Mutex<Option<Tensor>>,
}

impl EtBlock {
    /// Creates the parameters under `vb` (`norm`, `wq`, `wk`, `xi`).
    pub fn new(cfg: &EtConfig, vb: VarBuilder) -> Result<Self> {
        let qk_init = Init::Randn { mean: 0.0, stdev: cfg.init_std };
        // PyTorch's default Linear init, U(-1/sqrt(d), 1/sqrt(d)), as the authors' memories get.
        let bound = 1.0 / (cfg.d as f64).sqrt();
        Ok(EtBlock {
            norm: EnergyLayerNorm::new(cfg.d, vb.pp("norm"))?,
            w_query: vb.get_with_hints((cfg.heads, cfg.head_dim, cfg.d), "wq", qk_init)?,
            w_key: vb.get_with_hints((cfg.heads, cfg.head_dim, cfg.d), "wk", qk_init)?,
            memories: vb.get_with_hints((cfg.memories, cfg.d), "xi", Init::Uniform { lo: -bound, up: bound })?,
            heads: cfg.heads,
            head_dim: cfg.head_dim,
            beta: cfg.beta,
            alpha: cfg.alpha,
            attend_self: cfg.attend_self,
            exclusion: Mutex::new(None),
        })
    }

    /// The block's LayerNorm.
    pub fn norm(&self) -> &EnergyLayerNorm {
        &self.norm
    }

    /// One iteration: `x - alpha dE/dg` at `g = LN(x)`, taken as `x + alpha (-dE/dg)` so that
    /// no sign flip costs a pass over the tokens. `query_key` is `[W^Q; W^K]` (`query_key_weights`), built once for every iteration of
    /// the pass.
    pub fn iterate(&self, query_key: &Tensor, x: &Tensor) -> Result<Tensor> {
        let g = self.norm.forward(x)?;
        let descent = (self.attention_descent(query_key, &g)? + self.hopfield_descent(&g)?)?;
        Ok((x + descent.affine(self.alpha, 0.0)?)?)
    }

    /// The per-head query and key matrices stacked as `[W^Q; W^K]`, `[2 H p, d]`.
    pub fn query_key_weights(&self) -> Result<Tensor> {
        Ok(Tensor::cat(&[&self.flat(&self.w_query)?, &self.flat(&self.w_key)?], 0)?)
    }

    /// `[H*p, d]` view of a per-head matrix.
    fn flat(&self, w: &Tensor) -> Result<Tensor> {
        Ok(w.reshape((self.heads * self.head_dim, ()))?)
    }

    /// Per-head projections `g W_h^T`, `[B, H, N, p]`.
    fn project(&self, g: &Tensor, w: &Tensor) -> Result<Tensor> {
        let (b, n, _) = g.dims3()?;
        let flat = kernels::linear(g, &self.flat(w)?.t()?, None)?;
        Ok(flat.reshape((b, n, self.heads, self.head_dim))?.transpose(1, 2)?.contiguous()?)
    }

    /// The `[N, N]` mask with `-inf` on the diagonal, kept while `N`, the dtype and the device
    /// stay the same.
    fn exclusion_mask(&self, n: usize, dtype: DType, device: &Device) -> Result<Tensor> {
        let mut kept = self.exclusion.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(mask) = kept.as_ref() {
            if mask.dims() == [n, n] && mask.dtype() == dtype && mask.device().same_device(device) {
                return Ok(mask.clone());
            }
        }
        let mask = plugin_api::ops::self_exclusion_mask(n, dtype, device)?;
        *kept = Some(mask.clone());
        Ok(mask)
    }

    /// An error unless the attention has other tokens to sum over.
    fn check_tokens(&self, n: usize) -> Result<()> {
        if !self.attend_self && n < 2 {
            return Err(PluginError::Other(format!(
                "the Energy Transformer attention sums over the other tokens (B != C) and needs at least 2 tokens, got {n}; use attend_self=true for single tokens"
            )));
        }
        Ok(())
    }

    /// `(Q, K, A)`: queries, keys and the scores `A_hCB = beta Q_hC . K_hB`, with `-inf` on the
    /// diagonal unless tokens attend to themselves.
    fn scores(&self, g: &Tensor) -> Result<(Tensor, Tensor, Tensor)> {
        let n = g.dim(1)?;
        self.check_tokens(n)?;
        let q = self.project(g, &self.w_query)?;
        let k = self.project(g, &self.w_key)?;
        // beta scales the queries, which are smaller than the [B, H, N, N] scores.
        let mut a = (&q * self.beta)?.matmul(&k.t()?)?;
        if !self.attend_self {
            a = a.broadcast_add(&self.exclusion_mask(n, a.dtype(), a.device())?)?;
        }
        Ok((q, k, a))
    }

    /// `E_ATT` per sample (`[B]`).
    pub fn attention_energy(&self, g: &Tensor) -> Result<Tensor> {
        let (_, _, a) = self.scores(g)?;
        let max = a.max_keepdim(D::Minus1)?.detach();
        let log_sum_exp = (a.broadcast_sub(&max)?.exp()?.sum_keepdim(D::Minus1)?.log()? + max)?;
        Ok((log_sum_exp.flatten_from(1)?.sum(1)? * (-1.0 / self.beta))?)
    }

    /// `E_HN` per sample (`[B]`).
    pub fn hopfield_energy(&self, g: &Tensor) -> Result<Tensor> {
        let hidden = kernels::linear(g, &self.memories.t()?, None)?;
        Ok((hidden.relu()?.sqr()?.flatten_from(1)?.sum(1)? * -0.5)?)
    }

    /// `dE_ATT/dg = -sum_h (P_h K_h Wq_h + P_h^T Q_h Wk_h)`, `[B, N, d]`.
    pub fn attention_gradient(&self, g: &Tensor) -> Result<Tensor> {
        Ok(self.attention_descent(&self.query_key_weights()?, g)?.neg()?)
    }

    /// `-dE_ATT/dg = sum_h (P_h K_h Wq_h + P_h^T Q_h Wk_h)`: `[Q | K] = g [W^Q; W^K]^T` as one
    /// product, the fused op's `[P K | P^T Q]` (`-dE/dQ`, `-dE/dK`, per head), and one product
    /// back with `[W^Q; W^K]` (`query_key`), which sums the two.
    fn attention_descent(&self, query_key: &Tensor, g: &Tensor) -> Result<Tensor> {
        self.check_tokens(g.dim(1)?)?;
        let qk = kernels::linear_transposed(g, query_key, None)?;
        let directions = kernels::energy_attention(&qk, self.heads, self.beta, self.attend_self)?;
        Ok(kernels::linear(&directions, query_key, None)?)
    }

    /// `dE_HN/dg = -ReLU(g Xi^T) Xi`, `[B, N, d]`.
    pub fn hopfield_gradient(&self, g: &Tensor) -> Result<Tensor> {
        Ok(self.hopfield_descent(g)?.neg()?)
    }

    /// `-dE_HN/dg = ReLU(g Xi^T) Xi`.
    fn hopfield_descent(&self, g: &Tensor) -> Result<Tensor> {
        let hidden = kernels::linear_transposed_relu(g, &self.memories)?;
        kernels::linear(&hidden, &self.memories, None).map_err(Into::into)
    }

    /// `dE/dg = dE_ATT/dg + dE_HN/dg`.
    pub fn energy_gradient(&self, g: &Tensor) -> Result<Tensor> {
        Ok((self.attention_gradient(g)? + self.hopfield_gradient(g)?)?)
    }

    /// RMS-normalised per-head queries `Q_h` of `g = LN(x)`, `[B, H, N, p]`, for effective
    /// rank and angle.
    pub fn normalised_queries(&self, x: &Tensor) -> Result<Tensor> {
        Ok(rms_norm(&self.project(&self.norm.forward(x)?, &self.w_query)?, None, RMS_EPS)?)
    }
}
