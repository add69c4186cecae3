//! MHA2nd1st's head-space Newton direction (seed 001, Eq. 16, 19, 22-24) as one op: from the
//! queries `Q` and the keys `K` (`[B, N, H p]` each, the merged layout of the projections),
//! the head-wise score temperatures `T_h` and b-term coefficients `c_h`, per sample and head,
//!
//! - `P = softmax_row((Q K^T - 1 kn^T) / T_h)`, `kn_i = ||k_i||^2 / 2` (the distance scores
//!   `-||q_t - k_i||^2 / (2 T_h)` less `||q_t||^2 / (2 T_h)`, which cancels in the softmax);
//! - `U = Q - P K` (`u_t = q_t - k^_t`, Eq. 16's gradient in head space);
//! - `A = U K^T` (`a_ti = k_i . u_t`), `r_t = sum_i p_ti a_ti` (`= k^_t . u_t`);
//! - `G = P * (A - r 1^T)`, so that `G K = sum_i p d d^T u` (Eq. 24's bracket);
//! - `out = U + c_h G K = Q + W K` with `W = c_h G - P`,
//!
//! written back in the merged layout. With `causal`, key `i > t` is left out of query `t`'s
//! softmax (and so of every term). The forward keeps `P` and `U` when a gradient will be
//! asked for; the backward recomputes `A` (one product) and, with `dO` the output's gradient:
//!
//! - `dW = dO K^T`, `dK = W^T dO`, `dc_h = sum dW * G`, `dG = c_h dW`;
//! - `dr_t = -sum_i dG_ti p_ti`, `dA = P * (dG + dr 1^T)`,
//!   `dP = -dW + (dG + dr 1^T) * (A - r 1^T)` (the chain rule gives `dr_t a_ti` for the last
//!   factor; it differs by `dr_t r_t`, constant along the row, which the softmax's backward
//!   removes);
//! - `dU = dA K`, `dK += dA^T U`; then through `U = Q - P K`: `dQ = dO + dU`,
//!   `dP -= dU K^T`, `dK -= P^T dU`;
//! - the softmax: `dZ = P * (dP - rowsum(dP P))` on the scores `Z`; with `E = dZ K`:
//!   `dQ += E / T_h`, `dK += (dZ^T Q - diag(colsum dZ) K) / T_h`, and
//!   `dT_h = -(<Q, E> - sum_i colsum(dZ)_i kn_i) / T_h^2`.
//!
//! Samples run in parallel; the products are those of `attention::product` (register tiles
//! where they apply, else `gemm`).

use crate::attention::{causal_product, head_matrix, transposed, with_output_gradient, Causal, Dims, Matrix};
use crate::real::Real;
use crate::strided::{
    contiguous_values, fill, map_chunks, output_buffer, slice, storage_len, sum_parts, three_gradients, Rows,
};
use crate::vector::{dot, softmax_in_place};
use candle_core::{bail, CpuStorage, CustomOp3, Layout, Result, Shape, Tensor};
use std::sync::OnceLock;

/// Entry `(i, c)` of `m`.
///
/// # Safety
/// `m` addresses a matrix with at least `i + 1` rows and `c + 1` columns.
#[inline(always)]
unsafe fn at<T: Real>((m, rs, cs): Matrix<T>, i: usize, c: usize) -> T {
    *m.add(i * rs + c * cs)
}

/// `||k_i||^2 / 2` of the head's keys into `half_norms` (`N`).
#[inline(always)]
fn key_half_norms<T: Real>(k: Matrix<T>, (n, hp): (usize, usize), half_norms: &mut [T]) {
    for (i, kn) in half_norms.iter_mut().enumerate().take(n) {
        // SAFETY: `k` is the head's N x p.
        *kn = (0..hp).map(|c| unsafe { at(k, i, c) }).fold(T::zero(), |s, v| s + v * v) * T::c(0.5);
    }
}

/// A row-major `n x n` scratch matrix as a [`Matrix`].
#[inline(always)]
fn square<T: Real>(m: &[T], n: usize) -> Matrix<T> {
    (m.as_ptr(), n, 1)
}

