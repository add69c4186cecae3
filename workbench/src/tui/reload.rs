//! Hot reload in the terminal workbench: the watcher runs on its own thread
//! ([`crate::host::Watcher`]) and sends its events as [`Update::Plugins`]; the UI thread
//! swaps a reloaded plugin into its host ([`apply`]), refreshes the plugin list and the
//! Launch form, and keeps the last [`LOG_LINES`] lines (cargo's output, reloads, failures)
//! for the Plugins screen. A failed build or load only adds lines: the previous version stays
//! active. New runs use the new code (their workers load the rebuilt library); running
//! workers keep the code they started with.

use super::data::PluginList;
use super::launch::LaunchForm;
use super::service::Update;
use crate::host::{PluginHost, WatchConfig, WatchEvent, Watcher};
use plugin_api::PluginKind;
use ratatui::layout::Rect;
use ratatui::style::{Color, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Paragraph, Wrap};
use ratatui::Frame;
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::mpsc::Sender;

/// Lines kept for the Plugins screen.
pub const LOG_LINES: usize = 200;

/// The last lines of hot-reload output, each marked as an error or not.
#[derive(Debug, Clone, Default)]
pub struct ReloadLog {
    lines: VecDeque<(String, bool)>,
}

impl ReloadLog {
    /// Adds a text (one line per line of it), dropping the oldest beyond [`LOG_LINES`].
    pub fn push(&mut self, text: &str, error: bool) {
        for line in text.lines() {
            self.lines.push_back((line.to_string(), error));
        }
        while self.lines.len() > LOG_LINES {
            self.lines.pop_front();
        }
    }

    /// The kept lines, oldest first.
    pub fn lines(&self) -> impl DoubleEndedIterator<Item = &(String, bool)> + ExactSizeIterator {
        self.lines.iter()
    }

    /// Whether nothing was logged yet.
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }
}

/// Starts watching the plugins of the running binary; each event becomes an
/// [`Update::Plugins`]. `None` (with the reason in the log) when watching cannot start.
pub fn start(plugin_dirs: &[PathBuf], updates: Sender<Update>) -> Option<Watcher> {
    let config = WatchConfig::for_running_binary(plugin_dirs);
    if config.crates.is_empty() && config.library_dirs.is_empty() {
        return None;
    }
    let sender = updates.clone();
    match Watcher::start(config, move |event| {
        let _ = sender.send(Update::Plugins(event));
    }) {
        Ok(watcher) => Some(watcher),
        Err(e) => {
            let _ = updates.send(Update::Plugins(WatchEvent::Note(format!("hot reload is off: {e}"))));
            None
        }
    }
}

/// Applies a watcher event on the UI thread: a reloaded plugin replaces the active version in
/// `host` (the list and the form follow); every event is logged. Returns a line for the
/// status bar (and whether it reports a failure) for the events worth one.
pub fn apply(
    event: WatchEvent,
    host: &mut PluginHost,
    plugins: &mut PluginList,
    form: &mut LaunchForm,
    log: &mut ReloadLog,
) -> Option<(String, bool)> {
    match &event {
        WatchEvent::Loaded(reload) => match host.accept(reload) {
            Ok(done) => {
                *plugins = PluginList::of(host);
                refresh_form(form, plugins);
                log.push(&done.line, false);
                Some((done.line, false))
            }
            Err(reason) => {
                log.push(&reason, true);
                Some((reason, true))
            }
        },
        other => {
            let text = other.describe()?;
            let failed = matches!(other, WatchEvent::BuildFailed { .. } | WatchEvent::LoadFailed { .. });
            log.push(&text, failed);
            let first = text.lines().next().unwrap_or_default().to_string();
            match other {
                WatchEvent::BuildFailed { .. } | WatchEvent::LoadFailed { .. } => {
                    Some((format!("{first} (see the Plugins screen)"), true))
                }
                WatchEvent::Building { .. } => Some((first, false)),
                _ => None,
            }
        }
    }
}

/// The Launch form after the plugins changed: the same layer and task when they still
/// exist, values the user set kept where their key still exists and they are still valid.
pub fn refresh_form(form: &mut LaunchForm, plugins: &PluginList) {
    let (layer, task) = (form.layer_name().map(str::to_string), form.task_name().map(str::to_string));
    form.layers = plugins.names(PluginKind::Layer);
    form.tasks = plugins.names(PluginKind::Task);
    form.layer = layer.and_then(|n| form.layers.iter().position(|l| *l == n)).unwrap_or(0);
    form.task = task.and_then(|n| form.tasks.iter().position(|t| *t == n)).unwrap_or(0);
    form.rebuild(plugins);
}

