//! The Transformer baseline of the Hyper-SET seeds (notes-hyperset.md §3): pre-RMSNorm,
//! separate Q/K/V/O projections (or one shared QKV matrix), ReLU MLP, no biases, one layer
//! of parameters iterated L times like the energy layers it is compared with.
//!
//! `attention_sign=reversed` subtracts the attention output instead of adding it,
//! `X -= Attn(RMSNorm(X))`: the shared-QKV Transformer "with the attention update sign
//! reversed" of seed 000 Appendix F.3 (Fig. 13-14; notes-hyperset.md §5 item 4), whose
//! effective rank and average angle fall where the standard one's rise. Use it with
//! `shared_qkv=true` for that comparison. With the separate, learned output projection `W_o`
//! the reversal is a reparametrisation (reversed with `-W_o` is the standard layer, a test
//! checks it): trained from a sign-symmetric init it is the same model in distribution, so the
//! seed's contrast presumably comes from flipping the sign of a layer trained with the
//! standard one (UNSURE; the seed does not say).
//!
//! `kernels = fused` (the default) runs the RMSNorms, the projections, the softmax and the
//! ReLU as the fused CPU ops of `plugin-api/kernels` (one graph node each, hand-written
//! backward; the same values within f32 rounding); `kernels = composed` builds them from
//! candle's differentiable primitives as `plugin_api::ops` does.

mod block;
mod model;

use model::{Transformer, TransformerConfig};
use plugin_api::{export_plugin, Declaration, ParamSpec, Result};

fn params() -> Vec<ParamSpec> {
    vec![
        ParamSpec::int("d", 128, 2, 8192, "token width d"),
        ParamSpec::int("heads", 4, 1, 256, "attention heads H (p = d / H)"),
        ParamSpec::int("iterations", 8, 1, 1024, "recurrent depth L used in training"),
        ParamSpec::int("ff_ratio", 4, 1, 64, "MLP width = ff_ratio * d"),
        ParamSpec::int("layers", 1, 1, 1024, "k distinct layers, each iterated L / k times"),
        ParamSpec::bool("shared_qkv", false, "one matrix for queries, keys and values (separate output projection)"),
        ParamSpec::choice(
            "attention_sign",
            "standard",
            &["standard", "reversed"],
            "standard: X += Attn(X); reversed: X -= Attn(X) (seed 000 App. F.3, with shared_qkv=true)",
        ),
        ParamSpec::float("init_std", 0.02, 0.0, 10.0, "standard deviation of the N(0, s^2) weight init"),
        ParamSpec::choice(
            "kernels",
            "fused",
            &kernels::Kernels::NAMES,
            "fused CPU ops with hand-written backward (plugin-api/kernels) or candle's differentiable composition",
        ),
        ParamSpec::float("norm_eps", 1e-6, 1e-12, 1e-2, "epsilon of the RMSNorms (PyTorch's default: 1.1920929e-7)"),
    ]
}

fn declare() -> Result<Declaration> {
    Ok(Declaration::layer(
        "transformer",
        env!("CARGO_PKG_VERSION"),
        "Transformer baseline: pre-RMSNorm softmax attention and ReLU MLP, iterated",
        params(),
        |cfg, vb| Transformer::new(&TransformerConfig::from_config(cfg)?, vb),
    )
    .with_causal_mask()
    // Measured peak of a few training steps: a 4d MLP and the attention projections.
    .with_activation_floats(32)
    .with_validator(|cfg| TransformerConfig::from_config(cfg).map(|_| ())))
}

export_plugin!(declare);

#[cfg(test)]
mod tests;
