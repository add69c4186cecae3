//! Nesterov's accelerated gradient (seed 001, Section 3.1, Eq. 9):
//! `z~ = z - beta p`, `p' = beta p + grad F(z~)`, `z' = z - eta p'`.
//!
//! Eq. 9 writes the look-ahead without `eta` because seed 001's `eta` starts at 1. Here
//! `eta` is Hyper-SET's learned step (per token and channel, zero at initialisation), so the
//! look-ahead is taken where the momentum part of the next move would land,
//! `z~ = z - eta beta p` (Sutskever et al., 2013, whose velocity is `-eta p`); at `eta = 1`
//! it is Eq. 9's. The update of `p` and `z` is then momentum's (module `momentum`).

use super::{Beta, OptimizerState};
use crate::step_size::StepSize;
use kernels::Kernels;
use plugin_api::candle::Tensor;
use plugin_api::Result;

/// The look-ahead point `z - eta beta p` (`z` itself while `p` is zero).
pub fn lookahead(state: &OptimizerState, beta: Beta, z: &Tensor, step: &StepSize, kernels: Kernels) -> Result<Tensor> {
    match &state.velocity {
        Some(p) => step.apply(z, beta.scale(p)?, true, kernels),
        None => Ok(z.clone()),
    }
}
