//! ReLU feedforward, Hyper-SET's default (seed 000, Eq. 5, 10, 11).
//!
//! `E_FF = -1/2 sum_i sum_m ReLU(d_m^T x_i)^2` (Eq. 5) and `-dE_FF/dU = ReLU(U)` (Eq. 10,
//! using `ReLU · 1[· > 0] = ReLU`).

use kernels::Activation;
use plugin_api::candle::{Result, Tensor};

/// `ReLU(U)`.
pub fn activation(u: &Tensor) -> Result<Tensor> {
    u.relu()
}

/// `ReLU(RMSNorm(H))` of the hidden pre-activations `H` as one fused op.
pub fn fused_normed(hidden: &Tensor, gain: Option<&Tensor>, eps: f64) -> Result<Tensor> {
    kernels::normed_activation(hidden, gain, eps, Activation::Relu)
}

/// `-1/2 sum ReLU(U)^2` per sample.
pub fn energy(u: &Tensor) -> Result<Tensor> {
    u.relu()?.sqr()?.flatten_from(1)?.sum(1)? * -0.5
}
