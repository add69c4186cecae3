//! Tests of the run store (`workbench::store`). Every test works in its own directory under
//! the system temp dir, removed when the test ends.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::{common, on_both_backends};
use serde_json::json;
use sqlx::{Connection, SqliteConnection};

use common::stores::{Backend, TestDb};
use workbench::store::{process_alive, DiagnosticRow, MetricRow, NewRun, PluginRef, RunStatus, Store, StoreError};
use workbench::store::{Claims, Lease, LogTail, Refreshed, RunsFollower, LEASE};

/// A fresh directory for one test, removed (with everything in it) on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        let dir = std::env::temp_dir().join(format!(
            "workbench-store-test-{tag}-{}-{nanos}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn db(&self) -> PathBuf {
        self.0.join("runs.db")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        // Undo any permission changes made by a test before removing.
        let _ = make_writable(&self.0);
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(unix)]
fn make_writable(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
        }
    }
    Ok(())
}

#[cfg(not(unix))]
fn make_writable(_dir: &Path) -> std::io::Result<()> {
    Ok(())
}

fn plugin(name: &str, build: Option<&str>) -> PluginRef {
    PluginRef {
        name: name.to_string(),
        version: "1.2.3".to_string(),
        fingerprint: format!("fp-{name}"),
        build: build.map(String::from),
    }
}

fn new_run(seed: u64) -> NewRun {
    NewRun {
        layer: plugin("transformer", Some("abc123")),
        task: plugin("sudoku", None),
        config: json!({"lr": 0.001, "layers": [1, 2, 3], "name": "x", "nested": {"a": null}}),
        seed,
        device: "cuda:0".to_string(),
        git_rev: Some("deadbeef".to_string()),
        total_steps: Some(5000),
    }
}

fn metric(step: u64, split: &str, name: &str, value: f64) -> MetricRow {
    MetricRow { step, split: split.into(), name: name.into(), value, wall_time: step as f64 * 0.5 }
}

fn diag(step: u64, iteration: u32, name: &str, value: f64) -> DiagnosticRow {
    DiagnosticRow { step, iteration, name: name.into(), value }
}

fn now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64()
}

/// Plain sqlx connection (no store) to inspect or prepare a database file.
async fn raw(path: &Path) -> SqliteConnection {
    let url = format!("sqlite://{}", path.display());
    SqliteConnection::connect(&url).await.unwrap()
}

async fn run_round_trip_all_fields(backend: Backend) {
    let Some(dir) = TestDb::new(backend, "roundtrip").await else { return };
    let store = dir.open().await;
    assert_eq!(store.location(), &dir.location);

    let before = now();
    let spec = new_run(u64::MAX); // largest seed must round-trip bit-for-bit
    let id = store.create_run(&spec).await.unwrap();
    let after = now();

    let r = store.run(id).await.unwrap();
    assert_eq!(r.id, id);
    assert_eq!(r.status, RunStatus::Queued);
    assert_eq!(r.layer, spec.layer);
    assert_eq!(r.task, spec.task);
    assert_eq!(r.config, spec.config);
    assert_eq!(r.seed, u64::MAX);
    assert_eq!(r.device, "cuda:0");
    assert_eq!(r.param_count, None);
    assert_eq!(r.git_rev.as_deref(), Some("deadbeef"));
    assert!(r.created_at >= before - 1.0 && r.created_at <= after + 1.0, "{}", r.created_at);
    assert_eq!(r.started_at, None);
    assert_eq!(r.finished_at, None);
    assert_eq!(r.error, None);
    assert_eq!(r.worker_pid, None);
    assert_eq!(r.last_step, 0);
    assert_eq!(r.total_steps, Some(5000));
    assert_eq!(r.notes, "");
    assert!(r.tags.is_empty());
    assert_eq!(r.created_by, Some(workbench::store::user_name()), "the user whose command stored it");

    store.set_param_count(id, 1_234_567).await.unwrap();
    store.mark_running(id, 4242).await.unwrap();
    store.set_progress(id, 4999).await.unwrap();
    store.finish(id, RunStatus::Finished, None).await.unwrap();
    let r = store.run(id).await.unwrap();
    assert_eq!(r.param_count, Some(1_234_567));
    assert_eq!(r.worker_pid, Some(4242));
    assert_eq!(r.last_step, 4999);
    assert_eq!(r.status, RunStatus::Finished);
    let (started, finished) = (r.started_at.unwrap(), r.finished_at.unwrap());
    assert!(started >= r.created_at && finished >= started);

    // A second run with other optional values, and list order.
    let mut other = new_run(7);
    other.git_rev = None;
    other.total_steps = None;
    other.layer.build = None;
    other.task.build = Some("t-build".into());
    let id2 = store.create_run(&other).await.unwrap();
    assert!(id2 > id);
    let list = store.list_runs().await.unwrap();
    assert_eq!(list.iter().map(|r| r.id).collect::<Vec<_>>(), vec![id, id2]);
    let r2 = &list[1];
    assert_eq!(r2.seed, 7);
    assert_eq!(r2.git_rev, None);
    assert_eq!(r2.total_steps, None);
    assert_eq!(r2.layer.build, None);
    assert_eq!(r2.task.build.as_deref(), Some("t-build"));
    store.close().await;
}

async fn status_transitions(backend: Backend) {
    let Some(dir) = TestDb::new(backend, "status").await else { return };
    let store = dir.open().await;
    let id = store.create_run(&new_run(1)).await.unwrap();

    store.mark_running(id, 10).await.unwrap();
    let r = store.run(id).await.unwrap();
    assert_eq!(r.status, RunStatus::Running);
    let first_start = r.started_at.expect("started_at set");

    store.finish(id, RunStatus::Failed, Some("out of memory")).await.unwrap();
    let r = store.run(id).await.unwrap();
    assert_eq!(r.status, RunStatus::Failed);
    assert_eq!(r.error.as_deref(), Some("out of memory"));
    assert!(r.finished_at.is_some());

    // A failed run must be requeued before it runs again.
    let err = store.mark_running(id, 11).await.unwrap_err();
    assert!(matches!(err, StoreError::InvalidTransition { status: RunStatus::Failed, .. }), "{err}");
    assert!(err.to_string().contains("requeue"), "{err}");

    store.requeue(id).await.unwrap();
    let r = store.run(id).await.unwrap();
    assert_eq!(r.status, RunStatus::Queued);
    assert_eq!(r.finished_at, None);
    assert_eq!(r.error, None);
    assert_eq!(r.worker_pid, None);

    store.mark_running(id, 12).await.unwrap();
    let r = store.run(id).await.unwrap();
    assert_eq!(r.started_at, Some(first_start), "started_at kept from the first start");
    assert_eq!(r.worker_pid, Some(12));
    assert_eq!(r.error, None);

    // Running runs cannot be requeued; non-terminal statuses cannot finish a run.
    let err = store.requeue(id).await.unwrap_err();
    assert!(matches!(err, StoreError::InvalidTransition { status: RunStatus::Running, .. }), "{err}");
    let err = store.finish(id, RunStatus::Queued, None).await.unwrap_err();
    assert!(matches!(err, StoreError::NotTerminal(RunStatus::Queued)), "{err}");
    assert_eq!(store.run(id).await.unwrap().status, RunStatus::Running);

    store.finish(id, RunStatus::Interrupted, Some("cancelled")).await.unwrap();
    store.requeue(id).await.unwrap();
    store.mark_running(id, 13).await.unwrap();
    store.finish(id, RunStatus::Diverged, Some("loss is NaN")).await.unwrap();
    let err = store.requeue(id).await.unwrap_err();
    assert!(matches!(err, StoreError::InvalidTransition { status: RunStatus::Diverged, .. }));
    assert_eq!(store.run(id).await.unwrap().status, RunStatus::Diverged);

    // Missing runs.
    let err = store.run(999).await.unwrap_err();
    assert!(matches!(err, StoreError::NotFound(999)));
    assert_eq!(err.to_string(), "run 999 does not exist (see `workbench runs`)");
    assert!(matches!(store.mark_running(999, 1).await, Err(StoreError::NotFound(999))));
    assert!(matches!(store.finish(999, RunStatus::Failed, None).await, Err(StoreError::NotFound(999))));
    assert!(matches!(store.requeue(999).await, Err(StoreError::NotFound(999))));
    assert!(matches!(store.set_progress(999, 1).await, Err(StoreError::NotFound(999))));
    assert!(matches!(store.set_param_count(999, 1).await, Err(StoreError::NotFound(999))));
    store.close().await;
}

#[test]
fn run_status_text() {
    for s in RunStatus::ALL {
        assert_eq!(s.as_str().parse::<RunStatus>().unwrap(), s);
        assert_eq!(s.to_string(), s.as_str());
    }
    assert_eq!(" Finished ".parse::<RunStatus>().unwrap(), RunStatus::Finished);
    let err = "done".parse::<RunStatus>().unwrap_err();
    assert!(err.to_string().contains("\"done\""), "{err}");
    let terminal: Vec<_> = RunStatus::ALL.into_iter().filter(|s| s.is_terminal()).collect();
    assert_eq!(terminal, vec![RunStatus::Finished, RunStatus::Failed, RunStatus::Interrupted, RunStatus::Diverged]);
}

async fn metrics_and_diagnostics_batched(backend: Backend) {
    let Some(dir) = TestDb::new(backend, "metrics").await else { return };
    let store = dir.open().await;
    let id = store.create_run(&new_run(1)).await.unwrap();

    let batch = vec![
        metric(20, "train", "loss", 0.5),
        metric(10, "train", "loss", 1.0),
        metric(10, "eval", "acc", 0.25),
        metric(30, "train", "loss", f64::NAN),
        metric(40, "train", "loss", f64::INFINITY),
    ];
    store.insert_metrics(id, &batch).await.unwrap();
    store.insert_metrics(id, &[metric(0, "eval", "acc", 0.1)]).await.unwrap();
    store.insert_metrics(id, &[]).await.unwrap();

    let got = store.metrics(id).await.unwrap();
    let keys: Vec<_> = got.iter().map(|m| (m.name.as_str(), m.step)).collect();
    assert_eq!(keys, vec![("acc", 0), ("acc", 10), ("loss", 10), ("loss", 20), ("loss", 30), ("loss", 40)]);
    assert_eq!(got[1], metric(10, "eval", "acc", 0.25));
    assert_eq!(got[2], metric(10, "train", "loss", 1.0));
    assert!(got[4].value.is_nan(), "NaN round-trips");
    assert_eq!(got[5].value, f64::INFINITY);

    let after: Vec<_> = store.metrics_after(id, 20).await.unwrap().iter().map(|m| m.step).collect();
    assert_eq!(after, vec![30, 40]);

    // A batch that cannot be stored is rejected whole.
    let bad = vec![metric(50, "train", "loss", 1.0), metric(u64::MAX, "train", "loss", 1.0)];
    let err = store.insert_metrics(id, &bad).await.unwrap_err();
    assert!(matches!(err, StoreError::OutOfRange { .. }), "{err}");
    assert_eq!(store.metrics(id).await.unwrap().len(), 6);

    let err = store.insert_metrics(999, &batch).await.unwrap_err();
    assert!(matches!(err, StoreError::NotFound(999)), "{err}");
    assert!(matches!(store.metrics(999).await, Err(StoreError::NotFound(999))));

    let diags = vec![
        diag(100, 2, "energy", -3.0),
        diag(100, 0, "energy", -1.0),
        diag(100, 1, "energy", -2.0),
        diag(0, 1, "grad_norm", f64::NAN),
        diag(0, 0, "energy", 5.0),
    ];
    store.insert_diagnostics(id, &diags).await.unwrap();
    let got = store.diagnostics(id).await.unwrap();
    let keys: Vec<_> = got.iter().map(|d| (d.name.as_str(), d.step, d.iteration)).collect();
    assert_eq!(
        keys,
        vec![("energy", 0, 0), ("energy", 100, 0), ("energy", 100, 1), ("energy", 100, 2), ("grad_norm", 0, 1)]
    );
    assert_eq!(got[3], diag(100, 2, "energy", -3.0));
    assert!(got[4].value.is_nan());
    assert!(matches!(store.insert_diagnostics(999, &diags).await, Err(StoreError::NotFound(999))));
    store.close().await;
}

async fn artifacts_latest_by_step(backend: Backend) {
    let Some(dir) = TestDb::new(backend, "artifacts").await else { return };
    let store = dir.open().await;
    let id = store.create_run(&new_run(1)).await.unwrap();
    let other = store.create_run(&new_run(2)).await.unwrap();

    let a100 = store.add_artifact(id, "checkpoint", "ckpt/100.safetensors", Some(100)).await.unwrap();
    let a300 = store.add_artifact(id, "checkpoint", "ckpt/300.safetensors", Some(300)).await.unwrap();
    let a200 = store.add_artifact(id, "checkpoint", "ckpt/200.safetensors", Some(200)).await.unwrap();
    store.add_artifact(id, "checkpoint", "ckpt/nostep.safetensors", None).await.unwrap();
    store.add_artifact(id, "plot", "plot.png", Some(900)).await.unwrap();
    store.add_artifact(other, "checkpoint", "other/1000", Some(1000)).await.unwrap();

    let latest = store.latest_artifact(id, "checkpoint").await.unwrap().unwrap();
    assert_eq!(latest.id, a300);
    assert_eq!(latest.path, "ckpt/300.safetensors");
    assert_eq!(latest.step, Some(300));
    assert_eq!(latest.run_id, id);
    assert_eq!(latest.kind, "checkpoint");
    assert!(latest.created_at > 0.0);

    let all = store.artifacts(id).await.unwrap();
    assert_eq!(all.len(), 5);
    assert_eq!(all[0].id, a100);
    assert_eq!(all[2].id, a200);
    assert_eq!(all[3].step, None);

    assert!(store.latest_artifact(id, "video").await.unwrap().is_none());
    let err = store.add_artifact(999, "plot", "x.png", None).await.unwrap_err();
    assert!(matches!(err, StoreError::NotFound(999)), "{err}");
    let err = store.add_artifact(999, "checkpoint", "ckpt/100.safetensors", Some(100)).await.unwrap_err();
    assert!(matches!(err, StoreError::NotFound(999)), "{err}");
    // A record written again (its first commit lost in transit) is the one stored.
    assert_eq!(store.add_artifact(id, "checkpoint", "ckpt/200.safetensors", Some(200)).await.unwrap(), a200);
    assert_eq!(store.artifacts(id).await.unwrap().len(), 5);
    assert_eq!(store.latest_artifact(id, "checkpoint").await.unwrap().unwrap().id, a300);
    store.close().await;
}

