//! The Runs screen: the table of every run, its filter box, sort, marks, notes, delete, stop,
//! requeue and pause. The table's model (filter terms, columns, sort) is [`crate::tui::runs`].

use crate::ops::{self, launch as ops_launch};
use crate::store::RunRecord;
use crate::tui::app::{now, App, Confirmed, Modal, Screen};
use crate::tui::column_fit::{self, hidden_note, Fitted};
use crate::tui::component::Component;
use crate::tui::experiment::DEFAULT_EXPERIMENT;
use crate::tui::keys::{cmd, hint, Action, Command, Key};
use crate::tui::layout::Areas;
pub use crate::tui::runs::RunsState;
use crate::tui::runs::{cell, Column};
use crate::tui::service::Request;
use crate::tui::ui::{bold, centred, cursor_row, cut_to_width, dim, shown_status_colour};
use crate::wording::count;
use ratatui::crossterm::event::{KeyCode, KeyEvent};
use ratatui::layout::Rect;
use ratatui::style::{Color, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Table, TableState, Wrap};
use ratatui::Frame;

/// The Runs screen.
pub struct Runs;

const COMMANDS: &[Command] = &[
    hint(&[Key::char('j'), Key::plain(KeyCode::Down)], "j, ↓", "move", "next run", Action::Down(1)),
    cmd(&[Key::char('k'), Key::plain(KeyCode::Up)], "k, ↑", "previous run", Action::Up(1)),
    cmd(&[Key::plain(KeyCode::PageDown)], "PgDn", "ten runs down", Action::Down(10)),
    cmd(&[Key::plain(KeyCode::PageUp)], "PgUp", "ten runs up", Action::Up(10)),
    cmd(&[Key::char('g'), Key::plain(KeyCode::Home)], "g, Home", "first run", Action::Top),
    cmd(&[Key::char('G'), Key::plain(KeyCode::End)], "G, End", "last run", Action::Bottom),
    hint(
        &[Key::char(' ')],
        "space",
        "mark",
        "mark or unmark the run for Compare and Ablation, then move to the next run",
        Action::ToggleMark,
    ),
    cmd(
        &[Key::char('a')],
        "a",
        "mark every visible run (again: unmark them); marks on runs the filter hides are kept but not used",
        Action::ToggleMarkAll,
    ),
    hint(
        &[Key::char('/')],
        "/",
        "filter",
        "filter: status:S layer:L task:T plugin:P tag:T sweep:N user:U key=value (by value: lr=1e-3 finds 0.001), \
         key<value key>=value (numbers), any word; -term for the runs a term leaves out; Enter keeps the \
         filter, Esc clears it",
        Action::Filter,
    ),
    cmd(&[Key::plain(KeyCode::Esc)], "Esc", "clear the filter", Action::ClearFilter),
    cmd(&[Key::char('s')], "s", "sort by the next column (or click a header)", Action::SortNext),
    cmd(&[Key::char('S')], "S", "reverse the sort", Action::SortReverse),
    cmd(
        &[Key::char('C')],
        "C",
        "choose the columns: space shows or hides one (kept across restarts); id, status, steps and best always show",
        Action::ChooseColumns,
    ),
    hint(
        &[Key::plain(KeyCode::Enter)],
        "Enter",
        "live",
        "watch the run live (on an empty database: launch the default experiment)",
        Action::OpenRun,
    ),
    hint(&[Key::char('n')], "n", "new run", "launch a new run (the Launch screen)", Action::NewRun),
    cmd(&[Key::char('e')], "e", "edit the run's notes and tags", Action::Annotate),
    cmd(
        &[Key::char('E')],
        "E",
        "evaluate the checkpoints of the marked runs the filter shows (else the run under the cursor) again with \
         other settings (eval_depths=2,4 difficulty=hard ...), each as a new run tagged eval",
        Action::Evaluate,
    ),
    cmd(
        &[Key::char('t')],
        "t",
        "tag the marked runs the filter shows (else the run under the cursor): a,b replaces their tags, \
         +a,-b adds and removes",
        Action::TagRuns,
    ),
    cmd(&[Key::char('d')], "d", "delete the run under the cursor, after confirmation", Action::DeleteCursor),
    cmd(&[Key::char('D')], "D", "delete the marked runs the filter shows, after confirmation", Action::DeleteMarked),
    cmd(
        &[Key::char('x')],
        "x",
        "stop the marked runs the filter shows (else the run under the cursor): running ones are interrupted, \
         queued ones cancelled, after confirmation",
        Action::StopRun,
    ),
    cmd(
        &[Key::char('r')],
        "r",
        "requeue the marked interrupted or failed runs the filter shows (else the run under the cursor); each \
         continues from its checkpoint",
        Action::Requeue,
    ),
    cmd(
        &[Key::char('p')],
        "p",
        "pause the marked queued runs the filter shows (else the one under the cursor), or release them when all \
         are paused",
        Action::Pause,
    ),
    cmd(&[Key::char('P')], "P", "pause or release every queued run of its sweep", Action::PauseSweep),
    cmd(
        &[Key::char('+')],
        "+",
        "one more worker at once (CPU runs launched with train.threads=1: one per core, sooner)",
        Action::MoreWorkers,
    ),
    cmd(&[Key::char('-')], "-", "one worker fewer at once (running runs go on; fewer start)", Action::FewerWorkers),
];

