//! A heatmap ([`crate::heatmap::Grid`]) drawn with plotters into PNG or SVG: one coloured
//! cell per configuration annotated with its value, the keys as axis labels and a colour bar.
//! The colours run from the worst value to the best, so the best cell is always the
//! brightest whichever direction the metric improves in.

use crate::figure::{render, DrawResult, FAMILY};
use crate::figure_ticks::tick_label;
use crate::heatmap::{Grid, EMPTY};
use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::Path;

/// Viridis at five stops: ordered in lightness, readable in grey and by most colour-blind
/// readers.
const STOPS: [(f64, f64, f64); 5] =
    [(68.0, 1.0, 84.0), (59.0, 82.0, 139.0), (33.0, 145.0, 140.0), (94.0, 201.0, 98.0), (253.0, 231.0, 37.0)];
const MISSING: RGBColor = RGBColor(235, 235, 235);

const CELL_H: i32 = 60;
const TOP: i32 = 96;
const BAR_W: i32 = 22;

/// The colour of `t` in 0..=1 (0: worst, 1: best).
pub fn colour(t: f64) -> RGBColor {
    let t = if t.is_finite() { t.clamp(0.0, 1.0) } else { 0.0 };
    let x = t * (STOPS.len() - 1) as f64;
    let i = (x.floor() as usize).min(STOPS.len() - 2);
    let f = x - i as f64;
    let (a, b) = (STOPS[i], STOPS[i + 1]);
    let mix = |p: f64, q: f64| (p + (q - p) * f).round() as u8;
    RGBColor(mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
}

/// Black on light colours, white on dark ones.
fn ink(c: RGBColor) -> RGBColor {
    let luminance = 0.299 * c.0 as f64 + 0.587 * c.1 as f64 + 0.114 * c.2 as f64;
    if luminance > 140.0 {
        BLACK
    } else {
        WHITE
    }
}

/// The image size the grid needs: room for the labels, the cells and the colour bar.
pub fn size_of(grid: &Grid) -> (u32, u32) {
    let (left, cell_w) = widths(grid);
    let w = left + cell_w * grid.columns.len() as i32 + 40 + BAR_W + 90;
    let h = TOP + CELL_H * grid.rows.len() as i32 + 40;
    (w.max(480) as u32, h.max(300) as u32)
}

/// Width of the row labels' column and of a cell, from the longest texts (about 9 pixels
/// per character at the label size).
fn widths(grid: &Grid) -> (i32, i32) {
    let chars = |t: &str| t.chars().count() as i32;
    let labels = grid.rows.iter().map(|r| chars(r)).chain([chars(&grid.row_key)]).max().unwrap_or(4);
    let cells = (0..grid.rows.len())
        .flat_map(|r| (0..grid.columns.len()).map(move |c| (r, c)))
        .map(|(r, c)| chars(&grid.cell_text(r, c)))
        .chain(grid.columns.iter().map(|c| chars(c)))
        .max()
        .unwrap_or(6);
    (40 + labels * 9, (cells * 8 + 24).max(90))
}

fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, grid: &Grid) -> DrawResult
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let (left, cell_w) = widths(grid);
    let font = |size: i32| (FAMILY, size).into_font();
    let centred = Pos::new(HPos::Center, VPos::Center);
    let direction = match grid.higher_is_better {
        Some(true) => ", higher is better",
        Some(false) => ", lower is better",
        None => "",
    };
    let title = format!("{} (mean over seeds{direction})", grid.metric);
    let right = left + cell_w * grid.columns.len() as i32;
    root.draw(&Text::new(title, (16, 14), font(20).color(&BLACK)))?;
    // The column key over the column values; the row key over the row values.
    let mid = (left + right) / 2;
    root.draw(&Text::new(grid.col_key.clone(), (mid, TOP - 44), font(16).color(&BLACK).pos(centred)))?;
    root.draw(&Text::new(
        grid.row_key.clone(),
        (left - 12, TOP - 18),
        font(16).color(&BLACK).pos(Pos::new(HPos::Right, VPos::Center)),
    ))?;
    for (c, value) in grid.columns.iter().enumerate() {
        let x = left + cell_w * c as i32 + cell_w / 2;
        root.draw(&Text::new(value.clone(), (x, TOP - 18), font(15).color(&BLACK).pos(centred)))?;
    }
    let best = grid.best();
    for (r, value) in grid.rows.iter().enumerate() {
        let y = TOP + CELL_H * r as i32;
        root.draw(&Text::new(
            value.clone(),
            (left - 12, y + CELL_H / 2),
            font(15).color(&BLACK).pos(Pos::new(HPos::Right, VPos::Center)),
        ))?;
        for c in 0..grid.columns.len() {
            let x = left + cell_w * c as i32;
            let (fill, text, detail) = match &grid.cells[r][c] {
                Some(cell) => {
                    let spread = if cell.stat.n > 1 {
                        format!("± {:.*}  n={}", grid.digits, cell.stat.std, cell.stat.n)
                    } else {
                        "n=1".into()
                    };
                    (colour(grid.goodness(cell.stat.mean)), grid.value_text(r, c), spread)
                }
                None => (MISSING, EMPTY.to_string(), String::new()),
            };
            root.draw(&Rectangle::new([(x, y), (x + cell_w, y + CELL_H)], fill.filled()))?;
            root.draw(&Rectangle::new([(x, y), (x + cell_w, y + CELL_H)], WHITE.stroke_width(1)))?;
            let colour_of_text = if fill == MISSING { RGBColor(120, 120, 120) } else { ink(fill) };
            let at = if detail.is_empty() { y + CELL_H / 2 } else { y + CELL_H / 2 - 8 };
            root.draw(&Text::new(text, (x + cell_w / 2, at), font(16).color(&colour_of_text).pos(centred)))?;
            if !detail.is_empty() {
                let style = font(11).color(&colour_of_text).pos(centred);
                root.draw(&Text::new(detail, (x + cell_w / 2, y + CELL_H / 2 + 12), style))?;
            }
        }
    }
    if let Some((r, c)) = best {
        let (x, y) = (left + cell_w * c as i32, TOP + CELL_H * r as i32);
        root.draw(&Rectangle::new([(x + 1, y + 1), (x + cell_w - 1, y + CELL_H - 1)], BLACK.stroke_width(3)))?;
    }
    draw_colour_bar(&root, grid, right + 40)
}

