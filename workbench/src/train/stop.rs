//! Stopping a running run, escalating: a stop request first (the worker checkpoints and ends
//! at its next step), then, when the worker does not end within the grace period, SIGTERM and
//! SIGKILL on its own host, or `scancel` of its Slurm job (Slurm sends SIGTERM, then SIGKILL
//! after its KillWait). A layer stuck in an endless loop never reaches its next step, so only
//! the escalation ends it.

use crate::store::{RunStatus, Store};
use anyhow::Result;
use std::time::{Duration, Instant};

/// How long a worker gets to stop on its own before it is terminated.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(10);

/// How a stop ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopOutcome {
    /// The worker stopped at its next step and recorded the run `interrupted` (checkpointed).
    Stopped,
    /// It did not within the grace period and was terminated (with this signal's name); the
    /// run is `interrupted` from its last checkpoint.
    Terminated(&'static str),
    /// The worker runs on another host: the request is recorded and it stops at its next
    /// step, or its lease expires.
    Requested { host: String },
    /// Its Slurm job was cancelled (`scancel`) after the grace period.
    JobCancelled { job: String },
}

/// Stops running run `id` (see the module docs), waiting at most `grace` before escalating.
pub async fn stop_running(store: &Store, id: i64, grace: Duration) -> Result<StopOutcome> {
    let run = store.run(id).await?;
    if run.status != RunStatus::Running {
        anyhow::bail!("run {id} is {}: only a running run can be stopped", run.status);
    }
    store.request_stop(id).await?;
    if let Some(job) = slurm_job(&run) {
        if ended_within(store, id, grace).await? {
            return Ok(StopOutcome::Stopped);
        }
        tokio::task::block_in_place(|| crate::executor::slurm::cancel(&job))?;
        // The executor's reconciling records the job's end as the cause once Slurm reports it.
        return Ok(StopOutcome::JobCancelled { job });
    }
    let host = run.supervision.host.clone().unwrap_or_else(|| store.host().to_string());
    let Some(pid) = run.worker_pid.filter(|_| host == store.host()) else {
        return Ok(StopOutcome::Requested { host });
    };
    if ended_within(store, id, grace).await? {
        return Ok(StopOutcome::Stopped);
    }
    for (signal, name, wait) in
        [(libc::SIGTERM, "SIGTERM", Duration::from_secs(2)), (libc::SIGKILL, "SIGKILL", Duration::from_secs(5))]
    {
        send(pid, signal);
        if ended_within(store, id, wait).await? {
            return Ok(StopOutcome::Terminated(name));
        }
        if signal == libc::SIGKILL {
            let cause = format!("did not stop within the {} s grace period; killed ({name})", grace.as_secs_f64());
            let error =
                format!("stopped by cancel: {cause}; `workbench resume {id}` continues it from its last checkpoint");
            store.end_lost_run(id, Some(i64::from(pid)), &error, &cause).await?;
            return Ok(StopOutcome::Terminated(name));
        }
    }
    unreachable!("the loop above returns after SIGKILL")
}

/// The Slurm job of a run, if a Slurm executor started it.
pub fn slurm_job(run: &crate::store::RunRecord) -> Option<String> {
    (run.supervision.executor.as_deref() == Some("slurm")).then(|| run.supervision.job_id.clone()).flatten()
}

/// Cancels a queued run before it starts, and its Slurm job if it has been submitted.
pub async fn cancel_queued(store: &Store, id: i64) -> Result<()> {
    let run = store.run(id).await?;
    store.cancel_queued(id).await?;
    if let Some(job) = slurm_job(&run) {
        tokio::task::block_in_place(|| crate::executor::slurm::cancel(&job))?;
    }
    Ok(())
}

/// Whether run `id` left `running` within `wait` (polling the store).
async fn ended_within(store: &Store, id: i64, wait: Duration) -> Result<bool> {
    let deadline = Instant::now() + wait;
    loop {
        if store.run(id).await?.status != RunStatus::Running {
            return Ok(true);
        }
        if Instant::now() >= deadline {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn send(pid: u32, signal: i32) {
    if let Ok(pid) = i32::try_from(pid) {
        // SAFETY: kill(2) with a positive pid only sends a signal; no memory is touched.
        unsafe { libc::kill(pid, signal) };
    }
}
