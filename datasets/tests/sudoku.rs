//! Tests of the Sudoku generator, solver, augmentation and CSV loader.
//!
//! Uniqueness is checked with an independent solver written here (plain arrays, no bitmasks,
//! no code shared with the crate), so a bug in the crate's solver cannot hide itself.

use datasets::sudoku::{
    augment, count_solutions, generate, is_valid_solution, load_csv, parse_csv, solve, CsvError, Difficulty, Grid,
    Puzzle,
};
use rand::SeedableRng;
use std::io::Cursor;
use tempfile::TempDir;

// ---------------------------------------------------------------- independent reference solver

/// Whether digit `d` can go at (r, c) without repeating in its row, column or box.
fn fits(g: &[u8; 81], r: usize, c: usize, d: u8) -> bool {
    for k in 0..9 {
        if g[r * 9 + k] == d || g[k * 9 + c] == d {
            return false;
        }
    }
    let (br, bc) = (r / 3 * 3, c / 3 * 3);
    for rr in br..br + 3 {
        for cc in bc..bc + 3 {
            if g[rr * 9 + cc] == d {
                return false;
            }
        }
    }
    true
}

/// Plain backtracking; branches on the blank with the fewest fitting digits (found by scanning)
/// so it stays fast enough in a debug build. Counts solutions up to 2, keeping the first.
fn ref_count(g: &mut [u8; 81], count: &mut usize, first: &mut Option<[u8; 81]>) {
    // (cell, fitting digits, how many)
    let mut best: Option<(usize, [bool; 10], usize)> = None;
    for i in 0..81 {
        if g[i] != 0 {
            continue;
        }
        let mut opts = [false; 10];
        let mut n = 0;
        for d in 1..=9u8 {
            if fits(g, i / 9, i % 9, d) {
                opts[d as usize] = true;
                n += 1;
            }
        }
        if best.is_none_or(|(_, _, m)| n < m) {
            best = Some((i, opts, n));
            if n <= 1 {
                break;
            }
        }
    }
    let Some((i, opts, _)) = best else {
        *count += 1;
        if first.is_none() {
            *first = Some(*g);
        }
        return;
    };
    for d in 1..=9u8 {
        if !opts[d as usize] {
            continue;
        }
        g[i] = d;
        ref_count(g, count, first);
        g[i] = 0;
        if *count >= 2 {
            return;
        }
    }
}

/// (number of solutions capped at 2, first solution) by the reference solver.
fn ref_solutions(puzzle: &Grid) -> (usize, Option<Grid>) {
    let mut g = *puzzle;
    // The givens themselves must not clash.
    for i in 0..81 {
        if g[i] != 0 {
            let d = g[i];
            g[i] = 0;
            let ok = fits(&g, i / 9, i % 9, d);
            g[i] = d;
            if !ok {
                return (0, None);
            }
        }
    }
    let mut count = 0;
    let mut first = None;
    ref_count(&mut g, &mut count, &mut first);
    (count, first)
}

/// Independent validity check of a completed grid against its puzzle.
fn ref_valid(puzzle: &Grid, solution: &Grid) -> bool {
    let mut g = *solution;
    for i in 0..81 {
        let d = g[i];
        if !(1..=9).contains(&d) || (puzzle[i] != 0 && puzzle[i] != d) {
            return false;
        }
        g[i] = 0;
        let ok = fits(&g, i / 9, i % 9, d);
        g[i] = d;
        if !ok {
            return false;
        }
    }
    true
}

fn assert_unique_and_correct(p: &Puzzle, what: &str) {
    let (n, sol) = ref_solutions(&p.puzzle);
    assert_eq!(n, 1, "{what}: reference solver finds {n} solutions");
    assert_eq!(sol.unwrap(), p.solution, "{what}: stored solution differs");
    assert!(ref_valid(&p.puzzle, &p.solution), "{what}: stored solution invalid");
    assert!(is_valid_solution(&p.puzzle, &p.solution), "{what}: is_valid_solution says no");
}

// ---------------------------------------------------------------- generator

