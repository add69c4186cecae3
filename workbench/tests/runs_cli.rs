//! `workbench runs --filter`, `runs list`, `runs export` (CSV, JSON lines, TensorBoard), `runs tag`,
//! `runs note` and `runs diff`, run as a user would, on an SQLite store filled here.

use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use workbench::export::tfevents::{self, Value as TfValue, What};
use workbench::store::{DiagnosticRow, MetricRow, NewRun, PluginRef, RunStatus, Store, StoreLocation};

use crate::common;

/// A store with three runs (ids 1, 2, 3):
/// 1. hyperset d=64 lr=0.001, finished, tagged `baseline`, with a NaN eval value and a config
///    string holding a comma and quotes;
/// 2. transformer d=32 lr=0.003, finished, in sweep 1;
/// 3. hyperset d=128, failed, no metrics.
struct Fixture {
    dir: common::TestDir,
}

const AWKWARD: &str = "a, \"quoted\" value";

fn plugin(name: &str, build: &str) -> PluginRef {
    PluginRef { name: name.into(), version: "0.1.0".into(), fingerprint: "fp".into(), build: Some(build.into()) }
}

fn new_run(layer: &str, build: &str, d: i64, lr: f64) -> NewRun {
    // Hyper-SET layers have a `beta2` of their own beside the trainer's.
    let mut layer_config = json!({"d": d, "mix": AWKWARD});
    if layer == "hyperset" {
        layer_config["beta2"] = json!(0.99);
    }
    NewRun {
        layer: plugin(layer, build),
        task: plugin("sudoku", "t1"),
        config: json!({
            "layer_config": layer_config,
            "task_config": {"difficulty": "easy"},
            "train": {"lr": lr, "seed": 0, "beta2": 0.95}
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

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
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

/// A store a lab shares: each run records the user whose command stored it; the list shows
/// a `user` column once the runs are several users', `user:` picks one user's, and `runs
/// show` names who stored a run.
#[tokio::test]
async fn runs_record_who_stored_them() {
    let f = Fixture::new("runs-users").await;
    // The fixture's runs are this user's; one more queued by another user.
    assert!(!f.ok(&["runs"]).lines().next().unwrap().contains("user"), "one user: no column");
    let queue = ["sweep", "--layer", "hyperset", "--task", "sudoku", "--detach", "d=16", "heads=2", "iterations=2"];
    let tiny = ["difficulty=easy", "task.train_puzzles=32", "task.eval_puzzles=8", "steps=2", "eval_every=2"];
    let queue = [&queue[..], &tiny[..], &["eval_examples=8", "eval_depths="]].concat();
    let (code, _, err) = common::run(common::workbench(&f.dir).env("USER", "grace").args(queue));
    assert_eq!(code, 0, "{err}");
    let listing = f.ok(&["runs"]);
    let header: Vec<&str> = listing.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header[..5], ["id", "status", "layer", "task", "user"], "{listing}");
    assert!(listing.lines().last().unwrap().contains(" grace "), "{listing}");
    assert_eq!(listed(&f.ok(&["runs", "--filter", "user:grace"])), vec![4]);
    assert_eq!(listed(&f.ok(&["runs", "--filter", "-user:grace"])), vec![1, 2, 3]);
    assert!(f.ok(&["runs", "show", "4"]).lines().next().unwrap().ends_with("hyperset on sudoku, stored by grace"));
    let shown: Value = serde_json::from_str(&f.ok(&["runs", "show", "4", "--json"])).unwrap();
    assert_eq!(shown["run"]["created_by"], "grace");
    // Deleting another user's run says whose it is before anything is deleted.
    let (code, _, err) = f.run(&["runs", "delete", "3,4"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("; run 4 was stored by someone else (grace); add --yes"), "{err}");
    // Stopping another user's run asks for --yes, naming whose it is; nothing is stopped.
    let (code, _, err) = f.run(&["runs", "cancel", "4"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("run 4 was stored by someone else (grace): add --yes"), "{err}");
    assert_eq!(listed(&f.ok(&["runs", "--filter", "status:queued"])), vec![4], "still queued");
    // Letting another user's run start says whose runner starts it.
    let (code, _, err) = f.run(&["runs", "pause", "4"]);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("grace's"), "{err}");
    let (code, _, err) = f.run(&["runs", "unpause", "4"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("run 4 is grace's: a runner of theirs starts it; `workbench queue --all-users`"), "{err}");
    // So does releasing her sweep; cancelling it asks for --yes, as cancelling her run does.
    assert_eq!(listed(&f.ok(&["runs", "--filter", "sweep:2"])), vec![4], "grace's sweep");
    let (code, _, err) = f.run(&["sweeps", "pause", "2"]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = f.run(&["sweeps", "resume", "2"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("sweep 2: 1 queued run released") && err.contains("run 4 is grace's"), "{err}");
    let (code, _, err) = f.run(&["sweeps", "cancel", "2"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("sweep 2: run 4 was stored by someone else (grace): add --yes"), "{err}");
    // A queue runner starts its user's runs only, unless it runs everyone's.
    let (code, _, err) = f.run(&["queue"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("1 queued run is other users' (grace): their runners start them"), "{err}");
    assert!(err.contains("0 of 0 runs ended"), "{err}");
    assert_eq!(listed(&f.ok(&["runs", "--filter", "status:queued"])), vec![4], "grace's run waits for her runner");
    let (code, _, err) = f.run(&["queue", "--all-users"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("1 of 1 runs ended (0 not finished)"), "{err}");
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
    // Comparisons and negation; a filter that starts with `-` is the option's value.
    assert_eq!(listed(&f.ok(&["runs", "--filter", "d>=128"])), vec![3]);
    assert_eq!(listed(&f.ok(&["runs", "--filter", "-layer:hyperset"])), vec![2]);
    assert_eq!(listed(&f.ok(&["runs", "--filter", "-d>=128 layer:hyperset"])), vec![1]);
    let err = f.fails(&["runs", "--filter", "lr<small"]);
    assert!(err.contains("not a number"), "{err}");
}

#[tokio::test]
async fn the_list_sorts_by_a_column_or_a_metric_best_first() {
    let f = Fixture::new("runs-sort").await;
    // cell_acc: run 1 0.75, run 2 0.5, run 3 none (last either way).
    assert_eq!(listed(&f.ok(&["runs", "--sort", "cell_acc"])), vec![1, 2, 3]);
    assert_eq!(listed(&f.ok(&["runs", "--sort", "-cell_acc"])), vec![2, 1, 3]);
    assert_eq!(listed(&f.ok(&["runs", "list", "--sort", "layer", "--filter", "status:finished"])), vec![1, 2]);
    assert_eq!(listed(&f.ok(&["runs", "--sort", "-id", "--last", "2"])), vec![3, 2]);
    let json: Value = serde_json::from_str(&f.ok(&["runs", "--json", "--sort", "best:cell_acc"])).unwrap();
    assert_eq!(json.as_array().unwrap().iter().map(|r| r["id"].as_i64().unwrap()).collect::<Vec<_>>(), [1, 2, 3]);
    let (code, _, err) = f.run(&["runs", "--sort", "bleu"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no run listed has an evaluation metric `bleu`") && err.contains("cell_acc"), "{err}");
    let (code, _, err) = f.run(&["runs", "--sort", "id", "show", "1"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("a command takes its runs after its name"), "{err}");
}

#[tokio::test]
async fn the_list_picks_runs_as_export_does() {
    let f = Fixture::new("runs-pick").await;
    assert_eq!(listed(&f.ok(&["runs", "--sweep", "1"])), vec![2]);
    assert_eq!(listed(&f.ok(&["runs", "--runs", "3,1"])), vec![3, 1]);
    assert_eq!(listed(&f.ok(&["runs", "--runs", "1,2,3", "--filter", "layer:hyperset"])), vec![1, 3]);
    let err = f.fails(&["runs", "--sweep", "7"]);
    assert!(err.contains("sweep 7 does not exist (see `workbench sweeps`)"), "{err}");
    let err = f.fails(&["runs", "--runs", "1,9"]);
    assert!(err.contains("9"), "{err}");
    let err = f.fails(&["runs", "--sweep", "1", "show", "2"]);
    assert!(err.contains("shape the list") && err.contains("after its name"), "{err}");
    // The most recent N of what the other options pick, in their order.
    assert_eq!(listed(&f.ok(&["runs", "--last", "2"])), vec![2, 3]);
    assert_eq!(listed(&f.ok(&["runs", "list", "--runs", "3,1,2", "--last", "2"])), vec![3, 2]);
    assert_eq!(listed(&f.ok(&["runs", "--filter", "layer:hyperset", "--last", "1"])), vec![3]);
    assert_eq!(listed(&f.ok(&["runs", "--last", "10"])), vec![1, 2, 3]);
    let (code, _, err) = f.run(&["runs", "--last", "0"]);
    assert_eq!(code, 2, "a usage error: {err}");
    assert!(err.contains("--last") && err.contains("0 is not in 1.."), "{err}");
    let exported = f.ok(&["runs", "export", "--format", "jsonl", "--last", "2"]);
    let runs: BTreeSet<i64> =
        exported.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()["run"].as_i64().unwrap()).collect();
    assert_eq!(runs, BTreeSet::from([2]), "run 3, the other of the last two, has no values");
}

#[tokio::test]
async fn the_list_takes_run_ids_and_filter_terms_as_arguments() {
    let f = Fixture::new("runs-terms").await;
    assert_eq!(listed(&f.ok(&["runs", "3,1"])), vec![3, 1]);
    assert_eq!(listed(&f.ok(&["runs", "3", "1"])), vec![3, 1]);
    assert_eq!(f.ok(&["runs", "2"]), f.ok(&["runs", "--runs", "2"]));
    assert_eq!(listed(&f.ok(&["runs", "layer:hyperset"])), vec![1, 3]);
    assert_eq!(listed(&f.ok(&["runs", "lr=1e-3", "status:finished"])), vec![1]);
    assert_eq!(listed(&f.ok(&["runs", "1,2,3", "layer:hyperset"])), vec![1, 3], "ids, then the filter");
    assert_eq!(listed(&f.ok(&["runs", "layer:hyperset", "--filter", "d>=128"])), vec![3], "both filters hold");
    assert_eq!(listed(&f.ok(&["runs", "list", "layer:hyperset", "--last", "1"])), vec![3]);
    assert_eq!(listed(&f.ok(&["runs", "--", "-layer:hyperset"])), vec![2], "a negated term after --");
    let err = f.fails(&["runs", "3", "--runs", "1"]);
    assert!(err.contains("both as arguments (3) and with --runs"), "{err}");
    let err = f.fails(&["runs", "3", "show"]);
    assert!(err.contains("`show` is a command of `runs`") && err.contains("--filter show"), "{err}");
    let err = f.fails(&["runs", "1,9"]);
    assert!(err.contains("9"), "{err}");
    let err = f.fails(&["runs", "stauts:finished"]);
    assert!(err.contains("stauts"), "{err}");
}

#[tokio::test]
async fn runs_list_and_sweeps_list_are_the_bare_commands() {
    let f = Fixture::new("runs-list").await;
    assert_eq!(f.ok(&["runs", "list"]), f.ok(&["runs"]));
    assert_eq!(listed(&f.ok(&["runs", "ls", "--filter", "layer:hyperset"])), vec![1, 3]);
    assert_eq!(f.ok(&["runs", "list", "--sweep", "1", "--json"]), f.ok(&["runs", "--sweep", "1", "--json"]));
    let err = f.fails(&["runs", "--sweep", "1", "list"]);
    assert!(err.contains("go after `list`: `workbench runs list --sweep N`"), "{err}");
    let sweeps = f.ok(&["sweeps"]);
    assert!(sweeps.contains("widths"), "{sweeps}");
    assert_eq!(f.ok(&["sweeps", "list"]), sweeps);
    assert_eq!(f.ok(&["sweeps", "ls", "--json"]), f.ok(&["sweeps", "--json"]));
}

#[tokio::test]
async fn csv_export_holds_every_value_with_the_configuration() {
    let f = Fixture::new("export-csv").await;
    let out = f.path("runs.csv");
    f.ok(&["runs", "export", "--runs", "1,2", "--format", "csv", "--out", out.to_str().unwrap()]);
    let mut reader = csv::Reader::from_path(&out).unwrap();
    let header: Vec<String> = reader.headers().unwrap().iter().map(String::from).collect();
    assert_eq!(&header[..4], ["run", "sweep", "layer", "task"]);
    for column in ["kind", "split", "name", "step", "iteration", "value", "wall_time", "config.d", "config.lr"] {
        assert!(header.iter().any(|h| h == column), "no column {column} in {header:?}");
    }
    let col = |name: &str| header.iter().position(|h| h == name).unwrap();
    let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    // Run 1: 5 metric rows and 4 diagnostic rows; run 2: 2 metric rows.
    assert_eq!(rows.len(), 5 + 4 + 2);
    let of = |run: &str| -> Vec<&csv::StringRecord> { rows.iter().filter(|r| &r[col("run")] == run).collect() };
    assert_eq!(of("1").len(), 9);
    for r in of("1") {
        assert_eq!((&r[col("config.d")], &r[col("config.mix")]), ("64", AWKWARD), "{r:?}");
        assert_eq!(&r[col("tags")], "baseline");
    }
    for r in of("2") {
        assert_eq!((&r[col("config.d")], &r[col("sweep")], &r[col("layer")]), ("32", "1", "transformer"));
    }
    // The trainer's beta2 is one column for both layers, though only Hyper-SET has two.
    assert!(!header.iter().any(|h| h == "config.beta2"), "{header:?}");
    for r in of("1").into_iter().chain(of("2")) {
        assert_eq!(&r[col("config.train.beta2")], "0.95", "{r:?}");
    }
    assert_eq!((&of("1")[0][col("config.layer.beta2")], &of("2")[0][col("config.layer.beta2")]), ("0.99", ""));
    let find = |run: &str, kind: &str, name: &str, step: &str, iteration: &str| {
        of(run)
            .into_iter()
            .find(|r| {
                &r[col("kind")] == kind
                    && &r[col("name")] == name
                    && &r[col("step")] == step
                    && &r[col("iteration")] == iteration
            })
            .unwrap_or_else(|| panic!("no row {run} {kind} {name} {step} {iteration}"))
    };
    let loss = find("1", "metric", "loss", "2", "");
    assert_eq!((&loss[col("split")], &loss[col("value")], &loss[col("wall_time")]), ("train", "1.25", "0.5"));
    assert_eq!(&find("1", "metric", "cell_acc", "2", "")[col("value")], "NaN");
    let energy = find("1", "diagnostic", "energy", "3", "1");
    assert_eq!((&energy[col("split")], &energy[col("value")], &energy[col("wall_time")]), ("", "-3.0", ""));
}

#[tokio::test]
async fn export_takes_run_ids_as_arguments_and_a_short_out() {
    let f = Fixture::new("export-ids").await;
    let (long, short) = (f.path("long.csv"), f.path("short.csv"));
    f.ok(&["runs", "export", "--runs", "1,2", "--out", long.to_str().unwrap()]);
    f.ok(&["runs", "export", "1", "2", "-o", short.to_str().unwrap()]);
    let rows = |path: &Path| std::fs::read_to_string(path).unwrap().lines().count();
    assert_eq!(rows(&short), 1 + 5 + 4 + 2, "the header, then run 1's 9 rows and run 2's 2");
    // The same rows but their wall-clock column, written at export time.
    assert_eq!(rows(&short), rows(&long));
    let only_two = f.ok(&["runs", "export", "2"]);
    assert_eq!(only_two.lines().count(), 1 + 2, "{only_two}");
    // Ids both ways, or with a sweep, are a usage error (exit code 2).
    for (args, other) in
        [(["runs", "export", "1", "--runs", "2"], "--runs"), (["runs", "export", "1", "--sweep", "1"], "--sweep")]
    {
        let (code, _, err) = f.run(&args);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("cannot be used with") && err.contains(other), "{err}");
    }
    let err = f.fails(&["runs", "export", "one"]);
    assert!(err.contains("bad run id list `one`"), "{err}");
}

#[tokio::test]
async fn jsonl_export_has_typed_values_and_every_run_by_default() {
    let f = Fixture::new("export-jsonl").await;
    let out = f.path("runs.jsonl");
    f.ok(&["runs", "export", "--format", "jsonl", "--out", out.to_str().unwrap()]);
    let lines: Vec<Value> =
        std::fs::read_to_string(&out).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 11, "run 3 has no values, so no rows");
    let nan = lines.iter().find(|l| l["name"] == "cell_acc" && l["step"] == 2).unwrap();
    assert_eq!(
        (nan["run"].clone(), nan["value"].clone(), nan["split"].clone()),
        (json!(1), Value::Null, json!("eval"))
    );
    assert_eq!((nan["config.d"].clone(), nan["config.lr"].clone()), (json!(64), json!(0.001)));
    let diag = lines.iter().find(|l| l["kind"] == "diagnostic" && l["step"] == 2 && l["iteration"] == 1).unwrap();
    assert_eq!(diag["value"], json!(-2.0));
    // Standard output when no file is named, with the filter narrowing the runs.
    let piped = f.ok(&["runs", "export", "--format", "jsonl", "--filter", "layer:transformer"]);
    let runs: Vec<i64> =
        piped.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()["run"].as_i64().unwrap()).collect();
    assert_eq!(runs, vec![2, 2]);
    let swept = f.ok(&["runs", "export", "--format", "csv", "--sweep", "1"]);
    assert_eq!(swept.lines().count(), 3, "{swept}");
}

#[tokio::test]
async fn bad_export_requests_are_refused_with_the_fix() {
    let f = Fixture::new("export-bad").await;
    let out = f.path("runs.csv");
    let out_s = out.to_str().unwrap();
    let err = f.fails(&["runs", "export", "--runs", "1,99", "--out", out_s]);
    assert!(err.contains("run 99 does not exist"), "{err}");
    assert!(!out.exists(), "nothing is written for a refused export");
    let err = f.fails(&["runs", "export", "--format", "parquet", "--out", out_s]);
    assert!(err.contains("unknown export format `parquet`") && err.contains("csv, jsonl or tensorboard"), "{err}");
    let err = f.fails(&["runs", "export", "--filter", "layer:nothing", "--out", out_s]);
    assert!(err.contains("no run passes the filter `layer:nothing`"), "{err}");
    let err = f.fails(&["runs", "export", "--sweep", "7", "--out", out_s]);
    assert!(err.contains("sweep 7 does not exist (see `workbench sweeps`)"), "{err}");
    let err = f.fails(&["runs", "export", "--out", f.path("missing/runs.csv").to_str().unwrap()]);
    assert!(err.contains("missing does not exist"), "{err}");
    let err = f.fails(&["runs", "export", "--format", "tensorboard"]);
    assert!(err.contains("--out DIR"), "{err}");
    std::fs::write(&out, "keep me").unwrap();
    let err = f.fails(&["runs", "export", "--out", out_s]);
    assert!(err.contains("exists") && err.contains("--force"), "{err}");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "keep me");
    let err = f.fails(&["runs", "export", "--format", "tensorboard", "--out", out_s]);
    assert!(err.contains("is a file"), "{err}");
    f.ok(&["runs", "export", "--out", out_s, "--force"]);
    assert!(std::fs::read_to_string(&out).unwrap().starts_with("run,sweep,layer"));
}

/// The event files under `dir`, by run directory name.
fn event_files(dir: &Path) -> Vec<(String, PathBuf)> {
    let mut files = Vec::new();
    for run_dir in std::fs::read_dir(dir).unwrap() {
        let run_dir = run_dir.unwrap().path();
        for file in std::fs::read_dir(&run_dir).unwrap() {
            let file = file.unwrap().path();
            files.push((run_dir.file_name().unwrap().to_string_lossy().into_owned(), file));
        }
    }
    files.sort();
    files
}

/// Scalars of an event file as (tag, step, value), and its text summaries as (tag, text).
type Decoded = (Vec<(String, i64, f32)>, Vec<(String, String)>);

fn decode(path: &Path) -> Decoded {
    let records = tfevents::read_records(std::fs::File::open(path).unwrap()).unwrap();
    let events = tfevents::decode_events(&records).unwrap();
    assert_eq!(events[0].what, Some(What::FileVersion("brain.Event:2".into())));
    let (mut scalars, mut texts) = (Vec::new(), Vec::new());
    for e in &events[1..] {
        let Some(What::Summary(summary)) = &e.what else { panic!("not a summary: {e:?}") };
        for v in &summary.value {
            match &v.value {
                Some(TfValue::SimpleValue(x)) => scalars.push((v.tag.clone(), e.step, *x)),
                Some(TfValue::Tensor(t)) => {
                    assert_eq!(v.metadata.as_ref().unwrap().plugin_data.as_ref().unwrap().plugin_name, "text");
                    texts.push((v.tag.clone(), String::from_utf8(t.string_val[0].clone()).unwrap()));
                }
                None => panic!("empty value"),
            }
        }
    }
    (scalars, texts)
}

fn same(a: f32, b: f64) -> bool {
    (a.is_nan() && b.is_nan()) || a == b as f32
}

#[tokio::test]
async fn tensorboard_files_read_back_with_their_checksums() {
    let f = Fixture::new("export-tb").await;
    let dir = f.path("tb");
    f.ok(&["runs", "export", "--runs", "1,2", "--format", "tensorboard", "--out", dir.to_str().unwrap()]);
    let files = event_files(&dir);
    let names: Vec<&str> = files.iter().map(|(d, _)| d.as_str()).collect();
    assert_eq!(names, ["run-1-hyperset-sudoku", "run-2-transformer-sudoku"]);
    assert!(files[0].1.file_name().unwrap().to_string_lossy().starts_with("events.out.tfevents."));
    let (scalars, texts) = decode(&files[0].1);
    let mut want: Vec<(String, i64, f64)> =
        metrics_1().iter().map(|m| (format!("{}/{}", m.split, m.name), m.step as i64, m.value)).collect();
    want.extend(
        diagnostics_1().iter().map(|d| (format!("diagnostics/energy/t{}", d.iteration), d.step as i64, d.value)),
    );
    assert_eq!(scalars.len(), want.len());
    // The store reads metrics back ordered by split and name, not in insertion order.
    let (mut scalars, mut want) = (scalars, want);
    scalars.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
    want.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
    for ((tag, step, value), (wtag, wstep, wvalue)) in scalars.iter().zip(&want) {
        assert!(
            tag == wtag && step == wstep && same(*value, *wvalue),
            "{tag} {step} {value} != {wtag} {wstep} {wvalue}"
        );
    }
    assert_eq!(texts.len(), 1);
    assert_eq!(texts[0].0, "config");
    assert!(
        texts[0].1.contains("| d | 64 |") && texts[0].1.contains("| layer | hyperset 0.1.0 build b1 |"),
        "{}",
        texts[0].1
    );

    // Exporting again into the same directory would show every curve twice: refused, unless
    // --force, which replaces the run's files.
    let err = f.fails(&["runs", "export", "--runs", "2", "--format", "tensorboard", "--out", dir.to_str().unwrap()]);
    assert!(err.contains("run-2-transformer-sudoku") && err.contains("--force"), "{err}");
    std::thread::sleep(std::time::Duration::from_millis(1100)); // a new file name (seconds)
    f.ok(&["runs", "export", "--runs", "2", "--format", "tensorboard", "--out", dir.to_str().unwrap(), "--force"]);
    assert_eq!(event_files(&dir).len(), 2, "{:?}", event_files(&dir));
}

const READ_WITH_TENSORBOARD: &str = r#"
import json, math, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
acc = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0, "tensors": 0})
acc.Reload()
tags = acc.Tags()
out = {"scalars": {}, "tensors": tags["tensors"]}
for tag in tags["scalars"]:
    out["scalars"][tag] = [[e.step, None if math.isnan(e.value) else e.value] for e in acc.Scalars(tag)]
text = acc.Tensors("config")[0].tensor_proto.string_val[0].decode()
out["config"] = text
print(json.dumps(out))
"#;

#[tokio::test]
async fn tensorboard_itself_reads_the_files() {
    let probe = std::process::Command::new("python3").args(["-c", "import tensorboard"]).output();
    match probe {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            eprintln!(
                "skipped: python3 has no tensorboard package (pip install tensorboard): {}",
                String::from_utf8_lossy(&o.stderr).lines().last().unwrap_or("")
            );
            return;
        }
        Err(e) => {
            eprintln!("skipped: no python3 ({e})");
            return;
        }
    }
    let f = Fixture::new("export-tb-python").await;
    let dir = f.path("tb");
    f.ok(&["runs", "export", "--runs", "1", "--format", "tensorboard", "--out", dir.to_str().unwrap()]);
    let run_dir = dir.join("run-1-hyperset-sudoku");
    let out = std::process::Command::new("python3").args(["-c", READ_WITH_TENSORBOARD]).arg(&run_dir).output().unwrap();
    assert!(
        out.status.success(),
        "tensorboard could not read {}: {}",
        run_dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let read: Value = serde_json::from_slice(&out.stdout).unwrap();
    let points = |tag: &str| -> Vec<(i64, f64)> {
        read["scalars"][tag]
            .as_array()
            .unwrap_or_else(|| panic!("no scalar {tag} in {read}"))
            .iter()
            .map(|p| (p[0].as_i64().unwrap(), p[1].as_f64().unwrap_or(f64::NAN)))
            .collect()
    };
    assert_eq!(points("train/loss"), vec![(1, 2.5), (2, 1.25), (3, 0.1f32 as f64)]);
    assert_eq!(points("diagnostics/energy/t1"), vec![(2, -2.0), (3, -3.0)]);
    let acc = points("eval/cell_acc");
    assert!(acc.len() == 2 && acc[0].1.is_nan() && acc[1] == (3, 0.75), "{acc:?}");
    assert!(read["config"].as_str().unwrap().contains("| lr | 0.001 |"), "{read}");
}

#[tokio::test]
async fn tags_and_notes_are_set_from_the_command_line() {
    let f = Fixture::new("annotate").await;
    f.ok(&["runs", "tag", "2", "paper, wide"]);
    f.ok(&["runs", "note", "2", "wider", "is", "better"]);
    let run = f.store().await.run(2).await.unwrap();
    assert_eq!((run.tags, run.notes.as_str()), (vec!["paper".to_string(), "wide".to_string()], "wider is better"));
    assert_eq!(listed(&f.ok(&["runs", "--filter", "tag:paper"])), vec![2]);
    // `runs show` says what the run belongs to and what was written about it.
    let shown = f.ok(&["runs", "show", "2"]);
    assert!(shown.contains("\nsweep:    1 widths (point 1 of 1; `workbench sweeps show 1`)\n"), "{shown}");
    assert!(shown.contains("\ntags:     paper, wide\nnotes:    wider is better\n"), "{shown}");
    assert!(!f.ok(&["runs", "show", "3"]).contains("sweep:"), "run 3 is in no sweep");
    let queued = f.store().await.create_run(&new_run("hyperset", "b1", 8, 0.001)).await.unwrap();
    f.ok(&["runs", "pause", &queued.to_string()]);
    assert!(f.ok(&["runs", "show", &queued.to_string()]).starts_with(&format!("run {queued}: queued (paused) —")));
    // The table shows the pause as the TUI's Runs table does, and `status:paused` finds it.
    let table = f.ok(&["runs"]);
    let row = table.lines().find(|l| l.trim_start().starts_with(&format!("{queued} "))).unwrap_or_default();
    assert!(row.contains(" paused "), "{table}");
    assert_eq!(listed(&f.ok(&["runs", "--filter", "status:paused"])), vec![queued]);
    f.ok(&["runs", "tag", "2", ""]);
    assert!(f.store().await.run(2).await.unwrap().tags.is_empty());
    let err = f.fails(&["runs", "tag", "42", "x"]);
    assert!(err.contains("run 42 does not exist"), "{err}");
    let err = f.fails(&["runs", "note", "42", "x"]);
    assert!(err.contains("run 42 does not exist"), "{err}");
    let err = f.fails(&["runs", "tag", "2", "two words"]);
    assert!(err.contains("single words"), "{err}");
    // Several runs at once; +tag adds and -tag removes, leaving the other tags.
    f.ok(&["runs", "tag", "1,2", "draft,lr"]);
    let (code, _, err) = f.run(&["runs", "tag", "1,2", "+paper,-draft"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("run 1 tagged lr, paper") && err.contains("run 2 tagged lr, paper"), "{err}");
    for id in [1, 2] {
        assert_eq!(f.store().await.run(id).await.unwrap().tags, ["lr", "paper"], "run {id}");
    }
    let err = f.fails(&["runs", "tag", "1,42", "+x"]);
    assert!(err.contains("run 42 does not exist"), "{err}");
    assert_eq!(f.store().await.run(1).await.unwrap().tags, ["lr", "paper"], "no run changed");
    let err = f.fails(&["runs", "tag", "1", "paper,-lr"]);
    assert!(err.contains("mixes tags with +tag / -tag"), "{err}");
}

#[tokio::test]
async fn show_names_how_a_run_ended() {
    let f = Fixture::new("ended").await;
    let store = f.store().await;
    let stopped = store.create_run(&new_run("hyperset", "b1", 16, 0.001)).await.unwrap();
    store.mark_running(stopped, 1).await.unwrap();
    store.finish(stopped, RunStatus::Interrupted, Some("stopped at step 7 (a signal)")).await.unwrap();
    store.finish(3, RunStatus::Failed, Some("out of memory")).await.unwrap();
    store.close().await;
    let shown = f.ok(&["runs", "show", &stopped.to_string()]);
    assert!(shown.contains("\nstopped:  stopped at step 7 (a signal)\n"), "{shown}");
    assert!(!shown.contains("error:"), "an interruption is no error:\n{shown}");
    let shown = f.ok(&["runs", "show", "3"]);
    assert!(shown.contains("\nerror:    out of memory\n"), "{shown}");
}

#[tokio::test]
async fn delete_names_the_runs_and_needs_yes() {
    let f = Fixture::new("delete").await;
    let (code, _, err) = f.run(&["runs", "delete", "2,3"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("run 2 (transformer on sudoku, finished, 0 steps), run 3 (hyperset"), "{err}");
    assert!(err.contains("add --yes"), "{err}");
    assert_eq!(listed(&f.ok(&["runs"])), vec![1, 2, 3], "nothing is deleted without --yes");
    let err = f.fails(&["runs", "delete", "2,99", "--yes"]);
    assert!(err.contains("run 99 does not exist"), "{err}");
    assert_eq!(listed(&f.ok(&["runs"])), vec![1, 2, 3], "nothing is deleted when one id is wrong");
    f.ok(&["runs", "delete", "2,3", "--yes"]);
    assert_eq!(listed(&f.ok(&["runs"])), vec![1]);
    let store = f.store().await;
    let running = store.create_run(&new_run("hyperset", "b1", 8, 0.001)).await.unwrap();
    store.mark_running(running, std::process::id()).await.unwrap();
    store.close().await;
    let err = f.fails(&["runs", "delete", &running.to_string(), "--yes"]);
    assert!(err.contains("is running: cancel it first"), "{err}");
}

#[tokio::test]
async fn delete_takes_the_runs_a_filter_a_sweep_or_last_picks() {
    let f = Fixture::new("delete-pick").await;
    let (code, _, err) = f.run(&["runs", "delete", "--yes"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("name the runs to delete") && err.contains("--filter"), "{err}");
    let (code, _, err) = f.run(&["runs", "delete", "--filter", "layer:hyperset"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("this deletes 2 runs: run 1 (hyperset on sudoku") && err.contains(", run 3 (hyperset"),
        "{err}"
    );
    assert_eq!(listed(&f.ok(&["runs"])), vec![1, 2, 3], "nothing is deleted without --yes");
    let err = f.fails(&["runs", "delete", "--filter", "layer:nothing", "--yes"]);
    assert!(err.contains("no run passes the filter `layer:nothing`"), "{err}");
    // The failed run, then sweep 1's, then the most recent of what is left.
    f.ok(&["runs", "delete", "--filter", "-status:finished", "--yes"]);
    assert_eq!(listed(&f.ok(&["runs"])), vec![1, 2]);
    f.ok(&["runs", "delete", "--sweep", "1", "--yes"]);
    assert_eq!(listed(&f.ok(&["runs"])), vec![1]);
    let (code, _, err) = f.run(&["runs", "delete", "1", "--sweep", "1"]);
    assert_eq!(code, 2, "ids and a sweep are two picks: {err}");
    f.ok(&["runs", "delete", "--last", "1", "--yes"]);
    assert!(listed(&f.ok(&["runs"])).is_empty());
}

#[tokio::test]
async fn requeue_pause_and_cancel_act_on_ids_or_the_runs_a_pick_names() {
    let f = Fixture::new("bulk").await;
    let status = |id: i64| {
        let f = &f;
        async move { f.store().await.run(id).await.unwrap().shown_status().to_string() }
    };
    let (code, _, err) = f.run(&["runs", "cancel"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("name the runs to be cancelled"), "{err}");
    // Ids are taken as given: one that cannot be requeued is refused before any run changes.
    let err = f.fails(&["runs", "requeue", "3,1"]);
    assert!(err.contains("run 1"), "{err}");
    assert_eq!(status(3).await, "failed", "run 3 is left as it was");
    // A pick acts on the runs it can and says which it left.
    let (code, _, err) = f.run(&["runs", "requeue", "--filter", "status:failed"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("run 3 queued again"), "{err}");
    f.ok(&["runs", "pause", "--filter", "status:queued"]);
    assert_eq!(status(3).await, "paused");
    f.ok(&["runs", "unpause", "3"]);
    let (code, _, err) = f.run(&["runs", "cancel", "--last", "2"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("left as they are: runs 2 (finished)") && err.contains("run 3"), "{err}");
    assert_eq!(status(3).await, "interrupted");
    let err = f.fails(&["runs", "requeue", "--sweep", "1"]);
    assert!(err.contains("none of the 1 run picked can be requeued"), "{err}");
}

#[tokio::test]
async fn runs_delete_files_removes_each_run_s_directory_of_files() {
    let f = Fixture::new("runs-delete-files").await;
    for id in [1, 2] {
        let dir = f.path(&format!("runs/{id}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("checkpoint.safetensors"), vec![0u8; 3000]).unwrap();
        std::fs::write(dir.join("worker.log"), "a line\n").unwrap();
    }
    let (code, _, err) = f.run(&["runs", "delete", "1", "--files"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("and their files (runs/<id>/") && err.contains("add --yes"), "{err}");
    assert!(f.path("runs/1").exists(), "nothing deleted without --yes");
    let (code, _, err) = f.run(&["runs", "delete", "1", "--yes", "--files"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("deleted the files of run 1") && err.contains("runs/1, 3 KiB)"), "{err}");
    assert!(!f.path("runs/1").exists());
    // Without --files a run's files stay; run 3 has none, which is no error.
    f.ok(&["runs", "delete", "2,3", "--yes"]);
    assert!(f.path("runs/2/checkpoint.safetensors").exists());
    assert!(listed(&f.ok(&["runs"])).is_empty());
}

#[tokio::test]
async fn db_copy_again_copies_only_new_runs() {
    let f = Fixture::new("copy-twice").await;
    let (from, to) = (f.path("runs.db"), f.path("lab.db"));
    let copy = ["db", "copy", "--from", from.to_str().unwrap(), "--to", to.to_str().unwrap()];
    let first = f.ok(&copy);
    assert!(first.contains("copied 3 runs and 1 sweep from"), "{first}");
    let again = f.ok(&copy);
    assert!(again.contains("copied 0 runs and 0 sweeps"), "{again}");
    assert!(again.contains("3 runs and 1 sweep were in") && again.contains("left as they are"), "{again}");
    // A copy deleted in the target is copied again.
    let lab = ["--db", to.to_str().unwrap()];
    f.ok(&[&lab[..], &["runs", "delete", "2", "--yes"]].concat());
    let third = f.ok(&copy);
    assert!(third.contains("copied 1 run and 0 sweeps") && third.contains("2 runs and 1 sweep were in"), "{third}");

    // Picked runs only: by filter, by id, by sweep.
    let picked = f.path("picked.db");
    let pick = |how: &[&str]| {
        let args =
            [&["db", "copy", "--from", from.to_str().unwrap(), "--to", picked.to_str().unwrap()][..], how].concat();
        f.ok(&args)
    };
    assert!(pick(&["--filter", "tag:baseline"]).contains("copied 1 run and 0 sweeps"));
    assert!(pick(&["--sweep", "1"]).contains("copied 1 run and 1 sweep"));
    assert!(pick(&["--runs", "1,3"]).contains("copied 1 run and 0 sweeps"));
    let err = f.fails(&[
        "db",
        "copy",
        "--from",
        from.to_str().unwrap(),
        "--to",
        picked.to_str().unwrap(),
        "--filter",
        "layer:none",
    ]);
    assert!(err.contains("no run passes the filter `layer:none`"), "{err}");
    let err =
        f.fails(&["db", "copy", "--from", from.to_str().unwrap(), "--to", picked.to_str().unwrap(), "--runs", "9"]);
    assert!(err.contains("run 9 does not exist"), "{err}");
}

/// `db copy --as-user` records the copies as stored by that login (a laptop's runs become the
/// researcher's cluster login's, whose runners start them), leaving the source as it was.
#[tokio::test]
async fn db_copy_as_user_records_the_copies_as_that_user() {
    let f = Fixture::new("copy-as-user").await;
    let (from, to) = (f.path("runs.db"), f.path("lab.db"));
    let copy = ["db", "copy", "--from", from.to_str().unwrap(), "--to", to.to_str().unwrap()];
    let out = f.ok(&[&copy[..], &["--as-user", "asmith"]].concat());
    assert!(out.contains("copied 3 runs") && out.contains("recorded as stored by asmith"), "{out}");
    let users = |path: &std::path::Path| {
        let path = path.to_path_buf();
        async move {
            let store = workbench::store::Store::open(&path).await.unwrap();
            let users: Vec<Option<String>> =
                store.list_runs().await.unwrap().into_iter().map(|r| r.created_by).collect();
            store.close().await;
            users
        }
    };
    assert_eq!(users(&to).await, vec![Some("asmith".to_string()); 3]);
    assert!(users(&from).await.iter().all(|u| u.as_deref() != Some("asmith")), "the source is left as it was");
    for (bad, why) in [("", "is empty"), ("a smith", "is not one login name")] {
        let (code, _, err) = f.run(&[&copy[..], &["--as-user", bad]].concat());
        assert!(code == 2 && err.contains(why), "{bad:?}: {err}");
    }
}

#[tokio::test]
async fn diff_shows_what_differs() {
    let f = Fixture::new("diff").await;
    let d: Value = serde_json::from_str(&f.ok(&["runs", "diff", "1", "2", "--json"])).unwrap();
    let config = d["config"].as_array().unwrap();
    let keys: Vec<&str> = config.iter().map(|c| c["key"].as_str().unwrap()).collect();
    // Only differing keys: the trainer's beta2 is the same in both (one name for both runs).
    assert_eq!(keys, ["d", "layer.beta2", "lr"], "only differing keys: {d}");
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
    assert_eq!(f.ok(&["runs", "compare", "1", "3"]), text, "`compare` is another name of `diff`");
    assert!(f.fails(&["runs", "diff", "1", "1"]).contains("run 1 is named twice"));
    assert!(f.fails(&["runs", "diff", "1", "9"]).contains("run 9 does not exist"));
    assert!(f.fails(&["runs", "diff", "2"]).contains("two runs or more: only run 2"));
    assert!(f.fails(&["runs", "diff"]).contains("two ids or more"));
}

#[tokio::test]
async fn diff_takes_several_runs_or_a_pick() {
    let f = Fixture::new("diff-several").await;
    let d: Value = serde_json::from_str(&f.ok(&["runs", "diff", "3", "1", "2", "--json"])).unwrap();
    assert_eq!(d["runs"], json!([3, 1, 2]), "values in the order the runs were named: {d}");
    assert!(d.get("a").is_none(), "a and b are for two runs: {d}");
    let config = d["config"].as_array().unwrap();
    let d_key = config.iter().find(|c| c["key"] == "d").unwrap();
    assert_eq!(d_key["values"], json!(["128", "64", "32"]));
    let layer = d["plugins"].as_array().unwrap().iter().find(|p| p["role"] == "layer").unwrap().clone();
    let builds: Vec<&str> = layer["builds"].as_array().unwrap().iter().map(|b| b["build"].as_str().unwrap()).collect();
    assert_eq!(builds, ["b1", "b1", "b2"]);
    let acc = d["metrics"].as_array().unwrap().iter().find(|m| m["name"] == "cell_acc").unwrap().clone();
    assert_eq!(acc["values"], json!([null, 0.75, 0.5]), "run 3 recorded no accuracy: {d}");
    assert_eq!(acc["higher_is_better"], json!(true));

    // Runs 1 and 3 differ in d only, run 2 in lr too: lr is a row of the three.
    let text = f.ok(&["runs", "diff", "1,2,3"]);
    let header = text.lines().find(|l| l.contains("key")).unwrap();
    assert!(header.contains("run 1") && header.contains("run 2") && header.contains("run 3"), "{text}");
    assert!(text.lines().any(|l| l.contains(" lr ") && l.contains("0.003")), "{text}");
    assert!(!text.contains(" - 1"), "no difference column for three runs: {text}");
    assert!(text.contains("layer:") && text.matches("build b1").count() == 2, "{text}");
    // The best of each metric is starred: run 1's accuracy, and of the train losses run 1's 0.1.
    let acc = text.lines().find(|l| l.contains("cell_acc")).unwrap();
    assert!(acc.contains("0.75000 *") && !acc.contains("0.50000 *"), "{text}");
    assert!(text.lines().any(|l| l.contains("train") && l.contains("0.10000 *")), "{text}");
    assert!(text.contains("* the best value of a metric"), "{text}");

    // A pick compares the runs it names; a pick of one run is refused.
    let picked = f.ok(&["runs", "diff", "--filter", "status:finished"]);
    assert_eq!(picked, f.ok(&["runs", "diff", "1", "2"]), "the filter picks runs 1 and 2");
    let err = f.fails(&["runs", "diff", "--filter", "status:failed"]);
    assert!(err.contains("only run 3 was picked"), "{err}");
}

#[tokio::test]
async fn runs_log_prints_the_log_and_follows_it_to_the_run_s_end() {
    let f = Fixture::new("runs-log").await;
    let store = f.store().await;
    let lines = |range: std::ops::Range<usize>| range.map(|i| format!("line {i}")).collect::<Vec<_>>();
    store.append_logs(1, &lines(0..4)).await.unwrap();
    store.append_logs(3, &["out of memory".to_string()]).await.unwrap();
    assert_eq!(f.ok(&["runs", "log", "1"]), "line 0\nline 1\nline 2\nline 3\n");
    assert_eq!(f.ok(&["runs", "logs", "1", "--last", "2"]), "line 2\nline 3\n");
    assert_eq!(f.ok(&["runs", "log", "2"]), "");
    let err = f.fails(&["runs", "log", "9"]);
    assert!(err.contains("run 9 does not exist"), "{err}");
    // Following a run that has ended prints its log and gives its exit code: failed is 3.
    let (code, out, err) = f.run(&["runs", "log", "3", "--follow"]);
    assert_eq!((code, out.as_str()), (3, "out of memory\n"), "{err}");
    assert!(err.contains("run 3 failed"), "{err}");

    // A running run's lines are printed as they come, each once, until it finishes.
    let running = store.create_run(&new_run("hyperset", "b1", 8, 0.001)).await.unwrap();
    store.mark_running(running, std::process::id()).await.unwrap();
    store.append_logs(running, &lines(0..2)).await.unwrap();
    let follower = common::workbench(&f.dir)
        .args(["runs", "log", &running.to_string(), "-f"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    for batch in [2..3, 3..6] {
        tokio::time::sleep(std::time::Duration::from_millis(700)).await;
        store.append_logs(running, &lines(batch)).await.unwrap();
    }
    tokio::time::sleep(std::time::Duration::from_millis(700)).await;
    store.finish(running, RunStatus::Finished, None).await.unwrap();
    store.close().await;
    let output = tokio::task::spawn_blocking(move || follower.wait_with_output()).await.unwrap().unwrap();
    let (out, err) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert_eq!(output.status.code(), Some(0), "{err}");
    assert_eq!(out, lines(0..6).iter().map(|l| format!("{l}\n")).collect::<String>(), "{err}");
    assert!(err.contains(&format!("run {running} finished")), "{err}");
}
