//! Starting a worker process for a stored run and following its progress.

use super::events::Event;
use crate::store::{RunRecord, RunStatus, Store, StoreOutage};
use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The executable that starts workers: the running one. When a rebuild has replaced it on
/// disk, Linux names the running image `PATH (deleted)`, which cannot be started; workers
/// then start the new build at `PATH`.
pub fn workbench_exe() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("cannot find the workbench executable to start a worker")?;
    Ok(rebuilt_in_place(&exe).unwrap_or(exe))
}

/// `PATH` for a missing `PATH (deleted)` when a file exists at `PATH`.
fn rebuilt_in_place(exe: &Path) -> Option<PathBuf> {
    if exe.exists() {
        return None;
    }
    let original = PathBuf::from(exe.to_str()?.strip_suffix(" (deleted)")?);
    original.is_file().then_some(original)
}

/// `--db D [--artifacts A] [--plugin-dir P]...`: what a command started from this one needs
/// to reach the same store, run files and plugins.
pub fn store_args(store: &Store, plugin_dirs: &[PathBuf]) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec!["--db".into(), store.location().to_arg()];
    if let Some(dir) = store.explicit_artifacts_dir() {
        args.extend(["--artifacts".into(), dir.as_os_str().to_owned()]);
    }
    for dir in plugin_dirs {
        args.extend(["--plugin-dir".into(), dir.as_os_str().to_owned()]);
    }
    args
}

/// The arguments of `workbench [--db D] [--artifacts A] [--plugin-dir P]... worker --run ID
/// --claimed-by PID [--resume]` for a run of `store` that this process claimed.
pub fn worker_args(store: &Store, plugin_dirs: &[PathBuf], run_id: i64, resume: bool) -> Vec<OsString> {
    let mut args = store_args(store, plugin_dirs);
    args.extend(["worker".into(), "--run".into(), run_id.to_string().into()]);
    args.extend(["--claimed-by".into(), std::process::id().to_string().into()]);
    if resume {
        args.push("--resume".into());
    }
    args
}

/// Starts `workbench worker --run ID` (the running executable) with stdout piped.
pub fn spawn_worker(store: &Store, plugin_dirs: &[PathBuf], run_id: i64, resume: bool) -> Result<Child> {
    let exe = workbench_exe()?;
    let mut cmd = Command::new(exe);
    cmd.args(worker_args(store, plugin_dirs, run_id, resume));
    // A process group of its own: the terminal's Ctrl-C and hang-up reach only the command
    // following it, which turns them into a stop request (see `follow`).
    cmd.process_group(0);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).stdin(Stdio::null()).kill_on_drop(false);
    cmd.spawn().context("cannot start the worker process")
}

/// Starts a worker that outlives the process starting it (the TUI): its own process group, so
/// terminal signals do not reach it; stdout discarded (progress is in the store); stderr kept
/// in `runs/<id>/worker.log` in the artifacts directory, so a crash leaves its message. A thread
/// waits for it, so it never lingers as a zombie, and hands its exit status to `on_exit`.
/// Returns the worker's pid.
pub fn spawn_detached(
    store: &Store,
    plugin_dirs: &[PathBuf],
    run_id: i64,
    resume: bool,
    on_exit: impl FnOnce(u32, std::process::ExitStatus) + Send + 'static,
) -> Result<u32> {
    use std::os::unix::process::CommandExt;
    let exe = workbench_exe()?;
    let log_path = store.artifacts_dir()?.join(super::worker::run_files(run_id)).join("worker.log");
    if let Some(dir) = log_path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .with_context(|| format!("cannot open {}", log_path.display()))?;
    let mut cmd = std::process::Command::new(exe);
    cmd.args(worker_args(store, plugin_dirs, run_id, resume));
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::from(log)).process_group(0);
    let mut child = cmd.spawn().context("cannot start the worker process")?;
    let pid = child.id();
    std::thread::spawn(move || {
        if let Ok(status) = child.wait() {
            on_exit(pid, status);
        }
    });
    Ok(pid)
}

/// Asks a worker to stop (SIGTERM): it records the run as `interrupted`, keeping its data and
/// checkpoint.
pub fn stop_worker(pid: u32) -> Result<()> {
    let pid = i32::try_from(pid).context("invalid worker pid")?;
    // SAFETY: kill(2) with a positive pid only sends a signal; no memory is touched.
    let rc = unsafe { libc::kill(pid, libc::SIGTERM) };
    if rc != 0 {
        anyhow::bail!("cannot signal worker {pid}: {}", std::io::Error::last_os_error());
    }
    Ok(())
}

