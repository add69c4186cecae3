//! Outside a checkout the default store is runs.db in the current directory; the command
//! that creates it says where, once.

use crate::common;

use common::{run, temp_dir};
use std::process::Command;

#[test]
fn creating_the_default_store_outside_a_checkout_is_announced_once() {
    let dir = temp_dir("default-db");
    // A copy of the binary outside the build directory behaves as an installed one.
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let exe = bin.join("workbench");
    if std::fs::hard_link(env!("CARGO_BIN_EXE_workbench"), &exe).is_err() {
        std::fs::copy(env!("CARGO_BIN_EXE_workbench"), &exe).unwrap();
    }
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let workbench = || {
        let mut cmd = Command::new(&exe);
        cmd.env("WORKBENCH_NO_BUILD", "1").env_remove("WORKBENCH_DB").current_dir(&work);
        cmd
    };
    let (code, _, stderr) = run(workbench().arg("runs"));
    assert_eq!(code, 0, "{stderr}");
    let expected = format!("created runs.db in {} (WORKBENCH_DB or --db chooses another)", work.display());
    assert!(stderr.contains(&expected), "expected `{expected}` in:\n{stderr}");
    assert!(work.join("runs.db").is_file());
    let (code, _, stderr) = run(workbench().arg("runs"));
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("created runs.db"), "said again:\n{stderr}");
    // A store chosen with --db is where one asked for it: nothing to say.
    let (code, _, stderr) = run(workbench().args(["--db", "other.db", "runs"]));
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("created"), "{stderr}");
}
