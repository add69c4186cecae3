//! The one way the host builds plugin crates, and the one rule for when to.
//!
//! [`build_crates`] runs `cargo build --profile P -p workbench -p A -p B --keep-going` in the
//! workspace, passes every line of cargo's output (compiler messages included) to a callback
//! as it comes, and returns the library of each crate that built and the compiler errors of
//! each that did not. Startup (`autobuild`), hot reload ([`super::watch`]) and
//! `workbench plugin new` all build through it.
//!
//! - `-p workbench` is in every selection where the workbench is a member: cargo resolves
//!   features for the packages selected, so a plugin built alone would get candle and the
//!   other shared dependencies with another feature set than `cargo build --workspace` and
//!   `cargo run` (which builds the default member, the workbench) and rebuild them all; with
//!   the workbench selected too, the resolution is the workspace's and only the plugin
//!   compiles (the workbench, built already, is fresh).
//! - `--keep-going`: one broken plugin does not stop the others.
//!
//! Staleness is decided by content: a crate needs building when the build id of its sources
//! ([`super::build_id`]) differs from the one recorded when the host last built its library
//! (a stamp beside the library, [`recorded_build`]). File times are not used: a checkout,
//! a copy or a `touch` changes them without changing the code, and the build id is what
//! runs record anyway.

use super::workspace::PluginCrate;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::Mutex;

/// Most lines of compiler errors kept in a failure summary.
const SUMMARY_LINES: usize = 12;

/// How plugins are built: in which workspace, with which profile and features.
#[derive(Debug, Clone)]
pub struct BuildSettings {
    /// Workspace root, where cargo runs.
    pub root: PathBuf,
    /// cargo profile (`dev`, `release`, ...): the running binary's.
    pub profile: String,
    /// More arguments for `cargo build` (features).
    pub cargo_args: Vec<String>,
    /// Environment variables for cargo (e.g. `CARGO_TARGET_DIR`).
    pub cargo_env: Vec<(String, String)>,
}

/// What one `cargo build` made of the crates asked for.
#[derive(Debug, Default)]
pub struct BuildReport {
    /// Package -> the library cargo wrote.
    pub built: BTreeMap<String, PathBuf>,
    /// Package -> a summary of its compiler errors.
    pub failed: BTreeMap<String, String>,
}

/// `--features workbench/cuda` (or `plugin-api/cuda` without the workbench in the build) when
/// the host was built with CUDA: plugins must match.
pub fn feature_args(with_workbench: bool) -> Vec<String> {
    match (cfg!(feature = "cuda"), with_workbench) {
        (false, _) => Vec::new(),
        (true, true) => vec!["--features".into(), "workbench/cuda".into()],
        (true, false) => vec!["--features".into(), "plugin-api/cuda".into()],
    }
}

/// Whether the workspace at `root` has the workbench among its members.
pub fn has_workbench_member(root: &Path) -> bool {
    let members = std::fs::read_to_string(root.join("Cargo.toml"))
        .ok()
        .and_then(|t| t.parse::<toml::Table>().ok())
        .and_then(|m| m.get("workspace")?.get("members")?.as_array().cloned())
        .unwrap_or_default();
    members.iter().any(|m| m.as_str().is_some_and(|s| s.trim_end_matches('/') == "workbench"))
}

/// The crate as cargo's package id spec, by path: a plugin may share its name with a registry
/// package of the dependency tree (`ring`), which makes `-p ring` ambiguous.
fn package_spec(krate: &PluginCrate) -> String {
    let dir = krate.dir.canonicalize().unwrap_or_else(|_| krate.dir.clone());
    format!("path+file://{}#{}", dir.display(), krate.package)
}

/// One line of cargo's output, from either stream.
enum Output {
    Stderr(String),
    Json(serde_json::Value),
}

