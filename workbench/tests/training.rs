//! End to end through the real binary: a worker process trains, records, checkpoints,
//! stops on a signal and resumes.

use crate::common;

use common::{run, show, temp_dir, train_losses, workbench};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

fn last_eval(dir: &Path, id: i64, name: &str) -> f64 {
    let shown = show(dir, id);
    let metric = shown["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["split"] == "eval" && m["name"] == name)
        .expect("eval metric");
    metric["summary"]["last"].as_f64().unwrap()
}

/// A tiny Transformer on easy generated puzzles: the loss falls and the cell accuracy on
/// blanks ends well above chance (1/9).
#[test]
fn a_tiny_model_learns_sudoku() {
    let dir = temp_dir("learns");
    let (code, stdout, stderr) = run(workbench(&dir).args([
        "train",
        "--layer",
        "transformer",
        "--task",
        "sudoku",
        "--json",
        "d=64",
        "heads=4",
        "iterations=2",
        "layer.init_std=0.15",
        "difficulty=easy",
        "task.train_puzzles=2000",
        "task.eval_puzzles=128",
        "steps=300",
        "lr=3e-3",
        "warmup=20",
        "eval_every=150",
        "eval_depths=",
    ]));
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.lines().any(|l| l.contains("\"event\":\"finished\"")), "{stdout}");
    let losses = train_losses(&dir, 1);
    assert_eq!(losses.len(), 300);
    let mean = |xs: &[(u64, f64)]| xs.iter().map(|x| x.1).sum::<f64>() / xs.len() as f64;
    let (first, last) = (mean(&losses[..30]), mean(&losses[270..]));
    assert!(last < first - 0.1, "loss did not fall: {first:.4} -> {last:.4}");
    let cell_acc = last_eval(&dir, 1, "cell_acc");
    assert!(cell_acc > 0.2, "cell accuracy {cell_acc:.3} is not well above chance (0.111)");
}

/// SIGTERM stops a worker as `interrupted` with a checkpoint; `workbench resume` continues
/// from it, and the finished run has every step exactly once, with the same final loss as
/// an uninterrupted run of the same seed.
#[test]
fn an_interrupted_run_resumes_from_its_checkpoint() {
    let dir = temp_dir("resume");
    let args = [
        "train",
        "--layer",
        "hyperset",
        "--task",
        "sudoku",
        "--json",
        "d=16",
        "heads=2",
        "iterations=2",
        "time_dim=8",
        "difficulty=easy",
        "task.train_puzzles=64",
        "task.eval_puzzles=16",
        "steps=300",
        "eval_every=20",
        "eval_depths=",
    ];
    let mut child = workbench(&dir).args(args).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let mut killed = false;
    for line in stdout.lines() {
        let line = line.unwrap();
        if !killed && line.contains("\"event\":\"eval\"") && line.contains("\"step\":40") {
            let pid = show(&dir, 1)["run"]["worker_pid"].as_u64().unwrap();
            assert!(std::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status().unwrap().success());
            killed = true;
        }
    }
    let status = child.wait().unwrap();
    assert!(killed, "never saw the evaluation at step 40");
    assert_eq!(status.code(), Some(130), "an interrupted run exits 130");
    let interrupted = show(&dir, 1);
    assert_eq!(interrupted["run"]["status"], "interrupted");
    let stopped_at = interrupted["run"]["last_step"].as_u64().unwrap();
    assert!((40..300).contains(&stopped_at), "stopped at {stopped_at}");

    // Stopped for a while: the resumed worker's clock goes on from where the run stopped.
    let paused = Duration::from_secs(3);
    std::thread::sleep(paused);
    let (code, resumed, stderr) = run(workbench(&dir).args(["resume", "1", "--json"]));
    assert_eq!(code, 0, "{stderr}");
    let started = resumed.lines().find(|l| l.contains("\"event\":\"started\"")).unwrap();
    let started: serde_json::Value = serde_json::from_str(started).unwrap();
    assert_eq!(started["start_step"].as_u64().unwrap(), stopped_at, "resumed from the checkpoint taken when stopping");
    assert_eq!(show(&dir, 1)["run"]["status"], "finished");
    let losses = train_losses(&dir, 1);
    let steps: Vec<u64> = losses.iter().map(|l| l.0).collect();
    assert_eq!(steps, (1..=300).collect::<Vec<_>>(), "every step recorded exactly once");
    let walls: Vec<f64> = common::stored_rows(&dir, 1, "train", "loss").iter().map(|m| m.wall_time).collect();
    let (before, after) = (walls[stopped_at as usize - 1], walls[stopped_at as usize]);
    assert!(walls.windows(2).all(|w| w[0] <= w[1]), "the training clock never goes back: {walls:?}");
    assert!(
        after - before < paused.as_secs_f64(),
        "the {}s stopped are not training time: step {stopped_at} at {before:.2}s, the next at {after:.2}s",
        paused.as_secs()
    );

    // The same run without interruption ends at the same loss.
    let mut again: Vec<&str> = args.to_vec();
    again.retain(|a| *a != "--json");
    let (code, _, stderr) = run(workbench(&dir).args(&again));
    assert_eq!(code, 0, "{stderr}");
    let reference = train_losses(&dir, 2);
    let (a, b) = (losses.last().unwrap().1, reference.last().unwrap().1);
    assert!((a - b).abs() <= 1e-4 * b.abs(), "resumed final loss {a} vs uninterrupted {b}");
}

