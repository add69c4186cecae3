//! Standard multi-head softmax attention as one op: from `Q`, `K`, `V` (each `[B, N, H p]`,
//! the merged layout of the projections), per sample and head `h`,
//!
//! `P = softmax_row(scale Q_h K_h^T)`, `out_h = D(P) V_h`,
//!
//! written back in the merged layout `[B, N, H p]`. With `causal`, key `j > i` is left out of
//! query `i`'s softmax (the `-inf` of `plugin_api::ops::causal_mask`): its row is the softmax
//! of its first `i + 1` scores and zero after. `D` is the identity, or GPT-2's attention
//! dropout: a seeded mask on the `[B, H, N, N]` weights (`dropout_mask.rs`), kept entries
//! scaled by `1 / (1 - rate)`.
//!
//! When a gradient will be asked for, the op keeps the weights `P` of every (sample, head)
//! (`B H N^2` values, as Hyper-SET's attention keeps its own) so that the backward need not
//! recompute the scores, their exponentials and one of its products; otherwise each (sample,
//! head) works in its own `N x N` scratch and nothing of size `B H N^2` is stored but the
//! mask's flags. The backward:
//!
//! - `dV = D(P)^T dO`, `dP = D(dO V^T)` (the mask is linear: its own transpose);
//! - `dS = P (dP - rowsum(dP P))` (entry-wise products; masked entries have `P = 0`);
//! - `dQ = scale dS K`, `dK = scale dS^T Q`.
//!
//! `Q`, `K` and `V` may be one tensor (CRATE's MSSA attends with `Q = K = V`); candle then adds
//! the three gradients. Samples run in parallel; the products go to the `gemm` crate on one
//! thread each.

use crate::attention::{
    causal_product, fill_heads, fill_weights, head_matrix, head_weights, transposed, with_output_gradient, Causal,
    Dims, HeadScratch, Matrix,
};
use crate::dropout_mask::DropMask;
use crate::real::Real;
use crate::strided::{for_each_chunk, output_buffer, parallel_plan, slice, storage_len, three_gradients, Rows};
use crate::vector::{dot, softmax_in_place};
use crate::widest::{inlined, widest};
use candle_core::{bail, CpuStorage, CustomOp1, CustomOp3, Layout, Result, Shape, Tensor};
use rayon::prelude::*;
use std::sync::{Arc, OnceLock};

impl<T: Real> HeadScratch<T> {
    /// Points at `Q_h`, `K_h`, `V_h` of sample `b`.
    #[inline(always)]
    fn take_head(&mut self, [q, k, v]: [(&[T], &Rows); 3], d: &Dims, b: usize, h: usize) {
        self.q = head_matrix(q.0, q.1, d, b, h);
        self.k = head_matrix(k.0, k.1, d, b, h);
        self.v = head_matrix(v.0, v.1, d, b, h);
    }

    /// Takes `Q_h`, `K_h`, `V_h` of sample `b` and fills `p` with the attention weights.
    #[inline(always)]
    fn attend_softmax(&mut self, inputs: [(&[T], &Rows); 3], d: &Dims, b: usize, h: usize, scale: T, causal: bool) {
        self.take_head(inputs, d, b, h);
        softmax_weights(self.q, self.k, d, scale, causal, &mut self.p);
    }
}

/// `P = softmax_row(scale Q_h K_h^T)` into `p` (`N x N`; over keys `<= i` if causal, zero after).
#[inline(always)]
fn softmax_weights<T: Real>(q: Matrix<T>, k: Matrix<T>, d: &Dims, scale: T, causal: bool, p: &mut [T]) {
    let (n, hp) = (d.tokens, d.head_dim);
    // SAFETY: `p` holds N x N entries; `q` and `k` are the head's N x p. When causal, the
    // product leaves out (most of) the masked triangle, which the loop then zeroes.
    let scores = Causal::when(causal, Causal::LowerOutput);
    unsafe { causal_product(scores, (n, n, hp), p.as_mut_ptr(), n, q, transposed(k), scale, false) }
    for (i, row) in p.chunks_exact_mut(n.max(1)).enumerate() {
        if causal {
            let (kept, masked) = row.split_at_mut(i + 1);
            softmax_in_place(kept);
            masked.fill(T::zero());
        } else {
            softmax_in_place(row);
        }
    }
}

