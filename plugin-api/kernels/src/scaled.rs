//! `y = x + sign a u` (element-wise; `sign` is +1 or -1): a gradient step with per-entry
//! step sizes `a` on the update `u`, as one op (candle's form is a product and a sum, two
//! graph nodes and three temporaries). Backward: `dx = dy`, `da = sign dy u`,
//! `du = sign dy a`, the last two in one pass.

use crate::real::Real;
use crate::strided::{
    check_same_shapes, fill, map_chunks, map_row_pairs, map_triples_to_pair, output_buffer, read_vector, slice, unpack,
    Rows,
};
use crate::vector::dot;
use candle_core::{bail, CpuStorage, CustomOp3, Layout, Result, Shape, Tensor};

fn forward<T: Real>(x: (&[T], &Layout), a: (&[T], &Layout), u: (&[T], &Layout), sign: T) -> Vec<T> {
    let (xr, ar, ur) = (Rows::new(x.1), Rows::new(a.1), Rows::new(u.1));
    let len = xr.len;
    fill(
        xr.count * len,
        len,
        #[inline(always)]
        |first, chunk| {
            let (mut xb, mut ab, mut ub) = (Vec::new(), Vec::new(), Vec::new());
            for (k, y) in chunk.chunks_exact_mut(len.max(1)).enumerate() {
                let (xs, as_, us) = (
                    xr.read(x.0, first + k, &mut xb),
                    ar.read(a.0, first + k, &mut ab),
                    ur.read(u.0, first + k, &mut ub),
                );
                for (((y, &x), &a), &u) in y.iter_mut().zip(xs).zip(as_).zip(us) {
                    *y = x + sign * a * u;
                }
            }
        },
    )
}

/// `[da, du]`, each contiguous in the shape of the arguments.
fn backward<T: Real>(dy: (&[T], &Layout), a: (&[T], &Layout), u: (&[T], &Layout), sign: T) -> Vec<T> {
    map_triples_to_pair(
        dy,
        a,
        u,
        #[inline(always)]
        |d, a, u| {
            let g = sign * d;
            (g * u, g * a)
        },
    )
}

/// `x + sign a u`.
pub(crate) struct AddScaled {
    /// +1 or -1.
    pub sign: f64,
}

impl CustomOp3 for AddScaled {
    fn name(&self) -> &'static str {
        "fused-add-scaled"
    }

    fn cpu_fwd(
        &self,
        xs: &CpuStorage,
        xl: &Layout,
        as_: &CpuStorage,
        al: &Layout,
        us: &CpuStorage,
        ul: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let name = self.name();
        check_same_shapes(&[xl, al, ul], name)?;
        let out = per_real!(xs, name, |T| forward(
            (slice::<T>(xs, name)?, xl),
            (slice::<T>(as_, name)?, al),
            (slice::<T>(us, name)?, ul),
            self.sign as T,
        ));
        Ok((out, xl.shape().clone()))
    }

    fn bwd(
        &self,
        _x: &Tensor,
        a: &Tensor,
        u: &Tensor,
        _res: &Tensor,
        dy: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let [da, du] = unpack(&dy.apply_op3_no_bwd(a, u, &AddScaledBackward { sign: self.sign })?, [a, u])?;
        Ok((Some(dy.clone()), Some(da), Some(du)))
    }
}

/// The backward of [`AddScaled`]: arguments `dy`, `a`, `u`; result `[da, du]`.
struct AddScaledBackward {
    sign: f64,
}

impl CustomOp3 for AddScaledBackward {
    fn name(&self) -> &'static str {
        "fused-add-scaled-backward"
    }

    fn cpu_fwd(
        &self,
        ds: &CpuStorage,
        dl: &Layout,
        as_: &CpuStorage,
        al: &Layout,
        us: &CpuStorage,
        ul: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let name = self.name();
        check_same_shapes(&[dl, al, ul], name)?;
        let n = dl.shape().elem_count();
        let out = per_real!(ds, name, |T| backward(
            (slice::<T>(ds, name)?, dl),
            (slice::<T>(as_, name)?, al),
            (slice::<T>(us, name)?, ul),
            self.sign as T,
        ));
        Ok((out, Shape::from(2 * n)))
    }
}