#[test]
fn hard_puzzles_are_unique_minimal_and_low_in_givens() {
    let puzzles = generate(1, 50, Difficulty::Hard);
    assert_eq!(puzzles.len(), 50);
    let mut total = 0;
    for (k, p) in puzzles.iter().enumerate() {
        assert_unique_and_correct(p, &format!("hard #{k}"));
        let g = p.givens();
        assert!((17..=34).contains(&g), "hard #{k} has {g} givens");
        total += g;
        // Minimality: removing any single remaining given breaks uniqueness (checked on a
        // subset to keep the debug-build test quick).
        for i in (0..81).filter(|&i| k < 10 && p.puzzle[i] != 0) {
            let mut q = p.puzzle;
            q[i] = 0;
            assert_eq!(ref_solutions(&q).0, 2, "hard #{k}: given at {i} is redundant");
        }
    }
    let mean = total as f64 / puzzles.len() as f64;
    assert!(mean < 30.0, "mean hard givens {mean}");
}

#[test]
fn easy_puzzles_are_unique_with_30_to_45_givens() {
    let puzzles = generate(2, 50, Difficulty::Easy);
    assert_eq!(puzzles.len(), 50);
    let mut distinct = std::collections::BTreeSet::new();
    for (k, p) in puzzles.iter().enumerate() {
        assert_unique_and_correct(p, &format!("easy #{k}"));
        let g = p.givens();
        assert!((30..=50).contains(&g), "easy #{k} has {g} givens");
        distinct.insert(g);
    }
    // Targets are drawn from 30..=45, so 50 puzzles should not all share one count.
    assert!(distinct.len() >= 5, "too few distinct givens counts: {distinct:?}");
}

#[test]
fn generation_is_deterministic_and_seed_dependent() {
    for diff in [Difficulty::Hard, Difficulty::Easy] {
        let a = generate(7, 12, diff);
        let b = generate(7, 12, diff);
        assert_eq!(a, b, "{diff}: same seed differs");
        let c = generate(8, 12, diff);
        assert_ne!(a, c, "{diff}: different seeds agree");
        // Puzzles differ from each other within one run too.
        assert!(a.windows(2).all(|w| w[0] != w[1]));
        // A prefix of a longer run is the shorter run.
        assert_eq!(generate(7, 5, diff)[..], a[..5]);
    }
    assert!(generate(3, 0, Difficulty::Hard).is_empty());
}

#[test]
fn generation_is_independent_of_thread_count() {
    let default = generate(11, 16, Difficulty::Hard);
    for threads in [1, 3] {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        let pooled = pool.install(|| generate(11, 16, Difficulty::Hard));
        assert_eq!(pooled, default, "{threads} threads");
    }
}

// ---------------------------------------------------------------- solver API

#[test]
fn solver_api_agrees_with_reference() {
    for p in generate(5, 10, Difficulty::Hard) {
        assert_eq!(count_solutions(&p.puzzle, 2), 1);
        assert_eq!(count_solutions(&p.puzzle, 0), 0);
        assert_eq!(solve(&p.puzzle), Some(p.solution));
        // Dropping a given of a minimal puzzle gives several solutions.
        let i = (0..81).find(|&i| p.puzzle[i] != 0).unwrap();
        let mut q = p.puzzle;
        q[i] = 0;
        assert_eq!(count_solutions(&q, 2), 2);
        assert_eq!(count_solutions(&q, 1), 1);
        let s = solve(&q).unwrap();
        assert!(ref_valid(&q, &s));
    }
    // The empty grid has many solutions; the limit is respected.
    assert_eq!(count_solutions(&[0; 81], 5), 5);
    assert!(ref_valid(&[0; 81], &solve(&[0; 81]).unwrap()));
    // Clashing givens and out-of-range values: no solution, no panic.
    let mut clash = [0u8; 81];
    clash[0] = 4;
    clash[8] = 4;
    assert_eq!(count_solutions(&clash, 2), 0);
    assert_eq!(solve(&clash), None);
    let mut bad = [0u8; 81];
    bad[40] = 12;
    assert_eq!(count_solutions(&bad, 2), 0);
    // A consistent-looking but unsolvable grid: row 0 needs a 9 at (0,8), column 8 has one.
    let mut dead = [0u8; 81];
    dead[..8].copy_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
    dead[9 * 4 + 8] = 9;
    assert_eq!(ref_solutions(&dead).0, 0);
    assert_eq!(count_solutions(&dead, 2), 0);
    assert_eq!(solve(&dead), None);
}

