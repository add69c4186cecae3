//! Creating runs: the stored form of a new run from a resolved configuration.

use crate::host::LoadedPlugin;
use crate::run_config::RunConfig;
use crate::store::{NewRun, PluginRef};
use anyhow::Result;

/// The stored form of a new run of `config` with these plugins.
pub fn new_run(layer: &LoadedPlugin, task: &LoadedPlugin, config: &RunConfig) -> Result<NewRun> {
    let settings = config.settings()?;
    let plugin_ref = |p: &LoadedPlugin| PluginRef {
        name: p.declaration.name.clone(),
        version: p.declaration.version.clone(),
        fingerprint: plugin_api::FINGERPRINT.to_string(),
        build: crate::host::build_of(p),
    };
    Ok(NewRun {
        layer: plugin_ref(layer),
        task: plugin_ref(task),
        config: config.to_json(),
        seed: settings.seed,
        device: settings.device.clone(),
        git_rev: git_revision(),
        total_steps: Some(settings.steps),
    })
}

/// The current git revision of the working directory, if any.
pub fn git_revision() -> Option<String> {
    let out = std::process::Command::new("git").args(["rev-parse", "--short=12", "HEAD"]).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string()).filter(|s| !s.is_empty())
}
