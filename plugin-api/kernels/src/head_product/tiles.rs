//! The register tiles of the per-head products, written once over the vectors of an
//! instruction set ([`Lanes`], and [`Simd`] for the tiles' blocks: `avx512.rs`, `avx2.rs`).
//! Everything here is inlined into the entry points each set compiles with its own target
//! features ([`entry_points!`]).

use crate::lanes::Lanes;
use std::cell::RefCell;

thread_local! {
    /// The right operand's zero-padded copy, kept between calls (no allocation per head).
    pub(super) static PACKED: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// A matrix read where it is: first entry, row stride, column stride.
pub(super) type Matrix = (*const f32, usize, usize);

/// What the tiles need of an instruction set beyond its vectors ([`Lanes`]): whole `L x L`
/// blocks, their transposes in registers, and the column blocks its registers allow. Every
/// function is called only from code compiled for that set.
pub(super) trait Simd: Lanes {
    /// An `L x L` tile held as `L` row vectors.
    type Block;

    /// Rows `0..rows` of the tile at `p` (row stride `rs`), each through `mask`; zero rows
    /// after them.
    unsafe fn load_block(p: *const f32, rs: usize, rows: usize, mask: Self::Mask) -> Self::Block;
    unsafe fn transpose(block: Self::Block) -> Self::Block;
    /// Rows `0..rows` of `block` to `p` (row stride `rs`), each through `mask`.
    unsafe fn store_block(p: *mut f32, rs: usize, rows: usize, mask: Self::Mask, block: Self::Block);

    /// `b` (`k x n`, neither its rows nor its columns contiguous) into `out` as `k` rows of
    /// `width` (`n` rounded up to whole vectors), zeros past `n`: entry by entry, unless the
    /// set has something better.
    #[inline(always)]
    unsafe fn pack_strided(k: usize, n: usize, b: Matrix, out: *mut f32, width: usize) {
        // SAFETY: as the caller's.
        unsafe { pack_entries(k, n, b, out, width) }
    }

    /// `dst (m x n) = scale * a (m x k) b (k x n)` (plus `dst` when `accumulate`) for `b` in
    /// rows of whole vectors: column blocks of as many vectors as the set's registers allow,
    /// each by the widest tiles of rows its vectors leave registers for (`columns_by_table!`).
    #[allow(clippy::too_many_arguments)]
    unsafe fn columns(
        m: usize,
        n: usize,
        k: usize,
        a: Matrix,
        b: (*const f32, usize),
        dst: *mut f32,
        dst_rs: usize,
        scale: f32,
        accumulate: bool,
    );
}

/// `R` rows by `NV` vectors of `dst`, over the whole inner dimension `k`: `R x NV`
/// multiply-adds per step for `NV` loads and `R` broadcasts, the sums written once. `b` is
/// row-major with row stride `b_rs` and at least `NV` whole vectors a row; the last vector
/// writes only the lanes of `last`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn tile<S: Simd, const R: usize, const NV: usize>(
    k: usize,
    (a, a_rs, a_cs): Matrix,
    (b, b_rs): (*const f32, usize),
    dst: *mut f32,
    dst_rs: usize,
    last: S::Mask,
    scale: f32,
    accumulate: bool,
) {
    unsafe {
        let mut acc = [[S::zero(); NV]; R];
        for p in 0..k {
            let mut row = [S::zero(); NV];
            for (v, row) in row.iter_mut().enumerate() {
                *row = S::load(b.add(p * b_rs + v * S::L));
            }
            for (r, acc) in acc.iter_mut().enumerate() {
                let x = S::splat(*a.add(r * a_rs + p * a_cs));
                for (acc, &row) in acc.iter_mut().zip(&row) {
                    *acc = S::fmadd(x, row, *acc);
                }
            }
        }
        let s = S::splat(scale);
        for (r, acc) in acc.iter().enumerate() {
            for (v, &acc) in acc.iter().enumerate() {
                let out = dst.add(r * dst_rs + v * S::L);
                let y = S::mul(acc, s);
                if v + 1 < NV {
                    S::store(out, if accumulate { S::add(y, S::load(out)) } else { y });
                } else {
                    S::store_masked(last, out, if accumulate { S::add(y, S::load_masked(last, out)) } else { y });
                }
            }
        }
    }
}

