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

/// [`generate`], calling `progress(done)` after every `REPORT_EVERY` puzzles, so a long
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

/// The generator's output version, part of cached files' names: raise it whenever a change
/// to the generator changes the puzzles a seed gives, so no run reads the old ones.
const GENERATOR_VERSION: u32 = 1;

/// [`generate_reporting`] through the generated-data cache ([`crate::generated_cache`]): the
/// puzzles of these parameters and seed are read from their file when one is there, else
/// generated and stored. Either way they equal what [`generate`] gives.
pub fn generate_cached(seed: u64, count: usize, difficulty: Difficulty, progress: &dyn Fn(usize)) -> Vec<Puzzle> {
    let Some(dir) = crate::generated_cache::dir() else {
        return generate_reporting(seed, count, difficulty, progress);
    };
    let name = format!("sudoku-{difficulty}-{count}-{seed}-v{GENERATOR_VERSION}.bin");
    if let Some(puzzles) = crate::generated_cache::read(&dir, &name).and_then(|bytes| decode(&bytes, count)) {
        progress(count);
        return puzzles;
    }
    let puzzles = generate_reporting(seed, count, difficulty, progress);
    crate::generated_cache::write(&dir, &name, &encode(&puzzles));
    puzzles
}

/// Puzzle then solution of each, 162 bytes a puzzle.
fn encode(puzzles: &[Puzzle]) -> Vec<u8> {
    puzzles.iter().flat_map(|p| p.puzzle.iter().chain(p.solution.iter()).copied()).collect()
}

/// The `count` puzzles of [`encode`]'s bytes, or `None` if they are not that.
fn decode(bytes: &[u8], count: usize) -> Option<Vec<Puzzle>> {
    if bytes.len() != count * 162 || bytes.iter().any(|&v| v > 9) {
        return None;
    }
    bytes
        .chunks_exact(162)
        .map(|c| Some(Puzzle { puzzle: c[..81].try_into().ok()?, solution: c[81..].try_into().ok()? }))
        .collect()
}

#[cfg(test)]
mod cache_tests {
    use super::*;

    #[test]
    fn cached_puzzles_equal_generated_ones() {
        let tmp = tempfile::Builder::new().prefix("wb-sudoku-cache-").tempdir().unwrap();
        let dir = tmp.path().join("cache");
        // The cache folder comes from the environment; this test alone in this crate sets it.
        std::env::set_var("WORKBENCH_CACHE", &dir);
        let fresh = generate(7, 20, Difficulty::Hard);
        assert_eq!(generate_cached(7, 20, Difficulty::Hard, &|_| {}), fresh, "first call: generated");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1, "and stored");
        assert_eq!(generate_cached(7, 20, Difficulty::Hard, &|_| {}), fresh, "second call: read");
        assert_ne!(generate_cached(8, 20, Difficulty::Hard, &|_| {}), fresh, "another seed, another file");
        assert_eq!(decode(&encode(&fresh), 19), None, "a count that does not match");
        std::env::remove_var("WORKBENCH_CACHE");
    }
}
