//! `workbench eval N [key=value ...]`: stored runs' checkpoints scored again with other
//! evaluation settings, each as a new run that the executor runs (a local worker, a Slurm job).

use crate::commands::runs::RunPick;
use crate::executor::Executor;
use crate::exit_code::refused;
use crate::host::PluginHost;
use crate::ops::evaluate::{self, Evaluated};
use crate::store::{RunRecord, Store};
use anyhow::{anyhow, Result};
use std::path::PathBuf;

/// `eval`'s words as the runs they name (ids, added to `pick`) and the settings (`key=value`).
pub fn runs_and_settings(args: Vec<String>, mut pick: RunPick) -> Result<(RunPick, Vec<String>)> {
    let (overrides, ids): (Vec<String>, Vec<String>) = args.into_iter().partition(|a| a.contains('='));
    if let Some(word) = ids.iter().find(|w| crate::plot::parse_run_ids(w).is_err()) {
        return Err(refused(anyhow!(
            "`{word}` is neither a run id (12, or 12,13) nor a setting (key=value, e.g. eval_depths=4)"
        )));
    }
    if !ids.is_empty() {
        if pick.runs.is_some() || pick.sweep.is_some() {
            return Err(refused(anyhow!("give the runs as ids or with --runs / --sweep, not both")));
        }
        pick.runs = Some(ids.join(","));
    }
    Ok((pick, overrides))
}

/// How `eval` runs its evaluations.
pub struct EvalArgs<'a> {
    pub dirs: &'a [PathBuf],
    pub executor: &'a Executor,
    pub jobs: usize,
    /// Only queue them; `workbench queue` or the TUI starts them.
    pub detach: bool,
    pub json: bool,
}

/// What `eval --json` prints besides the queue runner's events (README, "Machine-readable
/// output"): one JSON object per line, told apart by `event`.
#[derive(serde::Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
enum Report<'a> {
    /// The evaluations' runs are in the queue, each with the run it evaluates.
    Queued { runs: Vec<QueuedEvaluation> },
    /// An evaluation ended: what it scored.
    Evaluated(&'a Evaluated),
}

#[derive(serde::Serialize)]
struct QueuedEvaluation {
    run: i64,
    source: i64,
}

/// `workbench eval 12 [key=value ...]`, or of the runs a pick names: checks every run first
/// (of a pick, runs without a checkpoint are left and named), queues one evaluation run each,
/// has the executor run them as the queue does, and prints what each scored. The exit code
/// is the queue's: 0 when every evaluation finished.
pub async fn evaluate(
    store: &Store,
    host: &PluginHost,
    pick: &RunPick,
    overrides: &[String],
    args: EvalArgs<'_>,
) -> Result<i32> {
    if !pick.picks() {
        return Err(refused(anyhow!(
            "name the runs to evaluate: an id (`workbench eval 12 eval_depths=4`), several (`12,13`), \
             or --sweep N, --filter EXPR, --last N"
        )));
    }
    let picked = pick.select(store).await?;
    let has_checkpoint =
        |r: &RunRecord| crate::train::worker::existing_checkpoint(store, r.id).is_ok_and(|c| c.is_some());
    let (sources, left): (Vec<_>, Vec<_>) = picked.into_iter().partition(|r| pick.runs.is_some() || has_checkpoint(r));
    if !left.is_empty() {
        let ids: Vec<String> = left.iter().map(|r| format!("{} ({})", r.id, r.shown_status())).collect();
        tracing::info!("left without a checkpoint to evaluate: runs {}", ids.join(", "));
    }
    if sources.is_empty() {
        return Err(refused(anyhow!("none of the runs picked has a checkpoint to evaluate")));
    }
    args.executor.check(store).map_err(refused)?;
    let checked: Vec<evaluate::Checked> =
        sources.iter().map(|source| evaluate::check(store, host, source, overrides)).collect::<Result<_>>()?;
    let new_runs: Vec<_> = checked.iter().map(|c| c.run.clone()).collect();
    args.executor.check_runs(&new_runs).map_err(refused)?;
    let mut queued = Vec::new();
    for checked in &checked {
        queued.push(QueuedEvaluation { run: evaluate::queue(store, checked).await?, source: checked.source });
    }
    let ids: Vec<i64> = queued.iter().map(|q| q.run).collect();
    if args.json {
        print(&Report::Queued { runs: queued })?;
    } else {
        for q in &queued {
            tracing::info!("run {}: evaluates run {}'s checkpoint", q.run, q.source);
        }
    }
    if args.detach {
        if !args.json {
            tracing::info!("the queue lives in {}: `workbench queue` (or the TUI) starts them", store.location());
        }
        return Ok(crate::exit_code::SUCCESS);
    }
    let (dirs, jobs, executor, mine) = (args.dirs, args.jobs, args.executor, crate::store::Claims::mine(store));
    let code = super::sweep::run_until_done(store, dirs, jobs, executor, mine, Some(&ids), args.json).await?;
    for id in ids {
        let evaluated = evaluate::evaluated(store, id).await?;
        if args.json {
            print(&Report::Evaluated(&evaluated))?;
            continue;
        }
        let (run, source) = (evaluated.run, evaluated.source);
        if evaluated.status != "finished" {
            continue;
        }
        for line in &evaluated.lines {
            println!("[run {run}] {line}");
        }
        println!(
            "run {run}: run {source}'s checkpoint (step {}) scored; beside it: workbench runs diff {source} {run}",
            evaluated.step
        );
    }
    Ok(code)
}

fn print(report: &Report) -> Result<()> {
    println!("{}", serde_json::to_string(report)?);
    Ok(())
}
