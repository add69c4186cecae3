//! The Launch screen: choose a layer and a task, fill the form generated from their schemas
//! and the trainer's (model in [`crate::tui::launch`]), and queue the runs; load the form from
//! an experiment file or save it as one ([`crate::tui::launch_file`]).

use crate::experiment_file::Experiment;
use crate::ops::{self, grid};
use crate::run_config::RunConfig;
use crate::tui::app::{App, Modal, Screen};
use crate::tui::component::Component;
use crate::tui::keys::{cmd, hint, Action, Command, Key};
use crate::tui::launch::{Field, Row as FormRow};
use crate::tui::layout::Areas;
use crate::tui::service::Request;
use crate::tui::ui::{bold, cut_to_width, dim, fit_title};
use ratatui::crossterm::event::{KeyCode, KeyEvent};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, List, ListItem, ListState, Paragraph, Wrap};
use ratatui::Frame;
use std::path::PathBuf;

/// The Launch screen.
pub struct Launch;

const COMMANDS: &[Command] = &[
    hint(&[Key::char('j'), Key::plain(KeyCode::Down)], "j, ↓", "move", "next field", Action::Down(1)),
    cmd(&[Key::char('k'), Key::plain(KeyCode::Up)], "k, ↑", "previous field", Action::Up(1)),
    cmd(&[Key::plain(KeyCode::PageDown)], "PgDn", "ten fields down", Action::Down(10)),
    cmd(&[Key::plain(KeyCode::PageUp)], "PgUp", "ten fields up", Action::Up(10)),
    hint(
        &[Key::char('h'), Key::plain(KeyCode::Left)],
        "h, ←", "choose",
        "previous layer, task or choice (fields reset to the new plugin's defaults; values you set are kept where valid)",
        Action::PreviousChoice,
    ),
    cmd(&[Key::char('l'), Key::plain(KeyCode::Right)], "l, →", "next layer, task or choice", Action::NextChoice),
    hint(
        &[Key::plain(KeyCode::Enter)],
        "Enter", "edit",
        "edit the field (Enter again keeps, Esc restores; 0,1,2 in train.seed: one run per seed; \
         a,b,c in any field: one run per combination, a sweep); on [ Launch ]: launch",
        Action::EditOrLaunch,
    ),
    hint(&[Key::char('L')], "L", "launch", "launch from anywhere in the form", Action::Launch),
    hint(
        &[Key::char('o')],
        "o", "open file",
        "load an experiment file (TOML: [layer], [task], [train], [sweep]) into the form",
        Action::LoadExperiment,
    ),
    cmd(
        &[Key::char('w')],
        "w",
        "save the form as an experiment file (`workbench train --config FILE` runs it)",
        Action::SaveExperiment,
    ),
    cmd(&[Key::plain(KeyCode::Esc)], "Esc", "back to Runs", Action::Back),
];

impl Component for Launch {
    fn commands(&self) -> &'static [Command] {
        COMMANDS
    }

    fn act(&self, app: &mut App, action: Action) {
        match action {
            Action::Down(n) => app.launch.move_cursor(n as isize),
            Action::Up(n) => app.launch.move_cursor(-(n as isize)),
            Action::PreviousChoice => app.launch.cycle(false, &app.plugins),
            Action::NextChoice => app.launch.cycle(true, &app.plugins),
            Action::Launch => launch_form(app),
            Action::LoadExperiment | Action::SaveExperiment => {
                let save = action == Action::SaveExperiment;
                let path =
                    app.launch
                        .file
                        .clone()
                        .unwrap_or_else(|| if save { "experiment.toml".into() } else { String::new() });
                app.modal = Some(Modal::ExperimentFile { save, path });
            }
            Action::EditOrLaunch => match app.launch.current() {
                FormRow::LaunchButton => launch_form(app),
                FormRow::Field(i) if app.launch.fields[i].cycles() => app.launch.cycle(true, &app.plugins),
                FormRow::Field(i) => {
                    app.launch.before_edit = app.launch.fields[i].text.clone();
                    app.launch.editing = true;
                }
                _ => app.launch.cycle(true, &app.plugins),
            },
            _ => {}
        }
    }

    fn draw(&self, frame: &mut Frame, area: Rect, app: &App, _: &Areas) {
        draw(frame, area, app)
    }
}

/// A key while editing a field: typing, Enter (or Tab) keeps, Esc restores.
pub fn edit_key(app: &mut App, key: KeyEvent) {
    let FormRow::Field(i) = app.launch.current() else {
        app.launch.editing = false;
        return;
    };
    let field = &mut app.launch.fields[i];
    match key.code {
        KeyCode::Enter | KeyCode::Tab => {
            field.check();
            field.edited = field.changed();
            app.launch.editing = false;
            if field.error.is_none() {
                validate_form(app);
                app.launch.move_cursor(1);
            }
        }
        KeyCode::Esc => {
            field.text = std::mem::take(&mut app.launch.before_edit);
            field.check();
            app.launch.editing = false;
        }
        KeyCode::Backspace => {
            field.text.pop();
            field.check();
        }
        KeyCode::Char(c) => {
            field.text.push(c);
            field.check();
        }
        _ => {}
    }
}