/// The weights `P` of every (sample, head), `[B, H, N, N]`.
fn weights<T: Real>(inputs: [(&[T], &Rows); 3], d: Dims, scale: f64, causal: bool) -> Vec<T> {
    let scale = T::c(scale);
    fill_weights(
        &d,
        || HeadScratch::new(&d),
        #[inline(always)]
        |scratch, b, h, p| {
            scratch.take_head(inputs, &d, b, h);
            softmax_weights(scratch.q, scratch.k, &d, scale, causal, p);
        },
    )
}

/// The output; from the weights `kept` of [`weights`] if given, else computing them head by head.
fn forward<T: Real>(
    inputs: [(&[T], &Rows); 3],
    d: Dims,
    scale: f64,
    causal: bool,
    mask: Option<&DropMask>,
    kept: Option<&[T]>,
) -> Vec<T> {
    let (n, width, hp) = (d.tokens, d.width(), d.head_dim);
    let scale = T::c(scale);
    fill_heads(
        &d,
        d.heads,
        // The head's scratch, and D(P) when the mask applies to kept weights.
        || (HeadScratch::new(&d), vec![T::zero(); if mask.is_some() && kept.is_some() { n * n } else { 0 }]),
        #[inline(always)]
        |(scratch, dropped), b, h, sample: &mut [T]| {
            let weights = match kept {
                Some(kept) => {
                    scratch.take_head(inputs, &d, b, h);
                    let p = head_weights(kept, &d, b, h);
                    match mask {
                        Some(mask) => {
                            mask.apply_into(b * d.heads + h, p, dropped);
                            dropped.as_ptr()
                        }
                        None => p.as_ptr(),
                    }
                }
                None => {
                    scratch.attend_softmax(inputs, &d, b, h, scale, causal);
                    if let Some(mask) = mask {
                        mask.apply(b * d.heads + h, &mut scratch.p);
                    }
                    scratch.p.as_ptr()
                }
            };
            // out_h = D(P) V_h, written into the head's columns (D(P) is zero past the diagonal
            // when causal).
            let lower_left = Causal::when(causal, Causal::LowerLeft);
            let dst = unsafe { sample.as_mut_ptr().add(h * hp) };
            unsafe { causal_product(lower_left, (n, hp, n), dst, width, (weights, n, 1), scratch.v, T::one(), false) }
        },
    )
}

/// Where the backward writes `dQ`, `dK` and `dV`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum GradLayout {
    /// Three `[B, N, W]` blocks, one after the other.
    Separate,
    /// Side by side in each row, `[B, N, 3W]`: the gradient of one projection `[Q | K | V]`.
    Packed,
}

