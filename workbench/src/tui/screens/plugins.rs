//! The Plugins screen: loaded plugins (the one under the cursor described whole), the
//! fingerprint they share with the host, libraries that failed to load and why, and the
//! hot-reload log.

use crate::tui::app::App;
use crate::tui::component::Component;
use crate::tui::keys::{cmd, hint, Action, Command, Key};
use crate::tui::layout::Areas;
use crate::tui::ui::{bold, cursor_row, cut_to_width, dim};
use crate::wording::{count, count_of};
use ratatui::crossterm::event::KeyCode;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Table, TableState, Wrap};
use ratatui::Frame;
use std::path::Path;

/// The Plugins screen.
pub struct Plugins;

const COMMANDS: &[Command] = &[
    hint(&[Key::char('j'), Key::plain(KeyCode::Down)], "j, ↓", "move", "next plugin", Action::Down(1)),
    cmd(&[Key::char('k'), Key::plain(KeyCode::Up)], "k, ↑", "previous plugin", Action::Up(1)),
    cmd(&[Key::plain(KeyCode::PageDown)], "PgDn", "ten plugins down", Action::Down(10)),
    cmd(&[Key::plain(KeyCode::PageUp)], "PgUp", "ten plugins up", Action::Up(10)),
];

impl Component for Plugins {
    fn commands(&self) -> &'static [Command] {
        COMMANDS
    }

    fn act(&self, app: &mut App, action: Action) {
        let last = app.plugins.plugins.len().saturating_sub(1);
        let at = app.plugin_cursor.min(last);
        match action {
            Action::Down(n) => app.plugin_cursor = (at + n).min(last),
            Action::Up(n) => app.plugin_cursor = at.saturating_sub(n),
            _ => {}
        }
    }

    fn draw(&self, frame: &mut Frame, area: Rect, app: &App, _: &Areas) {
        draw_plugins(frame, area, app)
    }
}

/// One plugin's cells, before they are fitted.
struct PluginCells {
    name: String,
    kind: String,
    version: String,
    description: String,
    path: String,
}

/// The plugin table as it fits: its column titles, widths and rows.
struct PluginTable {
    titles: Vec<&'static str>,
    widths: Vec<u16>,
    rows: Vec<Vec<String>>,
}

/// The narrowest description worth a column.
const MIN_DESCRIPTION: u16 = 12;

/// Fits the plugin table into `inner` cells, one between columns: name, kind and version
/// always whole (names tell plugins apart); the path whole where the description keeps
/// [`MIN_DESCRIPTION`] cells, else its file name alone, else (narrower still) left out; the
/// description the cells left, and no description column when that is too few.
fn plugin_table(plugins: &[PluginCells], inner: u16) -> PluginTable {
    let widest = |title: &str, cell: fn(&PluginCells) -> &str| {
        plugins.iter().map(|p| cell(p).chars().count()).max().unwrap_or(0).max(title.len()) as u16
    };
    let file_name =
        |p: &PluginCells| Path::new(&p.path).file_name().map_or(p.path.clone(), |f| f.to_string_lossy().into());
    let fixed = [widest("name", |p| &p.name), widest("kind", |p| &p.kind), widest("version", |p| &p.version)];
    // The three fixed columns and the gap after each.
    let core = fixed.iter().sum::<u16>() + 3;
    let whole_path = widest("path", |p| &p.path);
    let short_path = plugins.iter().map(|p| file_name(p).chars().count()).max().unwrap_or(0).max(4) as u16;
    let path = if core + whole_path + 1 + MIN_DESCRIPTION <= inner {
        Some((whole_path, false))
    } else if core + short_path <= inner {
        Some((short_path, true))
    } else {
        None
    };
    let path_room = path.map_or(0, |(w, _)| w + 1);
    let description = inner.saturating_sub(core + path_room);
    let with_description = description >= MIN_DESCRIPTION;
    let mut titles = vec!["name", "kind", "version"];
    let mut widths = fixed.to_vec();
    if with_description {
        titles.push("description");
        widths.push(description);
    }
    if let Some((width, _)) = path {
        titles.push("path");
        widths.push(width);
    }
    let rows = plugins
        .iter()
        .map(|p| {
            let mut row = vec![p.name.clone(), p.kind.clone(), p.version.clone()];
            if with_description {
                // Whole under the table for the plugin under the cursor.
                row.push(cut_to_width(p.description.clone(), usize::from(description)));
            }
            match path {
                Some((_, true)) => row.push(file_name(p)),
                Some((_, false)) => row.push(p.path.clone()),
                None => {}
            }
            row
        })
        .collect();
    PluginTable { titles, widths, rows }
}

