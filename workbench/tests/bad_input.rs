//! Bad input gets one clear message and a non-zero exit, never a panic, and stored runs are
//! left as they were.

use crate::common;

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
        (&["--layer", "nope"], &["unknown layer plugin `nope`; available:", "hyperset", "transformer", "--plugin-dir"]),
        (&["--layer", "hyperst"], &["unknown layer plugin `hyperst` (did you mean `hyperset`?); available:"]),
        (&["--task", "sudoku2"], &["unknown task plugin `sudoku2` (did you mean `sudoku`?); available:"]),
        (&["--task", "chess"], &["unknown task plugin `chess`; available:", "sudoku"]),
        (&["--layer", "sudoku"], &["`sudoku` is a task plugin"]),
        (&["colour=red"], &["unknown key `colour`", "`workbench plugins` lists each plugin's keys"]),
        (&["heads=four"], &["`heads=four`", "not an integer"]),
        (&["heads=0"], &["`heads=0`", "outside the allowed range 1..=256"]),
        (&["d=30", "heads=4"], &["not divisible by heads"]),
        (&["init_std=0.1"], &["exists in several places", "layer.init_std", "task.init_std"]),
        (&["difficulty=medium"], &["not one of hard | easy"]),
        (&["steps"], &["expected key=value, got `steps`"]),
        // Plugins named where settings go, as if positional.
        (&["transformer", "sudoku"], &["`transformer` is a layer plugin: give it as `--layer transformer`"]),
        (&["--layer", "mlp", "image"], &["`image` is a task plugin: give it as `--task image`"]),
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
        assert_eq!(code, 2, "{args:?}: a refusal exits with the usage code:\n{stderr}");
        for e in *expected {
            assert!(stderr.contains(e), "{args:?}: expected `{e}` in:\n{stderr}");
        }
    }
    assert_eq!(run_count(&dir), 0, "a refused configuration created a run");
}

/// A misspelt key is one line naming the key meant (or, for a word of several keys, those
/// keys) and where every key is listed, not the whole list; `-v` shows the list.
#[test]
fn an_unknown_key_suggests_the_closest_one() {
    let dir = temp_dir("unknown-key");
    let (code, stderr) = train(&dir, &["stpes=10"]);
    assert_eq!(code, 2, "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one line:\n{stderr}");
    assert!(stderr.contains("unknown key `stpes`: did you mean `steps`?"), "{stderr}");
    assert!(stderr.contains("`workbench plugins`"), "{stderr}");
    let (_, stderr) = train(&dir, &["layer.hedas=2"]);
    assert!(stderr.contains("did you mean `layer.heads`?"), "the scope is kept:\n{stderr}");
    let (_, stderr) = train(&dir, &["train.batch=8"]);
    assert!(
        stderr.contains("unknown key `train.batch`: did you mean `train.batch_size` or `train.eval_batch`?"),
        "a word of several keys names them:\n{stderr}"
    );
    let (_, stderr) = train(&dir, &["zzzzqqq=1"]);
    assert!(stderr.contains("unknown key `zzzzqqq`") && !stderr.contains("did you mean"), "{stderr}");
    let (code, stderr) = train(&dir, &["-v", "colour=red"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("layer.heads (int, default 4") && stderr.contains("train.lr (float"), "{stderr}");
    assert_eq!(run_count(&dir), 0);
}

/// Lists and ranges of values belong to a sweep; `train` says so.
#[test]
fn a_list_of_values_in_train_points_to_sweep() {
    let dir = temp_dir("train-list");
    for value in ["lr=1e-3,1e-4", "lr=1e-4:1e-2:log3"] {
        let (code, stderr) = train(&dir, &[value]);
        assert_eq!(code, 2, "{stderr}");
        assert!(stderr.contains("workbench sweep") && stderr.contains(value), "{value}: {stderr}");
    }
    // A key whose values are lists still takes one.
    let (_, stderr) = train(&dir, &["eval_depths=2,4", "steps=0"]);
    assert!(!stderr.contains("workbench sweep"), "{stderr}");
}

/// `resume` of a run that has nothing left to train says why, for each such status.
#[test]
fn resuming_a_finished_run_says_it_is_finished() {
    let dir = temp_dir("resume-finished");
    let tiny = ["--layer", "transformer", "d=16", "heads=2", "task.train_puzzles=8", "task.eval_puzzles=4"];
    let (code, stderr) =
        train(&dir, &[&tiny[..], &["steps=1", "eval_every=1", "eval_depths=", "eval_examples=4"]].concat());
    assert_eq!(code, 0, "{stderr}");
    let (code, _, stderr) = run(workbench(&dir).args(["resume", "1"]));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("run 1 is finished") && stderr.contains("nothing is left to resume"), "{stderr}");
    assert!(!stderr.contains("requeued"), "{stderr}");
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
    assert_eq!(code, 1, "as for any command naming a run that does not exist");
    assert!(stderr.contains("run 42 does not exist"), "{stderr}");
}