/// Builds `crates` (see the module doc). `running` receives cargo's process id while it runs
/// (so a watcher can stop it). `Err` only when cargo could not be run at all.
pub fn build_crates(
    settings: &BuildSettings,
    crates: &[PluginCrate],
    on_line: &mut dyn FnMut(String),
    running: Option<&Mutex<Option<u32>>>,
) -> Result<BuildReport, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut command = Command::new(&cargo);
    // `cargo run` describes the workbench package to it in the environment; a build script of
    // the shared dependencies (ring's) reruns when those variables change, so passing them on
    // would rebuild ring, rustls, ureq, datasets and the workbench here and again at the next
    // `cargo run` (a minute each time on two cores).
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(describes_the_running_package) {
            command.env_remove(name);
        }
    }
    command.current_dir(&settings.root).args(["build", "--profile", &settings.profile, "--keep-going"]);
    if has_workbench_member(&settings.root) {
        command.args(["-p", "workbench"]);
    }
    for krate in crates {
        command.args(["-p", &package_spec(krate)]);
    }
    command
        .args(["--message-format=json", "--color", "never"])
        .args(&settings.cargo_args)
        .envs(settings.cargo_env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().map_err(|e| format!("cannot run `{cargo}`: {e}"))?;
    if let Some(slot) = running {
        *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(child.id());
    }
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().expect("piped");
    let stderr = child.stderr.take().expect("piped");
    let tx_json = tx.clone();
    let readers = [
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Ok(value) = serde_json::from_str(&line) {
                    let _ = tx_json.send(Output::Json(value));
                }
            }
        }),
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(Output::Stderr(line));
            }
        }),
    ];
    let mut collected = Collected::default();
    for output in rx {
        for line in collected.take(output, crates) {
            on_line(line);
        }
    }
    for reader in readers {
        let _ = reader.join();
    }
    let status = child.wait();
    if let Some(slot) = running {
        *slot.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
    let status = status.map_err(|e| format!("cargo did not finish: {e}"))?.to_string();
    Ok(collected.report(crates, &status))
}

/// What cargo said, sorted by crate.
#[derive(Default)]
struct Collected {
    /// Every line, in order (for failures that belong to no crate: a bad manifest...).
    lines: Vec<String>,
    /// Package -> its compiler messages' lines.
    messages: BTreeMap<String, Vec<String>>,
    libraries: BTreeMap<String, PathBuf>,
}

impl Collected {
    /// Records one output; returns the lines to show.
    fn take(&mut self, output: Output, crates: &[PluginCrate]) -> Vec<String> {
        let of_crate = |message: &serde_json::Value| {
            let manifest = Path::new(message["manifest_path"].as_str()?);
            crates.iter().find(|c| manifest.parent() == Some(c.dir.as_path())).cloned()
        };
        match output {
            Output::Stderr(line) => {
                self.lines.push(line.clone());
                vec![line]
            }
            Output::Json(message) if message["reason"] == "compiler-message" => {
                let rendered = message["message"]["rendered"].as_str().unwrap_or_default();
                let lines: Vec<String> = rendered.lines().map(str::to_string).collect();
                if let Some(krate) = of_crate(&message) {
                    self.messages.entry(krate.package).or_default().extend(lines.iter().cloned());
                }
                self.lines.extend(lines.iter().cloned());
                lines
            }
            Output::Json(message) if message["reason"] == "compiler-artifact" => {
                if let Some(krate) = of_crate(&message) {
                    let wanted = krate.library_file_name();
                    let files = message["filenames"].as_array().cloned().unwrap_or_default();
                    let library = files
                        .iter()
                        .filter_map(|f| f.as_str().map(PathBuf::from))
                        .find(|f| f.file_name().is_some_and(|n| n.to_string_lossy() == wanted));
                    if let Some(library) = library {
                        self.libraries.insert(krate.package, library);
                    }
                }
                Vec::new()
            }
            Output::Json(_) => Vec::new(),
        }
    }

