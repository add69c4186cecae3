//! What a worker writes to the store while it trains (log lines, metric rows, diagnostics,
//! the record of its latest checkpoint, its progress), written from the worker's background
//! thread (beside its heartbeat: [`super::background`]) so that the training loop never waits
//! for the store (except before a checkpoint, for the rows it covers: [`Outbox::sync`]). A
//! write that fails in a way that may pass (the server restarting, the network away, another
//! writer holding the lock) keeps what it could not write and tries again, so an outage
//! shorter than [`OUTAGE_LIMIT`](crate::store::OUTAGE_LIMIT) costs the run nothing; after a
//! longer one, or a failure that would not pass, the run ends with the error and its
//! checkpoint on disk.
//!
//! A write whose commit was lost in transit (the connection dropped after the server
//! committed) is written again: its metric and diagnostic rows replace themselves (the store
//! keeps one row per key), and its log lines, numbered by the writer, are skipped.

use super::background::{Background, SharedStore};
use crate::store::{DiagnosticRow, MetricRow, Store, StoreError, StoreOutage};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often the writer writes what was pushed (sooner when [`ROWS_PER_WRITE`] are waiting).
const WRITE_EVERY: Duration = Duration::from_secs(2);

/// Rows that wake the writer before its time.
const ROWS_PER_WRITE: usize = 500;

/// How often a failing write is tried again.
const RETRY_EVERY: Duration = Duration::from_secs(1);

/// The worker's writes, and the task that makes them.
pub struct Outbox {
    shared: Arc<Shared>,
    writer: Option<tokio::task::JoinHandle<()>>,
}

struct Shared {
    state: Mutex<State>,
    /// Wakes the writer before its time.
    wake: tokio::sync::Notify,
    /// Told after each write, for [`Outbox::sync`].
    wrote: tokio::sync::Notify,
}

#[derive(Default)]
struct State {
    pending: Pending,
    /// Whether writes are failing, and since when.
    outage: StoreOutage,
    /// The error that ended the writes: out of reach for longer than the limit, or a failure
    /// that would not pass.
    failed: Option<String>,
    /// No more pushes: write what is left, then end.
    closing: bool,
    /// End without writing what is left.
    abandoned: bool,
    /// A batch taken from `pending` is being written.
    in_flight: bool,
    /// The last write found the run's lease not this worker's (what waits is kept).
    lease_away: bool,
    /// The number of the next log line.
    next_line: u64,
}

impl State {
    fn push_line(&mut self, line: String) {
        self.pending.logs.push((self.next_line, line));
        self.next_line += 1;
    }
}

/// Where the writer writes: the run, the name its log lines carry, the checkpoint's path,
/// and the worker whose lease the writes need.
struct Target {
    run_id: i64,
    /// The worker process: each batch is written only while it holds the run's lease.
    pid: u32,
    /// Set by the worker's heartbeat when the lease is lost: the writer ends, writing nothing.
    lease_lost: Arc<AtomicBool>,
    /// Unique to this writer (host, process, run, start time): with each line's number, the
    /// key that keeps a log batch written again from being stored twice.
    writer: String,
    /// The checkpoint's path as its artifact row records it.
    checkpoint_file: String,
}

/// What is waiting to be written.
#[derive(Default)]
struct Pending {
    /// Lines of the run's log, each with its number.
    logs: Vec<(u64, String)>,
    rows: Vec<MetricRow>,
    diagnostics: Vec<DiagnosticRow>,
    /// The step of the latest checkpoint written to disk and not yet recorded.
    checkpoint: Option<u64>,
    /// The last step trained, not yet recorded.
    progress: Option<u64>,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.logs.is_empty()
            && self.rows.is_empty()
            && self.diagnostics.is_empty()
            && self.checkpoint.is_none()
            && self.progress.is_none()
    }

    /// Puts back what a failed write left (`self`, older) before what was pushed meanwhile.
    fn put_back(self, newer: &mut Pending) {
        let mut logs = self.logs;
        logs.append(&mut newer.logs);
        newer.logs = logs;
        let mut rows = self.rows;
        rows.append(&mut newer.rows);
        newer.rows = rows;
        let mut diagnostics = self.diagnostics;
        diagnostics.append(&mut newer.diagnostics);
        newer.diagnostics = diagnostics;
        newer.checkpoint = newer.checkpoint.or(self.checkpoint);
        newer.progress = newer.progress.or(self.progress);
    }

    /// Writes everything, clearing each part once it is stored: on an error what is left
    /// is what was not written.
    async fn write(&mut self, store: &Store, target: &Target) -> Result<(), StoreError> {
        let run_id = target.run_id;
        if !self.logs.is_empty() {
            store.append_numbered_logs(run_id, &target.writer, &self.logs).await?;
            self.logs.clear();
        }
        if !self.rows.is_empty() {
            store.insert_metrics(run_id, &self.rows).await?;
            self.rows.clear();
        }
        if !self.diagnostics.is_empty() {
            store.insert_diagnostics(run_id, &self.diagnostics).await?;
            self.diagnostics.clear();
        }
        if let Some(step) = self.checkpoint {
            store.add_artifact(run_id, "checkpoint", &target.checkpoint_file, Some(step)).await?;
            self.checkpoint = None;
        }
        if let Some(step) = self.progress {
            store.set_progress(run_id, step).await?;
            self.progress = None;
        }
        Ok(())
    }
}

