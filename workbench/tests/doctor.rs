//! `workbench doctor`: every check passes on a working set-up without storing anything, and
//! each problem is named with its fix and fails the command. On the cluster (Slurm and
//! PostgreSQL) it is tested in `cluster.rs`.

use crate::common::{run, temp_dir, workbench};
use serde_json::Value;

/// The checks of `doctor --json`, by name.
fn checks(stdout: &str) -> (bool, std::collections::BTreeMap<String, Value>) {
    let report: Value = serde_json::from_str(stdout).unwrap();
    let checks = report["checks"].as_array().unwrap();
    let by_name = checks.iter().map(|c| (c["check"].as_str().unwrap().to_string(), c.clone())).collect();
    (report["ok"].as_bool().unwrap(), by_name)
}

#[test]
fn every_check_passes_on_a_new_machine_and_nothing_is_stored() {
    let dir = temp_dir("doctor-new");
    let (code, stdout, stderr) = run(workbench(&dir).arg("doctor"));
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("runs.db (SQLite): not created yet"), "{stdout}");
    assert!(stdout.contains("local: workers are processes on this machine"), "{stdout}");
    assert!(stdout.contains("instructions "), "{stdout}");
    assert!(stdout.contains("products gemm"), "{stdout}");
    assert!(stdout.contains("hyperset") && stdout.contains("sudoku"), "{stdout}");
    assert!(stdout.ends_with("every check passed\n"), "{stdout}");
    let left: Vec<_> = std::fs::read_dir(&*dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(left.is_empty(), "doctor left {left:?} in the store's directory");

    // Once the store exists, its runs are counted.
    let (code, _, stderr) = run(workbench(&dir).arg("runs"));
    assert_eq!(code, 0, "{stderr}");
    let (code, stdout, stderr) = run(workbench(&dir).args(["doctor", "--json"]));
    assert_eq!(code, 0, "{stdout}{stderr}");
    let (ok, by_name) = checks(&stdout);
    assert!(ok, "{stdout}");
    let names: Vec<&str> = by_name.keys().map(String::as_str).collect();
    assert_eq!(names, ["artifacts", "cpu", "cuda", "executor", "plugins", "store"]);
    assert!(
        by_name["store"]["detail"]
            .as_str()
            .unwrap()
            .contains("(SQLite): 0 runs, 0 running, 0 queued; new runs are stored as "),
        "{stdout}"
    );
    assert!(by_name["artifacts"]["detail"].as_str().unwrap().ends_with("(writable)"), "{stdout}");
}

#[test]
fn each_problem_is_named_with_its_fix_and_fails_the_command() {
    let dir = temp_dir("doctor-problems");
    let plugins = dir.join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    std::fs::write(plugins.join("libbroken.so"), b"not a library").unwrap();
    // An empty configuration names no controller (a missing file makes scontrol retry a minute).
    std::fs::write(dir.join("no-slurm.conf"), b"").unwrap();
    let (code, stdout, stderr) = run(workbench(&dir)
        .env("WORKBENCH_DB", dir.join("missing/runs.db"))
        .env("WORKBENCH_EXECUTOR", "slurm")
        // No controller is configured there, whether or not one runs on this machine.
        .env("SLURM_CONF", dir.join("no-slurm.conf"))
        .args(["--plugin-dir", plugins.to_str().unwrap(), "doctor", "--json"]));
    assert_eq!(code, 1, "{stdout}{stderr}");
    let (ok, by_name) = checks(&stdout);
    assert!(!ok, "{stdout}");
    let failed = |name: &str, says: &str| {
        let check = &by_name[name];
        assert_eq!(check["ok"], false, "{name}: {check}");
        assert!(check["detail"].as_str().unwrap().contains(says), "{name} should say `{says}`: {check}");
    };
    failed("store", "does not exist (create it first)");
    // Where Slurm's client is not installed at all, that is the problem named.
    let executor = by_name["executor"]["detail"].as_str().unwrap();
    if !executor.contains("`scontrol` is not installed") {
        failed("executor", "no Slurm controller answers");
    }
    assert_eq!(by_name["executor"]["ok"], false, "{stdout}");
    failed("plugins", "libbroken.so");
    for passed in ["cpu", "cuda"] {
        assert_eq!(by_name[passed]["ok"], true, "{stdout}");
    }
    assert!(!dir.join("missing").exists(), "doctor made the store's directory");

    // The same problems as text: one line a check, the count at the end.
    let (code, stdout, _) = run(workbench(&dir)
        .env("WORKBENCH_DB", dir.join("missing/runs.db"))
        .env("SLURM_CONF", dir.join("no-slurm.conf"))
        .args(["--executor", "slurm", "--plugin-dir", plugins.to_str().unwrap(), "doctor"]));
    assert_eq!(code, 1, "{stdout}");
    assert!(stdout.lines().any(|l| l.starts_with("store      PROBLEM")), "{stdout}");
    assert!(stdout.ends_with("3 checks found a problem (above, with the fix)\n"), "{stdout}");

    // A store that cannot be opened still has its run files' directory judged, and one
    // problem is counted as one.
    std::fs::write(dir.join("garbage.db"), b"not an SQLite file at all").unwrap();
    let (code, stdout, _) = run(workbench(&dir).env("WORKBENCH_DB", dir.join("garbage.db")).args(["doctor"]));
    assert_eq!(code, 1, "{stdout}");
    assert!(
        stdout.lines().any(|l| l.starts_with("store      PROBLEM") && l.contains("not an SQLite database")),
        "{stdout}"
    );
    assert!(stdout.lines().any(|l| l.starts_with("artifacts  ok")), "{stdout}");
    assert!(stdout.ends_with("1 check found a problem (above, with the fix)\n"), "{stdout}");
}
