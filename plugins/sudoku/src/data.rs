//! The puzzles of a run and their batching.

use crate::model::{ModelOptions, SudokuModel};
use datasets::sudoku::{self, Difficulty, Puzzle};
use plugin_api::candle::{Device, Tensor};
use plugin_api::candle_nn::VarBuilder;
use plugin_api::{
    config_error, Batch, Config, Footprint, MetricSpec, PluginError, Progress, Result, Task, TaskInfo, TaskModel,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::path::Path;

pub const CELLS: usize = 81;

pub struct SudokuData {
    train: Vec<Puzzle>,
    eval: Vec<Puzzle>,
    seed: u64,
    augment: bool,
    options: ModelOptions,
}

impl SudokuData {
    pub fn new(cfg: &Config, seed: u64, progress: Progress<'_>) -> Result<Self> {
        let difficulty: Difficulty = cfg.str("difficulty")?.parse().map_err(|e| config_error(format!("{e}")))?;
        let generate = |what: &str, seed: u64, count: usize| {
            sudoku::generate_cached(seed, count, difficulty, &|done| progress.report(what, done as u64, count as u64))
        };
        let train = match cfg.str("train_csv")? {
            "" => generate("training puzzles", seed, cfg.usize("train_puzzles")?),
            path => load(path)?,
        };
        let eval = match cfg.str("eval_csv")? {
            "" => generate("evaluation puzzles", cfg.i64("eval_seed")? as u64, cfg.usize("eval_puzzles")?),
            path => load(path)?,
        };
        Ok(SudokuData { train, eval, seed, augment: cfg.bool("augment")?, options: model_options(cfg, seed)? })
    }

    /// Checks the difficulty and reads the CSV files, if any, so that a bad path or a
    /// malformed row is reported before a run is stored.
    pub fn validate(cfg: &Config) -> Result<()> {
        cfg.str("difficulty")?.parse::<Difficulty>().map_err(|e| config_error(format!("{e}")))?;
        for key in ["train_csv", "eval_csv"] {
            let path = cfg.str(key)?;
            if !path.is_empty() {
                load(path).map_err(|e| config_error(format!("{key}: {e}")))?;
            }
        }
        Ok(())
    }

    /// The model at `width` built into `vb`, the 81 cells, and the puzzles' bytes (a CSV's
    /// file size bounds its puzzles' size in memory).
    pub fn footprint(cfg: &Config, vb: VarBuilder, width: usize) -> Result<Footprint> {
        SudokuModel::new(vb, width, model_options(cfg, 0)?)?;
        let split_bytes = |csv_key: &str, count_key: &str| -> Result<u64> {
            Ok(match cfg.str(csv_key)? {
                "" => (cfg.usize(count_key)? * std::mem::size_of::<Puzzle>()) as u64,
                path => std::fs::metadata(path).map(|m| m.len()).unwrap_or(0),
            })
        };
        Ok(Footprint {
            seq_len: CELLS,
            data_bytes: split_bytes("train_csv", "train_puzzles")? + split_bytes("eval_csv", "eval_puzzles")?,
        })
    }

    #[cfg(test)]
    pub fn from_puzzles(train: Vec<Puzzle>, eval: Vec<Puzzle>, seed: u64) -> Self {
        SudokuData {
            train,
            eval,
            seed,
            augment: true,
            options: ModelOptions { init_std: 0.02, factored_positions: false, norm_eps: 1e-6, dropout: 0.0, seed },
        }
    }
}

fn load(path: &str) -> Result<Vec<Puzzle>> {
    sudoku::load_csv(Path::new(path)).map_err(|e| PluginError::Data(e.to_string()))
}

/// Inputs (digits, 0 = blank), targets (digit - 1) and the blank mask of some puzzles.
pub fn batch<'a>(puzzles: impl ExactSizeIterator<Item = &'a Puzzle>, device: &Device) -> Result<Batch> {
    let size = puzzles.len();
    let mut inputs = Vec::with_capacity(size * CELLS);
    let mut targets = Vec::with_capacity(size * CELLS);
    let mut mask = Vec::with_capacity(size * CELLS);
    for p in puzzles {
        for (given, answer) in p.puzzle.iter().zip(p.solution.iter()) {
            inputs.push(*given as u32);
            targets.push(answer.saturating_sub(1) as u32);
            mask.push(if *given == 0 { 1f32 } else { 0f32 });
        }
    }
    Ok(Batch {
        inputs: Tensor::from_vec(inputs, (size, CELLS), device)?,
        targets: Tensor::from_vec(targets, (size, CELLS), device)?,
        mask: Some(Tensor::from_vec(mask, (size, CELLS), device)?),
        size,
    })
}

/// The model's options from the task's configuration, dropout masks drawn from `seed`.
fn model_options(cfg: &Config, seed: u64) -> Result<ModelOptions> {
    Ok(ModelOptions {
        init_std: cfg.f64("init_std")?,
        factored_positions: cfg.str("positions")? == "row_col_box",
        norm_eps: cfg.f64("norm_eps")?,
        dropout: cfg.f64("dropout")?,
        seed,
    })
}

impl Task for SudokuData {
    fn info(&self) -> Result<TaskInfo> {
        Ok(TaskInfo {
            seq_len: CELLS,
            causal: false,
            // cell_acc first: it is the headline; board_acc stays 0 until a model is nearly exact.
            metrics: vec![MetricSpec::higher("cell_acc"), MetricSpec::higher("board_acc"), MetricSpec::lower("loss")],
            train_examples: Some(self.train.len()),
            eval_examples: self.eval.len(),
        })
    }

    /// Puzzles drawn with replacement by an RNG seeded from (run seed, step), each under a
    /// fresh random symmetry when augmenting: the batch depends on nothing else.
    fn train_batch(&self, step: u64, batch_size: usize, device: &Device) -> Result<Batch> {
        if self.train.is_empty() {
            return Err(PluginError::Data("the training set is empty".into()));
        }
        let mut rng = StdRng::seed_from_u64(self.seed ^ step.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let picked: Vec<Puzzle> = (0..batch_size)
            .map(|_| {
                let p = &self.train[rng.random_range(0..self.train.len())];
                if self.augment {
                    sudoku::augment(p, &mut rng)
                } else {
                    p.clone()
                }
            })
            .collect();
        batch(picked.iter(), device)
    }

    fn eval_batches(&self, batch_size: usize, max_examples: usize, device: &Device) -> Result<Vec<Batch>> {
        let n = self.eval.len().min(max_examples);
        self.eval[..n].chunks(batch_size.max(1)).map(|chunk| batch(chunk.iter(), device)).collect()
    }

    fn build_model(&self, vb: VarBuilder, width: usize) -> Result<Box<dyn TaskModel>> {
        Ok(Box::new(SudokuModel::new(vb, width, self.options)?))
    }
}
