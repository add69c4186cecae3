//! Probing an unknown library in a short-lived child process before the host loads it.
//!
//! Loading a library runs its initialisation code (ELF constructors) before any check can be
//! made, and a constructor that aborts, crashes or hangs would take the host down with it: the
//! TUI, or `workbench plugins`. So a library the host did not build itself is first loaded by a
//! child (`workbench probe-plugin PATH`), which reports that loading ended; only then is it
//! loaded here. A child that dies by a signal, or does not finish within the time limit, is
//! reported with the cause and the library is not loaded. A library that loaded safely is
//! remembered by the hash of its content, its build id (a `probed-<id>` entry in the cache
//! folder, `datasets::generated_cache`), so it is probed once; the id itself is kept under the
//! file's identity (`build_id`), so an unchanged library is not read again either.

use super::build_id::{cache_dir, library_build_id};
use super::load::LoadError;
use datasets::generated_cache;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The line a probe child prints once loading ended (whatever the plugin then declared).
pub const LOADED_MARK: &str = "probe: loading ended";

/// How long loading a library may take (`WORKBENCH_PROBE_TIMEOUT_S` overrides it).
const TIMEOUT: Duration = Duration::from_secs(20);

/// Loads `path` in a child process first (see the module doc); `Ok` when the host may load it.
pub fn probe(path: &Path) -> Result<(), LoadError> {
    let Some(exe) = probe_executable() else {
        tracing::debug!("no workbench executable to probe {} with; loading it directly", path.display());
        return Ok(());
    };
    let Some(cache) = cache_dir() else {
        return run_child(&exe, path); // nowhere to remember it: no need for its id either
    };
    let Ok(id) = library_build_id(path) else {
        return Ok(()); // unreadable: the load itself reports why
    };
    let mark = format!("probed-{id}");
    if generated_cache::read(&cache, &mark).is_none() {
        run_child(&exe, path)?;
        generated_cache::write(&cache, &mark, path.display().to_string().as_bytes());
    }
    Ok(())
}

/// Runs `exe probe-plugin path` and interprets how it ended.
fn run_child(exe: &Path, path: &Path) -> Result<(), LoadError> {
    let failed = |reason: String| LoadError::Probe { path: path.to_path_buf(), reason };
    let mut child = Command::new(exe)
        .arg("probe-plugin")
        .arg(path)
        .env("WORKBENCH_NO_BUILD", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| failed(format!("cannot start {} to probe it: {e}", exe.display())))?;
    let limit = std::env::var("WORKBENCH_PROBE_TIMEOUT_S")
        .ok()
        .and_then(|s| s.parse().ok())
        .map(Duration::from_secs_f64)
        .unwrap_or(TIMEOUT);
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() > limit => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(failed(format!(
                    "loading it did not end within {:.0} s (its initialisation code hangs)",
                    limit.as_secs_f64()
                )));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => return Err(failed(format!("cannot wait for the probe: {e}"))),
        }
    };
    let mut out = String::new();
    if let Some(mut stdout) = child.stdout.take() {
        let _ = stdout.read_to_string(&mut out);
    }
    if out.lines().any(|l| l == LOADED_MARK) {
        return Ok(());
    }
    Err(failed(format!(
        "loading it ended the probing process with {} before loading was done: its initialisation code \
         crashed or exited",
        crate::train::exit::describe(&status)
    )))
}

/// The workbench executable that runs probes: `WORKBENCH_EXE`, this process if it is the
/// workbench, else a `workbench` beside it or one folder up (where cargo puts it beside a
/// test binary).
fn probe_executable() -> Option<PathBuf> {
    if let Some(exe) = std::env::var_os("WORKBENCH_EXE") {
        return Some(PathBuf::from(exe));
    }
    let current = std::env::current_exe().ok()?;
    let name = current.file_name()?.to_str()?;
    if name == "workbench" || name.starts_with("workbench ") {
        return Some(current);
    }
    current.ancestors().skip(1).take(2).map(|dir| dir.join("workbench")).find(|p| p.is_file())
}
