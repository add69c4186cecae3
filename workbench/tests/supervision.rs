//! Run supervision, process by process: abnormal ends keep their cause, cancel ends a layer
//! stuck in a loop, the `train` command only follows its worker (killing it, closing its
//! output or hanging up loses nothing; Ctrl-C stops with a checkpoint), and a frozen worker
//! loses its lease. Uses the fixture layer `panicking` (workbench/tests/fixtures).

use crate::common;

use common::{fixture_train_args, plugin_dir_with, run, temp_dir, workbench, TestDir};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A store directory and a plugin directory with the fixture layer and Sudoku.
fn setup(tag: &str) -> (TestDir, TestDir) {
    (temp_dir(&format!("{tag}-db")), plugin_dir_with(tag, &["fixture-panicking-plugin", "sudoku"]))
}

/// `workbench train` of the fixture layer in `mode` for `steps` steps.
fn train_cmd(dir: &Path, plugins: &Path, mode: &str, steps: u32) -> Command {
    let mut cmd = workbench(dir);
    cmd.env("WORKBENCH_PLUGIN_PATH", plugins).args(fixture_train_args(mode, steps, steps.min(5)));
    cmd
}

fn show(dir: &Path, id: u32) -> Value {
    let (code, out, err) = run(workbench(dir).args(["runs", "show", &id.to_string(), "--json"]));
    assert_eq!(code, 0, "{err}");
    serde_json::from_str::<Value>(&out).unwrap()["run"].clone()
}

/// Polls `runs show` until `done` holds (at most `limit`); `null` while the run does not
/// exist yet.
fn wait_for(dir: &Path, id: u32, limit: Duration, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let (code, out, _) = run(workbench(dir).args(["runs", "show", &id.to_string(), "--json"]));
        let run = if code == 0 { serde_json::from_str::<Value>(&out).unwrap()["run"].clone() } else { Value::Null };
        if done(&run) || Instant::now() > deadline {
            return run;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn running(run: &Value) -> bool {
    run["status"] == "running" && run["last_step"].as_u64().unwrap_or(0) >= 1
}

fn signal(pid: u32, signal: i32) {
    // SAFETY: kill(2) only sends a signal.
    unsafe { libc::kill(pid as i32, signal) };
}

/// Kills the processes of a test that failed half-way (a worker looping forever would
/// otherwise outlive it).
struct KillOnDrop(Vec<u32>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        // Only when the test failed: the pids of a test that passed may be reused already.
        if std::thread::panicking() {
            for &pid in &self.0 {
                signal(pid, libc::SIGKILL);
            }
        }
    }
}

fn worker_pid(run: &Value) -> u32 {
    run["worker_pid"].as_u64().expect("a worker pid is recorded") as u32
}

/// A layer that aborts or crashes: the run ends `interrupted` with the signal as its cause,
/// and the host only reports it.
#[test]
fn abort_and_segfault_in_a_layer_are_stored_with_their_signal() {
    for (mode, name) in [("abort", "SIGABRT"), ("segv", "SIGSEGV")] {
        let (dir, plugins) = setup(&format!("crash-{mode}"));
        let (code, _, stderr) = run(&mut train_cmd(&dir, &plugins, mode, 3));
        assert_eq!(code, 130, "an interrupted run exits 130: {stderr}");
        let run = show(&dir, 1);
        assert_eq!(run["status"], "interrupted", "{run}");
        let cause = run["supervision"]["cause"].as_str().unwrap_or_default();
        assert!(cause.contains(name), "{mode}: {cause}");
        assert!(run["error"].as_str().unwrap_or_default().contains("workbench resume 1"), "{run}");
        let (_, shown, _) = run_show_text(&dir, 1);
        assert!(shown.contains("cause:    signal") && shown.contains(name), "{shown}");
        println!("FIGURE plugin faults: {mode} in a layer's forward pass: the run is stored as interrupted by {name}");
    }
}

fn run_show_text(dir: &Path, id: u32) -> (i32, String, String) {
    run(workbench(dir).args(["runs", "show", &id.to_string()]))
}

/// Cancel of a layer stuck in an endless loop: the stop request cannot reach it, so after
/// the grace period it is terminated, and the run is interrupted with that cause.
#[test]
fn cancel_ends_a_layer_that_loops_forever_within_the_grace_period() {
    let (dir, plugins) = setup("cancel-loop");
    let train_err = dir.join("train.stderr");
    let mut train = train_cmd(&dir, &plugins, "loop", 5)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&train_err).unwrap())
        .spawn()
        .unwrap();
    let mut guard = KillOnDrop(vec![train.id()]);
    let started = wait_for(&dir, 1, Duration::from_secs(60), |r| r["status"] == "running");
    let said = std::fs::read_to_string(&train_err).unwrap_or_default();
    assert_eq!(started["status"], "running", "{started}; train said: {said}");
    guard.0.push(worker_pid(&started));
    std::thread::sleep(Duration::from_millis(500)); // inside the endless forward pass now
    let started = Instant::now();
    let (code, _, stderr) = run_cancel(&dir, 1, "1");
    let took = started.elapsed();
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("terminated"), "{stderr}");
    assert!(took < Duration::from_secs(1 + 2 + 5 + 5), "cancel took {took:?}");
    let run = show(&dir, 1);
    assert_eq!(run["status"], "interrupted", "{run}");
    assert!(train.wait().unwrap().code().is_some(), "the train command ends too");
    let cause = run["supervision"]["cause"].as_str().unwrap_or_default().to_string();
    assert!(cause.contains("SIGTERM") || cause.contains("SIGKILL"), "{cause}");
    println!("FIGURE plugin faults: an endless loop in a layer: cancelled in {:.1} s (grace 1 s)", took.as_secs_f64());
}

