//! `M + M^T` of a small square matrix (one attention head's `N x N` weights or their
//! gradient), out of place or in place.
//!
//! A scalar loop over the pairs `(i, j)`, `(j, i)` reads the matrix by columns an element at
//! a time and does not vectorise: about 4.5 us of every 81 x 81 head, three times per head
//! and iteration in a bi-softmax training step. For f32 on processors with AVX the matrix is
//! taken in pairs of 8 x 8 tiles `(I, J)`, `(J, I)`, each transposed in registers by the usual
//! unpack / shuffle / lane-permute sequence, so every element is loaded and stored once as
//! part of an 8-wide vector; with AVX-512, 16 x 16 tiles first (a third fewer shuffles an
//! element, half the loads and stores), then 8 x 8 tiles for a band left between the two
//! widths. No crate offers this fused with the sum (transpose crates copy).

use crate::real::Real;

/// `dst = src + src^T` for `n x n` row-major matrices.
#[inline(always)]
pub(crate) fn add_transpose<T: Real>(src: &[T], dst: &mut [T], n: usize) {
    assert!(src.len() >= n * n && dst.len() >= n * n, "add_transpose: buffers smaller than {n} x {n}");
    // SAFETY: both buffers hold `n * n` elements; `src` and `dst` are distinct borrows.
    unsafe { add_transpose_raw(src.as_ptr(), dst.as_mut_ptr(), n) }
}

/// `m <- m + m^T` for the `n x n` row-major `m`.
#[inline(always)]
pub(crate) fn add_transpose_in_place<T: Real>(m: &mut [T], n: usize) {
    assert!(m.len() >= n * n, "add_transpose_in_place: buffer smaller than {n} x {n}");
    let p = m.as_mut_ptr();
    // SAFETY: `m` holds `n * n` elements; the kernel reads both entries of a pair before it
    // writes either, so source and destination may be the same matrix.
    unsafe { add_transpose_raw(p, p, n) }
}

/// # Safety
/// `src` and `dst` must be valid for `n * n` elements; they may be equal but must not
/// otherwise overlap.
#[inline(always)]
unsafe fn add_transpose_raw<T: Real>(src: *const T, dst: *mut T, n: usize) {
    #[cfg(target_arch = "x86_64")]
    if std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>() {
        let isa = plugin_api::isa::kernels_isa();
        if isa == plugin_api::isa::Isa::Avx512 {
            // SAFETY: `T` is `f32` and the processor has AVX-512F (and so AVX).
            return unsafe {
                let from = avx512::add_transpose(src.cast(), dst.cast(), n);
                avx::add_transpose(src.cast(), dst.cast(), n, from)
            };
        }
        if isa == plugin_api::isa::Isa::Avx2 {
            // SAFETY: `T` is `f32` and the processor has AVX2 (and so AVX).
            return unsafe { avx::add_transpose(src.cast(), dst.cast(), n, 0) };
        }
    }
    unsafe { pairs(src, dst, n, 0) }
}

