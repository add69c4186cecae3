//! Building the workspace's own plugins before they are loaded.
//!
//! `cargo run` builds only the workbench binary; the plugins are separate `cdylib` crates.
//! When the running binary belongs to this workspace's build output, stale or missing plugin
//! libraries are rebuilt with the same profile and features, so a fresh clone works with
//! one command.

use super::discover::build_output_dir;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

/// Set to `1` to never run cargo from the workbench (e.g. in tests that build beforehand).
pub const NO_BUILD_VAR: &str = "WORKBENCH_NO_BUILD";

/// What [`ensure_workspace_plugins_built`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum BuildOutcome {
    /// Not running from this workspace's build output, or disabled: nothing to do.
    NotApplicable,
    /// Every plugin library was newer than its sources.
    UpToDate,
    /// cargo rebuilt these crates.
    Rebuilt(Vec<String>),
    /// cargo failed; the libraries that exist are used as they are.
    Failed(String),
}

/// The workspace the running binary was built from, when its manifest is still there.
pub fn workspace_root() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent()?.to_path_buf();
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).ok()?;
    manifest.contains("[workspace]").then_some(root)
}

/// A plugin crate of the workspace: its folder, its package name (for `cargo build -p`) and
/// its library name (the file cargo writes), read from its Cargo.toml.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginCrate {
    pub dir: PathBuf,
    pub package: String,
    pub lib: String,
}

impl PluginCrate {
    /// Reads `dir/Cargo.toml`; `None` if it is missing or has no package name.
    pub fn read(dir: &Path) -> Option<PluginCrate> {
        let manifest: toml::Table = std::fs::read_to_string(dir.join("Cargo.toml")).ok()?.parse().ok()?;
        let package = manifest.get("package")?.get("name")?.as_str()?.to_string();
        let lib = manifest
            .get("lib")
            .and_then(|l| l.get("name"))
            .and_then(|n| n.as_str())
            .map_or_else(|| package.replace('-', "_"), str::to_string);
        Some(PluginCrate { dir: dir.to_path_buf(), package, lib })
    }

    /// The library file name cargo writes for this crate (`libhyperset.so`).
    pub fn library_file_name(&self) -> String {
        format!("{}{}{}", std::env::consts::DLL_PREFIX, self.lib, std::env::consts::DLL_SUFFIX)
    }
}

/// The plugin crates: the directories under `plugins/` with a readable Cargo.toml, by name.
pub fn plugin_crates(root: &Path) -> Vec<PluginCrate> {
    let Ok(entries) = std::fs::read_dir(root.join("plugins")) else { return Vec::new() };
    let mut crates: Vec<PluginCrate> =
        entries.filter_map(|e| e.ok()).filter_map(|e| PluginCrate::read(&e.path())).collect();
    crates.sort_by(|a, b| a.package.cmp(&b.package));
    crates
}

fn newest_mtime(path: &Path) -> Option<SystemTime> {
    let meta = std::fs::metadata(path).ok()?;
    if meta.is_file() {
        return meta.modified().ok();
    }
    std::fs::read_dir(path).ok()?.filter_map(|e| e.ok()).filter_map(|e| newest_mtime(&e.path())).max()
}

/// When the binary runs from this workspace's build output: that directory and the library
/// file names of the workspace's plugin crates. Only those are loaded from it, so test
/// fixtures and other libraries cargo put there are never mistaken for plugins.
pub fn workspace_plugin_libraries() -> Option<(PathBuf, Vec<String>)> {
    let (root, out_dir) = (workspace_root()?, build_output_dir()?);
    if !out_dir.starts_with(root.join("target")) {
        return None;
    }
    let names = plugin_crates(&root).iter().map(PluginCrate::library_file_name).collect();
    Some((out_dir, names))
}

/// Rebuilds stale or missing workspace plugin libraries next to the running binary.
pub fn ensure_workspace_plugins_built() -> BuildOutcome {
    if std::env::var(NO_BUILD_VAR).is_ok_and(|v| v == "1") {
        return BuildOutcome::NotApplicable;
    }
    let (Some(root), Some(out_dir)) = (workspace_root(), build_output_dir()) else {
        return BuildOutcome::NotApplicable;
    };
    if !out_dir.starts_with(root.join("target")) {
        return BuildOutcome::NotApplicable;
    }
    let profile = out_dir.file_name().and_then(|n| n.to_str()).unwrap_or("debug").to_string();
    let shared_sources = ["plugin-api", "datasets", "Cargo.lock"].map(|p| newest_mtime(&root.join(p)));
    let shared_newest = shared_sources.into_iter().flatten().max();
    let stale: Vec<String> = plugin_crates(&root)
        .into_iter()
        .filter(|c| {
            let Some(built) = newest_mtime(&out_dir.join(c.library_file_name())) else { return true };
            let sources = [newest_mtime(&c.dir), shared_newest].into_iter().flatten().max();
            sources.is_some_and(|s| s > built)
        })
        .map(|c| c.package)
        .collect();
    if stale.is_empty() {
        return BuildOutcome::UpToDate;
    }
    eprintln!("building plugins: {} ({profile})", stale.join(", "));
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.arg("build").current_dir(&root);
    if profile != "debug" {
        cmd.args(["--profile", &profile]);
    }
    for name in &stale {
        cmd.args(["-p", name]);
    }
    if cfg!(feature = "cuda") {
        cmd.args(["--features", "plugin-api/cuda"]);
    }
    match cmd.status() {
        Ok(status) if status.success() => BuildOutcome::Rebuilt(stale),
        Ok(status) => BuildOutcome::Failed(format!("cargo build exited with {status}")),
        Err(e) => BuildOutcome::Failed(format!("could not run cargo: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_crates_read_package_and_library_names() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let crates = plugin_crates(root);
        let sudoku = crates.iter().find(|c| c.package == "sudoku").expect("the sudoku plugin");
        assert_eq!(
            sudoku.library_file_name(),
            format!("{}sudoku{}", std::env::consts::DLL_PREFIX, std::env::consts::DLL_SUFFIX)
        );
        let dir = std::env::temp_dir().join(format!("wb-crate-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("Cargo.toml"), "[package]\nname = \"image-task\"\n[lib]\nname = \"image\"\n").unwrap();
        let c = PluginCrate::read(&dir).unwrap();
        assert_eq!((c.package.as_str(), c.lib.as_str()), ("image-task", "image"));
        std::fs::write(dir.join("Cargo.toml"), "[package]\nname = \"my-layer\"\n").unwrap();
        assert_eq!(PluginCrate::read(&dir).unwrap().lib, "my_layer");
        std::fs::write(dir.join("Cargo.toml"), "not toml [").unwrap();
        assert!(PluginCrate::read(&dir).is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
