//! Supervision by lease: a running run's worker proves it is alive with a heartbeat every few
//! seconds, and any reader on any host marks a run whose lease expired `interrupted`. A pid
//! means something only on the host that issued it, so only a reader on the worker's own host
//! also asks the operating system, which notices a crashed worker at once.
//!
//! Stop requests travel the same way: [`Store::request_stop`] records one, and the worker's
//! next heartbeat reads it and stops at its next step with a checkpoint.

use std::time::Duration;

use super::turnstile::{Write, WriteReturning};
use super::{now, process_start, Store, StoreError};
use sqlx::Any;

/// How often a worker renews its lease, and how long a lease lasts without renewal.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LeaseTimes {
    /// Between two heartbeats.
    pub heartbeat: Duration,
    /// A run whose last heartbeat is older than this has lost its worker.
    pub expiry: Duration,
}

/// The lease times in force: 5 s heartbeats and a 30 s lease, or `WORKBENCH_HEARTBEAT_S` and
/// `WORKBENCH_LEASE_S` (seconds; tests shorten them).
pub static LEASE: std::sync::LazyLock<LeaseTimes> = std::sync::LazyLock::new(|| {
    let seconds = |name: &str, default: f64| {
        std::env::var(name).ok().and_then(|v| v.trim().parse::<f64>().ok()).filter(|s| *s > 0.0).unwrap_or(default)
    };
    LeaseTimes {
        heartbeat: Duration::from_secs_f64(seconds("WORKBENCH_HEARTBEAT_S", 5.0)),
        expiry: Duration::from_secs_f64(seconds("WORKBENCH_LEASE_S", 30.0)),
    }
});

/// What a heartbeat found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lease {
    /// The lease is renewed; train on.
    Held,
    /// Renewed, and a stop was asked for: checkpoint and end as interrupted.
    StopRequested,
    /// Renewed after a reader had marked the run interrupted because its lease expired while
    /// this worker could not reach the store (the network cut): nobody had resumed, requeued
    /// or deleted it meanwhile, so the run is running again, this worker's as before.
    Reclaimed,
    /// The run is no longer this worker's (it was resumed, requeued or deleted, or marked
    /// interrupted for another reason): stop without writing to it.
    Lost,
}

/// How the reaper's `cause` of a run whose lease expired begins ([`Store::reap_orphans`]).
pub(super) const LEASE_EXPIRED: &str = "lease expired";

/// How the `cause` of a run begins whose worker stopped it, with a checkpoint, because its
/// Slurm job's time limit neared, and requeued the job to continue it.
pub const TIME_LIMIT_REQUEUED: &str = "time limit near, job requeued";

impl super::RunRecord {
    /// Whether a reader marked this run interrupted because its lease expired: its worker may
    /// still be training, cut off from the store, and take it back ([`Lease::Reclaimed`]).
    pub fn lease_expired(&self) -> bool {
        self.interrupted_because(LEASE_EXPIRED)
    }

    /// Whether this run's worker stopped it and requeued its Slurm job because the job's time
    /// limit neared.
    pub fn requeued_at_time_limit(&self) -> bool {
        self.interrupted_because(TIME_LIMIT_REQUEUED)
    }

    /// Whether this run is interrupted in a way its own Slurm job undoes while the job is in
    /// Slurm's queue: its lease expired (the worker may take it back), its worker requeued the
    /// job at the time limit, or its worker stopped it for a reason not yet known (a job that
    /// Slurm requeues, on preemption or `scontrol requeue`, stays in the queue and its next
    /// start continues the run; one cancelled leaves the queue within seconds).
    /// [`Store::slurm_jobs_that_may_resume`] selects the same runs.
    pub fn may_resume_with_its_job(&self) -> bool {
        self.lease_expired()
            || self.requeued_at_time_limit()
            || (self.status == super::RunStatus::Interrupted && self.supervision.cause.is_none())
    }

