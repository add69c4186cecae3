//! Seeded dropout, in GPT-2's two places (seed 001, App. A.4 gives "a fixed dropout ratio of
//! 0.1" without its placement), in training passes only:
//!
//! - residual dropout (`dropout`): each branch output `f`, `g` before it enters the residual or
//!   the momentum buffer;
//! - attention dropout (`attn_dropout`): the attention probabilities `p_{i,h}` before they weigh
//!   the values (or, for the Newton kinds, the keys of every term of the step). The rows then
//!   no longer sum to one, as in GPT-2.
//!
//! Kept entries are scaled by `1 / (1 - rate)`. Each mask is drawn from a seed taken from the
//! tensor it acts on or comes from (the branch output, the normalised branch input), so the
//! same state drops the same entries and a run trains again to the same numbers.

use plugin_api::candle::{Result, Tensor};

/// The dropout of one call: a rate and the seed of its mask.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Dropout {
    rate: f64,
    seed: u64,
}

impl Dropout {
    /// No dropout: evaluation passes, rate 0, and the gradient identities.
    pub const NONE: Dropout = Dropout { rate: 0.0, seed: 0 };

    /// Dropout at `rate` (in `[0, 1)`) with the mask drawn from `seed`.
    pub fn new(rate: f64, seed: u64) -> Self {
        Dropout { rate, seed }
    }

    /// The dropout of a pass: at `rate` when it trains, its mask seeded by `source`'s values and
    /// `salt` (one salt per place, should two sources ever agree); [`Dropout::NONE`] otherwise.
    pub fn in_pass(rate: f64, train: bool, salt: u64, source: &Tensor) -> plugin_api::Result<Self> {
        if train && rate > 0.0 {
            Ok(Dropout::new(rate, plugin_api::ops::content_seed(salt, source)?))
        } else {
            Ok(Dropout::NONE)
        }
    }

    /// Whether any entry is dropped.
    pub fn is_active(&self) -> bool {
        self.rate > 0.0
    }

    /// The same dropout for the fused softmax attention's weights, `None` when inactive.
    pub fn on_weights(&self) -> Option<kernels::AttentionDropout> {
        self.is_active().then_some(kernels::AttentionDropout { rate: self.rate, seed: self.seed })
    }

    /// `x` with the mask applied, or `x` itself when inactive.
    pub fn apply(&self, x: Tensor) -> Result<Tensor> {
        if self.is_active() {
            plugin_api::ops::seeded_dropout(&x, self.rate, self.seed)
        } else {
            Ok(x)
        }
    }
}
