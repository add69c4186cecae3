//! Runs on a real Slurm cluster with a shared PostgreSQL store: the single-node cluster and the
//! server that `scripts/services start` runs on this machine (`eval "$(scripts/services env)"`
//! sets `WORKBENCH_TEST_SLURM` and `WORKBENCH_TEST_POSTGRES`). Without them the tests skip with
//! a message, except under CI, where they fail.

use crate::common;

use common::proxy::CuttableProxy;
use common::stores::{Backend, TestDb};
use common::tmux::Tmux;
use common::{fixture_train_args, plugin_dir_with, run, workbench, TestDir};
use serde_json::Value;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Whether a Slurm cluster is there to test against (panics under CI when it is not).
fn slurm_available() -> bool {
    if std::env::var_os("WORKBENCH_TEST_SLURM").is_some() {
        return true;
    }
    if std::env::var_os("CI").is_some() {
        panic!(
            "WORKBENCH_TEST_SLURM is not set, and CI must test the Slurm executor: \
             run `scripts/services start` and `eval \"$(scripts/services env)\"` first"
        );
    }
    eprintln!("skipped: no Slurm cluster (`scripts/services start` runs one on this machine)");
    false
}

/// A PostgreSQL store with its artifacts directory, the plugins its jobs load, and the
/// workbench command on them.
struct Cluster {
    db: TestDb,
    /// Kept as long as the test: Slurm starts the jobs later, and they load plugins from here.
    plugins: TestDir,
}

impl Cluster {
    async fn new(tag: &str) -> Option<Cluster> {
        if !slurm_available() {
            return None;
        }
        let db = TestDb::new(Backend::Postgres, tag).await?;
        let plugins = plugin_dir_with(tag, &["fixture-panicking-plugin", "sudoku"]);
        Some(Cluster { db, plugins })
    }

    /// `workbench` with `--executor slurm` on the shared store and artifacts.
    fn workbench(&self) -> Command {
        let mut cmd = workbench(&self.db.dir);
        cmd.env("WORKBENCH_DB", self.db.db_arg())
            .env("WORKBENCH_ARTIFACTS", self.db.dir.join("artifacts"))
            .env("WORKBENCH_EXECUTOR", "slurm")
            .env("WORKBENCH_SLURM", "cpus-per-task=1");
        cmd
    }

    /// `cmd` (a fixture run: `train` or `sweep`) started in the background with its stderr
    /// kept, once run 1 has trained two steps.
    fn start_training(&self, cmd: &mut Command) -> std::process::Child {
        let child = cmd
            .env("WORKBENCH_PLUGIN_PATH", &self.plugins)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let running = self.wait_for(1, Duration::from_secs(90), |r| r["last_step"].as_u64().unwrap_or(0) >= 2);
        assert_eq!(running["status"], "running", "{running}");
        child
    }

    /// `train` of the fixture layer with `args`, in the background (it follows its Slurm job).
    fn spawn_fixture_train(&self, args: &[String]) -> std::process::Child {
        self.workbench()
            .env("WORKBENCH_PLUGIN_PATH", &self.plugins)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    }

