//! Writing metric and diagnostic rows, and the per-metric summaries the runs table reads.
//!
//! Rows go in as multi-row `INSERT`s (a few hundred rows a statement), which both engines take
//! far faster than a statement per row, over a network above all. Each metric batch also
//! updates `metric_summaries` (smallest, largest and last value per run and metric) in the same
//! transaction, so the runs table never scans the metric rows themselves.

use std::collections::{BTreeMap, BTreeSet};

use sqlx::Any;

use super::{to_i64, Backend, DiagnosticRow, Float, MetricRow, MetricSummary, Store, StoreError, WriteTx};

/// Rows per `INSERT` statement: well under both engines' limits on parameters per statement
/// (SQLite 32,766, PostgreSQL 65,535) at six parameters a row.
const ROWS_PER_STATEMENT: usize = 500;

/// What one batch adds to the summary of one (split, name).
struct BatchSummary {
    lo: Option<f64>,
    hi: Option<f64>,
    last: Option<f64>,
    last_step: i64,
    wall: Option<f64>,
}

fn keep(current: Option<f64>, candidate: Option<f64>, better: impl Fn(f64, f64) -> bool) -> Option<f64> {
    match (current, candidate) {
        (Some(c), Some(n)) if better(n, c) => Some(n),
        (None, n) => n,
        (c, _) => c,
    }
}

/// `INSERT INTO table (columns) VALUES (..), (..), ... on_conflict` for `rows` rows. SQLite
/// gets anonymous `?` parameters: it looks a numbered parameter's name up by a linear scan, so
/// a statement of thousands of `$N` would spend most of its time binding them.
fn multi_insert(backend: Backend, table: &str, columns: &[&str], rows: usize, on_conflict: &str) -> String {
    let width = columns.len();
    let tuples: Vec<String> = (0..rows)
        .map(|r| {
            let params: Vec<String> = (1..=width)
                .map(|c| match backend {
                    Backend::Sqlite => "?".to_string(),
                    Backend::Postgres => format!("${}", r * width + c),
                })
                .collect();
            format!("({})", params.join(", "))
        })
        .collect();
    let separator = if on_conflict.is_empty() { "" } else { " " };
    format!("INSERT INTO {table} ({}) VALUES {}{separator}{on_conflict}", columns.join(", "), tuples.join(", "))
}

/// A row written again (a batch retried after its commit was lost in transit, or the same
/// quantity recorded twice at one step) replaces the stored one: one row per key (migration
/// 0007), the later value kept, as readers kept it among twins, and the summaries of the
/// metrics such a batch holds are rebuilt from the rows.
///
/// A batch goes in as plain inserts first, and as upserts only when the key refuses one of its
/// rows: twins are rare, and on PostgreSQL `ON CONFLICT` costs every row a speculative
/// insertion (ingest about 14 % slower with it on every batch, `examples/store_scale.rs`).
const METRIC_UPSERT: &str =
    "ON CONFLICT (run_id, name, step, split) DO UPDATE SET value = excluded.value, wall_time = excluded.wall_time";
const DIAGNOSTIC_UPSERT: &str = "ON CONFLICT (run_id, name, step, iteration) DO UPDATE SET value = excluded.value";

/// Summaries of metric rows `m` (`last`: the value at the last step, the later row among
/// twins of an older store), completed by a `WHERE` and `GROUP BY run_id, split, name`.
const SUMMARIES_FROM_ROWS: &str = "INSERT INTO metric_summaries (run_id, split, name, lo, hi, last, last_step, wall) \
     SELECT run_id, split, name, MIN(value), MAX(value), \
     (SELECT value FROM metrics l WHERE l.run_id = m.run_id AND l.split = m.split AND l.name = m.name \
      ORDER BY l.step DESC, l.rowid DESC LIMIT 1), MAX(step), MAX(wall_time) \
     FROM metrics m";

/// Why a batch was not written: a row's key is stored already (write it again as upserts), or
/// another failure.
enum Unwritten {
    Twin(sqlx::Error),
    Failed(StoreError),
}