/// The colour bar right of the cells: the best value at the top.
fn draw_colour_bar<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, grid: &Grid, x: i32) -> DrawResult
where
    DB::ErrorType: 'static,
{
    let Some((lo, hi)) = grid.range() else { return Ok(()) };
    let (top, height) = (TOP, (CELL_H * grid.rows.len() as i32).max(120));
    let slices = 60;
    for i in 0..slices {
        // Slice 0 at the top is the best.
        let t = 1.0 - i as f64 / (slices - 1) as f64;
        let y0 = top + height * i / slices;
        let y1 = top + height * (i + 1) / slices;
        root.draw(&Rectangle::new([(x, y0), (x + BAR_W, y1 + 1)], colour(t).filled()))?;
    }
    root.draw(&Rectangle::new([(x, top), (x + BAR_W, top + height)], BLACK.stroke_width(1)))?;
    // The value at each end and the middle; which end is which follows the direction.
    let (best, worst) = if grid.higher_is_better == Some(false) { (lo, hi) } else { (hi, lo) };
    let style = (FAMILY, 13).into_font().color(&BLACK).pos(Pos::new(HPos::Left, VPos::Center));
    for (value, y) in [(best, top), ((lo + hi) / 2.0, top + height / 2), (worst, top + height)] {
        root.draw(&PathElement::new(vec![(x + BAR_W, y), (x + BAR_W + 4, y)], BLACK.stroke_width(1)))?;
        root.draw(&Text::new(tick_label(value, lo, hi), (x + BAR_W + 7, y), style.clone()))?;
    }
    Ok(())
}

/// Draws `grid` into `out` (PNG or SVG by its extension), sized to fit it.
pub fn write_image(grid: &Grid, out: &Path) -> Result<()> {
    crate::figure::register_font()?;
    render(out, size_of(grid), |area| draw(area, grid), |area| draw(area, grid))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ablation::Stat;
    use crate::heatmap::Cell;

    fn grid() -> Grid {
        let cell = |mean: f64, n: usize| Some(Cell { stat: Stat { mean, std: 0.01, n }, runs: vec![1] });
        Grid {
            row_key: "layers".into(),
            col_key: "iterations".into(),
            metric: "final cell_acc".into(),
            higher_is_better: Some(true),
            digits: 4,
            rows: vec!["1".into(), "2".into()],
            columns: vec!["2".into(), "4".into(), "8".into()],
            cells: vec![vec![cell(0.25, 2), cell(0.5, 1), None], vec![cell(0.75, 2), None, cell(0.125, 1)]],
        }
    }

    #[test]
    fn the_colour_map_runs_from_dark_to_bright() {
        assert_eq!(colour(0.0), RGBColor(68, 1, 84));
        assert_eq!(colour(1.0), RGBColor(253, 231, 37));
        assert_eq!(colour(f64::NAN), colour(0.0));
        let light = |c: RGBColor| c.0 as u32 + c.1 as u32 + c.2 as u32;
        assert!((0..10).all(|i| light(colour(i as f64 / 10.0)) < light(colour((i + 1) as f64 / 10.0))));
    }

    #[test]
    fn the_svg_names_the_keys_the_metric_and_every_value() {
        let dir = tempfile::Builder::new().prefix("workbench-heatmap-").tempdir().unwrap();
        let out = dir.path().join("heatmap.svg");
        write_image(&grid(), &out).unwrap();
        let svg = std::fs::read_to_string(&out).unwrap();
        for text in ["layers", "iterations", "final cell_acc", "0.2500", "0.7500", "0.1250", EMPTY, "n=2"] {
            assert!(svg.contains(text), "no `{text}` in the SVG");
        }
        // The best cell (0.75) is the brightest colour of the map.
        assert!(svg.contains("#FDE725"), "the best cell is not at the bright end");
        let bad = dir.path().join("heatmap.jpg");
        assert!(write_image(&grid(), &bad).is_err());
    }
}