    fn interrupted_because(&self, cause: &str) -> bool {
        self.status == super::RunStatus::Interrupted
            && self.supervision.cause.as_deref().is_some_and(|c| c.starts_with(cause))
    }
}

impl Store {
    /// Renews the lease of run `id` held by worker `pid` on this handle's host.
    pub async fn heartbeat(&self, id: i64, pid: u32) -> Result<Lease, StoreError> {
        let row: Option<Option<f64>> = sqlx::query_scalar::<Any, _>(
            "UPDATE runs SET heartbeat_at = $1 \
             WHERE id = $2 AND status = 'running' AND worker_pid = $3 AND host = $4 RETURNING stop_requested",
        )
        .bind(now())
        .bind(id)
        .bind(i64::from(pid))
        .bind(self.host().to_string())
        .write_returning(self)
        .await?;
        Ok(match row {
            None if self.reclaim(id, pid).await? => Lease::Reclaimed,
            None => Lease::Lost,
            Some(Some(_)) => Lease::StopRequested,
            Some(None) => Lease::Held,
        })
    }

    /// Whether worker `pid` on this handle's host still holds run `id`'s lease: the run is
    /// running and names it. The worker's writer asks before each write, so that a worker
    /// that was frozen or cut off writes nothing to a run resumed, requeued or deleted
    /// meanwhile (its heartbeat then finds the lease lost), nor to one marked interrupted
    /// until its heartbeat takes it back.
    pub async fn holds_lease(&self, id: i64, pid: u32) -> Result<bool, StoreError> {
        let count = "SELECT COUNT(*) FROM runs WHERE id = $1 AND status = 'running' AND worker_pid = $2 AND host = $3";
        self.run_names_process(id, pid, count).await
    }

    /// Takes back run `id` for worker `pid` on this host when a reader marked it interrupted
    /// only because its lease expired, and it still names this worker: a `resume` or a
    /// requeue would have made it queued and named another, so the worker that answers again
    /// after a network cut trains on instead of losing the steps since its checkpoint.
    async fn reclaim(&self, id: i64, pid: u32) -> Result<bool, StoreError> {
        let result = sqlx::query::<Any>(
            "UPDATE runs SET status = 'running', heartbeat_at = $1, finished_at = NULL, error = NULL, cause = NULL \
             WHERE id = $2 AND status = 'interrupted' AND worker_pid = $3 AND host = $4 AND cause LIKE $5",
        )
        .bind(now())
        .bind(id)
        .bind(i64::from(pid))
        .bind(self.host().to_string())
        .bind(format!("{LEASE_EXPIRED}%"))
        .write(self)
        .await?;
        Ok(result.rows_affected() == 1)
    }

    /// Asks the worker of running run `id` to checkpoint and stop; returns false when the run
    /// is not running (nothing to ask).
    pub async fn request_stop(&self, id: i64) -> Result<bool, StoreError> {
        let result = sqlx::query::<Any>(
            "UPDATE runs SET stop_requested = COALESCE(stop_requested, $1) WHERE id = $2 AND status = 'running'",
        )
        .bind(now())
        .bind(id)
        .write(self)
        .await?;
        if result.rows_affected() == 0 {
            self.ensure_exists(id).await?;
        }
        Ok(result.rows_affected() == 1)
    }

    /// Puts back run `id`, interrupted under Slurm job `job`, for that job's restart
    /// (preemption, `scontrol requeue`, a time limit) in its new worker `pid`: queued and
    /// claimed by that worker in one write, so that no queue runner starts it meanwhile, and
    /// its executor and job kept, so that the job is still found (job states, `runs cancel`,
    /// the next time limit). Returns whether it did: not when the run is no longer interrupted
    /// under that job (resumed or requeued by hand meanwhile).
    pub async fn take_back_for_job(&self, id: i64, pid: u32, job: &str) -> Result<bool, StoreError> {
        let result = sqlx::query::<Any>(
            "UPDATE runs SET status = 'queued', finished_at = NULL, error = NULL, worker_pid = NULL, held = 0, \
             claimed_by = $1, claimed_at = $2, claimed_host = $3, stop_requested = NULL, cause = NULL \
             WHERE id = $4 AND status = 'interrupted' AND executor = 'slurm' AND job_id = $5",
        )
        .bind(i64::from(pid))
        .bind(now())
        .bind(self.host().to_string())
        .bind(id)
        .bind(job)
        .write(self)
        .await?;
        Ok(result.rows_affected() == 1)
    }

