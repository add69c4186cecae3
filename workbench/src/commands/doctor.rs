//! `workbench doctor`: whether this machine, with these settings, can do what the other
//! commands will ask of it: open the run store, write run files, start workers where they are
//! to run (this machine, or Slurm jobs the controller would take), and load the plugins; and
//! what runs the CPU kernels and which CUDA devices are seen. Each check says what it found
//! and, where it fails, the same error (with its fix) the command that needs it would give.
//! It stores no run and leaves no file: an SQLite file that does not exist yet is not created
//! (a store that exists is migrated, as by every command).

use crate::executor::Executor;
use crate::store::{Backend, RunStatus, Store, StoreError, StoreLocation};
use anyhow::Result;
use serde_json::json;
use std::path::{Path, PathBuf};

/// What one check found.
struct Check {
    name: &'static str,
    ok: bool,
    detail: String,
}

impl Check {
    fn passed(name: &'static str, detail: String) -> Check {
        Check { name, ok: true, detail }
    }

    fn failed(name: &'static str, detail: String) -> Check {
        Check { name, ok: false, detail }
    }

    fn of(name: &'static str, outcome: Result<String>) -> Check {
        match outcome {
            Ok(detail) => Check::passed(name, detail),
            Err(e) => Check::failed(name, format!("{e:#}")),
        }
    }
}

/// What the command was given: the global options it checks.
pub struct Settings<'a> {
    pub db: &'a StoreLocation,
    pub artifacts: &'a Option<PathBuf>,
    pub executor: &'a Executor,
    /// `--slurm` as given, to name the options sbatch was asked about.
    pub slurm: Option<&'a str>,
    pub plugin_dirs: &'a [PathBuf],
}

/// Runs every check and prints them; exit code 0 when all passed, 1 otherwise.
pub async fn run(settings: &Settings<'_>, json: bool) -> Result<i32> {
    let mut checks = Vec::new();
    let store = match settings.db.sqlite_path().filter(|path| !path.exists()) {
        Some(path) => {
            checks.push(Check::of("store", store_to_create(settings.db, path)));
            let artifacts = settings.artifacts.clone().unwrap_or_else(|| file_directory(settings.db));
            checks.push(Check::of("artifacts", writable(&artifacts)));
            None
        }
        None => match Store::connect(settings.db).await {
            Ok(store) => {
                let store = store.with_artifacts_dir(settings.artifacts.clone());
                checks.push(Check::of("store", describe_store(&store).await));
                checks
                    .push(Check::of("artifacts", store.artifacts_dir().map_err(Into::into).and_then(|d| writable(&d))));
                Some(store)
            }
            Err(e) => {
                checks.push(Check::failed("store", format!("{e:#}")));
                // The run files' directory is judged apart (a PostgreSQL store names none).
                if let Some(dir) = settings.artifacts.clone().or_else(|| settings.db.default_artifacts_dir()) {
                    checks.push(Check::of("artifacts", writable(&dir)));
                }
                None
            }
        },
    };
    checks.push(Check::of("executor", executor(settings, store.as_ref())));
    checks.push(Check::passed("cpu", cpu()));
    checks.push(Check::passed("cuda", cuda()));
    checks.push(plugins(settings.plugin_dirs));
    if let Some(store) = store {
        store.close().await;
    }
    report(&checks, json)?;
    Ok(if checks.iter().all(|c| c.ok) { 0 } else { crate::exit_code::ERROR })
}

/// An SQLite file not made yet: the first command that stores a run creates it, where the
/// store's own checks of the path pass.
fn store_to_create(db: &StoreLocation, path: &Path) -> Result<String> {
    if let Some(reason) = crate::store::unusable_sqlite_path(path) {
        return Err(StoreError::CannotOpen { db: db.clone(), reason }.into());
    }
    writable(&file_directory(db))?;
    Ok(format!("{} (SQLite): not created yet; the first command that stores a run creates it", path.display()))
}

/// The directory of an SQLite store's file, where its run files go by default.
fn file_directory(db: &StoreLocation) -> PathBuf {
    db.default_artifacts_dir().unwrap_or_else(|| PathBuf::from("."))
}

async fn describe_store(store: &Store) -> Result<String> {
    let counts = store.run_counts_by_status().await?;
    let count = |status: RunStatus| counts.get(status.as_str()).copied().unwrap_or(0);
    let backend = match store.backend() {
        Backend::Sqlite => "SQLite",
        Backend::Postgres => "PostgreSQL",
    };
    let server = match store.server_connections().await? {
        Some(connections) => format!("; {}", connections.describe()),
        None => String::new(),
    };
    Ok(format!(
        "{} ({backend}): {}, {} running, {} queued; new runs are stored as {}'s{server}",
        store.location(),
        crate::wording::count(counts.values().sum::<usize>(), "run"),
        count(RunStatus::Running),
        count(RunStatus::Queued),
        store.user()
    ))
}

