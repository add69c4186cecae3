//! RMSNorm over the last dimension, with an optional gain and an optional element-wise
//! activation after it, as one op with a hand-written backward; with `centre`, LayerNorm
//! (the RMSNorm of the row minus its mean).
//!
//! Forward, per row `x` of length `n`: `r = (mean(x^2) + eps)^(-1/2)`, `x^ = r x`,
//! `u = x^ g` (or `x^` without gain), `y = act(u)`.
//!
//! Backward, from `dy`: `du = dy act'(u)`, `dg = sum_rows du x^`, `dx^ = du g` and
//! `dx = r (dx^ - x^ mean(dx^ x^))`. The backward recomputes `r` from `x` rather than keeping
//! it, so the op holds no memory beyond candle's graph. Centred, `x` is replaced by
//! `c = x - mean(x)` and the gradient through the mean is `dx - mean(dx)` (the rows' `dx` of
//! `c`, projected off the constant direction).

use crate::real::Real;
use crate::strided::{
    fill, map_chunks, output_buffer_with_room, read_vector, slice, storage_len, sum_parts, unpack, Rows,
};
use crate::vector::{dot, sum, sum_sq};
use candle_core::{bail, CpuStorage, CustomOp1, CustomOp2, CustomOp3, Layout, Result, Shape, Tensor};

/// The element-wise function applied after the normalisation (and gain).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// None: a plain RMSNorm.
    Identity,
    /// `max(u, 0)`; its derivative is taken as `1[u > 0]`.
    Relu,
    /// The exact (erf) GELU, `u Ncdf(u)`, as candle's `gelu_erf`.
    Gelu,
    /// GELU in its tanh form (GPT-2's), `u (1 + tanh(sqrt(2/pi) (u + 0.044715 u^3))) / 2`,
    /// as candle's `gelu`.
    GeluTanh,
    /// SiLU (swish), `u sigmoid(u)`, as candle's `silu`.
    Silu,
}

/// `u Ncdf(u)` (in f64 computed in candle's order, so that values agree bit for bit).
#[inline(always)]
pub(crate) fn gelu<T: Real, const FMA: bool>(u: T) -> T {
    u.ncdf::<FMA>() * u
}

/// `Ncdf(u) + u npdf(u)`.
#[inline(always)]
pub(crate) fn gelu_derivative<T: Real, const FMA: bool>(u: T) -> T {
    let pdf = (-(u * u) * T::c(0.5)).exp_fast::<FMA>() * T::c(1.0 / (2.0 * std::f64::consts::PI).sqrt());
    u.ncdf::<FMA>() + u * pdf
}

/// `sqrt(2 / pi)` and the cubic coefficient of the tanh form of GELU.
const GELU_TANH_K: f64 = 0.797_884_560_802_865_4;
const GELU_TANH_C: f64 = 0.044_715;

/// `u (1 + tanh(z)) / 2` with `z = k (u + c u^3)`.
#[inline(always)]
pub(crate) fn gelu_tanh<T: Real, const FMA: bool>(u: T) -> T {
    let z = T::c(GELU_TANH_K) * (u + T::c(GELU_TANH_C) * u * u * u);
    T::c(0.5) * u * (T::one() + z.tanh_fast::<FMA>())
}

/// `(1 + t) / 2 + u (1 - t^2) k (1 + 3 c u^2) / 2` with `t = tanh(z)`.
#[inline(always)]
pub(crate) fn gelu_tanh_derivative<T: Real, const FMA: bool>(u: T) -> T {
    let u2 = u * u;
    let t = (T::c(GELU_TANH_K) * (u + T::c(GELU_TANH_C) * u2 * u)).tanh_fast::<FMA>();
    let dz = T::c(GELU_TANH_K) * (T::one() + T::c(3.0 * GELU_TANH_C) * u2);
    T::c(0.5) * (T::one() + t) + T::c(0.5) * u * (T::one() - t * t) * dz
}

/// `u sigmoid(u)`.
#[inline(always)]
pub(crate) fn silu<T: Real, const FMA: bool>(u: T) -> T {
    u / (T::one() + (-u).exp_fast::<FMA>())
}

/// `sigmoid(u) (1 + u (1 - sigmoid(u)))`.
#[inline(always)]
pub(crate) fn silu_derivative<T: Real, const FMA: bool>(u: T) -> T {
    let s = T::one() / (T::one() + (-u).exp_fast::<FMA>());
    s * (T::one() + u * (T::one() - s))
}

/// `(mean(x^2) + eps)^(-1/2)`.
#[inline(always)]
fn inverse_rms<T: Real>(x: &[T], eps: T) -> T {
    (sum_sq(x) / T::c(x.len() as f64) + eps).sqrt().recip()
}

/// One row forward: `y = f(x r g)`.
#[inline(always)]
pub(crate) fn forward_row<T: Real>(x: &[T], gain: Option<&[T]>, eps: T, y: &mut [T], f: impl Fn(T) -> T) {
    let r = inverse_rms(x, eps);
    match gain {
        Some(g) => {
            for ((y, &x), &g) in y.iter_mut().zip(x).zip(g) {
                *y = f(x * r * g);
            }
        }
        None => {
            for (y, &x) in y.iter_mut().zip(x) {
                *y = f(x * r);
            }
        }
    }
}

