//! `workbench ablation`: the ablation table of stored runs as Markdown, LaTeX or CSV.

use crate::ablation::Format;
use crate::exit_code::refused;
use crate::ops::export::{self, TableRuns};
use crate::plot::parse_run_ids;
use crate::store::Store;
use anyhow::{anyhow, bail, Result};
use std::path::Path;

/// Which runs go into the table, as given on the command line.
pub enum Selection<'a> {
    /// Comma-separated run ids.
    Runs(&'a str),
    /// Comma-separated sweep ids: their runs in declared order.
    Sweeps(&'a str),
    /// Every finished run.
    Finished,
}

impl Selection<'_> {
    fn parse(&self) -> Result<TableRuns> {
        Ok(match self {
            Selection::Runs(list) => TableRuns::Runs(parse_run_ids(list).map_err(|e| anyhow!(e))?),
            Selection::Sweeps(list) => TableRuns::Sweeps(parse_run_ids(list).map_err(|e| anyhow!("--sweep: {e}"))?),
            Selection::Finished => TableRuns::Finished,
        })
    }
}

pub async fn run(
    store: &Store,
    selection: Selection<'_>,
    metrics_filter: Option<&str>,
    format: &str,
    out: Option<&Path>,
) -> Result<i32> {
    let format = Format::parse(format).map_err(refused)?;
    let selected = export::select(store, &selection.parse().map_err(refused)?).await?;
    if selected.unfinished > 0 {
        let total = selected.records.len() + selected.unfinished;
        tracing::info!("{} of the sweeps' {total} runs are not finished and are left out", selected.unfinished);
    }
    if selected.records.is_empty() {
        bail!("no runs to tabulate: name some with --runs 3,4,7 or --sweep N (`workbench runs` lists them)");
    }
    let wanted: Option<Vec<&str>> =
        metrics_filter.map(|f| f.split(',').map(str::trim).filter(|m| !m.is_empty()).collect());
    let text = export::ablation(store, &selected.records, wanted.as_deref(), format).await?;
    match out {
        Some(path) => {
            export::write_text(path, &text)?;
            tracing::info!("wrote {}", path.display());
        }
        None => print!("{text}"),
    }
    Ok(0)
}
