//! Which build of a plugin made a run.
//!
//! Every run records, next to each plugin's declared version, a build id:
//!
//! - for a plugin crate of the workspace, a hash of its sources: every file of the crate
//!   directory except `target/`, hidden files and editor leftovers (`*~`, `*.swp`), plus the
//!   same of the crates it depends on by path (`datasets`), except `plugin-api`, whose
//!   sources are already part of the fingerprint every plugin is checked against;
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

/// The directories whose files make a crate's build id, labelled: the crate itself (label
/// `""`) and, recursively, its path dependencies (labelled by package name). `root` is the
/// workspace whose `[workspace.dependencies]` resolve `dep.workspace = true`.
pub fn source_dirs(krate: &PluginCrate, root: Option<&Path>) -> Vec<(String, PathBuf)> {
    let mut out = vec![(String::new(), krate.dir.clone())];
    let mut seen: BTreeSet<PathBuf> = BTreeSet::new();
    let mut pending = vec![krate.dir.clone()];
    while let Some(dir) = pending.pop() {
        for (name, dep_dir) in path_dependencies(&dir, root) {
            if NOT_HASHED.contains(&name.as_str()) || !seen.insert(dep_dir.clone()) {
                continue;
            }
            pending.push(dep_dir.clone());
            out.push((name, dep_dir));
        }
    }
    out
}

/// `(package name, directory)` of the path dependencies (normal and build) of the crate in `dir`.
fn path_dependencies(dir: &Path, root: Option<&Path>) -> Vec<(String, PathBuf)> {
    let Some(manifest) = read_toml(&dir.join("Cargo.toml")) else { return Vec::new() };
    let workspace_deps = root
        .and_then(|r| read_toml(&r.join("Cargo.toml")))
        .and_then(|m| m.get("workspace").and_then(|w| w.get("dependencies")).and_then(|d| d.as_table()).cloned());
    let mut out = Vec::new();
    for section in ["dependencies", "build-dependencies"] {
        let Some(deps) = manifest.get(section).and_then(|d| d.as_table()) else { continue };
        for (name, spec) in deps {
            let local = spec.get("path").and_then(|p| p.as_str()).map(|p| dir.join(p));
            let inherited = || {
                let inherits = spec.get("workspace").and_then(|w| w.as_bool()) == Some(true);
                let path = workspace_deps.as_ref()?.get(name)?.get("path")?.as_str()?;
                inherits.then(|| root.map(|r| r.join(path))).flatten()
            };
            if let Some(dep_dir) = local.or_else(inherited) {
                out.push((name.clone(), dep_dir));
            }
        }
    }
    out
}

fn read_toml(path: &Path) -> Option<toml::Table> {
    std::fs::read_to_string(path).ok()?.parse().ok()
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
    let mut hasher = Sha256::new();
    for (name, path) in files {
        let bytes = std::fs::read(path)?;
        hasher.update(name.as_bytes());
        hasher.update([0u8]);
        hasher.update((bytes.len() as u64).to_le_bytes());
        hasher.update(&bytes);
    }
    Ok(hex_id(&hasher.finalize()))
}

/// The build id of a plugin crate's sources (see the module doc).
pub fn crate_build_id(krate: &PluginCrate, root: Option<&Path>) -> std::io::Result<String> {
    hash_files(&source_files(&source_dirs(krate, root)))
}

/// The build id of a library built elsewhere: a hash of the file.
pub fn library_build_id(path: &Path) -> std::io::Result<String> {
    let mut hasher = Sha256::new();
    std::io::copy(&mut std::fs::File::open(path)?, &mut hasher)?;
    Ok(hex_id(&hasher.finalize()))
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

    fn temp_crate(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("wb-build-id-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("src")).unwrap();
        std::fs::write(dir.join("Cargo.toml"), "[package]\nname = \"probe\"\n").unwrap();
        std::fs::write(dir.join("src/lib.rs"), "pub const A: u32 = 1;\n").unwrap();
        dir
    }

    #[test]
    fn the_id_follows_the_sources_and_ignores_build_output_and_editor_files() {
        let dir = temp_crate("follow");
        let krate = PluginCrate::read(&dir).unwrap();
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
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn path_dependencies_count_except_plugin_api() {
        let root = std::env::temp_dir().join(format!("wb-build-id-deps-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
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
        std::fs::write(root.join("plugin-api/src/lib.rs"), "1").unwrap();
        let krate = PluginCrate::read(&root.join("plugins/probe")).unwrap();
        let labels: Vec<String> = source_dirs(&krate, Some(&root)).into_iter().map(|(l, _)| l).collect();
        assert_eq!(labels, vec!["".to_string(), "data".to_string()]);
        let before = crate_build_id(&krate, Some(&root)).unwrap();
        std::fs::write(root.join("plugin-api/src/lib.rs"), "2").unwrap();
        assert_eq!(crate_build_id(&krate, Some(&root)).unwrap(), before);
        std::fs::write(root.join("data/src/lib.rs"), "2").unwrap();
        assert_ne!(crate_build_id(&krate, Some(&root)).unwrap(), before);
        std::fs::remove_dir_all(&root).unwrap();
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
