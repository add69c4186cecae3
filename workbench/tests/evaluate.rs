//! A trained run's checkpoint used again, through the real binary: `workbench eval N` scores it
//! with other evaluation settings as a new run, and `train ... init_from=N` starts a new run
//! from its parameters.

use crate::common;

use common::{run, temp_dir, train_tiny, workbench};
use serde_json::{json, Value};

/// What `eval --json` printed that each evaluation scored (its `evaluated` events).
fn evaluations(out: &str) -> Vec<Value> {
    let events = out.lines().map(|l| serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("{e}: {l}")));
    events.filter(|e| e["event"] == "evaluated").collect()
}

#[test]
fn eval_scores_a_checkpoint_deeper_and_on_other_data_as_a_new_run() {
    let dir = temp_dir("eval");
    train_tiny(&dir, "hyperset", &[]);
    let (code, out, err) = run(workbench(&dir).args([
        "eval",
        "1",
        "eval_depths=2,4",
        "difficulty=hard",
        "task.eval_puzzles=6",
        "eval_examples=6",
        "--json",
    ]));
    assert_eq!(code, 0, "{err}");
    let queued: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(queued, json!({"event": "queued", "runs": [{"run": 2, "source": 1}]}), "{out}");
    let [evaluated] = <[Value; 1]>::try_from(evaluations(&out)).unwrap();
    assert_eq!((evaluated["run"].clone(), evaluated["source"].clone()), (json!(2), json!(1)), "{evaluated}");
    assert_eq!(evaluated["status"], json!("finished"), "{evaluated}");
    assert_eq!(evaluated["step"], json!(4), "the checkpoint of the last step: {evaluated}");
    assert!(evaluated["eval"]["cell_acc"].is_number(), "{evaluated}");

    // The new run is finished, tagged, noted, and differs from run 1 in what was given only.
    let (_, show, _) = run(workbench(&dir).args(["runs", "show", "2", "--json"]));
    let show: Value = serde_json::from_str(&show).unwrap();
    let record = &show["run"];
    assert_eq!(record["status"], json!("finished"), "{show}");
    assert_eq!((&record["last_step"], &record["total_steps"]), (&json!(4), &json!(null)), "the step scored: {show}");
    assert_eq!(record["tags"], json!(["eval"]));
    assert!(record["notes"].as_str().unwrap().contains("run 1's checkpoint at step 4"), "{show}");
    let examples = show["metrics"].as_array().unwrap().iter().find(|m| m["name"] == "eval_examples").unwrap();
    assert_eq!(examples["summary"]["last"], json!(6.0), "{show}");
    let (_, diff, _) = run(workbench(&dir).args(["runs", "diff", "1", "2", "--json"]));
    let diff: Value = serde_json::from_str(&diff).unwrap();
    let keys: Vec<&str> = diff["config"].as_array().unwrap().iter().map(|c| c["key"].as_str().unwrap()).collect();
    assert_eq!(keys, ["difficulty", "eval_depths", "eval_examples", "eval_puzzles"], "{diff}");
    let splits: Vec<&str> = diff["metrics"].as_array().unwrap().iter().map(|m| m["split"].as_str().unwrap()).collect();
    for split in ["eval", "eval@4", "eval@8"] {
        assert!(splits.contains(&split), "{split} missing: {splits:?}");
    }
    // The trained run's own evaluation at 4 iterations (eval@4 at its last step) comes out
    // again from its checkpoint with 4 as the depth: the same parameters on the same boards.
    let (code, out, err) = run(workbench(&dir).args(["eval", "1", "iterations=4", "eval_depths=", "--json"]));
    assert_eq!(code, 0, "{err}");
    let again = evaluations(&out).remove(0);
    let (_, trained, _) = run(workbench(&dir).args(["runs", "show", "1", "--json"]));
    let trained: Value = serde_json::from_str(&trained).unwrap();
    let at_4 = |name: &str| {
        trained["metrics"].as_array().unwrap().iter().find(|m| m["split"] == "eval@4" && m["name"] == name).unwrap()
            ["summary"]["last"]
            .as_f64()
            .unwrap()
    };
    for name in ["loss", "cell_acc"] {
        let scored = again["eval"][name].as_f64().unwrap();
        assert!((scored - at_4(name)).abs() < 1e-6, "{name}: {scored} against {} in training", at_4(name));
    }
    // Its own checkpoint: `verify --run` and another `eval` read it.
    let (code, _, err) = run(workbench(&dir).args(["eval", "2", "eval_depths=", "--json"]));
    assert_eq!(code, 0, "an evaluation's checkpoint is evaluated again: {err}");
    let (code, _, err) = run(workbench(&dir).args(["verify", "--run", "2"]));
    assert_eq!(code, 0, "{err}");

    // Several runs at once, picked like any: one new run each, one JSON line each.
    let (code, out, err) = run(workbench(&dir).args(["eval", "--filter", "tag:eval", "eval_depths=", "--json"]));
    assert_eq!(code, 0, "{err}");
    let sources: Vec<Value> = evaluations(&out).iter().map(|e| e["source"].clone()).collect();
    assert_eq!(sources, [json!(2), json!(3), json!(4)], "{out}");
    let (code, out, err) = run(workbench(&dir).args(["eval", "1", "4", "eval_examples=4"]));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("runs diff 1 8") && out.contains("runs diff 4 9"), "{out}");

    // Only queued (`--detach`): the queue runs it later, as any queued run.
    let (code, out, err) = run(workbench(&dir).args(["eval", "1", "eval_depths=", "--detach", "--json"]));
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), r#"{"event":"queued","runs":[{"run":10,"source":1}]}"#, "{out}");
    let status = |id: &str| {
        let (_, show, _) = run(workbench(&dir).args(["runs", "show", id, "--json"]));
        serde_json::from_str::<Value>(&show).unwrap()["run"]["status"].clone()
    };
    assert_eq!(status("10"), json!("queued"));
    let (code, _, err) = run(workbench(&dir).args(["queue"]));
    assert_eq!(code, 0, "{err}");
    assert_eq!(status("10"), json!("finished"), "{err}");
    let (_, log, _) = run(workbench(&dir).args(["runs", "log", "10"]));
    assert!(log.contains("evaluating run 1's checkpoint (step 4) with eval_depths=\n"), "{log}");
    let (_, shown, _) = run(workbench(&dir).args(["runs", "show", "10"]));
    assert!(shown.contains("evaluates: run 1's checkpoint"), "{shown}");
    let (_, toml, _) = run(workbench(&dir).args(["runs", "show", "10", "--config"]));
    assert!(toml.contains("# It evaluated run 1's checkpoint (`workbench eval 1"), "{toml}");

    // The source's checkpoint gone before the evaluation ran: the run fails, saying so.
    let (code, _, err) = run(workbench(&dir).args(["eval", "4", "--detach"]));
    assert_eq!(code, 0, "{err}");
    std::fs::remove_file(dir.join("runs/4/checkpoint.safetensors")).unwrap();
    let (code, _, err) = run(workbench(&dir).args(["queue"]));
    assert_eq!(code, 3, "a failed run: {err}");
    let (_, show, _) = run(workbench(&dir).args(["runs", "show", "11", "--json"]));
    let show: Value = serde_json::from_str(&show).unwrap();
    assert_eq!(show["run"]["status"], json!("failed"), "{show}");
    assert!(show["run"]["error"].as_str().unwrap().contains("run 4 has no checkpoint any more"), "{show}");
}

