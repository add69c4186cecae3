//! Training on a CUDA device, for builds with `--features cuda` on a machine with a GPU:
//! `cargo build --workspace --release --features workbench/cuda && cargo test --release -p workbench
//! --features cuda --test cuda`.
//! Without the feature this file is empty; with it and no device, the tests fail (there is
//! nothing to check the CUDA path on).
#![cfg(feature = "cuda")]

mod common;

use common::{run, stored_metric, temp_dir, workbench};

/// The training loss of each step of a run, read off `train --json`. A run on the GPU also
/// stores the device's utilisation and memory (NVML).
fn step_losses(layer: &str, task: &str, args: &[&str], device: &str) -> Vec<f64> {
    let dir = temp_dir(&format!("cuda-{layer}-{task}-{}", device.replace(':', "")));
    let (code, stdout, stderr) = run(workbench(&dir)
        .args(["train", "--layer", layer, "--task", task, "--json", "eval_every=1000"])
        .args(args)
        .arg(format!("device={device}")));
    assert_eq!(code, 0, "{layer} on {task} on {device}: {stderr}");
    if device.starts_with("cuda") {
        let memory: Vec<f64> = stored_metric(&dir, 1, "sys", "gpu_memory_bytes").into_iter().map(|(_, v)| v).collect();
        assert!(!memory.is_empty() && memory.iter().all(|&b| b > 0.0), "{layer}: GPU memory samples {memory:?}");
        let utilisation: Vec<f64> =
            stored_metric(&dir, 1, "sys", "gpu_util_percent").into_iter().map(|(_, v)| v).collect();
        assert!(!utilisation.is_empty() && utilisation.iter().all(|u| (0.0..=100.0).contains(u)), "{utilisation:?}");
    }
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["event"] == "step")
        .filter_map(|e| e["loss"].as_f64())
        .collect()
}

/// Every layer family trains on `cuda:0` as on the CPU: the same configuration and seed give
/// the same loss at every step, to float rounding (the CPU runs its fused kernels, the device
/// candle's composition, with the CUDA normalisations and softmaxes when
/// `WORKBENCH_CUDA_KERNELS=1`; each is tested against the composition to 1e-6,
/// `plugin-api/kernels`). The Transformer's loss
/// also falls: Hyper-SET's stays on Sudoku's plateau at ln 9 this early, on both devices.
#[test]
fn every_family_trains_on_cuda_as_on_the_cpu() {
    let sudoku: &[&str] = &[
        "d=64",
        "heads=4",
        "iterations=2",
        "difficulty=easy",
        "task.train_puzzles=512",
        "task.eval_puzzles=64",
        "steps=200",
        "lr=3e-3",
        "warmup=20",
    ];
    let small: &[&str] = &["d=32", "heads=4", "iterations=2", "steps=30", "lr=1e-3", "warmup=5"];
    let image: &[&str] = &["task.train_images=256", "task.test_images=64", "batch_size=8"];
    let language: &[&str] = &["layers=2", "task.corpus_bytes=65536", "task.seq_len=32", "batch_size=8"];
    let families: [(&str, &str, Vec<&str>); 8] = [
        ("hyperset", "sudoku", sudoku.to_vec()),
        ("transformer", "sudoku", sudoku.to_vec()),
        ("crate", "image", [small, image].concat()),
        ("energy-transformer", "image", [small, image].concat()),
        ("intrinsic", "language", [small, language, &["attention=momentum"]].concat()),
        ("intrinsic", "language", [small, language, &["attention=newton"]].concat()),
        ("cem", "language", [small, language].concat()),
        // No heads: a stack of four MLP blocks.
        (
            "mlp",
            "sudoku",
            [&["d=32", "iterations=4"], &small[3..], &["task.train_puzzles=512", "task.eval_puzzles=64"]].concat(),
        ),
    ];
    let mut failures = Vec::new();
    for (layer, task, args) in &families {
        let on_cuda = step_losses(layer, task, args, "cuda:0");
        let on_cpu = step_losses(layer, task, args, "cpu");
        // Every step's loss on both devices: none lost to the output's format (or to a NaN,
        // which JSON writes as null), so the comparison below is never over nothing.
        let steps: usize = args.iter().find_map(|a| a.strip_prefix("steps=")).and_then(|s| s.parse().ok()).unwrap();
        assert_eq!((on_cuda.len(), on_cpu.len()), (steps, steps), "{layer} on {task}: step losses read");
        let worst = on_cuda
            .iter()
            .zip(&on_cpu)
            .map(|(a, b)| (a - b).abs() / b.abs().max(1.0))
            .fold(0.0, plugin_testkit::larger);
        println!(
            "{layer} on {task} ({}): {} steps, largest relative difference {worst:.2e}",
            args.join(" "),
            on_cuda.len()
        );
        if worst.is_nan() || worst > 1e-3 {
            failures.push(format!("{layer} on {task}: cuda:0 and cpu differ by {worst:.2e}"));
        }
        if *layer == "transformer" {
            let mean = |xs: &[f64]| xs.iter().sum::<f64>() / xs.len() as f64;
            let (first, last) = (mean(&on_cuda[..20]), mean(&on_cuda[on_cuda.len() - 20..]));
            assert!(last < first - 0.01, "transformer on cuda:0: loss did not fall: {first:.4} -> {last:.4}");
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// The bench on the paper-sized configuration runs on the device and says what runs there:
/// candle's composition, with the CUDA normalisations and softmaxes when they are switched on.
#[test]
fn the_bench_runs_the_paper_size_on_cuda() {
    let dir = temp_dir("cuda-bench");
    let (code, stdout, stderr) =
        run(workbench(&dir).args(["bench", "--steps", "2", "d=768", "heads=12", "iterations=24", "device=cuda:0"]));
    assert_eq!(code, 0, "{stderr}");
    let runs = match plugin_api::cuda_kernels_switched_on() {
        true => "kernels fused (on CUDA: the CUDA normalisations and softmaxes",
        false => "kernels fused (on CUDA: candle's composition",
    };
    assert!(stdout.contains(runs), "{stdout}");
    println!("{stdout}");
}
