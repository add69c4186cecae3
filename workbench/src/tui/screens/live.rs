//! The Live screen: the running (and recent) runs, and for the chosen one its progress, rate
//! and ETA, loss and metric curves beside its worker's system metrics, where its worker runs
//! and its last log lines; with `s`, its tokens' trajectories of the last evaluation
//! ([`crate::tui::sphere`]), redrawn as evaluations arrive.

use super::system_panel::{self, SystemView};
use crate::store::{MetricRow, RunStatus};
use crate::tui::app::App;
use crate::tui::compare;
use crate::tui::component::Component;
use crate::tui::draw_cache::DrawCache;
use crate::tui::keys::{cmd, hint, Action, Command, Key};
use crate::tui::layout::Areas;
use crate::tui::runs::format_duration;
use crate::tui::sphere::{self, TrajectoryCache};
use crate::tui::ui::shown_status_colour;
use ratatui::crossterm::event::KeyCode;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Gauge, List, ListItem, Paragraph, Wrap};
use ratatui::Frame;

/// The Live screen.
pub struct Live;

/// The run the Live screen shows.
#[derive(Debug, Clone, Default)]
pub struct LiveState {
    /// Chosen with j/k or Enter on the Runs screen; default: the first running run.
    pub run: Option<i64>,
    /// The sphere panel (the run's token trajectories) in place of the metric curves.
    pub sphere: bool,
    /// The sphere panel's view angle, in degrees.
    pub yaw: i16,
    trajectories: TrajectoryCache,
    /// The followed run's curve panels, by run id and data version.
    panels: DrawCache<(i64, u64), Vec<compare::Panel>>,
}

const COMMANDS: &[Command] = &[
    hint(&[Key::char('j'), Key::plain(KeyCode::Down)], "j, ↓", "another run", "next run", Action::Down(1)),
    cmd(&[Key::char('k'), Key::plain(KeyCode::Up)], "k, ↑", "previous run", Action::Up(1)),
    hint(&[Key::char('x')], "x", "stop", "stop the run, after confirmation", Action::StopRun),
    hint(
        &[Key::char('s')],
        "s",
        "sphere",
        "token trajectories on the sphere (last evaluation) in place of the metric curves, on / off",
        Action::ToggleSphere,
    ),
    sphere::TURN_LEFT,
    sphere::TURN_RIGHT,
    cmd(&[Key::plain(KeyCode::Esc)], "Esc", "back to Runs", Action::Back),
];

impl Component for Live {
    fn commands(&self) -> &'static [Command] {
        COMMANDS
    }

    fn act(&self, app: &mut App, action: Action) {
        let ids: Vec<i64> = app.live_candidates().iter().map(|r| r.id).collect();
        let at = app.live_id().and_then(|id| ids.iter().position(|i| *i == id)).unwrap_or(0);
        match action {
            Action::Down(n) if !ids.is_empty() => app.live.run = Some(ids[(at + n).min(ids.len() - 1)]),
            Action::Up(n) if !ids.is_empty() => app.live.run = Some(ids[at.saturating_sub(n)]),
            Action::StopRun => super::runs::ask_cancel(app, app.live_id().into_iter().collect()),
            Action::ToggleSphere => app.live.sphere = !app.live.sphere,
            Action::TurnLeft => app.live.yaw = sphere::turn(app.live.yaw, -1),
            Action::TurnRight => app.live.yaw = sphere::turn(app.live.yaw, 1),
            _ => {}
        }
    }

    fn draw(&self, frame: &mut Frame, area: Rect, app: &App, _: &Areas) {
        draw_live(frame, area, app)
    }
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

/// The examples the run's last evaluation scored (recorded with each evaluation).
fn eval_examples(app: &App, id: i64) -> Option<f64> {
    use crate::train::system;
    let summaries = app.snapshot.summaries.get(&id)?;
    summaries.iter().find(|s| s.split == system::SPLIT && s.name == system::EVAL_EXAMPLES).map(|s| s.last)
}

/// Narrowest each of the two curves beside the system panel is drawn before the list of runs
/// gives up room: first its status words (the names keep the status's colour), then itself
/// (j/k still switch runs, and the gauge's title names the one shown).
const CURVE_MIN_WIDTH: u16 = 24;

/// How the list of runs beside the Live screen's run is drawn in the width there is.
#[derive(Clone, Copy, PartialEq, Debug)]
enum RunList {
    Full,
    /// Ids and names, coloured by status.
    Names,
    Hidden,
}

impl RunList {
    /// The widest form that leaves the curves and the system panel their room in `width`.
    fn fitting(width: u16, full: u16, names: u16) -> RunList {
        let room = 2 * CURVE_MIN_WIDTH + system_panel::WIDTH;
        if width >= full + room {
            RunList::Full
        } else if width >= names + room {
            RunList::Names
        } else {
            RunList::Hidden
        }
    }
}

