//! The Ablation screen's heatmap view: one metric of the ablation runs over two of the keys
//! that differ between them, as coloured blocks with their values (shades of `░▒▓█` without
//! colours).

use crate::ablation::{RunInput, Table};
use crate::heatmap::{metric_columns, Grid, LAYER};
use crate::heatmap_figure::colour;
use crate::store::RunRecord;
use crate::tui::app::App;
use crate::tui::data::RunData;
use crate::tui::ui::{bold, dim};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph, Wrap};
use ratatui::Frame;
use std::collections::BTreeSet;

/// How the marked runs would have to change for a grid that the runs refuse.
const NARROW: &str = "mark only runs that share one value of each on the Runs screen";

/// Shades from the worst cell to the best, for terminals without colours.
const SHADES: [char; 4] = ['░', '▒', '▓', '█'];

/// The keys that differ between the rows of `table`, the layer included when several are.
pub fn varying_keys(table: &Table) -> Vec<String> {
    let mut keys = table.keys.clone();
    let layers: BTreeSet<&str> = table.rows.iter().map(|r| r.layer.as_str()).collect();
    if layers.len() > 1 {
        keys.push(LAYER.into());
    }
    keys
}

/// The ordered pairs of `n` keys, the first of each pair on the rows.
fn pairs(n: usize) -> Vec<(usize, usize)> {
    (0..n).flat_map(|a| (0..n).filter(move |b| *b != a).map(move |b| (a, b))).collect()
}

/// What the view shows: the axes and the metric chosen, or why there is nothing to show.
pub struct Choice {
    pub rows: String,
    pub columns: String,
    pub metric: String,
    pub grid: Result<Grid, String>,
    /// How many axis pairs and metrics there are to cycle through.
    pub pairs: usize,
    pub metrics: usize,
}

/// The heatmap of the ablation runs whose data is loaded, with the axes and metric chosen
/// by the screen's state (indices taken modulo what there is).
pub fn choice(app: &App) -> Result<Choice, String> {
    let ids = app.ablation_runs();
    let loaded: Vec<(&RunRecord, &RunData)> =
        ids.iter().filter_map(|id| Some((app.snapshot.run(*id)?, app.details.get(id)?))).collect();
    let inputs: Vec<RunInput> = loaded.iter().map(|(record, d)| RunInput { record, metrics: &d.metrics }).collect();
    let table = Table::build(&inputs);
    let keys = varying_keys(&table);
    let pairs = pairs(keys.len());
    if pairs.is_empty() {
        return Err(format!(
            "a heatmap needs two keys that differ between the runs; these differ in {}",
            if keys.is_empty() { "none".to_string() } else { keys.join(", ") }
        ));
    }
    let metrics = metric_columns(&table);
    let Some(&column) = metrics.get(app.ablation.metric % metrics.len().max(1)) else {
        return Err("these runs recorded no evaluation metric".into());
    };
    let (a, b) = pairs[app.ablation.axes % pairs.len()];
    let metric = table.columns[column].title();
    let grid = Grid::build(&inputs, &keys[a], &keys[b], Some(&metric)).map_err(|e| e.describe(NARROW));
    Ok(Choice {
        rows: keys[a].clone(),
        columns: keys[b].clone(),
        metric,
        grid,
        pairs: pairs.len(),
        metrics: metrics.len(),
    })
}

/// Draws the heatmap view in `area`.
pub fn draw(frame: &mut Frame, area: Rect, app: &App) {
    let block = |title: String| Block::default().borders(Borders::ALL).title(title);
    let choice = match choice(app) {
        Ok(c) => c,
        Err(why) => {
            let text = Paragraph::new(why).wrap(Wrap { trim: true });
            frame.render_widget(text.block(block("Heatmap (h: back to the table)".into())), area);
            return;
        }
    };
    let title = format!(
        "Heatmap: {} over {} × {} (x: axes, m: metric, p: export PNG, h: table)",
        choice.metric, choice.rows, choice.columns
    );
    let grid = match choice.grid {
        Ok(grid) => grid,
        Err(why) => {
            frame.render_widget(Paragraph::new(why).wrap(Wrap { trim: true }).block(block(title)), area);
            return;
        }
    };
    let outer = block(title);
    let inner = outer.inner(area);
    frame.render_widget(outer, area);
    let [cells_area, legend_area] = Layout::vertical([Constraint::Min(0), Constraint::Length(2)]).areas(inner);
    draw_cells(frame, cells_area, &grid);
    frame.render_widget(Paragraph::new(legend(&grid)).wrap(Wrap { trim: true }), legend_area);
}

