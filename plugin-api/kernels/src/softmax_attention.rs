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
//! As in `attention.rs`, each (sample, head) works in its own `N x N` and `N x p` scratch, so
//! nothing of size `B H N^2` is stored but the mask's flags; the backward recomputes `P`:
//!
//! - `dV = D(P)^T dO`, `dP = D(dO V^T)` (the mask is linear: its own transpose);
//! - `dS = P (dP - rowsum(dP P))` (entry-wise products; masked entries have `P = 0`);
//! - `dQ = scale dS K`, `dK = scale dS^T Q`.
//!
//! `Q`, `K` and `V` may be one tensor (CRATE's MSSA attends with `Q = K = V`); candle then adds
//! the three gradients. Samples run in parallel; the products go to the `gemm` crate on one
//! thread each.

use crate::attention::{fill_heads, head_matrix, into_head, product, transposed, Dims, HeadScratch};
use crate::dropout_mask::DropMask;
use crate::real::Real;
use crate::strided::{output_buffer, parallel_plan, slice, storage_len, unpack, Rows};
use crate::vector::{dot, softmax_in_place};
use crate::widest::{inlined, widest};
use candle_core::{bail, CpuStorage, CustomOp3, Layout, Result, Shape, Storage, Tensor};
use rayon::prelude::*;
use std::sync::Arc;

impl<T: Real> HeadScratch<T> {
    /// Takes `Q_h`, `K_h`, `V_h` of sample `b` and fills `p` with the attention weights.
    #[inline(always)]
    fn attend_softmax(&mut self, [q, k, v]: [(&[T], &Rows); 3], d: &Dims, b: usize, h: usize, scale: T, causal: bool) {
        let (n, hp) = (d.tokens, d.head_dim);
        self.q = head_matrix(q.0, q.1, d, b, h);
        self.k = head_matrix(k.0, k.1, d, b, h);
        self.v = head_matrix(v.0, v.1, d, b, h);
        // S = scale Q K^T into `p`, then its row softmax in place (over keys <= i if causal).
        unsafe {
            product((n, n, hp), self.p.as_mut_ptr(), n, self.q, transposed(self.k), scale, false);
        }
        for (i, row) in self.p.chunks_exact_mut(n).enumerate() {
            if causal {
                let (kept, masked) = row.split_at_mut(i + 1);
                softmax_in_place(kept);
                masked.fill(T::zero());
            } else {
                softmax_in_place(row);
            }
        }
    }
}

fn forward<T: Real>(inputs: [(&[T], &Rows); 3], d: Dims, scale: f64, causal: bool, mask: Option<&DropMask>) -> Vec<T> {
    let (n, width, hp) = (d.tokens, d.width(), d.head_dim);
    let scale = T::c(scale);
    fill_heads(
        &d,
        d.heads,
        || HeadScratch::new(&d),
        #[inline(always)]
        |scratch, b, h, sample| {
            scratch.attend_softmax(inputs, &d, b, h, scale, causal);
            if let Some(mask) = mask {
                mask.apply(b * d.heads + h, &mut scratch.p);
            }
            // out_h = D(P) V_h, written into the head's columns.
            unsafe { into_head(sample, h, (n, hp, width), (scratch.p.as_ptr(), n, 1), scratch.v) }
        },
    )
}