/// All `m` rows of one column block `NV` vectors wide: tiles of `R` rows, then one tile of
/// the remaining rows (`REST` lists every count below `R`).
macro_rules! rows {
    ($simd:ty, $nv:literal, $r:literal, [$($rest:literal)*], $m:expr, $k:expr, $a:expr, $b:expr, $dst:expr, $dst_rs:expr, $last:expr, $scale:expr, $acc:expr) => {{
        let (a_at, a_rs, a_cs) = $a;
        let run = |i: usize, dst: *mut f32| (a_at.add(i * a_rs), a_rs, a_cs, dst.add(i * $dst_rs));
        let mut i = 0;
        while i + $r <= $m {
            let (a, a_rs, a_cs, dst) = run(i, $dst);
            $crate::head_product::tiles::tile::<$simd, $r, $nv>($k, (a, a_rs, a_cs), $b, dst, $dst_rs, $last, $scale, $acc);
            i += $r;
        }
        match $m - i {
            0 => {}
            $($rest => {
                let (a, a_rs, a_cs, dst) = run(i, $dst);
                $crate::head_product::tiles::tile::<$simd, $rest, $nv>($k, (a, a_rs, a_cs), $b, dst, $dst_rs, $last, $scale, $acc)
            })*
            _ => unreachable!("fewer rows than a tile remain"),
        }
    }};
}
pub(super) use rows;

/// [`Simd::columns`] for a set whose column blocks are up to `$block` vectors wide, with
/// tiles of `$r` rows for blocks of `$nv` vectors (`[$rest]`: every count of rows below `$r`).
macro_rules! columns_by_table {
    ($simd:ty, $block:literal, $($nv:literal => $r:literal [$($rest:literal)*]),+ $(,)?) => {
        #[inline(always)]
        #[allow(clippy::too_many_arguments)]
        unsafe fn columns(
            m: usize,
            n: usize,
            k: usize,
            a: $crate::head_product::tiles::Matrix,
            (b, b_rs): (*const f32, usize),
            dst: *mut f32,
            dst_rs: usize,
            scale: f32,
            accumulate: bool,
        ) {
            const L: usize = <$simd as $crate::lanes::Lanes>::L;
            unsafe {
                let mut start = 0;
                while start < n {
                    let vectors = $crate::head_product::tiles::block_vectors((n - start).div_ceil(L), $block);
                    let cols = (n - start).min(vectors * L);
                    let last = <$simd as $crate::lanes::Lanes>::first(cols - (vectors - 1) * L);
                    let (b, dst) = ((b.add(start), b_rs), dst.add(start));
                    match vectors {
                        $($nv => $crate::head_product::tiles::rows!(
                            $simd, $nv, $r, [$($rest)*], m, k, a, b, dst, dst_rs, last, scale, accumulate
                        ),)+
                        _ => unreachable!("a column block is at most {} vectors", $block),
                    }
                    start += cols;
                }
            }
        }
    };
}
pub(super) use columns_by_table;

/// The vectors of the next column block when `left` remain, blocks at most `block` wide:
/// a whole block, except that a single vector would be left after it: then half of what
/// remains (a block of one vector keeps one loaded vector for a broadcast a row).
#[inline(always)]
pub(super) fn block_vectors(left: usize, block: usize) -> usize {
    if left == block + 1 {
        left.div_ceil(2)
    } else {
        left.min(block)
    }
}