#[test]
fn eval_refuses_training_settings_a_checkpoint_that_does_not_fit_and_bad_keys() {
    let dir = temp_dir("eval-refused");
    train_tiny(&dir, "transformer", &[]);
    let refused = |args: &[&str], says: &str| {
        let (code, out, err) = run(workbench(&dir).args(args));
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(err.contains(says), "{args:?}: {err}");
    };
    refused(&["eval", "1", "lr=0.1"], "`lr` is a training setting");
    refused(&["eval", "1", "d=32"], "run 1's checkpoint does not fit the model this configuration builds");
    refused(&["eval", "1", "eval_dpths=2"], "did you mean `eval_depths`");
    refused(&["eval", "1", "device=tpu"], "tpu");
    let (code, _, err) = run(workbench(&dir).args(["eval", "7"]));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("run 7 does not exist"), "{err}");
    // A run without a checkpoint file says so.
    std::fs::remove_file(dir.join("runs/1/checkpoint.safetensors")).unwrap();
    refused(&["eval", "1"], "run 1 has no checkpoint to evaluate");
    refused(&["eval", "--last", "1"], "none of the runs picked has a checkpoint to evaluate");
    refused(&["eval", "eval_depths=2"], "name the runs to evaluate");
    refused(&["eval", "1", "--sweep", "1"], "not both");
    refused(&["eval", "1", "deeper"], "`deeper` is neither a run id");
    // Nothing refused was stored.
    let (_, list, _) = run(workbench(&dir).args(["runs", "--json"]));
    let list: Value = serde_json::from_str(&list).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
}

