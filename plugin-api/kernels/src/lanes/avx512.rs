//! [`Lanes`] with AVX-512 (F): 16 lanes, masks in mask registers.

use super::Lanes;
use std::arch::x86_64::*;

pub(crate) struct Avx512;

impl Lanes for Avx512 {
    const L: usize = 16;
    type V = __m512;
    type Mask = __mmask16;

    #[inline(always)]
    unsafe fn zero() -> __m512 {
        unsafe { _mm512_setzero_ps() }
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> __m512 {
        unsafe { _mm512_set1_ps(x) }
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> __m512 {
        unsafe { _mm512_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: __m512) {
        unsafe { _mm512_storeu_ps(p, v) }
    }
    #[inline(always)]
    unsafe fn first(lanes: usize) -> __mmask16 {
        ((1u32 << lanes) - 1) as __mmask16
    }
    #[inline(always)]
    unsafe fn load_masked(mask: __mmask16, p: *const f32) -> __m512 {
        unsafe { _mm512_maskz_loadu_ps(mask, p) }
    }
    #[inline(always)]
    unsafe fn store_masked(mask: __mmask16, p: *mut f32, v: __m512) {
        unsafe { _mm512_mask_storeu_ps(p, mask, v) }
    }
    #[inline(always)]
    unsafe fn fmadd(a: __m512, b: __m512, c: __m512) -> __m512 {
        unsafe { _mm512_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    unsafe fn mul(a: __m512, b: __m512) -> __m512 {
        unsafe { _mm512_mul_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn add(a: __m512, b: __m512) -> __m512 {
        unsafe { _mm512_add_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn sub(a: __m512, b: __m512) -> __m512 {
        unsafe { _mm512_sub_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn max(a: __m512, b: __m512) -> __m512 {
        unsafe { _mm512_max_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn min(a: __m512, b: __m512) -> __m512 {
        unsafe { _mm512_min_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn reduce_max(v: __m512) -> f32 {
        unsafe { _mm512_reduce_max_ps(v) }
    }
    #[inline(always)]
    unsafe fn reduce_add(v: __m512) -> f32 {
        unsafe { _mm512_reduce_add_ps(v) }
    }
    #[inline(always)]
    unsafe fn less(a: __m512, b: __m512) -> __mmask16 {
        unsafe { _mm512_cmp_ps_mask::<_CMP_LT_OQ>(a, b) }
    }
    #[inline(always)]
    unsafe fn nan(v: __m512) -> __mmask16 {
        unsafe { _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v, v) }
    }
    #[inline(always)]
    unsafe fn select(mask: __mmask16, yes: __m512, no: __m512) -> __m512 {
        unsafe { _mm512_mask_mov_ps(no, mask, yes) }
    }
    #[inline(always)]
    unsafe fn exp2_of_rounded(t: __m512, rounder: f32) -> __m512 {
        unsafe {
            let n = _mm512_sub_epi32(_mm512_castps_si512(t), _mm512_set1_epi32(rounder.to_bits() as i32));
            _mm512_castsi512_ps(_mm512_slli_epi32::<23>(_mm512_add_epi32(n, _mm512_set1_epi32(127))))
        }
    }
}