impl Component for Runs {
    fn commands(&self) -> &'static [Command] {
        COMMANDS
    }

    fn act(&self, app: &mut App, action: Action) {
        let empty = app.snapshot.loaded && app.snapshot.runs.is_empty();
        match action {
            Action::OpenRun if empty => launch_default(app),
            Action::OpenRun => {
                app.live.run = app.cursor_run().map(|r| r.id);
                app.screen = Screen::Live;
            }
            Action::NewRun => app.screen = Screen::Launch,
            Action::Down(n) => move_cursor(app, n as isize),
            Action::Up(n) => move_cursor(app, -(n as isize)),
            Action::Top => app.runs.cursor = 0,
            Action::Bottom => move_cursor(app, isize::MAX / 2),
            Action::Filter => app.runs.filtering = true,
            Action::ClearFilter => app.runs.filter.clear(),
            Action::ToggleMark => {
                if let Some(id) = app.cursor_run().map(|r| r.id) {
                    if !app.runs.selected.remove(&id) {
                        app.runs.selected.insert(id);
                    }
                    move_cursor(app, 1);
                }
            }
            Action::ToggleMarkAll => {
                // Only the visible runs: the filter decides what `a` touches.
                let visible: Vec<i64> = app.visible_runs().iter().map(|r| r.id).collect();
                if visible.iter().all(|id| app.runs.selected.contains(id)) {
                    app.runs.selected.retain(|id| !visible.contains(id));
                } else {
                    app.runs.selected.extend(visible);
                }
            }
            Action::SortNext => cycle_sort(app),
            Action::SortReverse => app.runs.descending = !app.runs.descending,
            Action::ChooseColumns => app.modal = Some(Modal::Columns { cursor: 0 }),
            Action::Annotate => {
                if let Some(r) = app.cursor_run() {
                    app.modal = Some(Modal::Annotate {
                        id: r.id,
                        notes: r.notes.clone(),
                        tags: r.tags.join(", "),
                        on_tags: false,
                    });
                }
            }
            Action::TagRuns => {
                let ids = marked_or_cursor(app);
                if !ids.is_empty() {
                    app.modal = Some(Modal::Tags { ids, text: String::new() });
                }
            }
            Action::Evaluate => {
                let ids = marked_or_cursor(app);
                if !ids.is_empty() {
                    app.modal = Some(Modal::Evaluate { ids, text: app.last_evaluation.clone() });
                }
            }
            Action::DeleteCursor => {
                if let Some(run) = app.cursor_run() {
                    let id = run.id;
                    let others = others_note(std::iter::once(run));
                    app.modal = Some(Modal::Confirm {
                        question: format!(
                            "Delete run {id} (the run under the cursor) and all its metrics, diagnostics and logs? \
                             Its files stay on disk (runs/{id}/ in the artifacts directory).{others}"
                        ),
                        action: Confirmed::Delete(vec![id]),
                    });
                }
            }
            Action::DeleteMarked => {
                let ids = app.marked_visible();
                if ids.is_empty() {
                    app.say(
                        "no marked runs to delete: mark some with space (d deletes the run under the cursor)",
                        true,
                    );
                    return;
                }
                let list = ids.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(", ");
                let hidden = match app.marked_hidden() {
                    0 => String::new(),
                    1 => " (1 marked run hidden by the filter is kept)".to_string(),
                    n => format!(" ({n} marked runs hidden by the filter are kept)"),
                };
                let marked = match ids.len() {
                    1 => "the marked run".to_string(),
                    n => format!("the {n} marked runs"),
                };
                let others = others_note(app.snapshot.runs.iter().filter(|r| ids.contains(&r.id)));
                app.modal = Some(Modal::Confirm {
                    question: format!(
                        "Delete {marked} {list} and all their metrics, diagnostics and logs?{hidden} \
                         Their files stay on disk.{others}"
                    ),
                    action: Confirmed::Delete(ids),
                });
            }
            Action::StopRun => ask_cancel(app, marked_or_cursor(app)),
            Action::Pause => pause(app, marked_or_cursor(app)),
            Action::PauseSweep => {
                if let Some(r) = app.cursor_run() {
                    app.send(Request::PauseSweep(r.id));
                }
            }
            Action::MoreWorkers => set_workers(app, app.workers.saturating_add(1)),
            Action::FewerWorkers => set_workers(app, app.workers.saturating_sub(1)),
            Action::Requeue => requeue(app, marked_or_cursor(app)),
            _ => {}
        }
    }

    fn draw(&self, frame: &mut Frame, area: Rect, app: &App, areas: &Areas) {
        draw(frame, area, app, areas)
    }
}

