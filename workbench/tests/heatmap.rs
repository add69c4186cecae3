//! `workbench ablation --heatmap`: a tiny hyperset sweep over layers × iterations on Sudoku,
//! laid out as text, JSON and images, checked against the runs' stored metrics.

use crate::common;

use common::{run, temp_dir, train_tiny, workbench};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// A tiny Sudoku configuration without the swept keys (a second or two a run).
const TINY: &[&str] = &[
    "d=16",
    "heads=2",
    "difficulty=easy",
    "task.train_puzzles=32",
    "task.eval_puzzles=8",
    "steps=4",
    "eval_every=2",
    "eval_depths=",
    "eval_examples=8",
];

fn ok(dir: &Path, args: &[&str]) -> String {
    let (code, stdout, stderr) = run(workbench(dir).args(args));
    assert_eq!(code, 0, "workbench {args:?} failed:\n{stdout}\n{stderr}");
    stdout
}

/// The exit code and stderr of a command that must be refused.
fn refused(dir: &Path, args: &[&str]) -> String {
    let (code, stdout, stderr) = run(workbench(dir).args(args));
    assert_eq!(code, 2, "workbench {args:?} was not refused as a usage error:\n{stdout}\n{stderr}");
    stderr
}

/// Per run: (layers, iterations) from its stored configuration and its final eval cell_acc
/// (the value at its last evaluation), read through the store API.
fn stored_cells(dir: &Path) -> BTreeMap<i64, ((String, String), f64)> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let store = workbench::store::Store::open(&dir.join("runs.db")).await.unwrap();
        let mut out = BTreeMap::new();
        for record in store.list_runs().await.unwrap() {
            let config = workbench::ablation::configurations([&record]).remove(0);
            let key = (config["layers"].clone(), config["iterations"].clone());
            let metrics = store.metrics(record.id).await.unwrap();
            let last = metrics.iter().filter(|m| m.split == "eval" && m.name == "cell_acc").max_by_key(|m| m.step);
            out.insert(record.id, (key, last.expect("an eval cell_acc").value));
        }
        out
    })
}

