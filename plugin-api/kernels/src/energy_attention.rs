//! The Energy Transformer's attention descent directions as one op (seed 003 Eq. 3-4 and
//! their gradients): from `[Q | K]` (`[B, N, 2 H p]`, the queries and keys side by side, one
//! product of the normalised tokens with `[W^Q; W^K]`), per sample and head `h`,
//!
//! `P = softmax_row(beta Q_h K_h^T)` (the diagonal left out unless tokens attend to
//! themselves), `O^Q_h = P K_h` (`-dE/dQ_h`), `O^K_h = P^T Q_h` (`-dE/dK_h`),
//!
//! written back side by side as `[O^Q | O^K]` (`[B, N, 2 H p]`), so that one product with
//! `[W^Q; W^K]` takes both back to the tokens. No `[B, H, N, N]` tensor and no per-head copy
//! is stored: each (sample, head) works in its own scratch, and the backward recomputes `P`.
//! From `G^Q`, `G^K` (the gradients of the two halves):
//!
//! - `dP = G^Q K^T + Q G^K^T`, `dA = P (dP - rowsum(dP P))` (entry-wise; `P = 0` off the mask);
//! - `dQ = P G^K + beta dA K`, `dK = P^T G^Q + beta dA^T Q`.

use crate::attention::{fill_heads, head_matrix, into_head, product, transposed, Dims, HeadScratch};
use crate::real::Real;
use crate::strided::{slice, Rows};
use crate::vector::{dot, softmax_in_place};
use candle_core::{bail, CpuStorage, CustomOp1, CustomOp2, Layout, Result, Shape, Tensor};

impl<T: Real> HeadScratch<T> {
    /// Takes `Q_h`, `K_h` of sample `b` (heads `h` and `H + h` of the `2 H`-head view `d`)
    /// and fills `p` with the attention weights.
    #[inline(always)]
    fn attend_energy(&mut self, qk: (&[T], &Rows), d: &Dims, b: usize, h: usize, op: &EnergyAttention) {
        let (n, hp) = (d.tokens, d.head_dim);
        self.q = head_matrix(qk.0, qk.1, d, b, h);
        self.k = head_matrix(qk.0, qk.1, d, b, op.heads + h);
        // SAFETY: `p` holds N x N; `q` and `k` are N x p views of the argument.
        unsafe {
            product((n, n, hp), self.p.as_mut_ptr(), n, self.q, transposed(self.k), T::c(op.beta), false);
        }
        for (i, row) in self.p.chunks_exact_mut(n).enumerate() {
            if !op.attend_self {
                row[i] = T::neg_infinity();
            }
            softmax_in_place(row);
        }
    }
}

fn forward<T: Real>(qk: (&[T], &Rows), d: Dims, op: &EnergyAttention) -> Vec<T> {
    let (n, width, hp, heads) = (d.tokens, d.width(), d.head_dim, op.heads);
    fill_heads(
        &d,
        heads,
        || HeadScratch::new(&d),
        #[inline(always)]
        |scratch, b, h, sample| {
            scratch.attend_energy(qk, &d, b, h, op);
            // SAFETY: the head's columns of the sample, N rows of `width`.
            unsafe {
                // O^Q_h = P K_h; O^K_h = P^T Q_h.
                let p = scratch.p.as_ptr();
                into_head(sample, h, (n, hp, width), (p, n, 1), scratch.k);
                into_head(sample, heads + h, (n, hp, width), (p, 1, n), scratch.q);
            }
        },
    )
}

