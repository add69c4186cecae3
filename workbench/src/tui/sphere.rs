//! The sphere panel of the Compare and Live screens: a run's token trajectories
//! ([`crate::sphere`]) drawn on a braille canvas by an orthographic projection, turned with
//! `[` / `]`. Each token has its run-palette colour and its number printed at its last point,
//! so the tokens stay apart without colours (`NO_COLOR`).

use super::compare::colour;
use crate::sphere::Trajectories;
use crate::tui::app::App;
use crate::tui::draw_cache::DrawCache;
use crate::tui::keys::{cmd, Action, Command, Key};
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::canvas::{Canvas, Context, Line as Segment};
use ratatui::widgets::{Block, Borders, Paragraph, Wrap};
use ratatui::Frame;
use std::f64::consts::PI;
use std::rc::Rc;

/// Degrees the view turns per key press.
pub const TURN_DEGREES: i16 = 15;
/// How far above the equator the viewer looks from: enough to see the sphere as a ball.
const ELEVATION_DEGREES: f64 = 20.0;
/// Points per circle of the wireframe.
const CIRCLE_POINTS: usize = 48;

/// A run's last recorded trajectories, or why there are none.
pub type Found = Rc<Result<Trajectories, String>>;

/// The trajectories a sphere panel last read, by run id and data version: read again only
/// when the run's data changed (a new evaluation), filled while drawing through a shared
/// reference, as a cache that changes no visible state.
#[derive(Debug, Clone, Default)]
pub struct TrajectoryCache(DrawCache<(i64, u64), Result<Trajectories, String>>);

impl TrajectoryCache {
    /// Run `id`'s name and its last recorded trajectories (or why there are none).
    pub fn of(&self, app: &App, id: Option<i64>) -> (String, Found) {
        let Some(id) = id else {
            return (String::new(), Rc::new(Err("no run to draw".to_string())));
        };
        let run = format!("run {id}");
        let Some(data) = app.details.get(&id) else {
            return (run, Rc::new(Err("loading…".to_string())));
        };
        let found = self.0.get((id, app.data_version), || {
            crate::sphere::trajectories(&data.diagnostics, None).map_err(|e| e.to_string())
        });
        (run, found)
    }
}

/// The keys that turn a sphere panel, on every screen that has one.
pub const TURN_LEFT: Command = cmd(&[Key::char('[')], "[", "turn the sphere view left", Action::TurnLeft);
pub const TURN_RIGHT: Command = cmd(&[Key::char(']')], "]", "turn the sphere view right", Action::TurnRight);

/// The view angle after turning `yaw` (degrees) by `steps` presses, kept in `0..360`.
pub fn turn(yaw: i16, steps: i16) -> i16 {
    (yaw + steps * TURN_DEGREES).rem_euclid(360)
}

/// Orthographic projection of `p` seen from azimuth `yaw` and elevation `elevation`
/// (degrees): the z axis is up on the screen. Lengths along the screen never grow, so the unit
/// sphere always projects inside the unit disc.
pub fn project(p: [f64; 3], yaw: f64, elevation: f64) -> (f64, f64) {
    let (s, c) = yaw.to_radians().sin_cos();
    let (x, depth) = (c * p[0] - s * p[1], s * p[0] + c * p[1]);
    let (se, ce) = elevation.to_radians().sin_cos();
    (x, p[2] * ce + depth * se)
}

/// The canvas bounds for `area` around `[-extent, extent]`: braille dots are about square
/// (2 × 4 per cell, cells about twice as tall as wide), so the wider side gets the longer range.
fn bounds(area: Rect, extent: f64) -> ([f64; 2], [f64; 2]) {
    let (w, h) = (area.width.saturating_sub(2).max(1) as f64, area.height.saturating_sub(2).max(1) as f64);
    let aspect = w / (2.0 * h);
    if aspect >= 1.0 {
        ([-extent * aspect, extent * aspect], [-extent, extent])
    } else {
        ([-extent, extent], [-extent / aspect, extent / aspect])
    }
}

fn polyline(ctx: &mut Context, points: &[(f64, f64)], color: Color) {
    for w in points.windows(2) {
        ctx.draw(&Segment { x1: w[0].0, y1: w[0].1, x2: w[1].0, y2: w[1].1, color });
    }
}

/// Equator and two meridians of the unit sphere, and its outline (always the unit circle).
fn wireframe(ctx: &mut Context, yaw: f64) {
    let circle = |f: &dyn Fn(f64) -> [f64; 3]| -> Vec<(f64, f64)> {
        (0..=CIRCLE_POINTS)
            .map(|i| project(f(2.0 * PI * i as f64 / CIRCLE_POINTS as f64), yaw, ELEVATION_DEGREES))
            .collect()
    };
    let grey = Color::DarkGray;
    let outline: Vec<(f64, f64)> =
        (0..=CIRCLE_POINTS).map(|i| 2.0 * PI * i as f64 / CIRCLE_POINTS as f64).map(|a| (a.cos(), a.sin())).collect();
    polyline(ctx, &outline, grey);
    polyline(ctx, &circle(&|a| [a.cos(), a.sin(), 0.0]), grey);
    polyline(ctx, &circle(&|a| [a.cos(), 0.0, a.sin()]), grey);
    polyline(ctx, &circle(&|a| [0.0, a.cos(), a.sin()]), grey);
}

