//! The order of a list of runs (`workbench runs --sort`): by a column of the runs table or by
//! a metric, best first.

use crate::store::{MetricSummary, RunRecord};
use anyhow::{bail, Result};
use std::cmp::Ordering;
use std::collections::BTreeMap;

/// The columns a list sorts by besides metrics.
pub const COLUMNS: [&str; 7] = ["id", "status", "layer", "task", "steps", "params", "time"];

/// Sorts `runs` by `key`: a column of [`COLUMNS`] (ascending), a metric's last evaluation
/// value (`cell_acc`) or its best (`best:cell_acc`), best first by the metric's direction;
/// `-key` reverses. Runs without a value come last either way; ties keep their order.
/// `summaries` holds the runs' metric summaries by run id.
pub fn sort_runs(
    runs: &mut Vec<RunRecord>,
    key: &str,
    summaries: &BTreeMap<i64, Vec<MetricSummary>>,
    now: f64,
) -> Result<()> {
    let (reversed, key) = match key.strip_prefix('-') {
        Some(rest) => (true, rest.trim()),
        None => (false, key.trim()),
    };
    let order = |a: &Option<Value>, b: &Option<Value>, best_first: bool| match (a, b) {
        (Some(x), Some(y)) => {
            let o = x.cmp(y);
            if best_first != reversed {
                o.reverse()
            } else {
                o
            }
        }
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    };
    if COLUMNS.contains(&key) {
        let value = |r: &RunRecord| -> Option<Value> {
            match key {
                "id" => Some(Value::Number(r.id as f64)),
                "status" => Some(Value::Text(r.shown_status().to_string())),
                "layer" => Some(Value::Text(r.layer.name.clone())),
                "task" => Some(Value::Text(r.task.name.clone())),
                "steps" => Some(Value::Number(r.last_step as f64)),
                "params" => r.param_count.map(|p| Value::Number(p as f64)),
                _ => {
                    let clock = summaries.get(&r.id).and_then(|s| crate::ops::elapsed::clock_of(s));
                    crate::ops::elapsed::training_seconds(r, clock, now).map(Value::Number)
                }
            }
        };
        sort_by_key_once(runs, value, |a, b| order(a, b, false));
        return Ok(());
    }
    let (best, name) = match key.split_once(':') {
        Some(("best", name)) => (true, name.trim()),
        Some(("last" | "final", name)) => (false, name.trim()),
        _ => (false, key),
    };
    let higher = |r: &RunRecord| crate::ablation::higher_is_better(r, name);
    let value = |r: &RunRecord| -> Option<Value> {
        let s = summaries.get(&r.id)?.iter().find(|s| s.split == "eval" && s.name == name)?;
        let v = match (best, higher(r)) {
            (false, _) => s.last,
            (true, true) => s.max,
            (true, false) => s.min,
        };
        v.is_finite().then_some(Value::Number(v))
    };
    if !runs.iter().any(|r| value(r).is_some()) {
        let mut metrics: Vec<&str> = summaries
            .values()
            .flatten()
            .filter(|s| s.split == "eval" && runs.iter().any(|r| r.id == s.run_id))
            .map(|s| s.name.as_str())
            .collect();
        metrics.sort_unstable();
        metrics.dedup();
        let metrics = if metrics.is_empty() { "none recorded".to_string() } else { metrics.join(", ") };
        bail!(
            "--sort {key}: no run listed has an evaluation metric `{name}`; sort by {} or a metric \
             (NAME for its last value, best:NAME; -KEY reverses); these runs' metrics: {metrics}",
            COLUMNS.join(", ")
        );
    }
    // Best first: the direction is the metric's, read off the first run that has it.
    let larger_better = runs.iter().find(|r| value(r).is_some()).is_none_or(higher);
    sort_by_key_once(runs, value, |a, b| order(a, b, larger_better));
    Ok(())
}

/// Sorts `runs` stably by each run's `key`, computed once per run rather than at every
/// comparison (a metric's is a look-up among the run's summaries).
fn sort_by_key_once(
    runs: &mut Vec<RunRecord>,
    key: impl Fn(&RunRecord) -> Option<Value>,
    order: impl Fn(&Option<Value>, &Option<Value>) -> Ordering,
) {
    let mut keyed: Vec<(Option<Value>, RunRecord)> = std::mem::take(runs).into_iter().map(|r| (key(&r), r)).collect();
    keyed.sort_by(|(a, _), (b, _)| order(a, b));
    runs.extend(keyed.into_iter().map(|(_, run)| run));
}

/// A sort key's value; one key gives values of one kind, so numbers and text never meet.
#[derive(Debug, Clone, PartialEq, PartialOrd)]
enum Value {
    Number(f64),
    Text(String),
}

impl Value {
    fn cmp(&self, other: &Value) -> Ordering {
        self.partial_cmp(other).unwrap_or(Ordering::Equal)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(id: i64, layer: &str, params: Option<u64>) -> RunRecord {
        let mut r = RunRecord::fixture(id, layer, json!({}));
        r.param_count = params;
        r
    }

    fn summary(run_id: i64, name: &str, min: f64, max: f64, last: f64) -> MetricSummary {
        MetricSummary { run_id, split: "eval".into(), name: name.into(), min, max, last, last_step: 10, wall_time: 1.0 }
    }

    fn ids(runs: &[RunRecord]) -> Vec<i64> {
        runs.iter().map(|r| r.id).collect()
    }

    #[test]
    fn columns_ascend_metrics_put_the_best_first_and_a_minus_reverses() {
        let mut runs = vec![run(1, "mlp", Some(30)), run(2, "cem", None), run(3, "hyperset", Some(10))];
        let mut summaries = BTreeMap::new();
        summaries.insert(1, vec![summary(1, "acc", 0.2, 0.9, 0.5), summary(1, "loss", 0.1, 2.0, 0.3)]);
        summaries.insert(3, vec![summary(3, "acc", 0.1, 0.7, 0.6), summary(3, "loss", 0.2, 2.0, 0.2)]);
        let sorted = |runs: &mut Vec<RunRecord>, key: &str| {
            sort_runs(runs, key, &summaries, 0.0).unwrap();
            ids(runs)
        };
        assert_eq!(sorted(&mut runs, "layer"), [2, 3, 1]);
        assert_eq!(sorted(&mut runs, "params"), [3, 1, 2], "a run without a value last");
        assert_eq!(sorted(&mut runs, "-params"), [1, 3, 2], "reversed, still last");
        assert_eq!(sorted(&mut runs, "acc"), [3, 1, 2], "last value, higher first");
        assert_eq!(sorted(&mut runs, "best:acc"), [1, 3, 2], "best value: 0.9 over 0.7");
        assert_eq!(sorted(&mut runs, "loss"), [3, 1, 2], "a loss: lower first");
        assert_eq!(sorted(&mut runs, "best:loss"), [1, 3, 2]);
        assert_eq!(sorted(&mut runs, "-id"), [3, 2, 1]);
        let e = sort_runs(&mut runs, "bleu", &summaries, 0.0).unwrap_err().to_string();
        assert!(e.contains("no run listed has an evaluation metric `bleu`") && e.contains("metrics: acc, loss"), "{e}");
    }
}
