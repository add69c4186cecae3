//! Drawing: one function per screen, all from the [`App`] state alone (no I/O), so any
//! frame can be drawn at any size at any moment.

use super::app::{now, App, Modal, Screen};
use super::compare;
use super::help;
use super::launch::Row as FormRow;
use super::runs::{cell, format_duration, Column};
use crate::store::{MetricRow, RunStatus};
use ratatui::layout::{Alignment, Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{
    Block, Borders, Cell, Clear, Gauge, List, ListItem, Paragraph, Row, Table, TableState, Tabs, Wrap,
};
use ratatui::Frame;

/// How long a status line stays.
const STATUS_SECONDS: u64 = 8;

/// The colour of a run status.
pub fn status_colour(s: RunStatus) -> Color {
    match s {
        RunStatus::Queued => Color::Blue,
        RunStatus::Running => Color::Yellow,
        RunStatus::Finished => Color::Green,
        RunStatus::Failed => Color::Red,
        RunStatus::Interrupted => Color::Magenta,
        RunStatus::Diverged => Color::LightRed,
    }
}

fn bold() -> Style {
    Style::default().add_modifier(Modifier::BOLD)
}

fn dim() -> Style {
    Style::default().fg(Color::DarkGray)
}

/// Draws the whole frame.
pub fn draw(frame: &mut Frame, app: &mut App) {
    let [tabs, body, footer] =
        Layout::vertical([Constraint::Length(1), Constraint::Min(0), Constraint::Length(1)]).areas(frame.area());
    draw_tabs(frame, tabs, app);
    match app.screen {
        Screen::Runs => draw_runs(frame, body, app),
        Screen::Launch => draw_launch(frame, body, app),
        Screen::Live => draw_live(frame, body, app),
        Screen::Compare => draw_compare(frame, body, app),
        Screen::Ablation => draw_ablation(frame, body, app),
        Screen::Plugins => draw_plugins(frame, body, app),
    }
    draw_footer(frame, footer, app);
    if let Some(modal) = &app.modal {
        draw_modal(frame, modal);
    }
    if app.help {
        draw_help(frame, app.screen);
    }
}

fn draw_tabs(frame: &mut Frame, area: Rect, app: &mut App) {
    app.tabs_area = Some(area);
    let titles: Vec<String> = Screen::ALL.iter().enumerate().map(|(i, s)| format!("{} {}", i + 1, s.title())).collect();
    let selected = Screen::ALL.iter().position(|s| *s == app.screen).unwrap_or(0);
    let tabs = Tabs::new(titles)
        .select(selected)
        .highlight_style(Style::default().fg(Color::Black).bg(Color::Cyan).add_modifier(Modifier::BOLD))
        .divider("│");
    frame.render_widget(tabs, area);
}

fn draw_footer(frame: &mut Frame, area: Rect, app: &App) {
    let line = match &app.status {
        Some((text, error, at)) if at.elapsed().as_secs() < STATUS_SECONDS => {
            Line::from(Span::styled(text.clone(), Style::default().fg(if *error { Color::Red } else { Color::Green })))
        }
        _ => {
            let running = app.snapshot.runs.iter().filter(|r| r.status == RunStatus::Running).count();
            let marked = app.runs.selected.len();
            Line::from(vec![
                Span::styled("? keys  q quit", dim()),
                Span::raw(format!("   {} runs, {running} running, {marked} marked", app.snapshot.runs.len())),
            ])
        }
    };
    frame.render_widget(Paragraph::new(line), area);
}

/// A rectangle of at most `w` x `h` centred in `area`.
fn centred(area: Rect, w: u16, h: u16) -> Rect {
    let w = w.min(area.width);
    let h = h.min(area.height);
    Rect { x: area.x + (area.width - w) / 2, y: area.y + (area.height - h) / 2, width: w, height: h }
}

fn draw_welcome(frame: &mut Frame, area: Rect) {
    let text = vec![
        Line::from(Span::styled("Welcome to the energy-layer workbench", bold())),
        Line::from(""),
        Line::from("There are no runs in this database yet."),
        Line::from(""),
        Line::from(vec![Span::styled("Enter", bold().fg(Color::Cyan)), Span::raw("  launch the default experiment:")]),
        Line::from("       Hyper-SET vs Transformer on generated easy Sudoku"),
        Line::from("       (d=64, 2 iterations, 300 steps each; under a minute on 2 cores)"),
        Line::from(vec![
            Span::styled("n", bold().fg(Color::Cyan)),
            Span::raw("      choose a layer, a task and their settings"),
        ]),
        Line::from(vec![Span::styled("?", bold().fg(Color::Cyan)), Span::raw("      every key of this screen")]),
        Line::from(vec![Span::styled("q", bold().fg(Color::Cyan)), Span::raw("      quit")]),
    ];
    let rect = centred(area, 72, 14);
    frame.render_widget(
        Paragraph::new(text).block(Block::default().borders(Borders::ALL)).wrap(Wrap { trim: false }),
        rect,
    );
}

fn draw_runs(frame: &mut Frame, area: Rect, app: &mut App) {
    if !app.snapshot.loaded {
        frame.render_widget(Paragraph::new("reading the run database…").style(dim()), area);
        return;
    }
    if app.snapshot.runs.is_empty() {
        draw_welcome(frame, area);
        return;
    }
    let show_filter = app.filtering || !app.runs.filter.is_empty();
    let [table_area, filter_area] =
        Layout::vertical([Constraint::Min(0), Constraint::Length(u16::from(show_filter))]).areas(area);
    let now = now();
    let table = app.runs.table(&app.snapshot, now);
    let cursor = app.runs.cursor.min(table.runs.len().saturating_sub(1));
    let texts: Vec<Vec<String>> = table
        .runs
        .iter()
        .zip(&table.flat)
        .map(|(r, f)| table.columns.iter().map(|c| cell(c, r, f, &app.snapshot, now)).collect())
        .collect();
    let widths: Vec<u16> = table
        .columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let longest = texts.iter().map(|t| t[i].chars().count()).max().unwrap_or(0);
            let cap = match c {
                Column::Key(_) | Column::Layer | Column::Task => 16,
                Column::Best | Column::Tags => 22,
                _ => 14,
            };
            (longest.max(c.title().chars().count() + 1)).min(cap) as u16
        })
        .collect();
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
    let header = Row::new(
        std::iter::once(Cell::from(" "))
            .chain(table.columns.iter().map(|c| Cell::from(format!("{}{}", c.title(), sort_mark(c)))))
            .collect::<Vec<_>>(),
    )
    .style(bold().fg(Color::Cyan));
    let rows: Vec<Row> = table
        .runs
        .iter()
        .zip(texts)
        .map(|(r, t)| {
            let mark = if app.runs.selected.contains(&r.id) { "●" } else { " " };
            let mut cells = vec![Cell::from(mark).style(Style::default().fg(Color::Cyan))];
            for (c, text) in table.columns.iter().zip(t) {
                let style = match c {
                    Column::Status => Style::default().fg(status_colour(r.status)),
                    _ => Style::default(),
                };
                cells.push(Cell::from(text).style(style));
            }
            Row::new(cells)
        })
        .collect();
    let mut constraints = vec![Constraint::Length(1)];
    constraints.extend(widths.iter().map(|w| Constraint::Length(*w)));
    // Column x ranges, for mouse clicks on headers (the mark column and 1-cell gaps first).
    let mut x = table_area.x + 2;
    let ranges: Vec<(u16, u16)> = widths
        .iter()
        .map(|w| {
            let r = (x, x.saturating_add(*w));
            x = x.saturating_add(*w + 1);
            r
        })
        .collect();
    app.runs_area = Some((table_area, ranges));
    let widget = Table::new(rows, constraints)
        .header(header)
        .column_spacing(1)
        .row_highlight_style(Style::default().bg(Color::Rgb(40, 40, 60)).add_modifier(Modifier::BOLD));
    let mut state = TableState::default().with_selected(Some(cursor)).with_offset(app.runs_scroll);
    frame.render_stateful_widget(widget, table_area, &mut state);
    app.runs_scroll = state.offset();
    if show_filter {
        let cursor_mark = if app.filtering { "▏" } else { "" };
        let line = Line::from(vec![
            Span::styled("/ ", bold().fg(Color::Cyan)),
            Span::raw(format!("{}{cursor_mark}", app.runs.filter)),
            Span::styled(format!("   {} of {} runs", table.runs.len(), app.snapshot.runs.len()), dim()),
        ]);
        frame.render_widget(Paragraph::new(line), filter_area);
    }
}

