//! The attention's per-head products (`Q_h K_hᵀ`: `N x p` by `p x N`; `P V_h`, `Pᵀ dO`,
//! `dS K_h`: `N x N` by `N x p`) in AVX-512 register tiles, for f32 on processors that have it.
//!
//! These products are small (81 x 81 x 32 on the default Sudoku step: 420 k multiply-adds) and
//! there are thousands of them a step; the `gemm` crate packs both operands into its panel
//! layout and then runs kernels tuned for large ones, 80–125 GFLOP/s on one AVX-512 core in
//! cache, 42–84 in a training step. Here the left operand is read where it is, one broadcast
//! per entry (any strides: a head's view of a packed `[B, N, 3W]` tensor, or a transpose);
//! the right one is read where it is when its rows are contiguous and a whole number of
//! vectors wide, else copied once into a zero-padded row-major copy (by 16 x 16 tiles
//! transposed in registers when it is a transposed head, else by gathers). Each tile keeps `R`
//! rows by `NV` vectors of 16 outputs in registers over the whole inner dimension and writes
//! them once: `R x NV` multiply-adds per step for `NV` loads and `R` broadcasts.
//!
//! Written by hand because no crate has small-matrix kernels for arbitrary strides; the
//! `gemm` crate remains the path for f64, other processors and every other product.

/// `dst (m x n, row stride dst_rs) = scale * a (m x k) b (k x n)`, plus `dst` when
/// `accumulate`. Returns `false`, writing nothing, on a processor without AVX-512. Public as
/// `kernels::head_product_f32` for the `head_products` benchmark.
///
/// # Safety
/// `a`, `b` and `dst` must address matrices of the given sizes and strides (`dst` is not read
/// unless `accumulate`).
pub unsafe fn product_f32(
    (m, n, k): (usize, usize, usize),
    dst: *mut f32,
    dst_rs: usize,
    a: (*const f32, usize, usize),
    b: (*const f32, usize, usize),
    scale: f32,
    accumulate: bool,
) -> bool {
    on_avx512(|_packed| {
        // SAFETY: the processor has AVX-512F; the caller vouches for the matrices.
        #[cfg(target_arch = "x86_64")]
        unsafe {
            x86::product(m, n, k, dst, dst_rs, a, b, scale, accumulate, _packed)
        }
    })
}

/// `dst (n x n, row stride dst_rs) = scale * a aᵀ` for `a` `n x k` (any strides), the
/// scores of a head whose queries are its keys (Hyper-SET's `Z Zᵀ`), computing about half of
/// [`product_f32`]'s multiply-adds and the same values bit for bit. Returns `false`, writing
/// nothing, on a processor without AVX-512.
///
/// # Safety
/// `a` and `dst` must address matrices of the given sizes and strides.
pub unsafe fn symmetric_f32(
    (n, k): (usize, usize),
    dst: *mut f32,
    dst_rs: usize,
    a: (*const f32, usize, usize),
    scale: f32,
) -> bool {
    on_avx512(|_packed| {
        // SAFETY: the processor has AVX-512F; the caller vouches for the matrices.
        #[cfg(target_arch = "x86_64")]
        unsafe {
            x86::symmetric(n, k, dst, dst_rs, a, scale, _packed)
        }
    })
}

