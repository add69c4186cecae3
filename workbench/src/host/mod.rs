//! The plugin host: finds plugin libraries, loads them, and hands out the objects they build.
//!
//! - [`workspace`](mod@workspace): which workspace is used, and whether the binary runs from its build;
//! - [`build`]: the one way plugin crates are built, and the content rule for when;
//! - `autobuild`: building stale plugin crates at start; [`watch`] and [`hot`]: hot reload;
//! - `discover` and `load`: where libraries are looked for, and loading one;
//! - [`build_id`]: which build of a plugin made a run.
//!
//! Libraries stay mapped while anything built from them is alive: every object comes back
//! wrapped in [`Plugged`], which holds an `Arc` to its library. Compute runs only in worker
//! processes; the long-lived TUI process loads plugins for their declarations alone (each
//! plugin carries its own candle and thread pool, which would stay behind after use).

mod autobuild;
pub mod build;
pub mod build_id;
mod discover;
pub mod hot;
mod load;
pub mod probe;
pub mod watch;
pub mod workspace;

pub use autobuild::{
    build_stale_plugins, ensure_workspace_plugins_built, settings_for as autobuild_settings, BuildOutcome, NO_BUILD_VAR,
};
pub use build_id::{build_of, stamp_builds};
pub use discover::{build_output_dir, library_files, search_path, PLUGIN_PATH_VAR};
pub use load::{crate_name_of, load, LoadError, LoadedPlugin};
pub use watch::{Activation, Reload, WatchConfig, WatchEvent, Watcher};
pub use workspace::{
    plugin_crates, workspace, workspace_plugin_libraries, workspace_root, PluginCrate, Workspace, WORKSPACE_VAR,
};

use anyhow::{bail, Result};
use libloading::Library;
use plugin_api::{PluginKind, Task, TaskModel};
use std::ops::Deref;
use std::path::PathBuf;
use std::sync::Arc;

/// An object built by a plugin, keeping the plugin's library loaded. The object is dropped
/// before the library handle (field order).
pub struct Plugged<T: ?Sized> {
    value: Box<T>,
    library: Arc<Library>,
}

impl<T: ?Sized> Plugged<T> {
    fn new(value: Box<T>, library: Arc<Library>) -> Self {
        Plugged { value, library }
    }
}

impl<T: ?Sized> Deref for Plugged<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

impl Plugged<dyn Task> {
    /// Builds the task's embedding and head; the model keeps the task's library loaded.
    pub fn build_model(&self, vb: candle_nn::VarBuilder, width: usize) -> plugin_api::Result<Plugged<dyn TaskModel>> {
        let model = self.value.build_model(vb, width)?;
        Ok(Plugged::new(model, self.library.clone()))
    }
}

/// All plugins found on the search path, and the libraries that failed to load.
#[derive(Default)]
pub struct PluginHost {
    /// Loaded plugins, in search-path order.
    pub plugins: Vec<LoadedPlugin>,
    /// Libraries that were refused, with the reason.
    pub errors: Vec<LoadError>,
}

impl PluginHost {
    /// Loads every library in `dirs`. A name already loaded from an earlier directory shadows
    /// later ones (reported as an error so the user sees which file is ignored).
    /// In the workspace's own build output only the workspace's plugin crates are loaded.
    pub fn load_dirs(dirs: &[PathBuf]) -> Self {
        let workspace = workspace_plugin_libraries();
        let mut host = PluginHost::default();
        for dir in dirs {
            for file in library_files(dir) {
                let skip = workspace.as_ref().is_some_and(|(out_dir, names)| {
                    out_dir == dir
                        && !file.file_name().and_then(|n| n.to_str()).is_some_and(|n| names.iter().any(|x| x == n))
                });
                if !skip {
                    let built_here = workspace.as_ref().is_some_and(|(out_dir, names)| built_by(&file, out_dir, names));
                    host.add_library(file, built_here);
                }
            }
        }
        host
    }

    /// Loads one library file into the host, probing it in a child process first (see
    /// [`probe`]) unless this workspace's build made it.
    pub fn add(&mut self, file: PathBuf) {
        let built_here = workspace_plugin_libraries().is_some_and(|(out_dir, names)| built_by(&file, &out_dir, &names));
        self.add_library(file, built_here);
    }