    /// `train` of the fixture's slow mode for `steps` steps (evaluated every 2) with
    /// `--slurm` options `slurm`, in the background with its stderr kept.
    fn spawn_slow_train_with(&self, slurm: &str, steps: u32) -> std::process::Child {
        self.workbench()
            .env("WORKBENCH_SLURM", slurm)
            .env("WORKBENCH_PLUGIN_PATH", &self.plugins)
            .args(fixture_train_args("slow", steps, 2))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    fn show(&self, id: i64) -> Value {
        let (code, out, err) = run(self.workbench().args(["runs", "show", &id.to_string(), "--json"]));
        assert_eq!(code, 0, "{err}");
        serde_json::from_str::<Value>(&out).unwrap()
    }

    /// Polls until run `id` satisfies `done` (at most `limit`).
    fn wait_for(&self, id: i64, limit: Duration, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + limit;
        loop {
            let (code, out, _) = run(self.workbench().args(["runs", "show", &id.to_string(), "--json"]));
            let run = if code == 0 { serde_json::from_str::<Value>(&out).unwrap()["run"].clone() } else { Value::Null };
            if done(&run) || Instant::now() > deadline {
                return run;
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    }
}

const TINY: [&str; 9] = [
    "d=16",
    "heads=2",
    "iterations=2",
    "difficulty=easy",
    "task.train_puzzles=32",
    "task.eval_puzzles=8",
    "eval_examples=8",
    "eval_depths=",
    "threads=1",
];

/// `doctor` on the cluster: the PostgreSQL store (its password never printed), the shared
/// artifacts directory, and a controller that takes a CPU run's job with the `--slurm`
/// options; a partition the cluster lacks is a problem in sbatch's words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_checks_the_store_and_the_slurm_controller() {
    let Some(cluster) = Cluster::new("slurm-doctor").await else { return };
    let (code, stdout, stderr) = run(cluster.workbench().arg("doctor"));
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("(PostgreSQL): 0 runs, 0 running, 0 queued; new runs are stored as "), "{stdout}");
    assert!(
        stdout.contains(
            "slurm: the controller answers, and sbatch --test-only takes a CPU run's job with --slurm cpus-per-task=1"
        ),
        "{stdout}"
    );
    let url = cluster.db.db_arg().into_string().unwrap();
    if let Some(password) =
        url.split_once("://").and_then(|(_, rest)| rest.split_once('@')).and_then(|(user, _)| user.split_once(':'))
    {
        assert!(!stdout.contains(&format!(":{}@", password.1)), "the password is printed: {stdout}");
    }
    let (code, stdout, _) = run(cluster.workbench().env("WORKBENCH_SLURM", "partition=nowhere").arg("doctor"));
    assert_eq!(code, 1, "{stdout}");
    let executor = stdout.lines().find(|l| l.starts_with("executor")).unwrap_or_default();
    assert!(executor.contains("PROBLEM") && stdout.contains("invalid partition"), "{stdout}");
}

/// A sweep of four tiny runs through Slurm into PostgreSQL: every run finishes as its own
/// job, and another process reads their metrics from the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_runs_as_slurm_jobs_into_postgres() {
    let Some(cluster) = Cluster::new("slurm-sweep").await else { return };
    let mut args = vec!["sweep", "--layer", "hyperset", "--task", "sudoku", "--jobs", "4", "steps=4", "eval_every=2"];
    args.extend(TINY);
    args.push("seed=0,1,2,3");
    let (code, _, stderr) = run(cluster.workbench().args(&args));
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("4 of 4 runs ended (0 not finished)"), "{stderr}");
    // Another process, another connection: the runs, their jobs and their metrics.
    let (code, out, err) = run(cluster.workbench().args(["runs", "--json"]));
    assert_eq!(code, 0, "{err}");
    let runs: Value = serde_json::from_str(&out).unwrap();
    let runs = runs.as_array().expect("a list of runs");
    assert_eq!(runs.len(), 4);
    let mut jobs = Vec::new();
    for r in runs {
        assert_eq!(r["status"], "finished", "{r}");
        assert_eq!(r["supervision"]["executor"], "slurm", "{r}");
        jobs.push(r["supervision"]["job_id"].as_str().unwrap().to_string());
        let id = r["id"].as_i64().unwrap();
        let submitted = format!("run {id} submitted as Slurm job {}", jobs.last().unwrap());
        assert!(stderr.contains(&submitted), "{stderr}");
        let shown = cluster.show(id);
        let metrics = shown["metrics"].as_array().unwrap();
        assert!(metrics.iter().any(|m| m["split"] == "eval" && m["name"] == "cell_acc"), "{shown}");
        let script = cluster.db.dir.join(format!("artifacts/runs/{id}/slurm.sh"));
        let text = std::fs::read_to_string(&script).expect("the batch script is kept with the run");
        assert!(text.contains(&format!("worker --run {id} --resume")), "{text}");
        assert!(!text.contains(":workbench@"), "no password in the script: {text}");
        let (_, shown, _) = run(cluster.workbench().args(["runs", "show", &id.to_string()]));
        assert!(shown.contains("batch script (") && shown.contains("#SBATCH --requeue"), "{shown}");
        assert!(shown.contains(&format!("slurm job {}", jobs.last().unwrap())), "{shown}");
        // The job's worker starts with --resume, but a first start has nothing to resume.
        let (_, log, _) = run(cluster.workbench().args(["runs", "log", &id.to_string()]));
        assert!(log.contains("training hyperset on sudoku") && !log.contains("checkpoint"), "{log}");
    }
    jobs.sort();
    jobs.dedup();
    assert_eq!(jobs.len(), 4, "one job per run");
}

/// `eval` on the cluster: a run trained as a Slurm job is evaluated again by a Slurm job of
/// its own, which reads the checkpoint from the shared artifacts directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evaluation_runs_as_a_slurm_job() {
    let Some(cluster) = Cluster::new("slurm-eval").await else { return };
    let mut args = vec!["train", "--layer", "hyperset", "--task", "sudoku", "steps=4", "eval_every=2"];
    args.extend(TINY);
    let (code, _, err) = run(cluster.workbench().args(&args));
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = run(cluster.workbench().args(["eval", "1", "eval_depths=2", "--json"]));
    assert_eq!(code, 0, "{err}");
    let events: Vec<Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let started = events.iter().find(|e| e["event"] == "started").expect("a start event");
    let job = started["job"].as_str().expect("the Slurm job of the evaluation");
    let evaluated = events.iter().find(|e| e["event"] == "evaluated").expect("what it scored");
    assert_eq!(
        (&evaluated["run"], &evaluated["source"], &evaluated["status"]),
        (&2.into(), &1.into(), &"finished".into())
    );
    assert!(evaluated["eval"]["cell_acc"].is_number(), "{evaluated}");
    let shown = cluster.show(2);
    assert_eq!(shown["run"]["supervision"]["executor"], "slurm", "{shown}");
    assert_eq!(shown["run"]["supervision"]["job_id"], job, "{shown}");
    assert!(shown["metrics"].as_array().unwrap().iter().any(|m| m["split"] == "eval@4"), "{shown}");
    let script = cluster.db.dir.join("artifacts/runs/2/slurm.sh");
    assert!(std::fs::read_to_string(&script).unwrap().contains("worker --run 2 --resume"));
}

