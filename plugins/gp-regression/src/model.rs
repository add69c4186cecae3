//! Embedding, head, loss and metrics of Gaussian-process regression.
//!
//! - Embedding: `x_i = W_e f_i + b_e`, a linear map of the `F` point features to the width
//!   `d` (`W_e ~ N(0, 1/F)`, `b_e = 0`).
//! - Head: `y_hat_i = w_h . h_i + b_h` (`w_h ~ N(0, 0.02^2)`, `b_h = 0`).
//! - Loss: `sum_i m_i (y_hat_i - y_i)^2 / sum_i m_i` over the scored tokens (`m` the batch
//!   mask).
//!
//! # Metrics and how they merge
//!
//! The host sums each metric's `(sum, count)` over the evaluation batches and reports
//! `sum / count`. `loss` is `(squared errors, points)` of the held-out points, exact. RMSE is
//! not a mean, `sqrt(mean of squares) != mean of batch RMSEs`, so each batch reports a
//! telescoping share: after batches `1..k` of a pass with running totals `S_k` (squared
//! errors) and `C_k` (points), batch `k` reports `sqrt(S_k / C_k) * C_k` minus what batches
//! `1..k-1` reported, over its own points. The merged tally then holds exactly
//! `sqrt(S / C) * C` over `C` points, whose mean is the RMSE of the whole set. `rmse` (held-out
//! points) and `train_rmse` (training points) keep separate totals. This relies on the host
//! evaluating one pass's batches in order and merging them; a pass starts over when a batch of
//! the current pass (recognised by its target tensor) comes back, as when the host evaluates
//! again.

use plugin_api::candle::{Tensor, TensorId};
use plugin_api::candle_nn::{Init, VarBuilder};
use plugin_api::{Batch, MetricTally, PluginError, Result, TaskModel};
use std::collections::HashSet;
use std::sync::Mutex;

/// Standard deviation of the head's initial weights: an untrained model predicts about 0.
pub const HEAD_INIT_STD: f64 = 0.02;

/// Linear embedding of point features, linear scalar head, and the running RMSE pass.
pub struct GpModel {
    embed_weight: Tensor,
    embed_bias: Tensor,
    head_weight: Tensor,
    head_bias: Tensor,
    pass: Mutex<RmsePass>,
}

/// The observations `y`, the training-data flags and the mask of a batch, each `[B, N]`.
fn batch_parts(batch: &Batch) -> Result<(Tensor, Tensor, Tensor)> {
    let mask = batch.mask.as_ref().ok_or_else(|| PluginError::Other("regression batch without its mask".into()))?;
    let y = batch.targets.narrow(2, 0, 1)?.squeeze(2)?;
    let training = batch.targets.narrow(2, 1, 1)?.squeeze(2)?;
    Ok((y, training, mask.clone()))
}

impl GpModel {
    /// Creates `embed.weight` `[F, d]`, `embed.bias` `[d]`, `head.weight` `[d, 1]` and
    /// `head.bias` `[1]` in `vb`.
    pub fn new(vb: VarBuilder, features: usize, width: usize) -> Result<Self> {
        let zero = Init::Const(0.0);
        Ok(GpModel {
            embed_weight: vb.get_with_hints(
                (features, width),
                "embed.weight",
                Init::Randn { mean: 0.0, stdev: 1.0 / (features as f64).sqrt() },
            )?,
            embed_bias: vb.get_with_hints(width, "embed.bias", zero)?,
            head_weight: vb.get_with_hints(
                (width, 1),
                "head.weight",
                Init::Randn { mean: 0.0, stdev: HEAD_INIT_STD },
            )?,
            head_bias: vb.get_with_hints(1, "head.bias", zero)?,
            pass: Mutex::new(RmsePass::default()),
        })
    }