impl From<StoreError> for Unwritten {
    fn from(e: StoreError) -> Self {
        Unwritten::Failed(e)
    }
}

/// The rows a batch written with `on_conflict` sends, by index: all of them as plain inserts
/// (twins within the batch are refused by the key like any other); as upserts, the later of
/// any two with the same `key` only (one statement may not update a row twice).
fn rows_to_send<'a, T, K: Ord>(rows: &'a [T], on_conflict: &str, key: impl Fn(&'a T) -> K) -> Vec<usize> {
    if on_conflict.is_empty() {
        return (0..rows.len()).collect();
    }
    let mut last = BTreeMap::new();
    for (i, row) in rows.iter().enumerate() {
        last.insert(key(row), i);
    }
    let mut keep: Vec<usize> = last.into_values().collect();
    keep.sort_unstable();
    keep
}

impl Store {
    /// Appends metric rows in one transaction (all or nothing), and updates the run's metric
    /// summaries. NaN values are stored as NULL and read back as NaN. A row whose run, split,
    /// name and step are stored already replaces the stored one (`METRIC_UPSERT`).
    pub async fn insert_metrics(&self, run_id: i64, rows: &[MetricRow]) -> Result<(), StoreError> {
        let steps = rows.iter().map(|r| to_i64(r.step, "metric step")).collect::<Result<Vec<_>, _>>()?;
        let write = |on_conflict| self.write_metrics(run_id, rows, &steps, on_conflict);
        self.written(write("").await, || write(METRIC_UPSERT)).await
    }

    /// The outcome of a batch written as plain inserts: done, or written again through `upsert`
    /// when a row's key was stored already.
    async fn written<F: std::future::Future<Output = Result<(), Unwritten>>>(
        &self,
        plain: Result<(), Unwritten>,
        upsert: impl FnOnce() -> F,
    ) -> Result<(), StoreError> {
        let result = match plain {
            Err(Unwritten::Twin(_)) => upsert().await,
            other => other,
        };
        result.map_err(|e| match e {
            Unwritten::Twin(e) => self.err(e),
            Unwritten::Failed(e) => e,
        })
    }

    /// A failed statement of a batch written with `on_conflict` (empty: plain inserts).
    fn unwritten(&self, e: sqlx::Error, on_conflict: &str) -> Unwritten {
        let twin = matches!(&e, sqlx::Error::Database(d) if d.is_unique_violation());
        match twin && on_conflict.is_empty() {
            true => Unwritten::Twin(e),
            false => Unwritten::Failed(self.err(e)),
        }
    }

    async fn write_metrics(
        &self,
        run_id: i64,
        rows: &[MetricRow],
        steps: &[i64],
        on_conflict: &str,
    ) -> Result<(), Unwritten> {
        let mut tx = self.begin_for_run(run_id).await?;
        let columns = ["run_id", "step", "split", "name", "value", "wall_time"];
        let unique = rows_to_send(rows, on_conflict, |r| (r.step, r.split.as_str(), r.name.as_str()));
        for chunk in unique.chunks(ROWS_PER_STATEMENT) {
            let sql = multi_insert(self.backend(), "metrics", &columns, chunk.len(), on_conflict);
            let mut query = sqlx::query::<Any>(sqlx::AssertSqlSafe(sql));
            for &i in chunk {
                let row = &rows[i];
                query = query
                    .bind(run_id)
                    .bind(steps[i])
                    .bind(row.split.clone())
                    .bind(row.name.clone())
                    .bind(Float::nan_as_null(row.value))
                    .bind(Float::nan_as_null(row.wall_time));
            }
            query.execute(&mut *tx).await.map_err(|e| self.unwritten(e, on_conflict))?;
        }
        match on_conflict.is_empty() {
            true => self.add_to_summaries(&mut tx, run_id, rows, steps).await?,
            // A replaced value may have been a summary's smallest or largest: the batch's
            // summaries are rebuilt from the rows (a rare path: a batch sent again).
            false => {
                let keys: BTreeSet<(&str, &str)> = rows.iter().map(|r| (r.split.as_str(), r.name.as_str())).collect();
                for (split, name) in keys {
                    self.rebuild_summaries(&mut tx, run_id, Some((split, name))).await?;
                }
            }
        }
        tx.commit().await.map_err(|e| self.unwritten(e, on_conflict))
    }

