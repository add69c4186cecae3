//! The MLP potential `phi(z) = integral_{-inf}^z SiLU(t) dt` (seed 002 Algorithm 1), so that
//! `phi' = SiLU` turns the gradient of the element-wise energy (Eq. 7-8) into a SiLU-gated MLP.
//!
//! Closed form (notes-cem.md §6): `phi(z) = z softplus(z) + Li2(-e^z)`, whose derivative is
//! `softplus(z) + z sigmoid(z) - softplus(z) = SiLU(z)`, with `phi(-inf) = 0`. The dilogarithm
//! is evaluated with candle ops only, so autograd differentiates `phi` on any device:
//!
//! - `z <= 0`: `Li2(-e^z) = L(-softplus(z))`, where `L(u) = sum_n B_n u^(n+1) / (n+1)!` is the
//!   Bernoulli series of `Li2(x)` in `u = -ln(1 - x)` (radius `2 pi`; here `|u| <= ln 2`, so 21
//!   terms reach double precision);
//! - `z > 0`: the inversion `Li2(-e^z) = -pi^2/6 - z^2/2 - Li2(-e^{-z})` gives
//!   `phi(z) = z^2/2 + z softplus(-z) - pi^2/6 - L(-softplus(-z))`.
//!
//! Each branch is evaluated on inputs clamped to its own half-line, so neither overflows and
//! the unselected branch passes exactly zero gradient.

use plugin_api::candle::Tensor;
use plugin_api::Result;
use std::f64::consts::PI;

/// Bernoulli numbers `B_0 ..= B_20` (with `B_1 = -1/2`).
const BERNOULLI: [f64; 21] = [
    1.0,
    -0.5,
    1.0 / 6.0,
    0.0,
    -1.0 / 30.0,
    0.0,
    1.0 / 42.0,
    0.0,
    -1.0 / 30.0,
    0.0,
    5.0 / 66.0,
    0.0,
    -691.0 / 2730.0,
    0.0,
    7.0 / 6.0,
    0.0,
    -3617.0 / 510.0,
    0.0,
    43867.0 / 798.0,
    0.0,
    -174611.0 / 330.0,
];

/// `L(u) = sum_{n=0}^{20} B_n u^(n+1) / (n+1)!`, i.e. `Li2(1 - e^{-u})`, in Horner form.
fn dilog_series(u: &Tensor) -> Result<Tensor> {
    let mut factorial = 1.0;
    let coefficients: Vec<f64> = BERNOULLI
        .iter()
        .enumerate()
        .map(|(n, b)| {
            factorial *= (n + 1) as f64;
            b / factorial
        })
        .collect();
    // u (c_0 + u (c_1 + ... + u c_20))
    let mut acc = u.zeros_like()?;
    for c in coefficients.iter().rev() {
        acc = ((acc * u)? + *c)?;
    }
    Ok((acc * u)?)
}

/// `ln(1 + e^z)` for `z <= 0` (where `e^z <= 1` cannot overflow).
fn softplus_nonpositive(z: &Tensor) -> Result<Tensor> {
    Ok((z.exp()? + 1.0)?.log()?)
}

/// `phi(z) = integral_{-inf}^z SiLU(t) dt`, element-wise and differentiable (`phi' = SiLU`).
pub fn phi(z: &Tensor) -> Result<Tensor> {
    let z_neg = z.minimum(0.0)?;
    let z_pos = z.maximum(0.0)?;
    // z <= 0: z softplus(z) + L(-softplus(z))
    let sp = softplus_nonpositive(&z_neg)?;
    let negative = ((&z_neg * &sp)? + dilog_series(&sp.neg()?)?)?;
    // z > 0: z^2/2 + z softplus(-z) - pi^2/6 - L(-softplus(-z))
    let sp = softplus_nonpositive(&z_pos.neg()?)?;
    let positive = ((((z_pos.sqr()? * 0.5)? + (&z_pos * &sp)?)? - PI * PI / 6.0)? - dilog_series(&sp.neg()?)?)?;
    Ok(z.gt(0.0)?.where_cond(&positive, &negative)?)
}
