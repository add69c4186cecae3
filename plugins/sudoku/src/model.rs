//! Embedding and head: `Embedding(10, d) + learnable positions` (with dropout in training),
//! `RMSNorm -> Linear(d, 9)`.

use crate::data::CELLS;
use kernels::weighted_cross_entropy;
use plugin_api::candle::{DType, Tensor, D};
use plugin_api::candle_nn::{Init, VarBuilder};
use plugin_api::ops::seeded_dropout;
use plugin_api::{Batch, MetricTally, PluginError, Result, TaskModel};

const DIGITS: usize = 9;

/// Learnable positions: a free table per cell, or row + column + box tables.
enum Positions {
    PerCell(Tensor),
    Factored { tables: [Tensor; 3], indices: [Tensor; 3] },
}

impl Positions {
    /// `[81, d]` position vectors (recomputed each pass: the tables change as they train).
    fn vectors(&self) -> Result<Tensor> {
        match self {
            Positions::PerCell(t) => Ok(t.clone()),
            Positions::Factored { tables, indices } => {
                let mut sum = tables[0].index_select(&indices[0], 0)?;
                for (table, index) in tables.iter().zip(indices.iter()).skip(1) {
                    sum = (sum + table.index_select(index, 0)?)?;
                }
                Ok(sum)
            }
        }
    }
}

/// The model's options (the task's `init_std`, `positions`, `norm_eps`, `dropout`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelOptions {
    /// Standard deviation of the embeddings' and head's initialisation.
    pub init_std: f64,
    /// Row + column + box position tables instead of a free table per cell.
    pub factored_positions: bool,
    /// Epsilon of the head's RMSNorm.
    pub norm_eps: f64,
    /// Dropout probability on the embedded tokens, in training only.
    pub dropout: f64,
    /// The run seed, from which dropout masks are drawn.
    pub seed: u64,
}

pub struct SudokuModel {
    tokens: Tensor,
    positions: Positions,
    head_norm: Tensor,
    head: Tensor,
    options: ModelOptions,
}

impl SudokuModel {
    /// With `factored_positions` the position of cell (r, c) is `row[r] + col[c] + box[b]`
    /// (three learnable `[9, d]` tables) instead of a free `[81, d]` table: the same
    /// structure in fewer parameters, which the attention finds much sooner.
    pub fn new(vb: VarBuilder, width: usize, options: ModelOptions) -> Result<Self> {
        let init = Init::Randn { mean: 0.0, stdev: options.init_std };
        let positions = if options.factored_positions {
            let index =
                |f: fn(usize) -> usize| Tensor::from_vec((0..CELLS).map(|c| f(c) as u32).collect(), CELLS, vb.device());
            Positions::Factored {
                tables: [
                    vb.get_with_hints((9, width), "row_positions", init)?,
                    vb.get_with_hints((9, width), "col_positions", init)?,
                    vb.get_with_hints((9, width), "box_positions", init)?,
                ],
                indices: [index(|c| c / 9)?, index(|c| c % 9)?, index(|c| (c / 27) * 3 + (c % 9) / 3)?],
            }
        } else {
            Positions::PerCell(vb.get_with_hints((CELLS, width), "positions", init)?)
        };
        Ok(SudokuModel {
            tokens: vb.get_with_hints((10, width), "tokens", init)?,
            positions,
            head_norm: vb.get_with_hints(width, "head_norm", Init::Const(1.0))?,
            head: vb.get_with_hints((width, DIGITS), "head", init)?,
            options,
        })
    }

    /// Digit logits `[B * 81, 9]`.
    fn logits(&self, h: &Tensor) -> Result<Tensor> {
        let (b, n, _) = h.dims3()?;
        // The fused ops (plugin-api/kernels): one pass each, forward and backward.
        let normed = kernels::rms_norm(h, Some(&self.head_norm), self.options.norm_eps)?;
        Ok(kernels::linear(&normed, &self.head, None)?.reshape((b * n, DIGITS))?)
    }
}

fn mask(batch: &Batch) -> Result<&Tensor> {
    batch.mask.as_ref().ok_or_else(|| PluginError::Other("Sudoku batch without its blank mask".into()))
}

impl TaskModel for SudokuModel {
    fn embed(&self, batch: &Batch, train: bool) -> Result<Tensor> {
        let (b, n) = batch.inputs.dims2()?;
        let ids = batch.inputs.flatten_all()?;
        let tokens = self.tokens.index_select(&ids, 0)?.reshape((b, n, ()))?;
        let embedded = tokens.broadcast_add(&self.positions.vectors()?)?;
        // The mask is drawn from the run seed mixed with the batch's boards, so a step draws
        // the same mask whether the run was resumed or its batch split over threads.
        match (train, self.options.dropout) {
            (true, p) if p > 0.0 => {
                let boards: Vec<u32> = ids.to_vec1()?;
                Ok(seeded_dropout(
                    &embedded,
                    p,
                    plugin_api::ops::mix_seed(self.options.seed, boards.iter().map(|&v| v as u64)),
                )?)
            }
            _ => Ok(embedded),
        }
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