/// The entry points of one set, compiled with its target features: `product` and
/// `symmetric`, as `head_product.rs` calls them.
macro_rules! entry_points {
    ($simd:ty, $features:literal) => {
        /// [`tiles::product`](super::tiles::product) for this set.
        ///
        /// # Safety
        /// As `head_product::product_f32`, on a processor with this set.
        #[target_feature(enable = $features)]
        #[allow(clippy::too_many_arguments)]
        pub(in crate::head_product) unsafe fn product(
            size: (usize, usize, usize),
            dst: *mut f32,
            dst_rs: usize,
            a: $crate::head_product::tiles::Matrix,
            b: $crate::head_product::tiles::Matrix,
            scale: f32,
            accumulate: bool,
            packed: &mut Vec<f32>,
        ) {
            unsafe { $crate::head_product::tiles::product::<$simd>(size, dst, dst_rs, a, b, scale, accumulate, packed) }
        }

        /// [`tiles::symmetric`](super::tiles::symmetric) for this set.
        ///
        /// # Safety
        /// As `head_product::symmetric_f32`, on a processor with this set.
        #[target_feature(enable = $features)]
        pub(in crate::head_product) unsafe fn symmetric(
            size: (usize, usize),
            dst: *mut f32,
            dst_rs: usize,
            a: $crate::head_product::tiles::Matrix,
            scale: f32,
            packed: &mut Vec<f32>,
        ) {
            unsafe { $crate::head_product::tiles::symmetric::<$simd>(size, dst, dst_rs, a, scale, packed) }
        }
    };
}
pub(super) use entry_points;

/// `dst (m x n) = scale * a (m x k) b (k x n)` (plus `dst` when `accumulate`), `a` and `b`
/// read where they are (any strides), `b` copied into `packed` first unless its rows are
/// contiguous whole vectors.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn product<S: Simd>(
    (m, n, k): (usize, usize, usize),
    dst: *mut f32,
    dst_rs: usize,
    a: Matrix,
    b: Matrix,
    scale: f32,
    accumulate: bool,
    packed: &mut Vec<f32>,
) {
    unsafe {
        if m == 0 || n == 0 {
            return;
        }
        let b = whole_vector_rows::<S>(k, n, b, packed);
        S::columns(m, n, k, a, b, dst, dst_rs, scale, accumulate);
    }
}

/// `dst (n x n) = scale * a aᵀ` for `a` `n x k` (any strides): the scores of a head whose
/// queries are its keys. Only the tiles that reach the diagonal are computed, band of `L`
/// rows by band (band `i` up to column `L (i + 1)`: about half the multiply-adds of the full
/// product at `n = 81`), then each `L x L` block above the diagonal is the transpose of its
/// mirror block. Each entry is the same sum, in the same order, as [`product`] computes, so
/// the two agree bit for bit.
#[inline(always)]
pub(super) unsafe fn symmetric<S: Simd>(
    (n, k): (usize, usize),
    dst: *mut f32,
    dst_rs: usize,
    (a, a_rs, a_cs): Matrix,
    scale: f32,
    packed: &mut Vec<f32>,
) {
    unsafe {
        let b = whole_vector_rows::<S>(k, n, (a, a_cs, a_rs), packed);
        for first in (0..n).step_by(S::L) {
            let rows = (n - first).min(S::L);
            let cols = (first + S::L).min(n);
            let band = (a.add(first * a_rs), a_rs, a_cs);
            S::columns(rows, cols, k, band, b, dst.add(first * dst_rs), dst_rs, scale, false);
        }
        mirror_lower::<S>(n, dst, dst_rs);
    }
}

/// `b` (`k x n`) as row-major rows of whole vectors (row stride a multiple of `L`, at least
/// `n` rounded up): itself when it already is one, else its copy in `packed`.
#[inline(always)]
unsafe fn whole_vector_rows<S: Simd>(k: usize, n: usize, b: Matrix, packed: &mut Vec<f32>) -> (*const f32, usize) {
    let (at, b_rs, b_cs) = b;
    if b_cs == 1 && n.is_multiple_of(S::L) {
        (at, b_rs)
    } else {
        // SAFETY: the caller's `b` is `k x n` with these strides.
        (unsafe { pack::<S>(k, n, b, packed) }, n.div_ceil(S::L) * S::L)
    }
}

