//! The long table of CSV and JSON lines exports: one row per stored value.
//!
//! Columns, in order: `run`, `sweep`, `layer`, `task`, `status`, `tags`, `kind` (`metric` or
//! `diagnostic`), `split` (`train`, `eval`, `eval@K`; empty for diagnostics), `name`, `step`,
//! `iteration` (the layer iteration of a diagnostic; empty for metrics), `value`, `wall_time`
//! (the run's training clock in seconds, `MetricRow::wall_time`; empty for diagnostics), then
//! one `config.KEY` column per configuration key of any exported run, named as in the runs
//! table and the filter (`d`, `lr`, `layer.seed` where a key is in several sections).
//! A row per value (rather than a column per metric) keeps every step of every curve and
//! reads straight into `pandas.read_csv` for `groupby`/`pivot`.

use super::RunData;
use crate::run_config::ConfigNames;
use crate::store::RunRecord;
use std::collections::{BTreeMap, BTreeSet};

/// The fixed columns, before the configuration's.
pub const COLUMNS: [&str; 13] = [
    "run",
    "sweep",
    "layer",
    "task",
    "status",
    "tags",
    "kind",
    "split",
    "name",
    "step",
    "iteration",
    "value",
    "wall_time",
];

/// Prefix of the configuration columns.
pub const CONFIG_PREFIX: &str = "config.";

/// The configuration keys of `runs` under `names`, sorted: the table's `config.KEY` columns.
pub fn config_keys(runs: &[RunRecord], names: &ConfigNames) -> Vec<String> {
    let keys: BTreeSet<String> = runs.iter().flat_map(|r| names.flatten(&r.config).into_keys()).collect();
    keys.into_iter().collect()
}

/// What a run contributes to every one of its rows.
pub struct RunColumns {
    pub run: i64,
    pub sweep: Option<i64>,
    pub layer: String,
    pub task: String,
    pub status: String,
    /// Comma-separated.
    pub tags: String,
    /// Flattened configuration (key → value as text).
    pub config: BTreeMap<String, String>,
}

impl RunColumns {
    /// Run `r`'s columns, its configuration under `names` (those of every run exported).
    pub fn of(r: &RunRecord, names: &ConfigNames) -> RunColumns {
        RunColumns {
            run: r.id,
            sweep: r.sweep.map(|s| s.id),
            layer: r.layer.name.clone(),
            task: r.task.name.clone(),
            status: r.status.to_string(),
            tags: r.tags.join(","),
            config: names.flatten(&r.config),
        }
    }
}

/// One value: a metric (with its split and wall time) or a diagnostic (with its iteration).
pub struct Row<'a> {
    pub kind: &'static str,
    pub split: &'a str,
    pub name: &'a str,
    pub step: u64,
    pub iteration: Option<u32>,
    pub value: f64,
    pub wall_time: Option<f64>,
}

/// Every row of a run: its metrics in stored order, then its diagnostics.
pub fn rows(data: &RunData) -> impl Iterator<Item = Row<'_>> {
    let metrics = data.metrics.iter().map(|m| Row {
        kind: "metric",
        split: &m.split,
        name: &m.name,
        step: m.step,
        iteration: None,
        value: m.value,
        wall_time: Some(m.wall_time),
    });
    let diagnostics = data.diagnostics.iter().map(|d| Row {
        kind: "diagnostic",
        split: "",
        name: &d.name,
        step: d.step,
        iteration: Some(d.iteration),
        value: d.value,
        wall_time: None,
    });
    metrics.chain(diagnostics)
}
