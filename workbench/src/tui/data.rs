//! What the screens show: snapshots of the store and of the plugin host, owned by the UI
//! thread and replaced wholesale when the background service sends newer ones.

use crate::host::PluginHost;
use crate::store::{DiagnosticRow, MetricRow, MetricSummary, RunRecord};
use plugin_api::{Declaration, PluginKind};
use std::collections::HashMap;
use std::path::PathBuf;

/// The runs table and its per-run metric summaries.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Every run, by id.
    pub runs: Vec<RunRecord>,
    /// Per run id, its metric summaries.
    pub summaries: HashMap<i64, Vec<MetricSummary>>,
    /// Sweep names by sweep id.
    pub sweeps: HashMap<i64, String>,
    /// False until the first snapshot arrived (the welcome screen waits for it).
    pub loaded: bool,
}

impl Snapshot {
    /// The run with this id.
    pub fn run(&self, id: i64) -> Option<&RunRecord> {
        self.runs.iter().find(|r| r.id == id)
    }

    /// How long `run` has trained, by its training clock where its metrics carry one
    /// (`ops::elapsed::training_seconds`).
    pub fn training_seconds(&self, run: &RunRecord, now: f64) -> Option<f64> {
        let clock = self.summaries.get(&run.id).and_then(|s| crate::ops::elapsed::clock_of(s));
        crate::ops::elapsed::training_seconds(run, clock, now)
    }

    /// The best value of the run's headline metric at the training depth, with its name.
    pub fn best_headline(&self, run: &RunRecord) -> Option<(String, f64)> {
        crate::ops::ended::best_headline(run, self.summaries.get(&run.id)?)
    }

    /// The last train loss and the wall time at that point.
    pub fn train_loss(&self, id: i64) -> Option<&MetricSummary> {
        self.summaries.get(&id)?.iter().find(|s| s.split == "train" && s.name == "loss")
    }
}

/// Curves, diagnostics and recent log lines of one run.
#[derive(Debug, Clone, Default)]
pub struct RunData {
    pub metrics: Vec<MetricRow>,
    pub diagnostics: Vec<DiagnosticRow>,
    pub logs: Vec<String>,
}

/// A loaded plugin as the Plugins and Launch screens need it.
#[derive(Debug, Clone)]
pub struct PluginInfo {
    pub name: String,
    pub kind: PluginKind,
    pub version: String,
    pub description: String,
    pub path: PathBuf,
    pub params: Vec<plugin_api::ParamSpec>,
}

/// A library that did not load, and why.
#[derive(Debug, Clone)]
pub struct PluginFailure {
    pub path: PathBuf,
    pub reason: String,
}

/// What the Plugins screen lists.
#[derive(Debug, Clone, Default)]
pub struct PluginList {
    pub plugins: Vec<PluginInfo>,
    pub failures: Vec<PluginFailure>,
    /// Which workspace plugins are built in (`workspace: /path (from ...)`), if any.
    pub workspace: Option<String>,
}

impl PluginList {
    /// The plugins and load errors of a host.
    pub fn of(host: &PluginHost) -> PluginList {
        PluginList {
            plugins: host.plugins.iter().map(|p| info(&p.declaration, p.path.clone())).collect(),
            failures: host
                .errors
                .iter()
                .map(|e| PluginFailure { path: e.path().to_path_buf(), reason: e.to_string() })
                .collect(),
            workspace: crate::host::workspace().map(|w| w.describe()),
        }
    }

    /// Names of the plugins of one kind, in load order.
    pub fn names(&self, kind: PluginKind) -> Vec<String> {
        self.plugins.iter().filter(|p| p.kind == kind).map(|p| p.name.clone()).collect()
    }

    /// The plugin called `name`.
    pub fn get(&self, name: &str) -> Option<&PluginInfo> {
        self.plugins.iter().find(|p| p.name == name)
    }
}

fn info(d: &Declaration, path: PathBuf) -> PluginInfo {
    PluginInfo {
        name: d.name.clone(),
        kind: d.kind(),
        version: d.version.clone(),
        description: d.description.clone(),
        path,
        params: d.params.clone(),
    }
}
