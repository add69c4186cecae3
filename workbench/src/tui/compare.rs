//! The Compare screen: panels side by side for the selected runs — loss and the task metric
//! against step (or wall time), and, from the per-iteration diagnostics at the last
//! evaluation, energy, effective rank and angle against the layer iteration, plus the task
//! metric against evaluation depth. Each run has one colour; the training depth is marked
//! so test-time extrapolation beyond it is visible.

use super::chart::{bounds, downsample, labels, log10, smooth};
use super::data::RunData;
use super::ui::fit_title;
use crate::plot::{angle_data, depth_series, energy_data, erank_data, training_depth, IterationData};
use crate::store::{MetricRow, RunRecord};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Axis, Block, Borders, Chart, Dataset, GraphType, Paragraph, Wrap};
use ratatui::Frame;
use std::cell::{OnceCell, RefCell};

/// Run colours, in legend order.
pub const PALETTE: [Color; 10] = [
    Color::Cyan,
    Color::LightRed,
    Color::LightGreen,
    Color::Yellow,
    Color::LightMagenta,
    Color::LightBlue,
    Color::Rgb(255, 165, 0),
    Color::Rgb(180, 180, 180),
    Color::Rgb(0, 200, 160),
    Color::Rgb(200, 120, 255),
];

/// The colour of the `i`-th run.
pub fn colour(i: usize) -> Color {
    PALETTE[i % PALETTE.len()]
}

/// Display toggles.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Options {
    /// Exponential smoothing of the step curves.
    pub smooth: bool,
    /// Wall time instead of step on the x axis of the step curves.
    pub wall_time: bool,
    /// Logarithmic y axis.
    pub log_y: bool,
    /// The sphere panel (token trajectories of the first run) beside the six panels.
    pub sphere: bool,
    /// The sphere panel's view angle, in degrees.
    pub yaw: i16,
}

/// The (x, y) points of a curve.
pub type Points = Vec<(f64, f64)>;

/// One curve of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct Curve {
    /// Index of the run (its colour).
    pub run: usize,
    pub points: Vec<(f64, f64)>,
    /// Evaluation points (drawn dotted) rather than a training curve.
    pub eval: bool,
}

/// One panel ready to draw.
#[derive(Debug, Clone, PartialEq)]
pub struct Panel {
    pub title: String,
    pub x_label: &'static str,
    pub curves: Vec<Curve>,
    /// Training depth per run (vertical marks).
    pub marks: Vec<(usize, f64)>,
    /// What to say when there is nothing to draw.
    pub empty: &'static str,
    /// The y values are log10 of the data (the axis labels show the data's values).
    pub log_y: bool,
    /// The curves downsampled for the last width drawn (`columns`, curves): most frames
    /// redraw the same data at the same size.
    pub sampled: RefCell<Option<(usize, Vec<Points>)>>,
    /// The axes' bounds over every point of the curves, found at the first draw: the curves do
    /// not change once built, and the scan over all points was half of a cached frame.
    bounds: OnceCell<Option<([f64; 2], [f64; 2])>>,
}

impl Panel {
    fn new(title: String, x_label: &'static str, empty: &'static str) -> Panel {
        Panel {
            title,
            x_label,
            curves: vec![],
            marks: vec![],
            empty,
            log_y: false,
            sampled: RefCell::new(None),
            bounds: OnceCell::new(),
        }
    }
}

/// A run as the panels need it.
pub struct Input<'a> {
    pub record: &'a RunRecord,
    pub data: Option<&'a RunData>,
}

fn step_points(metrics: &[MetricRow], split: &str, name: &str, wall_time: bool) -> Vec<(f64, f64)> {
    let mut points: Vec<(f64, f64)> = metrics
        .iter()
        .filter(|m| m.split == split && m.name == name)
        .map(|m| (if wall_time { m.wall_time } else { m.step as f64 }, m.value))
        .filter(|(x, y)| x.is_finite() && y.is_finite())
        .collect();
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    points
}

/// The headline metric of a run: the task's first declared metric, else the first eval metric
/// other than the loss.
pub fn headline(record: &RunRecord, data: &RunData) -> Option<String> {
    record.headline().map(|h| h.name.clone()).or_else(|| crate::plot::headline_metric(&data.metrics))
}

