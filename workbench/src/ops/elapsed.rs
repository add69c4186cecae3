//! How long a run has trained, written for a person: the Runs screen, `workbench runs` and
//! `workbench sweeps show` print the same figure the same way.

use crate::store::RunRecord;

pub use crate::store::now;

/// Seconds the run has trained (to its end, or to `now` while it runs); `None` before it
/// started.
pub fn training_seconds(run: &RunRecord, now: f64) -> Option<f64> {
    let start = run.started_at?;
    Some(run.finished_at.unwrap_or(if run.status.is_terminal() { start } else { now }) - start)
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
        assert_eq!(training_seconds(&running, 160.0), Some(60.0));
        let finished = RunRecord { finished_at: Some(130.0), status: RunStatus::Finished, ..running.clone() };
        assert_eq!(training_seconds(&finished, 160.0), Some(30.0));
        let queued = RunRecord { status: RunStatus::Queued, started_at: None, ..running };
        assert_eq!(training_seconds(&queued, 160.0), None);
    }
}
