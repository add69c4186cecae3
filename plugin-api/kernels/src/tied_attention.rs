//! CEM's attention (seed 002 Eq. 5, 12 and Appendix B) as one op: from the queries `Q` and the
//! keys `K` (`[B, N, H p]` each, the merged layout of the projections), the keys being also
//! the values (`W^V = W^K`, Eq. 5), per sample `b` and head `h`,
//!
//! `P = softmax_row(scale Q_h K_h^T + S_b + A_h)`, `out_h = P K_h`,
//!
//! written back in the merged layout. `S` (`[B, N, N]`, shared by a sample's heads: CEM's
//! shared KQ diagonal, `hn^T diag(d) u / tau`) and `A` (`[H, N, N]`, shared by the samples:
//! ALiBi's biases) are optional additive scores; with `causal`, key `j > i` is left out of
//! query `i`'s softmax. The `N x N` scores are formed, offset and normalised while in the
//! cache, instead of three `[B, H, N, N]` passes over memory and candle's broadcast reductions
//! in the backward.
//!
//! The forward keeps the weights `P` when a gradient will be asked for. The backward, with
//! `dZ` the gradient of the scores:
//!
//! - `dP = dO K_h^T`, `dZ = P (dP - rowsum(dP P))` (masked entries have `P = 0`);
//! - `dQ_h = scale dZ K_h`, `dK_h = scale dZ^T Q_h + P^T dO` (as keys, then as values);
//! - `dS_b = sum_h dZ`, `dA_h = sum_b dZ`.
//!
//! Samples run in parallel; the products are those of `attention::product` (register tiles
//! where they apply, else `gemm`).

use crate::attention::{
    causal_product, fill_heads, fill_weights, head_matrix, head_weights, transposed, with_output_gradient, Causal, Dims,
};
use crate::real::Real;
use crate::strided::{
    contiguous_values, map_chunks, output_buffer, slice, storage_len, sum_parts, three_gradients, Rows,
};
use crate::vector::{dot, softmax_in_place};
use crate::widest::inlined;
use candle_core::{bail, CpuStorage, CustomOp3, Layout, Result, Shape, Tensor};
use std::sync::OnceLock;

/// Which additive scores the op's third argument holds, one after the other: `S` (`B N^2`
/// values) then `A` (`H N^2`), each when present.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ExtraScores {
    pub per_sample: bool,
    pub per_head: bool,
}

impl ExtraScores {
    /// The length of the packed scores for `d`.
    fn len(&self, d: &Dims) -> usize {
        let square = d.tokens * d.tokens;
        usize::from(self.per_sample) * d.batch * square + usize::from(self.per_head) * d.heads * square
    }

    /// `S_b` and `A_h` in `scores` (the packed third argument), each if present.
    #[inline(always)]
    fn of<'a, T>(&self, scores: &'a [T], d: &Dims, b: usize, h: usize) -> (Option<&'a [T]>, Option<&'a [T]>) {
        let square = d.tokens * d.tokens;
        let heads_at = usize::from(self.per_sample) * d.batch * square;
        (
            self.per_sample.then(|| &scores[b * square..][..square]),
            self.per_head.then(|| &scores[heads_at + h * square..][..square]),
        )
    }
}

/// `P = softmax_row(scale Q_h K_h^T + S_b + A_h)` into `p` (`N x N`; over keys `<= i` if
/// causal, zero after).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn scored_weights<T: Real>(
    (q, k): (&[T], &[T]),
    (q_rows, k_rows): (&Rows, &Rows),
    (sample, head): (Option<&[T]>, Option<&[T]>),
    d: &Dims,
    (b, h): (usize, usize),
    scale: T,
    causal: bool,
    p: &mut [T],
) {
    let (n, hp) = (d.tokens, d.head_dim);
    let (q, k) = (head_matrix(q, q_rows, d, b, h), head_matrix(k, k_rows, d, b, h));
    // SAFETY: `p` holds N x N entries; `q` and `k` are the head's N x p. When causal, the
    // product leaves out (most of) the masked triangle, which the loop then zeroes.
    let scores = Causal::when(causal, Causal::LowerOutput);
    unsafe { causal_product(scores, (n, n, hp), p.as_mut_ptr(), n, q, transposed(k), scale, false) }
    for (i, row) in p.chunks_exact_mut(n.max(1)).enumerate() {
        let kept = if causal { i + 1 } else { n };
        let (row, masked) = row.split_at_mut(kept);
        for extra in [sample, head].into_iter().flatten() {
            for (z, &e) in row.iter_mut().zip(&extra[i * n..][..kept]) {
                *z += e;
            }
        }
        softmax_in_place(row);
        masked.fill(T::zero());
    }
}