/// The scalar kernel for every pair `(i, j)`, `(j, i)` with `max(i, j) >= from`.
///
/// # Safety
/// As [`add_transpose_raw`].
#[inline(always)]
unsafe fn pairs<T: Real>(src: *const T, dst: *mut T, n: usize, from: usize) {
    for j in from..n {
        for i in 0..=j {
            // SAFETY: `i, j < n`; both entries are read before either is written.
            unsafe {
                let sum = *src.add(i * n + j) + *src.add(j * n + i);
                *dst.add(i * n + j) = sum;
                *dst.add(j * n + i) = sum;
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx {
    use std::arch::x86_64::*;

    /// Tile edge: one `__m256` of f32.
    const W: usize = 8;

    /// Rows `0..8` of the `8 x 8` tile at `p` (row stride `n`).
    #[inline(always)]
    unsafe fn load(p: *const f32, n: usize) -> [__m256; W] {
        let mut rows = [unsafe { _mm256_setzero_ps() }; W];
        for (r, row) in rows.iter_mut().enumerate() {
            // SAFETY: the caller's tile lies inside the matrix.
            *row = unsafe { _mm256_loadu_ps(p.add(r * n)) };
        }
        rows
    }

    #[inline(always)]
    unsafe fn store(p: *mut f32, n: usize, rows: [__m256; W]) {
        for (r, row) in rows.into_iter().enumerate() {
            // SAFETY: as in `load`.
            unsafe { _mm256_storeu_ps(p.add(r * n), row) }
        }
    }

    /// The transpose of an `8 x 8` tile held as eight rows.
    #[inline(always)]
    unsafe fn transpose(r: [__m256; W]) -> [__m256; W] {
        unsafe {
            // Interleave pairs of rows, then pairs of pairs, then swap the 128-bit halves.
            let t = [
                _mm256_unpacklo_ps(r[0], r[1]),
                _mm256_unpackhi_ps(r[0], r[1]),
                _mm256_unpacklo_ps(r[2], r[3]),
                _mm256_unpackhi_ps(r[2], r[3]),
                _mm256_unpacklo_ps(r[4], r[5]),
                _mm256_unpackhi_ps(r[4], r[5]),
                _mm256_unpacklo_ps(r[6], r[7]),
                _mm256_unpackhi_ps(r[6], r[7]),
            ];
            let u = [
                _mm256_shuffle_ps::<0x44>(t[0], t[2]),
                _mm256_shuffle_ps::<0xEE>(t[0], t[2]),
                _mm256_shuffle_ps::<0x44>(t[1], t[3]),
                _mm256_shuffle_ps::<0xEE>(t[1], t[3]),
                _mm256_shuffle_ps::<0x44>(t[4], t[6]),
                _mm256_shuffle_ps::<0xEE>(t[4], t[6]),
                _mm256_shuffle_ps::<0x44>(t[5], t[7]),
                _mm256_shuffle_ps::<0xEE>(t[5], t[7]),
            ];
            [
                _mm256_permute2f128_ps::<0x20>(u[0], u[4]),
                _mm256_permute2f128_ps::<0x20>(u[1], u[5]),
                _mm256_permute2f128_ps::<0x20>(u[2], u[6]),
                _mm256_permute2f128_ps::<0x20>(u[3], u[7]),
                _mm256_permute2f128_ps::<0x31>(u[0], u[4]),
                _mm256_permute2f128_ps::<0x31>(u[1], u[5]),
                _mm256_permute2f128_ps::<0x31>(u[2], u[6]),
                _mm256_permute2f128_ps::<0x31>(u[3], u[7]),
            ]
        }
    }

    #[inline(always)]
    unsafe fn add(mut a: [__m256; W], b: [__m256; W]) -> [__m256; W] {
        for (a, b) in a.iter_mut().zip(b) {
            *a = unsafe { _mm256_add_ps(*a, b) };
        }
        a
    }

    /// `dst = src + src^T` for every pair `(i, j)`, `(j, i)` with `max(i, j) >= from` (a
    /// multiple of 8; the pairs below it are done): tiles up to the last multiple of 8, then
    /// the scalar pairs.
    ///
    /// # Safety
    /// As `add_transpose_raw`, and the processor must have AVX.
    #[target_feature(enable = "avx")]
    pub(super) unsafe fn add_transpose(src: *const f32, dst: *mut f32, n: usize, from: usize) {
        let tiled = n / W * W;
        unsafe {
            for ib in (0..tiled).step_by(W) {
                if ib >= from {
                    let diagonal = load(src.add(ib * n + ib), n);
                    store(dst.add(ib * n + ib), n, add(diagonal, transpose(diagonal)));
                }
                for jb in ((ib + W).max(from)..tiled).step_by(W) {
                    // Both tiles are loaded before either is stored (in place: dst = src).
                    let upper = load(src.add(ib * n + jb), n);
                    let lower = load(src.add(jb * n + ib), n);
                    store(dst.add(ib * n + jb), n, add(upper, transpose(lower)));
                    store(dst.add(jb * n + ib), n, add(lower, transpose(upper)));
                }
            }
            super::pairs(src, dst, n, tiled.max(from));
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512 {
    use std::arch::x86_64::*;

    /// Tile edge: one `__m512` of f32.
    const W: usize = 16;

    #[inline(always)]
    unsafe fn load(p: *const f32, n: usize) -> [__m512; W] {
        let mut rows = [unsafe { _mm512_setzero_ps() }; W];
        for (r, row) in rows.iter_mut().enumerate() {
            // SAFETY: the caller's tile lies inside the matrix.
            *row = unsafe { _mm512_loadu_ps(p.add(r * n)) };
        }
        rows
    }

    #[inline(always)]
    unsafe fn store(p: *mut f32, n: usize, rows: [__m512; W]) {
        for (r, row) in rows.into_iter().enumerate() {
            // SAFETY: as in `load`.
            unsafe { _mm512_storeu_ps(p.add(r * n), row) }
        }
    }

    /// The transpose of a `16 x 16` tile held as sixteen rows: within each 128-bit lane as
    /// for 8 x 8 (pairs of rows, then pairs of pairs), which leaves in lane `k` of `u[4g + c]`
    /// column `4k + c` of rows `4g..4g + 4`; then two rounds of whole-lane shuffles gather
    /// lane `k` of `u[c]`, `u[4 + c]`, `u[8 + c]`, `u[12 + c]` into row `4k + c`.
    /// Also packs the per-head products' transposed operands (`head_product.rs`).
    ///
    /// # Safety
    /// The processor must have AVX-512F (the caller is compiled for it).
    #[inline(always)]
    pub(crate) unsafe fn transpose(r: [__m512; W]) -> [__m512; W] {
        unsafe {
            let mut t = [_mm512_setzero_ps(); W];
            for i in 0..W / 2 {
                t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
                t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
            }
            let mut u = [_mm512_setzero_ps(); W];
            for g in 0..W / 4 {
                let t = &t[4 * g..4 * g + 4];
                u[4 * g] = _mm512_shuffle_ps::<0x44>(t[0], t[2]);
                u[4 * g + 1] = _mm512_shuffle_ps::<0xEE>(t[0], t[2]);
                u[4 * g + 2] = _mm512_shuffle_ps::<0x44>(t[1], t[3]);
                u[4 * g + 3] = _mm512_shuffle_ps::<0xEE>(t[1], t[3]);
            }
            let mut out = [_mm512_setzero_ps(); W];
            for c in 0..4 {
                // Lanes 0 and 2, then 1 and 3, of the row groups 0, 1 and of 2, 3.
                let low_even = _mm512_shuffle_f32x4::<0x88>(u[c], u[4 + c]);
                let low_odd = _mm512_shuffle_f32x4::<0xDD>(u[c], u[4 + c]);
                let high_even = _mm512_shuffle_f32x4::<0x88>(u[8 + c], u[12 + c]);
                let high_odd = _mm512_shuffle_f32x4::<0xDD>(u[8 + c], u[12 + c]);
                out[c] = _mm512_shuffle_f32x4::<0x88>(low_even, high_even);
                out[8 + c] = _mm512_shuffle_f32x4::<0xDD>(low_even, high_even);
                out[4 + c] = _mm512_shuffle_f32x4::<0x88>(low_odd, high_odd);
                out[12 + c] = _mm512_shuffle_f32x4::<0xDD>(low_odd, high_odd);
            }
            out
        }
    }

    #[inline(always)]
    unsafe fn add(mut a: [__m512; W], b: [__m512; W]) -> [__m512; W] {
        for (a, b) in a.iter_mut().zip(b) {
            *a = unsafe { _mm512_add_ps(*a, b) };
        }
        a
    }

    /// `dst = src + src^T` for the pairs within the leading multiple of 16, which it returns.
    ///
    /// # Safety
    /// As `add_transpose_raw`, and the processor must have AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn add_transpose(src: *const f32, dst: *mut f32, n: usize) -> usize {
        let tiled = n / W * W;
        unsafe {
            for ib in (0..tiled).step_by(W) {
                let diagonal = load(src.add(ib * n + ib), n);
                store(dst.add(ib * n + ib), n, add(diagonal, transpose(diagonal)));
                for jb in (ib + W..tiled).step_by(W) {
                    // Both tiles are loaded before either is stored (in place: dst = src).
                    let upper = load(src.add(ib * n + jb), n);
                    let lower = load(src.add(jb * n + ib), n);
                    store(dst.add(ib * n + jb), n, add(upper, transpose(lower)));
                    store(dst.add(jb * n + ib), n, add(lower, transpose(upper)));
                }
            }
        }
        tiled
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    /// The AVX tiles alone (the path of processors without AVX-512, which the dispatch does not
    /// take on one that has it) against the definition, in and out of place.
    #[test]
    fn the_avx_tiles_alone_match_the_definition() {
        if !std::arch::is_x86_feature_detected!("avx") {
            eprintln!("skipped: the AVX tiles need a processor with AVX");
            return;
        }
        for n in [0, 1, 7, 8, 9, 16, 24, 33, 81] {
            let m: Vec<f32> = (0..n * n).map(|k| ((k * 7919) % 1000) as f32 / 7.0 - 50.0).collect();
            let expected: Vec<f32> = (0..n * n).map(|k| m[k] + m[(k % n) * n + k / n]).collect();
            let mut out = vec![0.0; n * n];
            let mut in_place = m.clone();
            // SAFETY: the processor has AVX; both buffers hold n * n entries.
            unsafe {
                super::avx::add_transpose(m.as_ptr(), out.as_mut_ptr(), n, 0);
                super::avx::add_transpose(in_place.as_ptr(), in_place.as_mut_ptr(), n, 0);
            }
            assert_eq!(out, expected, "out of place, n = {n}");
            assert_eq!(in_place, expected, "in place, n = {n}");
        }
    }
}
