//! The background service: the only part of the TUI that touches the database, the worker
//! processes and the file system. The UI thread sends [`Request`]s and receives [`Update`]s,
//! so drawing and keys never wait on I/O, however many rows a worker writes. Each request that
//! changes runs is one call of [`crate::ops`], worded as a status-bar line.

use super::data::{RunData, Snapshot};
use super::evaluation;
use crate::ablation::Format;
use crate::ops::{self, export};
use crate::queue::QueueRunner;
use crate::store::{MetricRow, NewRun, Refreshed, RunStatus, RunsFollower, Store};
use crate::train::stop::DEFAULT_GRACE;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::mpsc::Sender;
use std::time::Duration;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

/// How often the runs table and the watched runs are re-read.
const REFRESH: Duration = Duration::from_millis(500);
/// Log lines kept per watched run.
const LOG_LINES: usize = 200;

/// What the UI asks for.
#[derive(Debug, Clone)]
pub enum Request {
    /// Re-read the runs table now.
    Refresh,
    /// Keep these runs' curves, diagnostics and logs loaded (replaces the previous set).
    Watch(Vec<i64>),
    /// Queue these runs (several become one sweep `name`, declared by `spec`, as `workbench
    /// sweep` stores one); the queue starts them.
    Launch { runs: Vec<NewRun>, name: String, spec: crate::ops::grid::Spec },
    /// Pause or release every queued run of this run's sweep.
    PauseSweep(i64),
    /// Pause (`held`) or release these queued runs.
    Hold { ids: Vec<i64>, held: bool },
    /// Stop a running run (it becomes `interrupted` and keeps its data).
    Cancel(i64),
    /// Requeue an interrupted or failed run; the queue continues it from its checkpoint.
    Resume(i64),
    /// Run up to this many workers at once from now on.
    Workers(usize),
    /// Delete runs and their data.
    Delete(Vec<i64>),
    /// Replace a run's notes and tags.
    Annotate { id: i64, notes: String, tags: Vec<String> },
    /// Edit the tags of several runs.
    Retag { ids: Vec<i64>, edit: ops::runs::TagEdit },
    /// Score these runs' checkpoints again with `overrides` (`key=value`), each as a new run,
    /// in a `workbench eval` process of its own.
    Evaluate { ids: Vec<i64>, overrides: Vec<String> },
    /// Write the Compare panels of these runs to an image file (`out`, or `out` with a numeric
    /// suffix when it exists).
    ExportPlot { runs: Vec<i64>, out: PathBuf },
    /// Write the ablation table of these runs (to `out` as for `ExportPlot`).
    /// The ablation table of `runs`, in the order the screen shows it.
    ExportAblation { runs: Vec<i64>, format: Format, sort: Option<export::TableSort>, out: PathBuf },
    /// Draw the heatmap of these runs' `metric` over `rows` × `columns` (to `out` as for
    /// `ExportPlot`).
    ExportHeatmap { runs: Vec<i64>, rows: String, columns: String, metric: String, out: PathBuf },
}

/// What the service reports.
#[derive(Debug, Clone)]
pub enum Update {
    /// A fresh runs table.
    Runs(Snapshot),
    /// Fresh data of a watched run.
    Run(i64, RunData),
    /// Something worth a line in the status bar.
    Info(String),
    /// Something that failed, with the reason.
    Error(String),
    /// What the hot-reload watcher reports (a reloaded plugin, cargo's output, a failure).
    Plugins(crate::host::WatchEvent),
}

/// Starts the service on the tokio runtime; returns the request sender.
pub fn spawn(
    store: Store,
    plugin_dirs: Vec<PathBuf>,
    queue: super::Queue,
    updates: Sender<Update>,
) -> UnboundedSender<Request> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let queue = QueueRunner::new(store.clone(), plugin_dirs.clone(), queue.jobs)
        .with_executor(queue.executor)
        .with_claims(queue.claims);
    tokio::spawn(
        Service {
            store,
            plugin_dirs,
            queue,
            updates,
            table: RunsFollower::new(),
            sent: false,
            waiting: None,
            watched: HashMap::new(),
            sweeps: HashMap::new(),
        }
        .run(rx),
    );
    tx
}

/// What is known of a watched run, to read only what changed.
#[derive(Default)]
struct Watched {
    data: RunData,
    /// (last step, status) when the data was read; a run whose step and status did not move
    /// is not read again.
    seen: Option<(u64, RunStatus, usize)>,
}

