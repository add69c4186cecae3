//! The fault suite's figures as the README's table: runs the fault, fuzzing, store and plugin
//! fault tests (`cargo test`, which fails here if any property does not hold) and prints each
//! `FIGURE` line they report as a row.
//!
//!     cargo run -p workbench --example fault_table
//!
//! The store tests with PostgreSQL need its server (`eval "$(scripts/services env)"`); without
//! it only the SQLite figures are printed.

use std::process::Command;

/// Name filters, each picking tests of the integration tests (`tests/integration.rs`) that
/// report figures: a module's path, or words of test names.
const SUITES: &[&str] = &[
    "faults::",
    "fuzz_overrides::",
    "fuzz_data_files::",
    "unchanged",
    "supervision::abort_and_segfault",
    "supervision::cancel_ends_a_layer_that_loops_forever",
    "plugin_loading::a_plugin_panicking",
    "plugin_loading::a_library_that_aborts_or_hangs",
];

fn main() {
    let mut rows = Vec::new();
    for filter in SUITES {
        eprintln!("running the tests {filter}");
        let output = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(["test", "-q", "-p", "workbench", "--test", "integration", "--", "--nocapture", filter])
            .output()
            .expect("cargo runs");
        let stdout = String::from_utf8_lossy(&output.stdout);
        if !output.status.success() {
            eprintln!("{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
            eprintln!("the tests {filter} failed: a property of the fault suite does not hold");
            std::process::exit(1);
        }
        if stdout.contains("running 0 tests") {
            eprintln!("no test matches {filter}: a test was renamed or moved; update SUITES in fault_table.rs");
            std::process::exit(1);
        }
        // Anywhere in a line: the test harness's progress dots may come first.
        let figures = stdout.lines().filter_map(|l| l.split_once("FIGURE ").map(|(_, figure)| figure));
        rows.extend(figures.map(|l| match l.split_once(": ") {
            Some((property, figure)) => (property.to_string(), figure.to_string()),
            None => (l.to_string(), String::new()),
        }));
    }
    println!("| fault or input | what held |");
    println!("|---|---|");
    for (property, figure) in rows {
        println!("| {property} | {figure} |");
    }
}
