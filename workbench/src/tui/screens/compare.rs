//! The Compare screen: six panels side by side for the compared runs (drawing and panel
//! building in [`crate::tui::compare`]); its toggles, exports and panel cache; toggled with
//! `s`, the token trajectories of the first compared run ([`crate::tui::sphere`]); and, in
//! place of the panels with `d`, the runs' differences as a table ([`differences`]).

use crate::ops::export_names::compare_name;
use crate::store::RunRecord;
use crate::tui::app::App;
use crate::tui::compare::{self, Options, Panel};
use crate::tui::component::Component;
use crate::tui::draw_cache::DrawCache;
use crate::tui::keys::{cmd, hint, Action, Command, Key};
use crate::tui::layout::Areas;
use crate::tui::screens::differences;
use crate::tui::service::Request;
use crate::tui::sphere::{self, TrajectoryCache};
use ratatui::crossterm::event::KeyCode;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::widgets::{Paragraph, Wrap};
use ratatui::Frame;
use std::rc::Rc;

/// The Compare screen.
pub struct Compare;

/// What the cached panels were built from: run ids, data version, toggles.
pub type CompareKey = (Vec<i64>, u64, Options);

/// The toggles, and the panels last built (rebuilt only when their inputs change; filled
/// while drawing through a shared reference, as a cache that changes no visible state).
#[derive(Default)]
pub struct CompareState {
    pub options: Options,
    cache: DrawCache<CompareKey, Vec<Panel>>,
    /// The sphere panel's trajectories (of the first compared run).
    trajectories: TrajectoryCache,
    /// The differences table in place of the panels.
    pub differences: bool,
    /// The differences table last built.
    pub table: differences::TableCache,
    /// The differences table's first line shown.
    pub scroll: usize,
}

const COMMANDS: &[Command] = &[
    hint(&[Key::char('m')], "m", "smoothing", "smoothing of the step curves on / off", Action::ToggleSmooth),
    hint(&[Key::char('w')], "w", "x axis", "x axis: step or wall time", Action::ToggleWallTime),
    hint(&[Key::char('l')], "l", "log y", "logarithmic y axis on / off", Action::ToggleLogY),
    hint(
        &[Key::char('s')],
        "s",
        "sphere",
        "token trajectories on the sphere (first compared run) on / off",
        Action::ToggleSphere,
    ),
    sphere::TURN_LEFT,
    sphere::TURN_RIGHT,
    hint(
        &[Key::char('d')],
        "d",
        "differences",
        "the differences of the compared runs as a table (configuration, builds, final metrics), or the panels again",
        Action::ToggleDifferences,
    ),
    cmd(&[Key::char('j'), Key::plain(KeyCode::Down)], "j, ↓", "differences: scroll down", Action::Down(1)),
    cmd(&[Key::char('k'), Key::plain(KeyCode::Up)], "k, ↑", "differences: scroll up", Action::Up(1)),
    cmd(&[Key::plain(KeyCode::PageDown)], "PgDn", "differences: ten lines down", Action::Down(10)),
    cmd(&[Key::plain(KeyCode::PageUp)], "PgUp", "differences: ten lines up", Action::Up(10)),
    hint(
        &[Key::char('p')],
        "p",
        "export",
        "export the panels as PNG in the exports folder (--exports)",
        Action::ExportPng,
    ),
    cmd(&[Key::char('P')], "P", "export the panels as SVG in the exports folder (--exports)", Action::ExportSvg),
    cmd(&[Key::plain(KeyCode::Esc)], "Esc", "back to Runs", Action::Back),
];

impl Component for Compare {
    fn commands(&self) -> &'static [Command] {
        COMMANDS
    }

    fn act(&self, app: &mut App, action: Action) {
        let options = &mut app.compare.options;
        match action {
            Action::ToggleSmooth => options.smooth = !options.smooth,
            Action::ToggleWallTime => options.wall_time = !options.wall_time,
            Action::ToggleLogY => options.log_y = !options.log_y,
            Action::ToggleSphere => options.sphere = !options.sphere,
            Action::TurnLeft => options.yaw = sphere::turn(options.yaw, -1),
            Action::TurnRight => options.yaw = sphere::turn(options.yaw, 1),
            Action::ToggleDifferences => app.compare.differences = !app.compare.differences,
            Action::Down(n) if app.compare.differences => {
                app.compare.scroll = (app.compare.scroll + n).min(differences::last_scroll(app));
            }
            Action::Up(n) => app.compare.scroll = app.compare.scroll.saturating_sub(n),
            Action::ExportPng | Action::ExportSvg => {
                let ids = app.compared_runs();
                if ids.is_empty() {
                    app.say("no runs to export: mark some on the Runs screen with space", true);
                    return;
                }
                let ext = if action == Action::ExportPng { "png" } else { "svg" };
                let out = app.exports.join(format!("{}.{ext}", compare_name(&ids)));
                app.send(Request::ExportPlot { runs: ids, out });
            }
            _ => {}
        }
    }

    fn draw(&self, frame: &mut Frame, area: Rect, app: &App, _: &Areas) {
        if app.compared_runs().is_empty() {
            let text =
                "Nothing to compare: mark runs on the Runs screen with space (or put the cursor on one), then press c.";
            frame.render_widget(Paragraph::new(text).wrap(Wrap { trim: true }), area);
            return;
        }
        if app.compare.differences {
            differences::draw(frame, area, app, app.compare.scroll);
            return;
        }
        let (legend, panels) = panels(app);
        let options = app.compare.options;
        if !options.sphere {
            compare::draw(frame, area, &legend, &panels, options);
            return;
        }
        let [left, right] = Layout::horizontal([Constraint::Min(0), Constraint::Percentage(40)]).areas(area);
        compare::draw(frame, left, &legend, &panels, options);
        let (run, trajectories) = app.compare.trajectories.of(app, app.compared_runs().first().copied());
        sphere::draw(frame, right, &run, trajectories.as_ref().as_ref().map_err(String::as_str), options.yaw);
    }
}

/// The legend and the panels of the compared runs, from the cache when nothing changed.
pub fn panels(app: &App) -> (Vec<String>, Rc<Vec<Panel>>) {
    let ids = app.compared_runs();
    let records: Vec<&RunRecord> = ids.iter().filter_map(|id| app.snapshot.run(*id)).collect();
    let legend = crate::plot::run_legend(&records);
    let key = (ids.clone(), app.data_version, app.compare.options);
    let panels = app.compare.cache.get(key, || {
        let inputs: Vec<compare::Input> =
            records.iter().map(|r| compare::Input { record: r, data: app.details.get(&r.id) }).collect();
        compare::panels(&inputs, app.compare.options)
    });
    (legend, panels)
}
