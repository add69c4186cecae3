//! The run store at cluster scale, on SQLite or PostgreSQL: many concurrent workers claiming
//! runs and writing metrics, then the runs table read over a large store.
//!
//! ```text
//! cargo run --release --example store_scale -- --db /tmp/scale.db
//! cargo run --release --example store_scale -- --db postgres://user:pw@127.0.0.1:54329/scale
//! ```
//!
//! 1. Ingest: `--workers` processes (default 64; this program in worker mode, each with one
//!    connection of its own, as a real worker's heartbeat and writer share one) claim `--runs` queued runs from the shared queue and,
//!    for each, write `--batches` metric batches of `--batch-rows` rows (four metrics per step)
//!    plus a diagnostics batch every fifth batch, as fast as the store takes them (a stress
//!    far above a training worker's rate), renewing the run's lease every 5 s. Prints: runs claimed twice (must be 0), rows ingested per
//!    second, and the median and 99th percentile of one batch's write latency.
//! 2. Runs table: the store is filled up to `--table-runs` runs (default 10,000) and
//!    `--table-rows` metric rows (default 10,000,000), then the runs table's refresh (the lease
//!    check, every run, every run's metric summary: what the TUI's Runs screen reads twice a
//!    second) is timed: median and slowest of five.
//!
//! The database must be new (an empty file, or a freshly created PostgreSQL database), except
//! with `--refresh-only`, which times step 2's refresh on a store filled before.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::json;
use workbench::store::{
    process_alive, Claims, DiagnosticRow, MetricRow, NewRun, PluginRef, RunStatus, RunsFollower, Store, StoreLocation,
};

struct Args {
    db: StoreLocation,
    workers: usize,
    runs: usize,
    batches: usize,
    batch_rows: usize,
    table_runs: usize,
    table_rows: usize,
    worker_mode: bool,
    /// Only time the runs table's refresh, on a store filled before.
    refresh_only: bool,
}

fn parse_args() -> Args {
    let mut args = Args {
        db: StoreLocation::parse("scale.db"),
        workers: 64,
        runs: 256,
        batches: 20,
        batch_rows: 500,
        table_runs: 10_000,
        table_rows: 10_000_000,
        worker_mode: false,
        refresh_only: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        let number = |v: String| v.replace('_', "").parse::<usize>().unwrap_or_else(|_| panic!("{v} is not a number"));
        match flag.as_str() {
            "--db" => args.db = StoreLocation::parse(&value()),
            "--workers" => args.workers = number(value()),
            "--runs" => args.runs = number(value()),
            "--batches" => args.batches = number(value()),
            "--batch-rows" => args.batch_rows = number(value()),
            "--table-runs" => args.table_runs = number(value()),
            "--table-rows" => args.table_rows = number(value()),
            "--worker" => args.worker_mode = true,
            "--refresh-only" => args.refresh_only = true,
            other => panic!("unknown option {other}; see the doc comment of examples/store_scale.rs"),
        }
    }
    args
}

fn new_run(seed: u64) -> NewRun {
    let plugin = |name: &str| PluginRef {
        name: name.into(),
        version: "0.1.0".into(),
        fingerprint: "scale".into(),
        build: Some("scale".into()),
    };
    NewRun {
        layer: plugin("hyperset"),
        task: plugin("sudoku"),
        config: json!({"layer": "hyperset", "task": "sudoku", "train": {"seed": seed, "lr": 1e-3, "steps": 1000}}),
        seed,
        device: "cpu".into(),
        git_rev: None,
        total_steps: Some(1000),
    }
}

