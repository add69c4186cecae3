//! Exports of stored runs named by their ids: figures (PNG, SVG), ablation tables
//! (Markdown, LaTeX, CSV) and heatmaps, written to files.

use crate::ablation::{configurations, Format, RunInput, Table};
use crate::figure::FigureRun;
use crate::heatmap::{self, Grid, Refusal};
use crate::plot::Panel;
use crate::store::{RunRecord, RunStatus, Store};
use crate::wording::count;
use anyhow::{anyhow, bail, Context, Result};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// A figure written to a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Figure {
    pub path: PathBuf,
    pub panels: usize,
    pub runs: usize,
}

impl Figure {
    /// One line saying what was written.
    pub fn describe(&self) -> String {
        let (panels, runs) = (count(self.panels, "panel"), count(self.runs, "run"));
        format!("wrote {} ({panels}, {runs})", self.path.display())
    }
}

/// Draws `panels` of runs `ids` into `out` (PNG or SVG by its extension) at `size` pixels.
pub async fn plot(store: &Store, ids: &[i64], panels: &[Panel], out: &Path, size: (u32, u32)) -> Result<Figure> {
    // Refuse a bad file name before reading anything.
    crate::figure::format_of(out)?;
    check_out_dir(out)?;
    let mut runs = Vec::with_capacity(ids.len());
    for &id in ids {
        runs.push(FigureRun {
            record: store.run(id).await?,
            metrics: store.metrics(id).await?,
            diagnostics: store.diagnostics(id).await?,
        });
    }
    crate::figure::write_image(&runs, panels, out, size)?;
    Ok(Figure { path: out.to_path_buf(), panels: panels.len(), runs: ids.len() })
}

/// Which runs an ablation table is made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TableRuns {
    /// These runs, in this order.
    Runs(Vec<i64>),
    /// The finished runs of these sweeps, in declared order.
    Sweeps(Vec<i64>),
    /// Every finished run.
    Finished,
}

/// The runs a table is made of, and how many of the named sweeps' runs were left out because
/// they have not finished.
#[derive(Debug, Clone)]
pub struct Selected {
    pub records: Vec<RunRecord>,
    pub unfinished: usize,
}

/// Reads the runs `which` names.
pub async fn select(store: &Store, which: &TableRuns) -> Result<Selected> {
    let mut records = Vec::new();
    let mut unfinished = 0;
    match which {
        TableRuns::Runs(ids) => {
            for &id in ids {
                records.push(store.run(id).await.with_context(|| format!("run {id}"))?);
            }
        }
        TableRuns::Sweeps(ids) => {
            for &id in ids {
                store.sweep(id).await?;
                records.extend(store.sweep_runs(id).await?);
            }
            // A sweep's unfinished runs (queued, cancelled, failed) would count as seeds
            // without values: only finished runs make the table.
            let total = records.len();
            records.retain(|r| r.status == RunStatus::Finished);
            unfinished = total - records.len();
        }
        TableRuns::Finished => {
            records = store.list_runs().await?.into_iter().filter(|r| r.status == RunStatus::Finished).collect();
        }
    }
    Ok(Selected { records, unfinished })
}

/// The ablation table of `records` in `format`, keeping only the `metrics` named (all when
/// `None`).
pub async fn ablation(
    store: &Store,
    records: &[RunRecord],
    metrics: Option<&[&str]>,
    sort: Option<&TableSort>,
    format: Format,
) -> Result<String> {
    let mut rows = Vec::with_capacity(records.len());
    for r in records {
        rows.push(store.metrics(r.id).await?);
    }
    let inputs: Vec<RunInput> =
        records.iter().zip(&rows).map(|(record, metrics)| RunInput { record, metrics }).collect();
    let mut table = Table::build(&inputs);
    if let Some(wanted) = metrics {
        table.keep_metrics(wanted).map_err(|e| anyhow!(e))?;
    }
    if let Some(sort) = sort {
        sort.apply(&mut table)?;
    }
    Ok(format.render(&table))
}

