//! Loading one plugin library: open it, find the entry, check the fingerprint, declare.

use libloading::Library;
use plugin_api::{Declaration, PluginEntry, ENTRY_MAGIC, ENTRY_SYMBOL, FINGERPRINT};
use std::ffi::CStr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Why a library could not be used as a plugin. The message names the fix.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LoadError {
    /// dlopen refused the file.
    #[error("{path}: not a loadable library ({reason}); remove it from the plugin path")]
    NotALibrary { path: PathBuf, reason: String },
    /// The library has no entry symbol.
    #[error("{path}: not a workbench plugin (no `{ENTRY_SYMBOL}` symbol); plugins export one with `plugin_api::export_plugin!`")]
    NoEntry { path: PathBuf },
    /// The entry does not start with the magic tag.
    #[error("{path}: its `{ENTRY_SYMBOL}` is not a workbench plugin entry (bad magic tag)")]
    BadMagic { path: PathBuf },
    /// Built by another toolchain, candle or feature set.
    #[error(
        "{path}: built for another host\n  plugin fingerprint: {plugin}\n  host fingerprint:   {host}\n  rebuild it with the host's toolchain: {rebuild}"
    )]
    Fingerprint { path: PathBuf, plugin: String, host: String, rebuild: String },
    /// `declare` returned an error or panicked.
    #[error("{path}: failed while registering: {reason}")]
    Declare { path: PathBuf, reason: String },
    /// Loading it in a probing child process crashed or hung (see `host::probe`); it was not
    /// loaded into this process.
    #[error("{path}: {reason}; it was not loaded (remove it from the plugin path, or rebuild it)")]
    Probe { path: PathBuf, reason: String },
    /// The plugin's crate does not build (`path` is its directory); a library built before,
    /// if any, is loaded as it is.
    #[error("{path}: the crate does not build; a library built before, if any, is used as it is\n{errors}")]
    Build { path: PathBuf, errors: String },
}

impl LoadError {
    /// The library the error is about.
    pub fn path(&self) -> &Path {
        match self {
            LoadError::NotALibrary { path, .. }
            | LoadError::NoEntry { path }
            | LoadError::BadMagic { path }
            | LoadError::Fingerprint { path, .. }
            | LoadError::Declare { path, .. }
            | LoadError::Probe { path, .. }
            | LoadError::Build { path, .. } => path,
        }
    }
}

/// A successfully loaded plugin. The declaration is dropped before the library is closed
/// (field order), because its closures live in the library's code.
pub struct LoadedPlugin {
    /// What the plugin declared about itself.
    pub declaration: Declaration,
    /// The library file it was loaded from.
    pub path: PathBuf,
    /// Which build of the plugin this is (see [`super::build_of`]), once known.
    pub build: Option<String>,
    library: Arc<Library>,
}

impl std::fmt::Debug for LoadedPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedPlugin")
            .field("name", &self.declaration.name)
            .field("kind", &self.declaration.kind())
            .field("version", &self.declaration.version)
            .field("path", &self.path)
            .field("build", &self.build)
            .finish()
    }
}

impl LoadedPlugin {
    /// A handle that keeps the library mapped while objects built from it are alive.
    pub fn library(&self) -> Arc<Library> {
        self.library.clone()
    }
}

/// The crate name a library file was most likely built from (`libhyperset.so` -> `hyperset`).
pub fn crate_name_of(path: &Path) -> String {
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("PLUGIN");
    stem.strip_prefix("lib").unwrap_or(stem).to_string()
}

/// The cargo command that rebuilds the library at `path` (debug or release, from its folder).
pub(crate) fn rebuild_command(path: &Path) -> String {
    let release = path.components().any(|c| c.as_os_str() == "release");
    format!("cargo build{} -p {}", if release { " --release" } else { "" }, crate_name_of(path))
}

/// Loads `path` as a plugin.
pub fn load(path: &Path) -> Result<LoadedPlugin, LoadError> {
    let path = path.to_path_buf();
    // SAFETY: loading runs the library's initialisers; plugin libraries are Rust cdylibs
    // whose only initialisers are std's. A foreign library could do anything on load, which
    // is why only the plugin search path is scanned.
    let library = unsafe { Library::new(&path) }
        .map_err(|e| LoadError::NotALibrary { path: path.clone(), reason: e.to_string() })?;
    // SAFETY: the symbol is declared `extern "C" fn() -> *const PluginEntry` by
    // `export_plugin!`; a library exporting the name with another type is caught by the
    // magic tag check below before anything else is read.
    let entry_fn = unsafe { library.get::<unsafe extern "C" fn() -> *const PluginEntry>(ENTRY_SYMBOL) }
        .map_err(|_| LoadError::NoEntry { path: path.clone() })?;
    // SAFETY: calls the C-ABI entry, which returns a pointer to a static.
    let entry = unsafe { entry_fn() };
    if entry.is_null() {
        return Err(LoadError::BadMagic { path });
    }
    // SAFETY: `entry` is non-null and points to static data in the library; only the
    // C-layout prefix (magic, fingerprint) is read before the fingerprint matched.
    let (magic, fingerprint_ptr) = unsafe { ((*entry).magic, (*entry).fingerprint) };
    if magic != ENTRY_MAGIC || fingerprint_ptr.is_null() {
        return Err(LoadError::BadMagic { path });
    }
    // SAFETY: the fingerprint is a NUL-terminated static string (`FINGERPRINT_C`).
    let plugin_fingerprint = unsafe { CStr::from_ptr(fingerprint_ptr) }.to_string_lossy().into_owned();
    if plugin_fingerprint != FINGERPRINT {
        return Err(LoadError::Fingerprint {
            rebuild: rebuild_command(&path),
            path,
            plugin: plugin_fingerprint,
            host: FINGERPRINT.to_string(),
        });
    }
    // SAFETY: same rustc, candle and features (fingerprint matched), so the Rust-ABI fn
    // pointer and the `Declaration` layout agree; `declare` catches its own panics.
    let declare = unsafe { (*entry).declare };
    let declaration = declare().map_err(|e| LoadError::Declare { path: path.clone(), reason: e.to_string() })?;
    Ok(LoadedPlugin { declaration, path, build: None, library: Arc::new(library) })
}
