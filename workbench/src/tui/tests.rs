//! Screen tests: every screen drawn into ratatui's TestBackend, asserted on the buffer.

use super::app::{App, Modal, Screen};
use super::data::{PluginInfo, PluginList, RunData, Snapshot};
use super::launch::LaunchForm;
use super::service::{Request, Update};
use super::ui;
use crate::host::PluginHost;
use crate::store::{DiagnosticRow, MetricDirection, MetricRow, MetricSummary, PluginRef, RunRecord, RunStatus};
use plugin_api::{ParamSpec, PluginKind};
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{Event, KeyCode, KeyEvent, KeyModifiers};
use ratatui::Terminal;
use serde_json::json;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

fn record(id: i64, layer: &str, status: RunStatus, d: i64, seed: u64) -> RunRecord {
    let plugin = |n: &str| PluginRef { name: n.into(), version: "0.1.0".into(), fingerprint: "f".into(), build: None };
    RunRecord {
        id,
        status,
        layer: plugin(layer),
        task: plugin("sudoku"),
        config: json!({"layer_config": {"d": d, "iterations": 2}, "task_config": {}, "train": {"seed": seed}}),
        seed,
        device: "cpu".into(),
        param_count: Some(1234),
        git_rev: None,
        created_at: 0.0,
        started_at: Some(100.0),
        finished_at: status.is_terminal().then_some(160.0),
        error: (status == RunStatus::Failed).then(|| "layer `x`: boom".to_string()),
        worker_pid: None,
        last_step: 40,
        total_steps: Some(100),
        notes: String::new(),
        tags: if id == 1 { vec!["baseline".into()] } else { vec![] },
        metric_specs: vec![MetricDirection { name: "cell_acc".into(), higher_is_better: true }],
        sweep: None,
        held: false,
        supervision: Default::default(),
    }
}

fn run_data(scale: f64) -> RunData {
    let mut metrics = Vec::new();
    for step in 1..=40u64 {
        metrics.push(MetricRow {
            step,
            split: "train".into(),
            name: "loss".into(),
            value: 2.2 - scale * step as f64 / 40.0,
            wall_time: step as f64 * 0.5,
        });
    }
    for step in [20u64, 40] {
        metrics.push(MetricRow {
            step,
            split: "eval".into(),
            name: "loss".into(),
            value: 2.0 - scale * step as f64 / 80.0,
            wall_time: step as f64 * 0.5,
        });
        metrics.push(MetricRow {
            step,
            split: "eval".into(),
            name: "cell_acc".into(),
            value: 0.1 + scale * step as f64 / 100.0,
            wall_time: step as f64 * 0.5,
        });
        metrics.push(MetricRow {
            step,
            split: "eval@4".into(),
            name: "cell_acc".into(),
            value: 0.05 + scale * step as f64 / 100.0,
            wall_time: step as f64 * 0.5,
        });
    }
    let mut diagnostics = Vec::new();
    for t in 0..=2u32 {
        diagnostics.push(DiagnosticRow {
            step: 40,
            iteration: t,
            name: "energy/total".into(),
            value: -(t as f64) * scale,
        });
        diagnostics.push(DiagnosticRow { step: 40, iteration: t, name: "erank".into(), value: 10.0 - t as f64 });
    }
    for t in 0..=4u32 {
        diagnostics.push(DiagnosticRow { step: 40, iteration: t, name: "eval@4/erank".into(), value: 10.0 - t as f64 });
    }
    RunData {
        metrics,
        diagnostics,
        logs: vec!["step 20 eval: cell_acc 0.3".into(), "step 40 eval: cell_acc 0.5".into()],
    }
}

fn summaries(id: i64, data: &RunData) -> Vec<MetricSummary> {
    let mut out = Vec::new();
    for (split, name) in [("train", "loss"), ("eval", "loss"), ("eval", "cell_acc")] {
        let rows: Vec<&MetricRow> = data.metrics.iter().filter(|m| m.split == split && m.name == name).collect();
        out.push(MetricSummary {
            run_id: id,
            split: split.into(),
            name: name.into(),
            min: rows.iter().map(|m| m.value).fold(f64::INFINITY, f64::min),
            max: rows.iter().map(|m| m.value).fold(f64::NEG_INFINITY, f64::max),
            last: rows.last().unwrap().value,
            last_step: rows.last().unwrap().step,
            wall_time: rows.last().unwrap().wall_time,
        });
    }
    out
}

