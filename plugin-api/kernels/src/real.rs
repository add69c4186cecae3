//! The element types the fused kernels run on (f32 and f64), with the few scalar functions
//! they need.

use candle_core::WithDType;
use num_traits::Float;

/// A float element type of the fused kernels.
pub(crate) trait Real:
    WithDType + Float + num_traits::NumAssign + Send + Sync + std::iter::Sum + 'static
{
    /// `e^x` for the hot loops: the vectorisable polynomial of `vector.rs` for f32, libm
    /// for f64 (whose kernels serve the exactness tests).
    fn exp_fast(self) -> Self;
    /// The standard normal distribution function `Ncdf(x) = (1 + erf(x / sqrt 2)) / 2`:
    /// for f32 the vectorisable form of `vector.rs` (relative error below 2e-6), for f64
    /// libm's `erf` as candle computes it.
    fn ncdf(self) -> Self;
    /// `tanh(x)` for the hot loops: `1 - 2 / (e^(2x) + 1)` with the vectorisable `exp_fast`
    /// for f32 (absolute error near 1e-7), libm for f64.
    fn tanh_fast(self) -> Self;
    /// A value of this type from an `f64` constant.
    fn c(v: f64) -> Self;
}

impl Real for f32 {
    #[inline(always)]
    fn exp_fast(self) -> Self {
        crate::vector::exp_f32(self)
    }
    #[inline(always)]
    fn ncdf(self) -> Self {
        crate::vector::ncdf_f32(self)
    }
    #[inline(always)]
    fn tanh_fast(self) -> Self {
        1.0 - 2.0 / (crate::vector::exp_f32(2.0 * self) + 1.0)
    }
    #[inline]
    fn c(v: f64) -> Self {
        v as f32
    }
}

impl Real for f64 {
    #[inline(always)]
    fn exp_fast(self) -> Self {
        self.exp()
    }
    #[inline]
    fn ncdf(self) -> Self {
        (libm::erf(self * std::f64::consts::FRAC_1_SQRT_2) + 1.0) * 0.5
    }
    #[inline]
    fn tanh_fast(self) -> Self {
        self.tanh()
    }
    #[inline]
    fn c(v: f64) -> Self {
        v
    }
}
