//! One CRATE iteration (Yu et al. 2023, "White-Box Transformers via Sparse Rate Reduction"):
//! a compression step by multi-head subspace self-attention (MSSA), then one step of
//! non-negative ISTA that sparsifies the tokens against a dictionary `D`.
//!
//! Row-major throughout: tokens are the rows of `X` (`[B, N, d]`), so the paper's
//! `U_k^T Z` (columns are tokens) is `X U_k` here.

use crate::model::{CrateConfig, Variant};
use kernels::{rms_norm, softmax, softmax_attention, LayerNorm};
use plugin_api::candle::{Tensor, D};
use plugin_api::candle_nn::{Init, VarBuilder};
use plugin_api::ops::causal_mask;
use plugin_api::Result;

/// Epsilon of the RMS normalisation applied to the head projections for the diagnostics.
const RMS_EPS: f64 = 1e-6;

/// How the MSSA output returns to the token space.
enum OutputProjection {
    /// CRATE as implemented by Yu et al. (and the seed authors' `CRATEAttention`): a learned
    /// `W_o` with bias, in place of the derivation's `[U_1 ... U_K]`.
    Learned { weight: Tensor, bias: Tensor },
    /// CRATE-T (Hu et al. 2024c, the seed authors' `CRATETAttention`): no output matrix; the
    /// heads are re-projected through the shared matrix itself, `merged @ U` in row-major
    /// (`U^T` in the paper's column notation, hence the name).
    SharedTransposed,
}

/// The parameters of one CRATE layer.
///
/// `U` (`[d, d]`, head `h` = columns `h*p..(h+1)*p`) is at once the query, key and value
/// projection of MSSA (the subspace bases `U_[K]`); `D` (`[d, d]`) is the ISTA dictionary.
/// Each step reads LayerNorm-ed tokens, as in the seed authors' `PreNorm` blocks.
pub struct CrateBlock {
    attention_norm: LayerNorm,
    subspaces: Tensor,
    output: OutputProjection,
    ista_norm: LayerNorm,
    dictionary: Tensor,
    heads: usize,
    head_dim: usize,
    eta: f64,
    lambda: f64,
}

impl CrateBlock {
    /// Creates the parameters under `vb` (`attn_norm`, `u`, `w_o`/`b_o` for CRATE,
    /// `ista_norm`, `dictionary`).
    pub fn new(cfg: &CrateConfig, vb: VarBuilder) -> Result<Self> {
        let d = cfg.d;
        let normal = Init::Randn { mean: 0.0, stdev: cfg.init_std };
        let output = match cfg.variant {
            Variant::Crate => OutputProjection::Learned {
                weight: vb.get_with_hints((d, d), "w_o", normal)?,
                bias: vb.get_with_hints(d, "b_o", Init::Const(0.0))?,
            },
            Variant::CrateT => OutputProjection::SharedTransposed,
        };
        // The dictionary keeps the authors' Kaiming-uniform init (bound sqrt(6 / d)): with a
        // tiny dictionary the ISTA step would reduce to a plain threshold.
        let bound = (6.0 / d as f64).sqrt();
        Ok(CrateBlock {
            attention_norm: LayerNorm::new(d, vb.pp("attn_norm"))?,
            subspaces: vb.get_with_hints((d, d), "u", normal)?,
            output,
            ista_norm: LayerNorm::new(d, vb.pp("ista_norm"))?,
            dictionary: vb.get_with_hints((d, d), "dictionary", Init::Uniform { lo: -bound, up: bound })?,
            heads: cfg.heads,
            head_dim: cfg.d / cfg.heads,
            eta: cfg.eta,
            lambda: cfg.lambda,
        })
    }

    /// The subspace bases `U` (`[d, d]`).
    pub fn subspaces(&self) -> &Tensor {
        &self.subspaces
    }

    /// `(heads, head_dim)`.
    pub fn heads(&self) -> (usize, usize) {
        (self.heads, self.head_dim)
    }

    /// The sparsity weight `lambda` of the LASSO objective.
    pub fn lambda(&self) -> f64 {
        self.lambda
    }

    /// The LayerNorm applied before the ISTA step.
    pub fn ista_norm(&self) -> &LayerNorm {
        &self.ista_norm
    }

    /// The ISTA dictionary `D` (`[d, d]`, paper's column notation).
    pub fn dictionary(&self) -> &Tensor {
        &self.dictionary
    }

