//! Code embedding, 2-D sinusoidal positions, the code head, the masked loss and the
//! reconstruction metrics (seed 000 §5.3; notes-hyperset.md §3.3, §8 and §9).
//!
//! * tokens: `Embedding(K + 1, d)`, where id `K` is the learnable [MASK] token;
//! * positions: fixed 2-D sin-cos encoding, the first half of the width encoding the row
//!   and the second half the column, each `[sin(t w_k), cos(t w_k)]` (plugin_api::ops);
//! * head: `RMSNorm(d) -> Linear(d, K)` with bias, on every position;
//! * loss: cross-entropy on the masked positions only.
//!
//! Embedding and head weights are drawn from N(0, init_std²) (the code's 0.02), the head's
//! bias and RMSNorm gain start at 0 and 1.

use crate::codebook::Codebook;
use crate::data::EVAL_RATIOS;
use crate::decoding::{decode, Decoding};
use crate::quality::{psnr, ssim};
use datasets::images::unpatchify;
use kernels::weighted_cross_entropy;
use plugin_api::candle::{DType, Device, Tensor, D};
use plugin_api::candle_nn::{Init, VarBuilder};
use plugin_api::ops::sinusoidal_embedding;
use plugin_api::{Batch, LayerPass, MetricTally, PluginError, Result, TaskModel};
use std::sync::Arc;

/// What the model needs to know about the images and their codes.
#[derive(Clone, Debug)]
pub struct CodeGrid {
    /// The tokenizer, to decode predicted codes into images.
    pub codebook: Arc<Codebook>,
    /// Codes per image side.
    pub patches: usize,
    /// Image side in pixels.
    pub side: usize,
    /// Colour channels.
    pub channels: usize,
}

impl CodeGrid {
    /// Tokens per image.
    pub fn tokens(&self) -> usize {
        self.patches * self.patches
    }

    /// The image (channel-major, values in [0, 1]) of one grid of codes.
    pub fn decode(&self, codes: &[u32]) -> Vec<f32> {
        unpatchify(&self.codebook.decode(codes), self.channels, self.side, self.patches)
    }
}

/// `dim` values of the sinusoidal encoding of `t`, with a zero appended for odd `dim`.
fn sinusoid(t: usize, dim: usize, device: &Device) -> Result<Tensor> {
    let e = sinusoidal_embedding(t as f64, dim, DType::F32, device)?;
    Ok(if dim % 2 == 1 { Tensor::cat(&[e, Tensor::zeros(1, DType::F32, device)?], 0)? } else { e })
}

/// `[patches², width]` 2-D positions: row encoding in the first `width / 2` values, column
/// encoding in the rest; row-major over the grid.
pub fn grid_positions(patches: usize, width: usize, dtype: DType, device: &Device) -> Result<Tensor> {
    let half = width / 2;
    let mut rows = Vec::with_capacity(patches * patches);
    for r in 0..patches {
        for c in 0..patches {
            rows.push(Tensor::cat(&[sinusoid(r, half, device)?, sinusoid(c, width - half, device)?], 0)?);
        }
    }
    Ok(Tensor::stack(&rows, 0)?.to_dtype(dtype)?)
}

/// The trainable part of the masked image modelling task.
pub struct MaskedImageModel {
    tokens: Tensor,
    positions: Tensor,
    head_norm: Tensor,
    head: Tensor,
    head_bias: Tensor,
    grid: CodeGrid,
    decoding: Decoding,
}

impl MaskedImageModel {
    /// Creates the parameters under `vb` for a layer of width `width`.
    pub fn new(vb: VarBuilder, grid: CodeGrid, width: usize, init_std: f64, decoding: Decoding) -> Result<Self> {
        let [tokens, head_norm, head, head_bias] = Self::parameters(&vb, grid.codebook.size(), width, init_std)?;
        Ok(MaskedImageModel {
            tokens,
            positions: grid_positions(grid.patches, width, vb.dtype(), vb.device())?,
            head_norm,
            head,
            head_bias,
            grid,
            decoding,
        })
    }

    /// The trainable tensors for `codes` codes: token table (with [MASK]), head norm, head
    /// and its bias; also what the task's footprint counts before any codebook is fitted.
    pub fn parameters(vb: &VarBuilder, codes: usize, width: usize, init_std: f64) -> Result<[Tensor; 4]> {
        let init = Init::Randn { mean: 0.0, stdev: init_std };
        Ok([
            vb.get_with_hints((codes + 1, width), "tokens", init)?,
            vb.get_with_hints(width, "head_norm", Init::Const(1.0))?,
            vb.get_with_hints((width, codes), "head", init)?,
            vb.get_with_hints(codes, "head_bias", Init::Const(0.0))?,
        ])
    }