/// Runs `tiles` with this thread's buffer for packed right operands, on a processor with
/// AVX-512; `false`, running nothing, on any other.
fn on_avx512(tiles: impl FnOnce(&mut Vec<f32>)) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        if plugin_api::isa::kernels_isa() == plugin_api::isa::Isa::Avx512 {
            x86::PACKED.with(|packed| tiles(&mut packed.borrow_mut()));
            return true;
        }
    }
    let _ = tiles;
    false
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;
    use std::cell::RefCell;

    /// f32 lanes of a vector.
    const L: usize = 16;
    /// Output columns of one pass: six vectors (96), so that a 4-row tile keeps 24
    /// accumulators and six loaded vectors in the 32 registers.
    const BLOCK: usize = 6 * L;

    thread_local! {
        /// The right operand's zero-padded copy, kept between calls (no allocation per head).
        pub(super) static PACKED: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    }

    /// `R` rows by `NV` vectors of `dst`, over the whole inner dimension `k`; `b` is row-major
    /// with row stride `b_rs` and at least `NV * 16` readable entries a row. The last vector
    /// writes only the lanes of `last`.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn tile<const R: usize, const NV: usize>(
        k: usize,
        (a, a_rs, a_cs): (*const f32, usize, usize),
        (b, b_rs): (*const f32, usize),
        dst: *mut f32,
        dst_rs: usize,
        last: __mmask16,
        scale: f32,
        accumulate: bool,
    ) {
        unsafe {
            let mut acc = [[_mm512_setzero_ps(); NV]; R];
            for p in 0..k {
                let mut row = [_mm512_setzero_ps(); NV];
                for (v, row) in row.iter_mut().enumerate() {
                    *row = _mm512_loadu_ps(b.add(p * b_rs + v * L));
                }
                for (r, acc) in acc.iter_mut().enumerate() {
                    let x = _mm512_set1_ps(*a.add(r * a_rs + p * a_cs));
                    for (acc, &row) in acc.iter_mut().zip(&row) {
                        *acc = _mm512_fmadd_ps(x, row, *acc);
                    }
                }
            }
            let s = _mm512_set1_ps(scale);
            for (r, acc) in acc.iter().enumerate() {
                for (v, &acc) in acc.iter().enumerate() {
                    let out = dst.add(r * dst_rs + v * L);
                    let mask = if v == NV - 1 { last } else { !0 };
                    let mut y = _mm512_mul_ps(acc, s);
                    if accumulate {
                        y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(mask, out));
                    }
                    _mm512_mask_storeu_ps(out, mask, y);
                }
            }
        }
    }

    /// All `m` rows of one column block `NV` vectors wide: tiles of `R` rows, then one tile of
    /// the remaining rows (`REST` lists every count below `R`).
    macro_rules! rows {
        ($nv:literal, $r:literal, [$($rest:literal)*], $m:expr, $k:expr, $a:expr, $b:expr, $dst:expr, $dst_rs:expr, $last:expr, $scale:expr, $acc:expr) => {{
            let (a_at, a_rs, a_cs) = $a;
            let run = |i: usize, dst: *mut f32| (a_at.add(i * a_rs), a_rs, a_cs, dst.add(i * $dst_rs));
            let mut i = 0;
            while i + $r <= $m {
                let (a, a_rs, a_cs, dst) = run(i, $dst);
                tile::<$r, $nv>($k, (a, a_rs, a_cs), $b, dst, $dst_rs, $last, $scale, $acc);
                i += $r;
            }
            match $m - i {
                0 => {}
                $($rest => {
                    let (a, a_rs, a_cs, dst) = run(i, $dst);
                    tile::<$rest, $nv>($k, (a, a_rs, a_cs), $b, dst, $dst_rs, $last, $scale, $acc)
                })*
                _ => unreachable!("fewer rows than a tile remain"),
            }
        }};
    }

    #[target_feature(enable = "avx512f")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn product(
        m: usize,
        n: usize,
        k: usize,
        dst: *mut f32,
        dst_rs: usize,
        a: (*const f32, usize, usize),
        (b, b_rs, b_cs): (*const f32, usize, usize),
        scale: f32,
        accumulate: bool,
        packed: &mut Vec<f32>,
    ) {
        unsafe {
            if m == 0 || n == 0 {
                return;
            }
            // The right operand as row-major rows of whole vectors: itself, or a copy.
            let (b, b_rs) = whole_vector_rows(k, n, (b, b_rs, b_cs), packed);
            columns(m, n, k, a, (b, b_rs), dst, dst_rs, scale, accumulate);
        }
    }

    /// `dst (n x n) = scale * a aᵀ` for `a` `n x k` (any strides): the scores of a head whose
    /// queries are its keys. Only the tiles that reach the diagonal are computed, band of 16
    /// rows by band (band `i` up to column `16 (i + 1)`: about half the multiply-adds of the
    /// full product at `n = 81`), then each 16 x 16 block above the diagonal is the transpose of
    /// its mirror block, transposed in registers. Each entry is the same sum, in the same
    /// order, as [`product`] computes, so the two agree bit for bit.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn symmetric(
        n: usize,
        k: usize,
        dst: *mut f32,
        dst_rs: usize,
        (a, a_rs, a_cs): (*const f32, usize, usize),
        scale: f32,
        packed: &mut Vec<f32>,
    ) {
        unsafe {
            let b = whole_vector_rows(k, n, (a, a_cs, a_rs), packed);
            for first in (0..n).step_by(L) {
                let rows = (n - first).min(L);
                let cols = (first + L).min(n);
                let band = (a.add(first * a_rs), a_rs, a_cs);
                columns(rows, cols, k, band, b, dst.add(first * dst_rs), dst_rs, scale, false);
            }
            mirror_lower(n, dst, dst_rs);
        }
    }

    /// `b` (`k x n`) as row-major rows of whole vectors (row stride a multiple of 16, at least
    /// `n` rounded up): itself when it already is one, else its copy in `packed`.
    #[inline(always)]
    unsafe fn whole_vector_rows(
        k: usize,
        n: usize,
        (b, b_rs, b_cs): (*const f32, usize, usize),
        packed: &mut Vec<f32>,
    ) -> (*const f32, usize) {
        if b_cs == 1 && n.is_multiple_of(L) {
            (b, b_rs)
        } else {
            // SAFETY: the caller's `b` is `k x n` with these strides.
            (unsafe { pack(k, n, (b, b_rs, b_cs), packed) }, n.div_ceil(L) * L)
        }
    }

    /// `dst (m x n) = scale * a (m x k) b (k x n)` (plus `dst` when `accumulate`) for `b` in
    /// rows of whole vectors, in column blocks of up to six vectors, each by the widest tiles
    /// of rows its vectors leave registers for.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn columns(
        m: usize,
        n: usize,
        k: usize,
        a: (*const f32, usize, usize),
        (b, b_rs): (*const f32, usize),
        dst: *mut f32,
        dst_rs: usize,
        scale: f32,
        accumulate: bool,
    ) {
        unsafe {
            for start in (0..n).step_by(BLOCK) {
                let cols = (n - start).min(BLOCK);
                let last: __mmask16 = if cols.is_multiple_of(L) { !0 } else { (1 << (cols % L)) - 1 };
                let (b, dst) = ((b.add(start), b_rs), dst.add(start));
                match cols.div_ceil(L) {
                    1 => {
                        rows!(1, 24, [1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23], m, k, a, b, dst, dst_rs, last, scale, accumulate)
                    }
                    2 => rows!(2, 12, [1 2 3 4 5 6 7 8 9 10 11], m, k, a, b, dst, dst_rs, last, scale, accumulate),
                    3 => rows!(3, 8, [1 2 3 4 5 6 7], m, k, a, b, dst, dst_rs, last, scale, accumulate),
                    4 => rows!(4, 6, [1 2 3 4 5], m, k, a, b, dst, dst_rs, last, scale, accumulate),
                    5 => rows!(5, 4, [1 2 3], m, k, a, b, dst, dst_rs, last, scale, accumulate),
                    _ => rows!(6, 4, [1 2 3], m, k, a, b, dst, dst_rs, last, scale, accumulate),
                }
            }
        }
    }

    /// The entries above the diagonal blocks of the `n x n` `dst` from those below: block
    /// `(J, I)` of 16 x 16 (`J < I`) is the transpose of block `(I, J)`, whose rows past `n`
    /// (the last band's) are neither read nor written.
    #[inline(always)]
    unsafe fn mirror_lower(n: usize, dst: *mut f32, dst_rs: usize) {
        unsafe {
            for first in (L..n).step_by(L) {
                let rows = (n - first).min(L);
                let mask: __mmask16 = if rows == L { !0 } else { (1 << rows) - 1 };
                for column in (0..first).step_by(L) {
                    let mut block = [_mm512_setzero_ps(); L];
                    for (r, row) in block.iter_mut().enumerate().take(rows) {
                        *row = _mm512_loadu_ps(dst.add((first + r) * dst_rs + column));
                    }
                    let block = crate::transpose::avx512::transpose(block);
                    for (c, row) in block.iter().enumerate() {
                        _mm512_mask_storeu_ps(dst.add((column + c) * dst_rs + first), mask, *row);
                    }
                }
            }
        }
    }

    /// `b` (`k x n`, any strides) into `packed` as `k` rows of `n` rounded up to whole
    /// vectors, zeros past `n`. A transposed head (`b_rs == 1`: `K_hᵀ`, `V_hᵀ`) goes by
    /// 16 x 16 tiles transposed in registers; any other layout by one gather per 16 entries
    /// (its rows are 16 different cache lines; a gather reads them in one instruction). On the
    /// default heads the tiles make `Q K_hᵀ` 16 % faster than the gathers did.
    #[target_feature(enable = "avx512f")]
    unsafe fn pack(
        k: usize,
        n: usize,
        (b, b_rs, b_cs): (*const f32, usize, usize),
        packed: &mut Vec<f32>,
    ) -> *const f32 {
        unsafe {
            let vectors = n.div_ceil(L);
            let width = vectors * L;
            packed.clear();
            packed.reserve(k * width);
            let out = packed.as_mut_ptr();
            if b_rs == 1 {
                pack_transposed(k, n, (b, b_cs), out, width);
                // SAFETY: every one of the `k * width` entries was written.
                packed.set_len(k * width);
                return packed.as_ptr();
            }
            if n.saturating_mul(b_cs) > i32::MAX as usize {
                // Column offsets past a gather's 32-bit reach: entry by entry.
                for p in 0..k {
                    for j in 0..width {
                        *out.add(p * width + j) = if j < n { *b.add(p * b_rs + j * b_cs) } else { 0.0 };
                    }
                }
                packed.set_len(k * width);
                return packed.as_ptr();
            }
            let lanes = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
            for v in 0..vectors {
                let cols = (n - v * L).min(L);
                let mask: __mmask16 = if cols == L { !0 } else { (1 << cols) - 1 };
                // Offsets of columns v * 16 + lane (within i32, checked above).
                let offsets = _mm512_mullo_epi32(
                    _mm512_add_epi32(lanes, _mm512_set1_epi32((v * L) as i32)),
                    _mm512_set1_epi32(b_cs as i32),
                );
                for p in 0..k {
                    let row = _mm512_mask_i32gather_ps::<4>(_mm512_setzero_ps(), mask, offsets, b.add(p * b_rs));
                    _mm512_storeu_ps(out.add(p * width + v * L), row);
                }
            }
            // SAFETY: every one of the `k * width` entries was written above.
            packed.set_len(k * width);
            packed.as_ptr()
        }
    }

    /// The `k x n` matrix whose column `j` is the `k` contiguous entries at `b + j * b_cs`
    /// into `out` (`k` rows of `width >= n` rounded to whole vectors, zeros past `n`): 16
    /// source columns of up to 16 entries loaded as rows, transposed, stored as 16 packed
    /// rows of 16.
    #[target_feature(enable = "avx512f")]
    unsafe fn pack_transposed(k: usize, n: usize, (b, b_cs): (*const f32, usize), out: *mut f32, width: usize) {
        unsafe {
            for j0 in (0..n).step_by(L) {
                let columns = (n - j0).min(L);
                for p0 in (0..k).step_by(L) {
                    let depth = (k - p0).min(L);
                    let mask: __mmask16 = if depth == L { !0 } else { (1 << depth) - 1 };
                    // Source columns past `n` stay zero: the padding.
                    let mut rows = [_mm512_setzero_ps(); L];
                    for (c, row) in rows.iter_mut().enumerate().take(columns) {
                        *row = _mm512_maskz_loadu_ps(mask, b.add((j0 + c) * b_cs + p0));
                    }
                    let rows = crate::transpose::avx512::transpose(rows);
                    for (q, row) in rows.iter().enumerate().take(depth) {
                        _mm512_storeu_ps(out.add((p0 + q) * width + j0), *row);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{product_f32, symmetric_f32};

    /// A deterministic value in [-1, 1) for entry `i` of operand `seed`.
    fn value(i: usize, seed: usize) -> f32 {
        ((i.wrapping_mul(2_654_435_761).wrapping_add(seed * 40_503)) % 2000) as f32 / 1000.0 - 1.0
    }

    /// An `rows x cols` operand stored row-major with `pad` spare entries a row, or (with
    /// `transposed`) as the transpose of such a matrix: `(storage, row stride, column stride)`.
    fn operand(rows: usize, cols: usize, pad: usize, transposed: bool, seed: usize) -> (Vec<f32>, usize, usize) {
        let (outer, inner) = if transposed { (cols, rows) } else { (rows, cols) };
        let stride = inner + pad;
        let data = (0..outer * stride + 1).map(|i| value(i, seed)).collect();
        if transposed {
            (data, 1, stride)
        } else {
            (data, stride, 1)
        }
    }

    #[test]
    fn head_products_match_a_plain_sum_for_every_tile_and_layout() {
        let avx512 = plugin_api::isa::kernels_isa() == plugin_api::isa::Isa::Avx512;
        if !avx512 {
            eprintln!("skipped: the register tiles need AVX-512; only their refusal is checked here");
        }
        // (m, n, k): the default heads, each vector count of a column block (1-6) with and
        // without a partial last vector, rows past and short of a tile, two column blocks,
        // and empty products.
        let sizes = [
            (81, 81, 32),
            (81, 32, 81),
            (25, 16, 9),
            (26, 15, 3),
            (13, 48, 5),
            (7, 64, 4),
            (9, 80, 2),
            (11, 90, 6),
            (30, 100, 7),
            (3, 200, 3),
            (1, 1, 1),
            (4, 20, 0),
            (0, 5, 3),
            (5, 0, 3),
        ];
        for (s, &(m, n, k)) in sizes.iter().enumerate() {
            for (a_t, b_t, b_pad) in [(false, false, 0), (true, false, 3), (false, true, 0), (true, true, 2)] {
                for accumulate in [false, true] {
                    let (a, a_rs, a_cs) = operand(m, k, 2, a_t, 3 * s);
                    let (b, b_rs, b_cs) = operand(k, n, b_pad, b_t, 3 * s + 1);
                    // The output has spare columns that must stay as they are.
                    let dst_rs = n + 5;
                    let before: Vec<f32> = (0..m * dst_rs).map(|i| value(i, 3 * s + 2)).collect();
                    let mut dst = before.clone();
                    let scale = 0.37f32;
                    // SAFETY: the operands and the output hold the sizes and strides given.
                    let ran = unsafe {
                        product_f32(
                            (m, n, k),
                            dst.as_mut_ptr(),
                            dst_rs,
                            (a.as_ptr(), a_rs, a_cs),
                            (b.as_ptr(), b_rs, b_cs),
                            scale,
                            accumulate,
                        )
                    };
                    assert_eq!(ran, avx512, "runs exactly where the processor has AVX-512");
                    if !ran {
                        assert_eq!(dst, before, "a refused product writes nothing");
                        continue;
                    }
                    let label = format!("{m}x{n}x{k} a^T={a_t} b^T={b_t} accumulate={accumulate}");
                    for i in 0..m {
                        for j in 0..dst_rs {
                            let got = dst[i * dst_rs + j];
                            let old = before[i * dst_rs + j];
                            if j >= n {
                                assert_eq!(got, old, "{label}: spare column ({i}, {j}) written");
                                continue;
                            }
                            let sum: f64 =
                                (0..k).map(|p| a[i * a_rs + p * a_cs] as f64 * b[p * b_rs + j * b_cs] as f64).sum();
                            let expected = scale as f64 * sum + if accumulate { old as f64 } else { 0.0 };
                            assert!(
                                (got as f64 - expected).abs() <= 1e-5 * (1.0 + k as f64),
                                "{label}: ({i}, {j}) {got} vs {expected}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn symmetric_products_equal_the_full_product_bit_for_bit() {
        let avx512 = plugin_api::isa::kernels_isa() == plugin_api::isa::Isa::Avx512;
        if !avx512 {
            eprintln!("skipped: the register tiles need AVX-512; only their refusal is checked here");
        }
        // n: empty, within one band, on and past band edges, the default heads, two column
        // blocks of six vectors; k: empty, short, a partial and a whole transpose tile.
        let mut checked = 0;
        for n in [0, 1, 15, 16, 17, 33, 81, 100, 130] {
            for k in [0, 1, 5, 32] {
                for a_t in [false, true] {
                    let (a, a_rs, a_cs) = operand(n, k, 3, a_t, n + k);
                    let dst_rs = n + 5;
                    let before: Vec<f32> = (0..n * dst_rs).map(|i| value(i, 7)).collect();
                    let (mut full, mut symmetric) = (before.clone(), before.clone());
                    let scale = 0.37f32;
                    let matrix = (a.as_ptr(), a_rs, a_cs);
                    // SAFETY: `a` is n x k with these strides; both outputs n rows of dst_rs.
                    let ran = unsafe { symmetric_f32((n, k), symmetric.as_mut_ptr(), dst_rs, matrix, scale) };
                    assert_eq!(ran, avx512, "runs exactly where the processor has AVX-512");
                    if !ran {
                        assert_eq!(symmetric, before, "a refused product writes nothing");
                        continue;
                    }
                    let transposed = (a.as_ptr(), a_cs, a_rs);
                    // SAFETY: as above.
                    unsafe { product_f32((n, n, k), full.as_mut_ptr(), dst_rs, matrix, transposed, scale, false) };
                    let label = format!("{n}x{n}x{k} a^T={a_t}");
                    for (e, (&s, &f)) in symmetric.iter().zip(&full).enumerate() {
                        assert_eq!(
                            s.to_bits(),
                            f.to_bits(),
                            "{label}: entry ({}, {}) {s} vs {f}",
                            e / dst_rs,
                            e % dst_rs
                        );
                    }
                    for i in 0..n {
                        for j in 0..n {
                            let sum: f64 =
                                (0..k).map(|p| a[i * a_rs + p * a_cs] as f64 * a[j * a_rs + p * a_cs] as f64).sum();
                            let got = symmetric[i * dst_rs + j] as f64;
                            assert!((got - scale as f64 * sum).abs() <= 1e-5 * (1.0 + k as f64), "{label}: ({i}, {j})");
                        }
                    }
                    checked += 1;
                }
            }
        }
        assert!(!avx512 || checked == 9 * 4 * 2, "every size compared ({checked})");
    }
}
