//! Which build of a plugin made a run.
//!
//! Every run records, next to each plugin's declared version, a build id:
//!
//! - for a plugin crate of the workspace, a hash of its sources: every file of the crate
//!   directory except `target/`, hidden files and editor leftovers (`*~`, `*.swp`), plus the
//!   same of the crates it depends on by path (`datasets`), except `plugin-api`, whose
//!   sources are already part of the fingerprint every plugin is checked against, plus the
//!   `Cargo.lock` entries of the registry and git packages it is built with. The path
//!   dependencies and packages are cargo's answer (`cargo metadata`), so renamed and
//!   target-specific dependencies count, and `cargo update` gives another id;
//! - for a library built elsewhere, a hash of the library file.
//!
//! Two runs of `hyperset` made by different code therefore never carry the same id, whatever
//! the version says. An id is the first 16 hex digits of a SHA-256 over the sorted relative
//! paths and contents, so it is the same on every machine and checkout; [`short`] gives the 7
//! digits shown in legends (`hyperset@1a2b3c4`).
//!
//! A workspace library the host built records the id of the sources it was built from
//! ([`super::build::record_build`]); when the sources have changed since (a rebuild failed),
//! it gets no id: its sources no longer say what it was built from. A library cargo built
//! without the host (`WORKBENCH_NO_BUILD=1`) records nothing and is taken to be built from
//! the current sources.

use super::build::recorded_build;
use super::workspace::{build_output_workspace, plugin_crates, PluginCrate};
use super::{LoadedPlugin, PluginHost};
use crate::store::PluginRef;
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Hex digits of a stored build id.
pub const ID_DIGITS: usize = 16;

/// Hex digits shown in legends and listings.
pub const SHORT_DIGITS: usize = 7;

/// The path dependencies whose sources are not part of a build id: `plugin-api` is hashed
/// into the fingerprint, and a change to it needs a rebuilt host anyway.
const NOT_HASHED: &[&str] = &["plugin-api"];

/// The first [`SHORT_DIGITS`] digits of a build id.
pub fn short(id: &str) -> &str {
    id.get(..SHORT_DIGITS).unwrap_or(id)
}

/// `name@1a2b3c4`, or `name@?` when the build is not known.
pub fn tagged(plugin: &PluginRef) -> String {
    format!("{}@{}", plugin.name, plugin.build.as_deref().map_or("?", short))
}

/// What a crate is built from, as `cargo metadata` says: the directories whose files make its
/// build id, labelled (the crate itself `""`, then each path dependency, normal or build,
/// renamed or target-specific, recursively, by package name), and the `Cargo.lock` entries of
/// the registry and git packages it depends on.
#[derive(Debug, Default, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CrateSources {
    pub dirs: Vec<(String, PathBuf)>,
    pub locked: Vec<String>,
}

fn metadata_error(e: cargo_metadata::Error) -> std::io::Error {
    std::io::Error::other(format!("cargo metadata: {e}"))
}

fn same_dir(a: &Path, b: &Path) -> bool {
    a == b || a.canonicalize().ok().zip(b.canonicalize().ok()).is_some_and(|(a, b)| a == b)
}

/// `cargo metadata` of a workspace, with the digest of the manifests, lock file and cargo
/// configuration it was read from.
struct CachedMetadata {
    manifests: Vec<PathBuf>,
    digest: Vec<u8>,
    metadata: cargo_metadata::Metadata,
}

/// The SHA-256 of `files`' paths and contents. Every plugin crate of a workspace asks about
/// the same files (its manifests and `Cargo.lock`), so the digest of a list is remembered
/// with each file's length and modification time, and the files are read again only when one
/// of those moves, as cargo itself decides what to rebuild.
fn digest_of(files: &[PathBuf]) -> Vec<u8> {
    /// Per file: its length and modification time, `None` when it does not exist.
    type Stamps = Vec<Option<(u64, std::time::SystemTime)>>;
    /// A list of files, their stamps and the digest they gave.
    type Seen = (Vec<PathBuf>, Stamps, Vec<u8>);
    static SEEN: Mutex<Vec<Seen>> = Mutex::new(Vec::new());
    // A missing file is `None`; a file whose modification time cannot be read leaves the
    // whole list unstamped, read every time.
    let stamps: Option<Stamps> = files
        .iter()
        .map(|f| match std::fs::metadata(f) {
            Ok(m) => m.modified().ok().map(|t| Some((m.len(), t))),
            Err(_) => Some(None),
        })
        .collect();
    let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, _, digest)) = seen.iter().find(|(f, s, _)| f == files && Some(s) == stamps.as_ref()) {
        return digest.clone();
    }
    let mut hasher = Sha256::new();
    for file in files {
        hasher.update(file.as_os_str().as_encoded_bytes());
        hasher.update(std::fs::read(file).unwrap_or_default());
    }
    let digest = hasher.finalize().to_vec();
    seen.retain(|(f, _, _)| f != files);
    if let Some(stamps) = stamps {
        seen.push((files.to_vec(), stamps, digest.clone()));
    }
    digest
}