fn plugins() -> PluginList {
    let info = |name: &str, kind, params| PluginInfo {
        name: name.into(),
        kind,
        version: "0.1.0".into(),
        description: format!("the {name} plugin"),
        path: PathBuf::from(format!("/plugins/lib{name}.so")),
        params,
    };
    PluginList {
        plugins: vec![
            info(
                "hyperset",
                PluginKind::Layer,
                vec![
                    ParamSpec::int("d", 128, 2, 8192, "width"),
                    ParamSpec::choice("attention", "bisoftmax", &["bisoftmax", "sigmoid"], "kind"),
                ],
            ),
            info(
                "sudoku",
                PluginKind::Task,
                vec![ParamSpec::choice("difficulty", "hard", &["hard", "easy"], "puzzles")],
            ),
        ],
        failures: vec![super::data::PluginFailure {
            path: "/plugins/libbroken.so".into(),
            reason: "not a library: invalid ELF header".into(),
        }],
        workspace: None,
    }
}

/// An app with three runs (two with data) and recorded requests.
fn app() -> (App, Arc<Mutex<Vec<Request>>>) {
    let sent = Arc::new(Mutex::new(Vec::new()));
    let log = sent.clone();
    let mut app = App::new(PluginHost::default(), move |r| log.lock().unwrap().push(r));
    app.plugins = plugins();
    app.launch = LaunchForm::new(&app.plugins);
    let (a, b) = (run_data(1.0), run_data(0.5));
    let mut snapshot = Snapshot { loaded: true, ..Default::default() };
    snapshot.runs = vec![
        record(1, "hyperset", RunStatus::Finished, 64, 0),
        record(2, "transformer", RunStatus::Running, 128, 0),
        record(3, "hyperset", RunStatus::Failed, 64, 1),
    ];
    snapshot.summaries.insert(1, summaries(1, &a));
    snapshot.summaries.insert(2, summaries(2, &b));
    app.apply(Update::Runs(snapshot));
    app.apply(Update::Run(1, a));
    app.apply(Update::Run(2, b));
    (app, sent)
}

fn render(app: &mut App, w: u16, h: u16) -> String {
    let mut terminal = Terminal::new(TestBackend::new(w, h)).unwrap();
    terminal.draw(|f| ui::draw(f, app)).unwrap();
    let buffer = terminal.backend().buffer().clone();
    (0..h)
        .map(|y| (0..w).map(|x| buffer[(x, y)].symbol().to_string()).collect::<String>())
        .collect::<Vec<_>>()
        .join("\n")
}

fn press(app: &mut App, code: KeyCode) {
    app.handle(Event::Key(KeyEvent::new(code, KeyModifiers::NONE)));
}

fn chars(app: &mut App, s: &str) {
    for c in s.chars() {
        press(app, KeyCode::Char(c));
    }
}

#[test]
fn runs_screen_lists_runs_with_differing_keys_and_best_metric() {
    let (mut app, _) = app();
    let screen = render(&mut app, 140, 20);
    assert!(screen.contains("1 Runs") && screen.contains("6 Plugins"), "{screen}");
    // d differs between the runs and becomes a column; iterations does not.
    let header = screen.lines().nth(1).unwrap();
    assert!(header.contains(" d ") && header.contains("seed") && !header.contains("iterations"), "{header}");
    assert!(screen.contains("finished") && screen.contains("running") && screen.contains("failed"));
    assert!(screen.contains("cell_acc 0.5000"), "{screen}");
    assert!(screen.contains("40/100") && screen.contains("1m 00s") && screen.contains("baseline"), "{screen}");
}