/// The log panel of the Plugins screen: the last lines that fit, wrapped (a compiler's
/// message is read to its end), failures in red.
pub fn draw(frame: &mut Frame, area: Rect, log: &ReloadLog) {
    let visible = area.height.saturating_sub(2) as usize;
    let skip = log.lines().len().saturating_sub(visible);
    let paragraph = wrapped(log, skip);
    // Wrapped, the lines may take more rows than there are: the newest stay in view.
    let rows = paragraph.line_count(area.width.saturating_sub(2)) as u16;
    let paragraph = paragraph.scroll((rows.saturating_sub(visible as u16), 0));
    let block = Block::default().borders(Borders::ALL).title("hot reload (edit a plugin's sources: it is rebuilt)");
    frame.render_widget(paragraph.block(block), area);
}

/// The log's lines from the `skip`th on, errors in red, wrapped.
fn wrapped(log: &ReloadLog, skip: usize) -> Paragraph<'static> {
    let lines: Vec<Line> = log
        .lines()
        .skip(skip)
        .map(|(text, error)| {
            let style = if *error { Style::default().fg(Color::Red) } else { Style::default() };
            Line::styled(text.clone(), style)
        })
        .collect();
    Paragraph::new(lines).wrap(Wrap { trim: false })
}

/// The rows the log's panel takes in a `width`-cell area, borders included: what its lines
/// wrap to, at most `most`, so that a short log leaves the rest to the plugin table.
pub fn rows(log: &ReloadLog, width: u16, most: u16) -> u16 {
    let wrapped_rows = wrapped(log, 0).line_count(width.saturating_sub(2)) as u16;
    wrapped_rows.saturating_add(2).min(most)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_panel_is_as_high_as_its_lines_up_to_its_share() {
        let mut log = ReloadLog::default();
        log.push("watching the sources of 2 plugin crates", false);
        assert_eq!(rows(&log, 80, 10), 3);
        // Wrapped at 20 cells inside the border: "watching the sources" / "of 2 plugin crates".
        assert_eq!(rows(&log, 22, 10), 4);
        for i in 0..20 {
            log.push(&format!("line {i}"), false);
        }
        assert_eq!(rows(&log, 80, 10), 10);
    }

    #[test]
    fn the_log_keeps_the_last_lines() {
        let mut log = ReloadLog::default();
        for i in 0..LOG_LINES {
            log.push(&format!("line {i}"), false);
        }
        log.push("error: one\n  --> src/lib.rs:1:1", true);
        assert_eq!(log.lines().len(), LOG_LINES);
        assert_eq!(log.lines().next().unwrap().0, "line 2");
        assert_eq!(log.lines().last().unwrap(), &("  --> src/lib.rs:1:1".to_string(), true));
    }

    #[test]
    fn long_lines_wrap_and_the_newest_stays_in_view() {
        use ratatui::{backend::TestBackend, Terminal};
        let mut log = ReloadLog::default();
        log.push(&format!("watching the sources of {}", "crate, ".repeat(12)), false);
        log.push("error[E0425]: cannot find value `x` in this scope, at the end of a line longer than the panel", true);
        log.push("newest", false);
        let (w, h) = (40, 7);
        let mut terminal = Terminal::new(TestBackend::new(w, h)).unwrap();
        terminal.draw(|f| draw(f, f.area(), &log)).unwrap();
        let buffer = terminal.backend().buffer().clone();
        let screen: String =
            (0..h).map(|y| (0..w).map(|x| buffer[(x, y)].symbol().to_string()).collect::<String>() + "\n").collect();
        // Five rows inside the border: the error's three wrapped rows, its end included, and the newest.
        assert!(screen.contains("panel") && screen.contains("newest"), "{screen}");
        assert!(!screen.contains("watching"), "the oldest line scrolled out:\n{screen}");
    }

    #[test]
    fn failures_are_logged_and_change_nothing() {
        let mut host = PluginHost::default();
        let mut plugins = PluginList::default();
        let mut form = LaunchForm::new(&plugins);
        let mut log = ReloadLog::default();
        let failed = WatchEvent::BuildFailed { package: "probe".into(), summary: "error[E0425]: x".into() };
        let status = apply(failed, &mut host, &mut plugins, &mut form, &mut log).unwrap();
        assert!(status.1 && status.0.contains("build failed"), "{status:?}");
        assert!(log.lines().any(|(l, e)| *e && l.contains("E0425")));
        assert!(host.plugins.is_empty() && plugins.plugins.is_empty());
        let output = WatchEvent::Output { package: "probe".into(), line: "Compiling probe".into() };
        assert!(apply(output, &mut host, &mut plugins, &mut form, &mut log).is_none());
        assert!(log.lines().last().unwrap().0.contains("Compiling probe"));
    }
}
