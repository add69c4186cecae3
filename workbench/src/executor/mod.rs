//! Where runs' workers run: `local` (a process on this machine, the default) or `slurm` (one
//! batch job per run on a Slurm cluster, workers writing to a shared store).
//!
//! The queue runner ([`crate::queue::QueueRunner`]) asks the executor to start each claimed
//! run, and on every pass lets it reconcile runs with what it knows (Slurm's job states).

pub mod slurm;

use crate::store::{Backend, RunRecord, RunStatus, Store};
use anyhow::{bail, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Mutex;

pub use slurm::SlurmOptions;

/// An executor, as chosen with `--executor` (and `--slurm` options).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Executor {
    /// Worker processes on this machine.
    #[default]
    Local,
    /// One Slurm batch job per run.
    Slurm(SlurmOptions),
}

/// Ends the runs whose worker can no longer record their end, saying so for each: those whose
/// Slurm job ended ([`Executor::reconcile`]; nothing to do without Slurm), then those whose
/// local worker process is gone ([`Store::reap_orphans`]). Every command that opens the store
/// does this once; commands that follow a run for long do it as they go, so that a job
/// cancelled or killed before its worker could record the end does not keep them waiting.
pub async fn end_orphaned_runs(store: &Store) -> Result<()> {
    for id in Executor::Slurm(Default::default()).reconcile(store).await? {
        tracing::info!("run {id}: its Slurm job ended; marked accordingly (`workbench runs show {id}`)");
    }
    for id in store.reap_orphans(crate::store::process_alive).await? {
        tracing::info!("run {id}: its worker is gone; marked interrupted (`workbench resume {id}` continues it)");
    }
    Ok(())
}

/// Slurm jobs this process saw leave the queue: they never come back to it, so
/// [`Executor::may_be_taken_back`] does not ask about them again (`sweep` and `queue` ask on
/// every pass, and a store keeps its lease-interrupted runs for good).
static ENDED_JOBS: std::sync::LazyLock<std::sync::Mutex<BTreeSet<String>>> = std::sync::LazyLock::new(Default::default);

impl Executor {
    /// How much memory a run may use where this executor runs it: this machine's, a Slurm
    /// job's `mem=` (sbatch's units, megabytes by default) over its `cpus-per-task`, or unknown.
    pub fn memory_budget(&self) -> crate::memory::Budget {
        use crate::memory::Budget;
        match self {
            Executor::Local => Budget::Local,
            Executor::Slurm(slurm) => match slurm.options.get("mem").map(|m| parse_slurm_memory(m)) {
                Some(Some(bytes)) => Budget::Job { bytes, cpus: slurm.cpus_per_task() },
                _ => Budget::Unknown,
            },
        }
    }

    /// From `--executor NAME` and `--slurm OPTIONS`.
    pub fn from_args(name: &str, slurm: Option<&str>) -> Result<Executor> {
        match (name.trim(), slurm) {
            ("local", None) => Ok(Executor::Local),
            ("local", Some(_)) => bail!("--slurm options need --executor slurm"),
            ("slurm", options) => Ok(Executor::Slurm(SlurmOptions::parse(options.unwrap_or(""))?)),
            (other, _) => bail!("unknown executor `{other}`; use --executor local (this machine) or --executor slurm"),
        }
    }

    /// How many runs a queue runner keeps going at once unless told (`--jobs`): this
    /// machine's [default](crate::queue::default_jobs) for local workers; with Slurm
    /// [`MOST_JOBS`](crate::queue::MOST_JOBS), since this machine's cores and devices say
    /// nothing of the cluster's.
    pub fn default_jobs(&self) -> usize {
        match self {
            Executor::Local => crate::queue::default_jobs(),
            Executor::Slurm(_) => crate::queue::MOST_JOBS,
        }
    }

    /// The options that choose this executor in another `workbench` process (the TUI's `eval`).
    pub fn args(&self) -> Vec<String> {
        let mut args = vec!["--executor".to_string(), self.name().to_string()];
        if let Executor::Slurm(slurm) = self {
            args.extend(["--slurm".to_string(), slurm.to_arg()]);
        }
        args
    }

