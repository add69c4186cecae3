//! `y = act(RMSNorm(x D) g) D^T` as one op: Hyper-SET's feedforward update (seed 000, Eq. 11,
//! `D ReLU(RMSNorm(D^T X))` with tokens as columns; here they are rows), for `x` `[..., k]`,
//! the dictionary `D` `[k, M]` used twice, and an optional gain `g` `[M]`.
//!
//! Its composition (`linear`, `normed_activation`, `linear_transposed`) keeps the hidden units
//! `H = x D` and their activation `A` for the backward, which writes `dA` and `dH`: four
//! `[rows, M]` tensors. Here only `H` is kept: the norm's backward needs it at every entry,
//! and `A` (zero wherever ReLU cuts) cannot stand in for it. `A`, `dA` and `dH` live in the
//! thread's scratch (`scratch.rs`), and the backward recomputes `A` in the same row function
//! as the norm's backward (`norm::forward_backward_row`: one inverse RMS a row, `dH` written
//! over `dA`): a training process holds 15 % less memory (measured on the default Sudoku
//! configuration and at the paper size; keeping the three out of memory the cache had dropped
//! did not make the op faster by itself). The products by `D^T` read a contiguous copy of it
//! (`transpose::transpose_into`, by register tiles), which `gemm` runs a tenth faster than
//! the transposed view here (`A D^T`, `[1296, 512] x [512, 128]`, one thread in the cache:
//! 113 GFLOP/s from the copy, 100–105 through the view; record (52)). The same copy of `x`
//! and `dy` for `dD` did not pay for itself (record (53)).
//!
//! Forward: `H = x D`; per row `A = act(r H g)` with `r = (mean(h^2) + eps)^(-1/2)`
//! (`norm.rs`); `y = A D^T`.
//! Backward from `dy`: `dA = dy D`; per row `A` again and the norm's backward, `dH` and `dg`
//! (`norm.rs`); `dx = dH D^T`, `dD = x^T dH + dy^T A`.

use crate::attention::with_output_gradient;
use crate::linear::{gradient_product, matrix_of, product, weight_matrix, Strided};
use crate::norm::{forward_backward_row, forward_row, Activation};
use crate::real::Real;
use crate::scratch::with_scratch;
use crate::strided::{
    for_each_chunk, kept_bytes, map_chunks, output_buffer, output_buffer_with_room, read_vector, slice, storage_len,
    sum_parts, unpack,
};
use crate::transpose::transpose_into;
use candle_core::{bail, CpuStorage, CustomOp2, CustomOp3, Layout, Result, Shape, Tensor, WithDType};
use std::sync::OnceLock;

/// The op, without gain (arguments `x`, `D`) or with one (`x`, `D`, `g`).
pub(crate) struct NormedFeedforward {
    eps: f64,
    act: Activation,
    /// `H = x D` (`[rows, M]`, row-major), kept by the forward for the backward.
    hidden: OnceLock<CpuStorage>,
}

impl NormedFeedforward {
    pub fn new(eps: f64, act: Activation) -> Self {
        NormedFeedforward { eps, act, hidden: OnceLock::new() }
    }

    fn cpu_forward(
        &self,
        (xs, xl): (&CpuStorage, &Layout),
        (ds, dl): (&CpuStorage, &Layout),
        gain: Option<(&CpuStorage, &Layout)>,
    ) -> Result<(CpuStorage, Shape)> {
        let name = NAME;
        let out = per_real!(xs, name, |T| {
            let g = gain.map(|(gs, gl)| read_vector::<T>(gs, gl, name)).transpose()?;
            let (out, hidden) = forward(slice::<T>(xs, name)?, xl, slice::<T>(ds, name)?, dl, g.as_deref(), self)?;
            if self.hidden.set(T::to_cpu_storage_owned(hidden)).is_err() {
                bail!("{name}: one op ran its forward twice (its hidden units are kept for one backward)")
            }
            out
        });
        Ok((out, xl.shape().clone()))
    }

    /// The backward op for the output gradient `grad`, with the gain's values when there is one
    /// (they travel in the op, so that its arguments are `x` and `D` either way).
    fn backward_op(&self, grad: &Tensor, gain: Option<&Tensor>) -> Result<NormedFeedforwardBackward<'_>> {
        let Some(hidden) = self.hidden.get() else { bail!("{NAME}: the backward ran before the forward") };
        let gain = gain.map(|g| g.to_dtype(candle_core::DType::F64)?.to_vec1::<f64>()).transpose()?;
        Ok(NormedFeedforwardBackward { eps: self.eps, act: self.act, hidden, gain, grad: grad.clone() })
    }
}

