//! Covariance functions on `R^D`, each as a closed form of one pair of points
//! ([`Kernel::eval`], the definition) and as a whole Gram matrix built from matrix products
//! ([`Kernel::matrix`], fast enough for thousands of points in a debug build).
//!
//! With `r = |x - x'|` the Euclidean distance, `l` the length scale and `s2` the signal
//! variance:
//!
//! | family | `k(x, x')` |
//! |---|---|
//! | RBF | `s2 exp(-r^2 / (2 l^2))` |
//! | Matern nu = 1/2 | `s2 exp(-r / l)` |
//! | Matern nu = 3/2 | `s2 (1 + sqrt(3) r / l) exp(-sqrt(3) r / l)` |
//! | Matern nu = 5/2 | `s2 (1 + sqrt(5) r / l + 5 r^2 / (3 l^2)) exp(-sqrt(5) r / l)` |
//! | periodic | `s2 exp(-2 sum_j sin^2(pi (x_j - x'_j) / p) / l^2)` |
//! | rational quadratic | `s2 (1 + r^2 / (2 alpha l^2))^(-alpha)` |
//! | Gibbs (non-stationary) | `s2 (2 l(x) l(x') / (l(x)^2 + l(x')^2))^(D/2) exp(-r^2 / (l(x)^2 + l(x')^2))`, `l(x) = l exp(s x_1)` |
//! | warped RBF (non-stationary) | RBF of `w(x)`, `w(x)_j = sinh(s x_j) / s` |
//!
//! The periodic kernel is the product over input dimensions of the one-dimensional
//! exp-sine-squared kernel (MacKay 1998), which is positive semi-definite in any dimension;
//! the variant with `sin^2(pi r / p)` of the Euclidean distance is not beyond one dimension.
//! The Gibbs kernel (Gibbs 1997; Rasmussen & Williams 2006, Eq. 4.32) has a length scale that
//! grows (`s > 0`) along the first input coordinate, by `exp(2 s)` across `[-1, 1]`; it is
//! the RBF kernel at `s = 0`. The warped RBF kernel stretches each coordinate more and more
//! towards the edges of `[-1, 1]`, so functions vary faster there; it too is the RBF kernel at
//! `s = 0`.

use super::GpError;
use nalgebra::DMatrix;
use std::f64::consts::PI;

/// Smoothness of a Matern kernel: its sample paths are `ceil(nu) - 1` times differentiable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaternNu {
    /// `nu = 1/2`: the exponential (Ornstein-Uhlenbeck) kernel; continuous, nowhere smooth.
    Half,
    /// `nu = 3/2`: once differentiable sample paths.
    ThreeHalves,
    /// `nu = 5/2`: twice differentiable sample paths.
    FiveHalves,
}

impl MaternNu {
    /// `k(r) / s2` at the scaled distance `u = r / l`.
    fn correlation(self, u: f64) -> f64 {
        match self {
            MaternNu::Half => (-u).exp(),
            MaternNu::ThreeHalves => {
                let a = 3f64.sqrt() * u;
                (1.0 + a) * (-a).exp()
            }
            MaternNu::FiveHalves => {
                let a = 5f64.sqrt() * u;
                (1.0 + a + a * a / 3.0) * (-a).exp()
            }
        }
    }
}

/// The shape of a covariance function (see the module documentation for the formulas).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum KernelFamily {
    /// Squared exponential.
    Rbf,
    /// Matern with half-integer smoothness.
    Matern(MaternNu),
    /// Product over dimensions of exp-sine-squared kernels of period `period`.
    Periodic {
        /// Period `p` along every coordinate.
        period: f64,
    },
    /// Scale mixture of RBF kernels with shape `alpha` (RBF as `alpha -> infinity`).
    RationalQuadratic {
        /// Shape `alpha > 0`.
        alpha: f64,
    },
    /// Gibbs kernel with length scale `l exp(strength * x_1)`.
    Gibbs {
        /// Log-slope `s` of the length scale along the first coordinate.
        strength: f64,
    },
    /// RBF kernel of the inputs warped by `sinh(strength * x) / strength`.
    WarpedRbf {
        /// Warping strength `s` (0: no warping).
        strength: f64,
    },
}

/// A covariance function: a family, a length scale and a signal variance.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Kernel {
    /// The formula.
    pub family: KernelFamily,
    /// Length scale `l` (for Gibbs, the length scale at `x_1 = 0`).
    pub length_scale: f64,
    /// Signal variance `s2 = k(x, x)` (for Gibbs and the others alike).
    pub variance: f64,
}

/// `w(x)_j = sinh(s x_j) / s`, the identity at `s = 0`.
fn warp(value: f64, strength: f64) -> f64 {
    if strength == 0.0 {
        value
    } else {
        (strength * value).sinh() / strength
    }
}

/// A symmetric `n x n` matrix from its entries on and below the diagonal, so that it is
/// exactly symmetric whatever rounding `entry` suffers.
fn symmetric_from_fn(n: usize, entry: impl Fn(usize, usize) -> f64) -> DMatrix<f64> {
    let mut m = DMatrix::zeros(n, n);
    for j in 0..n {
        for i in j..n {
            let v = entry(i, j);
            m[(i, j)] = v;
            m[(j, i)] = v;
        }
    }
    m
}

