//! Row primitives written so that the compiler vectorises them: reductions keep eight
//! independent partial sums (a float sum in one accumulator is a serial chain the compiler
//! may not reorder), and `exp` for f32 is a branch-free polynomial instead of a libm call,
//! evaluated in fused multiply-adds where the code has them (`multiply_add`).

use crate::real::Real;

/// Lanes of the partial sums.
const LANES: usize = 8;

/// Partial sums of a long row: four vectors of [`LANES`].
const WIDE: usize = 4 * LANES;

/// `sum x_i y_i`.
#[inline(always)]
pub(crate) fn dot<T: Real>(x: &[T], y: &[T]) -> T {
    let n = x.len().min(y.len());
    let (x, y) = (&x[..n], &y[..n]);
    let mut acc = [T::zero(); LANES];
    // A long row (a feedforward width) keeps four vectors of partial sums, so that one
    // chunk's additions need not wait on the previous chunk's: at one vector the loop is
    // bound by the addition's latency. Short rows (a head's width) take one vector only.
    let (mut x, mut y) = (x, y);
    if n >= 2 * WIDE {
        let mut wide = [T::zero(); WIDE];
        let (xw, yw) = (x.chunks_exact(WIDE), y.chunks_exact(WIDE));
        (x, y) = (xw.remainder(), yw.remainder());
        for (a, b) in xw.zip(yw) {
            for l in 0..WIDE {
                wide[l] += a[l] * b[l];
            }
        }
        fold_wide(&wide, &mut acc);
    }
    let (xc, yc) = (x.chunks_exact(LANES), y.chunks_exact(LANES));
    let (xr, yr) = (xc.remainder(), yc.remainder());
    for (a, b) in xc.zip(yc) {
        for l in 0..LANES {
            acc[l] += a[l] * b[l];
        }
    }
    let mut total = T::zero();
    for (&a, &b) in xr.iter().zip(yr) {
        total += a * b;
    }
    acc.iter().fold(total, |s, &v| s + v)
}

/// Adds the [`WIDE`] partial sums of a long row into [`LANES`] ones.
#[inline(always)]
fn fold_wide<T: Real>(wide: &[T; WIDE], acc: &mut [T; LANES]) {
    for part in wide.chunks_exact(LANES) {
        for l in 0..LANES {
            acc[l] += part[l];
        }
    }
}

/// `sum x_i^2`.
#[inline(always)]
pub(crate) fn sum_sq<T: Real>(x: &[T]) -> T {
    dot(x, x)
}

/// `max x_i` (`-inf` for an empty row).
#[inline(always)]
pub(crate) fn max<T: Real>(x: &[T]) -> T {
    let mut acc = [T::neg_infinity(); LANES];
    let chunks = x.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for l in 0..LANES {
            acc[l] = if c[l] > acc[l] { c[l] } else { acc[l] };
        }
    }
    let mut m = T::neg_infinity();
    for &v in rest.iter().chain(acc.iter()) {
        m = if v > m { v } else { m };
    }
    m
}

/// `y_i = exp(x_i - shift)`; returns `sum y_i`.
#[inline(always)]
pub(crate) fn exp_shifted<T: Real>(x: &[T], shift: T, y: &mut [T]) -> T {
    with_fma!(exp_shifted_as::<T>(x, shift, y))
}

#[inline(always)]
fn exp_shifted_as<T: Real, const FMA: bool>(x: &[T], shift: T, y: &mut [T]) -> T {
    for (y, &x) in y.iter_mut().zip(x) {
        *y = (x - shift).exp_fast::<FMA>();
    }
    sum(y)
}

/// Softmax of one row, `y = exp(x - max) / sum`; returns `(max, 1 / sum)`.
#[inline(always)]
pub(crate) fn softmax_row<T: Real>(x: &[T], y: &mut [T]) -> (T, T) {
    let n = x.len().min(y.len());
    // SAFETY: both rows hold `n` values.
    if let Some(result) = unsafe { T::softmax_row_wide(x.as_ptr(), y.as_mut_ptr(), n) } {
        return result;
    }
    softmax_row_generic(x, y)
}

/// [`softmax_row`] by loops the compiler vectorises, for any element type and processor.
#[inline(always)]
fn softmax_row_generic<T: Real>(x: &[T], y: &mut [T]) -> (T, T) {
    let m = max(x);
    let inv = exp_shifted(x, m, y).recip();
    for y in y.iter_mut() {
        *y *= inv;
    }
    (m, inv)
}