/// `dQ`, `dK` and `dV` laid out as `layout` says.
fn backward<T: Real>(
    inputs: [(&[T], &Rows); 3],
    grad: (&[T], &Rows),
    d: Dims,
    scale: f64,
    mask: Option<&DropMask>,
    kept: &[T],
    (layout, causal): (GradLayout, bool),
) -> Vec<T> {
    let (n, width, hp) = (d.tokens, d.width(), d.head_dim);
    // When causal, `P`, `D(P)` and `dS` are zero past the diagonal (a row `i` keeps its first
    // `i + 1` entries) and the products leave that triangle out.
    let kept_of = |i: usize| if causal { i + 1 } else { n };
    let [lower_output, lower_left, upper_left] =
        [Causal::LowerOutput, Causal::LowerLeft, Causal::UpperLeft].map(|t| Causal::when(causal, t));
    let per_sample = n * width;
    let total = d.batch * per_sample;
    // Every entry is written: each head's products fill its columns of dQ, dK and dV.
    let mut out = output_buffer(3 * total);
    let scale = T::c(scale);
    // Samples `first..first + samples`: `dst` holds where dQ, dK and dV of sample `first`
    // start, `row_stride` apart from row to row and `sample_stride` from sample to sample.
    let run = inlined(
        #[inline(always)]
        |first: usize, samples: usize, dst: [*mut T; 3], row_stride: usize, sample_stride: usize| {
            let mut scratch = HeadScratch::new(&d);
            let mut ds = vec![T::zero(); n * n];
            // D(P) when there is a mask (`P` itself is needed for dS).
            let mut dropped = vec![T::zero(); if mask.is_some() { n * n } else { 0 }];
            for k in 0..samples {
                let b = first + k;
                // SAFETY: the callers pass pointers into `out` with room for `samples` samples.
                let [dq, dk, dv] = dst.map(|at| unsafe { at.add(k * sample_stride) });
                for h in 0..d.heads {
                    scratch.take_head(inputs, &d, b, h);
                    let p = head_weights(kept, &d, b, h);
                    let d_out = head_matrix(grad.0, grad.1, &d, b, h);
                    let col = h * hp;
                    let weights = match mask {
                        Some(mask) => {
                            mask.apply_into(b * d.heads + h, p, &mut dropped);
                            dropped.as_ptr()
                        }
                        None => p.as_ptr(),
                    };
                    unsafe {
                        // dV = D(P)^T dO; dP = D(dO V^T) (into `ds`).
                        let dv = dv.add(col);
                        causal_product(upper_left, (n, hp, n), dv, row_stride, (weights, 1, n), d_out, T::one(), false);
                        let v_t = transposed(scratch.v);
                        causal_product(lower_output, (n, n, hp), ds.as_mut_ptr(), n, d_out, v_t, T::one(), false);
                    }
                    if let Some(mask) = mask {
                        mask.apply(b * d.heads + h, &mut ds);
                    }
                    // dS = P (dP - rowsum(dP P)).
                    for (i, (g, p)) in ds.chunks_exact_mut(n).zip(p.chunks_exact(n)).enumerate() {
                        let (g, masked) = g.split_at_mut(kept_of(i));
                        let p = &p[..kept_of(i)];
                        let row_dot = dot(g, p);
                        for (g, &p) in g.iter_mut().zip(p) {
                            *g = p * (*g - row_dot);
                        }
                        masked.fill(T::zero());
                    }
                    unsafe {
                        // dQ = scale dS K; dK = scale dS^T Q.
                        let (dq, dk, ds_rows, ds_t) =
                            (dq.add(col), dk.add(col), (ds.as_ptr(), n, 1), (ds.as_ptr(), 1, n));
                        causal_product(lower_left, (n, hp, n), dq, row_stride, ds_rows, scratch.k, scale, false);
                        causal_product(upper_left, (n, hp, n), dk, row_stride, ds_t, scratch.q, scale, false);
                    }
                }
            }
        },
    );
    if per_sample == 0 {
        return out;
    }
    match layout {
        GradLayout::Separate => {
            let (dq, rest) = out.split_at_mut(total);
            let (dk, dv) = rest.split_at_mut(total);
            let task = |first: usize, dq: &mut [T], dk: &mut [T], dv: &mut [T]| {
                let samples = dq.len() / per_sample;
                let dst = [dq.as_mut_ptr(), dk.as_mut_ptr(), dv.as_mut_ptr()];
                widest(
                    #[inline(always)]
                    || run(first, samples, dst, width, per_sample),
                )
            };
            match parallel_plan(total, per_sample) {
                Some(per_task) => {
                    let len = per_task * per_sample;
                    dq.par_chunks_mut(len)
                        .zip(dk.par_chunks_mut(len))
                        .zip(dv.par_chunks_mut(len))
                        .enumerate()
                        .for_each(|(c, ((dq, dk), dv))| task(c * per_task, dq, dk, dv));
                }
                None => task(0, dq, dk, dv),
            }
        }
        GradLayout::Packed => for_each_chunk(
            &mut out,
            3 * per_sample,
            #[inline(always)]
            |first, chunk: &mut [T]| {
                let at = chunk.as_mut_ptr();
                // SAFETY: each row of the chunk holds `3 * width` entries.
                let dst = unsafe { [at, at.add(width), at.add(2 * width)] };
                run(first, chunk.len() / (3 * per_sample), dst, 3 * width, 3 * per_sample)
            },
        ),
    }
    out
}

/// The shapes of `Q`, `K`, `V`: the same `[B, N, H p]` for all three.
fn dims_of(layouts: [&Layout; 3], heads: usize, op: &'static str) -> Result<Dims> {
    let [q, k, v] = layouts;
    if k.dims() != q.dims() || v.dims() != q.dims() {
        bail!("{op}: q, k and v must have one shape, got {:?}, {:?}, {:?}", q.dims(), k.dims(), v.dims())
    }
    Dims::of(q, heads, op)
}

