//! Seeded draws of a Gaussian process at random inputs.

use super::cholesky::cholesky_with_jitter;
use super::kernel::Kernel;
use super::GpError;
use nalgebra::{DMatrix, DVector};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::StandardNormal;

/// A zero-mean Gaussian process prior with Gaussian observation noise, on inputs drawn
/// uniformly from the cube `[-1, 1]^input_dim`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GpPrior {
    /// Covariance function of `f`.
    pub kernel: Kernel,
    /// Input dimension `D`.
    pub input_dim: usize,
    /// Standard deviation of the observation noise: `y = f(x) + noise * eps`.
    pub noise: f64,
    /// Diagonal jitter for the Cholesky factorisation, relative to the signal variance.
    pub jitter: f64,
}

/// One function drawn from the prior, observed at `points` inputs.
#[derive(Clone, Debug, PartialEq)]
pub struct GpDraw {
    /// Input dimension `D`.
    pub input_dim: usize,
    /// Inputs, row-major `[points, D]`.
    pub inputs: Vec<f64>,
    /// Noise-free values `f(x_i)`.
    pub values: Vec<f64>,
    /// Observations `y_i = f(x_i) + noise * eps_i`.
    pub targets: Vec<f64>,
    /// The diagonal jitter that made the factorisation succeed (absolute).
    pub jitter: f64,
}

impl GpDraw {
    /// Number of points.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether the draw has no points.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Input `i` (`D` values).
    pub fn input(&self, i: usize) -> &[f64] {
        &self.inputs[i * self.input_dim..(i + 1) * self.input_dim]
    }
}

impl GpPrior {
    /// Refuses a bad kernel, `input_dim = 0`, negative noise or non-positive jitter.
    pub fn check(&self) -> Result<(), GpError> {
        self.kernel.check()?;
        if self.input_dim == 0 {
            return Err(GpError::Parameter("input dimension 0: inputs need at least one coordinate".into()));
        }
        if !(self.noise.is_finite() && self.noise >= 0.0) {
            return Err(GpError::Parameter(format!("noise = {} must be a non-negative number", self.noise)));
        }
        if !(self.jitter.is_finite() && self.jitter > 0.0) {
            return Err(GpError::Parameter(format!("jitter = {} must be a positive number", self.jitter)));
        }
        Ok(())
    }

    /// `f ~ GP(0, k)` at given inputs (rows of `points`): `f = L z` with `L L^T = K + j I`
    /// and `z` standard normal from `rng`.
    pub fn sample_values(&self, points: &DMatrix<f64>, rng: &mut impl Rng) -> Result<(DVector<f64>, f64), GpError> {
        let k = self.kernel.matrix(points);
        let (lower, jitter) = cholesky_with_jitter(k, self.jitter * self.kernel.variance)?;
        let z = DVector::from_fn(points.nrows(), |_, _| rng.sample::<f64, _>(StandardNormal));
        Ok((lower * z, jitter))
    }

    /// A function drawn from the prior and observed at `points` inputs, all from one ChaCha8
    /// stream seeded with `seed`: first the inputs (uniform on `[-1, 1]^D`, point by point),
    /// then the `n` normals of `f = L z`, then the `n` noise normals.
    pub fn draw(&self, points: usize, seed: u64) -> Result<GpDraw, GpError> {
        self.check()?;
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let inputs: Vec<f64> = (0..points * self.input_dim).map(|_| rng.random_range(-1.0..=1.0)).collect();
        let matrix = DMatrix::from_row_slice(points, self.input_dim, &inputs);
        let (values, jitter) = self.sample_values(&matrix, &mut rng)?;
        let targets =
            values.iter().map(|f| f + self.noise * rng.sample::<f64, _>(StandardNormal)).collect::<Vec<f64>>();
        Ok(GpDraw { input_dim: self.input_dim, inputs, values: values.as_slice().to_vec(), targets, jitter })
    }
}