/// The most workers the TUI's queue runs at once (`+` stops there).
const MOST_WORKERS: usize = crate::queue::MOST_JOBS;

/// Sets how many workers the queue runs at once, between 1 and [`MOST_WORKERS`]; running
/// runs are never stopped by a lower limit, fewer are started.
fn set_workers(app: &mut App, workers: usize) {
    if !(1..=MOST_WORKERS).contains(&workers) {
        let text = format!("the queue runs {} at once: from 1 to {MOST_WORKERS}", count(app.workers, "worker"));
        app.say(text, true);
        return;
    }
    app.workers = workers;
    app.send(Request::Workers(workers));
    let text = format!("the queue now runs up to {} at once (running runs go on)", count(workers, "worker"));
    app.say(text, false);
}

/// A key while typing into the filter box: Enter keeps the filter, Esc leaves and clears it.
pub fn filter_key(app: &mut App, key: KeyEvent) {
    match key.code {
        KeyCode::Enter => app.runs.filtering = false,
        KeyCode::Esc => {
            app.runs.filtering = false;
            app.runs.filter.clear();
        }
        KeyCode::Backspace => {
            app.runs.filter.pop();
        }
        KeyCode::Char(c) => app.runs.filter.push(c),
        _ => {}
    }
    app.runs.cursor = 0;
}

fn move_cursor(app: &mut App, delta: isize) {
    let n = app.visible_runs().len();
    if n > 0 {
        app.runs.cursor = (app.runs.cursor as isize).saturating_add(delta).clamp(0, n as isize - 1) as usize;
    }
}

fn cycle_sort(app: &mut App) {
    let table = app.runs.table(&app.snapshot, now());
    let titles: Vec<String> = table.columns.iter().map(|c| c.title()).collect();
    let next = match &app.runs.sort {
        None => 0,
        Some(s) => titles.iter().position(|t| t == s).map_or(0, |i| (i + 1) % titles.len()),
    };
    app.runs.sort = titles.get(next).cloned();
}

/// The visible marked runs, else the run under the cursor: what `x`, `r` and `t` act on.
fn marked_or_cursor(app: &App) -> Vec<i64> {
    let marked = app.marked_visible();
    match marked.is_empty() {
        true => app.cursor_run().map(|r| r.id).into_iter().collect(),
        false => marked,
    }
}