/// Builds the six panels of the Compare screen.
pub fn panels(runs: &[Input<'_>], opts: Options) -> Vec<Panel> {
    let x_step = if opts.wall_time { "wall time (s)" } else { "step" };
    let transform = |mut p: Vec<(f64, f64)>, smoothable: bool| {
        if smoothable && opts.smooth {
            p = smooth(&p, 0.1);
        }
        p
    };
    let mut loss = Panel::new("loss (train ─, eval ·)".into(), x_step, "no loss recorded yet");
    let mut metric = Panel::new("task metric (eval)".into(), x_step, "no evaluation yet");
    let iteration_panel = |title: &str, empty| {
        Panel::new(format!("{title} vs iteration (last eval; ┊ training depth)"), "iteration t", empty)
    };
    let mut energy = iteration_panel("energy", "no energy: the layer defines none, or no evaluation yet");
    energy.title = "energy vs iteration (total ─, parts ·; ┊ training depth)".into();
    let mut erank = iteration_panel("effective rank", "no diagnostics yet");
    let mut angle = iteration_panel("mean angle (deg)", "no diagnostics yet");
    let mut depth = Panel::new(
        "task metric vs eval depth (┊ training depth)".into(),
        "iterations",
        "evaluated at one depth only (set eval_depths)",
    );
    let mut metric_names = Vec::new();
    for (i, run) in runs.iter().enumerate() {
        let Some(data) = run.data else { continue };
        for (split, eval) in [("train", false), ("eval", true)] {
            let p = transform(step_points(&data.metrics, split, "loss", opts.wall_time), !eval);
            if !p.is_empty() {
                loss.curves.push(Curve { run: i, points: p, eval });
            }
        }
        let name = headline(run.record, data);
        if let Some(name) = &name {
            let p = transform(step_points(&data.metrics, "eval", name, opts.wall_time), false);
            if !p.is_empty() {
                metric.curves.push(Curve { run: i, points: p, eval: true });
                if !metric_names.contains(name) {
                    metric_names.push(name.clone());
                }
            }
        }
        let train_depth = training_depth(&run.record.config, &data.diagnostics);
        for (panel, d) in [
            (&mut energy, energy_data(&data.diagnostics)),
            (&mut erank, erank_data(&data.diagnostics)),
            (&mut angle, angle_data(&data.diagnostics)),
        ] {
            add_iteration(panel, i, d, &transform);
        }
        if let Some(series) = name.as_ref().and_then(|n| depth_series(&data.metrics, n, train_depth)) {
            if series.points.len() > 1 {
                depth.curves.push(Curve { run: i, points: transform(series.points, false), eval: true });
                if let Some(t) = train_depth {
                    depth.marks.push((i, f64::from(t)));
                }
            }
        }
    }
    if !metric_names.is_empty() {
        metric.title = format!("{} (eval)", metric_names.join(", "));
        depth.title = format!("{} vs eval depth (┊ training depth)", metric_names.join(", "));
    }
    let mut out = vec![loss, metric, energy, erank, angle, depth];
    if opts.log_y {
        for p in &mut out {
            to_log_scale(p);
        }
    }
    out
}

/// What a panel says when every value is <= 0 and the y axis is logarithmic.
pub const NOT_ON_A_LOG_SCALE: &str = "cannot be drawn on a log scale: every value is <= 0 (l: linear y axis)";

/// The panel with log10 of its y values; points <= 0 cannot be drawn and are left out, and
/// a panel left with none says why (rather than claiming there is no data).
fn to_log_scale(panel: &mut Panel) {
    let had_data = !panel.curves.is_empty();
    for c in &mut panel.curves {
        c.points = log10(&c.points);
    }
    panel.curves.retain(|c| !c.points.is_empty());
    if had_data && panel.curves.is_empty() {
        panel.empty = NOT_ON_A_LOG_SCALE;
    }
    panel.log_y = true;
    panel.title.push_str(" [log10]");
}

/// An axis label for the log10 value `v`: the value itself, short (`1e-3`, `0.01`, `2.5`).
pub fn log_label(v: f64) -> String {
    let real = 10f64.powf(v);
    if (0.01..10_000.0).contains(&real) {
        let decimals = (2.0 - real.log10().floor()).clamp(0.0, 4.0) as usize;
        let text = format!("{real:.decimals$}");
        if text.contains('.') {
            text.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            text
        }
    } else {
        format!("{real:.1e}").replace(".0e", "e")
    }
}

fn add_iteration(
    panel: &mut Panel,
    run: usize,
    data: IterationData,
    transform: &impl Fn(Vec<(f64, f64)>, bool) -> Vec<(f64, f64)>,
) {
    let mut any = false;
    for (i, s) in data.series.into_iter().enumerate() {
        let p = transform(s.points, false);
        if !p.is_empty() {
            // The first curve (the total energy) solid, the parts dotted.
            panel.curves.push(Curve { run, points: p, eval: i > 0 });
            any = true;
        }
    }
    if let (true, Some(t)) = (any, data.training_depth) {
        panel.marks.push((run, f64::from(t)));
    }
}

/// Draws one panel into `area`, downsampling every curve to the area's resolution.
pub fn draw_panel(frame: &mut Frame, area: Rect, panel: &Panel) {
    let title = fit_title(&panel.title, area.width.saturating_sub(2) as usize);
    let block = Block::default()
        .borders(Borders::ALL)
        .title(Span::styled(title, Style::default().add_modifier(Modifier::BOLD)));
    let found = *panel.bounds.get_or_init(|| bounds(panel.curves.iter().map(|c| c.points.as_slice())));
    let Some((x, y)) = found else {
        let text = Paragraph::new(panel.empty)
            .block(block)
            .wrap(Wrap { trim: true })
            .style(Style::default().fg(Color::DarkGray));
        frame.render_widget(text, area);
        return;
    };
    // Braille cells hold 2 x 4 dots: two points per column keep every dot meaningful.
    let columns = (area.width as usize).saturating_sub(10).max(1) * 2;
    let mut cache = panel.sampled.borrow_mut();
    if cache.as_ref().map(|(c, _)| *c) != Some(columns) {
        let curves = panel.curves.iter().map(|c| downsample(&c.points, x[0], x[1], columns)).collect();
        *cache = Some((columns, curves));
    }
    let sampled = &cache.as_ref().expect("just filled").1;

    let marks: Vec<[(f64, f64); 2]> = panel.marks.iter().map(|(_, t)| [(*t, y[0]), (*t, y[1])]).collect();
    let mut datasets = Vec::with_capacity(sampled.len() + marks.len());
    for ((run, _), mark) in panel.marks.iter().zip(&marks) {
        if (x[0]..=x[1]).contains(&mark[0].0) {
            datasets.push(
                Dataset::default()
                    .marker(Marker::Dot)
                    .graph_type(GraphType::Line)
                    .style(Style::default().fg(colour(*run)).add_modifier(Modifier::DIM))
                    .data(mark),
            );
        }
    }
    for (curve, points) in panel.curves.iter().zip(sampled) {
        let (marker, graph) =
            if curve.eval { (Marker::Dot, GraphType::Scatter) } else { (Marker::Braille, GraphType::Line) };
        let graph = if curve.eval && points.len() > 1 { GraphType::Line } else { graph };
        datasets.push(
            Dataset::default()
                .marker(marker)
                .graph_type(graph)
                .style(Style::default().fg(colour(curve.run)))
                .data(points),
        );
    }
    let axis_style = Style::default().fg(Color::Gray);
    let chart = Chart::new(datasets)
        .block(block)
        .x_axis(
            Axis::default()
                .title(panel.x_label)
                .style(axis_style)
                .bounds(x)
                .labels(labels(x[0], x[1], &x).into_iter().map(Line::from).collect::<Vec<_>>()),
        )
        .y_axis(Axis::default().style(axis_style).bounds(y).labels(y_labels(panel, y, plot_rows(area))));
    frame.render_widget(chart, area);
}

/// The rows a chart in `area` plots on: inside its border, above the x axis and its labels.
fn plot_rows(area: Rect) -> u16 {
    area.height.saturating_sub(4)
}

/// The y axis labels: bottom, middle and top (as the data's values on a log scale); on two
/// rows, bottom and top, and on one none (ratatui spaces labels over the rows, and needs two
/// or none), so that no two share a row and overwrite each other into a number that is not
/// there.
fn y_labels(panel: &Panel, y: [f64; 2], rows: u16) -> Vec<Line<'static>> {
    let at = match rows {
        0 | 1 => vec![],
        2 => vec![y[0], y[1]],
        _ => vec![y[0], (y[0] + y[1]) / 2.0, y[1]],
    };
    let texts = if panel.log_y { at.iter().map(|v| log_label(*v)).collect() } else { labels(y[0], y[1], &at) };
    texts.into_iter().map(Line::from).collect()
}

