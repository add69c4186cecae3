//! The per-head tiles' vectors with AVX2 and FMA (the cluster's Zen 3 and older Xeon
//! nodes): 8 lanes and 16 registers, so column blocks of three vectors (24 outputs) with
//! 4-row tiles (12 accumulators, three loaded vectors and a broadcast), 6-row tiles for
//! two vectors and 12 for one.

use super::tiles::{columns_by_table, entry_points, Simd};
use std::arch::x86_64::*;

pub(super) struct Avx2;

impl Simd for Avx2 {
    const L: usize = 8;
    type V = __m256;
    type Mask = __m256i;
    type Block = [__m256; 8];

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
    /// Lane `i` all ones where `i < lanes`: the sign bit `maskload` and `maskstore` read.
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
    unsafe fn load_block(p: *const f32, rs: usize, rows: usize, mask: __m256i) -> [__m256; 8] {
        unsafe {
            let mut block = [_mm256_setzero_ps(); 8];
            for (r, row) in block.iter_mut().enumerate().take(rows) {
                *row = _mm256_maskload_ps(p.add(r * rs), mask);
            }
            block
        }
    }
    #[inline(always)]
    unsafe fn transpose(block: [__m256; 8]) -> [__m256; 8] {
        unsafe { crate::transpose::avx::transpose(block) }
    }
    #[inline(always)]
    unsafe fn store_block(p: *mut f32, rs: usize, rows: usize, mask: __m256i, block: [__m256; 8]) {
        for (r, row) in block.iter().enumerate().take(rows) {
            unsafe { _mm256_maskstore_ps(p.add(r * rs), mask, *row) }
        }
    }

    columns_by_table!(Avx2, 3,
        1 => 8 [1 2 3 4 5 6 7],
        2 => 6 [1 2 3 4 5],
        3 => 3 [1 2],
    );
}

entry_points!(Avx2, "avx2,fma");
