//! Patch embedding, [CLS] token, sinusoidal positions and the classification head.
//!
//! As in seed 000's image-classification code (notes-hyperset.md §3.2 and §9):
//!
//! * each patch of `f = channels × (side / patches)²` pixels goes through
//!   `LayerNorm(f) -> Linear(f, d) -> LayerNorm(d)`;
//! * a learnable [CLS] token (init N(0, 1)) is put in front of the `patches²` patch tokens;
//! * the 1-D sinusoidal encoding `[sin(t w_k), cos(t w_k)]` of position `t = 0..=patches²`
//!   ([CLS] at 0) is added (fixed, not learned);
//! * the head is `LayerNorm(d) -> Linear(d, classes)` on the [CLS] output.
//!
//! Linear layers have biases and PyTorch's default init, `U(-1/sqrt(fan_in), 1/sqrt(fan_in))`
//! for weights and biases. The loss is cross-entropy with label smoothing `e` (the code's 0.1):
//! `(1 - e) * (-log p_y) + e * mean_c(-log p_c)`.

use kernels::LayerNorm;
use plugin_api::candle::{DType, Device, Tensor, D};
use plugin_api::candle_nn::{ops::log_softmax, Init, Linear, Module, VarBuilder};
use plugin_api::ops::sinusoidal_embedding;
use plugin_api::{Batch, MetricTally, Result, TaskModel};

/// The sizes the task fixes: what the embedding reads and the head predicts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelShape {
    /// Values per patch `f`.
    pub patch_features: usize,
    /// Patch tokens per image (`patches²`); the layer sees one more, the [CLS] token.
    pub patch_tokens: usize,
    /// Number of classes.
    pub classes: usize,
}

impl ModelShape {
    /// The shape for images of `channels` cut into `patches` x `patches` patches.
    pub fn of(channels: usize, patches: usize, classes: usize) -> Self {
        let patch_side = crate::data::IMAGE_SIDE / patches;
        ModelShape { patch_features: channels * patch_side * patch_side, patch_tokens: patches * patches, classes }
    }
}

/// The trainable part of the image task.
pub struct ImageModel {
    patch_norm: LayerNorm,
    patch_projection: Linear,
    token_norm: LayerNorm,
    cls: Tensor,
    positions: Tensor,
    head_norm: LayerNorm,
    head: Linear,
    label_smoothing: f64,
}

/// A `Linear(in_dim, out_dim)` with bias and PyTorch's default init.
fn linear(vb: VarBuilder, in_dim: usize, out_dim: usize) -> Result<Linear> {
    let bound = 1.0 / (in_dim as f64).sqrt();
    let init = Init::Uniform { lo: -bound, up: bound };
    let weight = vb.get_with_hints((out_dim, in_dim), "weight", init)?;
    let bias = vb.get_with_hints(out_dim, "bias", init)?;
    Ok(Linear::new(weight, Some(bias)))
}

/// `[tokens, width]` sinusoidal encodings of positions `0..tokens`; an odd width gets a
/// zero last column.
pub fn sinusoidal_positions(tokens: usize, width: usize, dtype: DType, device: &Device) -> Result<Tensor> {
    let rows = (0..tokens)
        .map(|t| {
            let row = sinusoidal_embedding(t as f64, width, dtype, device)?;
            if width % 2 == 1 {
                Tensor::cat(&[row, Tensor::zeros(1, dtype, device)?], 0)
            } else {
                Ok(row)
            }
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    Ok(Tensor::stack(&rows, 0)?)
}

impl ImageModel {
    /// Creates the parameters under `vb` for a layer of width `width`.
    pub fn new(vb: VarBuilder, shape: ModelShape, width: usize, label_smoothing: f64) -> Result<Self> {
        let positions = sinusoidal_positions(shape.patch_tokens + 1, width, vb.dtype(), vb.device())?;
        Ok(ImageModel {
            patch_norm: LayerNorm::new(shape.patch_features, vb.pp("patch_norm"))?,
            patch_projection: linear(vb.pp("patch_projection"), shape.patch_features, width)?,
            token_norm: LayerNorm::new(width, vb.pp("token_norm"))?,
            cls: vb.get_with_hints((1, 1, width), "cls", Init::Randn { mean: 0.0, stdev: 1.0 })?,
            positions,
            head_norm: LayerNorm::new(width, vb.pp("head_norm"))?,
            head: linear(vb.pp("head"), width, shape.classes)?,
            label_smoothing,
        })
    }

    /// Class logits `[B, classes]` from the [CLS] output `h[:, 0, :]`.
    pub fn logits(&self, h: &Tensor) -> Result<Tensor> {
        let cls = h.narrow(1, 0, 1)?.squeeze(1)?;
        Ok(self.head.forward(&self.head_norm.forward(&cls)?)?)
    }
}

impl TaskModel for ImageModel {
    /// Patches `[B, N, f]` become tokens `[B, N + 1, d]`: [CLS] first, positions added.
    fn embed(&self, batch: &Batch, _train: bool) -> Result<Tensor> {
        let patches = self.patch_norm.forward(&batch.inputs)?;
        let tokens = self.token_norm.forward(&self.patch_projection.forward(&patches)?)?;
        let (b, _, d) = tokens.dims3()?;
        let cls = self.cls.broadcast_as((b, 1, d))?;
        Ok(Tensor::cat(&[&cls, &tokens], 1)?.broadcast_add(&self.positions)?)
    }

    fn loss(&self, h: &Tensor, batch: &Batch) -> Result<Tensor> {
        let (nll, smooth) = per_example_losses(&self.logits(h)?, &batch.targets)?;
        Ok(mix(&nll, &smooth, self.label_smoothing)?.mean_all()?)
    }

    fn evaluate(&self, h: &Tensor, batch: &Batch) -> Result<MetricTally> {
        score(&self.logits(h)?, &batch.targets, self.label_smoothing)
    }
}

/// Per example, `-log p_y` and the smoothing term `mean_c(-log p_c)`, each `[B]`.
fn per_example_losses(logits: &Tensor, targets: &Tensor) -> Result<(Tensor, Tensor)> {
    let log_p = log_softmax(logits, D::Minus1)?;
    let nll = log_p.gather(&targets.unsqueeze(1)?, 1)?.squeeze(1)?.neg()?;
    let smooth = log_p.mean(D::Minus1)?.neg()?;
    Ok((nll, smooth))
}

/// `(1 - e) * nll + e * smooth`.
fn mix(nll: &Tensor, smooth: &Tensor, label_smoothing: f64) -> Result<Tensor> {
    Ok(((nll * (1.0 - label_smoothing))? + (smooth * label_smoothing)?)?)
}

/// Metric sums over a batch of logits `[B, C]`: `top1` (correct argmax), `loss` (the
/// training objective, label smoothing included) and `nll` (plain cross-entropy, comparable
/// across `label_smoothing` settings), each over `B` examples.
pub fn score(logits: &Tensor, targets: &Tensor, label_smoothing: f64) -> Result<MetricTally> {
    let b = targets.dim(0)? as f64;
    let (nll, smooth) = per_example_losses(logits, targets)?;
    let sum = |t: &Tensor| -> Result<f64> { Ok(t.sum_all()?.to_dtype(DType::F64)?.to_scalar::<f64>()?) };
    let correct = logits.argmax(D::Minus1)?.eq(targets)?.to_dtype(DType::F64)?;
    let mut tally = MetricTally::default();
    tally.add("top1", sum(&correct)?, b);
    tally.add("loss", sum(&mix(&nll, &smooth, label_smoothing)?)?, b);
    tally.add("nll", sum(&nll)?, b);
    Ok(tally)
}