/// Draws the legend line and the six panels (3 x 2, or stacked when narrow).
pub fn draw(frame: &mut Frame, area: Rect, legend: &[String], panels: &[Panel], opts: Options) {
    let toggles = format!(
        "[m] smoothing {}  [w] x: {}  [l] log y {}  [s] sphere {}",
        on_off(opts.smooth),
        if opts.wall_time { "wall time" } else { "step" },
        on_off(opts.log_y),
        on_off(opts.sphere)
    );
    // The legend takes at most a third of the height, so the panels keep theirs.
    let lines = legend_lines(legend, &toggles, area.width, (area.height / 3).max(1));
    let [top, body] = Layout::vertical([Constraint::Length(lines.len() as u16), Constraint::Min(0)]).areas(area);
    frame.render_widget(Paragraph::new(lines), top);
    let (cols, rows) = if body.width >= 120 {
        (3, 2)
    } else if body.width >= 60 {
        (2, 3)
    } else {
        (1, 6)
    };
    let row_areas = Layout::vertical(vec![Constraint::Ratio(1, rows); rows as usize]).split(body);
    for (r, row) in row_areas.iter().enumerate() {
        let cells = Layout::horizontal(vec![Constraint::Ratio(1, cols); cols as usize]).split(*row);
        for (c, cell) in cells.iter().enumerate() {
            if let Some(panel) = panels.get(r * cols as usize + c) {
                draw_panel(frame, *cell, panel);
            }
        }
    }
}