    /// Records why run `id` ended abnormally (exit code, signal, scheduler state, lease).
    pub async fn record_cause(&self, id: i64, cause: &str) -> Result<(), StoreError> {
        self.update_one(sqlx::query::<Any>("UPDATE runs SET cause = $1 WHERE id = $2").bind(cause).bind(id), id).await
    }

    /// Records why the Slurm job `job` of run `id`, interrupted by its worker, ended (its
    /// state, `cause`), unless the run has moved on meanwhile (requeued, under another job,
    /// given a cause by its worker). Returns whether it did.
    pub async fn record_job_end(&self, id: i64, job: &str, cause: &str) -> Result<bool, StoreError> {
        let result = sqlx::query::<Any>(
            "UPDATE runs SET cause = $1 WHERE id = $2 AND status = 'interrupted' AND cause IS NULL AND job_id = $3",
        )
        .bind(cause)
        .bind(id)
        .bind(job)
        .write(self)
        .await?;
        Ok(result.rows_affected() == 1)
    }

    /// Records `token` as queued run `id`'s latest Slurm submission, before its job is
    /// submitted: only that job's worker (or one of the job recorded with the run) may start
    /// it. Returns false, recording nothing, when the run is no longer queued.
    pub async fn begin_submission(&self, id: i64, token: &str) -> Result<bool, StoreError> {
        let result = sqlx::query::<Any>("UPDATE runs SET submission = $1 WHERE id = $2 AND status = 'queued'")
            .bind(token)
            .bind(id)
            .write(self)
            .await?;
        Ok(result.rows_affected() == 1)
    }

    /// Records how run `id` is executed: `local` or `slurm`, and the scheduler's job id.
    pub async fn set_executor(&self, id: i64, executor: &str, job_id: Option<&str>) -> Result<(), StoreError> {
        let query = sqlx::query::<Any>("UPDATE runs SET executor = $1, job_id = $2 WHERE id = $3")
            .bind(executor)
            .bind(job_id)
            .bind(id);
        self.update_one(query, id).await
    }

    /// Ends a running run whose worker is gone: `interrupted` with `error` and `cause`, only if
    /// it is still running under worker `pid` (a restarted worker is left alone). Returns
    /// whether it did.
    pub async fn end_lost_run(&self, id: i64, pid: Option<i64>, error: &str, cause: &str) -> Result<bool, StoreError> {
        let result = sqlx::query::<Any>(
            "UPDATE runs SET status = 'interrupted', finished_at = $1, error = $2, cause = COALESCE(cause, $3) \
             WHERE id = $4 AND status = 'running' AND worker_pid IS NOT DISTINCT FROM $5",
        )
        .bind(now())
        .bind(error)
        .bind(cause)
        .bind(id)
        .bind(pid)
        .write(self)
        .await?;
        Ok(result.rows_affected() == 1)
    }

    /// Ends queued run `id` as `failed` with `error` and `cause`: its worker died before it
    /// could start it (so it is not left queued, claimed by nobody alive, where `resume`
    /// would refuse it). Returns whether it did.
    pub async fn end_unstarted_run(&self, id: i64, error: &str, cause: &str) -> Result<bool, StoreError> {
        let result = sqlx::query::<Any>(
            "UPDATE runs SET status = 'failed', finished_at = $1, error = $2, cause = $3, \
             claimed_by = NULL, claimed_at = NULL, claimed_host = NULL WHERE id = $4 AND status = 'queued'",
        )
        .bind(now())
        .bind(error)
        .bind(cause)
        .bind(id)
        .write(self)
        .await?;
        Ok(result.rows_affected() == 1)
    }

