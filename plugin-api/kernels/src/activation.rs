//! An element-wise activation (ReLU, the exact GELU or its tanh form, SiLU) as one op whose
//! backward is one pass:
//! `dx = dy 1[x > 0]` for ReLU (candle's takes four: a comparison, a conversion, a product
//! and the accumulation), `dx = dy (Ncdf(x) + x npdf(x))` for GELU (candle's takes ten and
//! rounds `1/sqrt(2 pi)` to 0.398942).

use crate::norm::{gelu, gelu_derivative, gelu_tanh, gelu_tanh_derivative, silu, silu_derivative, Activation};
use crate::real::Real;
use crate::strided::{map_row_pairs, map_rows, slice, Rows};
use candle_core::{CpuStorage, CustomOp1, CustomOp2, Layout, Result, Shape, Tensor};

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
    match act {
        Activation::Identity => map(x, rows, |x| x),
        Activation::Relu => map(x, rows, |x| if x > T::zero() { x } else { T::zero() }),
        Activation::Gelu => map(x, rows, gelu),
        Activation::GeluTanh => map(x, rows, gelu_tanh),
        Activation::Silu => map(x, rows, silu),
    }
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
    match act {
        Activation::Identity => backward_with(x, rows, dy, dy_rows, |_| T::one()),
        Activation::Relu => backward_with(x, rows, dy, dy_rows, |x| if x > T::zero() { T::one() } else { T::zero() }),
        Activation::Gelu => backward_with(x, rows, dy, dy_rows, gelu_derivative),
        Activation::GeluTanh => backward_with(x, rows, dy, dy_rows, gelu_tanh_derivative),
        Activation::Silu => backward_with(x, rows, dy, dy_rows, silu_derivative),
    }
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
