//! The exit codes (README, "Exit codes"): 0 success, 1 a command that could not do its work,
//! 2 a usage or configuration error, 3 a failed run, 4 a diverged run, 130 interrupted. Uses
//! the fixture layer `panicking` (workbench/tests/fixtures), which fails or diverges on demand.

use crate::common;

use common::{fixture_train_args, plugin_dir_with, run, temp_dir, workbench, TestDir};
use std::path::Path;

/// A store directory and a plugin directory with the fixture layer and Sudoku.
fn setup(tag: &str) -> (TestDir, TestDir) {
    (temp_dir(&format!("{tag}-db")), plugin_dir_with(tag, &["fixture-panicking-plugin", "sudoku"]))
}

fn code_of(dir: &Path, plugins: &Path, args: &[String]) -> (i32, String) {
    let (code, _, stderr) = run(workbench(dir).env("WORKBENCH_PLUGIN_PATH", plugins).args(args));
    (code, stderr)
}

#[test]
fn train_tells_failed_diverged_and_refused_apart() {
    let (dir, plugins) = setup("exit-train");
    let (code, stderr) = code_of(&dir, &plugins, &fixture_train_args("panic", 3, 3));
    assert_eq!(code, 3, "failed:\n{stderr}");
    let (code, stderr) = code_of(&dir, &plugins, &fixture_train_args("nan", 3, 3));
    assert_eq!(code, 4, "diverged:\n{stderr}");
    let mut refused = fixture_train_args("panic", 3, 3);
    refused.push("stpes=3".into());
    let (code, stderr) = code_of(&dir, &plugins, &refused);
    assert_eq!(code, 2, "refused:\n{stderr}");
    // clap's own usage errors keep their code.
    let (code, stderr) = code_of(&dir, &plugins, &["train".into(), "--no-such-flag".into()]);
    assert_eq!(code, 2, "usage:\n{stderr}");
    // A command that cannot do its work (here: no such run to show) is 1.
    let (code, stderr) = code_of(&dir, &plugins, &["runs".into(), "show".into(), "99".into()]);
    assert_eq!(code, 1, "{stderr}");
}

/// A sweep exits with its worst run's code: a failure outranks a divergence.
#[test]
fn a_sweep_exits_with_its_worst_run() {
    let (dir, plugins) = setup("exit-sweep");
    let mut args = fixture_train_args("nan", 3, 3);
    args[0] = "sweep".into();
    let (code, stderr) = code_of(&dir, &plugins, &args);
    assert_eq!(code, 4, "one diverged run:\n{stderr}");
    let mode = args.iter().position(|a| a == "mode=nan").unwrap();
    args[mode] = "mode=nan,panic".into();
    let (code, stderr) = code_of(&dir, &plugins, &args);
    assert_eq!(code, 3, "a failed and a diverged run:\n{stderr}");
    // Refused before anything is queued.
    args[mode] = "mode=nan,nope".into();
    let (code, stderr) = code_of(&dir, &plugins, &args);
    assert_eq!(code, 2, "{stderr}");
}
