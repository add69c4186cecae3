//! CRATE, the white-box Transformer of Yu et al. 2023 ("White-Box Transformers via Sparse Rate
//! Reduction"), and its variant CRATE-T (Hu, Zou & Xu 2024, "An In-depth Investigation of
//! Sparse Rate Reduction in Transformer-like Models"), as the Hyper-SET seeds use them as
//! baselines (seed 000 Table 1, 2, 16, 21, 22, Fig. 3a; notes-hyperset.md §4).
//!
//! The seeds give no equations for CRATE; they cite the two papers and compare parameter
//! counts. The layer follows the papers' roles and, for every detail the seeds leave open, the
//! seed authors' baseline code (`huyunzhe/hyper-set`, `layers/crate.py`,
//! `layers/components/attention.py`, `feedforward.py`; notes-hyperset.md's `[CODE]`):
//!
//! - **Compression step** (Yu et al., multi-head subspace self-attention):
//!   `X_half = X + MSSA(LN(X))`, where each head projects with its block `U_k` of one shared
//!   matrix `U` (`[d, d]`: query = key = value = `LN(X) U_k`), attends with
//!   `softmax(p^-1/2 (X U_k)(X U_k)^T)` and returns through a learned output projection `W_o`
//!   with bias (`variant=crate`) or through `U` itself (`variant=crate_t`: `merged @ U` in
//!   row-major, which is `U^T` in the papers' column notation where the derivation has `U`;
//!   hence "T", as the authors' `CRATETAttention` does it).
//! - **Sparse-coding step** (Yu et al., one step of non-negative ISTA, no residual):
//!   `X_next = ReLU(Z + eta D^T (Z - D Z) - eta lambda)` with `Z = LN(X_half)` and a square
//!   dictionary `D`; `eta = lambda = 0.1` by default, fixed, as in the authors' code.
//! - LayerNorms with gain and bias before each step (the authors' `PreNorm`); `D` from the
//!   authors' Kaiming-uniform `U(-sqrt(6/d), sqrt(6/d))`. One set of parameters iterated `L`
//!   times, or `layers = k` distinct layers.
//! - Choice: `U` and `W_o` are drawn from `N(0, init_std^2)` like the workbench's Transformer;
//!   the authors' code keeps PyTorch's default Linear init, `U(-1/sqrt(d), 1/sqrt(d))` (standard
//!   deviation `1/sqrt(3d)`, about 0.05 at d = 128), which `init_std` can match.
//! - Parameters per layer: `3d^2 + 5d` (CRATE), `2d^2 + 4d` (CRATE-T); with the seeds'
//!   classification embedding and head they give the published 1.06M / 0.91M (d = 384) and
//!   3.00M / 3.04M (d = 768 / 896), checked in the tests.
//! - Causal passes mask the MSSA softmax (the ISTA step is per token), so the layer runs on
//!   language-modelling tasks; the derivation's energies assume a non-causal pass.
//!
//! Energies (per sample, on the state after each iteration; see `rate`): the compression term
//! `R^c(X; U)`, minus the expansion term `R(X)`, the sparsity `lambda ||X||_1`, and their sum,
//! the negative sparse rate reduction; `rate_eps` sets the precision `eps` (0.5 by default, a
//! choice: the seeds do not measure these terms). Head projections for effective rank and angle
//! are `LN(X) U_k`, RMS-normalised per head. `verify` states which claims hold exactly (ISTA),
//! approximately (MSSA on orthonormal bases), and which do not.

mod block;
mod model;
mod rate;
mod verify;

use model::{Crate, CrateConfig};
use plugin_api::{export_plugin, Declaration, ParamSpec, Result};

fn params() -> Vec<ParamSpec> {
    vec![
        ParamSpec::int("d", 128, 2, 8192, "token width d"),
        ParamSpec::int("heads", 4, 1, 256, "heads = subspaces K (p = d / K)"),
        ParamSpec::int("iterations", 8, 1, 1024, "recurrent depth L used in training"),
        ParamSpec::int("layers", 1, 1, 1024, "k distinct layers, each iterated L / k times"),
        ParamSpec::choice(
            "variant",
            "crate",
            &["crate", "crate_t"],
            "crate: learned output projection W_o after MSSA; crate_t: output through the shared U (no W_o)",
        ),
        ParamSpec::float("eta", 0.1, 0.0, 10.0, "ISTA step size eta"),
        ParamSpec::float("lambda", 0.1, 0.0, 100.0, "ISTA sparsity weight lambda (threshold eta * lambda)"),
        ParamSpec::float("init_std", 0.02, 0.0, 10.0, "standard deviation of the N(0, s^2) init of U and W_o"),
        ParamSpec::float("rate_eps", 0.5, 1e-6, 1e3, "precision eps of the coding-rate energies (diagnostics only)"),
    ]
}

fn declare() -> Result<Declaration> {
    Ok(Declaration::layer(
        "crate",
        env!("CARGO_PKG_VERSION"),
        "CRATE / CRATE-T: subspace self-attention (shared QKV) then one non-negative ISTA step, iterated",
        params(),
        |cfg, vb| Crate::new(&CrateConfig::from_config(cfg)?, vb),
    )
    .with_causal_mask()
    .with_validator(|cfg| CrateConfig::from_config(cfg).map(|_| ())))
}

export_plugin!(declare);

#[cfg(test)]
mod tests;