/// A mask must hold one block of `N x N` flags per (sample, head).
fn check_mask(mask: Option<&DropMask>, d: &Dims, op: &'static str) -> Result<()> {
    match mask {
        Some(mask) if !mask.covers(d.batch * d.heads, d.tokens * d.tokens) => {
            bail!("{op}: the dropout mask was drawn for another shape than {d:?}")
        }
        _ => Ok(()),
    }
}

/// The fused attention: arguments `Q`, `K`, `V` (`[B, N, H p]` each).
pub(crate) struct SoftmaxAttention {
    heads: usize,
    scale: f64,
    causal: bool,
    /// The dropout mask of the `[B, H, N, N]` weights, if any (drawn before the op, kept for
    /// the backward).
    mask: Option<Arc<DropMask>>,
    /// Whether to keep the weights `P` for the backward (when a gradient will be asked for).
    keep_weights: bool,
    /// The weights `[B, H, N, N]` the forward kept.
    weights: OnceLock<CpuStorage>,
}

impl SoftmaxAttention {
    pub fn new(heads: usize, scale: f64, causal: bool, mask: Option<Arc<DropMask>>, keep_weights: bool) -> Self {
        SoftmaxAttention { heads, scale, causal, mask, keep_weights, weights: OnceLock::new() }
    }

    /// The bytes of the weights and the dropout mask it keeps for its backward.
    fn kept(&self) -> usize {
        crate::strided::kept_bytes(self.weights.get()) + self.mask.as_ref().map_or(0, |m| m.bytes())
    }

    /// The output of `Q`, `K`, `V` (their storages and layouts, possibly one storage).
    fn forward_on(&self, storages: [&CpuStorage; 3], layouts: [&Layout; 3], name: &'static str) -> Result<CpuStorage> {
        let d = dims_of(layouts, self.heads, name)?;
        check_mask(self.mask.as_deref(), &d, name)?;
        let rows = layouts.map(Rows::new);
        Ok(per_real!(storages[0], name, |T| {
            let inputs = [
                (slice::<T>(storages[0], name)?, &rows[0]),
                (slice::<T>(storages[1], name)?, &rows[1]),
                (slice::<T>(storages[2], name)?, &rows[2]),
            ];
            let kept = self.keep_weights.then(|| weights(inputs, d, self.scale, self.causal));
            let out = forward(inputs, d, self.scale, self.causal, self.mask.as_deref(), kept.as_deref());
            if let Some(kept) = kept {
                // A fresh op per call: nothing was kept before.
                let _ = self.weights.set(candle_core::WithDType::to_cpu_storage_owned(kept));
            }
            out
        }))
    }

    /// The backward op for the output's gradient `grad`, writing `layout`.
    fn backward_op(&self, grad: &Tensor, layout: GradLayout) -> SoftmaxAttentionBackward<'_> {
        SoftmaxAttentionBackward {
            kept: self.weights.get(),
            heads: self.heads,
            scale: self.scale,
            mask: self.mask.clone(),
            grad: grad.clone(),
            layout,
            causal: self.causal,
        }
    }
}

impl CustomOp3 for SoftmaxAttention {
    fn name(&self) -> &'static str {
        "fused-softmax-attention"
    }

    /// The scores `Q K^T` and the product with `V`.
    fn product_flops(&self, _q: &Shape, _k: &Shape, _v: &Shape, res: &Shape) -> u64 {
        crate::flops::token_pair_products(res, 2)
    }

    fn kept_bytes(&self) -> usize {
        self.kept()
    }

    fn cpu_fwd(
        &self,
        qs: &CpuStorage,
        ql: &Layout,
        ks: &CpuStorage,
        kl: &Layout,
        vs: &CpuStorage,
        vl: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        Ok((self.forward_on([qs, ks, vs], [ql, kl, vl], self.name())?, ql.shape().clone()))
    }

    fn bwd(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        // A custom op takes at most three arguments: `dO` travels in the op (concatenating it
        // to `V` copied both, 0.6 % of a Transformer step).
        let op = self.backward_op(grad, GradLayout::Separate);
        three_gradients(&op, [q, k, v])
    }
}

/// [`SoftmaxAttention`] on one projection `[Q | K | V]` (`[B, N, 3 H p]`, the three side by
/// side in each row): one product `X [W_Q | W_K | W_V]` instead of three, and the gradient comes
/// back in the same layout for that product's backward (separate `Q`, `K`, `V` views of it
/// would each get a gradient padded with zeros to the whole width, then summed).
pub(crate) struct PackedSoftmaxAttention(pub SoftmaxAttention);

