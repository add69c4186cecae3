//! Measures Sudoku generation speed and the givens distribution.
//!
//! Run with `cargo run --release -p datasets --example sudoku_speed [COUNT] [SEED]`
//! (defaults: 2000 puzzles per difficulty, seed 0).

use datasets::sudoku::{count_solutions, generate, Difficulty};
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let count = parse_arg(args.next(), "COUNT", 2000);
    let seed = parse_arg(args.next(), "SEED", 0);
    println!("generating {count} puzzles per difficulty, seed {seed}, {} rayon threads", rayon::current_num_threads());
    for difficulty in [Difficulty::Hard, Difficulty::Easy] {
        let start = Instant::now();
        let puzzles = generate(seed, count as usize, difficulty);
        let secs = start.elapsed().as_secs_f64();
        let givens: Vec<usize> = puzzles.iter().map(|p| p.givens()).collect();
        let (min, max) = (givens.iter().min().copied().unwrap_or(0), givens.iter().max().copied().unwrap_or(0));
        let mean = givens.iter().sum::<usize>() as f64 / givens.len().max(1) as f64;
        // Spot-check uniqueness so a fast-but-wrong generator cannot pass unnoticed.
        let unique = puzzles.iter().take(100).all(|p| count_solutions(&p.puzzle, 2) == 1);
        println!(
            "{difficulty:>4}: {count} puzzles in {secs:.2} s = {:.0} puzzles/s; givens mean {mean:.2}, min {min}, max {max}; first 100 unique: {unique}",
            count as f64 / secs
        );
    }
}

fn parse_arg(arg: Option<String>, name: &str, default: u64) -> u64 {
    match arg {
        None => default,
        Some(s) => s.parse().unwrap_or_else(|_| {
            eprintln!("{name} must be a non-negative integer, got `{s}`");
            std::process::exit(2)
        }),
    }
}
