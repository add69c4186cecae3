//! NagMHA: the attention (and MLP) branch evaluated at Nesterov's look-ahead point (seed 001,
//! Section 3.1, Eq. 9).
//!
//! Eq. 9: `z~ = z - beta p`, `p' = beta p + grad_{z~} F`, `z' = z - eta p'`, with
//! `grad_{z~} F` replaced by `-f~`, the softmax branch evaluated at `z~`. With `m = -p`:
//! `z~ = z + beta m`, `m' = beta m + f(z~)`, `z' = z + eta m'`. Unrolled,
//! `z^(L) = z^(0) + sum_k (eta sum_{n=0}^{L-1-k} beta^n) f~^(k)` and
//! `z~^(L) = z^(0) + sum_k (eta sum_{n=0}^{L-1-k} beta^n + beta^(L-k)) f~^(k)` (Figs. 2-3).
//!
//! "The remaining design details ... are similar to those in MomenMHA" (Section 3.1): the same
//! learnable `beta`, `eta` (initialised 0.9 and 1.0) and the same treatment of the MLP, whose
//! branch is also evaluated at its own look-ahead point (notes §3.2, INFERRED). In self-
//! attention the whole look-ahead sequence `Z~` supplies queries, keys and values; the
//! block's output is `z`, not `z~`.

use super::momentum::accumulate;
use plugin_api::candle::{Result, Tensor};

/// The look-ahead point `z~ = z - beta p = z + beta m` (the first line of Eq. 9).
pub fn lookahead(z: &Tensor, m: Option<&Tensor>, beta: &Tensor) -> Result<Tensor> {
    match m {
        Some(m) => kernels::add_times_scalar(z, beta, m),
        None => Ok(z.clone()),
    }
}

/// One step of Eq. 9: returns `(z + eta m', m')` with `m' = beta m + f(z + beta m)`.
pub fn step(
    z: &Tensor,
    m: Option<&Tensor>,
    beta: &Tensor,
    eta: &Tensor,
    branch: impl FnOnce(&Tensor) -> plugin_api::Result<Tensor>,
) -> plugin_api::Result<(Tensor, Tensor)> {
    let f = branch(&lookahead(z, m, beta)?)?;
    let m_next = accumulate(m, beta, f)?;
    let z_next = kernels::add_times_scalar(z, eta, &m_next)?;
    Ok((z_next, m_next))
}
