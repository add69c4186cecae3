//! GELU feedforward: the image-classification activation of the authors' code
//! (notes-hyperset.md §9, "gelu gives modest improvement over relu"; the paper text says ReLU).
//!
//! The seeds give no energy for it. One follows from Eq. 20 with `g(x) = x` and `h = H`,
//! the antiderivative of `GELU(u) = u Ncdf(u)` that vanishes at `-inf`:
//!
//! `H(u) = 1/2 (u^2 - 1) Ncdf(u) + 1/2 u npdf(u)`
//!
//! (`Ncdf`, `npdf`: standard normal distribution and density; `H' = u Ncdf(u)` by direct
//! differentiation). Then `E_FF = -sum_i sum_m H(d_m^T x_i)` and `-dE_FF/dU = GELU(U)`
//! exactly. `H` falls on `u < 0` (to `H(0) = -1/4`), so it is not the non-decreasing `h`
//! Eq. 20 asks for: negative pre-activations are pushed slightly further negative. The
//! exact (erf) GELU is used, as PyTorch's `nn.GELU()` default.

use kernels::Activation;
use plugin_api::candle::{Result, Tensor};
use std::f64::consts::{FRAC_1_SQRT_2, PI};

/// `GELU(U) = U Ncdf(U)`.
pub fn activation(u: &Tensor) -> Result<Tensor> {
    u.gelu_erf()
}

/// `GELU(RMSNorm(H))` of the hidden pre-activations `H` as one fused op.
pub fn fused_normed(hidden: &Tensor, gain: Option<&Tensor>, eps: f64) -> Result<Tensor> {
    kernels::normed_activation(hidden, gain, eps, Activation::Gelu)
}

/// `-sum H(U)` per sample, `H(u) = 1/2 (u^2 - 1) Ncdf(u) + 1/2 u npdf(u)`.
pub fn energy(u: &Tensor) -> Result<Tensor> {
    let cdf = (u * FRAC_1_SQRT_2)?.erf()?.affine(0.5, 0.5)?;
    let pdf = (u.sqr()? * -0.5)?.exp()? * (1.0 / (2.0 * PI).sqrt());
    let h = ((u.sqr()?.affine(1.0, -1.0)? * cdf)? + (u * pdf?)?)?;
    h.flatten_from(1)?.sum(1)? * -0.5
}
