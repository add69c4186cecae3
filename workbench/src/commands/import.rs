//! `workbench import FILE --layer L --task T [key=value ...]`, and `workbench eval N
//! [key=value ...]`: trained parameters stored as a finished, evaluated run.

use crate::commands::runs::RunPick;
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

/// `eval`'s words as the runs they name (ids, added to `pick`) and the settings (`key=value`).
pub fn runs_and_settings(args: Vec<String>, mut pick: RunPick) -> Result<(RunPick, Vec<String>)> {
    let (overrides, ids): (Vec<String>, Vec<String>) = args.into_iter().partition(|a| a.contains('='));
    if let Some(word) = ids.iter().find(|w| crate::plot::parse_run_ids(w).is_err()) {
        return Err(refused(anyhow::anyhow!(
            "`{word}` is neither a run id (12, or 12,13) nor a setting (key=value, e.g. eval_depths=4)"
        )));
    }
    if !ids.is_empty() {
        if pick.runs.is_some() || pick.sweep.is_some() {
            return Err(refused(anyhow::anyhow!("give the runs as ids or with --runs / --sweep, not both")));
        }
        pick.runs = Some(ids.join(","));
    }
    Ok((pick, overrides))
}

/// `workbench eval 12 [key=value ...]`, or of the runs a pick names: scores each run's
/// checkpoint with `overrides` as a new run, and prints what it scored (`--json`: one object
/// per line and run). Every run is checked before any is evaluated; of a pick, runs without a
/// checkpoint are left and named. An evaluation that fails is told and the others go on
/// (exit code 1 at the end).
pub async fn evaluate(
    store: &Store,
    host: &PluginHost,
    pick: &RunPick,
    overrides: &[String],
    json: bool,
) -> Result<i32> {
    use crate::ops::evaluate;
    if !pick.picks() {
        return Err(refused(anyhow::anyhow!(
            "name the runs to evaluate: an id (`workbench eval 12 eval_depths=4`), several (`12,13`), \
             or --sweep N, --filter EXPR, --last N"
        )));
    }
    let picked = pick.select(store).await?;
    let has_checkpoint =
        |r: &crate::store::RunRecord| crate::train::worker::existing_checkpoint(store, r.id).is_ok_and(|c| c.is_some());
    let (sources, left): (Vec<_>, Vec<_>) = picked.into_iter().partition(|r| pick.runs.is_some() || has_checkpoint(r));
    if !left.is_empty() {
        let ids: Vec<String> = left.iter().map(|r| format!("{} ({})", r.id, r.shown_status())).collect();
        tracing::info!("left without a checkpoint to evaluate: runs {}", ids.join(", "));
    }
    if sources.is_empty() {
        return Err(refused(anyhow::anyhow!("none of the runs picked has a checkpoint to evaluate")));
    }
    let checked: Vec<evaluate::Checked> =
        sources.iter().map(|source| evaluate::check(store, host, source, overrides)).collect::<Result<_>>()?;
    let (total, mut failed) = (checked.len(), Vec::new());
    for checked in checked {
        let source = checked.source;
        let evaluated = match evaluate::evaluate(store, host, checked, overrides).await {
            Ok(evaluated) => evaluated,
            Err(e) if total == 1 => return Err(e),
            Err(e) => {
                tracing::error!("run {source}: {e:#}");
                failed.push(source);
                continue;
            }
        };
        if json {
            println!("{}", serde_json::to_string(&evaluated)?);
            continue;
        }
        for line in &evaluated.lines {
            println!("[run {}] {line}", evaluated.run);
        }
        let (run, source) = (evaluated.run, evaluated.source);
        println!("run {run} finished (details: workbench runs show {run}; beside run {source}: workbench runs diff {source} {run})");
    }
    if failed.is_empty() {
        return Ok(crate::exit_code::SUCCESS);
    }
    let ids: Vec<String> = failed.iter().map(i64::to_string).collect();
    anyhow::bail!("{} of {total} evaluations failed, of runs {} (see above)", failed.len(), ids.join(", "))
}