/// `y = x + s u` for a scalar `s` (a one-element tensor: a learned step size, as the momentum
/// attentions' `beta` and `eta`, seed 001 Eq. 8): candle's `broadcast_mul` and sum are two
/// nodes, and the broadcast's backward reduces `dy u` through a strided copy. Backward:
/// `dx = dy`, `ds = sum(dy u)`, `du = s dy`.
pub(crate) struct AddTimesScalar;

/// The scalar of a one-element tensor.
fn scalar<T: Real>(storage: &CpuStorage, layout: &Layout, op: &'static str) -> Result<T> {
    match read_vector::<T>(storage, layout, op)?.as_slice() {
        &[s] => Ok(s),
        other => bail!("{op}: the scale must have one element, got {}", other.len()),
    }
}

impl CustomOp3 for AddTimesScalar {
    fn name(&self) -> &'static str {
        "fused-add-times-scalar"
    }

    fn cpu_fwd(
        &self,
        xs: &CpuStorage,
        xl: &Layout,
        ss: &CpuStorage,
        sl: &Layout,
        us: &CpuStorage,
        ul: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let name = self.name();
        check_same_shapes(&[xl, ul], name)?;
        let out = per_real!(xs, name, |T| {
            let s: T = scalar(ss, sl, name)?;
            map_row_pairs(
                slice::<T>(xs, name)?,
                &Rows::new(xl),
                slice::<T>(us, name)?,
                &Rows::new(ul),
                #[inline(always)]
                |x, u, y| {
                    for ((y, &x), &u) in y.iter_mut().zip(x).zip(u) {
                        *y = x + s * u;
                    }
                },
            )
        });
        Ok((out, xl.shape().clone()))
    }

    fn bwd(
        &self,
        _x: &Tensor,
        s: &Tensor,
        u: &Tensor,
        _res: &Tensor,
        dy: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let [ds, du] = unpack(&dy.apply_op3_no_bwd(s, u, &AddTimesScalarBackward)?, [s, u])?;
        Ok((Some(dy.clone()), Some(ds), Some(du)))
    }
}

/// The backward of [`AddTimesScalar`]: arguments `dy`, `s`, `u`; result `[ds | du]`.
struct AddTimesScalarBackward;

impl CustomOp3 for AddTimesScalarBackward {
    fn name(&self) -> &'static str {
        "fused-add-times-scalar-backward"
    }

    fn cpu_fwd(
        &self,
        ds: &CpuStorage,
        dl: &Layout,
        ss: &CpuStorage,
        sl: &Layout,
        us: &CpuStorage,
        ul: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        /// `[ds | du]` in one pass over `dy`: each task scales its rows and returns its share
        /// of `sum(dy u)`.
        fn gradients<T: Real>(dy: &[T], dy_rows: &Rows, s: T, u: &[T], u_rows: &Rows) -> Vec<T> {
            let len = dy_rows.len;
            let mut out = output_buffer(1 + dy_rows.count * len);
            let (ds, du) = out.split_at_mut(1);
            ds[0] = map_chunks(
                du,
                len,
                #[inline(always)]
                |first, chunk| {
                    let (mut dbuf, mut ubuf) = (Vec::new(), Vec::new());
                    let mut sum = T::zero();
                    for (k, du) in chunk.chunks_exact_mut(len.max(1)).enumerate() {
                        let d = dy_rows.read(dy, first + k, &mut dbuf);
                        sum += dot(d, u_rows.read(u, first + k, &mut ubuf));
                        for (du, &d) in du.iter_mut().zip(d) {
                            *du = s * d;
                        }
                    }
                    sum
                },
                |a, b| a + b,
            );
            out
        }
        let name = self.name();
        check_same_shapes(&[dl, ul], name)?;
        let n = dl.shape().elem_count();
        let out = per_real!(ds, name, |T| gradients(
            slice::<T>(ds, name)?,
            &Rows::new(dl),
            scalar::<T>(ss, sl, name)?,
            slice::<T>(us, name)?,
            &Rows::new(ul),
        ));
        Ok((out, Shape::from(1 + n)))
    }
}
