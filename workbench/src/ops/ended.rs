//! How a run that ended is told, the same in the TUI's status bar and in `sweep` / `queue`:
//! `run 5 finished (best cell_acc 0.8123)`, `run 6 failed: <reason>`.

use crate::store::{MetricSummary, RunRecord, RunStatus};

/// The best value of the run's headline metric at the training depth, with its name, from
/// the run's metric summaries: the task's headline metric, else its first evaluation metric
/// other than the loss.
pub fn best_headline(run: &RunRecord, summaries: &[MetricSummary]) -> Option<(String, f64)> {
    let (name, higher) = match run.headline() {
        Some(h) => (h.name.clone(), h.higher_is_better),
        None => {
            let name = summaries.iter().find(|s| s.split == "eval" && s.name != "loss").map(|s| s.name.clone())?;
            let higher = crate::ablation::higher_is_better(run, &name);
            (name, higher)
        }
    };
    let s = summaries.iter().find(|s| s.split == "eval" && s.name == name)?;
    let v = if higher { s.max } else { s.min };
    v.is_finite().then_some((name, v))
}

/// One ended run in words: a finished one with its best headline value (from `summaries`,
/// its metric summaries), any other with its status and reason.
pub fn ended_line(run: &RunRecord, summaries: &[MetricSummary]) -> String {
    let id = run.id;
    match (run.status, &run.error) {
        (RunStatus::Finished, _) => match best_headline(run, summaries) {
            Some((name, value)) => format!("run {id} finished (best {name} {value:.4})"),
            None => format!("run {id} finished"),
        },
        (status, Some(error)) => format!("run {id} {status}: {error}"),
        (status, None) => format!("run {id} {status}"),
    }
}
