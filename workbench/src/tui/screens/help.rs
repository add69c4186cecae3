//! The `?` overlay: every command of the current screen, the global ones and the overlay's
//! own, generated from the same lists that dispatch the keys. Two columns when the terminal
//! is wide enough, descriptions wrapped between words, scrolled with j/k, the arrows and
//! PgUp/PgDn; Esc, ? or q close it (any other key too).

use crate::tui::app::App;
use crate::tui::keys::{self, cmd, hint, Action, Command, Key};
use crate::tui::ui::{bold, centred};
use ratatui::crossterm::event::KeyCode;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Color;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph};
use ratatui::Frame;

/// The overlay's own commands (any key not listed here closes it).
pub const COMMANDS: &[Command] = &[
    hint(&[Key::char('j'), Key::plain(KeyCode::Down)], "j, ↓", "scroll", "scroll this list down", Action::Down(1)),
    cmd(&[Key::char('k'), Key::plain(KeyCode::Up)], "k, ↑", "scroll this list up", Action::Up(1)),
    cmd(&[Key::plain(KeyCode::PageDown)], "PgDn", "scroll a page down", Action::Down(10)),
    cmd(&[Key::plain(KeyCode::PageUp)], "PgUp", "scroll a page up", Action::Up(10)),
    hint(
        &[Key::plain(KeyCode::Esc), Key::char('?'), Key::char('q')],
        "Esc, ?, q",
        "close",
        "close this list (any other key closes it too)",
        Action::CloseHelp,
    ),
];

/// Columns narrower than this are not split in two.
const MIN_COLUMN: u16 = 56;

/// A section of the overlay: a heading and its (keys, description) entries.
pub struct Section {
    pub title: String,
    pub entries: Vec<(&'static str, &'static str)>,
}

/// The sections for the current screen: its commands, the global ones, the overlay's.
pub fn sections(app: &App) -> Vec<Section> {
    let entries = |c: &[Command]| c.iter().map(|c| (c.label, c.help)).collect::<Vec<_>>();
    let screen = super::component(app.screen).commands();
    let mut everywhere = entries(keys::GLOBAL);
    everywhere.push(keys::MOUSE);
    vec![
        Section {
            title: format!("{} screen", app.screen.title()),
            entries: if screen.is_empty() { vec![("", "no keys of its own")] } else { entries(screen) },
        },
        Section { title: "Everywhere".into(), entries: everywhere },
        Section { title: "In this list".into(), entries: entries(COMMANDS) },
    ]
}

/// `text` broken between words into lines of at most `width` characters.
pub fn wrap(text: &str, width: usize) -> Vec<String> {
    let width = width.max(1);
    let mut lines = vec![String::new()];
    for word in text.split_whitespace() {
        let line = lines.last_mut().expect("never empty");
        let fits = line.chars().count() + usize::from(!line.is_empty()) + word.chars().count() <= width;
        if line.is_empty() || fits {
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        } else {
            lines.push(word.to_string());
        }
    }
    lines
}

/// The lines of `sections` in a column `width` wide: keys on the left, the description
/// wrapped beside them.
fn column(sections: &[Section], width: u16) -> Vec<Line<'static>> {
    let key_width = sections.iter().flat_map(|s| &s.entries).map(|(k, _)| k.chars().count()).max().unwrap_or(0) + 2;
    let text_width = (width as usize).saturating_sub(key_width).max(12);
    let mut lines = Vec::new();
    for (i, s) in sections.iter().enumerate() {
        if i > 0 {
            lines.push(Line::from(""));
        }
        lines.push(Line::from(Span::styled(s.title.clone(), bold().fg(Color::Cyan))));
        for (keys, help) in &s.entries {
            for (j, part) in wrap(help, text_width).into_iter().enumerate() {
                let key = if j == 0 { *keys } else { "" };
                lines.push(Line::from(vec![Span::styled(format!("{key:<key_width$}"), bold()), Span::raw(part)]));
            }
        }
    }
    lines
}

/// The overlay laid out in `area`: its rectangle and its columns of lines.
pub struct Overlay {
    pub rect: Rect,
    pub columns: Vec<Vec<Line<'static>>>,
}

impl Overlay {
    pub fn of(app: &App, area: Rect) -> Overlay {
        let sections = sections(app);
        let width = area.width.saturating_sub(4).clamp(1, 190);
        let inner = width.saturating_sub(2);
        let columns = if inner >= 2 * MIN_COLUMN + 2 {
            // The screen's commands on the left, the rest on the right.
            let half = (inner - 2) / 2;
            let mut rest = sections;
            let first = rest.remove(0);
            vec![column(&[first], half), column(&rest, half)]
        } else {
            vec![column(&sections, inner)]
        };
        let content = columns.iter().map(Vec::len).max().unwrap_or(0) as u16;
        let rect = centred(area, width, content.saturating_add(2));
        Overlay { rect, columns }
    }

    /// Lines of content, and how many show at once.
    pub fn heights(&self) -> (usize, usize) {
        let content = self.columns.iter().map(Vec::len).max().unwrap_or(0);
        (content, self.rect.height.saturating_sub(2) as usize)
    }

    /// The furthest the content can scroll.
    pub fn max_scroll(&self) -> usize {
        let (content, shown) = self.heights();
        content.saturating_sub(shown)
    }
}

/// Runs one of the overlay's actions.
pub fn act(app: &mut App, action: Action) {
    let max = Overlay::of(app, app.areas.screen).max_scroll();
    match action {
        Action::Down(n) => app.help_scroll = (app.help_scroll + n).min(max),
        Action::Up(n) => app.help_scroll = app.help_scroll.saturating_sub(n),
        _ => app.help = false,
    }
}

/// Draws the overlay over the frame.
pub fn draw(frame: &mut Frame, app: &App) {
    let overlay = Overlay::of(app, frame.area());
    let scroll = app.help_scroll.min(overlay.max_scroll());
    let (content, shown) = overlay.heights();
    let mut title = "Keys (Esc closes)".to_string();
    if content > shown {
        title = format!("Keys {}-{} of {content} (j/k, ↑/↓, PgUp/PgDn scroll; Esc closes)", scroll + 1, scroll + shown);
    }
    frame.render_widget(Clear, overlay.rect);
    let block = Block::default().borders(Borders::ALL).title(title);
    let inner = block.inner(overlay.rect);
    frame.render_widget(block, overlay.rect);
    let n = overlay.columns.len() as u32;
    let areas = Layout::horizontal(vec![Constraint::Ratio(1, n); n as usize]).spacing(2).split(inner);
    for (lines, area) in overlay.columns.into_iter().zip(areas.iter()) {
        frame.render_widget(Paragraph::new(lines).scroll((scroll as u16, 0)), *area);
    }
}