fn draw_live(frame: &mut Frame, area: Rect, app: &App) {
    let candidates = app.live_candidates();
    // As wide as the ids and the layers' names (a long one cut at 20), and the longest state
    // (`interrupted`), inside the border.
    let id_width = candidates.iter().map(|r| r.id.to_string().len()).max().unwrap_or(0).max(4);
    let name_width = candidates.iter().map(|r| r.layer.name.chars().count()).max().unwrap_or(0).clamp(5, 20);
    let names_width = (2 + id_width + 1 + name_width + 2) as u16;
    let full_width = names_width + 1 + "interrupted".len() as u16;
    let list = RunList::fitting(area.width, full_width, names_width);
    let list_width = match list {
        RunList::Full => full_width,
        RunList::Names => names_width,
        RunList::Hidden => 0,
    };
    let [list_area, main] = Layout::horizontal([Constraint::Length(list_width), Constraint::Min(0)]).areas(area);
    let live = app.live_id();
    let items: Vec<ListItem> = candidates
        .iter()
        .map(|r| {
            let mark = if Some(r.id) == live { "▶ " } else { "  " };
            let status = Style::default().fg(shown_status_colour(r));
            let mut spans = vec![Span::raw(format!("{mark}{:>id_width$} ", r.id))];
            if list == RunList::Full {
                spans.push(Span::raw(format!("{:<name_width$.name_width$} ", r.layer.name)));
                spans.push(Span::styled(r.shown_status(), status));
            } else {
                spans.push(Span::styled(format!("{:<name_width$.name_width$}", r.layer.name), status));
            }
            ListItem::new(Line::from(spans))
        })
        .collect();
    if list != RunList::Hidden {
        frame.render_widget(List::new(items).block(Block::default().borders(Borders::ALL).title("runs")), list_area);
    }
    let Some(run) = live.and_then(|id| app.snapshot.run(id)) else {
        frame.render_widget(
            Paragraph::new("No runs yet: launch one (n on the Runs screen, or the Launch screen).")
                .wrap(Wrap { trim: true })
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
    let mut title = format!("run {}: {} on {} ({})", run.id, run.layer.name, run.task.name, run.shown_status());
    if list == RunList::Hidden {
        let at = candidates.iter().position(|r| r.id == run.id).unwrap_or(0);
        title.push_str(&format!(" · {} of {}, j/k for another", at + 1, candidates.len()));
    }
    frame.render_widget(
        Gauge::default()
            .block(Block::default().borders(Borders::ALL).title(title))
            .gauge_style(Style::default().fg(shown_status_colour(run)))
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
    if let Some(n) = eval_examples(app, run.id) {
        info.push(format!("eval on {n:.0} examples"));
    }
    let mut lines = vec![Line::from(info.join(" · "))];
    if let Some(e) = &run.error {
        // An interruption (a stop asked for, a worker gone) keeps its checkpoint: no failure.
        let colour = if run.status == RunStatus::Interrupted { Color::Yellow } else { Color::Red };
        lines.push(Line::from(Span::styled(e.clone(), Style::default().fg(colour))));
    }
    if let Some(cause) = &run.supervision.cause {
        lines.push(Line::from(Span::styled(format!("cause: {cause}"), Style::default().fg(Color::Red))));
    }
    let s = &run.supervision;
    match ((&s.host, run.worker_pid), (&s.executor, &s.job_id)) {
        ((Some(host), Some(pid)), job) => {
            let job = match job {
                (Some(e), Some(j)) => format!(", {e} job {j}"),
                _ => String::new(),
            };
            lines.push(Line::from(format!("worker: process {pid} on {host}{job}")));
        }
        // Submitted, its worker not started: the scheduler's reason is in the log below.
        (_, (Some(e), Some(j))) if run.status == RunStatus::Queued => {
            lines.push(Line::from(format!("{e} job {j}: waiting to start (the log says why)")));
        }
        _ => {}
    }
    frame.render_widget(Paragraph::new(lines).wrap(Wrap { trim: true }), info_area);
    let inputs = [compare::Input { record: run, data }];
    let panels =
        app.live.panels.get((run.id, app.data_version), || compare::panels(&inputs, compare::Options::default()));
    let system = data.and_then(|d| SystemView::of(&d.metrics));
    let side = if system.is_some() { system_panel::WIDTH } else { 0 };
    let [a, b, sys] =
        Layout::horizontal([Constraint::Ratio(1, 2), Constraint::Ratio(1, 2), Constraint::Length(side)]).areas(charts);
    compare::draw_panel(frame, a, &panels[0]);
    if app.live.sphere {
        let (name, found) = app.live.trajectories.of(app, Some(run.id));
        sphere::draw(frame, b, &name, found.as_ref().as_ref().map_err(String::as_str), app.live.yaw);
    } else {
        compare::draw_panel(frame, b, &panels[1]);
    }
    if let Some(view) = &system {
        system_panel::draw(frame, sys, view);
    }
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