struct Service {
    store: Store,
    /// Where commands started from the TUI find the plugins (`eval`).
    plugin_dirs: Vec<PathBuf>,
    queue: QueueRunner,
    updates: Sender<Update>,
    /// The runs table, read incrementally.
    table: RunsFollower,
    /// Whether the UI has a snapshot (the first one is sent even for an empty store).
    sent: bool,
    /// The queue runner's reason for starting nothing, as last told to the UI.
    waiting: Option<String>,
    watched: HashMap<i64, Watched>,
    /// Sweep names by id, for the runs table (read again only when a new sweep appears).
    sweeps: HashMap<i64, String>,
}

impl Service {
    async fn run(mut self, mut rx: UnboundedReceiver<Request>) {
        let mut tick = tokio::time::interval(REFRESH);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                request = rx.recv() => match request {
                    Some(request) => {
                        if let Err(e) = self.handle(request).await {
                            self.send(Update::Error(format!("{e:#}")));
                        }
                        self.refresh().await;
                    }
                    None => return, // the UI has gone
                },
                _ = tick.tick() => self.refresh().await,
            }
        }
    }

    fn send(&self, update: Update) {
        let _ = self.updates.send(update);
    }

    async fn refresh(&mut self) {
        if let Err(e) = self.refresh_inner().await {
            self.send(Update::Error(format!("reading {}: {e:#}", self.store.location())));
        }
    }

    async fn refresh_inner(&mut self) -> anyhow::Result<()> {
        for started in self.queue.tick().await? {
            self.send(Update::Info(started.news()));
        }
        if let Some(news) = self.queue.waiting_news(&mut self.waiting) {
            self.send(if self.waiting.is_some() { Update::Error(news) } else { Update::Info(news) });
        }
        // Only the runs changed since the last refresh are read (see store::follow).
        let refreshed = self.table.refresh(&self.store).await?;
        let summaries = self.table.summaries();
        let ids: HashSet<i64> = self.table.runs().map(|r| r.id).collect();
        self.watched.retain(|id, _| ids.contains(id));
        for run in self.table.runs() {
            let Some(w) = self.watched.get_mut(&run.id) else { continue };
            let rows = summaries.get(&run.id).map_or(0, Vec::len);
            let now = (run.last_step, run.status, rows);
            if w.seen == Some(now) {
                continue;
            }
            // Rows of the last step seen may have been incomplete: read from that step on.
            let from = w.data.metrics.iter().map(|m| m.step).max();
            let fresh = match from {
                Some(step) if step > 0 => self.store.metrics_after(run.id, step - 1).await?,
                _ => self.store.metrics(run.id).await?,
            };
            merge_metrics(&mut w.data.metrics, fresh, from);
            w.data.diagnostics = self.store.diagnostics(run.id).await?;
            w.data.logs = self.store.logs(run.id, LOG_LINES).await?;
            w.seen = Some(now);
            let _ = self.updates.send(Update::Run(run.id, w.data.clone()));
        }
        if !self.sent || refreshed != Refreshed::default() {
            let runs: Vec<_> = self.table.runs().cloned().collect();
            if !self.sent {
                // Once, at the start: why runs in the queue stay queued.
                if let Some(others) = ops::runs::others_queued(&runs, &self.queue.claims) {
                    self.send(Update::Info(format!("the queue starts your runs; {others}")));
                }
            }
            if runs.iter().filter_map(|r| r.sweep.as_ref()).any(|s| !self.sweeps.contains_key(&s.id)) {
                self.sweeps = self.store.sweeps().await?.into_iter().map(|s| (s.id, s.name)).collect();
            }
            let summaries = self.table.summaries().clone();
            let sweeps = self.sweeps.clone();
            self.send(Update::Runs(Snapshot { runs, summaries, sweeps, loaded: true }));
            self.sent = true;
        }
        Ok(())
    }

    async fn handle(&mut self, request: Request) -> anyhow::Result<()> {
        match request {
            Request::Refresh => {}
            Request::Watch(ids) => {
                let keep: HashSet<i64> = ids.iter().copied().collect();
                self.watched.retain(|id, _| keep.contains(id));
                for id in ids {
                    self.watched.entry(id).or_default();
                }
            }
            Request::Launch { runs, name, spec } => {
                self.queue.executor.check_runs(&runs)?;
                ops::launch::check_starting_points(&self.store, &runs).await?;
                let ids = match runs.as_slice() {
                    [run] => vec![ops::launch::queue_run(&self.store, run).await?],
                    _ => ops::launch::queue_sweep(&self.store, &name, &spec, &runs).await?.runs,
                };
                let list = ids.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(", ");
                self.send(Update::Info(format!("queued run {list}")));
            }
            Request::PauseSweep(id) => {
                let toggled = ops::runs::toggle_hold(&self.store, id, true).await?;
                let text = match ops::runs::whose_released_sweep(&self.store, &toggled, &self.queue.claims).await? {
                    Some(whose) => format!("{}; {whose}", toggled.describe()),
                    None => toggled.describe(),
                };
                self.send(Update::Info(text));
            }
            Request::Hold { ids, held } => {
                for &id in &ids {
                    ops::runs::hold(&self.store, id, held).await?;
                }
                let word = if held { "paused" } else { "released" };
                let mut text = format!("{} {word}", crate::wording::count(ids.len(), "queued run"));
                if !held {
                    let mut runs = Vec::with_capacity(ids.len());
                    for &id in &ids {
                        runs.push(self.store.run(id).await?);
                    }
                    if let Some(whose) = ops::runs::left_to_their_users(&runs, &self.queue.claims) {
                        text = format!("{text}; {whose}");
                    }
                }
                self.send(Update::Info(text));
            }
            Request::Cancel(id) => {
                if self.store.run(id).await?.status == RunStatus::Running {
                    self.send(Update::Info(format!("run {id}: asked its worker to stop at its next step")));
                }
                // A stop waits out the grace period before it escalates: off the service's loop.
                let (store, updates) = (self.store.clone(), self.updates.clone());
                tokio::spawn(async move {
                    let message = match ops::runs::cancel(&store, id, DEFAULT_GRACE).await {
                        Ok(done) => Update::Info(done.describe(id, DEFAULT_GRACE)),
                        Err(e) => Update::Error(format!("cancelling run {id}: {e:#}")),
                    };
                    let _ = updates.send(message);
                });
            }
            Request::Resume(id) => {
                ops::runs::requeue(&self.store, id).await?;
                let run = self.store.run(id).await?;
                let text = match ops::runs::left_to_their_users([&run], &self.queue.claims) {
                    Some(whose) => format!("run {id} queued again; {whose}"),
                    None => format!("run {id} queued again; it continues from its last checkpoint"),
                };
                self.send(Update::Info(text));
            }
            Request::Workers(workers) => self.queue.jobs = workers,
            Request::Delete(ids) => {
                ops::runs::delete(&self.store, &ids, false).await?;
                self.send(Update::Info(format!("deleted {}", crate::wording::count(ids.len(), "run"))));
            }
            Request::Annotate { id, notes, tags } => {
                ops::runs::annotate(&self.store, id, Some(&notes), Some(&tags)).await?;
                self.send(Update::Info(format!("run {id}: notes and tags saved")));
            }
            Request::Retag { ids, edit } => {
                let done = ops::runs::retag(&self.store, &ids, &edit).await?;
                self.send(Update::Info(format!("{}: {}", crate::wording::count(done.len(), "run"), edit.describe())));
            }
            Request::Evaluate { ids, overrides } => {
                let child = evaluation::start(&self.store, &self.plugin_dirs, &self.queue.executor, &ids, &overrides)?;
                let listed: Vec<String> = ids.iter().map(i64::to_string).collect();
                let runs = if ids.len() == 1 { "run" } else { "runs" };
                self.send(Update::Info(format!("checking the checkpoints of {runs} {}…", listed.join(", "))));
                tokio::spawn(evaluation::report(child, self.updates.clone()));
            }
            Request::ExportPlot { runs, out } => {
                let panels =
                    crate::plot::parse_panels("loss,metric,energy,erank,angle,depth").map_err(anyhow::Error::msg)?;
                let out = ops::export_names::prepare(&out)?;
                let figure = export::plot(&self.store, &runs, &panels, &out, (1600, 900)).await?;
                self.send(Update::Info(figure.describe()));
            }
            Request::ExportAblation { runs, format, sort, out } => {
                let out = ops::export_names::prepare(&out)?;
                let selected = export::select(&self.store, &export::TableRuns::Runs(runs)).await?;
                let text = export::ablation(&self.store, &selected.records, None, sort.as_ref(), format).await?;
                export::write_text(&out, &text)?;
                self.send(Update::Info(format!("wrote {}", out.display())));
            }
            Request::ExportHeatmap { runs, rows, columns, metric, out } => {
                let out = ops::export_names::prepare(&out)?;
                let selected = export::select(&self.store, &export::TableRuns::Runs(runs)).await?;
                let grid = export::heatmap(&self.store, &selected.records, &rows, &columns, Some(&metric)).await?;
                crate::heatmap_figure::write_image(&grid, &out)?;
                self.send(Update::Info(format!("wrote {}", out.display())));
            }
        }
        Ok(())
    }
}

/// Replaces the rows at steps `>= from` with `fresh` (all rows when `from` is `None`).
fn merge_metrics(cached: &mut Vec<MetricRow>, fresh: Vec<MetricRow>, from: Option<u64>) {
    match from {
        Some(step) if step > 0 => {
            cached.retain(|m| m.step < step);
            cached.extend(fresh);
        }
        _ => *cached = fresh,
    }
}
