//! Dropout on the attention probabilities `p_{i,h}` (GPT-2's attention dropout; seed 001,
//! App. A.4 gives "a fixed dropout ratio of 0.1" without its placement): in training passes
//! each probability is zeroed at rate `attn_dropout` and the others scaled by
//! `1 / (1 - rate)` before they weigh the values (or, for the Newton kinds, the keys of every
//! term of the step). The rows then no longer sum to one, as in GPT-2.
//!
//! The mask is drawn from a seed the block takes from its normalised input, so the same state
//! drops the same probabilities and a run trains again to the same numbers.

use plugin_api::candle::{Result, Tensor};

/// The attention-probability dropout of one branch call: a rate and the seed of its mask.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WeightDropout {
    rate: f64,
    seed: u64,
}

impl WeightDropout {
    /// No dropout: evaluation passes, rate 0, and the gradient identities.
    pub const NONE: WeightDropout = WeightDropout { rate: 0.0, seed: 0 };

    /// Dropout at `rate` (in `[0, 1)`) with the mask drawn from `seed`.
    pub fn new(rate: f64, seed: u64) -> Self {
        WeightDropout { rate, seed }
    }

    /// Whether any probability is dropped.
    pub fn is_active(&self) -> bool {
        self.rate > 0.0
    }

    /// `p` with the mask applied, or `p` itself when inactive.
    pub fn apply(&self, p: Tensor) -> Result<Tensor> {
        if self.is_active() {
            plugin_api::ops::seeded_dropout(&p, self.rate, self.seed)
        } else {
            Ok(p)
        }
    }
}