/// `x - mean(x)` in `out`, when centring; else `x` itself.
#[inline(always)]
fn centred<'a, T: Real>(x: &'a [T], centre: bool, out: &'a mut Vec<T>) -> &'a [T] {
    if !centre {
        return x;
    }
    let mean = sum(x) / T::c(x.len().max(1) as f64);
    out.clear();
    out.extend(x.iter().map(|&v| v - mean));
    out
}

fn forward<T: Real>(x: &[T], rows: &Rows, gain: Option<&[T]>, norm: &Norm) -> Vec<T> {
    let (len, eps, act, centre) = (rows.len, T::c(norm.eps), norm.act, norm.centre);
    fill(
        rows.count * len,
        len,
        #[inline(always)]
        |first, chunk| {
            let (mut buf, mut cbuf) = (Vec::new(), Vec::new());
            with_activation!(act, |f, _df| {
                for (k, y) in chunk.chunks_exact_mut(len.max(1)).enumerate() {
                    let row = centred(rows.read(x, first + k, &mut buf), centre, &mut cbuf);
                    forward_row(row, gain, eps, y, f);
                }
            })
        },
    )
}

/// One row backward: writes `dx`, adds to `dg` (when there is a gain). `dxhat` is scratch.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn backward_row<T: Real>(
    x: &[T],
    dy: &[T],
    gain: Option<&[T]>,
    eps: T,
    dx: &mut [T],
    dg: &mut [T],
    dxhat: &mut [T],
    df: impl Fn(T) -> T,
) {
    let r = inverse_rms(x, eps);
    activation_backward::<T, false>(x, dy, gain, r, dg, dxhat, &mut [], |u| u, df);
    normalisation_backward(x, dxhat, r, dx);
}

/// One row forward and backward at once, for an op that keeps the norm's input `x` but not
/// its output (`normed_feedforward.rs`): writes `y = f(x r g)` and replaces the output
/// gradient in `dy_then_dx` by `dx`, adding to `dg`; one `r` and no copy of the row.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn forward_backward_row<T: Real>(
    x: &[T],
    dy_then_dx: &mut [T],
    gain: Option<&[T]>,
    eps: T,
    y: &mut [T],
    dg: &mut [T],
    dxhat: &mut [T],
    (f, df): (impl Fn(T) -> T, impl Fn(T) -> T),
) {
    let r = inverse_rms(x, eps);
    activation_backward::<T, true>(x, dy_then_dx, gain, r, dg, dxhat, y, f, df);
    normalisation_backward(x, dxhat, r, dy_then_dx);
}

/// The backward through the gain and the activation: `dx^ = dy f'(u) g` (adding
/// `dy f'(u) x^` to `dg`) for `u = x^ g`, `x^ = r x`; with `FORWARD`, also `y = f(u)`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn activation_backward<T: Real, const FORWARD: bool>(
    x: &[T],
    dy: &[T],
    gain: Option<&[T]>,
    r: T,
    dg: &mut [T],
    dxhat: &mut [T],
    y: &mut [T],
    f: impl Fn(T) -> T,
    df: impl Fn(T) -> T,
) {
    let n = x.len();
    // Equal lengths up front, so that the loops below carry no bounds checks.
    let (dy, dxhat) = (&dy[..n], &mut dxhat[..n]);
    let y = if FORWARD { &mut y[..n] } else { y };
    match gain {
        Some(g) => {
            let (g, dg) = (&g[..n], &mut dg[..n]);
            for j in 0..n {
                let xhat = x[j] * r;
                let u = xhat * g[j];
                if FORWARD {
                    y[j] = f(u);
                }
                let du = dy[j] * df(u);
                dg[j] += du * xhat;
                dxhat[j] = du * g[j];
            }
        }
        None => {
            for j in 0..n {
                let u = x[j] * r;
                if FORWARD {
                    y[j] = f(u);
                }
                dxhat[j] = dy[j] * df(u);
            }
        }
    }
}

/// The backward through the normalisation: `dx = r dx^ - x (r^3 mean(dx^ x))`.
#[inline(always)]
fn normalisation_backward<T: Real>(x: &[T], dxhat: &[T], r: T, dx: &mut [T]) {
    // mean(dxhat xhat) r, so that dx = r dxhat - x (r^2 mean(dxhat xhat)).
    let k = dot(dxhat, x) * r * r * r / T::c(x.len() as f64);
    for ((dx, &d), &x) in dx.iter_mut().zip(dxhat.iter()).zip(x) {
        *dx = r * d - x * k;
    }
}