/// Loads the experiment file at `path` into the form (the prompt's Enter).
pub fn load_file(app: &mut App, path: &str) {
    let loaded = Experiment::load(&[PathBuf::from(path)]).map_err(|e| format!("{e:#}"));
    match loaded.and_then(|exp| app.launch.load_experiment(&exp, &app.plugins)) {
        Ok(()) => {
            app.launch.file = Some(path.to_string());
            validate_form(app);
            app.say(format!("loaded {path} into the form"), false);
        }
        Err(e) => app.say(format!("cannot load: {e}"), true),
    }
}

/// Writes the form to `path` as an experiment file (the prompt's Enter).
pub fn save_file(app: &mut App, path: &str) {
    let written = app
        .launch
        .to_document()
        .and_then(|doc| std::fs::write(path, doc.to_toml()).map_err(|e| format!("cannot write {path}: {e}")));
    match written {
        Ok(()) => {
            app.launch.file = Some(path.to_string());
            app.say(format!("saved the form to {path}"), false);
        }
        Err(e) => app.say(format!("cannot save: {e}"), true),
    }
}

/// Runs the plugins' own validators on the whole form; the reason shows under the form.
fn validate_form(app: &mut App) -> Option<(grid::Spec, Vec<RunConfig>)> {
    let result = resolve_form(app);
    app.launch.error = result.as_ref().err().cloned();
    result.ok()
}

/// The form as a grid and every configuration of it (several when fields hold lists, one per
/// seed), planned as `workbench sweep` plans a grid: every bad point is reported, not only
/// the first.
fn resolve_form(app: &App) -> Result<(grid::Spec, Vec<RunConfig>), String> {
    let (mut axes, seeds) = app.launch.axes()?;
    let (Some(layer), Some(task)) = (app.launch.layer_name(), app.launch.task_name()) else {
        return Err("no layer or task plugin is loaded: see the Plugins screen".into());
    };
    axes.push(grid::Axis { key: "train.seed".into(), values: seeds.iter().map(u64::to_string).collect() });
    let spec = grid::Spec { layers: vec![layer.to_string()], task: task.to_string(), axes };
    let points = grid::plan(&app.host, &spec).map_err(|e| format!("{e:#}"))?;
    Ok((spec, points.into_iter().map(|p| p.config).collect()))
}

fn launch_form(app: &mut App) {
    let Some((spec, configs)) = validate_form(app) else {
        let reason = app.launch.error.clone().unwrap_or_default();
        app.say(format!("cannot launch: {reason}"), true);
        return;
    };
    match ops::launch::new_runs_of(&app.host, &configs) {
        Ok(runs) => {
            app.send(Request::Launch { runs, name: spec.default_name(), spec });
            app.live.run = None;
            app.screen = Screen::Runs;
        }
        Err(e) => app.say(format!("cannot launch: {e:#}"), true),
    }
}

/// The arrows after a value that cycles through its choices.
const CYCLES: &str = "  ◂ ▸";

/// Values up to this many cells keep the meanings beside them in one column; a longer one
/// (a file path) pushes its own row's meaning along.
const VALUE_COLUMN_CAP: usize = 24;

/// The form's columns: the keys', the values' and the whole row's widths.
#[derive(Clone, Copy)]
struct Columns {
    name: usize,
    value: usize,
    row: usize,
}

fn choice_line(key: &str, value: &str, columns: Columns, about: &str) -> Line<'static> {
    let name_width = columns.name;
    let shown = format!("{value}{CYCLES}");
    Line::from(vec![
        Span::styled(format!("{key:<name_width$}"), bold()),
        Span::styled(value.to_string(), bold().fg(Color::Yellow)),
        Span::styled(CYCLES, dim()),
        meaning(&shown, columns, about),
    ])
}

/// What a row's setting means, dim, in a column after the values, ending in `…` where the
/// row is too narrow for it (the line under the form says it whole for the focused row).
fn meaning(shown: &str, columns: Columns, about: &str) -> Span<'static> {
    let shown = shown.chars().count();
    let pad = columns.value.saturating_sub(shown) + 3;
    let room = columns.row.saturating_sub(columns.name + shown + pad);
    Span::styled(format!("{:pad$}{}", "", cut_to_width(about.to_string(), room)), dim())
}

