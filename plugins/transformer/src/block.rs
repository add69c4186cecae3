//! One pre-norm Transformer block: `X += Attn(RMSNorm(X))` (or `X -= ...` with the attention
//! sign reversed), `X += MLP(RMSNorm(X))`.

use crate::model::TransformerConfig;
use kernels::Kernels;
use plugin_api::candle::Tensor;
use plugin_api::candle_nn::{Init, VarBuilder};
use plugin_api::Result;

pub struct TransformerBlock {
    attn_norm: Tensor,
    /// `[d, d]` each; with `shared_qkv` all three are the same tensor.
    w_q: Tensor,
    w_k: Tensor,
    w_v: Tensor,
    w_o: Tensor,
    mlp_norm: Tensor,
    w_up: Tensor,
    w_down: Tensor,
    heads: usize,
    head_dim: usize,
    reversed_attention: bool,
    kernels: Kernels,
    norm_eps: f64,
}

impl TransformerBlock {
    pub fn new(cfg: &TransformerConfig, vb: VarBuilder) -> Result<Self> {
        let init = Init::Randn { mean: 0.0, stdev: cfg.init_std };
        let square = |name: &str| vb.get_with_hints((cfg.d, cfg.d), name, init);
        let (w_q, w_k, w_v) = if cfg.shared_qkv {
            let w = square("w_qkv")?;
            (w.clone(), w.clone(), w)
        } else {
            (square("w_q")?, square("w_k")?, square("w_v")?)
        };
        Ok(TransformerBlock {
            attn_norm: vb.get_with_hints(cfg.d, "attn_norm", Init::Const(1.0))?,
            w_q,
            w_k,
            w_v,
            w_o: square("w_o")?,
            mlp_norm: vb.get_with_hints(cfg.d, "mlp_norm", Init::Const(1.0))?,
            w_up: vb.get_with_hints((cfg.d, cfg.mlp_width), "w_up", init)?,
            w_down: vb.get_with_hints((cfg.mlp_width, cfg.d), "w_down", init)?,
            heads: cfg.heads,
            head_dim: cfg.d / cfg.heads,
            reversed_attention: cfg.reversed_attention,
            kernels: cfg.kernels,
            norm_eps: cfg.norm_eps,
        })
    }

    pub fn forward(&self, x: &Tensor, causal: bool) -> Result<Tensor> {
        let k = self.kernels;
        let attended = self.attention(&k.rms_norm(x, Some(&self.attn_norm), self.norm_eps)?, causal)?;
        let x = if self.reversed_attention { (x - attended)? } else { (x + attended)? };
        let h = k.rms_norm(&x, Some(&self.mlp_norm), self.norm_eps)?;
        Ok((&x + k.linear(&k.linear_relu(&h, &self.w_up)?, &self.w_down, None)?)?)
    }

    fn attention(&self, h: &Tensor, causal: bool) -> Result<Tensor> {
        let k = self.kernels;
        let scale = 1.0 / (self.head_dim as f64).sqrt();
        // With `shared_qkv` one projection serves as query, key and value.
        let shared = self.w_k.id() == self.w_q.id() && self.w_v.id() == self.w_q.id();
        let mixed = if shared {
            let qkv = k.linear(h, &self.w_q, None)?;
            k.softmax_attention(&qkv, &qkv, &qkv, self.heads, scale, causal, None)?
        } else {
            // One product `h [W_Q | W_K | W_V]` instead of three (the same values): wider
            // products run faster, and the input's gradient is one product instead of three
            // and two sums.
            let w_qkv = Tensor::cat(&[&self.w_q, &self.w_k, &self.w_v], 1)?;
            k.softmax_attention_packed(&k.linear(h, &w_qkv, None)?, self.heads, scale, causal, None)?
        };
        Ok(k.linear(&mixed, &self.w_o, None)?)
    }

    /// Per-head query projections of the normalised input, RMS-normalised per head, on which
    /// effective rank and angle are measured (with `shared_qkv` these are the shared projections).
    pub fn normalised_queries(&self, x: &Tensor) -> Result<Tensor> {
        let k = self.kernels;
        let h = k.rms_norm(x, Some(&self.attn_norm), self.norm_eps)?;
        Ok(k.rms_norm(&self.split(&k.linear(&h, &self.w_q, None)?)?, None, self.norm_eps)?)
    }

    fn split(&self, x: &Tensor) -> plugin_api::candle::Result<Tensor> {
        let (b, n, _) = x.dims3()?;
        x.reshape((b, n, self.heads, self.head_dim))?.transpose(1, 2)?.contiguous()
    }
}