    fn add_library(&mut self, file: PathBuf, built_here: bool) {
        if !built_here {
            if let Err(e) = probe::probe(&file) {
                self.errors.push(e);
                return;
            }
        }
        match load(&file) {
            Ok(plugin) => {
                if let Some(first) = self.plugins.iter().find(|p| p.declaration.name == plugin.declaration.name) {
                    self.errors.push(LoadError::Declare {
                        reason: format!(
                            "plugin `{}` is already loaded from {}; this copy is ignored",
                            plugin.declaration.name,
                            first.path.display()
                        ),
                        path: file,
                    });
                } else {
                    self.plugins.push(plugin);
                }
            }
            Err(e) => self.errors.push(e),
        }
    }

    /// Refuses a plugin's name among a command's `key=value` arguments (`workbench train
    /// transformer sudoku`), naming the option that takes it.
    pub fn refuse_plugin_names(&self, arguments: &[String]) -> Result<()> {
        for word in arguments.iter().filter(|a| !a.contains('=')) {
            if let Some(p) = self.plugins.iter().find(|p| p.declaration.name == word.trim()) {
                let kind = p.declaration.kind().as_str();
                bail!("`{word}` is a {kind} plugin: give it as `--{kind} {}` (the other arguments are key=value settings)", word.trim());
            }
        }
        Ok(())
    }

    /// The plugin called `name` of the given kind; the error lists what is available.
    pub fn get(&self, name: &str, kind: PluginKind) -> Result<&LoadedPlugin> {
        if let Some(p) = self.plugins.iter().find(|p| p.declaration.name == name) {
            if p.declaration.kind() != kind {
                bail!("`{name}` is a {} plugin, not a {} plugin", p.declaration.kind().as_str(), kind.as_str());
            }
            return Ok(p);
        }
        let available: Vec<&str> =
            self.plugins.iter().filter(|p| p.declaration.kind() == kind).map(|p| p.declaration.name.as_str()).collect();
        let suggestion = crate::run_config::closest_key(name, available.iter().copied())
            .map(|close| format!(" (did you mean `{close}`?)"))
            .unwrap_or_default();
        let mut message = format!(
            "unknown {} plugin `{name}`{suggestion}; available: {}",
            kind.as_str(),
            if available.is_empty() { "none".to_string() } else { available.join(", ") }
        );
        if let Some(err) = self.errors.iter().find(|e| crate_name_of(e.path()) == name) {
            message.push_str(&format!("\n  a library named like it failed to load: {err}"));
        } else if !self.errors.is_empty() {
            message.push_str(&format!("\n  ({} libraries failed to load: see `workbench plugins`)", self.errors.len()));
        }
        message.push_str(&format!(
            "\n  plugins are searched next to the executable, in --plugin-dir and in {PLUGIN_PATH_VAR}; `workbench plugins` lists them"
        ));
        bail!(message)
    }

    /// Builds a layer from plugin `name`.
    pub fn build_layer(
        &self,
        name: &str,
        config: &plugin_api::Config,
        vb: candle_nn::VarBuilder,
    ) -> Result<Plugged<dyn plugin_api::Layer>> {
        let plugin = self.get(name, PluginKind::Layer)?;
        let layer = plugin.declaration.build_layer(config, vb).map_err(|e| anyhow::anyhow!("layer `{name}`: {e}"))?;
        Ok(Plugged::new(layer, plugin.library()))
    }

    /// Builds a task from plugin `name` with the run's seed.
    pub fn build_task(&self, name: &str, config: &plugin_api::Config, seed: u64) -> Result<Plugged<dyn Task>> {
        self.build_task_reporting(name, config, seed, plugin_api::Progress::ignored())
    }

    /// [`PluginHost::build_task`], the task reporting its data preparation to `progress`.
    pub fn build_task_reporting(
        &self,
        name: &str,
        config: &plugin_api::Config,
        seed: u64,
        progress: plugin_api::Progress<'_>,
    ) -> Result<Plugged<dyn Task>> {
        let plugin = self.get(name, PluginKind::Task)?;
        let task = plugin
            .declaration
            .build_task_reporting(config, seed, progress)
            .map_err(|e| anyhow::anyhow!("task `{name}`: {e}"))?;
        Ok(Plugged::new(task, plugin.library()))
    }
}

/// Whether `file` (links followed) is one of the plugin libraries `names` in this workspace's
/// build output `out_dir`: code the host built from the workspace's own sources, which needs
/// no probe.
fn built_by(file: &std::path::Path, out_dir: &std::path::Path, names: &[String]) -> bool {
    let real = std::fs::canonicalize(file).unwrap_or_else(|_| file.to_path_buf());
    let out = std::fs::canonicalize(out_dir).unwrap_or_else(|_| out_dir.to_path_buf());
    real.parent() == Some(out.as_path())
        && real.file_name().and_then(|n| n.to_str()).is_some_and(|n| names.iter().any(|x| x == n))
}