fn run_cancel(dir: &Path, id: u32, grace: &str) -> (i32, String, String) {
    run(workbench(dir).args(["runs", "cancel", &id.to_string(), "--grace", grace]))
}

/// Killing `train`, closing its output, or hanging it up: the worker trains on and the run
/// finishes.
#[test]
fn the_train_command_only_follows_its_worker() {
    for how in ["kill", "close-stdout", "hangup"] {
        let (dir, plugins) = setup(&format!("follow-{how}"));
        let mut train = train_cmd(&dir, &plugins, "slow", 12)
            .arg("--json")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut stdout = BufReader::new(train.stdout.take().unwrap());
        let mut first = String::new();
        stdout.read_line(&mut first).unwrap();
        assert!(first.contains("\"event\""), "{how}: {first}");
        match how {
            "kill" => train.kill().unwrap(),
            "close-stdout" => drop(stdout),
            _ => signal(train.id(), libc::SIGHUP),
        }
        let _ = train.wait();
        let run = wait_for(&dir, 1, Duration::from_secs(120), |r| r["status"] != "running" && r["status"] != "queued");
        assert_eq!(run["status"], "finished", "{how}: {run}");
        assert_eq!(run["last_step"], 12, "{how}");
    }
}

/// Ctrl-C on a foreground `train`: the worker checkpoints, the run is interrupted, a line
/// says how to resume, and resuming finishes it.
#[test]
fn ctrl_c_on_train_stops_with_a_checkpoint_and_says_how_to_resume() {
    let (dir, plugins) = setup("ctrl-c");
    let train: Child = train_cmd(&dir, &plugins, "slow", 200).stderr(Stdio::piped()).spawn().unwrap();
    let started = wait_for(&dir, 1, Duration::from_secs(60), running);
    assert!(running(&started), "{started}");
    signal(train.id(), libc::SIGINT);
    let output = train.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("stopping run 1 at its next step"), "{stderr}");
    assert!(stderr.contains("workbench resume 1"), "{stderr}");
    let run = show(&dir, 1);
    assert_eq!(run["status"], "interrupted", "{run}");
    let step = run["last_step"].as_u64().unwrap();
    assert!((1..200).contains(&step), "{run}");
    assert!(dir.join("runs/1/checkpoint.safetensors").is_file(), "checkpoint written");
}

