//! The tasks' loss as one op: the weighted mean cross-entropy of logits `X` (`[M, C]`) against
//! class ids `t` (`[M]`, u32) with row weights `w` (`[M]`; ones for the plain mean),
//!
//! `L = sum_i w_i (lse_i - X_{i, t_i}) / max(sum_i w_i, 1e-12)`, `lse_i = log sum_c exp X_{ic}`,
//!
//! as `plugin_api::ops::weighted_cross_entropy` composes it (a log-softmax, a gather and the
//! weighted mean: about a dozen ops forward and backward). Backward, for the logits only (the
//! ids and weights are data): `dX_{ic} = dL w_i / W (softmax(X_i)_c - [c = t_i])`.

use crate::real::Real;
use crate::strided::{fill, slice, Rows};
use crate::vector::{exp_shifted, max};
use crate::widest::widest;
use candle_core::{bail, CpuStorage, CustomOp3, Layout, Result, Shape, Tensor};

/// The ids and weights of the rows, checked against the logits' `count` rows of `classes`.
fn rows_data<'a, T: Real>(
    (ts, tl): (&'a CpuStorage, &Layout),
    (ws, wl): (&'a CpuStorage, &Layout),
    (count, classes): (usize, usize),
    op: &'static str,
) -> Result<(&'a [u32], &'a [T])> {
    let (CpuStorage::U32(ids), Some((ts0, ts1)), Some((ws0, ws1))) =
        (ts, tl.contiguous_offsets(), wl.contiguous_offsets())
    else {
        bail!("{op}: expects contiguous u32 class ids and contiguous weights")
    };
    let (ids, weights) = (&ids[ts0..ts1], &slice::<T>(ws, op)?[ws0..ws1]);
    if ids.len() != count || weights.len() != count {
        bail!("{op}: {count} rows of logits, {} class ids and {} weights", ids.len(), weights.len())
    }
    if let Some(&bad) = ids.iter().find(|&&t| t as usize >= classes) {
        bail!("{op}: class id {bad} is out of range for {classes} classes")
    }
    Ok((ids, weights))
}

/// `sum_i w_i`, kept away from zero as the composition keeps it.
fn total_weight<T: Real>(weights: &[T]) -> T {
    num_traits::Float::max(weights.iter().fold(T::zero(), |s, &w| s + w), T::c(1e-12))
}

fn forward<T: Real>(x: &[T], rows: &Rows, ids: &[u32], weights: &[T]) -> T {
    let mut exps = vec![T::zero(); rows.len];
    let mut buf = Vec::new();
    let mut loss = T::zero();
    widest(
        #[inline(always)]
        || {
            for (r, (&t, &w)) in ids.iter().zip(weights).enumerate() {
                let row = rows.read(x, r, &mut buf);
                let m = max(row);
                let lse = m + exp_shifted(row, m, &mut exps).ln();
                loss += w * (lse - row[t as usize]);
            }
        },
    );
    loss / total_weight(weights)
}

fn backward<T: Real>(x: &[T], rows: &Rows, ids: &[u32], weights: &[T], grad: T) -> Vec<T> {
    let scale = grad / total_weight(weights);
    let len = rows.len;
    fill(
        rows.count * len,
        len,
        #[inline(always)]
        |first, chunk: &mut [T]| {
            let mut buf = Vec::new();
            for (k, out) in chunk.chunks_exact_mut(len.max(1)).enumerate() {
                let r = first + k;
                let row = rows.read(x, r, &mut buf);
                let m = max(row);
                let coefficient = weights[r] * scale / exp_shifted(row, m, out);
                for v in out.iter_mut() {
                    *v *= coefficient;
                }
                out[ids[r] as usize] -= weights[r] * scale;
            }
        },
    )
}

/// The loss (`grad: None`), or its backward, the logits' gradient for the loss's gradient
/// `grad`: arguments the logits `[M, C]`, the class ids `[M]` (u32) and the row weights `[M]`.
pub(crate) struct CrossEntropy {
    pub grad: Option<f64>,
}

impl CustomOp3 for CrossEntropy {
    fn name(&self) -> &'static str {
        match self.grad {
            None => "fused-cross-entropy",
            Some(_) => "fused-cross-entropy-backward",
        }
    }

    fn cpu_fwd(
        &self,
        xs: &CpuStorage,
        xl: &Layout,
        ts: &CpuStorage,
        tl: &Layout,
        ws: &CpuStorage,
        wl: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let name = self.name();
        let rows = match xl.dims() {
            [_, _] => Rows::new(xl),
            dims => bail!("{name}: expects logits [M, C], got shape {dims:?}"),
        };
        let out = per_real!(xs, name, |T| {
            let (ids, weights) = rows_data::<T>((ts, tl), (ws, wl), (rows.count, rows.len), name)?;
            let x = slice::<T>(xs, name)?;
            match self.grad {
                None => vec![forward(x, &rows, ids, weights)],
                Some(grad) => backward(x, &rows, ids, weights, T::c(grad)),
            }
        });
        let shape = if self.grad.is_none() { Shape::from(()) } else { xl.shape().clone() };
        Ok((out, shape))
    }

    fn bwd(
        &self,
        x: &Tensor,
        targets: &Tensor,
        weights: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let grad = Some(grad.to_dtype(candle_core::DType::F64)?.to_scalar::<f64>()?);
        let dx = x.apply_op3_no_bwd(targets, weights, &CrossEntropy { grad })?;
        Ok((Some(dx), None, None))
    }
}
