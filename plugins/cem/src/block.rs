//! One CEM block (seed 002 Algorithm 1, Appendix A): the attention recursion (Eq. 16), then
//! the MLP recursion (Eq. 17) on its output; residual connections are absorbed into the
//! recursions.
//!
//! Algorithm 1 literally overwrites `h` with `RMSNorm(h)` before setting `x^(0) = h`, which
//! would lose the residual stream. Here `x^(0)` is the raw block input and the normalised
//! input only feeds the keys, the KQ diagonal and `gamma` (notes-cem.md §3.6): then
//! `T_eps = T_xi = 1`, `P = I`, `d = 0` is exactly a pre-norm Llama block with `W^V = W^K`,
//! `W^O = W^Q` and `W^d = V^T`, as Appendix A claims.

use crate::attention::CemAttention;
use crate::mlp::CemMlp;
use crate::model::CemConfig;
use plugin_api::candle::Tensor;
use plugin_api::candle_nn::VarBuilder;
use plugin_api::Result;

/// `eps` of the RMSNorms.
pub(crate) const RMS_EPS: f64 = 1e-6;

/// An attention sub-layer (unless the layer is CEM-MLP only) and an MLP sub-layer.
pub struct CemBlock {
    attention: Option<CemAttention>,
    mlp: CemMlp,
}

/// One energy of a block's recursions: `sublayer`'s energy after `step` steps, per sample.
pub struct BlockEnergy {
    /// `attention` (`eps`, Eq. 1) or `feedforward` (`xi`, Eq. 7).
    pub sublayer: &'static str,
    /// Steps taken (0 = at the recursion's start).
    pub step: usize,
    /// `[B]`.
    pub per_sample: Tensor,
}

impl CemBlock {
    /// Creates the sub-layers' parameters under `attn.` and `mlp.`.
    pub fn new(cfg: &CemConfig, vb: VarBuilder) -> Result<Self> {
        let attention = if cfg.attention { Some(CemAttention::new(cfg, vb.pp("attn"))?) } else { None };
        Ok(CemBlock { attention, mlp: CemMlp::new(cfg, vb.pp("mlp"))? })
    }

    /// The attention sub-layer, if any.
    pub fn attention(&self) -> Option<&CemAttention> {
        self.attention.as_ref()
    }

    /// The MLP sub-layer.
    pub fn mlp(&self) -> &CemMlp {
        &self.mlp
    }

    /// `h' = MLP(Attention(h))`, each the final state of its recursion (Algorithm 1).
    pub fn forward(&self, h: &Tensor, causal: bool) -> Result<Tensor> {
        let x = match &self.attention {
            Some(attention) => attention.forward(h, causal)?,
            None => h.clone(),
        };
        self.mlp.forward(&x)
    }

    /// The energies along the block's recursions from the input `h`: the attention energy
    /// at each of its `T_eps + 1` states, then the MLP energy at each of its `T_xi + 1`
    /// states (its block input being the attention output).
    pub fn energy_trajectory(&self, h: &Tensor, causal: bool) -> Result<Vec<BlockEnergy>> {
        let mut out = Vec::new();
        let x = match &self.attention {
            Some(attention) => {
                let (energies, x) = attention.energy_trajectory(h, causal)?;
                out.extend(energies.into_iter().enumerate().map(|(step, per_sample)| BlockEnergy {
                    sublayer: "attention",
                    step,
                    per_sample,
                }));
                x
            }
            None => h.clone(),
        };
        let (energies, _) = self.mlp.energy_trajectory(&x)?;
        out.extend(energies.into_iter().enumerate().map(|(step, per_sample)| BlockEnergy {
            sublayer: "feedforward",
            step,
            per_sample,
        }));
        Ok(out)
    }
}

/// One recursion step `x + eta d` (Eq. 16, 17); a unit step (the default) adds `d` as it is,
/// without a scaling pass over it and its gradient.
pub(crate) fn step(x: &Tensor, direction: &Tensor, eta: f64) -> plugin_api::candle::Result<Tensor> {
    if eta == 1.0 {
        x + direction
    } else {
        x + (direction * eta)?
    }
}

/// `[B, N, K * p]` to `[B, K, N, p]`.
pub(crate) fn split_heads(x: &Tensor, heads: usize, head_dim: usize) -> plugin_api::candle::Result<Tensor> {
    let (b, n, _) = x.dims3()?;
    x.reshape((b, n, heads, head_dim))?.transpose(1, 2)?.contiguous()
}