const NAME: &str = "fused-normed-feedforward";

/// FLOPs of the two products `x D` and `A D^T`, each `2 rows k M`.
fn flops(d: &Shape, res: &Shape) -> u64 {
    let width = d.dims().get(1).copied().unwrap_or(0) as u64;
    2 * 2 * res.elem_count() as u64 * width
}

/// The gain's length must be the dictionary's width `M`.
fn check_gain(width: usize, gain: Option<&[impl Copy]>) -> Result<()> {
    match gain {
        Some(g) if g.len() != width => bail!("{NAME}: the gain has {} entries for {width} hidden units", g.len()),
        _ => Ok(()),
    }
}

/// `(y, H)`.
fn forward<T: Real>(
    x: &[T],
    xl: &Layout,
    d: &[T],
    dl: &Layout,
    gain: Option<&[T]>,
    op: &NormedFeedforward,
) -> Result<(Vec<T>, Vec<T>)> {
    let mut xbuf = Vec::new();
    let (x, rows, k, sx) = matrix_of(x, xl, &mut xbuf);
    let (width, sd) = weight_matrix(dl, k, false, NAME)?;
    check_gain(width, gain)?;
    let (eps, act) = (T::c(op.eps), op.act);
    let mut hidden = output_buffer::<T>(rows * width);
    let mut out = output_buffer::<T>(rows * k);
    // SAFETY: each product writes all of its output, of the size given.
    unsafe { product(rows, width, k, hidden.as_mut_ptr(), (x, sx), (d, sd), false) };
    with_scratch(rows * width + width * k, |scratch: &mut [T]| {
        let (activated, dt) = scratch.split_at_mut(rows * width);
        for_each_chunk(
            activated,
            width,
            #[inline(always)]
            |first, chunk| {
                with_activation!(act, |f, _df| {
                    for (i, a) in chunk.chunks_exact_mut(width.max(1)).enumerate() {
                        forward_row(&hidden[(first + i) * width..][..width], gain, eps, a, f);
                    }
                })
            },
        );
        transpose_into(d, sd, (k, width), dt);
        // SAFETY: as above.
        unsafe {
            product(
                rows,
                k,
                width,
                out.as_mut_ptr(),
                (activated, Strided::rows_of(width)),
                (dt, Strided::rows_of(k)),
                false,
            )
        };
    });
    Ok((out, hidden))
}

/// `[dx (x's shape, flattened), dD, dg (with a gain)]`.
#[allow(clippy::too_many_arguments)]
fn backward<T: Real>(
    (x, xl): (&[T], &Layout),
    (d, dl): (&[T], &Layout),
    gain: Option<&[T]>,
    hidden: &[T],
    (dy, dyl): (&[T], &Layout),
    (eps, act): (T, Activation),
) -> Result<Vec<T>> {
    let (mut xbuf, mut dybuf) = (Vec::new(), Vec::new());
    let (x, rows, k, sx) = matrix_of(x, xl, &mut xbuf);
    let (width, sd) = weight_matrix(dl, k, false, NAME)?;
    check_gain(width, gain)?;
    let (dy, dy_rows, dy_k, sdy) = matrix_of(dy, dyl, &mut dybuf);
    if (dy_rows, dy_k) != (rows, k) || hidden.len() != rows * width {
        bail!("{NAME}: the output gradient is {dy_rows} x {dy_k} and the kept hidden units {}, expected {rows} x {k} and {rows} x {width}", hidden.len())
    }
    let gain_len = if gain.is_some() { width } else { 0 };
    let mut out = output_buffer_with_room::<T>(rows * k + k * width, gain_len);
    let by_rows = Strided::rows_of(width);
    let dg = with_scratch(2 * rows * width + width * k, |scratch: &mut [T]| {
        let (activated, rest) = scratch.split_at_mut(rows * width);
        let (dh, dt) = rest.split_at_mut(rows * width);
        // dA = dy D, turned into dH row by row below.
        // SAFETY: the product writes all of its output, of the size given.
        unsafe { product(rows, width, k, dh.as_mut_ptr(), (dy, sdy), (d, sd), false) };
        let activated_at = activated.as_mut_ptr() as usize;
        let dg = map_chunks(
            dh,
            width,
            #[inline(always)]
            |first, chunk| {
                let mut dg = vec![T::zero(); gain_len];
                let mut dxhat = vec![T::zero(); width];
                with_activation!(act, |f, df| {
                    for (i, da) in chunk.chunks_exact_mut(width.max(1)).enumerate() {
                        let row = first + i;
                        // SAFETY: row `row` of `activated`, written by this task only.
                        let a =
                            unsafe { std::slice::from_raw_parts_mut((activated_at as *mut T).add(row * width), width) };
                        let h = &hidden[row * width..][..width];
                        forward_backward_row(h, da, gain, eps, a, &mut dg, &mut dxhat, (f, df));
                    }
                });
                dg
            },
            sum_parts,
        );
        transpose_into(d, sd, (k, width), dt);
        let (dx, dd) = out.split_at_mut(rows * k);
        // SAFETY: each product writes all of its output, of the size given.
        unsafe { product(rows, k, width, dx.as_mut_ptr(), (dh, by_rows), (dt, Strided::rows_of(k)), false) };
        // dD = x^T dH + dy^T A, D^T's copy as the scratch it may be summed in.
        let (dh, activated): (&[T], &[T]) = (dh, activated);
        let terms = [((x, sx.transposed()), (dh, by_rows)), ((dy, sdy.transposed()), (activated, by_rows))];
        // SAFETY: as above.
        unsafe { gradient_product((k, width, rows), dd, &terms, Some(dt)) };
        dg
    });
    out.extend(dg);
    Ok(out)
}