/// A log tail returns each line once: the last lines at the start, then only what came
/// since. On PostgreSQL a line numbered earlier but committed later (a transaction that took
/// its number first) is still returned.
async fn a_log_tail_returns_each_line_once(backend: Backend) {
    let Some(dir) = TestDb::new(backend, "log-tail").await else { return };
    let store = dir.open().await;
    let id = store.create_run(&new_run(1)).await.unwrap();
    let other = store.create_run(&new_run(2)).await.unwrap();
    let lines = |range: std::ops::Range<usize>| range.map(|i| format!("line {i}")).collect::<Vec<_>>();
    store.append_logs(id, &lines(0..5)).await.unwrap();
    let (mut tail, start) = LogTail::from_last(&store, id, 2).await.unwrap();
    assert_eq!(start, lines(3..5));
    assert!(tail.read(&store).await.unwrap().is_empty());
    store.append_logs(other, &["other".to_string()]).await.unwrap();
    store.append_logs(id, &lines(5..8)).await.unwrap();
    assert_eq!(tail.read(&store).await.unwrap(), lines(5..8));
    assert!(tail.read(&store).await.unwrap().is_empty());
    let (_, everything) = LogTail::from_last(&store, id, usize::MAX).await.unwrap();
    assert_eq!(everything, lines(0..8));
    assert!(matches!(LogTail::from_last(&store, 999, 5).await, Err(StoreError::NotFound(999))));

    if backend == Backend::Postgres {
        use sqlx::Connection as _;
        let mut late = dir.connect().await;
        let mut tx = late.begin().await.unwrap();
        sqlx::query("INSERT INTO logs (run_id, at, line) VALUES ($1, 0, 'late')")
            .bind(id)
            .execute(&mut *tx)
            .await
            .unwrap();
        store.append_logs(id, &["early".to_string()]).await.unwrap();
        assert_eq!(tail.read(&store).await.unwrap(), vec!["early"]);
        tx.commit().await.unwrap();
        assert_eq!(tail.read(&store).await.unwrap(), vec!["late"]);
        assert!(tail.read(&store).await.unwrap().is_empty());
        late.close().await.unwrap();
    }
    store.close().await;
}

async fn logs_last_n(backend: Backend) {
    let Some(dir) = TestDb::new(backend, "logs").await else { return };
    let store = dir.open().await;
    let id = store.create_run(&new_run(1)).await.unwrap();
    let other = store.create_run(&new_run(2)).await.unwrap();

    let first: Vec<String> = (0..6).map(|i| format!("line {i}")).collect();
    let second: Vec<String> = (6..10).map(|i| format!("line {i}")).collect();
    store.append_logs(id, &first).await.unwrap();
    store.append_logs(other, &["other".to_string()]).await.unwrap();
    store.append_logs(id, &second).await.unwrap();

    assert_eq!(store.logs(id, 3).await.unwrap(), vec!["line 7", "line 8", "line 9"]);
    let all = store.logs(id, 100).await.unwrap();
    assert_eq!(all, first.iter().chain(&second).cloned().collect::<Vec<_>>());
    assert!(store.logs(id, 0).await.unwrap().is_empty());
    assert_eq!(store.logs(other, 5).await.unwrap(), vec!["other"]);
    assert!(matches!(store.append_logs(999, &first).await, Err(StoreError::NotFound(999))));
    store.close().await;
}

async fn notes_and_tags(backend: Backend) {
    let Some(dir) = TestDb::new(backend, "notes").await else { return };
    let store = dir.open().await;
    let id = store.create_run(&new_run(1)).await.unwrap();

    store.set_notes(id, "baseline, lr sweep\nsecond line").await.unwrap();
    let tags: Vec<String> = vec![" baseline ".into(), "sweep".into(), "".into(), "baseline".into()];
    store.set_tags(id, &tags).await.unwrap();
    let r = store.run(id).await.unwrap();
    assert_eq!(r.notes, "baseline, lr sweep\nsecond line");
    assert_eq!(r.tags, vec!["baseline", "sweep"]);

    let err = store.set_tags(id, &["a,b".to_string()]).await.unwrap_err();
    assert!(matches!(err, StoreError::InvalidTag { .. }), "{err}");
    assert!(err.to_string().contains("comma"), "{err}");
    assert_eq!(store.run(id).await.unwrap().tags, vec!["baseline", "sweep"], "unchanged");

    store.set_tags(id, &[]).await.unwrap();
    assert!(store.run(id).await.unwrap().tags.is_empty());
    assert!(matches!(store.set_notes(999, "x").await, Err(StoreError::NotFound(999))));
    assert!(matches!(store.set_tags(999, &[]).await, Err(StoreError::NotFound(999))));
    store.close().await;
}

async fn delete_cascades(backend: Backend) {
    let Some(dir) = TestDb::new(backend, "delete").await else { return };
    let store = dir.open().await;
    let doomed = store.create_run(&new_run(1)).await.unwrap();
    let kept = store.create_run(&new_run(2)).await.unwrap();
    for id in [doomed, kept] {
        store.insert_metrics(id, &[metric(1, "train", "loss", 1.0)]).await.unwrap();
        store.insert_diagnostics(id, &[diag(1, 0, "energy", 1.0)]).await.unwrap();
        store.add_artifact(id, "checkpoint", "c", Some(1)).await.unwrap();
        store.append_logs(id, &["hello".to_string()]).await.unwrap();
    }

    store.delete_run(doomed).await.unwrap();
    assert!(matches!(store.run(doomed).await, Err(StoreError::NotFound(_))));
    assert!(matches!(store.delete_run(doomed).await, Err(StoreError::NotFound(_))));
    for (sql, expected_kept) in [
        ("SELECT COUNT(*) FROM metrics WHERE run_id = $1", 1),
        ("SELECT COUNT(*) FROM diagnostics WHERE run_id = $1", 1),
        ("SELECT COUNT(*) FROM artifacts WHERE run_id = $1", 1),
        ("SELECT COUNT(*) FROM logs WHERE run_id = $1", 1),
    ] {
        assert_eq!(dir.count(sql, doomed).await, 0, "{sql}");
        assert_eq!(dir.count(sql, kept).await, expected_kept, "{sql}");
    }
    assert_eq!(store.metrics(kept).await.unwrap().len(), 1);

    // Ids of deleted runs are not reused.
    let last = store.create_run(&new_run(3)).await.unwrap();
    store.delete_run(last).await.unwrap();
    let next = store.create_run(&new_run(4)).await.unwrap();
    assert!(next > last, "{next} > {last}");
    store.close().await;
}

async fn delete_metrics_after_truncates_metrics_and_diagnostics(backend: Backend) {
    let Some(dir) = TestDb::new(backend, "truncate").await else { return };
    let store = dir.open().await;
    let id = store.create_run(&new_run(1)).await.unwrap();
    let other = store.create_run(&new_run(2)).await.unwrap();
    let metrics: Vec<_> = (0..10).map(|s| metric(s, "train", "loss", s as f64)).collect();
    let diags: Vec<_> = (0..10).map(|s| diag(s, 1, "energy", s as f64)).collect();
    for run in [id, other] {
        store.insert_metrics(run, &metrics).await.unwrap();
        store.insert_diagnostics(run, &diags).await.unwrap();
    }

    assert_eq!(store.metrics_after(id, 5).await.unwrap().len(), 4);
    // The training clock a resumed worker goes on from: the latest wall time kept.
    assert_eq!(store.trained_seconds(id).await.unwrap(), 4.5);
    store.delete_metrics_after(id, 5).await.unwrap();
    assert_eq!(store.trained_seconds(id).await.unwrap(), 2.5);
    let unstarted = store.create_run(&new_run(3)).await.unwrap();
    assert_eq!(store.trained_seconds(unstarted).await.unwrap(), 0.0);
    assert!(store.metrics_after(id, 5).await.unwrap().is_empty());
    let steps: Vec<_> = store.metrics(id).await.unwrap().iter().map(|m| m.step).collect();
    assert_eq!(steps, vec![0, 1, 2, 3, 4, 5]);
    let dsteps: Vec<_> = store.diagnostics(id).await.unwrap().iter().map(|d| d.step).collect();
    assert_eq!(dsteps, vec![0, 1, 2, 3, 4, 5]);
    let kept: Vec<_> = store.metrics_after(id, 3).await.unwrap().iter().map(|m| m.step).collect();
    assert_eq!(kept, vec![4, 5]);

    // Other runs are untouched.
    assert_eq!(store.metrics(other).await.unwrap().len(), 10);
    assert_eq!(store.diagnostics(other).await.unwrap().len(), 10);
    assert!(matches!(store.delete_metrics_after(999, 1).await, Err(StoreError::NotFound(999))));
    store.close().await;
}

async fn reopen_preserves_data_and_two_handles_share_it(backend: Backend) {
    let Some(dir) = TestDb::new(backend, "reopen").await else { return };
    let store = dir.open().await;
    let id = store.create_run(&new_run(9)).await.unwrap();
    store.insert_metrics(id, &[metric(1, "train", "loss", 2.0)]).await.unwrap();
    let before = store.run(id).await.unwrap();
    store.close().await;

    let store = dir.open().await;
    assert_eq!(store.run(id).await.unwrap(), before);
    assert_eq!(store.metrics(id).await.unwrap(), vec![metric(1, "train", "loss", 2.0)]);

    // A second handle on the same file (as worker and TUI have): writes through one are
    // visible through the other, including while both are writing concurrently.
    let second = dir.open().await;
    assert_eq!(second.run(id).await.unwrap(), before);
    let writer = {
        let second = second.clone();
        tokio::spawn(async move {
            for batch in 0..20u64 {
                let rows: Vec<_> = (0..50).map(|i| metric(100 + batch * 50 + i, "train", "w2", 1.0)).collect();
                second.insert_metrics(id, &rows).await.unwrap();
            }
        })
    };
    for batch in 0..20u64 {
        let rows: Vec<_> = (0..50).map(|i| metric(batch * 50 + i, "eval", "w1", 1.0)).collect();
        store.insert_metrics(id, &rows).await.unwrap();
        store.metrics(id).await.unwrap();
    }
    writer.await.unwrap();
    assert_eq!(store.metrics(id).await.unwrap().len(), 1 + 2 * 1000);
    store.close().await;
    second.close().await;
}

#[tokio::test]
async fn migrations_upgrade_an_existing_database() {
    let dir = TempDir::new("migrate");
    let db = dir.db();

    // Build a database with only migration 1 applied, as the first workbench release would
    // have left it, with data written by plain SQL.
    {
        std::fs::File::create(&db).unwrap();
        let mut conn = raw(&db).await;
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations/sqlite");
        let migrator = sqlx::migrate::Migrator::new(dir.as_path()).await.unwrap();
        migrator.run_to(1, &mut conn).await.unwrap();
        sqlx::query(
            "INSERT INTO runs (id, status, layer_name, layer_version, layer_fingerprint, \
             task_name, task_version, task_fingerprint, config, seed, device, created_at, tags) \
             VALUES (5, 'finished', 'l', '1', 'lf', 't', '1', 'tf', '{\"k\":1}', 3, 'cpu', 1.5, 'old')",
        )
        .execute(&mut conn)
        .await
        .unwrap();
        sqlx::query("INSERT INTO metrics VALUES (5, 7, 'train', 'loss', 0.25, 1.0)").execute(&mut conn).await.unwrap();
        conn.close().await.unwrap();
    }

    let store = Store::open(&db).await.unwrap();
    // The summaries added later are filled from the rows already there.
    let summaries = store.metric_summaries().await.unwrap();
    assert_eq!(summaries.iter().map(|m| (m.run_id, m.last, m.last_step)).collect::<Vec<_>>(), vec![(5, 0.25, 7)]);
    let r = store.run(5).await.unwrap();
    assert_eq!(r.status, RunStatus::Finished);
    assert_eq!(r.config, json!({"k": 1}));
    assert_eq!(r.tags, vec!["old"]);
    assert_eq!(r.created_at, 1.5);
    let mut expected = metric(7, "train", "loss", 0.25);
    expected.wall_time = 1.0;
    assert_eq!(store.metrics(5).await.unwrap(), vec![expected]);
    store.close().await;

    // Every embedded migration is now recorded.
    let mut conn = raw(&db).await;
    let max: i64 = sqlx::query_scalar("SELECT MAX(version) FROM _sqlx_migrations").fetch_one(&mut conn).await.unwrap();
    // A run from before identities (migration 0009) has one now, as `db copy` needs.
    let uid: String = sqlx::query_scalar("SELECT uid FROM runs WHERE id = 5").fetch_one(&mut conn).await.unwrap();
    conn.close().await.unwrap();
    assert_eq!(max, workbench::store::schema_version());
    assert!(uid.len() == 32 && uid.chars().all(|c| c.is_ascii_hexdigit()), "{uid}");
}

/// Several processes (here: tasks with their own connections) opening one new store at the
/// same moment, as a `train` and the TUI or a `runs show` polling it do: each opens it, and
/// every migration is applied once.
async fn a_new_store_opened_by_many_at_once_is_migrated_once(backend: Backend) {
    for round in 0..4 {
        let Some(db) = TestDb::new(backend, &format!("open-at-once-{round}")).await else { return };
        let opens: Vec<_> = (0..8)
            .map(|_| {
                let location = db.location.clone();
                tokio::spawn(async move { Store::connect(&location).await })
            })
            .collect();
        for open in opens {
            match open.await.unwrap() {
                Ok(store) => store.close().await,
                Err(e) => panic!("round {round}: {e}"),
            }
        }
        let recorded = db.count("SELECT COUNT(DISTINCT version) FROM _sqlx_migrations WHERE $1 = 0", 0).await;
        assert_eq!(recorded, workbench::store::schema_version());
    }
}

