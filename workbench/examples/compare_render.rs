//! Frame time of the Compare screen with 50 runs x 20,000 points per curve.
//!
//! `cargo run --release -p workbench --example compare_render`
//!
//! Draws into ratatui's TestBackend (no terminal I/O), so the figure is the cost of building
//! the frame: panel data (cached between frames), per-column downsampling and chart
//! rasterisation. Goal: <= 16 ms per frame.

use ratatui::backend::TestBackend;
use ratatui::Terminal;
use serde_json::json;
use std::time::Instant;
use workbench::host::PluginHost;
use workbench::store::{DiagnosticRow, MetricDirection, MetricRow, PluginRef, RunRecord, RunStatus};
use workbench::tui::app::{App, Screen};
use workbench::tui::data::{RunData, Snapshot};
use workbench::tui::service::Update;
use workbench::tui::ui;

const RUNS: i64 = 50;
const POINTS: u64 = 20_000;

fn record(id: i64) -> RunRecord {
    let plugin = |n: &str| PluginRef { name: n.into(), version: "0.1.0".into(), fingerprint: "f".into(), build: None };
    RunRecord {
        id,
        status: RunStatus::Finished,
        layer: plugin(if id % 2 == 0 { "hyperset" } else { "transformer" }),
        task: plugin("sudoku"),
        config: json!({"layer_config": {"d": 64 + id, "iterations": 8}, "task_config": {}, "train": {"seed": id}}),
        seed: id as u64,
        device: "cpu".into(),
        param_count: Some(200_000),
        git_rev: None,
        created_at: 0.0,
        started_at: Some(0.0),
        finished_at: Some(1000.0),
        error: None,
        worker_pid: None,
        last_step: POINTS,
        total_steps: Some(POINTS),
        notes: String::new(),
        tags: vec![],
        metric_specs: vec![MetricDirection { name: "cell_acc".into(), higher_is_better: true }],
        sweep: None,
        held: false,
        supervision: Default::default(),
        created_by: None,
        damage: None,
    }
}

fn data(id: i64) -> RunData {
    let mut metrics = Vec::with_capacity(POINTS as usize * 3);
    let phase = id as f64 * 0.1;
    for step in 1..=POINTS {
        let s = step as f64;
        let loss = 2.2 * (-s / 5000.0).exp() + 0.05 * (s * 0.01 + phase).sin() + 0.3;
        metrics.push(MetricRow { step, split: "train".into(), name: "loss".into(), value: loss, wall_time: s * 0.05 });
        metrics.push(MetricRow {
            step,
            split: "eval".into(),
            name: "loss".into(),
            value: loss + 0.1,
            wall_time: s * 0.05,
        });
        metrics.push(MetricRow {
            step,
            split: "eval".into(),
            name: "cell_acc".into(),
            value: 1.0 - loss / 2.5,
            wall_time: s * 0.05,
        });
    }
    let mut diagnostics = Vec::new();
    for t in 0..=16u32 {
        for name in ["energy/total", "erank", "angle/mean_arccos"] {
            diagnostics.push(DiagnosticRow {
                step: POINTS,
                iteration: t,
                name: name.into(),
                value: (t as f64 + phase).ln_1p(),
            });
        }
    }
    RunData { metrics, diagnostics, logs: vec![] }
}

fn main() {
    let mut app = App::new(PluginHost::default(), |_| {});
    let snapshot = Snapshot { runs: (1..=RUNS).map(record).collect(), loaded: true, ..Default::default() };
    app.apply(Update::Runs(snapshot));
    for id in 1..=RUNS {
        app.apply(Update::Run(id, data(id)));
        app.runs.selected.insert(id);
    }
    app.screen = Screen::Compare;
    let (w, h) = (240, 70);
    let mut terminal = Terminal::new(TestBackend::new(w, h)).expect("test backend");

    let start = Instant::now();
    terminal.draw(|f| ui::draw(f, &app)).expect("draw");
    let first = start.elapsed().as_secs_f64() * 1e3;

    let frames = 60;
    let start = Instant::now();
    for _ in 0..frames {
        terminal.draw(|f| ui::draw(f, &app)).expect("draw");
    }
    let per_frame = start.elapsed().as_secs_f64() * 1e3 / frames as f64;

    // A toggle rebuilds the panels from the raw rows (the cost after new data arrives).
    let start = Instant::now();
    app.compare.options.smooth = !app.compare.options.smooth;
    terminal.draw(|f| ui::draw(f, &app)).expect("draw");
    let rebuild = start.elapsed().as_secs_f64() * 1e3;

    let curves = RUNS as u64 * 3;
    println!(
        "Compare screen, {RUNS} runs x {POINTS} points per curve ({} points in step panels), {w}x{h} cells",
        curves * POINTS
    );
    println!("  first frame (builds panel data):   {first:8.2} ms");
    println!(
        "  frame with cached panel data:       {per_frame:8.2} ms   (goal 16 ms: {:.2}x of budget)",
        per_frame / 16.0
    );
    println!("  frame after a toggle (rebuild):     {rebuild:8.2} ms");
}
