//! Where plugin libraries are looked for.

use std::path::{Path, PathBuf};

/// Environment variable with extra plugin directories, separated by `:`.
pub const PLUGIN_PATH_VAR: &str = "WORKBENCH_PLUGIN_PATH";

/// The directories searched for plugin libraries, in priority order: `WORKBENCH_PLUGIN_PATH`,
/// then directories given with `--plugin-dir`, then the workspace's build output next to the
/// running executable (`target/<profile>/`).
pub fn search_path(extra: &[PathBuf]) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os(PLUGIN_PATH_VAR)
        .map(|v| std::env::split_paths(&v).filter(|p| !p.as_os_str().is_empty()).collect())
        .unwrap_or_default();
    dirs.extend(extra.iter().cloned());
    if let Some(dir) = build_output_dir() {
        dirs.push(dir);
    }
    dirs.dedup();
    dirs
}

/// The directory holding the running executable: for `cargo run`, `target/<profile>/`,
/// where cargo also writes the plugin libraries. Test binaries live one level down, in
/// `target/<profile>/deps/`.
pub fn build_output_dir() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    if dir.file_name().is_some_and(|n| n == "deps") {
        return dir.parent().map(Path::to_path_buf);
    }
    Some(dir.to_path_buf())
}

/// Plugin library files (by platform suffix) directly inside `dir`, sorted by name.
pub fn library_files(dir: &Path) -> Vec<PathBuf> {
    let suffix = std::env::consts::DLL_SUFFIX;
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.ends_with(suffix)))
        .collect();
    files.sort();
    files
}
