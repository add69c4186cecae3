//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `target/<profile>/`, where cargo writes the plugin libraries.
pub fn build_dir() -> PathBuf {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_workbench"));
    exe.parent().expect("binary has a directory").to_path_buf()
}

/// The path of a plugin library built by `cargo build --workspace`; fails with the fix if
/// it was not built.
pub fn library(crate_name: &str) -> PathBuf {
    let name =
        format!("{}{}{}", std::env::consts::DLL_PREFIX, crate_name.replace('-', "_"), std::env::consts::DLL_SUFFIX);
    let path = build_dir().join(name);
    assert!(
        path.is_file(),
        "{} is missing: run `cargo build --workspace` before `cargo test --workspace`",
        path.display()
    );
    path
}

/// A fresh empty directory for one test, removed with everything in it when the test is done
/// with it (a test's stores, runs and plugin links are hundreds of megabytes per test run). A
/// failing test keeps it, and says where, for a look at what it left.
pub fn temp_dir(tag: &str) -> TestDir {
    let dir = tempfile::Builder::new().prefix(&format!("workbench-test-{tag}-")).tempdir().unwrap();
    TestDir { dir }
}

/// A test's directory, see [`temp_dir`]; it reads as the [`Path`] it is. Bind it for as long
/// as anything the test started may use it: a `TestDir` made in a helper and not returned is
/// gone when the helper returns.
pub struct TestDir {
    dir: tempfile::TempDir,
}

impl std::ops::Deref for TestDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        self.dir.path()
    }
}

impl AsRef<Path> for TestDir {
    fn as_ref(&self) -> &Path {
        self.dir.path()
    }
}

impl AsRef<std::ffi::OsStr> for TestDir {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.dir.path().as_os_str()
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        // Otherwise `TempDir` removes it when dropped just after; a worker the test started
        // may still be writing, and what it leaves then stays.
        if std::thread::panicking() {
            self.dir.disable_cleanup(true);
            eprintln!("kept the failing test's directory {}", self.dir.path().display());
        }
    }
}

/// A directory holding links to the given plugin libraries (and nothing else).
pub fn plugin_dir_with(tag: &str, crates: &[&str]) -> TestDir {
    let dir = temp_dir(tag);
    for c in crates {
        let src = library(c);
        std::os::unix::fs::symlink(&src, dir.join(src.file_name().unwrap())).unwrap();
    }
    dir
}

/// A plugin host with the given plugin libraries loaded, through a directory of links that is
/// removed once they are (a loaded library stays mapped).
pub fn load_plugins(tag: &str, crates: &[&str]) -> workbench::host::PluginHost {
    workbench::host::PluginHost::load_dirs(&[plugin_dir_with(tag, crates).to_path_buf()])
}

/// The workbench binary with a database in `dir`, never rebuilding plugins.
pub fn workbench(dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_workbench"));
    // One compute thread per op: tests run in parallel on small machines, and spinning
    // thread pools competing for the same cores slow every run down several times.
    cmd.env("WORKBENCH_NO_BUILD", "1")
        .env("RAYON_NUM_THREADS", "1")
        .env_remove("WORKBENCH_PLUGIN_PATH")
        .env_remove("WORKBENCH_EXPORTS")
        .env("WORKBENCH_DB", dir.join("runs.db"))
        // Generated data shared by the tests' runs, never the user's own cache.
        .env("WORKBENCH_CACHE", build_dir().join("test-generated-cache"))
        .current_dir(dir);
    cmd
}

/// `runs show ID --json` in `dir`'s store, which must succeed.
pub fn show(dir: &Path, id: i64) -> serde_json::Value {
    let (code, stdout, stderr) = run(workbench(dir).args(["runs", "show", &id.to_string(), "--json"]));
    assert_eq!(code, 0, "{stderr}");
    serde_json::from_str(&stdout).unwrap()
}

