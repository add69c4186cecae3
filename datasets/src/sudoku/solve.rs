//! Bitmask backtracking solver shared by the generator and the public solving functions.
//!
//! Each row, column and box keeps a 9-bit mask of the digits already placed, so the candidates
//! of a cell are one OR and one NOT. The search always branches on the empty cell with the
//! fewest candidates: that turns forced cells into straight-line steps and keeps the tree small
//! enough that the generator can afford a uniqueness check for every clue it tries to remove.

use super::Grid;
use rand::seq::SliceRandom;
use rand::Rng;

/// Bits 1..=9 set: every digit is still possible.
const ALL: u16 = 0b11_1111_1110;

/// Row, column and box of each cell, precomputed because the search looks them up constantly.
const ROW: [u8; 81] = {
    let mut t = [0u8; 81];
    let mut i = 0;
    while i < 81 {
        t[i] = (i / 9) as u8;
        i += 1;
    }
    t
};
const COL: [u8; 81] = {
    let mut t = [0u8; 81];
    let mut i = 0;
    while i < 81 {
        t[i] = (i % 9) as u8;
        i += 1;
    }
    t
};
const BOX: [u8; 81] = {
    let mut t = [0u8; 81];
    let mut i = 0;
    while i < 81 {
        t[i] = ((i / 27) * 3 + (i % 9) / 3) as u8;
        i += 1;
    }
    t
};

/// A partially filled grid with its used-digit masks and the list of cells still to fill.
pub(crate) struct Board {
    cells: Grid,
    rows: [u16; 9],
    cols: [u16; 9],
    boxes: [u16; 9],
    /// Empty cells; `empties[..depth]` are filled during a search, the rest are open.
    empties: [u8; 81],
    n_empty: usize,
    /// One cell may have a digit banned (see [`has_other_solution`]); 81 means none.
    forbid_cell: usize,
    forbid_mask: u16,
}

impl Board {
    /// Builds the board, or `None` when a cell holds a value above 9 or two givens clash.
    pub(crate) fn new(grid: &Grid) -> Option<Board> {
        let mut b = Board {
            cells: [0; 81],
            rows: [0; 9],
            cols: [0; 9],
            boxes: [0; 9],
            empties: [0; 81],
            n_empty: 0,
            forbid_cell: 81,
            forbid_mask: 0,
        };
        for (i, &d) in grid.iter().enumerate() {
            match d {
                0 => {
                    b.empties[b.n_empty] = i as u8;
                    b.n_empty += 1;
                }
                1..=9 => {
                    if b.candidates(i) & (1 << d) == 0 {
                        return None;
                    }
                    b.place(i, d);
                }
                _ => return None,
            }
        }
        Some(b)
    }

    #[inline(always)]
    fn candidates(&self, i: usize) -> u16 {
        let used = self.rows[ROW[i] as usize] | self.cols[COL[i] as usize] | self.boxes[BOX[i] as usize];
        let mut m = ALL & !used;
        if i == self.forbid_cell {
            m &= !self.forbid_mask;
        }
        m
    }

    #[inline(always)]
    fn place(&mut self, i: usize, d: u8) {
        let bit = 1u16 << d;
        self.cells[i] = d;
        self.rows[ROW[i] as usize] |= bit;
        self.cols[COL[i] as usize] |= bit;
        self.boxes[BOX[i] as usize] |= bit;
    }

    #[inline(always)]
    fn unplace(&mut self, i: usize, d: u8) {
        let bit = !(1u16 << d);
        self.cells[i] = 0;
        self.rows[ROW[i] as usize] &= bit;
        self.cols[COL[i] as usize] &= bit;
        self.boxes[BOX[i] as usize] &= bit;
    }

    /// Moves the open cell with the fewest candidates to position `depth` and returns its
    /// candidate mask (0 means a dead end: some open cell has no candidate left).
    #[inline(always)]
    fn pick(&mut self, depth: usize) -> u16 {
        let mut best = depth;
        let mut best_mask = 0u16;
        let mut best_count = u32::MAX;
        for k in depth..self.n_empty {
            let m = self.candidates(self.empties[k] as usize);
            let c = m.count_ones();
            if c < best_count {
                best = k;
                best_mask = m;
                best_count = c;
                if c <= 1 {
                    break; // a forced cell (or a contradiction) cannot be beaten
                }
            }
        }
        self.empties.swap(depth, best);
        best_mask
    }

    /// Counts completions up to `limit`, remembering the first one in `first`.
    fn count(&mut self, depth: usize, limit: usize, found: &mut usize, first: &mut Option<Grid>) {
        if depth == self.n_empty {
            *found += 1;
            if first.is_none() {
                *first = Some(self.cells);
            }
            return;
        }
        let mut mask = self.pick(depth);
        let cell = self.empties[depth] as usize;
        while mask != 0 {
            let d = mask.trailing_zeros() as u8;
            mask &= mask - 1;
            self.place(cell, d);
            self.count(depth + 1, limit, found, first);
            self.unplace(cell, d);
            if *found >= limit {
                return;
            }
        }
    }

    /// Finds one completion, trying digits in random order; leaves it in `self.cells`.
    fn fill_random<R: Rng + ?Sized>(&mut self, depth: usize, rng: &mut R) -> bool {
        if depth == self.n_empty {
            return true;
        }
        let mut mask = self.pick(depth);
        let cell = self.empties[depth] as usize;
        let mut digits = [0u8; 9];
        let mut n = 0;
        while mask != 0 {
            digits[n] = mask.trailing_zeros() as u8;
            mask &= mask - 1;
            n += 1;
        }
        digits[..n].shuffle(rng);
        for &d in &digits[..n] {
            self.place(cell, d);
            if self.fill_random(depth + 1, rng) {
                return true;
            }
            self.unplace(cell, d);
        }
        false
    }
}

/// Counts solutions of `grid`, stopping at `limit`; also returns the first solution found.
pub(crate) fn count_with_first(grid: &Grid, limit: usize) -> (usize, Option<Grid>) {
    if limit == 0 {
        return (0, None);
    }
    let Some(mut board) = Board::new(grid) else {
        return (0, None);
    };
    let mut found = 0;
    let mut first = None;
    board.count(0, limit, &mut found, &mut first);
    (found, first)
}

/// Whether `grid` (which has a known solution with `digit` at the blank `cell`) has another
/// solution. Any second solution must differ from the known one somewhere; if it agreed at
/// `cell` it would also solve the grid with `digit` restored there, which is unique by
/// construction in the generator. So it suffices to look for one solution with `digit`
/// banned at `cell`: that is exactly `count_solutions(grid, 2) == 2`, but it stops at the
/// first witness instead of re-deriving the known solution first.
pub(crate) fn has_other_solution(grid: &Grid, cell: usize, digit: u8) -> bool {
    let Some(mut board) = Board::new(grid) else {
        return false;
    };
    board.forbid_cell = cell;
    board.forbid_mask = 1 << digit;
    let mut found = 0;
    let mut first = None;
    board.count(0, 1, &mut found, &mut first);
    found > 0
}

/// A uniformly shuffled search from the empty grid: a random complete, valid grid.
pub(crate) fn random_full_grid<R: Rng + ?Sized>(rng: &mut R) -> Grid {
    let mut board = Board::new(&[0; 81]).expect("the empty grid is consistent");
    // Shuffling the open cells randomises how ties between equally constrained cells break.
    board.empties[..81].shuffle(rng);
    let filled = board.fill_random(0, rng);
    debug_assert!(filled, "the empty grid always has a completion");
    board.cells
}
