//! What differs between runs: configuration values, plugin builds and final metrics, each
//! run's value side by side in the order the runs were named.

use crate::run_config::flatten_configs;
use crate::store::{MetricSummary, PluginRef, RunRecord, Store};
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// The first run's value beside the second's, kept in the JSON of a diff of two runs as
/// `a` and `b` (the fields a diff had before it took more runs).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Pair<T> {
    pub a: T,
    pub b: T,
}

/// One value per compared run (`None`: the run has no such value), with `a` and `b` beside
/// them when two runs are compared.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Values<T> {
    pub values: Vec<Option<T>>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub pair: Option<Pair<Option<T>>>,
}

impl<T: Clone> Values<T> {
    fn new(values: Vec<Option<T>>) -> Self {
        Values { pair: pair(&values), values }
    }
}

/// One configuration key whose value is not the same in every run (named as the runs
/// table and the filter name it).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConfigDiff {
    pub key: String,
    #[serde(flatten)]
    pub values: Values<String>,
}

/// The layer or the task of every run, when their builds are not all the same.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PluginDiff {
    /// `layer` or `task`.
    pub role: &'static str,
    /// Each run's plugin.
    pub builds: Vec<PluginRef>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub pair: Option<Pair<PluginRef>>,
}

/// The last value of one metric in every run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MetricDiff {
    pub split: String,
    pub name: String,
    #[serde(flatten)]
    pub values: Values<f64>,
    /// Whether a higher value is better (as the first run's task declares it); `None` for
    /// the system's records, which have no better side.
    pub higher_is_better: Option<bool>,
}

impl MetricDiff {
    /// Which runs' values are the best finite one: ties all marked; none without a direction,
    /// nor where fewer than two runs have a value or every run has the best one (nothing sets
    /// a run apart).
    pub fn best(&self) -> Vec<bool> {
        let values = &self.values.values;
        let finite = || values.iter().flatten().copied().filter(|v| v.is_finite());
        if finite().count() < 2 {
            return vec![false; values.len()];
        }
        let best = match self.higher_is_better {
            Some(true) => finite().reduce(f64::max),
            Some(false) => finite().reduce(f64::min),
            None => None,
        };
        let marks: Vec<bool> = values.iter().map(|v| best.is_some() && *v == best).collect();
        if marks.iter().all(|m| *m) {
            return vec![false; marks.len()];
        }
        marks
    }
}

/// Runs compared.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunDiff {
    /// The runs, in the order their values are given.
    pub runs: Vec<i64>,
    /// The first and the second run, when two are compared.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub pair: Option<Pair<i64>>,
    /// Configuration keys whose values are not the same in every run (or that a run lacks).
    pub config: Vec<ConfigDiff>,
    /// Plugins whose name, version, interface fingerprint or build are not the same in
    /// every run.
    pub plugins: Vec<PluginDiff>,
    /// Every final metric of any run (evaluation splits and the train loss).
    pub metrics: Vec<MetricDiff>,
}

/// Compares `runs` (two or more, each once), their values in the order given, reading
/// their metrics from `store`.
pub async fn diff(store: &Store, runs: &[RunRecord]) -> Result<RunDiff> {
    let wanted: BTreeSet<i64> = runs.iter().map(|r| r.id).collect();
    let summaries = store.metric_summaries_of(&wanted).await.context("reading the runs' metrics")?;
    compare(&runs.iter().collect::<Vec<_>>(), &summaries)
}

/// Compares `runs` (two or more, each once) with the metric summaries at hand (the TUI's
/// snapshot holds them): summaries of other runs are passed over.
pub fn compare(runs: &[&RunRecord], summaries: &[MetricSummary]) -> Result<RunDiff> {
    let ids: Vec<i64> = runs.iter().map(|r| r.id).collect();
    if let Some(twice) = ids.iter().enumerate().find_map(|(i, id)| ids[..i].contains(id).then_some(*id)) {
        bail!("runs diff compares different runs: run {twice} is named twice");
    }
    if let [only] = ids.as_slice() {
        bail!("runs diff needs two runs or more: only run {only} was picked");
    }
    let position: BTreeMap<i64, usize> = ids.iter().enumerate().map(|(i, id)| (*id, i)).collect();
    let mut metrics: BTreeMap<(&str, &str), Vec<Option<f64>>> = BTreeMap::new();
    for s in summaries.iter().filter(|s| compared(&s.split, &s.name)) {
        if let Some(&at) = position.get(&s.run_id) {
            metrics.entry((&s.split, &s.name)).or_insert_with(|| vec![None; ids.len()])[at] = Some(s.last);
        }
    }
    Ok(RunDiff {
        pair: pair(&ids),
        runs: ids,
        config: config_diff(runs),
        plugins: plugin_diff(runs),
        metrics: metrics
            .into_iter()
            .map(|((split, name), values)| MetricDiff {
                higher_is_better: (split != crate::train::system::SPLIT)
                    .then(|| crate::ablation::higher_is_better(runs[0], name)),
                split: split.to_string(),
                name: name.to_string(),
                values: Values::new(values),
            })
            .collect(),
    })
}

/// A metric's value as a diff shows it: memory as people read it (`62.3 MiB`), the system's
/// counts whole, everything else to five decimals.
pub fn value_text(split: &str, name: &str, value: f64) -> String {
    if name.ends_with("_bytes") {
        crate::train::system::format_bytes(value)
    } else if split == crate::train::system::SPLIT && value.fract() == 0.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.5}")
    }
}

