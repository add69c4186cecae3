//! The run store: every run, its metrics, diagnostics, artifacts and worker logs, kept in one
//! SQLite file (`runs.db`, the default) or in a PostgreSQL database that the machines of a
//! cluster share ([`StoreLocation`]: `--db PATH` or `--db postgres://...`).
//!
//! # Two backends, one API
//!
//! Every method works the same on both: queries go through sqlx's generic (`Any`) driver and
//! are written in the SQL both engines accept (`$N` parameters, `RETURNING id`, `IS NOT
//! DISTINCT FROM`, `NULLS LAST`). Where the engines differ, the store says so in one place:
//! opening (`open.rs`), how a write transaction starts (`Store::begin_write`), how claims are
//! serialised (`queue.rs`), error mapping (`error.rs`) and the migrations, one directory per
//! engine (`workbench/migrations/sqlite/`, `.../postgres/`) with the same numbered steps.
//! Run files (checkpoints, worker logs) live in an artifacts directory ([`Store::artifacts_dir`]),
//! next to an SQLite file by default; artifact rows record paths relative to it.
//!
//! # Schema
//!
//! Created by the embedded migrations (applied by [`Store::connect`]):
//!
//! - `runs`: one row per run: `status` (queued / running / finished / failed / interrupted /
//!   diverged, enforced by a CHECK), the layer and task plugin identities (`*_name`,
//!   `*_version`, `*_fingerprint`, nullable `*_build`), `config` (JSON text), `seed`, `device`,
//!   `param_count`, `git_rev`, timestamps `created_at` / `started_at` / `finished_at` (unix
//!   seconds, REAL), `error`, `worker_pid`, `last_step`, `total_steps`, `notes` and `tags`
//!   (comma-separated), `created_by` (the login name of whoever stored it). Ids are `AUTOINCREMENT`, so a deleted run's id is never handed out again
//!   and files named after run ids stay unambiguous.
//! - `metrics(run_id, step, split, name, value, wall_time)`: scalar curves, indexed on
//!   `(run_id, name, step)`.
//! - `diagnostics(run_id, step, iteration, name, value)`: per-iteration quantities of the layer
//!   at evaluation steps, indexed on `(run_id, name, step, iteration)`.
//! - `artifacts(id, run_id, kind, path, step, created_at)`: checkpoints, plots, ...
//! - `logs(id, run_id, at, line)`: worker log lines in arrival order.
//!
//! All child tables reference `runs(id) ON DELETE CASCADE`, so deleting a run deletes
//! everything recorded for it. SQLite cannot store NaN (it becomes NULL), so metric and
//! diagnostic values are nullable and NULL is read back as NaN. Unsigned integers are stored in
//! SQLite's signed 64-bit integers: `seed` bit-for-bit (every `u64` round-trips), steps and
//! counts must be at most `i64::MAX` ([`StoreError::OutOfRange`] otherwise).
//!
//! # Concurrency: why WAL and a busy timeout
//!
//! A training worker (a separate process) writes metrics and logs while the TUI and other
//! commands read the same file. In SQLite's default rollback-journal mode a writer blocks every
//! reader and vice versa; in WAL (write-ahead log) mode readers see a consistent snapshot while
//! one writer appends, so the TUI never stalls a worker. Writers still take turns, and a
//! connection that finds the database locked would fail immediately with `SQLITE_BUSY`; the
//! 30 s busy timeout makes it wait for the other writer instead. Write transactions start with
//! `BEGIN IMMEDIATE` so they take the write lock up front and wait for it, rather than failing
//! when a read transaction tries to upgrade after another process has written.
//! `synchronous = NORMAL` is safe with WAL (a power cut can lose the last transactions, never
//! corrupt the file) and avoids an fsync per metric batch. Foreign keys are enforced on every
//! connection.
//!
//! On PostgreSQL, readers and writers never block each other (MVCC), so none of this is needed;
//! queue claims take a transaction-scoped advisory lock instead of SQLite's write lock.
//!
//! # Opening safely
//!
//! [`Store::open`] checks the path before SQLite touches it: a missing parent directory or a
//! directory path is reported by name, a file that does not start with the SQLite header is
//! refused unchanged, and a database that records a schema migration this binary does not know
//! (written by a newer workbench) is refused after a read-only look, so it is never modified.
//! Migrating a new or older file takes the writers' turn (`turnstile.rs`), so processes that
//! open it at the same moment do not apply the same migration twice.
//! A PostgreSQL database is checked the same way (its `_sqlx_migrations` table is read before
//! the migrator runs), and a server that cannot be reached or refuses the login is named with
//! the reason and the fix, never with the password.

mod connections;
mod copy;
mod error;
mod float;
mod location;
mod log_tail;
mod metrics;
mod open;
mod outage;
mod process;
mod schema;
mod supervision;
mod turnstile;
mod types;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sqlx::any::{AnyArguments, AnyRow};
use sqlx::AnyPool;
use sqlx::{Any, Row};

pub use connections::{ConnectionLimit, ServerConnections, PER_WORKER};
pub use copy::{copied_columns, CopyReport};
pub use error::StoreError;
use float::Float;
pub use location::{Backend, StoreLocation};
pub use log_tail::LogTail;
pub use open::schema_version;
pub(crate) use open::unusable_sqlite_path;
pub use outage::{is_passing, StoreOutage, OUTAGE_LIMIT};
pub use process::{process_alive, process_start, this_host, user_name};
pub use supervision::{Lease, LEASE, TIME_LIMIT_REQUEUED};
use turnstile::{Turnstile, Write, WriteReturning, WriteTx};
pub use types::{
    Artifact, DiagnosticRow, MetricDirection, MetricRow, MetricSummary, NewRun, PluginRef, RunRecord, RunStatus,
    Supervision, SweepRecord, SweepRef,
};

