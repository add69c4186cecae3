//! Hyper-SET: the Hyperspherical Energy Transformer as a layer plugin.
//!
//! Seed 000 ("Hyper-SET: Designing Transformers via Hyperspherical Energy Minimization")
//! and notes-hyperset.md. Each iteration is one gradient step on the attention energy
//! (Eq. 3-4, update Eq. 9) followed by one on the feedforward energy (Eq. 5, update Eq. 11),
//! with per-token channel-wise step sizes from a small network (Eq. 12).
//!
//! The variants of the paper are options, each in its own module:
//! - `attention`: bi-softmax (default), sigmoid and linear attention (Appendix G.1,
//!   Eq. 19, Table 19), module `attention`;
//! - `feedforward`: ReLU (default), GELU (the authors' classification code), softmax and
//!   gated (Eq. 20, Table 20), module `feedforward`;
//! - `step_sizes`: learned by the network of Eq. 12 in one of four forms (`step_net`), or
//!   fixed to `step_c` (Table 4), module `step_size`;
//! - `lora_rank`, `lora_scale`: depth-wise LoRA on `W` and `D` (§5.5, Appendix G.2,
//!   Table 5), module `lora`;
//! - `qkv_gains`: separate query/key/value RMSNorm gains (the classification model of the
//!   authors' code), module `block`;
//! - `layers`: k distinct blocks sharing the iterations (§5.4, Table 2);
//! - `kernels`: `fused` (default) runs the RMSNorms, the bi-softmax attention of normalised
//!   heads, the ReLU / GELU / softmax activations on normalised units and the step network's
//!   GELU as the fused CPU ops of `plugin-api/kernels` (one graph node each, hand-written
//!   backward; the same values within f32 rounding); `composed` builds every step from
//!   candle's differentiable primitives as `plugin_api::ops` does. The energies and the
//!   gradient identities of `verify` are always the composition. Each fused op sits with
//!   its variant (`attention::bisoftmax::fused_update`, `feedforward::*::fused_normed`).
//! - `optimizer` (with `beta`, `beta2`, `eps`): each sub-step as a step of gd (default),
//!   momentum or Nesterov (seed 001, Eq. 8-9), RMSProp or Adam, module `optimizer`;
//!   `learn_beta` makes momentum's and Nesterov's coefficient a parameter of each block.
//!
//! Layout: `config` reads and checks the options (`HyperSetConfig`), `block` is one
//! iteration (attention step, then feedforward step), `step_size` the step sizes, `model`
//! the layer: `k` blocks in a `plugin_api::BlockStack` sharing one step network, whose
//! block-local iteration index picks the step sizes and the LoRA adapters
//! (`BlockStack::run_local`).

mod attention;
mod block;
mod config;
mod energy;
mod feedforward;
mod lora;
mod model;
mod optimizer;
mod phi;
mod step_size;
mod verify;

use attention::AttentionKind;
use config::HyperSetConfig;
use feedforward::FeedforwardKind;
use model::HyperSet;
use optimizer::Optimizer;
use plugin_api::{export_plugin, Declaration, ParamSpec, Result};
use step_size::StepNetForm;

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
        ParamSpec::choice(
            "attention",
            "bisoftmax",
            &AttentionKind::NAMES,
            "attention energy: bi-softmax (Eq. 3), sigmoid or linear with Phi = sigmoid (Table 19, O(N p^2))",
        ),
        ParamSpec::choice(
            "feedforward",
            "relu",
            &FeedforwardKind::NAMES,
            "feedforward energy: ReLU (Eq. 5), GELU (authors' classification code), softmax or gated (Table 20)",
        ),
        ParamSpec::choice(
            "step_sizes",
            "learned",
            &["learned", "fixed"],
            "step sizes from the network of Eq. 12 (learned) or alpha = gamma = step_c (fixed, Table 4)",
        ),
        ParamSpec::float("step_c", 0.1, 0.0, 10.0, "the constant alpha = gamma of step_sizes=fixed (paper: 0.5, 0.1)"),
        ParamSpec::choice(
            "step_net",
            "plain",
            &StepNetForm::NAMES,
            "step network form: plain (Sudoku), normed (ImageNet), normed_cond (CIFAR), direct (MIM, time_dim = d)",
        ),
        ParamSpec::int("lora_rank", 0, 0, 8192, "rank r of depth-wise LoRA on W and D at every iteration (0 = off)"),
        ParamSpec::float("lora_scale", 4.0, 0.0, 10_000.0, "scaling factor s of the LoRA deltas W + s A B (paper: 4)"),
        ParamSpec::bool("qkv_gains", false, "separate query/key/value RMSNorm gains (the image-classification model)"),
        ParamSpec::choice(
            "kernels",
            "fused",
            &kernels::Kernels::NAMES,
            "fused CPU ops with hand-written backward (plugin-api/kernels) or candle's differentiable composition",
        ),
        ParamSpec::float("norm_eps", 1e-6, 1e-12, 1e-2, "epsilon of the layer's RMSNorms (PyTorch's default: 1.1920929e-7)"),
        ParamSpec::choice(
            "optimizer",
            "gd",
            &Optimizer::NAMES,
            "optimiser of each attention / feedforward sub-step: gd (Eq. 9, 11), momentum or nesterov (seed 001 \
             Eq. 8, 9), rmsprop or adam; its state runs through the pass from zero",
        ),
        ParamSpec::float(
            "beta",
            0.9,
            0.0,
            1.0,
            "momentum / nesterov coefficient, adam's first-moment decay, in [0, 1) (seed 001: 0.9)",
        ),
        ParamSpec::bool(
            "learn_beta",
            false,
            "momentum / nesterov: each block learns its coefficient, starting at beta (seed 001 learns it)",
        ),
        ParamSpec::float("beta2", 0.99, 0.0, 1.0, "rmsprop / adam second-moment decay, in [0, 1)"),
        ParamSpec::float("eps", 1e-8, 0.0, 1.0, "rmsprop / adam: g / sqrt(v + eps), eps > 0"),
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
mod kernel_tests;
#[cfg(test)]
mod optimizer_tests;
#[cfg(test)]
mod paper_counts;
#[cfg(test)]
mod test_support;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod variant_tests;
