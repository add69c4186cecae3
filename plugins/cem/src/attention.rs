//! CEM attention: recursive preconditioned gradient steps on the interaction energy
//! (seed 002 Eq. 1-5, 12, 14, 16; Algorithm 1 "Subroutine: MHA"; ALiBi of Appendix B).
//!
//! Energy of token `i`'s state `x_i` given the block input `h_{1:i}` (Eq. 1 with Appendix B's
//! bias), evaluated at the normalised state `u_i = RMSNorm(x_i)`:
//!
//! `eps = -tau sum_k log sum_{j<=i} exp(a_ijk)`, `a_ijk = (k_j^k . q_i^k + hn_j^T diag(d_k) u_i) / tau + b_ijk`
//!
//! with `q_i^k = W_k^Q u_i`, keys `k_j^k = W_k^K hn_j` of the normalised block input
//! `hn = RMSNorm(h)`, i.e. `A_k = diag(d_k) + W_k^Q^T W_k^K` (Eq. 12). Its gradient (Eq. 2) is
//! `-sum_k sum_j softmax_j(a_ijk) (W_k^Q^T k_j^k + d_k o hn_j)`; with `W^V = W^K`, `W^O = W^Q`
//! (Eq. 5) the first part is multi-head attention. Each step (Eq. 14, 16) is
//!
//! `x <- x + eta sum_k P_k (W_k^Q^T o_k [+ d_k o sum_j softmax_j(a_ijk) hn_j])`, `o_k = sum_j softmax_j(a_ijk) k_j^k`.
//!
//! Choices (notes-cem.md §3.2, §3.6, UNSURE): by default the diagonal enters the scores only,
//! as in Algorithm 1 (`diag_value = false`); the bracketed value term makes the step the exact
//! energy gradient. The diagonal is initialised to 0, so a fresh block with `T = 1` and
//! `P = I` is a weight-tied Llama attention. The step is a gradient in `u`, applied to `x`: the
//! in-loop RMSNorm (which shares the pre-norm's gain) makes it no exact gradient step in `x`.
//! Keys, `hn` and the bias are computed once from the block input and kept fixed across steps.
//! Each step's attention runs as one fused op (`kernels::tied_attention`) where the weights
//! themselves are not needed; the composition (`logits`, `head_outputs`) serves the energies,
//! the diagnostics and the other options, and the tests hold the two to each other.

use crate::alibi::{score_bias, Alibi};
use crate::block::{split_heads, step, RMS_EPS};
use crate::model::{CemConfig, KqDiagonal};
use crate::preconditioner::{Preconditioner, PreparedHeads};
use kernels::{rms_norm, softmax};
use plugin_api::candle::{Tensor, D};
use plugin_api::candle_nn::{Init, VarBuilder};
use plugin_api::Result;

/// The parameters of one CEM attention sub-layer.
pub struct CemAttention {
    /// RMSNorm gain `[D]`, shared by the block pre-norm (keys) and the in-loop norm (queries).
    norm_gain: Tensor,
    /// `W^Q` `[D, K D_r]` in row form (`q = u w_q`); `W^O = W^Q` (Eq. 5).
    w_q: Tensor,
    /// `W^K` `[D, K D_r]`; `W^V = W^K` (Eq. 5).
    w_k: Tensor,
    /// KQ diagonal `d` `[1, D]` (shared) or `[K, D]` (per head) of Eq. 12.
    kq_diagonal: Option<Tensor>,
    alibi: Option<Alibi>,
    /// `P_k`, one per head (Eq. 14).
    preconditioner: Preconditioner,
    /// `P_k = I`, for the unpreconditioned direction.
    identity: Preconditioner,
    heads: usize,
    head_dim: usize,
    tau: f64,
    steps: usize,
    step_size: f64,
    diag_value: bool,
}

