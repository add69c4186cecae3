//! Scalar measures of tensors: sums, largest differences, and the relative error of a
//! gradient identity as `workbench verify` reports it.

use plugin_api::candle::{DType, Tensor};
use plugin_api::GradientIdentity;

/// The sum of `t`'s entries as f64, whatever its dtype (a loss, an energy, a squared norm).
pub fn scalar(t: &Tensor) -> f64 {
    t.to_dtype(DType::F64).unwrap().sum_all().unwrap().to_scalar::<f64>().unwrap()
}

/// The largest absolute entry of `t`, as f64; NaN when any entry is NaN. (candle's `max` skips
/// a NaN that is not the first entry, so a tolerance checked on it would pass a kernel that
/// writes NaNs.)
pub fn max_abs(t: &Tensor) -> f64 {
    entries(t).iter().map(|v| v.abs()).fold(0.0, larger)
}

/// Every entry of `t` as f64, in row-major order: for checks that must see each one (`all`
/// below a bound, all finite), which candle's `max` / `min` do not where there are NaNs.
pub fn entries(t: &Tensor) -> Vec<f64> {
    t.flatten_all().unwrap().to_dtype(DType::F64).unwrap().to_vec1::<f64>().unwrap()
}

/// The larger of two measures, NaN above every number (`f64::max` returns the other one), for
/// folds over differences: `diffs.fold(0.0, larger) < tolerance` fails on a NaN.
pub fn larger(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

/// The largest absolute entry of `a - b`: 0 exactly when two computations agree bit for bit.
pub fn max_abs_diff(a: &Tensor, b: &Tensor) -> f64 {
    max_abs(&(a - b).unwrap())
}

/// `max |a - b| / max |b|`: how far `a` is from the reference `b` relative to `b`'s scale, the
/// measure that compares the fused kernels with candle's composition of the same function.
pub fn relative_max_diff(a: &Tensor, b: &Tensor) -> f64 {
    max_abs_diff(a, b) / max_abs(b).max(1e-30)
}

/// `||descent + grad|| / ||grad||` for the identity's own claimed descent direction, the
/// gradient of its energy taken by autograd: what `workbench verify` reports (0 when the
/// direction is minus the gradient, 2 for the opposite sign).
pub fn relative_error(identity: &GradientIdentity) -> f64 {
    relative_error_of(identity, &identity.descent)
}

/// `relative_error` for another claimed `descent` of the same energy (a flipped sign, a missing
/// term), so that a test can show the measure rejects a wrong claim.
pub fn relative_error_of(identity: &GradientIdentity, descent: &Tensor) -> f64 {
    let grads = identity.energy.backward().unwrap();
    let grad = grads.get(&identity.variable).expect("the energy does not depend on the variable");
    let norm = |t: &Tensor| scalar(&t.sqr().unwrap()).sqrt();
    norm(&(descent + grad).unwrap()) / norm(grad)
}