/// Softmax of one row in place.
#[inline(always)]
pub(crate) fn softmax_in_place<T: Real>(row: &mut [T]) {
    // SAFETY: the row holds its length in values, read before each is written.
    if unsafe { T::softmax_row_wide(row.as_ptr(), row.as_mut_ptr(), row.len()) }.is_some() {
        return;
    }
    with_fma!(softmax_in_place_as::<T>(row))
}

#[inline(always)]
fn softmax_in_place_as<T: Real, const FMA: bool>(row: &mut [T]) {
    let m = max(row);
    for v in row.iter_mut() {
        *v = (*v - m).exp_fast::<FMA>();
    }
    let inv = sum(row).recip();
    for v in row.iter_mut() {
        *v *= inv;
    }
}

/// `sum x_i` (partial sums as in [`dot`]).
#[inline(always)]
pub(crate) fn sum<T: Real>(x: &[T]) -> T {
    let mut acc = [T::zero(); LANES];
    let mut x = x;
    if x.len() >= 2 * WIDE {
        let mut wide = [T::zero(); WIDE];
        let chunks = x.chunks_exact(WIDE);
        x = chunks.remainder();
        for c in chunks {
            for l in 0..WIDE {
                wide[l] += c[l];
            }
        }
        fold_wide(&wide, &mut acc);
    }
    let chunks = x.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for l in 0..LANES {
            acc[l] += c[l];
        }
    }
    acc.iter().chain(rest).fold(T::zero(), |s, &v| s + v)
}

/// `a * b + c` in one fused multiply-add where `FMA` says the code has the instruction
/// (`widest::fma_in_use`, passed down by `with_fma!`), else a product then a sum: elsewhere
/// `mul_add` is a call to libm's `fmaf` per element and the loops stop vectorising (the
/// default step 2.8x slower under `WORKBENCH_KERNELS_ISA=baseline`).
#[inline(always)]
fn multiply_add<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

/// `c_0 x^(n-1) + c_1 x^(n-2) + ... + c_(n-1)` (coefficients from the highest degree) by
/// Horner's rule.
#[inline(always)]
fn horner<const FMA: bool, const N: usize>(x: f32, coefficients: [f32; N]) -> f32 {
    coefficients[1..].iter().fold(coefficients[0], |p, &c| multiply_add::<FMA>(p, x, c))
}

/// The constants of [`exp_f32`], shared with the explicit vector code of
/// `softmax_row_wide.rs`, which computes the same values.
pub(crate) mod exp_f32_constants {
    /// Inputs are clamped to `[LOWEST, HIGHEST]`; below `LOWEST` the result is 0.
    pub(crate) const LOWEST: f32 = -87.3;
    pub(crate) const HIGHEST: f32 = 88.0;
    pub(crate) const LOG2E: f32 = std::f32::consts::LOG2_E;
    /// `ln 2` split in two, so that `x - n ln 2` loses nothing to rounding.
    pub(crate) const LN2_HI: f32 = 0.693_359_4;
    pub(crate) const LN2_LO: f32 = -2.121_944_4e-4;
    /// `1.5 * 2^23`: adding it rounds to an integer held in the low bits of the mantissa.
    pub(crate) const ROUND: f32 = 12_582_912.0;
    /// `(e^r - 1 - r) / r^2` from the highest degree down (Cephes).
    pub(crate) const POLYNOMIAL: [f32; 6] =
        [1.987_569_1e-4, 1.398_199_9e-3, 8.333_452e-3, 4.166_579_6e-2, 1.666_666_5e-1, 5e-1];
}