    /// `local` or `slurm`, as stored with each run.
    pub fn name(&self) -> &'static str {
        match self {
            Executor::Local => "local",
            Executor::Slurm(_) => "slurm",
        }
    }

    /// Refuses, with the reason and the fix, a combination that cannot work: Slurm jobs
    /// writing to an SQLite file on a network file system (its locks and WAL do not work
    /// across machines), a store without a place for run files, or no Slurm controller
    /// answering.
    pub fn check(&self, store: &Store) -> Result<()> {
        let Executor::Slurm(_) = self else { return Ok(()) };
        store.artifacts_dir()?;
        if let (Backend::Sqlite, Some(path)) = (store.backend(), store.location().sqlite_path()) {
            if slurm::on_network_file_system(path) {
                bail!(
                    "{} is on a network file system: Slurm jobs on other nodes would share it, and SQLite's \
                     locking and write-ahead log do not work there; use a PostgreSQL store \
                     (--db postgres://user:password@host/db, see Running on a cluster in the README)",
                    path.display()
                );
            }
        }
        slurm::controller_answers()
    }

    /// Refuses, with the reason and the fix, new runs this executor cannot place as asked,
    /// before they are stored: on Slurm, the devices the jobs would be given
    /// ([`Executor::check_devices`]), then a job of each kind the runs need, as Slurm itself
    /// judges it ([`slurm::would_take`]).
    pub fn check_runs(&self, runs: &[crate::store::NewRun]) -> Result<()> {
        self.check_devices(runs)?;
        self.check_jobs(runs.iter().map(|run| run.device.as_str()))
    }

    /// On Slurm, asks whether it would take the jobs of runs on `devices`, one job of each
    /// kind ([`slurm::would_take`]); the jobs differ only by the GPU a CUDA run asks for.
    pub fn check_jobs<'a>(&self, devices: impl IntoIterator<Item = &'a str>) -> Result<()> {
        let Executor::Slurm(options) = self else { return Ok(()) };
        let mut devices: Vec<&str> = devices.into_iter().map(str::trim).collect();
        devices.sort_by_key(|device| device.starts_with("cuda"));
        devices.dedup_by_key(|device| device.starts_with("cuda"));
        devices.iter().try_for_each(|device| slurm::would_take(options, device))
    }

    /// On Slurm, refuses `device=cuda:K` with K > 0 where the options ask for no GPUs
    /// themselves, since each job is given one GPU and sees it as `cuda:0` (the job would fail
    /// on its node after waiting in the queue).
    pub fn check_devices(&self, runs: &[crate::store::NewRun]) -> Result<()> {
        let Executor::Slurm(options) = self else { return Ok(()) };
        if options.asks_gpus() {
            return Ok(());
        }
        for run in runs {
            let device = run.device.trim();
            let ordinal = device.strip_prefix("cuda:").and_then(|k| k.trim().parse::<usize>().ok());
            if ordinal.is_some_and(|k| k > 0) {
                bail!(
                    "device={device} names one GPU of one machine, but each Slurm job is given a GPU of its \
                     own and sees it as cuda:0: use device=cuda (one GPU per job), or ask for several \
                     with --slurm gres=gpu:N"
                );
            }
        }
        Ok(())
    }

    /// Whether the executor can take work now: a Slurm controller answers. While it does not
    /// (a restart, an outage), the queue runner leaves runs queued rather than using up their
    /// start attempts.
    pub fn available(&self) -> Result<()> {
        match self {
            Executor::Local => Ok(()),
            Executor::Slurm(_) => tokio::task::block_in_place(slurm::controller_answers),
        }
    }

    /// Starts the worker of claimed run `run`; records the executor (and job) with the run, and
    /// returns the Slurm job's id (`None` for a local worker). `on_exit` receives a local
    /// worker's exit status.
    pub async fn start(
        &self,
        store: &Store,
        plugin_dirs: &[PathBuf],
        run: &RunRecord,
        resume: bool,
        on_exit: impl FnOnce(u32, std::process::ExitStatus) + Send + 'static,
    ) -> Result<Option<String>> {
        match self {
            Executor::Local => {
                crate::train::launch::spawn_detached(store, plugin_dirs, run.id, resume, on_exit)?;
                store.set_executor(run.id, "local", None).await?;
                Ok(None)
            }
            Executor::Slurm(options) => {
                let exe = crate::train::launch::workbench_exe()?;
                let artifacts = std::path::absolute(store.artifacts_dir()?)?;
                let submission = crate::store::new_uid();
                if !store.begin_submission(run.id, &submission).await? {
                    return started_meanwhile(store, run.id).await;
                }
                let spec = slurm::JobSpec {
                    run_id: run.id,
                    device: &run.device,
                    exe: &exe,
                    location: store.location(),
                    artifacts: &artifacts,
                    plugin_dirs,
                    options,
                    submission: &submission,
                };
                let job = tokio::task::block_in_place(|| slurm::submit(&spec))?;
                store.set_executor(run.id, "slurm", Some(&job)).await?;
                Ok(Some(job))
            }
        }
    }

    /// Of `runs`, those marked interrupted that their Slurm job may yet take back
    /// ([`RunRecord::may_resume_with_its_job`]), the job being still in Slurm's queue. See
    /// [`with_job_in_queue`](Self::with_job_in_queue).
    pub fn may_be_taken_back<'a>(runs: impl IntoIterator<Item = &'a RunRecord>) -> BTreeSet<i64> {
        let jobs = runs
            .into_iter()
            .filter(|run| run.may_resume_with_its_job() && run.supervision.executor.as_deref() == Some("slurm"))
            .filter_map(|run| Some((run.id, run.supervision.job_id.clone()?)));
        Self::with_job_in_queue(jobs)
    }

    /// Of `runs` (run, Slurm job), those whose job is still in Slurm's queue: one `squeue` call
    /// for all of them, none for a job seen ended before (`ENDED_JOBS`); none when Slurm does
    /// not answer.
    pub fn with_job_in_queue(runs: impl IntoIterator<Item = (i64, String)>) -> BTreeSet<i64> {
        let mut ended = ENDED_JOBS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let jobs: BTreeMap<String, i64> =
            runs.into_iter().map(|(run, job)| (job, run)).filter(|(job, _)| !ended.contains(job)).collect();
        if jobs.is_empty() {
            return BTreeSet::new();
        }
        let asked: Vec<String> = jobs.keys().cloned().collect();
        let Some(queued) = tokio::task::block_in_place(|| slurm::in_queue(&asked)) else { return BTreeSet::new() };
        ended.extend(asked.into_iter().filter(|job| !queued.contains(job)));
        jobs.into_iter().filter(|(job, _)| queued.contains(job)).map(|(_, run)| run).collect()
    }

    /// Brings runs in line with their Slurm jobs: a run whose job has ended while the run is
    /// still queued or running ends (failed or interrupted) with the job's state as its cause,
    /// and a run that its worker ended as interrupted gets its job's end as its cause once the
    /// job has left Slurm's queue. Returns the runs it ended.
    pub async fn reconcile(&self, store: &Store) -> Result<Vec<i64>> {
        let Executor::Slurm(_) = self else { return Ok(Vec::new()) };
        let runs = store.slurm_runs_to_reconcile().await?;
        let jobs: Vec<String> = runs.iter().filter_map(|r| r.supervision.job_id.clone()).collect();
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let states = tokio::task::block_in_place(|| slurm::states(&jobs))?;
        let mut ended = Vec::new();
        for run in runs {
            let job = run.supervision.job_id.clone().unwrap_or_default();
            let Some(state) = states.get(&job) else { continue };
            // A queued or running run whose job Slurm no longer knows is left to its lease and
            // its claim, which tell from the store whether its worker is alive.
            if state.forgotten() && !run.status.is_terminal() {
                continue;
            }
            if state.active() {
                if let Some(line) = state.waiting(&job).filter(|_| run.status == RunStatus::Queued) {
                    note_waiting(store, run.id, &job, line).await?;
                }
                continue;
            }
            let cause = state.cause();
            let done = match run.status {
                RunStatus::Queued => {
                    store
                        .end_unstarted_run(
                            run.id,
                            &format!(
                        "its Slurm job {job} ended ({}) before the worker started; see runs/{}/slurm-{job}.log in \
                         the artifacts directory, then `workbench resume {}`",
                        state.state, run.id, run.id
                    ),
                            &cause,
                        )
                        .await?
                }
                RunStatus::Running => {
                    store
                        .end_lost_run(
                            run.id,
                            run.worker_pid.map(i64::from),
                            &format!(
                                "its Slurm job {job} ended ({}) while the run was running; `workbench resume {}` \
                         continues it from its last checkpoint",
                                state.state, run.id
                            ),
                            &cause,
                        )
                        .await?
                }
                // Interrupted by its worker: the job's end says how (a completed job, its
                // worker stopped on request; or cancelled, preempted for good, failed), and
                // the run is not asked about again.
                _ => {
                    store.record_job_end(run.id, &job, &cause).await?;
                    false
                }
            };
            if done {
                ended.push(run.id);
            }
        }
        Ok(ended)
    }
}

