//! Figures: runs compared in one image (PNG or SVG), panels side by side, drawn with plotters
//! from runs already read (`ops::export::plot` reads them for `workbench plot` and the TUI's
//! Compare export).

use crate::figure_labels::{place, EndLabel};
use crate::figure_ticks::tick_label;
use crate::plot::{self as data, IterationData, Panel, Series};
use crate::store::{DiagnosticRow, MetricRow, RunRecord};
use anyhow::{anyhow, bail, Context, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::Path;

/// DejaVu Sans, shipped in `workbench/assets` (see its README for the licence).
const FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");
pub(crate) const FAMILY: &str = "sans-serif";

pub(crate) const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
];

/// The output format, from the file extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Png,
    Svg,
}

pub fn format_of(path: &Path) -> Result<Format> {
    match path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase).as_deref() {
        Some("png") => Ok(Format::Png),
        Some("svg") => Ok(Format::Svg),
        _ => bail!("cannot write `{}`: the output file must end in .png or .svg", path.display()),
    }
}

/// One panel ready to draw: per run (index into the legend), its lines.
struct PanelPlot {
    title: String,
    x_label: &'static str,
    lines: Vec<(usize, Series)>,
    /// Vertical lines: (run index, x).
    vlines: Vec<(usize, f64)>,
    integer_x: bool,
}

/// One run as a figure draws it: its record (configuration, legend) and what it recorded.
pub struct FigureRun {
    pub record: RunRecord,
    pub metrics: Vec<MetricRow>,
    pub diagnostics: Vec<DiagnosticRow>,
}

fn build_panel(panel: Panel, runs: &[FigureRun]) -> PanelPlot {
    let mut lines = Vec::new();
    let mut vlines = Vec::new();
    let mut iteration_panel = |title: &str, f: fn(&[crate::store::DiagnosticRow]) -> IterationData| {
        for (i, r) in runs.iter().enumerate() {
            let d = f(&r.diagnostics);
            let show_labels = d.series.len() > 1;
            for mut s in d.series {
                if !show_labels {
                    s.label.clear();
                }
                lines.push((i, s));
            }
            if let Some(depth) = d.training_depth {
                vlines.push((i, depth as f64));
            }
        }
        PanelPlot {
            title: format!("{title} at the last evaluation (| training depth)"),
            x_label: "iteration t",
            lines: std::mem::take(&mut lines),
            vlines: std::mem::take(&mut vlines),
            integer_x: true,
        }
    };
    match panel {
        Panel::Energy => iteration_panel("energy", data::energy_data),
        Panel::Erank => iteration_panel("effective rank", data::erank_data),
        Panel::Angle => iteration_panel("mean token angle (deg)", data::angle_data),
        Panel::Loss => PanelPlot {
            title: "loss (solid: train, dashed: eval)".into(),
            x_label: "step",
            lines: runs
                .iter()
                .enumerate()
                .flat_map(|(i, r)| data::loss_series(&r.metrics).into_iter().map(move |s| (i, s)))
                .collect(),
            vlines: vec![],
            integer_x: true,
        },
        Panel::Metric => PanelPlot {
            title: "eval metrics".into(),
            x_label: "step",
            lines: runs
                .iter()
                .enumerate()
                .flat_map(|(i, r)| data::metric_series(&r.metrics).into_iter().map(move |s| (i, s)))
                .collect(),
            vlines: vec![],
            integer_x: true,
        },
        Panel::Depth => {
            let mut names = std::collections::BTreeSet::new();
            for (i, r) in runs.iter().enumerate() {
                let depth = data::training_depth(&r.record.config, &r.diagnostics);
                let declared = r.record.headline().map(|h| h.name.clone());
                if let Some(name) = declared.or_else(|| data::headline_metric(&r.metrics)) {
                    if let Some(s) = data::depth_series(&r.metrics, &name, depth) {
                        names.insert(name);
                        lines.push((i, Series { dashed: true, ..s }));
                    }
                }
                if let Some(depth) = depth {
                    vlines.push((i, depth as f64));
                }
            }
            let names: Vec<_> = names.into_iter().collect();
            let what = if names.is_empty() { "headline metric".to_string() } else { names.join(", ") };
            PanelPlot {
                title: format!("{what} at the last evaluation vs depth (| training depth)"),
                x_label: "evaluation depth (iterations)",
                lines,
                vlines,
                integer_x: true,
            }
        }
    }
}

