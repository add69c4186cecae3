//! The operations on runs that the command line and the TUI share (`workbench::ops`).

use crate::common;

use common::plain_run;

use common::stores::{Backend, TestDb};
use std::time::Duration;
use workbench::ablation::Format;
use workbench::ops::export::{self, TableRuns};
use workbench::ops::grid::{self, parse_axis, Spec};
use workbench::ops::launch;
use workbench::ops::runs::{self, Cancelled, Held};
use workbench::store::{MetricRow, RunStatus, Store};

/// Deleting several runs is all or nothing: one running run refuses the whole request.
#[tokio::test]
async fn delete_refuses_running_runs_before_deleting_any() {
    let db = TestDb::new(Backend::Sqlite, "ops-delete").await.unwrap();
    let store = db.open().await;
    let (a, b) = (store.create_run(&plain_run(1)).await.unwrap(), store.create_run(&plain_run(2)).await.unwrap());
    store.mark_running(b, std::process::id()).await.unwrap();
    let err = runs::delete(&store, &[a, b], false).await.unwrap_err();
    assert!(err.to_string().contains(&format!("run {b} is running: cancel it first")), "{err}");
    assert!(store.run(a).await.is_ok(), "nothing was deleted");
    store.finish(b, RunStatus::Finished, None).await.unwrap();
    runs::delete(&store, &[a, b], false).await.unwrap();
    assert!(store.list_runs().await.unwrap().is_empty());
}

/// Cancel takes a queued run out of the queue, refuses an ended one, and says what it did.
#[tokio::test]
async fn cancel_queued_and_ended_runs() {
    let db = TestDb::new(Backend::Sqlite, "ops-cancel").await.unwrap();
    let store = db.open().await;
    let id = store.create_run(&plain_run(1)).await.unwrap();
    let grace = Duration::from_secs(1);
    let done = runs::cancel(&store, id, grace).await.unwrap();
    assert_eq!(done, Cancelled::BeforeStart);
    assert_eq!(done.describe(id, grace), format!("run {id} cancelled before it started"));
    assert_eq!(store.run(id).await.unwrap().status, RunStatus::Interrupted);
    let err = runs::cancel(&store, id, grace).await.unwrap_err();
    assert!(err.to_string().contains("nothing to cancel"), "{err}");
    runs::requeue(&store, id).await.unwrap();
    assert_eq!(store.run(id).await.unwrap().status, RunStatus::Queued);
}

/// Notes and tags change independently.
#[tokio::test]
async fn annotate_changes_only_what_it_is_given() {
    let db = TestDb::new(Backend::Sqlite, "ops-annotate").await.unwrap();
    let store = db.open().await;
    let id = store.create_run(&plain_run(1)).await.unwrap();
    runs::annotate(&store, id, Some("first"), Some(&["a".to_string()])).await.unwrap();
    runs::annotate(&store, id, None, Some(&["b".to_string()])).await.unwrap();
    let run = store.run(id).await.unwrap();
    assert_eq!((run.notes.as_str(), run.tags), ("first", vec!["b".to_string()]));
}

/// A grid with two bad points is refused with both reasons, not only the first, and the good
/// points of the same grid plan on their own.
#[test]
fn a_grid_plan_reports_every_bad_point() {
    let host = common::load_plugins("ops-grid", &["transformer", "sudoku"]);
    let spec = |d: &str| Spec {
        layers: vec!["transformer".into()],
        task: "sudoku".into(),
        axes: vec![parse_axis(d).unwrap(), parse_axis("heads=4").unwrap()],
    };
    // Neither 30 nor 34 is divisible by 4 heads; 16 is.
    let err = grid::plan(&host, &spec("d=16,30,34")).unwrap_err().to_string();
    assert!(err.contains("2 of the sweep's points are invalid; nothing was queued"), "{err}");
    assert!(err.contains("d=30 heads=4") && err.contains("d=34 heads=4"), "{err}");
    assert!(!err.contains("d=16 heads=4"), "a good point reported as bad: {err}");
    let points = grid::plan(&host, &spec("d=16,32")).unwrap();
    let overrides: Vec<String> = points.iter().map(|p| p.overrides.join(" ")).collect();
    assert_eq!(overrides, ["d=16 heads=4", "d=32 heads=4"]);
}