#[test]
fn is_valid_solution_rejects_bad_grids() {
    let p = generate(9, 1, Difficulty::Easy).remove(0);
    assert!(is_valid_solution(&p.puzzle, &p.solution));
    assert!(is_valid_solution(&[0; 81], &p.solution));
    // A blank in the solution.
    let mut s = p.solution;
    s[10] = 0;
    assert!(!is_valid_solution(&p.puzzle, &s));
    // Swapping two different cells of a row breaks the columns.
    let mut s = p.solution;
    s.swap(0, 1);
    assert!(!is_valid_solution(&[0; 81], &s));
    // Disagreeing with a given.
    let i = (0..81).find(|&i| p.puzzle[i] != 0).unwrap();
    let mut q = p.puzzle;
    q[i] = q[i] % 9 + 1;
    assert!(!is_valid_solution(&q, &p.solution));
    // Rows and columns fine, boxes wrong: the cyclic Latin square.
    let latin: Grid = std::array::from_fn(|i| ((i / 9 + i % 9) % 9 + 1) as u8);
    assert!(!is_valid_solution(&[0; 81], &latin));
}

#[test]
fn difficulty_parses_and_displays() {
    assert_eq!("hard".parse::<Difficulty>().unwrap(), Difficulty::Hard);
    assert_eq!("Easy".parse::<Difficulty>().unwrap(), Difficulty::Easy);
    assert_eq!(Difficulty::Hard.to_string(), "hard");
    assert_eq!(Difficulty::Easy.to_string(), "easy");
    let err = "medium".parse::<Difficulty>().unwrap_err().to_string();
    assert!(err.contains("medium") && err.contains("hard") && err.contains("easy"), "{err}");
}

// ---------------------------------------------------------------- augmentation

#[test]
fn augment_preserves_uniqueness_givens_and_validity() {
    let puzzles = generate(21, 8, Difficulty::Hard);
    let mut rng = rand::rngs::StdRng::seed_from_u64(99);
    let mut changed = 0;
    let mut total = 0;
    for (k, p) in puzzles.iter().enumerate() {
        for _ in 0..5 {
            let a = augment(p, &mut rng);
            assert_unique_and_correct(&a, &format!("augmented #{k}"));
            assert_eq!(a.givens(), p.givens());
            // Blanks map to blanks: the augmented solution agrees with its own puzzle only.
            assert_eq!(a.puzzle.iter().filter(|&&d| d == 0).count(), 81 - p.givens());
            total += 1;
            if a != *p {
                changed += 1;
            }
        }
    }
    assert!(changed >= total - 1, "augment changed only {changed} of {total}");
}

#[test]
fn augment_differs_between_rng_draws() {
    let p = generate(4, 1, Difficulty::Easy).remove(0);
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let outs: Vec<Puzzle> = (0..20).map(|_| augment(&p, &mut rng)).collect();
    let distinct: std::collections::HashSet<_> = outs.iter().map(|q| q.puzzle).collect();
    assert!(distinct.len() >= 19, "only {} distinct of 20", distinct.len());
}

// ---------------------------------------------------------------- CSV

fn grid_str(g: &Grid, blank: char) -> String {
    g.iter().map(|&d| if d == 0 { blank } else { (b'0' + d) as char }).collect()
}

fn sample() -> Vec<Puzzle> {
    generate(31, 3, Difficulty::Easy)
}

fn parse(text: &str) -> Result<Vec<Puzzle>, CsvError> {
    parse_csv(Cursor::new(text.as_bytes().to_vec()), "mem.csv")
}

/// A per-test temporary directory with a unique name, removed when dropped.
fn temp_dir(tag: &str) -> TempDir {
    tempfile::Builder::new().prefix(&format!("datasets-sudoku-{tag}-")).tempdir().unwrap()
}

