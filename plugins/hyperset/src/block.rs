//! One Hyper-SET iteration: an attention step then a feedforward step (seed 000, Eq. 9, 11).

use crate::attention::{bisoftmax, AttentionKind};
use crate::config::HyperSetConfig;
use crate::feedforward::FeedforwardKind;
use crate::lora::DepthwiseLora;
use crate::optimizer::{Optimizer, OptimizerState};
use crate::step_size::StepSize;
use kernels::Kernels;
use plugin_api::candle::Tensor;
use plugin_api::candle_nn::{Init, VarBuilder};
use plugin_api::Result;

/// The learnable gains of the per-head RMSNorm (Eq. 8).
pub enum AttentionGains {
    /// No gains (`norm_gain = false`): the constraint `||z|| = sqrt(p)` of Eq. 4 exactly.
    None,
    /// One gain `[p]` for the shared Q/K/V projection (Sudoku and MIM models).
    Shared(Tensor),
    /// Separate gains `[p]` for queries, keys and values (the image-classification model
    /// of the authors' code, notes-hyperset.md §9; option `qkv_gains`).
    PerRole {
        /// Query gain `g_q`.
        query: Tensor,
        /// Key gain `g_k`.
        key: Tensor,
        /// Value gain `g_v`.
        value: Tensor,
    },
}

/// Normalised per-head projections `[B, H, N, p]` in their three roles (the same tensor
/// three times unless the gains are separate).
pub struct Projections {
    /// Queries.
    pub query: Tensor,
    /// Keys.
    pub key: Tensor,
    /// Values.
    pub value: Tensor,
}

/// The weights one iteration uses: `W` and `D`, plus that iteration's LoRA deltas if any.
pub struct IterationWeights {
    /// `W_t`, `[d, d]`.
    pub w: Tensor,
    /// `D_t`, `[d, M]`.
    pub d_ff: Tensor,
}

/// The two weight matrices of a Hyper-SET layer and the gains of its RMSNorms.
///
/// `W` (`[d, d]`, head `h` = columns `h*p..(h+1)*p`) is at once the query, key and value
/// projection, and `W^T` the output projection; `D` (`[d, M]`) is the feedforward
/// up-projection, `D^T` its down-projection. No biases (notes-hyperset.md §1.7).
pub struct HyperSetBlock {
    w: Tensor,
    d_ff: Tensor,
    attn_gains: AttentionGains,
    ff_gain: Option<Tensor>,
    lora: Option<DepthwiseLora>,
    attention: AttentionKind,
    feedforward: FeedforwardKind,
    kernels: Kernels,
    heads: usize,
    head_dim: usize,
    norm_eps: f64,
    /// `b` of the learned momentum coefficient `sigmoid(b)` (`learn_beta`), `[1]`.
    beta_logit: Option<Tensor>,
}

impl HyperSetBlock {
    /// A block running `iterations` iterations per pass in training (for its LoRA adapters).
    pub fn new(cfg: &HyperSetConfig, iterations: usize, vb: VarBuilder) -> Result<Self> {
        let init = Init::Randn { mean: 0.0, stdev: cfg.init_std };
        let w = vb.get_with_hints((cfg.d, cfg.d), "w", init)?;
        let d_ff = vb.get_with_hints((cfg.d, cfg.ff_width), "d_ff", init)?;
        let gain = |name: &str, size: usize| vb.get_with_hints(size, name, Init::Const(1.0));
        let (attn_gains, ff_gain) = match (cfg.norm_gain, cfg.qkv_gains) {
            (false, _) => (AttentionGains::None, None),
            (true, false) => {
                (AttentionGains::Shared(gain("attn_norm", cfg.head_dim())?), Some(gain("ff_norm", cfg.ff_width)?))
            }
            (true, true) => (
                AttentionGains::PerRole {
                    query: gain("q_norm", cfg.head_dim())?,
                    key: gain("k_norm", cfg.head_dim())?,
                    value: gain("v_norm", cfg.head_dim())?,
                },
                Some(gain("ff_norm", cfg.ff_width)?),
            ),
        };
        let beta_logit = match cfg.optimizer {
            // Starts at the `beta` option: sigmoid(log(beta / (1 - beta))) = beta.
            Optimizer::Momentum { beta } | Optimizer::Nesterov { beta } if cfg.learn_beta => {
                Some(vb.get_with_hints(1, "beta_logit", Init::Const((beta / (1.0 - beta)).ln()))?)
            }
            _ => None,
        };
        let lora = match cfg.lora_rank {
            0 => None,
            rank => Some(DepthwiseLora::new(cfg.d, cfg.ff_width, rank, iterations, cfg.lora_scale, vb.clone())?),
        };
        Ok(HyperSetBlock {
            w,
            d_ff,
            attn_gains,
            ff_gain,
            lora,
            attention: cfg.attention,
            feedforward: cfg.feedforward,
            kernels: cfg.kernels,
            heads: cfg.heads,
            head_dim: cfg.head_dim(),
            norm_eps: cfg.norm_eps,
            beta_logit,
        })
    }

