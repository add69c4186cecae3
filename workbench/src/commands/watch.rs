//! `workbench watch`: hot reload without the terminal workbench. Prints each rebuild (cargo's
//! output line by line), each reload with its timing, and each failure; Ctrl-C stops it.
//! With `--json`, one JSON object per line and event, told apart by `event`: `plugin` (one
//! per plugin loaded at start), `watching`, `building`, `output`, `activated`,
//! `not_activated`, `build_failed`, `load_failed`, `note`.

use crate::host::{stamp_builds, PluginHost, WatchConfig, WatchEvent, Watcher};
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::io::Write;
use std::path::PathBuf;

/// Watches until interrupted; `host` holds the plugins loaded at start.
pub fn run(mut host: PluginHost, dirs: &[PathBuf], as_json: bool) -> Result<i32> {
    stamp_builds(&mut host);
    let config = WatchConfig::for_running_binary(dirs);
    if config.crates.is_empty() && config.library_dirs.is_empty() {
        bail!(
            "nothing to watch: no plugin crates (run the workbench from its repository, without WORKBENCH_NO_BUILD=1) \
             and no plugin directories (--plugin-dir, WORKBENCH_PLUGIN_PATH)"
        );
    }
    for plugin in &host.plugins {
        let build = plugin.build.as_deref().map_or("?", crate::host::build_id::short);
        if as_json {
            let d = &plugin.declaration;
            say(&json!({"event": "plugin", "name": d.name, "version": d.version, "build": plugin.build, "path": plugin.path})
                .to_string());
            continue;
        }
        say(&format!(
            "{} {} build {build} ({})",
            plugin.declaration.name,
            plugin.declaration.version,
            plugin.path.display()
        ));
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let _watcher = Watcher::start(config, move |event| {
        let _ = tx.send(event);
    })
    .context("cannot watch the plugin sources")?;
    for event in rx {
        if as_json {
            say(&to_json(&mut host, &event).to_string());
            continue;
        }
        match &event {
            WatchEvent::Loaded(reload) => match host.accept(reload) {
                Ok(activation) => say(&activation.line),
                Err(reason) => say(&format!("not activated: {reason}")),
            },
            WatchEvent::Output { line, .. } => say(line),
            other => {
                if let Some(text) = other.describe() {
                    say(&text);
                }
            }
        }
    }
    Ok(0)
}

/// The event as one JSON object; a loaded plugin is accepted first (as without `--json`).
fn to_json(host: &mut PluginHost, event: &WatchEvent) -> Value {
    match event {
        WatchEvent::Watching { crates, library_dirs } => {
            json!({"event": "watching", "crates": crates, "library_dirs": library_dirs})
        }
        WatchEvent::Building { package } => json!({"event": "building", "package": package}),
        WatchEvent::Output { package, line } => json!({"event": "output", "package": package, "line": line}),
        WatchEvent::Loaded(reload) => match host.accept(reload) {
            Ok(activation) => json!({
                "event": "activated", "name": activation.name, "version": reload.version, "build": reload.build,
                "source": reload.source, "since_build_s": activation.since_build.as_secs_f64(),
                "load_s": activation.load.as_secs_f64(), "message": activation.line,
            }),
            Err(reason) => json!({"event": "not_activated", "name": reload.name, "reason": reason.to_string()}),
        },
        WatchEvent::BuildFailed { package, summary } => {
            json!({"event": "build_failed", "package": package, "errors": summary})
        }
        WatchEvent::LoadFailed { source, reason } => {
            json!({"event": "load_failed", "source": source, "reason": reason})
        }
        WatchEvent::Note(text) => json!({"event": "note", "message": text}),
    }
}

/// One line on standard output, flushed at once (the output is often a pipe or a log file).
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}
