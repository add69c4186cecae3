//! The attention's per-head products (`Q_h K_hᵀ`: `N x p` by `p x N`; `P V_h`, `Pᵀ dO`,
//! `dS K_h`: `N x N` by `N x p`) in register tiles, for f32 on processors with AVX-512
//! (`avx512.rs`) or AVX2 and FMA (`avx2.rs`), written once over their vectors (`tiles.rs`).
//!
//! These products are small (81 x 81 x 32 on the default Sudoku step: 420 k multiply-adds) and
//! there are thousands of them a step; the `gemm` crate packs both operands into its panel
//! layout and then runs kernels tuned for large ones, 80–125 GFLOP/s on one AVX-512 core in
//! cache, 42–84 in a training step. Here the left operand is read where it is, one broadcast
//! per entry (any strides: a head's view of a packed `[B, N, 3W]` tensor, or a transpose);
//! the right one is read where it is when its rows are contiguous and a whole number of
//! vectors wide, else copied once into a zero-padded row-major copy (by tiles transposed in
//! registers when it is a transposed head). Each tile keeps `R` rows by `NV` vectors of
//! outputs in registers over the whole inner dimension and writes them once.
//!
//! Written by hand because no crate has small-matrix kernels for arbitrary strides; the
//! `gemm` crate remains the path for f64, processors without AVX2 and every other product.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod tiles;

/// `dst (m x n, row stride dst_rs) = scale * a (m x k) b (k x n)`, plus `dst` when
/// `accumulate`. Returns `false`, writing nothing, where the kernels run neither AVX-512 nor
/// AVX2 (`plugin_api::isa::kernels_isa`). Public as `kernels::head_product_f32` for the
/// `head_products` benchmark.
///
/// # Safety
/// `a`, `b` and `dst` must address matrices of the given sizes and strides (`dst` is not read
/// unless `accumulate`).
pub unsafe fn product_f32(
    size: (usize, usize, usize),
    dst: *mut f32,
    dst_rs: usize,
    a: (*const f32, usize, usize),
    b: (*const f32, usize, usize),
    scale: f32,
    accumulate: bool,
) -> bool {
    #[cfg(target_arch = "x86_64")]
    if let Some(set) = crate::lanes::Set::in_use() {
        // SAFETY: as this function's; the processor has the set in use.
        unsafe { product_in(set, size, dst, dst_rs, a, b, scale, accumulate) };
        return true;
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (size, dst, dst_rs, a, b, scale, accumulate);
    false
}

/// `dst (n x n, row stride dst_rs) = scale * a aᵀ` for `a` `n x k` (any strides), the
/// scores of a head whose queries are its keys (Hyper-SET's `Z Zᵀ`), computing about half of
/// [`product_f32`]'s multiply-adds and the same values bit for bit. Returns `false`, writing
/// nothing, where [`product_f32`] does.
///
/// # Safety
/// `a` and `dst` must address matrices of the given sizes and strides.
pub unsafe fn symmetric_f32(
    size: (usize, usize),
    dst: *mut f32,
    dst_rs: usize,
    a: (*const f32, usize, usize),
    scale: f32,
) -> bool {
    #[cfg(target_arch = "x86_64")]
    if let Some(set) = crate::lanes::Set::in_use() {
        // SAFETY: as this function's; the processor has the set in use.
        unsafe { symmetric_in(set, size, dst, dst_rs, a, scale) };
        return true;
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (size, dst, dst_rs, a, scale);
    false
}

/// [`product_f32`] by the tiles of `set`, with this thread's buffer for packed operands.
///
/// # Safety
/// As [`product_f32`]; the processor must have `set`.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
unsafe fn product_in(
    set: crate::lanes::Set,
    size: (usize, usize, usize),
    dst: *mut f32,
    dst_rs: usize,
    a: tiles::Matrix,
    b: tiles::Matrix,
    scale: f32,
    accumulate: bool,
) {
    tiles::PACKED.with(|packed| {
        let packed = &mut packed.borrow_mut();
        // SAFETY: as this function's.
        unsafe {
            match set {
                crate::lanes::Set::Avx512 => avx512::product(size, dst, dst_rs, a, b, scale, accumulate, packed),
                crate::lanes::Set::Avx2 => avx2::product(size, dst, dst_rs, a, b, scale, accumulate, packed),
            }
        }
    })
}

/// [`symmetric_f32`] by the tiles of `set`, with this thread's buffer for packed operands.
///
/// # Safety
/// As [`symmetric_f32`]; the processor must have `set`.
#[cfg(target_arch = "x86_64")]
unsafe fn symmetric_in(
    set: crate::lanes::Set,
    size: (usize, usize),
    dst: *mut f32,
    dst_rs: usize,
    a: tiles::Matrix,
    scale: f32,
) {
    tiles::PACKED.with(|packed| {
        let packed = &mut packed.borrow_mut();
        // SAFETY: as this function's.
        unsafe {
            match set {
                crate::lanes::Set::Avx512 => avx512::symmetric(size, dst, dst_rs, a, scale, packed),
                crate::lanes::Set::Avx2 => avx2::symmetric(size, dst, dst_rs, a, scale, packed),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::{product_f32, symmetric_f32};

    /// Whether the kernels run the tiles in this process (`WORKBENCH_KERNELS_ISA` may cap
    /// them: the tests run again under each narrower set); says so when they do not.
    fn tiles_run_here() -> bool {
        let isa = plugin_api::isa::kernels_isa();
        let tiles = cfg!(target_arch = "x86_64") && isa >= plugin_api::isa::Isa::Avx2;
        if !tiles {
            eprintln!(
                "skipped: the register tiles need AVX2 or AVX-512 (kernels: {}); only their refusal is checked",
                isa.name()
            );
        }
        tiles
    }

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
        let tiles = tiles_run_here();
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
                    assert_eq!(ran, tiles, "runs exactly where the kernels run AVX-512 or AVX2");
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
        let tiles = tiles_run_here();
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
                    assert_eq!(ran, tiles, "runs exactly where the kernels run AVX-512 or AVX2");
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
        assert!(!tiles || checked == 9 * 4 * 2, "every size compared ({checked})");
    }
}
