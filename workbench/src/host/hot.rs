//! Loading a new version of a plugin beside the one in use, and swapping it in.
//!
//! The dynamic loader hands back the mapping it already has for a path (or for the same
//! file), so a rebuilt library opened where cargo wrote it could return the old code. Each
//! new version is therefore copied to a fresh file name first
//! (`<temp>/workbench-hot/<pid>-<n>/libNAME.so`), opened from there, and the copy deleted at
//! once: the mapping outlives the file, and nothing piles up on disk. The [`LoadedPlugin`]
//! keeps the path of the library it was copied from.
//!
//! [`PluginHost::swap`] puts the new version in place of the entry loaded from the same
//! library. Objects built from the previous version ([`super::Plugged`], or the replaced
//! [`LoadedPlugin`] itself) keep its library mapped through their `Arc<Library>`; the
//! library is closed when the last of them is dropped.

use super::load::{load, rebuild_command, LoadError, LoadedPlugin};
use super::{PluginCrate, PluginHost};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Copies made so far by this process (each gets its own directory).
static COPIES: AtomicU64 = AtomicU64::new(0);

/// Where the fresh copies are made.
pub fn copies_dir() -> PathBuf {
    std::env::temp_dir().join("workbench-hot")
}

/// Loads `library` from a fresh copy (see the module doc); returns the plugin, whose `path`
/// is `library`, and the time taken (copy, open, fingerprint check and registration). Errors
/// name `library`, not the copy.
pub fn load_fresh(library: &Path) -> Result<(LoadedPlugin, Duration), LoadError> {
    let started = Instant::now();
    let n = COPIES.fetch_add(1, Ordering::Relaxed);
    let dir = copies_dir().join(format!("{}-{n}", std::process::id()));
    let file_name = library.file_name().map(PathBuf::from).unwrap_or_else(|| PathBuf::from("plugin"));
    let copy = dir.join(file_name);
    let copied = std::fs::create_dir_all(&dir).and_then(|_| std::fs::copy(library, &copy));
    if let Err(e) = copied {
        let _ = std::fs::remove_dir_all(&dir);
        return Err(LoadError::NotALibrary { path: library.to_path_buf(), reason: format!("cannot copy it: {e}") });
    }
    let loaded = load(&copy);
    let _ = std::fs::remove_dir_all(&dir);
    match loaded {
        Ok(mut plugin) => {
            plugin.path = library.to_path_buf();
            Ok((plugin, started.elapsed()))
        }
        Err(e) => Err(naming(e, library)),
    }
}

/// The same error about `path` instead of the copy.
fn naming(error: LoadError, path: &Path) -> LoadError {
    let path = path.to_path_buf();
    match error {
        LoadError::NotALibrary { reason, .. } => LoadError::NotALibrary { path, reason },
        LoadError::NoEntry { .. } => LoadError::NoEntry { path },
        LoadError::BadMagic { .. } => LoadError::BadMagic { path },
        LoadError::Fingerprint { plugin, host, .. } => {
            LoadError::Fingerprint { rebuild: rebuild_command(&path), path, plugin, host }
        }
        LoadError::Declare { reason, .. } => LoadError::Declare { path, reason },
        LoadError::Build { errors, .. } => LoadError::Build { path, errors },
        LoadError::Probe { reason, .. } => LoadError::Probe { path, reason },
    }
}

/// Where `path` is among `paths`: the same path, else the same file through links.
fn find_file<'a>(mut paths: impl Iterator<Item = &'a Path> + Clone, path: &Path) -> Option<usize> {
    if let Some(i) = paths.clone().position(|p| p == path) {
        return Some(i);
    }
    paths.clone().next()?; // nothing to compare with: skip the system call
    let canonical = path.canonicalize().ok()?;
    paths.position(|p| p.canonicalize().is_ok_and(|c| c == canonical))
}

impl PluginHost {
    /// Makes `plugin` the active version of the plugin loaded from the same library file, or
    /// adds it when none was. Returns the replaced version (drop it to release its library
    /// once nothing built from it is alive). Refused, leaving the host unchanged, when
    /// another library already provides a plugin of the same name.
    pub fn swap(&mut self, plugin: LoadedPlugin) -> Result<Option<LoadedPlugin>, String> {
        let name = plugin.declaration.name.clone();
        let at = find_file(self.plugins.iter().map(|p| p.path.as_path()), &plugin.path);
        let namesake = self.plugins.iter().position(|p| p.declaration.name == name);
        if let Some(other) = namesake.filter(|&i| Some(i) != at) {
            return Err(format!(
                "plugin `{name}` is already loaded from {}; the one in {} is ignored (rename it, or remove the other)",
                self.plugins[other].path.display(),
                plugin.path.display()
            ));
        }
        while let Some(i) = find_file(self.errors.iter().map(|e| e.path()), &plugin.path) {
            self.errors.remove(i);
        }
        // A crate reported as not building at start has built since.
        let file = plugin.path.file_name().map(|n| n.to_string_lossy().into_owned());
        self.errors.retain(|e| match e {
            LoadError::Build { path, .. } => PluginCrate::read(path).map(|c| c.library_file_name()) != file,
            _ => true,
        });
        match at {
            Some(i) => Ok(Some(std::mem::replace(&mut self.plugins[i], plugin))),
            None => {
                self.plugins.push(plugin);
                Ok(None)
            }
        }
    }
}
