//! `workbench watch`: hot reload without the terminal workbench. Prints each rebuild (cargo's
//! output line by line), each reload with its timing, and each failure; Ctrl-C stops it.

use crate::host::{stamp_builds, PluginHost, WatchConfig, WatchEvent, Watcher};
use anyhow::{bail, Context, Result};
use std::io::Write;
use std::path::PathBuf;

/// Watches until interrupted; `host` holds the plugins loaded at start.
pub fn run(mut host: PluginHost, dirs: &[PathBuf]) -> Result<i32> {
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

/// One line on standard output, flushed at once (the output is often a pipe or a log file).
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}
