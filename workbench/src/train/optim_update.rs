//! AdamW's update as three passes in place over CPU storage: each moment estimate from the
//! gradient, then the parameter from both. candle's composition takes about a dozen ops per
//! parameter, each allocating a temporary (2–3 % of a step for the larger models). Every
//! pass computes exactly what the composition computes, in the same order and type, so both
//! give the same bits (a test checks it).

use candle_core::backend::BackendStorage;
use candle_core::{bail, CpuStorage, InplaceOp2, InplaceOp3, Layout, Result};
use num_traits::Float;

/// `m <- beta m + (1 - beta) s g`, or with `square` `v <- beta v + (1 - beta) (s g)^2`: the
/// moment estimates of the gradient `g` scaled by `s` (clipping).
pub(super) struct Moment {
    pub beta: f64,
    pub grad_scale: f64,
    pub square: bool,
}

/// `w <- w (1 - lr wd) - lr m_hat / (sqrt(v_hat) + eps)` with `m_hat = m / c1` and
/// `v_hat = v / c2` (the bias corrections).
pub(super) struct Descend {
    pub lr: f64,
    pub weight_decay: f64,
    pub correction1: f64,
    pub correction2: f64,
    pub eps: f64,
}

/// The elements of a contiguous storage (the optimizer's variables and gradients are).
fn elements<'a, T>(data: &'a [T], layout: &Layout, op: &str) -> Result<&'a [T]> {
    match layout.contiguous_offsets() {
        Some((start, end)) => Ok(&data[start..end]),
        None => bail!("{op}: expects a contiguous tensor, got strides {:?}", layout.stride()),
    }
}

fn elements_mut<'a, T>(data: &'a mut [T], layout: &Layout, op: &str) -> Result<&'a mut [T]> {
    match layout.contiguous_offsets() {
        Some((start, end)) => Ok(&mut data[start..end]),
        None => bail!("{op}: expects a contiguous tensor, got strides {:?}", layout.stride()),
    }
}

fn moment<T: Float>(m: &mut [T], g: &[T], Moment { beta, grad_scale, square }: &Moment) {
    let c = |v: f64| T::from(v).unwrap_or_else(T::nan);
    let (keep, take, scale) = (c(*beta), c(1.0 - beta), c(*grad_scale));
    for (m, &g) in m.iter_mut().zip(g) {
        let g = g * scale;
        let g = if *square { g * g } else { g };
        *m = *m * keep + g * take;
    }
}

fn descend<T: Float>(w: &mut [T], m: &[T], v: &[T], d: &Descend) {
    let c = |v: f64| T::from(v).unwrap_or_else(T::nan);
    // The composition multiplies by the reciprocals of the corrections (candle's division by
    // a scalar) and adds `eps` after the square root.
    let (decay, lr, eps) = (c(1.0 - d.lr * d.weight_decay), c(d.lr), c(d.eps));
    let (inv1, inv2) = (c(1.0 / d.correction1), c(1.0 / d.correction2));
    for ((w, &m), &v) in w.iter_mut().zip(m).zip(v) {
        let update = (m * inv1) / ((v * inv2).sqrt() + eps);
        *w = *w * decay - update * lr;
    }
}

impl InplaceOp2 for Moment {
    fn name(&self) -> &'static str {
        "adamw-moment"
    }

    fn cpu_fwd(&self, m: &mut CpuStorage, ml: &Layout, g: &CpuStorage, gl: &Layout) -> Result<()> {
        let op = self.name();
        if ml.shape() != gl.shape() {
            bail!("{op}: the moment has shape {:?}, the gradient {:?}", ml.dims(), gl.dims())
        }
        match (m, g) {
            (CpuStorage::F32(m), CpuStorage::F32(g)) => moment(elements_mut(m, ml, op)?, elements(g, gl, op)?, self),
            (CpuStorage::F64(m), CpuStorage::F64(g)) => moment(elements_mut(m, ml, op)?, elements(g, gl, op)?, self),
            (m, g) => bail!("{op}: expects f32 or f64 of one type, got {:?} and {:?}", m.dtype(), g.dtype()),
        }
        Ok(())
    }
}

impl InplaceOp3 for Descend {
    fn name(&self) -> &'static str {
        "adamw-descend"
    }

    fn cpu_fwd(
        &self,
        w: &mut CpuStorage,
        wl: &Layout,
        m: &CpuStorage,
        ml: &Layout,
        v: &CpuStorage,
        vl: &Layout,
    ) -> Result<()> {
        let op = self.name();
        if ml.shape() != wl.shape() || vl.shape() != wl.shape() {
            bail!("{op}: the parameter has shape {:?}, its moments {:?} and {:?}", wl.dims(), ml.dims(), vl.dims())
        }
        match (w, m, v) {
            (CpuStorage::F32(w), CpuStorage::F32(m), CpuStorage::F32(v)) => {
                descend(elements_mut(w, wl, op)?, elements(m, ml, op)?, elements(v, vl, op)?, self)
            }
            (CpuStorage::F64(w), CpuStorage::F64(m), CpuStorage::F64(v)) => {
                descend(elements_mut(w, wl, op)?, elements(m, ml, op)?, elements(v, vl, op)?, self)
            }
            (w, m, v) => {
                bail!("{op}: expects f32 or f64 of one type, got {:?}, {:?}, {:?}", w.dtype(), m.dtype(), v.dtype())
            }
        }
        Ok(())
    }
}