fn backward<T: Real>(qk: (&[T], &Rows), grad: (&[T], &Rows), d: Dims, op: &EnergyAttention) -> Vec<T> {
    let (n, width, hp, heads) = (d.tokens, d.width(), d.head_dim, op.heads);
    let beta = T::c(op.beta);
    // The forward's scratch and `dP`, then `dA` (`N x N`).
    let scratch = || (HeadScratch::new(&d), vec![T::zero(); n * n]);
    fill_heads(
        &d,
        heads,
        scratch,
        #[inline(always)]
        |(scratch, da), b, h, sample| {
            scratch.attend_energy(qk, &d, b, h, op);
            let (gq, gk) = (head_matrix(grad.0, grad.1, &d, b, h), head_matrix(grad.0, grad.1, &d, b, heads + h));
            let (p, q, k) = (scratch.p.as_ptr(), scratch.q, scratch.k);
            // SAFETY: scratch of the sizes above; the sample's head columns.
            unsafe {
                // dP = G^Q K^T + Q G^K^T (into `da`).
                product((n, n, hp), da.as_mut_ptr(), n, gq, transposed(k), T::one(), false);
                product((n, n, hp), da.as_mut_ptr(), n, q, transposed(gk), T::one(), true);
            }
            // dA = P (dP - rowsum(dP P)).
            for (g, p) in da.chunks_exact_mut(n).zip(scratch.p.chunks_exact(n)) {
                let row_dot = dot(g, p);
                for (g, &p) in g.iter_mut().zip(p) {
                    *g = p * (*g - row_dot);
                }
            }
            unsafe {
                // dQ = P G^K + beta dA K; dK = P^T G^Q + beta dA^T Q.
                into_head(sample, h, (n, hp, width), (p, n, 1), gk);
                let dq = sample.as_mut_ptr().add(h * hp);
                product((n, hp, n), dq, width, (da.as_ptr(), n, 1), k, beta, true);
                into_head(sample, heads + h, (n, hp, width), (p, 1, n), gq);
                let dk = sample.as_mut_ptr().add((heads + h) * hp);
                product((n, hp, n), dk, width, (da.as_ptr(), 1, n), q, beta, true);
            }
        },
    )
}

/// The op: argument `[Q | K]` (`[B, N, 2 H p]`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct EnergyAttention {
    pub heads: usize,
    pub beta: f64,
    pub attend_self: bool,
}

impl EnergyAttention {
    /// The `2 H`-head view of `[Q | K]` (and of its gradient), checked.
    fn dims(&self, layout: &Layout, op: &'static str) -> Result<Dims> {
        let d = Dims::of(layout, 2 * self.heads, op)?;
        if !self.attend_self && d.tokens < 2 {
            bail!("{op}: leaving each token out of its own attention needs at least 2 tokens, got {}", d.tokens)
        }
        Ok(d)
    }
}

impl CustomOp1 for EnergyAttention {
    fn name(&self) -> &'static str {
        "fused-energy-attention"
    }

    /// `Q K^T`, `P K` and `P^T Q`, each over one half (`W`) of the output's `2 W` columns.
    fn product_flops(&self, _qk: &Shape, res: &Shape) -> u64 {
        crate::flops::token_pair_products(res, 3) / 2
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let name = self.name();
        let d = self.dims(l, name)?;
        let rows = Rows::new(l);
        let out = per_real!(s, name, |T| forward((slice::<T>(s, name)?, &rows), d, self));
        Ok((out, l.shape().clone()))
    }

    fn bwd(&self, qk: &Tensor, _res: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        Ok(Some(qk.apply_op2_no_bwd(grad, &EnergyAttentionBackward(*self))?))
    }
}

/// The backward of [`EnergyAttention`]: arguments `[Q | K]` and `[G^Q | G^K]`; result
/// `[dQ | dK]`.
struct EnergyAttentionBackward(EnergyAttention);

impl CustomOp2 for EnergyAttentionBackward {
    fn name(&self) -> &'static str {
        "fused-energy-attention-backward"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout, gs: &CpuStorage, gl: &Layout) -> Result<(CpuStorage, Shape)> {
        let name = self.name();
        let d = self.0.dims(l, name)?;
        if gl.dims() != l.dims() {
            bail!("{name}: the gradient has shape {:?}, the output {:?}", gl.dims(), l.dims())
        }
        let (rows, grad_rows) = (Rows::new(l), Rows::new(gl));
        let out = per_real!(s, name, |T| backward(
            (slice::<T>(s, name)?, &rows),
            (slice::<T>(gs, name)?, &grad_rows),
            d,
            &self.0
        ));
        Ok((out, l.shape().clone()))
    }
}
