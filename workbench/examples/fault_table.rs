//! The fault suite's figures as the README's table: runs the fault, fuzzing, store and plugin
//! fault tests (`cargo test`, which fails here if any property does not hold) and prints each
//! `FIGURE` line they report as a row.
//!
//!     cargo run -p workbench --example fault_table
//!
//! The store tests with PostgreSQL need its server (`eval "$(scripts/services env)"`); without
//! it only the SQLite figures are printed.

use std::process::Command;

/// Test binaries and name filters whose tests report figures.
const SUITES: &[(&str, &str)] = &[
    ("faults", ""),
    ("fuzz_overrides", ""),
    ("fuzz_data_files", ""),
    ("store", "unchanged"),
    ("supervision", "abort_and_segfault"),
    ("supervision", "loops_forever"),
    ("plugin_loading", "panicking"),
    ("plugin_loading", "aborts_or_hangs"),
];

fn main() {
    let mut rows = Vec::new();
    for (test, filter) in SUITES {
        eprintln!("running tests/{test}.rs {filter}");
        let output = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(["test", "-q", "-p", "workbench", "--test", test, "--", "--nocapture"])
            .args((!filter.is_empty()).then_some(*filter))
            .output()
            .expect("cargo runs");
        let stdout = String::from_utf8_lossy(&output.stdout);
        if !output.status.success() {
            eprintln!("{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
            eprintln!("tests/{test}.rs failed: a property of the fault suite does not hold");
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