/// `train ... init_from=N`: a run that starts from run N's parameters (fine-tuning).
#[test]
fn init_from_starts_a_run_from_another_run_s_parameters() {
    let dir = temp_dir("init-from");
    train_tiny(&dir, "hyperset", &[]);
    // The tiny run's settings, trained no further (lr 0): its evaluation is run 1's last.
    let still = |extra: &[&str]| {
        let mut args = vec!["train", "--layer", "hyperset", "--task", "sudoku", "--json", "d=16", "heads=2"];
        args.extend_from_slice(&["iterations=2", "difficulty=easy", "task.train_puzzles=32", "task.eval_puzzles=8"]);
        args.extend_from_slice(&["steps=2", "eval_every=2", "eval_depths=", "eval_examples=8", "lr=0", "min_lr=0"]);
        args.extend_from_slice(extra);
        run(workbench(&dir).args(&args))
    };
    let last_eval = |id: &str, name: &str| -> f64 {
        let (_, show, _) = run(workbench(&dir).args(["runs", "show", id, "--json"]));
        let show: Value = serde_json::from_str(&show).unwrap();
        let metric = show["metrics"].as_array().unwrap().iter().find(|m| m["split"] == "eval" && m["name"] == name);
        metric.unwrap()["summary"]["last"].as_f64().unwrap()
    };
    let (code, _, err) = still(&["init_from=1"]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = still(&[]);
    assert_eq!(code, 0, "{err}");
    for name in ["loss", "cell_acc"] {
        let (trained, started, fresh) = (last_eval("1", name), last_eval("2", name), last_eval("3", name));
        assert!((started - trained).abs() < 1e-6, "{name}: run 2 starts at {started}, run 1 ended at {trained}");
        if name == "loss" {
            assert!((fresh - trained).abs() > 1e-6, "a fresh initialisation scores otherwise: {fresh}");
        }
    }
    let (_, log, _) = run(workbench(&dir).args(["runs", "log", "2"]));
    assert!(log.contains("starting from the parameters of run 1's checkpoint (its step 4)"), "{log}");

    // Refused before anything is stored: a run that does not exist, or has no checkpoint.
    let (code, _, err) = still(&["init_from=99"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("init_from=99: run 99 does not exist"), "{err}");
    // Another width: the run fails, naming the parameter that does not fit.
    let (code, _, err) = still(&["init_from=1", "d=32"]);
    assert_eq!(code, 3, "{err}");
    let (_, show, _) = run(workbench(&dir).args(["runs", "show", "4", "--json"]));
    assert!(show.contains("init_from=1: the parameters of run 1 cannot start this run"), "{show}");
    std::fs::remove_file(dir.join("runs/1/checkpoint.safetensors")).unwrap();
    let (code, _, err) = still(&["init_from=1"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("run 1 has no checkpoint to start from"), "{err}");
    let (_, list, _) = run(workbench(&dir).args(["runs", "--json"]));
    assert_eq!(serde_json::from_str::<Value>(&list).unwrap().as_array().unwrap().len(), 4, "{list}");
}