    /// Code logits `[B * N, K]`.
    fn logits(&self, h: &Tensor) -> Result<Tensor> {
        let (b, n, _) = h.dims3()?;
        // The fused ops (plugin-api/kernels): one pass each, forward and backward.
        let normed = kernels::rms_norm(h, Some(&self.head_norm), 1e-6)?;
        Ok(kernels::linear(&normed, &self.head, Some(&self.head_bias))?.reshape((b * n, ()))?)
    }
}

fn mask(batch: &Batch) -> Result<&Tensor> {
    batch.mask.as_ref().ok_or_else(|| PluginError::Other("masked-image batch without its mask".into()))
}

impl TaskModel for MaskedImageModel {
    fn embed(&self, batch: &Batch, _train: bool) -> Result<Tensor> {
        let (b, n) = batch.inputs.dims2()?;
        let tokens = self.tokens.index_select(&batch.inputs.flatten_all()?, 0)?.reshape((b, n, ()))?;
        Ok(tokens.broadcast_add(&self.positions)?)
    }

    fn loss(&self, h: &Tensor, batch: &Batch) -> Result<Tensor> {
        let weights = mask(batch)?.flatten_all()?;
        Ok(weighted_cross_entropy(&self.logits(h)?, &batch.targets.flatten_all()?, Some(&weights))?)
    }

    fn evaluate(&self, h: &Tensor, batch: &Batch) -> Result<MetricTally> {
        score(&self.logits(h)?, batch, &self.grid)
    }

    /// MaskGIT's iterative decoding ([`crate::decoding`]) when `decode_steps > 1`.
    fn evaluate_decoding(&self, batch: &Batch, layer: LayerPass<'_>) -> Option<Result<MetricTally>> {
        if self.decoding.steps <= 1 {
            return None;
        }
        let mask_id = self.grid.codebook.size() as u32;
        let decoded = decode(batch, mask_id, self.decoding, layer, |b| self.embed(b, false), |h| self.logits(h));
        Some(decoded.and_then(|(codes, first_logits)| score_codes(&first_logits, &codes, batch, &self.grid)))
    }
}

/// Metric sums of code logits `[B * N, K]` on an evaluation batch whose row `i` is masked at
/// ratio `EVAL_RATIOS[i % 4]`: per ratio the masked-code accuracy `acc_R` and, of the image
/// decoded from the given and predicted codes against the image of the true codes, `psnr_R`
/// and `ssim_R`; and `loss`, the cross-entropy per masked code over all ratios.
pub fn score(logits: &Tensor, batch: &Batch, grid: &CodeGrid) -> Result<MetricTally> {
    let predicted: Vec<u32> = logits.argmax(D::Minus1)?.to_vec1()?;
    score_codes(logits, &predicted, batch, grid)
}

/// [`score`] of `predicted` codes (`[B * N]`) at the masked positions, the loss measured on
/// `logits`.
pub fn score_codes(logits: &Tensor, predicted: &[u32], batch: &Batch, grid: &CodeGrid) -> Result<MetricTally> {
    let n = grid.tokens();
    let masks = mask(batch)?.to_dtype(DType::F32)?;
    let flat_mask = masks.flatten_all()?;
    let masked = flat_mask.sum_all()?.to_scalar::<f32>()? as f64;
    let loss = weighted_cross_entropy(logits, &batch.targets.flatten_all()?, Some(&flat_mask))?
        .to_dtype(DType::F64)?
        .to_scalar::<f64>()?;
    let targets: Vec<u32> = batch.targets.flatten_all()?.to_vec1()?;
    let masks: Vec<f32> = flat_mask.to_vec1()?;
    let mut tally = MetricTally::default();
    tally.add("loss", loss * masked, masked);
    for row in 0..batch.size {
        let percent = (EVAL_RATIOS[row % EVAL_RATIOS.len()] * 100.0).round();
        let span = row * n..(row + 1) * n;
        let (truth, guess, hidden) = (&targets[span.clone()], &predicted[span.clone()], &masks[span]);
        let mut filled = truth.to_vec();
        let (mut right, mut count) = (0.0, 0.0);
        for i in 0..n {
            if hidden[i] > 0.0 {
                filled[i] = guess[i];
                count += 1.0;
                if guess[i] == truth[i] {
                    right += 1.0;
                }
            }
        }
        let (reference, reconstruction) = (grid.decode(truth), grid.decode(&filled));
        tally.add(&format!("acc_{percent}"), right, count);
        tally.add(&format!("psnr_{percent}"), psnr(&reconstruction, &reference), 1.0);
        tally.add(&format!("ssim_{percent}"), ssim(&reconstruction, &reference, grid.channels, grid.side), 1.0);
    }
    Ok(tally)
}
