//! The queue runner: starts queued runs as worker slots free up. The queue itself lives in
//! runs.db, so any runner (`workbench queue`, `workbench sweep`, the TUI) can pick it up,
//! and closing one loses nothing.

use crate::executor::Executor;
use crate::store::{process_alive, Claims, RunStatus, Store};
use anyhow::Result;
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Attempts to start a run's worker before the run is marked failed: a failure can be
/// passing (the executable being rebuilt, a full process table), so the run waits a tick.
pub const SPAWN_ATTEMPTS: u32 = 3;

/// How long the runner waits before it submits again to a Slurm that refused a run under a
/// submit limit: a lab's controller is not asked again every pass.
pub const SUBMIT_LIMIT_RETRY: Duration = Duration::from_secs(15);

/// The most workers a queue runner keeps at once by default with Slurm, and the most the TUI's
/// `+` sets: the cluster's scheduler, not the submitting machine, decides what runs when, so
/// a sweep's runs are all submitted (up to this many) and Slurm's own limits apply.
pub const MOST_JOBS: usize = 256;

/// Default number of concurrent local workers: one per CUDA device on a machine that has
/// them, otherwise one (a CPU worker already splits its batches over every core).
pub fn default_jobs() -> usize {
    jobs_for_devices(crate::device::cuda_device_count())
}

/// [`default_jobs`] for a machine with `cuda_devices` CUDA devices.
pub fn jobs_for_devices(cuda_devices: usize) -> usize {
    cuda_devices.max(1)
}

/// A run a queue pass started: its local worker, or its Slurm `job`, submitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Started {
    pub run: i64,
    /// The Slurm job id; `None` for a local worker.
    pub job: Option<String>,
}

impl Started {
    /// How the start is told: a Slurm run is submitted as its job, which may wait in Slurm's
    /// queue before it starts; a local worker has started.
    pub fn news(&self) -> String {
        match &self.job {
            Some(job) => format!("run {} submitted as Slurm job {job}", self.run),
            None => format!("run {} started", self.run),
        }
    }
}

/// Starts queued runs while fewer than `jobs` are running.
pub struct QueueRunner {
    pub store: Store,
    pub plugin_dirs: Vec<PathBuf>,
    pub jobs: usize,
    /// CUDA devices of this machine: runs asking for `device=cuda` get a free one each.
    pub cuda_devices: usize,
    /// Failed attempts to start each run's worker.
    spawn_failures: Mutex<HashMap<i64, u32>>,
    /// Workers of this runner that exited: (run, pid, status), examined on the next pass.
    exits: Arc<Mutex<Vec<(i64, u32, ExitStatus)>>>,
    /// Where workers run.
    pub executor: Executor,
    /// Whose runs it starts: its user's unless told (`queue --all-users`).
    pub claims: Claims,
    /// Why the runner claims nothing for now. Runs stay queued, their start attempts
    /// untouched, until the pause ends.
    waiting: Mutex<Option<Pause>>,
    /// How long a [submit limit](crate::executor::slurm::SubmitLimit) pauses the runner
    /// ([`SUBMIT_LIMIT_RETRY`]).
    pub submit_limit_retry: Duration,
    /// When this runner last renewed the claims of its workers that have not started yet.
    claims_renewed: Mutex<Option<Instant>>,
}

/// How often a runner renews the claims of its workers that have not started their runs yet
/// (a worker waiting for the store's server): well within [`CLAIM_TIMEOUT_S`](crate::store::CLAIM_TIMEOUT_S).
pub(crate) const RENEW_CLAIMS_EVERY: Duration = Duration::from_secs(20);

/// Why a runner starts nothing for now.
#[derive(Debug, Clone)]
enum Pause {
    /// The executor is away (no Slurm controller answers: a restart, an outage); it is asked
    /// every pass.
    Away(String),
    /// Slurm refused a run under a submit limit; it is asked again at `retry`.
    SubmitLimit { reason: String, retry: Instant },
}

impl Pause {
    fn news(&self) -> String {
        match self {
            Pause::Away(reason) => format!("runs stay queued until Slurm answers again: {reason}"),
            Pause::SubmitLimit { reason, .. } => format!("runs stay queued: {reason}"),
        }
    }
}