#[test]
fn csv_good_file_loads() {
    let ps = sample();
    let text = format!(
        "quizzes,solutions,rating\r\n{},{},1.5\r\n\r\n{},{}\r\n   \n{},{},0\n",
        grid_str(&ps[0].puzzle, '.'),
        grid_str(&ps[0].solution, '.'),
        grid_str(&ps[1].puzzle, '0'),
        grid_str(&ps[1].solution, '0'),
        grid_str(&ps[2].puzzle, '.'),
        grid_str(&ps[2].solution, '.'),
    );
    let dir = temp_dir("good");
    let path = dir.path().join("good.csv");
    std::fs::write(&path, &text).unwrap();
    let loaded = load_csv(&path).unwrap();
    assert_eq!(loaded, ps);
    // Also without a header, from memory, with a final line lacking its newline.
    let no_header = format!("{},{}", grid_str(&ps[1].puzzle, '0'), grid_str(&ps[1].solution, '0'));
    assert_eq!(parse(&no_header).unwrap(), vec![ps[1].clone()]);
    // A UTF-8 byte-order mark and quoted fields are tolerated.
    let quoted = format!(
        "\u{feff}puzzle,solution\n\"{}\", \"{}\"\n",
        grid_str(&ps[2].puzzle, '.'),
        grid_str(&ps[2].solution, '.')
    );
    assert_eq!(parse(&quoted).unwrap(), vec![ps[2].clone()]);
}

/// Builds a file whose line 4 is `bad` (line 1 is a header, 2 and 3 are good lines).
fn with_bad_line_4(bad: &str) -> String {
    let ps = sample();
    format!(
        "puzzle,solution\n{},{}\n{},{}\n{}\n{},{}\n",
        grid_str(&ps[0].puzzle, '.'),
        grid_str(&ps[0].solution, '.'),
        grid_str(&ps[1].puzzle, '.'),
        grid_str(&ps[1].solution, '.'),
        bad,
        grid_str(&ps[2].puzzle, '.'),
        grid_str(&ps[2].solution, '.'),
    )
}

fn err_of(text: &str) -> (CsvError, String) {
    let err = parse(text).expect_err("expected a CSV error");
    let msg = err.to_string();
    assert!(msg.contains("mem.csv"), "message lacks the source: {msg}");
    (err, msg)
}

#[test]
fn csv_wrong_field_count() {
    let p = &sample()[0];
    let (err, msg) = err_of(&with_bad_line_4(&grid_str(&p.puzzle, '.')));
    assert!(matches!(err, CsvError::FieldCount { line: 4, found: 1, .. }), "{err:?}");
    assert!(msg.contains("line 4"), "{msg}");
}

#[test]
fn csv_wrong_length() {
    let p = &sample()[0];
    let short = &grid_str(&p.puzzle, '.')[..80];
    let (err, msg) = err_of(&with_bad_line_4(&format!("{short},{}", grid_str(&p.solution, '.'))));
    assert!(matches!(err, CsvError::Length { line: 4, found: 80, field: "puzzle", .. }), "{err:?}");
    assert!(msg.contains("line 4") && msg.contains("80"), "{msg}");

    let long = format!("{}7", grid_str(&p.solution, '.'));
    let (err, msg) = err_of(&with_bad_line_4(&format!("{},{long}", grid_str(&p.puzzle, '.'))));
    assert!(matches!(err, CsvError::Length { line: 4, found: 82, field: "solution", .. }), "{err:?}");
    assert!(msg.contains("82"), "{msg}");
}