/// The layouts of `Q`, `K` and `V` within a packed `[B, N, 3W]` layout.
fn packed_parts(layout: &Layout, op: &'static str) -> Result<[Layout; 3]> {
    let dims = layout.dims();
    let &[_, _, packed] = dims else { bail!("{op}: expects [B, N, 3 H p], got shape {dims:?}") };
    if packed % 3 != 0 {
        bail!("{op}: the last dimension {packed} is not three widths [Q | K | V]")
    }
    let width = packed / 3;
    Ok([layout.narrow(2, 0, width)?, layout.narrow(2, width, width)?, layout.narrow(2, 2 * width, width)?])
}

impl CustomOp1 for PackedSoftmaxAttention {
    fn name(&self) -> &'static str {
        "fused-softmax-attention-packed"
    }

    fn product_flops(&self, _qkv: &Shape, res: &Shape) -> u64 {
        crate::flops::token_pair_products(res, 2)
    }

    fn kept_bytes(&self) -> usize {
        self.0.kept()
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let name = self.name();
        let [q, k, v] = packed_parts(layout, name)?;
        Ok((self.0.forward_on([storage; 3], [&q, &k, &v], name)?, q.shape().clone()))
    }

    fn bwd(&self, qkv: &Tensor, _res: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        let op = self.0.backward_op(grad, GradLayout::Packed);
        Ok(Some(qkv.apply_op1_no_bwd(&op)?.reshape(qkv.shape())?))
    }
}

/// The backward of [`SoftmaxAttention`] and [`PackedSoftmaxAttention`]: arguments `Q`, `K` and
/// `V` (or the packed `[Q | K | V]`), the output's gradient `dO` held by the op; result `dQ`,
/// `dK`, `dV` flattened, laid out as `layout` says.
struct SoftmaxAttentionBackward<'a> {
    /// The weights the forward kept, if it did.
    kept: Option<&'a CpuStorage>,
    heads: usize,
    scale: f64,
    mask: Option<Arc<DropMask>>,
    grad: Tensor,
    layout: GradLayout,
    causal: bool,
}

impl SoftmaxAttentionBackward<'_> {
    fn backward_on(
        &self,
        storages: [&CpuStorage; 3],
        layouts: [&Layout; 3],
        name: &'static str,
    ) -> Result<(CpuStorage, Shape)> {
        let d = dims_of(layouts, self.heads, name)?;
        check_mask(self.mask.as_deref(), &d, name)?;
        let out = with_output_gradient(&self.grad, layouts[0].dims(), name, |gs, grad_layout| {
            let rows = layouts.map(Rows::new);
            let grad_rows = Rows::new(grad_layout);
            Ok(per_real!(storages[0], name, |T| {
                let inputs = [
                    (slice::<T>(storages[0], name)?, &rows[0]),
                    (slice::<T>(storages[1], name)?, &rows[1]),
                    (slice::<T>(storages[2], name)?, &rows[2]),
                ];
                let grad = (slice::<T>(gs, name)?, &grad_rows);
                // The forward keeps the weights whenever the graph records the op.
                let Some(kept) = self.kept else { bail!("{name}: the forward kept no attention weights") };
                let kept = slice::<T>(kept, name)?;
                backward(inputs, grad, d, self.scale, self.mask.as_deref(), kept, (self.layout, self.causal))
            }))
        })?;
        let len = storage_len(&out);
        Ok((out, Shape::from(len)))
    }
}

impl CustomOp3 for SoftmaxAttentionBackward<'_> {
    fn name(&self) -> &'static str {
        "fused-softmax-attention-backward"
    }

    fn cpu_fwd(
        &self,
        qs: &CpuStorage,
        ql: &Layout,
        ks: &CpuStorage,
        kl: &Layout,
        vs: &CpuStorage,
        vl: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        self.backward_on([qs, ks, vs], [ql, kl, vl], CustomOp3::name(self))
    }
}

impl CustomOp1 for SoftmaxAttentionBackward<'_> {
    fn name(&self) -> &'static str {
        "fused-softmax-attention-packed-backward"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let name = CustomOp1::name(self);
        let [q, k, v] = packed_parts(layout, name)?;
        self.backward_on([storage; 3], [&q, &k, &v], name)
    }
}
