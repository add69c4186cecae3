//! Sudoku as a task plugin (seed 000 §3.1, notes-hyperset.md §3.1 and §9).
//!
//! 81 tokens with vocabulary 10 (0 = blank), a learnable positional embedding, and an
//! RMSNorm + Linear head predicting the 9 digits; cross-entropy on blank cells only.
//! Metrics: board accuracy (every blank right) and cell accuracy on blanks.

mod data;
mod model;

use data::SudokuData;
use plugin_api::{export_plugin, Declaration, ParamSpec, Result};

fn params() -> Vec<ParamSpec> {
    vec![
        ParamSpec::choice("difficulty", "hard", &["hard", "easy"], "generated puzzles: hard (minimal, ~17-30 givens) or easy (30-45 givens)"),
        ParamSpec::int("train_puzzles", 9000, 1, 10_000_000, "generated training puzzles (the seeds train on 9k)"),
        ParamSpec::int("eval_puzzles", 1000, 1, 100_000, "generated evaluation puzzles (the seeds evaluate on 1k)"),
        ParamSpec::int("eval_seed", 20_240_601, 0, i64::MAX, "seed of the evaluation set, shared by all runs so they compare"),
        ParamSpec::bool("augment", true, "apply a random validity-preserving symmetry to each training puzzle"),
        ParamSpec::text("train_csv", "", "puzzle,solution CSV to train on instead of generated puzzles"),
        ParamSpec::text("eval_csv", "", "puzzle,solution CSV to evaluate on instead of generated puzzles"),
        ParamSpec::choice(
            "positions",
            "cell",
            &["cell", "row_col_box"],
            "learnable positional embedding: one vector per cell (the seeds'), or the sum of row, column and box vectors",
        ),
        ParamSpec::float("init_std", 0.02, 0.0, 10.0, "standard deviation of the N(0, s^2) init of embeddings and head"),
        ParamSpec::float("norm_eps", 1e-6, 1e-12, 1e-2, "epsilon of the head's RMSNorm (PyTorch's default: 1.1920929e-7)"),
        ParamSpec::float("dropout", 0.0, 0.0, 0.95, "dropout probability on the embedded tokens in training (the published models: 0.1)"),
    ]
}

fn declare() -> Result<Declaration> {
    Ok(Declaration::task_reporting(
        "sudoku",
        env!("CARGO_PKG_VERSION"),
        "Sudoku: fill the blank cells; generated puzzles with a unique solution, or a CSV",
        params(),
        SudokuData::new,
    )
    .with_validator(SudokuData::validate)
    .with_footprint(SudokuData::footprint))
}

export_plugin!(declare);

#[cfg(test)]
mod tests;