/// The forward terms of one (sample, head): `P` into `p` (`N x N`), `U` into `u` (`N x p`,
/// rows of `p`) and `W = c G - P` into `w` (`N x N`), from the head's `Q` and `K`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn head_terms<T: Real>(
    (q, k): (Matrix<T>, Matrix<T>),
    (n, hp): (usize, usize),
    (temperature, c): (T, T),
    causal: bool,
    half_norms: &mut [T],
    p: &mut [T],
    u: &mut [T],
    w: &mut [T],
) {
    let tau = temperature.recip();
    let [lower_output, lower_left] = [Causal::LowerOutput, Causal::LowerLeft].map(|t| Causal::when(causal, t));
    key_half_norms(k, (n, hp), half_norms);
    // SAFETY (every product): `p`, `w` hold N x N, `u` N x p; `q` and `k` are the head's N x p;
    // `P` and `W` are zero past the diagonal when causal.
    unsafe { causal_product(lower_output, (n, n, hp), p.as_mut_ptr(), n, q, transposed(k), tau, false) }
    for (t, row) in p.chunks_exact_mut(n.max(1)).enumerate() {
        let kept = if causal { t + 1 } else { n };
        let (row, masked) = row.split_at_mut(kept);
        for (z, &kn) in row.iter_mut().zip(half_norms.iter()) {
            *z -= tau * kn;
        }
        softmax_in_place(row);
        masked.fill(T::zero());
    }
    // U = Q - P K.
    unsafe { causal_product(lower_left, (n, hp, n), u.as_mut_ptr(), hp, (p.as_ptr(), n, 1), k, T::one(), false) }
    for (t, row) in u.chunks_exact_mut(hp.max(1)).enumerate() {
        for (col, v) in row.iter_mut().enumerate() {
            *v = unsafe { at(q, t, col) } - *v;
        }
    }
    // A = U K^T into w, then W = c P (A - r) - P.
    let (u_rows, k_t) = ((u.as_ptr(), hp, 1), transposed(k));
    unsafe { causal_product(lower_output, (n, n, hp), w.as_mut_ptr(), n, u_rows, k_t, T::one(), false) }
    for (t, (w, p)) in w.chunks_exact_mut(n.max(1)).zip(p.chunks_exact(n.max(1))).enumerate() {
        let kept = if causal { t + 1 } else { n };
        let (w, masked) = w.split_at_mut(kept);
        let p = &p[..kept];
        let r = dot(p, w);
        for (w, &p) in w.iter_mut().zip(p) {
            *w = p * (c * (*w - r) - T::one());
        }
        masked.fill(T::zero());
    }
}

/// The op: arguments `Q`, `K` (`[B, N, H p]` each) and `[T_1..T_H, c_1..c_H]`.
pub(crate) struct NewtonAttention {
    heads: usize,
    causal: bool,
    /// Whether to keep `P` and `U` for the backward (when a gradient will be asked for).
    keep: bool,
    /// `P` (`[B, H, N, N]`) and `U` (`[B, H, N, p]`) as the forward kept them.
    kept: OnceLock<(CpuStorage, CpuStorage)>,
}

impl NewtonAttention {
    pub fn new(heads: usize, causal: bool, keep: bool) -> Self {
        NewtonAttention { heads, causal, keep, kept: OnceLock::new() }
    }
}

/// The shapes of a call: `Q` and `K` alike, `2 H` coefficients.
fn dims_of(q: &Layout, k: &Layout, coefficients: &Layout, heads: usize, op: &'static str) -> Result<Dims> {
    if k.dims() != q.dims() {
        bail!("{op}: q and k must have one shape, got {:?} and {:?}", q.dims(), k.dims())
    }
    let d = Dims::of(q, heads, op)?;
    if coefficients.shape().elem_count() != 2 * heads {
        bail!("{op}: expects {} coefficients (T_h then c_h), got {}", 2 * heads, coefficients.shape().elem_count())
    }
    Ok(d)
}

/// Per-thread scratch of the forward: `kn`, and `P`, `U` where the forward does not keep them.
struct ForwardScratch<T> {
    half_norms: Vec<T>,
    p: Vec<T>,
    u: Vec<T>,
    w: Vec<T>,
}

/// The output of [`forward`], and `(P, U)` when kept.
type Forward<T> = (Vec<T>, Option<(Vec<T>, Vec<T>)>);

