//! Hyper-SET's bi-softmax attention on RMS-normalised heads, fused (seed 000, Eq. 7-9):
//! from the projection `XW` (`[B, N, H p]`) and the RMSNorm gain `g` (`[p]`), per sample and
//! head `h`,
//!
//! `Z = RMSNorm(XW_h) g`, `P = softmax_row(beta Z Z^T)`, `out_h = (P + P^T) Z`,
//!
//! written back in the merged layout `[B, N, H p]`. Because the scores `A = beta Z Z^T` are
//! symmetric, `softmax(A, -2) = P^T` and `P + P^T` is the bi-softmax of `plugin_api::ops`
//! (notes-hyperset.md §1.6); `S = P + P^T` is formed from `P` in the L1 cache, not by a second
//! pass of exponentials: row by row, as `P^T_ij = P_ij u_i v_j` with per-row factors from the
//! softmax's maxima and sums ([`transpose_factors`]), or by transposing `P` where the factors
//! would leave f32's range.
//!
//! One op, one pass per (sample, head): the scores `Z Z^T` by the symmetric product (half the
//! multiply-adds), their softmax `P`, then `out` from `S`; the op keeps the weights `P` of every
//! (sample, head) (`B H N^2` values) and their factors for its backward, which thus recomputes
//! only the per-row norms `Z` from `XW` and `S` from `P`, not the scores and their
//! exponentials:
//!
//! - `dZ = S dO` (`S` is symmetric);
//! - `G = dS + dS^T = M + M^T` with `M = dO Z^T` (the gradient with respect to `P`: one
//!   product, mirrored);
//! - `dA = P (G - r)` with `r_i = sum_j G_ij P_ij`, and since `G` is symmetric
//!   `(dA + dA^T)_ij = P_ij (G_ij - r_i) + P^T_ij (G_ij - r_j)`, row by row;
//! - `dZ += beta (dA + dA^T) Z`;
//! - then the RMSNorm backward of `norm.rs` on each row: `dg = sum dZ Zhat`,
//!   `dXW = r (dZhat - Zhat mean(dZhat Zhat))` with `dZhat = dZ g`.
//!
//! Samples run in parallel; the small products go to the `gemm` crate on one thread each.

use crate::real::Real;
use crate::strided::{
    fill, fill_pair, map_chunks, output_buffer_with_room, read_vector, slice, storage_len, sum_parts, unpack, Rows,
};
use crate::transpose::{add_transpose, add_transpose_in_place};
use crate::vector::{dot, softmax_row, sum_sq};
use candle_core::{bail, CpuStorage, CustomOp2, CustomOp3, Device, Layout, Result, Shape, Tensor};
use std::sync::OnceLock;

/// `dst (m x n) = scale * lhs (m x k) * rhs (k x n)`, or `dst += ...` when `accumulate`;
/// row strides as given, unit column stride for `dst`.
///
/// # Safety
/// The pointers must address matrices of the given sizes and strides.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn product<T: Real>(
    (m, n, k): (usize, usize, usize),
    dst: *mut T,
    dst_rs: usize,
    (lhs, lhs_rs, lhs_cs): (*const T, usize, usize),
    (rhs, rhs_rs, rhs_cs): (*const T, usize, usize),
    scale: T,
    accumulate: bool,
) {
    let (a, b) = ((lhs, lhs_rs, lhs_cs), (rhs, rhs_rs, rhs_cs));
    if T::head_product((m, n, k), dst, dst_rs, a, b, scale, accumulate) {
        return;
    }
    gemm::gemm(
        m,
        n,
        k,
        dst,
        1,
        dst_rs as isize,
        accumulate,
        lhs,
        lhs_cs as isize,
        lhs_rs as isize,
        rhs,
        rhs_cs as isize,
        rhs_rs as isize,
        if accumulate { T::one() } else { T::zero() },
        scale,
        false,
        false,
        false,
        gemm::Parallelism::None,
    )
}

