//! Sudoku puzzles: a seeded generator, a fast solver, symmetry augmentation and a CSV loader.
//!
//! # How puzzles are generated
//!
//! [`generate`] first fills a random complete grid by randomised backtracking, then visits the
//! 81 cells in a random order and blanks each one, keeping the blank only if the puzzle still
//! has exactly one solution. Blanks are never re-tried, so the result depends only on the seed.
//!
//! * [`Difficulty::Hard`] tries every cell once. The result is *minimal*: putting back any blank
//!   is the only way to keep it unique, so no clue is redundant. Minimal puzzles typically keep
//!   low-to-mid 20s givens, the regime of the 17–34-givens "hard" set of Palm et al. (Recurrent
//!   Relational Networks), where many cells can only be settled by reasoning that chains
//!   through other blanks rather than by looking at one row, column or box.
//! * [`Difficulty::Easy`] stops as soon as the givens reach a target drawn uniformly from
//!   30..=45; with that many clues most blanks are forced directly by their neighbours. If
//!   uniqueness stops the removal above the target, the puzzle keeps the clues it has.
//!
//! Generation is reproducible: puzzle `i` uses its own RNG seeded from `(seed, i)`, so the
//! output is the same on any machine and any number of threads, and puzzles are built in
//! parallel with rayon.

mod augment;
mod csv;
mod generate;
mod solve;

use std::fmt;
use std::str::FromStr;

pub use augment::augment;
pub use csv::{load_csv, parse_csv, CsvError};
pub use generate::{generate, generate_cached, generate_reporting};

/// A 9×9 grid in row-major order: cell `r * 9 + c`, `0` for a blank, `1..=9` for a digit.
pub type Grid = [u8; 81];

/// A puzzle together with its (unique) solution.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Puzzle {
    /// The clues; blanks are `0`.
    pub puzzle: Grid,
    /// The completed grid; it agrees with every clue of `puzzle`.
    pub solution: Grid,
}

impl Puzzle {
    /// The number of filled cells (clues) in the puzzle.
    pub fn givens(&self) -> usize {
        self.puzzle.iter().filter(|&&d| d != 0).count()
    }
}

/// How many clues [`generate`] removes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Difficulty {
    /// Minimal puzzles: every clue that can go without losing uniqueness is removed.
    Hard,
    /// Clue removal stops at a target between 30 and 45 givens.
    Easy,
}

impl Difficulty {
    /// The names accepted by [`FromStr`], in the order they are listed in error messages.
    pub const NAMES: [&'static str; 2] = ["hard", "easy"];
}

impl fmt::Display for Difficulty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Difficulty::Hard => "hard",
            Difficulty::Easy => "easy",
        })
    }
}

/// The error of parsing a [`Difficulty`] from an unknown name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown Sudoku difficulty `{0}`; choose one of: hard, easy")]
pub struct ParseDifficultyError(pub String);

impl FromStr for Difficulty {
    type Err = ParseDifficultyError;

    /// Parses `hard` or `easy` (ignoring case and surrounding spaces).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "hard" => Ok(Difficulty::Hard),
            "easy" => Ok(Difficulty::Easy),
            _ => Err(ParseDifficultyError(s.to_string())),
        }
    }
}

/// Some solution of `grid`, or `None` if it has none (including grids whose givens clash or
/// that hold values above 9). When the grid has several solutions, which one is unspecified.
pub fn solve(grid: &Grid) -> Option<Grid> {
    solve::count_with_first(grid, 1).1
}

/// The number of solutions of `grid`, counting no further than `limit` (so
/// `count_solutions(g, 2) == 1` tests uniqueness cheaply). Invalid grids have 0 solutions.
pub fn count_solutions(grid: &Grid, limit: usize) -> usize {
    solve::count_with_first(grid, limit).0
}

/// Whether `solution` is a complete, consistent grid (every row, column and box holds 1..=9
/// once) that agrees with every clue of `puzzle`.
pub fn is_valid_solution(puzzle: &Grid, solution: &Grid) -> bool {
    solution_problem(puzzle, solution).is_none()
}

/// Why `solution` does not solve `puzzle`, as a phrase for error messages, or `None` if it does.
pub(crate) fn solution_problem(puzzle: &Grid, solution: &Grid) -> Option<String> {
    for (i, &d) in solution.iter().enumerate() {
        if !(1..=9).contains(&d) {
            return Some(format!("the solution has no digit at row {} column {}", i / 9 + 1, i % 9 + 1));
        }
    }
    /// Maps (unit index, position in unit) to a cell index.
    type CellOf = fn(usize, usize) -> usize;
    let units: [(&str, CellOf); 3] = [
        ("row", |u, k| u * 9 + k),
        ("column", |u, k| k * 9 + u),
        ("box", |u, k| (u / 3) * 27 + (u % 3) * 3 + (k / 3) * 9 + k % 3),
    ];
    for (name, cell) in units {
        for u in 0..9 {
            let mut seen = 0u16;
            for k in 0..9 {
                let d = solution[cell(u, k)];
                if seen & (1 << d) != 0 {
                    return Some(format!("{name} {} of the solution contains {d} twice", u + 1));
                }
                seen |= 1 << d;
            }
        }
    }
    for (i, (&p, &s)) in puzzle.iter().zip(solution).enumerate() {
        if p != 0 && p != s {
            return Some(format!(
                "the puzzle gives {p} at row {} column {} but the solution has {s} there",
                i / 9 + 1,
                i % 9 + 1
            ));
        }
    }
    None
}
