//! The per-head tiles' vectors with AVX-512: 16 lanes and 32 registers, so column blocks of
//! six vectors (96 outputs) with 4-row tiles (24 accumulators and six loaded vectors), and
//! up to 24 rows for a block of one vector.

use super::tiles::{columns_by_table, entry_points, pack_entries, Matrix, Simd};
use crate::lanes::{Avx512, Lanes};
use std::arch::x86_64::*;

impl Simd for Avx512 {
    type Block = [__m512; 16];

    #[inline(always)]
    unsafe fn load_block(p: *const f32, rs: usize, rows: usize, mask: __mmask16) -> [__m512; 16] {
        unsafe {
            let mut block = [_mm512_setzero_ps(); 16];
            for (r, row) in block.iter_mut().enumerate().take(rows) {
                *row = _mm512_maskz_loadu_ps(mask, p.add(r * rs));
            }
            block
        }
    }
    #[inline(always)]
    unsafe fn transpose(block: [__m512; 16]) -> [__m512; 16] {
        unsafe { crate::transpose::avx512::transpose(block) }
    }
    #[inline(always)]
    unsafe fn store_block(p: *mut f32, rs: usize, rows: usize, mask: __mmask16, block: [__m512; 16]) {
        for (r, row) in block.iter().enumerate().take(rows) {
            unsafe { _mm512_mask_storeu_ps(p.add(r * rs), mask, *row) }
        }
    }

    /// One gather per 16 entries: a row's 16 entries are 16 different cache lines, which a
    /// gather reads in one instruction.
    #[inline(always)]
    unsafe fn pack_strided(k: usize, n: usize, (b, b_rs, b_cs): Matrix, out: *mut f32, width: usize) {
        unsafe {
            if n.saturating_mul(b_cs) > i32::MAX as usize {
                // Column offsets past a gather's 32-bit reach: entry by entry.
                return pack_entries(k, n, (b, b_rs, b_cs), out, width);
            }
            let lanes = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
            for v in 0..width / 16 {
                let mask = Self::first((n - v * 16).min(16));
                // Offsets of columns v * 16 + lane (within i32, checked above).
                let offsets = _mm512_mullo_epi32(
                    _mm512_add_epi32(lanes, _mm512_set1_epi32((v * 16) as i32)),
                    _mm512_set1_epi32(b_cs as i32),
                );
                for p in 0..k {
                    let row = _mm512_mask_i32gather_ps::<4>(_mm512_setzero_ps(), mask, offsets, b.add(p * b_rs));
                    _mm512_storeu_ps(out.add(p * width + v * 16), row);
                }
            }
        }
    }

    columns_by_table!(Avx512, 6,
        1 => 24 [1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23],
        2 => 12 [1 2 3 4 5 6 7 8 9 10 11],
        3 => 8 [1 2 3 4 5 6 7],
        4 => 6 [1 2 3 4 5],
        5 => 4 [1 2 3],
        6 => 4 [1 2 3],
    );
}

entry_points!(Avx512, "avx512f");