/// `dst (n x n) = scale * a aᵀ` for `a` `n x k`: [`product`] of `a` by its own transpose, by
/// the symmetric register tiles where they apply (half the multiply-adds, the same values).
///
/// # Safety
/// As for [`product`].
#[inline(always)]
pub(crate) unsafe fn symmetric_product<T: Real>(
    (n, k): (usize, usize),
    dst: *mut T,
    dst_rs: usize,
    a: Matrix<T>,
    scale: T,
) {
    if !T::symmetric_head_product((n, k), dst, dst_rs, a, scale) {
        product((n, n, k), dst, dst_rs, a, transposed(a), scale, false)
    }
}

/// Which entries of an `N x N` factor of a causal attention carry weight, so that a product
/// can leave out what the mask makes zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Causal {
    /// Every entry: one full product.
    Full,
    /// An `N x N` output of which only entries on or below the diagonal are read (the scores
    /// `Q K^T`): entries past each row block's last row are not written.
    LowerOutput,
    /// An `N x N` left operand that is zero past the diagonal (`P V`): each row block's inner
    /// dimension stops at its last row.
    LowerLeft,
    /// An `N x N` left operand that is zero before the diagonal (`P^T dO`): each row block's
    /// inner dimension starts at its first row.
    UpperLeft,
}

impl Causal {
    /// `triangle` when `causal`, else [`Causal::Full`].
    #[inline(always)]
    pub fn when(causal: bool, triangle: Causal) -> Causal {
        if causal {
            triangle
        } else {
            Causal::Full
        }
    }
}

/// Rows per block of a [`causal_product`]: blocks of 32 rows do 5/8 of a 128-token product's
/// multiply-adds (4 blocks), and each is still a product the register tiles run at speed.
const CAUSAL_ROWS: usize = 32;

/// [`product`] leaving out the zero (or unread) triangle `causal` names, block of rows by block
/// of rows.
///
/// # Safety
/// As for [`product`]; with [`Causal::LowerOutput`] the caller reads no entry past the
/// diagonal's row block, with the other triangles the left operand is zero where they say.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) unsafe fn causal_product<T: Real>(
    causal: Causal,
    (m, n, k): (usize, usize, usize),
    dst: *mut T,
    dst_rs: usize,
    (lhs, lhs_rs, lhs_cs): Matrix<T>,
    (rhs, rhs_rs, rhs_cs): Matrix<T>,
    scale: T,
    accumulate: bool,
) {
    if causal == Causal::Full || m <= CAUSAL_ROWS {
        return product((m, n, k), dst, dst_rs, (lhs, lhs_rs, lhs_cs), (rhs, rhs_rs, rhs_cs), scale, accumulate);
    }
    for first in (0..m).step_by(CAUSAL_ROWS) {
        let end = (first + CAUSAL_ROWS).min(m);
        let (dst, lhs) = (dst.add(first * dst_rs), lhs.add(first * lhs_rs));
        let rows = end - first;
        // The block's sizes and operands: fewer output columns, or an inner dimension that
        // stops at the block's last row or starts at its first.
        let (dims, lhs, rhs) = match causal {
            Causal::LowerOutput => ((rows, end.min(n), k), lhs, rhs),
            Causal::LowerLeft => ((rows, n, end.min(k)), lhs, rhs),
            Causal::UpperLeft => ((rows, n, k.saturating_sub(first)), lhs.add(first * lhs_cs), rhs.add(first * rhs_rs)),
            Causal::Full => unreachable!("handled above"),
        };
        product(dims, dst, dst_rs, (lhs, lhs_rs, lhs_cs), (rhs, rhs_rs, rhs_cs), scale, accumulate);
    }
}

