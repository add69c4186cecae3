//! The Ablation screen: the marked runs the filter shows (or every visible finished run)
//! grouped by their differing keys, mean ± std over seeds, sortable and exportable; or one
//! metric of it as a heatmap over two keys ([`heatmap`]).

use crate::ablation::{Format, RunInput, Table};
use crate::ops::export::TableSort;
use crate::ops::export_names::{ablation_name, heatmap_name};
use crate::store::RunRecord;
use crate::tui::app::App;
use crate::tui::column_fit::{fit_widths, Wanted};
use crate::tui::component::Component;
use crate::tui::data::RunData;
use crate::tui::keys::{cmd, hint, Action, Command, Key};
use crate::tui::layout::Areas;
use crate::tui::screens::heatmap;
use crate::tui::service::Request;
use crate::tui::ui::{bold, dim};
use ratatui::crossterm::event::KeyCode;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Style};
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Table as TableWidget, Wrap};
use ratatui::Frame;

/// The Ablation screen.
pub struct Ablation;

/// The sort of the ablation table, and the heatmap view's choices.
#[derive(Debug, Clone, Default)]
pub struct AblationState {
    /// Sort column and direction (descending).
    pub sort: Option<(usize, bool)>,
    /// The heatmap instead of the table.
    pub heatmap: bool,
    /// Which ordered pair of differing keys the heatmap's axes are (modulo the pairs).
    pub axes: usize,
    /// Which metric column the heatmap shows (modulo the metric columns).
    pub metric: usize,
}

const COMMANDS: &[Command] = &[
    hint(&[Key::char('s')], "s", "sort", "sort by the next metric column", Action::SortNext),
    cmd(&[Key::char('S')], "S", "reverse the sort", Action::SortReverse),
    hint(&[Key::char('M')], "M", "export", "export Markdown in the exports folder (--exports)", Action::ExportMarkdown),
    cmd(&[Key::char('T')], "T", "export LaTeX in the exports folder (--exports)", Action::ExportLatex),
    cmd(&[Key::char('C')], "C", "export CSV in the exports folder (--exports)", Action::ExportCsv),
    hint(
        &[Key::char('h')],
        "h",
        "heatmap",
        "heatmap of one metric over two differing keys, or back",
        Action::ToggleHeatmap,
    ),
    cmd(&[Key::char('x')], "x", "heatmap: next pair of keys on the axes", Action::NextAxes),
    cmd(&[Key::char('m')], "m", "heatmap: next metric (final, best)", Action::NextMetric),
    cmd(&[Key::char('p')], "p", "export the heatmap as PNG in the exports folder (--exports)", Action::ExportHeatmap),
    cmd(&[Key::plain(KeyCode::Esc)], "Esc", "back to Runs", Action::Back),
];

impl Component for Ablation {
    fn commands(&self) -> &'static [Command] {
        COMMANDS
    }

    fn act(&self, app: &mut App, action: Action) {
        let columns = ablation_table(app).0.columns.len();
        let sort = app.ablation.sort;
        match action {
            Action::SortNext if columns > 0 => {
                let next = sort.map_or(0, |(c, _)| (c + 1) % columns);
                app.ablation.sort = Some((next, sort.is_some_and(|s| s.1)));
            }
            Action::SortReverse => {
                if let Some((c, d)) = sort {
                    app.ablation.sort = Some((c, !d));
                }
            }
            Action::ExportMarkdown | Action::ExportLatex | Action::ExportCsv => {
                let (format, ext) = match action {
                    Action::ExportMarkdown => (Format::Markdown, "md"),
                    Action::ExportLatex => (Format::Latex, "tex"),
                    _ => (Format::Csv, "csv"),
                };
                let runs = app.ablation_runs();
                if runs.is_empty() {
                    app.say("no runs in the table: mark some on the Runs screen, or finish one", true);
                } else {
                    let sweeps: Vec<Option<i64>> = runs
                        .iter()
                        .map(|id| app.snapshot.run(*id).and_then(|r| r.sweep.as_ref()).map(|s| s.id))
                        .collect();
                    let out = app.exports.join(format!("{}.{ext}", ablation_name(&runs, &sweeps)));
                    // The file lists the rows as the screen sorts them.
                    let sort = app.ablation.sort.and_then(|(column, descending)| {
                        let column = ablation_table(app).0.columns.get(column)?.title();
                        Some(TableSort { column, descending: Some(descending) })
                    });
                    app.send(Request::ExportAblation { runs, format, sort, out });
                }
            }
            Action::ToggleHeatmap => app.ablation.heatmap = !app.ablation.heatmap,
            Action::NextAxes | Action::NextMetric => next_heatmap_choice(app, action),
            Action::ExportHeatmap => export_heatmap(app),
            _ => {}
        }
    }

    fn draw(&self, frame: &mut Frame, area: Rect, app: &App, _: &Areas) {
        if app.ablation.heatmap {
            heatmap::draw(frame, area, app)
        } else {
            draw_ablation(frame, area, app)
        }
    }
}