/// The output, and `(P, U)` when `keep`.
fn forward<T: Real>(
    [q, k]: [&[T]; 2],
    rows: &[Rows; 2],
    coefficients: &[T],
    d: Dims,
    causal: bool,
    keep: bool,
) -> Forward<T> {
    let (n, width, hp) = (d.tokens, d.width(), d.head_dim);
    let (square, rect) = (n * n, n * hp);
    let heads_total = d.batch * d.heads;
    let (mut kept_p, mut kept_u) = match keep {
        true => (output_buffer::<T>(heads_total * square), output_buffer::<T>(heads_total * rect)),
        false => (Vec::new(), Vec::new()),
    };
    // Each task writes its samples' heads of the kept P and U through these (disjoint).
    let (p_at, u_at) = (kept_p.as_mut_ptr() as usize, kept_u.as_mut_ptr() as usize);
    let out = fill(
        d.batch * n * width,
        n * width,
        #[inline(always)]
        |first, chunk: &mut [T]| {
            let mut s = ForwardScratch {
                half_norms: vec![T::zero(); n],
                p: vec![T::zero(); if keep { 0 } else { square }],
                u: vec![T::zero(); if keep { 0 } else { rect }],
                w: vec![T::zero(); square],
            };
            for (c, sample) in chunk.chunks_exact_mut((n * width).max(1)).enumerate() {
                let b = first + c;
                for h in 0..d.heads {
                    let (q_h, k_h) = (head_matrix(q, &rows[0], &d, b, h), head_matrix(k, &rows[1], &d, b, h));
                    let at_head = b * d.heads + h;
                    // SAFETY: head (b, h) of the kept P and U, written by this task only.
                    let (p, u): (&mut [T], &mut [T]) = match keep {
                        true => unsafe {
                            (
                                std::slice::from_raw_parts_mut((p_at as *mut T).add(at_head * square), square),
                                std::slice::from_raw_parts_mut((u_at as *mut T).add(at_head * rect), rect),
                            )
                        },
                        false => (&mut s.p, &mut s.u),
                    };
                    let (t, coefficient) = (coefficients[h], coefficients[d.heads + h]);
                    head_terms((q_h, k_h), (n, hp), (t, coefficient), causal, &mut s.half_norms, p, u, &mut s.w);
                    // out_h = Q + W K (W zero past the diagonal when causal).
                    for (t, row) in sample.chunks_exact_mut(width.max(1)).enumerate() {
                        for (col, v) in row[h * hp..][..hp].iter_mut().enumerate() {
                            *v = unsafe { at(q_h, t, col) };
                        }
                    }
                    unsafe {
                        let dst = sample.as_mut_ptr().add(h * hp);
                        let w = (s.w.as_ptr(), n, 1);
                        causal_product(
                            Causal::when(causal, Causal::LowerLeft),
                            (n, hp, n),
                            dst,
                            width,
                            w,
                            k_h,
                            T::one(),
                            true,
                        )
                    }
                }
            }
        },
    );
    (out, keep.then_some((kept_p, kept_u)))
}

impl CustomOp3 for NewtonAttention {
    fn name(&self) -> &'static str {
        "fused-newton-attention"
    }

    /// `Q K^T` (the distances), the mean key `P K`, `U K^T` and the spread's product with `K`.
    fn product_flops(&self, _q: &Shape, _k: &Shape, _coefficients: &Shape, res: &Shape) -> u64 {
        crate::flops::token_pair_products(res, 4)
    }

    fn kept_bytes(&self) -> usize {
        crate::strided::kept_bytes(self.kept.get().into_iter().flat_map(|(p, u)| [p, u]))
    }

    fn cpu_fwd(
        &self,
        qs: &CpuStorage,
        ql: &Layout,
        ks: &CpuStorage,
        kl: &Layout,
        cs: &CpuStorage,
        cl: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let name = self.name();
        let d = dims_of(ql, kl, cl, self.heads, name)?;
        let rows = [Rows::new(ql), Rows::new(kl)];
        let out = per_real!(qs, name, |T| {
            let coefficients = contiguous_values::<T>(cs, cl, name)?;
            let inputs = [slice::<T>(qs, name)?, slice::<T>(ks, name)?];
            let (out, kept) = forward(inputs, &rows, &coefficients, d, self.causal, self.keep);
            if let Some((p, u)) = kept {
                // A fresh op per call: nothing was kept before.
                let own = candle_core::WithDType::to_cpu_storage_owned;
                let _ = self.kept.set((own(p), own(u)));
            }
            out
        });
        Ok((out, ql.shape().clone()))
    }

    fn bwd(
        &self,
        q: &Tensor,
        k: &Tensor,
        coefficients: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let op = NewtonAttentionBackward {
            kept: self.kept.get(),
            heads: self.heads,
            causal: self.causal,
            grad: grad.clone(),
        };
        three_gradients(&op, [q, k, coefficients])
    }
}

