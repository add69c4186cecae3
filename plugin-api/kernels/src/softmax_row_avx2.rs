//! One softmax row of f32 in explicit AVX2 + FMA: `softmax_row_avx512.rs` for processors
//! without AVX-512 (the cluster's Zen 3 and older Xeons), for the same reason (the generic
//! loops end each pass with scalar remainders and fold their lanes on every pass, which costs
//! the attentions' short rows about as much as their whole vectors). AVX2 has no mask
//! registers: the last, partial vector is loaded and stored through a lane mask
//! (`vmaskmovps`) and kept out of the maximum and the sum by a blend.
//!
//! Same values as [`crate::vector::exp_f32`] entry by entry (the same polynomial and the same
//! operations, fused multiply-adds included); the sum is taken in another order, so the
//! weights agree with the generic path's to a unit or two in the last place.

use std::arch::x86_64::*;

/// f32 lanes of a vector.
const L: usize = 8;

/// `y = softmax(x)` over `n` entries; returns `(max, 1 / sum)`, as `vector::softmax_row`.
/// `x` and `y` may be the same row (each entry is read before it is written).
///
/// # Safety
/// The processor must have AVX2 and FMA; `x` and `y` must address `n` values each.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn softmax_row(x: *const f32, y: *mut f32, n: usize) -> (f32, f32) {
    let (full, rest) = (n / L, n % L);
    // Lane i of the tail is on (all bits set) for i < rest.
    let tail = _mm256_cmpgt_epi32(_mm256_set1_epi32(rest as i32), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    let tail_ps = _mm256_castsi256_ps(tail);
    // SAFETY (every load and store below): vector `i < full` covers entries 8 i..8 i + 8, and
    // the masked tail only the `rest` entries after them, all within the `n` given.
    unsafe {
        // Pass 1: the maximum; a NaN entry is passed over, as by `vector::max`.
        let mut m = _mm256_set1_ps(f32::NEG_INFINITY);
        for i in 0..full {
            m = _mm256_max_ps(_mm256_loadu_ps(x.add(i * L)), m);
        }
        if rest > 0 {
            let v = _mm256_blendv_ps(m, _mm256_maskload_ps(x.add(full * L), tail), tail_ps);
            m = _mm256_max_ps(v, m);
        }
        let max = reduce_max(m);
        // Pass 2: the exponentials, stored and summed.
        let shift = _mm256_set1_ps(max);
        let mut sum = _mm256_setzero_ps();
        for i in 0..full {
            let e = exp(_mm256_sub_ps(_mm256_loadu_ps(x.add(i * L)), shift));
            _mm256_storeu_ps(y.add(i * L), e);
            sum = _mm256_add_ps(sum, e);
        }
        if rest > 0 {
            let e = exp(_mm256_sub_ps(_mm256_maskload_ps(x.add(full * L), tail), shift));
            _mm256_maskstore_ps(y.add(full * L), tail, e);
            sum = _mm256_add_ps(sum, _mm256_and_ps(e, tail_ps));
        }
        let inv = 1.0 / reduce_add(sum);
        // Pass 3: the weights.
        let scale = _mm256_set1_ps(inv);
        for i in 0..full {
            _mm256_storeu_ps(y.add(i * L), _mm256_mul_ps(_mm256_loadu_ps(y.add(i * L)), scale));
        }
        if rest > 0 {
            let v = _mm256_maskload_ps(y.add(full * L), tail);
            _mm256_maskstore_ps(y.add(full * L), tail, _mm256_mul_ps(v, scale));
        }
        (max, inv)
    }
}

/// The largest of the eight lanes of `v`, halves first.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn reduce_max(v: __m256) -> f32 {
    let four = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let two = _mm_max_ps(four, _mm_movehl_ps(four, four));
    _mm_cvtss_f32(_mm_max_ps(two, _mm_movehdup_ps(two)))
}

/// The sum of the eight lanes of `v`, halves first.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn reduce_add(v: __m256) -> f32 {
    let four = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let two = _mm_add_ps(four, _mm_movehl_ps(four, four));
    _mm_cvtss_f32(_mm_add_ps(two, _mm_movehdup_ps(two)))
}

/// `e^x` lane by lane: [`crate::vector::exp_f32`] with fused multiply-adds, operation for
/// operation (so the same value), including its 0 below `LOWEST` and its NaN for NaN.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn exp(x: __m256) -> __m256 {
    use crate::vector::exp_f32_constants::*;
    // `x.clamp(LOWEST, HIGHEST)`; a NaN lane becomes a number here and is put back at the end.
    let clamped = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(LOWEST)), _mm256_set1_ps(HIGHEST));
    let t = _mm256_fmadd_ps(clamped, _mm256_set1_ps(LOG2E), _mm256_set1_ps(ROUND));
    let n = _mm256_sub_ps(t, _mm256_set1_ps(ROUND));
    let minus_n = _mm256_sub_ps(_mm256_setzero_ps(), n);
    let r = _mm256_fmadd_ps(minus_n, _mm256_set1_ps(LN2_LO), _mm256_fmadd_ps(minus_n, _mm256_set1_ps(LN2_HI), clamped));
    let r2 = _mm256_mul_ps(r, r);
    let mut p = _mm256_set1_ps(POLYNOMIAL[0]);
    for &c in &POLYNOMIAL[1..] {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
    }
    let p = _mm256_add_ps(_mm256_fmadd_ps(p, r2, r), _mm256_set1_ps(1.0));
    // 2^n from the integer held in `t`'s low mantissa bits.
    let n_bits = _mm256_sub_epi32(_mm256_castps_si256(t), _mm256_set1_epi32(ROUND.to_bits() as i32));
    let scale = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(n_bits, _mm256_set1_epi32(127))));
    let value = _mm256_mul_ps(p, scale);
    let below = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_set1_ps(LOWEST));
    let nan = _mm256_cmp_ps::<_CMP_UNORD_Q>(x, x);
    _mm256_blendv_ps(_mm256_andnot_ps(below, value), x, nan)
}
