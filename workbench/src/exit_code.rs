//! The process exit codes, in one place (README, "Exit codes").
//!
//! Scripts that train or sweep tell apart what went wrong without parsing messages: a run
//! that failed, one that diverged, an interruption, or a command refused before anything
//! started (a usage or configuration error, the code clap gives its own usage errors).

use crate::store::RunStatus;

/// Everything went as asked.
pub const SUCCESS: i32 = 0;
/// The command itself could not do its work (store unreachable, file unwritable, ...).
pub const ERROR: i32 = 1;
/// Usage or configuration refused before anything started (clap's own code for usage errors).
pub const USAGE: i32 = 2;
/// A run failed (an error in a plugin, the trainer or the data).
pub const RUN_FAILED: i32 = 3;
/// A run diverged (its loss became non-finite or exploded).
pub const RUN_DIVERGED: i32 = 4;
/// Interrupted: Ctrl-C, a run stopped before its end, or runs left paused (128 + SIGINT).
pub const INTERRUPTED: i32 = 130;

/// The code of a command that followed one run until it ended with `status`. A run still
/// queued or running was left behind (a second Ctrl-C, closed output): interrupted.
pub fn of_run(status: RunStatus) -> i32 {
    match status {
        RunStatus::Finished => SUCCESS,
        RunStatus::Failed => RUN_FAILED,
        RunStatus::Diverged => RUN_DIVERGED,
        RunStatus::Interrupted | RunStatus::Queued | RunStatus::Running => INTERRUPTED,
    }
}

/// The code of a command that ran several runs: the worst one's, failures first (they need a
/// fix), then divergences, then interruptions. `paused` runs left waiting count as interrupted.
pub fn of_runs(statuses: impl IntoIterator<Item = RunStatus>, paused: usize) -> i32 {
    let worst = statuses.into_iter().map(of_run).max_by_key(|&code| severity(code)).unwrap_or(SUCCESS);
    if paused > 0 && severity(INTERRUPTED) > severity(worst) {
        INTERRUPTED
    } else {
        worst
    }
}

fn severity(code: i32) -> u8 {
    match code {
        RUN_FAILED => 3,
        RUN_DIVERGED => 2,
        INTERRUPTED => 1,
        _ => 0,
    }
}

/// An error that refuses the command's input (a bad key, value, plugin name or experiment
/// file): the process exits with [`USAGE`]. Printed as the error it wraps.
#[derive(Debug)]
pub struct Refused(pub anyhow::Error);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#}", self.0)
    }
}

impl std::error::Error for Refused {}

/// Marks `error` as a refusal of the input (exit code [`USAGE`]).
pub fn refused(error: anyhow::Error) -> anyhow::Error {
    anyhow::Error::new(Refused(error))
}

/// The exit code of a command that ended with `error`.
pub fn of_error(error: &anyhow::Error) -> i32 {
    if error.chain().any(|cause| cause.is::<Refused>()) {
        USAGE
    } else {
        ERROR
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_ending_has_its_own_code() {
        let codes = [
            of_run(RunStatus::Finished),
            of_run(RunStatus::Failed),
            of_run(RunStatus::Diverged),
            of_run(RunStatus::Interrupted),
            USAGE,
            ERROR,
        ];
        let distinct: std::collections::BTreeSet<_> = codes.iter().collect();
        assert_eq!(distinct.len(), codes.len(), "{codes:?}");
    }

    #[test]
    fn several_runs_report_the_worst() {
        use RunStatus::*;
        assert_eq!(of_runs([Finished, Finished], 0), SUCCESS);
        assert_eq!(of_runs([Finished, Interrupted, Diverged], 0), RUN_DIVERGED);
        assert_eq!(of_runs([Diverged, Failed, Finished], 0), RUN_FAILED);
        assert_eq!(of_runs([Finished], 1), INTERRUPTED);
        assert_eq!(of_runs([Failed], 2), RUN_FAILED);
        assert_eq!(of_runs([], 0), SUCCESS);
    }

    #[test]
    fn refusals_are_usage_errors_wherever_they_are_wrapped() {
        let plain = anyhow::anyhow!("store unreachable");
        assert_eq!(of_error(&plain), ERROR);
        let wrapped = refused(anyhow::anyhow!("unknown key `stpes`")).context("train");
        assert_eq!(of_error(&wrapped), USAGE);
        assert_eq!(format!("{:#}", refused(anyhow::anyhow!("bad"))), "bad");
    }
}