/// `cargo metadata` for the workspace of `krate`, run again only when one of the workspace's
/// manifests, its lock file or its cargo configuration changed (it takes a few tenths of a
/// second, and every plugin of a workspace asks the same question).
fn metadata_for(krate: &PluginCrate, root: Option<&Path>) -> std::io::Result<Arc<CachedMetadata>> {
    static CACHE: Mutex<Vec<Arc<CachedMetadata>>> = Mutex::new(Vec::new());
    let manifest = krate.dir.join("Cargo.toml");
    let mut cache = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    let fresh = cache
        .iter()
        .find(|c| c.manifests.iter().any(|m| same_dir(m, &manifest)) && digest_of(&c.manifests) == c.digest);
    if let Some(cached) = fresh {
        return Ok(cached.clone());
    }
    let mut command = cargo_metadata::MetadataCommand::new();
    command.manifest_path(&manifest);
    if let Some(root) = root {
        command.current_dir(root);
    }
    let metadata = command.exec().map_err(metadata_error)?;
    let workspace_root = metadata.workspace_root.as_std_path().to_path_buf();
    // The configuration files are listed whether they exist or not, so that adding one (a
    // `[patch]`, a path override) is a change too.
    let mut manifests: Vec<PathBuf> = metadata
        .packages
        .iter()
        .filter(|p| p.source.is_none())
        .map(|p| p.manifest_path.as_std_path().to_path_buf())
        .chain(["Cargo.toml", "Cargo.lock", ".cargo/config.toml", ".cargo/config"].map(|f| workspace_root.join(f)))
        .collect();
    manifests.sort();
    manifests.dedup();
    let digest = digest_of(&manifests);
    cache.retain(|c| c.metadata.workspace_root != metadata.workspace_root);
    let cached = Arc::new(CachedMetadata { manifests, digest, metadata });
    cache.push(cached.clone());
    Ok(cached)
}

/// What [`crate_sources`] answered for a crate, kept in the generated-data cache folder
/// (`datasets::generated_cache`) between processes: `cargo metadata` takes a few tenths of a
/// second, and `train` and the worker it starts would each ask it again, a good part of the
/// time to a run's first step. Valid while the files it was read from are unchanged (their
/// digest); the file's name holds the crate's manifest path and the plugin fingerprint (the
/// toolchain and platform cargo answered for). Cargo configuration outside the workspace root
/// (`~/.cargo/config.toml`, a parent folder's) is not watched, as the in-process cache above
/// does not watch it: after a `[patch]` there, delete the cache folder.
#[derive(serde::Serialize, serde::Deserialize)]
struct StoredSources {
    manifests: Vec<PathBuf>,
    digest: Vec<u8>,
    sources: CrateSources,
}

fn stored_sources_name(krate: &PluginCrate) -> String {
    let manifest = krate.dir.join("Cargo.toml");
    let manifest = manifest.canonicalize().unwrap_or(manifest);
    let mut hasher = Sha256::new();
    hasher.update(plugin_api::FINGERPRINT.as_bytes());
    hasher.update([0u8]);
    hasher.update(manifest.as_os_str().as_encoded_bytes());
    format!("crate-sources-{}", hex_id(&hasher.finalize()))
}

fn read_stored_sources(cache: &Path, krate: &PluginCrate) -> Option<CrateSources> {
    let payload = datasets::generated_cache::read(cache, &stored_sources_name(krate))?;
    let stored: StoredSources = serde_json::from_slice(&payload).ok()?;
    (digest_of(&stored.manifests) == stored.digest).then_some(stored.sources)
}

