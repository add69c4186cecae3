//! `tril(U K^T)` per sample (`U`, `K` `[B, N, D]`, the output `[B, N, N]` zero above the
//! diagonal): the scores of a causal attention formed without their masked half. CEM's shared
//! KQ-diagonal scores `u (d o hn)^T` (seed 002 Eq. 12) are such a product; as a plain batched
//! matmul they cost `B N^2 D` multiply-adds forward and twice that backward, of which the
//! causal mask then discards half.
//!
//! Backward, with `G = tril(dS)` (the entries above the diagonal do not reach the output):
//! `dU = G K`, `dK = G^T U`, each by the causal products of `attention.rs` (row blocks that
//! stop at, or start from, the diagonal).

use crate::attention::{causal_product, transposed, Causal};
use crate::real::Real;
use crate::strided::{contiguous_values, fill, storage_len, unpack};
use candle_core::{bail, CpuStorage, CustomOp2, CustomOp3, Layout, Result, Shape, Tensor};

/// `(B, N, D)` of `U` and `K`, checked to be one shape of rank 3.
fn dims(u: &Layout, k: &Layout, op: &'static str) -> Result<(usize, usize, usize)> {
    match (u.dims(), k.dims()) {
        (&[b, n, d], kd) if kd == [b, n, d] => Ok((b, n, d)),
        (ud, kd) => bail!("{op}: u and k must both be [B, N, D], got {ud:?} and {kd:?}"),
    }
}

/// `tril(U K^T)`, `[B, N, N]`.
pub(crate) struct LowerProduct;

/// Its backward: arguments `U`, `K`, `dS`; result `[dU | dK]`.
struct LowerProductBackward;

fn forward<T: Real>(u: &[T], k: &[T], (b, n, d): (usize, usize, usize)) -> Vec<T> {
    fill(
        b * n * n,
        n * n,
        #[inline(always)]
        |first: usize, out: &mut [T]| {
            for (c, s) in out.chunks_exact_mut((n * n).max(1)).enumerate() {
                let at = (first + c) * n * d;
                let (u, k) = ((u[at..].as_ptr(), d, 1), (k[at..].as_ptr(), d, 1));
                // SAFETY: `u` and `k` hold this sample's N x D rows, `s` its N x N.
                unsafe {
                    causal_product(Causal::LowerOutput, (n, n, d), s.as_mut_ptr(), n, u, transposed(k), T::one(), false)
                }
                for (i, row) in s.chunks_exact_mut(n).enumerate() {
                    row[i + 1..].fill(T::zero());
                }
            }
        },
    )
}

fn backward<T: Real>(u: &[T], k: &[T], ds: &[T], (b, n, d): (usize, usize, usize)) -> Vec<T> {
    let (per_sample, per_part) = (n * d, b * n * d);
    // Two parts, dU then dK, each its samples' N x D one after the other; a task may hold
    // both, and then builds each sample's `G` once for the two.
    fill(
        2 * per_part,
        per_part,
        #[inline(always)]
        |first: usize, out: &mut [T]| {
            let mut parts: Vec<(usize, &mut [T])> =
                out.chunks_exact_mut(per_part.max(1)).enumerate().map(|(p, part)| (first + p, part)).collect();
            let mut g = vec![T::zero(); n * n];
            for sample in 0..b {
                for (i, (g, ds)) in g.chunks_exact_mut(n).zip(ds[sample * n * n..].chunks_exact(n)).enumerate() {
                    g[..=i].copy_from_slice(&ds[..=i]);
                }
                let (at, g) = (sample * per_sample, (g.as_ptr(), n, 1));
                for (part, grads) in parts.iter_mut() {
                    let dst = grads[at..].as_mut_ptr();
                    // SAFETY: `g` is N x N, `u`, `k` and `dst` this sample's N x D.
                    unsafe {
                        if *part == 0 {
                            let k = (k[at..].as_ptr(), d, 1);
                            causal_product(Causal::LowerLeft, (n, d, n), dst, d, g, k, T::one(), false)
                        } else {
                            let u = (u[at..].as_ptr(), d, 1);
                            causal_product(Causal::UpperLeft, (n, d, n), dst, d, transposed(g), u, T::one(), false)
                        }
                    }
                }
            }
        },
    )
}

impl CustomOp2 for LowerProduct {
    fn name(&self) -> &'static str {
        "fused-lower-product"
    }

    /// `U K^T`, the whole square, as the masked composition computes it.
    fn product_flops(&self, u: &Shape, _k: &Shape, res: &Shape) -> u64 {
        crate::flops::product(u, res)
    }

    fn cpu_fwd(&self, us: &CpuStorage, ul: &Layout, ks: &CpuStorage, kl: &Layout) -> Result<(CpuStorage, Shape)> {
        let name = self.name();
        let (b, n, d) = dims(ul, kl, name)?;
        let out = per_real!(us, name, |T| forward::<T>(
            &contiguous_values::<T>(us, ul, name)?,
            &contiguous_values::<T>(ks, kl, name)?,
            (b, n, d)
        ));
        Ok((out, Shape::from((b, n, n))))
    }

    fn bwd(&self, u: &Tensor, k: &Tensor, _res: &Tensor, ds: &Tensor) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let [du, dk] = unpack(&u.apply_op3_no_bwd(k, ds, &LowerProductBackward)?, [u, k])?;
        Ok((Some(du), Some(dk)))
    }
}

impl CustomOp3 for LowerProductBackward {
    fn name(&self) -> &'static str {
        "fused-lower-product-backward"
    }

    fn cpu_fwd(
        &self,
        us: &CpuStorage,
        ul: &Layout,
        ks: &CpuStorage,
        kl: &Layout,
        ds: &CpuStorage,
        dl: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let name = self.name();
        let (b, n, d) = dims(ul, kl, name)?;
        if dl.dims() != [b, n, n] {
            bail!("{name}: the output gradient is {:?}, expected [{b}, {n}, {n}]", dl.dims())
        }
        let out = per_real!(us, name, |T| backward::<T>(
            &contiguous_values::<T>(us, ul, name)?,
            &contiguous_values::<T>(ks, kl, name)?,
            &contiguous_values::<T>(ds, dl, name)?,
            (b, n, d)
        ));
        let len = storage_len(&out);
        Ok((out, Shape::from(len)))
    }
}