/// The TUI on Slurm and PostgreSQL, as a lab uses it: a queued run is submitted by the TUI's
/// queue as a Slurm job (the status line names the job), trains on the cluster on the CPUs
/// Slurm allotted, and is shown finished; the store label names the executor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tui_submits_queued_runs_as_slurm_jobs() {
    let Some(cluster) = Cluster::new("slurm-tui").await else { return };
    let mut args = vec!["sweep", "--layer", "hyperset", "--task", "sudoku", "--detach", "steps=4", "eval_every=2"];
    // Threads as by default (one per usable core), in a job of one CPU.
    args.extend(TINY.iter().filter(|a| !a.starts_with("threads=")));
    let (code, _, stderr) = run(cluster.workbench().args(&args));
    assert_eq!(code, 0, "{stderr}");
    let vars = [
        format!("WORKBENCH_DB={}", cluster.db.db_arg().to_string_lossy()),
        format!("WORKBENCH_ARTIFACTS={}", cluster.db.dir.join("artifacts").display()),
        "WORKBENCH_EXECUTOR=slurm".to_string(),
        "WORKBENCH_SLURM=cpus-per-task=1".to_string(),
        format!("SLURM_CONF={}", std::env::var("SLURM_CONF").unwrap_or_default()),
    ];
    let tmux = Tmux::start(&cluster.db.dir, "slurm-tui", &vars);
    let screen = tmux.wait_for("run 1 submitted as Slurm job", 60);
    assert!(screen.lines().next().unwrap_or("").trim_end().ends_with("· slurm"), "{screen}");
    let job = cluster.wait_for(1, Duration::from_secs(5), |r| !r["supervision"]["job_id"].is_null());
    let job = job["supervision"]["job_id"].as_str().expect("run 1 has a Slurm job").to_string();
    assert!(screen.contains(&format!("run 1 submitted as Slurm job {job}")), "{screen}");
    let screen = tmux.wait_for("finished", 120);
    assert!(screen.contains("4/4"), "{screen}");
    assert_eq!(tmux.quit(), "0");
    // The worker used the one CPU Slurm allotted, not every core of the node.
    let (_, log, _) = run(cluster.workbench().args(["runs", "log", "1"]));
    assert!(log.contains("sudoku (") && log.contains("one thread"), "{log}");
}

/// A long sweep left unattended: queued with `--detach`, its queue runner handed to Slurm as a
/// job of its own (`sbatch --wrap "workbench queue"`, as the README shows), which submits the
/// runs' jobs from inside the cluster and ends when they have.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_runner_runs_as_a_slurm_job_of_its_own() {
    let Some(cluster) = Cluster::new("slurm-runner-job").await else { return };
    let mut args = vec!["sweep", "--detach", "--layer", "hyperset", "--task", "sudoku", "steps=4", "eval_every=2"];
    args.extend(TINY);
    args.push("seed=0,1");
    let (code, _, stderr) = run(cluster.workbench().args(&args));
    assert_eq!(code, 0, "{stderr}");
    // sbatch passes the submitting shell's environment on: the store, artifacts and executor.
    let template = cluster.workbench();
    let mut sbatch = Command::new("sbatch");
    for (key, value) in template.get_envs() {
        match value {
            Some(value) => sbatch.env(key, value),
            None => sbatch.env_remove(key),
        };
    }
    let log = cluster.db.dir.join("runner.log");
    let wrapped = format!("exec '{}' queue --jobs 1", env!("CARGO_BIN_EXE_workbench"));
    let (code, job, err) = run(sbatch
        .current_dir(&cluster.db.dir)
        .args(["--parsable", "--cpus-per-task=1", "--job-name=workbench-runner"])
        .arg(format!("--output={}", log.display()))
        .args(["--wrap", &wrapped]));
    assert_eq!(code, 0, "{err}");
    let job = job.trim().to_string();
    for id in [1, 2] {
        let ended = cluster.wait_for(id, Duration::from_secs(240), |r| r["status"] == "finished");
        assert_eq!(ended["status"], "finished", "{ended}");
        assert_ne!(ended["supervision"]["job_id"].as_str(), Some(job.as_str()), "each run is a job of its own");
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let runner_log = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("runs ended") || Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(Duration::from_millis(300));
    };
    let _ = Command::new("scancel").arg(&job).status();
    assert!(
        runner_log.contains("run 1 submitted as Slurm job") && runner_log.contains("run 2 finished"),
        "{runner_log}"
    );
    assert!(runner_log.contains("2 of 2 runs ended (0 not finished)"), "{runner_log}");
}

/// `scancel` of a running job: the run ends interrupted with Slurm's state as its cause;
/// requeued, it resumes from its checkpoint and ends with the same loss as an uninterrupted
/// run of the same configuration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scancel_interrupts_and_a_requeued_run_ends_as_if_uninterrupted() {
    let Some(cluster) = Cluster::new("slurm-scancel").await else { return };
    let mut args = fixture_train_args("slow", 40, 5);
    args.push("--json".into());
    let mut train = cluster.spawn_fixture_train(&args);
    let run1 = cluster.wait_for(1, Duration::from_secs(90), |r| r["last_step"].as_u64().unwrap_or(0) >= 12);
    assert_eq!(run1["status"], "running", "{run1}");
    let job = run1["supervision"]["job_id"].as_str().unwrap().to_string();
    let (code, _, err) = run(Command::new("scancel").arg(&job));
    assert_eq!(code, 0, "{err}");
    let _ = train.wait();
    let ended = cluster.wait_for(1, Duration::from_secs(60), |r| r["supervision"]["cause"].is_string());
    assert_eq!(ended["status"], "interrupted", "{ended}");
    assert!(ended["supervision"]["cause"].as_str().unwrap().contains("CANCELLED"), "{ended}");

    let (code, _, err) = run(cluster.workbench().args(["runs", "requeue", "1"]));
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = run(cluster.workbench().env("WORKBENCH_PLUGIN_PATH", &cluster.plugins).args(["queue"]));
    assert_eq!(code, 0, "{err}");
    let resumed = cluster.show(1);
    assert_eq!(resumed["run"]["status"], "finished", "{resumed}");

    // The same configuration without interruption, as a second run.
    args.retain(|a| a != "--json");
    let (code, _, err) = run(cluster.workbench().env("WORKBENCH_PLUGIN_PATH", &cluster.plugins).args(&args));
    assert_eq!(code, 0, "{err}");
    let final_loss = |shown: &Value| {
        shown["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["split"] == "train" && m["name"] == "loss")
            .map(|m| m["summary"]["last"].clone())
            .expect("a train loss")
    };
    let uninterrupted = cluster.show(2);
    assert_eq!(final_loss(&resumed), final_loss(&uninterrupted), "same final loss, bit for bit");
}