fn store_sources(cache: &Path, krate: &PluginCrate, metadata: &CachedMetadata, sources: &CrateSources) {
    let stored = StoredSources {
        manifests: metadata.manifests.clone(),
        digest: metadata.digest.clone(),
        sources: sources.clone(),
    };
    if let Ok(payload) = serde_json::to_vec(&stored) {
        datasets::generated_cache::write(cache, &stored_sources_name(krate), &payload);
    }
}

/// The folder [`crate_sources`], build ids and the probe keep their answers in (the
/// generated-data cache). Unit tests make throwaway workspaces by the dozen: they pass a
/// folder of their own to [`crate_sources_cached`] instead.
pub(super) fn cache_dir() -> Option<PathBuf> {
    if cfg!(test) {
        None
    } else {
        datasets::generated_cache::dir()
    }
}

/// Reads what `krate` is built from (see [`CrateSources`]); `root`, when given, is where
/// cargo runs (cargo finds the workspace from the crate either way).
pub fn crate_sources(krate: &PluginCrate, root: Option<&Path>) -> std::io::Result<CrateSources> {
    crate_sources_cached(krate, root, cache_dir().as_deref())
}

/// [`crate_sources`], read from and kept in `cache` when one is given (see [`StoredSources`]).
fn crate_sources_cached(
    krate: &PluginCrate,
    root: Option<&Path>,
    cache: Option<&Path>,
) -> std::io::Result<CrateSources> {
    if let Some(stored) = cache.and_then(|c| read_stored_sources(c, krate)) {
        return Ok(stored);
    }
    let cached = metadata_for(krate, root)?;
    let sources = sources_from_metadata(krate, &cached.metadata)?;
    if let Some(cache) = cache {
        store_sources(cache, krate, &cached, &sources);
    }
    Ok(sources)
}

/// What `metadata` says `krate` is built from.
fn sources_from_metadata(krate: &PluginCrate, metadata: &cargo_metadata::Metadata) -> std::io::Result<CrateSources> {
    let package_in = |dir: &Path| {
        metadata
            .packages
            .iter()
            .filter(|p| p.source.is_none())
            .find(|p| p.manifest_path.parent().is_some_and(|d| same_dir(d.as_std_path(), dir)))
    };
    let Some(top) = package_in(&krate.dir) else {
        return Err(std::io::Error::other(format!("cargo metadata does not list {}", krate.dir.display())));
    };
    let mut dirs = vec![(String::new(), krate.dir.clone())];
    let mut pending = vec![top];
    let mut seen = BTreeSet::new();
    while let Some(package) = pending.pop() {
        for dep in &package.dependencies {
            let Some(path) = &dep.path else { continue };
            let dir = path.as_std_path().to_path_buf();
            if dep.kind == cargo_metadata::DependencyKind::Development
                || NOT_HASHED.contains(&dep.name.as_str())
                || !seen.insert(dir.clone())
            {
                continue;
            }
            if let Some(found) = package_in(&dir) {
                pending.push(found);
            }
            dirs.push((dep.name.clone(), dir));
        }
    }
    Ok(CrateSources { dirs, locked: locked_dependencies(metadata, &top.id) })
}

/// The `Cargo.lock` entries (name, version, source, checksum) of the registry and git packages
/// `id` depends on, directly or not, for building (not dev-dependencies), sorted.
fn locked_dependencies(metadata: &cargo_metadata::Metadata, id: &cargo_metadata::PackageId) -> Vec<String> {
    let Some(resolve) = &metadata.resolve else { return Vec::new() };
    let lock: Vec<toml::Value> = std::fs::read_to_string(metadata.workspace_root.join("Cargo.lock"))
        .ok()
        .and_then(|t| t.parse::<toml::Table>().ok())
        .and_then(|t| t.get("package")?.as_array().cloned())
        .unwrap_or_default();
    let mut reached = BTreeSet::from([id.clone()]);
    let mut pending = vec![id.clone()];
    while let Some(at) = pending.pop() {
        let Some(node) = resolve.nodes.iter().find(|n| n.id == at) else { continue };
        for dep in &node.deps {
            let building = dep.dep_kinds.iter().any(|k| k.kind != cargo_metadata::DependencyKind::Development);
            if building && reached.insert(dep.pkg.clone()) {
                pending.push(dep.pkg.clone());
            }
        }
    }
    let mut entries: Vec<String> = metadata
        .packages
        .iter()
        .filter(|p| p.source.is_some() && reached.contains(&p.id))
        .map(|p| {
            let (name, version) = (p.name.to_string(), p.version.to_string());
            let entry = lock.iter().find(|e| {
                e.get("name").and_then(|n| n.as_str()) == Some(name.as_str())
                    && e.get("version").and_then(|v| v.as_str()) == Some(version.as_str())
            });
            match entry {
                Some(entry) => entry.to_string(),
                None => format!("{name} {version} {}", p.source.as_ref().map(|s| s.repr.as_str()).unwrap_or("")),
            }
        })
        .collect();
    entries.sort();
    entries
}