/// The backward of [`NewtonAttention`]: arguments `Q`, `K` and the coefficients, the output's
/// gradient `dO` held by the op; result `[dQ | dK | dT | dc]` flattened.
struct NewtonAttentionBackward<'a> {
    kept: Option<&'a (CpuStorage, CpuStorage)>,
    heads: usize,
    causal: bool,
    grad: Tensor,
}

impl CustomOp3 for NewtonAttentionBackward<'_> {
    fn name(&self) -> &'static str {
        "fused-newton-attention-backward"
    }

    fn cpu_fwd(
        &self,
        qs: &CpuStorage,
        ql: &Layout,
        ks: &CpuStorage,
        kl: &Layout,
        cs: &CpuStorage,
        cl: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let name = self.name();
        let d = dims_of(ql, kl, cl, self.heads, name)?;
        let out = with_output_gradient(&self.grad, ql.dims(), name, |gs, grad_layout| {
            let rows = [Rows::new(ql), Rows::new(kl), Rows::new(grad_layout)];
            Ok(per_real!(qs, name, |T| {
                // The forward keeps P and U whenever the graph records the op.
                let Some((p, u)) = self.kept else { bail!("{name}: the forward kept no attention terms") };
                let coefficients = contiguous_values::<T>(cs, cl, name)?;
                let inputs = [slice::<T>(qs, name)?, slice::<T>(ks, name)?, slice::<T>(gs, name)?];
                let kept = [slice::<T>(p, name)?, slice::<T>(u, name)?];
                backward(inputs, &rows, kept, &coefficients, d, self.causal)
            }))
        })?;
        let len = storage_len(&out);
        Ok((out, Shape::from(len)))
    }
}

/// Per-thread scratch of the backward for one (sample, head).
struct BackwardScratch<T> {
    /// `A - r 1^T`, `N x N`.
    centred: Vec<T>,
    /// `W`, then `dP`, then `dZ`, `N x N`.
    w: Vec<T>,
    /// `dW`, then `dA`, `N x N`.
    dw: Vec<T>,
    /// `dU`, `N x p`.
    du: Vec<T>,
    /// `E = dZ K`, `N x p`.
    e: Vec<T>,
    /// `kn`, `N`.
    half_norms: Vec<T>,
    /// A row of `G = P (A - r)`, `N`.
    g: Vec<T>,
    /// `colsum(dZ)`, `N`.
    column_sums: Vec<T>,
}

impl<T: Real> BackwardScratch<T> {
    fn new(n: usize, hp: usize) -> Self {
        let zeros = |len| vec![T::zero(); len];
        BackwardScratch {
            centred: zeros(n * n),
            w: zeros(n * n),
            dw: zeros(n * n),
            du: zeros(n * hp),
            e: zeros(n * hp),
            half_norms: zeros(n),
            g: zeros(n),
            column_sums: zeros(n),
        }
    }
}