    /// The block's learned momentum coefficient `sigmoid(b)`, `[1]` (`learn_beta`).
    pub fn learned_beta(&self) -> Result<Option<Tensor>> {
        let Some(logit) = &self.beta_logit else { return Ok(None) };
        // 1 / (1 + e^-b) from differentiable primitives (a [1] tensor: nothing to fuse).
        Ok(Some((logit.neg()?.exp()? + 1.0)?.recip()?))
    }

    /// The weights of the block's iteration `t` (1-based): `W`, `D` themselves without LoRA.
    pub fn weights(&self, t: usize) -> Result<IterationWeights> {
        Ok(match &self.lora {
            None => IterationWeights { w: self.w.clone(), d_ff: self.d_ff.clone() },
            Some(lora) => {
                let (w, d_ff) = lora.apply(t, &self.w, &self.d_ff)?;
                IterationWeights { w, d_ff }
            }
        })
    }

    /// The per-head RMSNorm gains.
    pub fn attention_gains(&self) -> &AttentionGains {
        &self.attn_gains
    }

    /// The feedforward RMSNorm gain, if any.
    pub fn ff_gain(&self) -> Option<&Tensor> {
        self.ff_gain.as_ref()
    }

    /// The attention energy this block descends.
    pub fn attention_kind(&self) -> AttentionKind {
        self.attention
    }

    /// The feedforward energy this block descends.
    pub fn feedforward_kind(&self) -> FeedforwardKind {
        self.feedforward
    }

    /// `(H, p)`.
    pub fn heads(&self) -> (usize, usize) {
        (self.heads, self.head_dim)
    }

    /// `X_{t+1}` from `X_t` with step sizes `alpha`, `gamma`, on the iteration's weights.
    pub fn iterate(
        &self,
        x: &Tensor,
        alpha: &StepSize,
        gamma: &StepSize,
        weights: &IterationWeights,
    ) -> Result<Tensor> {
        let x_half = alpha.apply(x, self.attention_update(x, &weights.w)?, true, self.kernels)?;
        gamma.apply(&x_half, self.feedforward_update(&x_half, &weights.d_ff)?, false, self.kernels)
    }

    /// As [`iterate`](Self::iterate), each sub-step a step of `optimizer` carrying `state`:
    /// the attention sub-step's gradient is the update of Eq. 9, the feedforward's minus the
    /// update of Eq. 11 (module `optimizer`). `gd` is `iterate` itself. `beta` is the block's
    /// learned momentum coefficient (`learned_beta`, built once per pass).
    #[allow(clippy::too_many_arguments)]
    pub fn iterate_with(
        &self,
        x: &Tensor,
        alpha: &StepSize,
        gamma: &StepSize,
        weights: &IterationWeights,
        optimizer: &Optimizer,
        beta: Option<&Tensor>,
        state: &mut OptimizerState,
    ) -> Result<Tensor> {
        if *optimizer == Optimizer::Gd {
            return self.iterate(x, alpha, gamma, weights);
        }
        let x_half = optimizer.step(state, x, alpha, beta, self.kernels, |x| self.attention_update(x, &weights.w))?;
        optimizer.step(state, &x_half, gamma, beta, self.kernels, |x| {
            Ok(self.feedforward_update(x, &weights.d_ff)?.neg()?)
        })
    }

    /// The kernels the block's steps run on.
    pub fn kernels(&self) -> Kernels {
        self.kernels
    }

