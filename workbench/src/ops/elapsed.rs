//! How long a run has trained, written for a person: the Runs screen, `workbench runs` and
//! `workbench sweeps show` print the same figure the same way.

use crate::store::{MetricSummary, RunRecord};

pub use crate::store::now;

/// Seconds the run has trained: its training clock where its metrics carry one (`clock`, see
/// [`clock_of`]), which a resumed worker continues, so that the time a run spent stopped or
/// waiting in a queue is not counted; else the time since it started (to its end, or to `now`
/// while it runs). `None` before it started.
pub fn training_seconds(run: &RunRecord, clock: Option<f64>, now: f64) -> Option<f64> {
    let start = run.started_at?;
    if let Some(clock) = clock.filter(|c| c.is_finite() && *c > 0.0) {
        return Some(clock);
    }
    Some(run.finished_at.unwrap_or(if run.status.is_terminal() { start } else { now }) - start)
}

/// A run's training clock from its metric summaries: the largest wall time they record.
pub fn clock_of(summaries: &[MetricSummary]) -> Option<f64> {
    summaries.iter().map(|s| s.wall_time).filter(|w| w.is_finite()).reduce(f64::max)
}

/// `12s`, `3m 05s`, `1h 02m`, `2d 04h`: two units, the larger first, so that a GPU-days run
/// reads as days.
pub fn format_duration(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m {:02}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h {:02}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d {:02}h", s / 86_400, (s % 86_400) / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::RunStatus;

    #[test]
    fn durations_read_well() {
        assert_eq!(format_duration(12.4), "12s");
        assert_eq!(format_duration(185.0), "3m 05s");
        assert_eq!(format_duration(3720.0), "1h 02m");
        assert_eq!(format_duration(86_399.0), "23h 59m");
        assert_eq!(format_duration(2.0 * 86_400.0 + 4.0 * 3600.0 + 59.0), "2d 04h");
    }

    #[test]
    fn a_running_run_counts_to_now_and_an_ended_one_to_its_end() {
        let running = RunRecord {
            status: RunStatus::Running,
            started_at: Some(100.0),
            ..RunRecord::fixture(1, "hyperset", serde_json::json!({}))
        };
        assert_eq!(training_seconds(&running, None, 160.0), Some(60.0));
        let finished = RunRecord { finished_at: Some(130.0), status: RunStatus::Finished, ..running.clone() };
        assert_eq!(training_seconds(&finished, None, 160.0), Some(30.0));
        let queued = RunRecord { status: RunStatus::Queued, started_at: None, ..running.clone() };
        assert_eq!(training_seconds(&queued, None, 160.0), None);
        // Where the metrics carry the training clock, it counts: a run stopped for an hour
        // and resumed trained for its clock's 40 s, not the 3640 s since it first started.
        let resumed = RunRecord { finished_at: Some(3740.0), ..finished };
        assert_eq!(training_seconds(&resumed, Some(40.0), 4000.0), Some(40.0));
        assert_eq!(training_seconds(&running, Some(25.0), 4000.0), Some(25.0), "a running run: its rows so far");
        assert_eq!(training_seconds(&resumed, Some(0.0), 4000.0), Some(3640.0), "no clock in the rows");
    }

    #[test]
    fn the_clock_is_the_latest_wall_time_of_the_summaries() {
        let summary = |wall_time: f64| MetricSummary {
            run_id: 1,
            split: "train".into(),
            name: "loss".into(),
            min: 0.0,
            max: 1.0,
            last: 0.5,
            last_step: 10,
            wall_time,
        };
        assert_eq!(clock_of(&[summary(3.0), summary(f64::NAN), summary(7.5)]), Some(7.5));
        assert_eq!(clock_of(&[]), None);
    }
}