/// A worker frozen with SIGSTOP stops renewing its lease and is marked interrupted by the
/// next reader; requeued meanwhile (as `resume` does), the run is no longer its own: when it
/// thaws, it finds its lease lost and ends without touching the run. (A run nobody took
/// meanwhile is taken back: `a_worker_cut_off_for_longer_than_a_lease_takes_its_run_back`.)
#[test]
fn a_frozen_worker_whose_run_was_requeued_loses_its_lease() {
    let (dir, plugins) = setup("frozen");
    let lease = |cmd: &mut Command| {
        cmd.env("WORKBENCH_HEARTBEAT_S", "0.3").env("WORKBENCH_LEASE_S", "2");
    };
    let mut cmd = train_cmd(&dir, &plugins, "slow", 400);
    lease(&mut cmd);
    let mut train = cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let started = wait_for(&dir, 1, Duration::from_secs(60), running);
    let pid = worker_pid(&started);
    signal(pid, libc::SIGSTOP);
    std::thread::sleep(Duration::from_secs(4));
    let mut runs = workbench(&dir);
    lease(&mut runs);
    let (code, _, stderr) = run(runs.arg("runs"));
    assert_eq!(code, 0, "{stderr}");
    let frozen = show(&dir, 1);
    assert_eq!(frozen["status"], "interrupted", "{frozen}");
    assert!(frozen["supervision"]["cause"].as_str().unwrap_or_default().starts_with("lease expired"), "{frozen}");
    let mut requeue = workbench(&dir);
    lease(&mut requeue);
    let (code, _, stderr) = run(requeue.args(["runs", "requeue", "1"]));
    assert_eq!(code, 0, "{stderr}");
    signal(pid, libc::SIGCONT);
    let _ = train.wait();
    std::thread::sleep(Duration::from_secs(1));
    let after = show(&dir, 1);
    assert_eq!(after["status"], "queued", "the thawed worker did not take the run back: {after}");
    assert_eq!(after["last_step"], frozen["last_step"], "nor wrote to it");
}

/// A worker that dies before it marks its run running does not strand the run `queued`
/// (where `resume` would refuse it): the run fails with the exit as its cause, keeping the
/// worker's last lines, and can be resumed.
#[tokio::test]
async fn a_worker_dying_before_it_starts_leaves_a_resumable_failed_run() {
    use std::os::unix::process::ExitStatusExt;
    use workbench::store::{RunStatus, Store};
    let dir = temp_dir("unstarted");
    let store = Store::open(&dir.join("runs.db")).await.unwrap();
    let id = store.create_claimed_run(&common::plain_run(0), std::process::id()).await.unwrap();
    let lines = vec!["error: cannot open the store".to_string()];
    let status = std::process::ExitStatus::from_raw(1 << 8);
    let cause = workbench::train::exit::record_abnormal_end(&store, id, 4242, &status, &lines).await.unwrap();
    assert_eq!(cause.as_deref(), Some("exit code 1"));
    let record = store.run(id).await.unwrap();
    assert_eq!(record.status, RunStatus::Failed);
    assert!(record.error.unwrap_or_default().contains("before it could start the run"));
    assert_eq!(store.logs(id, 5).await.unwrap(), vec!["worker stderr: error: cannot open the store"]);
    store.requeue(id).await.unwrap();
}