#[tokio::test]
async fn newer_schema_is_refused_and_left_unchanged() {
    let dir = TempDir::new("newer");
    let db = dir.db();
    let store = Store::open(&db).await.unwrap();
    let id = store.create_run(&new_run(1)).await.unwrap();
    store.close().await;

    let mut conn = raw(&db).await;
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (9999, 'from the future', 1, x'00', 0)",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();
    let bytes_before = std::fs::read(&db).unwrap();

    let err = Store::open(&db).await.unwrap_err();
    assert!(matches!(err, StoreError::NewerSchema { version: 9999, .. }), "{err:?}");
    let msg = err.to_string();
    assert_eq!(
        msg,
        format!(
            "runs.db at {} was written by a newer workbench (schema version 9999); \
             upgrade the workbench or use another --db",
            db.display()
        )
    );
    assert_eq!(std::fs::read(&db).unwrap(), bytes_before, "file bytes unchanged");
    println!("FIGURE store of a newer schema: refused naming the version, byte for byte unchanged");

    let mut conn = raw(&db).await;
    let runs: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM runs WHERE id = ?").bind(id).fetch_one(&mut conn).await.unwrap();
    let versions: Vec<i64> =
        sqlx::query_scalar("SELECT version FROM _sqlx_migrations ORDER BY version").fetch_all(&mut conn).await.unwrap();
    conn.close().await.unwrap();
    assert_eq!(runs, 1);
    assert_eq!(versions.last(), Some(&9999));
    // Every real migration (numbered 1..=current) plus the fake newer one.
    assert_eq!(versions.len() as i64, workbench::store::schema_version() + 1);
}

/// The names and bytes of every file in `dir`.
fn files_in(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap()))
        .collect();
    files.sort();
    files
}

/// A workbench database changed by `damage` (plain SQL) is refused when opened, with a
/// message naming `expected`, and nothing on disk changes: no byte of the file, no `-wal` or
/// `-shm` file left behind, no table created.
async fn refused_unchanged(tag: &str, damage: &str, expected: &str) {
    let dir = TempDir::new(tag);
    let db = dir.db();
    let store = Store::open(&db).await.unwrap();
    store.create_run(&new_run(1)).await.unwrap();
    store.close().await;
    let mut conn = raw(&db).await;
    sqlx::raw_sql(sqlx::AssertSqlSafe(damage.to_string())).execute(&mut conn).await.unwrap();
    conn.close().await.unwrap();
    let before = files_in(&dir.0);
    let names: Vec<&String> = before.iter().map(|f| &f.0).collect();
    assert!(!names.iter().any(|n| n.ends_with("-wal") || n.ends_with("-shm")), "{names:?}");

    let err = Store::open(&db).await.unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, StoreError::IncompatibleSchema { .. }), "{err:?}");
    assert!(msg.contains(expected), "{msg}");
    assert_eq!(files_in(&dir.0), before, "a refused open changes nothing on disk");
    println!("FIGURE damaged store ({tag}): refused naming the damage, every file byte for byte unchanged");
}

#[tokio::test]
async fn a_database_without_its_migration_record_is_refused_unchanged() {
    refused_unchanged("no-migrations", "DROP TABLE _sqlx_migrations", "no record of the workbench's migrations").await;
}

#[tokio::test]
async fn a_database_missing_a_table_is_refused_unchanged() {
    refused_unchanged("no-metrics", "DROP TABLE metric_summaries; DROP TABLE metrics", "table metrics is missing")
        .await;
}

#[tokio::test]
async fn a_database_missing_a_column_is_refused_unchanged() {
    refused_unchanged("no-column", "ALTER TABLE logs DROP COLUMN line", "table logs lacks column(s) line").await;
}

#[tokio::test]
async fn a_database_claimed_by_another_program_is_refused_unchanged() {
    refused_unchanged("user-version", "PRAGMA user_version = 999", "user_version is 999").await;
}

/// On PostgreSQL a dropped table is found after the (empty) migration step, before any run
/// is stored.
#[tokio::test]
async fn postgres_missing_a_table_is_refused() {
    let Some(db) = TestDb::new(Backend::Postgres, "no-metrics").await else { return };
    let store = db.open().await;
    sqlx::query::<sqlx::Any>("DROP TABLE metric_summaries").execute(&store_pool(&db).await).await.unwrap();
    store.close().await;
    let err = Store::connect(&workbench::store::StoreLocation::parse(db.db_arg().to_str().unwrap())).await.unwrap_err();
    assert!(err.to_string().contains("table metric_summaries is missing"), "{err}");
}

async fn store_pool(db: &TestDb) -> sqlx::AnyPool {
    sqlx::any::install_default_drivers();
    sqlx::AnyPool::connect(db.db_arg().to_str().unwrap()).await.unwrap()
}

/// Closing a store folds the write-ahead log into the database file even while another
/// process keeps the database open, so `runs.db` copied alone holds every run.
#[tokio::test]
async fn closing_a_store_leaves_its_runs_in_the_database_file() {
    let dir = TempDir::new("checkpoint");
    let db = dir.db();
    Store::open(&db).await.unwrap().close().await;
    // Another process with the database open (a read maps the write-ahead log's index).
    let mut reader = raw(&db).await;
    let _: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM runs").fetch_one(&mut reader).await.unwrap();
    let store = Store::open(&db).await.unwrap();
    let id = store.create_run(&new_run(7)).await.unwrap();
    store.close().await;
    let alone = dir.0.join("copied-alone.db");
    std::fs::copy(&db, &alone).unwrap();
    reader.close().await.unwrap();
    let copy = Store::open(&alone).await.unwrap();
    assert_eq!(copy.run(id).await.unwrap().seed, 7);
}

/// `db backup` writes a new SQLite file holding everything, from either backend, and never
/// overwrites a file.
async fn a_backup_holds_every_row(backend: Backend) {
    let Some(db) = TestDb::new(backend, "backup").await else { return };
    let store = db.open().await;
    let ids = fill_for_copy(&store).await;
    store.finish(ids[2], RunStatus::Finished, None).await.unwrap(); // nothing running
    let dir = TempDir::new("backup-file");
    let file = dir.0.join("backup.db");
    store.backup(&file).await.unwrap();
    let copy = Store::open(&file).await.unwrap();
    assert_eq!(contents(&copy).await, contents(&store).await);
    let again = store.backup(&file).await.unwrap_err().to_string();
    assert!(again.contains("the file exists"), "{again}");
}