/// A job that Slurm requeues (as on preemption) starts again and continues its run from the
/// last checkpoint, to the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_requeued_job_continues_its_run_from_the_checkpoint() {
    let Some(cluster) = Cluster::new("slurm-requeue").await else { return };
    let mut train = cluster.spawn_fixture_train(&fixture_train_args("slow", 30, 5));
    let running = cluster.wait_for(1, Duration::from_secs(90), |r| r["last_step"].as_u64().unwrap_or(0) >= 7);
    let job = running["supervision"]["job_id"].as_str().unwrap().to_string();
    let (code, _, err) = run(Command::new("scontrol").args(["requeue", &job]));
    assert_eq!(code, 0, "{err}");
    start_requeued_job_soon(&job);
    // `train` follows the run through its requeued job to the end.
    let exit = exit_within(&mut train, Duration::from_secs(120), "after the requeued job continued the run");
    assert_eq!(exit.code(), Some(0));
    let finished = cluster.show(1)["run"].clone();
    assert_eq!(finished["status"], "finished", "{finished}");
    assert_eq!(finished["last_step"], 30);
    assert_eq!(finished["supervision"]["job_id"], job.as_str(), "still under its job: {finished}");
    let (_, shown, _) = run(cluster.workbench().args(["runs", "show", "1"]));
    assert!(shown.contains("resuming from the checkpoint at step"), "{shown}");
}

/// `runs cancel` of a run on Slurm: its worker stops at its next step with a checkpoint, the
/// job completes, and the job's end is recorded as the run's cause, so that nothing asks
/// Slurm about that job again; `train`, following the run, ends with it. So is the end of a
/// job that Slurm no longer knows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_slurm_run_records_its_job_s_end() {
    let Some(cluster) = Cluster::new("slurm-cancel").await else { return };
    let mut train = cluster.spawn_slow_train_with("cpus-per-task=1", 60);
    cluster.wait_for(1, Duration::from_secs(90), |r| r["last_step"].as_u64().unwrap_or(0) >= 5);
    let (code, out, err) = run(cluster.workbench().args(["runs", "cancel", "1"]));
    assert_eq!(code, 0, "{out}{err}");
    let exit = exit_within(&mut train, Duration::from_secs(60), "after its run was cancelled");
    assert_ne!(exit.code(), Some(0), "the run did not finish");
    let ended = cluster.wait_for(1, Duration::from_secs(60), |r| r["supervision"]["cause"].is_string());
    assert_eq!(ended["status"], "interrupted", "{ended}");
    let cause = ended["supervision"]["cause"].as_str().unwrap_or_default();
    assert!(cause.starts_with("slurm: COMPLETED"), "{ended}");
    assert!(ended["error"].as_str().unwrap_or_default().contains("with a checkpoint"), "{ended}");

    // The same run as if its job had ended long before anything looked, on a cluster without
    // accounting, which forgets a job MinJobAge after its end: the end is recorded all the same.
    let forget = "UPDATE runs SET cause = NULL, job_id = '99999999' WHERE id = $1 RETURNING id";
    cluster.db.count(forget, 1).await;
    let shown = cluster.show(1)["run"].clone();
    assert_eq!(shown["status"], "interrupted", "{shown}");
    assert_eq!(shown["supervision"]["cause"], "slurm: the job has ended; Slurm no longer knows how", "{shown}");
}

/// `sweep` arguments for two runs of the fixture's slow mode (seeds 0 and 1, `steps` steps,
/// evaluated every 5), one job at a time.
fn slow_sweep_of_two_one_at_a_time(steps: u32) -> Vec<String> {
    let mut args = fixture_train_args("slow", steps, 5);
    args[0] = "sweep".to_string();
    args.splice(1..1, ["--jobs".to_string(), "1".to_string()]);
    args.push("seed=0,1".into());
    args
}

/// A sweep on Slurm without `--jobs` submits every run at once (the cluster's scheduler decides
/// what runs when, not the submitting machine's cores): while its first run trains, the others
/// are Slurm jobs too, running or waiting in Slurm's queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_on_slurm_submits_every_run_unless_told_otherwise() {
    let Some(cluster) = Cluster::new("slurm-default-jobs").await else { return };
    let steps: u32 = 40;
    let mut args = fixture_train_args("slow", steps, 5);
    args[0] = "sweep".to_string();
    args.push("seed=0,1,2".into());
    let mut sweep = cluster.start_training(cluster.workbench().args(args));
    for id in 2..=3 {
        let run = cluster.wait_for(id, Duration::from_secs(5), |r| !r["supervision"]["job_id"].is_null());
        assert!(!run["supervision"]["job_id"].is_null(), "run {id} is submitted while run 1 trains: {run}");
    }
    let first = cluster.show(1)["run"].clone();
    assert!(first["last_step"].as_u64().unwrap() < u64::from(steps), "run 1 still trains: {first}");
    let exit = exit_within(&mut sweep, Duration::from_secs(180), "after its three runs finished");
    assert_eq!(exit.code(), Some(0));
    for id in 1..=3 {
        assert_eq!(cluster.show(id)["run"]["status"], "finished");
    }
}

