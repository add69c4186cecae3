//! `workbench ablation`: the ablation table of stored runs as Markdown, LaTeX or CSV.

use crate::ablation::{RunInput, Table};
use crate::plot::parse_run_ids;
use crate::store::{RunStatus, Store};
use anyhow::{anyhow, bail, Context, Result};
use std::path::Path;

/// Export format of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Markdown,
    Latex,
    Csv,
}

impl Format {
    /// Parses `md`, `markdown`, `latex`, `tex` or `csv`.
    pub fn parse(s: &str) -> Result<Format> {
        match s.to_ascii_lowercase().as_str() {
            "md" | "markdown" => Ok(Format::Markdown),
            "latex" | "tex" => Ok(Format::Latex),
            "csv" => Ok(Format::Csv),
            other => bail!("unknown format `{other}`: use md, latex or csv"),
        }
    }

    /// The table in this format.
    pub fn render(self, table: &Table) -> String {
        match self {
            Format::Markdown => table.to_markdown(),
            Format::Latex => table.to_latex(),
            Format::Csv => table.to_csv(),
        }
    }
}

pub async fn run(store: &Store, runs: Option<&str>, format: &str, out: Option<&Path>) -> Result<i32> {
    let format = Format::parse(format)?;
    let records = match runs {
        Some(list) => {
            let ids = parse_run_ids(list).map_err(|e| anyhow!(e))?;
            let mut records = Vec::new();
            for id in ids {
                records.push(store.run(id).await.with_context(|| format!("run {id}"))?);
            }
            records
        }
        None => store.list_runs().await?.into_iter().filter(|r| r.status == RunStatus::Finished).collect(),
    };
    if records.is_empty() {
        bail!("no runs to tabulate: name some with --runs 3,4,7 (`workbench runs` lists them)");
    }
    let mut metrics = Vec::new();
    for r in &records {
        metrics.push(store.metrics(r.id).await?);
    }
    let inputs: Vec<RunInput> =
        records.iter().zip(&metrics).map(|(record, metrics)| RunInput { record, metrics }).collect();
    let text = format.render(&Table::build(&inputs));
    match out {
        Some(path) => {
            std::fs::write(path, &text).with_context(|| format!("cannot write {}", path.display()))?;
            eprintln!("wrote {}", path.display());
        }
        None => print!("{text}"),
    }
    Ok(0)
}
