//! The element types the fused kernels run on (f32 and f64), with the few scalar functions
//! they need.

use crate::attention::Matrix;
use candle_core::WithDType;
use num_traits::Float;

/// A float element type of the fused kernels.
pub(crate) trait Real:
    WithDType + Float + num_traits::NumAssign + Send + Sync + std::iter::Sum + plugin_api::blas::Element + 'static
{
    /// `e^x` for the hot loops: the vectorisable polynomial of `vector.rs` for f32, libm
    /// for f64 (whose kernels serve the exactness tests). `FMA`: whether the code has fused
    /// multiply-adds (`widest::fma_in_use`, through `with_fma!`); here and below.
    fn exp_fast<const FMA: bool>(self) -> Self;
    /// The standard normal distribution function `Ncdf(x) = (1 + erf(x / sqrt 2)) / 2`:
    /// for f32 the vectorisable form of `vector.rs` (relative error below 2e-6), for f64
    /// libm's `erf` as candle computes it.
    fn ncdf<const FMA: bool>(self) -> Self;
    /// `tanh(x)` for the hot loops: `1 - 2 / (e^(2x) + 1)` with the vectorisable `exp_fast`
    /// for f32 (absolute error near 1e-7), libm for f64.
    fn tanh_fast<const FMA: bool>(self) -> Self;
    /// A value of this type from an `f64` constant.
    fn c(v: f64) -> Self;
    /// `dst = scale a b (+ dst)` for one attention head's product by the register tiles of
    /// `head_product.rs`, where they apply (f32 on AVX-512 or AVX2); `false` (the default, f64's) leaves
    /// it to `gemm`.
    ///
    /// # Safety
    /// As `head_product::product_f32`.
    #[allow(clippy::too_many_arguments)]
    unsafe fn head_product(
        _size: (usize, usize, usize),
        _dst: *mut Self,
        _dst_rs: usize,
        _a: (*const Self, usize, usize),
        _b: (*const Self, usize, usize),
        _scale: Self,
        _accumulate: bool,
    ) -> bool {
        false
    }
    /// `dst = scale a aᵀ` (`n x n`, `a` `n x k`) by `head_product.rs`'s symmetric tiles where
    /// they apply; `false` (the default, f64's) leaves it to a full product.
    ///
    /// # Safety
    /// As `head_product::symmetric_f32`.
    unsafe fn symmetric_head_product(
        _size: (usize, usize),
        _dst: *mut Self,
        _dst_rs: usize,
        _a: Matrix<Self>,
        _scale: Self,
    ) -> bool {
        false
    }
    /// `y = softmax(x)` over the first `n` entries of `x` and `y` (`x == y` allowed) by
    /// `softmax_row_wide.rs` where it applies (f32 on a processor with AVX-512, or AVX2 and
    /// FMA), returning `(max, 1 / sum)`;
    /// `None` (the default, f64's) leaves the row to the generic loops of `vector.rs`.
    ///
    /// # Safety
    /// `x` and `y` must address `n` values each.
    #[inline(always)]
    unsafe fn softmax_row_wide(_x: *const Self, _y: *mut Self, _n: usize) -> Option<(Self, Self)> {
        None
    }
}

impl Real for f32 {
    #[inline(always)]
    fn exp_fast<const FMA: bool>(self) -> Self {
        crate::vector::exp_f32::<FMA>(self)
    }
    #[inline(always)]
    fn ncdf<const FMA: bool>(self) -> Self {
        crate::vector::ncdf_f32::<FMA>(self)
    }
    #[inline(always)]
    fn tanh_fast<const FMA: bool>(self) -> Self {
        1.0 - 2.0 / (crate::vector::exp_f32::<FMA>(2.0 * self) + 1.0)
    }
    #[inline]
    fn c(v: f64) -> Self {
        v as f32
    }
    unsafe fn head_product(
        size: (usize, usize, usize),
        dst: *mut f32,
        dst_rs: usize,
        a: (*const f32, usize, usize),
        b: (*const f32, usize, usize),
        scale: f32,
        accumulate: bool,
    ) -> bool {
        // SAFETY: as this function's.
        unsafe { crate::head_product::product_f32(size, dst, dst_rs, a, b, scale, accumulate) }
    }
    unsafe fn symmetric_head_product(
        size: (usize, usize),
        dst: *mut f32,
        dst_rs: usize,
        a: Matrix<f32>,
        scale: f32,
    ) -> bool {
        // SAFETY: as this function's.
        unsafe { crate::head_product::symmetric_f32(size, dst, dst_rs, a, scale) }
    }
    #[inline(always)]
    unsafe fn softmax_row_wide(x: *const f32, y: *mut f32, n: usize) -> Option<(f32, f32)> {
        #[cfg(target_arch = "x86_64")]
        if let Some(set) = crate::lanes::Set::in_use() {
            // SAFETY: the processor has the set in use; the caller vouches for the rows.
            return Some(unsafe { crate::softmax_row_wide::softmax_row_in(set, x, y, n) });
        }
        let _ = (x, y, n);
        None
    }
}

impl Real for f64 {
    #[inline(always)]
    fn exp_fast<const FMA: bool>(self) -> Self {
        self.exp()
    }
    #[inline]
    fn ncdf<const FMA: bool>(self) -> Self {
        (libm::erf(self * std::f64::consts::FRAC_1_SQRT_2) + 1.0) * 0.5
    }
    #[inline]
    fn tanh_fast<const FMA: bool>(self) -> Self {
        self.tanh()
    }
    #[inline]
    fn c(v: f64) -> Self {
        v
    }
}
