//! Adam (Kingma & Ba, 2015; not in the seeds, see the module `optimizer`), element-wise:
//! `m <- beta m + (1 - beta) g`, `v <- beta2 v + (1 - beta2) g^2`, both from zero, and
//! `z <- z - eta m^ / sqrt(v^ + eps)` with the bias corrections `m^ = m / (1 - beta^k)`,
//! `v^ = v / (1 - beta2^k)` after `k` sub-steps. The first step is `g / sqrt(g^2 + eps)`,
//! about the sign of the gradient.

use super::rmsprop::second_moment;
use super::OptimizerState;
use plugin_api::candle::Tensor;
use plugin_api::Result;

/// Updates both moments with `g` and returns `m^ / sqrt(v^ + eps)`.
pub fn direction(state: &mut OptimizerState, beta: f64, beta2: f64, eps: f64, gradient: Tensor) -> Result<Tensor> {
    let v = second_moment(state, beta2, &gradient)?;
    let fresh = (&gradient * (1.0 - beta))?;
    let m = match state.velocity.take() {
        Some(m) => ((m * beta)? + fresh)?,
        None => fresh,
    };
    state.velocity = Some(m.clone());
    let k = state.steps as i32;
    let m_hat = (m / (1.0 - beta.powi(k)))?;
    let v_hat = (v / (1.0 - beta2.powi(k)))?;
    Ok((m_hat / (v_hat + eps)?.sqrt()?)?)
}
