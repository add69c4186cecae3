//! [`Lanes`] with AVX2 and FMA (the cluster's Zen 3 and older Xeon nodes): 8 lanes. AVX2 has
//! no mask registers: a mask is a vector whose lanes are all ones or all zeros, as its
//! comparisons give them and `vmaskmovps` and `vblendvps` read them (by the sign bit).

use super::Lanes;
use std::arch::x86_64::*;

pub(crate) struct Avx2;

impl Lanes for Avx2 {
    const L: usize = 8;
    type V = __m256;
    type Mask = __m256i;

    #[inline(always)]
    unsafe fn zero() -> __m256 {
        unsafe { _mm256_setzero_ps() }
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> __m256 {
        unsafe { _mm256_set1_ps(x) }
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> __m256 {
        unsafe { _mm256_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: __m256) {
        unsafe { _mm256_storeu_ps(p, v) }
    }
    #[inline(always)]
    unsafe fn first(lanes: usize) -> __m256i {
        unsafe { _mm256_cmpgt_epi32(_mm256_set1_epi32(lanes as i32), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)) }
    }
    #[inline(always)]
    unsafe fn load_masked(mask: __m256i, p: *const f32) -> __m256 {
        unsafe { _mm256_maskload_ps(p, mask) }
    }
    #[inline(always)]
    unsafe fn store_masked(mask: __m256i, p: *mut f32, v: __m256) {
        unsafe { _mm256_maskstore_ps(p, mask, v) }
    }
    #[inline(always)]
    unsafe fn fmadd(a: __m256, b: __m256, c: __m256) -> __m256 {
        unsafe { _mm256_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    unsafe fn mul(a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_mul_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn add(a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_add_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn sub(a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_sub_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn max(a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_max_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn min(a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_min_ps(a, b) }
    }
    /// Halves first: 8 lanes to 4, 2, 1.
    #[inline(always)]
    unsafe fn reduce_max(v: __m256) -> f32 {
        unsafe {
            let four = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
            let two = _mm_max_ps(four, _mm_movehl_ps(four, four));
            _mm_cvtss_f32(_mm_max_ps(two, _mm_movehdup_ps(two)))
        }
    }
    /// Halves first: 8 lanes to 4, 2, 1.
    #[inline(always)]
    unsafe fn reduce_add(v: __m256) -> f32 {
        unsafe {
            let four = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
            let two = _mm_add_ps(four, _mm_movehl_ps(four, four));
            _mm_cvtss_f32(_mm_add_ps(two, _mm_movehdup_ps(two)))
        }
    }
    #[inline(always)]
    unsafe fn less(a: __m256, b: __m256) -> __m256i {
        unsafe { _mm256_castps_si256(_mm256_cmp_ps::<_CMP_LT_OQ>(a, b)) }
    }
    #[inline(always)]
    unsafe fn nan(v: __m256) -> __m256i {
        unsafe { _mm256_castps_si256(_mm256_cmp_ps::<_CMP_UNORD_Q>(v, v)) }
    }
    #[inline(always)]
    unsafe fn select(mask: __m256i, yes: __m256, no: __m256) -> __m256 {
        unsafe { _mm256_blendv_ps(no, yes, _mm256_castsi256_ps(mask)) }
    }
    #[inline(always)]
    unsafe fn exp2_of_rounded(t: __m256, rounder: f32) -> __m256 {
        unsafe {
            let n = _mm256_sub_epi32(_mm256_castps_si256(t), _mm256_set1_epi32(rounder.to_bits() as i32));
            _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(n, _mm256_set1_epi32(127))))
        }
    }
}