    fn report(self, crates: &[PluginCrate], status: &str) -> BuildReport {
        let mut report = BuildReport::default();
        for krate in crates {
            match self.libraries.get(&krate.package) {
                Some(library) => {
                    report.built.insert(krate.package.clone(), library.clone());
                }
                None => {
                    let own = self.messages.get(&krate.package).filter(|m| m.iter().any(|l| l.starts_with("error")));
                    let summary = match own {
                        Some(lines) => error_summary(lines, status),
                        None if status.contains("exit status: 0") => format!(
                            "cargo built {} but reported no {}: is it a `cdylib` crate?",
                            krate.package,
                            krate.library_file_name()
                        ),
                        None => error_summary(&self.lines, status),
                    };
                    report.failed.insert(krate.package.clone(), summary);
                }
            }
        }
        report
    }
}

/// The compiler's error lines (with their `-->` locations, and the short `= note:` lines that
/// say why a link failed), at most `SUMMARY_LINES`; the last lines of output when there are
/// none. A full disk is named first, with what to do: it fails a build in ways that look like
/// anything else (a link, a write of some dependency's output).
pub fn error_summary(lines: &[String], status: &str) -> String {
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if line.starts_with("error") && !line.starts_with("error: could not compile") {
            out.push(line.trim().to_string());
            if let Some(next) = lines.get(i + 1).filter(|n| n.trim_start().starts_with("-->")) {
                out.push(format!("  {}", next.trim()));
            }
            out.extend(link_notes(&lines[i + 1..]).map(|note| format!("  {note}")));
        }
    }
    if out.is_empty() {
        let tail: Vec<&String> = lines.iter().rev().filter(|l| !l.trim().is_empty()).take(5).collect();
        out = tail.into_iter().rev().cloned().collect();
        out.push(format!("cargo {status}"));
    }
    if lines.iter().any(|l| l.contains("No space left on device") || l.contains("os error 28")) {
        out.insert(0, DISK_FULL.to_string());
    }
    out.truncate(SUMMARY_LINES);
    out.join("\n")
}

/// What a build that ran out of disk space is reported with.
const DISK_FULL: &str =
    "the disk is full (No space left on device): free some space (`cargo clean` removes old builds), then start again";

/// The `= note:` lines of one message (up to the next line that starts a message) that are
/// short enough to be a reason; the linker's command line, thousands of characters, is not.
fn link_notes(rest: &[String]) -> impl Iterator<Item = &str> {
    rest.iter()
        .take_while(|l| !l.starts_with("error") && !l.starts_with("warning"))
        .map(|l| l.trim())
        .filter_map(|l| l.strip_prefix("= note:").map(str::trim))
        .filter(|note| note.len() <= 200 && !note.starts_with("some arguments are omitted"))
}

/// Where the build id of the sources a library was built from is recorded:
/// `<dir>/.plugin-builds/<file>.id`, beside the library.
fn stamp_path(library: &Path) -> Option<PathBuf> {
    let name = library.file_name()?.to_string_lossy().into_owned();
    Some(library.parent()?.join(".plugin-builds").join(format!("{name}.id")))
}

/// Records that `library` was built from sources with build id `id`.
pub fn record_build(library: &Path, id: &str) {
    let Some(stamp) = stamp_path(library) else { return };
    let written = stamp.parent().map_or(Ok(()), std::fs::create_dir_all).and_then(|_| std::fs::write(&stamp, id));
    if let Err(e) = written {
        tracing::warn!("cannot record the build of {}: {e}", library.display());
    }
}

/// The build id recorded for `library` by the host's last build of it, if any.
pub fn recorded_build(library: &Path) -> Option<String> {
    let text = std::fs::read_to_string(stamp_path(library)?).ok()?;
    Some(text.trim().to_string()).filter(|t| !t.is_empty())
}