/// What the recursion keeps fixed from the block input `h` (notes-cem.md §3.4).
pub struct AttentionContext {
    /// `hn = RMSNorm(h)` `[B, N, D]`.
    pub normed_input: Tensor,
    /// Keys, which are also the values, `k_j^k = W_k^K hn_j` `[B, K, N, D_r]`.
    pub keys: Tensor,
    /// `k_j^k / tau`, the keys as the scores use them (scaled once per block, not per step).
    pub score_keys: Tensor,
    /// `diag(d_k) hn_j / tau` `[B, 1 or K, N, D]`, if the layer has a KQ diagonal.
    pub diagonal_keys: Option<Tensor>,
    /// Additive score bias (ALiBi, causal mask) `[1 or K, N, N]`.
    pub bias: Option<Tensor>,
    /// The keys in the merged layout of their projection, `[B, N, K D_r]`.
    pub merged_keys: Tensor,
    /// ALiBi's bias alone, `[K, N, N]`, if the layer has it.
    pub alibi_bias: Option<Tensor>,
    /// Whether each token attends to the tokens up to itself only.
    pub causal: bool,
    /// `sum_k P_k W_k^Q^T o_k`'s matrices, derived from the parameters once for every step.
    pub through_heads: PreparedHeads,
}

impl CemAttention {
    /// Creates `norm`, `w_q`, `w_k`, `kq_diag`, the ALiBi biases and `precond_*` in `vb`.
    pub fn new(cfg: &CemConfig, vb: VarBuilder) -> Result<Self> {
        let init = Init::Randn { mean: 0.0, stdev: cfg.init_std };
        let projection = cfg.heads * cfg.head_dim();
        let kq_diagonal = match cfg.kq_diagonal {
            KqDiagonal::None => None,
            KqDiagonal::Shared => Some(vb.get_with_hints((1, cfg.d), "kq_diag", Init::Const(0.0))?),
            KqDiagonal::PerHead => Some(vb.get_with_hints((cfg.heads, cfg.d), "kq_diag", Init::Const(0.0))?),
        };
        Ok(CemAttention {
            norm_gain: vb.get_with_hints(cfg.d, "norm", Init::Const(1.0))?,
            w_q: vb.get_with_hints((cfg.d, projection), "w_q", init)?,
            w_k: vb.get_with_hints((cfg.d, projection), "w_k", init)?,
            kq_diagonal,
            alibi: if cfg.alibi { Some(Alibi::new(cfg.heads, vb.clone())?) } else { None },
            preconditioner: Preconditioner::new(cfg.preconditioner, cfg.heads, cfg.d, cfg.attn_rank, vb)?,
            identity: Preconditioner::identity(cfg.heads, cfg.d),
            heads: cfg.heads,
            head_dim: cfg.head_dim(),
            tau: cfg.tau(),
            steps: cfg.attn_steps,
            step_size: cfg.attn_step_size,
            diag_value: cfg.diag_value,
        })
    }

    /// The per-head preconditioners `P_k`.
    pub fn preconditioner(&self) -> &Preconditioner {
        &self.preconditioner
    }

    /// Whether the layer has a KQ diagonal and keeps it out of the update (Algorithm 1).
    pub fn diagonal_in_scores_only(&self) -> bool {
        self.kq_diagonal.is_some() && !self.diag_value
    }

    /// Eq. 16: `T_eps` steps from `x^(0) = h`, returning `x^(T)`.
    pub fn forward(&self, h: &Tensor, causal: bool) -> Result<Tensor> {
        let ctx = self.context(h, causal)?;
        let mut x = h.clone();
        for _ in 0..self.steps {
            let u = self.normalise(&x)?;
            x = step(&x, &self.update(&ctx, &u)?, self.step_size)?;
        }
        Ok(x)
    }

    /// The energies `eps` (per sample) at the start and after each of the `T_eps` steps from
    /// `x^(0) = h`, and the final state.
    pub fn energy_trajectory(&self, h: &Tensor, causal: bool) -> Result<(Vec<Tensor>, Tensor)> {
        let ctx = self.context(h, causal)?;
        let mut x = h.clone();
        let mut energies = Vec::with_capacity(self.steps + 1);
        for s in 0..=self.steps {
            let u = self.normalise(&x)?;
            energies.push(self.energy(&ctx, &u, false)?);
            if s < self.steps {
                x = step(&x, &self.update(&ctx, &u)?, self.step_size)?;
            }
        }
        Ok((energies, x))
    }

