//! Softmax along the last dimension, and the bi-softmax `softmax(A, -1) + softmax(A, -2)`
//! of Hyper-SET's attention (seed 000, Eq. 7 and 9), each one op with a hand-written backward.
//!
//! Row softmax `P = softmax(A, -1)`: backward `dA = P (dP - rowsum(dP P))` from the kept
//! output. Bi-softmax `S = P + Q`, `Q = softmax(A, -2)`: both are recomputed from `A` in the
//! backward (the sum `S` does not give them back), and
//! `dA = P (dS - rowsum(dS P)) + Q (dS - colsum(dS Q))`. Neither assumes `A` symmetric.

use crate::real::Real;
use crate::strided::{fill, map_row_pairs, map_rows, slice, Matrices, Rows};
use crate::vector::{dot, softmax_row};
use candle_core::{CpuStorage, CustomOp1, CustomOp2, Layout, Result, Shape, Tensor};

fn softmax_forward<T: Real>(x: &[T], rows: &Rows) -> Vec<T> {
    map_rows(
        x,
        rows,
        #[inline(always)]
        |x, y| {
            softmax_row(x, y);
        },
    )
}

fn softmax_backward<T: Real>(y: &[T], y_rows: &Rows, dy: &[T], dy_rows: &Rows) -> Vec<T> {
    map_row_pairs(
        y,
        y_rows,
        dy,
        dy_rows,
        #[inline(always)]
        |y, dy, dx| {
            let dot = dot(y, dy);
            for ((dx, &y), &dy) in dx.iter_mut().zip(y).zip(dy) {
                *dx = y * (dy - dot);
            }
        },
    )
}

/// Row softmax `P` and column softmax `Q` of the row-major `rows x cols` matrix `a`.
#[inline(always)]
fn row_and_column_softmax<T: Real>(a: &[T], rows: usize, cols: usize, p: &mut [T], q: &mut [T], col: &mut [T]) {
    with_fma!(row_and_column_softmax_as::<T>(a, rows, cols, p, q, col))
}

#[inline(always)]
fn row_and_column_softmax_as<T: Real, const FMA: bool>(
    a: &[T],
    rows: usize,
    cols: usize,
    p: &mut [T],
    q: &mut [T],
    col: &mut [T],
) {
    for i in 0..rows {
        softmax_row(&a[i * cols..(i + 1) * cols], &mut p[i * cols..(i + 1) * cols]);
    }
    // Column maxima, then exponentials and column sums, row by row (unit stride).
    col.fill(T::neg_infinity());
    for i in 0..rows {
        for (m, &v) in col.iter_mut().zip(&a[i * cols..(i + 1) * cols]) {
            *m = if v > *m { v } else { *m };
        }
    }
    let mut sums = vec![T::zero(); cols];
    for i in 0..rows {
        let (ar, qr) = (&a[i * cols..(i + 1) * cols], &mut q[i * cols..(i + 1) * cols]);
        for j in 0..cols {
            qr[j] = (ar[j] - col[j]).exp_fast::<FMA>();
            sums[j] += qr[j];
        }
    }
    for (c, s) in col.iter_mut().zip(&sums) {
        *c = s.recip();
    }
    for i in 0..rows {
        for (q, &inv) in q[i * cols..(i + 1) * cols].iter_mut().zip(col.iter()) {
            *q *= inv;
        }
    }
}

fn bi_softmax_forward<T: Real>(a: &[T], mats: &Matrices) -> Vec<T> {
    let size = mats.rows * mats.cols;
    fill(
        mats.count() * size,
        size,
        #[inline(always)]
        |first, chunk| {
            let (mut am, mut q, mut col) = (vec![T::zero(); size], vec![T::zero(); size], vec![T::zero(); mats.cols]);
            for (k, s) in chunk.chunks_exact_mut(size.max(1)).enumerate() {
                mats.read_into(a, first + k, &mut am);
                row_and_column_softmax(&am, mats.rows, mats.cols, s, &mut q, &mut col);
                for (s, &q) in s.iter_mut().zip(&q) {
                    *s += q;
                }
            }
        },
    )
}

