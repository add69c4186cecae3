//! Start-up time: from `workbench train` (the default configuration) to its first
//! optimisation step, read off the worker's JSON events, with an empty generated-data cache
//! (the puzzles are generated) and then with the cache filled by that run (they are read);
//! then the same from an installed copy (the binary and the plugin libraries copied to a
//! folder outside the workspace, as on a cluster), whose libraries' build ids are hashes of
//! the files: once before they are cached, once after.
//!
//! ```text
//! cargo build --release --workspace
//! cargo run --release --example startup [-- ROUNDS]
//! ```
//!
//! Each round uses a new store and a new cache folder; prints the median and the extremes of
//! each case over ROUNDS rounds (default 3), and the ratio of the medians.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// Seconds from spawning `workbench train` to its first `step` event; the run is stopped there.
fn to_first_step(exe: &Path, dir: &Path, cache: &Path) -> f64 {
    let started = Instant::now();
    let mut child = Command::new(exe)
        .args(["train", "--json", "steps=2", "eval_every=2", "threads=0"])
        .env("WORKBENCH_DB", dir.join("runs.db"))
        .env("WORKBENCH_CACHE", cache)
        .env("WORKBENCH_NO_BUILD", "1")
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the workbench binary runs");
    let stdout = child.stdout.take().expect("piped");
    let mut seconds = None;
    for line in BufReader::new(stdout).lines().map_while(Result::ok) {
        if seconds.is_none() && line.contains("\"event\":\"step\"") {
            seconds = Some(started.elapsed().as_secs_f64());
        }
    }
    let status = child.wait().expect("the run ends");
    match seconds {
        Some(s) if status.success() => s,
        _ => {
            eprintln!("the run in {} did not reach a step ({status})", dir.display());
            std::process::exit(1);
        }
    }
}

fn summary(times: &mut [f64]) -> (f64, f64, f64) {
    times.sort_by(f64::total_cmp);
    (times[times.len() / 2], times[0], times[times.len() - 1])
}

fn main() {
    let rounds: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(3).max(1);
    let exe = std::env::current_exe().expect("the example's path");
    // target/<profile>/examples/startup -> target/<profile>/workbench
    let workbench: PathBuf = exe.parent().and_then(|d| d.parent()).expect("target/<profile>").join("workbench");
    if !workbench.is_file() {
        eprintln!("{} is missing: build the workspace with this profile first", workbench.display());
        std::process::exit(1);
    }
    let installed = install_copy(&workbench);
    let (mut cold, mut warm, mut first, mut again) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let root = std::env::temp_dir().join(format!("workbench-startup-{}-{round}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let cache = root.join("cache");
        let cases = [
            (&mut cold, "cold", &workbench),
            (&mut warm, "warm", &workbench),
            (&mut first, "installed", &installed),
            (&mut again, "installed-again", &installed),
        ];
        for (times, name, exe) in cases {
            let dir = root.join(name);
            std::fs::create_dir_all(&dir).expect("a temporary folder");
            times.push(to_first_step(exe, &dir, &cache));
        }
        let _ = std::fs::remove_dir_all(&root);
    }
    let _ = std::fs::remove_dir_all(installed.parent().expect("the install folder"));
    println!("time from `workbench train` (defaults) to the first optimisation step, {rounds} rounds");
    println!("{:<34} {:>9} {:>9} {:>9}", "case", "median s", "min s", "max s");
    let (cold_median, lo, hi) = summary(&mut cold);
    println!("{:<34} {cold_median:>9.3} {lo:>9.3} {hi:>9.3}", "data generated (empty cache)");
    let (warm_median, lo, hi) = summary(&mut warm);
    println!("{:<34} {warm_median:>9.3} {lo:>9.3} {hi:>9.3}", "data read from the cache");
    println!("ratio of the medians: {:.1}x", cold_median / warm_median);
    for (times, case) in
        [(&mut first, "installed copy, build ids hashed"), (&mut again, "installed copy, build ids cached")]
    {
        let (median, lo, hi) = summary(times);
        println!("{case:<34} {median:>9.3} {lo:>9.3} {hi:>9.3}");
    }
}

/// The workbench binary and every plugin library beside it, linked (or copied) into a new
/// folder outside the workspace; returns the copied binary.
fn install_copy(workbench: &Path) -> PathBuf {
    let folder = std::env::temp_dir().join(format!("workbench-startup-{}-install", std::process::id()));
    let _ = std::fs::remove_dir_all(&folder);
    std::fs::create_dir_all(&folder).expect("a temporary folder");
    let built = workbench.parent().expect("the build folder");
    let libraries = std::fs::read_dir(built).expect("the build folder").filter_map(Result::ok).map(|e| e.path());
    let libraries = libraries.filter(|p| p.extension().is_some_and(|e| e == std::env::consts::DLL_EXTENSION));
    for file in std::iter::once(workbench.to_path_buf()).chain(libraries) {
        let to = folder.join(file.file_name().expect("a file name"));
        if std::fs::hard_link(&file, &to).is_err() {
            std::fs::copy(&file, &to).expect("copy into the install folder");
        }
    }
    folder.join(workbench.file_name().expect("a file name"))
}
