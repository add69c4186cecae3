//! The state shared by the screens, and the routing of events: a key goes to the open dialog,
//! the text being typed, the `?` overlay, or else the current screen's commands and then the
//! global ones ([`super::keys`]); a click is hit-tested against the frame's [`Areas`]. What
//! each action does lives with its screen ([`super::screens`]); all I/O goes through
//! [`Request`]s to the background service.

use super::data::{PluginList, RunData, Snapshot};
use super::keys::{self, Action};
use super::launch::LaunchForm;
use super::layout::Areas;
use super::screens::{self, ablation::AblationState, compare::CompareState, live::LiveState, runs::RunsState};
use super::service::{Request, Update};
use crate::host::PluginHost;
use crate::store::{RunRecord, RunStatus};
use ratatui::crossterm::event::{Event, KeyEvent, KeyEventKind, MouseButton, MouseEventKind};
use ratatui::layout::Rect;
use std::collections::{BTreeSet, HashMap};
use std::time::Instant;

/// The screens, in tab order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Screen {
    Runs,
    Launch,
    Live,
    Compare,
    Ablation,
    Plugins,
}

impl Screen {
    pub const ALL: [Screen; 6] =
        [Screen::Runs, Screen::Launch, Screen::Live, Screen::Compare, Screen::Ablation, Screen::Plugins];

    pub fn title(self) -> &'static str {
        match self {
            Screen::Runs => "Runs",
            Screen::Launch => "Launch",
            Screen::Live => "Live",
            Screen::Compare => "Compare",
            Screen::Ablation => "Ablation",
            Screen::Plugins => "Plugins",
        }
    }
}

/// A dialog over the current screen.
#[derive(Debug, Clone, PartialEq)]
pub enum Modal {
    /// Asks before an action that loses something.
    Confirm { question: String, action: Confirmed },
    /// Notes and tags of a run.
    Annotate { id: i64, notes: String, tags: String, on_tags: bool },
    /// Tags of several runs: `a,b` replaces them, `+a,-b` adds and removes.
    Tags { ids: Vec<i64>, text: String },
    /// The settings (`key=value ...`) to score these runs' checkpoints again with.
    Evaluate { ids: Vec<i64>, text: String },
    /// The path of an experiment file to load into the Launch form, or to save it to.
    ExperimentFile { save: bool, path: String },
    /// The runs table's column chooser, the cursor on line `cursor`.
    Columns { cursor: usize },
}

/// What a confirmation does.
#[derive(Debug, Clone, PartialEq)]
pub enum Confirmed {
    Delete(Vec<i64>),
    /// Stop these runs (queued or running when asked).
    Cancel(Vec<i64>),
    /// Save the Launch form over an existing experiment file.
    Overwrite(String),
}

/// How long a status message stays.
pub const STATUS_SECONDS: u64 = 8;

/// The whole UI state: what the screens share, and each screen's own state.
pub struct App {
    pub screen: Screen,
    /// The `?` overlay is open.
    pub help: bool,
    /// First line of the `?` overlay shown.
    pub help_scroll: usize,
    pub modal: Option<Modal>,
    pub snapshot: Snapshot,
    pub details: HashMap<i64, RunData>,
    /// Bumped whenever run data changes (cache key of the Compare panels).
    pub data_version: u64,
    /// Bumped with every runs table the service sends (what is drawn from it is rebuilt).
    pub snapshot_version: u64,
    /// The settings of the last evaluation asked for with `E`: the next dialog starts with them.
    pub last_evaluation: String,
    pub plugins: PluginList,
    pub status: Option<(String, bool, Instant)>,
    /// Hot-reload output for the Plugins screen.
    pub reload_log: super::reload::ReloadLog,
    pub quit: bool,
    /// The layout of the last frame (mouse clicks are tested against it).
    pub areas: Areas,
    // Each screen's own state.
    pub runs: RunsState,
    pub launch: LaunchForm,
    /// Where launched runs train, for the Launch screen: `local workers` or `Slurm jobs (...)`.
    pub executor: String,
    /// The run store open, for the tab bar (an SQLite file's path or a PostgreSQL URL without
    /// its password); empty in tests that do not set it.
    pub store_label: String,
    /// How many workers the queue runs at once (`+` / `-` on the Runs screen).
    pub workers: usize,
    pub live: LiveState,
    /// The plugin under the Plugins screen's cursor (an index into `plugins.plugins`).
    pub plugin_cursor: usize,
    pub compare: CompareState,
    pub ablation: AblationState,
    /// The settings file the column choice is saved to (none: not saved, as in tests).
    pub prefs_path: Option<std::path::PathBuf>,
    /// Where exports are written (created on demand).
    pub exports: std::path::PathBuf,
    /// Every action run, in order (tests check that each key reaches its action).
    #[cfg(test)]
    pub performed: Vec<Action>,
    watched: Vec<i64>,
    pub(super) host: PluginHost,
    requests: Box<dyn Fn(Request) + Send>,
}

pub use crate::ops::elapsed::now;