/// A worker records its system metrics (split `sys`, at least the sample at the end; with
/// batches split over two threads, how long they waited for each other) and the examples
/// each evaluation scored; an `eval_examples` above the set's size is said once in
/// the log, and `runs show` reports both without mixing them into the task's metrics.
#[test]
fn a_run_records_system_metrics_and_its_evaluation_size() {
    let dir = temp_dir("sysmetrics");
    let (code, _, stderr) = run(workbench(&dir).args([
        "train",
        "--layer",
        "transformer",
        "--task",
        "sudoku",
        "d=16",
        "heads=2",
        "iterations=1",
        "difficulty=easy",
        "task.train_puzzles=50",
        "task.eval_puzzles=40",
        "eval_examples=1000",
        "steps=4",
        "eval_every=2",
        "eval_depths=",
        "checkpoint=false",
        "threads=2",
    ]));
    assert_eq!(code, 0, "{stderr}");
    let shown = show(&dir, 1);
    let sys = |name: &str| {
        shown["metrics"].as_array().unwrap().iter().find(|m| m["split"] == "sys" && m["name"] == name).cloned()
    };
    for name in ["cpu_percent", "rss_bytes", "peak_rss_bytes", "threads", "shard_wait_percent"] {
        let m = sys(name).unwrap_or_else(|| panic!("no sys/{name}: {shown}"));
        assert!(m["summary"]["last"].as_f64().unwrap() >= 0.0, "{m}");
    }
    // Its heap on huge pages where the kernel gives them on request (module `huge_pages`).
    let huge = sys("huge_pages_bytes").unwrap_or_else(|| panic!("no sys/huge_pages_bytes: {shown}"));
    let huge = huge["summary"]["max"].as_f64().unwrap();
    match workbench::huge_pages::ThpMode::current() {
        Some(workbench::huge_pages::ThpMode::Madvise) => assert!(huge > 0.0, "no huge pages in THP mode madvise"),
        Some(workbench::huge_pages::ThpMode::Never) => assert_eq!(huge, 0.0),
        _ => {}
    }
    // Two shards: the share of their time spent waiting for the slower one.
    let wait = sys("shard_wait_percent").unwrap()["summary"]["max"].as_f64().unwrap();
    assert!(wait < 100.0, "shards waited {wait} %");
    let examples = sys("eval_examples").expect("eval examples");
    assert_eq!((examples["summary"]["last"].as_f64(), examples["summary"]["points"].as_u64()), (Some(40.0), Some(2)));
    let note = "eval_examples=1000 but the evaluation set holds 40: scoring all 40";
    let logs: Vec<&str> = shown["log"].as_array().unwrap().iter().filter_map(|l| l.as_str()).collect();
    assert_eq!(logs.iter().filter(|l| l.contains(note)).count(), 1, "{logs:?}");
    let kernels = format!(
        "batches split over 2 threads; CPU kernels in {} instructions, matrix products on gemm",
        plugin_api::isa::kernels_isa().name()
    );
    assert!(logs.iter().any(|l| l.starts_with("training ") && l.ends_with(&kernels)), "{logs:?}");

    let (code, text, stderr) = run(workbench(&dir).args(["runs", "show", "1"]));
    assert_eq!(code, 0, "{stderr}");
    assert!(text.contains("eval:     40 examples per evaluation"), "{text}");
    assert!(text.lines().any(|l| l.starts_with("system:   peak memory ") && l.contains("MiB")), "{text}");
    assert!(!text.lines().any(|l| l.trim_start().starts_with("sys ")), "sys rows in the metrics table:\n{text}");
}