/// A worker whose starter's claim passed to another runner while it waited to start (a claim
/// renewed by nobody times out), or a Slurm job's worker for a run that belongs to another
/// job, ends without touching the run, saying why; the run stays with the runner or job that
/// holds it.
#[tokio::test]
async fn a_worker_leaves_a_run_that_is_not_its_own() {
    use workbench::store::{NewRun, RunStatus, Store};
    let dir = temp_dir("not-its-own");
    let store = Store::open(&dir.join("runs.db")).await.unwrap();
    let config = serde_json::json!({"layer": "p", "task": "p", "layer_config": {}, "task_config": {}, "train": {}});
    let run = NewRun { config, ..common::plain_run(0) };
    let worker = |id: i64, extra: &[&str], job: Option<&str>| {
        let mut cmd = workbench(&dir);
        cmd.args(["worker", "--run", &id.to_string()]).args(extra).env_remove("SLURM_JOB_ID");
        if let Some(job) = job {
            cmd.env("SLURM_JOB_ID", job);
        }
        let out = cmd.output().unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let other_runner = std::process::id() + 1;
    let claimed = store.create_claimed_run(&run, other_runner).await.unwrap();
    let stderr = worker(claimed, &["--claimed-by", &std::process::id().to_string()], None);
    assert!(stderr.contains(&format!("run {claimed} is queued, so it cannot start running")), "{stderr}");
    assert!(stderr.contains("another runner took it while this worker waited to start it"), "{stderr}");
    let record = store.run(claimed).await.unwrap();
    assert_eq!((record.status, record.worker_pid), (RunStatus::Queued, None));
    assert!(store.holds_claim(claimed, other_runner).await.unwrap(), "the other runner keeps its claim");

    let submitted = store.create_claimed_run(&run, other_runner).await.unwrap();
    store.set_executor(submitted, "slurm", Some("4712")).await.unwrap();
    let stderr = worker(submitted, &["--resume"], Some("4711"));
    assert!(stderr.contains("it belongs to Slurm job 4712, and this is job 4711"), "{stderr}");
    let record = store.run(submitted).await.unwrap();
    assert_eq!((record.status, record.worker_pid), (RunStatus::Queued, None));
    assert_eq!(record.supervision.job_id.as_deref(), Some("4712"));

    // Submitted again before the latest job's id is recorded: a job of the earlier submission
    // leaves the run, the latest job's worker takes it.
    let resubmitted = store.create_claimed_run(&run, other_runner).await.unwrap();
    assert!(store.begin_submission(resubmitted, "earlier").await.unwrap());
    assert!(store.begin_submission(resubmitted, "latest").await.unwrap());
    let stderr = worker(resubmitted, &["--resume", "--submission", "earlier"], Some("4713"));
    assert!(stderr.contains("submitted to Slurm again since this job (4713)"), "{stderr}");
    assert_eq!(store.run(resubmitted).await.unwrap().status, RunStatus::Queued);
    let latest = workbench(&dir)
        .args(["worker", "--run", &resubmitted.to_string(), "--resume", "--submission", "latest"])
        .env("SLURM_JOB_ID", "4714")
        .output()
        .unwrap();
    let record = store.run(resubmitted).await.unwrap();
    let said = String::from_utf8_lossy(&latest.stderr);
    assert_eq!(record.supervision.job_id.as_deref(), Some("4714"), "the latest job started the run: {said}");
    assert!(record.started_at.is_some(), "{said}");
}

/// `workbench` on the test store `db`, its run files in `artifacts/` there, with the plugins
/// of `plugins`.
fn workbench_on(db: &common::stores::TestDb, plugins: &Path) -> Command {
    let mut cmd = workbench(&db.dir);
    cmd.env("WORKBENCH_DB", db.db_arg())
        .env("WORKBENCH_ARTIFACTS", db.dir.join("artifacts"))
        .env("WORKBENCH_PLUGIN_PATH", plugins);
    cmd
}

/// A PostgreSQL store out of reach for a few seconds while a sweep trains (its database
/// refuses connections and the open ones are cut, as in a server restart): the worker trains
/// on, keeps what it records and writes it once the store answers again, and the sweep's
/// queue runner waits for the store instead of ending. Both runs finish with every step's
/// loss stored once, and the run's log says what happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_rides_out_a_store_outage() {
    use common::stores::{Backend, TestDb};
    let Some(db) = TestDb::new(Backend::Postgres, "store-outage").await else { return };
    let plugins = plugin_dir_with("store-outage", &["fixture-panicking-plugin", "sudoku"]);
    let steps: u32 = 25;
    let workbench_on_store = || workbench_on(&db, &plugins);
    let mut args = fixture_train_args("slow", steps, 5);
    args[0] = "sweep".into();
    args.push("seed=0,1".into());
    let mut sweep = workbench_on_store().args(&args).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let _guard = KillOnDrop(vec![sweep.id()]);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (code, out, _) = run(workbench_on_store().args(["runs", "show", "1", "--json"]));
        if code == 0 && running(&serde_json::from_str::<Value>(&out).unwrap()["run"]) {
            break;
        }
        assert!(Instant::now() < deadline, "run 1 never started");
        std::thread::sleep(Duration::from_millis(100));
    }
    db.set_out_of_reach(true).await;
    // Longer than the worker's writes and the runner's passes are apart (2 s, 0.5 s), shorter
    // than a lease (30 s).
    std::thread::sleep(Duration::from_secs(5));
    db.set_out_of_reach(false).await;
    let status = sweep.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut sweep.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(status.success(), "{status}\n{stderr}");
    assert!(stderr.contains("the run store is out of reach") && stderr.contains("answers again"), "{stderr}");
    for id in [1, 2] {
        let (code, out, err) = run(workbench_on_store().args(["runs", "show", &id.to_string(), "--json"]));
        assert_eq!(code, 0, "{err}");
        let shown: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(shown["run"]["status"], "finished", "run {id}\n{stderr}");
        assert_eq!(shown["run"]["last_step"], steps, "run {id}\n{stderr}");
        let losses = "SELECT COUNT(*) FROM metrics WHERE run_id = $1 AND split = 'train' AND name = 'loss'";
        let distinct =
            "SELECT COUNT(DISTINCT step) FROM metrics WHERE run_id = $1 AND split = 'train' AND name = 'loss'";
        assert_eq!(db.count(losses, id).await, i64::from(steps), "run {id}: every step's loss once");
        assert_eq!(db.count(distinct, id).await, i64::from(steps), "run {id}");
    }
    let noted = "SELECT COUNT(*) FROM logs WHERE run_id = $1 AND line LIKE '%the run store answers again%'";
    assert_eq!(db.count(noted, 1).await, 1, "{stderr}");
}

