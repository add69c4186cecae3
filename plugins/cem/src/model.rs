//! The CEM layer: `k` distinct CEM blocks (Algorithm 1), block `b` applied for iterations
//! `b * I/k + 1 ..= (b + 1) * I/k` of a pass of `I` iterations ([`plugin_api::BlockSchedule`]).
//!
//! With `layers = iterations` each block runs once, the stack of seed 002 Table 1; fewer
//! layers iterate blocks, as the other layer families of the workbench do. (Within-block
//! recursion, Eq. 16-17, is `attn_steps` / `mlp_steps`, not `iterations`.)

use crate::block::{BlockEnergy, CemBlock};
use crate::verify;
use plugin_api::candle::Tensor;
use plugin_api::candle_nn::VarBuilder;
use plugin_api::{
    check_heads_and_layers, config_error, BlockStack, Config, DescentCheck, Energy, GradientIdentity, Layer, Pass,
    Result,
};
use std::sync::atomic::{AtomicBool, Ordering};

/// Which learned preconditioner scales the updates (Eq. 13).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreconditionerKind {
    /// `P = I`: plain gradient steps (Eq. 4, 10).
    Identity,
    /// `P = diag(softplus(d))`.
    Diagonal,
    /// `P = diag(softplus(d)) + U V^T + V U^T`.
    DiagonalLowRank,
}

/// How the diagonal of `A_k = diag(d_k) + W_k^Q^T W_k^K` (Eq. 12) is shared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KqDiagonal {
    /// No diagonal: `A_k = W_k^Q^T W_k^K` (Eq. 5).
    None,
    /// One `d` for every head (the paper's recommendation, Fig. 3b).
    Shared,
    /// One `d_k` per head.
    PerHead,
}

/// Validated hyperparameters of the CEM layer.
#[derive(Debug, Clone, PartialEq)]
pub struct CemConfig {
    /// Model width `D_h`.
    pub d: usize,
    /// Attention heads `K`.
    pub heads: usize,
    /// Distinct blocks `k`.
    pub layers: usize,
    /// Blocks applied per training pass.
    pub iterations: usize,
    /// MLP width `D_m` (`D_v` in Eq. 7).
    pub mlp_width: usize,
    /// Whether blocks have the CEM attention sub-layer (false: CEM-MLP only, Table 3).
    pub attention: bool,
    /// Attention recursion steps `T_eps` (Eq. 16).
    pub attn_steps: usize,
    /// MLP recursion steps `T_xi` (Eq. 17).
    pub mlp_steps: usize,
    /// Attention step size `eta_eps`.
    pub attn_step_size: f64,
    /// MLP step size `eta_xi`.
    pub mlp_step_size: f64,
    /// Preconditioner of both sub-layers.
    pub preconditioner: PreconditionerKind,
    /// Rank of each attention head's preconditioner.
    pub attn_rank: usize,
    /// Rank of the MLP preconditioner.
    pub mlp_rank: usize,
    /// KQ diagonal sharing.
    pub kq_diagonal: KqDiagonal,
    /// Whether the KQ diagonal also enters the update (energy-exact) or only the scores.
    pub diag_value: bool,
    /// Whether `tau = sqrt(D_h)` (true, Eq. 5 as written) or `sqrt(D_r)`.
    pub model_scale: bool,
    /// ALiBi penalty and learnable self / cross biases.
    pub alibi: bool,
    /// Standard deviation of the weight init.
    pub init_std: f64,
}

impl CemConfig {
    /// Reads and checks a configuration; every refusal names the problem and the fix.
    pub fn from_config(cfg: &Config) -> Result<Self> {
        let d = cfg.usize("d")?;
        let mlp_ratio = cfg.f64("mlp_ratio")?;
        let preconditioner = match cfg.str("preconditioner")? {
            "none" => PreconditionerKind::Identity,
            "diagonal" => PreconditionerKind::Diagonal,
            "diagonal_low_rank" => PreconditionerKind::DiagonalLowRank,
            other => {
                return Err(config_error(format!(
                    "preconditioner = {other} is unknown; use none, diagonal or diagonal_low_rank"
                )))
            }
        };
        let kq_diagonal = match cfg.str("kq_diagonal")? {
            "none" => KqDiagonal::None,
            "shared" => KqDiagonal::Shared,
            "per_head" => KqDiagonal::PerHead,
            other => {
                return Err(config_error(format!("kq_diagonal = {other} is unknown; use none, shared or per_head")))
            }
        };
        let c = CemConfig {
            d,
            heads: cfg.usize("heads")?,
            layers: cfg.usize("layers")?,
            iterations: cfg.usize("iterations")?,
            mlp_width: (mlp_ratio * d as f64).round() as usize,
            attention: cfg.bool("attention")?,
            attn_steps: cfg.usize("attn_steps")?,
            mlp_steps: cfg.usize("mlp_steps")?,
            attn_step_size: cfg.f64("attn_step_size")?,
            mlp_step_size: cfg.f64("mlp_step_size")?,
            preconditioner,
            attn_rank: cfg.usize("precond_rank")?,
            mlp_rank: cfg.usize("mlp_precond_rank")?,
            kq_diagonal,
            diag_value: cfg.bool("diag_value")?,
            model_scale: cfg.str("attn_scale")? == "model",
            alibi: cfg.bool("alibi")?,
            init_std: cfg.f64("init_std")?,
        };
        let heads = if c.attention { c.heads } else { 1 };
        check_heads_and_layers(c.d, heads, c.iterations, c.layers)?;
        if c.mlp_width == 0 {
            return Err(config_error(format!(
                "mlp_ratio = {mlp_ratio} gives an MLP width of round({mlp_ratio} * {d}) = 0; raise mlp_ratio"
            )));
        }
        if c.preconditioner == PreconditionerKind::DiagonalLowRank {
            if c.attn_rank > c.d {
                return Err(config_error(format!(
                    "precond_rank = {} exceeds d = {}; a low-rank preconditioner needs R <= d",
                    c.attn_rank, c.d
                )));
            }
            if c.mlp_rank > c.d {
                return Err(config_error(format!(
                    "mlp_precond_rank = {} exceeds d = {}; a low-rank preconditioner needs R <= d",
                    c.mlp_rank, c.d
                )));
            }
        }
        if c.diag_value && c.kq_diagonal == KqDiagonal::None {
            return Err(config_error(
                "diag_value = true applies the KQ diagonal to the values, but kq_diagonal = none; set kq_diagonal = shared or per_head, or diag_value = false",
            ));
        }
        Ok(c)
    }

