//! Starting a worker process for a stored run and following its progress.

use super::events::Event;
use crate::store::{RunStatus, Store};
use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// Starts `workbench worker --run ID` (the running executable) with stdout piped.
pub fn spawn_worker(db: &Path, plugin_dirs: &[PathBuf], run_id: i64, resume: bool) -> Result<Child> {
    let exe = std::env::current_exe().context("cannot find the workbench executable to start a worker")?;
    let mut cmd = Command::new(exe);
    cmd.arg("--db").arg(db);
    for dir in plugin_dirs {
        cmd.arg("--plugin-dir").arg(dir);
    }
    cmd.args(["worker", "--run", &run_id.to_string()]);
    if resume {
        cmd.arg("--resume");
    }
    cmd.stdout(Stdio::piped()).stdin(Stdio::null()).kill_on_drop(false);
    cmd.spawn().context("cannot start the worker process")
}

/// How progress is shown while following a worker.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Display {
    /// A progress bar with rate and ETA, and evaluation lines.
    Bar,
    /// The worker's JSON events, one per line, on stdout.
    Json,
}

/// Follows a worker until it exits and returns the run's final status from the store.
pub async fn follow(store: &Store, mut child: Child, run_id: i64, display: Display) -> Result<RunStatus> {
    let stdout = child.stdout.take().context("worker stdout was not captured")?;
    let mut lines = BufReader::new(stdout).lines();
    let bar = ProgressBar::hidden();
    while let Some(line) = lines.next_line().await? {
        if display == Display::Json {
            println!("{line}");
            continue;
        }
        match serde_json::from_str::<Event>(&line) {
            Ok(Event::Started { total_steps, start_step, params, layer, task, .. }) => {
                bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
                bar.set_length(total_steps);
                bar.set_position(start_step);
                bar.set_style(
                    ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} steps {per_sec} ETA {eta} {msg}")
                        .unwrap_or_else(|_| ProgressStyle::default_bar())
                        .progress_chars("=> "),
                );
                bar.set_prefix(format!("run {run_id}"));
                bar.println(format!("run {run_id}: {layer} on {task}, {params} parameters"));
                bar.reset_eta();
            }
            Ok(Event::Step { step, loss, lr, .. }) => {
                bar.set_position(step);
                bar.set_message(format!("loss {loss:.4} lr {lr:.2e}"));
            }
            Ok(Event::Eval { step, iterations, metrics }) => {
                let summary: Vec<String> = metrics.iter().map(|(k, v)| format!("{k} {v:.4}")).collect();
                bar.println(format!("step {step} eval at {iterations} iterations: {}", summary.join(", ")));
            }
            Ok(Event::Finished { .. }) => bar.finish_and_clear(),
            Err(_) => bar.println(line),
        }
    }
    let exit = child.wait().await.context("waiting for the worker")?;
    bar.finish_and_clear();
    // A worker killed before it could record its end leaves the run `running`.
    store.reap_orphans(crate::store::process_alive).await?;
    let record = store.run(run_id).await?;
    if !exit.success() && record.status == RunStatus::Running {
        anyhow::bail!("worker for run {run_id} exited with {exit}");
    }
    Ok(record.status)
}
