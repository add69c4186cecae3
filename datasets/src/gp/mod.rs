//! Functions drawn from Gaussian processes, for the regression task of seed 002 (Table 3:
//! "synthetic data sampled from Gaussian processes with 10 input dimensions", kernels RBF,
//! Matern, periodic, rational quadratic and non-stationary).
//!
//! # What is drawn
//!
//! A function `f ~ GP(0, k)` with one of the covariance functions of [`kernel`] is observed
//! at inputs drawn uniformly from `[-1, 1]^D`: `y_i = f(x_i) + noise * eps_i`. The values at
//! `n` inputs are `f = L z`, with `L L^T = K + j I` the Cholesky factor of the Gram matrix
//! (blocked, [`cholesky`]), `j` a small diagonal jitter (relative to the signal variance,
//! multiplied by 10 up to six times if rounding makes `K` indefinite) and `z` standard normal.
//!
//! # Seeding
//!
//! Every draw uses its own ChaCha8 stream seeded from a 64-bit seed ([`GpPrior::draw`]), and
//! [`mix_seed`] derives those seeds from `(data seed, stream, index)`, so a draw depends on
//! nothing else (not on the order or thread in which draws are made).
//!
//! - [`fit_data`]: the seed's setting, one function observed at `train + test` inputs drawn
//!   jointly, split into the first `train` points (training set) and the rest (test set).
//! - [`function`]: function `index` of a stream ([`Stream::Train`] or [`Stream::Eval`]), for
//!   in-context regression where every example is a new function.

pub mod cholesky;
pub mod kernel;
pub mod sample;

pub use kernel::{Kernel, KernelFamily, MaternNu};
pub use sample::{GpDraw, GpPrior};

/// Why a draw could not be made.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GpError {
    /// A kernel or prior parameter is out of range.
    #[error("Gaussian-process parameter: {0}")]
    Parameter(String),
    /// The Gram matrix stayed indefinite even with the largest jitter tried.
    #[error(
        "the {points}x{points} kernel matrix is not positive definite even with jitter {jitter:e} on its diagonal; use fewer points, a shorter length scale or a larger jitter"
    )]
    NotPositiveDefinite {
        /// Size of the matrix.
        points: usize,
        /// The last jitter tried.
        jitter: f64,
    },
}

/// The independent families of functions of in-context regression.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// Functions that training batches draw from.
    Train,
    /// Held-out functions of the evaluation set.
    Eval,
}

impl Stream {
    fn tag(self) -> u64 {
        match self {
            Stream::Train => 0x7452_4149_4E00_0001,
            Stream::Eval => 0x4556_414C_0000_0002,
        }
    }
}

/// The seed of item `index` of stream `stream` under `seed` (kept here for the plugin).
pub use crate::seeding::mix_seed;

/// Tag of the one function of the fitting setting.
const FIT_TAG: u64 = 0x4649_5400_0000_0003;

/// The fitting setting's training and test sets: one function, `train` and `test` points.
#[derive(Clone, Debug, PartialEq)]
pub struct FitData {
    /// The first `train` points of the draw.
    pub train: GpDraw,
    /// The remaining `test` points.
    pub test: GpDraw,
}

/// One function observed at `train + test` uniform inputs (drawn jointly, so both sets see the
/// same `f`), split into a training and a test set. Depends only on `prior`, the sizes and
/// `data_seed`.
pub fn fit_data(prior: &GpPrior, train: usize, test: usize, data_seed: u64) -> Result<FitData, GpError> {
    let draw = prior.draw(train + test, mix_seed(data_seed, FIT_TAG, 0))?;
    let dim = draw.input_dim;
    let part = |range: std::ops::Range<usize>| GpDraw {
        input_dim: dim,
        inputs: draw.inputs[range.start * dim..range.end * dim].to_vec(),
        values: draw.values[range.clone()].to_vec(),
        targets: draw.targets[range].to_vec(),
        jitter: draw.jitter,
    };
    Ok(FitData { train: part(0..train), test: part(train..train + test) })
}

/// Function `index` of `stream`, observed at `points` uniform inputs.
pub fn function(prior: &GpPrior, points: usize, data_seed: u64, stream: Stream, index: u64) -> Result<GpDraw, GpError> {
    prior.draw(points, mix_seed(data_seed, stream.tag(), index))
}

#[cfg(test)]
mod tests;
