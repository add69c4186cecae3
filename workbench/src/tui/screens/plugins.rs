//! The Plugins screen: loaded plugins, the fingerprint they share with the host, libraries
//! that failed to load and why, and the hot-reload log.

use crate::tui::app::App;
use crate::tui::component::Component;
use crate::tui::keys::{Action, Command};
use crate::tui::layout::Areas;
use crate::tui::ui::{bold, dim};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Table, Wrap};
use ratatui::Frame;

/// The Plugins screen (no keys of its own).
pub struct Plugins;

impl Component for Plugins {
    fn commands(&self) -> &'static [Command] {
        &[]
    }

    fn act(&self, _: &mut App, _: Action) {}

    fn draw(&self, frame: &mut Frame, area: Rect, app: &App, _: &Areas) {
        draw_plugins(frame, area, app)
    }
}

fn draw_plugins(frame: &mut Frame, area: Rect, app: &App) {
    let failures = app.plugins.failures.len() as u16;
    let reload_lines = if app.reload_log.is_empty() { 0 } else { area.height / 3 };
    let [table_area, fp_area, fail_area, reload_area] = Layout::vertical([
        Constraint::Min(3),
        Constraint::Length(3),
        Constraint::Length(if failures > 0 { (failures * 2 + 2).min(area.height / 2) } else { 0 }),
        Constraint::Length(reload_lines),
    ])
    .areas(area);
    if reload_lines > 0 {
        crate::tui::reload::draw(frame, reload_area, &app.reload_log);
    }
    let titles = ["name", "kind", "version", "description", "path"];
    let header = Row::new(titles).style(bold().fg(Color::Cyan));
    // Libraries of the workspace by their path in it (`target/release/libcem.so`): whole, and
    // the description gets the room.
    let root = crate::host::workspace().map(|w| w.root.as_path());
    let shown_path =
        |path: &std::path::Path| root.and_then(|r| path.strip_prefix(r).ok()).unwrap_or(path).display().to_string();
    let cells: Vec<[String; 5]> = app
        .plugins
        .plugins
        .iter()
        .map(|p| {
            let kind = p.kind.as_str().to_string();
            [p.name.clone(), kind, p.version.clone(), p.description.clone(), shown_path(&p.path)]
        })
        .collect();
    let widest = |column: usize| {
        let longest = cells.iter().map(|row| row[column].chars().count()).max().unwrap_or(0);
        longest.max(titles[column].len()) as u16
    };
    let widths = [
        Constraint::Length(widest(0)),
        Constraint::Length(widest(1)),
        Constraint::Length(widest(2)),
        Constraint::Fill(1),
        Constraint::Length(widest(4)),
    ];
    let rows: Vec<Row> = cells.into_iter().map(|row| Row::new(row.map(Cell::from))).collect();
    let title = format!("{} plugins loaded", app.plugins.plugins.len());
    frame.render_widget(
        Table::new(rows, widths).header(header).block(Block::default().borders(Borders::ALL).title(title)),
        table_area,
    );
    frame.render_widget(
        Paragraph::new(format!(
            "fingerprint (host and every loaded plugin): {}\n{}",
            plugin_api::FINGERPRINT,
            app.plugins.workspace.as_deref().unwrap_or("no workbench workspace: plugins are loaded, never built")
        ))
        .style(dim())
        .wrap(Wrap { trim: true }),
        fp_area,
    );
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
        let block = Block::default().borders(Borders::ALL).title(format!("{failures} libraries not loaded"));
        frame.render_widget(Paragraph::new(lines).wrap(Wrap { trim: true }).block(block), fail_area);
    }
}
