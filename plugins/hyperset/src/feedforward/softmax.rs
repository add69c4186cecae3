//! Softmax feedforward (seed 000, Appendix G.1, Table 20; Table 4 ablation).
//!
//! Eq. 20 with `g(x) = log x`, `h(x) = exp(x)`: `E_FF = -sum_i log sum_m exp(d_m^T x_i)`,
//! and `-dE_FF/dU = softmax(U)` over the `M` hidden units of each token (the table's
//! "column-wise" softmax in its column-major notation).

use plugin_api::candle::{Result, Tensor, D};
use plugin_api::ops::softmax;

/// `softmax(U)` over the last (hidden-unit) dimension.
pub fn activation(u: &Tensor) -> Result<Tensor> {
    softmax(u, D::Minus1)
}

/// `softmax(RMSNorm(H))` of the hidden pre-activations `H` with the fused ops.
pub fn fused_normed(hidden: &Tensor, gain: Option<&Tensor>, eps: f64) -> Result<Tensor> {
    kernels::softmax(&kernels::rms_norm(hidden, gain, eps)?, D::Minus1)
}

/// `-sum_i logsumexp_m(U_im)` per sample.
pub fn energy(u: &Tensor) -> Result<Tensor> {
    let max = u.max_keepdim(D::Minus1)?.detach();
    let lse = (u.broadcast_sub(&max)?.exp()?.sum_keepdim(D::Minus1)?.log()? + max)?;
    lse.flatten_from(1)?.sum(1)?.neg()
}