    /// `Z~ = RMSNorm(W_h^T X)` for every head, with the block's gains, in the three roles.
    pub fn project(&self, x: &Tensor, w: &Tensor) -> Result<Projections> {
        let z = match self.kernels {
            // The fused RMSNorm reads the transposed view and writes `[B, H, N, p]` itself.
            Kernels::Fused => split_heads_view(&self.kernels.linear(x, w, None)?, self.heads, self.head_dim)?,
            Kernels::Composed => split_heads(&self.kernels.linear(x, w, None)?, self.heads, self.head_dim)?,
        };
        let rms_norm = |z: &Tensor, gain: Option<&Tensor>| self.kernels.rms_norm(z, gain, self.norm_eps);
        let shared = |z: Tensor| Projections { query: z.clone(), key: z.clone(), value: z };
        Ok(match &self.attn_gains {
            AttentionGains::None => shared(rms_norm(&z, None)?),
            AttentionGains::Shared(g) => shared(rms_norm(&z, Some(g))?),
            AttentionGains::PerRole { query, key, value } => {
                let z = rms_norm(&z, None)?;
                Projections {
                    query: z.broadcast_mul(query)?,
                    key: z.broadcast_mul(key)?,
                    value: z.broadcast_mul(value)?,
                }
            }
        })
    }

    /// `sum_h W_h mix_h` with the variant's per-head `mix` (module `attention`) on
    /// `Z~ = RMSNorm(W_h^T X)`: the direction of Eq. 9, i.e. the gradient of the attention
    /// energy with respect to the normalised projections, mapped back through `W`.
    /// Row-major for bi-softmax: `((P + P^T) Z) W^T`. With fused kernels, bi-softmax on one
    /// shared normalisation runs as one op from `X W` to the merged heads
    /// (`attention::bisoftmax::fused_update`).
    pub fn attention_update(&self, x: &Tensor, w: &Tensor) -> Result<Tensor> {
        let (b, n, d) = x.dims3()?;
        if let (Kernels::Fused, AttentionKind::BiSoftmax) = (self.kernels, self.attention) {
            let shared_gain = match &self.attn_gains {
                AttentionGains::None => Some(None),
                AttentionGains::Shared(g) => Some(Some(g)),
                AttentionGains::PerRole { .. } => None,
            };
            if let Some(gain) = shared_gain {
                return Ok(bisoftmax::fused_update(x, w, gain, self.heads, self.norm_eps)?);
            }
        }
        let z = self.project(x, w)?;
        let mixed = self.attention.mix(&z.query, &z.key, &z.value)?;
        let merged = mixed.transpose(1, 2)?.reshape((b, n, d))?;
        Ok(self.kernels.linear_transposed(&merged, w, None)?)
    }

    /// `D a(RMSNorm(D^T X))` with the variant's `a = -dE_FF/dU~` (module `feedforward`):
    /// for ReLU, minus the gradient of E_FF (Eq. 5, 10) under the norm constraint, the
    /// direction of Eq. 11.
    /// With fused kernels the RMSNorm and a ReLU, GELU or softmax activation are one op
    /// (`FeedforwardKind::normed_activation`), and with ReLU or GELU so is the whole update
    /// (`kernels::normed_feedforward`).
    pub fn feedforward_update(&self, x: &Tensor, d_ff: &Tensor) -> Result<Tensor> {
        let gain = self.ff_gain.as_ref();
        if let Some(act) = self.feedforward.fused_activation() {
            // The whole update as one op: its intermediates stay in the cache.
            return Ok(self.kernels.normed_feedforward(x, d_ff, gain, self.norm_eps, act)?);
        }
        let hidden = self.kernels.linear(x, d_ff, None)?;
        let activated = self.feedforward.normed_activation(&hidden, gain, self.norm_eps, self.kernels)?;
        Ok(self.kernels.linear_transposed(&activated, d_ff, None)?)
    }
}

/// `x @ m` for `x` of shape `[B, N, k]` and `m` of shape `[k, n]`, as one 2-D matmul (the
/// composition, for the energies and identities; the layer's path uses `Kernels::linear`).
pub(crate) fn linear(x: &Tensor, m: &Tensor) -> plugin_api::candle::Result<Tensor> {
    let (b, n, k) = x.dims3()?;
    x.reshape((b * n, k))?.matmul(m)?.reshape((b, n, ()))
}

/// `[B, N, H*p]` to `[B, H, N, p]`.
pub(crate) fn split_heads(x: &Tensor, heads: usize, head_dim: usize) -> plugin_api::candle::Result<Tensor> {
    split_heads_view(x, heads, head_dim)?.contiguous()
}

/// `[B, N, H*p]` seen as `[B, H, N, p]` (a transposed view, not copied).
fn split_heads_view(x: &Tensor, heads: usize, head_dim: usize) -> plugin_api::candle::Result<Tensor> {
    let (b, n, _) = x.dims3()?;
    x.reshape((b, n, heads, head_dim))?.transpose(1, 2)
}