    /// Keys (= values), `diag(d) hn` and the score bias from the block input `h` `[B, N, D]`.
    pub fn context(&self, h: &Tensor, causal: bool) -> Result<AttentionContext> {
        let normed_input = self.normalise(h)?;
        let merged_keys = kernels::linear(&normed_input, &self.w_k, None)?;
        let keys = split_heads(&merged_keys, self.heads, self.head_dim)?;
        let score_keys = (&keys / self.tau)?;
        let diagonal_keys = match &self.kq_diagonal {
            Some(d) => Some(normed_input.unsqueeze(1)?.broadcast_mul(&(d / self.tau)?.unsqueeze(1)?)?),
            None => None,
        };
        let n = h.dim(1)?;
        let alibi_bias = self.alibi.as_ref().map(|a| a.bias(n, h.dtype(), h.device())).transpose()?;
        let bias = score_bias(alibi_bias.clone(), n, causal, h.dtype(), h.device())?;
        let through_heads = self.preconditioner.prepare_heads(&self.w_q)?;
        Ok(AttentionContext {
            normed_input,
            keys,
            score_keys,
            diagonal_keys,
            bias,
            merged_keys,
            alibi_bias,
            causal,
            through_heads,
        })
    }

    /// `u = RMSNorm(x)` with the sub-layer's gain (Algorithm 1).
    pub fn normalise(&self, x: &Tensor) -> Result<Tensor> {
        Ok(rms_norm(x, Some(&self.norm_gain), RMS_EPS)?)
    }

    /// The per-head queries `q_i^k = W_k^Q u_i` `[B, K, N, D_r]` of a state `u` `[B, N, D]`
    /// shared by the heads, or of per-head states `[B, K, N, D]`.
    pub fn queries(&self, u: &Tensor) -> Result<Tensor> {
        if u.rank() == 3 {
            return Ok(split_heads(&kernels::linear(u, &self.w_q, None)?, self.heads, self.head_dim)?);
        }
        let (d, _) = self.w_q.dims2()?;
        let w_heads = self.w_q.reshape((d, self.heads, self.head_dim))?.transpose(0, 1)?; // [K, D, D_r]
        Ok(u.broadcast_matmul(&w_heads.contiguous()?)?)
    }

    /// `hn_j^T diag(d_k) u_i / tau` `[B, 1 or K, N, N]` for a state `u` `[B, N, D]` or `[B, K, N, D]`.
    pub fn diagonal_scores(&self, ctx: &AttentionContext, u: &Tensor) -> Result<Option<Tensor>> {
        let Some(dk) = &ctx.diagonal_keys else { return Ok(None) };
        let u = if u.rank() == 3 { u.unsqueeze(1)? } else { u.clone() };
        Ok(Some(u.broadcast_matmul(&dk.transpose(2, 3)?)?))
    }

    /// The scores `a_ijk = (q . k + hn^T diag(d) u) / tau + b_ijk` `[B, K, N, N]` (Eq. 1,
    /// Appendix B, Algorithm 1), from the queries and the diagonal term `diagonal_scores`.
    pub fn logits(&self, ctx: &AttentionContext, q: &Tensor, diagonal: Option<&Tensor>) -> Result<Tensor> {
        // The temperature is in the context's keys, which are fixed over the steps.
        let mut scores = q.matmul(&ctx.score_keys.t()?)?;
        if let Some(s) = diagonal {
            scores = scores.broadcast_add(s)?;
        }
        if let Some(b) = &ctx.bias {
            // The same [K, N, N] bias for every sample, added as one row per sample: its
            // gradient is then a sum over contiguous rows, not candle's broadcast reduction.
            let (batch, heads, n, m) = scores.dims4()?;
            let per_sample = b.broadcast_as((heads, n, m))?.flatten_all()?;
            scores = kernels::add_row(&scores.reshape((batch, heads * n * m))?, &per_sample)?
                .reshape((batch, heads, n, m))?;
        }
        Ok(scores)
    }

    /// `eps` per sample, `[B]`: `-tau sum_k sum_i logsumexp_j a_ijk` (Eq. 1). With
    /// `hold_diagonal` the diagonal score term is a constant (no gradient flows through it).
    pub fn energy(&self, ctx: &AttentionContext, u: &Tensor, hold_diagonal: bool) -> Result<Tensor> {
        let mut diagonal = self.diagonal_scores(ctx, u)?;
        if hold_diagonal {
            diagonal = diagonal.map(|s| s.detach());
        }
        self.energy_of_logits(&self.logits(ctx, &self.queries(u)?, diagonal.as_ref())?)
    }

    /// `-tau sum_k sum_i logsumexp_j a_ijk` per sample from the scores `[B, K, N, N]`.
    pub fn energy_of_logits(&self, logits: &Tensor) -> Result<Tensor> {
        let max = logits.max_keepdim(D::Minus1)?.detach();
        let lse = (logits.broadcast_sub(&max)?.exp()?.sum_keepdim(D::Minus1)?.log()? + max)?;
        Ok((lse.flatten_from(1)?.sum(1)? * -self.tau)?)
    }