/// Four metrics per step, as a worker logs them.
fn metric_batch(first_step: u64, rows: usize) -> Vec<MetricRow> {
    (0..rows)
        .map(|i| {
            let step = first_step + (i / 4) as u64;
            let name = ["loss", "lr", "grad_norm", "samples_per_s"][i % 4];
            MetricRow {
                step,
                split: "train".into(),
                name: name.into(),
                value: 1.0 / (step as f64 + 1.0),
                wall_time: step as f64,
            }
        })
        .collect()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Worker mode: claims runs until none are left; prints one JSON line with what it did.
async fn worker(args: &Args) {
    let store = Store::connect_serial(&args.db, "store_scale worker").await.expect("the store opens");
    let pid = std::process::id();
    let (mut claimed, mut rows, mut latencies) = (Vec::new(), 0usize, Vec::new());
    let mut beat = Instant::now();
    while let Some(run) = store.claim_next(pid, args.workers, &Claims::Everyone).await.expect("claims work") {
        claimed.push(run.id);
        store.mark_running(run.id, pid).await.expect("the claimed run starts");
        for b in 0..args.batches {
            let batch = metric_batch((b * args.batch_rows / 4) as u64, args.batch_rows);
            let started = Instant::now();
            store.insert_metrics(run.id, &batch).await.expect("metrics are written");
            if b % 5 == 4 {
                let diagnostics: Vec<DiagnosticRow> = (0..64)
                    .map(|i| DiagnosticRow {
                        step: b as u64,
                        iteration: i % 16,
                        name: "energy/total".into(),
                        value: -1.0,
                    })
                    .collect();
                store.insert_diagnostics(run.id, &diagnostics).await.expect("diagnostics are written");
                rows += diagnostics.len();
            }
            latencies.push(started.elapsed().as_secs_f64() * 1000.0);
            rows += batch.len();
            // Leases are renewed every 5 s, as a worker's heartbeat thread does.
            if beat.elapsed() > Duration::from_secs(5) {
                store.heartbeat(run.id, pid).await.expect("the lease is renewed");
                beat = Instant::now();
            }
        }
        store.finish(run.id, RunStatus::Finished, None).await.expect("the run ends");
    }
    println!("{}", json!({"claimed": claimed, "rows": rows, "latencies_ms": latencies}));
    store.close().await;
}

async fn ingest(args: &Args, store: &Store) {
    for seed in 0..args.runs {
        store.create_run(&new_run(seed as u64)).await.expect("runs are created");
    }
    let exe = std::env::current_exe().expect("this program's path");
    let started = Instant::now();
    let children: Vec<_> = (0..args.workers)
        .map(|_| {
            std::process::Command::new(&exe)
                .args(["--worker", "--db"])
                .arg(args.db.to_arg())
                .args(["--workers", &args.workers.to_string()])
                .args(["--batches", &args.batches.to_string(), "--batch-rows", &args.batch_rows.to_string()])
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("a worker starts")
        })
        .collect();
    let (mut claimed, mut rows, mut latencies) = (Vec::new(), 0u64, Vec::new());
    for child in children {
        let out = child.wait_with_output().expect("a worker ends");
        assert!(out.status.success(), "a worker failed");
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("a worker's report");
        claimed.extend(report["claimed"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()));
        rows += report["rows"].as_u64().unwrap();
        latencies.extend(report["latencies_ms"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()));
    }
    let seconds = started.elapsed().as_secs_f64();
    let unique: BTreeSet<i64> = claimed.iter().copied().collect();
    let finished = store.list_runs().await.unwrap().iter().filter(|r| r.status == RunStatus::Finished).count();
    latencies.sort_by(f64::total_cmp);
    println!("ingest: {} workers, {} runs on {}", args.workers, args.runs, args.db);
    println!("  runs claimed twice: {}   runs finished: {finished} of {}", claimed.len() - unique.len(), args.runs);
    println!("  rows ingested: {rows} in {seconds:.1} s = {:.0} rows/s", rows as f64 / seconds);
    println!(
        "  write latency of one batch ({} metric rows): median {:.1} ms, p99 {:.1} ms",
        args.batch_rows,
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99)
    );
}