fn range(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    let (lo, hi) =
        values.filter(|v| v.is_finite()).fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if lo > hi {
        return None;
    }
    let [lo, hi] = crate::axis_range::padded(lo, hi);
    Some((lo, hi))
}

pub(crate) type DrawResult = std::result::Result<(), Box<dyn std::error::Error>>;

/// Draws a figure in memory, as a PNG or an SVG as `out` is named, then writes `out` in one
/// go, so that a file that cannot be written (a folder without write access, a full disk) is
/// named with the system's reason rather than in the drawing library's words.
pub(crate) fn render(
    out: &Path,
    (w, h): (u32, u32),
    png: impl FnOnce(DrawingArea<BitMapBackend<'_>, Shift>) -> DrawResult,
    svg: impl FnOnce(DrawingArea<SVGBackend<'_>, Shift>) -> DrawResult,
) -> Result<()> {
    let drawn = |e: Box<dyn std::error::Error>| anyhow!("cannot draw {}: {e}", out.display());
    let bytes = match format_of(out)? {
        Format::Png => {
            let mut rgb = vec![0u8; w as usize * h as usize * 3];
            png(BitMapBackend::with_buffer(&mut rgb, (w, h)).into_drawing_area()).map_err(drawn)?;
            encode_png(&rgb, (w, h)).map_err(|e| anyhow!("cannot encode {}: {e}", out.display()))?
        }
        Format::Svg => {
            let mut text = String::new();
            svg(SVGBackend::with_string(&mut text, (w, h)).into_drawing_area()).map_err(drawn)?;
            text.into_bytes()
        }
    };
    std::fs::write(out, bytes).with_context(|| format!("cannot write {}", out.display()))
}

fn encode_png(rgb: &[u8], (w, h): (u32, u32)) -> std::result::Result<Vec<u8>, png::EncodingError> {
    let mut bytes = Vec::new();
    let mut encoder = png::Encoder::new(&mut bytes, w, h);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    encoder.write_header()?.write_image_data(rgb)?;
    Ok(bytes)
}

fn draw_panel<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, p: &PanelPlot) -> DrawResult
where
    DB::ErrorType: 'static,
{
    let x_range =
        range(p.lines.iter().flat_map(|(_, s)| s.points.iter().map(|q| q.0)).chain(p.vlines.iter().map(|v| v.1)));
    let y_range = range(p.lines.iter().flat_map(|(_, s)| s.points.iter().map(|q| q.1)));
    let (Some((x0, x1)), Some((y0, y1))) = (x_range, y_range) else {
        // No data: the frame, the title and a note.
        let mut chart = ChartBuilder::on(area)
            .caption(&p.title, (FAMILY, 18))
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(50)
            .build_cartesian_2d(0f64..1f64, 0f64..1f64)?;
        chart.configure_mesh().disable_mesh().x_labels(0).y_labels(0).x_desc(p.x_label).draw()?;
        chart.draw_series(std::iter::once(Text::new(
            "no data",
            (0.45, 0.5),
            (FAMILY, 20).into_font().color(&BLACK),
        )))?;
        return Ok(());
    };
    let mut chart = ChartBuilder::on(area)
        .caption(&p.title, (FAMILY, 18))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(x0..x1, y0..y1)?;
    let integer_x = p.integer_x;
    chart
        .configure_mesh()
        .light_line_style(RGBColor(235, 235, 235))
        .x_desc(p.x_label)
        .x_label_formatter(&|x: &f64| {
            // Steps and iterations are whole: fractional ticks there are left blank.
            if integer_x && (x - x.round()).abs() > 1e-9 {
                String::new()
            } else {
                tick_label(*x, x0, x1)
            }
        })
        .y_label_formatter(&|y: &f64| tick_label(*y, y0, y1))
        .label_style((FAMILY, 13))
        .draw()?;
    for (run, x) in &p.vlines {
        let c = PALETTE[run % PALETTE.len()].mix(0.6);
        chart.draw_series(DashedLineSeries::new([(*x, y0), (*x, y1)], 4, 4, c.stroke_width(1)))?;
    }
    let mut end_labels = Vec::new();
    for (run, s) in &p.lines {
        let color = PALETTE[run % PALETTE.len()];
        if s.dashed {
            chart.draw_series(DashedLineSeries::new(s.points.iter().copied(), 8, 5, color.stroke_width(2)))?;
            chart.draw_series(s.points.iter().map(|q| Circle::new(*q, 3, color.filled())))?;
        } else {
            chart.draw_series(LineSeries::new(s.points.iter().copied(), color.stroke_width(2)))?;
            if s.points.len() == 1 {
                chart.draw_series(s.points.iter().map(|q| Circle::new(*q, 3, color.filled())))?;
            }
        }
        if let (false, Some(last)) = (s.label.is_empty(), s.points.last()) {
            end_labels.push((s.label.clone(), color, chart.backend_coord(last)));
        }
    }
    draw_end_labels(area, chart.plotting_area().get_pixel_range().1.start, &end_labels)
}

/// Draws each curve's label at its end, moved where it would cover another (train and eval
/// curves often end at the same point); `top` is the plot's top pixel.
fn draw_end_labels<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    top: i32,
    labels: &[(String, RGBColor, (i32, i32))],
) -> DrawResult
where
    DB::ErrorType: 'static,
{
    let font = (FAMILY, 12).into_font();
    let mut placing = Vec::with_capacity(labels.len());
    for (text, _, anchor) in labels {
        let (width, height) = area.estimate_text_size(text, &TextStyle::from(font.clone()))?;
        // A few pixels between two labels: the estimate is the glyphs' box, and labels that
        // only just clear each other read as one.
        placing.push(EndLabel { anchor: *anchor, size: (width, height + 4) });
    }
    // The anchors are backend pixels; the area draws relative to its own corner.
    let base = area.get_base_pixel();
    for ((text, color, _), at) in labels.iter().zip(place(&placing, top)) {
        let style = font.clone().color(color).pos(Pos::new(HPos::Right, VPos::Bottom));
        area.draw(&Text::new(text.clone(), (at.0 - base.0, at.1 - base.1), style))?;
    }
    Ok(())
}

fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, legend: &[String], panels: &[PanelPlot]) -> DrawResult
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let line_h = 22;
    let legend_h = (legend.len() as u32 * line_h as u32 + 16).min(root.dim_in_pixel().1 / 3);
    let (top, body) = root.split_vertically(legend_h);
    for (i, text) in legend.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let y = 8 + i as i32 * line_h;
        top.draw(&PathElement::new(vec![(16, y + 9), (48, y + 9)], color.stroke_width(3)))?;
        top.draw(&Text::new(text.clone(), (56, y), (FAMILY, 16).into_font().color(&BLACK)))?;
    }
    let cols = if panels.len() > 1 { 2 } else { 1 };
    let rows = panels.len().div_ceil(cols);
    let areas = body.split_evenly((rows, cols));
    for (area, p) in areas.iter().zip(panels) {
        draw_panel(area, p)?;
    }
    root.present()?;
    Ok(())
}

/// Makes the embedded font the one plotters draws [`FAMILY`] with.
pub(crate) fn register_font() -> Result<()> {
    plotters::style::register_font(FAMILY, FontStyle::Normal, FONT).map_err(|_| anyhow!("the embedded font is invalid"))
}

/// Draws `panels` of `runs` into `out` (PNG or SVG by its extension) at `size` pixels.
pub fn write_image(runs: &[FigureRun], panels: &[Panel], out: &Path, size: (u32, u32)) -> Result<()> {
    let legend = data::run_legend(&runs.iter().map(|r| &r.record).collect::<Vec<_>>());
    let plots: Vec<PanelPlot> = panels.iter().map(|p| build_panel(*p, runs)).collect();
    register_font()?;
    render(out, size, |area| draw(area, &legend, &plots), |area| draw(area, &legend, &plots))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(metrics: Vec<MetricRow>) -> FigureRun {
        let config = json!({"layer_config": {}, "task_config": {}, "train": {"seed": 0}});
        let record = RunRecord { last_step: 4, total_steps: Some(4), ..RunRecord::fixture(1, "hyperset", config) };
        FigureRun { record, metrics, diagnostics: vec![] }
    }

    /// The `x` and `y` attributes of the SVG text element that says `label`.
    fn text_at(svg: &str, label: &str) -> (String, String) {
        // plotters writes the text on a line of its own.
        let end = [format!(">\n{label}\n</text>"), format!(">{label}</text>")]
            .iter()
            .find_map(|t| svg.find(t.as_str()))
            .unwrap_or_else(|| panic!("no `{label}` in the SVG"));
        let tag = &svg[svg[..end].rfind("<text").unwrap()..end];
        let attr = |name: &str| {
            let start = tag.find(&format!(" {name}=\"")).unwrap() + name.len() + 3;
            tag[start..].split('"').next().unwrap().to_string()
        };
        (attr("x"), attr("y"))
    }

    #[test]
    fn a_figure_is_written_whole_or_the_file_is_named_with_the_reason() {
        let dir = tempfile::Builder::new().prefix("workbench-render-").tempdir().unwrap();
        let png_red = |area: DrawingArea<BitMapBackend<'_>, Shift>| -> DrawResult { Ok(area.fill(&RED)?) };
        let svg_red = |area: DrawingArea<SVGBackend<'_>, Shift>| -> DrawResult { Ok(area.fill(&RED)?) };
        let png = dir.path().join("red.png");
        render(&png, (30, 20), png_red, svg_red).unwrap();
        let mut reader = png::Decoder::new(std::fs::File::open(&png).unwrap()).read_info().unwrap();
        let mut pixels = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut pixels).unwrap();
        assert_eq!((info.width, info.height), (30, 20));
        assert_eq!(&pixels[..3], &[255, 0, 0]);
        // A directory where the file should go: the system's reason, not the drawing library's.
        let taken = dir.path().join("taken.svg");
        std::fs::create_dir(&taken).unwrap();
        let err = render(&taken, (30, 20), png_red, svg_red).unwrap_err();
        assert!(
            format!("{err:#}").starts_with(&format!("cannot write {}: Is a directory", taken.display())),
            "{err:#}"
        );
    }

    #[test]
    fn train_and_eval_labels_are_apart_when_their_curves_end_at_the_same_point() {
        let m = |step: u64, split: &str, value: f64| MetricRow {
            step,
            split: split.into(),
            name: "loss".into(),
            value,
            wall_time: step as f64,
        };
        let metrics =
            vec![m(1, "train", 2.0), m(2, "train", 1.5), m(4, "train", 1.0), m(2, "eval", 1.8), m(4, "eval", 1.0)];
        let out = tempfile::Builder::new().prefix("workbench-figure-labels-").suffix(".svg").tempfile().unwrap();
        write_image(&[run(metrics)], &[Panel::Loss], out.path(), (800, 500)).unwrap();
        let svg = std::fs::read_to_string(out.path()).unwrap();
        let (train, eval) = (text_at(&svg, "train loss"), text_at(&svg, "eval loss"));
        assert_eq!(train.0, eval.0, "both end at the same step");
        assert_ne!(train.1, eval.1, "the labels are drawn on top of each other");
    }
}