fn bi_softmax_backward<T: Real>(a: &[T], mats: &Matrices, ds: &[T], ds_mats: &Matrices) -> Vec<T> {
    let (rows, cols) = (mats.rows, mats.cols);
    let size = rows * cols;
    fill(
        mats.count() * size,
        size,
        #[inline(always)]
        |first, chunk| {
            let mut am = vec![T::zero(); size];
            let (mut p, mut q, mut g) = (vec![T::zero(); size], vec![T::zero(); size], vec![T::zero(); size]);
            let (mut col, mut col_dot) = (vec![T::zero(); cols], vec![T::zero(); cols]);
            for (k, da) in chunk.chunks_exact_mut(size.max(1)).enumerate() {
                mats.read_into(a, first + k, &mut am);
                ds_mats.read_into(ds, first + k, &mut g);
                row_and_column_softmax(&am, rows, cols, &mut p, &mut q, &mut col);
                col_dot.fill(T::zero());
                for i in 0..rows {
                    let r = i * cols..(i + 1) * cols;
                    let (qr, gr) = (&q[r.clone()], &g[r]);
                    for j in 0..cols {
                        col_dot[j] += gr[j] * qr[j];
                    }
                }
                for i in 0..rows {
                    let r = i * cols..(i + 1) * cols;
                    let (pr, qr, gr) = (&p[r.clone()], &q[r.clone()], &g[r.clone()]);
                    let row_dot = dot(pr, gr);
                    for (j, da) in da[r].iter_mut().enumerate() {
                        *da = pr[j] * (gr[j] - row_dot) + qr[j] * (gr[j] - col_dot[j]);
                    }
                }
            }
        },
    )
}

/// Softmax over the last dimension.
pub(crate) struct SoftmaxLastDim;

impl CustomOp1 for SoftmaxLastDim {
    fn name(&self) -> &'static str {
        "fused-softmax-last-dim"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let rows = Rows::new(l);
        let out = per_real!(s, self.name(), |T| softmax_forward(slice::<T>(s, self.name())?, &rows));
        Ok((out, l.shape().clone()))
    }

    fn bwd(&self, _x: &Tensor, y: &Tensor, dy: &Tensor) -> Result<Option<Tensor>> {
        Ok(Some(y.apply_op2_no_bwd(dy, &SoftmaxBackward)?))
    }
}

/// The backward of [`SoftmaxLastDim`]: arguments `y` (the softmax), `dy`; result `dx`.
struct SoftmaxBackward;

impl CustomOp2 for SoftmaxBackward {
    fn name(&self) -> &'static str {
        "fused-softmax-last-dim-backward"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout, ds: &CpuStorage, dl: &Layout) -> Result<(CpuStorage, Shape)> {
        let (rows, dy_rows) = (Rows::new(l), Rows::new(dl));
        let name = self.name();
        let out =
            per_real!(s, name, |T| softmax_backward(slice::<T>(s, name)?, &rows, slice::<T>(ds, name)?, &dy_rows));
        Ok((out, l.shape().clone()))
    }
}

/// `softmax(A, -1) + softmax(A, -2)` over the last two dimensions.
pub(crate) struct BiSoftmax;

impl CustomOp1 for BiSoftmax {
    fn name(&self) -> &'static str {
        "fused-bi-softmax"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let mats = Matrices::new(l, self.name())?;
        let out = per_real!(s, self.name(), |T| bi_softmax_forward(slice::<T>(s, self.name())?, &mats));
        Ok((out, l.shape().clone()))
    }

    fn bwd(&self, a: &Tensor, _res: &Tensor, ds: &Tensor) -> Result<Option<Tensor>> {
        Ok(Some(a.apply_op2_no_bwd(ds, &BiSoftmaxBackward)?))
    }
}

/// The backward of [`BiSoftmax`]: arguments `A`, `dS`; result `dA`.
struct BiSoftmaxBackward;

impl CustomOp2 for BiSoftmaxBackward {
    fn name(&self) -> &'static str {
        "fused-bi-softmax-backward"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout, ds: &CpuStorage, dl: &Layout) -> Result<(CpuStorage, Shape)> {
        let (mats, ds_mats) = (Matrices::new(l, self.name())?, Matrices::new(dl, self.name())?);
        let name = self.name();
        let out =
            per_real!(s, name, |T| bi_softmax_backward(slice::<T>(s, name)?, &mats, slice::<T>(ds, name)?, &ds_mats));
        Ok((out, l.shape().clone()))
    }
}
