//! Whether gradients reach every parameter: some fused candle ops have no backward and stop
//! gradients silently, so each plugin checks that none of its parameters is cut off.

use plugin_api::candle::backprop::GradStore;
use plugin_api::candle::Tensor;
use plugin_api::candle_nn::VarMap;

use crate::vars::named_vars;

/// Gradients of `sum(y * r)` for a random `r` of `y`'s shape (candle's unseeded generator): every
/// output entry carries weight, so a parameter gets no gradient only if no output depends on it.
pub fn random_projection_gradients(y: &Tensor) -> GradStore {
    let r = crate::randn(0f32, 1.0, y.shape(), y.device()).unwrap().to_dtype(y.dtype()).unwrap();
    (y * r).unwrap().sum_all().unwrap().backward().unwrap()
}

/// The size (sum of absolute entries, as f64) of every parameter's gradient in `grads`, in name
/// order, with 0 for a parameter that received none; tests assert that each one is positive.
pub fn gradient_sizes(map: &VarMap, grads: &GradStore) -> Vec<(String, f64)> {
    named_vars(map)
        .into_iter()
        .map(|(name, var)| {
            let size = grads.get(var.as_tensor()).map_or(0.0, |g| crate::scalar(&g.abs().unwrap()));
            (name, size)
        })
        .collect()
}
