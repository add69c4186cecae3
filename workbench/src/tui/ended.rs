//! The status bar's news of runs that ended since the last snapshot, so that a run launched
//! from the Launch screen, resumed with `r` or queued with `E` is told when it ends while the
//! user looks at another screen.

use super::data::Snapshot;
use crate::store::{RunRecord, RunStatus};
use std::collections::HashSet;

/// `run 5 finished (best cell_acc 0.8123)`, `run 6 failed: <reason>`, ... for each run
/// `before` had queued or running that `after` has ended, joined with `; `, and whether one of
/// them failed or diverged (said as an error). `None` when none ended, and on the first
/// snapshot (the runs that ended before the TUI started are not news).
pub fn news(before: &Snapshot, after: &Snapshot) -> Option<(String, bool)> {
    if !before.loaded {
        return None;
    }
    let active: HashSet<i64> = before.runs.iter().filter(|r| !r.status.is_terminal()).map(|r| r.id).collect();
    if active.is_empty() {
        return None;
    }
    let ended: Vec<&RunRecord> =
        after.runs.iter().filter(|r| r.status.is_terminal() && active.contains(&r.id)).collect();
    if ended.is_empty() {
        return None;
    }
    let lines: Vec<String> = ended.iter().map(|r| line(after, r)).collect();
    let bad = ended.iter().any(|r| matches!(r.status, RunStatus::Failed | RunStatus::Diverged));
    Some((lines.join("; "), bad))
}

/// One ended run, as news.
fn line(snapshot: &Snapshot, run: &RunRecord) -> String {
    let summaries = snapshot.summaries.get(&run.id).map_or(&[][..], Vec::as_slice);
    crate::ops::ended::ended_line(run, summaries)
}
