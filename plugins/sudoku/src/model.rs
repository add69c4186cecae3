//! Embedding and head: `Embedding(10, d) + learnable positions`, `RMSNorm -> Linear(d, 9)`.

use crate::data::CELLS;
use plugin_api::candle::{DType, Tensor, D};
use plugin_api::candle_nn::{Init, VarBuilder};
use plugin_api::ops::{rms_norm, weighted_cross_entropy};
use plugin_api::{Batch, MetricTally, PluginError, Result, TaskModel};

const DIGITS: usize = 9;

pub struct SudokuModel {
    tokens: Tensor,
    positions: Tensor,
    head_norm: Tensor,
    head: Tensor,
}

impl SudokuModel {
    pub fn new(vb: VarBuilder, width: usize, init_std: f64) -> Result<Self> {
        let init = Init::Randn { mean: 0.0, stdev: init_std };
        Ok(SudokuModel {
            tokens: vb.get_with_hints((10, width), "tokens", init)?,
            positions: vb.get_with_hints((CELLS, width), "positions", init)?,
            head_norm: vb.get_with_hints(width, "head_norm", Init::Const(1.0))?,
            head: vb.get_with_hints((width, DIGITS), "head", init)?,
        })
    }

    /// Digit logits `[B * 81, 9]`.
    fn logits(&self, h: &Tensor) -> Result<Tensor> {
        let (b, n, d) = h.dims3()?;
        let normed = rms_norm(h, Some(&self.head_norm), 1e-6)?;
        Ok(normed.reshape((b * n, d))?.matmul(&self.head)?)
    }
}

fn mask(batch: &Batch) -> Result<&Tensor> {
    batch.mask.as_ref().ok_or_else(|| PluginError::Other("Sudoku batch without its blank mask".into()))
}

impl TaskModel for SudokuModel {
    fn embed(&self, batch: &Batch, _train: bool) -> Result<Tensor> {
        let (b, n) = batch.inputs.dims2()?;
        let ids = batch.inputs.flatten_all()?;
        let tokens = self.tokens.index_select(&ids, 0)?.reshape((b, n, ()))?;
        Ok(tokens.broadcast_add(&self.positions)?)
    }

    fn loss(&self, h: &Tensor, batch: &Batch) -> Result<Tensor> {
        let logits = self.logits(h)?;
        Ok(weighted_cross_entropy(&logits, &batch.targets.flatten_all()?, Some(&mask(batch)?.flatten_all()?))?)
    }

    fn evaluate(&self, h: &Tensor, batch: &Batch) -> Result<MetricTally> {
        score(&self.logits(h)?, batch)
    }
}

/// Board accuracy, cell accuracy on blanks and mean loss per blank cell of digit logits
/// `[B * 81, 9]`.
pub fn score(logits: &Tensor, batch: &Batch) -> Result<MetricTally> {
    let blanks = mask(batch)?.to_dtype(DType::F32)?;
    let loss = weighted_cross_entropy(logits, &batch.targets.flatten_all()?, Some(&blanks.flatten_all()?))?
        .to_dtype(DType::F64)?
        .to_scalar::<f64>()?;
    let predicted = logits.argmax(D::Minus1)?.reshape(batch.targets.shape())?;
    let correct = predicted.eq(&batch.targets)?.to_dtype(DType::F32)?;
    let n_blanks: Vec<f32> = blanks.sum(1)?.to_vec1()?;
    let right_blanks: Vec<f32> = (&correct * &blanks)?.sum(1)?.to_vec1()?;
    let total_blanks: f64 = n_blanks.iter().map(|&x| x as f64).sum();
    let boards_solved = n_blanks.iter().zip(&right_blanks).filter(|(n, r)| n == r).count();
    let mut tally = MetricTally::default();
    tally.add("board_acc", boards_solved as f64, batch.size as f64);
    tally.add("cell_acc", right_blanks.iter().map(|&x| x as f64).sum(), total_blanks);
    tally.add("loss", loss * total_blanks, total_blanks);
    Ok(tally)
}