/// The output's gradient `dO` that a backward op holds, checked to be on the CPU and of the
/// output's shape `dims`, lent to `f` with its layout.
pub(crate) fn with_output_gradient<R>(
    grad: &Tensor,
    dims: &[usize],
    op: &str,
    f: impl FnOnce(&CpuStorage, &Layout) -> Result<R>,
) -> Result<R> {
    let (storage, layout) = grad.storage_and_layout();
    let candle_core::Storage::Cpu(storage) = &*storage else { bail!("{op}: the gradient is not on the CPU") };
    if layout.dims() != dims {
        bail!("{op}: the gradient has shape {:?}, the output {dims:?}", layout.dims())
    }
    f(storage, layout)
}

/// A matrix for [`product`]: its first element, its row stride and its column stride.
pub(crate) type Matrix<T> = (*const T, usize, usize);

/// `m` transposed (the same storage read the other way).
#[inline(always)]
pub(crate) fn transposed<T>((at, rs, cs): Matrix<T>) -> Matrix<T> {
    (at, cs, rs)
}

/// Head `h` of sample `b` of a merged `[B, N, H p]` tensor (rows `rows`) as an `N x p`
/// matrix read where it is, without a copy.
#[inline(always)]
pub(crate) fn head_matrix<T: Real>(data: &[T], rows: &Rows, d: &Dims, b: usize, h: usize) -> Matrix<T> {
    let offset = rows.offset(b * d.tokens) + h * d.head_dim * rows.step;
    (data[offset.min(data.len())..].as_ptr(), rows.inner_stride(), rows.step)
}

/// Per-thread scratch of the softmax and Energy Transformer attentions for one (sample,
/// head): the head's `Q_h`, `K_h`, `V_h` (read where they are; `V_h` unused by the Energy
/// Transformer) and the attention weights `P`, `N x N`.
pub(crate) struct HeadScratch<T> {
    pub q: Matrix<T>,
    pub k: Matrix<T>,
    pub v: Matrix<T>,
    pub p: Vec<T>,
}

impl<T: Real> HeadScratch<T> {
    pub fn new(d: &Dims) -> Self {
        let none = (std::ptr::null(), 0, 0);
        HeadScratch { q: none, k: none, v: none, p: vec![T::zero(); d.tokens * d.tokens] }
    }
}

/// `dst_h = lhs (N x N) rhs (N x p)` into head `h`'s columns of one sample of a merged
/// output (`N` rows of `width`).
///
/// # Safety
/// `sample` holds `N` rows of `width >= (h + 1) p` entries; `lhs` and `rhs` are valid for
/// the strides and sizes given.
pub(crate) unsafe fn into_head<T: Real>(
    sample: &mut [T],
    h: usize,
    (n, p, width): (usize, usize, usize),
    lhs: Matrix<T>,
    rhs: Matrix<T>,
) {
    product((n, p, n), sample.as_mut_ptr().add(h * p), width, lhs, rhs, T::one(), false);
}

/// A fresh merged output (`[B, N, width]` of `d`), written by `f(scratch, b, h, sample)` for
/// every sample `b` and head `h < heads`, `sample` being the sample's `N x width` rows. Each
/// chunk of samples (a thread's share) gets its own `scratch()`. The caller marks `f`
/// `#[inline(always)]`, so that it is compiled inside `widest`.
pub(crate) fn fill_heads<T: Real, S, F>(d: &Dims, heads: usize, scratch: impl Fn() -> S + Sync, f: F) -> Vec<T>
where
    F: Fn(&mut S, usize, usize, &mut [T]) + Sync,
{
    let per_sample = d.tokens * d.width();
    fill(
        d.batch * per_sample,
        per_sample,
        #[inline(always)]
        |first, chunk: &mut [T]| {
            let mut s = scratch();
            for (k, sample) in chunk.chunks_exact_mut(per_sample.max(1)).enumerate() {
                for h in 0..heads {
                    f(&mut s, first + k, h, sample);
                }
            }
        },
    )
}

/// Shapes of one call: batch, tokens, heads, head width.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Dims {
    pub batch: usize,
    pub tokens: usize,
    pub heads: usize,
    pub head_dim: usize,
}

