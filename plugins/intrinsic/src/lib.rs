//! Transformers as intrinsic optimizers: attention layers derived as optimisation steps on
//! a global energy (seed 001, "Transformers as Intrinsic Optimizers: Forward Inference
//! through the Energy Principle", and notes-intrinsic-optimizers.md).
//!
//! The seed reads a Transformer block as one step of an optimiser on an energy
//! `F([E_1, ..., E_N])` of a query `z` against the tokens `h_i` (Eq. 1-2, Table 1): the
//! residual stream is the iterate, the attention branch the (negative) gradient. Changing the
//! local energy, the global energy or the optimiser gives the attentions of this family, all
//! in GPT-style pre-norm blocks (attention sub-layer, then a GELU MLP; App. A.4):
//!
//! | `attention=` | seed | optimiser on which energy | file |
//! |---|---|---|---|
//! | `softmax` | Eq. 5-6 | gradient step on the free energy `-(1/H) sum_h T log sum_i e^{q.k/T}` | `attention/softmax.rs` |
//! | `linear` | Eq. 3 | gradient step on `-(T/2) sum_i (z^T W h_i)^2` | `attention/linear.rs` |
//! | `gated_linear` | Eq. 4 | gradient step on `-(T/2) sum_i gamma_i (z^T W h_i)^2` | `attention/gated_linear.rs` |
//! | `momentum` (MomenMHA) | Eq. 8 | momentum descent, softmax branch as gradient | `attention/momentum.rs` |
//! | `nesterov` (NagMHA) | Eq. 9 | Nesterov descent (look-ahead) | `attention/nesterov.rs` |
//! | `newton` (MHA2nd1st; MHA2nd with `newton = full`) | Eq. 16-24 | per-head Newton step, first-order Taylor inverse (Eq. 24) or exact inverse (Eq. 21) | `attention/newton.rs` |
//! | `light_newton` (LightMHA2nd1st) | App. A.3.2 | Newton step on the dot-product bound | `attention/light_newton.rs` |
//!
//! The layer is recurrent like the other plugins: `layers` = k distinct blocks, block `b`
//! applied `iterations / k` times in a row ([`plugin_api::BlockSchedule`]); k = L gives the
//! seed's GPT stack. The momentum buffer of MomenMHA / NagMHA starts at zero and runs
//! through every sub-layer of every iteration.
//!
//! Choices where the seed is silent or ambiguous (notes §2-§4, UNSPECIFIED / UNSURE):
//!
//! - Block layout: GPT-2 (notes §2.4): pre-LayerNorm (`norm = layer`, or RMSNorm with
//!   `norm = rms`), biases in projections, MLP and LayerNorms (`bias`), GELU (tanh form) MLP of
//!   width `ff_ratio * d`. The final LayerNorm, embeddings, positions and head belong to the
//!   task. Dropout (the seed uses 0.1, placement not given), in training passes only
//!   (`Pass::train`): `dropout` on each branch output and `attn_dropout` on the attention
//!   probabilities (both default 0), see `dropout`.
//! - Key bias: omitted for the softmax-scored kinds (`softmax`, `momentum`, `nesterov`,
//!   `light_newton`): `q . (k_i + b)` shifts all scores of a query equally, so a key bias
//!   would never receive a gradient. GPT-2 has it; the counts differ by `d` per block.
//! - Temperatures: `T = sqrt(d_h)` fixed for the softmax kinds (Section 3.1) and for
//!   `light_newton` (UNSPECIFIED there); head-wise learnable `T_h` initialised to
//!   `sqrt(newton_temperature * d_h)`, i.e. `sqrt(2 d_h)`, for `newton` (App. A.3.1).
//! - Momentum (Eq. 8-9): learnable scalars `beta`, `eta` per sub-layer of each distinct block
//!   (shape UNSPECIFIED), initialised to `momentum_beta = 0.9`, `momentum_eta = 1.0`; the MLP is
//!   a momentum step too (`momentum_ffn`, the seed's choice), and for `nesterov` it is
//!   evaluated at its own look-ahead point (INFERRED).
//! - MHA2nd1st's "temperature in b_h ... initialisation as 0.01" (UNSURE): by default a
//!   head-wise multiplier `c_h = 1/T_b` starting at 0.01 (`newton_b_form = multiplier`);
//!   `newton_b_form = temperature` divides by a learnable `T_b` starting at `newton_b_init`.
//!   The inverse `(W_{Q,h} W_{Q,h}^T)^-1` is exact and differentiable (`inverse`);
//!   `newton_ridge` adds `eps I` first (0, as the seed).
//! - LightMHA2nd1st: head-wise `tau_h` initialised to `light_tau = 0.01`.
//! - Linear attention is unnormalised (Eq. 3); multi-head by averaging the energy over heads.
//! - Gated linear attention: the seed gives no `gamma`; here a data-dependent scalar forget
//!   gate per head, `gamma_{t,i} = prod_{i<j<=t} sigmoid(h_j w + c)` (`c` starts at `gate_bias`),
//!   the decay of a gated linear recurrence (GLA / Mamba-2 style); symmetric without a mask.
//!
//! Diagnostics: the energy of each state is the block's `F` on its normalised input over the
//! full context; the head projections are the RMS-normalised per-head queries. The gradient
//! identities that hold exactly are listed in `verify.rs`.

mod attention;
mod block;
mod config;
mod dropout;
mod inverse;
mod model;
mod ops;
mod verify;

use config::{params, IntrinsicConfig};
use model::Intrinsic;
use plugin_api::{export_plugin, Declaration, Result};

fn declare() -> Result<Declaration> {
    Ok(Declaration::layer(
        "intrinsic",
        env!("CARGO_PKG_VERSION"),
        "Transformers as intrinsic optimizers: softmax, linear, gated linear, momentum, Nesterov and Newton attentions",
        params(),
        |cfg, vb| Intrinsic::new(&IntrinsicConfig::from_config(cfg)?, vb),
    )
    .with_causal_mask()
    // Measured peak of a few training steps: the second-order attention keeps its inverse terms.
    .with_activation_floats(40)
    .with_validator(|cfg| IntrinsicConfig::from_config(cfg).map(|_| ())))
}

export_plugin!(declare);

#[cfg(test)]
mod dropout_tests;
#[cfg(test)]
mod newton_tests;
#[cfg(test)]
mod tests;
