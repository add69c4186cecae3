//! The operations on runs that the command line and the TUI share (`workbench::ops`).

mod common;

use common::stores::{Backend, TestDb};
use std::time::Duration;
use workbench::ops::runs::{self, Cancelled};
use workbench::store::{NewRun, PluginRef, RunStatus};

fn new_run(seed: u64) -> NewRun {
    let plugin = PluginRef { name: "p".into(), version: "1".into(), fingerprint: "f".into(), build: None };
    NewRun {
        layer: plugin.clone(),
        task: plugin,
        config: serde_json::json!({}),
        seed,
        device: "cpu".into(),
        git_rev: None,
        total_steps: Some(10),
    }
}

/// Deleting several runs is all or nothing: one running run refuses the whole request.
#[tokio::test]
async fn delete_refuses_running_runs_before_deleting_any() {
    let db = TestDb::new(Backend::Sqlite, "ops-delete").await.unwrap();
    let store = db.open().await;
    let (a, b) = (store.create_run(&new_run(1)).await.unwrap(), store.create_run(&new_run(2)).await.unwrap());
    store.mark_running(b, std::process::id()).await.unwrap();
    let err = runs::delete(&store, &[a, b]).await.unwrap_err();
    assert!(err.to_string().contains(&format!("run {b} is running: cancel it first")), "{err}");
    assert!(store.run(a).await.is_ok(), "nothing was deleted");
    store.finish(b, RunStatus::Finished, None).await.unwrap();
    runs::delete(&store, &[a, b]).await.unwrap();
    assert!(store.list_runs().await.unwrap().is_empty());
}

/// Cancel takes a queued run out of the queue, refuses an ended one, and says what it did.
#[tokio::test]
async fn cancel_queued_and_ended_runs() {
    let db = TestDb::new(Backend::Sqlite, "ops-cancel").await.unwrap();
    let store = db.open().await;
    let id = store.create_run(&new_run(1)).await.unwrap();
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
    let id = store.create_run(&new_run(1)).await.unwrap();
    runs::annotate(&store, id, Some("first"), Some(&["a".to_string()])).await.unwrap();
    runs::annotate(&store, id, None, Some(&["b".to_string()])).await.unwrap();
    let run = store.run(id).await.unwrap();
    assert_eq!((run.notes.as_str(), run.tags), ("first", vec!["b".to_string()]));
}
