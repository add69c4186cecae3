//! Which workspace the workbench works on, and whether it runs from that workspace's build.
//!
//! The workspace is, in order: the directory named by `WORKBENCH_WORKSPACE`; the nearest
//! directory at or above the current one whose `Cargo.toml` has a `[workspace]` and that has a
//! `plugins/` folder; the workspace the binary was compiled in, if it still exists. A binary
//! copied or installed elsewhere therefore works on the checkout it is started in, not on the
//! tree it was once built from. The choice is logged once (`tracing` at info level) and shown
//! by `workbench plugins` and on the Plugins screen ([`Workspace::describe`]).
//!
//! Plugins are built by the host only when the binary runs from that workspace's own build
//! output (`<workspace>/target/<profile>/`): [`running_from_workspace`] is the one place that
//! decides it.

use super::discover::build_output_dir;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Environment variable naming the workspace to use (overrides the current directory).
pub const WORKSPACE_VAR: &str = "WORKBENCH_WORKSPACE";

/// A workspace and how it was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    pub root: PathBuf,
    pub found: Found,
}

/// How the workspace was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// `WORKBENCH_WORKSPACE`.
    Variable,
    /// At or above the current directory.
    CurrentDirectory,
    /// Where the binary was compiled.
    CompiledIn,
}

impl Workspace {
    /// `workspace: /path (from the current directory)`.
    pub fn describe(&self) -> String {
        let how = match self.found {
            Found::Variable => format!("from {WORKSPACE_VAR}"),
            Found::CurrentDirectory => "from the current directory".to_string(),
            Found::CompiledIn => "where the binary was built".to_string(),
        };
        format!("workspace: {} ({how})", self.root.display())
    }
}

/// Whether `dir` is a workbench workspace: a `Cargo.toml` with `[workspace]` and a `plugins/`
/// folder.
pub fn is_workbench_workspace(dir: &Path) -> bool {
    dir.join("plugins").is_dir()
        && std::fs::read_to_string(dir.join("Cargo.toml")).is_ok_and(|text| text.contains("[workspace]"))
}

/// Finds the workspace (see the module doc) from these inputs; `None` when none applies.
pub fn find(variable: Option<PathBuf>, current_dir: Option<&Path>, compiled_in: &Path) -> Option<Workspace> {
    if let Some(dir) = variable.filter(|d| !d.as_os_str().is_empty()) {
        let root = dir.canonicalize().unwrap_or(dir);
        return Some(Workspace { root, found: Found::Variable });
    }
    if let Some(root) = current_dir.and_then(|here| here.ancestors().find(|d| is_workbench_workspace(d))) {
        return Some(Workspace { root: root.to_path_buf(), found: Found::CurrentDirectory });
    }
    is_workbench_workspace(compiled_in).then(|| Workspace { root: compiled_in.to_path_buf(), found: Found::CompiledIn })
}

/// The workspace in use, found once per process.
pub fn workspace() -> Option<&'static Workspace> {
    static FOUND: OnceLock<Option<Workspace>> = OnceLock::new();
    FOUND
        .get_or_init(|| {
            let compiled_in = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap_or(Path::new("/"));
            let here = std::env::current_dir().ok();
            let found = find(std::env::var_os(WORKSPACE_VAR).map(PathBuf::from), here.as_deref(), compiled_in);
            match &found {
                // At debug level: a build names the workspace itself, and `plugins` prints it.
                Some(w) => tracing::debug!("{}", w.describe()),
                None => tracing::info!("no workbench workspace found: plugins are only loaded, never built"),
            }
            found
        })
        .as_ref()
}

/// The root of the workspace in use.
pub fn workspace_root() -> Option<PathBuf> {
    workspace().map(|w| w.root.clone())
}

/// The running binary's build output when it lies in `root/target/`: its directory.
pub fn build_output_of(root: &Path) -> Option<PathBuf> {
    let out_dir = build_output_dir()?;
    let target = root.join("target");
    let target = target.canonicalize().unwrap_or(target);
    out_dir.canonicalize().unwrap_or_else(|_| out_dir.clone()).starts_with(&target).then_some(out_dir)
}

/// When the binary runs from the workspace's own build output: the workspace root and that
/// directory (`target/<profile>/`). Only then does the host build plugins.
pub fn running_from_workspace() -> Option<(PathBuf, PathBuf)> {
    let root = workspace_root()?;
    let out_dir = build_output_of(&root)?;
    Some((root, out_dir))
}