    /// One iteration: `X_half = X + MSSA(LN(X))`, then `X_next = ISTA(LN(X_half))`.
    pub fn iterate(&self, x: &Tensor, causal: bool) -> Result<Tensor> {
        let x_half = (x + self.mssa(&self.attention_norm.forward(x)?, causal)?)?;
        self.ista(&self.ista_norm.forward(&x_half)?)
    }

    /// Per-head projections `X U_k`, `[B, H, N, p]`.
    pub fn project(&self, x: &Tensor) -> Result<Tensor> {
        Ok(split_heads(&kernels::linear(x, &self.subspaces, None)?, self.heads, self.head_dim)?)
    }

    /// Multi-head subspace self-attention of the normalised tokens `h`:
    /// `SSA(Z | U_k) = softmax(p^-1/2 (U_k^T Z)^T (U_k^T Z)) (U_k^T Z)` per head (query, key and
    /// value are all `U_k^T Z`), the heads concatenated and returned through the output
    /// projection of the variant. With `causal`, token `i` attends to tokens `<= i` only.
    pub fn mssa(&self, h: &Tensor, causal: bool) -> Result<Tensor> {
        // Query, key and value are all `X U` (merged `[B, N, H p]`): one fused attention op.
        let w = kernels::linear(h, &self.subspaces, None)?;
        let scale = 1.0 / (self.head_dim as f64).sqrt();
        let merged = softmax_attention(&w, &w, &w, self.heads, scale, causal)?;
        Ok(match &self.output {
            OutputProjection::Learned { weight, bias } => kernels::linear(&merged, weight, Some(bias))?,
            OutputProjection::SharedTransposed => kernels::linear(&merged, &self.subspaces, None)?,
        })
    }

    /// `D^T (Z - D Z) - lambda`: minus the gradient, at `Z' = Z`, of the non-negative LASSO
    /// objective `1/2 ||Z - D Z'||^2 + lambda sum(Z')` (on `Z' >= 0` the sum is `||Z'||_1`).
    /// Row-major: `(Z - Z D^T) D - lambda`.
    pub fn ista_direction(&self, z: &Tensor) -> Result<Tensor> {
        let residual = (z - kernels::linear_transposed(z, &self.dictionary, None)?)?;
        Ok((kernels::linear(&residual, &self.dictionary, None)? - self.lambda)?)
    }

    /// One step of non-negative ISTA from `Z` towards the sparse code of `Z` itself:
    /// `ReLU(Z + eta D^T (Z - D Z) - eta lambda)`. There is no residual connection: the step
    /// already starts from `Z`.
    pub fn ista(&self, z: &Tensor) -> Result<Tensor> {
        Ok(kernels::relu(&(z + (self.ista_direction(z)? * self.eta)?)?)?)
    }

    /// The per-head projections of the normalised tokens MSSA reads, RMS-normalised per head,
    /// for effective rank and angle.
    pub fn normalised_projections(&self, x: &Tensor) -> Result<Tensor> {
        Ok(rms_norm(&self.project(&self.attention_norm.forward(x)?)?, None, RMS_EPS)?)
    }
}

/// `SSA(Z | U_k) = softmax(p^-1/2 W_k W_k^T) W_k` for every head of the projections
/// `W = [Z U_1, ..., Z U_K]` (`[B, H, N, p]`, row-major, so the softmax runs over keys on the
/// last axis), optionally causal.
pub(crate) fn subspace_self_attention(w: &Tensor, causal: bool) -> Result<Tensor> {
    let (_, _, n, p) = w.dims4()?;
    let mut scores = (w.matmul(&w.t()?)? / (p as f64).sqrt())?;
    if causal {
        scores = scores.broadcast_add(&causal_mask(n, scores.dtype(), scores.device())?)?;
    }
    Ok(softmax(&scores, D::Minus1)?.matmul(w)?)
}

/// `[B, H, N, p]` to `[B, N, H*p]`.
pub(crate) fn merge_heads(x: &Tensor) -> plugin_api::candle::Result<Tensor> {
    let (b, h, n, p) = x.dims4()?;
    x.transpose(1, 2)?.reshape((b, n, h * p))
}

/// `[B, N, H*p]` to `[B, H, N, p]`.
pub(crate) fn split_heads(x: &Tensor, heads: usize, head_dim: usize) -> plugin_api::candle::Result<Tensor> {
    let (b, n, _) = x.dims3()?;
    x.reshape((b, n, heads, head_dim))?.transpose(1, 2)?.contiguous()
}