#[test]
fn csv_bad_character_names_char_and_column() {
    let p = &sample()[0];
    let mut puzzle = grid_str(&p.puzzle, '.');
    puzzle.replace_range(9..10, "x");
    let (err, msg) = err_of(&with_bad_line_4(&format!("{puzzle},{}", grid_str(&p.solution, '.'))));
    assert!(matches!(err, CsvError::BadChar { line: 4, column: 10, found: 'x', .. }), "{err:?}");
    assert!(msg.contains("line 4") && msg.contains("column 10") && msg.contains('x'), "{msg}");

    // In the solution: column counts from the start of the line.
    let mut solution = grid_str(&p.solution, '.');
    solution.replace_range(0..1, "?");
    let (err, _) = err_of(&with_bad_line_4(&format!("{},{solution}", grid_str(&p.puzzle, '.'))));
    assert!(matches!(err, CsvError::BadChar { line: 4, column: 83, found: '?', field: "solution", .. }), "{err:?}");
    // A blank in a solution is not allowed either.
    let mut solution = grid_str(&p.solution, '.');
    solution.replace_range(80..81, ".");
    let (err, _) = err_of(&with_bad_line_4(&format!("{},{solution}", grid_str(&p.puzzle, '.'))));
    assert!(matches!(err, CsvError::BadChar { line: 4, column: 163, .. }), "{err:?}");
}

#[test]
fn csv_invalid_or_disagreeing_solution() {
    let p = &sample()[0];
    // Not a valid grid: swap two cells of the first row.
    let mut s = p.solution;
    s.swap(0, 1);
    let (err, msg) = err_of(&with_bad_line_4(&format!("{},{}", grid_str(&[0; 81], '.'), grid_str(&s, '.'))));
    assert!(matches!(err, CsvError::InvalidSolution { line: 4, .. }), "{err:?}");
    assert!(msg.contains("line 4") && msg.contains("twice"), "{msg}");

    // Valid grid that contradicts a given.
    let i = (0..81).find(|&i| p.puzzle[i] != 0).unwrap();
    let mut q = p.puzzle;
    q[i] = q[i] % 9 + 1;
    let (err, msg) = err_of(&with_bad_line_4(&format!("{},{}", grid_str(&q, '.'), grid_str(&p.solution, '.'))));
    assert!(matches!(err, CsvError::InvalidSolution { line: 4, .. }), "{err:?}");
    let expect = format!("row {} column {}", i / 9 + 1, i % 9 + 1);
    assert!(msg.contains(&expect), "{msg} lacks {expect}");
}

#[test]
fn csv_header_only_once_and_errors_after_crlf_blank_lines() {
    let ps = sample();
    // A second non-grid line is an error, not another header; line counting includes
    // blank lines and CRLF endings.
    let text = format!(
        "puzzle,solution\r\n\r\n{},{}\r\npuzzle,solution\r\n",
        grid_str(&ps[0].puzzle, '.'),
        grid_str(&ps[0].solution, '.')
    );
    let (err, _) = err_of(&text);
    assert!(matches!(err, CsvError::BadChar { line: 4, column: 1, found: 'p', .. }), "{err:?}");
    // A short all-digit first line is reported, not mistaken for a header.
    let (err, _) = err_of("123,456\n");
    assert!(matches!(err, CsvError::Length { line: 1, found: 3, .. }), "{err:?}");
}

#[test]
fn csv_empty_inputs_are_errors() {
    for text in ["", "\n\n", "quizzes,solutions\n", "puzzle,solution\r\n\r\n"] {
        let (err, msg) = err_of(text);
        assert!(matches!(err, CsvError::Empty { .. }), "{text:?}: {err:?}");
        assert!(msg.contains("no puzzles"), "{msg}");
    }
}

#[test]
fn csv_missing_file_names_the_path() {
    let tmp = temp_dir("missing");
    let dir = tmp.path();
    let path = dir.join("no-such-sudoku.csv");
    let err = load_csv(&path).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, CsvError::NotFound { .. }), "{err:?}");
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(msg.contains("check"), "{msg}");
    // A directory is not a readable CSV file: an error, not a panic.
    let err = load_csv(dir).unwrap_err();
    assert!(err.to_string().contains(&dir.display().to_string()), "{err}");
}

#[test]
fn csv_round_trips_generated_hard_puzzles() {
    let ps = generate(41, 20, Difficulty::Hard);
    let mut text = String::from("puzzle,solution\n");
    for p in &ps {
        text += &format!("{},{}\n", grid_str(&p.puzzle, '0'), grid_str(&p.solution, '0'));
    }
    assert_eq!(parse(&text).unwrap(), ps);
}
