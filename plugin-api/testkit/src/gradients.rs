//! Whether gradients reach every parameter: some fused candle ops have no backward and stop
//! gradients silently, so each plugin checks that none of its parameters is cut off.

use plugin_api::candle::backprop::GradStore;
use plugin_api::candle::{Tensor, Var};
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

/// Asserts that two computations of one function (a fused op and its composition) agree in
/// value and in the gradient of every variable of `vars` (`max |a - b| / max |b| < tolerance`,
/// the gradients of `sum(y * r)` for one random `r`), and that a variable has a gradient on
/// both sides or on neither. Returns how many gradients were compared, for the caller to
/// check that the ones it cares about were.
pub fn assert_same_gradients(
    label: &str,
    fused: &Tensor,
    composed: &Tensor,
    vars: &[(String, Var)],
    tolerance: f64,
) -> usize {
    let apart = crate::relative_max_diff(fused, composed);
    assert!(apart < tolerance, "{label}: values differ ({apart:e})");
    let r = crate::randn(0f32, 1.0, fused.shape(), fused.device()).unwrap().to_dtype(fused.dtype()).unwrap();
    let grads = |y: &Tensor| (y * &r).unwrap().sum_all().unwrap().backward().unwrap();
    let (g_fused, g_composed) = (grads(fused), grads(composed));
    let mut compared = 0;
    for (name, var) in vars {
        match (g_fused.get(var.as_tensor()), g_composed.get(var.as_tensor())) {
            (Some(a), Some(b)) => {
                let apart = crate::relative_max_diff(a, b);
                assert!(apart < tolerance, "{label}: gradient of {name} differs ({apart:e})");
                compared += 1;
            }
            (None, None) => {}
            (a, b) => panic!("{label}: {name} has a gradient on one side only ({}, {})", a.is_some(), b.is_some()),
        }
    }
    compared
}