fn draw_plugins(frame: &mut Frame, area: Rect, app: &App) {
    let failures = app.plugins.failures.len();
    let reload_lines = if app.reload_log.is_empty() {
        0
    } else {
        crate::tui::reload::rows(&app.reload_log, area.width, area.height / 3)
    };
    // A reload can leave fewer plugins than the cursor was on.
    let cursor = app.plugin_cursor.min(app.plugins.plugins.len().saturating_sub(1));
    let info = Paragraph::new(info_lines(app, cursor)).wrap(Wrap { trim: true });
    // As many rows as it wraps to, leaving the table most of the room.
    let info_rows = (info.line_count(area.width) as u16).clamp(2, (area.height / 3).max(2));
    let fail_rows = if failures > 0 { (failures as u16 * 2 + 2).min(area.height / 2) } else { 0 };
    let [table_area, info_area, fail_area, reload_area] = Layout::vertical([
        Constraint::Min(3),
        Constraint::Length(info_rows),
        Constraint::Length(fail_rows),
        Constraint::Length(reload_lines),
    ])
    .areas(area);
    if reload_lines > 0 {
        crate::tui::reload::draw(frame, reload_area, &app.reload_log);
    }
    let plugins: Vec<PluginCells> = app
        .plugins
        .plugins
        .iter()
        .map(|p| PluginCells {
            name: p.name.clone(),
            kind: p.kind.as_str().to_string(),
            version: p.version.clone(),
            description: p.description.clone(),
            path: shown_path(&p.path),
        })
        .collect();
    let table = plugin_table(&plugins, table_area.width.saturating_sub(2));
    let header = Row::new(table.titles.clone()).style(bold().fg(Color::Cyan));
    let widths: Vec<Constraint> = table.widths.iter().map(|w| Constraint::Length(*w)).collect();
    let rows: Vec<Row> = table.rows.into_iter().map(|row| Row::new(row.into_iter().map(Cell::from))).collect();
    let title = format!("{} loaded", count(app.plugins.plugins.len(), "plugin"));
    let widget = Table::new(rows, widths)
        .header(header)
        .block(Block::default().borders(Borders::ALL).title(title))
        .row_highlight_style(cursor_row());
    // The table scrolls to keep the cursor in view.
    let mut state = TableState::default().with_selected((!app.plugins.plugins.is_empty()).then_some(cursor));
    frame.render_stateful_widget(widget, table_area, &mut state);
    frame.render_widget(info, info_area);
    if failures > 0 {
        let lines: Vec<Line> = app
            .plugins
            .failures
            .iter()
            .flat_map(|f| {
                [
                    Line::from(Span::styled(f.path.display().to_string(), bold())),
                    Line::from(Span::styled(format!("  {}", f.reason), Style::default().fg(Color::Red))),
                ]
            })
            .collect();
        let title = format!("{} not loaded", count_of(failures, "library", "libraries"));
        let block = Block::default().borders(Borders::ALL).title(title);
        frame.render_widget(Paragraph::new(lines).wrap(Wrap { trim: true }).block(block), fail_area);
    }
}

/// A library of the workspace by its path in it (`target/release/libcem.so`), any other whole.
fn shown_path(path: &Path) -> String {
    let root = crate::host::workspace().map(|w| w.root.as_path());
    root.and_then(|r| path.strip_prefix(r).ok()).unwrap_or(path).display().to_string()
}

/// Under the table: the plugin under the cursor, its description and path whole (the table
/// may cut them), then the fingerprint every plugin shares with the host and the workspace.
fn info_lines(app: &App, cursor: usize) -> Vec<Line<'static>> {
    let mut lines = Vec::new();
    if let Some(p) = app.plugins.plugins.get(cursor) {
        lines.push(Line::from(vec![
            Span::styled(format!("{} {} ({})", p.name, p.version, p.kind.as_str()), bold()),
            Span::raw(format!(": {}", p.description)),
        ]));
        lines.push(Line::from(Span::styled(p.path.display().to_string(), dim())));
    }
    let workspace =
        app.plugins.workspace.as_deref().unwrap_or("no workbench workspace: plugins are loaded, never built");
    lines.push(Line::from(Span::styled(
        format!("fingerprint (host and every loaded plugin): {}", plugin_api::FINGERPRINT),
        dim(),
    )));
    lines.push(Line::from(Span::styled(workspace.to_string(), dim())));
    lines
}
