//! Hot reload: watching plugin sources and libraries, rebuilding, reloading.
//!
//! A [`Watcher`] runs on its own thread. It watches (with `notify`):
//!
//! - each workspace plugin crate's `src/` and manifest, and those of the crates it depends on
//!   by path (`datasets`); `plugin-api` is not watched: a change to it needs a rebuilt host;
//! - the workspace's `Cargo.toml` and `plugins/`, so a crate added while watching (`workbench
//!   plugin new`) is picked up once it is a workspace member;
//! - plugin directories outside the workspace's build output, for libraries built elsewhere.
//!
//! After [`DEBOUNCE`] of quiet, each changed crate whose build id ([`super::build_id`])
//! differs from its last build attempt is rebuilt through [`super::build::build_crates`] (the
//! running binary's profile and features, the workspace's feature resolution, so only that
//! crate compiles), cargo's output passed on line by line, and the build recorded beside the
//! library; a changed library file is taken as it is. The new library is loaded from a fresh
//! copy and its fingerprint checked ([`super::hot`]), then handed over in a [`WatchEvent::Loaded`]: whoever owns the
//! [`PluginHost`] makes it active with [`PluginHost::accept`] (the TUI on its UI thread,
//! `workbench watch` on its main thread). A failed build or load is reported and changes
//! nothing: the previous version stays active.

use super::autobuild::{building_disabled, settings_for};
use super::build::{build_crates, record_build, BuildSettings};
use super::build_id::{crate_build_id, is_editor_leftover, library_build_id, short, source_dirs};
use super::discover::search_path;
use super::hot::load_fresh;
use super::workspace::{plugin_crates, running_from_workspace, running_profile, PluginCrate};
use super::{LoadedPlugin, PluginHost};
use notify_debouncer_mini::notify::{self, RecommendedWatcher, RecursiveMode};
use notify_debouncer_mini::{new_debouncer, DebounceEventResult, Debouncer};
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Quiet time after the last change before a rebuild starts.
pub const DEBOUNCE: Duration = Duration::from_millis(300);

/// What a [`Watcher`] watches and how it builds.
#[derive(Debug, Clone)]
pub struct WatchConfig {
    /// Workspace root, where cargo runs.
    pub root: PathBuf,
    /// Plugin crates rebuilt when their sources change.
    pub crates: Vec<PluginCrate>,
    /// Also pick up crates that appear under `root/plugins/` and become workspace members.
    pub discover_new_crates: bool,
    /// Directories whose plugin library files are reloaded when they change.
    pub library_dirs: Vec<PathBuf>,
    /// cargo profile of the rebuilds (`dev`, `release`, ...): the running binary's.
    pub profile: String,
    /// More arguments for `cargo build` (features).
    pub cargo_args: Vec<String>,
    /// Environment variables for cargo (e.g. `CARGO_TARGET_DIR`).
    pub cargo_env: Vec<(String, String)>,
    /// Quiet time after the last change before acting.
    pub debounce: Duration,
}

impl WatchConfig {
    /// What the running binary should watch: when it runs from the workspace's build output
    /// (and `WORKBENCH_NO_BUILD` is not `1`), the workspace's plugin crates; always, the
    /// plugin directories of the search path other than the workspace's build output.
    pub fn for_running_binary(extra_dirs: &[PathBuf]) -> WatchConfig {
        let from_workspace = running_from_workspace();
        let out_dir = from_workspace.as_ref().map(|(_, out)| out.clone());
        let root = from_workspace.map(|(root, _)| root);
        let building = root.is_some() && !building_disabled();
        let crates = match (&root, building) {
            (Some(r), true) => plugin_crates(r),
            _ => Vec::new(),
        };
        let library_dirs =
            search_path(extra_dirs).into_iter().filter(|d| d.is_dir() && out_dir.as_ref() != Some(d)).collect();
        let settings = root.as_deref().map(settings_for);
        WatchConfig {
            root: root.unwrap_or_default(),
            crates,
            discover_new_crates: building,
            library_dirs,
            profile: settings.as_ref().map_or_else(running_profile, |s| s.profile.clone()),
            cargo_args: settings.map(|s| s.cargo_args).unwrap_or_default(),
            cargo_env: Vec::new(),
            debounce: DEBOUNCE,
        }
    }

