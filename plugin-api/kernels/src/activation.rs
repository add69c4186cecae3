//! An element-wise activation (ReLU, the exact GELU or its tanh form, SiLU) as one op whose
//! backward is one pass:
//! `dx = dy 1[x > 0]` for ReLU (candle's takes four: a comparison, a conversion, a product
//! and the accumulation), `dx = dy (Ncdf(x) + x npdf(x))` for GELU (candle's takes ten and
//! rounds `1/sqrt(2 pi)` to 0.398942). A gated activation `g act(x)` (a gated MLP's hidden
//! layer) is one op too, its backward `dx = dy g act'(x)`, `dg = dy act(x)` one pass.

use crate::norm::Activation;
use crate::real::Real;
use crate::strided::{
    check_same_shapes, map_chunks, map_row_pairs, map_rows, map_triples_to_pair, output_buffer_with_room, read_vector,
    slice, sum_parts, unpack, Rows,
};
use candle_core::{bail, CpuStorage, CustomOp1, CustomOp2, CustomOp3, Layout, Result, Shape, Tensor};

fn map<T: Real>(x: &[T], rows: &Rows, f: impl Fn(T) -> T + Sync) -> Vec<T> {
    map_rows(
        x,
        rows,
        #[inline(always)]
        |x, y| {
            for (y, &x) in y.iter_mut().zip(x) {
                *y = f(x);
            }
        },
    )
}

fn forward<T: Real>(x: &[T], rows: &Rows, act: Activation) -> Vec<T> {
    with_activation!(act, |f, _df| map(x, rows, f))
}

fn backward_with<T: Real>(x: &[T], rows: &Rows, dy: &[T], dy_rows: &Rows, df: impl Fn(T) -> T + Sync) -> Vec<T> {
    map_row_pairs(
        x,
        rows,
        dy,
        dy_rows,
        #[inline(always)]
        |x, dy, dx| {
            for ((dx, &x), &dy) in dx.iter_mut().zip(x).zip(dy) {
                *dx = dy * df(x);
            }
        },
    )
}

fn backward<T: Real>(x: &[T], rows: &Rows, dy: &[T], dy_rows: &Rows, act: Activation) -> Vec<T> {
    with_activation!(act, |_f, df| backward_with(x, rows, dy, dy_rows, df))
}

/// `act(x)`, element-wise.
pub(crate) struct Elementwise {
    pub act: Activation,
}

impl CustomOp1 for Elementwise {
    fn name(&self) -> &'static str {
        "fused-activation"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let rows = Rows::new(l);
        let out = per_real!(s, self.name(), |T| forward(slice::<T>(s, self.name())?, &rows, self.act));
        Ok((out, l.shape().clone()))
    }

    fn bwd(&self, x: &Tensor, _res: &Tensor, dy: &Tensor) -> Result<Option<Tensor>> {
        Ok(Some(x.apply_op2_no_bwd(dy, &ElementwiseBackward { act: self.act })?))
    }
}

/// `dx = dy 1[y > 0]` for `y = relu(x)`: ReLU's derivative read off its output (`y > 0`
/// exactly where `x > 0`), for ops that keep `relu(x)` and not `x`.
pub(crate) fn relu_backward_from_output(y: &Tensor, dy: &Tensor) -> Result<Tensor> {
    y.apply_op2_no_bwd(dy, &ElementwiseBackward { act: Activation::Relu })
}

/// The backward of [`Elementwise`]: arguments `x`, `dy`; result `dx`.
struct ElementwiseBackward {
    act: Activation,
}

impl CustomOp2 for ElementwiseBackward {
    fn name(&self) -> &'static str {
        "fused-activation-backward"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout, ds: &CpuStorage, dl: &Layout) -> Result<(CpuStorage, Shape)> {
        let (rows, dy_rows) = (Rows::new(l), Rows::new(dl));
        let name = self.name();
        let out =
            per_real!(s, name, |T| backward(slice::<T>(s, name)?, &rows, slice::<T>(ds, name)?, &dy_rows, self.act));
        Ok((out, l.shape().clone()))
    }
}

