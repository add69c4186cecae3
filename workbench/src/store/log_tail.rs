//! A run's log read as it grows (`workbench runs log N --follow`, and `train` following a
//! Slurm job): each read returns only the lines not returned before, instead of the whole
//! log every half second, which for a run of days is thousands of lines each time.
//!
//! Lines are numbered (`logs.id`) as they are inserted. On PostgreSQL a transaction that took
//! its numbers first may commit after one that took later numbers, so a reader that asked
//! only for lines after the last one it returned could skip such a line for good. Reads
//! therefore reach back over the lines returned in the last [`SETTLE`] and skip those already
//! returned; a line returned longer ago than that is settled and not asked for again.

use super::{Store, StoreError};
use sqlx::Any;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// How long after a line is read an earlier-numbered line may still commit.
pub const SETTLE: Duration = Duration::from_secs(5);

/// The unread part of one run's log.
#[derive(Debug)]
pub struct LogTail {
    run_id: i64,
    /// Lines numbered up to this one have all been returned (or skipped on purpose).
    settled: i64,
    /// Lines returned and not yet settled, with when they were read.
    recent: BTreeMap<i64, Instant>,
}

impl LogTail {
    /// A tail whose first read returns the whole log.
    pub fn new(run_id: i64) -> LogTail {
        LogTail { run_id, settled: 0, recent: BTreeMap::new() }
    }

    /// A tail that starts with the last `last` lines logged so far, returned with it; its
    /// reads return what comes after them.
    pub async fn from_last(store: &Store, run_id: i64, last: usize) -> Result<(LogTail, Vec<String>), StoreError> {
        let mut tail = LogTail::new(run_id);
        let rows = store.log_lines(run_id, 0, Some(last)).await?;
        // The lines before the last `last` are left out on purpose.
        if let Some(&(first, _)) = rows.first() {
            tail.settled = first - 1;
        }
        let lines = tail.accept(rows);
        Ok((tail, lines))
    }

    /// The lines logged since the last read (or [`LogTail::from_last`]), oldest first.
    pub async fn read(&mut self, store: &Store) -> Result<Vec<String>, StoreError> {
        let rows = store.log_lines(self.run_id, self.settled, None).await?;
        Ok(self.accept(rows))
    }

    /// The lines of `rows` not returned before, remembered as returned now; settles those
    /// returned more than [`SETTLE`] ago.
    fn accept(&mut self, rows: Vec<(i64, String)>) -> Vec<String> {
        let now = Instant::now();
        let mut fresh = Vec::new();
        for (id, line) in rows {
            if id > self.settled && !self.recent.contains_key(&id) {
                self.recent.insert(id, now);
                fresh.push(line);
            }
        }
        while let Some((&id, &at)) = self.recent.first_key_value() {
            if now.duration_since(at) < SETTLE {
                break;
            }
            self.settled = id;
            self.recent.remove(&id);
        }
        fresh
    }
}

impl Store {
    /// A run's log lines numbered after `after`, with their numbers, oldest first; with
    /// `last`, only the last `last` of them.
    pub async fn log_lines(
        &self,
        run_id: i64,
        after: i64,
        last: Option<usize>,
    ) -> Result<Vec<(i64, String)>, StoreError> {
        self.ensure_exists(run_id).await?;
        let limit = last.map_or(i64::MAX, |n| i64::try_from(n).unwrap_or(i64::MAX));
        sqlx::query_as::<Any, (i64, String)>(
            "SELECT id, line FROM (SELECT id, line FROM logs WHERE run_id = $1 AND id > $2 \
             ORDER BY id DESC LIMIT $3) AS tail ORDER BY id",
        )
        .bind(run_id)
        .bind(after)
        .bind(limit)
        .fetch_all(&self.pool)
        .await
        .map_err(|e| self.err(e))
    }
}
