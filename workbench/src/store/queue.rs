//! Sweeps and the job queue in the run store: queued runs are started by queue runners (the
//! CLI's or the TUI's) that claim them atomically, so two runners never start the same run
//! and together never exceed the machine's job limit.

use super::turnstile::{Write, WriteReturning};
use super::{now, Backend, RunRecord, Store, StoreError, SweepRecord, WriteTx};
use sqlx::any::AnyArguments;
use sqlx::Any;
use std::collections::{BTreeMap, HashMap};

/// A claim that has not become `running` within this many seconds has failed (the worker
/// died before it could start) and is released.
pub const CLAIM_TIMEOUT_S: f64 = 120.0;

/// Whose queued runs a queue runner starts, and whose running runs count against its job
/// limit. In a store a lab shares, each researcher's runners take that researcher's runs (and
/// those stored before users were recorded), so that one user's jobs neither start another's
/// runs under their own account nor use up another's `--jobs`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claims {
    /// This user's runs, and those without a recorded user.
    User(String),
    /// Every queued run, whoever stored it (a lab's shared runner: `queue --all-users`).
    Everyone,
}

impl Claims {
    /// The runs of the user `store` acts for.
    pub fn mine(store: &Store) -> Claims {
        Claims::User(store.user().to_string())
    }

    /// Whether a runner with these claims may start `run`.
    pub fn cover(&self, run: &RunRecord) -> bool {
        self.covers(run.created_by.as_deref())
    }

    /// Whether a runner with these claims may start a run stored by `created_by`.
    pub fn covers(&self, created_by: Option<&str>) -> bool {
        match self {
            Claims::Everyone => true,
            Claims::User(user) => created_by.is_none_or(|by| by == user),
        }
    }
}

const BUSY: &str =
    "SELECT COUNT(*) FROM runs WHERE status = 'running' OR (status = 'queued' AND claimed_by IS NOT NULL)";
const BUSY_OF_USER: &str =
    "SELECT COUNT(*) FROM runs WHERE (status = 'running' OR (status = 'queued' AND claimed_by IS NOT NULL)) \
     AND (created_by = $1 OR created_by IS NULL)";
const NEXT: &str =
    "SELECT id FROM runs WHERE status = 'queued' AND held = 0 AND claimed_by IS NULL ORDER BY id LIMIT 1";
const NEXT_OF_USER: &str = "SELECT id FROM runs WHERE status = 'queued' AND held = 0 AND claimed_by IS NULL \
     AND (created_by = $1 OR created_by IS NULL) ORDER BY id LIMIT 1";

/// The PostgreSQL advisory lock that serialises queue claims (an arbitrary constant, the same
/// in every workbench).
const CLAIM_LOCK_KEY: i64 = 0x776f_726b_6265_6e63;

impl Store {
    /// Creates a sweep; its runs are added with [`Store::create_run_in_sweep`].
    pub async fn create_sweep(&self, name: &str, spec: &serde_json::Value) -> Result<i64, StoreError> {
        sqlx::query_scalar::<Any, _>(
            "INSERT INTO sweeps (name, spec, created_at, uid) VALUES ($1, $2, $3, $4) RETURNING id",
        )
        .bind(name)
        .bind(spec.to_string())
        .bind(now())
        .bind(super::new_uid())
        .write_returning(self)
        .await?
        .ok_or_else(|| self.corrupt("creating a sweep returned no id".into()))
    }

    /// Creates a queued run as point `index` of sweep `sweep`.
    pub async fn create_run_in_sweep(&self, run: &super::NewRun, sweep: i64, index: u32) -> Result<i64, StoreError> {
        let id = self.create_run(run).await?;
        sqlx::query::<Any>("UPDATE runs SET sweep_id = $1, sweep_index = $2 WHERE id = $3")
            .bind(sweep)
            .bind(i64::from(index))
            .bind(id)
            .write(self)
            .await?;
        Ok(id)
    }

    /// Creates a queued run already claimed by process `pid` (which starts it itself), so no
    /// queue runner starts it too.
    pub async fn create_claimed_run(&self, run: &super::NewRun, pid: u32) -> Result<i64, StoreError> {
        self.insert_run(run, Some(pid)).await
    }

    /// Claims queued run `id` for process `pid` (which starts it itself); refused if another
    /// runner is starting it or it is not queued.
    pub async fn claim(&self, id: i64, pid: u32) -> Result<(), StoreError> {
        let query = sqlx::query::<Any>(
            "UPDATE runs SET claimed_by = $1, claimed_at = $2, claimed_host = $3 \
             WHERE id = $4 AND status = 'queued' AND claimed_by IS NULL",
        )
        .bind(i64::from(pid))
        .bind(now())
        .bind(self.host().to_string())
        .bind(id);
        self.transition(query, id, "be started here", "a queue runner is already starting it").await
    }

