//! The seeded, parallel puzzle generator (see the module docs of [`super`]).

use super::solve::{has_other_solution, random_full_grid};
use super::{Difficulty, Puzzle};
use crate::seeding::item_seed;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;

/// `count` puzzles of the given difficulty, reproducible from `seed`.
///
/// Puzzle `i` depends only on `(seed, i, difficulty)`: the first `n` puzzles of a larger
/// request equal a request for `n`, and the thread count does not matter. Every puzzle has
/// exactly one solution, stored in [`Puzzle::solution`].
pub fn generate(seed: u64, count: usize, difficulty: Difficulty) -> Vec<Puzzle> {
    generate_reporting(seed, count, difficulty, &|_| {})
}

/// Puzzles made between two progress reports.
const REPORT_EVERY: usize = 8192;

/// [`generate`], calling `progress(done)` after every [`REPORT_EVERY`] puzzles, so a long
/// generation can show how far it is.
pub fn generate_reporting(seed: u64, count: usize, difficulty: Difficulty, progress: &dyn Fn(usize)) -> Vec<Puzzle> {
    let mut puzzles = Vec::with_capacity(count);
    for start in (0..count).step_by(REPORT_EVERY) {
        let end = (start + REPORT_EVERY).min(count);
        puzzles.par_extend((start..end).into_par_iter().map(|index| {
            // ChaCha8 rather than `StdRng`: its output is specified and fixed, while `StdRng`
            // may change algorithm between rand releases and would silently change the data.
            let mut rng = ChaCha8Rng::seed_from_u64(item_seed(seed, index as u64));
            generate_one(&mut rng, difficulty)
        }));
        progress(end);
    }
    puzzles
}

fn generate_one<R: Rng + ?Sized>(rng: &mut R, difficulty: Difficulty) -> Puzzle {
    let solution = random_full_grid(rng);
    let target = match difficulty {
        Difficulty::Hard => 0,
        Difficulty::Easy => rng.random_range(30..=45),
    };
    let mut order: [u8; 81] = std::array::from_fn(|i| i as u8);
    order.shuffle(rng);

    let mut puzzle = solution;
    let mut givens = 81;
    for &cell in &order {
        if givens <= target {
            break;
        }
        let cell = cell as usize;
        let digit = puzzle[cell];
        puzzle[cell] = 0;
        // Equivalent to `count_solutions(&puzzle, 2) == 1` here, since the puzzle before the
        // removal was unique; see `has_other_solution`.
        if has_other_solution(&puzzle, cell, digit) {
            puzzle[cell] = digit;
        } else {
            givens -= 1;
        }
    }
    Puzzle { puzzle, solution }
}