/// The declaration stored with a sweep made of given runs.
fn empty_grid() -> Spec {
    Spec { layers: vec!["hyperset".into()], task: "sudoku".into(), axes: vec![] }
}

/// A queued sweep keeps its runs in the order given; pausing through one run pauses the sweep.
#[tokio::test]
async fn a_queued_sweep_pauses_and_releases_as_one() {
    let db = TestDb::new(Backend::Sqlite, "ops-sweep").await.unwrap();
    let store = db.open().await;
    let queued =
        launch::queue_sweep(&store, "s", &empty_grid(), &[plain_run(1), plain_run(2), plain_run(3)]).await.unwrap();
    let in_sweep: Vec<i64> = store.sweep_runs(queued.sweep).await.unwrap().iter().map(|r| r.id).collect();
    assert_eq!(in_sweep, queued.runs);
    let sweep = queued.sweep;
    let paused = runs::toggle_hold(&store, queued.runs[1], true).await.unwrap();
    assert_eq!(paused, Held::Sweep { sweep, count: 3, held: true });
    assert_eq!(paused.describe(), format!("sweep {sweep}: 3 queued runs paused"));
    assert!(store.sweep_runs(sweep).await.unwrap().iter().all(|r| r.held));
    let released = runs::toggle_hold(&store, queued.runs[0], true).await.unwrap();
    assert_eq!(released, Held::Sweep { sweep, count: 3, held: false });

    let alone = launch::queue_run(&store, &plain_run(4)).await.unwrap();
    let err = runs::toggle_hold(&store, alone, true).await.unwrap_err();
    assert!(err.to_string().contains(&format!("run {alone} is not part of a sweep")), "{err}");
    assert_eq!(runs::toggle_hold(&store, alone, false).await.unwrap().describe(), format!("run {alone} paused"));
    assert!(store.run(alone).await.unwrap().held);
}

/// Only interrupted or failed runs go back in the queue; the refusal says why.
#[tokio::test]
async fn requeue_refuses_runs_that_are_waiting_running_or_finished() {
    let db = TestDb::new(Backend::Sqlite, "ops-requeue").await.unwrap();
    let store = db.open().await;
    let id = store.create_run(&plain_run(1)).await.unwrap();
    let refusal = |e: anyhow::Error| e.to_string();
    assert!(refusal(runs::requeue(&store, id).await.unwrap_err()).contains("it is already waiting for a worker"));
    store.mark_running(id, std::process::id()).await.unwrap();
    assert!(refusal(runs::requeue(&store, id).await.unwrap_err()).contains("it is still running"));
    store.finish(id, RunStatus::Finished, None).await.unwrap();
    let err = refusal(runs::requeue(&store, id).await.unwrap_err());
    assert!(err.contains(&format!("run {id} is finished")), "{err}");
    assert!(err.contains("only interrupted or failed runs can be requeued"), "{err}");

    let failed = store.create_run(&plain_run(2)).await.unwrap();
    store.mark_running(failed, std::process::id()).await.unwrap();
    store.finish(failed, RunStatus::Failed, Some("boom")).await.unwrap();
    runs::requeue(&store, failed).await.unwrap();
    assert_eq!(store.run(failed).await.unwrap().status, RunStatus::Queued);
}