    /// Whether run `id` is claimed by process `pid` on this handle's host (a run requeued
    /// since is not: `requeue` drops the claim).
    pub async fn holds_claim(&self, id: i64, pid: u32) -> Result<bool, StoreError> {
        let count = "SELECT COUNT(*) FROM runs WHERE id = $1 AND claimed_by = $2 AND claimed_host = $3";
        self.run_names_process(id, pid, count).await
    }

    /// Whether `count`, a `SELECT COUNT(*)` of the runs with `id = $1` and a condition in which
    /// `$2` is process `pid` and `$3` this handle's host, finds run `id`.
    pub(super) async fn run_names_process(&self, id: i64, pid: u32, count: &'static str) -> Result<bool, StoreError> {
        let matching: i64 = sqlx::query_scalar::<Any, i64>(count)
            .bind(id)
            .bind(i64::from(pid))
            .bind(self.host().to_string())
            .fetch_one(&self.pool)
            .await
            .map_err(|e| self.err(e))?;
        Ok(matching == 1)
    }

    /// Every sweep with its runs counted by status, newest first.
    pub async fn sweeps(&self) -> Result<Vec<SweepRecord>, StoreError> {
        self.sweep_records(None).await
    }

    /// The sweep with this id, or [`StoreError::SweepNotFound`].
    pub async fn sweep(&self, id: i64) -> Result<SweepRecord, StoreError> {
        self.sweep_records(Some(id)).await?.pop().ok_or(StoreError::SweepNotFound(id))
    }