/// The workspace whose build output holds the running binary (`<root>/target/<profile>/`),
/// whichever workspace is in use: its plugin crates are the only libraries loaded from there.
pub fn build_output_workspace() -> Option<(PathBuf, PathBuf)> {
    let out_dir = build_output_dir()?;
    let root = out_dir.ancestors().find(|d| d.file_name().is_some_and(|n| n == "target"))?.parent()?;
    is_workbench_workspace(root).then(|| (root.to_path_buf(), out_dir.clone()))
}

/// The cargo profile the running binary was built with: `dev` for `target/debug`, the
/// directory's name for other profiles of the workspace, `dev` elsewhere.
pub fn running_profile() -> String {
    let name = build_output_dir().and_then(|d| d.file_name()?.to_str().map(str::to_string));
    match name.as_deref() {
        Some("release") => "release".into(),
        Some(other) if other != "debug" && running_from_workspace().is_some() => other.to_string(),
        _ => "dev".into(),
    }
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

/// The build output directory holding the running binary and the library file names of its
/// workspace's plugin crates. Only those are loaded from it, so test fixtures and other
/// libraries cargo put there are never mistaken for plugins.
pub fn workspace_plugin_libraries() -> Option<(PathBuf, Vec<String>)> {
    let (root, out_dir) = build_output_workspace()?;
    let names = plugin_crates(&root).iter().map(PluginCrate::library_file_name).collect();
    Some((out_dir, names))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workspace_at(dir: &Path) {
        std::fs::create_dir_all(dir.join("plugins")).unwrap();
        std::fs::write(dir.join("Cargo.toml"), "[workspace]\nmembers = []\n").unwrap();
    }

    #[test]
    fn the_workspace_is_the_variable_then_the_current_directory_then_the_compiled_in_one() {
        let tmp = tempfile::Builder::new().prefix("wb-workspace-").tempdir().unwrap();
        let base = tmp.path();
        let (here, compiled, other) = (base.join("checkout"), base.join("built"), base.join("elsewhere"));
        workspace_at(&here);
        workspace_at(&compiled);
        std::fs::create_dir_all(here.join("plugins/ring/src")).unwrap();
        std::fs::create_dir_all(&other).unwrap();

        let inside = here.join("plugins/ring/src");
        let found = find(None, Some(&inside), &compiled).unwrap();
        assert_eq!(found, Workspace { root: here.clone(), found: Found::CurrentDirectory });
        assert!(found.describe().contains("from the current directory"), "{}", found.describe());

        let found = find(None, Some(&other), &compiled).unwrap();
        assert_eq!((found.root.as_path(), found.found), (compiled.as_path(), Found::CompiledIn));

        let found = find(Some(other.clone()), Some(&inside), &compiled).unwrap();
        assert_eq!(found.found, Found::Variable);
        assert_eq!(found.root, other.canonicalize().unwrap());

        // The compiled-in workspace is used only while it exists.
        std::fs::remove_dir_all(&compiled).unwrap();
        assert_eq!(find(None, Some(&other), &compiled), None);
    }

    #[test]
    fn plugin_crates_read_package_and_library_names() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let crates = plugin_crates(root);
        let sudoku = crates.iter().find(|c| c.package == "sudoku").expect("the sudoku plugin");
        assert_eq!(
            sudoku.library_file_name(),
            format!("{}sudoku{}", std::env::consts::DLL_PREFIX, std::env::consts::DLL_SUFFIX)
        );
        let tmp = tempfile::Builder::new().prefix("wb-crate-").tempdir().unwrap();
        let dir = tmp.path();
        std::fs::write(dir.join("Cargo.toml"), "[package]\nname = \"image-task\"\n[lib]\nname = \"image\"\n").unwrap();
        let c = PluginCrate::read(dir).unwrap();
        assert_eq!((c.package.as_str(), c.lib.as_str()), ("image-task", "image"));
        std::fs::write(dir.join("Cargo.toml"), "[package]\nname = \"my-layer\"\n").unwrap();
        assert_eq!(PluginCrate::read(dir).unwrap().lib, "my_layer");
        std::fs::write(dir.join("Cargo.toml"), "not toml [").unwrap();
        assert!(PluginCrate::read(dir).is_none());
    }

    #[test]
    fn the_profile_follows_the_build_directory() {
        // Unit tests run from target/<profile>/deps of this workspace.
        let dir = build_output_dir().unwrap();
        let expected = match dir.file_name().unwrap().to_str().unwrap() {
            "debug" => "dev".to_string(),
            other => other.to_string(),
        };
        assert_eq!(running_profile(), expected);
    }
}
