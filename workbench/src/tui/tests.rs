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
use ratatui::style::Color;
use ratatui::Terminal;
use serde_json::json;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

fn record(id: i64, layer: &str, status: RunStatus, d: i64, seed: u64) -> RunRecord {
    RunRecord {
        status,
        seed,
        layer: PluginRef { name: layer.into(), version: "0.1.0".into(), fingerprint: "f".into(), build: None },
        task: PluginRef { name: "sudoku".into(), version: "0.1.0".into(), fingerprint: "f".into(), build: None },
        param_count: Some(1234),
        started_at: Some(100.0),
        finished_at: status.is_terminal().then_some(160.0),
        error: (status == RunStatus::Failed).then(|| "layer `x`: boom".to_string()),
        last_step: 40,
        total_steps: Some(100),
        tags: if id == 1 { vec!["baseline".into()] } else { vec![] },
        metric_specs: vec![MetricDirection { name: "cell_acc".into(), higher_is_better: true }],
        ..RunRecord::fixture(
            id,
            layer,
            json!({"layer_config": {"d": d, "iterations": 2}, "task_config": {}, "train": {"seed": seed}}),
        )
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
    // With how many of them are in each state: a sweep's or a user's progress.
    assert!(screen.contains("2 of 3 runs (1 finished, 1 failed)"), "{screen}");
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

/// A run that ends while the TUI is open is told in the status bar: finished with its best
/// headline value, failed (as an error) with the reason. Runs that had ended before are not.
#[test]
fn runs_that_end_are_told_in_the_status_bar() {
    let (mut app, _) = app();
    assert_eq!(app.shown_status(), None, "the first snapshot's ended runs are not news");
    let mut snapshot = app.snapshot.clone();
    snapshot.runs[1].status = RunStatus::Finished;
    app.apply(Update::Runs(snapshot.clone()));
    assert_eq!(app.shown_status(), Some(("run 2 finished (best cell_acc 0.3000)", false)));
    snapshot.runs[1].status = RunStatus::Running;
    app.apply(Update::Runs(snapshot.clone()));
    snapshot.runs[1].status = RunStatus::Failed;
    snapshot.runs[1].error = Some("layer `transformer`: out of memory".into());
    app.apply(Update::Runs(snapshot.clone()));
    assert_eq!(app.shown_status(), Some(("run 2 failed: layer `transformer`: out of memory", true)));
    app.say("something else", false);
    app.apply(Update::Runs(snapshot));
    assert_eq!(app.shown_status(), Some(("something else", false)), "told once");
}

/// In a store a lab shares, deleting or stopping another user's run says whose it is.
#[test]
fn deleting_another_user_s_run_says_whose_it_is() {
    let (mut app, _) = app();
    let mut snapshot = app.snapshot.clone();
    snapshot.runs[0].created_by = Some("not-this-user-bob".into());
    snapshot.runs[1].created_by = Some(crate::store::user_name());
    app.apply(Update::Runs(snapshot));
    press(&mut app, KeyCode::Char('d'));
    let screen = render(&mut app, 140, 24);
    assert!(
        screen.contains("Note: run 1 was stored by someone else") && screen.contains("(not-this-user-bob)"),
        "{screen}"
    );
    press(&mut app, KeyCode::Char('n'));
    press(&mut app, KeyCode::Char('j'));
    press(&mut app, KeyCode::Char('d'));
    assert!(!render(&mut app, 140, 24).contains("someone else"), "run 2 is this user's");
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

    // A tag with a space is refused where the CLI refuses it; the dialog keeps what was typed.
    press(&mut app, KeyCode::Char('e'));
    chars(&mut app, "kept");
    press(&mut app, KeyCode::Tab);
    chars(&mut app, ", final draft");
    press(&mut app, KeyCode::Enter);
    assert!(app.status.as_ref().is_some_and(|s| s.0.contains("tag `final draft` holds a space")), "{:?}", app.status);
    let Some(Modal::Annotate { notes, tags, on_tags: true, .. }) = &app.modal else { panic!("{:?}", app.modal) };
    assert!(notes.ends_with("kept") && tags.ends_with(", final draft"), "{notes} / {tags}");
    for _ in 0..", final draft".len() {
        press(&mut app, KeyCode::Backspace);
    }
    chars(&mut app, ",final,baseline");
    press(&mut app, KeyCode::Enter);
    assert!(app.modal.is_none());
    let saved =
        sent.lock().unwrap().iter().any(
            |r| matches!(r, Request::Annotate { tags, .. } if tags == &["baseline".to_string(), "final".to_string()]),
        );
    assert!(saved, "repeats dropped: {:?}", sent.lock().unwrap());
}

#[test]
fn t_tags_the_marked_runs_or_the_one_under_the_cursor() {
    let (mut app, sent) = app();
    app.runs.selected.extend([1, 3]);
    press(&mut app, KeyCode::Char('t'));
    let screen = render(&mut app, 100, 24);
    assert!(screen.contains("Tags of the 2 marked runs") && screen.contains("now    baseline"), "{screen}");
    // A list that mixes the two forms is refused; the dialog keeps it to be mended.
    chars(&mut app, "paper,-baseline");
    press(&mut app, KeyCode::Enter);
    assert!(matches!(&app.modal, Some(Modal::Tags { text, .. }) if text == "paper,-baseline"), "{:?}", app.modal);
    assert!(app.status.as_ref().is_some_and(|s| s.0.contains("mixes tags")), "{:?}", app.status);
    press(&mut app, KeyCode::Home);
    for _ in 0.."paper,-baseline".len() {
        press(&mut app, KeyCode::Backspace);
    }
    chars(&mut app, "+paper,-baseline");
    press(&mut app, KeyCode::Enter);
    assert!(app.modal.is_none());
    let edit = crate::ops::runs::TagEdit::Change { add: vec!["paper".into()], remove: vec!["baseline".into()] };
    let sent_edit = sent
        .lock()
        .unwrap()
        .iter()
        .any(|r| matches!(r, Request::Retag { ids, edit: e } if ids == &[1, 3] && e == &edit));
    assert!(sent_edit, "{:?}", sent.lock().unwrap());
    // Nothing marked: the run under the cursor.
    app.runs.selected.clear();
    press(&mut app, KeyCode::Char('t'));
    assert!(render(&mut app, 100, 24).contains("Tags of run 1"));
    press(&mut app, KeyCode::Esc);
    assert!(app.modal.is_none());
}

#[test]
fn capital_e_evaluates_the_marked_runs_again_with_the_settings_typed() {
    let (mut app, sent) = app();
    app.runs.selected.extend([1, 3]);
    press(&mut app, KeyCode::Char('E'));
    assert!(render(&mut app, 100, 24).contains("Evaluate the checkpoints of the 2 marked runs again"));
    chars(&mut app, "eval_depths=4 deeper");
    press(&mut app, KeyCode::Enter);
    // A word that is not a setting is refused; the dialog keeps what was typed.
    assert!(app.status.as_ref().is_some_and(|s| s.0.contains("`deeper` is not a setting")), "{:?}", app.status);
    assert!(matches!(&app.modal, Some(Modal::Evaluate { text, .. }) if text == "eval_depths=4 deeper"));
    for _ in 0.." deeper".len() {
        press(&mut app, KeyCode::Backspace);
    }
    chars(&mut app, " difficulty=hard");
    press(&mut app, KeyCode::Enter);
    assert!(app.modal.is_none());
    let evaluate = sent.lock().unwrap().iter().find_map(|r| match r {
        Request::Evaluate { ids, overrides } => Some((ids.clone(), overrides.clone())),
        _ => None,
    });
    assert_eq!(evaluate, Some((vec![1, 3], vec!["eval_depths=4".to_string(), "difficulty=hard".to_string()])));
    // Without marks, the run under the cursor; the dialog starts with the last settings.
    app.runs.selected.clear();
    press(&mut app, KeyCode::Char('E'));
    assert!(render(&mut app, 100, 24).contains("Evaluate run 1's checkpoint again"));
    assert!(matches!(&app.modal, Some(Modal::Evaluate { text, .. }) if text == "eval_depths=4 difficulty=hard"));
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
fn x_and_r_act_on_the_marked_runs_and_leave_those_they_cannot() {
    let (mut app, sent) = app();
    // Run 1 finished, 2 running, 3 failed; a queued run 4 besides.
    let mut queued = app.snapshot.runs[1].clone();
    queued.id = 4;
    queued.status = RunStatus::Queued;
    let mut snapshot = app.snapshot.clone();
    snapshot.runs.push(queued);
    app.apply(Update::Runs(snapshot));
    app.runs.selected.extend([1, 2, 3, 4]);
    press(&mut app, KeyCode::Char('x'));
    let screen = render(&mut app, 120, 24);
    assert!(screen.contains("Stop the 2 runs 2, 4?"), "{screen}");
    assert!(screen.contains("runs 1 (finished), 3 (failed) are left as they are"), "{screen}");
    // Run 4 starts and ends before the yes: only run 2 is asked to stop.
    let mut snapshot = app.snapshot.clone();
    snapshot.runs.iter_mut().filter(|r| r.id == 4).for_each(|r| r.status = RunStatus::Finished);
    app.apply(Update::Runs(snapshot));
    press(&mut app, KeyCode::Char('y'));
    let sent_ids = |of: fn(&Request) -> Option<i64>| sent.lock().unwrap().iter().filter_map(of).collect::<Vec<_>>();
    assert_eq!(sent_ids(|r| if let Request::Cancel(id) = r { Some(*id) } else { None }), [2]);
    // r requeues the failed run among the marked ones and says which it left.
    press(&mut app, KeyCode::Char('r'));
    assert_eq!(sent_ids(|r| if let Request::Resume(id) = r { Some(*id) } else { None }), [3]);
    assert!(
        app.status.as_ref().is_some_and(|s| s.0.starts_with("requeueing run 3 (runs 1 (finished)")),
        "{:?}",
        app.status
    );
    // Nothing marked that can be requeued: said, nothing sent.
    app.runs.selected = [1, 2].into();
    press(&mut app, KeyCode::Char('r'));
    assert!(app.status.as_ref().is_some_and(|s| s.0.contains("none of the marked runs is interrupted or failed")));
}

#[test]
fn p_pauses_the_marked_queued_runs_or_releases_them_when_all_are_paused() {
    let (mut app, sent) = app();
    let mut snapshot = app.snapshot.clone();
    for (id, held) in [(4, false), (5, true)] {
        let mut queued = snapshot.runs[0].clone();
        (queued.id, queued.status, queued.held) = (id, RunStatus::Queued, held);
        snapshot.runs.push(queued);
    }
    app.apply(Update::Runs(snapshot));
    app.runs.selected.extend([1, 4, 5]);
    press(&mut app, KeyCode::Char('p'));
    let holds = |sent: &Arc<Mutex<Vec<Request>>>| {
        sent.lock().unwrap().iter().rev().find_map(|r| {
            if let Request::Hold { ids, held } = r {
                Some((ids.clone(), *held))
            } else {
                None
            }
        })
    };
    assert_eq!(holds(&sent), Some((vec![4, 5], true)), "one not paused yet: all are paused");
    assert!(app.status.as_ref().is_some_and(|s| s.0.contains("pausing the 2 runs 4, 5 (run 1 (finished) is left")));
    app.runs.selected = [5].into();
    press(&mut app, KeyCode::Char('p'));
    assert_eq!(holds(&sent), Some((vec![5], false)), "all paused: released");
}

#[test]
fn a_stop_question_is_withdrawn_when_its_run_ends_first() {
    let (mut app, _) = app();
    press(&mut app, KeyCode::Char('j'));
    press(&mut app, KeyCode::Char('x'));
    assert!(render(&mut app, 100, 20).contains("Stop run 2?"));
    // Another run's news keeps the question open.
    app.apply(Update::Runs(app.snapshot.clone()));
    assert!(app.modal.is_some());
    let mut snapshot = app.snapshot.clone();
    snapshot.runs.iter_mut().filter(|r| r.id == 2).for_each(|r| r.status = RunStatus::Finished);
    app.apply(Update::Runs(snapshot));
    assert!(app.modal.is_none());
    assert!(render(&mut app, 100, 20).contains("run 2 is finished now: nothing to stop"));
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
fn the_tab_bar_names_the_store_and_keeps_its_end_when_narrow() {
    let (mut app, _) = app();
    app.store_label = "postgres://lab:***@db.lab:5432/runs · slurm".into();
    let top = |app: &mut App, w: u16| render(app, w, 20).lines().next().unwrap_or_default().to_string();
    let wide = top(&mut app, 160);
    assert!(
        wide.starts_with(" 1 Runs │") && wide.trim_end().ends_with("postgres://lab:***@db.lab:5432/runs · slurm"),
        "{wide}"
    );
    // Narrower: the tabs stay whole and the label keeps the database's name.
    let narrow = top(&mut app, 90);
    assert!(narrow.contains("6 Plugins") && narrow.trim_end().ends_with("/runs · slurm"), "{narrow}");
    assert!(narrow.contains('…') && !narrow.contains("postgres://"), "{narrow}");
    // No room: no label, and nothing drawn over the tabs.
    let tight = top(&mut app, 72);
    assert!(tight.contains("6 Plugins") && !tight.contains("slurm"), "{tight}");
}

#[test]
fn a_long_error_is_read_whole_in_a_footer_of_up_to_three_rows() {
    let (mut app, _) = app();
    let error = "Slurm would not take the runs' jobs: sbatch: error: invalid partition specified: nowhere \
                 (`sbatch --test-only --requeue --partition=nowhere`); change --slurm; nothing was stored";
    app.say(error, true);
    app.layout(Rect::new(0, 0, 80, 20));
    let screen = render(&mut app, 80, 20);
    let footer: Vec<&str> = screen.lines().skip(17).map(str::trim_end).collect();
    let words = |text: &str| text.split_whitespace().map(str::to_string).collect::<Vec<_>>();
    assert_eq!(words(&footer.join(" ")), words(error), "{screen}");
    assert_eq!(app.areas.footer.height, 3);
    // A short message keeps one row, and the body its height.
    app.say("queued run 7", false);
    app.layout(Rect::new(0, 0, 80, 20));
    assert_eq!(app.areas.footer.height, 1);
    assert!(render(&mut app, 80, 20).lines().last().unwrap_or_default().starts_with("queued run 7"));
}

/// The footer's hints are whole at any width: where not all fit, the screen's later ones are
/// left out, and the key list's and quit's stay.
#[test]
fn the_footer_shows_whole_hints_and_always_the_key_list_and_quit() {
    let (mut app, _) = app();
    let footer = |app: &mut App, w: u16| render_laid_out(app, w, 20).lines().last().unwrap_or_default().to_string();
    let wide = footer(&mut app, 200);
    assert!(wide.contains("/ filter") && wide.contains("A ablation") && wide.trim_end().ends_with("q, Ctrl-C quit"));
    for width in [130, 100, 80, 64] {
        let line = footer(&mut app, width);
        assert!(line.trim_end().ends_with("? keys  q, Ctrl-C quit"), "width {width}: {line:?}");
        assert!(line.starts_with("3 runs, 1 running, 0 marked   "), "width {width}: {line:?}");
        assert!(line.chars().count() <= width as usize, "width {width}: {line:?}");
    }
    let narrow = footer(&mut app, 80);
    assert!(!narrow.contains("A ablation") && narrow.contains("j, ↓ move"), "{narrow:?}");
}

/// The Launch form's title keeps what it says whole in a narrow terminal: the key reminder
/// in brackets goes first (the footer and `?` have the keys); the settings' meanings that do
/// not fit end in `…`.
#[test]
fn the_launch_title_drops_its_key_reminder_before_it_is_cut() {
    let (mut app, _) = app();
    press(&mut app, KeyCode::Char('2'));
    let wide = render(&mut app, 140, 30);
    assert!(wide.contains("a layer on a task (Enter edits, ←/→ choose, L launches)"), "{wide}");
    let narrow = render(&mut app, 80, 24);
    let title = narrow.lines().nth(1).unwrap_or_default();
    assert!(title.contains("a layer on a task─") && !title.contains("(Enter"), "{narrow}");
    // A setting's meaning too wide for its row ends in `…` inside the frame.
    let cut: Vec<&str> = narrow.lines().filter(|l| l.contains("…│")).collect();
    assert!(!cut.is_empty(), "{narrow}");
}

#[test]
fn launch_form_from_schemas_refuses_bad_values_inline() {
    let (mut app, _) = app();
    press(&mut app, KeyCode::Char('2'));
    let screen = render(&mut app, 120, 36);
    for key in ["layer.d", "layer.attention", "task.difficulty", "train.steps", "train.seed", "[ Launch ]"] {
        assert!(screen.contains(key), "{key} missing:\n{screen}");
    }
    // Each setting's meaning beside it, in one column whether the value cycles or not.
    let line_of = |screen: &str, key: &str| screen.lines().find(|l| l.contains(key)).unwrap_or_default().to_string();
    let (d_line, attention_line) = (line_of(&screen, "layer.d "), line_of(&screen, "layer.attention"));
    assert!(d_line.contains("width") && attention_line.contains("kind"), "{d_line}\n{attention_line}");
    let column = |line: &str, word: &str| line.find(word).map(|at| line[..at].chars().count());
    assert_eq!(column(&d_line, "width"), column(&attention_line, "kind"), "{d_line}\n{attention_line}");
    assert!(line_of(&screen, "layer  ").contains("the hyperset plugin"), "{screen}");
    // layer.d is the third row: type a value out of range.
    press(&mut app, KeyCode::Down);
    press(&mut app, KeyCode::Down);
    press(&mut app, KeyCode::Enter);
    for _ in 0..3 {
        press(&mut app, KeyCode::Backspace);
    }
    chars(&mut app, "1");
    let screen = render(&mut app, 120, 30);
    assert!(screen.contains("outside the allowed range 2..=8192"));
    // The error takes the meaning's place.
    assert!(!line_of(&screen, "layer.d ").contains("width"), "{screen}");
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

/// A run submitted to Slurm whose worker has not started says it waits for its job, and
/// reads `submitted` in the Runs table.
#[test]
fn live_screen_names_the_job_a_queued_run_waits_for() {
    let (mut app, _) = app();
    let mut queued = record(4, "hyperset", RunStatus::Queued, 64, 2);
    queued.supervision.executor = Some("slurm".into());
    queued.supervision.job_id = Some("77".into());
    let mut snapshot = app.snapshot.clone();
    snapshot.runs.push(queued);
    app.apply(Update::Runs(snapshot));
    app.live.run = Some(4);
    press(&mut app, KeyCode::Char('3'));
    let screen = render(&mut app, 140, 40);
    assert!(screen.contains("slurm job 77: waiting to start (the log says why)"), "{screen}");
    assert!(screen.contains("run 4: hyperset on sudoku (submitted)"), "{screen}");
    assert!(screen.lines().any(|l| l.contains("4 hyperset    submitted")), "the list says it whole: {screen}");
    press(&mut app, KeyCode::Char('1'));
    let screen = render(&mut app, 140, 40);
    let row = screen.lines().find(|l| l.trim_start().starts_with("4 ")).unwrap_or_else(|| panic!("{screen}"));
    assert!(row.contains("submitted"), "{row}");
}

/// How a run ended reads in yellow when it was interrupted (its checkpoint is kept) and in red
/// when it failed.
#[test]
fn live_screen_colours_an_interruption_apart_from_a_failure() {
    let (mut app, _) = app();
    let mut snapshot = app.snapshot.clone();
    for (id, status, text) in
        [(5, RunStatus::Interrupted, "stopped at step 7"), (6, RunStatus::Failed, "out of memory")]
    {
        let mut run = record(id, "hyperset", status, 64, 3);
        run.error = Some(text.into());
        snapshot.runs.push(run);
    }
    app.apply(Update::Runs(snapshot));
    press(&mut app, KeyCode::Char('3'));
    for (id, text, colour) in [(5, "stopped at step 7", Color::Yellow), (6, "out of memory", Color::Red)] {
        app.live.run = Some(id);
        assert_eq!(colour_of(&app, text), colour, "run {id}");
    }
}

/// The colour `text` is drawn in, where it first appears on a 140 x 40 screen.
fn colour_of(app: &App, text: &str) -> Color {
    let mut terminal = Terminal::new(TestBackend::new(140, 40)).unwrap();
    terminal.draw(|f| ui::draw(f, app)).unwrap();
    let buffer = terminal.backend().buffer().clone();
    let at = (0..40u16)
        .flat_map(|y| (0..140u16).map(move |x| (x, y)))
        .find(|&(x, y)| {
            (0..text.len() as u16)
                .all(|i| x + i < 140 && buffer[(x + i, y)].symbol() == &text[i as usize..i as usize + 1])
        })
        .unwrap_or_else(|| panic!("`{text}` is not on the screen"));
    buffer[at].fg
}

/// The Runs table greys out a paused run (the queue leaves it) and shows a damaged row in red,
/// whatever its status; a submitted run keeps the queued colour.
#[test]
fn runs_table_colours_the_state_it_shows() {
    let (mut app, _) = app();
    let mut snapshot = app.snapshot.clone();
    let queued = |id| record(id, "hyperset", RunStatus::Queued, 64, 3);
    let mut paused = queued(5);
    paused.held = true;
    let mut submitted = queued(6);
    submitted.supervision.job_id = Some("77".into());
    let mut damaged = record(7, "hyperset", RunStatus::Finished, 64, 3);
    damaged.damage = Some("configuration is not valid JSON".into());
    snapshot.runs.extend([paused, submitted, damaged]);
    app.apply(Update::Runs(snapshot));
    press(&mut app, KeyCode::Char('1'));
    for (text, colour) in [("paused", Color::DarkGray), ("submitted", Color::Blue), ("damaged", Color::Red)] {
        assert_eq!(colour_of(&app, text), colour, "{text}");
    }
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

/// The list of runs beside the Live screen's run widens to the names of its layers.
#[test]
fn live_screen_lists_long_layer_names_and_ids_whole() {
    let (mut app, _) = app();
    let mut snapshot = app.snapshot.clone();
    snapshot.runs.push(record(12345, "energy-transformer", RunStatus::Interrupted, 64, 0));
    app.apply(Update::Runs(snapshot));
    press(&mut app, KeyCode::Char('3'));
    let screen = render(&mut app, 140, 40);
    assert!(screen.contains("12345 energy-transformer interrupted"), "{screen}");
}

/// The system panel beside the curves (the last sample, the largest peak) and the evaluation
/// size on the info line; a run without system metrics has no panel.
#[test]
fn live_screen_shows_system_metrics_and_eval_size() {
    let (mut app, _) = app();
    press(&mut app, KeyCode::Char('3'));
    let before = render(&mut app, 140, 40);
    assert!(!before.contains("system") && !before.contains("eval on"), "{before}");
    let mut data = run_data(0.5);
    let mib = 1024.0 * 1024.0;
    for (step, cpu, rss, peak) in [(20u64, 150.0, 300.0, 310.0), (40, 195.0, 400.0, 512.0)] {
        for (name, value) in
            [("cpu_percent", cpu), ("rss_bytes", rss * mib), ("peak_rss_bytes", peak * mib), ("threads", 9.0)]
        {
            data.metrics.push(MetricRow {
                step,
                split: "sys".into(),
                name: name.into(),
                value,
                wall_time: step as f64,
            });
        }
    }
    data.metrics.push(MetricRow {
        step: 40,
        split: "sys".into(),
        name: "eval_examples".into(),
        value: 360.0,
        wall_time: 20.0,
    });
    let mut snapshot = app.snapshot.clone();
    let mut summary = summaries(2, &data);
    summary.push(MetricSummary {
        run_id: 2,
        split: "sys".into(),
        name: "eval_examples".into(),
        min: 360.0,
        max: 360.0,
        last: 360.0,
        last_step: 40,
        wall_time: 20.0,
    });
    snapshot.summaries.insert(2, summary);
    app.apply(Update::Runs(snapshot));
    app.apply(Update::Run(2, data));
    let screen = render(&mut app, 140, 40);
    assert!(screen.contains("system"), "{screen}");
    for text in ["CPU    195 %", "RSS  400.0 MiB", "peak 512.0 MiB", "threads 9", "eval on 360 examples"] {
        assert!(screen.contains(text), "{text} missing:\n{screen}");
    }
    // The curves keep their panels beside it.
    assert!(screen.contains("step 40/100") && screen.contains("loss (train"), "{screen}");
    // In narrower terminals the list of runs gives up its status words, then itself, so that
    // each curve keeps at least 24 columns beside the panel.
    let curve_width = |screen: &str| {
        let line = screen.lines().find(|l| l.contains("┌loss")).unwrap_or_default();
        let chars: Vec<char> = line.chars().collect();
        let start = chars.iter().position(|&c| c == '┌').unwrap_or(0);
        chars[start..].iter().position(|&c| c == '┐').unwrap_or(0) + 1
    };
    let names = render(&mut app, 110, 30);
    assert!(names.contains("┌runs") && !names.contains(" running "), "{names}");
    assert!(curve_width(&names) >= 24 && names.contains("CPU"), "{names}");
    let hidden = render(&mut app, 80, 24);
    assert!(!hidden.contains("┌runs") && hidden.contains("run 2: transformer"), "{hidden}");
    assert!(hidden.contains("· 1 of 3, j/k for another"), "{hidden}");
    assert!(curve_width(&hidden) >= 24 && hidden.contains("CPU"), "{hidden}");
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
fn d_shows_the_compared_runs_differences_as_a_table_and_scrolls_it() {
    let (mut app, _) = app();
    app.runs.selected.extend([1, 2]);
    press(&mut app, KeyCode::Char('4'));
    press(&mut app, KeyCode::Char('d'));
    let screen = render_laid_out(&mut app, 120, 30);
    assert!(screen.contains("Differences of 2 runs: 1 configuration key, 3 final metrics"), "{screen}");
    let row = |screen: &str, start: &str| -> String {
        screen.lines().find(|l| l.contains(start)).unwrap_or_else(|| panic!("no `{start}`:\n{screen}")).into()
    };
    let header = row(&screen, "run 1");
    assert!(header.contains("run 2"), "{screen}");
    // d is 64 against 128; the layers differ, so do their builds' names.
    let width = row(&screen, "  d ");
    assert!(width.contains("64") && width.contains("128"), "{width}");
    assert!(row(&screen, "  layer").contains("hyperset 0.1.0") && screen.contains("transformer 0.1.0"));
    let acc = row(&screen, "eval cell_acc");
    assert!(acc.contains("0.50000") && acc.contains("0.30000"), "{acc}");
    assert_eq!(colour_of(&app, "run 2"), super::compare::colour(1), "each run in its Compare colour");
    // A value longer than its run's column ends in `…`.
    let mut snapshot = app.snapshot.clone();
    snapshot.runs[0].layer.name = "a-layer-plugin-with-a-very-long-name".into();
    app.apply(Update::Runs(snapshot));
    let cut = render_laid_out(&mut app, 120, 30);
    assert!(row(&cut, "  layer").contains("a-layer-plugin-with-a-very-long…  transformer"), "{cut}");
    // A terminal too short for every line scrolls, saying where it is.
    let short = render_laid_out(&mut app, 120, 10);
    assert!(short.contains("│configuration"), "{short}");
    assert!(short.contains("lines 1-") && short.contains("(j/k, PgUp/PgDn scroll)"), "{short}");
    press(&mut app, KeyCode::PageDown);
    let scrolled = render_laid_out(&mut app, 120, 10);
    assert!(!scrolled.contains("│configuration") && scrolled.contains("lines 5-8 of 8"), "{scrolled}");
    assert!(scrolled.contains("train loss"), "the last line shows at the bottom:\n{scrolled}");
    press(&mut app, KeyCode::Char('k'));
    press(&mut app, KeyCode::Up);
    press(&mut app, KeyCode::PageUp);
    assert_eq!(app.compare.scroll, 0);
    // d again: the panels; one run alone has no differences to show.
    press(&mut app, KeyCode::Char('d'));
    assert!(render_laid_out(&mut app, 120, 30).contains("loss (train"));
    app.runs.selected.clear();
    press(&mut app, KeyCode::Char('d'));
    assert!(render_laid_out(&mut app, 120, 30).contains("The differences need two runs or more"));
}

#[test]
fn ablation_screen_groups_seeds() {
    let (mut app, sent) = app();
    app.runs.selected.extend([1, 2]);
    press(&mut app, KeyCode::Char('5'));
    let screen = render(&mut app, 160, 20);
    assert!(screen.contains("2 configurations"), "{screen}");
    assert!(screen.contains("final cell_acc") && screen.contains("0.5000"), "{screen}");
    // Narrow: the configuration keeps its full width (no `hyperse`), metric columns go from
    // the right and the header and the note say so.
    let narrow = render(&mut app, 80, 20);
    assert!(narrow.contains("transformer") && narrow.contains("hyperset"), "{narrow}");
    assert!(narrow.contains("final cell_acc") && narrow.contains("hidden"), "{narrow}");
    assert!(narrow.contains("do not fit: widen the terminal, or export"), "{narrow}");
    assert!(!screen.contains("hidden"), "{screen}");
    press(&mut app, KeyCode::Char('T'));
    assert!(sent
        .lock()
        .unwrap()
        .iter()
        .any(|r| matches!(r, Request::ExportAblation { out, sort: None, .. } if out.extension().unwrap() == "tex")));
    // Sorted on the screen, the file is sorted alike: by the column's title and direction.
    press(&mut app, KeyCode::Char('s'));
    press(&mut app, KeyCode::Char('S'));
    press(&mut app, KeyCode::Char('M'));
    let (table, _) = screens::ablation::ablation_table(&app);
    let title = table.columns[app.ablation.sort.unwrap().0].title();
    let sorted = sent.lock().unwrap().iter().any(|r| {
        matches!(r, Request::ExportAblation { sort: Some(s), .. } if s.column == title && s.descending == Some(true))
    });
    assert!(sorted, "{title}: {:?}", sent.lock().unwrap());
}

/// An app whose finished runs are hyperset runs over layers × iterations: final cell_acc
/// 0.5 and 0.3 (two seeds) at (1, 2), 0.7 at (1, 4), 0.9 at (2, 4); (2, 2) never ran.
fn heatmap_app() -> (App, Arc<Mutex<Vec<Request>>>) {
    let (mut app, sent) = app();
    let run = |id: i64, layers: i64, iterations: i64, seed: u64| {
        let mut r = record(id, "hyperset", RunStatus::Finished, 64, seed);
        r.config = json!({
            "layer_config": {"d": 64, "layers": layers, "iterations": iterations},
            "task_config": {}, "train": {"seed": seed}
        });
        r
    };
    let mut snapshot = Snapshot { loaded: true, ..Default::default() };
    snapshot.runs = vec![run(11, 1, 2, 0), run(12, 1, 2, 1), run(13, 2, 4, 0), run(14, 1, 4, 0)];
    app.apply(Update::Runs(snapshot));
    for (id, scale) in [(11, 1.0), (12, 0.5), (13, 2.0), (14, 1.5)] {
        app.apply(Update::Run(id, run_data(scale)));
    }
    (app, sent)
}

#[test]
fn heatmap_view_lays_the_metric_out_over_two_keys_and_exports_a_png() {
    let (mut app, sent) = heatmap_app();
    press(&mut app, KeyCode::Char('5'));
    press(&mut app, KeyCode::Char('h'));
    let screen = render(&mut app, 140, 30);
    assert!(screen.contains("Heatmap: final cell_acc over iterations × layers"), "{screen}");
    for value in ["0.4000", "0.7000", "0.9000", "–"] {
        assert!(screen.contains(value), "no {value}:\n{screen}");
    }
    // The next pair of keys puts layers on the rows: the row of layers=1 holds 0.4 then 0.7.
    press(&mut app, KeyCode::Char('x'));
    let screen = render(&mut app, 140, 30);
    assert!(screen.contains("over layers × iterations"), "{screen}");
    let row = screen.lines().find(|l| l.contains("0.4000")).unwrap();
    assert!(row.find("0.4000") < row.find("0.7000"), "{screen}");
    assert!(screen.contains("best: layers=2, iterations=4: 0.9000"), "{screen}");
    // The next metric: best cell_acc (the same values here, as accuracy only rises).
    press(&mut app, KeyCode::Char('m'));
    assert!(render(&mut app, 140, 30).contains("best cell_acc over layers"));
    press(&mut app, KeyCode::Char('p'));
    let requests = sent.lock().unwrap();
    let export = requests.iter().find_map(|r| match r {
        Request::ExportHeatmap { runs, rows, columns, metric, out } => Some((runs, rows, columns, metric, out)),
        _ => None,
    });
    let (runs, rows, columns, metric, out) = export.expect("no heatmap export was sent");
    assert_eq!(
        (runs.clone(), rows.as_str(), columns.as_str(), metric.as_str()),
        (vec![11, 12, 13, 14], "layers", "iterations", "best cell_acc")
    );
    assert_eq!(out.file_name().unwrap(), "heatmap-best-cell_acc-layers-by-iterations-runs-11to14.png");
    drop(requests);
    // Back to the table.
    press(&mut app, KeyCode::Char('h'));
    assert!(render(&mut app, 140, 30).contains("3 configurations"));
}

#[test]
fn heatmap_view_without_colours_shades_the_cells() {
    use ratatui::style::Color;
    crate::colour::set_no_color_on_this_thread(true);
    let (mut app, _) = heatmap_app();
    app.screen = Screen::Ablation;
    app.ablation.heatmap = true;
    let mut terminal = Terminal::new(TestBackend::new(140, 30)).unwrap();
    terminal.draw(|f| ui::draw(f, &app)).unwrap();
    let buffer = terminal.backend().buffer();
    assert!(buffer.content.iter().all(|c| c.fg == Color::Reset && c.bg == Color::Reset));
    let text: String = buffer.content.iter().map(|c| c.symbol()).collect();
    // The worst cell (0.4) lightest, the best (0.9) darkest, values still readable.
    assert!(text.contains("░ 0.4000 ░") && text.contains("█ 0.9000 █"), "{text}");
    crate::colour::set_no_color_on_this_thread(false);
    let (mut app, _) = heatmap_app();
    app.screen = Screen::Ablation;
    app.ablation.heatmap = true;
    let screen = render(&mut app, 140, 30);
    assert!(!screen.contains('░') && screen.contains("0.9000"), "{screen}");
}

/// Runs that differ in a key on neither axis are refused, with the key named.
#[test]
fn heatmap_view_refuses_to_average_different_configurations() {
    let (mut app, _) = heatmap_app();
    let mut snapshot = app.snapshot.clone();
    snapshot.runs[3].config["layer_config"]["d"] = json!(32);
    app.apply(Update::Runs(snapshot));
    app.screen = Screen::Ablation;
    app.ablation.heatmap = true;
    // The pairs of d, iterations, layers: the fourth is iterations × layers.
    app.ablation.axes = 3;
    let screen = render(&mut app, 140, 30);
    assert!(screen.contains("over iterations × layers") && screen.contains("also differ in `d` (32, 64)"), "{screen}");
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
    assert!(screen.contains("1 library not loaded") && screen.contains("invalid ELF header"), "{screen}");
    assert!(screen.contains("2 plugins loaded"), "{screen}");
}

#[test]
fn the_plugins_table_gives_the_description_the_room_and_keeps_paths_whole() {
    let (mut app, _) = app();
    app.plugins.plugins[0].description = "a description longer than any terminal is wide ".repeat(4);
    app.screen = Screen::Plugins;
    let screen = render(&mut app, 120, 20);
    let first = app.plugins.plugins[0].path.display().to_string();
    let line = screen.lines().find(|l| l.contains(&app.plugins.plugins[0].name)).unwrap();
    assert!(line.contains(&first), "{line}");
    // Name, kind and version take their own widths; the description the rest.
    assert!(line.contains("a description longer than any terminal is wide a description"), "{line}");
}

#[test]
fn a_narrow_plugins_table_keeps_names_whole_and_shortens_paths_first() {
    let (mut app, _) = app();
    app.plugins.plugins[0].name = "energy-transformer".into();
    app.plugins.plugins[0].path = "/a/workspace/with/a/long/path/target/release/libenergy_transformer.so".into();
    app.screen = Screen::Plugins;
    // Room for the whole path, and a description beside it.
    let wide = render(&mut app, 140, 20);
    let line = wide.lines().find(|l| l.contains("energy-transformer")).unwrap();
    assert!(line.contains("/a/workspace/with/a/long/path/") && line.contains("the hyperset plugin"), "{line}");
    // Not room for both: the path by its file name, the description still beside it.
    let narrow = render(&mut app, 80, 20);
    let line = narrow.lines().find(|l| l.contains("energy-transformer")).unwrap();
    assert!(line.contains(" libenergy_transformer.so") && !line.contains("/release/"), "{line}");
    assert!(line.contains("the hyperset"), "{line}");
    // A description longer than its column ends in `…`.
    let cut = render(&mut app, 72, 20);
    let line = cut.lines().find(|l| l.contains("energy-transformer")).unwrap();
    assert!(line.contains("the hyper") && line.contains("… libenergy_transformer.so"), "{line}");
    // Narrower: name, kind, version and the file name; no description column.
    let narrower = render(&mut app, 62, 20);
    let line = narrower.lines().find(|l| l.contains("energy-transformer")).unwrap();
    assert!(line.contains("layer") && line.contains("0.1.0") && line.contains("libenergy_transformer.so"), "{line}");
    assert!(!narrower.contains("description"), "{narrower}");
    // Narrower still: the path goes too, never the name.
    let narrowest = render(&mut app, 40, 20);
    let line = narrowest.lines().find(|l| l.contains("energy-transformer")).unwrap();
    assert!(line.contains("layer") && line.contains("0.1.0") && !line.contains("lib"), "{line}");
}

#[test]
fn the_plugins_table_scrolls_to_the_cursor_and_describes_its_plugin_whole() {
    let (mut app, _) = app();
    for i in 0..20 {
        let mut extra = app.plugins.plugins[0].clone();
        extra.name = format!("layer{i:02}");
        extra.description = format!("layer number {i}, {}", "with a long description ".repeat(6));
        app.plugins.plugins.push(extra);
    }
    app.screen = Screen::Plugins;
    let top = render(&mut app, 80, 24);
    assert!(!top.contains("layer19"), "the table is shorter than the list: {top}");
    assert!(top.contains("hyperset 0.1.0 (layer): the hyperset plugin"), "{top}");
    for _ in 0..30 {
        press(&mut app, KeyCode::Char('j'));
    }
    assert_eq!(app.plugin_cursor, 21, "the cursor stops on the last plugin");
    let bottom = render(&mut app, 80, 24);
    assert!(bottom.contains("│layer19 ") && !bottom.contains("│hyperset "), "scrolled to the cursor: {bottom}");
    // The description the table cuts is whole under it, wrapped.
    assert!(bottom.contains("layer19 0.1.0 (layer): layer number 19, with a long"), "{bottom}");
    assert!(bottom.contains("/plugins/libhyperset.so"), "its path: {bottom}");
    press(&mut app, KeyCode::PageUp);
    assert_eq!(app.plugin_cursor, 11);
    // A reload that leaves fewer plugins draws the last one under the cursor.
    app.plugins.plugins.truncate(2);
    assert!(render(&mut app, 80, 24).contains("sudoku 0.1.0 (task): the sudoku plugin"));
    press(&mut app, KeyCode::Char('k'));
    assert_eq!(app.plugin_cursor, 0);
}

#[test]
fn tabs_keep_every_number_in_a_narrow_terminal() {
    let (mut app, _) = app();
    app.screen = Screen::Compare;
    let wide = render(&mut app, 120, 20);
    let tabs = wide.lines().next().unwrap();
    assert!(tabs.contains("1 Runs") && tabs.contains("6 Plugins"), "{tabs}");
    // Too narrow for every title: the current one whole, the others by their key.
    let narrow = render_laid_out(&mut app, 40, 20);
    let tabs = narrow.lines().next().unwrap();
    assert!(tabs.starts_with(" 1 │ 2 │ 3 │ 4 Compare │ 5 │ 6 "), "{tabs}");
    // A click on a number still goes to its screen.
    app.handle(Event::Mouse(MouseEvent {
        kind: MouseEventKind::Down(MouseButton::Left),
        column: 1,
        row: 0,
        modifiers: KeyModifiers::NONE,
    }));
    assert_eq!(app.screen, Screen::Runs);
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
    // Compare's differences table too, scrolled past its end.
    app.screen = Screen::Compare;
    (app.compare.differences, app.compare.scroll) = (true, 50);
    for (w, h) in [(40, 12), (20, 5), (1, 1)] {
        assert_eq!(render(&mut app, w, h).lines().count(), h as usize);
    }
    app.help = true;
    render(&mut app, 30, 8);
}

// ---- The command lists: help generated from them, keys dispatched by them. ----

use super::keys::{self, action_of, Action, Command};
use super::screens::{self, help::Overlay};
use ratatui::crossterm::event::{MouseButton, MouseEvent, MouseEventKind};
use ratatui::layout::Rect;

/// Lays the frame out as the UI loop does, then draws it.
fn render_laid_out(app: &mut App, w: u16, h: u16) -> String {
    app.layout(Rect::new(0, 0, w, h));
    render(app, w, h)
}

/// Every line the `?` overlay shows, scrolling through it with j.
fn overlay_text(app: &mut App, w: u16, h: u16) -> String {
    app.layout(Rect::new(0, 0, w, h));
    press(app, KeyCode::Char('?'));
    let mut seen = render(app, w, h);
    let max = Overlay::of(app, Rect::new(0, 0, w, h)).max_scroll();
    for _ in 0..max {
        press(app, KeyCode::Char('j'));
        seen.push('\n');
        seen.push_str(&render(app, w, h));
    }
    assert!(app.help, "j scrolls, it does not close");
    assert_eq!(app.help_scroll, max);
    press(app, KeyCode::Esc);
    assert!(!app.help, "Esc closes the overlay");
    seen
}

/// The commands the overlay must list on `screen`.
fn listed(screen: Screen) -> Vec<Command> {
    let mut all = screens::component(screen).commands().to_vec();
    all.extend_from_slice(keys::GLOBAL);
    all.extend_from_slice(screens::help::COMMANDS);
    all
}

#[test]
fn help_overlay_lists_every_command_and_scrolls_at_any_size() {
    for (w, h) in [(200, 50), (60, 16)] {
        for screen in Screen::ALL {
            let (mut app, _) = app();
            app.screen = screen;
            let text = overlay_text(&mut app, w, h);
            for c in listed(screen) {
                // The keys, and the description's first words (it may wrap after them).
                let first = screens::help::wrap(c.help, 20).remove(0);
                assert!(text.contains(c.label), "{w}x{h} {screen:?}: `{}` missing:\n{text}", c.label);
                assert!(text.contains(&first), "{w}x{h} {screen:?}: `{first}` missing:\n{text}");
            }
            assert!(text.contains(&screens::help::wrap(keys::MOUSE.1, 20)[0]), "{text}");
        }
    }
    // At 200x50 the whole Runs list fits without scrolling, and sweep:N is documented.
    let (mut app, _) = app();
    app.layout(Rect::new(0, 0, 200, 50));
    assert_eq!(Overlay::of(&app, Rect::new(0, 0, 200, 50)).max_scroll(), 0);
    press(&mut app, KeyCode::Char('?'));
    let text = render(&mut app, 200, 50);
    for needle in ["q, Ctrl-C", "mouse", "sweep:N", "move to the next run", "Esc, ?, q"] {
        assert!(text.contains(needle), "{needle} missing:\n{text}");
    }
}

#[test]
fn help_wraps_between_words() {
    assert_eq!(screens::help::wrap("delete the marked runs", 11), vec!["delete the", "marked runs"]);
}

/// What a key can change, as text (compared before and after a key).
fn state(app: &App, sent: &Arc<Mutex<Vec<Request>>>) -> String {
    format!(
        "{:?} {} {} {:?} {:?} {:?} {} {:?} {:?} {:?} {} {:?} {:?} {} {}",
        app.screen,
        app.help,
        app.help_scroll,
        app.modal,
        app.runs,
        (app.launch.cursor, app.launch.layer, app.launch.editing),
        app.launch.fields.iter().map(|f| f.text.as_str()).collect::<Vec<_>>().join(","),
        (app.live.run, app.live.sphere, app.live.yaw),
        (app.compare.options, app.compare.differences, app.compare.scroll),
        app.ablation,
        app.quit,
        app.status.as_ref().map(|s| &s.0),
        app.launch.error,
        sent.lock().unwrap().iter().filter(|r| !matches!(r, Request::Watch(_))).count(),
        app.plugin_cursor,
    )
}

#[test]
fn every_declared_key_runs_its_action_and_changes_something() {
    let mut overlay = vec![(None, screens::help::COMMANDS)];
    overlay.extend(Screen::ALL.iter().map(|s| (Some(*s), screens::component(*s).commands())));
    overlay.push((None, keys::GLOBAL));
    for screen in Screen::ALL {
        for (owner, commands) in &overlay {
            if owner.is_some_and(|o| o != screen) {
                continue;
            }
            let in_help = std::ptr::eq(*commands, screens::help::COMMANDS);
            for c in *commands {
                for (i, key) in c.keys.iter().enumerate() {
                    let (mut app, sent) = app();
                    app.layout(Rect::new(0, 0, 60, 16));
                    // A state in which every action has something to do.
                    app.screen = screen;
                    app.runs.filter = "sudoku".into();
                    app.runs.cursor = 1;
                    app.runs.selected.insert(1);
                    app.launch.cursor = 3; // layer.attention, a choice
                    app.live.run = Some(3);
                    app.ablation.sort = Some((0, false));
                    // The differences of runs 1, 2 and 3 (more lines than 16 rows show),
                    // scrolled one line down.
                    app.runs.selected.extend([2, 3]);
                    app.compare.differences = screen == Screen::Compare;
                    app.compare.scroll = 1;
                    // A plugin on either side of the Plugins screen's cursor.
                    let third = app.plugins.plugins[0].clone();
                    app.plugins.plugins.push(third);
                    app.plugin_cursor = 1;
                    app.help = in_help;
                    app.help_scroll = 1;
                    let before = state(&app, &sent);
                    app.performed.clear();
                    app.handle(Event::Key(key.event()));
                    let want = action_of(c, i);
                    assert_eq!(app.performed.first(), Some(&want), "{screen:?}: {} ({key:?})", c.label);
                    let to_here = match want {
                        Action::GoTo(n) => Screen::ALL[n] == screen,
                        Action::OpenCompare => screen == Screen::Compare,
                        Action::OpenAblation => screen == Screen::Ablation,
                        _ => false,
                    };
                    if !to_here {
                        assert_ne!(before, state(&app, &sent), "{screen:?}: {} ({key:?}) changed nothing", c.label);
                    }
                }
            }
        }
    }
}

#[test]
fn no_key_is_declared_twice_where_it_is_dispatched() {
    for screen in Screen::ALL {
        let mut seen: Vec<keys::Key> = Vec::new();
        for c in screens::component(screen).commands().iter().chain(keys::GLOBAL) {
            for k in c.keys {
                assert!(!seen.contains(k), "{screen:?}: {k:?} declared twice");
                seen.push(*k);
            }
        }
    }
}

#[test]
fn compare_and_ablation_keys_work_and_are_listed_on_every_screen() {
    for screen in Screen::ALL {
        let (mut app, _) = app();
        app.screen = screen;
        press(&mut app, KeyCode::Char('c'));
        assert_eq!(app.screen, Screen::Compare);
        app.screen = screen;
        press(&mut app, KeyCode::Char('A'));
        assert_eq!(app.screen, Screen::Ablation);
        app.screen = screen;
        let text = overlay_text(&mut app, 120, 40);
        assert!(text.contains("compare the marked runs") && text.contains("ablation table"), "{text}");
    }
}

#[test]
fn marks_hidden_by_the_filter_feed_neither_compare_nor_ablation() {
    let (mut app, sent) = app();
    press(&mut app, KeyCode::Char('a'));
    assert_eq!(app.runs.selected.len(), 3);
    press(&mut app, KeyCode::Char('/'));
    chars(&mut app, "layer:hyperset");
    press(&mut app, KeyCode::Enter);
    assert_eq!(app.compared_runs(), vec![1, 3]);
    assert_eq!(app.ablation_runs(), vec![1, 3]);
    let screen = render_laid_out(&mut app, 140, 20);
    assert!(screen.contains("3 marked (1 hidden by the filter)"), "{screen}");
    assert!(screen.contains("1 marked runs hidden by the filter (not compared)"), "{screen}");
    // Marking all under a filter touches only the visible runs.
    press(&mut app, KeyCode::Char('a'));
    assert_eq!(app.runs.selected.iter().copied().collect::<Vec<_>>(), vec![2]);
    // The hidden mark feeds nothing: Compare falls back to the cursor's run.
    assert_eq!(app.compared_runs(), vec![1]);
    press(&mut app, KeyCode::Char('D'));
    assert!(app.modal.is_none(), "no visible marked runs to delete");
    press(&mut app, KeyCode::Esc);
    assert_eq!(app.compared_runs(), vec![2]);
    assert!(!sent.lock().unwrap().iter().any(|r| matches!(r, Request::Delete(_))));
}

#[test]
fn d_deletes_the_run_under_the_cursor_and_capital_d_the_marked_runs() {
    let (mut app, sent) = app();
    press(&mut app, KeyCode::Char('j'));
    press(&mut app, KeyCode::Char(' ')); // marks run 2, moves to run 3
    press(&mut app, KeyCode::Char(' ')); // marks run 3
    press(&mut app, KeyCode::Char('g')); // cursor on run 1, not marked
    press(&mut app, KeyCode::Char('d'));
    let screen = render_laid_out(&mut app, 120, 30);
    assert!(screen.contains("Delete run 1 (the run under the cursor)"), "{screen}");
    press(&mut app, KeyCode::Char('y'));
    assert!(sent.lock().unwrap().iter().any(|r| matches!(r, Request::Delete(ids) if ids == &vec![1])));
    press(&mut app, KeyCode::Char('D'));
    let screen = render_laid_out(&mut app, 120, 30);
    assert!(screen.contains("Delete the 2 marked runs 2, 3"), "{screen}");
    press(&mut app, KeyCode::Char('y'));
    assert!(sent.lock().unwrap().iter().any(|r| matches!(r, Request::Delete(ids) if ids == &vec![2, 3])));
    assert!(app.runs.selected.is_empty());
}

#[test]
fn one_esc_leaves_the_filter_box_and_clears_the_filter() {
    let (mut app, _) = app();
    press(&mut app, KeyCode::Char('/'));
    chars(&mut app, "layer:hyperset");
    press(&mut app, KeyCode::Esc);
    assert!(!app.runs.filtering && app.runs.filter.is_empty());
    assert_eq!(app.visible_runs().len(), 3);
    // Enter keeps it.
    press(&mut app, KeyCode::Char('/'));
    chars(&mut app, "layer:hyperset");
    press(&mut app, KeyCode::Enter);
    assert!(!app.runs.filtering && app.runs.filter == "layer:hyperset");
    assert_eq!(app.visible_runs().len(), 2);
}

#[test]
fn space_marks_and_moves_down_as_the_help_says() {
    let (mut app, _) = app();
    press(&mut app, KeyCode::Char(' '));
    assert!(app.runs.selected.contains(&1) && app.runs.cursor == 1);
    let text = overlay_text(&mut app, 200, 50);
    assert!(text.contains("mark or unmark the run for Compare and Ablation, then move to the next run"), "{text}");
}

#[test]
fn changing_the_layer_resets_fields_to_its_defaults_keeping_valid_edits() {
    let (mut app, _) = app();
    let layer = |name: &str, d: i64, heads: i64, max_heads: i64| PluginInfo {
        name: name.into(),
        kind: PluginKind::Layer,
        version: "0.1.0".into(),
        description: String::new(),
        path: PathBuf::new(),
        params: vec![ParamSpec::int("d", d, 2, 8192, "width"), ParamSpec::int("heads", heads, 1, max_heads, "heads")],
    };
    let mut list = plugins();
    list.plugins[0] = layer("hyperset", 128, 4, 16);
    list.plugins.push(layer("tiny", 32, 2, 2));
    app.plugins = list;
    app.launch = LaunchForm::new(&app.plugins);
    press(&mut app, KeyCode::Char('2'));
    let field = |app: &App, name: &str| app.launch.fields.iter().find(|f| f.spec.name == name).unwrap().text.clone();
    assert_eq!((field(&app, "d"), field(&app, "heads")), ("128".into(), "4".into()));
    // Set heads=8 (row 3); d stays at hyperset's default.
    for _ in 0..3 {
        press(&mut app, KeyCode::Down);
    }
    press(&mut app, KeyCode::Enter);
    press(&mut app, KeyCode::Backspace);
    chars(&mut app, "8");
    press(&mut app, KeyCode::Enter);
    // Another layer: d takes tiny's default; heads=8 is invalid there (1..=2) and is reset.
    press(&mut app, KeyCode::Char('g'));
    app.launch.cursor = 0;
    press(&mut app, KeyCode::Right);
    assert_eq!(app.launch.layer_name(), Some("tiny"));
    assert_eq!((field(&app, "d"), field(&app, "heads")), ("32".into(), "2".into()));
    assert!(render(&mut app, 150, 30).contains("reset to the defaults (unknown or invalid here): layer.heads=8"));
    // A valid edit survives the switch back, and the form says so.
    app.launch.cursor = 2;
    press(&mut app, KeyCode::Enter);
    press(&mut app, KeyCode::Backspace);
    press(&mut app, KeyCode::Backspace);
    chars(&mut app, "48");
    press(&mut app, KeyCode::Enter);
    app.launch.cursor = 0;
    press(&mut app, KeyCode::Left);
    assert_eq!(app.launch.layer_name(), Some("hyperset"));
    assert_eq!((field(&app, "d"), field(&app, "heads")), ("48".into(), "4".into()));
    assert!(render(&mut app, 150, 30).contains("kept your layer.d=48"));
}

#[test]
fn mouse_clicks_hit_what_was_drawn() {
    let (mut app, _) = app();
    let click = |app: &mut App, x: u16, y: u16| {
        app.handle(Event::Mouse(MouseEvent {
            kind: MouseEventKind::Down(MouseButton::Left),
            column: x,
            row: y,
            modifiers: KeyModifiers::NONE,
        }))
    };
    let screen = render_laid_out(&mut app, 140, 20);
    let header = screen.lines().nth(1).unwrap();
    let x = header.find("status").unwrap() as u16;
    click(&mut app, x, 1);
    assert_eq!(app.runs.sort.as_deref(), Some("status"));
    click(&mut app, 5, 4);
    assert_eq!(app.runs.cursor, 2);
    let tabs = screen.lines().next().unwrap();
    let x = tabs.find("4 Compare").unwrap() as u16;
    click(&mut app, x, 0);
    assert_eq!(app.screen, Screen::Compare);
}

#[test]
fn the_runs_table_scrolls_with_the_cursor_and_clicks_follow() {
    let (mut app, _) = app();
    let mut snapshot = app.snapshot.clone();
    snapshot.runs = (1..=30).map(|i| record(i, "hyperset", RunStatus::Finished, 64, i as u64)).collect();
    app.apply(Update::Runs(snapshot));
    render_laid_out(&mut app, 120, 12);
    for _ in 0..20 {
        press(&mut app, KeyCode::Char('j'));
    }
    let screen = render_laid_out(&mut app, 120, 12);
    let offset = app.areas.runs.as_ref().unwrap().offset;
    assert!(offset > 0 && screen.contains("\n  21 "), "{offset}\n{screen}");
    // A click on the first row shown selects the run drawn there.
    app.handle(Event::Mouse(MouseEvent {
        kind: MouseEventKind::Down(MouseButton::Left),
        column: 5,
        row: 2,
        modifiers: KeyModifiers::NONE,
    }));
    assert_eq!(app.runs.cursor, offset);
}

#[test]
fn compare_legend_is_capped_and_the_panels_keep_their_room() {
    let (mut app, _) = app();
    let mut snapshot = app.snapshot.clone();
    snapshot.runs = (1..=20).map(|i| record(i, "hyperset", RunStatus::Finished, 32 + i, i as u64)).collect();
    app.apply(Update::Runs(snapshot));
    for i in 1..=20 {
        app.apply(Update::Run(i, run_data(i as f64 / 20.0)));
    }
    app.runs.selected.extend(1..=20);
    press(&mut app, KeyCode::Char('4'));
    let screen = render_laid_out(&mut app, 80, 24);
    assert!(screen.contains("more"), "{screen}");
    // The body is 22 rows; the legend takes at most a third, every panel keeps a border.
    let legend_rows = screen.lines().skip(1).take_while(|l| !l.contains('┌')).count();
    assert!(legend_rows <= 22 / 3, "{legend_rows} legend rows:\n{screen}");
    for title in ["loss (train", "energy vs iteration", "effective rank", "mean angle"] {
        assert!(screen.contains(title), "{title} missing:\n{screen}");
    }
}

#[test]
fn log_scale_says_why_a_panel_is_empty_and_labels_show_real_values() {
    let (mut app, _) = app();
    let mut zeros = run_data(1.0);
    for m in &mut zeros.metrics {
        if m.name == "cell_acc" {
            m.value = 0.0;
        }
    }
    app.apply(Update::Run(1, zeros));
    app.runs.selected.insert(1);
    press(&mut app, KeyCode::Char('4'));
    press(&mut app, KeyCode::Char('l'));
    let screen = render_laid_out(&mut app, 150, 45);
    assert!(screen.contains("cannot be drawn on a log scale"), "{screen}");
    assert!(!screen.contains("no evaluation yet"), "{screen}");
    // The loss axis is labelled with losses (about 1.2 to 2.2), not their log10.
    assert!(screen.contains("2.2") && !screen.contains("0.34"), "{screen}");
    assert_eq!(super::compare::log_label(-3.0), "1e-3");
    assert_eq!(super::compare::log_label(-2.0), "0.01");
    assert_eq!(super::compare::log_label(0.0), "1");
    assert_eq!(super::compare::log_label(2.0f64.log10()), "2");
}

/// `o` loads an experiment file into the Launch form (plugins, values, seeds as a list), a
/// bad one is refused with its key and leaves the form as it was, and `w` saves the form as
/// a file that reads back to the same values.
#[test]
fn launch_form_loads_and_saves_experiment_files() {
    let (mut app, _) = app();
    let tmp = tempfile::Builder::new().prefix("workbench-launch-file-").tempdir().unwrap();
    let dir = tmp.path();
    let good = dir.join("good.toml");
    std::fs::write(
        &good,
        "[layer]\nplugin = \"hyperset\"\nd = 64\nattention = \"sigmoid\"\n[task]\nplugin = \"sudoku\"\n\
         difficulty = \"easy\"\n[train]\nsteps = 40\n[sweep]\nseeds = [0, 1]\n",
    )
    .unwrap();
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "[layer]\nd = 1\nwidth = 3\n").unwrap();
    let field = |app: &App, scope: &str, name: &str| {
        let f = app.launch.fields.iter().find(|f| f.scope.prefix() == scope && f.spec.name == name).unwrap();
        f.text.clone()
    };
    press(&mut app, KeyCode::Char('2'));
    assert!(render(&mut app, 150, 30).contains("o open file"), "the hint bar names the key");
    press(&mut app, KeyCode::Char('o'));
    assert!(render(&mut app, 120, 30).contains("Load an experiment file"));
    chars(&mut app, bad.to_str().unwrap());
    press(&mut app, KeyCode::Enter);
    let screen = render(&mut app, 200, 30);
    assert!(screen.contains("cannot load") && screen.contains("unknown key `layer.width`"), "{screen}");
    assert_eq!(field(&app, "layer", "d"), "128", "a refused file changes nothing");

    press(&mut app, KeyCode::Char('o'));
    chars(&mut app, good.to_str().unwrap());
    press(&mut app, KeyCode::Enter);
    assert!(render(&mut app, 200, 30).contains("loaded"), "{}", render(&mut app, 200, 30));
    assert_eq!(field(&app, "layer", "d"), "64");
    assert_eq!(field(&app, "layer", "attention"), "sigmoid");
    assert_eq!(field(&app, "task", "difficulty"), "easy");
    assert_eq!(field(&app, "train", "steps"), "40");
    assert_eq!(field(&app, "train", "seed"), "0,1");

    // Save under another name: the prompt starts from the loaded path.
    let saved = dir.join("saved.toml");
    press(&mut app, KeyCode::Char('w'));
    for _ in 0..good.to_str().unwrap().len() {
        press(&mut app, KeyCode::Backspace);
    }
    chars(&mut app, saved.to_str().unwrap());
    press(&mut app, KeyCode::Enter);
    assert!(render(&mut app, 200, 30).contains("saved the form"), "{}", render(&mut app, 200, 30));
    // Saving over an existing file asks first; `n` keeps it as it was.
    std::fs::write(&bad, "# kept\n").unwrap();
    press(&mut app, KeyCode::Char('w'));
    for _ in 0..saved.to_str().unwrap().len() {
        press(&mut app, KeyCode::Backspace);
    }
    chars(&mut app, bad.to_str().unwrap());
    press(&mut app, KeyCode::Enter);
    assert!(matches!(&app.modal, Some(Modal::Confirm { question, .. }) if question.contains("Replace it")));
    assert!(render(&mut app, 200, 30).contains("Confirm"));
    press(&mut app, KeyCode::Char('n'));
    assert_eq!(std::fs::read_to_string(&bad).unwrap(), "# kept\n");
    press(&mut app, KeyCode::Char('w'));
    for _ in 0..saved.to_str().unwrap().len() {
        press(&mut app, KeyCode::Backspace);
    }
    chars(&mut app, bad.to_str().unwrap());
    press(&mut app, KeyCode::Enter);
    press(&mut app, KeyCode::Char('y'));
    assert!(std::fs::read_to_string(&bad).unwrap().starts_with("# Saved from the Launch form"));
    let back = crate::experiment_file::Experiment::load(std::slice::from_ref(&saved)).unwrap();
    assert_eq!(back.layer.as_deref(), Some("hyperset"));
    assert_eq!(back.task.as_deref(), Some("sudoku"));
    for expected in ["layer.d=64", "layer.attention=sigmoid", "task.difficulty=easy", "train.steps=40"] {
        assert!(back.overrides.contains(&expected.to_string()), "{expected} not in {:?}", back.overrides);
    }
    assert_eq!(back.axes.len(), 1);
    assert_eq!((back.axes[0].key.as_str(), back.axes[0].values.clone()), ("train.seed", vec!["0".into(), "1".into()]));
}

// ---- The runs table's columns: core ones readable at any width, a chooser, kept settings. ----

/// Runs with long configuration values, a progress of 925/3000 and two seeds of one setting.
fn crowded_app() -> App {
    let (mut app, _) = app();
    let mut snapshot = app.snapshot.clone();
    snapshot.runs = (1..=3)
        .map(|i| {
            let mut r = record(i, "hyperset", RunStatus::Running, 64, i as u64);
            r.config = json!({
                "layer_config": {"d": 64, "interaction": if i == 3 { "row_col_box_pairwise" } else { "row_col" }},
                "task_config": {"board": if i == 3 { "board_alternative_large" } else { "board_a" }},
                "train": {"seed": i},
            });
            r.last_step = 925;
            r.total_steps = Some(3000);
            r.sweep = Some(crate::store::SweepRef { id: 2, index: i as u32 - 1 });
            r
        })
        .collect();
    snapshot.summaries.insert(3, snapshot.summaries[&1].clone());
    snapshot.sweeps.insert(2, "seeds".into());
    app.apply(Update::Runs(snapshot));
    app
}

#[test]
fn core_columns_stay_whole_at_narrow_widths() {
    for width in [60, 100] {
        let mut app = crowded_app();
        let screen = render_laid_out(&mut app, width, 12);
        let header = screen.lines().nth(1).unwrap();
        for title in ["id", "status", "steps", "best"] {
            assert!(header.contains(title), "{width}: `{title}` missing:\n{screen}");
        }
        for run in 1..=3 {
            let row = screen.lines().nth(1 + run).unwrap();
            assert!(row.contains(&format!(" {run} ")), "{width}: id cut:\n{screen}");
            assert!(row.contains("running") && row.contains("925/3000"), "{width}: status or steps cut:\n{screen}");
        }
        assert!(screen.contains("cell_acc 0.5000"), "{width}: best cut:\n{screen}");
        let fitted = &app.areas.runs.as_ref().unwrap().fitted;
        assert!(fitted.hidden > 0, "{width}: {fitted:?}");
        assert!(header.contains(&format!("+{} hidden", fitted.hidden)), "{width}:\n{screen}");
    }
    // Wide enough for everything: sweep and seed-group columns, nothing hidden.
    let mut app = crowded_app();
    let screen = render_laid_out(&mut app, 220, 12);
    let header = screen.lines().nth(1).unwrap();
    assert!(header.contains("sweep") && header.contains("group") && !header.contains("hidden"), "{screen}");
    assert!(screen.lines().nth(2).unwrap().contains("2 seeds"), "the sweep's id and name:\n{screen}");
    // Runs 1 and 2 differ only by their seed: one group; run 3 is alone.
    assert!(
        screen.lines().nth(2).unwrap().contains("g1×2") && screen.lines().nth(4).unwrap().contains("g3"),
        "{screen}"
    );
}

#[test]
fn the_column_chooser_hides_columns_and_the_choice_survives_a_restart() {
    let dir = tempfile::Builder::new().prefix("workbench-tui-columns-").tempdir().unwrap();
    let path = dir.path().join("tui.toml");
    let mut app = crowded_app();
    app.use_prefs(path.clone());
    press(&mut app, KeyCode::Char('C'));
    let screen = render_laid_out(&mut app, 100, 30);
    assert!(screen.contains("Columns of the runs table") && screen.contains("[x] layer"), "{screen}");
    // The core cannot be hidden.
    press(&mut app, KeyCode::Char(' '));
    assert!(app.runs.hidden.is_empty());
    assert!(app.status.as_ref().unwrap().0.contains("always shown"));
    // Down to `layer` (after id, status, steps, best) and hide it.
    chars(&mut app, "jjjj ");
    assert!(render_laid_out(&mut app, 100, 30).contains("[ ] layer"));
    press(&mut app, KeyCode::Esc);
    assert!(app.modal.is_none());
    let header = render_laid_out(&mut app, 220, 12).lines().nth(1).unwrap().to_string();
    assert!(!header.contains("layer") && header.contains("task"), "{header}");
    assert!(std::fs::read_to_string(&path).unwrap().contains("layer"));
    // A new TUI reads the choice back.
    let mut again = crowded_app();
    again.use_prefs(path.clone());
    assert!(again.runs.hidden.contains("layer"));
    // A broken file is reported, naming the file and the fix, and the defaults are used.
    std::fs::write(&path, "runs = 3").unwrap();
    let mut broken = crowded_app();
    broken.use_prefs(path.clone());
    let (text, error, _) = broken.status.clone().unwrap();
    assert!(error && text.contains("tui.toml") && text.contains("delete it"), "{text}");
    assert!(broken.runs.hidden.is_empty());
}

#[test]
fn exports_go_to_the_exports_folder_with_names_that_say_what_they_are() {
    let (mut app, sent) = app();
    app.exports = PathBuf::from("/data/exports");
    app.runs.selected.extend([1, 2]);
    app.screen = Screen::Compare;
    assert!(render(&mut app, 200, 30).contains("p export"), "the hint bar names the key");
    press(&mut app, KeyCode::Char('p'));
    let found = sent.lock().unwrap().iter().any(
        |r| matches!(r, Request::ExportPlot { out, .. } if out == &PathBuf::from("/data/exports/compare-runs-1-2.png")),
    );
    assert!(found, "{:?}", sent.lock().unwrap());
}

/// With NO_COLOR no cell of any screen keeps a colour, and the cursor stays visible.
#[test]
fn no_color_draws_every_screen_without_colours_and_keeps_the_cursor() {
    use ratatui::style::{Color, Modifier};
    crate::colour::set_no_color_on_this_thread(true);
    let (mut app, _) = app();
    for screen in Screen::ALL {
        app.screen = screen;
        let mut terminal = Terminal::new(TestBackend::new(120, 40)).unwrap();
        terminal.draw(|f| ui::draw(f, &app)).unwrap();
        let buffer = terminal.backend().buffer();
        let coloured = buffer.content.iter().filter(|c| c.fg != Color::Reset || c.bg != Color::Reset).count();
        assert_eq!(coloured, 0, "{screen:?}: {coloured} cells keep a colour");
        let reversed = buffer.content.iter().filter(|c| c.modifier.contains(Modifier::REVERSED)).count();
        assert!(reversed > 0, "{screen:?}: nothing is highlighted");
    }
    // Without it, the same screens are coloured (the test above can fail).
    crate::colour::set_no_color_on_this_thread(false);
    app.screen = Screen::Runs;
    let mut terminal = Terminal::new(TestBackend::new(120, 40)).unwrap();
    terminal.draw(|f| ui::draw(f, &app)).unwrap();
    assert!(terminal.backend().buffer().content.iter().any(|c| c.fg != Color::Reset));
}

/// Run data with token trajectories at step 40: three tokens turning on the unit sphere of
/// R^3 over three iterations.
fn run_data_with_sphere() -> RunData {
    use nalgebra::DMatrix;
    let mut data = run_data(1.0);
    let points: Vec<DMatrix<f64>> = (0..=3)
        .map(|t| {
            let a = t as f64 * 0.4;
            DMatrix::from_row_slice(3, 3, &[a.cos(), a.sin(), 0.0, 0.0, a.cos(), a.sin(), a.sin(), 0.0, a.cos()])
        })
        .collect();
    let rows = crate::sphere::rows_of(&points, 0).unwrap();
    data.diagnostics.extend(rows.into_iter().map(|(iteration, name, value)| DiagnosticRow {
        step: 40,
        iteration,
        name,
        value,
    }));
    data
}

/// Cells of the right 40 % of `screen` (the sphere panel) that hold braille dots.
fn braille_on_the_right(screen: &str, width: usize) -> usize {
    screen
        .lines()
        .flat_map(|l| l.chars().skip(width * 6 / 10))
        .filter(|c| ('\u{2801}'..='\u{28FF}').contains(c))
        .count()
}

#[test]
fn compare_screen_draws_token_trajectories_turns_them_and_says_when_there_are_none() {
    let (mut app, _) = app();
    app.apply(Update::Run(1, run_data_with_sphere()));
    app.runs.selected.extend([1, 2]);
    press(&mut app, KeyCode::Char('4'));
    let screen = render(&mut app, 200, 45);
    assert!(!screen.contains("tokens on the sphere") && screen.contains("[s] sphere off"), "{screen}");
    press(&mut app, KeyCode::Char('s'));
    let screen = render(&mut app, 200, 45);
    assert!(screen.contains("tokens on the sphere · run 1 · step 40 · head 0 · p = 3 heads"), "{screen}");
    assert!(screen.contains("(0°)") && screen.contains("[s] sphere on"), "{screen}");
    // The six panels stay beside it.
    assert!(screen.contains("effective rank") && screen.contains("loss (train"), "{screen}");
    assert!(braille_on_the_right(&screen, 200) > 20, "{screen}");
    // Each token's number marks its last point, the input its start.
    assert!(screen.contains('○'), "{screen}");
    for i in ["0", "1", "2"] {
        assert!(screen.lines().any(|l| l.chars().skip(120).collect::<String>().contains(i)), "token {i}:\n{screen}");
    }
    press(&mut app, KeyCode::Char(']'));
    let turned = render(&mut app, 200, 45);
    assert!(turned.contains("(15°)"), "{turned}");
    assert_ne!(screen.replace("(0°)", ""), turned.replace("(15°)", ""), "the view did not turn");
    press(&mut app, KeyCode::Char('['));
    press(&mut app, KeyCode::Char('['));
    assert!(render(&mut app, 200, 45).contains("(345°)"));

    // Without colours the tokens are still told apart by their numbers.
    crate::colour::set_no_color_on_this_thread(true);
    let mut terminal = Terminal::new(TestBackend::new(200, 45)).unwrap();
    terminal.draw(|f| ui::draw(f, &app)).unwrap();
    crate::colour::set_no_color_on_this_thread(false);
    let buffer = terminal.backend().buffer();
    assert!(buffer.content.iter().all(|c| c.fg == ratatui::style::Color::Reset));
    assert!(buffer.content.iter().any(|c| c.symbol() == "○"));

    // Run 2 recorded none: the panel says why and what to do.
    app.runs.selected.remove(&1);
    let screen = render(&mut app, 200, 45);
    // The panel's text, its lines joined (the words wrap).
    let text: Vec<String> = screen
        .lines()
        .map(|l| l.chars().skip(121).collect::<String>().trim_end_matches(['│', ' ']).trim().to_string())
        .collect();
    let text = text.join(" ");
    assert!(text.contains("no token trajectories") && text.contains("Train it again"), "{text}");
}

#[test]
fn live_screen_shows_the_runs_trajectories_in_place_of_its_metric_curves_and_follows_new_evaluations() {
    let (mut app, _) = app();
    app.apply(Update::Run(1, run_data_with_sphere()));
    app.live.run = Some(1);
    press(&mut app, KeyCode::Char('3'));
    let curves = render(&mut app, 200, 45);
    assert!(!curves.contains("tokens on the sphere") && curves.contains("s sphere"), "{curves}");
    assert!(curves.contains("cell_acc (eval)"), "{curves}");
    press(&mut app, KeyCode::Char('s'));
    let screen = render(&mut app, 200, 45);
    assert!(screen.contains("tokens on the sphere · run 1 · step 40 · head 0 · p = 3 heads"), "{screen}");
    // The loss curves stay beside it; the metric's give way.
    assert!(screen.contains("loss (train") && !screen.contains("cell_acc (eval)"), "{screen}");
    press(&mut app, KeyCode::Char(']'));
    assert!(render(&mut app, 200, 45).contains("(15°)"));

    // A later evaluation's trajectories replace the panel's as they arrive.
    let mut data = run_data_with_sphere();
    let later: Vec<DiagnosticRow> = data
        .diagnostics
        .iter()
        .filter(|d| d.name.starts_with("sphere/"))
        .map(|d| DiagnosticRow { step: 80, ..d.clone() })
        .collect();
    data.diagnostics.extend(later);
    app.apply(Update::Run(1, data));
    let screen = render(&mut app, 200, 45);
    assert!(screen.contains("run 1 · step 80"), "{screen}");

    // Off again: the metric curves are back.
    press(&mut app, KeyCode::Char('s'));
    let screen = render(&mut app, 200, 45);
    assert!(!screen.contains("tokens on the sphere") && screen.contains("cell_acc (eval)"), "{screen}");
}

#[test]
fn plus_and_minus_set_how_many_workers_the_queue_runs() {
    let (mut app, sent) = app();
    assert_eq!(app.workers, 1);
    press(&mut app, KeyCode::Char('+'));
    press(&mut app, KeyCode::Char('+'));
    assert_eq!(app.workers, 3);
    let asked: Vec<usize> = sent
        .lock()
        .unwrap()
        .iter()
        .filter_map(|r| match r {
            Request::Workers(n) => Some(*n),
            _ => None,
        })
        .collect();
    assert_eq!(asked, [2, 3]);
    assert!(app.status.as_ref().unwrap().0.contains("up to 3 workers"), "{:?}", app.status);
    app.screen = Screen::Launch;
    assert!(render(&mut app, 140, 20).contains("up to 3 at once"));
    // Never below one: the queue would start nothing.
    app.screen = Screen::Runs;
    for _ in 0..3 {
        press(&mut app, KeyCode::Char('-'));
    }
    assert_eq!(app.workers, 1);
    let (text, error, _) = app.status.clone().unwrap();
    assert!(error && text.contains("from 1 to"), "{text}");
    assert_eq!(sent.lock().unwrap().iter().filter(|r| matches!(r, Request::Workers(_))).count(), 4);
}