/// `[dQ, dK, dV]`, flattened one after the other.
fn backward<T: Real>(
    inputs: [(&[T], &Rows); 3],
    grad: (&[T], &Rows),
    d: Dims,
    scale: f64,
    causal: bool,
    mask: Option<&DropMask>,
) -> Vec<T> {
    let (n, width, hp) = (d.tokens, d.width(), d.head_dim);
    let per_sample = n * width;
    let total = d.batch * per_sample;
    // Every entry is written: each head's products fill its columns of dQ, dK and dV.
    let mut out = output_buffer(3 * total);
    let scale = T::c(scale);
    // Samples `first..` of dQ, dK, dV.
    let run = inlined(
        #[inline(always)]
        |first: usize, dq: &mut [T], dk: &mut [T], dv: &mut [T]| {
            let mut scratch = HeadScratch::new(&d);
            let mut ds = vec![T::zero(); n * n];
            // D(P) when there is a mask (`P` itself is needed for dS).
            let mut dropped = vec![T::zero(); if mask.is_some() { n * n } else { 0 }];
            let samples = dq.len() / per_sample.max(1);
            for k in 0..samples {
                let b = first + k;
                let at = k * per_sample;
                let (dq, dk, dv) =
                    (&mut dq[at..at + per_sample], &mut dk[at..at + per_sample], &mut dv[at..at + per_sample]);
                for h in 0..d.heads {
                    scratch.attend_softmax(inputs, &d, b, h, scale, causal);
                    let d_out = head_matrix(grad.0, grad.1, &d, b, h);
                    let col = h * hp;
                    let weights = match mask {
                        Some(mask) => {
                            mask.apply_into(b * d.heads + h, &scratch.p, &mut dropped);
                            dropped.as_ptr()
                        }
                        None => scratch.p.as_ptr(),
                    };
                    unsafe {
                        // dV = D(P)^T dO; dP = D(dO V^T) (into `ds`).
                        product((n, hp, n), dv.as_mut_ptr().add(col), width, (weights, 1, n), d_out, T::one(), false);
                        product((n, n, hp), ds.as_mut_ptr(), n, d_out, transposed(scratch.v), T::one(), false);
                    }
                    if let Some(mask) = mask {
                        mask.apply(b * d.heads + h, &mut ds);
                    }
                    // dS = P (dP - rowsum(dP P)).
                    for (g, p) in ds.chunks_exact_mut(n).zip(scratch.p.chunks_exact(n)) {
                        let row_dot = dot(g, p);
                        for (g, &p) in g.iter_mut().zip(p) {
                            *g = p * (*g - row_dot);
                        }
                    }
                    unsafe {
                        // dQ = scale dS K; dK = scale dS^T Q.
                        product(
                            (n, hp, n),
                            dq.as_mut_ptr().add(col),
                            width,
                            (ds.as_ptr(), n, 1),
                            scratch.k,
                            scale,
                            false,
                        );
                        product(
                            (n, hp, n),
                            dk.as_mut_ptr().add(col),
                            width,
                            (ds.as_ptr(), 1, n),
                            scratch.q,
                            scale,
                            false,
                        );
                    }
                }
            }
        },
    );
    let (dq, rest) = out.split_at_mut(total);
    let (dk, dv) = rest.split_at_mut(total);
    match parallel_plan(total, per_sample) {
        Some(per_task) if per_sample > 0 => {
            let len = per_task * per_sample;
            dq.par_chunks_mut(len).zip(dk.par_chunks_mut(len)).zip(dv.par_chunks_mut(len)).enumerate().for_each(
                |(c, ((dq, dk), dv))| {
                    widest(
                        #[inline(always)]
                        || run(c * per_task, dq, dk, dv),
                    )
                },
            );
        }
        _ => widest(
            #[inline(always)]
            || run(0, dq, dk, dv),
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
    pub heads: usize,
    pub scale: f64,
    pub causal: bool,
    /// The dropout mask of the `[B, H, N, N]` weights, if any (drawn before the op, kept for
    /// the backward).
    pub mask: Option<Arc<DropMask>>,
}

impl CustomOp3 for SoftmaxAttention {
    fn name(&self) -> &'static str {
        "fused-softmax-attention"
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
        let name = self.name();
        let d = dims_of([ql, kl, vl], self.heads, name)?;
        check_mask(self.mask.as_deref(), &d, name)?;
        let rows = [Rows::new(ql), Rows::new(kl), Rows::new(vl)];
        let out = per_real!(qs, name, |T| {
            let inputs = [
                (slice::<T>(qs, name)?, &rows[0]),
                (slice::<T>(ks, name)?, &rows[1]),
                (slice::<T>(vs, name)?, &rows[2]),
            ];
            forward(inputs, d, self.scale, self.causal, self.mask.as_deref())
        });
        Ok((out, ql.shape().clone()))
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
        let op = SoftmaxAttentionBackward {
            heads: self.heads,
            scale: self.scale,
            causal: self.causal,
            mask: self.mask.clone(),
            grad: grad.clone(),
        };
        let [dq, dk, dv] = unpack(&q.apply_op3_no_bwd(k, v, &op)?, [q, k, v])?;
        Ok((Some(dq), Some(dk), Some(dv)))
    }
}

/// The backward of [`SoftmaxAttention`]: arguments `Q`, `K` and `V`, the output's gradient
/// `dO` held by the op; result `[dQ, dK, dV]` flattened.
struct SoftmaxAttentionBackward {
    heads: usize,
    scale: f64,
    causal: bool,
    mask: Option<Arc<DropMask>>,
    grad: Tensor,
}

impl CustomOp3 for SoftmaxAttentionBackward {
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
        let name = self.name();
        let d = dims_of([ql, kl, vl], self.heads, name)?;
        check_mask(self.mask.as_deref(), &d, name)?;
        let (grad_storage, grad_layout) = self.grad.storage_and_layout();
        let Storage::Cpu(gs) = &*grad_storage else { bail!("{name}: the gradient is not on the CPU") };
        if grad_layout.dims() != ql.dims() {
            bail!("{name}: the gradient has shape {:?}, the output {:?}", grad_layout.dims(), ql.dims())
        }
        let rows = [Rows::new(ql), Rows::new(kl), Rows::new(vl)];
        let grad_rows = Rows::new(grad_layout);
        let out = per_real!(qs, name, |T| {
            let inputs = [
                (slice::<T>(qs, name)?, &rows[0]),
                (slice::<T>(ks, name)?, &rows[1]),
                (slice::<T>(vs, name)?, &rows[2]),
            ];
            backward(inputs, (slice::<T>(gs, name)?, &grad_rows), d, self.scale, self.causal, self.mask.as_deref())
        });
        let len = storage_len(&out);
        Ok((out, Shape::from(len)))
    }
}