/// A sweep of two runs, one job at a time, whose first run's job Slurm requeues (as on
/// preemption): while that job waits in Slurm's queue its run keeps the sweep's one slot, so
/// the second run is not submitted meanwhile; the requeued job continues the first run, and
/// the sweep ends when both have finished.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_keeps_the_slot_of_a_run_whose_job_slurm_requeued() {
    let Some(cluster) = Cluster::new("slurm-requeue-sweep").await else { return };
    let steps: u32 = 30;
    let mut sweep = cluster.start_training(cluster.workbench().args(slow_sweep_of_two_one_at_a_time(steps)));
    let running = cluster.wait_for(1, Duration::from_secs(90), |r| r["last_step"].as_u64().unwrap_or(0) >= 7);
    let job = running["supervision"]["job_id"].as_str().expect("the run's job").to_string();
    let (code, _, err) = run(Command::new("scontrol").args(["requeue", &job]));
    assert_eq!(code, 0, "{err}");
    wait_until_requeued(&job);
    // Several of the sweep's passes while the job waits, held back by Slurm after its requeue.
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(cluster.show(1)["run"]["status"], "interrupted", "the requeued job has not started yet");
    let second = cluster.show(2)["run"].clone();
    assert_eq!(second["status"], "queued", "the requeued run's slot stays taken: {second}");
    assert!(second["supervision"]["job_id"].is_null(), "no job for the second run yet: {second}");
    start_requeued_job_soon(&job);
    let exit = exit_within(&mut sweep, Duration::from_secs(180), "after both runs finished");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut sweep.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(exit.code(), Some(0), "{stderr}");
    for id in 1..=2 {
        let shown = cluster.show(id);
        assert_eq!(shown["run"]["status"], "finished", "{shown}\n{stderr}");
        assert_eq!(shown["run"]["last_step"], steps, "{shown}");
    }
    assert_eq!(cluster.show(1)["run"]["supervision"]["job_id"], job.as_str(), "still under its job");
}

/// The shared store out of reach for a few seconds while a Slurm job trains (its database
/// refuses connections and the open ones are cut, as in a server restart): the job's worker
/// trains on and writes what it kept once the store answers, and `train`, following the job
/// through the store, waits for it. The run finishes with every step's loss stored once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slurm_run_and_its_follower_ride_out_a_store_outage() {
    let Some(cluster) = Cluster::new("slurm-outage").await else { return };
    let steps: u32 = 25;
    let mut train = cluster.start_training(cluster.workbench().args(fixture_train_args("slow", steps, 5)));
    cluster.db.set_out_of_reach(true).await;
    std::thread::sleep(Duration::from_secs(5));
    cluster.db.set_out_of_reach(false).await;
    let status = train.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut train.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(status.success(), "{status}\n{stderr}");
    assert!(stderr.contains("the run store is out of reach"), "{stderr}");
    let shown = cluster.show(1);
    assert_eq!(shown["run"]["status"], "finished", "{shown}\n{stderr}");
    assert_eq!(shown["run"]["last_step"], steps, "{shown}");
    let losses = "SELECT COUNT(*) FROM metrics WHERE run_id = $1 AND split = 'train' AND name = 'loss'";
    assert_eq!(cluster.db.count(losses, 1).await, i64::from(steps), "every step's loss once");
}

/// The network between a Slurm job (and `train` following it) and PostgreSQL cut for longer
/// than a lease, the server up: a reader marks the run interrupted, and `train` follows on
/// while the job runs; when the network is back the worker takes the run back and finishes
/// it, and `train` ends with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slurm_run_cut_off_for_longer_than_a_lease_is_taken_back_and_followed() {
    cut_off_for_longer_than_a_lease("train").await;
}

/// The same with `sweep` (two runs, one job at a time) in place of `train`: the sweep waits for
/// the run instead of ending with it interrupted, and starts no other run in its slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_waits_for_a_slurm_run_cut_off_for_longer_than_a_lease() {
    cut_off_for_longer_than_a_lease("sweep").await;
}

async fn cut_off_for_longer_than_a_lease(command: &str) {
    let Some(cluster) = Cluster::new(&format!("slurm-network-cut-{command}")).await else { return };
    let proxy = CuttableProxy::start(cluster.db.postgres_addr());
    let steps: u32 = 60;
    // Leases of 2 s renewed every 0.5 s, for the job (sbatch passes the environment on), the
    // follower and the test's reader alike.
    let leases = |cmd: &mut Command| {
        cmd.env("WORKBENCH_LEASE_S", "2").env("WORKBENCH_HEARTBEAT_S", "0.5");
    };
    let args = match command {
        "sweep" => slow_sweep_of_two_one_at_a_time(steps),
        _ => fixture_train_args("slow", steps, 5),
    };
    let mut follower = cluster.workbench();
    leases(&mut follower);
    let mut train =
        cluster.start_training(follower.env("WORKBENCH_DB", cluster.db.db_arg_through(proxy.port)).args(args));
    proxy.set_cut(true);
    std::thread::sleep(Duration::from_secs(4));
    let mut reader = cluster.workbench();
    leases(&mut reader);
    let (code, out, err) = run(reader.args(["runs", "show", "1", "--json"]));
    assert_eq!(code, 0, "{err}");
    let reaped: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(reaped["run"]["status"], "interrupted", "{reaped}");
    // The network back for the follower first: the worker (a process on this node) is held
    // stopped for 2 s, and `train` reads the run interrupted meanwhile.
    let worker = reaped["run"]["worker_pid"].as_u64().expect("a worker pid") as i32;
    // SAFETY: kill(2) only sends a signal.
    unsafe { libc::kill(worker, libc::SIGSTOP) };
    proxy.set_cut(false);
    std::thread::sleep(Duration::from_secs(2));
    let following = train.try_wait().unwrap();
    let second = (command == "sweep").then(|| cluster.show(2));
    // SAFETY: as above.
    unsafe { libc::kill(worker, libc::SIGCONT) };
    assert!(following.is_none(), "{command} ended while its job still ran: {following:?}");
    if let Some(second) = second {
        assert_eq!(second["run"]["status"], "queued", "the cut-off run's slot stays taken: {second}");
        assert!(second["run"]["supervision"]["job_id"].is_null(), "no job for the second run yet: {second}");
    }
    let status = train.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut train.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(status.success(), "{status}\n{stderr}");
    let runs = if command == "sweep" { 2 } else { 1 };
    for id in 1..=runs {
        let shown = cluster.show(id);
        assert_eq!(shown["run"]["status"], "finished", "{shown}\n{stderr}");
        assert_eq!(shown["run"]["last_step"], steps, "{shown}");
    }
    let distinct = "SELECT COUNT(DISTINCT step) FROM metrics WHERE run_id = $1 AND split = 'train' AND name = 'loss'";
    assert_eq!(cluster.db.count(distinct, 1).await, i64::from(steps), "every step's loss");
}

