//! `workbench plugin new`: the layer and task templates become crates of a (scratch)
//! workspace that build, load, pass their own tests and `workbench verify`, and train
//! together; the run records both builds. Bad names are refused with the reason.
//!
//! Slow (it compiles two small crates and their tests against the already built
//! dependencies): 30-90 s on a small machine.

use crate::common;
use crate::scratch_workspace;

use common::{run, temp_dir, workbench};
use std::path::Path;
use std::process::Command;

fn in_workspace(root: &Path) -> Command {
    let mut cmd = workbench(root);
    cmd.envs(scratch_workspace::cargo_env());
    cmd
}

/// A directory holding links to the given libraries of the shared build output.
fn plugin_dir(libraries: &[&str]) -> common::TestDir {
    let dir = temp_dir("plugin-new-libs");
    for name in libraries {
        let file = format!("{}{name}{}", std::env::consts::DLL_PREFIX, std::env::consts::DLL_SUFFIX);
        let built = scratch_workspace::target_dir().join("debug").join(&file);
        assert!(built.is_file(), "{} was built", built.display());
        std::os::unix::fs::symlink(&built, dir.join(file)).unwrap();
    }
    dir
}

#[test]
fn new_plugins_build_load_pass_their_tests_verify_and_train() {
    let root = scratch_workspace::create("plugin-new");
    for (name, kind) in [("wb-new-layer", "layer"), ("wb-new-task", "task")] {
        let (code, stdout, stderr) = run(in_workspace(&root).args(["plugin", "new", name, "--kind", kind]));
        assert_eq!(code, 0, "{stdout}\n{stderr}");
        assert!(stdout.contains(&format!("{name} ({kind} 0.1.0) builds and loads")), "{stdout}\n{stderr}");
        assert!(stderr.contains("Compiling"), "cargo's output is shown: {stderr}");
        let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
        assert!(manifest.contains(&format!("\"plugins/{name}\"")), "{manifest}");
    }

    // Names already used, and names that are not names, are refused with the reason.
    let (code, _, stderr) = run(in_workspace(&root).args(["plugin", "new", "wb-new-layer"]));
    assert_eq!(code, 1);
    assert!(stderr.contains("already exists"), "{stderr}");
    let (code, _, stderr) = run(in_workspace(&root).args(["plugin", "new", "2Bad", "--no-build"]));
    assert_eq!(code, 1);
    assert!(stderr.contains("not a valid plugin name"), "{stderr}");

    // Their own tests pass.
    let (code, stdout, stderr) = run(scratch_workspace::cargo(&root)
        .env("RAYON_NUM_THREADS", "1")
        // With the workbench member (no tests of its own), as the host builds: the shared
        // dependencies then resolve the features of the real build and are not compiled again.
        .args(["test", "-p", "workbench", "-p", "wb-new-layer", "-p", "wb-new-task"]));
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let passed: usize = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("test result: ok. "))
        .filter_map(|l| l.split(' ').next()?.parse::<usize>().ok())
        .sum();
    assert_eq!(passed, 5 + 3, "{stdout}");

    // The layer's claim holds for `workbench verify`; the two train together.
    let plugins = plugin_dir(&["wb_new_layer", "wb_new_task"]);
    let db = temp_dir("plugin-new-db");
    let (code, stdout, stderr) =
        run(workbench(&db).env("WORKBENCH_PLUGIN_PATH", &plugins).args(["verify", "--layer", "wb-new-layer"]));
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("1 passed, 0 failed"), "{stdout}");
    let (code, stdout, stderr) = run(workbench(&db).env("WORKBENCH_PLUGIN_PATH", &plugins).args([
        "train",
        "--layer",
        "wb-new-layer",
        "--task",
        "wb-new-task",
        "d=16",
        "head_dim=4",
        "iterations=2",
        "length=6",
        "steps=3",
        "eval_every=3",
        "eval_examples=16",
    ]));
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let (_, shown, _) = run(workbench(&db).args(["runs", "show", "1", "--json"]));
    let shown: serde_json::Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(shown["run"]["status"], "finished");
    for plugin in ["layer", "task"] {
        let build = shown["run"][plugin]["build"].as_str().unwrap_or_default();
        assert_eq!(build.len(), 16, "{plugin} build recorded: {}", shown["run"][plugin]);
    }
}