/// Variables cargo sets for the package it runs (`cargo run`), which a build of other
/// packages must not inherit. `OUT_DIR` is among them because the workbench has a build
/// script, and ring's build script reruns when it changes.
pub fn describes_the_running_package(name: &str) -> bool {
    ["CARGO_PKG_", "CARGO_MANIFEST_", "CARGO_CRATE_", "CARGO_BIN_"].iter().any(|p| name.starts_with(p))
        || name == "CARGO_PRIMARY_PACKAGE"
        || name == "OUT_DIR"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variables_cargo_run_sets_for_the_workbench_are_not_passed_to_plugin_builds() {
        for name in [
            "CARGO_PKG_NAME",
            "CARGO_PKG_VERSION",
            "CARGO_MANIFEST_DIR",
            "CARGO_MANIFEST_PATH",
            "CARGO_PRIMARY_PACKAGE",
            "OUT_DIR",
        ] {
            assert!(describes_the_running_package(name), "{name}");
        }
        for name in ["CARGO", "CARGO_HOME", "CARGO_TARGET_DIR", "CARGO_BUILD_JOBS", "CARGO_PROFILE_RELEASE_DEBUG"] {
            assert!(!describes_the_running_package(name), "{name}");
        }
    }

    /// Lines of cargo's output.
    fn owned(lines: &[&str]) -> Vec<String> {
        lines.iter().map(|l| l.to_string()).collect()
    }

    #[test]
    fn build_failures_are_summarised_by_their_errors_and_locations() {
        let lines = owned(&[
            "   Compiling probe v0.1.0",
            "error[E0425]: cannot find value `x` in this scope",
            "  --> plugins/probe/src/lib.rs:3:5",
            "   |",
            "3  |     x",
            "error: could not compile `probe` (lib) due to 1 previous error",
        ]);
        let summary = error_summary(&lines, "exit status: 101");
        assert_eq!(summary, "error[E0425]: cannot find value `x` in this scope\n  --> plugins/probe/src/lib.rs:3:5");
        let other = error_summary(&["error: could not find `Cargo.toml`".to_string()], "exit status: 101");
        assert!(other.contains("could not find"), "{other}");
        let silent = error_summary(&["warning: something".to_string()], "exit status: 1");
        assert!(silent.ends_with("cargo exit status: 1"), "{silent}");
    }

    #[test]
    fn a_failed_link_is_summarised_with_its_reason_and_a_full_disk_with_the_fix() {
        let command = format!("= note: LC_ALL=\"C\" \"cc\" {}", "\"-Wl,--as-needed\" ".repeat(100));
        let lines = owned(&[
            "error: linking with `cc` failed: exit status: 1",
            "  |",
            &format!("  {command}"),
            "  = note: some arguments are omitted. use `--verbose` to show all linker arguments",
            "  = note: /usr/bin/ld: final link failed: No space left on device",
            "error: could not compile `probe` (lib) due to 1 previous error",
        ]);
        let summary = error_summary(&lines, "exit status: 101");
        let summary: Vec<&str> = summary.lines().collect();
        assert_eq!(
            summary,
            [
                DISK_FULL,
                "error: linking with `cc` failed: exit status: 1",
                "  /usr/bin/ld: final link failed: No space left on device"
            ]
        );
        let write = owned(&["warning: unused import", "could not write output: No space left on device (os error 28)"]);
        let summary = error_summary(&write, "exit status: 101");
        assert!(summary.starts_with(DISK_FULL) && summary.contains("could not write output"), "{summary}");
        assert!(summary.ends_with("cargo exit status: 101"), "{summary}");
    }

    #[test]
    fn a_recorded_build_is_read_back_beside_its_library() {
        let dir = tempfile::Builder::new().prefix("wb-stamp-").tempdir().unwrap();
        let library = dir.path().join("libprobe.so");
        assert_eq!(recorded_build(&library), None);
        record_build(&library, "1a2b3c4d5e6f7a8b");
        assert_eq!(recorded_build(&library).as_deref(), Some("1a2b3c4d5e6f7a8b"));
    }
}
