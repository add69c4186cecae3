//! Regression of functions drawn from Gaussian processes, as a task plugin (seed 002,
//! Appendix E and Table 3: "synthetic data sampled from Gaussian processes with 10 input
//! dimensions", RBF, Matern, periodic, rational-quadratic and non-stationary kernels, train
//! and test RMSE; the setting where CEM-MLP with T = 1, 2, 4, 8 steps is compared with plain
//! and gated MLPs; notes-cem.md §5.3).
//!
//! The functions, kernels and sampling are in [`datasets::gp`]: `f ~ GP(0, k)` on inputs
//! uniform in `[-1, 1]^D` (`input_dim = 10`), `y = f(x) + noise * eps`, drawn by a jittered
//! Cholesky factorisation and seeded by `data_seed` (shared by all runs so they compare).
//!
//! # Settings
//!
//! - `setting=fit` (default, the seed's): one function, observed at `train_points` training
//!   and `test_points` test inputs (one joint draw, so both see the same `f`). A regressor
//!   `x -> y` is fitted to the training points. Each **token is one input point** and carries
//!   its own target; an example groups `points` tokens. The seed fits an MLP, which treats
//!   tokens independently; a layer with attention also mixes the points of an example, which
//!   carries no information about `f` (no target enters the inputs), so the flag `causal` is
//!   irrelevant to the seed's comparison and off by default. Training batches take the
//!   training points in a new random order each epoch (a permutation seeded by the run seed
//!   and the epoch), so the batch of step `s` depends only on `(run seed, s)`.
//! - `setting=in_context`: every example is a new function. Its first `context_points`
//!   tokens are context points `(x, y)`, its last `query_points` tokens are queries `x` whose
//!   `y` must be predicted from the context; no query target enters the inputs. Training
//!   functions come from a stream seeded by `data_seed` (fresh functions with
//!   `train_functions = 0`, or a pool of that many); evaluation uses `eval_functions`
//!   held-out functions. With `causal=true` each query sees all context points and the
//!   queries before it.
//!
//! # Tokens, embedding, head, loss
//!
//! - Features per token: `x` (`D` values) in `fit`; `[x, y * c, c]` (`D + 2` values) in
//!   `in_context`, with `c = 1` on context points and `0` on queries (whose `y` is zeroed).
//! - Embedding: linear `F -> d` with bias (weights `N(0, 1/F)`, bias 0). Head: linear
//!   `d -> 1` with bias (weights `N(0, 0.02^2)`, bias 0), so an untrained model predicts
//!   about the prior mean 0. No positions: an example is a set of points.
//! - Loss: the mean squared error over the scored tokens (all training points in `fit`, the
//!   queries in `in_context`); the `[B, N]` batch mask marks them.
//!
//! # Metrics
//!
//! - `rmse` (headline, lower is better): root mean squared error on the held-out points (the
//!   test points in `fit`, the queries of the held-out functions in `in_context`), against
//!   their observations `y` (noisy when `noise > 0`).
//! - `train_rmse`: the same on the training points, by the model as it is at the evaluation
//!   (`fit`: all training points; `in_context`: the queries of the first `eval_functions`
//!   functions of the training pool, reported only with a finite pool, `train_functions > 0`).
//! - `loss`: the mean squared error on the held-out points (`rmse^2`).
//!
//! The evaluation set lists the held-out examples first, then the training examples, so a
//! small `eval_examples` keeps the headline. RMSE is not a mean; how it stays exact over
//! several evaluation batches is explained in `model.rs`. The trivial predictor (the prior
//! mean 0) scores `rmse` about the signal standard deviation `sqrt(variance)`.
//!
//! # Choices the seed leaves open (notes-cem.md §8.11)
//!
//! Widths, depth, data-set size, input distribution, noise and kernel hyperparameters are
//! not given. Defaults: inputs uniform on `[-1, 1]^10`, length scale 3 (about `sqrt(D)`, so
//! the typical distance between two inputs, about 2.6, is within one length scale), unit
//! signal variance, no noise, 1024 training and 1024 test points, Matern `nu = 3/2`, periodic
//! period 2 (one period across the cube), rational-quadratic `alpha = 1`; the non-stationary
//! kernel is Gibbs's with a length scale `l exp(s x_1)` growing along the first coordinate,
//! or (`nonstationary=warped`) an RBF kernel of `sinh`-warped inputs.