/// The order of an ablation table's rows: by one column, named as `ablation --sort` takes it
/// (a column title such as `params` or `s/step`, a metric name for its final value,
/// `best:NAME`), best first unless the direction is given (the TUI's `S`).
#[derive(Debug, Clone, PartialEq)]
pub struct TableSort {
    pub column: String,
    /// `None`: best first (largest first where larger is better, else smallest first).
    pub descending: Option<bool>,
}

impl TableSort {
    /// Sorts `table`'s rows; an unknown column is refused with the ones there are.
    pub fn apply(&self, table: &mut Table) -> Result<(), Refusal> {
        let c = heatmap::resolve_metric(table, Some(&self.column), None).map_err(|e| match e {
            Refusal::Input(message) => Refusal::Input(format!(
                "--sort: {message}; or a column: {}",
                table.columns.iter().map(|c| c.title()).collect::<Vec<_>>().join(", ")
            )),
            other => other,
        })?;
        let descending = self.descending.unwrap_or(table.columns[c].higher_is_better == Some(true));
        table.sort_by_column(c, descending);
        Ok(())
    }
}

/// The runs whose configuration has every `KEY=VALUE` of `filters` (`layer=NAME` names the
/// layer plugin; numbers match whatever way they are written: `1e-3` is `0.001`).
pub fn keep_where(records: Vec<RunRecord>, filters: &[String]) -> Result<Vec<RunRecord>, Refusal> {
    if filters.is_empty() {
        return Ok(records);
    }
    let mut configs = configurations(&records);
    for (c, r) in configs.iter_mut().zip(&records) {
        c.entry(heatmap::LAYER.into()).or_insert_with(|| r.layer.name.clone());
    }
    let known: BTreeSet<String> = configs.iter().flat_map(|c| c.keys().cloned()).collect();
    let mut keep = vec![true; records.len()];
    for filter in filters {
        let Some((key, value)) = filter.split_once('=') else {
            return Err(Refusal::Input(format!("--where wants KEY=VALUE, not `{filter}`")));
        };
        let key = heatmap::resolve_key(key.trim(), &known)?;
        let value = value.trim();
        for (k, c) in keep.iter_mut().zip(&configs) {
            *k &= c.get(&key).is_some_and(|v| same_value(v, value));
        }
    }
    Ok(records.into_iter().zip(keep).filter_map(|(r, k)| k.then_some(r)).collect())
}

fn same_value(stored: &str, wanted: &str) -> bool {
    match (stored.parse::<f64>(), wanted.parse::<f64>()) {
        (Ok(a), Ok(b)) => a == b,
        _ => stored == wanted,
    }
}

/// The heatmap of `records` over `rows` × `columns` for `metric` (default: the headline
/// metric). A refusal of the keys or the metric is a [`Refusal`] in the error.
pub async fn heatmap(
    store: &Store,
    records: &[RunRecord],
    rows: &str,
    columns: &str,
    metric: Option<&str>,
) -> Result<Grid> {
    let mut metrics = Vec::with_capacity(records.len());
    for r in records {
        metrics.push(store.metrics(r.id).await?);
    }
    let inputs: Vec<RunInput> =
        records.iter().zip(&metrics).map(|(record, metrics)| RunInput { record, metrics }).collect();
    Ok(Grid::build(&inputs, rows, columns, metric)?)
}

/// Writes an exported text (a table) to `path`.
/// Refuses an `--out` file whose folder does not exist, before anything is read or drawn (the
/// drawing library would say only "No such file or directory", after the work).
pub fn check_out_dir(path: &Path) -> Result<()> {
    match path.parent().filter(|p| !p.as_os_str().is_empty() && !p.is_dir()) {
        Some(parent) if parent.exists() => bail!("{} is a file, not a folder: choose another --out", parent.display()),
        Some(parent) => bail!("{} does not exist: create it, or choose another --out", parent.display()),
        None => Ok(()),
    }
}

pub fn write_text(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}