#[test]
fn a_run_that_cannot_fit_in_memory_is_refused_with_the_estimate_and_the_fix() {
    let dir = temp_dir("memory-refusal");
    // Terabytes of activations and gigabytes of parameters: refused on any machine.
    let (code, stderr) = train(&dir, &["d=8192", "batch_size=65536"]);
    assert_ne!(code, 0, "accepted:\n{stderr}");
    for expected in ["this run needs about", "parameters", "activations of one step", "is available on this machine"] {
        assert!(stderr.contains(expected), "expected `{expected}` in:\n{stderr}");
    }
    assert!(stderr.contains("lower train.batch_size"), "the fix names the largest part:\n{stderr}");
    let (code, stderr) = train(&dir, &["d=8192", "iterations=1", "batch_size=1", "eval_batch=1", "threads=256"]);
    assert_ne!(code, 0, "accepted:\n{stderr}");
    assert!(stderr.contains("lower the layer's width d"), "the fix names the parameters:\n{stderr}");
    assert_eq!(run_count(&dir), 0, "a refused configuration created a run");
}

/// Runs `workbench train` with the memory estimate logged and returns (estimate, peak resident
/// bytes of the command and its worker), the peak from `wait4` (which covers waited-for
/// descendants).
fn estimate_and_peak(dir: &Path, args: &[&str]) -> (f64, f64) {
    let mut cmd = workbench(dir);
    cmd.env("RUST_LOG", "workbench::memory=debug").arg("train").args(args);
    cmd.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped());
    // Reaped by `wait4` below, which also reads the child's peak memory.
    #[allow(clippy::zombie_processes)]
    let mut child = cmd.spawn().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    let (mut status, mut usage) = (0, unsafe { std::mem::zeroed::<libc::rusage>() });
    // SAFETY: waits for our own child, which std has not reaped.
    assert_eq!(unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) }, child.id() as i32);
    assert_eq!(status, 0, "{args:?} failed:\n{stderr}");
    let gib: f64 = stderr
        .split("needs about ")
        .nth(1)
        .and_then(|rest| rest.split(" GiB").next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no estimate logged:\n{stderr}"));
    // The parameters are counted exactly: as many as the worker then builds.
    let counted = stderr.split(" GiB for ").nth(1).and_then(|rest| rest.split(' ').next());
    let built = stderr
        .lines()
        .find(|l| l.contains(" parameters) from step"))
        .and_then(|l| l.split('(').nth(1))
        .and_then(|rest| rest.split(' ').next());
    assert!(counted.is_some() && counted == built, "{args:?}: counted {counted:?}, built {built:?}");
    (gib * (1u64 << 30) as f64, usage.ru_maxrss as f64 * 1024.0)
}

#[test]
fn memory_estimate_brackets_the_measured_peak() {
    let dir = temp_dir("memory-estimate");
    let short = ["steps=2", "eval_every=2", "checkpoint=false", "threads=2"];
    let sudoku = ["--task", "sudoku", "train_puzzles=1000", "eval_puzzles=16", "eval_examples=16", "eval_depths=1"];
    let language = ["--task", "language", "eval_examples=16", "eval_depths=1"];
    let cases: [Vec<&str>; 5] = [
        [&["--layer", "hyperset"][..], &sudoku, &["eval_batch=16"]].concat(),
        [&["--layer", "transformer"][..], &language, &["eval_batch=16"]].concat(),
        [&["--layer", "cem"][..], &language, &["batch_size=64", "eval_batch=8"]].concat(),
        // Parameters dominate.
        [&["--layer", "hyperset"][..], &sudoku, &["d=1024", "iterations=1", "batch_size=1", "eval_batch=1"]].concat(),
        // Evaluation dominates: two batches of 32 at once, at twice the training depth.
        vec![
            "--layer",
            "hyperset",
            "--task",
            "sudoku",
            "train_puzzles=1000",
            "eval_puzzles=64",
            "eval_examples=64",
            "d=128",
            "batch_size=2",
            "eval_batch=32",
            "eval_depths=2",
        ],
    ];
    for case in cases {
        let args: Vec<&str> = case.iter().chain(short.iter()).copied().collect();
        let (estimate, peak) = estimate_and_peak(&dir, &args);
        let ratio = estimate / peak;
        let gib = |bytes: f64| bytes / (1u64 << 30) as f64;
        println!("{case:?}: estimate {:.2} GiB, peak {:.2} GiB, ratio {ratio:.2}", gib(estimate), gib(peak));
        // Never below what the run takes (a margin for allocator noise), never so far above
        // that sensible runs are refused.
        assert!((0.9..=3.0).contains(&ratio), "{case:?}: estimate {estimate:.3e} B against a peak of {peak:.3e} B");
    }
}
