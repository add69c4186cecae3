//! Drawing a frame: the tab bar, the current screen's body, the footer (status line or the
//! key hints of the screen's commands), then a dialog or the `?` overlay. Everything is drawn
//! from the state by shared reference into the [`Areas`] laid out before the frame, so any
//! frame can be drawn at any size at any moment and drawing changes nothing.

use super::app::{App, Screen};
use super::keys::{self, Action, Command};
use super::layout::Areas;
use super::screens;
use crate::store::{RunRecord, RunStatus};
use crate::wording::count;
use ratatui::layout::{Alignment, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Wrap};
use ratatui::Frame;

/// The colour of a run status.
fn status_colour(s: RunStatus) -> Color {
    match s {
        RunStatus::Queued => Color::Blue,
        RunStatus::Running => Color::Yellow,
        RunStatus::Finished => Color::Green,
        RunStatus::Failed => Color::Red,
        RunStatus::Interrupted => Color::Magenta,
        RunStatus::Diverged => Color::LightRed,
    }
}

/// The colour of the state a run table shows ([`RunRecord::shown_status`]): a damaged row in
/// red whatever its status, a paused run greyed out (the queue leaves it), else its status's.
pub fn shown_status_colour(run: &RunRecord) -> Color {
    match run.shown_status() {
        "damaged" => Color::Red,
        "paused" => Color::DarkGray,
        _ => status_colour(run.status),
    }
}

pub fn bold() -> Style {
    Style::default().add_modifier(Modifier::BOLD)
}

pub fn dim() -> Style {
    Style::default().fg(Color::DarkGray)
}

/// The row under a cursor: the runs and plugins tables, the column chooser.
pub fn cursor_row() -> Style {
    Style::default().bg(Color::Rgb(40, 40, 60)).add_modifier(Modifier::BOLD)
}

/// A rectangle of at most `w` x `h` centred in `area`.
pub fn centred(area: Rect, w: u16, h: u16) -> Rect {
    let w = w.min(area.width);
    let h = h.min(area.height);
    Rect { x: area.x + (area.width - w) / 2, y: area.y + (area.height - h) / 2, width: w, height: h }
}

/// Draws the whole frame. The layout is the one [`App::layout`] computed for this size; if
/// none was (a frame of another size), it is computed here, without keeping it.
pub fn draw(frame: &mut Frame, app: &App) {
    let computed;
    let areas = if app.areas.screen == frame.area() {
        &app.areas
    } else {
        computed = Areas::compute(frame.area(), app, &app.areas);
        &computed
    };
    draw_tabs(frame, areas, app);
    screens::component(app.screen).draw(frame, areas.body, app, areas);
    draw_footer(frame, areas.footer, app);
    if let Some(modal) = &app.modal {
        screens::modal::draw(frame, app, modal);
    }
    if app.help {
        screens::help::draw(frame, app);
    }
    if !crate::colour::enabled() {
        super::monochrome::strip(frame.buffer_mut());
    }
}

fn draw_tabs(frame: &mut Frame, areas: &Areas, app: &App) {
    let highlight = Style::default().fg(Color::Black).bg(Color::Cyan).add_modifier(Modifier::BOLD);
    for (i, ((screen, rect), title)) in Screen::ALL.iter().zip(&areas.tabs).zip(&areas.tab_titles).enumerate() {
        let style = if *screen == app.screen { highlight } else { Style::default() };
        frame.render_widget(Paragraph::new(format!(" {title} ")).style(style), *rect);
        if i + 1 < Screen::ALL.len() && rect.right() < areas.screen.right() {
            let divider = Rect { x: rect.right(), width: 1, ..*rect };
            frame.render_widget(Paragraph::new("│"), divider);
        }
    }
    draw_store_label(frame, areas, app);
}

/// The store and executor in use, right-aligned after the tabs, so that a researcher with a
/// laptop's file and the lab's database knows which one the screens show. Where the row is
/// too narrow, the label keeps its end (the database's or file's name) behind a `…`.
fn draw_store_label(frame: &mut Frame, areas: &Areas, app: &App) {
    let Some(last_tab) = areas.tabs.last() else { return };
    // Two cells of space after the last tab, and a label of at least a few characters.
    let from = last_tab.right().saturating_add(2);
    let room = areas.screen.right().saturating_sub(from) as usize;
    let label: Vec<char> = app.store_label.chars().collect();
    if label.is_empty() || room < 8 {
        return;
    }
    let text: String = if label.len() <= room {
        label.iter().collect()
    } else {
        std::iter::once('…').chain(label[label.len() - (room - 1)..].iter().copied()).collect()
    };
    let area = Rect { x: from, width: room as u16, ..*last_tab };
    frame.render_widget(Paragraph::new(text).style(dim()).alignment(Alignment::Right), area);
}

