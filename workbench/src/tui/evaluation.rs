//! The TUI's `E`: runs' checkpoints checked and queued for evaluation by a `workbench eval
//! --detach` process of its own, so that the check (which builds the model and reads each
//! checkpoint) never holds up the service's reading of the store; the TUI's queue then starts
//! the evaluations with its executor, as any queued run. What the process reports becomes
//! status-bar lines.

use super::service::Update;
use anyhow::{Context, Result};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::mpsc::Sender;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, Command};

/// Starts `workbench --db ... --executor ... -q eval IDS OVERRIDES --detach --json` on the
/// TUI's store, plugins and executor (whose checks the evaluations pass before they are queued).
pub fn start(
    store: &crate::store::Store,
    plugin_dirs: &[PathBuf],
    executor: &crate::executor::Executor,
    ids: &[i64],
    overrides: &[String],
) -> Result<Child> {
    let mut cmd = Command::new(crate::train::launch::workbench_exe()?);
    cmd.args(crate::train::launch::store_args(store, plugin_dirs)).args(executor.args());
    cmd.arg("-q").arg("eval").args(ids.iter().map(i64::to_string)).args(overrides).args(["--detach", "--json"]);
    // Its own process group: the terminal's signals are the TUI's.
    cmd.process_group(0).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(false);
    cmd.spawn().context("cannot start `workbench eval`")
}

/// Reports the evaluations queued, or the error the process ended with.
pub async fn report(mut child: Child, updates: Sender<Update>) {
    let send = |update| {
        let _ = updates.send(update);
    };
    // Both pipes read at once: neither fills up while the other is waited on.
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    let results = async {
        if let Some(stdout) = stdout {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(text) = describe(&line) {
                    send(Update::Info(text));
                }
            }
        }
    };
    let errors = async {
        let mut errors = String::new();
        if let Some(mut stderr) = stderr {
            let _ = stderr.read_to_string(&mut errors).await;
        }
        errors
    };
    let ((), errors) = tokio::join!(results, errors);
    match child.wait().await {
        Ok(status) if status.success() => {}
        Ok(status) => send(Update::Error(failure(&errors, status))),
        Err(e) => send(Update::Error(format!("the evaluation could not be followed: {e}"))),
    }
}

/// `run 40 queued: evaluates run 12's checkpoint` (one per run) from the line of `eval
/// --detach --json` that tells the evaluations queued.
fn describe(line: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    if v["event"] != "queued" {
        return None;
    }
    let runs: Vec<String> = v["runs"]
        .as_array()?
        .iter()
        .map(|q| format!("run {} queued: evaluates run {}'s checkpoint", q["run"], q["source"]))
        .collect();
    Some(runs.join("; "))
}

/// The last error line the process printed, without its `error: ` prefix, or its exit status.
fn failure(stderr: &str, status: std::process::ExitStatus) -> String {
    let last = stderr.lines().rev().map(str::trim).find(|l| !l.is_empty());
    match last {
        Some(line) => format!("eval: {}", line.strip_prefix("error: ").unwrap_or(line)),
        None => format!("eval ended with {status}"),
    }
}

#[cfg(test)]
mod tests {
    use super::{describe, failure};
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn a_result_line_and_an_error_become_status_lines() {
        let line = r#"{"event":"queued","runs":[{"run":40,"source":12},{"run":41,"source":13}]}"#;
        assert_eq!(
            describe(line).unwrap(),
            "run 40 queued: evaluates run 12's checkpoint; run 41 queued: evaluates run 13's checkpoint"
        );
        assert_eq!(describe("not json"), None);
        let status = std::process::ExitStatus::from_raw(2 << 8);
        assert_eq!(failure("warning\nerror: `lr` is a training setting\n", status), "eval: `lr` is a training setting");
        assert!(failure("", status).starts_with("eval ended with"));
    }
}