impl Dims {
    pub fn of(layout: &Layout, heads: usize, op: &'static str) -> Result<Self> {
        let dims = layout.dims();
        let &[batch, tokens, width] = dims else { bail!("{op}: expects [B, N, H p], got shape {dims:?}") };
        if heads == 0 || width % heads != 0 {
            bail!("{op}: width {width} is not divisible by {heads} heads")
        }
        Ok(Dims { batch, tokens, heads, head_dim: width / heads })
    }

    pub fn width(&self) -> usize {
        self.heads * self.head_dim
    }
}

/// Per-thread scratch for one (sample, head).
struct Scratch<T> {
    /// `Zhat` (normalised, before the gain), `N x p`.
    zhat: Vec<T>,
    /// `Z = Zhat g`, `N x p`.
    z: Vec<T>,
    /// `1 / rms` per token.
    inv_rms: Vec<T>,
    /// `S = P + P^T`, `N x N`; in the forward, first the scores before their softmax.
    s: Vec<T>,
    /// Per row of the weights: the scores' maximum and the inverse of the exponentials' sum.
    row_max: Vec<T>,
    row_inv_sum: Vec<T>,
}

impl<T: Real> Scratch<T> {
    fn new(d: &Dims) -> Self {
        let (n, p) = (d.tokens, d.head_dim);
        Scratch {
            zhat: vec![T::zero(); n * p],
            z: vec![T::zero(); n * p],
            inv_rms: vec![T::zero(); n],
            s: vec![T::zero(); n * n],
            row_max: vec![T::zero(); n],
            row_inv_sum: vec![T::zero(); n],
        }
    }

    /// Fills `zhat`, `z` and `inv_rms` for sample `b`, head `h`.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn normalise(&mut self, xw: &[T], rows: &Rows, d: &Dims, b: usize, h: usize, gain: &[T], eps: T) {
        let (n, hp) = (d.tokens, d.head_dim);
        let inv_len = T::c(1.0 / hp as f64);
        for i in 0..n {
            let offset = rows.offset(b * n + i) + h * hp * rows.step;
            let zhat = &mut self.zhat[i * hp..(i + 1) * hp];
            if rows.step == 1 {
                zhat.copy_from_slice(&xw[offset..offset + hp]);
            } else {
                for (c, v) in zhat.iter_mut().enumerate() {
                    *v = xw[offset + c * rows.step];
                }
            }
            let r = (sum_sq(zhat) * inv_len + eps).sqrt().recip();
            self.inv_rms[i] = r;
            let z = &mut self.z[i * hp..(i + 1) * hp];
            for ((v, z), &g) in zhat.iter_mut().zip(z.iter_mut()).zip(gain) {
                *v *= r;
                *z = *v * g;
            }
        }
    }

    /// `S = P + P^T` from the head's weights `P` (`N x N`), as the scores are symmetric and
    /// `softmax(A, -2) = P^T`: row by row from `P` and its [`transpose_factors`], else (a
    /// head whose factors leave f32's range) by transposing `P`.
    #[inline(always)]
    fn symmetrise(&mut self, p: &[T], factors: &[T], n: usize) {
        let n1 = n.max(1);
        let (u, v) = factors.split_at(n);
        if u.first().is_some_and(|u| u.is_nan()) {
            return add_transpose(p, &mut self.s, n);
        }
        for ((s, p), &ui) in self.s.chunks_exact_mut(n1).zip(p.chunks_exact(n1)).zip(u) {
            for ((s, &p), &vj) in s.iter_mut().zip(p).zip(v) {
                *s = p + p * (ui * vj);
            }
        }
    }
}

/// Largest spread of a head's row maxima for which [`transpose_factors`] stay within f32's
/// range (`e^(SPREAD / 2)` times a row sum of at most `N`).
const FACTOR_SPREAD: f64 = 60.0;

