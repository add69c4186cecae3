//! What differs between two runs: configuration values, plugin builds and final metrics.

use crate::run_config::flatten_configs;
use crate::store::{PluginRef, RunRecord, Store};
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// A value of run A beside the same value of run B (`None`: the run has no such value).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Pair<T> {
    pub a: Option<T>,
    pub b: Option<T>,
}

/// One differing configuration key (named as the runs table and the filter name it).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConfigDiff {
    pub key: String,
    #[serde(flatten)]
    pub values: Pair<String>,
}

/// The layer or the task of both runs, when they differ.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PluginDiff {
    /// `layer` or `task`.
    pub role: &'static str,
    pub a: PluginRef,
    pub b: PluginRef,
}

/// The last value of one metric in both runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MetricDiff {
    pub split: String,
    pub name: String,
    #[serde(flatten)]
    pub values: Pair<f64>,
}

/// Two runs compared.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunDiff {
    pub a: i64,
    pub b: i64,
    /// Configuration keys whose values differ (or that one run lacks).
    pub config: Vec<ConfigDiff>,
    /// Plugins whose name, version, interface fingerprint or build differ.
    pub plugins: Vec<PluginDiff>,
    /// Every final metric of either run (evaluation splits and the train loss), both values.
    pub metrics: Vec<MetricDiff>,
}

/// Compares runs `a` and `b`.
pub async fn diff(store: &Store, a: i64, b: i64) -> Result<RunDiff> {
    if a == b {
        bail!("runs diff needs two different runs: both are {a}");
    }
    let ra = store.run(a).await?;
    let rb = store.run(b).await?;
    let ids = BTreeSet::from([a, b]);
    let mut metrics: BTreeMap<(String, String), Pair<f64>> = BTreeMap::new();
    for s in store.metric_summaries_of(&ids).await.context("reading the runs' metrics")? {
        if !compared(&s.split, &s.name) {
            continue;
        }
        let pair = metrics.entry((s.split, s.name)).or_insert(Pair { a: None, b: None });
        if s.run_id == a {
            pair.a = Some(s.last);
        } else {
            pair.b = Some(s.last);
        }
    }
    Ok(RunDiff {
        a,
        b,
        config: config_diff(&ra, &rb),
        plugins: plugin_diff(&ra, &rb),
        metrics: metrics.into_iter().map(|((split, name), values)| MetricDiff { split, name, values }).collect(),
    })
}

/// Whether a metric is worth a row: every task metric, and of the system metrics only the
/// two that describe the run rather than the moment of a sample.
fn compared(split: &str, name: &str) -> bool {
    use crate::train::system;
    split != system::SPLIT || name == system::PEAK || name == system::EVAL_EXAMPLES
}

fn config_diff(a: &RunRecord, b: &RunRecord) -> Vec<ConfigDiff> {
    let [fa, fb]: [BTreeMap<String, String>; 2] =
        flatten_configs(&[&a.config, &b.config]).try_into().expect("two configurations give two");
    let keys: BTreeSet<&String> = fa.keys().chain(fb.keys()).collect();
    keys.into_iter()
        .filter(|k| fa.get(*k) != fb.get(*k))
        .map(|k| ConfigDiff { key: k.clone(), values: Pair { a: fa.get(k).cloned(), b: fb.get(k).cloned() } })
        .collect()
}

fn plugin_diff(a: &RunRecord, b: &RunRecord) -> Vec<PluginDiff> {
    [("layer", &a.layer, &b.layer), ("task", &a.task, &b.task)]
        .into_iter()
        .filter(|(_, x, y)| x != y)
        .map(|(role, x, y)| PluginDiff { role, a: x.clone(), b: y.clone() })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{compared, config_diff};
    use crate::store::RunRecord;
    use serde_json::json;

    /// The trainer's `beta2` of a Transformer run and of a Hyper-SET run (which also has a
    /// layer `beta2`) is one setting: equal values are no difference.
    #[test]
    fn a_setting_is_named_alike_in_both_runs() {
        let hyperset = RunRecord::fixture(
            1,
            "hyperset",
            json!({"layer_config": {"beta2": 0.99, "d": 64}, "task_config": {}, "train": {"beta2": 0.95}}),
        );
        let transformer = RunRecord::fixture(
            2,
            "transformer",
            json!({"layer_config": {"d": 64}, "task_config": {}, "train": {"beta2": 0.95}}),
        );
        let keys: Vec<String> = config_diff(&hyperset, &transformer).into_iter().map(|d| d.key).collect();
        assert_eq!(keys, ["layer.beta2"]);
    }

    #[test]
    fn diffs_leave_out_the_momentary_system_samples() {
        assert!(compared("eval", "cell_acc") && compared("train", "loss") && compared("eval@4", "loss"));
        assert!(compared("sys", "peak_rss_bytes") && compared("sys", "eval_examples"));
        assert!(!compared("sys", "cpu_percent") && !compared("sys", "rss_bytes") && !compared("sys", "threads"));
    }
}