#[test]
fn a_layers_by_iterations_sweep_becomes_a_grid_of_the_stored_metrics() {
    let dir = temp_dir("heatmap");
    let mut args = vec!["sweep", "--layer", "hyperset", "--task", "sudoku"];
    args.extend_from_slice(TINY);
    args.extend_from_slice(&["layers=1,2", "iterations=2,4", "seed=0,1"]);
    ok(&dir, &args);
    let stored = stored_cells(&dir);
    assert_eq!(stored.len(), 8);

    // JSON: every cell is the mean over the two seeds of the runs' stored final values.
    let json: Value =
        serde_json::from_str(&ok(&dir, &["ablation", "--sweep", "1", "--heatmap", "layers,iterations", "--json"]))
            .unwrap();
    assert_eq!(json["metric"], "final cell_acc");
    assert_eq!((json["rows_key"].as_str(), json["columns_key"].as_str()), (Some("layers"), Some("iterations")));
    assert_eq!(json["rows"], serde_json::json!(["1", "2"]));
    assert_eq!(json["columns"], serde_json::json!(["2", "4"]));
    let mut expected_text = Vec::new();
    for (r, layers) in ["1", "2"].iter().enumerate() {
        for (c, iterations) in ["2", "4"].iter().enumerate() {
            let members: Vec<(i64, f64)> = stored
                .iter()
                .filter(|(_, ((l, i), _))| l == layers && i == iterations)
                .map(|(id, (_, v))| (*id, *v))
                .collect();
            assert_eq!(members.len(), 2, "two seeds at layers={layers}, iterations={iterations}");
            let mean = members.iter().map(|m| m.1).sum::<f64>() / 2.0;
            let cell = &json["cells"][r][c];
            assert_eq!(cell["n"], 2, "{cell}");
            assert!((cell["mean"].as_f64().unwrap() - mean).abs() < 1e-12, "{cell} vs {mean}");
            let runs: Vec<i64> = cell["runs"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
            assert_eq!(runs, members.iter().map(|m| m.0).collect::<Vec<_>>());
            expected_text.push(format!("{mean:.4}"));
        }
    }

    // Text, with the keys' full names: the same values with the table's four decimals.
    let text = ok(&dir, &["ablation", "--sweep", "1", "--heatmap", "layer.layers,layer.iterations"]);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("final cell_acc") && lines[0].contains("2 seeds per cell"), "{text}");
    assert!(lines[1].starts_with("layers \\ iterations"), "{text}");
    for (line, values) in [(lines[2], &expected_text[0..2]), (lines[3], &expected_text[2..4])] {
        for v in values {
            assert!(line.contains(v.as_str()), "no {v} in `{line}`:\n{text}");
        }
    }

    // The same configurations as a table sorted best first: means that never increase, the
    // grid's four cells in some order.
    let table: Value =
        serde_json::from_str(&ok(&dir, &["ablation", "--sweep", "1", "--sort", "cell_acc", "--json"])).unwrap();
    let means: Vec<f64> = table["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row["metrics"]["final cell_acc"]["mean"].as_f64().unwrap())
        .collect();
    assert_eq!(means.len(), 4, "{table}");
    assert!(means.windows(2).all(|w| w[0] >= w[1]), "best first: {means:?}");
    let e = refused(&dir, &["ablation", "--sweep", "1", "--sort", "cell_ac"]);
    assert!(e.contains("--sort: no metric `cell_ac`") && e.contains("did you mean `cell_acc`"), "{e}");
    let e = refused(&dir, &["ablation", "--sweep", "1", "--sort", "cell_acc", "--heatmap", "layers,iterations"]);
    assert!(e.contains("--sort") && e.contains("--heatmap"), "{e}");

    // Leaving out the runs of one configuration leaves its cell empty.
    let keep: Vec<String> =
        stored.iter().filter(|(_, ((l, i), _))| !(l == "2" && i == "2")).map(|(id, _)| id.to_string()).collect();
    let some = keep.join(",");
    let json: Value =
        serde_json::from_str(&ok(&dir, &["ablation", "--runs", &some, "--heatmap", "layers,iterations", "--json"]))
            .unwrap();
    assert_eq!(json["cells"][1][0], Value::Null, "{json}");
    let text = ok(&dir, &["ablation", "--runs", &some, "--heatmap", "layers,iterations"]);
    assert!(text.lines().nth(3).unwrap().contains('–'), "{text}");
    // The ids may also come as arguments of their own.
    let args: Vec<&str> = ["ablation"]
        .into_iter()
        .chain(keep.iter().map(String::as_str))
        .chain(["--heatmap", "layers,iterations"])
        .collect();
    assert_eq!(ok(&dir, &args), text, "`ablation 3 4 ...` selects as `--runs 3,4,...` does");

    // Images: a valid PNG the image crate decodes, and an SVG naming the keys.
    let png = dir.join("grid.png");
    let report: Value = serde_json::from_str(&ok(
        &dir,
        &["ablation", "--sweep", "1", "--heatmap", "layers,iterations", "-o", png.to_str().unwrap(), "--json"],
    ))
    .unwrap();
    assert_eq!(report["out"], png.to_str().unwrap());
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    let image = image::load_from_memory(&bytes).unwrap();
    assert!(image.width() > 0 && image.height() > 0);
    let svg = dir.join("grid.svg");
    ok(
        &dir,
        &[
            "ablation",
            "--sweep",
            "1",
            "--heatmap",
            "layers,iterations",
            "--metric",
            "best:cell_acc",
            "--out",
            svg.to_str().unwrap(),
        ],
    );
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.contains("layers") && svg.contains("iterations") && svg.contains("best cell_acc"));

    // Bad input: usage errors that say what is wrong.
    let sweep = ["ablation", "--sweep", "1", "--heatmap"];
    let with = |rest: &[&'static str]| -> Vec<&str> { sweep.iter().copied().chain(rest.iter().copied()).collect() };
    let e = refused(&dir, &with(&["layres,iterations"]));
    assert!(e.contains("unknown key `layres`") && e.contains("did you mean `layers`?"), "{e}");
    let e = refused(&dir, &with(&["layers,layer.layers"]));
    assert!(e.contains("`layers` is given twice"), "{e}");
    let e = refused(&dir, &with(&["layers,d"]));
    assert!(e.contains("`d` has one value") && e.contains("d=16"), "{e}");
    let e = refused(&dir, &with(&["layers,iterations", "--metric", "cel_acc"]));
    assert!(e.contains("no metric `cel_acc`") && e.contains("did you mean `cell_acc`?"), "{e}");
    let e = refused(&dir, &with(&["layers"]));
    assert!(e.contains("two keys"), "{e}");
    let e = refused(&dir, &with(&["layers,iterations", "--where", "layers=1"]));
    assert!(e.contains("`layers` has one value"), "{e}");

    // A run of another configuration: every finished run differs in more than the axes.
    train_tiny(&dir, "hyperset", &[]);
    let e = refused(&dir, &["ablation", "--heatmap", "layers,iterations"]);
    assert!(e.contains("also differ in") && e.contains("--where"), "{e}");
    // The sweep alone still makes its grid.
    ok(&dir, &["ablation", "--sweep", "1", "--heatmap", "layers,iterations"]);
}