    /// How this configuration builds (see [`super::build`]).
    pub fn build_settings(&self) -> BuildSettings {
        BuildSettings {
            root: self.root.clone(),
            profile: self.profile.clone(),
            cargo_args: self.cargo_args.clone(),
            cargo_env: self.cargo_env.clone(),
        }
    }

    /// Builds one crate (see [`super::build::build_crates`]), each line of cargo's output
    /// passed to `on_line` as it comes; the path of the built library, or a summary of the
    /// compiler errors.
    pub fn cargo_build(&self, krate: &PluginCrate, on_line: &mut dyn FnMut(String)) -> Result<PathBuf, String> {
        self.cargo_build_tracked(krate, on_line, None)
    }

    fn cargo_build_tracked(
        &self,
        krate: &PluginCrate,
        on_line: &mut dyn FnMut(String),
        running: Option<&Mutex<Option<u32>>>,
    ) -> Result<PathBuf, String> {
        let mut report = build_crates(&self.build_settings(), std::slice::from_ref(krate), on_line, running)?;
        match report.built.remove(&krate.package) {
            Some(library) => Ok(library),
            None => Err(report.failed.remove(&krate.package).unwrap_or_else(|| "cargo reported nothing".into())),
        }
    }
}

/// A new version of a plugin, loaded and checked, waiting to be made active.
#[derive(Clone)]
pub struct Reload {
    /// The crate (`plugins/hyperset`) or library file it came from.
    pub source: String,
    /// The plugin's declared name.
    pub name: String,
    /// Its declared version.
    pub version: String,
    /// Its build id (see [`super::build_id`]).
    pub build: Option<String>,
    /// When the build finished (or the changed library file settled).
    pub built_at: Instant,
    /// Copy, open, fingerprint check and registration.
    pub load_time: Duration,
    plugin: Arc<Mutex<Option<LoadedPlugin>>>,
}

impl Reload {
    /// A reload of `plugin` from `source`, built at `built_at`, loaded in `load_time`.
    pub fn new(source: String, plugin: LoadedPlugin, built_at: Instant, load_time: Duration) -> Reload {
        Reload {
            source,
            name: plugin.declaration.name.clone(),
            version: plugin.declaration.version.clone(),
            build: plugin.build.clone(),
            built_at,
            load_time,
            plugin: Arc::new(Mutex::new(Some(plugin))),
        }
    }

    /// The plugin, the first time it is asked for.
    pub fn take(&self) -> Option<LoadedPlugin> {
        self.plugin.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

impl std::fmt::Debug for Reload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reload")
            .field("source", &self.source)
            .field("name", &self.name)
            .field("build", &self.build)
            .field("load_time", &self.load_time)
            .finish()
    }
}

/// What a [`Watcher`] reports.
#[derive(Debug, Clone)]
pub enum WatchEvent {
    /// Watching began.
    Watching {
        /// Packages whose sources are watched.
        crates: Vec<String>,
        /// Directories watched for library files.
        library_dirs: Vec<PathBuf>,
    },
    /// A crate's sources changed: cargo starts.
    Building {
        /// The package being built.
        package: String,
    },
    /// One line of cargo's output.
    Output {
        /// The package being built.
        package: String,
        /// The line, without its end.
        line: String,
    },
    /// A new version is loaded and checked: make it active with [`PluginHost::accept`].
    Loaded(Reload),
    /// cargo failed; the previous version stays active.
    BuildFailed {
        /// The package.
        package: String,
        /// The compiler errors (see [`WatchEvent::Output`] for everything).
        summary: String,
    },
    /// A library did not load (not a library, another fingerprint...); the previous version
    /// stays active.
    LoadFailed {
        /// The library or crate.
        source: String,
        /// Why, naming the fix.
        reason: String,
    },
    /// Something else worth a line.
    Note(String),
}