/// The runs of `ids` a command leaves, with their states, as a sentence ends:
/// ` (run 5 (finished) is left as it is)`; nothing when there are none.
fn left_out(app: &App, ids: &[i64]) -> String {
    let named: Vec<String> =
        ids.iter().filter_map(|id| app.snapshot.run(*id)).map(|r| format!("{} ({})", r.id, r.shown_status())).collect();
    match named.as_slice() {
        [] => String::new(),
        [one] => format!(" (run {one} is left as it is)"),
        many => format!(" (runs {} are left as they are)", many.join(", ")),
    }
}

/// Asks before stopping the runs of `ids` that are queued or running (the Live screen's `x`
/// gives its one run); ended ones are left, and said so.
pub fn ask_cancel(app: &mut App, ids: Vec<i64>) {
    let why = ("nothing to cancel", "none of the marked runs is queued or running: nothing to cancel");
    let Some((stop, ended)) = split_runs(app, &ids, ops::runs::cancellable, why) else { return };
    let others = others_note(app.snapshot.runs.iter().filter(|r| stop.contains(&r.id)));
    let question = match stop.as_slice() {
        [id] => format!(
            "Stop run {id}? It becomes `interrupted` and keeps its data; `r` resumes it.{}{others}",
            left_out(app, &ended)
        ),
        many => format!(
            "Stop {}? They become `interrupted` and keep their data; `r` resumes them.{}{others}",
            list_runs(many),
            left_out(app, &ended)
        ),
    };
    app.modal = Some(Modal::Confirm { question, action: Confirmed::Cancel(stop) });
}

/// The runs of `ids` a command takes (`takes`) and those it leaves. When it takes none, the
/// status line says why, `why.0` after one run's state (`run 3 is finished: ...`), `why.1`
/// for several, and there is nothing to do.
fn split_runs(
    app: &mut App,
    ids: &[i64],
    takes: impl Fn(&RunRecord) -> bool,
    why: (&str, &str),
) -> Option<(Vec<i64>, Vec<i64>)> {
    let (taken, left): (Vec<i64>, Vec<i64>) = ids.iter().partition(|id| app.snapshot.run(**id).is_some_and(&takes));
    if !taken.is_empty() {
        return Some((taken, left));
    }
    let text = match ids {
        [id] => {
            let status = app.snapshot.run(*id).map(|r| r.status.to_string()).unwrap_or_default();
            format!("run {id} is {status}: {}", why.0)
        }
        _ => why.1.to_string(),
    };
    app.say(text, true);
    None
}

/// `run 3` or `the 2 runs 3, 4`.
fn list_runs(ids: &[i64]) -> String {
    let list = ids.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(", ");
    match ids.len() {
        1 => format!("run {list}"),
        n => format!("the {n} runs {list}"),
    }
}

/// Pauses the queued runs of `ids`, or releases them when every one is paused already (as
/// `a` marks or unmarks); runs that are not queued are left, and said so.
fn pause(app: &mut App, ids: Vec<i64>) {
    let why = ("only queued runs are paused", "none of the marked runs is queued: nothing to pause");
    let Some((hold, left)) = split_runs(app, &ids, ops::runs::holdable, why) else { return };
    let held = !hold.iter().all(|id| app.snapshot.run(*id).is_some_and(|r| r.held));
    if !left.is_empty() {
        let verb = if held { "pausing" } else { "releasing" };
        app.say(format!("{verb} {}{}", list_runs(&hold), left_out(app, &left)), false);
    }
    app.send(Request::Hold { ids: hold, held });
}

/// Requeues the interrupted or failed runs of `ids`; the others are left, and said so.
fn requeue(app: &mut App, ids: Vec<i64>) {
    let why = (
        "only interrupted or failed runs resume",
        "none of the marked runs is interrupted or failed: nothing to requeue",
    );
    let Some((requeue, left)) = split_runs(app, &ids, ops::runs::requeueable, why) else { return };
    if !left.is_empty() {
        app.say(format!("requeueing {}{}", list_runs(&requeue), left_out(app, &left)), false);
    }
    for id in requeue {
        app.send(Request::Resume(id));
    }
}

