//! Cholesky factorisation `K = L L^T` of a Gram matrix, with jitter added to the diagonal
//! when rounding makes `K` numerically indefinite.
//!
//! The factorisation is blocked (right-looking): for each block column, the diagonal block is
//! factorised by nalgebra's [`Cholesky`], the panel below it is `A_pk L_kk^-T`, and the
//! trailing matrix is updated by `A_rest -= L_pk L_pk^T`. The two last steps are matrix
//! products, which nalgebra hands to the optimised `matrixmultiply` kernels, so thousands of
//! points factorise in about a second even where this crate is built without optimisation.

use super::GpError;
use nalgebra::{Cholesky, DMatrix};

/// Rows and columns per diagonal block for an `n x n` matrix: small blocks for small
/// matrices (the diagonal blocks are factorised without the optimised kernels), larger ones
/// for large matrices (fewer passes over the trailing matrix).
pub fn block_size(n: usize) -> usize {
    (n / 32).clamp(16, 128)
}

/// How many times the jitter is multiplied by 10 before the factorisation gives up.
pub const JITTER_RETRIES: usize = 6;

/// The lower-triangular `L` with `a = L L^T`, or `None` if `a` is not (numerically) positive
/// definite. Reads the lower triangle of `a`.
pub fn blocked_cholesky(a: &DMatrix<f64>, block: usize) -> Option<DMatrix<f64>> {
    let n = a.nrows();
    let block = block.max(1);
    let mut work = a.clone();
    let mut lower = DMatrix::zeros(n, n);
    let mut start = 0;
    while start < n {
        let size = block.min(n - start);
        let rest = n - start - size;
        let diagonal = Cholesky::new(work.view((start, start), (size, size)).clone_owned())?.unpack();
        if rest > 0 {
            let inverse = diagonal.solve_lower_triangular(&DMatrix::identity(size, size))?;
            let panel = work.view((start + size, start), (rest, size)) * inverse.transpose();
            work.view_mut((start + size, start + size), (rest, rest)).gemm(-1.0, &panel, &panel.transpose(), 1.0);
            lower.view_mut((start + size, start), (rest, size)).copy_from(&panel);
        }
        lower.view_mut((start, start), (size, size)).copy_from(&diagonal);
        start += size;
    }
    Some(lower)
}

/// The factor of `k + j I` for the first `j` in `jitter, 10 jitter, ..., 10^6 jitter` that
/// factorises, with that `j`.
pub fn cholesky_with_jitter(mut k: DMatrix<f64>, jitter: f64) -> Result<(DMatrix<f64>, f64), GpError> {
    let n = k.nrows();
    let mut added = 0.0;
    let mut current = jitter;
    for _ in 0..=JITTER_RETRIES {
        for i in 0..n {
            k[(i, i)] += current - added;
        }
        added = current;
        if let Some(lower) = blocked_cholesky(&k, block_size(n)) {
            return Ok((lower, current));
        }
        current *= 10.0;
    }
    Err(GpError::NotPositiveDefinite { points: n, jitter: added })
}