/// How long a connection waits for another process's lock before giving up (SQLite). Dozens
/// of workers writing to one file take turns at its one write lock, and SQLite's busy handler
/// is not fair, so the wait is generous.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a write keeps trying to take SQLite's write lock, over several busy timeouts.
pub const WRITE_PATIENCE: Duration = Duration::from_secs(120);

/// Handle to the run database. Cheap to clone (clones share one connection pool).
#[derive(Debug, Clone)]
pub struct Store {
    pool: AnyPool,
    location: Arc<StoreLocation>,
    /// Where checkpoints, worker logs and exports go (see [`Store::artifacts_dir`]).
    artifacts: Option<Arc<PathBuf>>,
    /// The host this handle's process runs on, as leases name it ([`this_host`]).
    host: Arc<str>,
    /// The user this handle stores runs for ([`user_name`]), and whose runs its queue runners
    /// start ([`Claims`]).
    user: Arc<str>,
    /// Writers take turns through it (SQLite only; see `turnstile.rs`).
    turnstile: Option<Arc<Turnstile>>,
}

/// A new run's or sweep's identity across stores (migration 0009), or a Slurm submission's
/// token (migration 0011): 128 random bits in hex.
pub(crate) fn new_uid() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// Current time as unix seconds, as the store stamps rows.
pub fn now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// A `u64` that must fit SQLite's signed integers.
fn to_i64(value: u64, what: &'static str) -> Result<i64, StoreError> {
    i64::try_from(value).map_err(|_| StoreError::OutOfRange { what, value })
}

/// `SELECT <all runs columns> FROM runs` (a macro so `concat!` can extend it into a
/// `&'static str`, which sqlx requires).
macro_rules! select_runs {
    () => {
        "SELECT id, status, layer_name, layer_version, layer_fingerprint, layer_build, \
         task_name, task_version, task_fingerprint, task_build, config, seed, device, \
         param_count, git_rev, created_at, started_at, finished_at, error, worker_pid, \
         last_step, total_steps, notes, tags, metric_specs, sweep_id, sweep_index, held, \
         host, heartbeat_at, cause, executor, job_id, stop_requested, created_by FROM runs"
    };
}

impl Store {
    /// Where the store lives (an SQLite file or a PostgreSQL URL; displayed without password).
    pub fn location(&self) -> &StoreLocation {
        &self.location
    }

    /// Which database engine serves the store.
    pub fn backend(&self) -> Backend {
        self.location.backend()
    }

    /// The same store, keeping its artifacts in `dir` (`--artifacts` / `WORKBENCH_ARTIFACTS`).
    pub fn with_artifacts_dir(mut self, dir: Option<PathBuf>) -> Store {
        if let Some(dir) = dir {
            self.artifacts = Some(Arc::new(dir));
        }
        self
    }

    /// The directory under which each run keeps its files (`runs/<id>/`: checkpoint, worker
    /// log): the one given, else the directory of an SQLite file. A PostgreSQL store has no
    /// such default, since its workers may run on other machines: it needs a directory every
    /// node can reach, and says so.
    pub fn artifacts_dir(&self) -> Result<PathBuf, StoreError> {
        match (&self.artifacts, self.location.default_artifacts_dir()) {
            (Some(dir), _) => Ok(dir.to_path_buf()),
            (None, Some(dir)) => Ok(dir),
            (None, None) => Err(StoreError::NoArtifactsDir { db: (*self.location).clone() }),
        }
    }

    /// The same store, acting for host `host` (tests simulate several machines this way).
    pub fn with_host(mut self, host: &str) -> Store {
        self.host = Arc::from(host);
        self
    }

    /// The host this handle acts for.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The same store, acting for user `user` (tests simulate several researchers this way).
    pub fn with_user(mut self, user: &str) -> Store {
        self.user = Arc::from(user);
        self
    }

    /// The user this handle stores runs for.
    pub fn user(&self) -> &str {
        &self.user
    }

    /// The artifacts directory to pass on to a worker, if one was given explicitly.
    pub fn explicit_artifacts_dir(&self) -> Option<&std::path::Path> {
        self.artifacts.as_deref().map(PathBuf::as_path)
    }

    /// Closes all connections (waiting for running queries). Other clones become unusable.
    /// Dropping every clone also closes the store; this just makes it deterministic.
    ///
    /// An SQLite store first copies its write-ahead log into the database file, as far as
    /// readers elsewhere allow: otherwise the runs just written can live only in `runs.db-wal`,
    /// and a user who copies `runs.db` alone would lose them.
    pub async fn close(&self) {
        if self.backend() == Backend::Sqlite && !self.pool.is_closed() {
            let _ = sqlx::query::<Any>("PRAGMA wal_checkpoint(PASSIVE)").fetch_all(&self.pool).await;
        }
        self.pool.close().await;
    }

    /// A consistent copy of the whole store in a new SQLite file at `file`, taken while
    /// workers may be writing: SQLite's `VACUUM INTO`, or a copy of every row into a new SQLite
    /// store for a PostgreSQL one. Refuses a file that exists.
    pub async fn backup(&self, file: &std::path::Path) -> Result<(), StoreError> {
        let cannot = |reason: String| StoreError::CannotOpen { db: StoreLocation::Sqlite(file.to_path_buf()), reason };
        if file.exists() {
            return Err(cannot("the file exists; give a new file name (a backup never overwrites)".into()));
        }
        match self.backend() {
            Backend::Sqlite => {
                let target = file.to_str().ok_or_else(|| cannot("the path is not valid UTF-8".into()))?;
                sqlx::query::<Any>("VACUUM INTO $1")
                    .bind(target.to_string())
                    .execute(&self.pool)
                    .await
                    .map_err(|e| self.err(e))?;
                Ok(())
            }
            Backend::Postgres => {
                let target = Store::open(file).await?;
                let copied = self.copy_into(&target, None).await;
                target.close().await;
                copied.map(|_| ())
            }
        }
    }