    /// The sweeps (all, or the one with id `only`), newest first, each with its runs counted
    /// by status: two queries whatever the number of sweeps.
    async fn sweep_records(&self, only: Option<i64>) -> Result<Vec<SweepRecord>, StoreError> {
        // A flag beside the id (`$1 IS NULL` would need a typed NULL on PostgreSQL): any id,
        // a negative one included, then selects only itself.
        let (all, id) = (i64::from(only.is_none()), only.unwrap_or(0));
        let rows = sqlx::query::<Any>(
            "SELECT id, name, spec, created_at FROM sweeps WHERE $1 = 1 OR id = $2 ORDER BY id DESC",
        )
        .bind(all)
        .bind(id)
        .fetch_all(&self.pool)
        .await
        .map_err(|e| self.err(e))?;
        let count_rows = sqlx::query::<Any>(
            "SELECT sweep_id, status, COUNT(*) AS n, SUM(CASE WHEN held <> 0 THEN 1 ELSE 0 END) AS held, \
             SUM(CASE WHEN held = 0 AND job_id IS NOT NULL THEN 1 ELSE 0 END) AS submitted FROM runs \
             WHERE sweep_id IS NOT NULL AND ($1 = 1 OR sweep_id = $2) GROUP BY sweep_id, status",
        )
        .bind(all)
        .bind(id)
        .fetch_all(&self.pool)
        .await
        .map_err(|e| self.err(e))?;
        // sweep id -> (status -> runs, queued runs held, queued runs submitted to a scheduler).
        let mut counts: HashMap<i64, (BTreeMap<String, u64>, u64, u64)> = HashMap::new();
        for c in &count_rows {
            let status: String = self.get(c, "status")?;
            let n: i64 = self.get(c, "n")?;
            let entry = counts.entry(self.get(c, "sweep_id")?).or_default();
            if status == "queued" {
                entry.1 = self.get::<Option<i64>>(c, "held")?.unwrap_or(0) as u64;
                entry.2 = self.get::<Option<i64>>(c, "submitted")?.unwrap_or(0) as u64;
            }
            entry.0.insert(status, n as u64);
        }
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            let id: i64 = self.get(&r, "id")?;
            let spec: String = self.get(&r, "spec")?;
            let (counts, held, submitted) = counts.remove(&id).unwrap_or_default();
            out.push(SweepRecord {
                id,
                name: self.get(&r, "name")?,
                spec: serde_json::from_str(&spec)
                    .map_err(|e| self.corrupt(format!("sweep {id} has an invalid spec: {e}")))?,
                created_at: self.get(&r, "created_at")?,
                counts,
                held,
                submitted,
            });
        }
        Ok(out)
    }

    /// The runs of a sweep in declared order.
    pub async fn sweep_runs(&self, sweep: i64) -> Result<Vec<RunRecord>, StoreError> {
        self.runs_where(concat!(select_runs!(), " WHERE sweep_id = $1 ORDER BY sweep_index, id"), sweep).await
    }

    /// Pauses (`held = true`) or releases a queued run. Pausing a run that is not queued is
    /// refused with the reason.
    pub async fn set_held(&self, id: i64, held: bool) -> Result<(), StoreError> {
        let query = sqlx::query::<Any>("UPDATE runs SET held = $1 WHERE id = $2 AND status = 'queued'")
            .bind(i64::from(held))
            .bind(id);
        let action = if held { "be paused" } else { "be unpaused" };
        self.transition(query, id, action, "only queued runs wait in the queue; stop a running run with cancel").await
    }

    /// Pauses or releases every queued run of a sweep; returns how many changed.
    pub async fn set_sweep_held(&self, sweep: i64, held: bool) -> Result<u64, StoreError> {
        self.sweep(sweep).await?;
        let result = sqlx::query::<Any>("UPDATE runs SET held = $1 WHERE sweep_id = $2 AND status = 'queued'")
            .bind(i64::from(held))
            .bind(sweep)
            .write(self)
            .await?;
        Ok(result.rows_affected())
    }

    /// Cancels a queued run before it starts: it becomes `interrupted` (and can be requeued).
    pub async fn cancel_queued(&self, id: i64) -> Result<(), StoreError> {
        let query = sqlx::query::<Any>(
            "UPDATE runs SET status = 'interrupted', finished_at = $1, held = 0, claimed_by = NULL, claimed_host = NULL, \
             error = 'cancelled before it started' WHERE id = $2 AND status = 'queued'",
        )
        .bind(now())
        .bind(id);
        let hint = "a running run is stopped by signalling its worker";
        self.transition(query, id, "be cancelled before starting", hint).await
    }

    /// Claims the next queued run that `claims` covers for runner `pid` if fewer than `jobs`
    /// runs it covers are running or claimed, in one write transaction; returns it, or `None`
    /// when no such run is queued, all are paused or the job limit is reached. Runs start in
    /// id order (a sweep's runs are created in its declared order).
    pub async fn claim_next(&self, pid: u32, jobs: usize, claims: &Claims) -> Result<Option<RunRecord>, StoreError> {
        let mut tx = self.begin_claim().await?;
        let (busy, next) = match claims {
            Claims::Everyone => (sqlx::query_scalar::<Any, i64>(BUSY), sqlx::query_scalar::<Any, i64>(NEXT)),
            Claims::User(user) => (
                sqlx::query_scalar::<Any, i64>(BUSY_OF_USER).bind(user.clone()),
                sqlx::query_scalar::<Any, i64>(NEXT_OF_USER).bind(user.clone()),
            ),
        };
        let busy: i64 = busy.fetch_one(&mut *tx).await.map_err(|e| self.err(e))?;
        if busy as usize >= jobs {
            return Ok(None);
        }
        let next: Option<i64> = next.fetch_optional(&mut *tx).await.map_err(|e| self.err(e))?;
        let Some(id) = next else { return Ok(None) };
        sqlx::query::<Any>("UPDATE runs SET claimed_by = $1, claimed_at = $2, claimed_host = $3 WHERE id = $4")
            .bind(i64::from(pid))
            .bind(now())
            .bind(self.host().to_string())
            .bind(id)
            .execute(&mut *tx)
            .await
            .map_err(|e| self.err(e))?;
        tx.commit().await.map_err(|e| self.err(e))?;
        self.run(id).await.map(Some)
    }

    /// Pins claimed run `id`, which asks for `cuda` (any device), to the lowest of `devices`
    /// CUDA ordinals no other running or claimed run uses, in one transaction (two runners
    /// never pick the same one). The choice goes into the `device` column and the trainer's
    /// `device` in the stored configuration, so the record says where the run trained.
    /// Returns the device chosen; `None` when every ordinal is taken (the run keeps `cuda`).
    pub async fn assign_free_cuda_device(&self, id: i64, devices: usize) -> Result<Option<String>, StoreError> {
        let mut tx = self.begin_claim().await?;
        let busy: Vec<String> = sqlx::query_scalar::<Any, _>(
            "SELECT device FROM runs WHERE id != $1 AND (status = 'running' OR (status = 'queued' AND claimed_by IS NOT NULL))",
        )
        .bind(id)
        .fetch_all(&mut *tx)
        .await
        .map_err(|e| self.err(e))?;
        let Some(ordinal) = crate::device::free_cuda_ordinal(devices, &busy) else { return Ok(None) };
        let device = format!("cuda:{ordinal}");
        let config: String = sqlx::query_scalar::<Any, _>("SELECT config FROM runs WHERE id = $1")
            .bind(id)
            .fetch_one(&mut *tx)
            .await
            .map_err(|e| self.err(e))?;
        let mut config: serde_json::Value = serde_json::from_str(&config).unwrap_or(serde_json::Value::Null);
        if let Some(train) = config.get_mut("train").and_then(|t| t.as_object_mut()) {
            train.insert("device".into(), serde_json::Value::String(device.clone()));
        }
        sqlx::query::<Any>("UPDATE runs SET device = $1, config = $2 WHERE id = $3")
            .bind(&device)
            .bind(config.to_string())
            .bind(id)
            .execute(&mut *tx)
            .await
            .map_err(|e| self.err(e))?;
        tx.commit().await.map_err(|e| self.err(e))?;
        Ok(Some(device))
    }

    /// Releases the claim on queued run `id`, so any runner may take it again.
    pub async fn release_claim(&self, id: i64) -> Result<(), StoreError> {
        sqlx::query::<Any>(
            "UPDATE runs SET claimed_by = NULL, claimed_at = NULL, claimed_host = NULL WHERE id = $1 AND status = 'queued'",
        )
            .bind(id)
            .write(self)
            .await?;
        Ok(())
    }

    /// Renews the claims that runner `pid` on this handle's host holds on queued runs it
    /// started a local worker for (no Slurm job), so that [`Store::release_stale_claims`]
    /// leaves them while the runner lives; returns how many.
    pub async fn renew_claims(&self, pid: u32) -> Result<u64, StoreError> {
        let renewed = sqlx::query::<Any>(
            "UPDATE runs SET claimed_at = $1 \
             WHERE status = 'queued' AND claimed_by = $2 AND claimed_host = $3 AND job_id IS NULL",
        )
        .bind(now())
        .bind(i64::from(pid))
        .bind(self.host().to_string())
        .write(self)
        .await?;
        Ok(renewed.rows_affected())
    }

    /// Releases claims on queued runs whose runner is gone (per `is_alive`, asked only for
    /// runners on this handle's host: a pid means nothing elsewhere) or that did not start
    /// within [`CLAIM_TIMEOUT_S`]; returns their ids. A run submitted to a scheduler keeps its
    /// claim while its job waits (for hours, on a busy cluster): the executor's reconciling
    /// ends it if the job goes away.
    pub async fn release_stale_claims(&self, is_alive: impl Fn(u32) -> bool) -> Result<Vec<i64>, StoreError> {
        let rows = sqlx::query::<Any>(
            "SELECT id, claimed_by, claimed_at, claimed_host FROM runs \
             WHERE status = 'queued' AND claimed_by IS NOT NULL AND job_id IS NULL",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(|e| self.err(e))?;
        let mut released = Vec::new();
        for row in rows {
            let id: i64 = self.get(&row, "id")?;
            let pid: i64 = self.get(&row, "claimed_by")?;
            let at: Option<f64> = self.get(&row, "claimed_at")?;
            let host: Option<String> = self.get(&row, "claimed_host")?;
            let local = host.as_deref().is_none_or(|h| h == self.host());
            let alive = !local || u32::try_from(pid).is_ok_and(&is_alive);
            if alive && at.is_some_and(|t| now() - t < CLAIM_TIMEOUT_S) {
                continue;
            }
            sqlx::query::<Any>(
                "UPDATE runs SET claimed_by = NULL, claimed_at = NULL, claimed_host = NULL \
                 WHERE id = $1 AND status = 'queued' AND claimed_by = $2",
            )
            .bind(id)
            .bind(pid)
            .write(self)
            .await?;
            released.push(id);
        }
        Ok(released)
    }

    /// Starts a transaction in which claims are made one at a time across every runner: on
    /// SQLite the write lock (`BEGIN IMMEDIATE`), on PostgreSQL a transaction-scoped advisory
    /// lock, so counting the busy runs and claiming the next one are a single atomic step.
    async fn begin_claim(&self) -> Result<WriteTx, StoreError> {
        let mut tx = self.begin_write().await?;
        if self.backend() == Backend::Postgres {
            sqlx::query::<Any>("SELECT pg_advisory_xact_lock($1)")
                .bind(CLAIM_LOCK_KEY)
                .execute(&mut *tx)
                .await
                .map_err(|e| self.err(e))?;
        }
        Ok(tx)
    }

    /// Runs an update of run `id` that applies in some states only; when no row changed, the
    /// error names the run's actual status, what was refused and the way forward.
    async fn transition(
        &self,
        query: sqlx::query::Query<'_, Any, AnyArguments>,
        id: i64,
        action: &'static str,
        hint: &str,
    ) -> Result<(), StoreError> {
        let result = query.write(self).await?;
        if result.rows_affected() == 0 {
            let status = self.status_of(id).await?;
            return Err(StoreError::InvalidTransition { id, status, action, hint: hint.to_string() });
        }
        Ok(())
    }

    /// Counts of runs by status (for the queue's progress display).
    pub async fn status_counts(&self, ids: &[i64]) -> Result<BTreeMap<&'static str, usize>, StoreError> {
        let mut counts = BTreeMap::new();
        for r in self.list_runs().await?.into_iter().filter(|r| ids.contains(&r.id)) {
            *counts.entry(r.status.as_str()).or_insert(0) += 1;
        }
        Ok(counts)
    }
}