    /// Attention weights `softmax_j(a_ijk)` `[B, K, N, N]` and head outputs
    /// `o_i^k = sum_j softmax_j(a_ijk) k_j^k` `[B, K, N, D_r]` (values = keys, Eq. 5).
    pub fn head_outputs(&self, ctx: &AttentionContext, u: &Tensor) -> Result<(Tensor, Tensor)> {
        let diagonal = self.diagonal_scores(ctx, u)?;
        let weights = softmax(&self.logits(ctx, &self.queries(u)?, diagonal.as_ref())?, D::Minus1)?;
        let outputs = weights.matmul(&ctx.keys)?;
        Ok((weights, outputs))
    }

    /// The step direction `-Delta x^eps` of Eq. 14 at `u` `[B, N, D]`:
    /// `sum_k P_k (W_k^Q^T o_k [+ d_k o sum_j softmax_j hn_j])`.
    pub fn update(&self, ctx: &AttentionContext, u: &Tensor) -> Result<Tensor> {
        self.update_with(&self.preconditioner, &ctx.through_heads, ctx, u)
    }

    /// The same direction without preconditioning (`P_k = I`, Eq. 2 and 4).
    pub fn gradient_direction(&self, ctx: &AttentionContext, u: &Tensor) -> Result<Tensor> {
        self.update_with(&self.identity, &self.identity.prepare_heads(&self.w_q)?, ctx, u)
    }

    fn update_with(
        &self,
        p: &Preconditioner,
        through_heads: &PreparedHeads,
        ctx: &AttentionContext,
        u: &Tensor,
    ) -> Result<Tensor> {
        if let Some(outputs) = self.tied_head_outputs(ctx, u)? {
            return through_heads.apply_merged(&outputs);
        }
        let (weights, outputs) = self.head_outputs(ctx, u)?;
        let mut z = through_heads.apply(&outputs)?;
        if let (true, Some(d)) = (self.diag_value, &self.kq_diagonal) {
            // d_k o sum_j softmax_j(a_ijk) hn_j: the diagonal's share of beta_kj (Eq. 2, 12)
            let mixed = weights.broadcast_matmul(&ctx.normed_input.unsqueeze(1)?)?;
            z = (z + p.apply_sum(&mixed.broadcast_mul(&d.unsqueeze(1)?)?)?)?;
        }
        Ok(z)
    }

    /// The head outputs `o_k` of `head_outputs` in the merged layout `[B, N, K D_r]`, by one
    /// fused op (`kernels::tied_attention`: the scores, their diagonal and ALiBi terms, the
    /// mask, the softmax and the product with the keys, per head in the cache), where it
    /// applies: a state `u` `[B, N, D]` shared by the heads, a KQ diagonal (if any) shared by
    /// them too, and the weights themselves not needed (the diagonal kept out of the update).
    /// `None` elsewhere.
    fn tied_head_outputs(&self, ctx: &AttentionContext, u: &Tensor) -> Result<Option<Tensor>> {
        let shared_diagonal = ctx.diagonal_keys.as_ref().map(|dk| dk.dim(1)).transpose()?.is_none_or(|k| k == 1);
        if u.rank() != 3 || self.diag_value || !shared_diagonal {
            return Ok(None);
        }
        // hn_j^T diag(d) u_i / tau for every head at once, [B, N, N]; when causal, only the
        // lower triangle the mask keeps.
        let diagonal = match &ctx.diagonal_keys {
            Some(dk) if ctx.causal => Some(kernels::lower_product(u, &dk.squeeze(1)?)?),
            Some(dk) => Some(u.matmul(&dk.squeeze(1)?.t()?)?),
            None => None,
        };
        let queries = kernels::linear(u, &self.w_q, None)?;
        let outputs = kernels::tied_attention(
            &queries,
            &ctx.merged_keys,
            self.heads,
            1.0 / self.tau,
            ctx.causal,
            diagonal.as_ref(),
            ctx.alibi_bias.as_ref(),
        )?;
        Ok(Some(outputs))
    }

    /// RMS-normalised per-head queries of `RMSNorm(x)`, `[B, K, N, D_r]` (diagnostics).
    pub fn normalised_queries(&self, x: &Tensor) -> Result<Tensor> {
        Ok(rms_norm(&self.queries(&self.normalise(x)?)?, None, RMS_EPS)?)
    }
}
