//! `M + M^T` of a small square matrix (one attention head's `N x N` weights or their
//! gradient), out of place or in place; and the transposed copy of a matrix
//! (`transpose_into`), by the same register tiles.
//!
//! A scalar loop over the pairs `(i, j)`, `(j, i)` reads the matrix by columns an element at
//! a time and does not vectorise: about 4.5 us of every 81 x 81 head, three times per head
//! and iteration in a bi-softmax training step. For f32 on processors with AVX the matrix is
//! taken in pairs of 8 x 8 tiles `(I, J)`, `(J, I)`, each transposed in registers by the usual
//! unpack / shuffle / lane-permute sequence, so every element is loaded and stored once as
//! part of an 8-wide vector; with AVX-512, 16 x 16 tiles first (a third fewer shuffles an
//! element, half the loads and stores), then 8 x 8 tiles for a band left between the two
//! widths. No crate offers this fused with the sum (transpose crates copy).

#[cfg(target_arch = "x86_64")]
use crate::lanes::Set;
use crate::linear::Strided;
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
        // SAFETY: `T` is `f32` and the processor has the set's instructions (each has AVX).
        return match Set::in_use() {
            Some(Set::Avx512) => unsafe {
                let from = avx512::add_transpose(src.cast(), dst.cast(), n);
                avx::add_transpose(src.cast(), dst.cast(), n, from)
            },
            Some(Set::Avx2) => unsafe { avx::add_transpose(src.cast(), dst.cast(), n, 0) },
            None => unsafe { pairs(src, dst, n, 0) },
        };
    }
    unsafe { pairs(src, dst, n, 0) }
}

/// `dst` (`cols x rows`, row-major) = the transpose of the `rows x cols` matrix `s` of
/// `src`: a contiguous copy of an operand that a product would otherwise read through a
/// transposed view (`normed_feedforward.rs`). For f32 rows of adjacent entries, by tiles
/// transposed in registers as above; the edges, other strides and f64 by 16 x 16 blocks of
/// single entries, which keep the rows read and written in the cache meanwhile.
pub(crate) fn transpose_into<T: Real>(src: &[T], s: Strided, (rows, cols): (usize, usize), dst: &mut [T]) {
    assert!(dst.len() >= rows * cols, "transpose_into: {} entries for a {cols} x {rows} transpose", dst.len());
    if rows == 0 || cols == 0 {
        return;
    }
    assert!(s.index(rows - 1, cols - 1) < src.len(), "transpose_into: a {rows} x {cols} matrix past its storage");
    // Rows and columns done by the tiles, which cover `[0, tiled.0) x [0, tiled.1)`; then
    // what they left: the columns past theirs in their rows, and every row past theirs.
    let tiled = by_tiles(src, s, (rows, cols), dst);
    by_entries(src, s, (0..tiled.0, tiled.1..cols), rows, dst);
    by_entries(src, s, (tiled.0..rows, 0..cols), rows, dst);
}

/// [`transpose_into`] of the entries in `rows x cols` of `s` (a matrix of `height` rows), by
/// 16 x 16 blocks of single entries.
fn by_entries<T: Real>(
    src: &[T],
    s: Strided,
    (rows, cols): (std::ops::Range<usize>, std::ops::Range<usize>),
    height: usize,
    dst: &mut [T],
) {
    const BLOCK: usize = 16;
    for i0 in rows.clone().step_by(BLOCK) {
        for j0 in cols.clone().step_by(BLOCK) {
            for i in i0..(i0 + BLOCK).min(rows.end) {
                for j in j0..(j0 + BLOCK).min(cols.end) {
                    dst[j * height + i] = src[s.index(i, j)];
                }
            }
        }
    }
}

/// The whole tiles of [`transpose_into`] where the processor has them for `T` and the rows'
/// entries are adjacent; returns the rows and columns they cover (none elsewhere).
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
fn by_tiles<T: Real>(src: &[T], s: Strided, (rows, cols): (usize, usize), dst: &mut [T]) -> (usize, usize) {
    let (offset, row_stride, col_stride) = s.parts();
    #[cfg(target_arch = "x86_64")]
    if std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>() && col_stride == 1 {
        let (from, to) = (src[offset..].as_ptr().cast::<f32>(), dst.as_mut_ptr().cast::<f32>());
        // SAFETY: `T` is `f32`; every tile lies inside the matrix (checked by the caller) and
        // inside `dst`; the instruction sets are the processor's (`Set::in_use`).
        return match Set::in_use() {
            Some(Set::Avx512) => unsafe { avx512::transpose_tiles(from, row_stride, (rows, cols), to) },
            Some(Set::Avx2) => unsafe { avx::transpose_tiles(from, row_stride, (rows, cols), to) },
            None => (0, 0),
        };
    }
    (0, 0)
}