/// A run whose Slurm job waits says why in its log (the Live screen's log lines and `runs
/// show`): here a start time an hour away, Slurm's reason `BeginTime`, written once however
/// many processes look. Cancelled before it starts, the job ends its run, and `train`, which
/// follows it alone (no other command looks at the store meanwhile), ends with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_job_s_reason_goes_to_its_run_s_log() {
    let Some(cluster) = Cluster::new("slurm-waiting").await else { return };
    let mut train = cluster.spawn_slow_train_with("cpus-per-task=1,begin=now+3600", 4);
    let waiting = "is waiting: BeginTime (its start time has not come)";
    let deadline = Instant::now() + Duration::from_secs(60);
    let shown = loop {
        // The run appears once `train` has stored it.
        let (code, out, _) = run(cluster.workbench().args(["runs", "show", "1", "--json"]));
        let shown = if code == 0 { serde_json::from_str::<Value>(&out).unwrap() } else { Value::Null };
        let noted =
            shown["log"].as_array().is_some_and(|l| l.iter().any(|line| line.as_str().unwrap().contains(waiting)));
        if noted || Instant::now() > deadline {
            break shown;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let job = shown["run"]["supervision"]["job_id"].as_str().map(str::to_string);
    // The table says the run is with Slurm, not merely queued.
    let (_, table, _) = run(cluster.workbench().arg("runs"));
    let (_, shown_text, _) = run(cluster.workbench().args(["runs", "show", "1"]));
    if let Some(job) = &job {
        let _ = Command::new("scancel").arg(job).status();
    }
    let row = table.lines().find(|l| l.trim_start().starts_with("1 ")).unwrap_or_default();
    assert!(row.contains(" submitted "), "{table}");
    assert!(shown_text.starts_with("run 1: queued (submitted) —"), "{shown_text}");
    // `train` sees the job gone by itself, within a few of its passes.
    let deadline = Instant::now() + Duration::from_secs(60);
    let exit = loop {
        if let Some(status) = train.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = train.kill();
            break None;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut train.stderr.take().unwrap(), &mut stderr).unwrap();
    let _ = train.wait();
    assert_eq!(shown["run"]["status"], "queued", "{shown}");
    let lines: Vec<&str> = shown["log"].as_array().unwrap().iter().map(|l| l.as_str().unwrap()).collect();
    let job = job.expect("the run has its job");
    assert_eq!(lines.iter().filter(|l| l.contains(waiting)).count(), 1, "{lines:?}");
    assert!(lines.contains(&format!("slurm job {job} {waiting}").as_str()), "{lines:?}");
    let exit = exit.unwrap_or_else(|| panic!("`train` still followed the cancelled job after 60 s:\n{stderr}"));
    assert_eq!(exit.code(), Some(3), "a run failed: {stderr}");
    assert!(stderr.contains(&format!("Slurm job {job} ended (CANCELLED) before the worker started")), "{stderr}");
}

/// A job of this user held in Slurm's queue while the test runs: what a submit limit counts.
struct HeldJob(String);

impl HeldJob {
    fn submit() -> HeldJob {
        let out = Command::new("sbatch").args(["--parsable", "--hold", "--job-name=held", "--wrap", "true"]).output();
        let out = out.expect("sbatch runs");
        assert!(out.status.success(), "sbatch --hold: {}", String::from_utf8_lossy(&out.stderr));
        HeldJob(String::from_utf8_lossy(&out.stdout).trim().split(';').next().unwrap().to_string())
    }
}

impl Drop for HeldJob {
    fn drop(&mut self) {
        let _ = Command::new("scancel").arg(&self.0).status();
    }
}

/// The submit limit of `scripts/services` (Slurm's job_submit/lua plugin refusing, with the
/// error of a QOS over its MaxSubmitJobsPerUser, a job whose comment names a file that exists):
/// its `--slurm` option and the file, created.
fn submit_limit(cluster: &Cluster) -> (String, std::path::PathBuf) {
    let flag = cluster.db.dir.join("submit-limit");
    std::fs::write(&flag, "").unwrap();
    (format!("comment=submit-limit:{}", flag.display()), flag)
}

/// A lab's submit limit reached: the queue runner keeps the runs queued without using up
/// their start attempts, says why, asks Slurm again only when the pause is over, and submits
/// them once Slurm takes jobs again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_runs_wait_while_slurm_s_submit_limit_refuses_them() {
    use workbench::executor::{slurm::SlurmOptions, Executor};
    use workbench::queue::{QueueRunner, SPAWN_ATTEMPTS};
    let Some(cluster) = Cluster::new("slurm-submit-limit").await else { return };
    let _held = HeldJob::submit();
    let (option, flag) = submit_limit(&cluster);
    let store = cluster.db.open().await;
    let first = store.create_run(&common::plain_run(0)).await.unwrap();
    let executor = Executor::Slurm(SlurmOptions::parse(&option).unwrap());
    let mut runner = QueueRunner::new(store.clone(), Vec::new(), 2).with_executor(executor);
    runner.submit_limit_retry = Duration::ZERO;
    for pass in 1..=SPAWN_ATTEMPTS + 2 {
        assert!(runner.tick().await.unwrap().is_empty(), "pass {pass} started a run");
        let run = store.run(first).await.unwrap();
        assert_eq!(run.status.to_string(), "queued", "pass {pass}: {:?}", run.error);
        let waiting = runner.waiting().unwrap_or_default();
        assert!(waiting.starts_with("runs stay queued: Slurm takes no more jobs"), "{waiting}");
        assert!(waiting.contains("Job violates accounting/QOS policy"), "Slurm's words: {waiting}");
    }
    std::fs::remove_file(&flag).unwrap();
    let started: Vec<i64> = runner.tick().await.unwrap().iter().map(|s| s.run).collect();
    assert_eq!(started, vec![first], "submitted once Slurm takes it");
    assert_eq!(runner.waiting(), None);
    let mut news = None;
    assert_eq!(runner.waiting_news(&mut news), None, "nothing to tell after a pause that ended");

    // Refused again: not asked before the pause is over, even though Slurm would take it now.
    let second = store.create_run(&common::plain_run(1)).await.unwrap();
    std::fs::write(&flag, "").unwrap();
    runner.submit_limit_retry = Duration::from_secs(3600);
    assert!(runner.tick().await.unwrap().is_empty());
    assert!(
        runner.waiting_news(&mut news).is_some_and(|n| n.contains("runs stay queued: Slurm takes no more jobs")),
        "{news:?}"
    );
    std::fs::remove_file(&flag).unwrap();
    assert!(runner.tick().await.unwrap().is_empty(), "asked again within the pause");
    assert_eq!(store.run(second).await.unwrap().status.to_string(), "queued");
    // The first run's job would start this test binary as its worker: it is not needed.
    let job = store.run(first).await.unwrap().supervision.job_id.expect("the first run's job");
    workbench::executor::slurm::cancel(&job).unwrap();
}

