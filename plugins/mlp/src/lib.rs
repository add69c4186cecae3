//! Attention-free MLP baselines of seed 002 Table 3 (notes-cem.md §5.3): the "Plain" and the
//! "Gated" MLP the recursive CEM MLP is compared with on Gaussian-process regression, as a layer
//! of their own so the table can be laid out as the seed's.
//!
//! Each block is pre-RMSNorm and residual, applied token by token (no token sees another, so a
//! pass is causal by construction):
//! - `kind=plain`: `x += W_d σ(W_u RMSNorm(x))`;
//! - `kind=gated`: `x += W_d ((W_g u) ∘ σ(W_u u))` with `u = RMSNorm(x)`, seed 002 Eq. (6).
//!
//! σ is the exact GELU. The seed leaves widths, depth and biases open (notes-cem.md §5.3:
//! its Plain and Gated have about 34K parameters); `hidden` sets the inner width, so that, for
//! example, a gated MLP with 2/3 the plain one's `hidden` has the plain one's parameters.

mod block;
mod model;

use model::{Mlp, MlpConfig};
use plugin_api::{export_plugin, Declaration, ParamSpec, Result};

fn params() -> Vec<ParamSpec> {
    vec![
        ParamSpec::int("d", 128, 2, 8192, "token width d"),
        ParamSpec::choice(
            "kind",
            "gated",
            &["gated", "plain"],
            "gated: W_d((W_g u) * gelu(W_u u)), seed 002 Eq. 6; plain: W_d gelu(W_u u)",
        ),
        ParamSpec::int("hidden", 256, 1, 65_536, "inner width of each MLP"),
        ParamSpec::int("iterations", 4, 1, 1024, "blocks applied in training (L)"),
        ParamSpec::int("layers", 4, 1, 1024, "k distinct blocks, each applied L / k times"),
        ParamSpec::float("init_std", 0.02, 0.0, 10.0, "standard deviation of the N(0, s^2) weight init"),
    ]
}

fn declare() -> Result<Declaration> {
    Ok(Declaration::layer(
        "mlp",
        env!("CARGO_PKG_VERSION"),
        "Attention-free baseline: plain or gated MLP blocks, pre-RMSNorm and residual (seed 002 Table 3)",
        params(),
        |cfg, vb| Mlp::new(&MlpConfig::from_config(cfg)?, vb),
    )
    .with_causal_mask()
    .with_validator(|cfg| MlpConfig::from_config(cfg).map(|_| ())))
}

export_plugin!(declare);

#[cfg(test)]
mod tests;