async fn runs_table(args: &Args, store: &Store) {
    let existing = store.list_runs().await.unwrap().len();
    let rows_per_run = args.table_rows.div_ceil(args.table_runs.max(1));
    let started = Instant::now();
    let mut ids = Vec::new();
    for seed in existing..args.table_runs {
        ids.push(store.create_run(&new_run(seed as u64)).await.unwrap());
    }
    // Fill from several connections at once; each run gets `rows_per_run` rows.
    let chunks: Vec<Vec<i64>> = ids.chunks(ids.len().div_ceil(8).max(1)).map(<[i64]>::to_vec).collect();
    let tasks: Vec<_> = chunks
        .into_iter()
        .map(|chunk| {
            let store = store.clone();
            tokio::spawn(async move {
                for id in chunk {
                    store.insert_metrics(id, &metric_batch(0, rows_per_run)).await.unwrap();
                    store.finish(id, RunStatus::Finished, None).await.unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let total = ids.len() * rows_per_run;
    println!(
        "runs table: filled {} runs with {total} metric rows in {:.1} s ({:.0} rows/s from 8 connections)",
        ids.len(),
        started.elapsed().as_secs_f64(),
        total as f64 / started.elapsed().as_secs_f64()
    );
    time_refresh(args, store).await;
}

/// Times the runs table's refresh: a full read (the lease check, every run, every summary)
/// and the incremental refresh the TUI makes twice a second while `LIVE` runs train.
async fn time_refresh(args: &Args, store: &Store) {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let mut full = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        store.reap_orphans(process_alive).await.unwrap();
        let reaped = t.elapsed();
        let runs = store.list_runs().await.unwrap();
        let listed = t.elapsed();
        let summaries = store.metric_summaries().await.unwrap();
        full.push((t.elapsed(), reaped, listed - reaped, t.elapsed() - listed));
        assert!(runs.len() >= args.table_runs && !summaries.is_empty());
    }
    full.sort();
    let (median, reap, list, summaries) = full[2];
    println!(
        "  full read of the runs table ({} runs): median {:.0} ms (lease check {:.0}, runs {:.0}, summaries {:.0}), slowest {:.0} ms",
        args.table_runs,
        ms(median),
        ms(reap),
        ms(list),
        ms(summaries),
        ms(full[4].0)
    );

    // Steady state: LIVE runs are running; between two refreshes (0.5 s) each renews its
    // lease every 5 s (a tenth of them per refresh) and writes a metric batch.
    const LIVE: usize = 64;
    let mut live = Vec::new();
    for seed in 0..LIVE {
        let id = store.create_run(&new_run(seed as u64)).await.unwrap();
        store.mark_running(id, std::process::id()).await.unwrap();
        live.push(id);
    }
    let mut table = RunsFollower::new();
    let t = Instant::now();
    table.refresh(store).await.unwrap();
    let first = t.elapsed();
    let mut times = Vec::new();
    for round in 0..20u64 {
        for (i, id) in live.iter().enumerate() {
            if i % 10 == round as usize % 10 {
                store.heartbeat(*id, std::process::id()).await.unwrap();
            }
            store.insert_metrics(*id, &metric_batch(1_000_000 + round * 4, 4)).await.unwrap();
        }
        let t = Instant::now();
        store.reap_orphans(process_alive).await.unwrap();
        let step = table.refresh(store).await.unwrap();
        times.push(t.elapsed());
        assert!(step.summarised >= LIVE, "{step:?}");
    }
    times.sort();
    println!(
        "  incremental refresh ({LIVE} runs training): first {:.0} ms, then median {:.1} ms, slowest {:.1} ms of 20",
        ms(first),
        ms(times[10]),
        ms(times[19])
    );
    for id in &live {
        store.finish(*id, RunStatus::Finished, None).await.unwrap();
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = parse_args();
    if args.worker_mode {
        return worker(&args).await;
    }
    let store = Store::connect(&args.db).await.unwrap_or_else(|e| panic!("{e}"));
    if args.refresh_only {
        return time_refresh(&args, &store).await;
    }
    assert!(store.list_runs().await.unwrap().is_empty(), "{} is not empty: give a new database", args.db);
    ingest(&args, &store).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    runs_table(&args, &store).await;
    store.close().await;
}