/// A run whose stored configuration is not valid JSON is listed as damaged, with the reason,
/// beside the others (it used to hide every run), and cannot be trained again.
#[tokio::test]
async fn a_run_with_a_damaged_configuration_is_shown_as_damaged_beside_the_others() {
    let dir = TempDir::new("damaged");
    let db = dir.db();
    let store = Store::open(&db).await.unwrap();
    let bad = store.create_run(&new_run(1)).await.unwrap();
    let good = store.create_run(&new_run(2)).await.unwrap();
    store.finish(bad, RunStatus::Failed, Some("x")).await.unwrap();
    let mut conn = raw(&db).await;
    sqlx::query("UPDATE runs SET config = '{\"layer\": ' WHERE id = ?").bind(bad).execute(&mut conn).await.unwrap();
    conn.close().await.unwrap();

    let runs = store.list_runs().await.unwrap();
    assert_eq!(runs.len(), 2);
    let damage = runs[0].damage.clone().unwrap_or_default();
    assert!(damage.contains("configuration is not valid JSON"), "{damage}");
    assert_eq!((runs[1].id, runs[1].damage.clone()), (good, None));
    // The list shows the last evaluation metrics, from the stored summaries.
    let acc = MetricRow { step: 3, split: "eval".into(), name: "acc".into(), value: 0.5, wall_time: 1.0 };
    store.insert_metrics(good, &[acc]).await.unwrap();
    let refused = workbench::ops::runs::requeue(&store, bad).await.unwrap_err().to_string();
    assert!(refused.contains("cannot be trained again") && refused.contains("not valid JSON"), "{refused}");
    store.close().await;

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_workbench"))
        .args(["runs"])
        .env("WORKBENCH_DB", &db)
        .env("WORKBENCH_NO_BUILD", "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.iter().any(|l| l.trim_start().starts_with(&format!("{bad} ")) && l.contains("damaged")), "{text}");
    let good_line = lines.iter().find(|l| l.trim_start().starts_with(&format!("{good} "))).expect("the good run");
    assert!(good_line.contains("queued") && good_line.ends_with("acc 0.500"), "{text}");
}

#[tokio::test]
async fn unusable_paths_give_clear_errors() {
    let dir = TempDir::new("paths");

    // Missing parent directory: named, and not created.
    let missing = dir.0.join("no-such-dir").join("runs.db");
    let err = Store::open(&missing).await.unwrap_err();
    assert!(matches!(err, StoreError::CannotOpen { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.starts_with(&format!("cannot open run database at {}: ", missing.display())), "{msg}");
    assert!(msg.contains(&dir.0.join("no-such-dir").display().to_string()), "{msg}");
    assert!(msg.contains("does not exist"), "{msg}");
    assert!(msg.ends_with("; pass --db PATH or set WORKBENCH_DB to a writable location"), "{msg}");
    assert!(!dir.0.join("no-such-dir").exists());

    // A directory instead of a file.
    let err = Store::open(&dir.0).await.unwrap_err();
    assert!(matches!(err, StoreError::CannotOpen { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("is a directory"), "{msg}");
    assert!(msg.contains("WORKBENCH_DB"), "{msg}");

    // A file as the parent "directory".
    let file = dir.0.join("plain-file");
    std::fs::write(&file, "x").unwrap();
    let err = Store::open(&file.join("runs.db")).await.unwrap_err();
    assert!(matches!(err, StoreError::CannotOpen { .. }), "{err:?}");
    assert!(err.to_string().contains("is not a directory"), "{err}");
}

#[cfg(unix)]
#[tokio::test]
async fn read_only_directory_gives_clear_error() {
    use std::os::unix::fs::PermissionsExt;
    let dir = TempDir::new("readonly");
    let ro = dir.0.join("ro");
    std::fs::create_dir(&ro).unwrap();
    let existing = ro.join("existing.db");
    let store = Store::open(&existing).await.unwrap();
    store.create_run(&new_run(1)).await.unwrap();
    store.close().await;
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
    if std::fs::write(ro.join("probe"), "x").is_ok() {
        eprintln!("skipped: running with privileges that ignore directory permissions");
        return;
    }
    let db = ro.join("runs.db");
    let err = Store::open(&db).await.unwrap_err();
    eprintln!("{err}");
    assert!(matches!(err, StoreError::CannotOpen { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.starts_with(&format!("cannot open run database at {}: ", db.display())), "{msg}");
    assert!(msg.ends_with("WORKBENCH_DB to a writable location"), "{msg}");
    assert!(!db.exists());

    // An existing, writable database in a read-only directory (no room for its WAL files).
    let bytes_before = std::fs::read(&existing).unwrap();
    let err = Store::open(&existing).await.unwrap_err();
    eprintln!("{err}");
    assert!(matches!(err, StoreError::CannotOpen { .. }), "{err:?}");
    assert!(err.to_string().contains("must be writable"), "{err}");
    assert!(err.to_string().contains(&ro.display().to_string()), "{err}");
    assert_eq!(std::fs::read(&existing).unwrap(), bytes_before);
}

#[cfg(unix)]
#[tokio::test]
async fn read_only_database_file_gives_clear_error() {
    use std::os::unix::fs::PermissionsExt;
    let dir = TempDir::new("readonly-file");
    let db = dir.db();
    let store = Store::open(&db).await.unwrap();
    store.create_run(&new_run(1)).await.unwrap();
    store.close().await;
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o444)).unwrap();
    if std::fs::OpenOptions::new().append(true).open(&db).is_ok() {
        eprintln!("skipped: running with privileges that ignore file permissions");
        return;
    }
    let bytes_before = std::fs::read(&db).unwrap();
    let err = Store::open(&db).await.unwrap_err();
    eprintln!("{err}");
    assert!(matches!(err, StoreError::CannotOpen { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.starts_with(&format!("cannot open run database at {}: ", db.display())), "{msg}");
    assert!(msg.ends_with("WORKBENCH_DB to a writable location"), "{msg}");
    assert_eq!(std::fs::read(&db).unwrap(), bytes_before);
}

#[tokio::test]
async fn non_sqlite_file_is_refused_and_left_unchanged() {
    let dir = TempDir::new("notsqlite");
    let cases: [(&str, Vec<u8>); 3] = [
        ("notes.txt", b"these are my notes, not a database\n".repeat(20)),
        ("short.db", b"hi".to_vec()),
        ("binary.db", (0..=255u8).cycle().take(8192).collect()),
    ];
    for (name, contents) in cases {
        let path = dir.0.join(name);
        std::fs::write(&path, &contents).unwrap();
        let err = Store::open(&path).await.unwrap_err();
        assert!(matches!(err, StoreError::NotSqlite { .. }), "{name}: {err:?}");
        let msg = err.to_string();
        assert!(msg.starts_with(&format!("{} is not an SQLite database", path.display())), "{msg}");
        assert!(msg.contains("--db"), "{msg}");
        assert_eq!(std::fs::read(&path).unwrap(), contents, "{name}: bytes unchanged");
        let wal = dir.0.join(format!("{name}-wal"));
        assert!(!wal.exists(), "{name}: no WAL file created");
        println!("FIGURE foreign file as a store ({name}): refused, byte for byte unchanged, no WAL");
    }
}

#[tokio::test]
async fn empty_file_becomes_a_database() {
    let dir = TempDir::new("empty");
    std::fs::File::create(dir.db()).unwrap();
    let store = Store::open(&dir.db()).await.unwrap();
    let id = store.create_run(&new_run(1)).await.unwrap();
    assert_eq!(store.run(id).await.unwrap().seed, 1);
    store.close().await;
}

async fn reap_orphans_marks_dead_workers_interrupted(backend: Backend) {
    let Some(dir) = TestDb::new(backend, "reap").await else { return };
    let store = dir.open().await;
    let dead_a = store.create_run(&new_run(1)).await.unwrap();
    let alive = store.create_run(&new_run(2)).await.unwrap();
    let dead_b = store.create_run(&new_run(3)).await.unwrap();
    let queued = store.create_run(&new_run(4)).await.unwrap();
    let finished = store.create_run(&new_run(5)).await.unwrap();
    store.mark_running(dead_a, 101).await.unwrap();
    store.mark_running(alive, 102).await.unwrap();
    store.mark_running(dead_b, 103).await.unwrap();
    store.mark_running(finished, 104).await.unwrap();
    store.finish(finished, RunStatus::Finished, None).await.unwrap();

    let reaped = store.reap_orphans(|pid| pid == 102).await.unwrap();
    assert_eq!(reaped, vec![dead_a, dead_b]);
    for id in [dead_a, dead_b] {
        let r = store.run(id).await.unwrap();
        assert_eq!(r.status, RunStatus::Interrupted);
        assert!(r.finished_at.is_some());
        let error = r.error.unwrap();
        assert!(error.contains("disappeared"), "{error}");
        assert!(error.contains(&r.worker_pid.unwrap().to_string()), "{error}");
    }
    assert_eq!(store.run(alive).await.unwrap().status, RunStatus::Running);
    assert_eq!(store.run(queued).await.unwrap().status, RunStatus::Queued);
    assert_eq!(store.run(finished).await.unwrap().status, RunStatus::Finished);

    // Nothing left to reap; reaped runs can be requeued.
    assert!(store.reap_orphans(|pid| pid == 102).await.unwrap().is_empty());
    store.requeue(dead_a).await.unwrap();
    store.close().await;
}

#[test]
fn process_alive_detects_live_dead_and_zombie_processes() {
    assert!(process_alive(std::process::id()));
    assert!(!process_alive(0));

    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    assert!(!process_alive(pid), "reaped child {pid} must be dead");

    // An exited child that has not been waited for is a zombie: not alive.
    #[cfg(target_os = "linux")]
    {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let is_zombie = || {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map(|s| s.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')))
                .unwrap_or(false)
        };
        while !is_zombie() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(is_zombie(), "child {pid} did not become a zombie");
        assert!(!process_alive(pid), "zombie {pid} must not count as alive");
        child.wait().unwrap();
    }
}

async fn twenty_thousand_metrics_in_batches_read_back_in_order(backend: Backend) {
    let Some(dir) = TestDb::new(backend, "bulk").await else { return };
    let store = dir.open().await;
    let id = store.create_run(&new_run(1)).await.unwrap();

    // 10,000 steps x 2 metrics, interleaved as a worker writes them, 1,000 rows per batch.
    let rows: Vec<MetricRow> = (0..10_000u64)
        .flat_map(|s| {
            [metric(s, "train", "loss", 1.0 / (s as f64 + 1.0)), metric(s, "train", "acc", s as f64 / 10_000.0)]
        })
        .collect();
    assert_eq!(rows.len(), 20_000);
    for batch in rows.chunks(1_000) {
        store.insert_metrics(id, batch).await.unwrap();
    }

    let got = store.metrics(id).await.unwrap();
    assert_eq!(got.len(), 20_000);
    for (i, m) in got.iter().enumerate() {
        let (name, step) = if i < 10_000 { ("acc", i as u64) } else { ("loss", i as u64 - 10_000) };
        let expected = if name == "acc" {
            metric(step, "train", "acc", step as f64 / 10_000.0)
        } else {
            metric(step, "train", "loss", 1.0 / (step as f64 + 1.0))
        };
        assert_eq!(m, &expected, "row {i}");
    }
    store.close().await;
}

async fn the_queue_claims_at_most_jobs_runs_and_never_one_twice(backend: Backend) {
    let Some(tmp) = TestDb::new(backend, "queue-claims").await else { return };
    let store = tmp.open().await;
    let ids = [
        store.create_run(&new_run(1)).await.unwrap(),
        store.create_run(&new_run(2)).await.unwrap(),
        store.create_run(&new_run(3)).await.unwrap(),
    ];
    let first = store.claim_next(100, 2, &Claims::Everyone).await.unwrap().expect("a slot is free");
    let second = store.claim_next(101, 2, &Claims::Everyone).await.unwrap().expect("a second slot is free");
    assert_eq!((first.id, second.id), (ids[0], ids[1]), "claims go in id order, never twice");
    assert!(store.claim_next(100, 2, &Claims::Everyone).await.unwrap().is_none(), "two claimed runs fill two slots");
    // A claim becoming a running worker still takes its slot; a finished one frees it.
    store.mark_running(ids[0], 4242).await.unwrap();
    assert!(store.claim_next(100, 2, &Claims::Everyone).await.unwrap().is_none());
    store.finish(ids[0], RunStatus::Finished, None).await.unwrap();
    // Run 3 is paused: nothing to claim; released: claimed.
    store.set_held(ids[2], true).await.unwrap();
    assert!(store.claim_next(100, 2, &Claims::Everyone).await.unwrap().is_none());
    store.set_held(ids[2], false).await.unwrap();
    assert_eq!(store.claim_next(100, 2, &Claims::Everyone).await.unwrap().map(|r| r.id), Some(ids[2]));
    // A dead runner's claims are released and can be taken again.
    let released = store.release_stale_claims(|pid| pid == 100).await.unwrap();
    assert_eq!(released, vec![ids[1]]);
    assert_eq!(store.claim_next(100, 3, &Claims::Everyone).await.unwrap().map(|r| r.id), Some(ids[1]));
    // A run claimed at creation is never handed to a queue runner.
    let own = store.create_claimed_run(&new_run(9), 100).await.unwrap();
    assert!(store.claim_next(100, 10, &Claims::Everyone).await.unwrap().is_none_or(|r| r.id != own));
}

/// Runs asking for `device=cuda` on a machine with several CUDA devices get one each: the
/// lowest ordinal no running or claimed run holds, recorded in the run and its configuration.
async fn claimed_runs_asking_for_cuda_get_a_free_device_each(backend: Backend) {
    let Some(tmp) = TestDb::new(backend, "queue-devices").await else { return };
    let store = tmp.open().await;
    let on_cuda = |seed: u64| NewRun {
        device: "cuda".into(),
        config: json!({"train": {"device": "cuda", "seed": seed}, "layer": "hyperset"}),
        ..new_run(seed)
    };
    let ids = [
        store.create_run(&on_cuda(1)).await.unwrap(),
        store.create_run(&on_cuda(2)).await.unwrap(),
        store.create_run(&on_cuda(3)).await.unwrap(),
    ];
    let first = store.claim_next(100, 3, &Claims::Everyone).await.unwrap().unwrap();
    assert_eq!(store.assign_free_cuda_device(first.id, 2).await.unwrap().as_deref(), Some("cuda:0"));
    let second = store.claim_next(100, 3, &Claims::Everyone).await.unwrap().unwrap();
    assert_eq!(store.assign_free_cuda_device(second.id, 2).await.unwrap().as_deref(), Some("cuda:1"));
    let run = store.run(ids[1]).await.unwrap();
    assert_eq!(run.device, "cuda:1");
    assert_eq!(run.config["train"]["device"], "cuda:1", "the stored configuration says where it trained");
    assert_eq!(run.config["train"]["seed"], 2, "the rest of the configuration is kept");
    // Both devices are taken: the third keeps `cuda`; once the first finishes, cuda:0 is free.
    let third = store.claim_next(100, 3, &Claims::Everyone).await.unwrap().unwrap();
    assert_eq!(store.assign_free_cuda_device(third.id, 2).await.unwrap(), None);
    store.finish(ids[0], RunStatus::Finished, None).await.unwrap();
    assert_eq!(store.assign_free_cuda_device(third.id, 2).await.unwrap().as_deref(), Some("cuda:0"));
}

#[test]
fn the_default_job_count_is_one_per_cuda_device_or_one() {
    use workbench::queue::jobs_for_devices;
    assert_eq!(jobs_for_devices(0), 1);
    assert_eq!(jobs_for_devices(1), 1);
    assert_eq!(jobs_for_devices(4), 4);
}

/// A worker that cannot be started leaves its run queued for the next pass of the queue
/// runner, and fails it with the reason after `SPAWN_ATTEMPTS` passes. (Here the worker's log
/// directory cannot be created: a plain file sits where `runs/` should be.)
async fn a_worker_that_cannot_start_is_retried_then_its_run_fails_with_the_reason(backend: Backend) {
    let Some(tmp) = TestDb::new(backend, "queue-spawn").await else { return };
    use workbench::queue::{QueueRunner, SPAWN_ATTEMPTS};
    let store = tmp.open().await;
    std::fs::write(tmp.dir.join("runs"), b"not a directory").unwrap();
    let id = store.create_run(&new_run(1)).await.unwrap();
    let runner = QueueRunner::new(store.clone(), Vec::new(), 1);
    for pass in 1..SPAWN_ATTEMPTS {
        assert!(runner.tick().await.unwrap().is_empty());
        let run = store.run(id).await.unwrap();
        assert_eq!(run.status, RunStatus::Queued, "after failed attempt {pass}");
        assert!(
            store.claim_next(1, 1, &Claims::Everyone).await.unwrap().is_some(),
            "the claim was released after attempt {pass}"
        );
        store.release_claim(id).await.unwrap();
    }
    assert!(runner.tick().await.unwrap().is_empty());
    let run = store.run(id).await.unwrap();
    assert_eq!(run.status, RunStatus::Failed);
    let error = run.error.unwrap_or_default();
    assert!(
        error.contains("cannot start its worker") && error.contains(&format!("{SPAWN_ATTEMPTS} attempts")),
        "{error}"
    );
}

/// Many runners claiming from one queue at once (each with its own connection pool, as
/// separate processes have): every run is claimed exactly once, and the job limit holds.
async fn concurrent_runners_claim_each_run_once_within_the_limit(backend: Backend) {
    let Some(db) = TestDb::new(backend, "claim-race").await else { return };
    let store = db.open().await;
    let mut ids = Vec::new();
    for seed in 0..24 {
        ids.push(store.create_run(&new_run(seed)).await.unwrap());
    }
    let jobs = 5;
    let mut runners = Vec::new();
    for runner in 0..8u32 {
        let handle = db.open().await;
        runners.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                match handle.claim_next(1000 + runner, jobs, &Claims::Everyone).await.unwrap() {
                    Some(run) => {
                        mine.push(run.id);
                        // The worker starts, trains, ends: its slot frees.
                        handle.mark_running(run.id, 5000 + runner).await.unwrap();
                        handle.finish(run.id, RunStatus::Finished, None).await.unwrap();
                    }
                    None if handle.list_runs().await.unwrap().iter().all(|r| r.status.is_terminal()) => break,
                    None => tokio::time::sleep(std::time::Duration::from_millis(5)).await,
                }
            }
            handle.close().await;
            mine
        }));
    }
    let watcher = {
        let store = db.open().await;
        tokio::spawn(async move {
            let mut most = 0;
            loop {
                let runs = store.list_runs().await.unwrap();
                most = most.max(runs.iter().filter(|r| r.status == RunStatus::Running).count());
                if runs.iter().all(|r| r.status.is_terminal()) {
                    store.close().await;
                    return most;
                }
            }
        })
    };
    let mut claimed: Vec<i64> = Vec::new();
    for r in runners {
        claimed.extend(r.await.unwrap());
    }
    claimed.sort();
    assert_eq!(claimed, ids, "every run claimed exactly once");
    assert!(watcher.await.unwrap() <= jobs, "never more than {jobs} running at once");
    store.close().await;
}

/// A PostgreSQL database migrated by a newer workbench is refused before anything changes.
#[tokio::test]
async fn postgres_newer_schema_is_refused_and_left_unchanged() {
    let Some(db) = TestDb::new(Backend::Postgres, "pg-newer").await else { return };
    let store = db.open().await;
    let id = store.create_run(&new_run(1)).await.unwrap();
    store.close().await;
    db.count(
        "WITH ins AS (INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (9999, 'from the future', true, '\\x00', 0) RETURNING version) SELECT COUNT(*) FROM ins WHERE version > $1",
        0,
    )
    .await;
    let err = Store::connect(&db.location).await.unwrap_err();
    assert!(matches!(err, StoreError::NewerSchema { version: 9999, .. }), "{err:?}");
    assert!(err.to_string().contains("upgrade the workbench"), "{err}");
    assert_eq!(db.count("SELECT COUNT(*) FROM runs WHERE id = $1", id).await, 1);
    let max = db.count("SELECT MAX(version) FROM _sqlx_migrations WHERE version > $1", 0).await;
    assert_eq!(max, 9999);
}

/// A server that does not answer, or a wrong password, is named with the fix, and the
/// password never appears in a message. The first may pass (a server restarting: a worker
/// waits for it), the second would not.
#[tokio::test]
async fn unreachable_or_refusing_servers_give_clear_errors() {
    // Port 9 (discard) on loopback: nothing listens there.
    let nowhere = workbench::store::StoreLocation::parse("postgres://lab:s3cret@127.0.0.1:9/runs");
    let err = Store::connect(&nowhere).await.unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, StoreError::Unreachable { .. }) && err.is_passing(), "{err:?}");
    assert!(msg.contains("cannot reach the server") && msg.contains("scripts/services start"), "{msg}");
    assert!(!msg.contains("s3cret") && msg.contains("lab:***@127.0.0.1:9"), "{msg}");

    let Some(admin) = common::stores::postgres_admin_url() else { return };
    let wrong = admin.replacen("://", "://nobody_here:wrong@", 1);
    let wrong = match wrong.split_once('@').and_then(|(a, rest)| rest.split_once('@').map(|(_, r)| format!("{a}@{r}")))
    {
        Some(fixed) => fixed,
        None => wrong,
    };
    let err = Store::connect(&workbench::store::StoreLocation::parse(&wrong)).await.unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, StoreError::CannotOpen { .. }) && !err.is_passing(), "{err:?}");
    assert!(!msg.contains(":wrong@"), "{msg}");
}

/// A store on a server has no default place for run files: asking for it names the option.
#[tokio::test]
async fn a_server_store_needs_an_artifacts_directory() {
    let Some(db) = TestDb::new(Backend::Postgres, "pg-artifacts").await else { return };
    let store = Store::connect(&db.location).await.unwrap();
    let err = store.artifacts_dir().unwrap_err();
    assert!(err.to_string().contains("--artifacts DIR") && err.to_string().contains("WORKBENCH_ARTIFACTS"), "{err}");
    let store = store.with_artifacts_dir(Some(db.dir.clone()));
    assert_eq!(store.artifacts_dir().unwrap(), db.dir);
    store.close().await;
}

