//! Sweeps, the job queue and ablation tables, through the real binary.

use crate::common;

use common::{run, temp_dir, workbench};
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};

/// A tiny Sudoku configuration (runs in a second or two).
const TINY: &[&str] = &[
    "d=16",
    "heads=2",
    "iterations=2",
    "difficulty=easy",
    "task.train_puzzles=32",
    "task.eval_puzzles=8",
    "steps=4",
    "eval_every=2",
    "eval_depths=",
    "eval_examples=8",
];

fn ok(dir: &Path, args: &[&str]) -> (String, String) {
    let (code, stdout, stderr) = run(workbench(dir).args(args));
    assert_eq!(code, 0, "workbench {args:?} failed:\n{stdout}\n{stderr}");
    (stdout, stderr)
}

fn runs(dir: &Path) -> Vec<Value> {
    let (stdout, _) = ok(dir, &["runs", "--json"]);
    serde_json::from_str::<Value>(&stdout).unwrap().as_array().cloned().expect("runs --json is an array")
}

fn status(dir: &Path, id: i64) -> String {
    let (stdout, _) = ok(dir, &["runs", "show", &id.to_string(), "--json"]);
    let v: Value = serde_json::from_str(&stdout).unwrap();
    v["run"]["status"].as_str().unwrap().to_string()
}

/// `sweep` of the tiny configuration on Sudoku over `layers` with `flag` (`--detach`,
/// `--dry-run`) and `axes`.
fn sweep_command<'a>(layers: &'a str, flag: &'a str, axes: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["sweep", "--layer", layers, "--task", "sudoku", flag];
    args.extend_from_slice(TINY);
    args.extend_from_slice(axes);
    args
}

fn sweep_detached(dir: &Path, layers: &str, axes: &[&str]) -> (String, String) {
    ok(dir, &sweep_command(layers, "--detach", axes))
}

#[test]
fn a_bad_point_refuses_the_whole_sweep_before_anything_is_queued() {
    let dir = temp_dir("sweep-bad");
    // d=30 is not divisible by heads=4; d=16 is.
    let (code, _, stderr) =
        run(workbench(&dir).args(sweep_command("transformer", "--detach", &["d=16,30", "heads=4"])));
    assert_ne!(code, 0);
    assert!(stderr.contains("nothing was queued") && stderr.contains("d=30"), "{stderr}");
    assert!(runs(&dir).is_empty(), "runs were queued");
    // A key of no plugin is refused too.
    let (code, _, stderr) = run(workbench(&dir).args(["sweep", "--layer", "transformer", "--detach", "bogus=1,2"]));
    assert_ne!(code, 0);
    assert!(stderr.contains("`bogus` is not a key"), "{stderr}");
    assert!(!stderr.contains("did you mean"), "{stderr}");
    // A misspelt one names the key meant.
    let (code, _, stderr) = run(workbench(&dir).args(["sweep", "--layer", "transformer", "--detach", "stpes=1,2"]));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("`stpes` is not a key") && stderr.contains("did you mean `steps`?"), "{stderr}");
    let (code, _, stderr) =
        run(workbench(&dir).args(["sweep", "--layer", "transformer", "--detach", "train.batch=8,16"]));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("did you mean `train.batch_size` or `train.eval_batch`?"), "the scope is kept:\n{stderr}");
    // A misspelt plugin is named as `train` names it, with where plugins are looked for.
    let (code, _, stderr) = run(workbench(&dir).args(["sweep", "--layer", "hyperst", "--detach", "seed=0,1"]));
    assert_ne!(code, 0, "{stderr}");
    assert!(stderr.contains("did you mean `hyperset`?") && stderr.contains("--plugin-dir"), "{stderr}");
    // A plugin named among the axes is refused with the option that takes it.
    let (code, _, stderr) =
        run(workbench(&dir).args(["sweep", "--layer", "hyperset", "--detach", "crate", "seed=0,1"]));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("`crate` is a layer plugin: give it as `--layer crate`"), "{stderr}");
    assert!(runs(&dir).is_empty());
}

