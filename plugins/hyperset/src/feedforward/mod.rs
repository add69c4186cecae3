//! The feedforward sub-step's operators (seed 000, Appendix G.1, Eq. 20 and Table 20).
//!
//! Every variant ascends `sum_i g( sum_m h(d_m^T x_i) )`, i.e. descends
//!
//! `E_FF = -sum_i g( sum_m h(d_m^T x_i) )`   (Eq. 20)
//!
//! on the normalised hidden units `U~ = RMSNorm(D^T X)` (Eq. 11), and the layer adds
//! `gamma D a(U~)` with `a(U~) = -dE_FF/dU~`. Each file holds one choice of `g` and `h`:
//!
//! | option    | file         | `g(x)`    | `h(x)`             | `a(U~)`                        | source            |
//! |-----------|--------------|-----------|--------------------|--------------------------------|-------------------|
//! | `relu`    | `relu.rs`    | `x`       | `ReLU(x)^2 / 2`    | `ReLU(U~)`                     | Eq. 5, 10, 11     |
//! | `gelu`    | `gelu.rs`    | `x`       | `∫ GELU`           | `GELU(U~)`                     | authors' code (§9)|
//! | `softmax` | `softmax.rs` | `log x`   | `exp(x)`           | `softmax(U~)` over the M units | Table 20          |
//! | `gated`   | `gated.rs`   | `x^2 / 2` | `Φ(x) = σ(x)`      | `(sum_m σ(U~)) ⊙ σ'(U~)`        | Table 20          |
//!
//! All four have an energy, so all four have gradient identities. The GELU energy is not in
//! the seeds: it is derived here (see `gelu.rs`), and its `h` is not non-decreasing as
//! Eq. 20 asks, because GELU is negative for negative inputs.

pub mod gated;
pub mod gelu;
pub mod relu;
pub mod softmax;

use kernels::Kernels;
use plugin_api::candle::Tensor;
use plugin_api::{config_error, Result};

/// Which feedforward energy the layer descends (option `feedforward`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FeedforwardKind {
    /// ReLU feedforward, the default (Eq. 5, 10, 11).
    Relu,
    /// GELU feedforward, as in the authors' image-classification code (notes-hyperset.md §9).
    Gelu,
    /// Softmax feedforward (Table 20).
    Softmax,
    /// Gated feedforward with `Φ = σ` (Table 20).
    Gated,
}

impl FeedforwardKind {
    /// The option values, in the order of [`FeedforwardKind`].
    pub const NAMES: [&'static str; 4] = ["relu", "gelu", "softmax", "gated"];

    /// Parses an option value.
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "relu" => Ok(FeedforwardKind::Relu),
            "gelu" => Ok(FeedforwardKind::Gelu),
            "softmax" => Ok(FeedforwardKind::Softmax),
            "gated" => Ok(FeedforwardKind::Gated),
            other => Err(config_error(format!(
                "feedforward = {other} is unknown; choose one of {}",
                Self::NAMES.join(" | ")
            ))),
        }
    }

    /// `a(U) = -dE_FF/dU` for hidden units `U` (`[B, N, M]`).
    pub fn activation(self, u: &Tensor) -> Result<Tensor> {
        Ok(match self {
            FeedforwardKind::Relu => relu::activation(u)?,
            FeedforwardKind::Gelu => gelu::activation(u)?,
            FeedforwardKind::Softmax => softmax::activation(u)?,
            FeedforwardKind::Gated => gated::activation(u)?,
        })
    }

    /// `a(RMSNorm(H))` of the hidden pre-activations `H` (`[B, N, M]`) with the RMSNorm
    /// `gain`: the activated units of Eq. 11. With fused kernels ReLU, GELU and softmax run
    /// their variant's fused op (`fused_normed` in its file); gated, and every variant with
    /// composed kernels, are built from candle's primitives.
    pub fn normed_activation(
        self,
        hidden: &Tensor,
        gain: Option<&Tensor>,
        eps: f64,
        kernels: Kernels,
    ) -> Result<Tensor> {
        Ok(match (kernels, self) {
            (Kernels::Fused, FeedforwardKind::Relu) => relu::fused_normed(hidden, gain, eps)?,
            (Kernels::Fused, FeedforwardKind::Gelu) => gelu::fused_normed(hidden, gain, eps)?,
            (Kernels::Fused, FeedforwardKind::Softmax) => softmax::fused_normed(hidden, gain, eps)?,
            (kernels, kind) => kind.activation(&kernels.rms_norm(hidden, gain, eps)?)?,
        })
    }

    /// The activation of the kernels' one-op feedforward (`kernels::normed_feedforward`),
    /// for the variants whose `a` is an element-wise function there: ReLU and GELU.
    pub fn fused_activation(self) -> Option<kernels::Activation> {
        match self {
            FeedforwardKind::Relu => Some(kernels::Activation::Relu),
            FeedforwardKind::Gelu => Some(kernels::Activation::Gelu),
            FeedforwardKind::Softmax | FeedforwardKind::Gated => None,
        }
    }

    /// The option value naming this variant.
    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }

    /// `E_FF` of hidden units `U` (`[B, N, M]`), one value per sample (`[B]`).
    pub fn energy(self, u: &Tensor) -> Result<Tensor> {
        Ok(match self {
            FeedforwardKind::Relu => relu::energy(u)?,
            FeedforwardKind::Gelu => gelu::energy(u)?,
            FeedforwardKind::Softmax => softmax::energy(u)?,
            FeedforwardKind::Gated => gated::energy(u)?,
        })
    }

    /// The update's formula and its source, for the names of gradient identities.
    pub fn formula(self) -> (&'static str, &'static str) {
        match self {
            FeedforwardKind::Relu => ("ReLU", "Eq. 10"),
            FeedforwardKind::Gelu => ("GELU", "E_FF = -sum H(U), H' = GELU"),
            FeedforwardKind::Softmax => ("softmax", "Table 20"),
            FeedforwardKind::Gated => ("gate", "Table 20"),
        }
    }
}
