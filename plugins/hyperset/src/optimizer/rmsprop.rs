//! RMSProp (Tieleman & Hinton, 2012; not in the seeds, see the module `optimizer`):
//! `v <- beta2 v + (1 - beta2) g^2`, `z <- z - eta g / sqrt(v + eps)`, `v^(0) = 0`, element-wise.
//! A positive diagonal rescaling of the gradient, so a small enough step still descends
//! wherever plain descent does.

use super::OptimizerState;
use plugin_api::candle::Tensor;
use plugin_api::Result;

/// Updates the second moment with `g` and returns `g / sqrt(v + eps)`.
pub fn direction(state: &mut OptimizerState, beta2: f64, eps: f64, gradient: Tensor) -> Result<Tensor> {
    let v = second_moment(state, beta2, &gradient)?;
    Ok((gradient / (v + eps)?.sqrt()?)?)
}

/// `v <- beta2 v + (1 - beta2) g^2`, kept in `state`; returns the new `v`.
pub fn second_moment(state: &mut OptimizerState, beta2: f64, gradient: &Tensor) -> Result<Tensor> {
    let fresh = (gradient.sqr()? * (1.0 - beta2))?;
    let v = match state.second_moment.take() {
        Some(v) => ((v * beta2)? + fresh)?,
        None => fresh,
    };
    state.second_moment = Some(v.clone());
    Ok(v)
}
