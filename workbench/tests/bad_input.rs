//! Bad input gets one clear message and a non-zero exit, never a panic, and stored runs are
//! left as they were.

mod common;

use common::{run, temp_dir, workbench};
use std::path::Path;

/// Runs `workbench train` with `args` in `dir` and returns (exit code, stderr).
fn train(dir: &Path, args: &[&str]) -> (i32, String) {
    let mut cmd = workbench(dir);
    cmd.arg("train").args(args);
    let (code, _, stderr) = run(&mut cmd);
    assert!(!stderr.contains("panicked"), "a panic reached the user: {stderr}");
    (code, stderr)
}

fn run_count(dir: &Path) -> usize {
    let (code, stdout, stderr) = run(workbench(dir).args(["runs", "--json"]));
    assert_eq!(code, 0, "{stderr}");
    serde_json::from_str::<serde_json::Value>(&stdout).unwrap().as_array().unwrap().len()
}

#[test]
fn refusals_name_the_problem_and_store_nothing() {
    let dir = temp_dir("bad-input");
    let cases: &[(&[&str], &[&str])] = &[
        (&["--layer", "nope"], &["unknown layer plugin `nope`; available:", "hyperset", "transformer"]),
        (&["--task", "chess"], &["unknown task plugin `chess`; available:", "sudoku"]),
        (&["--layer", "sudoku"], &["`sudoku` is a task plugin"]),
        (&["colour=red"], &["unknown key `colour`", "layer.heads (int, default 4", "train.lr (float"]),
        (&["heads=four"], &["`heads=four`", "not an integer"]),
        (&["heads=0"], &["`heads=0`", "outside the allowed range 1..=256"]),
        (&["d=30", "heads=4"], &["not divisible by heads"]),
        (&["init_std=0.1"], &["exists in several places", "layer.init_std", "task.init_std"]),
        (&["difficulty=medium"], &["not one of hard | easy"]),
        (&["steps"], &["expected key=value, got `steps`"]),
        (&["lr=1e-5", "min_lr=1e-3"], &["min_lr"]),
        (&["device=tpu"], &["device `tpu` is not valid"]),
        (&["task.train_csv=/no/such/file.csv"], &["/no/such/file.csv", "does not exist"]),
        // Limits before any work: each of these used to exhaust memory or panic the worker.
        (&["eval_depths=1e300"], &["more than the 64 allowed"]),
        (&["eval_depths=1e6"], &["more than the 64 allowed"]),
        (&["threads=4096"], &["`threads=4096`", "outside the allowed range 0..=256"]),
        (&["batch_size=1000000"], &["`batch_size=1000000`", "outside the allowed range"]),
        (&["eval_puzzles=1000000"], &["`eval_puzzles=1000000`", "outside the allowed range"]),
        // A layer without a causal mask on a causal task is refused before it is stored.
        (&["--layer", "energy-transformer", "--task", "language"], &["`energy-transformer` cannot run causally"]),
        (&["--task", "language"], &["layer `hyperset` cannot run causally", "task `language` needs a causal layer"]),
        (&["--layer", "energy-transformer", "--task", "gp-regression", "task.causal=true"], &["cannot run causally"]),
    ];
    for (args, expected) in cases {
        let (code, stderr) = train(&dir, args);
        assert_ne!(code, 0, "{args:?} was accepted");
        for e in *expected {
            assert!(stderr.contains(e), "{args:?}: expected `{e}` in:\n{stderr}");
        }
    }
    assert_eq!(run_count(&dir), 0, "a refused configuration created a run");
}

#[test]
fn a_malformed_csv_row_is_reported_with_its_line() {
    let dir = temp_dir("bad-csv");
    let good = "0".repeat(81);
    let solution = "123456789456789123789123456234567891567891234891234567345678912678912345912345678";
    let csv = dir.join("puzzles.csv");
    std::fs::write(&csv, format!("puzzle,solution\n{good},{solution}\n{},{solution}\n", &good[..80])).unwrap();
    let (code, stderr) = train(&dir, &[&format!("task.train_csv={}", csv.display())]);
    assert_ne!(code, 0);
    assert!(stderr.contains("puzzles.csv") && stderr.contains("line 3"), "{stderr}");
}

/// Data files must be regular files: a named pipe would block the command forever and
/// `/dev/zero` never ends; both are refused at once, naming what they are.
#[cfg(unix)]
#[test]
fn pipes_and_devices_given_as_data_files_are_refused_at_once() {
    let dir = temp_dir("bad-files");
    let fifo = dir.join("puzzles.csv");
    let status = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(status.success());
    let fifo_arg = format!("task.train_csv={}", fifo.display());
    let cases: [(&str, &str); 2] =
        [(&fifo_arg, "a named pipe (FIFO), not a regular file"), ("task.train_csv=/dev/zero", "a character device")];
    for (arg, expected) in cases {
        let (code, stderr) = train(&dir, &[arg]);
        assert_ne!(code, 0, "{arg} was accepted");
        assert!(stderr.contains(expected), "{arg}: {stderr}");
    }
    assert_eq!(run_count(&dir), 0);
}

#[test]
fn an_unwritable_database_path_is_refused_with_the_fix() {
    let dir = temp_dir("bad-db");
    let (code, _, stderr) = run(workbench(&dir).args(["--db", "/no/such/dir/runs.db", "runs"]));
    assert_ne!(code, 0);
    assert!(stderr.contains("/no/such/dir") && stderr.contains("--db"), "{stderr}");
    assert!(!stderr.contains("panicked"));
}

#[test]
fn unknown_runs_are_reported() {
    let dir = temp_dir("unknown-run");
    let (code, _, stderr) = run(workbench(&dir).args(["runs", "show", "42"]));
    assert_ne!(code, 0);
    assert!(stderr.contains("run 42 does not exist"), "{stderr}");
    let (code, _, stderr) = run(workbench(&dir).args(["resume", "42"]));
    assert_ne!(code, 0);
    assert!(stderr.contains("run 42 does not exist"), "{stderr}");
}