/// Fills a store with one of everything a copy must carry: a sweep with two runs, a run with
/// a NaN metric, diagnostics, artifacts, logs, notes, tags, a held run and a running one.
async fn fill_for_copy(store: &Store) -> Vec<i64> {
    let sweep = store.create_sweep("lr sweep", &json!({"axes": ["lr"]})).await.unwrap();
    let a = store.create_run_in_sweep(&new_run(1), sweep, 0).await.unwrap();
    let b = store.create_run_in_sweep(&new_run(u64::MAX), sweep, 1).await.unwrap();
    let c = store.create_run(&new_run(3)).await.unwrap();
    let d = store.create_run(&new_run(4)).await.unwrap();
    store.mark_running(a, 77).await.unwrap();
    store.insert_metrics(a, &[metric(1, "train", "loss", 2.5), metric(2, "train", "loss", f64::NAN)]).await.unwrap();
    store.insert_metrics(a, &[metric(2, "eval", "acc", 0.5)]).await.unwrap();
    store.insert_diagnostics(a, &[diag(2, 0, "energy", -1.0), diag(2, 1, "energy", -2.0)]).await.unwrap();
    store.add_artifact(a, "checkpoint", "runs/1/checkpoint.safetensors", Some(2)).await.unwrap();
    store.add_artifact(a, "plot", "fig.png", None).await.unwrap();
    store.append_logs(a, &["step 1".into(), "step 2".into()]).await.unwrap();
    store.set_progress(a, 2).await.unwrap();
    store.set_param_count(a, 1234).await.unwrap();
    store.finish(a, RunStatus::Finished, None).await.unwrap();
    store.set_notes(b, "a note, with a comma").await.unwrap();
    store.set_tags(b, &["paper".into(), "table-4".into()]).await.unwrap();
    store.set_held(b, true).await.unwrap();
    store.mark_running(c, 88).await.unwrap();
    store.finish(d, RunStatus::Failed, Some("out of memory")).await.unwrap();
    vec![a, b, c, d]
}

/// Everything a store holds, read through its API, for comparing two stores.
async fn contents(store: &Store) -> Vec<String> {
    let mut out = Vec::new();
    for run in store.list_runs().await.unwrap() {
        let id = run.id;
        out.push(format!("{run:?}"));
        out.push(format!("{:?}", store.metrics(id).await.unwrap()));
        out.push(format!("{:?}", store.diagnostics(id).await.unwrap()));
        out.push(format!("{:?}", store.artifacts(id).await.unwrap()));
        out.push(format!("{:?}", store.logs(id, usize::MAX).await.unwrap()));
    }
    out.push(format!("{:?}", store.sweeps().await.unwrap()));
    out
}

/// SQLite -> PostgreSQL -> SQLite leaves every row equal (ids, timestamps, NaN, the largest
/// seed); a running run arrives interrupted, saying why.
#[tokio::test]
async fn db_copy_round_trip_between_sqlite_and_postgres_keeps_every_row() {
    let Some(pg) = TestDb::new(Backend::Postgres, "copy-pg").await else { return };
    let first = TestDb::new(Backend::Sqlite, "copy-a").await.unwrap();
    let back = TestDb::new(Backend::Sqlite, "copy-b").await.unwrap();
    let source = first.open().await;
    let ids = fill_for_copy(&source).await;
    let running = ids[2];
    // The running run is copied as interrupted; compare against the source with that change.
    let to_pg = source.copy_into(&pg.open().await, None).await.unwrap();
    assert!(to_pg.kept_ids && to_pg.renumbered.is_empty(), "{to_pg:?}");
    assert_eq!((to_pg.runs, to_pg.sweeps), (4, 1));
    assert_eq!(to_pg.rows["metrics"], 3);
    assert_eq!(to_pg.were_running, vec![running]);
    let middle = pg.open().await;
    let copied = middle.run(running).await.unwrap();
    assert_eq!(copied.status, RunStatus::Interrupted);
    assert!(copied.error.as_deref().unwrap_or("").contains("while it was running"), "{copied:?}");

    source.finish(running, RunStatus::Interrupted, copied.error.as_deref()).await.unwrap();
    // `finish` stamps its own time; take the copy's so the rows can be compared whole.
    let back_report = middle.copy_into(&back.open().await, None).await.unwrap();
    assert!(back_report.kept_ids && back_report.were_running.is_empty(), "{back_report:?}");
    let returned = back.open().await;
    let mut expected = contents(&source).await;
    let mut got = contents(&returned).await;
    let strip = |rows: &mut Vec<String>| {
        for row in rows.iter_mut() {
            if let Some(at) = row.find("finished_at: ") {
                if row.contains(&format!("id: {running},")) {
                    let end = row[at..].find(", error").map(|e| at + e).unwrap_or(row.len());
                    row.replace_range(at..end, "finished_at: <copy>");
                }
            }
        }
    };
    strip(&mut expected);
    strip(&mut got);
    assert_eq!(got, expected);
    assert_eq!(contents(&middle).await.len(), expected.len());
    // New runs in a copied PostgreSQL store get fresh ids past the copied ones.
    let next = middle.create_run(&new_run(9)).await.unwrap();
    assert!(next > *ids.iter().max().unwrap(), "{next}");
}

/// A source store filled by [`fill_for_copy`] (its run ids) and an empty target on `backend`
/// (`None` without that server). Bind every field: a database's files go when it is dropped.
struct CopyPair {
    target_db: TestDb,
    _source_db: TestDb,
    source: Store,
    target: Store,
    ids: Vec<i64>,
}

async fn copy_pair(backend: Backend, tag: &str) -> Option<CopyPair> {
    let target_db = TestDb::new(backend, tag).await?;
    let source_db = TestDb::new(Backend::Sqlite, &format!("{tag}-src")).await.unwrap();
    let source = source_db.open().await;
    let ids = fill_for_copy(&source).await;
    let target = target_db.open().await;
    Some(CopyPair { target_db, _source_db: source_db, source, target, ids })
}

/// Copying into a store that already has runs with those ids numbers the copies anew and says
/// which became which; nothing in the target is overwritten.
async fn db_copy_into_a_used_store_renumbers(backend: Backend) {
    let Some(CopyPair { target_db: _target_db, _source_db, source, target, ids }) =
        copy_pair(backend, "copy-used").await
    else {
        return;
    };
    let existing = target.create_run(&new_run(42)).await.unwrap();
    let report = source.copy_into(&target, None).await.unwrap();
    assert!(!report.kept_ids);
    assert_eq!(report.renumbered.len(), ids.len(), "{report:?}");
    assert_eq!(target.run(existing).await.unwrap().seed, 42, "the target's own run is untouched");
    let a = report.renumbered[&ids[0]];
    assert_eq!(target.metrics(a).await.unwrap().len(), 3);
    let sweep = target.sweeps().await.unwrap();
    assert_eq!(sweep.len(), 1);
    let members: Vec<i64> = target.sweep_runs(sweep[0].id).await.unwrap().iter().map(|r| r.id).collect();
    assert_eq!(members, vec![a, report.renumbered[&ids[1]]], "sweep membership follows the new ids");
}

/// A copied run that starts from another run's parameters (`init_from`) or evaluates its
/// checkpoint (`evaluates`) names that run by the id its copy has in the target; one whose
/// other run stays behind is reported.
async fn db_copy_keeps_a_run_s_starting_point(backend: Backend) {
    let Some(CopyPair { target_db: _target_db, _source_db, source, target, ids: _ }) =
        copy_pair(backend, "copy-init-from").await
    else {
        return;
    };
    let start = source.create_run(&new_run(7)).await.unwrap();
    let mut tuned = new_run(8);
    tuned.config = json!({"train": {"init_from": start, "lr": 0.0003}});
    let tuned = source.create_run(&tuned).await.unwrap();
    let mut scored = new_run(9);
    scored.config = json!({"train": {"eval_depths": [2.0]}, "evaluates": start});
    let scored = source.create_run(&scored).await.unwrap();
    // The target's own run takes the first id: the copies are numbered anew.
    target.create_run(&new_run(42)).await.unwrap();
    let report = source.copy_into(&target, None).await.unwrap();
    let (start_here, tuned_here) = (report.renumbered[&start], report.renumbered[&tuned]);
    assert_ne!(start_here, start, "{report:?}");
    let config = target.run(tuned_here).await.unwrap().config;
    assert_eq!(config["train"]["init_from"], json!(start_here), "{config}");
    assert_eq!(config["train"]["lr"], json!(0.0003), "the rest of the configuration as it was");
    let config = target.run(report.renumbered[&scored]).await.unwrap().config;
    assert_eq!(config["evaluates"], json!(start_here), "an evaluation names its source's copy: {config}");
    assert!(report.refers_elsewhere.is_empty(), "{report:?}");

    // The tuned run alone, into a store that holds neither: reported, its setting unchanged.
    let lone_db = TestDb::new(backend, "copy-init-from-lone").await.unwrap();
    let lone = lone_db.open().await;
    let report = source.copy_into(&lone, Some(&[tuned, scored].into())).await.unwrap();
    let elsewhere: Vec<_> = report.refers_elsewhere.iter().map(|r| (r.setting, r.other)).collect();
    assert_eq!(elsewhere, [("init_from", start), ("evaluates", start)], "{report:?}");
    let copied = report.renumbered.get(&tuned).copied().unwrap_or(tuned);
    assert_eq!(lone.run(copied).await.unwrap().config["train"]["init_from"], json!(start));
}

/// Copying again copies only what the target does not hold yet (runs and sweeps are known by
/// their identity, whatever their ids), names the runs that changed since, and a new run of a
/// copied sweep joins the target's copy of that sweep. Copying back brings nothing twice.
async fn db_copy_again_copies_only_what_is_new(backend: Backend) {
    let Some(CopyPair { target_db, _source_db, source, target, ids }) = copy_pair(backend, "copy-again").await else {
        return;
    };
    // The target has runs of its own, so the copies are renumbered: identity is not the id.
    target.create_run(&new_run(42)).await.unwrap();
    let first = source.copy_into(&target, None).await.unwrap();
    assert_eq!((first.runs, first.sweeps, first.already_there.len()), (4, 1, 0), "{first:?}");
    let running = ids[2];
    let copy_of = |id: i64| first.renumbered[&id];

    let again = source.copy_into(&target, None).await.unwrap();
    assert_eq!((again.runs, again.sweeps), (0, 0), "{again:?}");
    let expected: std::collections::BTreeMap<i64, i64> = ids.iter().map(|&id| (id, copy_of(id))).collect();
    assert_eq!(again.already_there, expected);
    assert_eq!(again.sweeps_already_there.len(), 1);
    // The running run was copied as interrupted: the two differ, and the report says how.
    assert_eq!(again.changed_since.len(), 1, "{again:?}");
    let changed = &again.changed_since[0];
    assert_eq!((changed.source, changed.target), (running, copy_of(running)));
    assert_eq!(
        (changed.source_state.as_str(), changed.target_state.as_str()),
        ("running at step 0", "interrupted at step 0")
    );
    assert_eq!(target.list_runs().await.unwrap().len(), 5, "nothing was copied twice");
    // Copies made before identities (migration 0009) carry other ones: known by their content.
    target_db.execute("UPDATE runs SET uid = 'before-' || id").await;
    target_db.execute("UPDATE sweeps SET uid = 'before-' || id").await;
    let legacy = source.copy_into(&target, None).await.unwrap();
    assert_eq!((legacy.runs, legacy.sweeps), (0, 0), "{legacy:?}");
    assert_eq!((legacy.already_there, legacy.sweeps_already_there.len()), (expected, 1));

    // A new run in the source's sweep joins the target's copy of the sweep.
    let sweep = source.sweeps().await.unwrap()[0].id;
    let late = source.create_run_in_sweep(&new_run(7), sweep, 2).await.unwrap();
    let third = source.copy_into(&target, None).await.unwrap();
    assert_eq!((third.runs, third.sweeps), (1, 0), "{third:?}");
    let late_copy = third.renumbered.get(&late).copied().unwrap_or(late);
    let target_sweep = target.sweeps().await.unwrap();
    assert_eq!(target_sweep.len(), 1);
    let members: Vec<i64> = target.sweep_runs(target_sweep[0].id).await.unwrap().iter().map(|r| r.id).collect();
    assert_eq!(members, vec![copy_of(ids[0]), copy_of(ids[1]), late_copy]);

    // Back into the source: only the target's own run is new there.
    let back = target.copy_into(&source, None).await.unwrap();
    assert_eq!((back.runs, back.sweeps, back.already_there.len()), (1, 0, 5), "{back:?}");
    assert_eq!(source.list_runs().await.unwrap().len(), 6);
}

/// A copy of some runs brings their sweeps with them and nothing else; the rest, copied later,
/// joins what came first.
async fn db_copy_of_picked_runs_brings_their_sweeps(backend: Backend) {
    let Some(CopyPair { target_db: _target_db, _source_db, source, target, ids }) =
        copy_pair(backend, "copy-picked").await
    else {
        return;
    };
    let first = source.copy_into(&target, Some(&[ids[0]].into())).await.unwrap();
    assert_eq!((first.runs, first.sweeps), (1, 1), "{first:?}");
    let lone = source.copy_into(&target, Some(&[ids[3]].into())).await.unwrap();
    assert_eq!((lone.runs, lone.sweeps, lone.already_there.len()), (1, 0, 0), "{lone:?}");
    assert_eq!(target.list_runs().await.unwrap().iter().map(|r| r.id).collect::<Vec<_>>(), vec![ids[0], ids[3]]);
    let rest = source.copy_into(&target, None).await.unwrap();
    assert_eq!((rest.runs, rest.sweeps, rest.already_there.len()), (2, 0, 2), "{rest:?}");
    let sweep = target.sweeps().await.unwrap()[0].id;
    let members: Vec<i64> = target.sweep_runs(sweep).await.unwrap().iter().map(|r| r.id).collect();
    assert_eq!(members, vec![ids[0], ids[1]]);
}

/// The copy carries every column of every table (a new column must be added to its lists).
async fn db_copy_covers_every_column(backend: Backend) {
    let Some(db) = TestDb::new(backend, "copy-columns").await else { return };
    let store = db.open().await;
    for (table, copied) in workbench::store::copied_columns() {
        let mut schema = store.table_columns(table).await.unwrap();
        let mut copied: Vec<String> = copied.into_iter().map(String::from).collect();
        schema.sort();
        copied.sort();
        assert_eq!(copied, schema, "columns of {table}");
    }
}

