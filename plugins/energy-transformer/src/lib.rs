//! The Energy Transformer of Hoover et al. 2023 ("Energy Transformer", NeurIPS 2023), as the
//! Hyper-SET seeds use it as a baseline (seed 000 Table 1, 16, 21, 22, Fig. 3a, Appendix H.1;
//! notes-hyperset.md §4).
//!
//! Each iteration normalises the tokens, `g = LN(x)` (one scalar gain and a per-channel bias),
//! and takes one step down the energy `E(g) = E_ATT(g) + E_HN(g)` with respect to `g`:
//! `x <- x - alpha dE/dg` (seed 000 H.1: ET "defines energy over pre-normalized tokens" and
//! "uses fixed step sizes"). The energies, by their role in Hoover et al.:
//!
//! - energy attention, `E_ATT = -(1/beta) sum_h sum_C log sum_{B != C} exp(beta K_hB . Q_hC)`
//!   with separate per-head query and key matrices and no value or output matrix;
//! - Hopfield network (dense associative memory), `E_HN = -1/2 sum_B sum_mu ReLU(xi_mu . g_B)^2`
//!   with `M = hopfield_ratio * d` memories.
//!
//! Where the seed authors differentiate with autograd (their `torch.func.grad_and_value`), the
//! gradient here is derived by hand (`block`), written with ordinary differentiable ops so
//! training backpropagates through it, and checked against candle's autograd in f64
//! (`verify`, `workbench verify`).
//!
//! Choices where the seeds leave details open, from the seed authors' baseline code
//! (`huyunzhe/hyper-set`, `layers/et.py`, `ETAttention`, `EnergyLayerNorm`; notes-hyperset.md's
//! `[CODE]`): `head_dim = d / heads`, `beta = 1 / sqrt(head_dim)`, `hopfield_ratio = 4`, no
//! biases, `Wq`, `Wk` from `N(0, 0.002^2)`, memories from PyTorch's default Linear init
//! `U(-1/sqrt(d), 1/sqrt(d))`, `alpha = 1` (their forward's default), one block iterated.
//! - UNSURE: Hoover et al. exclude `B = C` from the attention sum, the seed authors' code
//!   includes it; `attend_self` chooses (default false, Hoover et al.).
//! - Parameters per block: `6d^2 + d + 1` at the defaults; with the seeds' classifier this
//!   gives the published 2.39M (d = 512), 1.50M (d = 384) and 8.0M / 8.1M (d = 1152, CIFAR).
//! - No causal form: the key gradient `P^T Q` moves each token with the queries of later
//!   tokens, so `supports_causal()` is false and a causal pass is refused.
//!
//! Energies: `attention`, `hopfield` and `total` of `g = LN(x)` per sample; head projections
//! are the RMS-normalised per-head queries of `g`.

mod block;
mod model;
mod verify;

use model::{EnergyTransformer, EtConfig};
use plugin_api::{export_plugin, Declaration, ParamSpec, Result};

fn params() -> Vec<ParamSpec> {
    vec![
        ParamSpec::int("d", 128, 2, 8192, "token width d"),
        ParamSpec::int("heads", 4, 1, 256, "attention heads H"),
        ParamSpec::int("head_dim", 0, 0, 4096, "query/key width per head p (0: d / heads)"),
        ParamSpec::float("hopfield_ratio", 4.0, 0.0, 64.0, "Hopfield memories M = floor(hopfield_ratio * d)"),
        ParamSpec::float("beta", 0.0, 0.0, 1e3, "attention inverse temperature beta (0: 1 / sqrt(head_dim))"),
        ParamSpec::float("alpha", 1.0, 0.0, 100.0, "step size alpha of x <- x - alpha dE/dg"),
        ParamSpec::int("iterations", 8, 1, 1024, "recurrent depth L used in training"),
        ParamSpec::int("layers", 1, 1, 1024, "k distinct blocks, each iterated L / k times"),
        ParamSpec::bool(
            "attend_self",
            false,
            "include B = C in the attention energy's inner sum (Hoover et al.: false; the seed authors' code: true)",
        ),
        ParamSpec::float("init_std", 0.002, 0.0, 10.0, "standard deviation of the N(0, s^2) init of Wq and Wk"),
    ]
}

fn declare() -> Result<Declaration> {
    Ok(Declaration::layer(
        "energy-transformer",
        env!("CARGO_PKG_VERSION"),
        "Energy Transformer: gradient steps on energy attention + Hopfield energy of LayerNorm-ed tokens",
        params(),
        |cfg, vb| EnergyTransformer::new(&EtConfig::from_config(cfg)?, vb),
    )
    // Measured peak of a few training steps: the Hopfield and attention energies keep their gradients' intermediates.
    .with_activation_floats(32)
    .with_validator(|cfg| EtConfig::from_config(cfg).map(|_| ())))
}

export_plugin!(declare);

#[cfg(test)]
mod tests;
