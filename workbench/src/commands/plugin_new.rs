//! `workbench plugin new NAME --kind layer|task`: creates the crate, adds it to the
//! workspace, builds it with the running binary's profile and loads it.

use crate::host::watch::{feature_args, running_profile, DEBOUNCE};
use crate::host::{self, PluginCrate, PluginHost, WatchConfig};
use crate::scaffold::{self, TemplateKind};
use anyhow::{anyhow, bail, Context, Result};
use std::path::{Path, PathBuf};

/// The workspace to add the plugin to: the one around the current directory, else the one
/// the binary was built from.
fn workspace() -> Result<PathBuf> {
    let here = std::env::current_dir().context("cannot read the current directory")?;
    let around = here.ancestors().find(|dir| is_workbench_workspace(dir)).map(Path::to_path_buf);
    around.or_else(host::workspace_root).ok_or_else(|| {
        anyhow!(
            "no workbench workspace here: run `workbench plugin new` inside the repository (the folder with plugins/)"
        )
    })
}

fn is_workbench_workspace(dir: &Path) -> bool {
    dir.join("plugins").is_dir()
        && std::fs::read_to_string(dir.join("Cargo.toml")).is_ok_and(|text| text.contains("[workspace]"))
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
    let config = WatchConfig {
        root,
        crates: Vec::new(),
        discover_new_crates: false,
        library_dirs: Vec::new(),
        profile: running_profile(),
        cargo_args: feature_args(),
        cargo_env: Vec::new(),
        debounce: DEBOUNCE,
    };
    tracing::info!("building {name} (cargo build --profile {} -p {name})", config.profile);
    let library = config
        .cargo_build(&krate, &mut |line| tracing::info!("  {line}"))
        .map_err(|summary| anyhow!("the new crate did not build:\n{summary}"))?;
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