/// `[dQ | dK | dT | dc]` from `[Q, K, dO]`, the kept `P` and `U`, and the coefficients.
fn backward<T: Real>(
    [q, k, d_out]: [&[T]; 3],
    rows: &[Rows; 3],
    [kept_p, kept_u]: [&[T]; 2],
    coefficients: &[T],
    d: Dims,
    causal: bool,
) -> Vec<T> {
    let (n, width, hp, heads) = (d.tokens, d.width(), d.head_dim, d.heads);
    let (per_sample, square_len, rect) = (n * width, n * n, n * hp);
    let total = d.batch * per_sample;
    let mut out = output_buffer(2 * total + 2 * heads);
    let (dq, rest) = out.split_at_mut(total);
    let (dk, d_coefficients) = rest.split_at_mut(total);
    // Each task writes its samples' rows of dK through this (disjoint per sample) and returns
    // its share of [dT | dc], summed over the tasks.
    let dk_at = dk.as_mut_ptr() as usize;
    let sums = map_chunks(
        dq,
        per_sample,
        #[inline(always)]
        |first: usize, dq: &mut [T]| {
            let mut shares = vec![T::zero(); 2 * heads];
            let mut s = BackwardScratch::new(n, hp);
            for (c, dq) in dq.chunks_exact_mut(per_sample.max(1)).enumerate() {
                let b = first + c;
                // SAFETY: sample `b`'s rows of dK, written by this task only.
                let dk = unsafe { (dk_at as *mut T).add(b * per_sample) };
                for h in 0..heads {
                    let at_head = b * heads + h;
                    let p = &kept_p[at_head * square_len..][..square_len];
                    let u = &kept_u[at_head * rect..][..rect];
                    let (q_h, k_h) = (head_matrix(q, &rows[0], &d, b, h), head_matrix(k, &rows[1], &d, b, h));
                    let d_out_h = head_matrix(d_out, &rows[2], &d, b, h);
                    let (temperature, coefficient) = (coefficients[h], coefficients[heads + h]);
                    let (d_temperature, d_coefficient) = head_backward(
                        (q_h, k_h, d_out_h),
                        (p, u),
                        (n, hp, width),
                        (temperature, coefficient),
                        causal,
                        &mut s,
                        dq,
                        dk,
                        h,
                    );
                    shares[h] += d_temperature;
                    shares[heads + h] += d_coefficient;
                }
            }
            shares
        },
        sum_parts,
    );
    d_coefficients.copy_from_slice(&sums);
    out
}

