//! Plain data types read from and written to the run store.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::StoreError;

/// Lifecycle state of a run, stored as lower-case text in `runs.status`.
///
/// `queued` → `running` → one of the terminal states (`finished`, `failed`, `interrupted`,
/// `diverged`); `interrupted` and `failed` runs can be put back to `queued` with
/// [`Store::requeue`](super::Store::requeue).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// Created, waiting for a worker.
    Queued,
    /// A worker process is training it (see `RunRecord::worker_pid`).
    Running,
    /// Trained for all its steps.
    Finished,
    /// Stopped by an error (see `RunRecord::error`).
    Failed,
    /// Stopped before the end: cancelled, or its worker disappeared.
    Interrupted,
    /// Stopped because the loss became non-finite or exploded.
    Diverged,
}

impl RunStatus {
    /// Every status, in lifecycle order.
    pub const ALL: [RunStatus; 6] = [
        RunStatus::Queued,
        RunStatus::Running,
        RunStatus::Finished,
        RunStatus::Failed,
        RunStatus::Interrupted,
        RunStatus::Diverged,
    ];

    /// The text stored in the database and shown to users (`"queued"`, `"running"`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::Finished => "finished",
            RunStatus::Failed => "failed",
            RunStatus::Interrupted => "interrupted",
            RunStatus::Diverged => "diverged",
        }
    }

    /// True for states a run ends in (no worker is attached): finished, failed, interrupted,
    /// diverged.
    pub fn is_terminal(self) -> bool {
        !matches!(self, RunStatus::Queued | RunStatus::Running)
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RunStatus {
    type Err = StoreError;

    /// Parses a status name, ignoring case and surrounding white space.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let wanted = s.trim();
        RunStatus::ALL
            .into_iter()
            .find(|st| st.as_str().eq_ignore_ascii_case(wanted))
            .ok_or_else(|| StoreError::UnknownStatus(s.to_string()))
    }
}

/// Identity of a plugin (layer or task) a run was made with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginRef {
    /// Plugin name, e.g. `"transformer"`.
    pub name: String,
    /// Plugin's declared version.
    pub version: String,
    /// ABI fingerprint of the plugin (host/plugin compatibility).
    pub fingerprint: String,
    /// Hash of the plugin's sources; `None` until it is known.
    pub build: Option<String>,
}

/// Everything needed to create a run; see [`Store::create_run`](super::Store::create_run).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewRun {
    /// The layer plugin being trained.
    pub layer: PluginRef,
    /// The task plugin providing data and loss.
    pub task: PluginRef,
    /// Full run configuration (stored as JSON text).
    pub config: serde_json::Value,
    /// Random seed. Stored bit-for-bit in a signed 64-bit column, so every `u64` round-trips.
    pub seed: u64,
    /// Device description, e.g. `"cpu"` or `"cuda:0"`.
    pub device: String,
    /// Git revision of the workbench, if known.
    pub git_rev: Option<String>,
    /// Planned number of training steps, if known.
    pub total_steps: Option<u64>,
}

/// One row of the `runs` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// Run id (never reused, even after deletion).
    pub id: i64,
    /// Current lifecycle state.
    pub status: RunStatus,
    /// Layer plugin.
    pub layer: PluginRef,
    /// Task plugin.
    pub task: PluginRef,
    /// Run configuration.
    pub config: serde_json::Value,
    /// Random seed.
    pub seed: u64,
    /// Device description.
    pub device: String,
    /// Number of trainable parameters, once the worker has built the model.
    pub param_count: Option<u64>,
    /// Git revision of the workbench that created the run.
    pub git_rev: Option<String>,
    /// Creation time, unix seconds.
    pub created_at: f64,
    /// First time a worker started it, unix seconds.
    pub started_at: Option<f64>,
    /// When it reached its current terminal state, unix seconds.
    pub finished_at: Option<f64>,
    /// Error text for failed / interrupted / diverged runs.
    pub error: Option<String>,
    /// Process id of the worker that last ran it.
    pub worker_pid: Option<u32>,
    /// Last training step reported with [`Store::set_progress`](super::Store::set_progress).
    pub last_step: u64,
    /// Planned number of steps.
    pub total_steps: Option<u64>,
    /// Free-form notes.
    pub notes: String,
    /// Tags, in the order they were set.
    pub tags: Vec<String>,
    /// The task's metrics with their directions, the headline first (empty until a worker
    /// built the task).
    #[serde(default)]
    pub metric_specs: Vec<MetricDirection>,
    /// The sweep the run belongs to, and its place in the sweep's declared order.
    #[serde(default)]
    pub sweep: Option<SweepRef>,
    /// A paused queued run: the queue does not start it.
    #[serde(default)]
    pub held: bool,
    /// Where and how its worker runs, its lease, and why it ended abnormally.
    #[serde(default)]
    pub supervision: Supervision,
    /// The login name of the user whose command stored the run (none for runs stored before
    /// it was recorded), so that a store a lab shares tells its researchers' runs apart.
    #[serde(default)]
    pub created_by: Option<String>,
    /// Why part of the stored row could not be read (its configuration or metric list is
    /// not valid JSON), if so. The run is still listed, so one damaged row hides nothing
    /// else; it cannot be trained again.
    #[serde(default)]
    pub damage: Option<String>,
}

/// Who runs a run and how it is watched: the worker's host and its lease (heartbeats), the
/// executor and scheduler job, and the cause of an abnormal end.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Supervision {
    /// Host the worker runs (or ran) on.
    pub host: Option<String>,
    /// The worker's last heartbeat, unix seconds.
    pub heartbeat_at: Option<f64>,
    /// Why the run ended abnormally: exit code or signal, scheduler state, expired lease.
    pub cause: Option<String>,
    /// `local` or `slurm`.
    pub executor: Option<String>,
    /// The scheduler's job id.
    pub job_id: Option<String>,
    /// When a stop was asked for (the worker checkpoints and ends at its next step).
    pub stop_requested: Option<f64>,
}

