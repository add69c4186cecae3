//! `workbench plugin new NAME --kind layer|task`: creates the crate, adds it to the
//! workspace, builds it with the running binary's profile and features (through the host's
//! one build path, [`crate::host::build`]) and loads it.

use crate::host::autobuild_settings;
use crate::host::build::record_build;
use crate::host::build_id::crate_build_id;
use crate::host::{self, PluginCrate, PluginHost, WatchConfig};
use crate::scaffold::{self, TemplateKind};
use anyhow::{anyhow, bail, Context, Result};
use std::path::PathBuf;

/// The workspace to add the plugin to: the one in use (`WORKBENCH_WORKSPACE`, the one around
/// the current directory, else the one the binary was built from).
fn workspace() -> Result<PathBuf> {
    host::workspace_root().ok_or_else(|| {
        anyhow!(
            "no workbench workspace here: run `workbench plugin new` inside the repository (the folder with plugins/), \
             or name it with {}",
            host::WORKSPACE_VAR
        )
    })
}

/// Creates, builds and loads the plugin; `build = false` stops after creating it.
pub fn run(name: &str, kind: TemplateKind, build: bool, dirs: &[PathBuf]) -> Result<i32> {
    let root = workspace()?;
    let loaded = PluginHost::load_dirs(&host::search_path(dirs));
    let names: Vec<String> = loaded.plugins.iter().map(|p| p.declaration.name.clone()).collect();
    let created = scaffold::create(&root, name, kind, &names)?;
    tracing::info!(
        "created {} ({}); added plugins/{name} to the workspace members",
        created.dir.display(),
        created.files.join(", ")
    );
    let main_file = format!("plugins/{name}/{}", kind.main_file());
    if !build {
        tracing::info!("build it with `cargo build -p {name}`, then edit {main_file}");
        return Ok(0);
    }
    let krate = PluginCrate::read(&created.dir).context("the new crate's Cargo.toml cannot be read")?;
    let settings = autobuild_settings(&root);
    let id = crate_build_id(&krate, Some(&root)).ok();
    let config = WatchConfig {
        root: settings.root,
        crates: Vec::new(),
        discover_new_crates: false,
        library_dirs: Vec::new(),
        profile: settings.profile,
        cargo_args: settings.cargo_args,
        cargo_env: settings.cargo_env,
        debounce: host::watch::DEBOUNCE,
    };
    let with = if host::build::has_workbench_member(&config.root) { "-p workbench " } else { "" };
    tracing::info!("building {name} (cargo build --profile {} {with}-p {name})", config.profile);
    let library = config
        .cargo_build(&krate, &mut |line| tracing::info!("  {line}"))
        .map_err(|summary| anyhow!("the new crate did not build:\n{summary}"))?;
    if let Some(id) = id {
        record_build(&library, &id);
    }
    let plugin = host::load(&library)?;
    let declared = &plugin.declaration;
    if declared.name != name {
        bail!("{} declares the plugin `{}`, not `{name}`", library.display(), declared.name);
    }
    println!("{name} ({} {}) builds and loads: {}", declared.kind().as_str(), declared.version, library.display());
    println!("next:");
    println!("  edit {main_file} (the workbench's Plugins screen and `workbench watch` reload it on save)");
    println!("  cargo test -p {name}");
    match kind {
        TemplateKind::Layer => {
            println!("  workbench verify --layer {name}");
            println!("  workbench train --layer {name} --task sudoku d=64 difficulty=easy steps=300");
        }
        TemplateKind::Task => println!("  workbench train --layer transformer --task {name} d=64 steps=300"),
    }
    Ok(0)
}