/// `dir` takes a file, or, where it does not exist yet, the nearest directory above it that
/// does (the first run makes it); nothing is left behind.
fn writable(dir: &Path) -> Result<String> {
    let fix = "choose another with --artifacts DIR or WORKBENCH_ARTIFACTS (for the store: --db)";
    let absolute = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    let Some(existing) = absolute.ancestors().find(|a| a.is_dir()) else {
        anyhow::bail!("no directory of {} exists; {fix}", dir.display());
    };
    let probe = existing.join(format!(".workbench-doctor-{}", std::process::id()));
    std::fs::write(&probe, b"").map_err(|e| anyhow::anyhow!("cannot write in {}: {e}; {fix}", existing.display()))?;
    let _ = std::fs::remove_file(&probe);
    if existing == absolute {
        Ok(format!("{} (writable)", dir.display()))
    } else {
        Ok(format!("{} (made by the first run: {} is writable)", dir.display(), existing.display()))
    }
}

/// Local: how many workers at once. Slurm: the store suits jobs on other nodes, a controller
/// answers, and sbatch would take a CPU run's job with the `--slurm` options.
fn executor(settings: &Settings<'_>, store: Option<&Store>) -> Result<String> {
    match settings.executor {
        Executor::Local => Ok(format!(
            "local: workers are processes on this machine, {} at once unless --jobs says otherwise",
            settings.executor.default_jobs()
        )),
        Executor::Slurm(_) => tokio::task::block_in_place(|| {
            match store {
                Some(store) => settings.executor.check(store)?,
                None => crate::executor::slurm::controller_answers()?,
            }
            settings.executor.check_jobs(["cpu"])?;
            Ok(format!(
                "slurm: the controller answers, and sbatch --test-only takes a CPU run's job with --slurm {}",
                settings.slurm.filter(|s| !s.trim().is_empty()).unwrap_or("(none)")
            ))
        }),
    }
}

/// The fused kernels' instruction set and what runs their matrix products (module `bench`).
fn cpu() -> String {
    let library = plugin_api::blas::in_use().map(|blas| blas.name().to_string());
    format!(
        "{}; {}",
        super::bench::isa_line(plugin_api::isa::kernels_isa(), plugin_api::isa::Isa::detected()),
        super::bench::products_line(library.as_deref())
    )
}

fn cuda() -> String {
    if !cfg!(feature = "cuda") {
        return "not in this build (cargo build --release --features cuda adds it)".to_string();
    }
    match crate::device::cuda_device_count() {
        0 => "built in; no CUDA device is visible here (runs train on the CPU)".to_string(),
        n => format!("{n} device(s) visible (device=cuda takes a free one)"),
    }
}

/// The plugins load, by kind; each library refused fails the check with its reason.
fn plugins(dirs: &[PathBuf]) -> Check {
    let host = super::load_plugins(dirs);
    let names = |kind: plugin_api::PluginKind| -> Vec<&str> {
        host.plugins.iter().filter(|p| p.declaration.kind() == kind).map(|p| p.declaration.name.as_str()).collect()
    };
    let (layers, tasks) = (names(plugin_api::PluginKind::Layer), names(plugin_api::PluginKind::Task));
    let found =
        format!("{} layers ({}), {} tasks ({})", layers.len(), layers.join(", "), tasks.len(), tasks.join(", "));
    if layers.is_empty() || tasks.is_empty() {
        let searched: Vec<String> = crate::host::search_path(dirs).iter().map(|d| d.display().to_string()).collect();
        return Check::failed(
            "plugins",
            format!(
                "{found}: training needs a layer and a task; searched {} (build them with cargo build --release \
                 --workspace, or add a directory with --plugin-dir or WORKBENCH_PLUGIN_PATH)",
                searched.join(", ")
            ),
        );
    }
    if host.errors.is_empty() {
        return Check::passed("plugins", found);
    }
    let refused: Vec<String> = host.errors.iter().map(|e| e.to_string()).collect();
    Check::failed("plugins", format!("{found}; {} refused:\n{}", refused.len(), refused.join("\n")))
}

fn report(checks: &[Check], json: bool) -> Result<()> {
    if json {
        let rows: Vec<_> = checks.iter().map(|c| json!({"check": c.name, "ok": c.ok, "detail": c.detail})).collect();
        let ok = checks.iter().all(|c| c.ok);
        println!("{}", serde_json::to_string_pretty(&json!({"ok": ok, "checks": rows}))?);
        return Ok(());
    }
    for check in checks {
        let mark = if check.ok { "ok" } else { "PROBLEM" };
        let mut lines = check.detail.lines();
        println!("{:<10} {:<8} {}", check.name, mark, lines.next().unwrap_or(""));
        for line in lines {
            println!("{:<19} {line}", "");
        }
    }
    let problems = checks.iter().filter(|c| !c.ok).count();
    match problems {
        0 => println!("every check passed"),
        n => println!("{} found a problem (above, with the fix)", crate::wording::count(n, "check")),
    }
    Ok(())
}