mod data;
mod model;

use data::GpTask;
use plugin_api::{export_plugin, Declaration, ParamSpec, Result};

fn params() -> Vec<ParamSpec> {
    vec![
        ParamSpec::choice(
            "setting",
            "fit",
            &["fit", "in_context"],
            "fit: one function, tokens are its input points with their own targets (seed 002 Table 3); in_context: each example is a new function, context (x, y) tokens then query x tokens",
        ),
        ParamSpec::choice(
            "kernel",
            "rbf",
            &["rbf", "matern", "periodic", "rational_quadratic", "nonstationary"],
            "covariance function of the Gaussian process (seed 002 Table 3)",
        ),
        ParamSpec::float("length_scale", 3.0, 1e-3, 1e3, "length scale l (for Gibbs: at x_1 = 0)"),
        ParamSpec::float("variance", 1.0, 1e-6, 1e6, "signal variance k(x, x); the trivial predictor's RMSE is its square root"),
        ParamSpec::choice("matern_nu", "1.5", &["0.5", "1.5", "2.5"], "smoothness nu of the Matern kernel (kernel=matern)"),
        ParamSpec::float("period", 2.0, 1e-3, 1e3, "period p along each coordinate (kernel=periodic)"),
        ParamSpec::float("rq_alpha", 1.0, 1e-3, 1e3, "shape alpha of the rational-quadratic kernel (kernel=rational_quadratic)"),
        ParamSpec::choice(
            "nonstationary",
            "gibbs",
            &["gibbs", "warped"],
            "kernel=nonstationary: Gibbs kernel with length scale l exp(s x_1), or RBF of inputs warped by sinh(s x) / s",
        ),
        ParamSpec::float("nonstationary_strength", 1.0, 0.0, 10.0, "s of the non-stationary kernel (0: the RBF kernel)"),
        ParamSpec::float("noise", 0.0, 0.0, 1e3, "standard deviation of the observation noise y = f(x) + noise * eps"),
        ParamSpec::float("jitter", 1e-6, 1e-12, 1.0, "diagonal jitter of the Cholesky factorisation, relative to the variance"),
        ParamSpec::int("input_dim", 10, 1, 1024, "input dimension D (seed: 10); inputs are uniform on [-1, 1]^D"),
        ParamSpec::int("points", 32, 1, 8192, "setting=fit: input points (tokens) per example N"),
        ParamSpec::int("train_points", 1024, 1, 8192, "setting=fit: training points of the function"),
        ParamSpec::int("test_points", 1024, 1, 8192, "setting=fit: held-out test points of the function"),
        ParamSpec::int("context_points", 32, 1, 4096, "setting=in_context: context (x, y) tokens per example"),
        ParamSpec::int("query_points", 32, 1, 4096, "setting=in_context: query tokens per example, scored"),
        ParamSpec::int(
            "train_functions",
            0,
            0,
            i64::MAX,
            "setting=in_context: size of the pool of training functions (0: a fresh function for every example)",
        ),
        ParamSpec::int("eval_functions", 128, 1, 1_000_000, "setting=in_context: held-out functions of the evaluation set"),
        ParamSpec::int(
            "data_seed",
            20_240_601,
            0,
            i64::MAX,
            "seed of the functions and inputs, shared by all runs so they compare (the run seed only orders batches)",
        ),
        ParamSpec::bool("causal", false, "run the layer with a causal mask (no target enters the inputs either way)"),
    ]
}

fn declare() -> Result<Declaration> {
    Ok(Declaration::task(
        "gp-regression",
        env!("CARGO_PKG_VERSION"),
        "Regression of functions drawn from Gaussian processes (RBF, Matern, periodic, rational-quadratic, non-stationary kernels)",
        params(),
        GpTask::new,
    )
    .with_validator(GpTask::validate)
    .with_footprint(data::footprint)
    .needs_causal_layer(|cfg| cfg.bool("causal").unwrap_or(false)))
}

export_plugin!(declare);

#[cfg(test)]
mod tests;