/// The factors `u`, `v` (`N` each, into `factors`) with `P^T_ij = P_ij u_i v_j` for a head's
/// weights `P_ij = e^(A_ij - m_i) / l_i` on symmetric scores `A`: `P_ji / P_ij =
/// e^(m_i - m_j) l_i / l_j`, so `u_i = e^(m_i - c) l_i` and `v_j = e^(c - m_j) / l_j` around the
/// middle `c` of the maxima `m`. With them `S = P + P^T` is a pass over the rows of `P`, where
/// a transpose moves every entry through registers by 16 x 16 tiles (about 2 us a head at
/// `N = 81`). When the maxima spread further than [`FACTOR_SPREAD`] (or are not numbers),
/// `u_0` is NaN: the head is transposed instead.
#[inline(always)]
fn transpose_factors<T: Real, const FMA: bool>(row_max: &[T], row_inv_sum: &[T], factors: &mut [T]) {
    let (u, v) = factors.split_at_mut(row_max.len());
    let (low, high) = row_max
        .iter()
        .fold((T::infinity(), T::neg_infinity()), |(l, h), &m| (if m < l { m } else { l }, if m > h { m } else { h }));
    let spread = high - low;
    // Also when the spread is not a number.
    if spread.partial_cmp(&T::c(FACTOR_SPREAD)) != Some(std::cmp::Ordering::Less) {
        u.fill(T::nan());
        return;
    }
    let middle = (high + low) * T::c(0.5);
    for (((u, v), &m), &inv) in u.iter_mut().zip(v.iter_mut()).zip(row_max).zip(row_inv_sum) {
        *u = (m - middle).exp_fast::<FMA>() / inv;
        *v = (middle - m).exp_fast::<FMA>() * inv;
    }
}

/// The entries the bi-softmax attention keeps per sample: each head's weights `P` (`N x N`),
/// then each head's [`transpose_factors`] (`2 N`).
fn kept_per_sample(d: &Dims) -> usize {
    d.heads * d.tokens * (d.tokens + 2)
}

/// Head `h` of sample `b` of the kept weights: `P` and its transpose factors.
#[inline(always)]
fn kept_head<'a, T>(kept: &'a [T], d: &Dims, b: usize, h: usize) -> (&'a [T], &'a [T]) {
    let (n, sample) = (d.tokens, &kept[b * kept_per_sample(d)..][..kept_per_sample(d)]);
    let (weights, factors) = sample.split_at(d.heads * n * n);
    (&weights[h * n * n..][..n * n], &factors[h * 2 * n..][..2 * n])
}

/// Head `h` of sample `b` of the weights `[B, H, N, N]`.
#[inline(always)]
pub(crate) fn head_weights<'a, T>(p: &'a [T], d: &Dims, b: usize, h: usize) -> &'a [T] {
    let per_head = d.tokens * d.tokens;
    &p[(b * d.heads + h) * per_head..][..per_head]
}

/// A fresh `[B, H, N, N]` of attention weights, the `N x N` block `p` of sample `b`, head `h`
/// written by `f(scratch, b, h, p)`. Each chunk of samples (a thread's share) gets its own
/// `scratch()`; the caller marks `f` `#[inline(always)]`, so that it is compiled inside `widest`.
pub(crate) fn fill_weights<T: Real, S, F>(d: &Dims, scratch: impl Fn() -> S + Sync, f: F) -> Vec<T>
where
    F: Fn(&mut S, usize, usize, &mut [T]) + Sync,
{
    let per_head = d.tokens * d.tokens;
    fill(
        d.batch * d.heads * per_head,
        d.heads * per_head,
        #[inline(always)]
        |first, chunk: &mut [T]| {
            let mut s = scratch();
            for (k, sample) in chunk.chunks_exact_mut((d.heads * per_head).max(1)).enumerate() {
                for (h, p) in sample.chunks_exact_mut(per_head.max(1)).enumerate() {
                    f(&mut s, first + k, h, p);
                }
            }
        },
    )
}