#[test]
fn a_dry_run_prints_the_grid_and_queues_nothing() {
    let dir = temp_dir("sweep-dry");
    let mut args = sweep_command("hyperset,transformer", "--dry-run", &["step_cond=x0,xt", "seed=0,1"]);
    let (stdout, _) = ok(&dir, &args);
    assert!(stdout.contains("6 runs (a dry run: nothing was queued)"), "{stdout}");
    let listed: Vec<&str> = stdout.lines().skip(1).collect();
    assert_eq!(listed.len(), 6, "{stdout}");
    assert!(
        listed[0].contains("hyperset") && listed[0].contains("step_cond=x0") && listed[0].contains("seed=0"),
        "{stdout}"
    );
    assert!(listed[5].contains("transformer") && listed[5].contains("seed=1"), "{stdout}");
    args.push("--json");
    let (stdout, _) = ok(&dir, &args);
    let planned: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(planned["event"], "planned", "{planned}");
    assert_eq!(planned["runs"].as_array().unwrap().len(), 6, "{planned}");
    assert_eq!(planned["runs"][4]["layer"], "transformer", "{planned}");
    assert!(runs(&dir).is_empty(), "a dry run queued runs");
    // A bad point is refused as without --dry-run.
    let (code, _, stderr) =
        run(workbench(&dir).args(["sweep", "--layer", "transformer", "--dry-run", "d=16,30", "heads=4"]));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("d=30"), "{stderr}");
    assert!(runs(&dir).is_empty());
}

#[test]
fn grids_expand_over_layers_and_the_queue_runs_them_one_at_a_time() {
    let dir = temp_dir("sweep-grid");
    // step_cond exists in hyperset only: the transformer gets one point per seed.
    let (_, stderr) =
        sweep_detached(&dir, "hyperset,transformer", &["step_cond=x0,xt", "seed=0,1", "lr=1e-3:1e-2:log2"]);
    assert!(stderr.contains("12 runs queued"), "{stderr}");
    // Named after the keys that vary, not the fixed ones the command also gives.
    assert!(stderr.contains("(hyperset,transformer on sudoku: step_cond x seed x lr)"), "{stderr}");
    let listed = runs(&dir);
    assert_eq!(listed.len(), 12);
    // The revision recorded is the workspace's (the command ran in a folder outside it).
    let workspace = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let revision = workbench::ops::launch::git_revision_of(workspace);
    assert!(listed.iter().all(|r| r["git_rev"].as_str() == revision.as_deref()), "{revision:?}: {:?}", listed[0]);
    let hyperset = listed.iter().filter(|r| r["layer"]["name"] == "hyperset").count();
    assert_eq!(hyperset, 8);
    assert!(listed.iter().all(|r| r["status"] == "queued"));

    // The queue starts at most --jobs workers: sample the statuses while it runs.
    let mut child = workbench(&dir).args(["queue", "--jobs", "1"]).spawn().unwrap();
    let start = Instant::now();
    let mut most = 0;
    loop {
        let running = runs(&dir).iter().filter(|r| r["status"] == "running").count();
        most = most.max(running);
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "queue runner failed");
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(300), "the queue did not finish");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(most <= 1, "{most} runs ran at once with --jobs 1");
    assert!(runs(&dir).iter().all(|r| r["status"] == "finished"));

    // The ablation table of the sweep: rows in declared order, seeds grouped.
    let (csv, _) = ok(&dir, &["ablation", "--sweep", "1", "--format", "csv", "--metrics", "cell_acc"]);
    let rows: Vec<Vec<&str>> = csv.lines().map(|l| l.split(',').collect()).collect();
    let header = &rows[0];
    assert!(header.contains(&"step_cond") && header.contains(&"lr"), "{csv}");
    assert!(!header.iter().any(|h| h.contains("loss")), "--metrics keeps only cell_acc: {csv}");
    assert_eq!(rows.len(), 1 + 6, "4 hyperset + 2 transformer configurations:\n{csv}");
    let layer = |r: &Vec<&str>| r[0].to_string();
    assert_eq!(layer(&rows[1]), "hyperset");
    assert_eq!(layer(&rows[6]), "transformer");
    let runs_col = header.iter().position(|h| *h == "runs").unwrap();
    assert!(rows[1..].iter().all(|r| r[runs_col].split(' ').count() == 2), "two seeds per row:\n{csv}");
    let (tex, _) = ok(&dir, &["ablation", "--sweep", "1", "--format", "latex"]);
    assert!(tex.contains("\\toprule") && tex.contains("\\bottomrule") && tex.contains("$\\pm$"), "{tex}");
    let (list, _) = ok(&dir, &["sweeps"]);
    assert!(list.contains("sweep   1") && list.contains("12 finished"), "{list}");

    // `sweeps show`: the grid, the runs with the swept keys, and a command that plans it again.
    let (shown, _) = ok(&dir, &["sweeps", "show", "1"]);
    assert!(shown.contains("layers:   hyperset, transformer") && shown.contains("runs:     12 finished"), "{shown}");
    let by = format!(" ago by {}\n", workbench::store::user_name());
    assert!(shown.lines().any(|l| l.starts_with("created:")) && shown.contains(&by), "who stored it: {shown}");
    let header = shown.lines().find(|l| l.trim_start().starts_with("id")).expect("a runs table");
    let titles: Vec<&str> = header.split_whitespace().collect();
    assert_eq!(&titles[4..7], ["step_cond", "seed", "lr"], "{shown}");
    let transformer_row = shown.lines().find(|l| l.trim_start().starts_with("12 ")).unwrap();
    assert_eq!(transformer_row.split_whitespace().nth(4), Some("-"), "no step_cond for the transformer: {shown}");
    let again = shown.lines().find_map(|l| l.strip_prefix("again:")).expect("an `again:` line").trim();
    let words: Vec<&str> = again.split_whitespace().collect();
    assert_eq!(words[..2], ["workbench", "sweep"], "{again}");
    assert!(!again.contains('\''), "nothing to quote here: {again}");
    let (planned, _) = ok(&dir, &[&words[1..], &["--dry-run"]].concat());
    assert!(planned.contains("12 runs (a dry run: nothing was queued)"), "{planned}");
    let (json, _) = ok(&dir, &["sweeps", "show", "1", "--json"]);
    let json: Value = serde_json::from_str(&json).unwrap();
    assert_eq!((json["sweep"]["id"].as_i64(), json["runs"].as_array().map(Vec::len)), (Some(1), Some(12)), "{json}");
    let (code, _, stderr) = run(workbench(&dir).args(["sweeps", "show", "9"]));
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("sweep 9 does not exist"), "{stderr}");
}

