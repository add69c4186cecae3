//! Causal Energy Minimization (CEM): Transformer layers recast as gradient steps on energies.
//!
//! Seed 002 ("Recasting Transformer Layers as Energy Models") and notes-cem.md. Each block
//! runs two recursions, one after the other, on each token's state `x_i` (started at the
//! block input `h_i`), with keys and `gamma` computed once from the block input:
//!
//! - attention ([`attention`]): `T_att` preconditioned steps on the interaction energy
//!   `eps(x_i | h_{1:i}) = -tau sum_k log sum_{j<=i} exp(beta_kj^T x_i / tau + b_ijk)`
//!   (Eq. 1, 16; ALiBi bias of Appendix B), whose gradient (Eq. 2) with the ties
//!   `W^V = W^K`, `W^O = W^Q` (Eq. 5) is multi-head attention; `A_k = diag(d) + W_k^Q^T W_k^K`
//!   (Eq. 12) adds a KQ diagonal shared across heads;
//! - MLP ([`mlp`]): `T_mlp` preconditioned steps on the element-wise energy
//!   `xi(x_i | h_i) = -gamma_i^T phi(V x_i)`, `gamma_i = W h_i` (Eq. 7, 17), whose gradient
//!   (Eq. 8) with the tie `W^d = V^T` (Eq. 11) is a gated MLP with `phi' = SiLU` ([`phi`]);
//! - both steps are scaled by learned preconditioners `P = diag(softplus(d)) + U V^T + V U^T`
//!   (Eq. 13-15, [`preconditioner`]).
//!
//! Choices where the paper is ambiguous (notes-cem.md §8), each documented where it is made:
//! the recursion starts from the raw residual `x^(0) = h` and the in-loop RMSNorm shares the
//! block pre-norm's gain, so `T = 1`, `P = I`, `d = 0` is exactly a weight-tied Llama block
//! ([`block`]); the attention scale is `sqrt(D_h)` as written or `sqrt(D_r)` (`attn_scale`);
//! the KQ diagonal enters the scores only, as in Algorithm 1, or also the values, as the exact
//! energy gradient has it (`diag_value`); ALiBi is a penalty `-m_k |i - j|` with
//! `m_k = 2^(-8k/K)` and per-head learnable self / cross biases ([`alibi`]); the step sizes
//! `eta` default to 1.

#![warn(missing_docs)]

pub mod alibi;
pub mod attention;
pub mod block;
pub mod mlp;
pub mod model;
pub mod phi;
pub mod preconditioner;
mod verify;

use model::{Cem, CemConfig};
use plugin_api::{export_plugin, Declaration, ParamSpec, Result};

/// The hyperparameter schema of the `cem` layer.
pub fn params() -> Vec<ParamSpec> {
    vec![
        ParamSpec::int("d", 128, 2, 8192, "model width D_h"),
        ParamSpec::int("heads", 4, 1, 256, "attention heads K (head width D_r = d / heads)"),
        ParamSpec::int("layers", 4, 1, 1024, "k distinct CEM blocks"),
        ParamSpec::int("iterations", 4, 1, 1024, "blocks applied per pass; each block runs iterations / layers times"),
        ParamSpec::float("mlp_ratio", 8.0 / 3.0, 0.01, 64.0, "MLP width D_m = round(mlp_ratio * d) (Llama: 8/3)"),
        ParamSpec::bool("attention", true, "CEM attention sub-layer; false keeps only the CEM MLP (seed 002 Table 3)"),
        ParamSpec::int("attn_steps", 2, 1, 64, "T_eps: attention recursion steps per block (Eq. 16)"),
        ParamSpec::int("mlp_steps", 2, 1, 64, "T_xi: MLP recursion steps per block (Eq. 17)"),
        ParamSpec::float("attn_step_size", 1.0, 0.0, 100.0, "eta_eps: attention step size (Eq. 16)"),
        ParamSpec::float("mlp_step_size", 1.0, 0.0, 100.0, "eta_xi: MLP step size (Eq. 17)"),
        ParamSpec::choice(
            "preconditioner",
            "diagonal_low_rank",
            &["none", "diagonal", "diagonal_low_rank"],
            "learned preconditioners P_k, P_mlp (Eq. 13-15): identity, diag(softplus(d)), or diagonal + U V^T + V U^T",
        ),
        ParamSpec::int("precond_rank", 4, 1, 4096, "rank R of each attention head's preconditioner (paper: 4)"),
        ParamSpec::int("mlp_precond_rank", 16, 1, 4096, "rank R of the MLP preconditioner (paper: 16)"),
        ParamSpec::choice(
            "kq_diagonal",
            "shared",
            &["none", "shared", "per_head"],
            "diagonal d of A_k = diag(d_k) + W_k^Q^T W_k^K (Eq. 12): none, one shared by all heads, or one per head",
        ),
        ParamSpec::bool(
            "diag_value",
            false,
            "also apply the KQ diagonal to the values (exact energy gradient); false = scores only (Algorithm 1)",
        ),
        ParamSpec::choice(
            "attn_scale",
            "model",
            &["model", "head"],
            "temperature tau = sqrt(d) as written in Eq. 5 (model) or sqrt(d / heads) as in Llama (head)",
        ),
        ParamSpec::bool("alibi", true, "ALiBi distance penalty with learnable self / cross biases (Appendix B)"),
        ParamSpec::float("init_std", 0.02, 0.0, 10.0, "standard deviation of the N(0, s^2) init of W^Q, W^K, W, V"),
    ]
}

fn declare() -> Result<Declaration> {
    Ok(Declaration::layer(
        "cem",
        env!("CARGO_PKG_VERSION"),
        "CEM: tied attention and gated MLP as recursive preconditioned gradient steps on causal energies",
        params(),
        |cfg, vb| Cem::new(&CemConfig::from_config(cfg)?, vb),
    )
    .with_causal_mask()
    // Measured peak of a few training steps: the preconditioned MLP steps keep several hidden-width intermediates per iteration.
    .with_activation_floats(192)
    .with_validator(|cfg| CemConfig::from_config(cfg).map(|_| ())))
}

export_plugin!(declare);

#[cfg(test)]
mod descent_tests;
#[cfg(test)]
mod tests;
