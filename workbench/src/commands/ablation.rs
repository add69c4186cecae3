//! `workbench ablation`: the ablation table of stored runs as Markdown, LaTeX or CSV.

use crate::ablation::{Format, RunInput, Table};
use crate::plot::parse_run_ids;
use crate::store::{RunStatus, Store};
use anyhow::{anyhow, bail, Context, Result};
use std::path::Path;

/// Which runs go into the table.
pub enum Selection<'a> {
    /// Comma-separated run ids.
    Runs(&'a str),
    /// Comma-separated sweep ids: their runs in declared order.
    Sweeps(&'a str),
    /// Every finished run.
    Finished,
}

pub async fn run(
    store: &Store,
    selection: Selection<'_>,
    metrics_filter: Option<&str>,
    format: &str,
    out: Option<&Path>,
) -> Result<i32> {
    let format = Format::parse(format)?;
    let records = match selection {
        Selection::Runs(list) => {
            let ids = parse_run_ids(list).map_err(|e| anyhow!(e))?;
            let mut records = Vec::new();
            for id in ids {
                records.push(store.run(id).await.with_context(|| format!("run {id}"))?);
            }
            records
        }
        Selection::Sweeps(list) => {
            let ids = parse_run_ids(list).map_err(|e| anyhow!("--sweep: {e}"))?;
            let mut records = Vec::new();
            for id in ids {
                store.sweep(id).await.map_err(|_| anyhow!("no sweep {id} (`workbench sweeps` lists them)"))?;
                records.extend(store.sweep_runs(id).await?);
            }
            // A sweep's unfinished runs (queued, cancelled, failed) would count as seeds
            // without values: only finished runs make the table.
            let total = records.len();
            records.retain(|r| r.status == RunStatus::Finished);
            if records.len() < total {
                eprintln!("{} of the sweeps' {total} runs are not finished and are left out", total - records.len());
            }
            records
        }
        Selection::Finished => {
            store.list_runs().await?.into_iter().filter(|r| r.status == RunStatus::Finished).collect()
        }
    };
    if records.is_empty() {
        bail!("no runs to tabulate: name some with --runs 3,4,7 or --sweep N (`workbench runs` lists them)");
    }
    let mut metrics = Vec::new();
    for r in &records {
        metrics.push(store.metrics(r.id).await?);
    }
    let inputs: Vec<RunInput> =
        records.iter().zip(&metrics).map(|(record, metrics)| RunInput { record, metrics }).collect();
    let mut table = Table::build(&inputs);
    if let Some(filter) = metrics_filter {
        let wanted: Vec<&str> = filter.split(',').map(str::trim).filter(|m| !m.is_empty()).collect();
        table.keep_metrics(&wanted).map_err(|e| anyhow!(e))?;
    }
    let text = format.render(&table);
    match out {
        Some(path) => {
            std::fs::write(path, &text).with_context(|| format!("cannot write {}", path.display()))?;
            eprintln!("wrote {}", path.display());
        }
        None => print!("{text}"),
    }
    Ok(0)
}
