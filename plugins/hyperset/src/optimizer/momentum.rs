//! Momentum (seed 001, Section 3.1, Eq. 8):
//! `p^(k+1) = beta p^(k) + grad F(z^(k))`, `z^(k+1) = z^(k) - eta p^(k+1)`, `p^(0) = 0`,
//! with `eta` in the update of `z` (the seed's PyTorch-style form, its footnote 1). Unrolled,
//! every past gradient enters with the geometric weight `eta sum_n beta^n` (Fig. 1).

use super::{Beta, OptimizerState};
use plugin_api::candle::Tensor;
use plugin_api::Result;

/// Eq. 8's first line: `p <- beta p + g`; returns the new `p`, the direction `z` moves against.
pub fn direction(state: &mut OptimizerState, beta: Beta, gradient: Tensor) -> Result<Tensor> {
    let p = match state.velocity.take() {
        Some(p) => (beta.scale(&p)? + gradient)?,
        None => gradient,
    };
    state.velocity = Some(p.clone());
    Ok(p)
}