    /// Head width `D_r = D_h / K`.
    pub fn head_dim(&self) -> usize {
        self.d / self.heads
    }

    /// Temperature `tau` of Eq. 1: `sqrt(D_h)` (Eq. 5 as written) or `sqrt(D_r)`.
    pub fn tau(&self) -> f64 {
        if self.model_scale {
            (self.d as f64).sqrt()
        } else {
            (self.head_dim() as f64).sqrt()
        }
    }
}

/// The CEM layer: `layers` blocks on the residual stream `[B, N, d]`.
pub struct Cem {
    cfg: CemConfig,
    blocks: BlockStack<CemBlock>,
    /// Masking of the most recent forward pass, which the energies of its states use.
    last_pass_causal: AtomicBool,
}

impl Cem {
    /// Creates the blocks' parameters under `block{b}.` in `vb`.
    pub fn new(cfg: &CemConfig, vb: VarBuilder) -> Result<Self> {
        let blocks = BlockStack::new(cfg.layers, &vb, |vb| CemBlock::new(cfg, vb))?;
        Ok(Cem { cfg: cfg.clone(), blocks, last_pass_causal: AtomicBool::new(true) })
    }

    /// The blocks, in order.
    pub fn blocks(&self) -> &[CemBlock] {
        self.blocks.blocks()
    }
}

impl Layer for Cem {
    fn width(&self) -> usize {
        self.cfg.d
    }

    fn train_iterations(&self) -> usize {
        self.cfg.iterations
    }

    /// CEM is a causal language-model layer: with the mask each token's energy depends on
    /// `h_{1:i}` only (Eq. 1).
    fn supports_causal(&self) -> bool {
        true
    }

    fn forward(&self, x0: &Tensor, pass: &mut Pass<'_>) -> Result<Tensor> {
        let causal = pass.causal;
        self.last_pass_causal.store(causal, Ordering::Relaxed);
        self.blocks.run(x0, pass, |block, x| block.forward(x, causal))
    }

    /// The energies that the block which ran iteration `t` descends when it is applied to the
    /// state `x` (block input `h = x`): `attention` and `feedforward` at the start of each
    /// recursion, `attention/step{s}` and `feedforward/step{s}` after `s` steps, per sample.
    /// The paper defines no joint energy, so there is no total. The mask is that of the most
    /// recent forward pass (causal before any pass).
    fn energies(&self, t: usize, iterations: usize, x: &Tensor, _x0: &Tensor) -> Result<Vec<Energy>> {
        let causal = self.last_pass_causal.load(Ordering::Relaxed);
        let trajectory = self.blocks.at(t, iterations)?.energy_trajectory(x, causal)?;
        Ok(trajectory
            .into_iter()
            .map(|BlockEnergy { sublayer, step, per_sample }| {
                let name = if step == 0 { sublayer.to_string() } else { format!("{sublayer}/step{step}") };
                Energy { name, per_sample }
            })
            .collect())
    }

    /// The RMS-normalised per-head queries `W_k^Q RMSNorm(x)` `[B, K, N, D_r]`: with the
    /// tie `W^O = W^Q` (Eq. 5) their subspaces are also where each head writes its update.
    fn head_projections(&self, t: usize, iterations: usize, x: &Tensor) -> Result<Option<Tensor>> {
        match self.blocks.at(t, iterations)?.attention() {
            Some(attention) => Ok(Some(attention.normalised_queries(x)?)),
            None => Ok(None),
        }
    }

    fn gradient_identities(&self, x: &Tensor) -> Result<Vec<GradientIdentity>> {
        self.blocks.gradient_identities(|block| verify::gradient_identities(block, x))
    }

    fn descent_checks(&self, x: &Tensor, step: f64) -> Result<Vec<DescentCheck>> {
        match self.blocks().first() {
            Some(block) => verify::descent_checks(block, x, step),
            None => Ok(Vec::new()),
        }
    }
}