/// Two runners on different hosts share one store: neither reaps the other's live runs
/// (a pid means nothing on another host), each reaps its own dead workers at once, and any
/// host reaps a run whose lease expired.
async fn leases_are_honoured_across_hosts(backend: Backend) {
    let Some(db) = TestDb::new(backend, "leases").await else { return };
    let a = db.open().await.with_host("node-a");
    let b = db.open().await.with_host("node-b");
    let on_a = a.create_run(&new_run(1)).await.unwrap();
    let on_b = b.create_run(&new_run(2)).await.unwrap();
    let dead_on_a = a.create_run(&new_run(3)).await.unwrap();
    // Pids that exist on no machine here: only the heartbeat says these workers live.
    a.mark_running(on_a, 3_999_901).await.unwrap();
    b.mark_running(on_b, 3_999_902).await.unwrap();
    a.mark_running(dead_on_a, 3_999_903).await.unwrap();
    let alive_here = |pid: u32| pid != 3_999_903;
    // b's pid check says every pid is dead: it reaps its own run only, none of a's.
    assert_eq!(b.reap_orphans(|_| false).await.unwrap(), vec![on_b], "b never reaps a's runs by pid");
    assert_eq!(a.reap_orphans(alive_here).await.unwrap(), vec![dead_on_a]);
    assert_eq!(a.run(on_a).await.unwrap().status, RunStatus::Running);
    let record = a.run(on_a).await.unwrap();
    assert_eq!(record.supervision.host.as_deref(), Some("node-a"));
    assert!(record.supervision.heartbeat_at.is_some());
    let dead = a.run(dead_on_a).await.unwrap();
    assert_eq!(dead.supervision.cause.as_deref(), Some("worker process 3999903 disappeared"));

    // Heartbeats renew only the holder's lease; a stop request reaches it with the next one.
    assert_eq!(a.heartbeat(on_a, 3_999_901).await.unwrap(), Lease::Held);
    assert_eq!(b.heartbeat(on_a, 3_999_901).await.unwrap(), Lease::Lost, "same pid, other host");
    assert!(b.request_stop(on_a).await.unwrap());
    assert_eq!(a.heartbeat(on_a, 3_999_901).await.unwrap(), Lease::StopRequested);

    // Silence past the lease: any host reaps it, with the lease as the cause. On PostgreSQL
    // leases also count from the server's start (a restart gives every worker a whole lease
    // to renew): a server started less than a lease ago is waited for.
    if backend == Backend::Postgres {
        let up = "SELECT EXTRACT(EPOCH FROM now() - pg_postmaster_start_time())::bigint + 0 * $1";
        let up = db.count(up, on_a).await as f64;
        let wait = LEASE.expiry.as_secs_f64() + 1.0 - up;
        if wait > 0.0 {
            tokio::time::sleep(std::time::Duration::from_secs_f64(wait)).await;
        }
    }
    let silent = LEASE.expiry.as_secs_f64() + 5.0;
    a.set_executor(on_a, "slurm", Some("4242")).await.unwrap();
    assert_eq!(a.slurm_jobs_that_may_resume(&Claims::Everyone).await.unwrap(), vec![]);
    db.count("UPDATE runs SET heartbeat_at = heartbeat_at - 100000 WHERE id = $1 RETURNING id", on_a).await;
    assert_eq!(b.reap_orphans(|_| true).await.unwrap(), vec![on_a]);
    assert_eq!(
        a.slurm_jobs_that_may_resume(&Claims::Everyone).await.unwrap(),
        vec![(on_a, "4242".to_string())],
        "its job may bring it back"
    );
    let record = a.run(on_a).await.unwrap();
    assert_eq!(record.status, RunStatus::Interrupted);
    let cause = record.supervision.cause.unwrap_or_default();
    assert!(cause.starts_with("lease expired"), "{cause} (> {silent} s)");
    assert!(record.error.unwrap_or_default().contains("workbench resume"), "the error says how to continue");
    // Its own worker answering again (the network was cut, the worker went on) takes it back,
    // as it was; another host or process cannot.
    assert_eq!(b.heartbeat(on_a, 3_999_901).await.unwrap(), Lease::Lost, "same pid, other host");
    assert_eq!(a.heartbeat(on_a, 3_999_904).await.unwrap(), Lease::Lost, "other pid");
    assert_eq!(a.run(on_a).await.unwrap().status, RunStatus::Interrupted);
    assert_eq!(a.heartbeat(on_a, 3_999_901).await.unwrap(), Lease::Reclaimed);
    let record = a.run(on_a).await.unwrap();
    assert_eq!(record.status, RunStatus::Running);
    assert_eq!((record.error, record.finished_at, record.supervision.cause), (None, None, None));
    assert_eq!(a.slurm_jobs_that_may_resume(&Claims::Everyone).await.unwrap(), vec![]);
    assert_eq!(a.heartbeat(on_a, 3_999_901).await.unwrap(), Lease::StopRequested, "the stop request stands");
    // Not once the run was requeued meanwhile (`workbench resume`), nor after a reap for another
    // reason than its lease: then the worker stops without writing.
    db.count("UPDATE runs SET heartbeat_at = heartbeat_at - 100000 WHERE id = $1 RETURNING id", on_a).await;
    assert_eq!(b.reap_orphans(|_| true).await.unwrap(), vec![on_a]);
    a.requeue(on_a).await.unwrap();
    assert_eq!(a.heartbeat(on_a, 3_999_901).await.unwrap(), Lease::Lost);
    assert_eq!(a.run(on_a).await.unwrap().status, RunStatus::Queued);
    assert_eq!(a.heartbeat(dead_on_a, 3_999_903).await.unwrap(), Lease::Lost, "its process disappeared");
    assert_eq!(a.run(dead_on_a).await.unwrap().status, RunStatus::Interrupted);
    a.close().await;
    b.close().await;
}

/// A run its worker stopped at the Slurm job's time limit, requeueing the job, ends with its
/// cause in the same write, and counts among the runs its job brings back; so does one its
/// worker stopped for a reason not yet known (a signal: Slurm requeueing the job on
/// preemption); one ended with another cause (its job cancelled) does not.
async fn a_run_requeued_at_its_time_limit_may_resume_with_its_job(backend: Backend) {
    let Some(db) = TestDb::new(backend, "time-limit").await else { return };
    let store = db.open().await;
    let requeued = store.create_claimed_run(&new_run(1), 3_999_921).await.unwrap();
    let stopped = store.create_claimed_run(&new_run(2), 3_999_921).await.unwrap();
    let cancelled = store.create_claimed_run(&new_run(3), 3_999_921).await.unwrap();
    for (id, job) in [(requeued, "51"), (stopped, "52"), (cancelled, "53")] {
        store.set_executor(id, "slurm", Some(job)).await.unwrap();
        store.mark_running(id, 3_999_921).await.unwrap();
    }
    let cause = format!("{} (slurm job 51)", workbench::store::TIME_LIMIT_REQUEUED);
    store.finish_with_cause(requeued, RunStatus::Interrupted, Some("stopped"), Some(&cause)).await.unwrap();
    store.finish_with_cause(stopped, RunStatus::Interrupted, Some("stopped"), None).await.unwrap();
    let cancelled_cause = Some("slurm job 53 CANCELLED");
    store.finish_with_cause(cancelled, RunStatus::Interrupted, Some("cancelled"), cancelled_cause).await.unwrap();
    let record = store.run(requeued).await.unwrap();
    assert_eq!(record.supervision.cause.as_deref(), Some(cause.as_str()));
    assert!(record.may_resume_with_its_job() && record.requeued_at_time_limit() && !record.lease_expired());
    let record = store.run(stopped).await.unwrap();
    assert!(record.may_resume_with_its_job() && !record.requeued_at_time_limit());
    assert!(!store.run(cancelled).await.unwrap().may_resume_with_its_job());
    assert_eq!(
        store.slurm_jobs_that_may_resume(&Claims::Everyone).await.unwrap(),
        vec![(requeued, "51".to_string()), (stopped, "52".to_string())],
        "the store selects the runs `may_resume_with_its_job` does"
    );
    store.delete_run(stopped).await.unwrap();
    // The job's next start takes the run back, claimed by its new worker at once (no runner
    // starts it meanwhile) and still under the same job; another job cannot.
    assert!(!store.take_back_for_job(requeued, 3_999_922, "52").await.unwrap(), "not the run's job");
    assert!(store.take_back_for_job(requeued, 3_999_922, "51").await.unwrap());
    assert_eq!(store.slurm_jobs_that_may_resume(&Claims::Everyone).await.unwrap(), vec![]);
    assert!(store.claim_next(3_999_923, 8, &Claims::Everyone).await.unwrap().is_none(), "claimed by the job's worker");
    store.mark_running(requeued, 3_999_922).await.unwrap();
    let record = store.run(requeued).await.unwrap();
    assert_eq!(record.status, RunStatus::Running);
    assert_eq!(record.supervision.job_id.as_deref(), Some("51"), "the job is kept");
    assert_eq!((record.error, record.supervision.cause), (None, None));
    assert!(!store.take_back_for_job(requeued, 3_999_922, "51").await.unwrap(), "only an interrupted run");
}

/// The Slurm runs a reconcile pass asks about: queued, running, or interrupted by their worker
/// with the job's end not yet recorded; once it is (only on the run still interrupted under
/// that job, without a cause), the run is not asked about again.
async fn slurm_runs_are_reconciled_until_their_job_s_end_is_recorded(backend: Backend) {
    let Some(db) = TestDb::new(backend, "reconcile").await else { return };
    let store = db.open().await;
    let queued = store.create_run(&new_run(1)).await.unwrap();
    let running = store.create_claimed_run(&new_run(2), 3_999_931).await.unwrap();
    let stopped = store.create_claimed_run(&new_run(3), 3_999_931).await.unwrap();
    let local = store.create_claimed_run(&new_run(4), 3_999_931).await.unwrap();
    let finished = store.create_claimed_run(&new_run(5), 3_999_931).await.unwrap();
    for (id, job) in [(queued, "61"), (running, "62"), (stopped, "63"), (finished, "65")] {
        store.set_executor(id, "slurm", Some(job)).await.unwrap();
    }
    store.set_executor(local, "local", None).await.unwrap();
    for id in [running, stopped, local, finished] {
        store.mark_running(id, 3_999_931).await.unwrap();
    }
    store.finish_with_cause(stopped, RunStatus::Interrupted, Some("stopped"), None).await.unwrap();
    store.finish(finished, RunStatus::Finished, None).await.unwrap();
    let asked = |runs: Vec<workbench::store::RunRecord>| runs.into_iter().map(|r| r.id).collect::<Vec<_>>();
    assert_eq!(asked(store.slurm_runs_to_reconcile().await.unwrap()), vec![queued, running, stopped]);

    assert!(!store.record_job_end(stopped, "64", "slurm: COMPLETED (exit 0:0)").await.unwrap(), "another job");
    assert!(!store.record_job_end(running, "62", "slurm: COMPLETED (exit 0:0)").await.unwrap(), "not interrupted");
    assert!(store.record_job_end(stopped, "63", "slurm: COMPLETED (exit 0:0)").await.unwrap());
    assert!(!store.record_job_end(stopped, "63", "slurm: CANCELLED").await.unwrap(), "recorded once");
    let record = store.run(stopped).await.unwrap();
    assert_eq!(record.supervision.cause.as_deref(), Some("slurm: COMPLETED (exit 0:0)"));
    assert!(!record.may_resume_with_its_job(), "its job has ended");
    assert_eq!(asked(store.slurm_runs_to_reconcile().await.unwrap()), vec![queued, running]);
}

/// A claim made on another host is never released because its runner's pid is unknown here,
/// only once it is older than the claim timeout; its runner renewing it (its worker waits for
/// the server, say) keeps it.
async fn claims_of_other_hosts_are_left_until_they_time_out(backend: Backend) {
    let Some(db) = TestDb::new(backend, "claims-hosts").await else { return };
    let a = db.open().await.with_host("node-a");
    let b = db.open().await.with_host("node-b");
    let id = a.create_run(&new_run(1)).await.unwrap();
    assert_eq!(a.claim_next(3_999_911, 4, &Claims::Everyone).await.unwrap().map(|r| r.id), Some(id));
    assert!(b.release_stale_claims(|_| false).await.unwrap().is_empty(), "a's runner may be alive");
    assert!(b.claim_next(3_999_912, 4, &Claims::Everyone).await.unwrap().is_none(), "so b cannot take the run");
    let age = "UPDATE runs SET claimed_at = claimed_at - 1000";
    db.execute(age).await;
    assert_eq!(b.renew_claims(3_999_911).await.unwrap(), 0, "not b's claim");
    assert_eq!(a.renew_claims(3_999_911).await.unwrap(), 1);
    assert!(b.release_stale_claims(|_| false).await.unwrap().is_empty(), "renewed by its runner");
    db.execute(age).await;
    assert_eq!(b.release_stale_claims(|_| false).await.unwrap(), vec![id], "older than the claim timeout");
    assert_eq!(a.claim_next(3_999_911, 4, &Claims::Everyone).await.unwrap().map(|r| r.id), Some(id));
    assert_eq!(a.release_stale_claims(|_| false).await.unwrap(), vec![id], "a knows its runner died");
}

/// A worker started under its runner's claim starts the run only while that claim holds, or
/// after it was released and nobody took the run again: a worker that waited past the claim
/// timeout (for a connection to the server) never trains a run another runner has taken.
async fn a_worker_starts_its_run_only_under_its_runner_s_claim(backend: Backend) {
    let Some(db) = TestDb::new(backend, "claimed-start").await else { return };
    let a = db.open().await.with_host("node-a");
    let b = db.open().await.with_host("node-b");
    let (runner_a, runner_b, worker_a, worker_b) = (3_999_921, 3_999_922, 3_999_923, 3_999_924);
    let id = a.create_run(&new_run(1)).await.unwrap();
    a.claim(id, runner_a).await.unwrap();
    // a's runner died and its claim timed out; b's runner took the run.
    db.execute("UPDATE runs SET claimed_at = claimed_at - 1000").await;
    assert_eq!(b.release_stale_claims(|_| false).await.unwrap(), vec![id]);
    assert_eq!(b.claim_next(runner_b, 4, &Claims::Everyone).await.unwrap().map(|r| r.id), Some(id));
    let refused = a.mark_running_claimed(id, worker_a, runner_a).await.unwrap_err().to_string();
    assert!(refused.contains("another runner took it while this worker waited"), "{refused}");
    assert_eq!(a.run(id).await.unwrap().status, RunStatus::Queued, "a's late worker changed nothing");
    // The same pid on another host is another process.
    assert!(a.mark_running_claimed(id, worker_a, runner_b).await.is_err(), "runner_b's claim is on node-b");
    b.mark_running_claimed(id, worker_b, runner_b).await.unwrap();
    let run = b.run(id).await.unwrap();
    assert_eq!((run.status, run.worker_pid), (RunStatus::Running, Some(worker_b)));
    let refused = a.mark_running_claimed(id, worker_a, runner_a).await.unwrap_err().to_string();
    assert!(refused.contains(&format!("run {id} is running")), "{refused}");
    assert_eq!(b.run(id).await.unwrap().worker_pid, Some(worker_b), "the running worker keeps the run");
    // A claim released and not taken again does not stop the late worker.
    let other = a.create_run(&new_run(2)).await.unwrap();
    a.claim(other, runner_a).await.unwrap();
    db.execute("UPDATE runs SET claimed_at = claimed_at - 1000").await;
    assert_eq!(b.release_stale_claims(|_| false).await.unwrap(), vec![other]);
    a.mark_running_claimed(other, worker_a, runner_a).await.unwrap();
    assert_eq!(a.run(other).await.unwrap().status, RunStatus::Running);
}