fn draw(frame: &mut Frame, area: Rect, app: &App) {
    let form = &app.launch;
    if form.layers.is_empty() || form.tasks.is_empty() {
        let text = "No layer or task plugin is loaded, so nothing can be launched. The Plugins screen (6) lists what was found and why libraries failed to load.";
        frame.render_widget(
            Paragraph::new(text)
                .wrap(Wrap { trim: true })
                .block(Block::default().borders(Borders::ALL).title("Launch")),
            area,
        );
        return;
    }
    let [list_area, info_area] = Layout::vertical([Constraint::Min(0), Constraint::Length(4)]).areas(area);
    let rows = form.rows();
    // The widest `scope.key`, plus a space.
    let name_width =
        form.fields.iter().map(|f| f.scope.prefix().len() + f.spec.name.len() + 2).max().unwrap_or(10).max(10);
    let shown = |field: &Field| format!("{}{}", field.text, if field.cycles() { CYCLES } else { "" });
    let plugin_names = [form.layer_name(), form.task_name()].map(|n| n.unwrap_or("-").to_string() + CYCLES);
    let value_width = form
        .fields
        .iter()
        .map(shown)
        .chain(plugin_names)
        .map(|v| v.chars().count())
        .filter(|&w| w <= VALUE_COLUMN_CAP)
        .max()
        .unwrap_or(0);
    let columns = Columns { name: name_width, value: value_width, row: usize::from(list_area.width.saturating_sub(2)) };
    let description =
        |name: Option<&str>| app.plugins.get(name.unwrap_or("")).map(|p| p.description.clone()).unwrap_or_default();
    let items: Vec<ListItem> = rows
        .iter()
        .enumerate()
        .map(|(i, row)| {
            let focused = i == form.cursor;
            let line = match row {
                FormRow::LayerChoice => {
                    choice_line("layer", form.layer_name().unwrap_or("-"), columns, &description(form.layer_name()))
                }
                FormRow::TaskChoice => {
                    choice_line("task", form.task_name().unwrap_or("-"), columns, &description(form.task_name()))
                }
                FormRow::Field(f) => {
                    let field = &form.fields[*f];
                    let key = format!("{}.{}", field.scope.prefix(), field.spec.name);
                    let editing = focused && form.editing;
                    let mut spans = vec![
                        Span::styled(
                            format!("{key:<name_width$}"),
                            if field.changed() { bold() } else { Style::default() },
                        ),
                        Span::styled(
                            format!("{}{}", field.text, if editing { "▏" } else { "" }),
                            if editing {
                                Style::default().fg(Color::Black).bg(Color::Cyan)
                            } else {
                                Style::default().fg(Color::Cyan)
                            },
                        ),
                    ];
                    if field.cycles() {
                        spans.push(Span::styled(CYCLES, dim()));
                    }
                    match &field.error {
                        Some(e) => spans.push(Span::styled(format!("  ✗ {e}"), Style::default().fg(Color::Red))),
                        None if !editing => spans.push(meaning(&shown(field), columns, &field.spec.help)),
                        None => {}
                    }
                    Line::from(spans)
                }
                FormRow::LaunchButton => Line::from(Span::styled("[ Launch ]", bold().fg(Color::Green))),
            };
            let style = if focused { Style::default().bg(Color::Rgb(40, 40, 60)) } else { Style::default() };
            ListItem::new(line).style(style)
        })
        .collect();
    let height = list_area.height.saturating_sub(2).max(1) as usize;
    let offset = form.cursor.saturating_sub(height - 1);
    let mut state = ListState::default().with_selected(Some(form.cursor)).with_offset(offset);
    let title = format!(
        "Launch on {}, up to {} at once: a layer on a task (Enter edits, ←/→ choose, L launches)",
        app.executor, app.workers
    );
    frame.render_stateful_widget(
        List::new(items).block(
            Block::default()
                .borders(Borders::ALL)
                .title(fit_title(&title, usize::from(list_area.width.saturating_sub(2)))),
        ),
        list_area,
        &mut state,
    );
    let help = match form.current() {
        FormRow::Field(f) => {
            let field = &form.fields[f];
            format!(
                "{}: {} ({}, default {})",
                field.spec.name,
                field.spec.help,
                field.spec.kind.allowed(),
                field.spec.default
            )
        }
        FormRow::LayerChoice => description(form.layer_name()),
        FormRow::TaskChoice => description(form.task_name()),
        FormRow::LaunchButton => "Queue the run(s) and start a worker for each; they appear on the Runs screen.".into(),
    };
    let mut lines = vec![Line::from(Span::styled(help, dim()))];
    if let Some(notice) = &form.notice {
        lines.push(Line::from(Span::styled(notice.clone(), Style::default().fg(Color::Yellow))));
    }
    if let Some(e) = &form.error {
        lines.push(Line::from(Span::styled(format!("✗ {e}"), Style::default().fg(Color::Red))));
    }
    frame.render_widget(Paragraph::new(lines).wrap(Wrap { trim: true }), info_area);
}