#[test]
fn filter_sort_and_marks() {
    let (mut app, _) = app();
    press(&mut app, KeyCode::Char('/'));
    chars(&mut app, "layer:hyperset");
    press(&mut app, KeyCode::Enter);
    let screen = render(&mut app, 140, 20);
    assert!(screen.contains("2 of 3 runs"), "{screen}");
    assert!(!screen.contains("transformer"));
    press(&mut app, KeyCode::Esc);
    assert!(render(&mut app, 140, 20).contains("transformer"));
    // Sort by id descending: run 3 first.
    press(&mut app, KeyCode::Char('s'));
    press(&mut app, KeyCode::Char('S'));
    let ids: Vec<i64> = app.visible_runs().iter().map(|r| r.id).collect();
    assert_eq!(ids, vec![3, 2, 1]);
    press(&mut app, KeyCode::Char(' '));
    press(&mut app, KeyCode::Char(' '));
    assert_eq!(app.runs.selected.iter().copied().collect::<Vec<_>>(), vec![2, 3]);
    assert!(render(&mut app, 140, 20).contains("2 marked"));
}

#[test]
fn delete_asks_first_and_notes_are_sent() {
    let (mut app, sent) = app();
    press(&mut app, KeyCode::Char('d'));
    let screen = render(&mut app, 100, 20);
    assert!(screen.contains("Delete run 1"), "{screen}");
    press(&mut app, KeyCode::Char('n'));
    assert!(app.modal.is_none());
    assert!(!sent.lock().unwrap().iter().any(|r| matches!(r, Request::Delete(_))));
    press(&mut app, KeyCode::Char('d'));
    press(&mut app, KeyCode::Char('y'));
    assert!(sent.lock().unwrap().iter().any(|r| matches!(r, Request::Delete(ids) if ids == &vec![1])));

    press(&mut app, KeyCode::Char('e'));
    assert!(matches!(app.modal, Some(Modal::Annotate { .. })));
    chars(&mut app, "good run");
    press(&mut app, KeyCode::Tab);
    chars(&mut app, ", paper");
    assert!(render(&mut app, 100, 20).contains("notes and tags"));
    press(&mut app, KeyCode::Enter);
    let found = sent.lock().unwrap().iter().any(|r| {
        matches!(r, Request::Annotate { id: 1, notes, tags } if notes == "good run" && tags == &vec!["baseline".to_string(), "paper".to_string()])
    });
    assert!(found, "{:?}", sent.lock().unwrap());
}

#[test]
fn cancelling_a_running_run_asks_for_confirmation() {
    let (mut app, sent) = app();
    press(&mut app, KeyCode::Char('j'));
    press(&mut app, KeyCode::Char('x'));
    assert!(render(&mut app, 100, 20).contains("Stop run 2?"));
    press(&mut app, KeyCode::Char('y'));
    assert!(sent.lock().unwrap().iter().any(|r| matches!(r, Request::Cancel(2))));
    // A finished run has nothing to cancel.
    press(&mut app, KeyCode::Char('k'));
    press(&mut app, KeyCode::Char('x'));
    assert!(app.modal.is_none());
    assert!(render(&mut app, 100, 20).contains("nothing to cancel"));
}

#[test]
fn welcome_screen_on_an_empty_database() {
    let mut app = App::new(PluginHost::default(), |_| {});
    assert!(render(&mut app, 100, 30).contains("reading the run database"));
    app.apply(Update::Runs(Snapshot { loaded: true, ..Default::default() }));
    let screen = render(&mut app, 100, 30);
    assert!(screen.contains("no runs in this database") && screen.contains("default experiment"), "{screen}");
    // Without plugins the default experiment cannot start, and says why.
    press(&mut app, KeyCode::Enter);
    assert!(render(&mut app, 100, 30).contains("cannot launch the default experiment"));
}

#[test]
fn launch_form_from_schemas_refuses_bad_values_inline() {
    let (mut app, _) = app();
    press(&mut app, KeyCode::Char('2'));
    let screen = render(&mut app, 120, 32);
    for key in ["layer.d", "layer.attention", "task.difficulty", "train.steps", "train.seed", "[ Launch ]"] {
        assert!(screen.contains(key), "{key} missing:\n{screen}");
    }
    // layer.d is the third row: type a value out of range.
    press(&mut app, KeyCode::Down);
    press(&mut app, KeyCode::Down);
    press(&mut app, KeyCode::Enter);
    for _ in 0..3 {
        press(&mut app, KeyCode::Backspace);
    }
    chars(&mut app, "1");
    assert!(render(&mut app, 120, 30).contains("outside the allowed range 2..=8192"));
    press(&mut app, KeyCode::Esc);
    assert!(!render(&mut app, 120, 30).contains("outside the allowed range"));
    // Choices cycle with the arrows.
    press(&mut app, KeyCode::Down);
    press(&mut app, KeyCode::Right);
    assert!(render(&mut app, 120, 30).contains("sigmoid"));
    // Launching without loaded plugins fails with the reason, and nothing crashes.
    press(&mut app, KeyCode::Char('L'));
    assert!(render(&mut app, 120, 30).contains("cannot launch"));
}