    /// Predictions `[B, N]` from the layer output `h` (`[B, N, d]`).
    pub fn predict(&self, h: &Tensor) -> Result<Tensor> {
        let (b, n, d) = h.dims3()?;
        let flat = h.reshape((b * n, d))?.matmul(&self.head_weight)?.broadcast_add(&self.head_bias)?;
        Ok(flat.reshape((b, n))?)
    }
}

impl TaskModel for GpModel {
    fn embed(&self, batch: &Batch, _train: bool) -> Result<Tensor> {
        let (b, n, f) = batch.inputs.dims3()?;
        let features = batch.inputs.to_dtype(self.embed_weight.dtype())?.reshape((b * n, f))?;
        let tokens = features.matmul(&self.embed_weight)?.broadcast_add(&self.embed_bias)?;
        Ok(tokens.reshape((b, n, ()))?)
    }

    fn loss(&self, h: &Tensor, batch: &Batch) -> Result<Tensor> {
        let (y, _, mask) = batch_parts(batch)?;
        let mask = mask.to_dtype(h.dtype())?;
        let squared = (self.predict(h)? - y.to_dtype(h.dtype())?)?.sqr()?;
        let scored = mask.sum_all()?.maximum(1.0)?;
        Ok(((squared * &mask)?.sum_all()? / scored)?)
    }

    fn evaluate(&self, h: &Tensor, batch: &Batch) -> Result<MetricTally> {
        let (y, training, mask) = batch_parts(batch)?;
        let predicted = self.predict(h)?.to_dtype(y.dtype())?;
        let errors: Vec<f32> = (predicted - &y)?.flatten_all()?.to_vec1()?;
        let training: Vec<f32> = training.flatten_all()?.to_vec1()?;
        let mask: Vec<f32> = mask.flatten_all()?.to_vec1()?;
        let (mut held_out, mut train) = ((0.0, 0.0), (0.0, 0.0));
        for ((e, t), m) in errors.iter().zip(&training).zip(&mask) {
            if *m > 0.0 {
                let part = if *t > 0.0 { &mut train } else { &mut held_out };
                part.0 += (*e as f64) * (*e as f64);
                part.1 += 1.0;
            }
        }
        let (rmse_share, train_share) = self
            .pass
            .lock()
            .map_err(|_| PluginError::Other("the RMSE totals were poisoned by a panic".into()))?
            .add(batch.targets.id(), held_out, train);
        let mut tally = MetricTally::default();
        tally.add("loss", held_out.0, held_out.1);
        tally.add("rmse", rmse_share, held_out.1);
        tally.add("train_rmse", train_share, train.1);
        Ok(tally)
    }
}

/// Running totals of one RMSE over an evaluation pass.
#[derive(Clone, Copy, Debug, Default)]
pub struct RunningRoot {
    squares: f64,
    count: f64,
    reported: f64,
}

impl RunningRoot {
    /// Adds `squares` over `count` points; returns the growth of `sqrt(S / C) * C`.
    pub fn add(&mut self, squares: f64, count: f64) -> f64 {
        self.squares += squares;
        self.count += count;
        let total = (self.squares * self.count).sqrt();
        let share = total - self.reported;
        self.reported = total;
        share
    }
}

/// The evaluation pass in progress: RMSE totals of held-out and training points.
#[derive(Default)]
pub struct RmsePass {
    seen: HashSet<TensorId>,
    held_out: RunningRoot,
    training: RunningRoot,
}

impl RmsePass {
    /// Adds a batch's `(squared errors, points)` of held-out and training points and returns
    /// their `rmse` and `train_rmse` shares. A batch already seen starts a new pass.
    pub fn add(&mut self, batch: TensorId, held_out: (f64, f64), training: (f64, f64)) -> (f64, f64) {
        if !self.seen.insert(batch) {
            *self = RmsePass::default();
            self.seen.insert(batch);
        }
        (self.held_out.add(held_out.0, held_out.1), self.training.add(training.0, training.1))
    }
}
