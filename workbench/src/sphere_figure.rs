//! The token trajectories of one run drawn in 3-D with plotters (`workbench plot --sphere`):
//! each token a coloured polyline from its input (hollow circle) to its last iteration
//! (filled circle), over a light wireframe of the unit sphere when the heads have p = 3. A
//! PCA projection of wider heads is not on a sphere, so it gets axes only.

use crate::figure::{register_font, render, DrawResult, FAMILY, PALETTE};
use crate::sphere::Trajectories;
use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::f64::consts::PI;
use std::path::Path;

/// Circles of latitude and meridians of the wireframe, and the points per circle.
const LATITUDES: usize = 5;
const MERIDIANS: usize = 8;
const CIRCLE_POINTS: usize = 72;

/// The title: run, step, head, and what the coordinates are.
pub fn title(run_label: &str, t: &Trajectories) -> String {
    format!("{run_label} · step {} · head {} · {}", t.step, t.head, t.describe())
}

/// The wireframe of the unit sphere as polylines (plotters' axes: y is up).
pub fn wireframe() -> Vec<Vec<(f64, f64, f64)>> {
    let mut lines = Vec::new();
    for k in 1..=LATITUDES {
        let lat = -PI / 2.0 + PI * k as f64 / (LATITUDES + 1) as f64;
        let (r, y) = (lat.cos(), lat.sin());
        lines.push(
            (0..=CIRCLE_POINTS)
                .map(|i| {
                    let a = 2.0 * PI * i as f64 / CIRCLE_POINTS as f64;
                    (r * a.cos(), y, r * a.sin())
                })
                .collect(),
        );
    }
    for k in 0..MERIDIANS {
        let lon = PI * k as f64 / MERIDIANS as f64;
        lines.push(
            (0..=CIRCLE_POINTS)
                .map(|i| {
                    let a = 2.0 * PI * i as f64 / CIRCLE_POINTS as f64;
                    (a.cos() * lon.cos(), a.sin(), a.cos() * lon.sin())
                })
                .collect(),
        );
    }
    lines
}

/// The half-width of the cube drawn: the unit sphere's, or the data's for a projection.
fn extent(t: &Trajectories) -> f64 {
    let data = t.tokens.iter().flatten().flat_map(|p| p.iter().map(|v| v.abs())).fold(0.0f64, f64::max);
    if t.on_sphere() {
        data.max(1.0) * 1.05
    } else if data > 0.0 {
        data * 1.1
    } else {
        1.0
    }
}

/// Stored `(x, y, z)` to plotters' `(x, y, z)`, whose y axis is the vertical one.
fn to_chart(p: &[f64; 3]) -> (f64, f64, f64) {
    (p[0], p[2], p[1])
}

fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, title: &str, t: &Trajectories) -> DrawResult
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let e = extent(t);
    let mut chart =
        ChartBuilder::on(&root).caption(title, (FAMILY, 20)).margin(20).build_cartesian_3d(-e..e, -e..e, -e..e)?;
    chart.with_projection(|mut p| {
        p.pitch = 0.35;
        p.yaw = 0.6;
        p.scale = 0.85;
        p.into_matrix()
    });
    chart
        .configure_axes()
        .light_grid_style(RGBColor(240, 240, 240))
        .max_light_lines(4)
        .label_style((FAMILY, 12))
        .draw()?;
    if t.on_sphere() {
        let grey = RGBColor(200, 200, 200);
        for line in wireframe() {
            chart.draw_series(LineSeries::new(line, grey.stroke_width(1)))?;
        }
    }
    for (i, points) in t.tokens.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let line: Vec<_> = points.iter().map(to_chart).collect();
        chart
            .draw_series(LineSeries::new(line.clone(), color.stroke_width(2)))?
            .label(format!("token {i}"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(3)));
        if let (Some(first), Some(last)) = (line.first(), line.last()) {
            chart.draw_series([Circle::new(*first, 5, color.stroke_width(2))])?;
            chart.draw_series([Circle::new(*last, 5, color.filled())])?;
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(180, 180, 180))
        .label_font((FAMILY, 14))
        .draw()?;
    let note = if t.on_sphere() {
        "○ input (t = 0)   ● last iteration"
    } else {
        "○ input (t = 0)   ● last iteration   (not re-normalised)"
    };
    root.draw(&Text::new(note, (20, root.dim_in_pixel().1 as i32 - 30), (FAMILY, 14).into_font().color(&BLACK)))?;
    root.present()?;
    Ok(())
}

/// Draws `t` into `out` (PNG or SVG by its extension) at `size` pixels; `run_label` starts
/// the title (e.g. `run 3: hyperset`).
pub fn write_image(run_label: &str, t: &Trajectories, out: &Path, size: (u32, u32)) -> Result<()> {
    register_font()?;
    let title = title(run_label, t);
    render(out, size, |area| draw(area, &title, t), |area| draw(area, &title, t))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trajectories(dim: usize, explained: Option<f64>) -> Trajectories {
        let token = |phase: f64| (0..5).map(|t| t as f64 * 0.2 + phase).map(|a| [a.cos(), a.sin(), 0.0]).collect();
        Trajectories { step: 40, dim, head: 0, explained, tokens: vec![token(0.0), token(1.0)] }
    }

    #[test]
    fn the_wireframe_lies_on_the_unit_sphere() {
        let lines = wireframe();
        assert_eq!(lines.len(), LATITUDES + MERIDIANS);
        for (x, y, z) in lines.into_iter().flatten() {
            assert!(((x * x + y * y + z * z).sqrt() - 1.0).abs() < 1e-12);
        }
    }

    fn svg_texts(t: &Trajectories) -> String {
        let out = tempfile::Builder::new().prefix("workbench-sphere-").suffix(".svg").tempfile().unwrap();
        write_image("run 7: hyperset", t, out.path(), (900, 700)).unwrap();
        std::fs::read_to_string(out.path()).unwrap()
    }

    #[test]
    fn the_figure_names_run_step_head_tokens_and_projection() {
        let svg = svg_texts(&trajectories(3, None));
        for text in ["run 7: hyperset · step 40 · head 0 · p = 3 heads", "token 0", "token 1"] {
            assert!(svg.contains(text), "{text} missing");
        }
        let svg = svg_texts(&trajectories(16, Some(0.873)));
        assert!(svg.contains("PCA of 16-dim heads (87 % variance)"));
        assert!(svg.contains("not re-normalised"));
        assert!(write_image("run 7", &trajectories(3, None), Path::new("x.jpg"), (100, 100)).is_err());
    }
}