    /// Folds a batch of metric rows into the stored summaries.
    async fn add_to_summaries(
        &self,
        tx: &mut WriteTx,
        run_id: i64,
        rows: &[MetricRow],
        steps: &[i64],
    ) -> Result<(), StoreError> {
        let mut batch: BTreeMap<(&str, &str), BatchSummary> = BTreeMap::new();
        for (row, &step) in rows.iter().zip(steps) {
            let value = (!row.value.is_nan()).then_some(row.value);
            let wall = (!row.wall_time.is_nan()).then_some(row.wall_time);
            let s = batch.entry((row.split.as_str(), row.name.as_str())).or_insert(BatchSummary {
                lo: None,
                hi: None,
                last: value,
                last_step: step,
                wall: None,
            });
            s.lo = keep(s.lo, value, |n, c| n < c);
            s.hi = keep(s.hi, value, |n, c| n > c);
            s.wall = keep(s.wall, wall, |n, c| n > c);
            // Later rows win among equal steps, as they do when reading the rows back.
            if step >= s.last_step {
                s.last_step = step;
                s.last = value;
            }
        }
        for ((split, name), s) in batch {
            sqlx::query::<Any>(
                "INSERT INTO metric_summaries (run_id, split, name, lo, hi, last, last_step, wall) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
                 ON CONFLICT (run_id, split, name) DO UPDATE SET \
                 lo = CASE WHEN excluded.lo IS NULL OR (metric_summaries.lo IS NOT NULL AND metric_summaries.lo <= excluded.lo) \
                      THEN metric_summaries.lo ELSE excluded.lo END, \
                 hi = CASE WHEN excluded.hi IS NULL OR (metric_summaries.hi IS NOT NULL AND metric_summaries.hi >= excluded.hi) \
                      THEN metric_summaries.hi ELSE excluded.hi END, \
                 last = CASE WHEN excluded.last_step >= metric_summaries.last_step THEN excluded.last \
                        ELSE metric_summaries.last END, \
                 last_step = CASE WHEN excluded.last_step >= metric_summaries.last_step THEN excluded.last_step \
                             ELSE metric_summaries.last_step END, \
                 wall = CASE WHEN excluded.wall IS NULL OR (metric_summaries.wall IS NOT NULL AND metric_summaries.wall >= excluded.wall) \
                        THEN metric_summaries.wall ELSE excluded.wall END",
            )
            .bind(run_id)
            .bind(split.to_string())
            .bind(name.to_string())
            .bind(Float(s.lo))
            .bind(Float(s.hi))
            .bind(Float(s.last))
            .bind(s.last_step)
            .bind(Float(s.wall))
            .execute(&mut **tx)
            .await
            .map_err(|e| self.err(e))?;
        }
        Ok(())
    }

    /// Rebuilds run `run_id`'s summaries from its metric rows, or only the summary of the
    /// metric `only` (split, name): after rows were deleted, replaced, or copied in from
    /// another store.
    pub(super) async fn rebuild_summaries(
        &self,
        tx: &mut WriteTx,
        run_id: i64,
        only: Option<(&str, &str)>,
    ) -> Result<(), StoreError> {
        let filter = match only {
            None => "run_id = $1",
            Some(_) => "run_id = $1 AND split = $2 AND name = $3",
        };
        for sql in [
            format!("DELETE FROM metric_summaries WHERE {filter}"),
            format!("{SUMMARIES_FROM_ROWS} WHERE {filter} GROUP BY run_id, split, name"),
        ] {
            let mut query = sqlx::query::<Any>(sqlx::AssertSqlSafe(sql)).bind(run_id);
            if let Some((split, name)) = only {
                query = query.bind(split.to_string()).bind(name.to_string());
            }
            query.execute(&mut **tx).await.map_err(|e| self.err(e))?;
        }
        Ok(())
    }