/// `e^x` for f32 without a libm call: `2^n p(r)` with `x = n ln 2 + r`, `|r| <= ln(2)/2`
/// and Cephes' degree-7 polynomial for `e^r` (relative error about 1e-7, as libm's `expf`
/// within two units in the last place). Below -87.3 (where `e^x` leaves the normal range)
/// it returns 0, so that `-inf` scores give exactly zero weight.
#[inline(always)]
pub(crate) fn exp_f32<const FMA: bool>(x: f32) -> f32 {
    use exp_f32_constants::*;
    // A NaN stays NaN through the arithmetic; the result is fixed up below.
    let clamped = x.clamp(LOWEST, HIGHEST);
    let t = multiply_add::<FMA>(clamped, LOG2E, ROUND);
    let n = t - ROUND;
    let r = multiply_add::<FMA>(-n, LN2_LO, multiply_add::<FMA>(-n, LN2_HI, clamped));
    let r2 = r * r;
    let p = horner::<FMA, 6>(r, POLYNOMIAL);
    let p = multiply_add::<FMA>(p, r2, r) + 1.0;
    // `2^n` from the integer in `t`'s bits (n in [-126, 127]: a normal exponent), without a
    // float-to-int conversion.
    let n_bits = t.to_bits().wrapping_sub(ROUND.to_bits());
    let scale = f32::from_bits(n_bits.wrapping_add(127) << 23);
    let value = p * scale;
    if x < LOWEST {
        0.0
    } else if x.is_nan() {
        x
    } else {
        value
    }
}