/// How progress is shown while following a worker.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Display {
    /// A progress bar with rate and ETA, and evaluation lines.
    Bar,
    /// The worker's JSON events, one per line, on stdout.
    Json,
}

/// Follows a worker until it exits and returns the run's final status from the store.
///
/// The worker runs in a process group of its own (see [`spawn_worker`]), so only this
/// process sees the terminal's Ctrl-C and hang-up. The first Ctrl-C asks the worker to stop
/// at its next step with a checkpoint (a stop request in the store, and SIGTERM for speed);
/// a second one leaves it training and returns. A closed stdout (`| head`) ends the
/// following, never the worker. A worker that dies before recording its end leaves the run
/// `interrupted` with the exit code or signal as its cause.
/// Prints a line above `bar`, or on stderr when the bar is hidden (stderr not a terminal),
/// where indicatif's own `println` prints nothing.
pub fn say_above(bar: &ProgressBar, text: String) {
    use std::io::Write;
    if bar.is_hidden() {
        let _ = writeln!(std::io::stderr(), "{text}");
    } else {
        bar.println(text);
    }
}

pub async fn follow(store: &Store, mut child: Child, run_id: i64, display: Display) -> Result<RunStatus> {
    use std::io::Write;
    let pid = child.id().context("the worker exited before it could be followed")?;
    let stdout = child.stdout.take().context("worker stdout was not captured")?;
    let stderr = child.stderr.take().context("worker stderr was not captured")?;
    let mut lines = BufReader::new(stdout).lines();
    let mut log_lines = BufReader::new(stderr).lines();
    let mut log_open = true;
    let mut recent: std::collections::VecDeque<String> = std::collections::VecDeque::new();
    let bar = ProgressBar::hidden();
    let mut interrupts = 0;
    let mut renew_claim = tokio::time::interval(crate::queue::RENEW_CLAIMS_EVERY);
    loop {
        // The worker's log (stderr) is printed above the bar so the two never garble.
        let line = tokio::select! {
            _ = renew_claim.tick() => {
                // Holds this process's claim while the worker waits to start the run (for a
                // connection to the store's server), so no queue runner takes the run as
                // stale. A renewal the store misses is made again at the next tick.
                let _ = store.renew_claims(std::process::id()).await;
                continue;
            }
            _ = tokio::signal::ctrl_c() => {
                interrupts += 1;
                if interrupts == 1 {
                    store.request_stop(run_id).await?;
                    let _ = stop_worker(pid);
                    say_above(&bar, format!(
                        "stopping run {run_id} at its next step, with a checkpoint \
                         (Ctrl-C again leaves it training in the background)"
                    ));
                    continue;
                }
                bar.finish_and_clear();
                say_above(&bar, format!(
                    "run {run_id} goes on training in the background (worker {pid}); \
                     `workbench runs show {run_id}` follows it, `workbench runs cancel {run_id}` stops it"
                ));
                return Ok(RunStatus::Running);
            }
            log = log_lines.next_line(), if log_open => {
                match log? {
                    Some(text) => {
                        if !text.starts_with("[run ") {
                            recent.push_back(text.clone());
                            if recent.len() > 8 {
                                recent.pop_front();
                            }
                        }
                        match display {
                            Display::Json => {
                                let _ = writeln!(std::io::stderr(), "{text}");
                            }
                            _ => say_above(&bar, text),
                        }
                    }
                    None => log_open = false,
                }
                continue;
            }
            line = lines.next_line() => match line? {
                Some(line) => line,
                None => break,
            },
        };
        if display == Display::Json {
            let mut out = std::io::stdout().lock();
            if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
                // Nobody reads our output any more; the worker trains on, recorded in the store.
                return Ok(RunStatus::Running);
            }
            continue;
        }
        match serde_json::from_str::<Event>(&line) {
            Ok(Event::Preparing { what, done, total }) => {
                if bar.is_hidden() {
                    bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
                }
                bar.set_style(
                    ProgressStyle::with_template(
                        "{prefix} preparing {msg} [{bar:30}] {human_pos}/{human_len} ETA {eta}",
                    )
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> "),
                );
                bar.set_prefix(format!("run {run_id}"));
                if bar.message() != what {
                    bar.set_message(what);
                    bar.reset_eta();
                }
                bar.set_length(total);
                bar.set_position(done);
            }
            Ok(Event::Started { total_steps, start_step, .. }) => {
                bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
                bar.set_length(total_steps);
                bar.set_position(start_step);
                bar.set_style(
                    ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} steps {rate} ETA {eta} {msg}")
                        .unwrap_or_else(|_| ProgressStyle::default_bar())
                        .with_key("rate", |state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                            let _ = w.write_str(&steps_per_second(state.per_sec()));
                        })
                        .progress_chars("=> "),
                );
                bar.set_prefix(format!("run {run_id}"));
                bar.reset_eta();
            }
            Ok(Event::Step { step, loss, lr, .. }) => {
                bar.set_position(step);
                bar.set_message(format!("loss {loss:.4} lr {lr:.2e}"));
            }
            Ok(Event::Eval { .. }) => {} // the worker logs evaluations itself
            Ok(Event::Finished { .. }) => bar.finish_and_clear(),
            Err(_) => say_above(&bar, line),
        }
    }
    while log_open {
        match log_lines.next_line().await? {
            Some(text) => {
                let _ = writeln!(std::io::stderr(), "{text}");
                recent.push_back(text);
            }
            None => log_open = false,
        }
    }
    let exit = child.wait().await.context("waiting for the worker")?;
    bar.finish_and_clear();
    let recent: Vec<String> = recent.into_iter().rev().take(8).rev().collect();
    super::exit::record_abnormal_end(store, run_id, pid, &exit, &recent).await?;
    Ok(store.run(run_id).await?.status)
}

