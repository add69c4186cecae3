//! The application state and what each key does. Drawing is in [`super::ui`]; all I/O goes
//! through [`Request`]s to the background service.

use super::compare::{self, Options, Panel};
use super::data::{PluginList, RunData, Snapshot};
use super::launch::{LaunchForm, Row as FormRow};
use super::runs::RunsState;
use super::service::{Request, Update};
use crate::ablation::{Format, RunInput, Table};
use crate::host::PluginHost;
use crate::ops::{self, grid};
use crate::run_config::RunConfig;
use crate::store::{NewRun, RunRecord, RunStatus};
use ratatui::crossterm::event::{Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers, MouseButton, MouseEventKind};
use ratatui::layout::Rect;
use std::collections::{BTreeSet, HashMap};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

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
}

/// What a confirmation does.
#[derive(Debug, Clone, PartialEq)]
pub enum Confirmed {
    Delete(Vec<i64>),
    Cancel(i64),
}

/// The default experiment offered on an empty database: Hyper-SET against the Transformer on
/// generated easy Sudoku, sized to learn within minutes on a CPU.
pub const DEFAULT_EXPERIMENT: [(&str, &[&str]); 2] =
    [("hyperset", DEFAULT_OVERRIDES), ("transformer", DEFAULT_OVERRIDES)];
const DEFAULT_OVERRIDES: &[&str] = &[
    "d=64",
    "heads=4",
    "iterations=2",
    "layer.init_std=0.15",
    "positions=row_col_box",
    "difficulty=easy",
    "task.train_puzzles=2000",
    "task.eval_puzzles=128",
    "steps=300",
    "lr=3e-3",
    "warmup=20",
    "eval_every=50",
    "eval_depths=4",
];

/// What the cached Compare panels were built from: run ids, data version, toggles.
pub type CompareKey = (Vec<i64>, u64, Options);

/// The whole UI state.
pub struct App {
    pub screen: Screen,
    pub help: bool,
    pub modal: Option<Modal>,
    /// Typing into the Runs filter.
    pub filtering: bool,
    pub snapshot: Snapshot,
    pub runs: RunsState,
    pub details: HashMap<i64, RunData>,
    /// Bumped whenever run data changes (cache key of the Compare panels).
    pub data_version: u64,
    pub launch: LaunchForm,
    /// Where launched runs train, for the Launch screen: `local workers` or `Slurm jobs (...)`.
    pub executor: String,
    pub plugins: PluginList,
    pub compare: Options,
    pub compare_cache: Option<(CompareKey, Vec<Panel>)>,
    /// The run shown on the Live screen (default: the first running one).
    pub live_run: Option<i64>,
    /// Ablation sort column and direction.
    pub ablation_sort: Option<(usize, bool)>,
    pub status: Option<(String, bool, Instant)>,
    /// Hot-reload output for the Plugins screen.
    pub reload_log: super::reload::ReloadLog,
    pub quit: bool,
    /// Where the runs table was drawn (for mouse clicks): table area and column x ranges.
    pub runs_area: Option<(Rect, Vec<(u16, u16)>)>,
    pub tabs_area: Option<Rect>,
    /// First row of the runs table on screen (kept by the table widget).
    pub runs_scroll: usize,
    watched: Vec<i64>,
    host: PluginHost,
    requests: Box<dyn Fn(Request) + Send>,
}

/// Current unix time in seconds.
pub fn now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

impl App {
    /// A new UI over `host`'s plugins, sending requests with `requests`.
    pub fn new(host: PluginHost, requests: impl Fn(Request) + Send + 'static) -> App {
        let plugins = PluginList::of(&host);
        let launch = LaunchForm::new(&plugins);
        App {
            screen: Screen::Runs,
            help: false,
            modal: None,
            filtering: false,
            snapshot: Snapshot::default(),
            runs: RunsState::default(),
            details: HashMap::new(),
            data_version: 0,
            launch,
            executor: "local workers".to_string(),
            plugins,
            compare: Options::default(),
            compare_cache: None,
            live_run: None,
            ablation_sort: None,
            status: None,
            reload_log: Default::default(),
            quit: false,
            runs_area: None,
            tabs_area: None,
            runs_scroll: 0,
            watched: Vec::new(),
            host,
            requests: Box::new(requests),
        }
    }