/// A Slurm job's worker starts a run that has no job yet (recording its own) or is its own, and
/// leaves one that belongs to another job or was submitted again since its own submission: a
/// job submitted twice (an `sbatch` that reported a failure though Slurm took the job) never
/// takes the run from the other's worker, not even before the latest job's id is recorded.
async fn a_slurm_job_starts_only_a_run_that_is_its_own(backend: Backend) {
    let Some(db) = TestDb::new(backend, "job-start").await else { return };
    let store = db.open().await;
    let fresh = store.create_run(&new_run(1)).await.unwrap();
    assert!(store.begin_submission(fresh, "first").await.unwrap());
    store.mark_running_in_job(fresh, 3_999_931, "100", Some("first")).await.unwrap();
    let run = store.run(fresh).await.unwrap();
    assert_eq!(run.status, RunStatus::Running);
    assert_eq!((run.supervision.executor.as_deref(), run.supervision.job_id.as_deref()), (Some("slurm"), Some("100")));
    assert!(!store.begin_submission(fresh, "again").await.unwrap(), "a running run is not submitted again");
    let id = store.create_run(&new_run(2)).await.unwrap();
    store.set_executor(id, "slurm", Some("102")).await.unwrap();
    let refused = store.mark_running_in_job(id, 3_999_932, "101", None).await.unwrap_err().to_string();
    assert!(refused.contains("it belongs to Slurm job 102, and this is job 101"), "{refused}");
    assert_eq!(store.run(id).await.unwrap().status, RunStatus::Queued);
    store.mark_running_in_job(id, 3_999_933, "102", None).await.unwrap();
    assert!(store.mark_running_in_job(id, 3_999_932, "101", None).await.is_err(), "job 101 never takes it");
    assert_eq!(store.run(id).await.unwrap().worker_pid, Some(3_999_933));
    // Its own job started again (Slurm's requeue keeps the id) replaces the worker.
    store.mark_running_in_job(id, 3_999_934, "102", None).await.unwrap();
    assert_eq!(store.run(id).await.unwrap().worker_pid, Some(3_999_934));
    // Submitted again before the latest job's id is recorded: the earlier job leaves it, the
    // latest takes it.
    let again = store.create_run(&new_run(4)).await.unwrap();
    assert!(store.begin_submission(again, "earlier").await.unwrap());
    assert!(store.begin_submission(again, "latest").await.unwrap());
    let refused = store.mark_running_in_job(again, 3_999_937, "104", Some("earlier")).await.unwrap_err().to_string();
    assert!(refused.contains("submitted to Slurm again since this job (104)"), "{refused}");
    assert!(store.mark_running_in_job(again, 3_999_937, "104", None).await.is_err(), "nor a job without a token");
    assert_eq!(store.run(again).await.unwrap().status, RunStatus::Queued);
    store.mark_running_in_job(again, 3_999_938, "105", Some("latest")).await.unwrap();
    assert_eq!(store.run(again).await.unwrap().supervision.job_id.as_deref(), Some("105"));
    // A run a worker outside Slurm trains is never taken by a job.
    let local = store.create_run(&new_run(3)).await.unwrap();
    store.mark_running(local, 3_999_935).await.unwrap();
    let refused = store.mark_running_in_job(local, 3_999_936, "103", None).await.unwrap_err().to_string();
    assert!(refused.contains("a worker outside Slurm trains it"), "{refused}");
    assert_eq!(store.run(local).await.unwrap().worker_pid, Some(3_999_935));
}

/// The summaries the runs table reads (smallest, largest, last value, last step, latest wall
/// time per run and metric) are what the rows say, across batches, NaN values, repeated steps
/// and a truncation on resume; the train split is summarised for the loss only.
async fn metric_summaries_follow_the_rows(backend: Backend) {
    let Some(db) = TestDb::new(backend, "summaries").await else { return };
    let store = db.open().await;
    let id = store.create_run(&new_run(1)).await.unwrap();
    let other = store.create_run(&new_run(2)).await.unwrap();
    let row = |step, split: &str, name: &str, value, wall| MetricRow {
        step,
        split: split.into(),
        name: name.into(),
        value,
        wall_time: wall,
    };
    store.insert_metrics(id, &[row(1, "train", "loss", 3.0, 1.0), row(1, "train", "lr", 0.1, 1.0)]).await.unwrap();
    store
        .insert_metrics(id, &[row(2, "train", "loss", f64::NAN, 2.0), row(2, "eval", "acc", 0.25, 2.5)])
        .await
        .unwrap();
    store.insert_metrics(id, &[row(3, "train", "loss", 1.0, f64::NAN), row(2, "eval", "acc", 0.5, 2.4)]).await.unwrap();
    store.insert_metrics(other, &[row(7, "eval", "acc", 0.9, 9.0)]).await.unwrap();
    let summary = |s: &workbench::store::MetricSummary| {
        (s.run_id, s.split.clone(), s.name.clone(), s.min, s.max, s.last, s.last_step, s.wall_time)
    };
    let got: Vec<_> = store.metric_summaries().await.unwrap().iter().map(summary).collect();
    assert_eq!(
        got,
        vec![
            // The later row at step 2 (0.5, at 2.4 s) replaced the earlier (0.25, at 2.5 s),
            // which no longer counts.
            (id, "eval".into(), "acc".into(), 0.5, 0.5, 0.5, 2, 2.4),
            (id, "train".into(), "loss".into(), 1.0, 3.0, 1.0, 3, 2.0),
            (other, "eval".into(), "acc".into(), 0.9, 0.9, 0.9, 7, 9.0),
        ]
    );
    // Resuming from step 1 drops the later rows; the summaries follow.
    store.delete_metrics_after(id, 1).await.unwrap();
    let got: Vec<_> = store.metric_summaries().await.unwrap().iter().map(summary).collect();
    assert_eq!(got, vec![(id, "train".into(), "loss".into(), 3.0, 3.0, 3.0, 1, 1.0), got[1].clone()]);
    assert_eq!(got.len(), 2);
    // A last value that is NaN reads back as NaN.
    store.insert_metrics(id, &[row(5, "train", "loss", f64::NAN, 5.0)]).await.unwrap();
    let loss = store.metric_summaries().await.unwrap().into_iter().find(|s| s.run_id == id).unwrap();
    assert!(loss.last.is_nan() && loss.min == 3.0 && loss.last_step == 5, "{loss:?}");
}

/// A batch written again (its first commit lost in transit, then retried) is stored once, and
/// a quantity recorded twice at one step keeps its later value, for metrics and diagnostics.
async fn a_batch_written_again_is_stored_once(backend: Backend) {
    let Some(db) = TestDb::new(backend, "written-again").await else { return };
    let store = db.open().await;
    let id = store.create_run(&new_run(1)).await.unwrap();
    let batch = vec![metric(1, "train", "loss", 2.0), metric(2, "train", "loss", 1.5), metric(2, "eval", "acc", 0.1)];
    store.insert_metrics(id, &batch).await.unwrap();
    store.insert_metrics(id, &batch).await.unwrap();
    assert_eq!(store.metrics(id).await.unwrap().len(), 3, "the retried batch added no row");
    // Twins within one batch and across batches: the later value stays.
    store.insert_metrics(id, &[metric(3, "train", "loss", 1.2), metric(3, "train", "loss", 1.1)]).await.unwrap();
    store.insert_metrics(id, &[metric(2, "eval", "acc", 0.3)]).await.unwrap();
    let got = store.metrics(id).await.unwrap();
    let values: Vec<_> = got.iter().map(|m| (m.split.as_str(), m.name.as_str(), m.step, m.value)).collect();
    assert_eq!(
        values,
        vec![("eval", "acc", 2, 0.3), ("train", "loss", 1, 2.0), ("train", "loss", 2, 1.5), ("train", "loss", 3, 1.1)]
    );
    let last = store.metric_summaries().await.unwrap();
    let loss = last.iter().find(|s| s.name == "loss").unwrap();
    assert_eq!((loss.last, loss.last_step), (1.1, 3));
    // A replaced value no longer counts in its summary: the step-1 loss was the largest.
    store.insert_metrics(id, &[metric(1, "train", "loss", 1.3)]).await.unwrap();
    let loss = store.metric_summaries().await.unwrap().into_iter().find(|s| s.name == "loss").unwrap();
    assert_eq!((loss.min, loss.max, loss.last, loss.last_step), (1.1, 1.5, 1.1, 3));
    let acc = store.metric_summaries().await.unwrap().into_iter().find(|s| s.name == "acc").unwrap();
    assert_eq!((acc.min, acc.max, acc.last), (0.3, 0.3, 0.3), "the eval accuracy of 0.1 was replaced");
    let diagnostics = vec![diag(5, 0, "energy", -1.0), diag(5, 1, "energy", -2.0), diag(5, 1, "energy", -2.5)];
    store.insert_diagnostics(id, &diagnostics).await.unwrap();
    store.insert_diagnostics(id, &diagnostics).await.unwrap();
    let got = store.diagnostics(id).await.unwrap();
    assert_eq!(got, vec![diag(5, 0, "energy", -1.0), diag(5, 1, "energy", -2.5)]);
    // Log lines numbered by their writer: a batch written again adds none of them; the same
    // numbers from another writer, and unnumbered lines, are lines of their own.
    let lines = |from: u64, texts: &[&str]| -> Vec<(u64, String)> {
        texts.iter().enumerate().map(|(i, t)| (from + i as u64, t.to_string())).collect()
    };
    store.append_numbered_logs(id, "a", &lines(0, &["one", "two"])).await.unwrap();
    store.append_numbered_logs(id, "a", &lines(0, &["one", "two"])).await.unwrap();
    store.append_logs(id, &["note".to_string(), "note".to_string()]).await.unwrap();
    store.append_numbered_logs(id, "a", &lines(1, &["two", "three"])).await.unwrap();
    store.append_numbered_logs(id, "b", &lines(0, &["one"])).await.unwrap();
    assert_eq!(store.logs(id, 10).await.unwrap(), ["one", "two", "note", "note", "three", "one"]);
}

/// A store written before metric rows had a key, holding twins, is migrated: the later of each
/// pair stays (the value read back before), and the run's summaries are rebuilt from the rows.
async fn twins_of_an_older_store_are_merged_by_the_migration(backend: Backend) {
    let Some(db) = TestDb::new(backend, "twins").await else { return };
    let store = db.open().await;
    let id = store.create_run(&new_run(1)).await.unwrap();
    store.insert_metrics(id, &[metric(1, "train", "loss", 2.0), metric(2, "train", "loss", 1.0)]).await.unwrap();
    store.insert_diagnostics(id, &[diag(2, 0, "energy", -1.0)]).await.unwrap();
    store.close().await;
    // Back to the schema before migration 7, with a twin of each kind written as it allowed.
    for sql in [
        "DROP INDEX metrics_key",
        "CREATE INDEX metrics_run_name_step ON metrics (run_id, name, step)",
        "DROP INDEX diagnostics_key",
        "CREATE INDEX diagnostics_run_name_step_iter ON diagnostics (run_id, name, step, iteration)",
        "INSERT INTO metrics (run_id, step, split, name, value, wall_time) VALUES (1, 2, 'train', 'loss', 0.5, 1.0)",
        "INSERT INTO diagnostics (run_id, step, iteration, name, value) VALUES (1, 2, 0, 'energy', -4.0)",
        "UPDATE metric_summaries SET lo = -9, hi = 9",
        "DELETE FROM _sqlx_migrations WHERE version = 7",
    ] {
        db.execute(sql).await;
    }
    let store = db.open().await;
    let got: Vec<_> = store.metrics(id).await.unwrap().iter().map(|m| (m.step, m.value)).collect();
    assert_eq!(got, vec![(1, 2.0), (2, 0.5)]);
    assert_eq!(store.diagnostics(id).await.unwrap(), vec![diag(2, 0, "energy", -4.0)]);
    let loss = store.metric_summaries().await.unwrap().into_iter().find(|s| s.name == "loss").unwrap();
    assert_eq!((loss.min, loss.max, loss.last, loss.last_step), (0.5, 2.0, 0.5, 2));
    // And the key holds from then on.
    store.insert_metrics(id, &[metric(2, "train", "loss", 0.25)]).await.unwrap();
    assert_eq!(store.metrics(id).await.unwrap().len(), 2);
}

