//! Following the runs table: a reader that refreshes it often (the TUI, twice a second) reads
//! only the runs changed since its last read, and the metric summaries of those runs and of the
//! running ones, instead of every run and every summary each time.
//!
//! Every insert or update of a run stamps it with a revision (migration 0006: a store-wide
//! counter on SQLite, the writer's transaction id on PostgreSQL). A refresh first reads the
//! store's watermark, then the runs stamped at or after the previous watermark: a change that
//! commits after the watermark was read is stamped at or after it and is read next time.
//! Deleted runs are found by counting: after the changes are merged the follower holds every
//! stored run, so a count that differs means runs were deleted, and only then are ids read.

use super::{Backend, MetricSummary, RunRecord, RunStatus, Store, StoreError};
use sqlx::Any;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// The runs of a store and their metric summaries, as of the last [`RunsFollower::refresh`].
#[derive(Debug, Default)]
pub struct RunsFollower {
    /// Read runs stamped with this revision or a later one; `None` before the first read.
    next: Option<i64>,
    runs: BTreeMap<i64, RunRecord>,
    summaries: HashMap<i64, Vec<MetricSummary>>,
}

/// What one refresh found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Refreshed {
    /// Runs read anew (new or changed).
    pub changed: usize,
    /// Runs no longer stored.
    pub deleted: usize,
    /// Runs whose metric summaries were read anew.
    pub summarised: usize,
}

impl RunsFollower {
    pub fn new() -> RunsFollower {
        RunsFollower::default()
    }

    /// Every run, ordered by id.
    pub fn runs(&self) -> impl Iterator<Item = &RunRecord> {
        self.runs.values()
    }

    /// Per run id, its metric summaries (as [`Store::metric_summaries`] gives them).
    pub fn summaries(&self) -> &HashMap<i64, Vec<MetricSummary>> {
        &self.summaries
    }

    /// Reads what changed since the last refresh (everything, the first time).
    pub async fn refresh(&mut self, store: &Store) -> Result<Refreshed, StoreError> {
        let watermark = store.revision_watermark().await?;
        let first = self.next.is_none();
        let changed = store.runs_revised_since(self.next).await?;
        let mut report = Refreshed { changed: changed.len(), ..Refreshed::default() };
        let mut touched: BTreeSet<i64> = changed.iter().map(|r| r.id).collect();
        for run in changed {
            self.runs.insert(run.id, run);
        }
        if store.run_count().await? != self.runs.len() {
            let stored: BTreeSet<i64> = store.run_ids().await?.into_iter().collect();
            let before = self.runs.len();
            self.runs.retain(|id, _| stored.contains(id));
            self.summaries.retain(|id, _| stored.contains(id));
            report.deleted = before - self.runs.len();
        }
        // Summaries change as metrics are written, which only a running run's worker does
        // (its run row changes too, but not necessarily in the same transaction).
        touched.extend(self.runs.values().filter(|r| r.status == RunStatus::Running).map(|r| r.id));
        let fresh = if first { store.metric_summaries().await? } else { store.metric_summaries_of(&touched).await? };
        report.summarised = touched.len();
        for id in &touched {
            self.summaries.remove(id);
        }
        for summary in fresh {
            self.summaries.entry(summary.run_id).or_default().push(summary);
        }
        self.next = Some(watermark);
        Ok(report)
    }
}

impl Store {
    /// The revision from which the next read of changed runs must start: every change
    /// committed before this call is stamped below it.
    async fn revision_watermark(&self) -> Result<i64, StoreError> {
        let sql = match self.backend() {
            Backend::Sqlite => "SELECT n + 1 FROM run_revision",
            // The oldest transaction still running: every earlier one has committed or
            // rolled back, so its changes are visible now.
            Backend::Postgres => "SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint",
        };
        sqlx::query_scalar::<Any, i64>(sql).fetch_one(&self.pool).await.map_err(|e| self.err(e))
    }

    /// Runs stamped with revision `since` or later, ordered by id (every run for `None`).
    async fn runs_revised_since(&self, since: Option<i64>) -> Result<Vec<RunRecord>, StoreError> {
        match since {
            Some(since) => self.runs_where(concat!(select_runs!(), " WHERE revision >= $1 ORDER BY id"), since).await,
            None => self.list_runs().await,
        }
    }

    /// How many runs the store holds.
    pub async fn run_count(&self) -> Result<usize, StoreError> {
        let n: i64 = sqlx::query_scalar::<Any, _>("SELECT COUNT(*) FROM runs")
            .fetch_one(&self.pool)
            .await
            .map_err(|e| self.err(e))?;
        Ok(n as usize)
    }

    /// How many runs the store holds in each status (`queued`, `running`, ...), statuses
    /// without runs left out.
    pub async fn run_counts_by_status(&self) -> Result<std::collections::BTreeMap<String, usize>, StoreError> {
        let rows: Vec<(String, i64)> =
            sqlx::query_as::<Any, (String, i64)>("SELECT status, COUNT(*) FROM runs GROUP BY status")
                .fetch_all(&self.pool)
                .await
                .map_err(|e| self.err(e))?;
        Ok(rows.into_iter().map(|(status, n)| (status, n as usize)).collect())
    }

    /// The ids of every run.
    pub async fn run_ids(&self) -> Result<Vec<i64>, StoreError> {
        sqlx::query_scalar::<Any, i64>("SELECT id FROM runs ORDER BY id")
            .fetch_all(&self.pool)
            .await
            .map_err(|e| self.err(e))
    }
}
