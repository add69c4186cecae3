//! Gated feedforward with `Φ = σ` (seed 000, Appendix G.1, Table 20; Table 4 ablation).
//!
//! Eq. 20 with `g(x) = x^2 / 2`, `h = Φ`: `E_FF = -1/2 sum_i (sum_m Φ(d_m^T x_i))^2`, and
//! `-dE_FF/dU_im = (sum_m' Φ(U_im')) Φ'(U_im)`: each token's total activation gates the
//! derivative of every unit (notes-hyperset.md §2.1, row-major form).

use crate::phi::{phi, phi_prime};
use plugin_api::candle::{Result, Tensor, D};

/// `s ⊙ Φ'(U)` with `s = sum_m Φ(U)` per token (`[B, N, 1]`).
pub fn activation(u: &Tensor) -> Result<Tensor> {
    let total = phi(u)?.sum_keepdim(D::Minus1)?;
    phi_prime(u)?.broadcast_mul(&total)
}

/// `-1/2 sum_i (sum_m Φ(U_im))^2` per sample.
pub fn energy(u: &Tensor) -> Result<Tensor> {
    phi(u)?.sum(D::Minus1)?.sqr()?.sum(1)? * -0.5
}
