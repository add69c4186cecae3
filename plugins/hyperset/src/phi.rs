//! The element-wise map Φ of seed 000's alternative energies (Appendix G.1, Tables 19-20):
//! "in practice, we choose it as the sigmoid function σ(x) = 1 / (1 + exp(-x))".

use plugin_api::candle::{Result, Tensor};
use plugin_api::candle_nn;

/// `Φ(x) = σ(x)`, element-wise (candle-nn's sigmoid, which has a backward pass).
pub fn phi(x: &Tensor) -> Result<Tensor> {
    candle_nn::ops::sigmoid(x)
}

/// `Φ'(x) = σ(x) (1 - σ(x))`, element-wise.
pub fn phi_prime(x: &Tensor) -> Result<Tensor> {
    let s = phi(x)?;
    &s * s.affine(-1.0, 1.0)?
}
