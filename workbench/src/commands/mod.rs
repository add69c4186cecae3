//! The implementation of each command: each parses nothing (clap did, in `cli.rs`) and
//! prints its results; the work itself is in the modules below them (`ops`, `store`, ...).

pub mod ablation;
pub mod bench;
mod bench_graph;
mod bench_peak;
mod bench_reference;
pub mod completions;
pub mod datasets;
pub mod db;
pub mod doctor;
pub mod eval;
pub mod import;
pub mod plot;
pub mod plugin_new;
pub mod plugins;
pub mod runs;
pub mod sweep;
mod text_table;
pub mod train;
pub mod verify;
pub mod watch;

use crate::host::{self, BuildOutcome, PluginHost};
use crate::store::{Store, StoreLocation};
use anyhow::Result;
use std::path::{Path, PathBuf};

/// `runs.db` in the repository root when the binary runs from this workspace's build
/// output, else in the current directory.
pub fn default_db_path() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf);
    match (root, host::build_output_dir()) {
        (Some(root), Some(out)) if out.starts_with(root.join("target")) => root.join("runs.db"),
        _ => PathBuf::from("runs.db"),
    }
}

/// Where the TUI writes exports without `--exports`: `exports` beside an SQLite store (the
/// runs and what was made of them stay together), else in the current directory.
pub fn default_exports_dir(db: &crate::store::StoreLocation) -> PathBuf {
    match db {
        crate::store::StoreLocation::Sqlite(file) => {
            file.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new(".")).join("exports")
        }
        crate::store::StoreLocation::Postgres(_) => PathBuf::from("exports"),
    }
}

/// The default store outside a checkout when it does not exist yet: [`open_store`] says
/// where it created it, once, since a file appearing in whatever directory one stood in is
/// easily lost.
static NEW_DEFAULT_DB: std::sync::Mutex<Option<PathBuf>> = std::sync::Mutex::new(None);

/// Notes that `db` is the default store, chosen by neither --db nor WORKBENCH_DB.
pub fn note_default_db(db: &StoreLocation) {
    if let StoreLocation::Sqlite(path) = db {
        // In a checkout the default is its root's runs.db, a known place.
        if path.is_relative() && !path.exists() {
            *NEW_DEFAULT_DB.lock().unwrap_or_else(|e| e.into_inner()) = Some(path.clone());
        }
    }
}

/// Says where the default store was created, if this command created it.
fn announce_created(db: &StoreLocation) {
    let StoreLocation::Sqlite(path) = db else { return };
    let mut noted = NEW_DEFAULT_DB.lock().unwrap_or_else(|e| e.into_inner());
    if noted.as_ref() == Some(path) && path.exists() {
        *noted = None;
        let dir = std::path::absolute(path).ok().and_then(|p| p.parent().map(Path::to_path_buf));
        let dir = dir.unwrap_or_else(|| PathBuf::from("."));
        tracing::info!("created runs.db in {} (WORKBENCH_DB or --db chooses another)", dir.display());
    }
}

/// A `--grace` value as a duration, refusing what cannot be one.
pub fn grace_period(seconds: f64) -> Result<std::time::Duration> {
    std::time::Duration::try_from_secs_f64(seconds)
        .map_err(|_| anyhow::anyhow!("--grace {seconds} is not a number of seconds; give e.g. --grace 10"))
}

/// Opens the store and marks runs whose worker died as interrupted.
pub async fn open_store(db: &StoreLocation, artifacts: &Option<PathBuf>) -> Result<Store> {
    let store = Store::connect(db).await?.with_artifacts_dir(artifacts.clone());
    announce_created(db);
    OPEN_STORES.lock().unwrap_or_else(|e| e.into_inner()).push(store.clone());
    crate::executor::end_orphaned_runs(&store).await?;
    Ok(store)
}

/// Stores opened by [`open_store`], closed by [`close_stores`] when the command ends.
static OPEN_STORES: std::sync::Mutex<Vec<Store>> = std::sync::Mutex::new(Vec::new());

/// Closes every store the command opened.
pub async fn close_stores() {
    let stores = std::mem::take(&mut *OPEN_STORES.lock().unwrap_or_else(|e| e.into_inner()));
    for store in stores {
        store.close().await;
    }
}

/// Builds stale workspace plugins if needed, then loads every plugin on the search path.
pub fn load_plugins(extra_dirs: &[PathBuf]) -> PluginHost {
    let outcome = host::ensure_workspace_plugins_built();
    if let BuildOutcome::Failed(why) = &outcome {
        tracing::warn!("rebuilding the workspace plugins failed ({why}); using the libraries already built");
    }
    let mut plugins = PluginHost::load_dirs(&host::search_path(extra_dirs));
    if let BuildOutcome::Built { failed, .. } = outcome {
        for (krate, errors) in failed {
            eprintln!("warning: plugin crate {} does not build (see `workbench plugins`)", krate.package);
            plugins.errors.push(host::LoadError::Build { path: krate.dir, errors });
        }
    }
    host::stamp_builds(&mut plugins);
    plugins
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exports_default_to_a_folder_beside_an_sqlite_store() {
        let at = |db: StoreLocation| default_exports_dir(&db);
        assert_eq!(at(StoreLocation::Sqlite("/data/lab/runs.db".into())), PathBuf::from("/data/lab/exports"));
        assert_eq!(at(StoreLocation::Sqlite("runs.db".into())), PathBuf::from("./exports"));
        assert_eq!(at(StoreLocation::Postgres("postgres://db/runs".into())), PathBuf::from("exports"));
    }
}