/// A finished run of layer width `d` with a final accuracy.
async fn finished_run(store: &Store, d: u32, seed: u64, accuracy: f64) -> i64 {
    let mut run = plain_run(seed);
    run.config = serde_json::json!({"layer_config": {"d": d}, "task_config": {}, "train": {"seed": seed}});
    let id = store.create_run(&run).await.unwrap();
    store.mark_running(id, std::process::id()).await.unwrap();
    let row =
        |step, name: &str, value| MetricRow { step, split: "eval".into(), name: name.into(), value, wall_time: 1.0 };
    store.insert_metrics(id, &[row(5, "accuracy", accuracy), row(5, "loss", 1.0 - accuracy)]).await.unwrap();
    store.finish(id, RunStatus::Finished, None).await.unwrap();
    id
}

/// Tables and figures are made from run ids as given, in their order; an unfinished run of a
/// sweep is left out of its table and counted.
#[tokio::test]
async fn exports_from_run_ids() {
    let db = TestDb::new(Backend::Sqlite, "ops-export").await.unwrap();
    let store = db.open().await;
    let a = finished_run(&store, 16, 1, 0.25).await;
    let b = finished_run(&store, 32, 1, 0.75).await;
    let selected = export::select(&store, &TableRuns::Runs(vec![b, a])).await.unwrap();
    assert_eq!(selected.records.iter().map(|r| r.id).collect::<Vec<_>>(), [b, a]);
    let table = export::ablation(&store, &selected.records, Some(&["accuracy"]), None, Format::Csv).await.unwrap();
    assert!(table.contains("accuracy") && table.contains("0.75") && table.contains("0.25"), "{table}");
    // Sorted: best first by the column's direction, or as asked; in the runs' order without.
    let sorted = |column: &str, descending| {
        let sort = export::TableSort { column: column.into(), descending };
        let records = [selected.records[1].clone(), selected.records[0].clone()];
        let store = &store;
        async move { export::ablation(store, &records, None, Some(&sort), Format::Csv).await }
    };
    let first_d = |table: &str| table.lines().nth(1).unwrap().split(',').nth(1).unwrap().to_string();
    assert_eq!(first_d(&sorted("accuracy", None).await.unwrap()), "32", "highest accuracy first");
    assert_eq!(first_d(&sorted("best:loss", None).await.unwrap()), "32", "lowest loss first");
    assert_eq!(first_d(&sorted("final accuracy", Some(false)).await.unwrap()), "16", "ascending as asked");
    let err = sorted("bleu", None).await.unwrap_err().to_string();
    assert!(
        err.contains("--sort: no metric `bleu`") && err.contains("or a column: ") && err.contains("params"),
        "{err}"
    );
    let err = export::ablation(&store, &selected.records, Some(&["bleu"]), None, Format::Csv).await.unwrap_err();
    assert!(err.to_string().contains("no metric `bleu` in these runs; available: "), "{err}");
    let missing = export::select(&store, &TableRuns::Runs(vec![a, 999])).await.unwrap_err();
    assert!(format!("{missing:#}").contains("run 999"), "{missing:#}");

    let queued = launch::queue_sweep(&store, "s", &empty_grid(), &[plain_run(3)]).await.unwrap();
    let sweep = export::select(&store, &TableRuns::Sweeps(vec![queued.sweep])).await.unwrap();
    assert_eq!((sweep.records.len(), sweep.unfinished), (0, 1));
    let finished = export::select(&store, &TableRuns::Finished).await.unwrap();
    assert_eq!(finished.records.len(), 2);

    let dir = common::temp_dir("ops-export");
    let panels = workbench::plot::parse_panels("loss,metric").unwrap();
    let out = dir.join("fig.svg");
    let figure = export::plot(&store, &[a, b], &panels, &out, (400, 300)).await.unwrap();
    assert_eq!(figure.describe(), format!("wrote {} (2 panels, 2 runs)", out.display()));
    assert!(std::fs::read_to_string(&out).unwrap().contains("<svg"));
    let err = export::plot(&store, &[a], &panels, &dir.join("fig.txt"), (400, 300)).await.unwrap_err();
    assert!(err.to_string().contains("must end in .png or .svg"), "{err}");
}
