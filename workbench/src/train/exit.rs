//! How a worker process ended, in words, and recording an abnormal end as the run's cause.

use crate::store::{RunStatus, Store};
use anyhow::Result;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

/// The name of a signal that ends processes, with what it usually means for a worker.
fn signal_name(signal: i32) -> String {
    let (name, hint) = match signal {
        libc::SIGSEGV => ("SIGSEGV", " (segmentation fault: invalid memory access, often in plugin code)"),
        libc::SIGABRT => ("SIGABRT", " (aborted, e.g. by a failed assertion or allocation in native code)"),
        libc::SIGKILL => {
            ("SIGKILL", " (killed outright; without a stop request this is often the out-of-memory killer)")
        }
        libc::SIGBUS => ("SIGBUS", " (bus error)"),
        libc::SIGFPE => ("SIGFPE", " (arithmetic fault)"),
        libc::SIGILL => ("SIGILL", " (illegal instruction: a binary built for another CPU?)"),
        libc::SIGTERM => ("SIGTERM", ""),
        libc::SIGINT => ("SIGINT", ""),
        libc::SIGHUP => ("SIGHUP", ""),
        _ => return format!("signal {signal}"),
    };
    format!("signal {signal} ({name}){hint}")
}

/// `exit code N` or `signal N (NAME)...`, for messages and the stored cause.
pub fn describe(status: &ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => signal_name(signal),
        _ => status.to_string(),
    }
}

/// After worker `pid` of run `id` exited with `status`: if the run is still `running` under
/// that worker (it died before recording its end), marks it `interrupted` with the exit as its
/// cause and keeps `last_lines` of its stderr in the run's log. Returns the cause recorded.
pub async fn record_abnormal_end(
    store: &Store,
    id: i64,
    pid: u32,
    status: &ExitStatus,
    last_lines: &[String],
) -> Result<Option<String>> {
    let record = store.run(id).await?;
    let cause = describe(status);
    // Queued and still claimed by this process (the worker's starter): the worker died before
    // it started the run. A run requeued meanwhile (its worker had lost it) is left alone.
    if record.status == RunStatus::Queued && !status.success() && store.holds_claim(id, std::process::id()).await? {
        keep_lines(store, id, last_lines).await?;
        let error = format!(
            "its worker (process {pid}) ended with {cause} before it could start the run; \
             see `workbench runs show {id}` for its last lines, then `workbench resume {id}`"
        );
        let ended = store.end_unstarted_run(id, &error, &cause).await?;
        return Ok(ended.then_some(cause));
    }
    if record.status != RunStatus::Running || record.worker_pid != Some(pid) {
        return Ok(None);
    }
    keep_lines(store, id, last_lines).await?;
    let error = format!(
        "worker process {pid} ended with {cause} before recording its end; \
         `workbench resume {id}` continues it from its last checkpoint"
    );
    let ended = store.end_lost_run(id, Some(i64::from(pid)), &error, &cause).await?;
    Ok(ended.then_some(cause))
}

/// Keeps a dead worker's last stderr lines in the run's log.
async fn keep_lines(store: &Store, id: i64, last_lines: &[String]) -> Result<()> {
    if !last_lines.is_empty() {
        let lines: Vec<String> = last_lines.iter().map(|l| format!("worker stderr: {l}")).collect();
        store.append_logs(id, &lines).await?;
    }
    Ok(())
}

/// The last `n` lines of a text file (a worker's log), if it can be read.
pub fn tail(path: &std::path::Path, n: usize) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(path) else { return Vec::new() };
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].iter().map(|l| l.to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exits_and_signals_are_named() {
        assert_eq!(describe(&ExitStatus::from_raw(3 << 8)), "exit code 3");
        assert!(describe(&ExitStatus::from_raw(libc::SIGSEGV)).contains("SIGSEGV"));
        assert!(describe(&ExitStatus::from_raw(libc::SIGABRT)).starts_with("signal 6 (SIGABRT)"));
        assert!(describe(&ExitStatus::from_raw(libc::SIGKILL)).contains("out-of-memory"));
        assert_eq!(describe(&ExitStatus::from_raw(63)), "signal 63");
    }
}
