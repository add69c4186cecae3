//! One softmax row of f32 in explicit AVX-512, for the attentions' `N`-wide rows (81 on the
//! default Sudoku step): the generic loops of `vector.rs`, vectorised by the compiler, finish
//! each pass with scalar remainders (an `e^x` each) and fold their lanes on every pass, which
//! costs rows this short about as much as their whole vectors. Here each pass ends with one
//! masked vector, and the exponentials are summed as they are stored, so a row is read three
//! times instead of four.
//!
//! Same values as [`crate::vector::exp_f32`] entry by entry (the same polynomial and the same
//! operations, fused multiply-adds included); the sum is taken in another order, so the
//! weights agree with the generic path's to a unit or two in the last place.

use std::arch::x86_64::*;

/// f32 lanes of a vector.
const L: usize = 16;

/// `y = softmax(x)` over `n` entries; returns `(max, 1 / sum)`, as `vector::softmax_row`.
/// `x` and `y` may be the same row (each entry is read before it is written).
///
/// # Safety
/// The processor must have AVX-512F; `x` and `y` must address `n` values each.
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn softmax_row(x: *const f32, y: *mut f32, n: usize) -> (f32, f32) {
    let (full, rest) = (n / L, n % L);
    let tail: __mmask16 = ((1u32 << rest) - 1) as __mmask16;
    // SAFETY (every load and store below): vector `i < full` covers entries 16 i..16 i + 16,
    // and the masked tail only the `rest` entries after them, all within the `n` given.
    unsafe {
        // Pass 1: the maximum; a NaN entry is passed over, as by `vector::max`.
        let mut m = _mm512_set1_ps(f32::NEG_INFINITY);
        for i in 0..full {
            m = _mm512_max_ps(_mm512_loadu_ps(x.add(i * L)), m);
        }
        if rest > 0 {
            let v = _mm512_mask_loadu_ps(m, tail, x.add(full * L));
            m = _mm512_max_ps(v, m);
        }
        let max = _mm512_reduce_max_ps(m);
        // Pass 2: the exponentials, stored and summed.
        let shift = _mm512_set1_ps(max);
        let mut sum = _mm512_setzero_ps();
        for i in 0..full {
            let e = exp(_mm512_sub_ps(_mm512_loadu_ps(x.add(i * L)), shift));
            _mm512_storeu_ps(y.add(i * L), e);
            sum = _mm512_add_ps(sum, e);
        }
        if rest > 0 {
            let e = exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, x.add(full * L)), shift));
            _mm512_mask_storeu_ps(y.add(full * L), tail, e);
            sum = _mm512_mask_add_ps(sum, tail, sum, e);
        }
        let inv = 1.0 / _mm512_reduce_add_ps(sum);
        // Pass 3: the weights.
        let scale = _mm512_set1_ps(inv);
        for i in 0..full {
            _mm512_storeu_ps(y.add(i * L), _mm512_mul_ps(_mm512_loadu_ps(y.add(i * L)), scale));
        }
        if rest > 0 {
            let v = _mm512_maskz_loadu_ps(tail, y.add(full * L));
            _mm512_mask_storeu_ps(y.add(full * L), tail, _mm512_mul_ps(v, scale));
        }
        (max, inv)
    }
}

/// `e^x` lane by lane: [`crate::vector::exp_f32`] with fused multiply-adds, operation for
/// operation (so the same value), including its 0 below `LOWEST` and its NaN for NaN.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn exp(x: __m512) -> __m512 {
    use crate::vector::exp_f32_constants::*;
    // `x.clamp(LOWEST, HIGHEST)`; a NaN lane becomes a number here and is put back at the end.
    let clamped = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(LOWEST)), _mm512_set1_ps(HIGHEST));
    let t = _mm512_fmadd_ps(clamped, _mm512_set1_ps(LOG2E), _mm512_set1_ps(ROUND));
    let n = _mm512_sub_ps(t, _mm512_set1_ps(ROUND));
    let minus_n = _mm512_sub_ps(_mm512_setzero_ps(), n);
    let r = _mm512_fmadd_ps(minus_n, _mm512_set1_ps(LN2_LO), _mm512_fmadd_ps(minus_n, _mm512_set1_ps(LN2_HI), clamped));
    let r2 = _mm512_mul_ps(r, r);
    let mut p = _mm512_set1_ps(POLYNOMIAL[0]);
    for &c in &POLYNOMIAL[1..] {
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
    }
    let p = _mm512_add_ps(_mm512_fmadd_ps(p, r2, r), _mm512_set1_ps(1.0));
    // 2^n from the integer held in `t`'s low mantissa bits.
    let n_bits = _mm512_sub_epi32(_mm512_castps_si512(t), _mm512_set1_epi32(ROUND.to_bits() as i32));
    let scale = _mm512_castsi512_ps(_mm512_slli_epi32::<23>(_mm512_add_epi32(n_bits, _mm512_set1_epi32(127))));
    let value = _mm512_mul_ps(p, scale);
    let below = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, _mm512_set1_ps(LOWEST));
    let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(x, x);
    let value = _mm512_maskz_mov_ps(!below, value);
    _mm512_mask_mov_ps(value, nan, x)
}