/// `Ncdf(x) = erfc(-x / sqrt 2) / 2` for f32 without libm: `erfc(z) = t exp(-z^2 + p(t))`,
/// `t = 1 / (1 + z/2)` for `z >= 0` (the Chebyshev fit of Numerical Recipes §6.2, relative
/// error below 1.2e-7 for every `z >= 0`) and `erfc(z) = 2 - erfc(-z)` below 0, both
/// branches computed and one selected so the loops vectorise. Within 2e-6 of libm relative
/// to the value where it exceeds 1e-3, within 2e-7 absolute everywhere.
#[inline(always)]
pub(crate) fn ncdf_f32<const FMA: bool>(x: f32) -> f32 {
    let z = -x * std::f32::consts::FRAC_1_SQRT_2;
    let a = z.abs();
    let t = 1.0 / multiply_add::<FMA>(0.5, a, 1.0);
    let p = horner::<FMA, 10>(
        t,
        [
            0.170_872_77,
            -0.822_152_23,
            1.488_515_9,
            -1.135_204,
            0.278_868_07,
            -0.186_288_06,
            0.096_784_18,
            0.374_091_96,
            1.000_023_7,
            -1.265_512_2,
        ],
    );
    let erfc_abs = t * exp_f32::<FMA>(multiply_add::<FMA>(-a, a, p));
    let erfc = if z >= 0.0 { erfc_abs } else { 2.0 - erfc_abs };
    0.5 * erfc
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both forms of the polynomials: the product then sum, and the fused multiply-adds
    /// (a call to libm's `fmaf` here, outside `widest`: exact, only slower).
    #[test]
    fn exp_f32_is_within_two_ulp_of_libm() {
        check_exp(exp_f32::<false>);
        check_exp(exp_f32::<true>);
    }

    fn check_exp(exp: fn(f32) -> f32) {
        let mut worst = 0f64;
        let mut x = -87.0f32;
        while x < 88.0 {
            let (fast, exact) = (exp(x) as f64, (x as f64).exp());
            worst = plugin_testkit::larger(worst, (fast - exact).abs() / exact);
            x += 0.001_3;
        }
        assert!(worst < 2.5e-7, "relative error {worst:e}");
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp(-100.0), 0.0);
        assert!(exp(f32::NAN).is_nan());
        assert_eq!(exp(0.0), 1.0);
    }

    #[test]
    fn ncdf_f32_is_close_to_libm() {
        check_ncdf(ncdf_f32::<false>);
        check_ncdf(ncdf_f32::<true>);
    }

    fn check_ncdf(ncdf: fn(f32) -> f32) {
        // Relative error where Ncdf(x) > 1e-3; in the far left tail the f32 rounding of
        // x^2 limits it, and the absolute error is what GELU sees there.
        let (mut relative, mut absolute) = (0f64, 0f64);
        let mut x = -12.0f32;
        while x < 8.0 {
            let exact = 0.5 * libm::erfc(-(x as f64) * std::f64::consts::FRAC_1_SQRT_2);
            let fast = ncdf(x) as f64;
            if x > -3.0 {
                relative = plugin_testkit::larger(relative, (fast - exact).abs() / exact);
            }
            absolute = plugin_testkit::larger(absolute, (fast - exact).abs());
            x += 0.000_7;
        }
        assert!(relative < 2e-6, "relative error {relative:e}");
        assert!(absolute < 2e-7, "absolute error {absolute:e}");
        assert_eq!(ncdf(f32::NEG_INFINITY), 0.0);
        assert_eq!(ncdf(f32::INFINITY), 1.0);
    }

    #[test]
    fn reductions_match_sequential_sums() {
        // Lengths on both sides of the wide path's threshold and with every remainder.
        for n in (0..80).chain([127, 128, 129, 517]) {
            let x: Vec<f64> = (0..n).map(|i| (i as f64 * 0.37).sin()).collect();
            let y: Vec<f64> = (0..n).map(|i| (i as f64 * 0.11).cos()).collect();
            let seq: f64 = x.iter().zip(&y).map(|(a, b)| a * b).sum();
            assert!((dot(&x, &y) - seq).abs() < 1e-12, "dot of length {n}");
            assert!((sum(&x) - x.iter().sum::<f64>()).abs() < 1e-12, "sum of length {n}");
            assert!((sum_sq(&x) - x.iter().map(|v| v * v).sum::<f64>()).abs() < 1e-12, "sum_sq of length {n}");
            assert_eq!(max(&x), x.iter().cloned().fold(f64::NEG_INFINITY, f64::max));
        }
        // Unequal lengths: the shorter one counts.
        let (x, y) = (vec![1.0f64; 200], vec![2.0f64; 150]);
        assert_eq!(dot(&x, &y), 300.0);
        let x: Vec<f64> = (0..37).map(|i| (i as f64 * 0.37).sin()).collect();
        let mut p = vec![0.0; 37];
        softmax_row(&x, &mut p);
        assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-12);
    }

    /// The f32 row as the kernels run it (the AVX-512 or AVX2 one on a processor that has it) against
    /// the generic loops: the same maximum, the same exponentials (so the sums agree to their
    /// order of addition), in place as well, for every length up to 70 and rows with `-inf`,
    /// NaN, and entries far below the maximum.
    #[test]
    fn the_f32_softmax_row_matches_the_generic_loops() {
        if plugin_api::isa::kernels_isa() < plugin_api::isa::Isa::Avx2 {
            eprintln!("the kernels use neither AVX2 nor AVX-512: both sides are the generic loops here");
        }
        for n in 0..=70usize {
            for case in 0..4 {
                let x: Vec<f32> = (0..n)
                    .map(|i| match (case, i % 7) {
                        (1, 3) => f32::NEG_INFINITY,
                        (2, 5) => -120.0 + i as f32,
                        (3, 2) => 40.0 * (i as f32 * 0.61).sin(),
                        _ => 3.0 * (i as f32 * 0.37 + case as f32).sin(),
                    })
                    .collect();
                let (mut wide, mut generic) = (vec![0.0f32; n], vec![0.0f32; n]);
                let (m_wide, inv_wide) = softmax_row(&x, &mut wide);
                let (m_generic, inv_generic) = softmax_row_generic(&x, &mut generic);
                assert_eq!(m_wide.to_bits(), m_generic.to_bits(), "max, length {n}, case {case}");
                let close =
                    |a: f32, b: f32| a == b || (a - b).abs() <= 4.0 * f32::EPSILON * b.abs().max(f32::MIN_POSITIVE);
                assert!(close(inv_wide, inv_generic), "1 / sum, length {n}, case {case}: {inv_wide} vs {inv_generic}");
                for (i, (&a, &b)) in wide.iter().zip(&generic).enumerate() {
                    assert!(close(a, b), "weight {i}, length {n}, case {case}: {a} vs {b}");
                    assert_eq!(a == 0.0, b == 0.0, "weight {i} zero on one side only, length {n}, case {case}");
                }
                let mut in_place = x.clone();
                softmax_in_place(&mut in_place);
                assert_eq!(in_place, wide, "in place, length {n}, case {case}");
            }
        }
        // A NaN entry makes every weight NaN on both paths, and an all `-inf` row as well.
        for x in [vec![1.0f32, f32::NAN, 2.0, 0.5], vec![f32::NEG_INFINITY; 19]] {
            let (mut wide, mut generic) = (vec![0.0f32; x.len()], vec![0.0f32; x.len()]);
            softmax_row(&x, &mut wide);
            softmax_row_generic(&x, &mut generic);
            assert!(wide.iter().zip(&generic).all(|(a, b)| a.is_nan() && b.is_nan()), "{wide:?} vs {generic:?}");
        }
    }
}
