//! Random Sudoku symmetries for data augmentation.

use super::{Grid, Puzzle};
use rand::seq::SliceRandom;
use rand::Rng;

/// Applies one random validity-preserving symmetry to both grids of `p`.
///
/// The symmetry combines a relabelling of the digits 1..=9 (blanks stay blank), a permutation
/// of the three bands and of the rows inside each band, the same for stacks and columns, and
/// an optional transpose. Each of these maps rows, columns and boxes onto rows, columns and
/// boxes, so a valid solution stays valid, the number of solutions of the puzzle is unchanged
/// and the number of givens is preserved.
pub fn augment<R: Rng + ?Sized>(p: &Puzzle, rng: &mut R) -> Puzzle {
    let mut digits: [u8; 10] = std::array::from_fn(|d| d as u8);
    digits[1..].shuffle(rng);
    let rows = line_permutation(rng);
    let cols = line_permutation(rng);
    let transpose = rng.random_bool(0.5);

    let map = |g: &Grid| -> Grid {
        std::array::from_fn(|i| {
            let (r, c) = (i / 9, i % 9);
            let (r, c) = if transpose { (c, r) } else { (r, c) };
            // Values above 9 cannot occur in a valid puzzle; pass them through untouched
            // rather than panic on the lookup.
            let v = g[rows[r] * 9 + cols[c]];
            digits.get(v as usize).copied().unwrap_or(v)
        })
    };
    Puzzle { puzzle: map(&p.puzzle), solution: map(&p.solution) }
}

/// A random permutation of 0..9 that keeps bands (groups of three lines) together: the
/// bands are shuffled, then the lines inside each band.
fn line_permutation<R: Rng + ?Sized>(rng: &mut R) -> [usize; 9] {
    let mut bands = [0usize, 1, 2];
    bands.shuffle(rng);
    let mut out = [0usize; 9];
    for (b, &band) in bands.iter().enumerate() {
        let mut within = [0usize, 1, 2];
        within.shuffle(rng);
        for (k, &w) in within.iter().enumerate() {
            out[b * 3 + k] = band * 3 + w;
        }
    }
    out
}