/// A run's place in a sweep.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SweepRef {
    /// Sweep id.
    pub id: i64,
    /// Position in the sweep's declared order (0-based).
    pub index: u32,
}

/// One row of the `sweeps` table with its runs counted by status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepRecord {
    pub id: i64,
    pub name: String,
    /// The sweep as declared (layers, task, axes), JSON.
    pub spec: serde_json::Value,
    pub created_at: f64,
    /// Number of runs per status.
    pub counts: std::collections::BTreeMap<String, u64>,
    /// Queued runs that are paused.
    pub held: u64,
    /// Queued runs handed to a scheduler whose job has not started their worker yet (shown
    /// as `submitted`, see [`RunRecord::shown_status`]).
    #[serde(default)]
    pub submitted: u64,
}

impl RunRecord {
    /// A finished run of `layer` on Sudoku with `config`, the other fields empty: what unit
    /// tests change a few fields of (`RunRecord { seed: 1, ..RunRecord::fixture(..) }`).
    #[cfg(test)]
    pub(crate) fn fixture(id: i64, layer: &str, config: serde_json::Value) -> RunRecord {
        let plugin = |n: &str| PluginRef { name: n.into(), version: "0".into(), fingerprint: "f".into(), build: None };
        RunRecord {
            id,
            status: RunStatus::Finished,
            layer: plugin(layer),
            task: plugin("sudoku"),
            config,
            seed: 0,
            device: "cpu".into(),
            param_count: None,
            git_rev: None,
            created_at: 0.0,
            started_at: None,
            finished_at: None,
            error: None,
            worker_pid: None,
            last_step: 0,
            total_steps: None,
            notes: String::new(),
            tags: vec![],
            metric_specs: vec![],
            sweep: None,
            held: false,
            supervision: Default::default(),
            created_by: None,
            damage: None,
        }
    }

    /// The headline metric and whether higher is better: the task's first declared metric,
    /// or for runs recorded before directions were stored, `None`.
    pub fn headline(&self) -> Option<&MetricDirection> {
        self.metric_specs.first()
    }

    /// Whether larger values of `name` are better, if the task declared the metric.
    pub fn higher_is_better(&self, name: &str) -> Option<bool> {
        self.metric_specs.iter().find(|m| m.name == name).map(|m| m.higher_is_better)
    }

    /// The state a run table shows: its status, except `damaged` for a row that could not be
    /// read whole, `paused` for a held queued run, and `submitted` for a queued run handed to
    /// a scheduler whose job has not started its worker yet (the scheduler decides when).
    pub fn shown_status(&self) -> &'static str {
        if self.damage.is_some() {
            "damaged"
        } else if self.held {
            "paused"
        } else if self.status == RunStatus::Queued && self.supervision.job_id.is_some() {
            "submitted"
        } else {
            self.status.as_str()
        }
    }
}

/// A metric name and its direction, as the task declared it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetricDirection {
    /// Metric name (`cell_acc`, `top1`, `bpb`...).
    pub name: String,
    /// Whether larger values are better.
    pub higher_is_better: bool,
}

impl MetricDirection {
    /// The directions of a task's declared metrics, in their order (the headline first).
    pub fn of_task(info: &plugin_api::TaskInfo) -> Vec<MetricDirection> {
        info.metrics
            .iter()
            .map(|m| MetricDirection { name: m.name.clone(), higher_is_better: m.higher_is_better })
            .collect()
    }
}

/// Extremes and last value of one metric of one run (see
/// [`Store::metric_summaries`](super::Store::metric_summaries)).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricSummary {
    /// Run id.
    pub run_id: i64,
    /// Split (`train`, `eval`, `eval@K`).
    pub split: String,
    /// Metric name.
    pub name: String,
    /// Smallest value (NaN if none is finite).
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// Value at the last step.
    pub last: f64,
    /// Last step recorded.
    pub last_step: u64,
    /// Largest wall time recorded (the run's training clock, see [`MetricRow::wall_time`]).
    pub wall_time: f64,
}

/// One scalar metric sample.
///
/// `value` and `wall_time` may be NaN: SQLite cannot store NaN, so it is written as NULL and
/// read back as NaN. Infinities are stored as they are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricRow {
    /// Training step.
    pub step: u64,
    /// Data split, e.g. `"train"` or `"eval"`.
    pub split: String,
    /// Metric name, e.g. `"loss"`.
    pub name: String,
    /// Metric value (NaN allowed).
    pub value: f64,
    /// The run's training clock: seconds since its first training step began, continued by a
    /// resumed worker from the latest time its kept rows record (so a stop is not counted).
    pub wall_time: f64,
}

/// One per-iteration diagnostic of the energy-minimising layer (NaN values allowed, as for
/// [`MetricRow`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiagnosticRow {
    /// Training step of the evaluation.
    pub step: u64,
    /// Layer iteration `t` (0 = the input).
    pub iteration: u32,
    /// Diagnostic name, e.g. `"energy"`.
    pub name: String,
    /// Value (NaN allowed).
    pub value: f64,
}

/// A file produced by a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Artifact {
    /// Artifact id.
    pub id: i64,
    /// Run it belongs to.
    pub run_id: i64,
    /// Kind, e.g. `"checkpoint"` or `"plot"`.
    pub kind: String,
    /// File path as given to [`Store::add_artifact`](super::Store::add_artifact).
    pub path: String,
    /// Training step it was produced at, if any.
    pub step: Option<u64>,
    /// When it was recorded, unix seconds.
    pub created_at: f64,
}
