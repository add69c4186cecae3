//! The workbench's integration tests, one module per subject, in one test executable: each
//! executable links the whole workbench and its dependencies (about 90 MB in a debug build),
//! so one for all instead of one per file saves gigabytes of disk and most of the linking.
//! `cargo test -p workbench --test integration cluster::` runs one module's tests.
//!
//! Tests that set process-wide state (environment variables read once per process) keep
//! executables of their own: `lease_after_restart.rs`, `slurm_outage.rs`; so does `cuda.rs`,
//! which GPU machines build and run on its own.

mod common;
mod scratch_workspace;
#[path = "../../datasets/src/fetch/test_server.rs"]
mod test_server;

mod bad_input;
mod bench;
mod cluster;
mod completions;
mod datasets_fetch;
mod default_db;
mod diagnostics;
mod doctor;
mod evaluate;
mod exit_codes;
mod experiment_files;
mod experiments;
mod faults;
mod fuzz_data_files;
mod fuzz_overrides;
mod heatmap;
mod hot_reload;
mod import;
mod json_output;
mod masked_decoding;
mod model_assembly;
mod ops;
mod plot;
mod plugin_build;
mod plugin_loading;
mod plugin_new;
mod product_flops;
mod runs_cli;
mod shapes;
mod sphere;
mod store;
mod supervision;
mod sweep;
mod training;
mod tui_e2e;
mod verify;
mod workspace;

/// Cargo builds only the test files named (`autotests = false`): a file added under `tests/`
/// and named nowhere would never run. Fails naming each such file and where to name it.
#[test]
fn every_test_file_is_built() {
    let crate_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = std::fs::read_to_string(crate_dir.join("tests/integration.rs")).unwrap();
    let manifest: toml::Table = std::fs::read_to_string(crate_dir.join("Cargo.toml")).unwrap().parse().unwrap();
    let own_executables: Vec<&str> =
        manifest["test"].as_array().unwrap().iter().filter_map(|t| t["path"].as_str()).collect();
    let mut unbuilt = Vec::new();
    for entry in std::fs::read_dir(crate_dir.join("tests")).unwrap() {
        let path = entry.unwrap().path();
        let (Some(stem), Some("rs")) =
            (path.file_stem().and_then(|s| s.to_str()), path.extension().and_then(|e| e.to_str()))
        else {
            continue;
        };
        let named = root.lines().any(|l| l == format!("mod {stem};"))
            || own_executables.contains(&format!("tests/{stem}.rs").as_str());
        if !named {
            unbuilt.push(format!("tests/{stem}.rs"));
        }
    }
    assert!(
        unbuilt.is_empty(),
        "{unbuilt:?} never run: add `mod NAME;` to tests/integration.rs, or a [[test]] to workbench/Cargo.toml \
         for a file that needs a process of its own"
    );
}