/// What [`Executor::start`] answers for claimed run `id` that is no longer queued when its
/// submission would begin: a job of an earlier submission started it (then that job runs it
/// and is returned), or it was cancelled or deleted meanwhile (an error saying so).
async fn started_meanwhile(store: &Store, id: i64) -> Result<Option<String>> {
    let run = store.run(id).await?;
    match (run.status, run.supervision.job_id) {
        (RunStatus::Running, Some(job)) => Ok(Some(job)),
        (status, _) => bail!("run {id} is {status} now, so it is not submitted to Slurm"),
    }
}

/// The last reason written to each waiting run's log by this process (run -> line), so a
/// queue runner asks the store only when the reason changes.
static WAITING_NOTED: Mutex<BTreeMap<i64, String>> = Mutex::new(BTreeMap::new());

/// Writes to run `id`'s log why its Slurm job `job` waits (`line`), unless its log already
/// says so last: every process that reconciles sees the same reason, and the Live screen and
/// `runs show` read it from the log.
async fn note_waiting(store: &Store, id: i64, job: &str, line: String) -> Result<()> {
    if WAITING_NOTED.lock().unwrap_or_else(|e| e.into_inner()).get(&id) == Some(&line) {
        return Ok(());
    }
    let prefix = format!("slurm job {job} is waiting");
    let logs = store.logs(id, 50).await?;
    if logs.iter().rev().find(|l| l.starts_with(&prefix)) != Some(&line) {
        store.append_logs(id, std::slice::from_ref(&line)).await?;
    }
    WAITING_NOTED.lock().unwrap_or_else(|e| e.into_inner()).insert(id, line);
    Ok(())
}