/// Launches the default experiment (the welcome screen's Enter).
pub fn launch_default(app: &mut App) {
    let overrides = DEFAULT_EXPERIMENT.override_list();
    let mut runs = Vec::new();
    for layer in DEFAULT_EXPERIMENT.layers {
        match ops_launch::resolve_run(&app.host, layer, DEFAULT_EXPERIMENT.task, &overrides) {
            Ok(r) => runs.push(r),
            Err(e) => {
                app.say(format!("cannot launch the default experiment: {e:#}"), true);
                return;
            }
        }
    }
    app.runs.selected.clear();
    app.send(Request::Launch { runs, name: DEFAULT_EXPERIMENT.sweep_name(), spec: DEFAULT_EXPERIMENT.grid() });
    app.say(format!("launched {} ({})", DEFAULT_EXPERIMENT.what(), DEFAULT_EXPERIMENT.size()), false);
}

/// A left click at (x, y): on a header sorts by that column (again: reverses), on a row
/// moves the cursor there.
pub fn click(app: &mut App, x: u16, y: u16) {
    let Some(table) = app.areas.runs.clone() else { return };
    if !table.table.contains((x, y).into()) {
        return;
    }
    if y == table.table.y {
        if let Some(i) = table.columns.iter().position(|(a, b)| (*a..*b).contains(&x)) {
            if let Some(t) = table.fitted.columns.get(i).map(|c| c.title()) {
                if app.runs.sort.as_ref() == Some(&t) {
                    app.runs.descending = !app.runs.descending;
                } else {
                    app.runs.sort = Some(t);
                }
            }
        }
    } else {
        let row = (y - table.table.y - 1) as usize + table.offset;
        if row < app.visible_runs().len() {
            app.runs.cursor = row;
        }
    }
}

/// The columns of the runs table that fit `width` cells, and their widths (the layout
/// computes it once per frame).
pub fn fit_columns(app: &App, width: u16) -> Fitted {
    let now = now();
    let table = app.runs.table(&app.snapshot, now);
    let natural: Vec<u16> = table
        .columns
        .iter()
        .map(|c| {
            let longest = table
                .runs
                .iter()
                .zip(&table.flat)
                .map(|(r, f)| cell(c, r, f, &table, &app.snapshot, now).chars().count())
                .max()
                .unwrap_or(0);
            // Room for the sort mark after the title.
            longest.max(c.title().chars().count() + 2).min(u16::MAX as usize) as u16
        })
        .collect();
    // The mark column and its gap come first.
    column_fit::fit(&table.columns, &natural, width.saturating_sub(2))
}

/// ` (3 running, 12 queued, 8 finished)`: how many of `runs` are in each state, the active
/// ones first, so that a filter on a sweep (`sweep:3`) or a user reads as its progress.
fn by_status(runs: &[&RunRecord]) -> String {
    const ORDER: [&str; 9] =
        ["running", "submitted", "queued", "paused", "finished", "interrupted", "failed", "diverged", "damaged"];
    let counts: Vec<String> = ORDER
        .iter()
        .filter_map(|state| {
            let n = runs.iter().filter(|r| r.shown_status() == *state).count();
            (n > 0).then(|| format!("{n} {state}"))
        })
        .collect();
    if counts.is_empty() {
        String::new()
    } else {
        format!(" ({})", counts.join(", "))
    }
}

fn draw_welcome(frame: &mut Frame, area: Rect) {
    let key = |k: &'static str| Span::styled(k, bold().fg(Color::Cyan));
    let text = vec![
        Line::from(Span::styled("Welcome to the energy-layer workbench", bold())),
        Line::from(""),
        Line::from("There are no runs in this database yet."),
        Line::from(""),
        Line::from(vec![key("Enter"), Span::raw("  launch the default experiment:")]),
        Line::from(format!("       {}", DEFAULT_EXPERIMENT.what())),
        Line::from(format!("       ({})", DEFAULT_EXPERIMENT.size())),
        Line::from(vec![key("n"), Span::raw("      choose a layer, a task and their settings")]),
        Line::from(vec![key("?"), Span::raw("      every key of this screen")]),
        Line::from(vec![key("q"), Span::raw("      quit")]),
    ];
    let rect = centred(area, 72, 14);
    frame.render_widget(
        Paragraph::new(text).block(Block::default().borders(Borders::ALL)).wrap(Wrap { trim: false }),
        rect,
    );
}