    /// Per run and per (split, metric) of every evaluation split and of the train loss: the
    /// last, smallest and largest value, the last step and wall time. Read from the summaries
    /// kept as metrics are written, so the runs table never loads or scans whole curves.
    pub async fn metric_summaries(&self) -> Result<Vec<MetricSummary>, StoreError> {
        self.summaries_where("").await
    }

    /// The summaries of the runs `ids` only (as [`Store::metric_summaries`]).
    pub async fn metric_summaries_of(&self, ids: &BTreeSet<i64>) -> Result<Vec<MetricSummary>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let list = ids.iter().map(i64::to_string).collect::<Vec<_>>().join(", ");
        self.summaries_where(&format!("run_id IN ({list}) AND")).await
    }

    /// The summaries read by the runs table; `filter` is a condition followed by `AND` (or
    /// empty), built from integers only.
    async fn summaries_where(&self, filter: &str) -> Result<Vec<MetricSummary>, StoreError> {
        let sql = format!(
            "SELECT run_id, split, name, lo, hi, last, last_step, wall FROM metric_summaries \
             WHERE {filter} (split != 'train' OR name = 'loss') ORDER BY run_id, split, name"
        );
        let rows = sqlx::query::<Any>(sqlx::AssertSqlSafe(sql)).fetch_all(&self.pool).await.map_err(|e| self.err(e))?;
        rows.iter()
            .map(|r| {
                Ok(MetricSummary {
                    run_id: self.get(r, "run_id")?,
                    split: self.get(r, "split")?,
                    name: self.get(r, "name")?,
                    min: self.get::<Option<f64>>(r, "lo")?.unwrap_or(f64::NAN),
                    max: self.get::<Option<f64>>(r, "hi")?.unwrap_or(f64::NAN),
                    last: self.get::<Option<f64>>(r, "last")?.unwrap_or(f64::NAN),
                    last_step: self.to_u64(self.get(r, "last_step")?, "metric step")?,
                    wall_time: self.get::<Option<f64>>(r, "wall")?.unwrap_or(f64::NAN),
                })
            })
            .collect()
    }

    /// Appends diagnostic rows in one transaction (all or nothing); a row whose run, name, step
    /// and iteration are stored already replaces the stored one (`DIAGNOSTIC_UPSERT`).
    pub async fn insert_diagnostics(&self, run_id: i64, rows: &[DiagnosticRow]) -> Result<(), StoreError> {
        let steps = rows.iter().map(|r| to_i64(r.step, "diagnostic step")).collect::<Result<Vec<_>, _>>()?;
        let write = |on_conflict| self.write_diagnostics(run_id, rows, &steps, on_conflict);
        self.written(write("").await, || write(DIAGNOSTIC_UPSERT)).await
    }

    async fn write_diagnostics(
        &self,
        run_id: i64,
        rows: &[DiagnosticRow],
        steps: &[i64],
        on_conflict: &str,
    ) -> Result<(), Unwritten> {
        let mut tx = self.begin_for_run(run_id).await?;
        let columns = ["run_id", "step", "iteration", "name", "value"];
        let unique = rows_to_send(rows, on_conflict, |r| (r.step, r.iteration, r.name.as_str()));
        for chunk in unique.chunks(ROWS_PER_STATEMENT) {
            let sql = multi_insert(self.backend(), "diagnostics", &columns, chunk.len(), on_conflict);
            let mut query = sqlx::query::<Any>(sqlx::AssertSqlSafe(sql));
            for &i in chunk {
                let row = &rows[i];
                query = query
                    .bind(run_id)
                    .bind(steps[i])
                    .bind(i64::from(row.iteration))
                    .bind(row.name.clone())
                    .bind(Float::nan_as_null(row.value));
            }
            query.execute(&mut *tx).await.map_err(|e| self.unwritten(e, on_conflict))?;
        }
        tx.commit().await.map_err(|e| self.unwritten(e, on_conflict))
    }
}