/// Run `id`'s training loss per step, in step order, read through the store API.
pub fn train_losses(dir: &Path, id: i64) -> Vec<(u64, f64)> {
    stored_metric(dir, id, "train", "loss")
}

/// Run `id`'s values of metric `split/name` per step, in step order, read through the store API.
pub fn stored_metric(dir: &Path, id: i64, split: &str, name: &str) -> Vec<(u64, f64)> {
    stored_rows(dir, id, split, name).into_iter().map(|m| (m.step, m.value)).collect()
}

/// Run `id`'s rows of metric `split/name` (value and wall time), in step order.
pub fn stored_rows(dir: &Path, id: i64, split: &str, name: &str) -> Vec<workbench::store::MetricRow> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let store = workbench::store::Store::open(&dir.join("runs.db")).await.unwrap();
        let mut rows: Vec<_> =
            store.metrics(id).await.unwrap().into_iter().filter(|m| m.split == split && m.name == name).collect();
        rows.sort_by_key(|r| r.step);
        rows
    })
}

/// Runs a command and returns (exit code, stdout, stderr).
pub fn run(cmd: &mut Command) -> (i32, String, String) {
    let Output { status, stdout, stderr } = cmd.output().expect("the workbench binary runs");
    (
        status.code().unwrap_or(-1),
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

/// Trains a tiny Sudoku run of `layer` in `dir` (4 steps, evaluations at steps 2 and 4, at the
/// training depth 2 and at depth 4) and returns its stdout (the JSON events) and stderr.
pub fn train_tiny(dir: &Path, layer: &str, layer_args: &[&str]) -> (String, String) {
    let mut args = vec!["train", "--layer", layer, "--task", "sudoku", "--json", "d=16", "heads=2", "iterations=2"];
    args.extend_from_slice(layer_args);
    args.extend_from_slice(&[
        "difficulty=easy",
        "task.train_puzzles=32",
        "task.eval_puzzles=8",
        "steps=4",
        "eval_every=2",
        "eval_depths=2",
        "eval_examples=8",
    ]);
    let (code, stdout, stderr) = run(workbench(dir).args(&args));
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.lines().any(|l| l.contains("\"event\":\"finished\"")), "{stdout}\n{stderr}");
    (stdout, stderr)
}
pub mod proxy;
pub mod stores;
pub mod tmux;

/// `train` arguments for the fixture layer `panicking` in `mode` on a few Sudoku puzzles, one
/// thread, no extra evaluation depths: `steps` steps, a checkpoint every `eval_every`.
pub fn fixture_train_args(mode: &str, steps: u32, eval_every: u32) -> Vec<String> {
    let mut args: Vec<String> = [
        "train",
        "--layer",
        "panicking",
        "--task",
        "sudoku",
        "task.train_puzzles=16",
        "task.eval_puzzles=4",
        "eval_examples=4",
        "eval_depths=",
        "threads=1",
    ]
    .map(String::from)
    .to_vec();
    args.extend([format!("mode={mode}"), format!("steps={steps}"), format!("eval_every={eval_every}")]);
    args
}

/// [`fixture_train_args`] as a `sweep` of one point.
pub fn fixture_sweep_args(mode: &str, steps: u32, eval_every: u32) -> Vec<String> {
    let mut args = fixture_train_args(mode, steps, eval_every);
    args[0] = "sweep".into();
    args
}

/// A run of a plugin `p` with an empty configuration, for tests of the store, the queue and
/// the supervision alone (no plugin is loaded).
pub fn plain_run(seed: u64) -> workbench::store::NewRun {
    let plugin =
        workbench::store::PluginRef { name: "p".into(), version: "1".into(), fingerprint: "f".into(), build: None };
    workbench::store::NewRun {
        layer: plugin.clone(),
        task: plugin,
        config: serde_json::json!({}),
        seed,
        device: "cpu".into(),
        git_rev: None,
        total_steps: Some(10),
    }
}