fn draw(frame: &mut Frame, area: Rect, app: &App, areas: &Areas) {
    if !app.snapshot.loaded {
        frame.render_widget(Paragraph::new("reading the run database…").style(dim()), area);
        return;
    }
    let Some(layout) = &areas.runs else {
        draw_welcome(frame, area);
        return;
    };
    let now = now();
    let table = app.runs.table(&app.snapshot, now);
    let cursor = app.runs.cursor.min(table.runs.len().saturating_sub(1));
    let sort_mark = |c: &Column| match &app.runs.sort {
        Some(s) if *s == c.title() => {
            if app.runs.descending {
                " ▼"
            } else {
                " ▲"
            }
        }
        _ => "",
    };
    let shown = &layout.fitted.columns;
    let mut header: Vec<Cell> = std::iter::once(Cell::from(" "))
        .chain(shown.iter().map(|c| Cell::from(format!("{}{}", c.title(), sort_mark(c)))))
        .collect();
    if layout.fitted.hidden > 0 {
        header.push(Cell::from(hidden_note(layout.fitted.hidden)).style(dim()));
    }
    let header = Row::new(header).style(bold().fg(Color::Cyan));
    let rows: Vec<Row> = table
        .runs
        .iter()
        .zip(&table.flat)
        .map(|(r, f)| {
            let mark = if app.runs.selected.contains(&r.id) { "●" } else { " " };
            let mut cells = vec![Cell::from(mark).style(Style::default().fg(Color::Cyan))];
            for (c, &width) in shown.iter().zip(&layout.fitted.widths) {
                let style = match c {
                    Column::Status => Style::default().fg(shown_status_colour(r)),
                    _ => Style::default(),
                };
                let text = cut_to_width(cell(c, r, f, &table, &app.snapshot, now), usize::from(width));
                cells.push(Cell::from(text).style(style));
            }
            Row::new(cells)
        })
        .collect();
    let mut constraints = vec![ratatui::layout::Constraint::Length(1)];
    constraints.extend(layout.fitted.widths.iter().map(|w| ratatui::layout::Constraint::Length(*w)));
    if layout.fitted.hidden > 0 {
        constraints.push(ratatui::layout::Constraint::Length(hidden_note(layout.fitted.hidden).chars().count() as u16));
    }
    let widget = Table::new(rows, constraints).header(header).column_spacing(1).row_highlight_style(cursor_row());
    // The offset comes from the layout; the widget's own adjustment is thrown away with the
    // local state, so what is drawn is what a click hits.
    let mut state = TableState::default().with_selected(Some(cursor)).with_offset(layout.offset);
    frame.render_stateful_widget(widget, layout.table, &mut state);
    if layout.filter.height > 0 {
        let cursor_mark = if app.runs.filtering { "▏" } else { "" };
        let mut spans = vec![
            Span::styled("/ ", bold().fg(Color::Cyan)),
            Span::raw(format!("{}{cursor_mark}", app.runs.filter)),
            Span::styled(
                format!("   {} of {} runs{}", table.runs.len(), app.snapshot.runs.len(), by_status(&table.runs)),
                dim(),
            ),
        ];
        let hidden = app.marked_hidden();
        if hidden > 0 {
            spans.push(Span::styled(
                format!(" · {hidden} marked runs hidden by the filter (not compared)"),
                Style::default().fg(Color::Yellow),
            ));
        }
        if app.runs.filtering {
            spans.push(Span::styled("   Enter keeps · Esc clears", dim()));
        }
        frame.render_widget(Paragraph::new(Line::from(spans)), layout.filter);
    }
}

/// ` Note: run 4 was stored by someone else (bob).` for a question about runs other users
/// stored (a store a lab shares), else nothing.
fn others_note<'a>(runs: impl IntoIterator<Item = &'a crate::store::RunRecord>) -> String {
    crate::ops::runs::stored_by_others(runs).map(|o| format!(" Note: {o}.")).unwrap_or_default()
}