#[test]
fn pause_resume_and_cancel() {
    let dir = temp_dir("sweep-pause");
    sweep_detached(&dir, "transformer", &["seed=0,1,2"]);
    ok(&dir, &["runs", "pause", "1"]);
    ok(&dir, &["runs", "cancel", "2"]);
    assert_eq!(status(&dir, 2), "interrupted");
    // The runner starts run 3 only, then stops with run 1 still paused and run 2 cancelled:
    // interrupted (exit code 130).
    let (code, _, stderr) = run(workbench(&dir).args(["queue"]));
    assert_eq!(code, 130, "{stderr}");
    assert!(stderr.contains("1 paused"), "{stderr}");
    assert_eq!((status(&dir, 1).as_str(), status(&dir, 3).as_str()), ("queued", "finished"));
    // Pausing a finished run is refused with the reason.
    let (code, _, stderr) = run(workbench(&dir).args(["runs", "pause", "3"]));
    assert_ne!(code, 0);
    assert!(stderr.contains("only queued runs"), "{stderr}");
    // A paused sweep keeps its runs; resuming it lets the queue finish them.
    ok(&dir, &["runs", "unpause", "1"]);
    ok(&dir, &["sweeps", "pause", "1"]);
    let (code, _, _) = run(workbench(&dir).args(["queue"]));
    assert_eq!(code, 130);
    assert_eq!(status(&dir, 1), "queued");
    ok(&dir, &["sweeps", "resume", "1"]);
    // A sweep that does not exist is named as a sweep.
    for action in ["pause", "resume", "cancel"] {
        let (code, _, stderr) = run(workbench(&dir).args(["sweeps", action, "9"]));
        assert_eq!(code, 1, "{stderr}");
        assert!(stderr.contains("sweep 9 does not exist (see `workbench sweeps`)"), "{action}: {stderr}");
    }
    ok(&dir, &["runs", "requeue", "2"]);
    ok(&dir, &["queue"]);
    assert_eq!((status(&dir, 1).as_str(), status(&dir, 2).as_str()), ("finished", "finished"));
    // A sweep with nothing left to stop says so.
    let (_, stderr) = ok(&dir, &["sweeps", "cancel", "1"]);
    assert!(stderr.contains("sweep 1: no queued or running run left, nothing to cancel"), "{stderr}");
}

#[test]
fn the_queue_answers_for_the_runs_it_ran_not_those_that_ended_before() {
    let dir = temp_dir("sweep-queue-scope");
    sweep_detached(&dir, "transformer", &["seed=0,1"]);
    ok(&dir, &["runs", "cancel", "1"]);
    // Run 1 ended (interrupted) before this runner started: neither counted nor its exit code.
    let (code, _, stderr) = run(workbench(&dir).args(["queue"]));
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("1 of 1 runs ended (0 not finished)"), "{stderr}");
    // Without a terminal there is no progress bar; each start is still told.
    assert!(stderr.contains("run 2 started") && !stderr.contains("run 1 started"), "{stderr}");
    assert!(stderr.contains("run 2 finished (best ") && !stderr.contains("run 1 interrupted"), "{stderr}");
    assert_eq!((status(&dir, 1).as_str(), status(&dir, 2).as_str()), ("interrupted", "finished"));
}