/// `out_h = (P + P^T) Z` into the merged layout, and what the backward keeps of every
/// (sample, head): the weights `P = softmax_row(beta Z Z^T)` and their [`transpose_factors`]
/// (laid out by [`kept_head`]). One pass per head: the scores by the symmetric product into
/// the head's scratch, in the L1 cache (the product's mirrored stores into the fresh `P` would
/// cost what its halved multiply-adds save), their softmax row by row into `P`, then
/// `S = P + P^T` from `P` while it is still in the cache.
fn forward<T: Real>(xw: &[T], rows: &Rows, d: Dims, gain: &[T], eps: f64, beta: f64) -> (Vec<T>, Vec<T>) {
    let (n, width, hp) = (d.tokens, d.width(), d.head_dim);
    let (eps, beta) = (T::c(eps), T::c(beta));
    let per_head = n * n;
    fill_pair(
        d.batch,
        (n * width, kept_per_sample(&d)),
        #[inline(always)]
        |first, out: &mut [T], kept: &mut [T]| {
            let mut scratch = Scratch::new(&d);
            // By the kept entries' samples: they are written even when heads are empty.
            for (k, kept) in kept.chunks_exact_mut(kept_per_sample(&d).max(1)).enumerate() {
                let sample = &mut out[k * n * width..][..n * width];
                let (weights, factors) = kept.split_at_mut(d.heads * per_head);
                let heads = weights.chunks_exact_mut(per_head.max(1)).zip(factors.chunks_exact_mut((2 * n).max(1)));
                for (h, (p, factors)) in heads.enumerate() {
                    scratch.normalise(xw, rows, &d, first + k, h, gain, eps);
                    let z = scratch.z.as_ptr();
                    // SAFETY: `scratch.s` is N x N; `z` is N x p.
                    unsafe { symmetric_product((n, hp), scratch.s.as_mut_ptr(), n, (z, hp, 1), beta) }
                    let rows = p.chunks_exact_mut(n.max(1)).zip(scratch.s.chunks_exact(n.max(1)));
                    for (i, (row, scores)) in rows.enumerate() {
                        (scratch.row_max[i], scratch.row_inv_sum[i]) = softmax_row(scores, row);
                    }
                    with_fma!(transpose_factors::<T>(&scratch.row_max, &scratch.row_inv_sum, factors));
                    scratch.symmetrise(p, factors, n);
                    // out_h = S Z, written into the head's columns.
                    unsafe { into_head(sample, h, (n, hp, width), (scratch.s.as_ptr(), n, 1), (z, hp, 1)) }
                }
            }
        },
    )
}