/// [`crate_sources`], or the crate's own directory alone when cargo cannot read its manifest
/// (mid-edit, say): its id still follows its files, and the build that follows reports why.
fn crate_sources_or_own(krate: &PluginCrate, root: Option<&Path>) -> CrateSources {
    crate_sources(krate, root).unwrap_or_else(|e| {
        tracing::warn!("{}: {e}", krate.dir.display());
        CrateSources { dirs: vec![(String::new(), krate.dir.clone())], locked: Vec::new() }
    })
}

/// The directories whose files make a crate's build id (see [`CrateSources`]).
pub fn source_dirs(krate: &PluginCrate, root: Option<&Path>) -> Vec<(String, PathBuf)> {
    crate_sources_or_own(krate, root).dirs
}

/// Whether a file name is an editor's or the system's, not a source: hidden files, backups
/// and swap files (vim's `4913` probe included).
pub fn is_editor_leftover(name: &str) -> bool {
    name.starts_with('.')
        || name.ends_with('~')
        || [".swp", ".swo", ".swx", ".tmp", ".orig", ".rej"].iter().any(|s| name.ends_with(s))
        || name == "4913"
}

/// Every source file under the labelled directories, as `(label/relative path, absolute
/// path)`, sorted.
pub fn source_files(dirs: &[(String, PathBuf)]) -> Vec<(String, PathBuf)> {
    let mut files = Vec::new();
    for (label, dir) in dirs {
        let mut stack = vec![(dir.clone(), true)];
        while let Some((at, top)) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&at) else { continue };
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if is_editor_leftover(&name) || (top && name == "target") {
                    continue;
                }
                let path = entry.path();
                match entry.file_type() {
                    Ok(t) if t.is_dir() => stack.push((path, false)),
                    Ok(t) if t.is_file() => {
                        let relative = path.strip_prefix(dir).unwrap_or(&path);
                        let parts: Vec<String> =
                            relative.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
                        files.push((format!("{label}/{}", parts.join("/")), path));
                    }
                    _ => {}
                }
            }
        }
    }
    files.sort();
    files
}

/// The build id of these source files: SHA-256 over each relative path, its length and
/// content, in order.
pub fn hash_files(files: &[(String, PathBuf)]) -> std::io::Result<String> {
    Ok(hex_id(&hash_sources(files, &[])?.finalize()))
}

fn hash_sources(files: &[(String, PathBuf)], locked: &[String]) -> std::io::Result<Sha256> {
    let mut hasher = Sha256::new();
    for (name, path) in files {
        let bytes = std::fs::read(path)?;
        hasher.update(name.as_bytes());
        hasher.update([0u8]);
        hasher.update((bytes.len() as u64).to_le_bytes());
        hasher.update(&bytes);
    }
    for entry in locked {
        hasher.update(b"Cargo.lock\0");
        hasher.update((entry.len() as u64).to_le_bytes());
        hasher.update(entry.as_bytes());
    }
    Ok(hasher)
}

/// The build id of a plugin crate (see the module doc): its sources, those of its path
/// dependencies and the locked versions of the packages it depends on.
pub fn crate_build_id(krate: &PluginCrate, root: Option<&Path>) -> std::io::Result<String> {
    let sources = crate_sources_or_own(krate, root);
    Ok(hex_id(&hash_sources(&source_files(&sources.dirs), &sources.locked)?.finalize()))
}

/// The build id of a library built elsewhere: a hash of the file.
pub fn library_build_id(path: &Path) -> std::io::Result<String> {
    library_build_id_cached(path, cache_dir().as_deref())
}