/// [`transpose_into`]'s whole tiles, in a module with the tile's `W`, `load`, `transpose` and
/// `store`, for the instruction set of `$feature`.
#[cfg(target_arch = "x86_64")]
macro_rules! tile_transposes {
    ($feature:literal, $name:literal) => {
        /// `dst` (`cols x rows`) from `src` (`rows x cols`, row stride `src_rs`) by whole
        /// tiles; returns the rows and columns they covered.
        ///
        /// # Safety
        /// Both matrices must lie in their buffers, and the processor must have
        #[doc = $name]
        #[target_feature(enable = $feature)]
        pub(super) unsafe fn transpose_tiles(
            src: *const f32,
            src_rs: usize,
            (rows, cols): (usize, usize),
            dst: *mut f32,
        ) -> (usize, usize) {
            super::for_each_tile(W, (rows, cols), |i, j| {
                // SAFETY: the tile lies inside both matrices.
                unsafe { store(dst.add(j * rows + i), rows, transpose(load(src.add(i * src_rs + j), src_rs))) }
            })
        }
    };
}

/// Calls `tile(i, j)` at the first entry of each whole `w x w` tile of a `rows x cols`
/// matrix; returns the rows and columns the tiles cover.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn for_each_tile(w: usize, (rows, cols): (usize, usize), mut tile: impl FnMut(usize, usize)) -> (usize, usize) {
    let tiled = (rows / w * w, cols / w * w);
    for i in (0..tiled.0).step_by(w) {
        for j in (0..tiled.1).step_by(w) {
            tile(i, j);
        }
    }
    tiled
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
pub(crate) mod avx {
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

    /// The transpose of an `8 x 8` tile held as eight rows. Also packs the per-head
    /// products' transposed operands with AVX2 (`head_product/avx2.rs`).
    ///
    /// # Safety
    /// The processor must have AVX (the caller is compiled for it).
    #[inline(always)]
    pub(crate) unsafe fn transpose(r: [__m256; W]) -> [__m256; W] {
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

    tile_transposes!("avx", "AVX");

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
    /// Also packs the per-head products' transposed operands (`head_product/avx512.rs`).
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

    tile_transposes!("avx512f", "AVX-512F");

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

#[cfg(test)]
mod tests {
    use super::transpose_into;
    use crate::linear::Strided;

    /// Every entry lands at its mirrored place, for shapes with and without whole tiles (of
    /// 16 and of 8) and edges on either side, f32 and f64, from a row-major matrix (the
    /// tiles' path), from one inside a wider storage and from a transposed view (single
    /// entries). The kernels' tests run again under narrower instruction sets, which takes
    /// this through the AVX2 tiles and the scalar path too.
    #[test]
    fn a_transposed_copy_mirrors_every_entry() {
        fn check<T: crate::real::Real + std::fmt::Debug>() {
            for (rows, cols) in [(0, 5), (5, 0), (1, 1), (3, 40), (16, 16), (17, 33), (81, 128), (128, 512), (40, 9)] {
                // A storage of `rows x (cols + 3)` after an offset of 2: rows, then columns
                // adjacent (row stride cols + 3), and the same entries read as the transpose
                // of a `cols x rows` view.
                let width = cols + 3;
                let storage: Vec<T> = (0..2 + rows * width).map(|v| T::c(v as f64)).collect();
                let value = |i: usize, j: usize| storage[2 + i * width + j];
                let mut expected = vec![T::zero(); rows * cols];
                for (i, j) in (0..rows).flat_map(|i| (0..cols).map(move |j| (i, j))) {
                    expected[j * rows + i] = value(i, j);
                }
                let by_rows = Strided::rows_of(width).with_offset(2);
                let mut out = vec![T::nan(); rows * cols];
                transpose_into(&storage, by_rows, (rows, cols), &mut out);
                assert_eq!(out, expected, "{rows} x {cols} by rows");
                // The matrix again: from the copy, and from the storage read as the
                // transposed `cols x rows` view.
                let original: Vec<T> =
                    (0..rows).flat_map(|i| (0..cols).map(move |j| (i, j))).map(|(i, j)| value(i, j)).collect();
                let mut again = vec![T::nan(); rows * cols];
                transpose_into(&out, Strided::rows_of(rows), (cols, rows), &mut again);
                assert_eq!(again, original, "{rows} x {cols} from its copy");
                let mut through_view = vec![T::nan(); rows * cols];
                transpose_into(&storage, by_rows.transposed(), (cols, rows), &mut through_view);
                assert_eq!(through_view, original, "{rows} x {cols} through the transposed view");
            }
        }
        check::<f32>();
        check::<f64>();
    }

    #[test]
    #[should_panic(expected = "past its storage")]
    fn a_matrix_past_its_storage_is_refused() {
        let mut out = vec![0f32; 12];
        transpose_into(&[0f32; 11], Strided::rows_of(4), (3, 4), &mut out);
    }

    /// The AVX tiles alone (the path of processors without AVX-512, which the dispatch does not
    /// take on one that has it) against the definition, in and out of place.
    #[test]
    #[cfg(target_arch = "x86_64")]
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
