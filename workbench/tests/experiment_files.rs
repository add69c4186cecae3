//! Experiment files through the real binary: `train --config` (files composed, the command
//! line winning), `runs show N --config` reproducing a run bit for bit, `sweep --config`,
//! and bad files refused with the file, table and key named.

use crate::common;

use common::{run, show, temp_dir, train_losses, workbench};

/// A tiny Sudoku configuration (a few seconds on one thread), split over two files.
const BASE: &str = r#"
[layer]
plugin = "hyperset"
d = 32
heads = 2
iterations = 2
time_dim = 8

[task]
plugin = "sudoku"
difficulty = "easy"
train_puzzles = 32
eval_puzzles = 8

[train]
steps = 100
eval_every = 3
eval_examples = 8
eval_depths = ""
threads = 1
lr = 3e-3
"#;

const SMALLER: &str = "[layer]\nd = 16\n";

#[test]
fn a_run_printed_as_an_experiment_file_trains_again_bit_for_bit() {
    let dir = temp_dir("expfile-reproduce");
    std::fs::write(dir.join("base.toml"), BASE).unwrap();
    std::fs::write(dir.join("smaller.toml"), SMALLER).unwrap();
    // The second file wins over the first, the command line over both.
    let (code, _, stderr) =
        run(workbench(&dir).args(["train", "--config", "base.toml", "--config", "smaller.toml", "steps=6", "--json"]));
    assert_eq!(code, 0, "{stderr}");
    let first = show(&dir, 1);
    let config = &first["run"]["config"];
    assert_eq!(config["layer"], "hyperset");
    assert_eq!(config["layer_config"]["d"], 16);
    assert_eq!(config["train"]["steps"], 6);
    assert_eq!(config["train"]["lr"], 3e-3);

    let (code, printed, stderr) = run(workbench(&dir).args(["runs", "show", "1", "--config"]));
    assert_eq!(code, 0, "{stderr}");
    assert!(printed.starts_with("# Run 1: hyperset"), "{printed}");
    std::fs::write(dir.join("printed.toml"), &printed).unwrap();
    let (code, _, stderr) = run(workbench(&dir).args(["train", "--config", "printed.toml", "--json"]));
    assert_eq!(code, 0, "{stderr}\n{printed}");

    assert_eq!(show(&dir, 2)["run"]["config"], *config, "the same stored configuration");
    let (a, b) = (train_losses(&dir, 1), train_losses(&dir, 2));
    assert_eq!(a.len(), 6);
    let bits = |s: &[(u64, f64)]| s.iter().map(|(step, v)| (*step, v.to_bits())).collect::<Vec<_>>();
    assert_eq!(bits(&a), bits(&b), "loss series differ:\n{a:?}\n{b:?}");
}

#[test]
fn a_sweep_file_queues_its_grid() {
    let dir = temp_dir("expfile-sweep");
    std::fs::write(dir.join("base.toml"), BASE).unwrap();
    std::fs::write(
        dir.join("grid.toml"),
        "[sweep]\nname = \"tiny grid\"\nseeds = [0, 1]\nlayer.heads = [1, 2]\nlr = \"1e-3:1e-2:log2\"\n",
    )
    .unwrap();
    // The command line's axis replaces the file's for the same key.
    let (code, _, stderr) = run(workbench(&dir).args([
        "sweep",
        "--config",
        "base.toml",
        "--config",
        "grid.toml",
        "train.lr=0.002",
        "--detach",
    ]));
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("tiny grid") && stderr.contains("4 runs queued"), "{stderr}");
    let (code, listed, stderr) = run(workbench(&dir).args(["runs", "--json"]));
    assert_eq!(code, 0, "{stderr}");
    let runs: Vec<serde_json::Value> = serde_json::from_str(&listed).unwrap();
    let mut points: Vec<(i64, i64)> = runs
        .iter()
        .map(|r| {
            assert_eq!(r["config"]["train"]["lr"], 0.002);
            assert_eq!(r["config"]["layer_config"]["d"], 32);
            (r["config"]["layer_config"]["heads"].as_i64().unwrap(), r["config"]["train"]["seed"].as_i64().unwrap())
        })
        .collect();
    points.sort();
    assert_eq!(points, [(1, 0), (1, 1), (2, 0), (2, 1)]);
}

#[test]
fn bad_experiment_files_are_refused_with_the_file_table_and_key() {
    let dir = temp_dir("expfile-bad");
    std::fs::write(dir.join("base.toml"), BASE).unwrap();
    for (text, expected) in [
        ("[model]\nd = 3\n", "unknown table [model]"),
        ("[layer]\nheads = [1, 2]\n", "[layer] heads: an array cannot be a value here"),
        ("[layer]\nwidth = 3\n", "unknown key `layer.width`"),
        ("[train]\nsteps = 0\n", "outside the allowed range"),
        ("[sweep]\nseeds = [0, 1]\n", "`workbench sweep --config"),
    ] {
        std::fs::write(dir.join("bad.toml"), text).unwrap();
        let (code, _, stderr) = run(workbench(&dir).args(["train", "--config", "base.toml", "--config", "bad.toml"]));
        assert_eq!(code, 2, "{text}: {stderr}");
        assert!(stderr.contains(expected), "{text}: expected `{expected}` in {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    let (code, _, stderr) = run(workbench(&dir).args(["train", "--config", "missing.toml"]));
    assert_eq!(code, 2);
    assert!(stderr.contains("cannot read the experiment file missing.toml"), "{stderr}");
    let (_, listed, _) = run(workbench(&dir).args(["runs", "--json"]));
    assert_eq!(listed.trim(), "[]", "nothing was stored");
}