/// One (sample, head) of the backward: writes head `h`'s columns of the sample's `dQ` (`dq`,
/// `N` rows of `width`) and `dK` (at `dk`), and returns `(dT_h, dc_h)`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn head_backward<T: Real>(
    (q, k, d_out): (Matrix<T>, Matrix<T>, Matrix<T>),
    (p, u): (&[T], &[T]),
    (n, hp, width): (usize, usize, usize),
    (temperature, coefficient): (T, T),
    causal: bool,
    s: &mut BackwardScratch<T>,
    dq: &mut [T],
    dk: *mut T,
    h: usize,
) -> (T, T) {
    let tau = temperature.recip();
    let row = n.max(1);
    let col = h * hp;
    // With `causal`, only the entries on or below the diagonal of the N x N terms are formed
    // and read (a row `t` of them keeps its first `t + 1`): `P`, `W`, `dA` and `dZ` are zero
    // past it, the products leave that triangle out.
    let kept = |t: usize| if causal { t + 1 } else { n };
    let [lower_output, lower_left, upper_left] =
        [Causal::LowerOutput, Causal::LowerLeft, Causal::UpperLeft].map(|t| Causal::when(causal, t));
    // SAFETY (every product): the scratch holds N x N and N x p; `q`, `k`, `d_out` are the
    // head's N x p, `dk` the sample's N rows of `width`, `u` the kept N x p.
    let dk = unsafe { dk.add(col) };
    let (k_t, u_rows, p_t) = (transposed(k), (u.as_ptr(), hp, 1), (p.as_ptr(), 1, n));
    // A - r and W = c P (A - r) - P, from the kept P and U.
    unsafe { causal_product(lower_output, (n, n, hp), s.centred.as_mut_ptr(), n, u_rows, k_t, T::one(), false) }
    for (t, ((a, w), p)) in
        s.centred.chunks_exact_mut(row).zip(s.w.chunks_exact_mut(row)).zip(p.chunks_exact(row)).enumerate()
    {
        let (a, w, p) = (&mut a[..kept(t)], &mut w[..], &p[..kept(t)]);
        let (w, masked) = w.split_at_mut(kept(t));
        let r = dot(p, a);
        for ((a, w), &p) in a.iter_mut().zip(w.iter_mut()).zip(p) {
            *a -= r;
            *w = p * (coefficient * *a - T::one());
        }
        masked.fill(T::zero());
    }
    unsafe {
        // dW = dO K^T; dK = W^T dO.
        causal_product(lower_output, (n, n, hp), s.dw.as_mut_ptr(), n, d_out, k_t, T::one(), false);
        causal_product(upper_left, (n, hp, n), dk, width, transposed(square(&s.w, n)), d_out, T::one(), false);
    }
    // dc, dG = c dW, dr, then dA = P (dG + dr) into dw and dP = (dG + dr) (A - r) - dW into w.
    let mut d_coefficient = T::zero();
    for (t, (((dw, w), a), p)) in
        s.dw.chunks_exact_mut(row)
            .zip(s.w.chunks_exact_mut(row))
            .zip(s.centred.chunks_exact(row))
            .zip(p.chunks_exact(row))
            .enumerate()
    {
        let (dw, masked) = dw.split_at_mut(kept(t));
        let (w, a, p, g) = (&mut w[..kept(t)], &a[..kept(t)], &p[..kept(t)], &mut s.g[..kept(t)]);
        for ((g, &a), &p) in g.iter_mut().zip(a).zip(p) {
            *g = p * a;
        }
        // Sums in `dot`'s partial sums: one accumulator would be a serial chain.
        d_coefficient += dot(dw, g);
        let dr = -coefficient * dot(dw, p);
        for (((dw, w), &a), &p) in dw.iter_mut().zip(w.iter_mut()).zip(a.iter()).zip(p) {
            let dg_dr = coefficient * *dw + dr;
            *w = dg_dr * a - *dw;
            *dw = p * dg_dr;
        }
        masked.fill(T::zero());
    }
    unsafe {
        // dU = dA K; dK += dA^T U; dP -= dU K^T; dK -= P^T dU.
        causal_product(lower_left, (n, hp, n), s.du.as_mut_ptr(), hp, square(&s.dw, n), k, T::one(), false);
        causal_product(upper_left, (n, hp, n), dk, width, transposed(square(&s.dw, n)), u_rows, T::one(), true);
        let du_rows = (s.du.as_ptr(), hp, 1);
        causal_product(lower_output, (n, n, hp), s.w.as_mut_ptr(), n, du_rows, k_t, -T::one(), true);
        causal_product(upper_left, (n, hp, n), dk, width, p_t, du_rows, -T::one(), true);
    }
    // dZ = P (dP - rowsum(dP P)), and its column sums.
    s.column_sums.fill(T::zero());
    for (t, (dz, p)) in s.w.chunks_exact_mut(row).zip(p.chunks_exact(row)).enumerate() {
        let (dz, masked) = dz.split_at_mut(kept(t));
        let p = &p[..kept(t)];
        let row_dot = dot(dz, p);
        for ((dz, &p), sum) in dz.iter_mut().zip(p).zip(s.column_sums.iter_mut()) {
            *dz = p * (*dz - row_dot);
            *sum += *dz;
        }
        masked.fill(T::zero());
    }
    unsafe {
        // E = dZ K; dK += dZ^T Q / T.
        causal_product(lower_left, (n, hp, n), s.e.as_mut_ptr(), hp, square(&s.w, n), k, T::one(), false);
        causal_product(upper_left, (n, hp, n), dk, width, transposed(square(&s.w, n)), q, tau, true);
    }
    // dK -= diag(colsum dZ) K / T; dQ = dO + dU + E / T; <Q, E> and sum colsum kn for dT.
    key_half_norms(k, (n, hp), &mut s.half_norms);
    let mut d_tau = T::zero();
    for i in 0..n {
        let (sum, kn) = (s.column_sums[i], s.half_norms[i]);
        d_tau -= sum * kn;
        let dq_row = &mut dq[i * width + col..][..hp];
        let (e_row, du_row) = (&s.e[i * hp..][..hp], &s.du[i * hp..][..hp]);
        for (c, ((dq, &e), &du)) in dq_row.iter_mut().zip(e_row).zip(du_row).enumerate() {
            // SAFETY: row `i`, column `c` of the head's matrices.
            unsafe {
                *dk.add(i * width + c) -= tau * sum * at(k, i, c);
                d_tau += at(q, i, c) * e;
                *dq = at(d_out, i, c) + du + tau * e;
            }
        }
    }
    // T = 1 / tau.
    (-d_tau * tau * tau, d_coefficient)
}