/// `dx` (contiguous, the shape of `x`) followed by `dg` (`len` values) when there is a gain.
fn backward<T: Real>(x: &[T], x_rows: &Rows, gain: Option<&[T]>, dy: &[T], dy_rows: &Rows, norm: &Norm) -> Vec<T> {
    let (len, eps, act, centre) = (x_rows.len, T::c(norm.eps), norm.act, norm.centre);
    let n = x_rows.count * len;
    let mut out = output_buffer_with_room(n, if gain.is_some() { len } else { 0 });
    let dg = map_chunks(
        &mut out,
        len,
        #[inline(always)]
        |first, chunk| {
            let mut dg = vec![T::zero(); if gain.is_some() { len } else { 0 }];
            let (mut xbuf, mut dybuf, mut cbuf) = (Vec::new(), Vec::new(), Vec::new());
            let mut dxhat = vec![T::zero(); len];
            with_activation!(act, |_f, df| {
                for (k, dx) in chunk.chunks_exact_mut(len.max(1)).enumerate() {
                    let xr = centred(x_rows.read(x, first + k, &mut xbuf), centre, &mut cbuf);
                    let dyr = dy_rows.read(dy, first + k, &mut dybuf);
                    backward_row(xr, dyr, gain, eps, dx, &mut dg, &mut dxhat, df);
                    if centre {
                        let mean = sum(dx) / T::c(len.max(1) as f64);
                        for v in dx.iter_mut() {
                            *v -= mean;
                        }
                    }
                }
            });
            dg
        },
        sum_parts,
    );
    out.extend(dg);
    out
}

fn check_gain(rows: &Rows, gain_layout: &Layout, op: &'static str) -> Result<()> {
    if gain_layout.dims() != [rows.len] {
        bail!("{op}: the gain must have shape [{}] (the last dimension), got {:?}", rows.len, gain_layout.dims())
    }
    Ok(())
}

/// RMSNorm (then `act`) without gain, or LayerNorm with `centre`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Norm {
    pub eps: f64,
    pub act: Activation,
    /// Subtract each row's mean first (LayerNorm).
    pub centre: bool,
}

impl CustomOp1 for Norm {
    fn name(&self) -> &'static str {
        if self.centre {
            "fused-layer-norm"
        } else {
            "fused-rms-norm"
        }
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let rows = Rows::new(l);
        let out = per_real!(s, self.name(), |T| forward(slice::<T>(s, self.name())?, &rows, None, self));
        Ok((out, l.shape().clone()))
    }

    fn bwd(&self, x: &Tensor, _res: &Tensor, dy: &Tensor) -> Result<Option<Tensor>> {
        Ok(Some(x.apply_op2_no_bwd(dy, &NormBackward(*self))?))
    }
}

/// [`Norm`] with gain (then `act`): arguments `x`, `g`.
pub(crate) struct NormGain(pub Norm);

impl CustomOp2 for NormGain {
    fn name(&self) -> &'static str {
        if self.0.centre {
            "fused-layer-norm-gain"
        } else {
            "fused-rms-norm-gain"
        }
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout, gs: &CpuStorage, gl: &Layout) -> Result<(CpuStorage, Shape)> {
        let rows = Rows::new(l);
        check_gain(&rows, gl, self.name())?;
        let out = per_real!(s, self.name(), |T| {
            let g = read_vector::<T>(gs, gl, self.name())?;
            forward(slice::<T>(s, self.name())?, &rows, Some(&g), &self.0)
        });
        Ok((out, l.shape().clone()))
    }

    fn bwd(&self, x: &Tensor, g: &Tensor, _res: &Tensor, dy: &Tensor) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let packed = x.apply_op3_no_bwd(g, dy, &NormGainBackward(self.0))?;
        let [dx, dg] = unpack(&packed, [x, g])?;
        Ok((Some(dx), Some(dg)))
    }
}

/// The backward of [`Norm`]: arguments `x`, `dy`; result `dx`.
struct NormBackward(Norm);

impl CustomOp2 for NormBackward {
    fn name(&self) -> &'static str {
        "fused-norm-backward"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout, ds: &CpuStorage, dl: &Layout) -> Result<(CpuStorage, Shape)> {
        let (rows, dy_rows) = (Rows::new(l), Rows::new(dl));
        let name = self.name();
        let out = per_real!(s, name, |T| backward(
            slice::<T>(s, name)?,
            &rows,
            None,
            slice::<T>(ds, name)?,
            &dy_rows,
            &self.0,
        ));
        Ok((out, l.shape().clone()))
    }
}

/// The backward of [`NormGain`]: arguments `x`, `g`, `dy`; result `[dx (flattened), dg]`.
struct NormGainBackward(Norm);

impl CustomOp3 for NormGainBackward {
    fn name(&self) -> &'static str {
        "fused-norm-gain-backward"
    }

    fn cpu_fwd(
        &self,
        s: &CpuStorage,
        l: &Layout,
        gs: &CpuStorage,
        gl: &Layout,
        ds: &CpuStorage,
        dl: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (rows, dy_rows) = (Rows::new(l), Rows::new(dl));
        check_gain(&rows, gl, self.name())?;
        let name = self.name();
        let out = per_real!(s, name, |T| {
            let g = read_vector::<T>(gs, gl, name)?;
            let (x, dy) = (slice::<T>(s, name)?, slice::<T>(ds, name)?);
            backward(x, &rows, Some(&g), dy, &dy_rows, &self.0)
        });
        let len = storage_len(&out);
        Ok((out, Shape::from(len)))
    }
}
