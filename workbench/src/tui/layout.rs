//! Where everything goes on screen, computed once per frame from the terminal size and the
//! state, before drawing. Drawing reads it, and so does mouse hit-testing (tabs, runs table
//! header and rows), so a click always lands on what was drawn.

use super::app::{App, Screen};
use super::column_fit::Fitted;
use super::screens::runs::fit_columns;
use ratatui::layout::{Constraint, Layout, Rect};

/// The areas of one frame.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Areas {
    /// The whole terminal.
    pub screen: Rect,
    /// One rectangle per tab, in [`Screen::ALL`] order, and the text drawn in it.
    pub tabs: Vec<Rect>,
    pub tab_titles: Vec<String>,
    pub body: Rect,
    pub footer: Rect,
    /// The runs table, when the Runs screen shows one.
    pub runs: Option<RunsTableAreas>,
}

/// The runs table: its area, its columns and the first row shown.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunsTableAreas {
    /// Header row first, then one row per run from `offset`.
    pub table: Rect,
    /// The filter line under the table (zero height when no filter).
    pub filter: Rect,
    /// The columns that fit and their widths (after the mark column).
    pub fitted: Fitted,
    /// x range of each column, for clicks on headers.
    pub columns: Vec<(u16, u16)>,
    /// Index of the first run shown.
    pub offset: usize,
}

/// The text of each tab in a row `width` cells wide: `1 Runs`, ..., or, where the whole
/// titles do not fit, the current screen's whole and the others by their number key alone,
/// so that every tab stays visible and clickable in a narrow terminal.
pub fn tab_titles(current: Screen, width: u16) -> Vec<String> {
    let whole: Vec<String> = Screen::ALL.iter().enumerate().map(|(i, s)| format!("{} {}", i + 1, s.title())).collect();
    // ` title ` and a divider after each but the last.
    let needed: usize = whole.iter().map(|t| t.chars().count() + 3).sum::<usize>() - 1;
    if needed <= usize::from(width) {
        return whole;
    }
    Screen::ALL
        .iter()
        .zip(whole)
        .enumerate()
        .map(|(i, (s, title))| if *s == current { title } else { (i + 1).to_string() })
        .collect()
}

impl Areas {
    /// The areas for a terminal of `size` showing `app`; `previous` keeps the runs table's
    /// scroll position steady (it moves only as far as the cursor needs).
    pub fn compute(size: Rect, app: &App, previous: &Areas) -> Areas {
        // A status message gets the rows it wraps to, up to three, so that a long error (with
        // its fix at the end) is read whole.
        let footer_rows = app
            .shown_status()
            .map_or(1, |(text, error)| super::ui::status_paragraph(text, error).line_count(size.width))
            .clamp(1, 3) as u16;
        let [tabs_row, body, footer] =
            Layout::vertical([Constraint::Length(1), Constraint::Min(0), Constraint::Length(footer_rows)]).areas(size);
        // Each tab is ` title ` followed by a one-cell divider.
        let tab_titles = tab_titles(app.screen, tabs_row.width);
        let mut tabs = Vec::new();
        let mut x = tabs_row.x;
        for title in &tab_titles {
            let w = title.chars().count() as u16 + 2;
            let end = (x.saturating_add(w)).min(tabs_row.right());
            tabs.push(Rect { x, y: tabs_row.y, width: end - x, height: tabs_row.height });
            x = end.saturating_add(1).min(tabs_row.right());
        }
        let runs = (app.screen == Screen::Runs && app.snapshot.loaded && !app.snapshot.runs.is_empty())
            .then(|| runs_table(body, app, previous.runs.as_ref().map_or(0, |r| r.offset)));
        Areas { screen: size, tabs, tab_titles, body, footer, runs }
    }

    /// The screen whose tab is at (x, y).
    pub fn tab_at(&self, x: u16, y: u16) -> Option<Screen> {
        let at = self.tabs.iter().position(|r| r.contains((x, y).into()))?;
        Some(Screen::ALL[at])
    }
}

fn runs_table(body: Rect, app: &App, previous_offset: usize) -> RunsTableAreas {
    let show_filter = app.runs.filtering || !app.runs.filter.is_empty();
    let [table, filter] =
        Layout::vertical([Constraint::Min(0), Constraint::Length(u16::from(show_filter))]).areas(body);
    let fitted = fit_columns(app, table.width);
    // The mark column and a one-cell gap come first, then each column and its gap.
    let mut x = table.x + 2;
    let columns = fitted
        .widths
        .iter()
        .map(|w| {
            let range = (x, x.saturating_add(*w));
            x = x.saturating_add(*w + 1);
            range
        })
        .collect();
    let rows = table.height.saturating_sub(1).max(1) as usize;
    let cursor = app.runs.cursor;
    let offset = if cursor < previous_offset {
        cursor
    } else if cursor >= previous_offset + rows {
        cursor + 1 - rows
    } else {
        previous_offset
    };
    RunsTableAreas { table, filter, fitted, columns, offset }
}
