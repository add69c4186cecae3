//! The sparse rate reduction objective of CRATE (Yu et al. 2023), per sample, as diagnostics.
//!
//! For tokens `Z` (`N` rows of width `k`) and precision `eps`, the lossy coding rate is
//! `R(Z) = 1/2 logdet(I + k / (N eps^2) Z^T Z)`. CRATE's representation should
//! - have a low coding rate in each head subspace, the compression term
//!   `R^c(Z; U) = sum_k R(Z U_k)` (width `p` each), which the MSSA step is derived to lower
//!   by an approximate gradient step;
//! - keep a high coding rate overall, the expansion term `R(Z)` (width `d`);
//! - be sparse, `lambda ||Z||_1` (the relaxation of `||Z||_0` that ISTA minimises).
//!
//! The sparse rate reduction to maximise is `R(Z) - R^c(Z; U) - lambda ||Z||_1`; the energy
//! reported as `total` is its negative, so that lower is better like every other energy.
//! Log-determinants are taken by Cholesky on the smaller Gram matrix (`Z^T Z` and `Z Z^T`
//! share their non-zero eigenvalues).

use nalgebra::{Cholesky, DMatrix};
use plugin_api::candle::{DType, Tensor};
use plugin_api::{PluginError, Result};

/// `R(Z)` of one token matrix given row-major as `n` rows of width `k`.
pub fn coding_rate(rows: &[f64], n: usize, k: usize, eps: f64) -> Result<f64> {
    let z = DMatrix::from_row_slice(n, k, rows);
    let scale = k as f64 / (n as f64 * eps * eps);
    let gram = if k <= n { z.transpose() * &z } else { &z * z.transpose() };
    let size = gram.nrows();
    let system = DMatrix::identity(size, size) + gram * scale;
    let factor = Cholesky::new(system).ok_or_else(|| {
        PluginError::Other("coding rate: I + a Z^T Z is not positive definite (non-finite tokens?)".into())
    })?;
    let log_det: f64 = factor.l_dirty().diagonal().iter().map(|v| 2.0 * v.ln()).sum();
    Ok(0.5 * log_det)
}

/// `R(Z)` per sample of tokens `x` (`[B, N, d]`), as a `[B]` tensor of `x`'s dtype.
pub fn expansion(x: &Tensor, eps: f64) -> Result<Tensor> {
    let (b, n, d) = x.dims3()?;
    let values = x.to_dtype(DType::F64)?.flatten_all()?.to_vec1::<f64>()?;
    let rates =
        (0..b).map(|i| coding_rate(&values[i * n * d..(i + 1) * n * d], n, d, eps)).collect::<Result<Vec<_>>>()?;
    per_sample(rates, x)
}

/// `R^c(Z; U) = sum_k R(Z U_k)` per sample, from the per-head projections `[B, H, N, p]`.
pub fn compression(projections: &Tensor, eps: f64, like: &Tensor) -> Result<Tensor> {
    let (b, h, n, p) = projections.dims4()?;
    let values = projections.to_dtype(DType::F64)?.flatten_all()?.to_vec1::<f64>()?;
    let block = n * p;
    let mut rates = Vec::with_capacity(b);
    for i in 0..b {
        let mut sum = 0.0;
        for head in 0..h {
            let start = (i * h + head) * block;
            sum += coding_rate(&values[start..start + block], n, p, eps)?;
        }
        rates.push(sum);
    }
    per_sample(rates, like)
}

/// `lambda ||Z||_1` per sample.
pub fn sparsity(x: &Tensor, lambda: f64) -> Result<Tensor> {
    Ok((x.abs()?.flatten_from(1)?.sum(1)? * lambda)?)
}

fn per_sample(values: Vec<f64>, like: &Tensor) -> Result<Tensor> {
    let n = values.len();
    Ok(Tensor::from_vec(values, n, like.device())?.to_dtype(like.dtype())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// For orthogonal token rows the Gram is diagonal: `R = 1/2 sum log(1 + a ||z_i||^2)`.
    #[test]
    fn coding_rate_of_orthogonal_tokens_has_a_closed_form() {
        // Two tokens in width 3: (2, 0, 0) and (0, 1, 0).
        let rows = [2.0, 0.0, 0.0, 0.0, 1.0, 0.0];
        let eps = 0.5;
        let a = 3.0 / (2.0 * eps * eps);
        let expected = 0.5 * ((1.0 + a * 4.0f64).ln() + (1.0 + a).ln());
        let got = coding_rate(&rows, 2, 3, eps).unwrap();
        assert!((got - expected).abs() < 1e-12, "{got} vs {expected}");
        // Same value through the k <= n branch (width 1 is the first coordinate only).
        let single = coding_rate(&[2.0, 0.0], 2, 1, eps).unwrap();
        let a1 = 1.0 / (2.0 * eps * eps);
        assert!((single - 0.5 * (1.0 + a1 * 4.0f64).ln()).abs() < 1e-12);
    }
}