fn draw_cells(frame: &mut Frame, area: Rect, grid: &Grid) {
    let width = |t: &str| t.chars().count() as u16;
    let label_w = grid.rows.iter().map(|r| width(r)).chain([width(&grid.row_key)]).max().unwrap_or(1) + 2;
    let values = (0..grid.rows.len()).flat_map(|r| (0..grid.columns.len()).map(move |c| (r, c)));
    let cell_w = values
        .map(|(r, c)| width(&grid.value_text(r, c)))
        .chain(grid.columns.iter().map(|c| width(c)))
        .max()
        .unwrap_or(1)
        + 4;
    // Three lines a cell when they fit, else one.
    let cell_h: u16 = if (grid.rows.len() as u16).saturating_mul(3) + 1 < area.height { 3 } else { 1 };
    let y0 = area.y;
    let header = Line::from(vec![
        Span::styled(format!("{:<w$}", grid.row_key, w = label_w as usize), bold()),
        Span::styled(grid.columns.iter().map(|c| format!("{c:^w$}", w = cell_w as usize)).collect::<String>(), bold()),
    ]);
    // The column key over the column values, the row key over the row values.
    let keys = Line::from(vec![Span::raw(" ".repeat(label_w as usize)), Span::styled(grid.col_key.clone(), dim())]);
    let mut lines = vec![keys, header];
    let colours = crate::colour::enabled();
    let best = grid.best();
    for r in 0..grid.rows.len() {
        for k in 0..cell_h {
            let middle = k == cell_h / 2;
            let label = if middle { grid.rows[r].clone() } else { String::new() };
            let mut spans = vec![Span::styled(format!("{label:<w$}", w = label_w as usize), bold())];
            for c in 0..grid.columns.len() {
                spans.push(cell_span(grid, r, c, cell_w as usize, middle, colours, best == Some((r, c))));
            }
            lines.push(Line::from(spans));
        }
    }
    let height = (lines.len() as u16).min(area.height);
    frame.render_widget(Paragraph::new(lines), Rect { y: y0, height, ..area });
}

/// One line of one cell: its colour (or shade) and, on the middle line, its value.
fn cell_span(grid: &Grid, r: usize, c: usize, width: usize, middle: bool, colours: bool, best: bool) -> Span<'static> {
    let value = grid.value_text(r, c);
    let Some(cell) = &grid.cells[r][c] else {
        let text = if middle { format!("{value:^width$}") } else { " ".repeat(width) };
        return Span::styled(text, dim());
    };
    let t = grid.goodness(cell.stat.mean);
    let mut style = if best { bold() } else { Style::default() };
    if colours {
        let rgb = colour(t);
        let light = 0.299 * rgb.0 as f64 + 0.587 * rgb.1 as f64 + 0.114 * rgb.2 as f64 > 140.0;
        let ink = if light { Color::Black } else { Color::White };
        style = style.bg(Color::Rgb(rgb.0, rgb.1, rgb.2)).fg(ink);
        let text = if middle { format!("{value:^width$}") } else { " ".repeat(width) };
        return Span::styled(text, style);
    }
    // Without colours: the cell filled with its shade, the value cut into the middle line.
    let shade = SHADES[((t * (SHADES.len() - 1) as f64).round() as usize).min(SHADES.len() - 1)];
    let fill = shade.to_string().repeat(width);
    if !middle {
        return Span::raw(fill);
    }
    let shown = format!(" {value} ");
    let pad = width.saturating_sub(shown.chars().count());
    let text = format!("{}{shown}{}", shade.to_string().repeat(pad / 2), shade.to_string().repeat(pad - pad / 2));
    if best {
        style = style.add_modifier(Modifier::REVERSED);
    }
    Span::styled(text, style)
}

/// The line under the cells: how to read the colours, and the best cell.
fn legend(grid: &Grid) -> Line<'static> {
    let scale = if crate::colour::enabled() { "dark → bright" } else { "░ → █" };
    let mut parts = vec![format!("worst {scale} best, mean over seeds; – no run")];
    if let Some((r, c)) = grid.best() {
        parts.push(format!(
            "best: {}={}, {}={}: {}",
            grid.row_key,
            grid.rows[r],
            grid.col_key,
            grid.columns[c],
            grid.cell_text(r, c)
        ));
    }
    Line::from(Span::styled(parts.join(" · "), dim()))
}
