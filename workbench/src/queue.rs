//! The queue runner: starts queued runs as worker slots free up. The queue itself lives in
//! runs.db, so any runner (`workbench queue`, `workbench sweep`, the TUI) can pick it up,
//! and closing one loses nothing.

use crate::store::{process_alive, RunStatus, Store};
use crate::train::launch::spawn_detached;
use anyhow::Result;
use std::path::PathBuf;

/// Default number of concurrent workers: one on CPU (a worker already uses every core).
pub const DEFAULT_JOBS: usize = 1;

/// Starts queued runs while fewer than `jobs` are running.
pub struct QueueRunner {
    pub store: Store,
    pub plugin_dirs: Vec<PathBuf>,
    pub jobs: usize,
}

impl QueueRunner {
    /// One pass: marks dead workers' runs interrupted, releases stale claims, then claims and
    /// starts queued runs up to the job limit. Returns the runs started.
    pub async fn tick(&self) -> Result<Vec<i64>> {
        self.store.reap_orphans(process_alive).await?;
        self.store.release_stale_claims(process_alive).await?;
        let mut started = Vec::new();
        while let Some(run) = self.store.claim_next(std::process::id(), self.jobs).await? {
            // A run that trained before (requeued after an interruption) continues from its
            // checkpoint.
            let resume = run.started_at.is_some();
            match spawn_detached(self.store.path(), &self.plugin_dirs, run.id, resume) {
                Ok(_) => started.push(run.id),
                Err(e) => {
                    self.store.finish(run.id, RunStatus::Failed, Some(&format!("{e:#}"))).await?;
                }
            }
        }
        Ok(started)
    }
}