fn draw_launch(frame: &mut Frame, area: Rect, app: &App) {
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
    let items: Vec<ListItem> = rows
        .iter()
        .enumerate()
        .map(|(i, row)| {
            let focused = i == form.cursor;
            let line = match row {
                FormRow::LayerChoice => choice_line("layer", form.layer_name().unwrap_or("-"), name_width),
                FormRow::TaskChoice => choice_line("task", form.task_name().unwrap_or("-"), name_width),
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
                        spans.push(Span::styled("  ◂ ▸", dim()));
                    }
                    if let Some(e) = &field.error {
                        spans.push(Span::styled(format!("  ✗ {e}"), Style::default().fg(Color::Red)));
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
    let mut state = ratatui::widgets::ListState::default().with_selected(Some(form.cursor)).with_offset(offset);
    let title = format!("Launch on {}: a layer on a task (Enter edits, ←/→ choose, L launches)", app.executor);
    frame.render_stateful_widget(
        List::new(items).block(Block::default().borders(Borders::ALL).title(title)),
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
        FormRow::LayerChoice => {
            app.plugins.get(form.layer_name().unwrap_or("")).map(|p| p.description.clone()).unwrap_or_default()
        }
        FormRow::TaskChoice => {
            app.plugins.get(form.task_name().unwrap_or("")).map(|p| p.description.clone()).unwrap_or_default()
        }
        FormRow::LaunchButton => "Queue the run(s) and start a worker for each; they appear on the Runs screen.".into(),
    };
    let mut lines = vec![Line::from(Span::styled(help, dim()))];
    if let Some(e) = &form.error {
        lines.push(Line::from(Span::styled(format!("✗ {e}"), Style::default().fg(Color::Red))));
    }
    frame.render_widget(Paragraph::new(lines).wrap(Wrap { trim: true }), info_area);
}

fn choice_line(key: &str, value: &str, width: usize) -> Line<'static> {
    Line::from(vec![
        Span::styled(format!("{key:<width$}"), bold()),
        Span::styled(value.to_string(), bold().fg(Color::Yellow)),
        Span::styled("  ◂ ▸", dim()),
    ])
}

/// Steps per second over the last stretch of the train curve, and the ETA in seconds.
pub fn rate_and_eta(metrics: &[MetricRow], last_step: u64, total: Option<u64>) -> Option<(f64, Option<f64>)> {
    let train: Vec<&MetricRow> =
        metrics.iter().filter(|m| m.split == "train" && m.name == "loss" && m.wall_time.is_finite()).collect();
    let last = train.iter().max_by_key(|m| m.step)?;
    let window = last.step.saturating_sub(50);
    let first = train.iter().filter(|m| m.step >= window && m.step < last.step).min_by_key(|m| m.step)?;
    let dt = last.wall_time - first.wall_time;
    if dt <= 0.0 {
        return None;
    }
    let rate = (last.step - first.step) as f64 / dt;
    Some((rate, total.map(|t| t.saturating_sub(last_step) as f64 / rate)))
}

fn draw_live(frame: &mut Frame, area: Rect, app: &App) {
    let [list_area, main] = Layout::horizontal([Constraint::Length(30), Constraint::Min(0)]).areas(area);
    let candidates = app.live_candidates();
    let live = app.live_id();
    let items: Vec<ListItem> = candidates
        .iter()
        .map(|r| {
            let mark = if Some(r.id) == live { "▶ " } else { "  " };
            ListItem::new(Line::from(vec![
                Span::raw(format!("{mark}{:>4} ", r.id)),
                Span::raw(format!("{:<12.12} ", r.layer.name)),
                Span::styled(r.status.as_str(), Style::default().fg(status_colour(r.status))),
            ]))
        })
        .collect();
    frame.render_widget(List::new(items).block(Block::default().borders(Borders::ALL).title("runs")), list_area);
    let Some(run) = live.and_then(|id| app.snapshot.run(id)) else {
        frame.render_widget(
            Paragraph::new("No runs yet: launch one (n on the Runs screen, or the Launch screen).")
                .block(Block::default().borders(Borders::ALL)),
            main,
        );
        return;
    };
    let data = app.details.get(&run.id);
    let [gauge_area, info_area, charts, logs] =
        Layout::vertical([Constraint::Length(3), Constraint::Length(2), Constraint::Min(6), Constraint::Length(8)])
            .areas(main);
    let total = run.total_steps.unwrap_or(0);
    let ratio = if total > 0 { (run.last_step as f64 / total as f64).clamp(0.0, 1.0) } else { 0.0 };
    let rate = data.and_then(|d| rate_and_eta(&d.metrics, run.last_step, run.total_steps));
    let mut label = format!("step {}/{}", run.last_step, total);
    if let Some((r, eta)) = rate {
        label.push_str(&format!(" · {r:.2} steps/s"));
        if let (Some(eta), false) = (eta, run.status.is_terminal()) {
            label.push_str(&format!(" · ETA {}", format_duration(eta)));
        }
    }
    let title = format!("run {}: {} on {} ({})", run.id, run.layer.name, run.task.name, run.status);
    frame.render_widget(
        Gauge::default()
            .block(Block::default().borders(Borders::ALL).title(title))
            .gauge_style(Style::default().fg(status_colour(run.status)))
            .ratio(ratio)
            .label(label),
        gauge_area,
    );
    let mut info = vec![];
    if let Some(p) = run.param_count {
        info.push(format!("{p} parameters"));
    }
    if let Some(loss) = app.snapshot.train_loss(run.id) {
        info.push(format!("train loss {:.4}", loss.last));
    }
    if let Some((name, v)) = app.snapshot.best_headline(run) {
        info.push(format!("best {name} {v:.4}"));
    }
    let mut lines = vec![Line::from(info.join(" · "))];
    if let Some(e) = &run.error {
        lines.push(Line::from(Span::styled(e.clone(), Style::default().fg(Color::Red))));
    }
    if let Some(cause) = &run.supervision.cause {
        lines.push(Line::from(Span::styled(format!("cause: {cause}"), Style::default().fg(Color::Red))));
    }
    let s = &run.supervision;
    if let (Some(host), Some(pid)) = (&s.host, run.worker_pid) {
        let job = match (&s.executor, &s.job_id) {
            (Some(e), Some(j)) => format!(", {e} job {j}"),
            _ => String::new(),
        };
        lines.push(Line::from(format!("worker: process {pid} on {host}{job}")));
    }
    frame.render_widget(Paragraph::new(lines).wrap(Wrap { trim: true }), info_area);
    let inputs = [compare::Input { record: run, data }];
    let panels = compare::panels(&inputs, compare::Options::default());
    let [a, b] = Layout::horizontal([Constraint::Ratio(1, 2), Constraint::Ratio(1, 2)]).areas(charts);
    compare::draw_panel(frame, a, &panels[0]);
    compare::draw_panel(frame, b, &panels[1]);
    let log_lines: Vec<Line> = data
        .map(|d| {
            d.logs
                .iter()
                .rev()
                .take(logs.height.saturating_sub(2) as usize)
                .rev()
                .map(|l| Line::from(l.clone()))
                .collect()
        })
        .unwrap_or_default();
    frame.render_widget(Paragraph::new(log_lines).block(Block::default().borders(Borders::ALL).title("log")), logs);
}

fn draw_compare(frame: &mut Frame, area: Rect, app: &mut App) {
    if app.compared_runs().is_empty() {
        let text =
            "Nothing to compare: mark runs on the Runs screen with space (or put the cursor on one), then press c.";
        frame.render_widget(Paragraph::new(text).wrap(Wrap { trim: true }), area);
        return;
    }
    let opts = app.compare;
    let (legend, panels) = app.compare_panels();
    compare::draw(frame, area, &legend, panels, opts);
}

fn draw_ablation(frame: &mut Frame, area: Rect, app: &App) {
    let (table, loading) = app.ablation_table();
    if table.rows.is_empty() {
        let text = if loading > 0 {
            format!("loading {loading} run(s)…")
        } else {
            "No runs to tabulate: mark runs on the Runs screen with space, or finish some (every visible finished run is used when none is marked).".into()
        };
        frame.render_widget(Paragraph::new(text).wrap(Wrap { trim: true }), area);
        return;
    }
    let [table_area, note_area] = Layout::vertical([Constraint::Min(0), Constraint::Length(2)]).areas(area);
    let header_cells = table.header();
    let fixed = 2 + table.keys.len();
    let best = table.best_rows();
    let sort = app.ablation_sort;
    let header = Row::new(
        header_cells
            .iter()
            .enumerate()
            .map(|(i, h)| {
                let mark = match sort {
                    Some((c, desc)) if i >= fixed && c == i - fixed => {
                        if desc {
                            " ▼"
                        } else {
                            " ▲"
                        }
                    }
                    _ => "",
                };
                Cell::from(format!("{h}{mark}"))
            })
            .collect::<Vec<_>>(),
    )
    .style(bold().fg(Color::Cyan));
    let mut widths: Vec<usize> = header_cells.iter().map(|h| h.chars().count() + 2).collect();
    let rows: Vec<Row> = (0..table.rows.len())
        .map(|r| {
            let texts = table.cells_text(r);
            for (i, t) in texts.iter().enumerate() {
                widths[i] = widths[i].max(t.chars().count());
            }
            Row::new(
                texts
                    .into_iter()
                    .enumerate()
                    .map(|(i, t)| {
                        let is_best = i >= fixed && best[i - fixed] == Some(r);
                        Cell::from(t).style(if is_best { bold().fg(Color::Green) } else { Style::default() })
                    })
                    .collect::<Vec<_>>(),
            )
        })
        .collect();
    let constraints: Vec<Constraint> = widths.iter().map(|w| Constraint::Length((*w).min(24) as u16)).collect();
    let title = format!("Ablation: {} configurations, mean ± std over seeds (best in green)", table.rows.len());
    frame.render_widget(
        Table::new(rows, constraints)
            .header(header)
            .column_spacing(2)
            .block(Block::default().borders(Borders::ALL).title(title)),
        table_area,
    );
    let mut note = format!(
        "s/S sort · M/T/C export Markdown/LaTeX/CSV · {} runs",
        table.rows.iter().map(|r| r.runs.len()).sum::<usize>()
    );
    if loading > 0 {
        note.push_str(&format!(" · {loading} still loading"));
    }
    frame.render_widget(Paragraph::new(note).style(dim()), note_area);
}

fn draw_plugins(frame: &mut Frame, area: Rect, app: &App) {
    let failures = app.plugins.failures.len() as u16;
    let reload_lines = if app.reload_log.is_empty() { 0 } else { area.height / 3 };
    let [table_area, fp_area, fail_area, reload_area] = Layout::vertical([
        Constraint::Min(3),
        Constraint::Length(3),
        Constraint::Length(if failures > 0 { (failures * 2 + 2).min(area.height / 2) } else { 0 }),
        Constraint::Length(reload_lines),
    ])
    .areas(area);
    if reload_lines > 0 {
        super::reload::draw(frame, reload_area, &app.reload_log);
    }
    let header = Row::new(["name", "kind", "version", "description", "path"]).style(bold().fg(Color::Cyan));
    let rows: Vec<Row> = app
        .plugins
        .plugins
        .iter()
        .map(|p| {
            Row::new(vec![
                Cell::from(p.name.clone()),
                Cell::from(p.kind.as_str()),
                Cell::from(p.version.clone()),
                Cell::from(p.description.clone()),
                Cell::from(p.path.display().to_string()),
            ])
        })
        .collect();
    let widths = [
        Constraint::Length(20),
        Constraint::Length(6),
        Constraint::Length(8),
        Constraint::Percentage(45),
        Constraint::Min(10),
    ];
    let title = format!("{} plugins loaded", app.plugins.plugins.len());
    frame.render_widget(
        Table::new(rows, widths).header(header).block(Block::default().borders(Borders::ALL).title(title)),
        table_area,
    );
    frame.render_widget(
        Paragraph::new(format!(
            "fingerprint (host and every loaded plugin): {}\n{}",
            plugin_api::FINGERPRINT,
            app.plugins.workspace.as_deref().unwrap_or("no workbench workspace: plugins are loaded, never built")
        ))
            .style(dim())
            .wrap(Wrap { trim: true }),
        fp_area,
    );
    if failures > 0 {
        let lines: Vec<Line> = app
            .plugins
            .failures
            .iter()
            .flat_map(|f| {
                [
                    Line::from(Span::styled(f.path.display().to_string(), bold())),
                    Line::from(Span::styled(format!("  {}", f.reason), Style::default().fg(Color::Red))),
                ]
            })
            .collect();
        let block = Block::default().borders(Borders::ALL).title(format!("{failures} libraries not loaded"));
        frame.render_widget(Paragraph::new(lines).wrap(Wrap { trim: true }).block(block), fail_area);
    }
}

fn draw_modal(frame: &mut Frame, modal: &Modal) {
    let area = frame.area();
    match modal {
        Modal::Confirm { question, .. } => {
            let rect = centred(area, 64, 7);
            frame.render_widget(Clear, rect);
            let text = vec![
                Line::from(question.clone()),
                Line::from(""),
                Line::from(vec![
                    Span::styled("y", bold().fg(Color::Cyan)),
                    Span::raw(" yes    "),
                    Span::styled("n / Esc", bold().fg(Color::Cyan)),
                    Span::raw(" no"),
                ]),
            ];
            frame.render_widget(
                Paragraph::new(text).wrap(Wrap { trim: true }).block(
                    Block::default()
                        .borders(Borders::ALL)
                        .title("Confirm")
                        .border_style(Style::default().fg(Color::Yellow)),
                ),
                rect,
            );
        }
        Modal::Annotate { id, notes, tags, on_tags } => {
            let rect = centred(area, 70, 9);
            frame.render_widget(Clear, rect);
            let field = |label: &str, value: &str, focused: bool| {
                Line::from(vec![
                    Span::styled(format!("{label:<7}"), bold()),
                    Span::styled(
                        format!("{value}{}", if focused { "▏" } else { "" }),
                        if focused { Style::default().fg(Color::Cyan) } else { Style::default() },
                    ),
                ])
            };
            let text = vec![
                field("notes", notes, !on_tags),
                Line::from(""),
                field("tags", tags, *on_tags),
                Line::from(Span::styled("       comma-separated", dim())),
                Line::from(""),
                Line::from(Span::styled("Tab switch field · Enter save · Esc cancel", dim())),
            ];
            frame.render_widget(
                Paragraph::new(text)
                    .wrap(Wrap { trim: false })
                    .block(Block::default().borders(Borders::ALL).title(format!("Run {id}: notes and tags"))),
                rect,
            );
        }
    }
}

fn draw_help(frame: &mut Frame, screen: Screen) {
    let keys = help::keys(screen);
    let mut lines = vec![Line::from(Span::styled(format!("{} screen", screen.title()), bold().fg(Color::Cyan)))];
    for (k, what) in keys {
        lines.push(Line::from(vec![Span::styled(format!("{k:<28}"), bold()), Span::raw(*what)]));
    }
    lines.push(Line::from(""));
    lines.push(Line::from(Span::styled("Everywhere", bold().fg(Color::Cyan))));
    for (k, what) in help::GLOBAL {
        lines.push(Line::from(vec![Span::styled(format!("{k:<28}"), bold()), Span::raw(*what)]));
    }
    let rect = centred(frame.area(), 100, lines.len() as u16 + 2);
    frame.render_widget(Clear, rect);
    frame.render_widget(
        Paragraph::new(lines)
            .alignment(Alignment::Left)
            .wrap(Wrap { trim: false })
            .block(Block::default().borders(Borders::ALL).title("Keys (any key closes)")),
        rect,
    );
}
