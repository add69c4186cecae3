//! `workbench runs --filter`, `runs tag`, `runs note` and `runs diff`, run as a user would, on
//! an SQLite store filled here.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use workbench::store::{DiagnosticRow, MetricRow, NewRun, PluginRef, RunStatus, Store, StoreLocation};

mod common;

/// A store with three runs (ids 1, 2, 3):
/// 1. hyperset d=64 lr=0.001, finished, tagged `baseline`, with a NaN eval value and a config
///    string holding a comma and quotes;
/// 2. transformer d=32 lr=0.003, finished, in sweep 1;
/// 3. hyperset d=128, failed, no metrics.
struct Fixture {
    dir: PathBuf,
}

const AWKWARD: &str = "a, \"quoted\" value";

fn plugin(name: &str, build: &str) -> PluginRef {
    PluginRef { name: name.into(), version: "0.1.0".into(), fingerprint: "fp".into(), build: Some(build.into()) }
}

fn new_run(layer: &str, build: &str, d: i64, lr: f64) -> NewRun {
    NewRun {
        layer: plugin(layer, build),
        task: plugin("sudoku", "t1"),
        config: json!({
            "layer_config": {"d": d, "mix": AWKWARD},
            "task_config": {"difficulty": "easy"},
            "train": {"lr": lr, "seed": 0}
        }),
        seed: 0,
        device: "cpu".into(),
        git_rev: None,
        total_steps: Some(3),
    }
}

fn metric(step: u64, split: &str, name: &str, value: f64) -> MetricRow {
    MetricRow { step, split: split.into(), name: name.into(), value, wall_time: step as f64 * 0.25 }
}

fn diagnostic(step: u64, iteration: u32, value: f64) -> DiagnosticRow {
    DiagnosticRow { step, iteration, name: "energy".into(), value }
}

/// Run 1's metric and diagnostic rows.
fn metrics_1() -> Vec<MetricRow> {
    vec![
        metric(1, "train", "loss", 2.5),
        metric(2, "train", "loss", 1.25),
        metric(3, "train", "loss", 0.1),
        metric(2, "eval", "cell_acc", f64::NAN),
        metric(3, "eval", "cell_acc", 0.75),
    ]
}

fn diagnostics_1() -> Vec<DiagnosticRow> {
    vec![diagnostic(2, 0, -1.5), diagnostic(2, 1, -2.0), diagnostic(3, 0, -1.0), diagnostic(3, 1, -3.0)]
}

impl Fixture {
    async fn new(tag: &str) -> Fixture {
        let dir = common::temp_dir(tag);
        let store = Fixture::open_at(&dir).await;
        let a = store.create_run(&new_run("hyperset", "b1", 64, 0.001)).await.unwrap();
        store.insert_metrics(a, &metrics_1()).await.unwrap();
        store.insert_diagnostics(a, &diagnostics_1()).await.unwrap();
        store.set_tags(a, &["baseline".to_string()]).await.unwrap();
        let sweep = store.create_sweep("widths", &json!({})).await.unwrap();
        let b = store.create_run_in_sweep(&new_run("transformer", "b2", 32, 0.003), sweep, 0).await.unwrap();
        store.insert_metrics(b, &[metric(3, "train", "loss", 0.5), metric(3, "eval", "cell_acc", 0.5)]).await.unwrap();
        let c = store.create_run(&new_run("hyperset", "b1", 128, 0.001)).await.unwrap();
        assert_eq!((a, b, c), (1, 2, 3));
        for (id, status) in [(a, RunStatus::Finished), (b, RunStatus::Finished), (c, RunStatus::Failed)] {
            store.mark_running(id, 1).await.unwrap();
            store.finish(id, status, None).await.unwrap();
        }
        store.close().await;
        Fixture { dir }
    }

    async fn open_at(dir: &Path) -> Store {
        Store::connect(&StoreLocation::Sqlite(dir.join("runs.db"))).await.unwrap()
    }

    async fn store(&self) -> Store {
        Fixture::open_at(&self.dir).await
    }

    /// Runs `workbench ARGS` on the store; returns (exit code, stdout, stderr).
    fn run(&self, args: &[&str]) -> (i32, String, String) {
        common::run(common::workbench(&self.dir).args(args))
    }

    /// Runs a command that must succeed; returns its stdout.
    fn ok(&self, args: &[&str]) -> String {
        let (code, out, err) = self.run(args);
        assert_eq!(code, 0, "workbench {args:?} failed:\n{err}");
        out
    }

