//! The column chooser of the Runs screen: a dialog listing every column the table can show,
//! space toggling one. The choice is saved to the settings file ([`crate::tui::prefs`]) at
//! once, so it survives a crash as well as a restart.

use crate::tui::app::{now, App, Modal};
use crate::tui::prefs::{self, Prefs, RunsPrefs};
use crate::tui::runs::Column;
use crate::tui::ui::{bold, centred, cursor_row, dim};
use ratatui::crossterm::event::{KeyCode, KeyEvent};
use ratatui::style::{Color, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph};
use ratatui::Frame;

/// Every column the table can show now, in table order.
fn all(app: &App) -> Vec<Column> {
    app.runs.table(&app.snapshot, now()).all
}

/// A key while the chooser is open with the cursor on line `cursor`.
pub fn key(app: &mut App, cursor: usize, key: KeyEvent) {
    let columns = all(app);
    let last = columns.len().saturating_sub(1);
    let cursor = match key.code {
        KeyCode::Esc | KeyCode::Enter | KeyCode::Char('C') | KeyCode::Char('q') => return,
        KeyCode::Down | KeyCode::Char('j') => (cursor + 1).min(last),
        KeyCode::Up | KeyCode::Char('k') => cursor.saturating_sub(1),
        KeyCode::Char(' ') => {
            if let Some(c) = columns.get(cursor) {
                toggle(app, c);
            }
            cursor
        }
        _ => cursor,
    };
    app.modal = Some(Modal::Columns { cursor });
}

/// Hides or shows `column`, and saves the choice.
fn toggle(app: &mut App, column: &Column) {
    let title = column.title();
    if column.is_core() {
        app.say(format!("`{title}` is always shown: id, status, steps and best are the table's core"), true);
        return;
    }
    if !app.runs.hidden.remove(&title) {
        app.runs.hidden.insert(title);
    }
    save(app);
}

/// Writes the hidden columns to the settings file (when there is one).
fn save(app: &mut App) {
    let Some(path) = app.prefs_path.clone() else { return };
    let prefs = Prefs { runs: RunsPrefs { hidden: app.runs.hidden.clone() } };
    if let Err(e) = prefs::save(&path, &prefs) {
        app.say(format!("columns not saved: {e:#} (set {} to another file)", prefs::ENV), true);
    }
}

/// Draws the chooser with the cursor on line `cursor`.
pub fn draw(frame: &mut Frame, app: &App, cursor: usize) {
    let columns = all(app);
    let area = frame.area();
    let rows = (columns.len() as u16).min(area.height.saturating_sub(6)).max(1);
    let rect = centred(area, 44, rows + 4);
    frame.render_widget(Clear, rect);
    // Scroll so the cursor stays in view.
    let first = cursor.saturating_sub(rows as usize - 1);
    let mut text: Vec<Line> = columns
        .iter()
        .enumerate()
        .skip(first)
        .take(rows as usize)
        .map(|(i, c)| {
            let shown = c.is_core() || !app.runs.hidden.contains(&c.title());
            let mark = if shown { "[x] " } else { "[ ] " };
            let mut style = Style::default();
            if i == cursor {
                style = cursor_row();
            }
            let mut spans = vec![Span::styled(mark, bold().fg(Color::Cyan)), Span::styled(c.title(), style)];
            if c.is_core() {
                spans.push(Span::styled("  always", dim()));
            }
            Line::from(spans)
        })
        .collect();
    text.push(Line::from(""));
    text.push(Line::from(Span::styled("space show/hide · j/k move · Enter/Esc close", dim())));
    frame.render_widget(
        Paragraph::new(text).block(Block::default().borders(Borders::ALL).title("Columns of the runs table")),
        rect,
    );
}