/// A cluster's workers share the PostgreSQL server's connections. Each keeps one while its
/// run trains (its heartbeat and its writer share it; the server lists it under the run), and
/// one that finds no connection free as it starts waits for one: under a limit that three
/// runs starting at once exceed (half of it held by others for a while; then their runner's 3
/// or 4 and 1 a worker once it trains), every run finishes. `doctor` names the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_stay_within_the_connection_limit() {
    use common::stores::{Backend, TestDb};
    let Some(db) = TestDb::new(Backend::Postgres, "connections").await else { return };
    let plugins = plugin_dir_with("connections", &["fixture-panicking-plugin", "sudoku"]);
    db.set_connection_limit(8).await;
    let workbench_on_store = || workbench_on(&db, &plugins);
    // (Its plugins check fails: the test's plugin directory holds a second copy of sudoku.)
    let (_, out, _) = run(workbench_on_store().arg("doctor"));
    let store_line = out.lines().find(|l| l.starts_with("store")).unwrap_or_default().to_string();
    assert!(store_line.contains("takes 8 connections") && store_line.contains("more running runs"), "{out}");
    // 200 ms a step: each run trains for 20 s or more.
    let steps: u32 = 100;
    let mut args = fixture_train_args("slow", steps, 50);
    args[0] = "sweep".into();
    args.extend(["seed=0,1,2".into(), "--jobs".into(), "3".into()]);
    // Half the limit held by others for the first seconds: the runner fits in what is left
    // (it opens 4 at most), its three workers (2 each as they start) do not all.
    let mut others = Vec::new();
    for _ in 0..4 {
        others.push(db.connect().await);
    }
    let mut sweep = workbench_on_store().args(&args).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let _guard = KillOnDrop(vec![sweep.id()]);
    tokio::time::sleep(Duration::from_secs(4)).await;
    for other in others {
        sqlx::Connection::close(other).await.unwrap();
    }
    // Once every run trains, the connection its worker started it with is closed (unused
    // for 5 s): one a run, which its heartbeat and writer share.
    let of_run = |names: &[(String, i64)], run: i64| -> Vec<(String, i64)> {
        let name = format!("workbench run {run}");
        names.iter().filter(|(n, _)| *n == name || n.starts_with(&format!("{name} "))).cloned().collect()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let names = db.connections_by_name().await;
        if (1..=3).all(|run| of_run(&names, run) == [(format!("workbench run {run}"), 1)]) {
            break;
        }
        assert!(Instant::now() < deadline, "the workers never settled at one connection each: {names:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let status = sweep.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut sweep.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(status.success(), "{status}\n{stderr}");
    // Three workers starting at once took more than the limit left them for a while.
    let logs: String = (1..=3)
        .map(|id| std::fs::read_to_string(db.dir.join(format!("artifacts/runs/{id}/worker.log"))).unwrap_or_default())
        .collect();
    assert!(logs.contains("too many connections for database"), "{logs}");
    for id in 1..=3 {
        let (code, out, err) = run(workbench_on_store().args(["runs", "show", &id.to_string(), "--json"]));
        assert_eq!(code, 0, "{err}");
        let shown: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(shown["run"]["status"], "finished", "run {id}\n{stderr}");
        assert_eq!(shown["run"]["last_step"], steps, "run {id}\n{stderr}");
    }
}

/// The network between a worker and PostgreSQL cut for longer than a lease, the server up: a
/// reader marks the run interrupted (its lease expired), and when the network is back the
/// worker takes the run back and finishes it, every step's loss stored once.
#[tokio::test(flavor = "multi_thread")]
async fn a_worker_cut_off_for_longer_than_a_lease_takes_its_run_back() {
    use common::proxy::CuttableProxy;
    use common::stores::{Backend, TestDb};
    let Some(db) = TestDb::new(Backend::Postgres, "network-cut").await else { return };
    let plugins = plugin_dir_with("network-cut", &["fixture-panicking-plugin", "sudoku"]);
    let proxy = CuttableProxy::start(db.postgres_addr());
    let steps: u32 = 60;
    // The worker reaches the store through the proxy, the test's reader directly; both count
    // leases of 2 s renewed every 0.5 s.
    let workbench_on = |db_arg: std::ffi::OsString| {
        let mut cmd = workbench(&db.dir);
        cmd.env("WORKBENCH_DB", db_arg)
            .env("WORKBENCH_ARTIFACTS", db.dir.join("artifacts"))
            .env("WORKBENCH_PLUGIN_PATH", &plugins)
            .env("WORKBENCH_LEASE_S", "2")
            .env("WORKBENCH_HEARTBEAT_S", "0.5");
        cmd
    };
    let reader = || workbench_on(db.db_arg());
    // Run 1 as the reader sees it (null before it is created).
    let show = || {
        let (code, out, _) = run(reader().args(["runs", "show", "1", "--json"]));
        if code == 0 {
            serde_json::from_str::<Value>(&out).unwrap()["run"].clone()
        } else {
            Value::Null
        }
    };
    let mut train = workbench_on(db.db_arg_through(proxy.port).into())
        .args(fixture_train_args("slow", steps, 5))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let _guard = KillOnDrop(vec![train.id()]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !running(&show()) {
        assert!(Instant::now() < deadline, "run 1 never started");
        std::thread::sleep(Duration::from_millis(100));
    }
    proxy.set_cut(true);
    std::thread::sleep(Duration::from_secs(4));
    let reaped = show();
    assert_eq!(reaped["status"], "interrupted", "{reaped}");
    assert!(reaped["supervision"]["cause"].as_str().unwrap_or_default().starts_with("lease expired"), "{reaped}");
    proxy.set_cut(false);
    let status = train.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut train.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(status.success(), "{status}\n{stderr}");
    let ended = show();
    assert_eq!(ended["status"], "finished", "{ended}\n{stderr}");
    assert_eq!(ended["last_step"], steps, "{stderr}");
    let distinct = "SELECT COUNT(DISTINCT step) FROM metrics WHERE run_id = $1 AND split = 'train' AND name = 'loss'";
    assert_eq!(db.count(distinct, 1).await, i64::from(steps), "every step's loss\n{stderr}");
    let noted = "SELECT COUNT(*) FROM logs WHERE run_id = $1 AND line LIKE '%nobody resumed it meanwhile%'";
    assert_eq!(db.count(noted, 1).await, 1, "{stderr}");
}
