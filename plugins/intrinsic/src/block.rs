//! One GPT-style pre-norm block: an attention sub-layer and a GELU MLP sub-layer, each
//! either a plain residual step `z + f(norm(z))` (one gradient step, Section 2) or a momentum
//! (Eq. 8) / Nesterov (Eq. 9) step sharing one momentum buffer.
//!
//! Dropout in training passes, in GPT-2's two places (see [`Dropout`]): each branch output at
//! rate `dropout`, and the attention probabilities at rate `attn_dropout`.

use crate::attention::{momentum, nesterov, Attention};
use crate::config::{AttentionKind, IntrinsicConfig};
use crate::dropout::Dropout;
use crate::ops::{Affine, Norm, NORM_EPS};
use kernels::rms_norm;
use plugin_api::candle::Tensor;
use plugin_api::candle_nn::{Init, VarBuilder};
use plugin_api::Result;

/// The GELU MLP `W_2 GELU(W_1 x + b_1) + b_2` (App. A.4: GELU, hidden width 4d; GELU in its
/// tanh form, as GPT-2).
pub struct Mlp {
    up: Affine,
    down: Affine,
}

impl Mlp {
    /// Creates `vb.up` and `vb.down`.
    pub fn new(cfg: &IntrinsicConfig, vb: &VarBuilder) -> Result<Self> {
        Ok(Mlp {
            up: Affine::new(&vb.pp("up"), cfg.d, cfg.mlp_width, cfg.init_std, cfg.bias)?,
            down: Affine::new(&vb.pp("down"), cfg.mlp_width, cfg.d, cfg.init_std, cfg.bias)?,
        })
    }

    /// The MLP branch.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let hidden = kernels::activation(&self.up.forward(x)?, kernels::Activation::GeluTanh)?;
        Ok(self.down.forward(&hidden)?)
    }
}

/// The learnable `beta`, `eta` of the momentum steps of one block (`[1]` each).
pub struct Coefficients {
    /// `beta` of the attention step.
    pub beta_attn: Tensor,
    /// `eta` of the attention step.
    pub eta_attn: Tensor,
    /// `(beta, eta)` of the MLP step, when the MLP is a momentum step too.
    pub ffn: Option<(Tensor, Tensor)>,
}

impl Coefficients {
    fn new(cfg: &IntrinsicConfig, vb: &VarBuilder) -> Result<Self> {
        let scalar = |name: &str, value: f64| vb.get_with_hints(1, name, Init::Const(value));
        let ffn = if cfg.momentum_ffn {
            Some((scalar("beta_ffn", cfg.momentum_beta)?, scalar("eta_ffn", cfg.momentum_eta)?))
        } else {
            None
        };
        Ok(Coefficients {
            beta_attn: scalar("beta_attn", cfg.momentum_beta)?,
            eta_attn: scalar("eta_attn", cfg.momentum_eta)?,
            ffn,
        })
    }
}

/// How a sub-layer's branch updates the state.
pub enum Residual {
    /// `z + f(z)`: one gradient step (Section 2).
    Plain,
    /// MomenMHA (Eq. 8).
    Momentum(Coefficients),
    /// NagMHA (Eq. 9).
    Nesterov(Coefficients),
}

/// One distinct block.
pub struct Block {
    attn_norm: Norm,
    /// The attention sub-layer.
    pub attention: Attention,
    mlp_norm: Norm,
    mlp: Mlp,
    /// Plain, momentum or Nesterov updates.
    pub residual: Residual,
    /// Rate of the residual dropout on the branch outputs.
    dropout: f64,
    /// Rate of the attention dropout on the probabilities.
    attn_dropout: f64,
}