/// [`library_build_id`], kept in `cache` under the file's identity (see [`library_stamp`]):
/// every command and every worker stamps each plugin it loads, and a release plugin is tens
/// of MiB, so hashing them all again took most of a second per process.
fn library_build_id_cached(path: &Path, cache: Option<&Path>) -> std::io::Result<String> {
    let stamp = cache.and_then(|_| library_stamp(path));
    if let (Some(cache), Some(stamp)) = (cache, &stamp) {
        let stored = datasets::generated_cache::read(cache, stamp).and_then(|id| String::from_utf8(id).ok());
        if let Some(id) = stored.filter(|id| id.len() == ID_DIGITS && id.bytes().all(|b| b.is_ascii_hexdigit())) {
            return Ok(id);
        }
    }
    let mut hasher = Sha256::new();
    std::io::copy(&mut std::fs::File::open(path)?, &mut hasher)?;
    let id = hex_id(&hasher.finalize());
    // The file may have been replaced while it was read: stored only if it is still the one
    // whose identity was taken.
    if let (Some(cache), Some(stamp)) = (cache, stamp) {
        if library_stamp(path).as_ref() == Some(&stamp) {
            datasets::generated_cache::write(cache, &stamp, id.as_bytes());
        }
    }
    Ok(id)
}

/// The name a library's build id is kept under: a hash of its canonical path, length,
/// modification time and (on Unix) inode and status-change time, which a copy, a rebuild or
/// an edit in place all move, as cargo decides what to rebuild. `None` when they cannot be
/// read (the file is then hashed every time).
fn library_stamp(path: &Path) -> Option<String> {
    let path = path.canonicalize().ok()?;
    let meta = std::fs::metadata(&path).ok()?;
    let modified = meta.modified().ok()?.duration_since(std::time::UNIX_EPOCH).ok()?;
    let mut hasher = Sha256::new();
    hasher.update(path.as_os_str().as_encoded_bytes());
    hasher.update(meta.len().to_le_bytes());
    hasher.update(modified.as_nanos().to_le_bytes());
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        hasher.update(meta.ino().to_le_bytes());
        hasher.update(meta.ctime().to_le_bytes());
        hasher.update(meta.ctime_nsec().to_le_bytes());
    }
    Some(format!("library-build-{}", hex_id(&hasher.finalize())))
}

fn hex_id(digest: &[u8]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect::<String>()[..ID_DIGITS].to_string()
}

/// The workspace crate a library in the running binary's build output was built from, with
/// the workspace root.
pub fn workspace_crate_of(library: &Path) -> Option<(PluginCrate, PathBuf)> {
    let (root, out_dir) = build_output_workspace()?;
    let file = library.file_name()?.to_str()?;
    if library.parent()? != out_dir {
        return None;
    }
    let krate = plugin_crates(&root).into_iter().find(|c| c.library_file_name() == file)?;
    Some((krate, root))
}

/// The build id of a loaded plugin: the one it was stamped with, else (workspace crate) the
/// hash of its sources unless the host recorded another for its last build, else (library
/// built elsewhere) the hash of the file.
pub fn build_of(plugin: &LoadedPlugin) -> Option<String> {
    if plugin.build.is_some() {
        return plugin.build.clone();
    }
    match workspace_crate_of(&plugin.path) {
        Some((krate, root)) => {
            let current = crate_build_id(&krate, Some(&root)).ok()?;
            match recorded_build(&plugin.path) {
                Some(recorded) if recorded != current => None,
                _ => Some(current),
            }
        }
        None => library_build_id(&plugin.path).ok(),
    }
}

/// Stamps every plugin of `host` that has no build id yet with [`build_of`], so that runs
/// created later record the build that was loaded, not sources edited since.
pub fn stamp_builds(host: &mut PluginHost) {
    for plugin in &mut host.plugins {
        if plugin.build.is_none() {
            plugin.build = build_of(plugin);
        }
    }
}