/// One run read through the store at each pass of a follower (`train` following a Slurm job,
/// `runs log --follow`): its record and the log lines not read before, the store's outages
/// waited out, and every few passes the runs whose worker can no longer record their end
/// ended (a job cancelled or killed before its worker could), so that no follower waits for
/// a run that will never end.
pub struct RunWatch {
    run_id: i64,
    log: crate::store::LogTail,
    outage: StoreOutage,
    passes: u64,
}

impl RunWatch {
    /// Passes between two looks for runs whose worker can no longer record their end.
    const SUPERVISE_EVERY: u64 = 10;

    /// A watch of `run_id` whose log reads go on from `log`; `outage` words what goes on while
    /// the store is out of reach.
    pub fn new(run_id: i64, log: crate::store::LogTail, outage: StoreOutage) -> RunWatch {
        RunWatch { run_id, log, outage, passes: 0 }
    }

    /// The run and its new log lines, or `None` while the store is out of reach (`say` tells
    /// the user when that starts and ends); the error when it stays away too long.
    pub async fn read(&mut self, store: &Store, say: impl Fn(String)) -> Result<Option<(RunRecord, Vec<String>)>> {
        self.passes += 1;
        let supervise = self.passes.is_multiple_of(Self::SUPERVISE_EVERY);
        let (run_id, log) = (self.run_id, &mut self.log);
        let read = async {
            if supervise {
                crate::executor::end_orphaned_runs(store).await?;
            }
            Ok::<_, anyhow::Error>((store.run(run_id).await?, log.read(store).await?))
        };
        let result = read.await;
        self.outage.pass(result, say)
    }

    /// Whether `run`, though it reads as ended, may still come back through its Slurm job,
    /// which is still in Slurm's queue (its lease expired while the job runs, the job was
    /// requeued at its time limit or on preemption), so it is followed on.
    pub fn may_come_back(run: &RunRecord) -> bool {
        crate::executor::Executor::may_be_taken_back([run]).contains(&run.id)
    }
}

/// What a follower says when `run` reads as ended but may come back through its Slurm job.
fn come_back_news(run: &RunRecord) -> &'static str {
    if run.lease_expired() {
        "marked interrupted: its lease expired, but its Slurm job still runs (the worker may be cut off from \
         the store); following on until the worker takes the run back or the job ends"
    } else if run.requeued_at_time_limit() {
        "its Slurm job was requeued at its time limit; following on until the job starts again and continues \
         the run"
    } else {
        "interrupted while its Slurm job is still in Slurm's queue (requeued on preemption, or ending); \
         following on until the job starts again and continues the run, or ends"
    }
}