impl Block {
    /// Creates a block under `vb` (`attn_norm`, `attn`, `mlp_norm`, `mlp`, `momentum`).
    pub fn new(cfg: &IntrinsicConfig, vb: VarBuilder) -> Result<Self> {
        let residual = match cfg.attention {
            AttentionKind::Momentum => Residual::Momentum(Coefficients::new(cfg, &vb.pp("momentum"))?),
            AttentionKind::Nesterov => Residual::Nesterov(Coefficients::new(cfg, &vb.pp("momentum"))?),
            _ => Residual::Plain,
        };
        Ok(Block {
            attn_norm: Norm::new(&vb.pp("attn_norm"), cfg.norm, cfg.d, cfg.bias)?,
            attention: Attention::new(cfg, &vb.pp("attn"))?,
            mlp_norm: Norm::new(&vb.pp("mlp_norm"), cfg.norm, cfg.d, cfg.bias)?,
            mlp: Mlp::new(cfg, &vb.pp("mlp"))?,
            residual,
            dropout: cfg.dropout,
            attn_dropout: cfg.attn_dropout,
        })
    }

    /// The branch output `f` with dropout in training passes (its mask seeded by `f` itself),
    /// `f` itself otherwise.
    fn drop(&self, f: Tensor, train: bool) -> Result<Tensor> {
        Ok(Dropout::in_pass(self.dropout, train, 0, &f)?.apply(f)?)
    }

    /// The attention branch `f(z) = Attn(norm(z))`, self-attention over `z`, its probabilities
    /// dropped when `train` and `attn_dropout > 0`.
    pub fn attention_branch(&self, z: &Tensor, causal: bool, train: bool) -> Result<Tensor> {
        let x = self.attn_norm.forward(z)?;
        let dropout = Dropout::in_pass(self.attn_dropout, train, 1, &x)?;
        self.attention.forward(&x, &x, causal, dropout)
    }

    /// The MLP branch `g(z) = MLP(norm(z))`.
    pub fn mlp_branch(&self, z: &Tensor) -> Result<Tensor> {
        self.mlp.forward(&self.mlp_norm.forward(z)?)
    }

    /// One application of the block to the state `z` with momentum buffer `m` (`None` while it
    /// is zero, and always for plain blocks); returns the new state and buffer. `train` turns
    /// dropout on.
    pub fn iterate(
        &self,
        z: &Tensor,
        m: Option<&Tensor>,
        causal: bool,
        train: bool,
    ) -> Result<(Tensor, Option<Tensor>)> {
        let attend = |x: &Tensor| self.drop(self.attention_branch(x, causal, train)?, train);
        let feed = |x: &Tensor| self.drop(self.mlp_branch(x)?, train);
        match &self.residual {
            Residual::Plain => {
                let z = (z + attend(z)?)?;
                let z = (&z + feed(&z)?)?;
                Ok((z, None))
            }
            Residual::Momentum(c) => {
                let (z, m) = momentum::step(z, m, &c.beta_attn, &c.eta_attn, attend)?;
                match &c.ffn {
                    Some((beta, eta)) => {
                        let (z, m) = momentum::step(&z, Some(&m), beta, eta, feed)?;
                        Ok((z, Some(m)))
                    }
                    None => Ok(((&z + feed(&z)?)?, Some(m))),
                }
            }
            Residual::Nesterov(c) => {
                let (z, m) = nesterov::step(z, m, &c.beta_attn, &c.eta_attn, attend)?;
                match &c.ffn {
                    Some((beta, eta)) => {
                        let (z, m) = nesterov::step(&z, Some(&m), beta, eta, feed)?;
                        Ok((z, Some(m)))
                    }
                    None => Ok(((&z + feed(&z)?)?, Some(m))),
                }
            }
        }
    }

    /// The per-head queries of the normalised state, RMS-normalised per head, `[B, H, N, d_h]`:
    /// the subspace projections on which effective rank and angle are measured.
    pub fn normalised_queries(&self, z: &Tensor) -> Result<Tensor> {
        let q = self.attention.projections().queries(&self.attn_norm.forward(z)?)?;
        Ok(rms_norm(&q, None, NORM_EPS)?)
    }

    /// The attention energy of the state `z` over its full context, per sample, `[B]`.
    pub fn attention_energy(&self, z: &Tensor) -> Result<Tensor> {
        let x = self.attn_norm.forward(z)?;
        self.attention.energy(&x, &x, false)
    }
}
