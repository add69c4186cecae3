//! The optimiser each Hyper-SET sub-step applies to its update direction (option `optimizer`).
//!
//! Seed 000 iterates plain gradient steps: `X - alpha grad E_ATTN` (Eq. 9), then
//! `X + gamma (-grad E_FF)` (Eq. 11). Seed 001 reads a residual update as one step of an
//! optimiser and replaces plain descent by momentum (Eq. 8) or Nesterov's look-ahead (Eq. 9),
//! "replacing `grad F` with the output" of each sub-layer, attention and FFN alike (Section
//! 3.1). Here the same replacement is made in Hyper-SET: each sub-step's gradient `g` is
//! the attention update `sum_h W_h mix_h` (the direction of seed 000's Eq. 9) or minus the
//! feedforward update (Eq. 11), and the learned step sizes `alpha`, `gamma` play the role of
//! seed 001's `eta`. One optimiser state runs through both sub-steps of every iteration of a
//! pass and starts at zero, as seed 001's momentum buffer does (`p^(0) = 0`).
//!
//! - `gd`: `X - eta g` (today's update, computed by the same code as before).
//! - `momentum`: seed 001 Eq. 8, module `momentum`.
//! - `nesterov`: seed 001 Eq. 9, module `nesterov`.
//! - `rmsprop`, `adam`: diagonal preconditioning by running second moments. Seed 001 uses
//!   no such optimiser (its preconditioned attentions are Newton steps, Eq. 18-24); these are
//!   the usual RMSProp (Tieleman & Hinton, 2012) and Adam (Kingma & Ba, 2015) rules, modules
//!   `rmsprop` and `adam`.
//!
//! `beta` (momentum, Nesterov, Adam's first moment) defaults to seed 001's 0.9. The seed
//! learns it ("We set β and η as learnable parameters initialized to 0.9 and 1.0", Section
//! 3.1): with `learn_beta`, momentum and Nesterov take each block's own learned coefficient
//! ([`Beta::Learned`], kept in `(0, 1)` by a sigmoid), starting at the `beta` option.
//! `beta2` defaults to 0.99 (PyTorch's RMSProp): a pass runs `2 L` sub-steps, tens rather
//! than the thousands 0.999 averages over, and without bias correction RMSProp's first step
//! is `1 / sqrt(1 - beta2)` times the normalised gradient (10 at 0.99, 32 at 0.999). `eps`
//! (1e-8) sits inside the square root, `g / sqrt(v + eps)` as in TensorFlow's RMSProp, so
//! that the derivative stays finite where a second moment is zero.

mod adam;
mod momentum;
mod nesterov;
mod rmsprop;

use crate::step_size::StepSize;
use kernels::Kernels;
use plugin_api::candle::Tensor;
use plugin_api::{config_error, Result};

/// The optimiser of every sub-step, with its hyperparameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Optimizer {
    /// Plain gradient steps (seed 000, Eq. 9 and 11).
    Gd,
    /// Momentum (seed 001, Eq. 8).
    Momentum {
        /// Momentum coefficient.
        beta: f64,
    },
    /// Nesterov's accelerated gradient (seed 001, Eq. 9).
    Nesterov {
        /// Momentum coefficient.
        beta: f64,
    },
    /// RMSProp: the gradient divided by the root of a running mean of its square.
    RmsProp {
        /// Decay of the second moment.
        beta2: f64,
        /// Added to the second moment under the square root.
        eps: f64,
    },
    /// Adam: bias-corrected running first and second moments.
    Adam {
        /// Decay of the first moment.
        beta: f64,
        /// Decay of the second moment.
        beta2: f64,
        /// Added to the second moment under the square root.
        eps: f64,
    },
}

/// A momentum coefficient: the `beta` option, or a block's learned one (`[1]`).
#[derive(Clone, Copy)]
pub enum Beta<'a> {
    Fixed(f64),
    Learned(&'a Tensor),
}

impl Beta<'_> {
    /// `beta p`.
    pub fn scale(&self, p: &Tensor) -> Result<Tensor> {
        Ok(match self {
            Beta::Fixed(beta) => (p * *beta)?,
            Beta::Learned(beta) => p.broadcast_mul(beta)?,
        })
    }
}

/// What an optimiser carries from one sub-step to the next within a pass.
#[derive(Default)]
pub struct OptimizerState {
    /// First moment / velocity `p` (`None` while zero).
    pub velocity: Option<Tensor>,
    /// Running second moment `v` (`None` while zero).
    pub second_moment: Option<Tensor>,
    /// Sub-steps taken (Adam's bias correction).
    pub steps: usize,
}