/// The op: arguments `Q`, `K` (`[B, N, H p]` each) and the packed additive scores.
pub(crate) struct TiedAttention {
    heads: usize,
    scale: f64,
    causal: bool,
    extra: ExtraScores,
    /// Whether to keep the weights `P` for the backward (when a gradient will be asked for).
    keep_weights: bool,
    /// The weights `[B, H, N, N]` the forward kept.
    weights: OnceLock<CpuStorage>,
}

impl TiedAttention {
    pub fn new(heads: usize, scale: f64, causal: bool, extra: ExtraScores, keep_weights: bool) -> Self {
        TiedAttention { heads, scale, causal, extra, keep_weights, weights: OnceLock::new() }
    }
}

/// The shapes of a call: `Q` and `K` alike, the packed scores of the length `extra` needs.
fn dims_of(
    q: &Layout,
    k: &Layout,
    scores: &Layout,
    heads: usize,
    extra: ExtraScores,
    op: &'static str,
) -> Result<Dims> {
    if k.dims() != q.dims() {
        bail!("{op}: q and k must have one shape, got {:?} and {:?}", q.dims(), k.dims())
    }
    let d = Dims::of(q, heads, op)?;
    if scores.shape().elem_count() != extra.len(&d) {
        bail!("{op}: the packed scores hold {} values, {extra:?} needs {}", scores.shape().elem_count(), extra.len(&d))
    }
    Ok(d)
}

/// The output, and the weights `[B, H, N, N]` when `op` keeps them.
fn forward<T: Real>(
    [q, k]: [&[T]; 2],
    rows: &[Rows; 2],
    scores: &[T],
    d: Dims,
    op: &TiedAttention,
) -> (Vec<T>, Option<Vec<T>>) {
    let (extra, causal, scale) = (op.extra, op.causal, T::c(op.scale));
    let (n, width, hp) = (d.tokens, d.width(), d.head_dim);
    let weigh = inlined(
        #[inline(always)]
        |b: usize, h: usize, p: &mut [T]| {
            let extras = extra.of(scores, &d, b, h);
            scored_weights((q, k), (&rows[0], &rows[1]), extras, &d, (b, h), scale, causal, p)
        },
    );
    let kept = op.keep_weights.then(|| {
        fill_weights(
            &d,
            || (),
            #[inline(always)]
            |_, b, h, p| weigh(b, h, p),
        )
    });
    let out = fill_heads(
        &d,
        d.heads,
        || vec![T::zero(); if kept.is_some() { 0 } else { n * n }],
        #[inline(always)]
        |scratch, b, h, sample: &mut [T]| {
            let p = match &kept {
                Some(kept) => head_weights(kept, &d, b, h),
                None => {
                    weigh(b, h, scratch);
                    &scratch[..]
                }
            };
            // SAFETY: `p` is N x N (zero past the diagonal when causal); `sample` holds the
            // sample's N rows of `width`.
            unsafe {
                let (dst, k_h) = (sample.as_mut_ptr().add(h * hp), head_matrix(k, &rows[1], &d, b, h));
                let lower_left = Causal::when(causal, Causal::LowerLeft);
                causal_product(lower_left, (n, hp, n), dst, width, (p.as_ptr(), n, 1), k_h, T::one(), false)
            }
        },
    );
    (out, kept)
}

