//! Creating runs: the stored form of a new run from a resolved configuration (refused when it
//! cannot fit in memory where it will run, see [`crate::memory`]), and queueing new runs
//! (alone, or grouped as a sweep) for the queue to start.

use crate::host::{LoadedPlugin, PluginHost};
use crate::ops::grid;
use crate::run_config::RunConfig;
use crate::store::{NewRun, PluginRef, Store};
use anyhow::Result;
use plugin_api::PluginKind;
use std::path::Path;
use std::process::Command;

/// The stored form of a new run of `config` with these plugins.
pub fn new_run(layer: &LoadedPlugin, task: &LoadedPlugin, config: &RunConfig) -> Result<NewRun> {
    new_run_at(layer, task, config, git_revision())
}

/// [`new_run`] recording `git_rev` as the code's revision.
fn new_run_at(
    layer: &LoadedPlugin,
    task: &LoadedPlugin,
    config: &RunConfig,
    git_rev: Option<String>,
) -> Result<NewRun> {
    let settings = config.settings()?;
    crate::memory::check(&layer.declaration, &task.declaration, config, crate::memory::Budget::current())?;
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
        git_rev,
        total_steps: Some(settings.steps),
    })
}

/// The stored form of a new run of `config`, with the plugins it names.
pub fn new_run_of(host: &PluginHost, config: &RunConfig) -> Result<NewRun> {
    new_runs_of(host, [config]).map(|mut runs| runs.remove(0))
}

/// The stored forms of new runs of `configs` (a sweep's points), the code's revision read once.
pub fn new_runs_of<'a>(host: &PluginHost, configs: impl IntoIterator<Item = &'a RunConfig>) -> Result<Vec<NewRun>> {
    let git_rev = git_revision();
    configs
        .into_iter()
        .map(|config| {
            let layer = host.get(&config.layer, PluginKind::Layer)?;
            let task = host.get(&config.task, PluginKind::Task)?;
            new_run_at(layer, task, config, git_rev.clone())
        })
        .collect()
}

/// The stored form of a new run of `layer` on `task` with `key=value` overrides, refused with
/// the plugins' reason when the configuration is invalid.
pub fn resolve_run(host: &PluginHost, layer: &str, task: &str, overrides: &[String]) -> Result<NewRun> {
    let layer = host.get(layer, PluginKind::Layer)?;
    let task = host.get(task, PluginKind::Task)?;
    new_run(layer, task, &RunConfig::resolve(&layer.declaration, &task.declaration, overrides)?)
}

/// The git revision of the code runs are built from: that of the workspace in use (the
/// plugins' sources), not of the current directory, which may be another repository (a
/// paper's, say). `None` for an installed copy without a workspace, or a workspace that is
/// not a git checkout.
pub fn git_revision() -> Option<String> {
    git_revision_of(&crate::host::workspace::workspace_root()?)
}

/// The revision checked out in `dir` (12 hex digits), with `-dirty` when tracked files have
/// changes not committed (new, untracked files do not count), as `git describe --dirty` marks
/// it.
pub fn git_revision_of(dir: &Path) -> Option<String> {
    let git = |args: &[&str]| {
        let out = Command::new("git").arg("-C").arg(dir).args(args).output().ok()?;
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let revision = git(&["rev-parse", "--short=12", "HEAD"]).filter(|r| !r.is_empty())?;
    let dirty = git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|changes| !changes.is_empty());
    Some(if dirty { format!("{revision}-dirty") } else { revision })
}

/// Refuses runs that start from another run's parameters (`init_from=N`) when run N does not
/// exist in `store` or has no checkpoint, before any is stored; whether the checkpoint fits the
/// model is found when the worker reads it (the run then fails, naming the parameter).
pub async fn check_starting_points(store: &Store, runs: &[NewRun]) -> Result<()> {
    let mut checked = std::collections::BTreeSet::new();
    for run in runs {
        let Some(source) = run.config.pointer("/train/init_from").and_then(|v| v.as_i64()).filter(|id| *id > 0) else {
            continue;
        };
        if !checked.insert(source) {
            continue;
        }
        store.run(source).await.map_err(|e| anyhow::anyhow!("init_from={source}: {e}"))?;
        if crate::train::worker::existing_checkpoint(store, source)?.is_none() {
            anyhow::bail!(
                "init_from={source}: run {source} has no checkpoint to start from ({} does not exist); \
                 pick a run that evaluated at least once with checkpoint=true",
                crate::train::worker::checkpoint_path(store, source)?.display()
            );
        }
    }
    Ok(())
}

/// Stores one run as queued, in no sweep; the queue starts it. Returns its id.
pub async fn queue_run(store: &Store, run: &NewRun) -> Result<i64> {
    Ok(store.create_run(run).await?)
}

/// A sweep stored with its queued runs (ids in the order given).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedSweep {
    pub sweep: i64,
    pub runs: Vec<i64>,
}

/// Stores `runs` as the queued runs of a new sweep `name`, declared by `spec` (kept with the
/// sweep); the queue starts them in this order.
pub async fn queue_sweep(store: &Store, name: &str, spec: &grid::Spec, runs: &[NewRun]) -> Result<QueuedSweep> {
    let sweep = store.create_sweep(name, &serde_json::to_value(spec)?).await?;
    let mut ids = Vec::with_capacity(runs.len());
    for (index, run) in runs.iter().enumerate() {
        ids.push(store.create_run_in_sweep(run, sweep, index as u32).await?);
    }
    Ok(QueuedSweep { sweep, runs: ids })
}

#[cfg(test)]
mod tests {
    use super::git_revision_of;
    use std::path::Path;
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(["-c", "user.name=t", "-c", "user.email=t@example.org", "-c", "commit.gpgsign=false"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    #[test]
    fn the_revision_is_the_checkout_s_and_says_when_tracked_files_changed() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(git_revision_of(dir.path()), None, "not a checkout");
        git(dir.path(), &["init", "-q"]);
        assert_eq!(git_revision_of(dir.path()), None, "no commit yet");
        std::fs::write(dir.path().join("a.rs"), "fn a() {}\n").unwrap();
        git(dir.path(), &["add", "a.rs"]);
        git(dir.path(), &["commit", "-q", "-m", "a"]);
        let head = git(dir.path(), &["rev-parse", "--short=12", "HEAD"]);
        assert_eq!(head.len(), 12);
        assert_eq!(git_revision_of(dir.path()), Some(head.clone()));
        std::fs::write(dir.path().join("new.rs"), "").unwrap();
        assert_eq!(git_revision_of(dir.path()), Some(head.clone()), "an untracked file changes nothing built");
        std::fs::write(dir.path().join("a.rs"), "fn a() { 1; }\n").unwrap();
        assert_eq!(git_revision_of(dir.path()), Some(format!("{head}-dirty")));
    }
}
