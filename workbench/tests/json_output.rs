//! `--json` of sweep, queue, ablation and plot: stable field names a script can read (README,
//! "Machine-readable output"). `train --json`, `bench --json` and the exit codes are tested
//! with their commands.

use crate::common;

use common::{fixture_sweep_args, plugin_dir_with, run, temp_dir, workbench};
use serde_json::Value;
use std::path::Path;

/// A tiny Sudoku configuration of the baseline Transformer, trained in seconds.
const TINY: &[&str] = &[
    "--layer",
    "transformer",
    "--task",
    "sudoku",
    "d=16",
    "heads=2",
    "iterations=2",
    "difficulty=easy",
    "task.train_puzzles=8",
    "task.eval_puzzles=4",
    "steps=2",
    "eval_every=2",
    "eval_depths=",
    "eval_examples=4",
];

/// Every stdout line as JSON (the test fails on a line that is not).
fn json_lines(stdout: &str) -> Vec<Value> {
    stdout.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"))).collect()
}

fn ok_json(dir: &Path, args: &[&str]) -> String {
    let (code, stdout, stderr) = run(workbench(dir).args(args));
    assert_eq!(code, 0, "{args:?}: {stderr}");
    stdout
}

#[test]
fn sweep_queue_ablation_and_plot_print_json() {
    let dir = temp_dir("json-output");
    let mut args = vec!["sweep", "--json", "seed=0,1"];
    args.extend_from_slice(TINY);
    let events = json_lines(&ok_json(&dir, &args));
    assert_eq!(events[0]["event"], "queued", "{events:?}");
    assert_eq!(events[0]["sweep"], 1);
    let queued: Vec<i64> = events[0]["runs"].as_array().unwrap().iter().map(|r| r["run"].as_i64().unwrap()).collect();
    assert_eq!(queued, vec![1, 2]);
    assert_eq!(events[0]["runs"][0]["layer"], "transformer");
    assert!(events[0]["runs"][1]["overrides"].as_array().unwrap().iter().any(|o| o == "seed=1"), "{events:?}");
    let started: Vec<&Value> = events.iter().filter(|e| e["event"] == "started").collect();
    assert_eq!(started.len(), 2, "{events:?}");
    assert!(started.iter().all(|e| e.get("job").is_none()), "local workers have no Slurm job: {events:?}");
    let end = events.last().unwrap();
    assert_eq!(
        (end["event"].as_str(), end["exit_code"].as_i64(), end["paused"].as_u64()),
        (Some("ended"), Some(0), Some(0))
    );
    assert_eq!(end["runs"].as_array().unwrap().len(), 2, "{end}");
    assert!(end["runs"].as_array().unwrap().iter().all(|r| r["status"] == "finished"), "{end}");

    // Nothing queued: the runner ends at once, and says so in JSON.
    let events = json_lines(&ok_json(&dir, &["queue", "--json"]));
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["event"], "ended");

    let table: Value = serde_json::from_str(&ok_json(&dir, &["ablation", "--sweep", "1", "--json"])).unwrap();
    let row = &table["rows"][0];
    assert_eq!(row["layer"], "transformer");
    assert_eq!(row["runs"], serde_json::json!([1, 2]));
    assert_eq!(row["seeds"], serde_json::json!([0, 1]));
    let columns = table["columns"].as_array().unwrap();
    assert!(!columns.is_empty());
    let first = columns[0].as_str().unwrap();
    assert_eq!(row["metrics"][first]["n"], 2, "{table}");
    assert!(row["metrics"][first]["mean"].is_number(), "{table}");

    let out = dir.join("fig.svg");
    let args = ["plot", "--runs", "1,2", "--panels", "loss", "--out", out.to_str().unwrap(), "--json"];
    let plotted: Value = serde_json::from_str(&ok_json(&dir, &args)).unwrap();
    assert_eq!(plotted["runs"], serde_json::json!([1, 2]));
    assert_eq!(plotted["panels"], serde_json::json!(["loss"]));
    assert_eq!(plotted["out"], out.to_str().unwrap());
    assert!(out.is_file());
}

/// A sweep whose run diverges reports it in its last line, with the exit code.
#[test]
fn a_sweep_reports_each_run_status_in_json() {
    let dir = temp_dir("json-sweep-diverged");
    let plugins = plugin_dir_with("json-sweep-diverged", &["fixture-panicking-plugin", "sudoku"]);
    let mut args = fixture_sweep_args("nan", 3, 3);
    args.push("--json".into());
    let (code, stdout, stderr) = run(workbench(&dir).env("WORKBENCH_PLUGIN_PATH", &plugins).args(&args));
    assert_eq!(code, 4, "{stderr}");
    let end = json_lines(&stdout).pop().unwrap();
    assert_eq!(end["exit_code"], 4);
    assert_eq!(end["runs"][0]["status"], "diverged", "{end}");
}

/// `watch --json`: one object per line, the plugins loaded at start, then what it watches.
#[test]
fn watch_prints_one_json_object_per_event() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let dir = temp_dir("json-watch");
    let plugins = plugin_dir_with("json-watch", &["sudoku"]);
    let mut child = workbench(&dir)
        .args(["--plugin-dir", plugins.to_str().unwrap(), "watch", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let done = line.contains("\"watching\"");
            let _ = tx.send(line);
            if done {
                break;
            }
        }
    });
    let mut events = Vec::new();
    while let Ok(line) = rx.recv_timeout(std::time::Duration::from_secs(30)) {
        events.push(serde_json::from_str::<Value>(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")));
        if events.last().unwrap()["event"] == "watching" {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(events.iter().any(|e| e["event"] == "plugin" && e["name"] == "sudoku"), "{events:?}");
    let watching = events.iter().find(|e| e["event"] == "watching").expect("a watching event");
    assert!(watching["library_dirs"].as_array().is_some_and(|d| !d.is_empty()), "{watching}");
}

/// A run another queue runner on the same store started (the TUI's, a second `queue`) is told
/// as started, `elsewhere`, before it is told as ended.
#[test]
fn a_run_another_runner_started_is_told_as_started_elsewhere() {
    use std::process::Stdio;
    let dir = temp_dir("json-elsewhere");
    let plugins = plugin_dir_with("json-elsewhere", &["fixture-panicking-plugin", "sudoku"]);
    // About four seconds of training: 200 ms a step.
    let mut sweep = fixture_sweep_args("slow", 20, 20);
    sweep.extend(["seed=0".into(), "--detach".into()]);
    let (code, _, err) = run(workbench(&dir).env("WORKBENCH_PLUGIN_PATH", &plugins).args(&sweep));
    assert_eq!(code, 0, "{err}");
    let mut first = workbench(&dir)
        .env("WORKBENCH_PLUGIN_PATH", &plugins)
        .arg("queue")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while common::show(&dir, 1)["run"]["status"] != "running" {
        assert!(std::time::Instant::now() < deadline, "the first runner never started run 1");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let (code, stdout, stderr) = run(workbench(&dir).env("WORKBENCH_PLUGIN_PATH", &plugins).args(["queue", "--json"]));
    assert!(first.wait().unwrap().success());
    assert_eq!(code, 0, "{stderr}");
    let events = json_lines(&stdout);
    assert_eq!(events[0], serde_json::json!({"event": "started", "run": 1, "elsewhere": true}), "{events:?}");
    let end = events.last().unwrap();
    assert_eq!(end["runs"], serde_json::json!([{"run": 1, "status": "finished"}]), "{events:?}");
    assert_eq!(events.len(), 2, "{events:?}");
}