/// The optimiser's keys with the optimisers that read them, for refusing a key that has no
/// effect.
pub const KEYS: [(&str, &[&str]); 3] =
    [("beta", &["momentum", "nesterov", "adam"]), ("beta2", &["rmsprop", "adam"]), ("eps", &["rmsprop", "adam"])];

impl Optimizer {
    /// The option values.
    pub const NAMES: [&'static str; 5] = ["gd", "momentum", "nesterov", "rmsprop", "adam"];

    /// The optimiser `name` with its hyperparameters; refuses unknown names and betas
    /// outside `[0, 1)`, a non-positive `eps`, naming the allowed values.
    pub fn parse(name: &str, beta: f64, beta2: f64, eps: f64) -> Result<Self> {
        let optimizer = match name {
            "gd" => Optimizer::Gd,
            "momentum" => Optimizer::Momentum { beta },
            "nesterov" => Optimizer::Nesterov { beta },
            "rmsprop" => Optimizer::RmsProp { beta2, eps },
            "adam" => Optimizer::Adam { beta, beta2, eps },
            other => {
                return Err(config_error(format!(
                    "optimizer = {other} is unknown; choose one of {}",
                    Self::NAMES.join(" | ")
                )))
            }
        };
        for (key, value) in [("beta", beta), ("beta2", beta2)] {
            if optimizer.reads(key) && !(0.0..1.0).contains(&value) {
                return Err(config_error(format!(
                    "{key} = {value} is out of range for optimizer = {name}: a decay must lie in [0, 1) (at 1 the \
                     state never forgets and grows without bound); use e.g. {key}=0.9"
                )));
            }
        }
        if optimizer.reads("eps") && (eps.is_nan() || eps <= 0.0) {
            return Err(config_error(format!(
                "eps = {eps} must be positive for optimizer = {name} (it keeps g / sqrt(v + eps) finite); use eps=1e-8"
            )));
        }
        Ok(optimizer)
    }

    /// The option value.
    pub fn name(&self) -> &'static str {
        match self {
            Optimizer::Gd => "gd",
            Optimizer::Momentum { .. } => "momentum",
            Optimizer::Nesterov { .. } => "nesterov",
            Optimizer::RmsProp { .. } => "rmsprop",
            Optimizer::Adam { .. } => "adam",
        }
    }

    /// Whether `learn_beta` can apply: the optimiser keeps a momentum buffer decayed by `beta`
    /// (seed 001 learns it for momentum and Nesterov).
    pub fn has_momentum(&self) -> bool {
        matches!(self, Optimizer::Momentum { .. } | Optimizer::Nesterov { .. })
    }

    /// Whether this optimiser reads the hyperparameter `key`.
    pub fn reads(&self, key: &str) -> bool {
        KEYS.iter().any(|(k, users)| *k == key && users.contains(&self.name()))
    }

    /// One sub-step from `x`: `gradient` is the sub-step's gradient `g` as a function of the
    /// point where it is evaluated (`x`, or Nesterov's look-ahead point), `step` the step
    /// size `eta` (a learned `alpha` / `gamma` or a constant), `learned_beta` the block's
    /// learned momentum coefficient, which replaces the `beta` option (`learn_beta`). Updates
    /// `state`.
    pub fn step(
        &self,
        state: &mut OptimizerState,
        x: &Tensor,
        step: &StepSize,
        learned_beta: Option<&Tensor>,
        kernels: Kernels,
        gradient: impl FnOnce(&Tensor) -> Result<Tensor>,
    ) -> Result<Tensor> {
        state.steps += 1;
        let momentum_beta = |beta| learned_beta.map_or(Beta::Fixed(beta), Beta::Learned);
        let direction = match *self {
            Optimizer::Gd => gradient(x)?,
            Optimizer::Momentum { beta } => momentum::direction(state, momentum_beta(beta), gradient(x)?)?,
            Optimizer::Nesterov { beta } => {
                let beta = momentum_beta(beta);
                let lookahead = nesterov::lookahead(state, beta, x, step, kernels)?;
                momentum::direction(state, beta, gradient(&lookahead)?)?
            }
            Optimizer::RmsProp { beta2, eps } => rmsprop::direction(state, beta2, eps, gradient(x)?)?,
            Optimizer::Adam { beta, beta2, eps } => adam::direction(state, beta, beta2, eps, gradient(x)?)?,
        };
        step.apply(x, direction, true, kernels)
    }
}

#[cfg(test)]
mod tests;
