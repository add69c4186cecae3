//! The per-head tiles' vectors with AVX2 and FMA (the cluster's Zen 3 and older Xeon
//! nodes): 8 lanes and 16 registers, so column blocks of three vectors (24 outputs) with
//! 3-row tiles (9 accumulators, three loaded vectors and a broadcast), 6-row tiles for two
//! vectors and 8 for one.

use super::tiles::{columns_by_table, entry_points, Simd};
use crate::lanes::Avx2;
use std::arch::x86_64::*;

impl Simd for Avx2 {
    type Block = [__m256; 8];

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