/// Follows a run that trains elsewhere (a Slurm job) through the store until it ends: a
/// progress bar from its recorded steps and the log lines it stores. Ctrl-C asks it to stop
/// with a checkpoint; a second one leaves it running and returns.
pub async fn follow_store(store: &Store, run_id: i64, display: Display) -> Result<RunStatus> {
    use std::io::Write;
    let bar = ProgressBar::hidden();
    if display == Display::Bar {
        bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} steps {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        bar.set_prefix(format!("run {run_id}"));
    }
    let show = |line: String| say_above(&bar, format!("[run {run_id}] {line}"));
    let mut interrupts = 0;
    let mut status = RunStatus::Queued;
    let mut waiting_for_worker = false;
    // The job trains on while the store is out of reach: so does the following.
    let mut watch = RunWatch::new(run_id, crate::store::LogTail::new(run_id), StoreOutage::default());
    loop {
        match watch.read(store, show).await? {
            Some((run, logs)) => {
                status = run.status;
                bar.set_length(run.total_steps.unwrap_or(0));
                bar.set_position(run.last_step);
                bar.set_message(run.status.to_string());
                for line in logs {
                    show(line);
                }
                if run.status == RunStatus::Running {
                    waiting_for_worker = false;
                }
                if RunWatch::may_come_back(&run) {
                    if !waiting_for_worker {
                        show(come_back_news(&run).to_string());
                        waiting_for_worker = true;
                    }
                } else if run.status.is_terminal() {
                    bar.finish_and_clear();
                    if display == Display::Json {
                        Event::Finished { status: run.status.to_string(), error: run.error.clone() }.emit();
                    }
                    return Ok(run.status);
                }
            }
            None => bar.set_message("the run store is out of reach"),
        }
        tokio::select! {
            _ = tokio::time::sleep(std::time::Duration::from_millis(500)) => {}
            _ = tokio::signal::ctrl_c() => {
                interrupts += 1;
                if interrupts == 1 {
                    if status == RunStatus::Queued {
                        crate::train::stop::cancel_queued(store, run_id).await?;
                    } else {
                        store.request_stop(run_id).await?;
                    }
                    say_above(&bar, format!(
                        "stopping run {run_id} at its next step, with a checkpoint (Ctrl-C again leaves it running)"
                    ));
                } else {
                    bar.finish_and_clear();
                    let _ = writeln!(
                        std::io::stderr(),
                        "run {run_id} goes on; `workbench runs show {run_id}` follows it, `workbench runs cancel {run_id}` stops it"
                    );
                    return Ok(RunStatus::Running);
                }
            }
        }
    }
}

/// A rate for the progress bar, with the digits that are not noise: `80.5/s`, `1234/s`.
fn steps_per_second(rate: f64) -> String {
    match rate {
        r if !r.is_finite() => "-/s".to_string(),
        r if r >= 100.0 => format!("{r:.0}/s"),
        r if r >= 1.0 => format!("{r:.1}/s"),
        r => format!("{r:.2}/s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_shown_with_few_digits() {
        assert_eq!(steps_per_second(80.5213), "80.5/s");
        assert_eq!(steps_per_second(1234.56), "1235/s");
        assert_eq!(steps_per_second(0.3456), "0.35/s");
        assert_eq!(steps_per_second(f64::INFINITY), "-/s");
    }

    /// A worker's command line names the process that claimed its run (this one), so that the
    /// worker starts the run only under that claim, and parses as the worker command.
    #[tokio::test]
    async fn a_worker_is_told_who_claimed_its_run() {
        use clap::Parser;
        let dir = tempfile::Builder::new().prefix("wb-args-").tempdir().unwrap();
        let store = Store::open(&dir.path().join("runs.db")).await.unwrap();
        let args = std::iter::once(OsString::from("workbench")).chain(worker_args(&store, &[], 7, true));
        let cli = crate::cli::Cli::try_parse_from(args).unwrap();
        match cli.command {
            Some(crate::cli::Command::Worker { run, resume, claimed_by, submission }) => {
                assert_eq!((run, resume, claimed_by, submission), (7, true, Some(std::process::id()), None));
            }
            other => panic!("not the worker command: {other:?}"),
        }
    }

    #[test]
    fn a_replaced_executable_is_found_at_its_path() {
        let dir = tempfile::Builder::new().prefix("wb-exe-").tempdir().unwrap();
        let exe = dir.path().join("workbench");
        std::fs::write(&exe, b"new build").unwrap();
        let deleted = dir.path().join("workbench (deleted)");
        assert_eq!(rebuilt_in_place(&deleted), Some(exe.clone()));
        // A running image that still exists is used as is; a deleted one with nothing at
        // its path is left for the spawn to report.
        assert_eq!(rebuilt_in_place(&exe), None);
        std::fs::remove_file(&exe).unwrap();
        assert_eq!(rebuilt_in_place(&deleted), None);
    }
}