    /// Marks `interrupted` every running run whose worker is gone, and returns their ids in
    /// increasing order:
    /// - on any host, a run whose lease expired ([`LEASE`]: no heartbeat for that long, and
    ///   on PostgreSQL for that long since the server started: a restart that kept every worker
    ///   from renewing its lease gives each a whole lease to renew it);
    /// - on this handle's host, also a run whose worker process no longer exists (per
    ///   `is_alive`, usually [`process_alive`](super::process_alive)) or whose pid now names a
    ///   newer process, and a run recorded without a host (by a workbench from before leases,
    ///   which ran everything on one machine).
    ///
    /// The error says what happened and how to continue (`workbench resume N`); `cause` names
    /// the lease or the vanished process. Each update re-checks status and pid, so a run that
    /// a worker restarted meanwhile is left alone.
    pub async fn reap_orphans(&self, is_alive: impl Fn(u32) -> bool) -> Result<Vec<i64>, StoreError> {
        // With each run, when the PostgreSQL server started (an SQLite file has no server to
        // restart), read in the same query.
        let server_started = match self.backend() {
            super::Backend::Postgres => "EXTRACT(EPOCH FROM pg_postmaster_start_time())::float8",
            super::Backend::Sqlite => "NULL",
        };
        let rows = sqlx::query::<Any>(sqlx::AssertSqlSafe(format!(
            "SELECT id, worker_pid, host, pid_start, heartbeat_at, {server_started} AS server_started \
             FROM runs WHERE status = 'running' ORDER BY id"
        )))
        .fetch_all(&self.pool)
        .await
        .map_err(|e| self.err(e))?;
        let expiry = LEASE.expiry.as_secs_f64();
        let mut reaped = Vec::new();
        for row in rows {
            let id: i64 = self.get(&row, "id")?;
            let pid: Option<i64> = self.get(&row, "worker_pid")?;
            let host: Option<String> = self.get(&row, "host")?;
            let start: Option<i64> = self.get(&row, "pid_start")?;
            let heartbeat: Option<f64> = self.get(&row, "heartbeat_at")?;
            let local = host.as_deref().is_none_or(|h| h == self.host());
            let server_started: Option<f64> = self.get(&row, "server_started")?;
            let silent = heartbeat.map(|at| now() - at.max(server_started.unwrap_or(f64::MIN)));
            let (error, cause) = match (pid.and_then(|p| u32::try_from(p).ok()), silent) {
                (_, Some(silent)) if silent > expiry => (
                    format!(
                        "its worker{} stopped renewing its lease ({silent:.0} s without a heartbeat; \
                         frozen, cut off or killed); `workbench resume {id}` continues it from its last checkpoint",
                        match (&host, pid) {
                            (Some(h), Some(p)) => format!(" (process {p} on {h})"),
                            _ => String::new(),
                        }
                    ),
                    format!("{LEASE_EXPIRED}: no heartbeat for {silent:.0} s"),
                ),
                (Some(p), _) if local && (!is_alive(p) || replaced(p, start)) => (
                    format!(
                        "worker process {p} disappeared while the run was running (it crashed or \
                         was killed); `workbench resume {id}` continues it from its last checkpoint"
                    ),
                    format!("worker process {p} disappeared"),
                ),
                (None, _) if local => (
                    format!(
                        "the run was marked running but no worker process was recorded; \
                         `workbench resume {id}` continues it from its last checkpoint"
                    ),
                    "no worker process recorded".to_string(),
                ),
                _ => continue,
            };
            if self.end_lost_run(id, pid, &error, &cause).await? {
                reaped.push(id);
            }
        }
        Ok(reaped)
    }
}

/// Whether `pid` now names a process other than the one recorded (started at `start`).
fn replaced(pid: u32, start: Option<i64>) -> bool {
    match (start, process_start(pid)) {
        (Some(recorded), Some(now)) => recorded != now as i64,
        _ => false,
    }
}
