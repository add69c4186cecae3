//! The queue runner: starts queued runs as worker slots free up. The queue itself lives in
//! runs.db, so any runner (`workbench queue`, `workbench sweep`, the TUI) can pick it up,
//! and closing one loses nothing.

use crate::store::{process_alive, RunStatus, Store};
use crate::train::launch::spawn_detached;
use anyhow::Result;
use std::path::PathBuf;

/// Default number of concurrent workers: one per CUDA device on a machine that has them,
/// otherwise one (a CPU worker already splits its batches over every core).
pub fn default_jobs() -> usize {
    jobs_for_devices(crate::device::cuda_device_count())
}

/// [`default_jobs`] for a machine with `cuda_devices` CUDA devices.
pub fn jobs_for_devices(cuda_devices: usize) -> usize {
    cuda_devices.max(1)
}

/// Starts queued runs while fewer than `jobs` are running.
pub struct QueueRunner {
    pub store: Store,
    pub plugin_dirs: Vec<PathBuf>,
    pub jobs: usize,
    /// CUDA devices of this machine: runs asking for `device=cuda` get a free one each.
    pub cuda_devices: usize,
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
            if run.device.trim() == "cuda" && self.cuda_devices > 1 {
                self.store.assign_free_cuda_device(run.id, self.cuda_devices).await?;
            }
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
