//! One Hyper-SET iteration: an attention step then a feedforward step (seed 000, Eq. 9, 11).

use crate::model::HyperSetConfig;
use plugin_api::candle::Tensor;
use plugin_api::candle_nn::{Init, VarBuilder};
use plugin_api::ops::{bi_softmax, rms_norm};
use plugin_api::Result;

pub(crate) const RMS_EPS: f64 = 1e-6;

/// The two weight matrices of a Hyper-SET layer and the gains of its RMSNorms.
///
/// `W` (`[d, d]`, head `h` = columns `h*p..(h+1)*p`) is at once the query, key and value
/// projection, and `W^T` the output projection; `D` (`[d, M]`) is the feedforward
/// up-projection, `D^T` its down-projection. No biases (notes-hyperset.md §1.7).
pub struct HyperSetBlock {
    w: Tensor,
    d_ff: Tensor,
    attn_gain: Option<Tensor>,
    ff_gain: Option<Tensor>,
    heads: usize,
    head_dim: usize,
}

impl HyperSetBlock {
    pub fn new(cfg: &HyperSetConfig, vb: VarBuilder) -> Result<Self> {
        let init = Init::Randn { mean: 0.0, stdev: cfg.init_std };
        let w = vb.get_with_hints((cfg.d, cfg.d), "w", init)?;
        let d_ff = vb.get_with_hints((cfg.d, cfg.ff_width), "d_ff", init)?;
        let (attn_gain, ff_gain) = if cfg.norm_gain {
            (
                Some(vb.get_with_hints(cfg.head_dim(), "attn_norm", Init::Const(1.0))?),
                Some(vb.get_with_hints(cfg.ff_width, "ff_norm", Init::Const(1.0))?),
            )
        } else {
            (None, None)
        };
        Ok(HyperSetBlock { w, d_ff, attn_gain, ff_gain, heads: cfg.heads, head_dim: cfg.head_dim() })
    }

    pub fn w(&self) -> &Tensor {
        &self.w
    }

    pub fn d_ff(&self) -> &Tensor {
        &self.d_ff
    }

    pub fn attn_gain(&self) -> Option<&Tensor> {
        self.attn_gain.as_ref()
    }

    pub fn ff_gain(&self) -> Option<&Tensor> {
        self.ff_gain.as_ref()
    }

    pub fn heads(&self) -> (usize, usize) {
        (self.heads, self.head_dim)
    }

    /// `X_{t+1}` from `X_t` with channel-wise step sizes `alpha`, `gamma` (`[B, N, d]`).
    pub fn iterate(&self, x: &Tensor, alpha: &Tensor, gamma: &Tensor) -> Result<Tensor> {
        let x_half = (x - (alpha * self.attention_update(x)?)?)?;
        let x_next = (&x_half + (gamma * self.feedforward_update(&x_half)?)?)?;
        Ok(x_next)
    }

    /// `sum_h W_h Z_h (softmax_col + softmax_row)(beta Z_h^T Z_h)` with `Z_h = RMSNorm(W_h^T X)`:
    /// the direction of Eq. 9, i.e. the gradient of E_ATTN (Eq. 3) with respect to the
    /// normalised projections, mapped back through `W`. Row-major: `((P + P^T) Z) W^T`.
    pub fn attention_update(&self, x: &Tensor) -> Result<Tensor> {
        let (b, n, d) = x.dims3()?;
        let z = split_heads(&linear(x, &self.w)?, self.heads, self.head_dim)?;
        let z = rms_norm(&z, self.attn_gain.as_ref(), RMS_EPS)?;
        let beta = 1.0 / (self.head_dim as f64).sqrt();
        let scores = (z.matmul(&z.t()?)? * beta)?;
        let mixed = bi_softmax(&scores)?.matmul(&z)?;
        let merged = mixed.transpose(1, 2)?.reshape((b, n, d))?;
        Ok(linear(&merged, &self.w.t()?)?)
    }

    /// `D ReLU(RMSNorm(D^T X))`: minus the gradient of E_FF (Eq. 5, 10) under the norm
    /// constraint, the direction of Eq. 11.
    pub fn feedforward_update(&self, x: &Tensor) -> Result<Tensor> {
        let u = rms_norm(&linear(x, &self.d_ff)?, self.ff_gain.as_ref(), RMS_EPS)?;
        Ok(linear(&u.relu()?, &self.d_ff.t()?)?)
    }
}

/// `x @ m` for `x` of shape `[B, N, k]` and `m` of shape `[k, n]`, as one 2-D matmul.
pub(crate) fn linear(x: &Tensor, m: &Tensor) -> plugin_api::candle::Result<Tensor> {
    let (b, n, k) = x.dims3()?;
    x.reshape((b * n, k))?.matmul(m)?.reshape((b, n, ()))
}

/// `[B, N, H*p]` to `[B, H, N, p]`.
pub(crate) fn split_heads(x: &Tensor, heads: usize, head_dim: usize) -> plugin_api::candle::Result<Tensor> {
    let (b, n, _) = x.dims3()?;
    x.reshape((b, n, heads, head_dim))?.transpose(1, 2)?.contiguous()
}
