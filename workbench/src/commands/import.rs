//! `workbench import FILE --layer L --task T [key=value ...]`: published parameters stored as
//! a finished, evaluated run.

use crate::exit_code::refused;
use crate::host::PluginHost;
use crate::store::Store;
use anyhow::Result;
use std::path::Path;

/// Imports `file` as a finished run and prints its id and evaluation.
pub async fn run(
    store: &Store,
    host: &PluginHost,
    file: &Path,
    layer: &str,
    task: &str,
    overrides: &[String],
    json: bool,
) -> Result<i32> {
    let imported = crate::ops::import::import(store, host, file, layer, task, overrides).await.map_err(refused)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&imported)?);
        return Ok(crate::exit_code::SUCCESS);
    }
    println!("run {}: {} parameters imported from {}", imported.run, imported.parameters, file.display());
    println!("options read off the checkpoint: {}", imported.options.join(" "));
    let eval: Vec<String> = imported.eval.iter().map(|(k, v)| format!("{k} {v:.6}")).collect();
    println!("eval: {}", eval.join(", "));
    Ok(crate::exit_code::SUCCESS)
}