impl Kernel {
    /// Refuses non-positive or non-finite length scale, variance, period or shape.
    pub fn check(&self) -> Result<(), GpError> {
        let positive = |name: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(GpError::Parameter(format!("{name} = {v} must be a positive number")))
            }
        };
        positive("length scale", self.length_scale)?;
        positive("variance", self.variance)?;
        match self.family {
            KernelFamily::Periodic { period } => positive("period", period),
            KernelFamily::RationalQuadratic { alpha } => positive("alpha", alpha),
            KernelFamily::Gibbs { strength } | KernelFamily::WarpedRbf { strength } if !strength.is_finite() => {
                Err(GpError::Parameter(format!("non-stationarity strength = {strength} must be finite")))
            }
            _ => Ok(()),
        }
    }

    /// The Gibbs length scale `l(x) = l exp(s x_1)` (`l` for the other families).
    pub fn length_at(&self, x: &[f64]) -> f64 {
        match self.family {
            KernelFamily::Gibbs { strength } => self.length_scale * (strength * x[0]).exp(),
            _ => self.length_scale,
        }
    }

    /// The inputs as the kernel compares them: warped for the warped RBF kernel, as they
    /// are otherwise.
    fn warped(&self, value: f64) -> f64 {
        match self.family {
            KernelFamily::WarpedRbf { strength } => warp(value, strength),
            _ => value,
        }
    }

    /// `k` from the statistic `q` of a pair of points in dimension `dim`: for the periodic
    /// kernel `q = sum_j sin^2(pi (x_j - x'_j) / p)`, otherwise the squared distance (of the
    /// warped inputs for the warped kernel); `lx`, `ly` are the Gibbs length scales.
    fn kernel_of_statistic(&self, q: f64, lx: f64, ly: f64, dim: usize) -> f64 {
        let (l, s2) = (self.length_scale, self.variance);
        match self.family {
            KernelFamily::Rbf | KernelFamily::WarpedRbf { .. } => s2 * (-q / (2.0 * l * l)).exp(),
            KernelFamily::Matern(nu) => s2 * nu.correlation(q.sqrt() / l),
            KernelFamily::Periodic { .. } => s2 * (-2.0 * q / (l * l)).exp(),
            KernelFamily::RationalQuadratic { alpha } => s2 * (1.0 + q / (2.0 * alpha * l * l)).powf(-alpha),
            KernelFamily::Gibbs { .. } => {
                let sum = lx * lx + ly * ly;
                s2 * (2.0 * lx * ly / sum).powf(dim as f64 / 2.0) * (-q / sum).exp()
            }
        }
    }

    /// `k(x, y)` from its closed form (the table in the module documentation).
    pub fn eval(&self, x: &[f64], y: &[f64]) -> f64 {
        let q = match self.family {
            KernelFamily::Periodic { period } => {
                x.iter().zip(y).map(|(a, b)| (PI * (a - b) / period).sin().powi(2)).sum()
            }
            _ => x.iter().zip(y).map(|(a, b)| (self.warped(*a) - self.warped(*b)).powi(2)).sum(),
        };
        self.kernel_of_statistic(q, self.length_at(x), self.length_at(y), x.len())
    }

    /// The Gram matrix `K[i, j] = k(x_i, x_j)` of the rows of `points` (`n x D`), exactly
    /// symmetric. The pair statistics come from one matrix product each: squared distances
    /// `|x_i|^2 + |x_j|^2 - 2 x_i . x_j` from `X X^T`, and the periodic sum from
    /// `sum_j sin^2(pi (a_j - b_j) / p) = (D - C C^T - S S^T) / 2` with `C = cos(2 pi X / p)`,
    /// `S = sin(2 pi X / p)` (both clamped at 0, exactly 0 on the diagonal).
    pub fn matrix(&self, points: &DMatrix<f64>) -> DMatrix<f64> {
        let (n, dim) = points.shape();
        let statistic: Box<dyn Fn(usize, usize) -> f64> = match self.family {
            KernelFamily::Periodic { period } => {
                let cos = points.map(|v| (2.0 * PI * v / period).cos());
                let sin = points.map(|v| (2.0 * PI * v / period).sin());
                let similarity = &cos * cos.transpose() + &sin * sin.transpose();
                Box::new(move |i, j| ((dim as f64 - similarity[(i, j)]) / 2.0).max(0.0))
            }
            _ => {
                let warped = points.map(|v| self.warped(v));
                let gram = &warped * warped.transpose();
                Box::new(move |i, j| (gram[(i, i)] + gram[(j, j)] - 2.0 * gram[(i, j)]).max(0.0))
            }
        };
        let lengths: Vec<f64> = points.row_iter().map(|row| self.length_at(&[row[0]])).collect();
        symmetric_from_fn(n, |i, j| {
            let q = if i == j { 0.0 } else { statistic(i, j) };
            self.kernel_of_statistic(q, lengths[i], lengths[j], dim)
        })
    }
}