/// `[dXW (flattened), dg]`.
#[allow(clippy::too_many_arguments)]
fn backward<T: Real>(
    xw: &[T],
    rows: &Rows,
    d: Dims,
    gain: &[T],
    p: &[T],
    grad: &[T],
    grad_rows: &Rows,
    eps: f64,
    beta: f64,
) -> Vec<T> {
    let (n, width, hp) = (d.tokens, d.width(), d.head_dim);
    let total = d.batch * n * width;
    let mut out = output_buffer_with_room(total, hp);
    let (eps, beta) = (T::c(eps), T::c(beta));
    let dg = map_chunks(
        &mut out,
        n * width,
        #[inline(always)]
        |first, chunk| {
            let mut scratch = Scratch::new(&d);
            let mut dg = vec![T::zero(); hp];
            let mut dz = vec![T::zero(); n * hp];
            let mut g = vec![T::zero(); n * n];
            let mut row_dot = vec![T::zero(); n];
            let inv_len = T::c(1.0 / hp as f64);
            for (k, sample) in chunk.chunks_exact_mut((n * width).max(1)).enumerate() {
                let b = first + k;
                for h in 0..d.heads {
                    scratch.normalise(xw, rows, &d, b, h, gain, eps);
                    let (p, factors) = kept_head(p, &d, b, h);
                    scratch.symmetrise(p, factors, n);
                    let d_out = head_matrix(grad, grad_rows, &d, b, h);
                    let z = (scratch.z.as_ptr(), hp, 1);
                    unsafe {
                        // M = dO Z^T, then G = dS + dS^T = M + M^T (the gradient with
                        // respect to P) by mirroring, not a second product.
                        product((n, n, hp), g.as_mut_ptr(), n, d_out, transposed(z), T::one(), false);
                        // dZ = S dO.
                        product((n, hp, n), dz.as_mut_ptr(), hp, (scratch.s.as_ptr(), n, 1), d_out, T::one(), false);
                    }
                    add_transpose_in_place(&mut g, n);
                    // dA = P (G - r) with r_i = sum_j G_ij P_ij; its symmetric part, row by row
                    // (G is symmetric and P^T = S - P):
                    // (dA + dA^T)_ij = P_ij (G_ij - r_i) + P^T_ij (G_ij - r_j), written over G.
                    let n1 = n.max(1);
                    for (r, (g, p)) in row_dot.iter_mut().zip(g.chunks_exact(n1).zip(p.chunks_exact(n1))) {
                        *r = dot(g, p);
                    }
                    for ((g, &ri), (p, s)) in
                        g.chunks_exact_mut(n1).zip(&row_dot).zip(p.chunks_exact(n1).zip(scratch.s.chunks_exact(n1)))
                    {
                        for (((g, &p), &s), &rj) in g.iter_mut().zip(p).zip(s).zip(&row_dot) {
                            *g = p * (*g - ri) + (s - p) * (*g - rj);
                        }
                    }
                    // dZ += beta (dA + dA^T) Z.
                    unsafe {
                        product((n, hp, n), dz.as_mut_ptr(), hp, (g.as_ptr(), n, 1), z, beta, true);
                    }
                    // RMSNorm with gain, backward, into the head's columns of dXW.
                    for i in 0..n {
                        let (zhat, dzr) = (&scratch.zhat[i * hp..(i + 1) * hp], &mut dz[i * hp..(i + 1) * hp]);
                        // Zipped rather than indexed: without the bounds checks the loops vectorise.
                        for ((dg, dz), (&zhat, &gain)) in dg.iter_mut().zip(dzr.iter_mut()).zip(zhat.iter().zip(gain)) {
                            *dg += *dz * zhat;
                            *dz *= gain;
                        }
                        let k = dot(dzr, zhat) * inv_len;
                        let r = scratch.inv_rms[i];
                        let dx = &mut sample[i * width + h * hp..i * width + (h + 1) * hp];
                        for ((dx, &dz), &zhat) in dx.iter_mut().zip(dzr.iter()).zip(zhat) {
                            *dx = r * (dz - zhat * k);
                        }
                    }
                }
            }
            dg
        },
        sum_parts,
    );
    out.extend(dg);
    out
}

/// The fused attention: arguments `XW` (`[B, N, H p]`) and `g` (`[p]`). The forward keeps the
/// weights `P` it computes (`B H N^2` entries) and their transpose factors (`2 B H N`) for the
/// backward, which would otherwise recompute the scores and their exponentials.
pub(crate) struct BiSoftmaxAttention {
    pub heads: usize,
    pub eps: f64,
    pub beta: f64,
    /// `P` and its transpose factors, laid out by [`kept_head`], set by the forward.
    pub weights: OnceLock<Tensor>,
}

fn check_gain(d: &Dims, gl: &Layout, op: &'static str) -> Result<()> {
    if gl.dims() != [d.head_dim] {
        bail!("{op}: the gain must have shape [{}] (the head width), got {:?}", d.head_dim, gl.dims())
    }
    Ok(())
}