    fn err(&self, e: sqlx::Error) -> StoreError {
        error::from_sqlx(&self.location, e)
    }

    fn corrupt(&self, detail: String) -> StoreError {
        StoreError::Corrupt { db: (*self.location).clone(), detail }
    }

    /// A stored integer that must be non-negative.
    fn to_u64(&self, v: i64, what: &str) -> Result<u64, StoreError> {
        u64::try_from(v).map_err(|_| self.corrupt(format!("{what} is negative ({v})")))
    }

    fn get<'r, T>(&self, row: &'r AnyRow, col: &str) -> Result<T, StoreError>
    where
        T: sqlx::Decode<'r, Any> + sqlx::Type<Any>,
    {
        row.try_get(col).map_err(|e| self.corrupt(format!("cannot read column {col}: {e}")))
    }

    fn map_run(&self, row: &AnyRow) -> Result<RunRecord, StoreError> {
        let id: i64 = self.get(row, "id")?;
        let status: String = self.get(row, "status")?;
        let status =
            status.parse::<RunStatus>().map_err(|_| self.corrupt(format!("run {id} has unknown status {status:?}")))?;
        // A configuration or metric list that is not valid JSON damages this run only: it is
        // read with what can be read, and says what is wrong.
        let mut damage = Vec::new();
        let config: String = self.get(row, "config")?;
        let config = serde_json::from_str(&config).unwrap_or_else(|e| {
            damage.push(format!("its stored configuration is not valid JSON ({e})"));
            serde_json::Value::Null
        });
        let opt_u64 = |v: Option<i64>, what: &str| -> Result<Option<u64>, StoreError> {
            v.map(|v| self.to_u64(v, &format!("run {id} {what}"))).transpose()
        };
        let worker_pid: Option<i64> = self.get(row, "worker_pid")?;
        let worker_pid = worker_pid
            .map(|p| u32::try_from(p).map_err(|_| self.corrupt(format!("run {id} has invalid worker_pid {p}"))))
            .transpose()?;
        let tags: String = self.get(row, "tags")?;
        let specs: String = self.get(row, "metric_specs")?;
        let metric_specs = serde_json::from_str(&specs).unwrap_or_else(|e| {
            damage.push(format!("its stored metric list is not valid JSON ({e})"));
            Vec::new()
        });
        Ok(RunRecord {
            id,
            status,
            layer: PluginRef {
                name: self.get(row, "layer_name")?,
                version: self.get(row, "layer_version")?,
                fingerprint: self.get(row, "layer_fingerprint")?,
                build: self.get(row, "layer_build")?,
            },
            task: PluginRef {
                name: self.get(row, "task_name")?,
                version: self.get(row, "task_version")?,
                fingerprint: self.get(row, "task_fingerprint")?,
                build: self.get(row, "task_build")?,
            },
            config,
            seed: self.get::<i64>(row, "seed")? as u64,
            device: self.get(row, "device")?,
            param_count: opt_u64(self.get(row, "param_count")?, "param_count")?,
            git_rev: self.get(row, "git_rev")?,
            created_at: self.get(row, "created_at")?,
            started_at: self.get(row, "started_at")?,
            finished_at: self.get(row, "finished_at")?,
            error: self.get(row, "error")?,
            worker_pid,
            last_step: self.to_u64(self.get(row, "last_step")?, &format!("run {id} last_step"))?,
            total_steps: opt_u64(self.get(row, "total_steps")?, "total_steps")?,
            notes: self.get(row, "notes")?,
            tags: split_tags(&tags),
            metric_specs,
            sweep: match (self.get::<Option<i64>>(row, "sweep_id")?, self.get::<Option<i64>>(row, "sweep_index")?) {
                (Some(id), Some(index)) => Some(SweepRef { id, index: index as u32 }),
                _ => None,
            },
            held: self.get::<i64>(row, "held")? != 0,
            supervision: Supervision {
                host: self.get(row, "host")?,
                heartbeat_at: self.get(row, "heartbeat_at")?,
                cause: self.get(row, "cause")?,
                executor: self.get(row, "executor")?,
                job_id: self.get(row, "job_id")?,
                stop_requested: self.get(row, "stop_requested")?,
            },
            created_by: self.get(row, "created_by")?,
            damage: (!damage.is_empty()).then(|| damage.join("; ")),
        })
    }

    /// Creates a run with status `queued` and `created_at` = now; returns its id.
    pub async fn create_run(&self, run: &NewRun) -> Result<i64, StoreError> {
        self.insert_run(run, None).await
    }

    /// Creates a queued run, claimed by process `claimed_by` if given (in the same statement,
    /// so no queue runner can start it in between).
    async fn insert_run(&self, run: &NewRun, claimed_by: Option<u32>) -> Result<i64, StoreError> {
        let total_steps = run.total_steps.map(|n| to_i64(n, "total_steps")).transpose()?;
        let config = serde_json::to_string(&run.config)
            .map_err(|e| self.corrupt(format!("cannot serialise the run config: {e}")))?;
        let id: i64 = sqlx::query_scalar::<Any, _>(
            "INSERT INTO runs (status, layer_name, layer_version, layer_fingerprint, layer_build, \
             task_name, task_version, task_fingerprint, task_build, config, seed, device, \
             git_rev, created_at, total_steps, claimed_by, claimed_at, claimed_host, uid, created_by) \
             VALUES ('queued', $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19) \
             RETURNING id",
        )
        .bind(&run.layer.name)
        .bind(&run.layer.version)
        .bind(&run.layer.fingerprint)
        .bind(&run.layer.build)
        .bind(&run.task.name)
        .bind(&run.task.version)
        .bind(&run.task.fingerprint)
        .bind(&run.task.build)
        .bind(config)
        .bind(run.seed as i64)
        .bind(&run.device)
        .bind(&run.git_rev)
        .bind(now())
        .bind(total_steps)
        .bind(claimed_by.map(i64::from))
        .bind(Float(claimed_by.map(|_| now())))
        .bind(claimed_by.map(|_| self.host.to_string()))
        .bind(new_uid())
        .bind(self.user.to_string())
        .write_returning(self)
        .await?
        .ok_or_else(|| self.corrupt("a write returned no row".into()))?;
        Ok(id)
    }

    /// The run with this id, or [`StoreError::NotFound`].
    pub async fn run(&self, id: i64) -> Result<RunRecord, StoreError> {
        let row = sqlx::query::<Any>(concat!(select_runs!(), " WHERE id = $1"))
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| self.err(e))?
            .ok_or(StoreError::NotFound(id))?;
        self.map_run(&row)
    }

    /// The runs `sql` (a `select_runs!()` query with one integer parameter `$1`) selects.
    async fn runs_where(&self, sql: &'static str, value: i64) -> Result<Vec<RunRecord>, StoreError> {
        let rows = sqlx::query::<Any>(sql).bind(value).fetch_all(&self.pool).await.map_err(|e| self.err(e))?;
        rows.iter().map(|r| self.map_run(r)).collect()
    }

    /// All runs, ordered by id.
    pub async fn list_runs(&self) -> Result<Vec<RunRecord>, StoreError> {
        self.runs_selected(concat!(select_runs!(), " ORDER BY id")).await
    }

    /// The runs on Slurm whose job's state may still change them: queued or running, or
    /// interrupted by their worker while the job's end is not yet known (no cause). Once a
    /// run's job is seen ended, its run has a cause and is not among them again.
    pub async fn slurm_runs_to_reconcile(&self) -> Result<Vec<RunRecord>, StoreError> {
        self.runs_selected(concat!(
            select_runs!(),
            " WHERE executor = 'slurm' AND job_id IS NOT NULL \
             AND (status IN ('queued', 'running') OR (status = 'interrupted' AND cause IS NULL)) ORDER BY id"
        ))
        .await
    }

    /// The runs `sql` (a `select_runs!()` query without parameters) selects.
    async fn runs_selected(&self, sql: &'static str) -> Result<Vec<RunRecord>, StoreError> {
        let rows = sqlx::query::<Any>(sql).fetch_all(&self.pool).await.map_err(|e| self.err(e))?;
        rows.iter().map(|r| self.map_run(r)).collect()
    }

    /// The runs on Slurm marked interrupted in a way their job undoes while it is in Slurm's
    /// queue ([`RunRecord::may_resume_with_its_job`]), of those `claims` covers, as (run, job)
    /// pairs.
    pub async fn slurm_jobs_that_may_resume(&self, claims: &Claims) -> Result<Vec<(i64, String)>, StoreError> {
        let runs = sqlx::query_as::<Any, (i64, String, Option<String>)>(
            "SELECT id, job_id, created_by FROM runs WHERE status = 'interrupted' \
             AND (cause IS NULL OR cause LIKE $1 OR cause LIKE $2) \
             AND executor = 'slurm' AND job_id IS NOT NULL ORDER BY id",
        )
        .bind(format!("{}%", supervision::LEASE_EXPIRED))
        .bind(format!("{}%", supervision::TIME_LIMIT_REQUEUED))
        .fetch_all(&self.pool)
        .await
        .map_err(|e| self.err(e))?;
        Ok(runs.into_iter().filter(|(_, _, by)| claims.covers(by.as_deref())).map(|(id, job, _)| (id, job)).collect())
    }

    /// Status of a run, or [`StoreError::NotFound`].
    async fn status_of(&self, id: i64) -> Result<RunStatus, StoreError> {
        let status: Option<String> = sqlx::query_scalar::<Any, _>("SELECT status FROM runs WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| self.err(e))?;
        let status = status.ok_or(StoreError::NotFound(id))?;
        status.parse().map_err(|_| self.corrupt(format!("run {id} has unknown status {status:?}")))
    }

    /// Fails with [`StoreError::NotFound`] unless the run exists.
    async fn ensure_exists(&self, id: i64) -> Result<(), StoreError> {
        self.status_of(id).await.map(|_| ())
    }

    /// Marks a `queued` run as `running` under worker `pid` on this handle's host: sets
    /// `started_at` (only the first time), `worker_pid`, the host, the process's start time
    /// and a first heartbeat (the lease), and clears `error`, `cause`, `finished_at` and any
    /// stop request. Also accepted for a run already `running` (the worker is replaced).
    /// Other states give [`StoreError::InvalidTransition`]: requeue an interrupted or failed
    /// run first.
    pub async fn mark_running(&self, id: i64, pid: u32) -> Result<(), StoreError> {
        self.start_running(id, pid, Starter::Anyone).await
    }

    /// [`mark_running`](Self::mark_running) for worker `pid`, started on this handle's host by
    /// process `starter`, which claimed the queued run for it. Refused when the run is no
    /// longer queued or another runner holds its claim: the worker waited so long to start
    /// (for a connection to the store's server) that its starter's claim lapsed, and another
    /// runner took the run. So one worker, never two, trains it. A claim released and not
    /// taken again is no obstacle.
    pub async fn mark_running_claimed(&self, id: i64, pid: u32, starter: u32) -> Result<(), StoreError> {
        self.start_running(id, pid, Starter::Claim(starter)).await
    }

    /// [`mark_running`](Self::mark_running) for worker `pid` of Slurm job `job`, submitted as
    /// `submission` (the token [`begin_submission`](Self::begin_submission) recorded; none
    /// in a script from before tokens), which becomes the run's job. Refused when the run
    /// belongs to another job, or has no job recorded yet and was submitted again since this
    /// job's submission: this job was submitted before (an `sbatch` that reported a failure
    /// though Slurm had taken the job, or one submitted by hand) and must not take the run from
    /// the latest job's worker. A running run is taken only from an earlier worker of the same
    /// job (Slurm requeued it), never from a worker outside Slurm.
    pub async fn mark_running_in_job(
        &self,
        id: i64,
        pid: u32,
        job: &str,
        submission: Option<&str>,
    ) -> Result<(), StoreError> {
        self.start_running(id, pid, Starter::SlurmJob { job, submission }).await
    }

    async fn start_running(&self, id: i64, pid: u32, starter: Starter<'_>) -> Result<(), StoreError> {
        const SET: &str = "UPDATE runs SET status = 'running', worker_pid = $1, \
             started_at = COALESCE(started_at, $2), error = NULL, finished_at = NULL, \
             host = $3, pid_start = $4, heartbeat_at = $5, cause = NULL, stop_requested = NULL";
        let (also_set, condition) = match starter {
            Starter::Anyone => ("", "status IN ('queued', 'running')"),
            Starter::Claim(_) => {
                ("", "status = 'queued' AND (claimed_by IS NULL OR (claimed_by = $7 AND claimed_host = $3))")
            }
            Starter::SlurmJob { .. } => (
                ", executor = 'slurm', job_id = $7",
                "((status = 'queued' AND (job_id = $7 OR (job_id IS NULL AND submission IS NOT DISTINCT FROM $8))) \
                 OR (status = 'running' AND job_id = $7))",
            ),
        };
        // Built from the constants above only.
        let sql = sqlx::AssertSqlSafe(format!("{SET}{also_set} WHERE id = $6 AND {condition}"));
        let start = process_start(pid).map(|t| t as i64);
        let query = sqlx::query::<Any>(sql)
            .bind(i64::from(pid))
            .bind(now())
            .bind(self.host.to_string())
            .bind(start)
            .bind(now())
            .bind(id);
        let query = match starter {
            Starter::Anyone => query,
            Starter::Claim(runner) => query.bind(i64::from(runner)),
            Starter::SlurmJob { job, submission } => query.bind(job.to_string()).bind(submission.map(String::from)),
        };
        let result = query.write(self).await?;
        if result.rows_affected() == 0 {
            let status = self.status_of(id).await?;
            let hint = match (status, starter) {
                (RunStatus::Interrupted | RunStatus::Failed, _) => {
                    format!("requeue it first (`workbench resume {id}` does)")
                }
                (RunStatus::Queued | RunStatus::Running, Starter::Claim(_)) => format!(
                    "another runner took it while this worker waited to start it (its starter's claim \
                     lapsed after {CLAIM_TIMEOUT_S} s); this worker leaves the run to that runner's"
                ),
                (RunStatus::Queued | RunStatus::Running, Starter::SlurmJob { job, .. }) => {
                    match self.run(id).await?.supervision.job_id {
                        Some(owner) => format!(
                            "it belongs to Slurm job {owner}, and this is job {job} (submitted before it, by \
                             an sbatch that reported a failure or by hand); this job leaves the run to {owner}"
                        ),
                        None if status == RunStatus::Queued => format!(
                            "it was submitted to Slurm again since this job ({job}) was (by an sbatch that \
                             reported a failure, or by hand); this job leaves the run to the latest one"
                        ),
                        None => {
                            format!("a worker outside Slurm trains it; this job ({job}) leaves the run to that worker")
                        }
                    }
                }
                _ => "only queued runs can be started; create a new run instead".to_string(),
            };
            return Err(StoreError::InvalidTransition { id, status, action: "start running", hint });
        }
        Ok(())
    }

    /// Ends a run: sets `status` (which must be terminal, else [`StoreError::NotTerminal`]),
    /// `finished_at` = now and `error`. `worker_pid` is kept for reference.
    pub async fn finish(&self, id: i64, status: RunStatus, error: Option<&str>) -> Result<(), StoreError> {
        self.finish_with_cause(id, status, error, None).await
    }

    /// [`finish`](Self::finish), recording `cause` (if any) in the same write, so that no
    /// reader sees the end without its cause.
    pub async fn finish_with_cause(
        &self,
        id: i64,
        status: RunStatus,
        error: Option<&str>,
        cause: Option<&str>,
    ) -> Result<(), StoreError> {
        if !status.is_terminal() {
            return Err(StoreError::NotTerminal(status));
        }
        let result = sqlx::query::<Any>(
            "UPDATE runs SET status = $1, finished_at = $2, error = $3, cause = COALESCE($4, cause) WHERE id = $5",
        )
        .bind(status.as_str())
        .bind(now())
        .bind(error)
        .bind(cause)
        .bind(id)
        .write(self)
        .await?;
        self.expect_one(result.rows_affected(), id)
    }

    /// Runs an update of run `id`; [`StoreError::NotFound`] if no row changed.
    async fn update_one(&self, query: sqlx::query::Query<'_, Any, AnyArguments>, id: i64) -> Result<(), StoreError> {
        let result = query.write(self).await?;
        self.expect_one(result.rows_affected(), id)
    }

    fn expect_one(&self, rows: u64, id: i64) -> Result<(), StoreError> {
        if rows == 0 {
            Err(StoreError::NotFound(id))
        } else {
            Ok(())
        }
    }

    /// Records the builds of the layer and task libraries that trained the run.
    pub async fn set_builds(&self, id: i64, layer: Option<&str>, task: Option<&str>) -> Result<(), StoreError> {
        let query = sqlx::query::<Any>("UPDATE runs SET layer_build = $1, task_build = $2 WHERE id = $3")
            .bind(layer)
            .bind(task)
            .bind(id);
        self.update_one(query, id).await
    }

    /// Records the model's number of trainable parameters.
    pub async fn set_param_count(&self, id: i64, n: u64) -> Result<(), StoreError> {
        let n = to_i64(n, "param_count")?;
        self.update_one(sqlx::query::<Any>("UPDATE runs SET param_count = $1 WHERE id = $2").bind(n).bind(id), id).await
    }

    /// Records the task's metrics and their directions (the first is the headline metric).
    pub async fn set_metric_specs(&self, id: i64, specs: &[MetricDirection]) -> Result<(), StoreError> {
        let json = serde_json::to_string(specs).map_err(|e| self.corrupt(format!("cannot serialise metrics: {e}")))?;
        self.update_one(sqlx::query::<Any>("UPDATE runs SET metric_specs = $1 WHERE id = $2").bind(json).bind(id), id)
            .await
    }

    /// Records the last completed training step (`last_step`).
    pub async fn set_progress(&self, id: i64, step: u64) -> Result<(), StoreError> {
        let step = to_i64(step, "step")?;
        self.update_one(sqlx::query::<Any>("UPDATE runs SET last_step = $1 WHERE id = $2").bind(step).bind(id), id)
            .await
    }

    /// Starts a write transaction. On SQLite it takes the write lock up front (`BEGIN
    /// IMMEDIATE`, see module docs) so it waits for another writer instead of failing when it
    /// upgrades; PostgreSQL locks rows as they are written.
    ///
    /// With many writers at once (dozens of workers on one SQLite file), SQLite's busy handler
    /// is not fair and a writer can lose the lock for longer than the busy timeout; taking the
    /// lock is then retried, after a short random pause, for up to [`WRITE_PATIENCE`] in all,
    /// before the store reports [`StoreError::Busy`] (a worker would otherwise fail its run
    /// over a moment of contention).
    async fn begin_write(&self) -> Result<WriteTx, StoreError> {
        let begin = match self.backend() {
            Backend::Sqlite => "BEGIN IMMEDIATE",
            Backend::Postgres => "BEGIN",
        };
        let mut turn = match &self.turnstile {
            Some(t) => Some(t.enter(&self.location).await?),
            None => None,
        };
        let started = std::time::Instant::now();
        loop {
            match self.pool.begin_with(begin).await.map_err(|e| self.err(e)) {
                Err(StoreError::Busy { .. }) if started.elapsed() < WRITE_PATIENCE => {
                    let pause = 20 + u64::from(rand::random::<u8>());
                    tokio::time::sleep(Duration::from_millis(pause)).await;
                }
                Ok(tx) => return Ok(WriteTx::new(tx, turn.take())),
                Err(e) => return Err(e),
            }
        }
    }

    /// Starts a write transaction that holds the write lock from the start (see module docs)
    /// and checks that run `id` exists.
    async fn begin_for_run(&self, id: i64) -> Result<WriteTx, StoreError> {
        let mut tx = self.begin_write().await?;
        let exists: Option<i64> = sqlx::query_scalar::<Any, _>("SELECT id FROM runs WHERE id = $1")
            .bind(id)
            .fetch_optional(&mut *tx)
            .await
            .map_err(|e| self.err(e))?;
        if exists.is_none() {
            // Dropping the transaction rolls it back.
            return Err(StoreError::NotFound(id));
        }
        Ok(tx)
    }

    fn map_metric(&self, row: &AnyRow) -> Result<MetricRow, StoreError> {
        Ok(MetricRow {
            step: self.to_u64(self.get(row, "step")?, "metric step")?,
            split: self.get(row, "split")?,
            name: self.get(row, "name")?,
            value: self.get::<Option<f64>>(row, "value")?.unwrap_or(f64::NAN),
            wall_time: self.get::<Option<f64>>(row, "wall_time")?.unwrap_or(f64::NAN),
        })
    }

    /// All metric rows of a run, ordered by name, then step (then split, then insertion).
    pub async fn metrics(&self, run_id: i64) -> Result<Vec<MetricRow>, StoreError> {
        self.metrics_after_i64(run_id, -1).await
    }

    /// Metric rows with `step > step_exclusive`, in the same order as [`Store::metrics`].
    pub async fn metrics_after(&self, run_id: i64, step_exclusive: u64) -> Result<Vec<MetricRow>, StoreError> {
        // A step beyond i64::MAX cannot have rows after it.
        let after = i64::try_from(step_exclusive).unwrap_or(i64::MAX);
        self.metrics_after_i64(run_id, after).await
    }

    async fn metrics_after_i64(&self, run_id: i64, after: i64) -> Result<Vec<MetricRow>, StoreError> {
        self.ensure_exists(run_id).await?;
        let rows = sqlx::query::<Any>(
            "SELECT step, split, name, value, wall_time FROM metrics \
             WHERE run_id = $1 AND step > $2 ORDER BY name, step, split, rowid",
        )
        .bind(run_id)
        .bind(after)
        .fetch_all(&self.pool)
        .await
        .map_err(|e| self.err(e))?;
        rows.iter().map(|r| self.map_metric(r)).collect()
    }

    /// The latest wall time among the run's metrics (0 without any): the seconds it has
    /// trained, where a resumed worker's clock goes on from, so that its curves against time
    /// and its seconds per step leave out the hours it spent stopped.
    pub async fn trained_seconds(&self, run_id: i64) -> Result<f64, StoreError> {
        let (seconds,) =
            sqlx::query_as::<Any, (Option<f64>,)>("SELECT MAX(wall) FROM metric_summaries WHERE run_id = $1")
                .bind(run_id)
                .fetch_one(&self.pool)
                .await
                .map_err(|e| self.err(e))?;
        Ok(seconds.filter(|s| s.is_finite() && *s > 0.0).unwrap_or(0.0))
    }

    /// Deletes the metrics and diagnostics with `step > step`, in one transaction (used when
    /// a run resumes from a checkpoint taken at `step`). Artifacts, logs and `last_step` are
    /// left alone.
    pub async fn delete_metrics_after(&self, run_id: i64, step: u64) -> Result<(), StoreError> {
        let Ok(step) = i64::try_from(step) else {
            return self.ensure_exists(run_id).await;
        };
        let mut tx = self.begin_for_run(run_id).await?;
        for sql in [
            "DELETE FROM metrics WHERE run_id = $1 AND step > $2",
            "DELETE FROM diagnostics WHERE run_id = $1 AND step > $2",
        ] {
            sqlx::query::<Any>(sql).bind(run_id).bind(step).execute(&mut *tx).await.map_err(|e| self.err(e))?;
        }
        self.rebuild_summaries(&mut tx, run_id, None).await?;
        tx.commit().await.map_err(|e| self.err(e))
    }

    /// All diagnostic rows of a run, ordered by name, step, iteration.
    pub async fn diagnostics(&self, run_id: i64) -> Result<Vec<DiagnosticRow>, StoreError> {
        self.ensure_exists(run_id).await?;
        let rows = sqlx::query::<Any>(
            "SELECT step, iteration, name, value FROM diagnostics \
             WHERE run_id = $1 ORDER BY name, step, iteration, rowid",
        )
        .bind(run_id)
        .fetch_all(&self.pool)
        .await
        .map_err(|e| self.err(e))?;
        rows.iter()
            .map(|row| {
                let iteration: i64 = self.get(row, "iteration")?;
                Ok(DiagnosticRow {
                    step: self.to_u64(self.get(row, "step")?, "diagnostic step")?,
                    iteration: u32::try_from(iteration)
                        .map_err(|_| self.corrupt(format!("diagnostic iteration {iteration} is out of range")))?,
                    name: self.get(row, "name")?,
                    value: self.get::<Option<f64>>(row, "value")?.unwrap_or(f64::NAN),
                })
            })
            .collect()
    }

    fn map_artifact(&self, row: &AnyRow) -> Result<Artifact, StoreError> {
        let step: Option<i64> = self.get(row, "step")?;
        Ok(Artifact {
            id: self.get(row, "id")?,
            run_id: self.get(row, "run_id")?,
            kind: self.get(row, "kind")?,
            path: self.get(row, "path")?,
            step: step.map(|s| self.to_u64(s, "artifact step")).transpose()?,
            created_at: self.get(row, "created_at")?,
        })
    }

    /// Records a file produced by a run; returns the artifact id. A record with a step that is
    /// stored already (same kind, path and step) is not stored twice: its id is returned.
    pub async fn add_artifact(
        &self,
        run_id: i64,
        kind: &str,
        path: &str,
        step: Option<u64>,
    ) -> Result<i64, StoreError> {
        let step = step.map(|s| to_i64(s, "artifact step")).transpose()?;
        // Single statement: inserts only if the run exists, so a missing run is NotFound
        // rather than a foreign-key error, and only if the same record (with a step) is not
        // stored already, as when a write whose commit was lost in transit is made again.
        let id: Option<i64> = sqlx::query_scalar::<Any, _>(
            "INSERT INTO artifacts (run_id, kind, path, step, created_at) \
             SELECT $1, $2, $3, $4, $5 WHERE EXISTS (SELECT 1 FROM runs WHERE id = $6) \
             AND NOT EXISTS (SELECT 1 FROM artifacts WHERE run_id = $7 AND kind = $8 AND path = $9 AND step = $10) \
             RETURNING id",
        )
        .bind(run_id)
        .bind(kind)
        .bind(path)
        .bind(step)
        .bind(now())
        .bind(run_id)
        .bind(run_id)
        .bind(kind)
        .bind(path)
        .bind(step)
        .write_returning(self)
        .await?;
        if let Some(id) = id {
            return Ok(id);
        }
        let stored: Option<i64> = sqlx::query_scalar::<Any, _>(
            "SELECT id FROM artifacts WHERE run_id = $1 AND kind = $2 AND path = $3 AND step = $4 ORDER BY id LIMIT 1",
        )
        .bind(run_id)
        .bind(kind)
        .bind(path)
        .bind(step)
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| self.err(e))?;
        stored.ok_or(StoreError::NotFound(run_id))
    }

    /// All artifacts of a run, in the order they were added.
    pub async fn artifacts(&self, run_id: i64) -> Result<Vec<Artifact>, StoreError> {
        self.ensure_exists(run_id).await?;
        let rows = sqlx::query::<Any>(
            "SELECT id, run_id, kind, path, step, created_at FROM artifacts \
             WHERE run_id = $1 ORDER BY id",
        )
        .bind(run_id)
        .fetch_all(&self.pool)
        .await
        .map_err(|e| self.err(e))?;
        rows.iter().map(|r| self.map_artifact(r)).collect()
    }

    /// The artifact of this kind with the highest step (the most recently added among equal
    /// steps; artifacts without a step come last). `None` if the run has none of that kind.
    pub async fn latest_artifact(&self, run_id: i64, kind: &str) -> Result<Option<Artifact>, StoreError> {
        self.ensure_exists(run_id).await?;
        let row = sqlx::query::<Any>(
            "SELECT id, run_id, kind, path, step, created_at FROM artifacts \
             WHERE run_id = $1 AND kind = $2 ORDER BY step DESC NULLS LAST, id DESC LIMIT 1",
        )
        .bind(run_id)
        .bind(kind)
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| self.err(e))?;
        row.map(|r| self.map_artifact(&r)).transpose()
    }

    /// Appends log lines (timestamped now) in one transaction.
    pub async fn append_logs(&self, run_id: i64, lines: &[String]) -> Result<(), StoreError> {
        self.insert_logs(run_id, lines.iter().map(|line| (None, line.as_str()))).await
    }

    /// Appends the log lines of one writer, each with its number, in one transaction. A line
    /// whose writer and number are stored already is skipped, so a batch written again after
    /// its commit was lost in transit stores none of its lines twice.
    pub async fn append_numbered_logs(
        &self,
        run_id: i64,
        writer: &str,
        lines: &[(u64, String)],
    ) -> Result<(), StoreError> {
        let numbered = lines
            .iter()
            .map(|(seq, line)| to_i64(*seq, "log line number").map(|seq| (Some((writer, seq)), line.as_str())));
        let numbered = numbered.collect::<Result<Vec<_>, _>>()?;
        self.insert_logs(run_id, numbered.into_iter()).await
    }

    async fn insert_logs<'a>(
        &self,
        run_id: i64,
        lines: impl Iterator<Item = (Option<(&'a str, i64)>, &'a str)>,
    ) -> Result<(), StoreError> {
        let at = now();
        let mut tx = self.begin_for_run(run_id).await?;
        for (key, line) in lines {
            sqlx::query::<Any>(
                "INSERT INTO logs (run_id, at, line, writer, seq) VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
            )
            .bind(run_id)
            .bind(at)
            .bind(line)
            .bind(key.map(|(writer, _)| writer))
            .bind(key.map(|(_, seq)| seq))
            .execute(&mut *tx)
            .await
            .map_err(|e| self.err(e))?;
        }
        tx.commit().await.map_err(|e| self.err(e))
    }

    /// The last `last` log lines of a run, oldest first.
    pub async fn logs(&self, run_id: i64, last: usize) -> Result<Vec<String>, StoreError> {
        Ok(self.log_lines(run_id, 0, Some(last)).await?.into_iter().map(|(_, line)| line).collect())
    }

    /// Replaces a run's notes.
    pub async fn set_notes(&self, id: i64, notes: &str) -> Result<(), StoreError> {
        self.update_one(sqlx::query::<Any>("UPDATE runs SET notes = $1 WHERE id = $2").bind(notes).bind(id), id).await
    }

    /// Replaces a run's tags. Tags are trimmed; empty tags and repeats are dropped; a tag
    /// containing a comma is refused with [`StoreError::InvalidTag`] (tags are stored
    /// comma-separated).
    pub async fn set_tags(&self, id: i64, tags: &[String]) -> Result<(), StoreError> {
        let mut clean: Vec<&str> = Vec::with_capacity(tags.len());
        for tag in tags {
            if tag.contains(',') {
                return Err(StoreError::InvalidTag {
                    tag: tag.clone(),
                    reason: "tags cannot contain commas; give several tags instead",
                });
            }
            let tag = tag.trim();
            if !tag.is_empty() && !clean.contains(&tag) {
                clean.push(tag);
            }
        }
        self.update_one(
            sqlx::query::<Any>("UPDATE runs SET tags = $1 WHERE id = $2").bind(clean.join(",")).bind(id),
            id,
        )
        .await
    }

    /// Deletes a run and (by cascade) its metrics, diagnostics, artifact records and logs.
    /// Files on disk are not touched. Any status is accepted; a still-running worker's next
    /// write will then fail with [`StoreError::NotFound`].
    pub async fn delete_run(&self, id: i64) -> Result<(), StoreError> {
        self.update_one(sqlx::query::<Any>("DELETE FROM runs WHERE id = $1").bind(id), id).await
    }

    /// Puts an `interrupted` or `failed` run back to `queued`, clearing `finished_at`, `error`
    /// and `worker_pid` (`started_at`, `last_step` and recorded data are kept). Other states
    /// give [`StoreError::InvalidTransition`].
    pub async fn requeue(&self, id: i64) -> Result<(), StoreError> {
        let result = sqlx::query::<Any>(
            "UPDATE runs SET status = 'queued', finished_at = NULL, error = NULL, \
             worker_pid = NULL, held = 0, claimed_by = NULL, claimed_at = NULL, claimed_host = NULL, \
             stop_requested = NULL, cause = NULL, job_id = NULL \
             WHERE id = $1 AND status IN ('interrupted', 'failed')",
        )
        .bind(id)
        .write(self)
        .await?;
        if result.rows_affected() == 0 {
            let status = self.status_of(id).await?;
            let hint = match status {
                RunStatus::Queued => "it is already waiting for a worker".to_string(),
                RunStatus::Running => "it is still running".to_string(),
                _ => "only interrupted or failed runs can be requeued".to_string(),
            };
            return Err(StoreError::InvalidTransition { id, status, action: "be requeued", hint });
        }
        Ok(())
    }
}

/// Who starts a run's worker, which decides when the run may be marked running.
#[derive(Clone, Copy)]
enum Starter<'a> {
    /// Anyone: a run queued or running (its worker is replaced).
    Anyone,
    /// A process on this host holding the queued run's claim (a queue runner, `train`).
    Claim(u32),
    /// A Slurm job, submitted as `submission`, which takes a queued run unless it belongs to
    /// another job or was submitted again since, and a running one only from its own earlier
    /// worker.
    SlurmJob { job: &'a str, submission: Option<&'a str> },
}

/// Tags as stored (comma-separated) to a list.
fn split_tags(s: &str) -> Vec<String> {
    s.split(',').map(str::trim).filter(|t| !t.is_empty()).map(String::from).collect()
}

// After `select_runs!`, which it uses.
mod follow;
mod queue;
pub use follow::{Refreshed, RunsFollower};
pub use queue::{Claims, CLAIM_TIMEOUT_S};
