//! Training on a CUDA device, for builds with `--features cuda` on a machine with a GPU:
//! `cargo build --workspace --features workbench/cuda && cargo test -p workbench --features cuda --test cuda`.
//! Without the feature this file is empty; with it and no device, the tests fail (there is
//! nothing to check the CUDA path on).
#![cfg(feature = "cuda")]

mod common;

use common::{run, temp_dir, workbench};

/// Hyper-SET and the Transformer (the composed ops: the fused kernels are CPU code) learn
/// Sudoku on `cuda:0`: the run finishes and its loss falls.
#[test]
fn tiny_models_learn_sudoku_on_cuda() {
    for layer in ["hyperset", "transformer"] {
        let dir = temp_dir(&format!("cuda-{layer}"));
        let (code, stdout, stderr) = run(workbench(&dir).args([
            "train",
            "--layer",
            layer,
            "--task",
            "sudoku",
            "--json",
            "d=64",
            "heads=4",
            "iterations=2",
            "difficulty=easy",
            "task.train_puzzles=512",
            "task.eval_puzzles=64",
            "steps=200",
            "lr=3e-3",
            "warmup=20",
            "eval_every=100",
            "device=cuda:0",
        ]));
        assert_eq!(code, 0, "{layer}: {stderr}");
        let losses: Vec<f64> = stdout
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|e| e["event"] == "step")
            .filter_map(|e| e["loss"].as_f64())
            .collect();
        assert_eq!(losses.len(), 200, "{layer}: {stdout}");
        let mean = |xs: &[f64]| xs.iter().sum::<f64>() / xs.len() as f64;
        let (first, last) = (mean(&losses[..20]), mean(&losses[180..]));
        assert!(last < first - 0.05, "{layer} on cuda:0: loss did not fall: {first:.4} -> {last:.4}");
    }
}

/// The bench on the paper-sized configuration runs on the device and says that the
/// composition, not the fused CPU kernels, runs there.
#[test]
fn the_bench_runs_the_paper_size_on_cuda() {
    let dir = temp_dir("cuda-bench");
    let (code, stdout, stderr) =
        run(workbench(&dir).args(["bench", "--steps", "2", "d=768", "heads=12", "iterations=24", "device=cuda:0"]));
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("no fused kernels off the CPU"), "{stdout}");
    println!("{stdout}");
}