impl CustomOp3 for TiedAttention {
    fn name(&self) -> &'static str {
        "fused-tied-attention"
    }

    /// The scores `Q K^T` and the product with `K`.
    fn kept_bytes(&self) -> usize {
        crate::strided::kept_bytes(self.weights.get())
    }

    fn product_flops(&self, _q: &Shape, _k: &Shape, _scores: &Shape, res: &Shape) -> u64 {
        crate::flops::token_pair_products(res, 2)
    }

    fn cpu_fwd(
        &self,
        qs: &CpuStorage,
        ql: &Layout,
        ks: &CpuStorage,
        kl: &Layout,
        ss: &CpuStorage,
        sl: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let name = self.name();
        let d = dims_of(ql, kl, sl, self.heads, self.extra, name)?;
        let rows = [Rows::new(ql), Rows::new(kl)];
        let out = per_real!(qs, name, |T| {
            let scores = contiguous_values::<T>(ss, sl, name)?;
            let inputs = [slice::<T>(qs, name)?, slice::<T>(ks, name)?];
            let (out, kept) = forward(inputs, &rows, &scores, d, self);
            if let Some(kept) = kept {
                // A fresh op per call: nothing was kept before.
                let _ = self.weights.set(candle_core::WithDType::to_cpu_storage_owned(kept));
            }
            out
        });
        Ok((out, ql.shape().clone()))
    }

    fn bwd(
        &self,
        q: &Tensor,
        k: &Tensor,
        scores: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let op = TiedAttentionBackward {
            kept: self.weights.get(),
            heads: self.heads,
            scale: self.scale,
            extra: self.extra,
            causal: self.causal,
            grad: grad.clone(),
        };
        three_gradients(&op, [q, k, scores])
    }
}

/// The backward of [`TiedAttention`]: arguments `Q`, `K` and the packed scores, the output's
/// gradient `dO` held by the op; result `[dQ | dK | dS | dA]` flattened.
struct TiedAttentionBackward<'a> {
    kept: Option<&'a CpuStorage>,
    heads: usize,
    scale: f64,
    extra: ExtraScores,
    causal: bool,
    grad: Tensor,
}

impl CustomOp3 for TiedAttentionBackward<'_> {
    fn name(&self) -> &'static str {
        "fused-tied-attention-backward"
    }

    fn cpu_fwd(
        &self,
        qs: &CpuStorage,
        ql: &Layout,
        ks: &CpuStorage,
        kl: &Layout,
        _ss: &CpuStorage,
        sl: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let name = self.name();
        let d = dims_of(ql, kl, sl, self.heads, self.extra, name)?;
        let out = with_output_gradient(&self.grad, ql.dims(), name, |gs, grad_layout| {
            let rows = [Rows::new(ql), Rows::new(kl), Rows::new(grad_layout)];
            Ok(per_real!(qs, name, |T| {
                // The forward keeps the weights whenever the graph records the op.
                let Some(kept) = self.kept else { bail!("{name}: the forward kept no attention weights") };
                let inputs = [slice::<T>(qs, name)?, slice::<T>(ks, name)?, slice::<T>(gs, name)?];
                backward(inputs, &rows, slice::<T>(kept, name)?, d, self.scale, self.extra, self.causal)
            }))
        })?;
        let len = storage_len(&out);
        Ok((out, Shape::from(len)))
    }
}