impl App {
    /// A new UI over `host`'s plugins, sending requests with `requests`.
    pub fn new(host: PluginHost, requests: impl Fn(Request) + Send + 'static) -> App {
        let plugins = PluginList::of(&host);
        let launch = LaunchForm::new(&plugins);
        App {
            screen: Screen::Runs,
            help: false,
            help_scroll: 0,
            modal: None,
            snapshot: Snapshot::default(),
            details: HashMap::new(),
            data_version: 0,
            snapshot_version: 0,
            last_evaluation: String::new(),
            plugins,
            status: None,
            reload_log: Default::default(),
            quit: false,
            areas: Areas::default(),
            runs: RunsState::default(),
            launch,
            executor: "local workers".to_string(),
            store_label: String::new(),
            workers: 1,
            live: LiveState::default(),
            plugin_cursor: 0,
            compare: CompareState::default(),
            ablation: AblationState::default(),
            prefs_path: None,
            exports: std::path::PathBuf::from("exports"),
            #[cfg(test)]
            performed: Vec::new(),
            watched: Vec::new(),
            host,
            requests: Box::new(requests),
        }
    }

    pub(super) fn send(&self, r: Request) {
        (self.requests)(r)
    }

    /// Reads the saved settings at `path` and saves later changes there; a bad file is
    /// reported in the status bar and the defaults are used.
    pub fn use_prefs(&mut self, path: std::path::PathBuf) {
        match super::prefs::load(&path) {
            Ok(prefs) => self.runs.hidden = prefs.runs.hidden,
            Err(e) => self.say(format!("{e:#}"), true),
        }
        self.prefs_path = Some(path);
    }

    /// Shows a line in the status bar.
    pub fn say(&mut self, text: impl Into<String>, error: bool) {
        self.status = Some((text.into(), error, Instant::now()));
    }

    /// The status message while it is shown (for [`STATUS_SECONDS`]), and whether it is an
    /// error.
    pub fn shown_status(&self) -> Option<(&str, bool)> {
        match &self.status {
            Some((text, error, at)) if at.elapsed().as_secs() < STATUS_SECONDS => Some((text.as_str(), *error)),
            _ => None,
        }
    }

    /// Computes the next frame's layout for a terminal of `size` (before drawing it).
    pub fn layout(&mut self, size: Rect) {
        self.areas = Areas::compute(size, self, &self.areas);
    }

    /// Applies an update from the service.
    pub fn apply(&mut self, update: Update) {
        match update {
            Update::Runs(snapshot) => {
                if let Some((text, error)) = super::ended::news(&self.snapshot, &snapshot) {
                    self.say(text, error);
                }
                self.snapshot = snapshot;
                self.snapshot_version += 1;
                let ids: BTreeSet<i64> = self.snapshot.runs.iter().map(|r| r.id).collect();
                self.runs.selected.retain(|id| ids.contains(id));
                self.details.retain(|id, _| ids.contains(id));
                self.withdraw_stale_stop_question();
            }
            Update::Run(id, data) => {
                self.details.insert(id, data);
                self.data_version += 1;
            }
            Update::Info(text) => self.say(text, false),
            Update::Error(text) => self.say(text, true),
            Update::Plugins(event) => {
                let (host, log) = (&mut self.host, &mut self.reload_log);
                let status = super::reload::apply(event, host, &mut self.plugins, &mut self.launch, log);
                if let Some((text, error)) = status {
                    self.say(text, error);
                }
            }
        }
        self.update_watch();
    }

    /// Closes a "Stop run N?" question whose run ended or was deleted since it was asked,
    /// saying so: a yes could only fail, and the question would name a run no longer shown.
    /// Of several runs, the question stays while one of them can still be stopped.
    fn withdraw_stale_stop_question(&mut self) {
        let Some(Modal::Confirm { action: Confirmed::Cancel(ids), .. }) = &self.modal else { return };
        if ids.iter().any(|id| self.snapshot.run(*id).is_some_and(|r| !r.status.is_terminal())) {
            return;
        }
        let text = match ids.as_slice() {
            [id] => match self.snapshot.run(*id) {
                Some(run) => format!("run {id} is {} now: nothing to stop", run.status),
                None => format!("run {id} was deleted meanwhile: nothing to stop"),
            },
            _ => "the runs have ended or were deleted meanwhile: nothing to stop".to_string(),
        };
        self.modal = None;
        self.say(text, false);
    }

    /// The visible runs in table order.
    pub fn visible_runs(&self) -> Vec<&RunRecord> {
        self.runs.table(&self.snapshot, now()).runs
    }

    /// The run under the cursor on the Runs screen.
    pub fn cursor_run(&self) -> Option<&RunRecord> {
        let runs = self.visible_runs();
        runs.get(self.runs.cursor.min(runs.len().saturating_sub(1))).copied()
    }

    /// The marked runs the filter shows, in table order: only these feed Compare, Ablation
    /// and `D`; marks on hidden runs wait until the filter shows them again.
    pub fn marked_visible(&self) -> Vec<i64> {
        self.visible_runs().iter().map(|r| r.id).filter(|id| self.runs.selected.contains(id)).collect()
    }

    /// How many marked runs the filter hides.
    pub fn marked_hidden(&self) -> usize {
        self.runs.selected.len() - self.marked_visible().len()
    }

