//! `workbench plugins`.

use super::text_table::TextTable;
use crate::host::PluginHost;
use anyhow::Result;
use serde_json::json;

pub fn list(host: &PluginHost, as_json: bool) -> Result<i32> {
    if as_json {
        let plugins: Vec<_> = host
            .plugins
            .iter()
            .map(|p| {
                let d = &p.declaration;
                json!({
                    "name": d.name, "kind": d.kind().as_str(), "version": d.version,
                    "description": d.description, "fingerprint": plugin_api::FINGERPRINT, "build": p.build,
                    "path": p.path,
                    "params": d.params.iter().map(|s| json!({
                        "name": s.name, "type": s.kind.type_name(), "default": s.default,
                        "allowed": s.kind.allowed(), "help": s.help,
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        let errors: Vec<_> = host.errors.iter().map(|e| json!({"path": e.path(), "error": e.to_string()})).collect();
        let workspace = crate::host::workspace().map(|w| w.root.clone());
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({"plugins": plugins, "errors": errors, "workspace": workspace}))?
        );
        return Ok(0);
    }
    match crate::host::workspace() {
        Some(workspace) => println!("{}\n", workspace.describe()),
        None => println!("no workbench workspace (plugins are loaded, never built)\n"),
    }
    if host.plugins.is_empty() {
        println!("no plugins found (build them with `cargo build --release --workspace`, or add a directory with --plugin-dir)");
    }
    for p in &host.plugins {
        let d = &p.declaration;
        println!("{} ({} {}) — {}", d.name, d.kind().as_str(), d.version, d.description);
        println!("  path:        {}", p.path.display());
        println!("  fingerprint: {}", plugin_api::FINGERPRINT);
        println!(
            "  build:       {}",
            p.build.as_deref().unwrap_or("unknown (its sources changed since the library was built)")
        );
        let mut params = TextTable::new(["parameter", "type", "default", "allowed", "meaning"]);
        for s in &d.params {
            params.row([
                s.name.to_string(),
                s.kind.type_name().to_string(),
                s.default.to_string(),
                s.kind.allowed(),
                s.help.to_string(),
            ]);
        }
        if !d.params.is_empty() {
            params.print_after("  ");
        }
        println!();
    }
    for e in &host.errors {
        println!("failed to load {}", e);
    }
    Ok(0)
}