/// `[dQ | dK | dS | dA]` (the score parts when present) from `[Q, K, dO]` and the kept weights.
fn backward<T: Real>(
    [q, k, d_out]: [&[T]; 3],
    rows: &[Rows; 3],
    kept: &[T],
    d: Dims,
    scale: f64,
    extra: ExtraScores,
    causal: bool,
) -> Vec<T> {
    let (n, width, hp) = (d.tokens, d.width(), d.head_dim);
    // When causal, `P` and `dZ` are zero past the diagonal (a row `i` keeps its first `i + 1`
    // entries) and the products leave that triangle out.
    let kept_of = |i: usize| if causal { i + 1 } else { n };
    let [lower_output, lower_left, upper_left] =
        [Causal::LowerOutput, Causal::LowerLeft, Causal::UpperLeft].map(|t| Causal::when(causal, t));
    let (per_sample, square) = (n * width, n * n);
    let total = d.batch * per_sample;
    let sample_len = usize::from(extra.per_sample) * d.batch * square;
    let head_len = usize::from(extra.per_head) * d.heads * square;
    let mut out = output_buffer(2 * total + sample_len + head_len);
    let scale = T::c(scale);
    let (dq, rest) = out.split_at_mut(total);
    let (dk, rest) = rest.split_at_mut(total);
    let (ds, da) = rest.split_at_mut(sample_len);
    // Each task writes its samples' rows of dK and dS through these (disjoint per sample) and
    // returns its share of dA, summed over the tasks.
    let (dk_at, ds_at) = (dk.as_mut_ptr() as usize, ds.as_mut_ptr() as usize);
    let da_sum = map_chunks(
        dq,
        per_sample,
        #[inline(always)]
        |first: usize, dq: &mut [T]| {
            let mut da = vec![T::zero(); head_len];
            let mut dz = vec![T::zero(); square];
            for (c, dq) in dq.chunks_exact_mut(per_sample.max(1)).enumerate() {
                let b = first + c;
                // SAFETY: sample `b`'s rows of dK and its N x N of dS, written by this task only.
                let dk = unsafe { (dk_at as *mut T).add(b * per_sample) };
                let ds: &mut [T] = match extra.per_sample {
                    true => unsafe { std::slice::from_raw_parts_mut((ds_at as *mut T).add(b * square), square) },
                    false => &mut [],
                };
                ds.fill(T::zero());
                for h in 0..d.heads {
                    let (q_h, k_h) = (head_matrix(q, &rows[0], &d, b, h), head_matrix(k, &rows[1], &d, b, h));
                    let d_out_h = head_matrix(d_out, &rows[2], &d, b, h);
                    let p = head_weights(kept, &d, b, h);
                    let col = h * hp;
                    // dP = dO K_h^T (into dz), then dZ = P (dP - rowsum(dP P)).
                    let k_t = transposed(k_h);
                    unsafe {
                        causal_product(lower_output, (n, n, hp), dz.as_mut_ptr(), n, d_out_h, k_t, T::one(), false)
                    }
                    for (i, (g, p)) in dz.chunks_exact_mut(n.max(1)).zip(p.chunks_exact(n.max(1))).enumerate() {
                        let (g, masked) = g.split_at_mut(kept_of(i));
                        masked.fill(T::zero());
                        let p = &p[..kept_of(i)];
                        let row_dot = dot(g, p);
                        for (g, &p) in g.iter_mut().zip(p) {
                            *g = p * (*g - row_dot);
                        }
                    }
                    unsafe {
                        // dQ_h = scale dZ K_h; dK_h = scale dZ^T Q_h + P^T dO.
                        let (dq, dk) = (dq.as_mut_ptr().add(col), dk.add(col));
                        let (dz_rows, dz_t, p_t) = ((dz.as_ptr(), n, 1), (dz.as_ptr(), 1, n), (p.as_ptr(), 1, n));
                        causal_product(lower_left, (n, hp, n), dq, width, dz_rows, k_h, scale, false);
                        causal_product(upper_left, (n, hp, n), dk, width, dz_t, q_h, scale, false);
                        causal_product(upper_left, (n, hp, n), dk, width, p_t, d_out_h, T::one(), true);
                    }
                    for (s, &g) in ds.iter_mut().zip(&dz) {
                        *s += g;
                    }
                    if extra.per_head {
                        for (a, &g) in da[h * square..][..square].iter_mut().zip(&dz) {
                            *a += g;
                        }
                    }
                }
            }
            da
        },
        sum_parts,
    );
    if extra.per_head {
        da.copy_from_slice(&da_sum);
    }
    out
}
