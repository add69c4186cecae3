//! The Compare screen's differences table (`d`): what `workbench runs diff` prints for the
//! compared runs ([`crate::ops::diff`]), one column per run in its Compare colour: the
//! configuration keys whose values are not the same in every run, the plugin builds when
//! they differ, and every final metric, the best of each metric's row in bold.

use crate::ops::diff::{self, RunDiff};
use crate::store::{MetricSummary, PluginRef, RunRecord};
use crate::tui::app::App;
use crate::tui::column_fit::{fit_widths, Wanted};
use crate::tui::compare::colour;
use crate::tui::draw_cache::DrawCache;
use crate::tui::ui::{bold, cut_to_width, dim};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Style;
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Table as TableWidget, Wrap};
use ratatui::Frame;
use std::rc::Rc;

/// Widest a run's column gets (longer values are cut): a build, `energy-transformer 0.1.0
/// 7dd4dc63`, whole.
const RUN_COLUMN: u16 = 32;

/// Before each name, under its section's title.
const INDENT: &str = "  ";

/// One line of the table: a section's title, or a name with one value per run.
#[derive(Debug, Clone, PartialEq)]
pub enum Line {
    Section(&'static str),
    Values {
        name: String,
        values: Vec<String>,
        /// Which values are the row's best (bold); none for a row without a direction.
        best: Vec<bool>,
    },
}

/// The table's lines for `diff` of `runs` (in the diff's order).
pub fn lines(diff: &RunDiff) -> Vec<Line> {
    let plain = |name: String, values: Vec<String>| {
        let best = vec![false; values.len()];
        Line::Values { name, values, best }
    };
    let mut lines = vec![Line::Section("configuration")];
    if diff.config.is_empty() {
        lines.push(plain("the same in every run".into(), Vec::new()));
    }
    for c in &diff.config {
        lines.push(plain(c.key.clone(), c.values.values.iter().map(|v| v.clone().unwrap_or("-".into())).collect()));
    }
    if !diff.plugins.is_empty() {
        lines.push(Line::Section("plugin builds"));
        for p in &diff.plugins {
            lines.push(plain(p.role.to_string(), p.builds.iter().map(build_text).collect()));
        }
    }
    lines.push(Line::Section("final metrics"));
    if diff.metrics.is_empty() {
        lines.push(plain("none recorded yet".into(), Vec::new()));
    }
    for m in &diff.metrics {
        let values = &m.values.values;
        let best = m.best();
        let text = values.iter().map(|v| v.map_or("-".into(), |x| diff::value_text(&m.split, &m.name, x))).collect();
        lines.push(Line::Values { name: format!("{} {}", m.split, m.name), values: text, best });
    }
    lines
}

/// `hyperset 0.1.0 7dd4dc63`: a plugin build, short enough for a column.
fn build_text(p: &PluginRef) -> String {
    match &p.build {
        Some(build) => format!("{} {} {}", p.name, p.version, &build[..build.len().min(8)]),
        None => format!("{} {}", p.name, p.version),
    }
}

/// The diff of the compared runs from the snapshot, or why there is none.
fn compared(app: &App) -> Result<RunDiff, String> {
    let ids = app.compared_runs();
    let runs: Vec<&RunRecord> = ids.iter().filter_map(|id| app.snapshot.run(*id)).collect();
    if runs.len() < 2 {
        return Err("The differences need two runs or more: mark them on the Runs screen with space.".into());
    }
    let summaries: Vec<MetricSummary> =
        ids.iter().filter_map(|id| app.snapshot.summaries.get(id)).flatten().cloned().collect();
    diff::compare(&runs, &summaries).map_err(|e| e.to_string())
}

/// The diff of the compared runs and its lines, built once per snapshot and set of runs.
pub struct Table {
    diff: RunDiff,
    lines: Vec<Line>,
}

/// Where [`Table`] is kept between frames: keyed by the compared runs and the snapshot read.
pub type TableCache = DrawCache<(Vec<i64>, u64), Result<Table, String>>;

/// The table of the compared runs, from the cache when neither they nor the snapshot changed.
fn table(app: &App) -> Rc<Result<Table, String>> {
    let key = (app.compared_runs(), app.snapshot_version);
    app.compare.table.get(key, || compared(app).map(|diff| Table { lines: lines(&diff), diff }))
}

/// How many of the table's lines show in an area `height` cells high (its borders, its
/// header and the note under it take four).
fn visible_lines(height: u16) -> usize {
    usize::from(height.saturating_sub(4)).max(1)
}

/// The furthest the table scrolls in the screen's body: its last line at the bottom.
pub fn last_scroll(app: &App) -> usize {
    let count = table(app).as_ref().as_ref().map_or(0, |t| t.lines.len());
    count.saturating_sub(visible_lines(app.areas.body.height))
}

/// Draws the table from line `scroll` on, with a note of what is left out below it.
pub fn draw(frame: &mut Frame, area: Rect, app: &App, scroll: usize) {
    let table = table(app);
    let Table { diff, lines } = match table.as_ref() {
        Ok(table) => table,
        Err(why) => {
            frame.render_widget(Paragraph::new(why.as_str()).wrap(Wrap { trim: true }), area);
            return;
        }
    };
    let [table_area, note_area] = Layout::vertical([Constraint::Min(0), Constraint::Length(1)]).areas(area);
    let heads: Vec<String> = diff.runs.iter().map(|id| format!("run {id}")).collect();
    let cells = |i: usize| -> Vec<usize> {
        lines
            .iter()
            .filter_map(|l| match l {
                Line::Values { values, .. } => values.get(i).map(|v| v.chars().count()),
                Line::Section(_) => None,
            })
            .collect()
    };
    let names = lines.iter().map(|l| match l {
        Line::Section(title) => title.chars().count(),
        Line::Values { name, .. } => INDENT.len() + name.chars().count(),
    });
    let mut wanted = vec![Wanted::core(names.max().unwrap_or(0) as u16)];
    for (i, head) in heads.iter().enumerate() {
        let natural = cells(i).into_iter().fold(head.chars().count(), usize::max) as u16;
        wanted.push(Wanted::capped(natural, RUN_COLUMN));
    }
    let fitted = fit_widths(&wanted, table_area.width.saturating_sub(2), 2);
    let (constraints, header) = fitted.layout(
        fitted
            .columns
            .iter()
            .map(|&c| match c {
                0 => Cell::from(""),
                c => Cell::from(heads[c - 1].clone()).style(bold().fg(colour(c - 1))),
            })
            .collect(),
    );
    let header = Row::new(header);
    let visible = visible_lines(area.height);
    let scroll = scroll.min(lines.len().saturating_sub(visible));
    let rows: Vec<Row> = lines
        .iter()
        .skip(scroll)
        .take(visible)
        .map(|line| match line {
            Line::Section(title) => Row::new([Cell::from(*title).style(bold())]),
            Line::Values { name, values, best } => {
                Row::new(fitted.columns.iter().zip(&fitted.widths).map(|(&c, &width)| match c {
                    0 => Cell::from(format!("{INDENT}{name}")),
                    c => {
                        let style = if best.get(c - 1) == Some(&true) { bold() } else { Style::default() };
                        let value = values.get(c - 1).cloned().unwrap_or_default();
                        Cell::from(cut_to_width(value, usize::from(width))).style(style)
                    }
                }))
            }
        })
        .collect();
    let title = format!(
        "Differences of {} runs: {}, {} (best in bold)",
        diff.runs.len(),
        crate::wording::count(diff.config.len(), "configuration key"),
        crate::wording::count(diff.metrics.len(), "final metric"),
    );
    frame.render_widget(
        TableWidget::new(rows, constraints)
            .header(header)
            .column_spacing(2)
            .block(Block::default().borders(Borders::ALL).title(title)),
        table_area,
    );
    let mut note = Vec::new();
    if lines.len() > visible {
        let last = (scroll + visible).min(lines.len());
        note.push(format!("lines {}-{last} of {} (j/k, PgUp/PgDn scroll)", scroll + 1, lines.len()));
    }
    if fitted.hidden > 0 {
        note.push(format!(
            "{} do not fit: widen the terminal, or `workbench runs diff {}`",
            crate::wording::count(fitted.hidden, "run"),
            diff.runs.iter().map(i64::to_string).collect::<Vec<_>>().join(" ")
        ));
    }
    frame.render_widget(Paragraph::new(note.join(" · ")).style(dim()), note_area);
}