/// `g act(x)` row by row; `act` a function item or closure, so that it is inlined and the
/// loop vectorised (a function pointer here made CEM's step a third slower).
fn gated_with<T: Real>(x: &[T], rows: &Rows, g: &[T], g_rows: &Rows, act: impl Fn(T) -> T + Sync) -> Vec<T> {
    map_row_pairs(
        x,
        rows,
        g,
        g_rows,
        #[inline(always)]
        |x, g, y| {
            for ((y, &x), &g) in y.iter_mut().zip(x).zip(g) {
                *y = g * act(x);
            }
        },
    )
}

fn gated<T: Real>(x: &[T], rows: &Rows, g: &[T], g_rows: &Rows, act: Activation) -> Vec<T> {
    with_activation!(act, |f, _df| gated_with(x, rows, g, g_rows, f))
}

/// `[dx, dg] = [dy g act'(x), dy act(x)]`.
fn gated_backward_with<T: Real>(
    dy: (&[T], &Layout),
    x: (&[T], &Layout),
    g: (&[T], &Layout),
    act: impl Fn(T) -> T + Sync,
    derivative: impl Fn(T) -> T + Sync,
) -> Vec<T> {
    map_triples_to_pair(
        dy,
        x,
        g,
        #[inline(always)]
        |d, x, g| (d * g * derivative(x), d * act(x)),
    )
}

type Argument<'a, T> = (&'a [T], &'a Layout);

fn gated_backward<T: Real>(dy: Argument<T>, x: Argument<T>, g: Argument<T>, act: Activation) -> Vec<T> {
    with_activation!(act, |f, df| gated_backward_with(dy, x, g, f, df))
}

/// `g act(x)`, element-wise: arguments `x`, `g` of one shape.
pub(crate) struct Gated {
    pub act: Activation,
}

impl CustomOp2 for Gated {
    fn name(&self) -> &'static str {
        "fused-gated-activation"
    }

    fn cpu_fwd(&self, xs: &CpuStorage, xl: &Layout, gs: &CpuStorage, gl: &Layout) -> Result<(CpuStorage, Shape)> {
        let name = self.name();
        check_same_shapes(&[xl, gl], name)?;
        let (rows, gate_rows) = (Rows::new(xl), Rows::new(gl));
        let out =
            per_real!(xs, name, |T| gated(slice::<T>(xs, name)?, &rows, slice::<T>(gs, name)?, &gate_rows, self.act));
        Ok((out, xl.shape().clone()))
    }

    fn bwd(&self, x: &Tensor, g: &Tensor, _res: &Tensor, dy: &Tensor) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let [dx, dg] = unpack(&dy.apply_op3_no_bwd(x, g, &GatedBackward { act: self.act })?, [x, g])?;
        Ok((Some(dx), Some(dg)))
    }
}

/// The backward of [`Gated`]: arguments `dy`, `x`, `g`; result `[dx, dg]`.
struct GatedBackward {
    act: Activation,
}

impl CustomOp3 for GatedBackward {
    fn name(&self) -> &'static str {
        "fused-gated-activation-backward"
    }

    fn cpu_fwd(
        &self,
        ds: &CpuStorage,
        dl: &Layout,
        xs: &CpuStorage,
        xl: &Layout,
        gs: &CpuStorage,
        gl: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let name = self.name();
        check_same_shapes(&[dl, xl, gl], name)?;
        let out = per_real!(ds, name, |T| gated_backward(
            (slice::<T>(ds, name)?, dl),
            (slice::<T>(xs, name)?, xl),
            (slice::<T>(gs, name)?, gl),
            self.act
        ));
        Ok((out, Shape::from(2 * dl.shape().elem_count())))
    }
}

/// `act(x + v)` with `v` (`[n]`) added to every row of `x` (`[..., n]`): a row shift and an
/// activation as one op (Hyper-SET's step-size network, `GELU(X0 + e_t)`, seed 000 Eq. 12),
/// where the two ops write the shifted rows, read them back, and in the backward read their
/// gradient once more for the sums over rows. Backward, one pass: `dx = dy act'(x + v)`,
/// `dv = sum_rows dx`.
pub(crate) struct ShiftedActivation {
    pub act: Activation,
}