/// `train` at a lab's submit limit: it says once that the run waits and why, and submits it
/// when Slurm takes jobs again; the run trains to its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn train_waits_for_slurm_s_submit_limit() {
    let Some(cluster) = Cluster::new("slurm-train-limit").await else { return };
    let _held = HeldJob::submit();
    let (option, flag) = submit_limit(&cluster);
    let mut train = cluster.spawn_slow_train_with(&format!("cpus-per-task=1,{option}"), 2);
    let (lines, said) = std::sync::mpsc::channel();
    let stderr = train.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(stderr)).map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !seen.iter().any(|l: &String| l.contains("run 1 waits: Slurm takes no more jobs")) {
        let left = deadline.saturating_duration_since(Instant::now());
        match said.recv_timeout(left) {
            Ok(line) => seen.push(line),
            Err(_) => panic!("`train` did not say it waits:\n{}", seen.join("\n")),
        }
    }
    let waiting = cluster.show(1);
    assert_eq!(waiting["run"]["status"], "queued", "{waiting}");
    assert!(waiting["run"]["supervision"]["job_id"].is_null(), "no job yet: {waiting}");
    std::fs::remove_file(&flag).unwrap();
    let exit = exit_within(&mut train, Duration::from_secs(120), "after Slurm took its job");
    seen.extend(said.try_iter());
    assert_eq!(exit.code(), Some(0), "{}", seen.join("\n"));
    assert_eq!(seen.iter().filter(|l| l.contains("waits: Slurm takes no more jobs")).count(), 1, "said once");
    let ended = cluster.show(1);
    assert_eq!(ended["run"]["status"], "finished", "{ended}");
    assert!(ended["run"]["supervision"]["job_id"].is_string(), "{ended}");
}