    /// Runs a command that must fail; returns its stderr.
    fn fails(&self, args: &[&str]) -> String {
        let (code, _, err) = self.run(args);
        assert_eq!(code, 1, "workbench {args:?} should fail:\n{err}");
        assert!(!err.contains("panicked"), "{err}");
        err
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The ids in the first column of `runs` output.
fn listed(out: &str) -> Vec<i64> {
    out.lines().skip(1).filter_map(|l| l.split_whitespace().next()?.parse().ok()).collect()
}

#[tokio::test]
async fn the_list_filter_uses_the_tui_syntax() {
    let f = Fixture::new("runs-filter").await;
    assert_eq!(listed(&f.ok(&["runs"])), vec![1, 2, 3]);
    assert_eq!(listed(&f.ok(&["runs", "--filter", "layer:hyperset"])), vec![1, 3]);
    assert_eq!(listed(&f.ok(&["runs", "--filter", "tag:baseline"])), vec![1]);
    assert_eq!(listed(&f.ok(&["runs", "--filter", "lr=1e-3 status:finished"])), vec![1]);
    assert_eq!(listed(&f.ok(&["runs", "--filter", "sweep:1"])), vec![2]);
    let json: Value = serde_json::from_str(&f.ok(&["runs", "--json", "--filter", "d=128"])).unwrap();
    assert_eq!(json.as_array().unwrap().iter().map(|r| r["id"].as_i64().unwrap()).collect::<Vec<_>>(), vec![3]);
    assert!(f.ok(&["runs", "--filter", "layer:nothing"]).contains("no run passes the filter"));
    let err = f.fails(&["runs", "--filter", "stauts:finished"]);
    assert!(err.contains("unknown filter field `stauts`") && err.contains("status:"), "{err}");
}

#[tokio::test]
async fn tags_and_notes_are_set_from_the_command_line() {
    let f = Fixture::new("annotate").await;
    f.ok(&["runs", "tag", "2", "paper, wide"]);
    f.ok(&["runs", "note", "2", "wider", "is", "better"]);
    let run = f.store().await.run(2).await.unwrap();
    assert_eq!((run.tags, run.notes.as_str()), (vec!["paper".to_string(), "wide".to_string()], "wider is better"));
    assert_eq!(listed(&f.ok(&["runs", "--filter", "tag:paper"])), vec![2]);
    f.ok(&["runs", "tag", "2", ""]);
    assert!(f.store().await.run(2).await.unwrap().tags.is_empty());
    let err = f.fails(&["runs", "tag", "42", "x"]);
    assert!(err.contains("run 42 does not exist"), "{err}");
    let err = f.fails(&["runs", "note", "42", "x"]);
    assert!(err.contains("run 42 does not exist"), "{err}");
    let err = f.fails(&["runs", "tag", "2", "two words"]);
    assert!(err.contains("single words"), "{err}");
}

#[tokio::test]
async fn diff_shows_what_differs() {
    let f = Fixture::new("diff").await;
    let d: Value = serde_json::from_str(&f.ok(&["runs", "diff", "1", "2", "--json"])).unwrap();
    let config = d["config"].as_array().unwrap();
    let keys: Vec<&str> = config.iter().map(|c| c["key"].as_str().unwrap()).collect();
    assert_eq!(keys, ["d", "lr"], "only differing keys: {d}");
    assert_eq!((config[0]["a"].clone(), config[0]["b"].clone()), (json!("64"), json!("32")));
    let plugins = d["plugins"].as_array().unwrap();
    assert_eq!(plugins.len(), 1, "the task is the same build: {d}");
    assert_eq!((plugins[0]["role"].clone(), plugins[0]["b"]["build"].clone()), (json!("layer"), json!("b2")));
    let acc = d["metrics"].as_array().unwrap().iter().find(|m| m["name"] == "cell_acc").unwrap().clone();
    assert_eq!((acc["split"].clone(), acc["a"].clone(), acc["b"].clone()), (json!("eval"), json!(0.75), json!(0.5)));
    let text = f.ok(&["runs", "diff", "1", "3"]);
    assert!(text.contains("plugins:  the same builds"), "{text}");
    assert!(text.lines().any(|l| l.contains(" d ") && l.contains("64") && l.contains("128")), "{text}");
    assert!(text.lines().any(|l| l.contains("cell_acc") && l.contains("0.75000") && l.contains(" - ")), "{text}");
    assert!(f.fails(&["runs", "diff", "1", "1"]).contains("two different runs"));
    assert!(f.fails(&["runs", "diff", "1", "9"]).contains("run 9 does not exist"));
}