impl QueueRunner {
    /// A runner of `jobs` workers at once on this machine's CUDA devices (if any).
    pub fn new(store: Store, plugin_dirs: Vec<PathBuf>, jobs: usize) -> Self {
        QueueRunner {
            claims: Claims::mine(&store),
            store,
            plugin_dirs,
            jobs,
            cuda_devices: crate::device::cuda_device_count(),
            spawn_failures: Mutex::default(),
            claims_renewed: Mutex::default(),
            exits: Arc::default(),
            executor: Executor::Local,
            waiting: Mutex::default(),
            submit_limit_retry: SUBMIT_LIMIT_RETRY,
        }
    }

    /// The same runner, starting workers with `executor`.
    pub fn with_executor(mut self, executor: Executor) -> Self {
        self.executor = executor;
        self
    }

    /// The same runner, starting the runs `claims` covers.
    pub fn with_claims(mut self, claims: Claims) -> Self {
        self.claims = claims;
        self
    }

    /// Why the runner starts nothing for now (see [`tick`](Self::tick)), if it waits: that
    /// runs stay queued, until when, and Slurm's words.
    pub fn waiting(&self) -> Option<String> {
        lock(&self.waiting).as_ref().map(Pause::news)
    }

    /// What to tell the user when [`waiting`](Self::waiting) changed since `told` (which is
    /// updated): why runs stay queued, or that the queue goes on again.
    pub fn waiting_news(&self, told: &mut Option<String>) -> Option<String> {
        let now = self.waiting();
        if now == *told {
            return None;
        }
        *told = now.clone();
        Some(now.unwrap_or_else(|| "Slurm takes jobs again; the queue goes on".into()))
    }

    /// Whether the pause, if any, still holds: a Slurm that was away is asked whether it
    /// answers; a submit limit ends when its time is up (the next submission tells whether
    /// it still holds, and sets it again with the same words if so).
    fn paused(&self) -> bool {
        let pause = lock(&self.waiting).clone();
        match pause {
            None => false,
            Some(Pause::SubmitLimit { retry, .. }) if Instant::now() < retry => true,
            Some(Pause::SubmitLimit { .. }) => {
                *lock(&self.waiting) = None;
                false
            }
            Some(Pause::Away(_)) => match self.executor.available() {
                Ok(()) => {
                    *lock(&self.waiting) = None;
                    false
                }
                Err(away) => {
                    *lock(&self.waiting) = Some(Pause::Away(format!("{away:#}")));
                    true
                }
            },
        }
    }

    /// One pass: marks dead workers' runs interrupted, releases stale claims, then claims and
    /// starts queued runs up to the job limit (counting the runs that are running, claimed, or
    /// [may be taken back](Executor::may_be_taken_back) by their Slurm job). Returns the runs
    /// started. A worker that cannot be started leaves its run queued for the next pass, and
    /// failed after [`SPAWN_ATTEMPTS`] attempts, with the reason; but while the executor
    /// itself is away (no Slurm controller answers, which is passing: a restart, an outage),
    /// or Slurm takes no more jobs under a submit limit, runs stay queued without using up
    /// attempts, and [`waiting`](Self::waiting) says why.
    pub async fn tick(&self) -> Result<Vec<Started>> {
        self.record_exits().await?;
        self.executor.reconcile(&self.store).await?;
        self.store.reap_orphans(process_alive).await?;
        self.renew_claims().await?;
        self.store.release_stale_claims(process_alive).await?;
        let mut started = Vec::new();
        if self.paused() {
            return Ok(started);
        }
        // A run whose Slurm job will take it back (its lease expired while the job runs, or
        // the job was requeued at its time limit or on preemption) holds a slot.
        let cut_off = Executor::with_job_in_queue(self.store.slurm_jobs_that_may_resume(&self.claims).await?).len();
        let jobs = self.jobs.saturating_sub(cut_off);
        while let Some(run) = self.store.claim_next(std::process::id(), jobs, &self.claims).await? {
            // A run that trained before (requeued after an interruption) continues from its
            // checkpoint.
            let resume = run.started_at.is_some();
            if run.device.trim() == "cuda" && self.pins_cuda_devices() {
                self.store.assign_free_cuda_device(run.id, self.cuda_devices).await?;
            }
            let exits = self.exits.clone();
            let id = run.id;
            let on_exit = move |pid, status| lock(&exits).push((id, pid, status));
            match self.executor.start(&self.store, &self.plugin_dirs, &run, resume, on_exit).await {
                Ok(job) => {
                    self.failures().remove(&run.id);
                    started.push(Started { run: run.id, job });
                }
                Err(e) => {
                    if let Some(pause) = self.pause_for(&e) {
                        self.store.release_claim(run.id).await?;
                        *lock(&self.waiting) = Some(pause);
                        break;
                    }
                    let attempts = {
                        let mut failures = self.failures();
                        let n = failures.entry(run.id).or_insert(0);
                        *n += 1;
                        *n
                    };
                    if attempts >= SPAWN_ATTEMPTS {
                        self.failures().remove(&run.id);
                        let reason = format!("cannot start its worker ({attempts} attempts): {e:#}");
                        self.store.finish(run.id, RunStatus::Failed, Some(&reason)).await?;
                    } else {
                        self.store.release_claim(run.id).await?;
                        break; // the next pass tries again
                    }
                }
            }
        }
        Ok(started)
    }