/// The hints of the current screen's commands and the global ones, as `keys what`, whole
/// ones only, within `room` cells. Where not all fit, the quit and key-list hints stay (the
/// list names every key) and the others are taken in order while they fit.
fn hints(app: &App, room: usize) -> Vec<Span<'static>> {
    // While the overlay is open only its own keys work.
    let (screen, global): (&[Command], &[Command]) = if app.help {
        (screens::help::COMMANDS, &[])
    } else {
        (screens::component(app.screen).commands(), keys::GLOBAL)
    };
    let hinted: Vec<(&Command, String)> =
        screen.iter().chain(global).filter_map(|c| Some((c, format!(" {}  ", c.hint?)))).collect();
    let width = |(c, hint): &(&Command, String)| c.label.chars().count() + hint.chars().count();
    let kept = |(c, _): &(&Command, String)| matches!(c.action, Action::OpenHelp | Action::Quit);
    let mut left = room.saturating_sub(hinted.iter().filter(|h| kept(h)).map(width).sum());
    let mut spans = Vec::new();
    for h in &hinted {
        if !kept(h) {
            if width(h) > left {
                continue;
            }
            left -= width(h);
        }
        spans.push(Span::styled(h.0.label.to_string(), bold().fg(Color::Cyan)));
        spans.push(Span::styled(h.1.clone(), dim()));
    }
    spans
}

/// A status message as the footer shows it: wrapped, in red for an error, else green.
pub fn status_paragraph(text: &str, error: bool) -> Paragraph<'_> {
    let colour = if error { Color::Red } else { Color::Green };
    Paragraph::new(Line::from(Span::styled(text, Style::default().fg(colour)))).wrap(Wrap { trim: true })
}

fn draw_footer(frame: &mut Frame, area: Rect, app: &App) {
    if let Some((text, error)) = app.shown_status() {
        frame.render_widget(status_paragraph(text, error), area);
        return;
    }
    let running = app.snapshot.runs.iter().filter(|r| r.status == RunStatus::Running).count();
    let marked = app.runs.selected.len();
    let hidden = match app.marked_hidden() {
        0 => String::new(),
        n => format!(" ({n} hidden by the filter)"),
    };
    let counts = format!("{}, {running} running, {marked} marked{hidden}   ", count(app.snapshot.runs.len(), "run"));
    let room = (area.width as usize).saturating_sub(counts.chars().count());
    let mut spans = vec![Span::raw(counts)];
    spans.extend(hints(app, room));
    let line = Line::from(spans);
    frame.render_widget(Paragraph::new(line), area);
}

/// `text`, or where it is wider than `width` cells its start and `…`, so that a cut value
/// never reads as a whole one.
pub fn cut_to_width(text: String, width: usize) -> String {
    if text.chars().count() <= width {
        return text;
    }
    text.chars().take(width.saturating_sub(1)).chain(std::iter::once('…')).collect()
}

/// A block's title in `width` cells: whole where it fits, else without its parts in
/// brackets, the last first, so that what the block shows stays readable; then cut.
pub fn fit_title(title: &str, width: usize) -> String {
    let mut fitted = title.to_string();
    while fitted.chars().count() > width {
        let Some(open) = fitted.rfind(" (") else { break };
        let Some(length) = fitted[open..].find(')') else { break };
        fitted.replace_range(open..=open + length, "");
    }
    cut_to_width(fitted, width)
}

#[cfg(test)]
mod tests {
    use super::cut_to_width;

    #[test]
    fn a_cut_value_ends_in_an_ellipsis() {
        assert_eq!(cut_to_width("2 welcome experiment".into(), 10), "2 welcome…");
        assert_eq!(cut_to_width("2 lr-grid".into(), 9), "2 lr-grid");
        assert_eq!(cut_to_width("β-sweep".into(), 3), "β-…");
    }
}