/// What [`BiSoftmaxAttention`]'s forward keeps for `d` (laid out by [`kept_head`]) as one
/// slice.
fn kept_slice<'a, T: Real>(s: &'a CpuStorage, l: &Layout, d: &Dims, op: &'static str) -> Result<&'a [T]> {
    let expected = [d.batch * kept_per_sample(d)];
    match l.contiguous_offsets() {
        Some((start, end)) if l.dims() == expected => Ok(&slice::<T>(s, op)?[start..end]),
        _ => bail!("{op}: the kept weights must be contiguous {expected:?}, got {:?}", l.dims()),
    }
}

impl CustomOp2 for BiSoftmaxAttention {
    fn name(&self) -> &'static str {
        "fused-bi-softmax-attention"
    }

    /// The scores `Z Z^T` and the product `(P + P^T) Z`.
    fn product_flops(&self, _xw: &Shape, _g: &Shape, res: &Shape) -> u64 {
        crate::flops::token_pair_products(res, 2)
    }

    fn kept_bytes(&self) -> usize {
        self.weights.get().map_or(0, |p| p.elem_count() * p.dtype().size_in_bytes())
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout, gs: &CpuStorage, gl: &Layout) -> Result<(CpuStorage, Shape)> {
        let (name, d, rows) = (self.name(), Dims::of(l, self.heads, self.name())?, Rows::new(l));
        check_gain(&d, gl, name)?;
        let out = per_real!(s, name, |T| {
            let g = read_vector::<T>(gs, gl, name)?;
            let (out, weights) = forward(slice::<T>(s, name)?, &rows, d, &g, self.eps, self.beta);
            let weights = Tensor::from_vec(weights, d.batch * kept_per_sample(&d), &Device::Cpu)?;
            if self.weights.set(weights).is_err() {
                bail!("{name}: one op ran its forward twice (its weights are kept for one backward)")
            }
            out
        });
        Ok((out, l.shape().clone()))
    }

    fn bwd(&self, xw: &Tensor, g: &Tensor, _res: &Tensor, grad: &Tensor) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let Some(p) = self.weights.get() else { bail!("{}: the backward ran before the forward", self.name()) };
        // The gain (`[p]`) travels in the op, so that the weights can be an argument.
        let gain = g.to_dtype(candle_core::DType::F64)?.to_vec1::<f64>()?;
        let op = BiSoftmaxAttentionBackward { heads: self.heads, eps: self.eps, beta: self.beta, gain };
        let [dxw, dg] = unpack(&xw.apply_op3_no_bwd(p, grad, &op)?, [xw, g])?;
        Ok((Some(dxw), Some(dg)))
    }
}

/// The backward of [`BiSoftmaxAttention`]: arguments `XW`, `P`, `dO`; result `[dXW, dg]`.
struct BiSoftmaxAttentionBackward {
    heads: usize,
    eps: f64,
    beta: f64,
    gain: Vec<f64>,
}

impl CustomOp3 for BiSoftmaxAttentionBackward {
    fn name(&self) -> &'static str {
        "fused-bi-softmax-attention-backward"
    }

    fn cpu_fwd(
        &self,
        s: &CpuStorage,
        l: &Layout,
        ps: &CpuStorage,
        pl: &Layout,
        ds: &CpuStorage,
        dl: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (name, d) = (self.name(), Dims::of(l, self.heads, self.name())?);
        if self.gain.len() != d.head_dim {
            bail!("{name}: the gain has {} entries for heads of width {}", self.gain.len(), d.head_dim)
        }
        let (rows, grad_rows) = (Rows::new(l), Rows::new(dl));
        let out = per_real!(s, name, |T| {
            let g: Vec<T> = self.gain.iter().map(|&v| T::c(v)).collect();
            let (xw, p, grad) = (slice::<T>(s, name)?, kept_slice::<T>(ps, pl, &d, name)?, slice::<T>(ds, name)?);
            backward(xw, &rows, d, &g, p, grad, &grad_rows, self.eps, self.beta)
        });
        let len = storage_len(&out);
        Ok((out, Shape::from(len)))
    }
}