#[test]
fn an_interrupted_run_is_requeued_and_resumes_from_its_checkpoint() {
    let dir = temp_dir("sweep-resume");
    // The fixture's slow layer (200 ms a step): the cancel lands mid-run however fast the build.
    let plugins = common::plugin_dir_with("sweep-resume-plugins", &["fixture-panicking-plugin", "sudoku"]);
    let fixture = |args: &[&str]| {
        let mut cmd = workbench(&dir);
        cmd.env("WORKBENCH_PLUGIN_PATH", &plugins).args(args);
        cmd
    };
    let mut args = common::fixture_train_args("slow", 30, 10);
    args.splice(0..1, ["sweep".to_string(), "--detach".to_string()]);
    let (code, _, stderr) = run(&mut fixture(&args.iter().map(String::as_str).collect::<Vec<_>>()));
    assert_eq!(code, 0, "{stderr}");
    let mut queue = fixture(&["queue"]).spawn().unwrap();
    // Wait until the run has trained a few steps, then stop it.
    let start = Instant::now();
    loop {
        let r = runs(&dir);
        if r[0]["last_step"].as_u64().unwrap_or(0) >= 3 {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(120), "the run did not progress: {r:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    ok(&dir, &["runs", "cancel", "1"]);
    assert_eq!(queue.wait().unwrap().code(), Some(130), "the queue ends with the run interrupted");
    assert_eq!(status(&dir, 1), "interrupted");
    ok(&dir, &["runs", "requeue", "1"]);
    let (code, _, stderr) = run(&mut fixture(&["queue"]));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(status(&dir, 1), "finished");
    // The whole log (`runs show` has its last lines only).
    let (log, _) = ok(&dir, &["runs", "log", "1"]);
    let starts: Vec<u64> =
        log.lines().filter_map(|l| l.split("from step ").nth(1)?.split(' ').next()?.parse().ok()).collect();
    assert_eq!(starts.len(), 2, "one start and one resume: {log}");
    assert!(starts[0] == 0 && starts[1] >= 3, "resumed from its checkpoint: {starts:?}");
}

#[test]
fn free_text_values_keep_their_commas() {
    let dir = temp_dir("sweep-text");
    let tiny: Vec<&str> = TINY.iter().copied().filter(|a| !a.starts_with("eval_depths")).collect();
    let mut args = vec!["sweep", "--layer", "transformer", "--task", "sudoku", "--detach", "eval_depths=1.5,2"];
    args.extend_from_slice(&tiny);
    let (_, stderr) = ok(&dir, &args);
    assert!(stderr.contains("1 run queued"), "eval_depths is one value, not a list: {stderr}");
    let listed = runs(&dir);
    assert!(listed[0]["config"].to_string().contains("1.5,2"), "{}", listed[0]["config"]);
}

/// What cannot start a sweep's workers is refused before anything is queued: no workers at
/// once (`--jobs 0`), or the Slurm executor with no controller answering (a `slurm.conf`
/// naming a closed port on this machine; `scontrol ping` says it is down). `train` refuses
/// the same executor before it stores its run.
#[test]
fn a_sweep_that_could_not_start_its_workers_queues_nothing() {
    let dir = temp_dir("sweep-no-workers");
    let with_jobs = |jobs: &'static str| {
        let mut args = vec!["sweep", "--layer", "hyperset", "--task", "sudoku", "--jobs", jobs, "seed=0,1"];
        args.extend_from_slice(TINY);
        args
    };
    let (code, _, stderr) = run(workbench(&dir).args(with_jobs("0")));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--jobs") && stderr.contains("must be at least 1"), "{stderr}");
    assert!(runs(&dir).is_empty(), "runs were queued");

    let closed_port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let conf = dir.join("slurm.conf");
    std::fs::write(
        &conf,
        format!(
            "ClusterName=closed\nSlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort={closed_port}\n\
             NodeName=localhost CPUs=1 State=UNKNOWN\nPartitionName=debug Nodes=localhost Default=YES\n"
        ),
    )
    .unwrap();
    let slurm = |args: &[&str]| run(workbench(&dir).env("SLURM_CONF", &conf).arg("--executor").arg("slurm").args(args));
    let refused_for_slurm = |stderr: &str| {
        stderr.contains("no Slurm controller answers") && stderr.contains("--executor local")
            || stderr.contains("`scontrol` is not installed")
    };
    let (code, _, stderr) = slurm(&with_jobs("1"));
    assert_eq!(code, 2, "{stderr}");
    assert!(refused_for_slurm(&stderr), "{stderr}");
    let mut train = vec!["train", "--layer", "hyperset", "--task", "sudoku"];
    train.extend_from_slice(TINY);
    let (code, _, stderr) = slurm(&train);
    assert_eq!(code, 2, "{stderr}");
    assert!(refused_for_slurm(&stderr), "{stderr}");
    assert!(runs(&dir).is_empty(), "runs were stored");
}