/// Options Slurm can never take (a partition it does not have): `train` and `sweep` ask
/// Slurm first (`sbatch --test-only`) and refuse, with sbatch's words, before a run is stored;
/// `queue` before it submits a queued run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn options_slurm_would_refuse_are_refused_before_a_run_is_stored() {
    let Some(cluster) = Cluster::new("slurm-refused-early").await else { return };
    let refused = |args: Vec<String>| {
        let (code, _, stderr) = run(cluster
            .workbench()
            .env("WORKBENCH_SLURM", "partition=nowhere")
            .env("WORKBENCH_PLUGIN_PATH", &cluster.plugins)
            .args(args));
        assert_eq!(code, 2, "refused as bad input: {stderr}");
        assert!(stderr.contains("Slurm would not take") && stderr.contains("invalid partition"), "{stderr}");
        assert!(stderr.contains("change --slurm") && stderr.contains("nothing was stored"), "{stderr}");
    };
    refused(fixture_train_args("slow", 2, 2));
    let mut sweep = common::fixture_sweep_args("slow", 2, 2);
    sweep.push("seed=0,1".into());
    refused(sweep);
    let (code, out, err) = run(cluster.workbench().args(["runs", "--json"]));
    assert_eq!(code, 0, "{err}");
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap(), serde_json::json!([]), "nothing stored");
    // A run queued with good options, then a queue runner with bad ones: it submits nothing.
    let mut detached = common::fixture_sweep_args("slow", 2, 2);
    detached.extend(["seed=0".into(), "--detach".into()]);
    let (code, _, err) = run(cluster.workbench().env("WORKBENCH_PLUGIN_PATH", &cluster.plugins).args(detached));
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = run(cluster.workbench().env("WORKBENCH_SLURM", "partition=nowhere").args(["queue"]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("Slurm would not take") && err.contains("nothing was stored or submitted"), "{err}");
    let queued = cluster.show(1);
    assert_eq!(queued["run"]["status"], "queued", "{queued}");
    assert!(queued["run"]["supervision"]["job_id"].is_null(), "not submitted: {queued}");
}

/// A queued run whose job Slurm refuses for good when the queue submits it (its options were
/// checked by another runner, or the partition went away since): the run fails with sbatch's
/// words after its start attempts, rather than staying queued for a later runner to start
/// unasked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_slurm_refuses_fails_its_run_with_slurm_s_words() {
    use workbench::executor::{slurm::SlurmOptions, Executor};
    use workbench::queue::{QueueRunner, SPAWN_ATTEMPTS};
    let Some(cluster) = Cluster::new("slurm-refused").await else { return };
    let store = cluster.db.open().await;
    let id = store.create_run(&common::plain_run(0)).await.unwrap();
    let executor = Executor::Slurm(SlurmOptions::parse("partition=nowhere").unwrap());
    let runner = QueueRunner::new(store.clone(), Vec::new(), 1).with_executor(executor);
    for _ in 0..=SPAWN_ATTEMPTS {
        assert!(runner.tick().await.unwrap().is_empty(), "nothing started");
        if store.run(id).await.unwrap().status.to_string() == "failed" {
            break;
        }
    }
    let failed = store.run(id).await.unwrap();
    assert_eq!(failed.status.to_string(), "failed", "{:?}", failed.error);
    let error = failed.error.unwrap_or_default();
    assert!(error.contains(&format!("sbatch refused run {id}: sbatch: error: invalid partition")), "{error}");
}

/// Waits until requeued job `job` is back in Slurm's queue, then lets it start two seconds
/// later. Slurm holds a requeued job back for a while (its eligible time); two seconds are
/// enough because slurmd refuses to launch a job whose credential dates from the second its
/// previous start was killed in ("Job credential revoked"), which is what that hold waits out.
fn start_requeued_job_soon(job: &str) {
    wait_until_requeued(job);
    let (code, _, err) = run(Command::new("scontrol").args(["update", &format!("JobId={job}"), "StartTime=now+2"]));
    assert_eq!(code, 0, "{err}");
}

/// Waits until requeued job `job` is back in Slurm's queue, waiting to start again.
fn wait_until_requeued(job: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, shown, _) = run(Command::new("scontrol").args(["show", "job", "-o", job]));
        if shown.contains("JobState=PENDING") && shown.contains("Restarts=1") {
            break;
        }
        assert!(Instant::now() < deadline, "job {job} did not return to the queue: {shown}");
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// A job warned that its time limit nears (the batch script's `--signal`; the warning is sent
/// here as Slurm sends it, with `scancel --signal=USR1 --batch`): its worker stops with a
/// checkpoint and requeues the job, whose next start continues the run to its end, while
/// `train` follows it throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_at_its_time_limit_requeues_itself_and_continues_its_run() {
    let Some(cluster) = Cluster::new("slurm-time-limit").await else { return };
    let mut train = cluster.spawn_slow_train_with("cpus-per-task=1", 30);
    let running = cluster.wait_for(1, Duration::from_secs(90), |r| r["last_step"].as_u64().unwrap_or(0) >= 5);
    let job = running["supervision"]["job_id"].as_str().expect("the run's job").to_string();
    let script = std::fs::read_to_string(cluster.db.dir.join("artifacts/runs/1/slurm.sh")).unwrap();
    assert!(script.contains("#SBATCH --signal=B:USR1@300\n"), "{script}");
    let (code, _, err) = run(Command::new("scancel").args(["--signal=USR1", "--batch", &job]));
    assert_eq!(code, 0, "{err}");
    start_requeued_job_soon(&job);
    let exit = exit_within(&mut train, Duration::from_secs(120), "after the requeued job continued the run");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut train.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(exit.code(), Some(0), "{stderr}");
    assert!(stderr.contains("requeued at its time limit; following on"), "{stderr}");
    let shown = cluster.show(1);
    assert_eq!(shown["run"]["status"], "finished", "{shown}");
    assert_eq!(shown["run"]["last_step"], 30, "{shown}");
    let (code, log, err) = run(cluster.workbench().args(["runs", "log", "1"]));
    assert_eq!(code, 0, "{err}");
    let stopped = format!("as its Slurm job {job}'s time limit neared; the job is requeued");
    assert!(log.contains(&stopped), "{log}");
    assert!(log.contains("resuming from the checkpoint at step"), "{log}");
}

/// The exit status of `train`, which must end within `limit` (`after` says after what).
fn exit_within(train: &mut std::process::Child, limit: Duration, after: &str) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = train.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = train.kill();
            panic!("`train` did not end {after}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
