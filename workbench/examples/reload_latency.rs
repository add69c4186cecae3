//! Hot-reload latency on this machine: from a finished build to the new version being active
//! (copy to a fresh file name, open, fingerprint check, registration, registry swap), for
//! every plugin library of the workspace built with this example's profile.
//!
//! ```text
//! cargo build -p hyperset -p sudoku ...   # the libraries to measure
//! cargo run --example reload_latency [-- ROUNDS]
//! ```
//!
//! Prints, per library, its size and the median and worst time over ROUNDS reloads (default
//! 20). cargo's own build time is not included: it is the time the watcher waits for.

use std::path::PathBuf;
use std::time::{Duration, Instant};
use workbench::host::hot::load_fresh;
use workbench::host::{plugin_crates, workspace_root, PluginHost};

fn main() {
    let rounds: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(20).max(1);
    let exe = std::env::current_exe().expect("the example's path");
    // target/<profile>/examples/reload_latency -> target/<profile>
    let out_dir: PathBuf = exe.parent().and_then(|d| d.parent()).expect("target/<profile>").to_path_buf();
    let root = workspace_root().expect("run from the workspace");
    let libraries: Vec<PathBuf> =
        plugin_crates(&root).iter().map(|c| out_dir.join(c.library_file_name())).filter(|p| p.is_file()).collect();
    if libraries.is_empty() {
        eprintln!("no plugin libraries in {}: build some first (cargo build -p hyperset ...)", out_dir.display());
        std::process::exit(1);
    }
    let mut host = PluginHost::default();
    println!("{rounds} reloads each, from {}", out_dir.display());
    println!("{:<28} {:>8} {:>11} {:>11} {:>11}", "library", "MiB", "median ms", "worst ms", "swap µs");
    let mut all = Vec::new();
    for library in &libraries {
        let mut times = Vec::with_capacity(rounds);
        let mut swaps = Vec::with_capacity(rounds);
        for _ in 0..rounds {
            let started = Instant::now();
            let (plugin, _) = match load_fresh(library) {
                Ok(loaded) => loaded,
                Err(e) => {
                    println!("{:<28} not loaded: {e}", name(library));
                    break;
                }
            };
            let swap_started = Instant::now();
            let replaced = host.swap(plugin).expect("one library per plugin");
            swaps.push(swap_started.elapsed());
            times.push(started.elapsed());
            drop(replaced);
        }
        if times.is_empty() {
            continue;
        }
        times.sort();
        swaps.sort();
        let size = std::fs::metadata(library).map(|m| m.len()).unwrap_or(0) as f64 / (1024.0 * 1024.0);
        println!(
            "{:<28} {:>8.1} {:>11.2} {:>11.2} {:>11.1}",
            name(library),
            size,
            ms(times[times.len() / 2]),
            ms(*times.last().unwrap()),
            swaps[swaps.len() / 2].as_secs_f64() * 1e6
        );
        all.extend(times);
    }
    all.sort();
    if !all.is_empty() {
        println!(
            "all: median {:.2} ms, worst {:.2} ms over {} reloads (goal: 500 ms)",
            ms(all[all.len() / 2]),
            ms(*all.last().unwrap()),
            all.len()
        );
    }
}

fn name(path: &std::path::Path) -> String {
    path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
