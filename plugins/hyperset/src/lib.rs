//! Hyper-SET: the Hyperspherical Energy Transformer as a layer plugin.
//!
//! Seed 000 ("Hyper-SET: Designing Transformers via Hyperspherical Energy Minimization")
//! and notes-hyperset.md. Each iteration is one gradient step on the attention energy
//! (Eq. 3-4, update Eq. 9) followed by one on the feedforward energy (Eq. 5, update Eq. 11),
//! with per-token channel-wise step sizes from a small network (Eq. 12).

mod block;
mod energy;
mod model;
mod step_size;
mod verify;

use model::{HyperSet, HyperSetConfig};
use plugin_api::{export_plugin, Declaration, ParamSpec, Result};

fn params() -> Vec<ParamSpec> {
    vec![
        ParamSpec::int("d", 128, 2, 8192, "token width d"),
        ParamSpec::int("heads", 4, 1, 256, "attention heads H (p = d / H)"),
        ParamSpec::int("iterations", 8, 1, 1024, "recurrent depth L used in training"),
        ParamSpec::int("ff_ratio", 4, 1, 64, "feedforward width M = ff_ratio * d"),
        ParamSpec::int("layers", 1, 1, 1024, "k distinct layers, each iterated L / k times"),
        ParamSpec::int("time_dim", 512, 2, 8192, "sinusoidal iteration embedding size (even)"),
        ParamSpec::choice("step_cond", "x0", &["x0", "xt"], "step sizes conditioned on the layer input X0 or the current state Xt"),
        ParamSpec::choice(
            "step_init",
            "last",
            &["last", "all"],
            "zero-initialise only the step network's output Linear (last) or all its Linears (all, as the authors' code)",
        ),
        ParamSpec::bool("norm_gain", true, "learnable gains on the per-head and feedforward RMSNorms"),
        ParamSpec::float("init_std", 0.02, 0.0, 10.0, "standard deviation of the N(0, s^2) init of W and D"),
    ]
}

fn declare() -> Result<Declaration> {
    Ok(Declaration::layer(
        "hyperset",
        env!("CARGO_PKG_VERSION"),
        "Hyper-SET: alternating gradient steps on hyperspherical attention and feedforward energies",
        params(),
        |cfg, vb| HyperSet::new(&HyperSetConfig::from_config(cfg)?, vb),
    )
    .with_validator(|cfg| HyperSetConfig::from_config(cfg).map(|_| ())))
}

export_plugin!(declare);

#[cfg(test)]
mod tests;