#[test]
fn live_screen_shows_progress_rate_and_log() {
    let (mut app, _) = app();
    press(&mut app, KeyCode::Char('3'));
    let screen = render(&mut app, 140, 40);
    assert!(screen.contains("run 2: transformer on sudoku (running)"), "{screen}");
    assert!(
        screen.contains("step 40/100") && screen.contains("2.00 steps/s") && screen.contains("ETA 30s"),
        "{screen}"
    );
    assert!(screen.contains("step 40 eval: cell_acc 0.5"));
}

#[test]
fn compare_screen_draws_every_panel_and_says_when_one_is_empty() {
    let (mut app, _) = app();
    app.runs.selected.extend([1, 2, 3]);
    press(&mut app, KeyCode::Char('4'));
    let screen = render(&mut app, 150, 45);
    for title in [
        "loss (train",
        "cell_acc (eval)",
        "energy vs iteration",
        "effective rank",
        "mean angle",
        "cell_acc vs eval depth",
    ] {
        assert!(screen.contains(title), "{title} missing:\n{screen}");
    }
    assert!(screen.contains("run 1: hyperset") && screen.contains("run 2: transformer"), "{screen}");
    // No angle diagnostics in the data: the panel says so.
    assert!(screen.contains("no diagnostics yet"));
    // Braille dots are drawn for the curves.
    assert!(screen.chars().any(|c| ('\u{2801}'..='\u{28FF}').contains(&c)));
    press(&mut app, KeyCode::Char('l'));
    press(&mut app, KeyCode::Char('m'));
    let screen = render(&mut app, 150, 45);
    assert!(screen.contains("[log10]") && screen.contains("smoothing on"));
}

#[test]
fn ablation_screen_groups_seeds() {
    let (mut app, sent) = app();
    app.runs.selected.extend([1, 2]);
    press(&mut app, KeyCode::Char('5'));
    let screen = render(&mut app, 160, 20);
    assert!(screen.contains("2 configurations"), "{screen}");
    assert!(screen.contains("final cell_acc") && screen.contains("0.5000"), "{screen}");
    press(&mut app, KeyCode::Char('T'));
    assert!(sent
        .lock()
        .unwrap()
        .iter()
        .any(|r| matches!(r, Request::ExportAblation { out, .. } if out.extension().unwrap() == "tex")));
}

#[test]
fn plugins_screen_lists_plugins_and_failures() {
    let (mut app, _) = app();
    press(&mut app, KeyCode::Char('6'));
    let screen = render(&mut app, 140, 30);
    assert!(
        screen.contains("hyperset") && screen.contains("layer") && screen.contains("/plugins/libsudoku.so"),
        "{screen}"
    );
    assert!(screen.contains("1 libraries not loaded") && screen.contains("invalid ELF header"));
}

#[test]
fn help_overlay_lists_the_keys_of_the_screen() {
    let (mut app, _) = app();
    press(&mut app, KeyCode::Char('?'));
    let screen = render(&mut app, 120, 40);
    assert!(
        screen.contains("Runs screen") && screen.contains("delete the marked runs") && screen.contains("quit"),
        "{screen}"
    );
    press(&mut app, KeyCode::Char('q'));
    assert!(!app.help && !app.quit, "the first key only closes the overlay");
    press(&mut app, KeyCode::Char('q'));
    assert!(app.quit);
}

#[test]
fn every_screen_draws_in_a_tiny_terminal() {
    let (mut app, _) = app();
    app.runs.selected.extend([1, 2]);
    for screen in Screen::ALL {
        app.screen = screen;
        for (w, h) in [(40, 12), (20, 5), (1, 1)] {
            let text = render(&mut app, w, h);
            assert_eq!(text.lines().count(), h as usize);
        }
    }
    app.help = true;
    render(&mut app, 30, 8);
}
