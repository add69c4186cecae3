//! Faults at random moments: training workers killed with SIGKILL at seeded random points, over
//! and over, while the database stays intact, no committed row is lost, and the run, resumed
//! after every kill, ends with exactly the rows of an uninterrupted run.

use crate::common;

use common::{run, temp_dir, workbench};
use rand::{Rng, SeedableRng};
use sqlx::{Connection, SqliteConnection};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// Kills of one run's worker (each followed by a resume).
const KILLS: usize = 30;

/// A tiny Hyper-SET on easy Sudoku: a few hundred quick steps, a checkpoint every 5.
const RUN: &[&str] = &[
    "--layer",
    "hyperset",
    "--task",
    "sudoku",
    "d=16",
    "heads=2",
    "iterations=2",
    "difficulty=easy",
    "task.train_puzzles=64",
    "task.eval_puzzles=8",
    "eval_examples=8",
    "eval_depths=",
    "threads=1",
    "batch_size=4",
    "steps=240",
    "eval_every=5",
];

/// Every metric row of run 1 (step, split, name, value), in a stable order.
async fn rows(db: &Path) -> Vec<(i64, String, String, Option<f64>)> {
    let mut conn = open(db).await;
    // Throughput and the worker's system samples (CPU, memory, taken every few seconds)
    // depend on the clock and the process, not on the run.
    let rows = sqlx::query_as(
        "SELECT step, split, name, value FROM metrics WHERE run_id = 1 AND name != 'samples_per_s' \
         AND (split != 'sys' OR name = 'eval_examples') ORDER BY step, split, name",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();
    rows
}

async fn open(db: &Path) -> SqliteConnection {
    SqliteConnection::connect(&format!("sqlite://{}", db.display())).await.unwrap()
}

/// The step of run 1's last checkpoint (0: none yet).
async fn checkpoint_step(db: &Path) -> i64 {
    let mut conn = open(db).await;
    let step: Option<i64> =
        sqlx::query_scalar("SELECT MAX(step) FROM artifacts WHERE run_id = 1 AND kind = 'checkpoint'")
            .fetch_one(&mut conn)
            .await
            .unwrap();
    conn.close().await.unwrap();
    step.unwrap_or(0)
}

/// SQLite's own check of the whole file.
async fn integrity(db: &Path) -> String {
    let mut conn = open(db).await;
    let verdict: String = sqlx::query_scalar("PRAGMA integrity_check").fetch_one(&mut conn).await.unwrap();
    conn.close().await.unwrap();
    verdict
}

/// The stored run as `runs show --json` prints it (`null` before it is stored).
fn show(dir: &Path) -> serde_json::Value {
    let (code, out, _) = run(workbench(dir).args(["runs", "show", "1", "--json"]));
    if code != 0 {
        return serde_json::Value::Null;
    }
    serde_json::from_str::<serde_json::Value>(&out).unwrap()["run"].clone()
}

/// Starts `train` (first time) or `resume 1`, following the worker in the background.
fn start(dir: &Path, first: bool) -> Child {
    let mut cmd = workbench(dir);
    if first {
        cmd.arg("train").args(RUN).arg("--json");
    } else {
        cmd.args(["resume", "1", "--json"]);
    }
    cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap()
}

/// Waits until run 1's worker trains a step past the run's last recorded checkpoint, then
/// returns its pid; `None` when the run finished first.
async fn training_worker(dir: &Path) -> Option<u32> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let run = show(dir);
        if run["status"] == "finished" {
            return None;
        }
        // Read only once the run is running: before, the store may still be being created, its
        // tables not there yet.
        if run["status"] == "running"
            && run["last_step"].as_u64().unwrap_or(0) > checkpoint_step(&dir.join("runs.db")).await as u64
        {
            return run["worker_pid"].as_u64().map(|p| p as u32);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("run 1 never trained: {}", show(dir));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_workers_lose_no_row_and_resume_to_the_uninterrupted_result() {
    // The reference: the same run, never interrupted.
    let reference = temp_dir("faults-reference");
    let (code, _, err) = run(workbench(&reference).arg("train").args(RUN).arg("--json"));
    assert_eq!(code, 0, "{err}");
    let expected = rows(&reference.join("runs.db")).await;

    let dir = temp_dir("faults-kill");
    let db = dir.join("runs.db");
    let mut rng = rand::rngs::StdRng::seed_from_u64(20_261_125);
    let mut kills = 0;
    let mut child = start(&dir, true);
    let mut checkpointed_rows = Vec::new();
    while kills < KILLS {
        let Some(pid) = training_worker(&dir).await else { break };
        std::thread::sleep(Duration::from_millis(rng.random_range(0..150)));
        // SAFETY: kill(2) only sends a signal.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        child.wait().unwrap();
        let run = show(&dir);
        if run["status"] == "finished" {
            // The worker ended the run before the kill reached it.
            break;
        }
        kills += 1;
        assert_eq!(integrity(&db).await, "ok", "after kill {kills}");
        assert_eq!(run["status"], "interrupted", "after kill {kills}: {run}");
        // Rows up to the last checkpoint survive the kill and stay as the reference has them.
        let now = rows(&db).await;
        let kept: Vec<_> = now.iter().filter(|r| checkpointed_rows.contains(*r)).collect();
        assert_eq!(kept.len(), checkpointed_rows.len(), "kill {kills} lost committed rows");
        let checkpoint = checkpoint_step(&db).await;
        checkpointed_rows = now.into_iter().filter(|r| r.0 <= checkpoint).collect();
        for row in &checkpointed_rows {
            assert!(expected.contains(row), "kill {kills}: row {row:?} differs from the uninterrupted run");
        }
        child = start(&dir, false);
    }
    let status = child.wait().unwrap();
    assert!(status.success(), "the last resume ends the run");
    assert!(kills >= KILLS, "only {kills} kills: the run finished first (make it longer)");
    assert_eq!(show(&dir)["status"], "finished");
    assert_eq!(integrity(&db).await, "ok");
    assert_eq!(rows(&db).await, expected, "the resumed run ends with the uninterrupted run's rows");
    println!(
        "FIGURE kill -9 of workers: {kills} kills, integrity ok after each, 0 committed rows lost, \
         resumed run equal to the uninterrupted one ({} rows)",
        expected.len()
    );
}

/// Workers of a sweep training at once while readers poll the store as the TUI and scripts do:
/// no reader and no worker may see SQLite's `database is locked`.
#[test]
fn concurrent_workers_and_readers_see_no_busy_errors() {
    const WORKERS: usize = 4;
    let dir = temp_dir("faults-concurrent");
    let mut sweep = workbench(&dir);
    sweep.args(["sweep", "--jobs", &WORKERS.to_string()]).args(RUN.iter().filter(|a| !a.starts_with("steps=")));
    sweep.args(["steps=60", "seed=0,1,2,3"]).stdout(Stdio::null()).stderr(Stdio::piped());
    let mut sweep = sweep.spawn().unwrap();
    let sweep_errors = std::thread::spawn({
        let mut stderr = sweep.stderr.take().unwrap();
        move || {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut stderr, &mut text).unwrap();
            text
        }
    });
    let (mut reads, mut failures) = (0, Vec::new());
    while sweep.try_wait().unwrap().is_none() {
        for args in [&["runs", "--json"][..], &["runs", "show", "1", "--json"], &["sweeps", "--json"]] {
            let (code, _, stderr) = run(workbench(&dir).args(args));
            reads += 1;
            if code != 0 && !stderr.contains("does not exist") {
                failures.push(format!("{args:?}: {stderr}"));
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let sweep_stderr = sweep_errors.join().unwrap();
    assert!(sweep.wait().unwrap().success(), "{sweep_stderr}");
    let busy = |text: &str| text.contains("locked") || text.contains("busy");
    assert!(failures.is_empty(), "readers failed: {failures:#?}");
    assert!(!busy(&sweep_stderr), "a worker met a busy store:\n{sweep_stderr}");
    let (_, out, _) = run(workbench(&dir).args(["runs", "--json"]));
    let runs: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(runs.len(), WORKERS);
    assert!(runs.iter().all(|r| r["status"] == "finished"), "{runs:#?}");
    assert!(reads >= 10, "only {reads} reads overlapped the workers");
    println!("FIGURE concurrent workers with readers: {WORKERS} workers, {reads} reads, 0 busy errors");
}