/// The three coordinate axes through the origin, numbered (the principal components).
fn axes(ctx: &mut Context, yaw: f64, extent: f64) {
    for k in 0..3 {
        let mut end = [0.0; 3];
        end[k] = extent;
        let start = end.map(|v| -v);
        let (a, b) = (project(start, yaw, ELEVATION_DEGREES), project(end, yaw, ELEVATION_DEGREES));
        polyline(ctx, &[a, b], Color::DarkGray);
        ctx.print(b.0, b.1, Span::styled(format!("pc{}", k + 1), Style::default().fg(Color::DarkGray)));
    }
}

/// Draws the trajectories of `t` (or why there are none) into `area`; `run` names the run in
/// the title, `yaw` is the view angle in degrees.
pub fn draw(frame: &mut Frame, area: Rect, run: &str, t: Result<&Trajectories, &str>, yaw: i16) {
    let title = match t {
        Ok(t) => format!("tokens on the sphere · {run} · step {} · head {} · {}", t.step, t.head, t.describe()),
        Err(_) => format!("tokens on the sphere · {run}"),
    };
    let block = Block::default()
        .borders(Borders::ALL)
        .title(Span::styled(title, Style::default().add_modifier(Modifier::BOLD)))
        .title_bottom(Line::from(format!(" [ ] turn ({yaw}°) · number: last point, ○: input ")));
    let t = match t {
        Ok(t) => t,
        Err(why) => {
            let text =
                Paragraph::new(why).block(block).wrap(Wrap { trim: true }).style(Style::default().fg(Color::DarkGray));
            frame.render_widget(text, area);
            return;
        }
    };
    let extent = if t.on_sphere() {
        1.05
    } else {
        t.tokens.iter().flatten().flat_map(|p| p.iter().map(|v| v.abs())).fold(0.0f64, f64::max).max(1e-9) * 1.15
    };
    let (x, y) = bounds(area, extent);
    let yaw = f64::from(yaw);
    let canvas = Canvas::default().block(block).marker(Marker::Braille).x_bounds(x).y_bounds(y).paint(|ctx| {
        if t.on_sphere() {
            wireframe(ctx, yaw);
        } else {
            axes(ctx, yaw, extent);
        }
        ctx.layer();
        let projected: Vec<Vec<(f64, f64)>> = t
            .tokens
            .iter()
            .map(|points| points.iter().map(|p| project(*p, yaw, ELEVATION_DEGREES)).collect())
            .collect();
        for (i, points) in projected.iter().enumerate() {
            polyline(ctx, points, colour(i));
        }
        ctx.layer();
        for (i, points) in projected.iter().enumerate() {
            let style = Style::default().fg(colour(i)).add_modifier(Modifier::BOLD);
            if let (Some(first), Some(last)) = (points.first(), points.last()) {
                ctx.print(first.0, first.1, Span::styled("○", style));
                ctx.print(last.0, last.1, Span::styled(i.to_string(), style));
            }
        }
    });
    frame.render_widget(canvas, area);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: (f64, f64), b: (f64, f64)) -> bool {
        (a.0 - b.0).abs() < 1e-12 && (a.1 - b.1).abs() < 1e-12
    }

    #[test]
    fn the_projection_turns_about_the_vertical_axis() {
        // Seen from the side (no elevation): x to the right, z up, y away from the viewer.
        assert!(close(project([1.0, 0.0, 0.0], 0.0, 0.0), (1.0, 0.0)));
        assert!(close(project([0.0, 0.0, 1.0], 0.0, 0.0), (0.0, 1.0)));
        assert!(close(project([0.0, 1.0, 0.0], 0.0, 0.0), (0.0, 0.0)));
        // A quarter turn brings y to the front edge.
        assert!(close(project([0.0, 1.0, 0.0], 90.0, 0.0), (-1.0, 0.0)));
        // From above, the far side rises.
        let (_, up) = project([0.0, 1.0, 0.0], 0.0, 30.0);
        assert!((up - 0.5).abs() < 1e-12);
        // The unit sphere stays in the unit disc whatever the angles.
        for (yaw, el) in [(0.0, 0.0), (37.0, 20.0), (200.0, 75.0)] {
            for p in [[1.0, 0.0, 0.0], [0.0, 0.6, 0.8], [0.48, 0.6, 0.64]] {
                let (a, b) = project(p, yaw, el);
                assert!(a * a + b * b <= 1.0 + 1e-12, "{p:?} at {yaw}, {el}");
            }
        }
    }

    #[test]
    fn turning_wraps_around() {
        assert_eq!(turn(0, 1), TURN_DEGREES);
        assert_eq!(turn(0, -1), 360 - TURN_DEGREES);
        assert_eq!(turn(345, 1), 0);
    }

    #[test]
    fn bounds_keep_dots_square() {
        let (x, y) = bounds(Rect::new(0, 0, 82, 22), 1.0);
        assert_eq!(y, [-1.0, 1.0]);
        assert!((x[1] - 2.0).abs() < 1e-12);
        let (x, y) = bounds(Rect::new(0, 0, 22, 42), 1.0);
        assert_eq!(x, [-1.0, 1.0]);
        assert!((y[1] - 4.0).abs() < 1e-12);
    }
}