impl WatchEvent {
    /// The event as one line (several for a failed build) for logs; `None` for
    /// [`WatchEvent::Loaded`], which is reported once accepted.
    pub fn describe(&self) -> Option<String> {
        match self {
            WatchEvent::Watching { crates, library_dirs } => {
                let mut parts = Vec::new();
                if !crates.is_empty() {
                    parts.push(format!(
                        "the sources of {} ({})",
                        crate::wording::count(crates.len(), "plugin crate"),
                        crates.join(", ")
                    ));
                }
                if !library_dirs.is_empty() {
                    let dirs: Vec<String> = library_dirs.iter().map(|d| d.display().to_string()).collect();
                    parts.push(format!("the libraries in {}", dirs.join(", ")));
                }
                if parts.is_empty() {
                    parts.push("nothing".into());
                }
                Some(format!("watching {}", parts.join(" and ")))
            }
            WatchEvent::Building { package } => Some(format!("{package}: sources changed, rebuilding")),
            WatchEvent::Output { line, .. } => Some(format!("  {line}")),
            WatchEvent::Loaded(_) => None,
            WatchEvent::BuildFailed { package, summary } => {
                Some(format!("{package}: build failed; the version loaded before stays active\n{summary}"))
            }
            WatchEvent::LoadFailed { reason, .. } => {
                Some(format!("not loaded (a version loaded before stays active): {reason}"))
            }
            WatchEvent::Note(text) => Some(text.clone()),
        }
    }
}

/// A reloaded plugin made active, and how long it took.
#[derive(Debug, Clone)]
pub struct Activation {
    /// The plugin's name.
    pub name: String,
    /// A line for logs.
    pub line: String,
    /// From the end of the build to the swap done (includes the time the event waited).
    pub since_build: Duration,
    /// Copy, open, fingerprint check and registration.
    pub load: Duration,
    /// The registry swap.
    pub swap: Duration,
}

impl PluginHost {
    /// Makes a reloaded plugin active ([`PluginHost::swap`]); the replaced version is dropped
    /// here, its library closed once nothing built from it is alive. Refused (the host
    /// unchanged) when another library provides a plugin of the same name.
    pub fn accept(&mut self, reload: &Reload) -> Result<Activation, String> {
        let plugin = reload.take().ok_or_else(|| format!("{}: this reload was already applied", reload.name))?;
        let swap_started = Instant::now();
        let replaced = self.swap(plugin).map_err(|e| format!("{}: {e}", reload.source))?;
        let swap = swap_started.elapsed();
        let since_build = reload.built_at.elapsed();
        drop(replaced);
        let build = reload.build.as_deref().map_or_else(|| "?".to_string(), |b| short(b).to_string());
        let line = format!(
            "{} {} build {build} active ({}): {:.1} ms after its build (copy + load + check {:.1} ms, swap {:.3} ms)",
            reload.name,
            reload.version,
            reload.source,
            since_build.as_secs_f64() * 1e3,
            reload.load_time.as_secs_f64() * 1e3,
            swap.as_secs_f64() * 1e3,
        );
        Ok(Activation { name: reload.name.clone(), line, since_build, load: reload.load_time, swap })
    }
}

/// Watches plugin sources and libraries on a thread of its own (see the module doc).
/// Dropping it stops the thread and the build in progress.
pub struct Watcher {
    stop: Arc<AtomicBool>,
    cargo: Arc<Mutex<Option<u32>>>,
    thread: Option<JoinHandle<()>>,
}

impl Watcher {
    /// Starts watching; every event goes to `on_event`, on the watcher's thread.
    pub fn start(config: WatchConfig, on_event: impl FnMut(WatchEvent) + Send + 'static) -> notify::Result<Watcher> {
        let (tx, rx) = std::sync::mpsc::channel();
        let debouncer = new_debouncer(config.debounce, tx)?;
        let stop = Arc::new(AtomicBool::new(false));
        let cargo = Arc::new(Mutex::new(None));
        let mut state = State {
            config,
            on_event: Box::new(on_event),
            crates: Vec::new(),
            libraries: HashMap::new(),
            watched: BTreeSet::new(),
            debouncer,
            stop: stop.clone(),
            cargo: cargo.clone(),
        };
        let thread = std::thread::Builder::new().name("plugin-watch".into()).spawn(move || {
            state.begin();
            state.run(rx);
        })?;
        Ok(Watcher { stop, cargo, thread: Some(thread) })
    }

    /// Stops watching and waits for the thread (and a build in progress, which is killed).
    pub fn stop(mut self) {
        self.signal();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }

    fn signal(&self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(pid) = *self.cargo.lock().unwrap_or_else(|p| p.into_inner()) {
            // SAFETY: plain kill(2) of the cargo process this watcher started.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.signal();
    }
}

/// A watched crate and the sources hash of its last build attempt.
struct WatchedCrate {
    krate: PluginCrate,
    dirs: Vec<PathBuf>,
    attempted: Option<String>,
}

impl WatchedCrate {
    fn affected_by(&self, path: &Path, name: &str) -> bool {
        self.dirs.iter().any(|d| {
            path.starts_with(d.join("src")) || (path.parent() == Some(d) && matches!(name, "Cargo.toml" | "build.rs"))
        })
    }
}

struct State {
    config: WatchConfig,
    on_event: Box<dyn FnMut(WatchEvent) + Send>,
    crates: Vec<WatchedCrate>,
    /// Library file -> hash of the version last loaded from it.
    libraries: HashMap<PathBuf, Option<String>>,
    watched: BTreeSet<(PathBuf, bool)>,
    debouncer: Debouncer<RecommendedWatcher>,
    stop: Arc<AtomicBool>,
    cargo: Arc<Mutex<Option<u32>>>,
}

impl State {
    fn emit(&mut self, event: WatchEvent) {
        (self.on_event)(event);
    }

    fn watch(&mut self, path: &Path, recursive: bool) {
        if !path.exists() || !self.watched.insert((path.to_path_buf(), recursive)) {
            return;
        }
        let mode = if recursive { RecursiveMode::Recursive } else { RecursiveMode::NonRecursive };
        if let Err(e) = self.debouncer.watcher().watch(path, mode) {
            self.emit(WatchEvent::Note(format!("cannot watch {}: {e}", path.display())));
        }
    }

    fn root(&self) -> Option<PathBuf> {
        (!self.config.root.as_os_str().is_empty()).then(|| self.config.root.clone())
    }

    /// Watches a crate's sources and those of its path dependencies.
    fn add_crate(&mut self, krate: PluginCrate, attempted: Option<String>) -> usize {
        let root = self.root();
        let dirs: Vec<PathBuf> = source_dirs(&krate, root.as_deref()).into_iter().map(|(_, d)| d).collect();
        for dir in &dirs {
            self.watch(&dir.join("src"), true);
            self.watch(dir, false);
        }
        self.crates.push(WatchedCrate { krate, dirs, attempted });
        self.crates.len() - 1
    }

    fn begin(&mut self) {
        let root = self.root();
        for krate in self.config.crates.clone() {
            let current = crate_build_id(&krate, root.as_deref()).ok();
            self.add_crate(krate, current);
        }
        if let (Some(root), true) = (root, self.config.discover_new_crates) {
            self.watch(&root, false);
            self.watch(&root.join("plugins"), false);
        }
        for dir in self.config.library_dirs.clone() {
            self.watch(&dir, false);
        }
        let crates = self.crates.iter().map(|c| c.krate.package.clone()).collect();
        let library_dirs = self.config.library_dirs.clone();
        self.emit(WatchEvent::Watching { crates, library_dirs });
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    fn run(&mut self, rx: Receiver<DebounceEventResult>) {
        while !self.stopped() {
            let first = match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(result) => result,
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => return,
            };
            let mut paths = BTreeSet::new();
            for result in std::iter::once(first).chain(rx.try_iter()) {
                match result {
                    Ok(events) => paths.extend(events.into_iter().map(|e| e.path)),
                    Err(e) => self.emit(WatchEvent::Note(format!("file watching: {e}"))),
                }
            }
            self.process(paths);
        }
    }

    fn process(&mut self, paths: BTreeSet<PathBuf>) {
        let root = self.root();
        let mut rescan = false;
        let mut rebuild = BTreeSet::new();
        let mut libraries = BTreeSet::new();
        for path in paths {
            let Some(name) = path.file_name().and_then(|n| n.to_str()).map(str::to_string) else { continue };
            if is_editor_leftover(&name) {
                continue;
            }
            if let (Some(root), true) = (&root, self.config.discover_new_crates) {
                rescan |= path == root.join("Cargo.toml") || path.parent() == Some(&root.join("plugins"));
            }
            rebuild.extend(self.crates.iter().enumerate().filter(|(_, c)| c.affected_by(&path, &name)).map(|(i, _)| i));
            let in_library_dir = self.config.library_dirs.iter().any(|d| path.parent() == Some(d.as_path()));
            if in_library_dir && name.ends_with(std::env::consts::DLL_SUFFIX) {
                libraries.insert(path);
            }
        }
        if rescan {
            rebuild.extend(self.discover());
        }
        for i in rebuild {
            if self.stopped() {
                return;
            }
            self.rebuild(i);
        }
        for library in libraries {
            if self.stopped() {
                return;
            }
            self.reload_library(&library);
        }
    }