/// The legend as lines of at most `width` cells, at most `max_lines` of them: one coloured
/// entry per run, then the toggles; entries that do not fit become `+N more`.
pub fn legend_lines(legend: &[String], toggles: &str, width: u16, max_lines: u16) -> Vec<Line<'static>> {
    let width = width.max(1) as usize;
    let max_lines = max_lines.max(1) as usize;
    let mut lines: Vec<Vec<Span<'static>>> = vec![vec![]];
    let mut used = 0;
    let mut shown = 0;
    for (i, text) in legend.iter().enumerate() {
        let text: String = text.chars().take(width.saturating_sub(5)).collect();
        let w = text.chars().count() + 5;
        if used > 0 && used + w > width {
            if lines.len() == max_lines {
                break;
            }
            lines.push(vec![]);
            used = 0;
        }
        let line = lines.last_mut().expect("never empty");
        line.push(Span::styled("■ ", Style::default().fg(colour(i))));
        line.push(Span::raw(format!("{text}   ")));
        used += w;
        shown += 1;
    }
    let hidden = legend.len() - shown;
    if hidden > 0 {
        // Make room for the count on the last line by dropping entries from its end.
        let more = format!("+{hidden} more");
        let line = lines.last_mut().expect("never empty");
        let mut hidden = hidden;
        while line.len() > 2 && used + more.len() > width {
            let text = line.pop().expect("an entry");
            line.pop();
            used -= text.content.chars().count() + 2;
            hidden += 1;
        }
        line.push(Span::styled(format!("+{hidden} more"), Style::default().fg(Color::Yellow)));
    }
    let toggles_fit = used + toggles.len() <= width;
    if toggles_fit {
        lines
            .last_mut()
            .expect("never empty")
            .push(Span::styled(toggles.to_string(), Style::default().fg(Color::DarkGray)));
    } else if lines.len() < max_lines {
        lines.push(vec![Span::styled(toggles.to_string(), Style::default().fg(Color::DarkGray))]);
    }
    lines.into_iter().map(Line::from).collect()
}

fn on_off(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A panel drawn `height` rows high, as text.
    fn drawn(height: u16) -> String {
        let mut panel = Panel::new("energy vs iteration".into(), "iteration t", "no data");
        panel.curves.push(Curve { run: 0, points: vec![(0.0, -5858.0), (4.0, 8795.0), (8.0, 1200.0)], eval: false });
        let backend = ratatui::backend::TestBackend::new(40, height);
        let mut terminal = ratatui::Terminal::new(backend).unwrap();
        terminal.draw(|frame| draw_panel(frame, frame.area(), &panel)).unwrap();
        let buffer = terminal.backend().buffer().clone();
        (0..height)
            .map(|y| (0..40).map(|x| buffer[(x, y)].symbol().to_string()).collect::<String>())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The y axis labels of a panel drawn `height` rows high, top to bottom.
    fn y_labels_drawn(height: u16) -> Vec<String> {
        let text = drawn(height);
        let lines: Vec<&str> = text.lines().collect();
        // Between the border and the axis, above the x axis's line and labels.
        lines[1..lines.len() - 3]
            .iter()
            .filter_map(|line| line.split('│').nth(1).map(str::trim).filter(|l| !l.is_empty()).map(String::from))
            .collect()
    }

    #[test]
    fn y_labels_never_share_a_row() {
        // Tall: bottom, middle and top.
        let tall = y_labels_drawn(12);
        assert_eq!(tall.len(), 3, "{}", drawn(12));
        // Two rows to plot on: bottom and top, never the middle written over the bottom.
        assert_eq!(y_labels_drawn(6), vec![tall[0].clone(), tall[2].clone()], "{}", drawn(6));
        // One row: none (drawn without a panic).
        let flat = drawn(5);
        assert!(tall.iter().all(|label| !flat.contains(label.as_str())), "{flat}");
    }

    #[test]
    fn titles_drop_their_legends_before_what_they_draw_and_the_log_scale() {
        let title = "energy vs iteration (total ─, parts ·; ┊ training depth) [log10]";
        assert_eq!(fit_title(title, 80), title);
        assert_eq!(fit_title(title, 40), "energy vs iteration [log10]");
        let two = "top1 (eval) vs depth (┊ training depth)";
        assert_eq!(fit_title(two, 30), "top1 (eval) vs depth");
        assert_eq!(fit_title(two, 12), "top1 vs dep…");
    }
}
