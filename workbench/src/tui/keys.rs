//! Commands: every key the workbench answers, declared once per screen as (keys, action,
//! help). The same lists dispatch key presses ([`find`]), fill the `?` overlay and the
//! footer's hint bar, so the help cannot drift from what the keys do.

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

/// One key a command answers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    pub code: KeyCode,
    /// Only with Ctrl held (Ctrl-C); other keys match without Ctrl or Alt.
    pub ctrl: bool,
}

impl Key {
    pub const fn plain(code: KeyCode) -> Key {
        Key { code, ctrl: false }
    }

    pub const fn char(c: char) -> Key {
        Key::plain(KeyCode::Char(c))
    }

    pub const fn ctrl(c: char) -> Key {
        Key { code: KeyCode::Char(c), ctrl: true }
    }

    /// Whether the pressed `event` is this key.
    pub fn matches(&self, event: &KeyEvent) -> bool {
        let ctrl = event.modifiers.intersects(KeyModifiers::CONTROL | KeyModifiers::ALT);
        event.code == self.code && ctrl == self.ctrl
    }

    /// A key event for this key (tests, and the overlay's own check).
    pub fn event(&self) -> KeyEvent {
        let modifiers = if self.ctrl { KeyModifiers::CONTROL } else { KeyModifiers::NONE };
        KeyEvent::new(self.code, modifiers)
    }
}

/// Everything a key can do. One enum for all screens, so a command list is plain data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    // Everywhere.
    Quit,
    NextScreen,
    PreviousScreen,
    GoTo(usize),
    OpenHelp,
    OpenCompare,
    OpenAblation,
    /// Back to the Runs screen.
    Back,
    // Runs.
    Down(usize),
    Up(usize),
    Top,
    Bottom,
    ToggleMark,
    ToggleMarkAll,
    Filter,
    ClearFilter,
    SortNext,
    SortReverse,
    OpenRun,
    NewRun,
    Annotate,
    TagRuns,
    Evaluate,
    DeleteCursor,
    DeleteMarked,
    StopRun,
    Requeue,
    Pause,
    PauseSweep,
    ChooseColumns,
    MoreWorkers,
    FewerWorkers,
    // Launch.
    PreviousChoice,
    NextChoice,
    EditOrLaunch,
    Launch,
    LoadExperiment,
    SaveExperiment,
    // Compare.
    ToggleSmooth,
    ToggleWallTime,
    ToggleLogY,
    ToggleSphere,
    TurnLeft,
    TurnRight,
    ExportPng,
    ExportSvg,
    ToggleDifferences,
    // Ablation.
    ExportMarkdown,
    ExportLatex,
    ExportCsv,
    ToggleHeatmap,
    NextAxes,
    NextMetric,
    ExportHeatmap,
    // The `?` overlay.
    CloseHelp,
}

/// One command: the keys that run it, how they are written in the help, what it does.
#[derive(Debug, Clone, Copy)]
pub struct Command {
    pub keys: &'static [Key],
    /// The keys as the help writes them.
    pub label: &'static str,
    pub help: &'static str,
    pub action: Action,
    /// A word or two for the footer's hint bar (the few commands worth a reminder).
    pub hint: Option<&'static str>,
}

/// A command (const, for the static lists).
pub const fn cmd(keys: &'static [Key], label: &'static str, help: &'static str, action: Action) -> Command {
    Command { keys, label, help, action, hint: None }
}

/// A command that is also reminded of in the footer, as `label short`.
pub const fn hint(
    keys: &'static [Key],
    label: &'static str,
    short: &'static str,
    help: &'static str,
    action: Action,
) -> Command {
    Command { keys, label, help, action, hint: Some(short) }
}

/// Keys that work on every screen (after the screen's own commands).
pub const GLOBAL: &[Command] = &[
    cmd(
        &[Key::char('1'), Key::char('2'), Key::char('3'), Key::char('4'), Key::char('5'), Key::char('6')],
        "1-6",
        "switch to that screen (or click its tab)",
        Action::GoTo(0),
    ),
    cmd(&[Key::plain(KeyCode::Tab)], "Tab", "next screen", Action::NextScreen),
    cmd(&[Key::plain(KeyCode::BackTab)], "Shift-Tab", "previous screen", Action::PreviousScreen),
    hint(&[Key::char('c')], "c", "compare", "compare the marked runs (visible ones)", Action::OpenCompare),
    hint(&[Key::char('A')], "A", "ablation", "ablation table of the marked runs (visible ones)", Action::OpenAblation),
    hint(&[Key::char('?')], "?", "keys", "this list of keys", Action::OpenHelp),
    hint(&[Key::char('q'), Key::ctrl('c')], "q, Ctrl-C", "quit", "quit (running workers go on training)", Action::Quit),
];

/// How the mouse works (not keys, but listed with them).
pub const MOUSE: (&str, &str) = ("mouse", "click a tab, a row or a column header (sorts); the wheel scrolls");

/// The command `event` runs in `commands`; `GoTo` carries the screen number pressed.
pub fn find(commands: &[Command], event: &KeyEvent) -> Option<Action> {
    for c in commands {
        if let Some(i) = c.keys.iter().position(|k| k.matches(event)) {
            return Some(match c.action {
                Action::GoTo(_) => Action::GoTo(i),
                a => a,
            });
        }
    }
    None
}

/// The action one key of a command runs (what [`find`] answers for it).
pub fn action_of(command: &Command, key_index: usize) -> Action {
    match command.action {
        Action::GoTo(_) => Action::GoTo(key_index),
        a => a,
    }
}