/// Bytes of an sbatch `--mem` value: a number with an optional K, M, G or T suffix (M if none).
fn parse_slurm_memory(value: &str) -> Option<u64> {
    let value = value.trim();
    let (number, unit) = match value.char_indices().last()? {
        (i, c) if c.is_ascii_alphabetic() => (&value[..i], c.to_ascii_uppercase()),
        _ => (value, 'M'),
    };
    let shift = match unit {
        'K' => 10,
        'M' => 20,
        'G' => 30,
        'T' => 40,
        _ => return None,
    };
    number.parse::<u64>().ok()?.checked_mul(1 << shift)
}

#[cfg(test)]
mod memory_tests {
    use super::*;
    use crate::memory::Budget;

    #[test]
    fn slurm_memory_in_sbatch_units() {
        assert_eq!(parse_slurm_memory("32G"), Some(32 << 30));
        assert_eq!(parse_slurm_memory("512"), Some(512 << 20));
        assert_eq!(parse_slurm_memory("2t"), Some(2 << 40));
        assert_eq!(parse_slurm_memory("lots"), None);
        let slurm = |o: &str| Executor::from_args("slurm", Some(o)).unwrap().memory_budget();
        assert_eq!(slurm("mem=4G"), Budget::Job { bytes: 4 << 30, cpus: 1 });
        assert_eq!(slurm("mem=4G,cpus-per-task=8"), Budget::Job { bytes: 4 << 30, cpus: 8 });
        assert_eq!(slurm("partition=gpu"), Budget::Unknown);
        assert_eq!(Executor::Local.memory_budget(), Budget::Local);
    }
}

