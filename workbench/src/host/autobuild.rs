//! Building the workspace's own plugins before they are loaded.
//!
//! `cargo run` builds only the workbench (the workspace's default member); the plugins are
//! separate `cdylib` crates. When the running binary belongs to the workspace's build output
//! ([`running_from_workspace`]), every plugin crate whose sources changed since the host last
//! built it (the content rule of [`super::build`]) is built with the same profile and
//! features, in one cargo invocation that keeps going past a broken crate. A crate that does
//! not build is reported with its compiler errors (`workbench plugins`, the Plugins screen);
//! the others load, and so does the library it had before, if any.

use super::build::{build_crates, feature_args, has_workbench_member, record_build, recorded_build, BuildSettings};
use super::build_id::crate_build_id;
use super::workspace::{plugin_crates, running_from_workspace, running_profile, PluginCrate};
use std::path::Path;

/// Set to `1` to never run cargo from the workbench (e.g. in tests that build beforehand).
pub const NO_BUILD_VAR: &str = "WORKBENCH_NO_BUILD";

/// Whether building is turned off by [`NO_BUILD_VAR`].
pub fn building_disabled() -> bool {
    std::env::var(NO_BUILD_VAR).is_ok_and(|v| v == "1")
}

/// What [`ensure_workspace_plugins_built`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum BuildOutcome {
    /// Not running from the workspace's build output, or disabled: nothing to do.
    NotApplicable,
    /// Every plugin library was built from the current sources.
    UpToDate,
    /// cargo ran: the crates it built, and those that failed with their compiler errors.
    Built { rebuilt: Vec<String>, failed: Vec<(PluginCrate, String)> },
    /// cargo could not be run; the libraries that exist are used as they are.
    Failed(String),
}

/// The build settings of the running binary for the workspace at `root`: its profile, and
/// its features.
pub fn settings_for(root: &Path) -> BuildSettings {
    BuildSettings {
        root: root.to_path_buf(),
        profile: running_profile(),
        cargo_args: feature_args(has_workbench_member(root)),
        cargo_env: Vec::new(),
    }
}

/// Builds the workspace's plugin crates whose library is missing or was built from other
/// sources, next to the running binary. cargo's output goes to stderr, as `cargo run`'s does.
pub fn ensure_workspace_plugins_built() -> BuildOutcome {
    if building_disabled() {
        return BuildOutcome::NotApplicable;
    }
    let Some((root, out_dir)) = running_from_workspace() else { return BuildOutcome::NotApplicable };
    build_stale_plugins(&settings_for(&root), &out_dir, &mut |line| {
        // cargo's own output, shown where `cargo run` shows it (not a log message).
        eprintln!("{line}")
    })
}

/// Builds the plugin crates of `settings.root` whose library in `out_dir` is missing or was
/// built from other sources; cargo's output goes to `on_line`.
pub fn build_stale_plugins(settings: &BuildSettings, out_dir: &Path, on_line: &mut dyn FnMut(String)) -> BuildOutcome {
    let root = &settings.root;
    let mut stale = Vec::new();
    for krate in plugin_crates(root) {
        let Ok(id) = crate_build_id(&krate, Some(root)) else { continue };
        let library = out_dir.join(krate.library_file_name());
        if !library.is_file() || recorded_build(&library).as_deref() != Some(id.as_str()) {
            stale.push((krate, id));
        }
    }
    if stale.is_empty() {
        return BuildOutcome::UpToDate;
    }
    let names: Vec<&str> = stale.iter().map(|(c, _)| c.package.as_str()).collect();
    tracing::info!("building plugins in {}: {} ({})", root.display(), names.join(", "), settings.profile);
    let crates: Vec<PluginCrate> = stale.iter().map(|(c, _)| c.clone()).collect();
    let report = match build_crates(settings, &crates, on_line, None) {
        Ok(report) => report,
        Err(why) => return BuildOutcome::Failed(why),
    };
    let mut rebuilt = Vec::new();
    let mut failed = Vec::new();
    for (krate, id) in stale {
        match (report.built.get(&krate.package), report.failed.get(&krate.package)) {
            (Some(library), _) => {
                record_build(library, &id);
                rebuilt.push(krate.package);
            }
            (None, summary) => {
                let summary = summary.cloned().unwrap_or_else(|| "cargo reported nothing about it".into());
                tracing::error!("plugin crate {} does not build:\n{summary}", krate.package);
                failed.push((krate, summary));
            }
        }
    }
    BuildOutcome::Built { rebuilt, failed }
}