    /// Keeps the claims of this runner's workers that are alive and have not started their
    /// runs (waiting for a server with no connection free, say) from being taken for stale by
    /// any runner, here or on another machine. A worker that died is seen by
    /// [`record_exits`](Self::record_exits) first; a runner that is gone renews nothing, and
    /// its claims are released after [`CLAIM_TIMEOUT_S`](crate::store::CLAIM_TIMEOUT_S).
    async fn renew_claims(&self) -> Result<()> {
        let due = lock(&self.claims_renewed).is_none_or(|at| at.elapsed() >= RENEW_CLAIMS_EVERY);
        if due {
            self.store.renew_claims(std::process::id()).await?;
            *lock(&self.claims_renewed) = Some(Instant::now());
        }
        Ok(())
    }

    /// The pause a failed start calls for, if it is passing: Slurm's submit limit, or no
    /// controller answering.
    fn pause_for(&self, e: &anyhow::Error) -> Option<Pause> {
        if let Some(limit) = e.downcast_ref::<crate::executor::slurm::SubmitLimit>() {
            let retry = Instant::now() + self.submit_limit_retry;
            return Some(Pause::SubmitLimit { reason: limit.to_string(), retry });
        }
        self.executor.available().err().map(|away| Pause::Away(format!("{away:#}")))
    }

    /// Whether a run asking for `device=cuda` is given a free device of this machine. Only
    /// for local workers: a Slurm job sees the GPU it was given as `cuda:0`, wherever it runs,
    /// and this machine's devices (a login node's, or none) say nothing about the job's node.
    fn pins_cuda_devices(&self) -> bool {
        self.executor == Executor::Local && self.cuda_devices > 1
    }

    fn failures(&self) -> std::sync::MutexGuard<'_, HashMap<i64, u32>> {
        lock(&self.spawn_failures)
    }

    /// Runs whose worker exited while still `running` end `interrupted`, with the exit code
    /// or signal as their cause and the end of the worker's log.
    async fn record_exits(&self) -> Result<()> {
        let exits = std::mem::take(&mut *lock(&self.exits));
        for (run, pid, status) in exits {
            let log = self.store.artifacts_dir()?.join(crate::train::worker::run_files(run)).join("worker.log");
            let last = crate::train::exit::tail(&log, 8);
            crate::train::exit::record_abnormal_end(&self.store, run, pid, &status, &last).await?;
        }
        Ok(())
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn only_local_workers_are_given_a_device_of_this_machine() {
        let dir = std::env::temp_dir().join(format!("workbench-queue-pins-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let location = crate::store::StoreLocation::Sqlite(dir.join("runs.db"));
        let store = Store::connect(&location).await.unwrap();
        let mut runner = QueueRunner::new(store.clone(), Vec::new(), 2);
        runner.cuda_devices = 2;
        assert!(runner.pins_cuda_devices(), "two local devices");
        runner.executor = Executor::Slurm(Default::default());
        assert!(!runner.pins_cuda_devices(), "a Slurm job's GPU is its cuda:0");
        runner.executor = Executor::Local;
        runner.cuda_devices = 1;
        assert!(!runner.pins_cuda_devices(), "one device: nothing to choose");
        store.close().await;
        let _ = std::fs::remove_dir_all(&dir);
    }
}
