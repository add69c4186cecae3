//! A small cargo workspace for tests that create and build plugin crates, beside the real
//! one: its manifest is the real one's (same profiles, same candle patch, same lock file),
//! its builds go to the real target directory, and only the new crates compile (the
//! libraries land in `target/debug` under their own names).
//!
//! Cargo reuses a dependency's build only under the same hash, which covers its features and,
//! for a path dependency (plugin-api, datasets, the vendored candle-core), its path relative to
//! the workspace root. So the scratch root holds links to those folders at the same relative
//! paths, and a `workbench` member with the real workbench's dependencies and no code: the
//! host builds plugins together with the workbench (and a test that runs `cargo test` here
//! names it too), and the features of every shared dependency (serde, candle...) follow from
//! all the packages built at once. Without either,
//! every fresh clone compiled half the dependency tree a second time for these tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// The workspace the tests belong to.
pub fn main_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workbench is inside the workspace").to_path_buf()
}

/// The real target directory (`target/`), shared with the scratch workspaces.
pub fn target_dir() -> PathBuf {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_workbench"));
    exe.parent().and_then(Path::parent).expect("target/<profile>/workbench").to_path_buf()
}

/// Environment for cargo in a scratch workspace: the shared target directory, offline.
pub fn cargo_env() -> Vec<(String, String)> {
    vec![("CARGO_TARGET_DIR".into(), target_dir().display().to_string()), ("CARGO_NET_OFFLINE".into(), "true".into())]
}

/// `cargo` in the scratch workspace `root`, as the host runs it: with `cargo_env`, and without
/// the variables cargo set for this test (a build script of the shared dependencies, ring's,
/// reruns when they change, and the real workspace's next build would compile it again).
pub fn cargo(root: &Path) -> std::process::Command {
    let mut command = std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(workbench::host::build::describes_the_running_package) {
            command.env_remove(name);
        }
    }
    command.current_dir(root).envs(cargo_env());
    command
}

/// A fresh scratch workspace for test `tag`, with an empty `plugins/`. The path is the same
/// on every run (under cargo's test scratch directory), so cargo reuses and overwrites its
/// build output instead of piling up copies.
pub fn create(tag: &str) -> PathBuf {
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("scratch-workspaces").join(tag);
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("plugins")).unwrap();
    let main = main_root();
    let text = std::fs::read_to_string(main.join("Cargo.toml")).unwrap();
    let mut doc: toml_edit::DocumentMut = text.parse().unwrap();
    let workspace = doc["workspace"].as_table_mut().expect("[workspace]");
    let members: Vec<String> = workspace["members"]
        .as_array()
        .expect("[workspace] members")
        .iter()
        .filter_map(|m| m.as_str().map(str::to_string))
        .collect();
    workspace.remove("exclude");
    workspace.remove("default-members");
    workspace["members"] = toml_edit::value(toml_edit::Array::from_iter(["workbench"]));
    let edition = workspace["package"]["edition"].as_str().expect("[workspace.package] edition").to_string();
    let mut linked = path_dependencies(workspace["dependencies"].as_table_like().expect("[workspace.dependencies]"));
    linked.extend(path_dependencies(doc["patch"]["crates-io"].as_table_like().expect("[patch.crates-io]")));
    // Shorter paths first: a crate inside another linked one (`plugin-api/kernels`) is then
    // already reached through its parent's link.
    linked.sort_by_key(|(_, relative)| relative.len());
    for (_, relative) in &linked {
        let link = root.join(relative);
        if link.exists() {
            continue;
        }
        std::fs::create_dir_all(link.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(main.join(relative), &link).unwrap();
    }
    // Settings for members that are not part of this workspace's builds (the kernels crate)
    // would only make cargo warn about them.
    if let Some(packages) = doc["profile"]["dev"].get_mut("package").and_then(|p| p.as_table_like_mut()) {
        for member in &members {
            let manifest = std::fs::read_to_string(main.join(member).join("Cargo.toml")).unwrap();
            let manifest: toml_edit::DocumentMut = manifest.parse().unwrap();
            let name = manifest["package"]["name"].as_str().expect("a package name");
            if !linked.iter().any(|(linked, _)| linked == name) {
                packages.remove(name);
            }
        }
    }
    std::fs::write(root.join("Cargo.toml"), doc.to_string()).unwrap();
    std::fs::copy(main.join("Cargo.lock"), root.join("Cargo.lock")).unwrap();
    write_workbench_stand_in(&root, &main, &edition);
    root
}

/// The name and `path` of every dependency in `dependencies` that has one.
fn path_dependencies(dependencies: &dyn toml_edit::TableLike) -> Vec<(String, String)> {
    dependencies
        .iter()
        .filter_map(|(name, dependency)| {
            let path = dependency.as_table_like()?.get("path")?.as_str()?;
            Some((name.to_string(), path.to_string()))
        })
        .collect()
}

/// The `workbench` member of a scratch workspace: the real workbench's features and
/// dependencies, development ones included (`cargo test` unifies their features too; all
/// from the workspace's list or a registry), and an empty library named apart, so the real
/// one's files are not overwritten in the shared target directory.
fn write_workbench_stand_in(root: &Path, main: &Path, edition: &str) {
    let real = std::fs::read_to_string(main.join("workbench/Cargo.toml")).unwrap();
    let real: toml_edit::DocumentMut = real.parse().unwrap();
    let mut manifest = toml_edit::DocumentMut::new();
    let mut package = toml_edit::Table::new();
    package["name"] = toml_edit::value("workbench");
    package["version"] = toml_edit::value("0.0.0");
    package["edition"] = toml_edit::value(edition);
    package["publish"] = toml_edit::value(false);
    manifest["package"] = toml_edit::Item::Table(package);
    let mut lib = toml_edit::Table::new();
    lib["name"] = toml_edit::value("workbench_stand_in");
    lib["path"] = toml_edit::value("lib.rs");
    manifest["lib"] = toml_edit::Item::Table(lib);
    for section in ["features", "dependencies", "dev-dependencies"] {
        let table = real.get(section).unwrap_or_else(|| panic!("workbench/Cargo.toml has no [{section}]"));
        assert!(
            path_dependencies(table.as_table_like().unwrap()).is_empty(),
            "workbench/Cargo.toml: a `path` dependency would need a link in the scratch workspace"
        );
        manifest[section] = table.clone();
    }
    let dir = root.join("workbench");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("Cargo.toml"), manifest.to_string()).unwrap();
    std::fs::write(dir.join("lib.rs"), "//! Features only: see `scratch_workspace`.\n").unwrap();
}