/// Two items as `a` and `b`; `None` for any other number.
fn pair<T: Clone>(items: &[T]) -> Option<Pair<T>> {
    match items {
        [a, b] => Some(Pair { a: a.clone(), b: b.clone() }),
        _ => None,
    }
}

/// Whether a metric is worth a row: every task metric, and of the system metrics only the
/// two that describe the run rather than the moment of a sample.
fn compared(split: &str, name: &str) -> bool {
    use crate::train::system;
    split != system::SPLIT || name == system::PEAK || name == system::EVAL_EXAMPLES
}

fn config_diff(runs: &[&RunRecord]) -> Vec<ConfigDiff> {
    let configs: Vec<&serde_json::Value> = runs.iter().map(|r| &r.config).collect();
    let flat = flatten_configs(&configs);
    let keys: BTreeSet<&String> = flat.iter().flat_map(|f| f.keys()).collect();
    keys.into_iter()
        .filter_map(|k| {
            let values: Vec<Option<String>> = flat.iter().map(|f| f.get(k).cloned()).collect();
            let same = values.iter().all(|v| *v == values[0]);
            (!same).then(|| ConfigDiff { key: k.clone(), values: Values::new(values) })
        })
        .collect()
}

fn plugin_diff(runs: &[&RunRecord]) -> Vec<PluginDiff> {
    let layers = runs.iter().map(|r| r.layer.clone()).collect();
    let tasks = runs.iter().map(|r| r.task.clone()).collect();
    [("layer", layers), ("task", tasks)]
        .into_iter()
        .filter(|(_, builds): &(_, Vec<PluginRef>)| builds.iter().any(|b| *b != builds[0]))
        .map(|(role, builds)| PluginDiff { role, pair: pair(&builds), builds })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{compared, config_diff, value_text, MetricDiff};
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
        let keys: Vec<String> = config_diff(&[&hyperset, &transformer]).into_iter().map(|d| d.key).collect();
        assert_eq!(keys, ["layer.beta2"]);
    }

    /// Of three runs, a key is a row when any run's value is not the first's, and a key one
    /// run lacks is a row with no value for that run.
    #[test]
    fn a_key_differs_when_any_run_differs() {
        let run = |id, config| RunRecord::fixture(id, "hyperset", config);
        let runs = [
            run(1, json!({"layer_config": {"d": 64, "heads": 4}, "task_config": {}, "train": {"lr": 0.001}})),
            run(2, json!({"layer_config": {"d": 64, "heads": 4}, "task_config": {}, "train": {"lr": 0.001}})),
            run(3, json!({"layer_config": {"d": 64}, "task_config": {}, "train": {"lr": 0.002}})),
        ];
        let runs: Vec<&RunRecord> = runs.iter().collect();
        let diff = config_diff(&runs);
        let keys: Vec<&str> = diff.iter().map(|d| d.key.as_str()).collect();
        assert_eq!(keys, ["heads", "lr"]);
        assert_eq!(diff[0].values.values, [Some("4".to_string()), Some("4".to_string()), None]);
        assert!(diff[0].values.pair.is_none(), "a and b are for two runs only");
        assert!(config_diff(&runs[..2]).is_empty(), "runs 1 and 2 are the same");
    }

    #[test]
    fn the_best_of_a_row_follows_the_metric_s_direction_and_marks_ties() {
        let row = |values: &[Option<f64>], higher| MetricDiff {
            split: "eval".into(),
            name: "m".into(),
            values: super::Values::new(values.to_vec()),
            higher_is_better: higher,
        };
        let values = [Some(0.5), None, Some(0.75), Some(0.75)];
        assert_eq!(row(&values, Some(true)).best(), [false, false, true, true]);
        assert_eq!(row(&values, Some(false)).best(), [true, false, false, false]);
        assert_eq!(row(&values, None).best(), [false; 4]);
        assert_eq!(row(&[Some(f64::NAN), Some(1.0), Some(0.5)], Some(true)).best(), [false, true, false]);
        assert_eq!(row(&[Some(0.0), Some(0.0)], Some(true)).best(), [false, false], "a tie of all sets none apart");
        assert_eq!(row(&[None, Some(0.5), None], Some(true)).best(), [false; 3], "one value has nothing to beat");
    }

    #[test]
    fn diffs_print_memory_in_mib_and_counts_whole() {
        use crate::train::system;
        assert_eq!(value_text("sys", system::PEAK, 65_363_968.0), "62.3 MiB");
        assert_eq!(value_text("sys", system::EVAL_EXAMPLES, 256.0), "256");
        assert_eq!(value_text("eval", "cell_acc", 0.5), "0.50000");
        assert_eq!(value_text("eval", "tokens", 3.0), "3.00000");
    }

    #[test]
    fn diffs_leave_out_the_momentary_system_samples() {
        assert!(compared("eval", "cell_acc") && compared("train", "loss") && compared("eval@4", "loss"));
        assert!(compared("sys", "peak_rss_bytes") && compared("sys", "eval_examples"));
        assert!(!compared("sys", "cpu_percent") && !compared("sys", "rss_bytes") && !compared("sys", "threads"));
    }
}