fn shifted<T: Real>(x: &[T], rows: &Rows, v: &[T], act: Activation) -> Vec<T> {
    with_activation!(act, |f, _df| map_rows(
        x,
        rows,
        #[inline(always)]
        |x, y| {
            for ((y, &x), &v) in y.iter_mut().zip(x).zip(v) {
                *y = f(x + v);
            }
        },
    ))
}

/// `[dx (flattened), dv]`.
fn shifted_backward_with<T: Real>(x: (&[T], &Rows), v: &[T], dy: (&[T], &Rows), df: impl Fn(T) -> T + Sync) -> Vec<T> {
    let ((x, rows), (dy, dy_rows)) = (x, dy);
    let n = rows.len;
    let mut out = output_buffer_with_room(rows.count * n, n);
    let dv = map_chunks(
        &mut out,
        n,
        #[inline(always)]
        |first, chunk| {
            let mut sums = vec![T::zero(); n];
            let (mut x_buf, mut dy_buf) = (Vec::new(), Vec::new());
            for (k, dx) in chunk.chunks_exact_mut(n.max(1)).enumerate() {
                let (x, dy) = (rows.read(x, first + k, &mut x_buf), dy_rows.read(dy, first + k, &mut dy_buf));
                for ((((dx, &x), &v), &dy), sum) in dx.iter_mut().zip(x).zip(v).zip(dy).zip(sums.iter_mut()) {
                    *dx = dy * df(x + v);
                    *sum += *dx;
                }
            }
            sums
        },
        sum_parts,
    );
    out.extend(dv);
    out
}

fn shifted_backward<T: Real>(x: (&[T], &Rows), v: &[T], dy: (&[T], &Rows), act: Activation) -> Vec<T> {
    with_activation!(act, |_f, df| shifted_backward_with(x, v, dy, df))
}

impl CustomOp2 for ShiftedActivation {
    fn name(&self) -> &'static str {
        "fused-shifted-activation"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout, vs: &CpuStorage, vl: &Layout) -> Result<(CpuStorage, Shape)> {
        let name = self.name();
        let rows = Rows::new(l);
        if vl.dims() != [rows.len] {
            bail!("{name}: the row vector must be [{}], got {:?}", rows.len, vl.dims())
        }
        let out =
            per_real!(s, name, |T| shifted(slice::<T>(s, name)?, &rows, &read_vector::<T>(vs, vl, name)?, self.act));
        Ok((out, l.shape().clone()))
    }

    fn bwd(&self, x: &Tensor, v: &Tensor, _res: &Tensor, dy: &Tensor) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let [dx, dv] = unpack(&x.apply_op3_no_bwd(v, dy, &ShiftedActivationBackward { act: self.act })?, [x, v])?;
        Ok((Some(dx), Some(dv)))
    }
}

/// The backward of [`ShiftedActivation`]: arguments `x`, `v`, `dy`; result `[dx, dv]`.
struct ShiftedActivationBackward {
    act: Activation,
}

impl CustomOp3 for ShiftedActivationBackward {
    fn name(&self) -> &'static str {
        "fused-shifted-activation-backward"
    }

    fn cpu_fwd(
        &self,
        xs: &CpuStorage,
        xl: &Layout,
        vs: &CpuStorage,
        vl: &Layout,
        ds: &CpuStorage,
        dl: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let name = self.name();
        check_same_shapes(&[xl, dl], name)?;
        let (rows, dy_rows) = (Rows::new(xl), Rows::new(dl));
        let out = per_real!(xs, name, |T| {
            let v = read_vector::<T>(vs, vl, name)?;
            shifted_backward((slice::<T>(xs, name)?, &rows), &v, (slice::<T>(ds, name)?, &dy_rows), self.act)
        });
        let len = crate::strided::storage_len(&out);
        Ok((out, Shape::from(len)))
    }
}