/// Moves the heatmap to the next pair of axes or the next metric, and says which.
fn next_heatmap_choice(app: &mut App, action: Action) {
    match heatmap::choice(app) {
        Err(why) => app.say(why, true),
        Ok(c) => {
            let state = &mut app.ablation;
            if action == Action::NextAxes {
                state.axes = (state.axes % c.pairs + 1) % c.pairs;
            } else {
                state.metric = (state.metric % c.metrics + 1) % c.metrics;
            }
            state.heatmap = true;
            if let Ok(c) = heatmap::choice(app) {
                app.say(format!("heatmap: {} over {} × {}", c.metric, c.rows, c.columns), false);
            }
        }
    }
}

/// Sends the heatmap on screen to be drawn as a PNG named after its metric, keys and runs.
fn export_heatmap(app: &mut App) {
    let grid = heatmap::choice(app).and_then(|c| c.grid);
    match grid {
        Err(why) => app.say(format!("no heatmap to export: {why}"), true),
        Ok(grid) => {
            let runs = app.ablation_runs();
            let sweeps: Vec<Option<i64>> =
                runs.iter().map(|id| app.snapshot.run(*id).and_then(|r| r.sweep.as_ref()).map(|s| s.id)).collect();
            let name = heatmap_name(&grid.metric, &grid.row_key, &grid.col_key, &ablation_name(&runs, &sweeps));
            let out = app.exports.join(format!("{name}.png"));
            let (rows, columns, metric) = (grid.row_key, grid.col_key, grid.metric);
            app.send(Request::ExportHeatmap { runs, rows, columns, metric, out });
        }
    }
}

/// The ablation table of the ablation runs whose data is loaded, and how many still load.
pub fn ablation_table(app: &App) -> (Table, usize) {
    let ids = app.ablation_runs();
    let loaded: Vec<(&RunRecord, &RunData)> =
        ids.iter().filter_map(|id| Some((app.snapshot.run(*id)?, app.details.get(id)?))).collect();
    let inputs: Vec<RunInput> = loaded.iter().map(|(record, d)| RunInput { record, metrics: &d.metrics }).collect();
    let mut table = Table::build(&inputs);
    if let Some((col, desc)) = app.ablation.sort {
        table.sort_by_column(col, desc);
    }
    (table, ids.len() - loaded.len())
}

fn draw_ablation(frame: &mut Frame, area: Rect, app: &App) {
    let (table, loading) = ablation_table(app);
    if table.rows.is_empty() {
        let text = if loading > 0 {
            format!("loading {}…", crate::wording::count(loading, "run"))
        } else {
            "No runs to tabulate: mark runs on the Runs screen with space, or finish some (every visible finished run is used when none is marked).".into()
        };
        frame.render_widget(Paragraph::new(text).wrap(Wrap { trim: true }), area);
        return;
    }
    let [table_area, note_area] = Layout::vertical([Constraint::Min(0), Constraint::Length(2)]).areas(area);
    let header_cells = table.header();
    // The configuration (layer, keys, seeds) always shows; metric columns are dropped from
    // the right when the terminal is too narrow, the header saying how many.
    let fixed = 2 + table.keys.len();
    let best = table.best_rows();
    let sort = app.ablation.sort;
    let texts: Vec<Vec<String>> = (0..table.rows.len()).map(|r| table.cells_text(r)).collect();
    let wanted: Vec<Wanted> = header_cells
        .iter()
        .enumerate()
        .map(|(i, h)| {
            // Two cells for the sort mark.
            let natural = texts.iter().map(|t| t[i].chars().count()).fold(h.chars().count() + 2, usize::max) as u16;
            if i < fixed {
                Wanted::core(natural)
            } else {
                Wanted::capped(natural, 24)
            }
        })
        .collect();
    let fitted = fit_widths(&wanted, table_area.width.saturating_sub(2), 2);
    let header: Vec<Cell> = fitted
        .columns
        .iter()
        .map(|&i| {
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
            Cell::from(format!("{}{mark}", header_cells[i]))
        })
        .collect();
    let (constraints, header) = fitted.layout(header);
    let header = Row::new(header).style(bold().fg(Color::Cyan));
    let rows: Vec<Row> = texts
        .iter()
        .enumerate()
        .map(|(r, texts)| {
            Row::new(
                fitted
                    .columns
                    .iter()
                    .map(|&i| {
                        let is_best = i >= fixed && best[i - fixed].contains(&r);
                        let style = if is_best { bold().fg(Color::Green) } else { Style::default() };
                        Cell::from(texts[i].clone()).style(style)
                    })
                    .collect::<Vec<_>>(),
            )
        })
        .collect();
    let title = format!("Ablation: {} configurations, mean ± std over seeds (best in green)", table.rows.len());
    frame.render_widget(
        TableWidget::new(rows, constraints)
            .header(header)
            .column_spacing(2)
            .block(Block::default().borders(Borders::ALL).title(title)),
        table_area,
    );
    let mut note = crate::wording::count(table.rows.iter().map(|r| r.runs.len()).sum::<usize>(), "run");
    if loading > 0 {
        note.push_str(&format!(" · {loading} still loading"));
    }
    if fitted.hidden > 0 {
        let columns = match fitted.hidden {
            1 => "1 column does not fit".to_string(),
            n => format!("{n} columns do not fit"),
        };
        note.push_str(&format!(" · {columns}: widen the terminal, or export the whole table (M, T, C)"));
    }
    frame.render_widget(Paragraph::new(note).style(dim()).wrap(Wrap { trim: true }), note_area);
}