/// Legend names of compared runs: the layer name, tagged with its build (`hyperset@1a2b3c4`)
/// when runs of the same layer were made by different builds, and followed by the task
/// (`on sudoku@5d6e7f8`) when runs of the same task were.
pub fn legend_names(runs: &[(&PluginRef, &PluginRef)]) -> Vec<String> {
    let differs = |plugins: &mut dyn Iterator<Item = &PluginRef>, name: &str| {
        plugins.filter(|p| p.name == name).map(|p| &p.build).collect::<BTreeSet<_>>().len() > 1
    };
    runs.iter()
        .map(|(layer, task)| {
            let mut label =
                if differs(&mut runs.iter().map(|r| r.0), &layer.name) { tagged(layer) } else { layer.name.clone() };
            if differs(&mut runs.iter().map(|r| r.1), &task.name) {
                label.push_str(&format!(" on {}", tagged(task)));
            }
            label
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tempfile::TempDir;

    fn temp_crate(tag: &str) -> TempDir {
        let dir = tempfile::Builder::new().prefix(&format!("wb-build-id-{tag}-")).tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("src")).unwrap();
        std::fs::write(dir.path().join("Cargo.toml"), "[package]\nname = \"probe\"\n").unwrap();
        std::fs::write(dir.path().join("src/lib.rs"), "pub const A: u32 = 1;\n").unwrap();
        dir
    }

    #[test]
    fn the_id_follows_the_sources_and_ignores_build_output_and_editor_files() {
        let tmp = temp_crate("follow");
        let dir = tmp.path();
        let krate = PluginCrate::read(dir).unwrap();
        let first = crate_build_id(&krate, None).unwrap();
        assert_eq!(first.len(), ID_DIGITS);
        std::fs::create_dir_all(dir.join("target")).unwrap();
        std::fs::write(dir.join("target/out.o"), "x").unwrap();
        std::fs::write(dir.join("src/.lib.rs.swp"), "x").unwrap();
        std::fs::write(dir.join("src/lib.rs~"), "x").unwrap();
        assert_eq!(crate_build_id(&krate, None).unwrap(), first);
        std::fs::write(dir.join("src/lib.rs"), "pub const A: u32 = 2;\n").unwrap();
        let second = crate_build_id(&krate, None).unwrap();
        assert_ne!(second, first);
        // A file moved to another name is another source, even with the same content.
        std::fs::rename(dir.join("src/lib.rs"), dir.join("src/other.rs")).unwrap();
        assert_ne!(crate_build_id(&krate, None).unwrap(), second);
    }

    #[test]
    fn path_dependencies_count_except_plugin_api() {
        let tmp = tempfile::Builder::new().prefix("wb-build-id-deps-").tempdir().unwrap();
        let root = tmp.path();
        for dir in ["plugins/probe/src", "data/src", "plugin-api/src"] {
            std::fs::create_dir_all(root.join(dir)).unwrap();
        }
        std::fs::write(
            root.join("Cargo.toml"),
            "[workspace]\nmembers = [\"plugins/probe\"]\n[workspace.dependencies]\ndata = { path = \"data\" }\nplugin-api = { path = \"plugin-api\" }\n",
        )
        .unwrap();
        std::fs::write(
            root.join("plugins/probe/Cargo.toml"),
            "[package]\nname = \"probe\"\n[dependencies]\ndata.workspace = true\nplugin-api.workspace = true\n",
        )
        .unwrap();
        std::fs::write(root.join("plugins/probe/src/lib.rs"), "").unwrap();
        std::fs::write(root.join("data/Cargo.toml"), "[package]\nname = \"data\"\n").unwrap();
        std::fs::write(root.join("data/src/lib.rs"), "1").unwrap();
        std::fs::write(root.join("plugin-api/Cargo.toml"), "[package]\nname = \"plugin-api\"\n").unwrap();
        std::fs::write(root.join("plugin-api/src/lib.rs"), "1").unwrap();
        let krate = PluginCrate::read(&root.join("plugins/probe")).unwrap();
        let labels: Vec<String> = source_dirs(&krate, Some(root)).into_iter().map(|(l, _)| l).collect();
        assert_eq!(labels, vec!["".to_string(), "data".to_string()]);
        let before = crate_build_id(&krate, Some(root)).unwrap();
        std::fs::write(root.join("plugin-api/src/lib.rs"), "2").unwrap();
        assert_eq!(crate_build_id(&krate, Some(root)).unwrap(), before);
        std::fs::write(root.join("data/src/lib.rs"), "2").unwrap();
        assert_ne!(crate_build_id(&krate, Some(root)).unwrap(), before);
    }

    /// A workspace with `data` and the crate `probe` whose `[package]` and dependency
    /// sections are `probe_manifest`.
    fn workspace_with(tag: &str, probe_manifest: &str) -> (TempDir, PluginCrate) {
        let tmp = tempfile::Builder::new().prefix(&format!("wb-build-id-{tag}-")).tempdir().unwrap();
        let root = tmp.path();
        for dir in ["plugins/probe/src", "data/src"] {
            std::fs::create_dir_all(root.join(dir)).unwrap();
        }
        std::fs::write(root.join("Cargo.toml"), "[workspace]\nmembers = [\"plugins/probe\", \"data\"]\n").unwrap();
        std::fs::write(root.join("plugins/probe/Cargo.toml"), probe_manifest).unwrap();
        std::fs::write(root.join("plugins/probe/src/lib.rs"), "").unwrap();
        std::fs::write(root.join("data/Cargo.toml"), "[package]\nname = \"data\"\n").unwrap();
        std::fs::write(root.join("data/src/lib.rs"), "1").unwrap();
        let krate = PluginCrate::read(&root.join("plugins/probe")).unwrap();
        (tmp, krate)
    }

    fn labels(krate: &PluginCrate, root: &Path) -> Vec<String> {
        source_dirs(krate, Some(root)).into_iter().map(|(l, _)| l).collect()
    }

    /// A probe crate with `manifest` depends on the path crate `data`: its files are part of
    /// the probe's build id.
    fn path_dependency_counts(tag: &str, manifest: &str) {
        let (tmp, krate) = workspace_with(tag, manifest);
        let root = tmp.path();
        assert_eq!(labels(&krate, root), vec!["".to_string(), "data".to_string()]);
        let before = crate_build_id(&krate, Some(root)).unwrap();
        std::fs::write(root.join("data/src/lib.rs"), "2").unwrap();
        assert_ne!(crate_build_id(&krate, Some(root)).unwrap(), before);
    }

    /// A library's build id is the hash of the file, kept in the cache folder and answered
    /// from there until the file changes.
    #[test]
    fn a_library_build_id_is_kept_until_the_file_changes() {
        let tmp = tempfile::Builder::new().prefix("wb-library-id-").tempdir().unwrap();
        let (library, cache) = (tmp.path().join("libprobe.so"), tmp.path().join("cache"));
        std::fs::write(&library, b"first build").unwrap();
        let hash_of = |bytes: &[u8]| hex_id(&Sha256::digest(bytes));
        assert_eq!(library_build_id_cached(&library, None).unwrap(), hash_of(b"first build"));
        assert_eq!(library_build_id_cached(&library, Some(&cache)).unwrap(), hash_of(b"first build"), "stored");
        let stamp = library_stamp(&library).unwrap();
        assert_eq!(datasets::generated_cache::read(&cache, &stamp).unwrap(), hash_of(b"first build").as_bytes());
        // What is stored is what is answered: a marker written into it comes back.
        datasets::generated_cache::write(&cache, &stamp, b"0123456789abcdef");
        assert_eq!(library_build_id_cached(&library, Some(&cache)).unwrap(), "0123456789abcdef", "from the cache");
        // A stored entry that is not an id is not used.
        datasets::generated_cache::write(&cache, &stamp, b"not an id");
        assert_eq!(library_build_id_cached(&library, Some(&cache)).unwrap(), hash_of(b"first build"));
        // Rewritten in place with the same length: another file, hashed again.
        datasets::generated_cache::write(&cache, &stamp, b"0123456789abcdef");
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&library, b"other build").unwrap();
        assert_eq!(library_build_id_cached(&library, Some(&cache)).unwrap(), hash_of(b"other build"));
    }

    /// A crate's sources are kept in the cache folder and answered from there, without cargo,
    /// until a manifest, the lock file or the cargo configuration changes.
    #[test]
    fn stored_sources_answer_until_the_files_cargo_read_change() {
        let (tmp, krate) =
            workspace_with("stored", "[package]\nname = \"probe\"\n[dependencies]\ndata = { path = \"../../data\" }\n");
        let (root, cache) = (tmp.path(), tmp.path().join("cache"));
        let fresh = crate_sources(&krate, Some(root)).unwrap();
        assert_eq!(crate_sources_cached(&krate, Some(root), Some(&cache)).unwrap(), fresh, "first answer, stored");
        // What is stored is what is answered: a marker written into it comes back.
        let name = stored_sources_name(&krate);
        let mut stored: StoredSources =
            serde_json::from_slice(&datasets::generated_cache::read(&cache, &name).unwrap()).unwrap();
        stored.sources.locked.push("marker".into());
        datasets::generated_cache::write(&cache, &name, &serde_json::to_vec(&stored).unwrap());
        let answered = crate_sources_cached(&krate, Some(root), Some(&cache)).unwrap();
        assert_eq!(answered.locked, vec!["marker".to_string()], "the stored answer, without cargo");
        // A cargo configuration file appearing is a change; so is a manifest's.
        std::fs::create_dir_all(root.join(".cargo")).unwrap();
        std::fs::write(root.join(".cargo/config.toml"), "[net]\noffline = true\n").unwrap();
        assert_eq!(crate_sources_cached(&krate, Some(root), Some(&cache)).unwrap(), fresh, "after a new config");
        std::fs::write(root.join("plugins/probe/Cargo.toml"), "[package]\nname = \"probe\"\n").unwrap();
        let changed = crate_sources_cached(&krate, Some(root), Some(&cache)).unwrap();
        assert_eq!(changed.dirs.len(), 1, "the dependency removed from the manifest is gone: {changed:?}");
        assert_eq!(crate_sources_cached(&krate, Some(root), Some(&cache)).unwrap(), changed, "stored again");
    }

    #[test]
    fn a_renamed_path_dependency_counts_under_its_package_name() {
        path_dependency_counts(
            "renamed",
            "[package]\nname = \"probe\"\n[dependencies]\nhelper = { package = \"data\", path = \"../../data\" }\n",
        );
    }

    #[test]
    fn a_target_specific_path_dependency_counts() {
        path_dependency_counts(
            "target",
            "[package]\nname = \"probe\"\n[target.'cfg(windows)'.dependencies]\ndata = { path = \"../../data\" }\n",
        );
    }

    #[test]
    fn another_locked_version_of_a_dependency_is_another_build() {
        // syn 2 and syn 3 are both in this workspace's lock file, so both resolve offline.
        let (tmp, krate) = workspace_with(
            "lock",
            "[package]\nname = \"probe\"\n[dependencies]\nsyn = { version = \">=2, <4\", default-features = false }\n",
        );
        let root = tmp.path();
        let main_lock = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().join("Cargo.lock");
        std::fs::copy(main_lock, root.join("Cargo.lock")).unwrap();
        let pin = |version: &str| {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let status = std::process::Command::new(cargo)
                .current_dir(root)
                .args(["update", "--offline", "--quiet", "-p", "syn", "--precise", version])
                .status()
                .unwrap();
            assert!(status.success(), "cargo update syn --precise {version}");
        };
        let first = crate_build_id(&krate, Some(root)).unwrap();
        assert_eq!(crate_build_id(&krate, Some(root)).unwrap(), first, "the same lock, the same id");
        // Resolving kept one syn in the lock file; pin the other.
        let lock = std::fs::read_to_string(root.join("Cargo.lock")).unwrap();
        pin(if lock.contains("version = \"3.0.10\"") { "2.0.119" } else { "3.0.10" });
        assert_ne!(crate_build_id(&krate, Some(root)).unwrap(), first);
    }

    #[test]
    fn legends_tag_builds_only_where_they_differ() {
        let p = |name: &str, build: Option<&str>| PluginRef {
            name: name.into(),
            version: "0.1.0".into(),
            fingerprint: "f".into(),
            build: build.map(str::to_string),
        };
        let (a, b, t) =
            (p("hyperset", Some("1a2b3c4d5e6f7a8b")), p("hyperset", Some("99aa88bb77cc66dd")), p("sudoku", None));
        let other = p("transformer", Some("0000000000000000"));
        assert_eq!(legend_names(&[(&a, &t), (&other, &t)]), vec!["hyperset", "transformer"]);
        assert_eq!(legend_names(&[(&a, &t), (&b, &t)]), vec!["hyperset@1a2b3c4", "hyperset@99aa88b"]);
        let t2 = p("sudoku", Some("5d6e7f8090a0b0c0"));
        assert_eq!(legend_names(&[(&a, &t), (&a, &t2)]), vec!["hyperset on sudoku@?", "hyperset on sudoku@5d6e7f8"]);
    }
}