    /// Crates under `plugins/` that became workspace members since the last look.
    fn discover(&mut self) -> Vec<usize> {
        let Some(root) = self.root() else { return Vec::new() };
        let members: Vec<String> = std::fs::read_to_string(root.join("Cargo.toml"))
            .ok()
            .and_then(|t| t.parse::<toml::Table>().ok())
            .and_then(|m| m.get("workspace")?.get("members")?.as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter_map(|m| m.as_str().map(|s| s.trim_end_matches('/').to_string()))
            .collect();
        let mut added = Vec::new();
        for krate in plugin_crates(&root) {
            if self.crates.iter().any(|c| c.krate.dir == krate.dir) {
                continue;
            }
            let Some(dir_name) = krate.dir.file_name().and_then(|n| n.to_str()) else { continue };
            let member = format!("plugins/{dir_name}");
            if !members.iter().any(|m| *m == member || m == "plugins/*") {
                continue;
            }
            self.emit(WatchEvent::Note(format!("new plugin crate {}: building it", krate.package)));
            added.push(self.add_crate(krate, None));
        }
        added
    }

    fn rebuild(&mut self, i: usize) {
        let root = self.root();
        let krate = self.crates[i].krate.clone();
        let id = match crate_build_id(&krate, root.as_deref()) {
            Ok(id) => id,
            Err(e) => {
                self.emit(WatchEvent::Note(format!("{}: cannot read its sources: {e}", krate.package)));
                return;
            }
        };
        if self.crates[i].attempted.as_deref() == Some(id.as_str()) {
            return; // touched, not changed (or this exact source already failed)
        }
        self.crates[i].attempted = Some(id.clone());
        let package = krate.package.clone();
        self.emit(WatchEvent::Building { package: package.clone() });
        let config = self.config.clone();
        let cargo = self.cargo.clone();
        let on_event = &mut self.on_event;
        let mut on_line = |line: String| on_event(WatchEvent::Output { package: package.clone(), line });
        let built = config.cargo_build_tracked(&krate, &mut on_line, Some(&cargo));
        let source = krate.dir.strip_prefix(&config.root).unwrap_or(&krate.dir).display().to_string();
        match built {
            Err(summary) if self.stopped() => drop(summary),
            Err(summary) => self.emit(WatchEvent::BuildFailed { package, summary }),
            Ok(library) => {
                let built_at = Instant::now();
                record_build(&library, &id);
                match load_fresh(&library) {
                    Ok((mut plugin, load_time)) => {
                        plugin.build = Some(id);
                        self.emit(WatchEvent::Loaded(Reload::new(source, plugin, built_at, load_time)));
                    }
                    Err(e) => self.emit(WatchEvent::LoadFailed { source, reason: e.to_string() }),
                }
            }
        }
    }

    fn reload_library(&mut self, path: &Path) {
        let source = path.display().to_string();
        if !path.is_file() {
            self.libraries.remove(path);
            self.emit(WatchEvent::Note(format!(
                "{source} was removed; a plugin loaded from it stays active until the workbench restarts"
            )));
            return;
        }
        let id = library_build_id(path).ok();
        if id.is_some() && self.libraries.get(path) == Some(&id) {
            return;
        }
        self.libraries.insert(path.to_path_buf(), id.clone());
        let settled = Instant::now();
        // A library dropped into a watched directory is unknown code: probed before it is loaded.
        if let Err(e) = super::probe::probe(path) {
            self.emit(WatchEvent::LoadFailed { source, reason: e.to_string() });
            return;
        }
        match load_fresh(path) {
            Ok((mut plugin, load_time)) => {
                plugin.build = id;
                self.emit(WatchEvent::Loaded(Reload::new(source, plugin, settled, load_time)));
            }
            Err(e) => self.emit(WatchEvent::LoadFailed { source, reason: e.to_string() }),
        }
    }
}