#[cfg(test)]
mod device_tests {
    use super::*;

    fn run_on(device: &str) -> crate::store::NewRun {
        let plugin =
            crate::store::PluginRef { name: "p".into(), version: "1".into(), fingerprint: "f".into(), build: None };
        crate::store::NewRun {
            layer: plugin.clone(),
            task: plugin,
            config: serde_json::json!({}),
            seed: 0,
            device: device.into(),
            git_rev: None,
            total_steps: None,
        }
    }

    #[test]
    fn a_slurm_job_is_refused_a_gpu_ordinal_it_will_not_see() {
        let slurm = |o: &str| Executor::from_args("slurm", Some(o)).unwrap();
        let runs = |devices: &[&str]| devices.iter().map(|d| run_on(d)).collect::<Vec<_>>();
        let err = slurm("partition=gpu").check_devices(&runs(&["cuda", "cuda:1"])).unwrap_err().to_string();
        assert!(
            err.contains("device=cuda:1") && err.contains("use device=cuda") && err.contains("gres=gpu:N"),
            "{err}"
        );
        slurm("partition=gpu").check_devices(&runs(&["cpu", "cuda", "cuda:0"])).unwrap();
        // Options that ask for GPUs themselves may mean several per job.
        slurm("gres=gpu:2").check_devices(&runs(&["cuda:1"])).unwrap();
        Executor::Local.check_devices(&runs(&["cuda:3"])).unwrap();
    }

    /// A claimed run that a job of an earlier submission started meanwhile is left to that job,
    /// not submitted again (no `sbatch` runs: none is needed to tell); one cancelled meanwhile
    /// is refused with its state.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_run_started_meanwhile_is_not_submitted_again() {
        let dir = tempfile::Builder::new().prefix("wb-submit-").tempdir().unwrap();
        let store = Store::open(&dir.path().join("runs.db")).await.unwrap();
        let slurm = Executor::from_args("slurm", None).unwrap();
        let started = store.create_claimed_run(&run_on("cpu"), std::process::id()).await.unwrap();
        store.mark_running_in_job(started, 3_999_951, "900", None).await.unwrap();
        let run = store.run(started).await.unwrap();
        let job = slurm.start(&store, &[], &run, false, |_, _| {}).await.unwrap();
        assert_eq!(job.as_deref(), Some("900"));
        let cancelled = store.create_claimed_run(&run_on("cpu"), std::process::id()).await.unwrap();
        store.finish(cancelled, RunStatus::Interrupted, Some("cancelled")).await.unwrap();
        let run = store.run(cancelled).await.unwrap();
        let refused = slurm.start(&store, &[], &run, false, |_, _| {}).await.unwrap_err().to_string();
        assert!(refused.contains("is interrupted now, so it is not submitted"), "{refused}");
    }
}

#[cfg(test)]
mod args_tests {
    use super::Executor;

    /// What the TUI passes to its `eval` process chooses the same executor there.
    #[test]
    fn an_executor_s_args_choose_it_again() {
        for (name, slurm) in [("local", None), ("slurm", Some("cpus-per-task=2,time=10:00,gres=gpu:1"))] {
            let executor = Executor::from_args(name, slurm).unwrap();
            let args = executor.args();
            let again = Executor::from_args(&args[1], args.get(3).map(String::as_str)).unwrap();
            assert_eq!(again, executor, "{args:?}");
        }
    }
}