/// A follower of the runs table reads what changed since its last refresh and ends up with
/// what a full read gives: new runs, changes made through another handle (status, notes,
/// tags), deletions, and the summaries of running runs as their metrics are written.
async fn a_runs_follower_reads_only_what_changed(backend: Backend) {
    let Some(db) = TestDb::new(backend, "follow").await else { return };
    let store = db.open().await;
    let other = db.open().await;
    let ids: Vec<i64> = queued_runs(&store, 3).await;
    let mut table = RunsFollower::new();
    let first = table.refresh(&store).await.unwrap();
    assert_eq!((first.changed, first.deleted), (3, 0));
    let same = |table: &RunsFollower, full: Vec<workbench::store::RunRecord>| {
        let got: Vec<String> = table.runs().map(|r| format!("{r:?}")).collect();
        let want: Vec<String> = full.iter().map(|r| format!("{r:?}")).collect();
        assert_eq!(got, want);
    };
    same(&table, store.list_runs().await.unwrap());
    // Nothing changed: nothing is read. (On PostgreSQL runs changed by a transaction that was
    // still open anywhere on the server at the last refresh are read again, and the tests
    // share the server: only SQLite's counts are exact.)
    let exact = backend == Backend::Sqlite;
    let idle = table.refresh(&store).await.unwrap();
    assert!(!exact || idle == Refreshed::default(), "{idle:?}");

    other.set_notes(ids[0], "seen from elsewhere").await.unwrap();
    other.set_tags(ids[0], &["a".into()]).await.unwrap();
    other.mark_running(ids[1], std::process::id()).await.unwrap();
    let fourth = other.create_run(&new_run(4)).await.unwrap();
    let step = table.refresh(&store).await.unwrap();
    assert!(step.changed >= 3 && (!exact || step.changed == 3) && step.deleted == 0, "{step:?}");
    same(&table, store.list_runs().await.unwrap());

    // Metrics of a running run reach its summaries without any change to its run row.
    let row = MetricRow { step: 5, split: "eval".into(), name: "acc".into(), value: 0.5, wall_time: 1.0 };
    other.insert_metrics(ids[1], &[row]).await.unwrap();
    let step = table.refresh(&store).await.unwrap();
    assert!(!exact || step.changed == 0, "{step:?}");
    assert_eq!(table.summaries()[&ids[1]][0].max, 0.5);

    other.delete_run(ids[2]).await.unwrap();
    other.delete_run(fourth).await.unwrap();
    let fifth = other.create_run(&new_run(5)).await.unwrap();
    let step = table.refresh(&store).await.unwrap();
    assert!(step.changed >= 1 && (!exact || step.changed == 1) && step.deleted == 2, "{step:?}");
    same(&table, store.list_runs().await.unwrap());
    assert!(table.runs().any(|r| r.id == fifth) && !table.summaries().contains_key(&ids[2]));
}

async fn queued_runs(store: &Store, n: u64) -> Vec<i64> {
    let mut ids = Vec::new();
    for seed in 0..n {
        ids.push(store.create_run(&new_run(seed)).await.unwrap());
    }
    ids
}

/// On PostgreSQL writers commit in any order: a change whose transaction began before the
/// follower's refresh but committed after it is still read by the next refresh.
#[tokio::test]
async fn a_runs_follower_sees_a_change_that_commits_late() {
    let Some(db) = TestDb::new(Backend::Postgres, "follow-late").await else { return };
    let store = db.open().await;
    let id = store.create_run(&new_run(1)).await.unwrap();
    let early = store.create_run(&new_run(2)).await.unwrap();
    let mut table = RunsFollower::new();
    table.refresh(&store).await.unwrap();
    let url = db.db_arg().into_string().unwrap();
    let mut late = sqlx::PgConnection::connect(&url).await.unwrap();
    let mut tx = late.begin().await.unwrap();
    sqlx::query("UPDATE runs SET notes = 'late' WHERE id = $1").bind(id).execute(&mut *tx).await.unwrap();
    // A change that commits meanwhile is read, and the late one is not visible yet.
    store.set_notes(early, "early").await.unwrap();
    table.refresh(&store).await.unwrap();
    let notes: Vec<&str> = table.runs().map(|r| r.notes.as_str()).collect();
    assert_eq!(notes, vec!["", "early"]);
    tx.commit().await.unwrap();
    table.refresh(&store).await.unwrap();
    let notes: Vec<&str> = table.runs().map(|r| r.notes.as_str()).collect();
    assert_eq!(notes, vec!["late", "early"]);
}

/// `sweeps` counts each sweep's runs by status (and its paused queued runs, and those submitted
/// to Slurm whose job has not started), newest first;
/// `sweep(id)` reads that one sweep alone, and an unknown id is reported as a sweep.
async fn sweeps_are_counted_and_one_is_read_by_id(backend: Backend) {
    let Some(dir) = TestDb::new(backend, "sweeps").await else { return };
    let store = dir.open().await;
    let first = store.create_sweep("lr", &json!({"axes": ["lr"]})).await.unwrap();
    let runs: Vec<i64> = queue_in_sweep(&store, first, 3).await;
    store.mark_running(runs[0], std::process::id()).await.unwrap();
    store.set_held(runs[1], true).await.unwrap();
    store.set_executor(runs[2], "slurm", Some("77")).await.unwrap();
    let second = store.create_sweep("seed", &json!({"axes": ["seed"]})).await.unwrap();
    store.create_run_in_sweep(&new_run(9), second, 0).await.unwrap();
    let empty = store.create_sweep("empty", &json!({"axes": []})).await.unwrap();
    store.create_run(&new_run(10)).await.unwrap(); // outside every sweep

    let all = store.sweeps().await.unwrap();
    let ids: Vec<i64> = all.iter().map(|s| s.id).collect();
    assert_eq!(ids, vec![empty, second, first], "newest first");
    let counts = |s: &workbench::store::SweepRecord| {
        (s.counts.iter().map(|(k, v)| (k.clone(), *v)).collect::<Vec<_>>(), s.held, s.submitted)
    };
    assert_eq!(counts(&all[2]), (vec![("queued".to_string(), 2), ("running".to_string(), 1)], 1, 1));
    assert_eq!(counts(&all[1]), (vec![("queued".to_string(), 1)], 0, 0));
    assert_eq!(counts(&all[0]), (vec![], 0, 0));
    for listed in &all {
        let alone = store.sweep(listed.id).await.unwrap();
        assert_eq!(format!("{alone:?}"), format!("{listed:?}"), "sweep {} read alone", listed.id);
    }
    for unknown in [first + 100, -1] {
        let err = store.sweep(unknown).await.unwrap_err();
        assert!(matches!(err, StoreError::SweepNotFound(id) if id == unknown), "{err:?}");
    }
}

/// Queues `n` runs in `sweep`, in order.
async fn queue_in_sweep(store: &Store, sweep: i64, n: u32) -> Vec<i64> {
    let mut ids = Vec::new();
    for i in 0..n {
        ids.push(store.create_run_in_sweep(&new_run(u64::from(i)), sweep, i).await.unwrap());
    }
    ids
}

/// A worker's writes (`train::outbox`): what it pushes is in the store once `sync` returns,
/// as before a checkpoint (the writer otherwise writes every two seconds), and closing writes
/// the rest, the checkpoint's record included.
async fn a_synced_outbox_has_written_everything_pushed(backend: Backend) {
    use workbench::train::{background::Background, outbox::Outbox};
    let Some(db) = TestDb::new(backend, "outbox-sync").await else { return };
    let store = db.open().await;
    let id = store.create_run(&new_run(1)).await.unwrap();
    // Held by this process, as a worker holds its run.
    store.mark_running(id, std::process::id()).await.unwrap();
    let background = Background::start(&store, id).unwrap();
    let outbox = Outbox::start(&background, id, format!("runs/{id}/checkpoint.safetensors"), Default::default());
    // Past the writer's first (empty) pass: what follows waits for its next one.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    for step in 1..=10 {
        outbox.push(step, "train", "loss", step as f64, 0.0);
    }
    outbox.push_log("step 10".into());
    outbox.progress(10);
    outbox.sync().await;
    assert_eq!(store.metrics(id).await.unwrap().len(), 10);
    assert_eq!(store.logs(id, 10).await.unwrap().len(), 1);
    assert_eq!(store.run(id).await.unwrap().last_step, 10);
    outbox.push(11, "train", "loss", 11.0, 0.0);
    outbox.checkpoint(11);
    outbox.progress(11);
    outbox.close().await.unwrap();
    assert_eq!(store.metrics(id).await.unwrap().len(), 11);
    assert_eq!(store.run(id).await.unwrap().last_step, 11);
    assert_eq!(store.artifacts(id).await.unwrap().len(), 1);
}

/// A worker's writes wait while the run's lease is not the worker's (a reader marked it
/// interrupted while the worker was frozen: nothing is written, `sync` does not wait), are
/// written once the lease is back, and are dropped, with the writer ended, once the lease is
/// lost (the run requeued meanwhile): the run keeps what it had.
async fn an_outbox_writes_only_while_its_worker_holds_the_lease(backend: Backend) {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use workbench::train::{background::Background, outbox::Outbox};
    let Some(db) = TestDb::new(backend, "outbox-lease").await else { return };
    let store = db.open().await;
    let pid = std::process::id();
    let id = store.create_run(&new_run(1)).await.unwrap();
    store.mark_running(id, pid).await.unwrap();
    assert!(store.holds_lease(id, pid).await.unwrap());
    assert!(!store.holds_lease(id, pid + 1).await.unwrap(), "another process does not hold it");
    let lost = Arc::new(AtomicBool::new(false));
    let background = Background::start(&store, id).unwrap();
    let outbox = Outbox::start(&background, id, format!("runs/{id}/checkpoint.safetensors"), lost.clone());
    outbox.push(1, "train", "loss", 1.0, 0.0);
    outbox.progress(1);
    outbox.sync().await;
    assert_eq!(store.run(id).await.unwrap().last_step, 1);
    // The lease away (a reader marked the run interrupted, as it does when heartbeats stop):
    // pushed rows wait, and `sync` returns without them.
    let expire = || store.finish_with_cause(id, RunStatus::Interrupted, None, Some("lease expired (test)"));
    expire().await.unwrap();
    assert!(!store.holds_lease(id, pid).await.unwrap());
    outbox.push(2, "train", "loss", 2.0, 0.0);
    outbox.progress(2);
    tokio::time::timeout(std::time::Duration::from_secs(10), outbox.sync()).await.expect("sync does not wait");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(store.run(id).await.unwrap().last_step, 1, "nothing written while the lease is away");
    assert_eq!(store.metrics(id).await.unwrap().len(), 1);
    // Taken back by the heartbeat: what waited is written.
    assert_eq!(store.heartbeat(id, pid).await.unwrap(), Lease::Reclaimed);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while store.run(id).await.unwrap().last_step != 2 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(store.run(id).await.unwrap().last_step, 2, "written at the writer's next pass");
    assert_eq!(store.metrics(id).await.unwrap().len(), 2);
    // Away again, then requeued and the lease lost: closing writes nothing more and returns.
    expire().await.unwrap();
    outbox.push(3, "train", "loss", 3.0, 0.0);
    outbox.progress(3);
    store.requeue(id).await.unwrap();
    lost.store(true, Ordering::Relaxed);
    tokio::time::timeout(std::time::Duration::from_secs(10), outbox.close()).await.expect("close returns").unwrap();
    let run = store.run(id).await.unwrap();
    assert_eq!((run.status, run.last_step), (RunStatus::Queued, 2), "the requeued run is as it was");
    assert_eq!(store.metrics(id).await.unwrap().len(), 2);
}

/// In a store a lab shares, a queue runner starts its user's runs (and those stored before
/// users were recorded) and counts only those against its job limit; `Claims::Everyone`
/// (`queue --all-users`) starts anyone's.
async fn a_runner_starts_its_user_s_runs(backend: Backend) {
    let Some(db) = TestDb::new(backend, "claims-users").await else { return };
    let alice = db.open().await.with_user("alice");
    let bob = db.open().await.with_user("bob");
    let older = alice.create_run(&new_run(0)).await.unwrap();
    db.execute("UPDATE runs SET created_by = NULL").await;
    let a = alice.create_run(&new_run(1)).await.unwrap();
    let (b1, b2) = (bob.create_run(&new_run(2)).await.unwrap(), bob.create_run(&new_run(3)).await.unwrap());
    assert_eq!(alice.run(a).await.unwrap().created_by.as_deref(), Some("alice"));
    let (for_alice, for_bob) = (Claims::mine(&alice), Claims::mine(&bob));
    let claim = |store: &Store, pid, jobs, claims| {
        let (store, claims) = (store.clone(), Claims::clone(claims));
        async move { store.claim_next(pid, jobs, &claims).await.unwrap().map(|r| r.id) }
    };
    assert_eq!(claim(&alice, 100, 2, &for_alice).await, Some(older), "a run without a user is anyone's");
    assert_eq!(claim(&alice, 100, 2, &for_alice).await, Some(a));
    assert_eq!(claim(&alice, 100, 9, &for_alice).await, None, "bob's runs are not alice's to start");
    // Alice's two claimed runs count against her limit, not bob's (the older run against both).
    assert_eq!(claim(&bob, 101, 2, &for_bob).await, Some(b1));
    assert_eq!(claim(&bob, 101, 2, &for_bob).await, None, "the older run and b1 fill bob's two slots");
    assert_eq!(claim(&alice, 102, 9, &Claims::Everyone).await, Some(b2), "a runner for everyone");
}

on_both_backends!(
    a_runner_starts_its_user_s_runs,
    an_outbox_writes_only_while_its_worker_holds_the_lease,
    a_synced_outbox_has_written_everything_pushed,
    run_round_trip_all_fields,
    status_transitions,
    metrics_and_diagnostics_batched,
    artifacts_latest_by_step,
    logs_last_n,
    a_log_tail_returns_each_line_once,
    notes_and_tags,
    delete_cascades,
    delete_metrics_after_truncates_metrics_and_diagnostics,
    reopen_preserves_data_and_two_handles_share_it,
    reap_orphans_marks_dead_workers_interrupted,
    twenty_thousand_metrics_in_batches_read_back_in_order,
    the_queue_claims_at_most_jobs_runs_and_never_one_twice,
    claimed_runs_asking_for_cuda_get_a_free_device_each,
    a_worker_that_cannot_start_is_retried_then_its_run_fails_with_the_reason,
    concurrent_runners_claim_each_run_once_within_the_limit,
    db_copy_into_a_used_store_renumbers,
    db_copy_keeps_a_run_s_starting_point,
    db_copy_again_copies_only_what_is_new,
    db_copy_of_picked_runs_brings_their_sweeps,
    db_copy_covers_every_column,
    leases_are_honoured_across_hosts,
    claims_of_other_hosts_are_left_until_they_time_out,
    a_worker_starts_its_run_only_under_its_runner_s_claim,
    a_slurm_job_starts_only_a_run_that_is_its_own,
    a_run_requeued_at_its_time_limit_may_resume_with_its_job,
    slurm_runs_are_reconciled_until_their_job_s_end_is_recorded,
    metric_summaries_follow_the_rows,
    a_batch_written_again_is_stored_once,
    twins_of_an_older_store_are_merged_by_the_migration,
    a_runs_follower_reads_only_what_changed,
    a_backup_holds_every_row,
    sweeps_are_counted_and_one_is_read_by_id,
    a_new_store_opened_by_many_at_once_is_migrated_once,
);
