//! A small cargo workspace for tests that create and build plugin crates, beside the real
//! one: its manifest is the real one's (same profiles, same candle patch, same lock file)
//! with no members and absolute paths, and its builds go to the real target directory, so
//! only the new crates compile (the libraries land in `target/debug` under their own names).
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
    workspace.remove("exclude");
    workspace.remove("default-members");
    workspace["members"] = toml_edit::value(toml_edit::Array::new());
    let absolute = |relative: &str| main.join(relative).display().to_string();
    let dependencies = workspace["dependencies"].as_table_like_mut().expect("[workspace.dependencies]");
    for (_, dependency) in dependencies.iter_mut() {
        if let Some(table) = dependency.as_table_like_mut() {
            if let Some(path) = table.get("path").and_then(|p| p.as_str()).map(str::to_string) {
                table.insert("path", toml_edit::value(absolute(&path)));
            }
        }
    }
    let patch = doc["patch"]["crates-io"]["candle-core"].as_table_like_mut().expect("the candle patch");
    let vendored = patch.get("path").and_then(|p| p.as_str()).expect("a path").to_string();
    patch.insert("path", toml_edit::value(absolute(&vendored)));
    // plugin-api builds with the dev defaults in the real workspace (a member); here it is
    // not one, so say so, or `package."*"` (opt-level 3) would build it again.
    doc["profile"]["dev"]["package"]["plugin-api"]["opt-level"] = toml_edit::value(0);
    doc["profile"]["dev"]["package"]["plugin-api"]["debug"] = toml_edit::value(2);
    std::fs::write(root.join("Cargo.toml"), doc.to_string()).unwrap();
    std::fs::copy(main.join("Cargo.lock"), root.join("Cargo.lock")).unwrap();
    root
}