    fn send(&self, r: Request) {
        (self.requests)(r)
    }

    /// Shows a line in the status bar.
    pub fn say(&mut self, text: impl Into<String>, error: bool) {
        self.status = Some((text.into(), error, Instant::now()));
    }

    /// Applies an update from the service.
    pub fn apply(&mut self, update: Update) {
        match update {
            Update::Runs(snapshot) => {
                self.snapshot = snapshot;
                let ids: BTreeSet<i64> = self.snapshot.runs.iter().map(|r| r.id).collect();
                self.runs.selected.retain(|id| ids.contains(id));
                self.details.retain(|id, _| ids.contains(id));
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

    /// The visible runs in table order.
    pub fn visible_runs(&self) -> Vec<&RunRecord> {
        self.runs.table(&self.snapshot, now()).runs
    }

    /// The run under the cursor on the Runs screen.
    pub fn cursor_run(&self) -> Option<&RunRecord> {
        let runs = self.visible_runs();
        runs.get(self.runs.cursor.min(runs.len().saturating_sub(1))).copied()
    }

    /// Runs compared: the marked ones, else the one under the cursor.
    pub fn compared_runs(&self) -> Vec<i64> {
        if self.runs.selected.is_empty() {
            self.cursor_run().map(|r| vec![r.id]).unwrap_or_default()
        } else {
            self.runs.selected.iter().copied().collect()
        }
    }

    /// Runs in the ablation table: the marked ones, else every visible finished run.
    pub fn ablation_runs(&self) -> Vec<i64> {
        if self.runs.selected.is_empty() {
            self.visible_runs().iter().filter(|r| r.status == RunStatus::Finished).map(|r| r.id).collect()
        } else {
            self.runs.selected.iter().copied().collect()
        }
    }

    /// The runs the Live screen lists: running and queued first, then the most recent.
    pub fn live_candidates(&self) -> Vec<&RunRecord> {
        let mut active: Vec<&RunRecord> = self.snapshot.runs.iter().filter(|r| !r.status.is_terminal()).collect();
        let mut recent: Vec<&RunRecord> = self.snapshot.runs.iter().filter(|r| r.status.is_terminal()).collect();
        recent.sort_by_key(|r| std::cmp::Reverse(r.id));
        active.extend(recent.into_iter().take(20));
        active
    }

    /// The run the Live screen shows.
    pub fn live_id(&self) -> Option<i64> {
        let candidates = self.live_candidates();
        match self.live_run {
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

    /// The Compare panels of the compared runs, from the cache when nothing changed.
    pub fn compare_panels(&mut self) -> (Vec<String>, &[Panel]) {
        let ids = self.compared_runs();
        let records: Vec<&RunRecord> = ids.iter().filter_map(|id| self.snapshot.run(*id)).collect();
        let legend = crate::plot::run_legend(&records);
        let key = (ids.clone(), self.data_version, self.compare);
        if self.compare_cache.as_ref().map(|(k, _)| k) != Some(&key) {
            let inputs: Vec<compare::Input> =
                records.iter().map(|r| compare::Input { record: r, data: self.details.get(&r.id) }).collect();
            let panels = compare::panels(&inputs, self.compare);
            self.compare_cache = Some((key, panels));
        }
        (legend, &self.compare_cache.as_ref().expect("just filled").1)
    }

    /// The ablation table of the ablation runs whose data is loaded.
    pub fn ablation_table(&self) -> (Table, usize) {
        let ids = self.ablation_runs();
        let loaded: Vec<(&RunRecord, &RunData)> =
            ids.iter().filter_map(|id| Some((self.snapshot.run(*id)?, self.details.get(id)?))).collect();
        let inputs: Vec<RunInput> = loaded.iter().map(|(record, d)| RunInput { record, metrics: &d.metrics }).collect();
        let mut table = Table::build(&inputs);
        if let Some((col, desc)) = self.ablation_sort {
            table.sort_by_column(col, desc);
        }
        (table, ids.len() - loaded.len())
    }

    /// Handles one terminal event.
    pub fn handle(&mut self, event: Event) {
        match event {
            Event::Key(key) if key.kind != KeyEventKind::Release => self.key(key),
            Event::Mouse(m) => self.mouse(m.kind, m.column, m.row),
            _ => {} // resize: the next frame is drawn at the new size
        }
        self.update_watch();
    }

    fn key(&mut self, key: KeyEvent) {
        if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
            self.quit = true;
            return;
        }
        if let Some(modal) = self.modal.take() {
            self.modal_key(modal, key);
            return;
        }
        if self.filtering {
            match key.code {
                KeyCode::Enter | KeyCode::Esc => self.filtering = false,
                KeyCode::Backspace => {
                    self.runs.filter.pop();
                }
                KeyCode::Char(c) => self.runs.filter.push(c),
                _ => {}
            }
            self.runs.cursor = 0;
            return;
        }
        if self.screen == Screen::Launch && self.launch.editing {
            self.edit_key(key);
            return;
        }
        if self.help {
            // Any key closes the key list.
            self.help = false;
            return;
        }
        match key.code {
            KeyCode::Char('?') => self.help = true,
            KeyCode::Char('q') => self.quit = true,
            KeyCode::Tab => self.switch(1),
            KeyCode::BackTab => self.switch(-1),
            KeyCode::Char(c @ '1'..='6') => self.screen = Screen::ALL[(c as u8 - b'1') as usize],
            _ => match self.screen {
                Screen::Runs => self.runs_key(key),
                Screen::Launch => self.launch_key(key),
                Screen::Live => self.live_key(key),
                Screen::Compare => self.compare_key(key),
                Screen::Ablation => self.ablation_key(key),
                Screen::Plugins => {}
            },
        }
    }

    fn switch(&mut self, delta: isize) {
        let at = Screen::ALL.iter().position(|s| *s == self.screen).unwrap_or(0) as isize;
        self.screen = Screen::ALL[(at + delta).rem_euclid(Screen::ALL.len() as isize) as usize];
    }

    fn move_cursor(&mut self, delta: isize) {
        let n = self.visible_runs().len();
        if n > 0 {
            self.runs.cursor = (self.runs.cursor as isize + delta).clamp(0, n as isize - 1) as usize;
        }
    }

    fn runs_key(&mut self, key: KeyEvent) {
        let empty = self.snapshot.loaded && self.snapshot.runs.is_empty();
        match key.code {
            KeyCode::Enter if empty => self.launch_default(),
            KeyCode::Char('n') => self.screen = Screen::Launch,
            KeyCode::Down | KeyCode::Char('j') => self.move_cursor(1),
            KeyCode::Up | KeyCode::Char('k') => self.move_cursor(-1),
            KeyCode::PageDown => self.move_cursor(10),
            KeyCode::PageUp => self.move_cursor(-10),
            KeyCode::Home | KeyCode::Char('g') => self.runs.cursor = 0,
            KeyCode::End | KeyCode::Char('G') => self.move_cursor(isize::MAX / 2),
            KeyCode::Char('/') => self.filtering = true,
            KeyCode::Esc => self.runs.filter.clear(),
            KeyCode::Char(' ') => {
                if let Some(id) = self.cursor_run().map(|r| r.id) {
                    if !self.runs.selected.remove(&id) {
                        self.runs.selected.insert(id);
                    }
                    self.move_cursor(1);
                }
            }
            KeyCode::Char('a') => {
                let all: Vec<i64> = self.visible_runs().iter().map(|r| r.id).collect();
                if all.iter().all(|id| self.runs.selected.contains(id)) {
                    self.runs.selected.clear();
                } else {
                    self.runs.selected.extend(all);
                }
            }
            KeyCode::Char('s') => self.cycle_sort(),
            KeyCode::Char('S') => self.runs.descending = !self.runs.descending,
            KeyCode::Char('c') => self.screen = Screen::Compare,
            KeyCode::Char('A') => self.screen = Screen::Ablation,
            KeyCode::Enter => {
                self.live_run = self.cursor_run().map(|r| r.id);
                self.screen = Screen::Live;
            }
            KeyCode::Char('e') => {
                if let Some(r) = self.cursor_run() {
                    self.modal = Some(Modal::Annotate {
                        id: r.id,
                        notes: r.notes.clone(),
                        tags: r.tags.join(", "),
                        on_tags: false,
                    });
                }
            }
            KeyCode::Char('d') => {
                let ids = self.compared_runs();
                if !ids.is_empty() {
                    let list = ids.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(", ");
                    self.modal = Some(Modal::Confirm {
                        question: format!("Delete run {list} and all its metrics, diagnostics and logs?"),
                        action: Confirmed::Delete(ids),
                    });
                }
            }
            KeyCode::Char('x') => self.ask_cancel(self.cursor_run().map(|r| r.id)),
            KeyCode::Char(c @ ('p' | 'P')) => {
                if let Some(r) = self.cursor_run() {
                    self.send(Request::Pause { id: r.id, sweep: c == 'P' });
                }
            }
            KeyCode::Char('r') => {
                if let Some(r) = self.cursor_run() {
                    if matches!(r.status, RunStatus::Interrupted | RunStatus::Failed) {
                        self.send(Request::Resume(r.id));
                    } else {
                        let text = format!("run {} is {}: only interrupted or failed runs resume", r.id, r.status);
                        self.say(text, true);
                    }
                }
            }
            _ => {}
        }
    }

    fn ask_cancel(&mut self, id: Option<i64>) {
        let Some(run) = id.and_then(|id| self.snapshot.run(id)) else { return };
        if run.status.is_terminal() {
            let text = format!("run {} is {}: nothing to cancel", run.id, run.status);
            self.say(text, true);
            return;
        }
        self.modal = Some(Modal::Confirm {
            question: format!("Stop run {}? It becomes `interrupted` and keeps its data; `r` resumes it.", run.id),
            action: Confirmed::Cancel(run.id),
        });
    }

    fn cycle_sort(&mut self) {
        let table = self.runs.table(&self.snapshot, now());
        let titles: Vec<String> = table.columns.iter().map(|c| c.title()).collect();
        let next = match &self.runs.sort {
            None => 0,
            Some(s) => titles.iter().position(|t| t == s).map_or(0, |i| (i + 1) % titles.len()),
        };
        self.runs.sort = titles.get(next).cloned();
    }

    fn modal_key(&mut self, modal: Modal, key: KeyEvent) {
        match modal {
            Modal::Confirm { action, question } => match key.code {
                KeyCode::Char('y') | KeyCode::Char('Y') => match action {
                    Confirmed::Delete(ids) => {
                        self.runs.selected.retain(|id| !ids.contains(id));
                        self.send(Request::Delete(ids));
                    }
                    Confirmed::Cancel(id) => self.send(Request::Cancel(id)),
                },
                KeyCode::Char('n') | KeyCode::Esc => {}
                _ => self.modal = Some(Modal::Confirm { question, action }),
            },
            Modal::Annotate { id, mut notes, mut tags, mut on_tags } => {
                match key.code {
                    KeyCode::Esc => return,
                    KeyCode::Enter => {
                        let tags: Vec<String> =
                            tags.split(',').map(|t| t.trim().to_string()).filter(|t| !t.is_empty()).collect();
                        self.send(Request::Annotate { id, notes, tags });
                        return;
                    }
                    KeyCode::Tab | KeyCode::BackTab | KeyCode::Up | KeyCode::Down => on_tags = !on_tags,
                    KeyCode::Backspace => {
                        if on_tags {
                            tags.pop()
                        } else {
                            notes.pop()
                        };
                    }
                    KeyCode::Char(c) => {
                        if on_tags {
                            tags.push(c)
                        } else {
                            notes.push(c)
                        }
                    }
                    _ => {}
                }
                self.modal = Some(Modal::Annotate { id, notes, tags, on_tags });
            }
        }
    }

    fn launch_key(&mut self, key: KeyEvent) {
        match key.code {
            KeyCode::Down | KeyCode::Char('j') => self.launch.move_cursor(1),
            KeyCode::Up | KeyCode::Char('k') => self.launch.move_cursor(-1),
            KeyCode::PageDown => self.launch.move_cursor(10),
            KeyCode::PageUp => self.launch.move_cursor(-10),
            KeyCode::Left | KeyCode::Char('h') => self.launch.cycle(false, &self.plugins),
            KeyCode::Right | KeyCode::Char('l') => self.launch.cycle(true, &self.plugins),
            KeyCode::Char('L') => self.launch_form(),
            KeyCode::Esc => self.screen = Screen::Runs,
            KeyCode::Enter => match self.launch.current() {
                FormRow::LaunchButton => self.launch_form(),
                FormRow::Field(i) if self.launch.fields[i].cycles() => self.launch.cycle(true, &self.plugins),
                FormRow::Field(i) => {
                    self.launch.before_edit = self.launch.fields[i].text.clone();
                    self.launch.editing = true;
                }
                _ => self.launch.cycle(true, &self.plugins),
            },
            _ => {}
        }
    }

    fn edit_key(&mut self, key: KeyEvent) {
        let FormRow::Field(i) = self.launch.current() else {
            self.launch.editing = false;
            return;
        };
        let field = &mut self.launch.fields[i];
        match key.code {
            KeyCode::Enter | KeyCode::Tab => {
                field.check();
                self.launch.editing = false;
                if field.error.is_none() {
                    self.validate_form();
                    self.launch.move_cursor(1);
                }
            }
            KeyCode::Esc => {
                field.text = std::mem::take(&mut self.launch.before_edit);
                field.check();
                self.launch.editing = false;
            }
            KeyCode::Backspace => {
                field.text.pop();
                field.check();
            }
            KeyCode::Char(c) => {
                field.text.push(c);
                field.check();
            }
            _ => {}
        }
    }

    /// Runs the plugins' own validators on the whole form; the reason shows under the form.
    fn validate_form(&mut self) -> Option<Vec<RunConfig>> {
        let result = self.resolve_form();
        self.launch.error = result.as_ref().err().cloned();
        result.ok()
    }

    /// Every configuration of the form (several when fields hold lists, one per seed), planned
    /// as `workbench sweep` plans a grid: every bad point is reported, not only the first.
    fn resolve_form(&self) -> Result<Vec<RunConfig>, String> {
        let (mut axes, seeds) = self.launch.axes()?;
        let (Some(layer), Some(task)) = (self.launch.layer_name(), self.launch.task_name()) else {
            return Err("no layer or task plugin is loaded: see the Plugins screen".into());
        };
        axes.push(grid::Axis { key: "train.seed".into(), values: seeds.iter().map(u64::to_string).collect() });
        let spec = grid::Spec { layers: vec![layer.to_string()], task: task.to_string(), axes };
        let points = grid::plan(&self.host, &spec).map_err(|e| format!("{e:#}"))?;
        Ok(points.into_iter().map(|p| p.config).collect())
    }

    fn launch_form(&mut self) {
        let Some(configs) = self.validate_form() else {
            let reason = self.launch.error.clone().unwrap_or_default();
            self.say(format!("cannot launch: {reason}"), true);
            return;
        };
        let runs: anyhow::Result<Vec<NewRun>> =
            configs.iter().map(|c| ops::launch::new_run_of(&self.host, c)).collect();
        match runs {
            Ok(runs) => {
                self.send(Request::Launch(runs));
                self.live_run = None;
                self.screen = Screen::Runs;
            }
            Err(e) => self.say(format!("cannot launch: {e:#}"), true),
        }
    }

    /// Launches the default experiment (welcome screen).
    pub fn launch_default(&mut self) {
        let mut runs = Vec::new();
        for (layer, overrides) in DEFAULT_EXPERIMENT {
            let owned: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
            match ops::launch::resolve_run(&self.host, layer, "sudoku", &owned) {
                Ok(r) => runs.push(r),
                Err(e) => {
                    self.say(format!("cannot launch the default experiment: {e:#}"), true);
                    return;
                }
            }
        }
        self.runs.selected = BTreeSet::new();
        self.send(Request::Launch(runs));
        self.say("launched Hyper-SET and Transformer on easy Sudoku (300 steps each)", false);
    }

    fn live_key(&mut self, key: KeyEvent) {
        let ids: Vec<i64> = self.live_candidates().iter().map(|r| r.id).collect();
        let at = self.live_id().and_then(|id| ids.iter().position(|i| *i == id)).unwrap_or(0);
        match key.code {
            KeyCode::Down | KeyCode::Char('j') if !ids.is_empty() => {
                self.live_run = Some(ids[(at + 1).min(ids.len() - 1)])
            }
            KeyCode::Up | KeyCode::Char('k') if !ids.is_empty() => self.live_run = Some(ids[at.saturating_sub(1)]),
            KeyCode::Char('x') => self.ask_cancel(self.live_id()),
            KeyCode::Esc => self.screen = Screen::Runs,
            _ => {}
        }
    }

    fn compare_key(&mut self, key: KeyEvent) {
        match key.code {
            KeyCode::Char('m') => self.compare.smooth = !self.compare.smooth,
            KeyCode::Char('w') => self.compare.wall_time = !self.compare.wall_time,
            KeyCode::Char('l') => self.compare.log_y = !self.compare.log_y,
            KeyCode::Char('p') | KeyCode::Char('P') => {
                let ids = self.compared_runs();
                if ids.is_empty() {
                    self.say("no runs to export: mark some on the Runs screen with space", true);
                    return;
                }
                let ext = if key.code == KeyCode::Char('p') { "png" } else { "svg" };
                let out = export_path("compare", ext);
                self.send(Request::ExportPlot { runs: ids, out });
            }
            KeyCode::Esc => self.screen = Screen::Runs,
            _ => {}
        }
    }

    fn ablation_key(&mut self, key: KeyEvent) {
        let columns = self.ablation_table().0.columns.len();
        match key.code {
            KeyCode::Char('s') if columns > 0 => {
                let next = self.ablation_sort.map_or(0, |(c, _)| (c + 1) % columns);
                self.ablation_sort = Some((next, self.ablation_sort.is_some_and(|s| s.1)));
            }
            KeyCode::Char('S') => {
                if let Some((c, d)) = self.ablation_sort {
                    self.ablation_sort = Some((c, !d));
                }
            }
            KeyCode::Char(c @ ('M' | 'T' | 'C')) => {
                let (format, ext) = match c {
                    'M' => (Format::Markdown, "md"),
                    'T' => (Format::Latex, "tex"),
                    _ => (Format::Csv, "csv"),
                };
                let runs = self.ablation_runs();
                if runs.is_empty() {
                    self.say("no runs in the table: mark some on the Runs screen, or finish one", true);
                } else {
                    self.send(Request::ExportAblation { runs, format, out: export_path("ablation", ext) });
                }
            }
            KeyCode::Esc => self.screen = Screen::Runs,
            _ => {}
        }
    }

    fn mouse(&mut self, kind: MouseEventKind, x: u16, y: u16) {
        match kind {
            MouseEventKind::ScrollDown => match self.screen {
                Screen::Launch => self.launch.move_cursor(1),
                _ => self.move_cursor(1),
            },
            MouseEventKind::ScrollUp => match self.screen {
                Screen::Launch => self.launch.move_cursor(-1),
                _ => self.move_cursor(-1),
            },
            MouseEventKind::Down(MouseButton::Left) => {
                if let Some(tabs) = self.tabs_area {
                    if y == tabs.y {
                        self.click_tab(x);
                        return;
                    }
                }
                if self.screen != Screen::Runs {
                    return;
                }
                let Some((area, columns)) = self.runs_area.clone() else { return };
                if x < area.x || x >= area.x + area.width || y < area.y || y >= area.y + area.height {
                    return;
                }
                if y == area.y {
                    // A click on a header sorts by that column; a second click reverses.
                    if let Some(i) = columns.iter().position(|(a, b)| (*a..*b).contains(&x)) {
                        let titles: Vec<String> =
                            self.runs.table(&self.snapshot, now()).columns.iter().map(|c| c.title()).collect();
                        if let Some(t) = titles.get(i) {
                            if self.runs.sort.as_ref() == Some(t) {
                                self.runs.descending = !self.runs.descending;
                            } else {
                                self.runs.sort = Some(t.clone());
                            }
                        }
                    }
                } else {
                    let row = (y - area.y - 1) as usize + self.runs_offset();
                    if row < self.visible_runs().len() {
                        self.runs.cursor = row;
                    }
                }
            }
            _ => {}
        }
    }

    /// First visible row of the runs table.
    pub fn runs_offset(&self) -> usize {
        self.runs_scroll
    }

    fn click_tab(&mut self, x: u16) {
        let mut at = self.tabs_area.map_or(0, |a| a.x) + 1;
        for (i, s) in Screen::ALL.iter().enumerate() {
            let w = format!("{} {}", i + 1, s.title()).len() as u16 + 3;
            if x >= at && x < at + w {
                self.screen = *s;
                return;
            }
            at += w;
        }
    }
}

/// `NAME-<unix seconds>.EXT` in the current directory.
fn export_path(name: &str, ext: &str) -> std::path::PathBuf {
    let dir = std::env::current_dir().unwrap_or_default();
    dir.join(format!("{name}-{}.{ext}", now() as u64))
}