    /// Runs compared: the visible marked ones, else the one under the cursor.
    pub fn compared_runs(&self) -> Vec<i64> {
        let marked = self.marked_visible();
        if marked.is_empty() {
            self.cursor_run().map(|r| vec![r.id]).unwrap_or_default()
        } else {
            marked
        }
    }

    /// Runs in the ablation table: the visible marked ones, else every visible finished run.
    pub fn ablation_runs(&self) -> Vec<i64> {
        let marked = self.marked_visible();
        if marked.is_empty() {
            self.visible_runs().iter().filter(|r| r.status == RunStatus::Finished).map(|r| r.id).collect()
        } else {
            marked
        }
    }

    /// The runs the Live screen lists: running and queued first, then the most recent.
    pub fn live_candidates(&self) -> Vec<&RunRecord> {
        let mut active: Vec<&RunRecord> = self.snapshot.runs.iter().filter(|r| !r.status.is_terminal()).collect();
        let mut recent: Vec<&RunRecord> = self.snapshot.runs.iter().filter(|r| r.status.is_terminal()).collect();
        active.sort_by_key(|r| r.id);
        recent.sort_by_key(|r| std::cmp::Reverse(r.id));
        active.extend(recent);
        active
    }

    /// The run the Live screen shows.
    pub fn live_id(&self) -> Option<i64> {
        let candidates = self.live_candidates();
        match self.live.run {
            Some(id) if candidates.iter().any(|r| r.id == id) => Some(id),
            _ => candidates.first().map(|r| r.id),
        }
    }

    /// Tells the service which runs' data the current screen needs.
    fn update_watch(&mut self) {
        let mut ids: Vec<i64> = match self.screen {
            Screen::Compare => self.compared_runs(),
            Screen::Ablation => self.ablation_runs(),
            Screen::Live => self.live_id().into_iter().collect(),
            _ => vec![],
        };
        ids.sort_unstable();
        if ids != self.watched {
            self.watched = ids.clone();
            self.send(Request::Watch(ids));
        }
    }

    /// Handles one terminal event.
    pub fn handle(&mut self, event: Event) {
        match event {
            Event::Key(key) if key.kind != KeyEventKind::Release => self.key(key),
            Event::Mouse(m) => self.mouse(m.kind, m.column, m.row),
            _ => {} // resize: the next frame is laid out at the new size
        }
        self.update_watch();
    }

    fn key(&mut self, key: KeyEvent) {
        // Ctrl-C quits from anywhere, even while typing.
        if keys::Key::ctrl('c').matches(&key) {
            self.perform(Action::Quit);
            return;
        }
        if let Some(modal) = self.modal.take() {
            screens::modal::key(self, modal, key);
            return;
        }
        if self.runs.filtering {
            screens::runs::filter_key(self, key);
            return;
        }
        if self.screen == Screen::Launch && self.launch.editing {
            screens::launch::edit_key(self, key);
            return;
        }
        if self.help {
            // The overlay's own commands; any other key closes it.
            let action = keys::find(screens::help::COMMANDS, &key).unwrap_or(Action::CloseHelp);
            self.perform(action);
            return;
        }
        let commands = screens::component(self.screen).commands();
        if let Some(action) = keys::find(commands, &key).or_else(|| keys::find(keys::GLOBAL, &key)) {
            self.perform(action);
        }
    }

    /// Runs one action: the global ones here, the rest by the screen that declares them.
    pub fn perform(&mut self, action: Action) {
        #[cfg(test)]
        self.performed.push(action);
        match action {
            Action::Quit => self.quit = true,
            Action::NextScreen => self.switch(1),
            Action::PreviousScreen => self.switch(-1),
            Action::GoTo(i) => self.screen = Screen::ALL[i.min(Screen::ALL.len() - 1)],
            Action::OpenHelp => {
                self.help = true;
                self.help_scroll = 0;
            }
            Action::OpenCompare => self.screen = Screen::Compare,
            Action::OpenAblation => self.screen = Screen::Ablation,
            Action::Back => self.screen = Screen::Runs,
            _ if self.help => screens::help::act(self, action),
            _ => screens::component(self.screen).act(self, action),
        }
    }

    fn switch(&mut self, delta: isize) {
        let at = Screen::ALL.iter().position(|s| *s == self.screen).unwrap_or(0) as isize;
        self.screen = Screen::ALL[(at + delta).rem_euclid(Screen::ALL.len() as isize) as usize];
    }

    fn mouse(&mut self, kind: MouseEventKind, x: u16, y: u16) {
        if self.help || self.modal.is_some() {
            return;
        }
        match kind {
            MouseEventKind::ScrollDown => screens::component(self.screen).act(self, Action::Down(1)),
            MouseEventKind::ScrollUp => screens::component(self.screen).act(self, Action::Up(1)),
            MouseEventKind::Down(MouseButton::Left) => {
                if let Some(screen) = self.areas.tab_at(x, y) {
                    self.screen = screen;
                } else if self.screen == Screen::Runs {
                    screens::runs::click(self, x, y);
                }
            }
            _ => {}
        }
    }
}
