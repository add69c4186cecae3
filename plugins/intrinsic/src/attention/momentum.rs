//! MomenMHA: the attention (and MLP) branch as the gradient of momentum descent (seed 001,
//! Section 3.1, Eq. 8).
//!
//! Eq. 8: `p^(k+1) = beta p^(k) + grad_z F`, `z^(k+1) = z^(k) - eta p^(k+1)`, `p^(0) = 0`,
//! with `grad_z F` replaced by `-f^(k)`, the pure attention branch (softmax, `T = sqrt(d_h)`).
//! Writing `m = -p`: `m <- beta m + f(z)`, `z <- z + eta m`. Unrolled,
//! `z^(L) = z^(0) + sum_k (eta sum_{n=0}^{L-1-k} beta^n) f^(k)`: `L(L+1)/2` implicit skip
//! connections with geometric weights (Fig. 1).
//!
//! `beta` and `eta` are learnable, initialised to 0.9 and 1.0 (Section 3.1). Their shape is
//! not given (notes §3.1, UNSPECIFIED); here one scalar pair per sub-layer of each distinct
//! block. The MLP is treated the same way "to enable the momentum p to propagate through
//! the FFN layer as well", sharing the one buffer (`momentum_ffn`, default on). With
//! `beta = 0`, `eta = 1` the step is the plain residual update.

use plugin_api::candle::{Result, Tensor};

/// One step of Eq. 8: from `z` and the buffer `m = -p` (`None` for `p^(0) = 0`), returns
/// `(z + eta m', m')` with `m' = beta m + f(z)`. `beta`, `eta` are `[1]`.
pub fn step(
    z: &Tensor,
    m: Option<&Tensor>,
    beta: &Tensor,
    eta: &Tensor,
    branch: impl FnOnce(&Tensor) -> plugin_api::Result<Tensor>,
) -> plugin_api::Result<(Tensor, Tensor)> {
    let f = branch(z)?;
    let m_next = accumulate(m, beta, f)?;
    let z_next = kernels::add_times_scalar(z, eta, &m_next)?;
    Ok((z_next, m_next))
}

/// `beta m + f`, or `f` when the buffer is still zero.
pub fn accumulate(m: Option<&Tensor>, beta: &Tensor, f: Tensor) -> Result<Tensor> {
    match m {
        Some(m) => kernels::add_times_scalar(&f, beta, m),
        None => Ok(f),
    }
}