/// The entries above the diagonal blocks of the `n x n` `dst` from those below: block
/// `(J, I)` of `L x L` (`J < I`) is the transpose of block `(I, J)`, whose rows past `n` (the
/// last band's) are neither read nor written.
#[inline(always)]
unsafe fn mirror_lower<S: Simd>(n: usize, dst: *mut f32, dst_rs: usize) {
    unsafe {
        let whole = S::first(S::L);
        for first in (S::L..n).step_by(S::L) {
            let rows = (n - first).min(S::L);
            let mask = S::first(rows);
            for column in (0..first).step_by(S::L) {
                let block = S::load_block(dst.add(first * dst_rs + column), dst_rs, rows, whole);
                S::store_block(dst.add(column * dst_rs + first), dst_rs, S::L, mask, S::transpose(block));
            }
        }
    }
}

/// `b` (`k x n`, any strides) into `packed` as `k` rows of `n` rounded up to whole vectors,
/// zeros past `n`: contiguous rows by copies, a transposed head (`b_rs == 1`: `K_hᵀ`, `V_hᵀ`)
/// by `L x L` tiles transposed in registers (on the default heads `Q K_hᵀ` 16 % faster than
/// gathers with AVX-512), any other layout by [`Simd::pack_strided`].
#[inline(always)]
unsafe fn pack<S: Simd>(k: usize, n: usize, (b, b_rs, b_cs): Matrix, packed: &mut Vec<f32>) -> *const f32 {
    unsafe {
        let width = n.div_ceil(S::L) * S::L;
        packed.clear();
        packed.reserve(k * width);
        let out = packed.as_mut_ptr();
        if b_cs == 1 {
            for p in 0..k {
                std::ptr::copy_nonoverlapping(b.add(p * b_rs), out.add(p * width), n);
                std::ptr::write_bytes(out.add(p * width + n), 0, width - n);
            }
        } else if b_rs == 1 {
            pack_transposed::<S>(k, n, (b, b_cs), out, width);
        } else {
            S::pack_strided(k, n, (b, b_rs, b_cs), out, width);
        }
        // SAFETY: every one of the `k * width` entries was written.
        packed.set_len(k * width);
        packed.as_ptr()
    }
}

/// The `k x n` matrix whose column `j` is the `k` contiguous entries at `b + j * b_cs` into
/// `out` (`k` rows of `width >= n` rounded to whole vectors, zeros past `n`): `L` source
/// columns of up to `L` entries loaded as rows, transposed, stored as `L` packed rows.
#[inline(always)]
unsafe fn pack_transposed<S: Simd>(k: usize, n: usize, (b, b_cs): (*const f32, usize), out: *mut f32, width: usize) {
    unsafe {
        let whole = S::first(S::L);
        for j0 in (0..n).step_by(S::L) {
            // Source columns past `n` stay zero: the padding.
            let columns = (n - j0).min(S::L);
            for p0 in (0..k).step_by(S::L) {
                let depth = (k - p0).min(S::L);
                let block = S::load_block(b.add(j0 * b_cs + p0), b_cs, columns, S::first(depth));
                S::store_block(out.add(p0 * width + j0), width, depth, whole, S::transpose(block));
            }
        }
    }
}

/// [`Simd::pack_strided`] entry by entry.
#[inline(always)]
pub(super) unsafe fn pack_entries(k: usize, n: usize, (b, b_rs, b_cs): Matrix, out: *mut f32, width: usize) {
    for p in 0..k {
        for j in 0..width {
            // SAFETY: `b` is `k x n` with these strides; `out` holds `k * width`.
            unsafe { *out.add(p * width + j) = if j < n { *b.add(p * b_rs + j * b_cs) } else { 0.0 } };
        }
    }
}