impl CustomOp2 for NormedFeedforward {
    fn name(&self) -> &'static str {
        NAME
    }

    fn product_flops(&self, _x: &Shape, d: &Shape, res: &Shape) -> u64 {
        flops(d, res)
    }

    fn kept_bytes(&self) -> usize {
        kept_bytes(self.hidden.get())
    }

    fn cpu_fwd(&self, xs: &CpuStorage, xl: &Layout, ds: &CpuStorage, dl: &Layout) -> Result<(CpuStorage, Shape)> {
        self.cpu_forward((xs, xl), (ds, dl), None)
    }

    fn bwd(&self, x: &Tensor, d: &Tensor, _res: &Tensor, dy: &Tensor) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let [dx, dd] = unpack(&x.apply_op2_no_bwd(d, &self.backward_op(dy, None)?)?, [x, d])?;
        Ok((Some(dx), Some(dd)))
    }
}

impl CustomOp3 for NormedFeedforward {
    fn name(&self) -> &'static str {
        NAME
    }

    fn product_flops(&self, _x: &Shape, d: &Shape, _g: &Shape, res: &Shape) -> u64 {
        flops(d, res)
    }

    fn kept_bytes(&self) -> usize {
        kept_bytes(self.hidden.get())
    }

    fn cpu_fwd(
        &self,
        xs: &CpuStorage,
        xl: &Layout,
        ds: &CpuStorage,
        dl: &Layout,
        gs: &CpuStorage,
        gl: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        self.cpu_forward((xs, xl), (ds, dl), Some((gs, gl)))
    }

    fn bwd(
        &self,
        x: &Tensor,
        d: &Tensor,
        g: &Tensor,
        _res: &Tensor,
        dy: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let [dx, dd, dg] = unpack(&x.apply_op2_no_bwd(d, &self.backward_op(dy, Some(g))?)?, [x, d, g])?;
        Ok((Some(dx), Some(dd), Some(dg)))
    }
}

/// The backward of [`NormedFeedforward`]: arguments `x` and `D`, the output's gradient and
/// the gain's values held by the op; result `[dx | dD (| dg)]` flattened.
struct NormedFeedforwardBackward<'a> {
    eps: f64,
    act: Activation,
    hidden: &'a CpuStorage,
    gain: Option<Vec<f64>>,
    grad: Tensor,
}

impl CustomOp2 for NormedFeedforwardBackward<'_> {
    fn name(&self) -> &'static str {
        "fused-normed-feedforward-backward"
    }

    fn cpu_fwd(&self, xs: &CpuStorage, xl: &Layout, ds: &CpuStorage, dl: &Layout) -> Result<(CpuStorage, Shape)> {
        let name = self.name();
        let out = with_output_gradient(&self.grad, xl.dims(), name, |gs, grad_layout| {
            Ok(per_real!(xs, name, |T| {
                let g: Option<Vec<T>> = self.gain.as_ref().map(|g| g.iter().map(|&v| T::c(v)).collect());
                backward(
                    (slice::<T>(xs, name)?, xl),
                    (slice::<T>(ds, name)?, dl),
                    g.as_deref(),
                    slice::<T>(self.hidden, name)?,
                    (slice::<T>(gs, name)?, grad_layout),
                    (T::c(self.eps), self.act),
                )?
            }))
        })?;
        let len = storage_len(&out);
        Ok((out, Shape::from(len)))
    }
}