impl Outbox {
    /// Starts the writer of run `run_id` on the worker's [`Background`] thread, beside the
    /// heartbeat and through the same connection: a training step blocks the runtime it runs
    /// on. `checkpoint_file` is the checkpoint's path as its artifact row records it. The
    /// writer writes only while this process holds the run's lease ([`Store::holds_lease`],
    /// asked before each batch): while it does not, what waits is kept, until the heartbeat
    /// takes the run back or sets `lease_lost` (then the writer ends, writing nothing more).
    pub fn start(background: &Background, run_id: i64, checkpoint_file: String, lease_lost: Arc<AtomicBool>) -> Outbox {
        let state =
            State { outage: StoreOutage::new("training goes on and what it records is kept"), ..State::default() };
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            wake: tokio::sync::Notify::new(),
            wrote: tokio::sync::Notify::new(),
        });
        let (store, theirs) = (background.store(), shared.clone());
        let started = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let writer = format!("{}/{}/{run_id}/{}", crate::store::this_host(), std::process::id(), started.as_nanos());
        let target = Target { run_id, pid: std::process::id(), lease_lost, writer, checkpoint_file };
        let writer = background.spawn(async move { write_until_closed(store, target, &theirs).await });
        Outbox { shared, writer: Some(writer) }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        lock(&self.shared)
    }

    /// A metric value at `step`.
    pub fn push(&self, step: u64, split: &str, name: &str, value: f64, wall_time: f64) {
        let waiting = {
            let mut state = self.state();
            state.pending.rows.push(MetricRow { step, split: split.into(), name: name.into(), value, wall_time });
            state.pending.rows.len()
        };
        if waiting >= ROWS_PER_WRITE {
            self.shared.wake.notify_one();
        }
    }

    /// A line of the run's log.
    pub fn push_log(&self, line: String) {
        self.state().push_line(line);
    }

    /// Diagnostics of an evaluation.
    pub fn push_diagnostics(&self, rows: Vec<DiagnosticRow>) {
        self.state().pending.diagnostics.extend(rows);
    }

    /// The checkpoint of `step`, written to disk, to record.
    pub fn checkpoint(&self, step: u64) {
        self.state().pending.checkpoint = Some(step);
    }

    /// The last step trained.
    pub fn progress(&self, step: u64) {
        self.state().pending.progress = Some(step);
    }

    /// Waits until everything pushed so far is written, as before a checkpoint, so that a
    /// worker killed after it loses none of the rows the checkpoint covers. Returns at once
    /// while writes fail (the store out of reach) or the run's lease is not this worker's:
    /// training does not wait for the store.
    pub async fn sync(&self) {
        loop {
            {
                let state = self.state();
                let waiting = !state.pending.is_empty() || state.in_flight;
                if state.outage.is_out() || state.lease_away || state.abandoned || state.failed.is_some() || !waiting {
                    return;
                }
            }
            let wrote = self.shared.wrote.notified();
            self.shared.wake.notify_one();
            // A write that ended between the check and here was told to no one: look again soon.
            let _ = tokio::time::timeout(Duration::from_millis(50), wrote).await;
        }
    }

    /// The error that ended the writes, if they ended: the run cannot go on recording.
    pub fn failed(&self) -> Option<String> {
        self.state().failed.clone()
    }

    /// Writes everything still waiting (trying again while the store is out of reach, up to
    /// the limit) and ends the writer; the error if something could not be written.
    pub async fn close(mut self) -> Result<(), String> {
        self.state().closing = true;
        self.shared.wake.notify_one();
        if let Some(writer) = self.writer.take() {
            let _ = writer.await;
        }
        match self.state().failed.clone() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Drop for Outbox {
    /// Without [`close`](Self::close) (the run is no longer this worker's, or the worker is
    /// ending on an error it reports itself): the writer ends without writing what waits.
    fn drop(&mut self) {
        if self.writer.is_some() {
            let mut state = self.state();
            state.abandoned = true;
            state.closing = true;
        }
        self.shared.wake.notify_one();
    }
}

fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, State> {
    shared.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The writer: every [`WRITE_EVERY`] (or when woken) writes what is waiting; a failure that
/// may pass keeps it for the next try, until [`OUTAGE_LIMIT`](crate::store::OUTAGE_LIMIT).
async fn write_until_closed(store: SharedStore, target: Target, shared: &Shared) {
    let run_id = target.run_id;
    loop {
        let (mut batch, closing) = {
            let mut state = lock(shared);
            if target.lease_lost.load(Ordering::Relaxed) {
                state.abandoned = true;
            }
            if state.abandoned {
                return;
            }
            let batch = std::mem::take(&mut state.pending);
            state.in_flight = !batch.is_empty();
            (batch, state.closing)
        };
        if batch.is_empty() && closing {
            break;
        }
        if !batch.is_empty() {
            let result = write_batch(&store, &mut batch, &target).await;
            let ended = {
                let mut state = lock(shared);
                state.in_flight = false;
                match result {
                    Ok(Written::NotHeld) => {
                        batch.put_back(&mut state.pending);
                        state.lease_away = true;
                        false
                    }
                    Ok(Written::All) => {
                        state.lease_away = false;
                        let mut said = None;
                        state.outage.answered(|note| said = Some(note));
                        if let Some(note) = said {
                            note_in_log(&mut state, run_id, format!("{note}; what was kept meanwhile is written"));
                        }
                        false
                    }
                    Err((e, passing)) => {
                        batch.put_back(&mut state.pending);
                        record_failure(&mut state, run_id, &e, passing)
                    }
                }
            };
            shared.wrote.notify_waiters();
            if ended {
                return;
            }
        }
        pause(shared).await;
    }
}

/// What became of a batch.
enum Written {
    /// All of it is in the store.
    All,
    /// None of it: the run's lease is not this worker's now (kept for when it is again).
    NotHeld,
}

/// Writes `batch` through the store handle the writer shares with the heartbeat, opened at
/// its first use: opening may fail as a write does (the server restarting, or out of
/// connections for now), and is tried again the same way. The error comes with whether it
/// may pass. Nothing is written unless this worker holds the run's lease.
async fn write_batch(store: &SharedStore, batch: &mut Pending, target: &Target) -> Result<Written, (StoreError, bool)> {
    let opened = &store.get().await.map_err(|e| (e, true))?;
    let with_passing = |e: StoreError| {
        let passing = e.is_passing();
        (e, passing)
    };
    if !opened.holds_lease(target.run_id, target.pid).await.map_err(with_passing)? {
        return Ok(Written::NotHeld);
    }
    batch.write(opened, target).await.map_err(with_passing)?;
    Ok(Written::All)
}

/// A line about the store's reach: on stderr at once, in the run's log with the next write.
fn note_in_log(state: &mut State, run_id: i64, note: String) {
    super::worker::log_line(run_id, &note);
    state.push_line(note);
}

/// Until the next write is due ([`WRITE_EVERY`], or [`RETRY_EVERY`] while writes fail), or
/// the writer is woken.
async fn pause(shared: &Shared) {
    let pause = if lock(shared).outage.is_out() { RETRY_EVERY } else { WRITE_EVERY };
    tokio::select! {
        _ = tokio::time::sleep(pause) => {}
        _ = shared.wake.notified() => {}
    }
}

/// Notes a failed write; returns whether the writes end here (the failure will not pass, or
/// the store has been out of reach for longer than the limit).
fn record_failure(state: &mut State, run_id: i64, error: &StoreError, passing: bool) -> bool {
    let mut said = None;
    let verdict = state.outage.failed(error, passing, |note| said = Some(note));
    if let Some(note) = said {
        note_in_log(state, run_id, note);
    }
    match verdict {
        Ok(()) => false,
        Err(why) => {
            state.failed = Some(match passing {
                true => format!("{why} ({error})"),
                false => format!("cannot record the run's progress: {why}"),
            });
            true
        }
    }
}

/// `write` tried again every `RETRY_EVERY` while it fails in a way that may pass, for at
/// most [`OUTAGE_LIMIT`](crate::store::OUTAGE_LIMIT) ([`StoreOutage`], which `say`s when the store goes and comes back):
/// a run's last word (its final status) is worth waiting for, and so is its start. `going_on`
/// says what happens meanwhile.
pub async fn with_retries<T, F, Fut>(going_on: &'static str, mut write: F, say: impl Fn(String)) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, StoreError>>,
{
    let mut outage = StoreOutage::new(going_on);
    loop {
        if let Some(value) = outage.pass(write().await.map_err(anyhow::Error::from), &say)? {
            return Ok(value);
        }
        tokio::time::sleep(RETRY_EVERY).await;
    }
}
