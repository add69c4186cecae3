//! One softmax row of f32 in explicit vector code, written once over an instruction set's
//! vectors ([`Lanes`]) and compiled for AVX-512 and for AVX2 + FMA, for the attentions'
//! `N`-wide rows (81 on the default Sudoku step): the generic loops of `vector.rs`, vectorised
//! by the compiler, finish each pass with scalar remainders (an `e^x` each) and fold their
//! lanes on every pass, which costs rows this short about as much as their whole vectors.
//! Here each pass ends with one masked vector, and the exponentials are summed as they are
//! stored, so a row is read three times instead of four.
//!
//! Same values as [`crate::vector::exp_f32`] entry by entry (the same polynomial and the same
//! operations, fused multiply-adds included); the sum is taken in another order, so the
//! weights agree with the generic path's to a unit or two in the last place.

use crate::lanes::{Avx2, Avx512, Lanes, Set};

/// `y = softmax(x)` over `n` entries with the vectors of `set`; returns `(max, 1 / sum)`, as
/// `vector::softmax_row`. `x` and `y` may be the same row (each entry is read before it is
/// written).
///
/// # Safety
/// The processor must have `set` ([`Set::in_use`]); `x` and `y` must address `n` values each.
#[inline(always)]
pub(crate) unsafe fn softmax_row_in(set: Set, x: *const f32, y: *mut f32, n: usize) -> (f32, f32) {
    // SAFETY: as this function's.
    unsafe {
        match set {
            Set::Avx512 => softmax_row_avx512(x, y, n),
            Set::Avx2 => softmax_row_avx2(x, y, n),
        }
    }
}

#[target_feature(enable = "avx512f")]
unsafe fn softmax_row_avx512(x: *const f32, y: *mut f32, n: usize) -> (f32, f32) {
    // SAFETY: as `softmax_row_in`'s.
    unsafe { softmax_row::<Avx512>(x, y, n) }
}

#[target_feature(enable = "avx2,fma")]
unsafe fn softmax_row_avx2(x: *const f32, y: *mut f32, n: usize) -> (f32, f32) {
    // SAFETY: as `softmax_row_in`'s.
    unsafe { softmax_row::<Avx2>(x, y, n) }
}

#[inline(always)]
unsafe fn softmax_row<S: Lanes>(x: *const f32, y: *mut f32, n: usize) -> (f32, f32) {
    let (full, rest) = (n / S::L, n % S::L);
    // SAFETY (every load and store below): vector `i < full` covers entries `L i..L (i + 1)`,
    // and the masked tail only the `rest` entries after them, all within the `n` given.
    unsafe {
        let tail = S::first(rest);
        // Pass 1: the maximum; a NaN entry is passed over, as by `vector::max`.
        let mut m = S::splat(f32::NEG_INFINITY);
        for i in 0..full {
            m = S::max(S::load(x.add(i * S::L)), m);
        }
        if rest > 0 {
            let v = S::select(tail, S::load_masked(tail, x.add(full * S::L)), m);
            m = S::max(v, m);
        }
        let max = S::reduce_max(m);
        // Pass 2: the exponentials, stored and summed.
        let shift = S::splat(max);
        let mut sum = S::zero();
        for i in 0..full {
            let e = exp::<S>(S::sub(S::load(x.add(i * S::L)), shift));
            S::store(y.add(i * S::L), e);
            sum = S::add(sum, e);
        }
        if rest > 0 {
            let e = exp::<S>(S::sub(S::load_masked(tail, x.add(full * S::L)), shift));
            S::store_masked(tail, y.add(full * S::L), e);
            sum = S::add(sum, S::select(tail, e, S::zero()));
        }
        let inv = 1.0 / S::reduce_add(sum);
        // Pass 3: the weights.
        let scale = S::splat(inv);
        for i in 0..full {
            S::store(y.add(i * S::L), S::mul(S::load(y.add(i * S::L)), scale));
        }
        if rest > 0 {
            let v = S::load_masked(tail, y.add(full * S::L));
            S::store_masked(tail, y.add(full * S::L), S::mul(v, scale));
        }
        (max, inv)
    }
}

/// `e^x` lane by lane: [`crate::vector::exp_f32`] with fused multiply-adds, operation for
/// operation (so the same value), including its 0 below `LOWEST` and its NaN for NaN.
#[inline(always)]
unsafe fn exp<S: Lanes>(x: S::V) -> S::V {
    use crate::vector::exp_f32_constants::*;
    // SAFETY: the caller's code is compiled for `S`.
    unsafe {
        // `x.clamp(LOWEST, HIGHEST)`; a NaN lane becomes a number here and is put back at the end.
        let clamped = S::min(S::max(x, S::splat(LOWEST)), S::splat(HIGHEST));
        let t = S::fmadd(clamped, S::splat(LOG2E), S::splat(ROUND));
        let n = S::sub(t, S::splat(ROUND));
        let minus_n = S::sub(S::zero(), n);
        let r = S::fmadd(minus_n, S::splat(LN2_LO), S::fmadd(minus_n, S::splat(LN2_HI), clamped));
        let r2 = S::mul(r, r);
        let mut p = S::splat(POLYNOMIAL[0]);
        for &c in &POLYNOMIAL[1..] {
            p = S::fmadd(p, r, S::splat(c));
        }
        let p = S::add(S::fmadd(p, r2, r), S::splat(1.0));
        let value = S::mul(p, S::exp2_of_rounded(t, ROUND));
        let value = S::select(S::less(x, S::splat(LOWEST)), S::zero(), value);
        S::select(S::nan(x), x, value)
    }
}
