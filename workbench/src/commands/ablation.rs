//! `workbench ablation`: the ablation table of stored runs as Markdown, LaTeX or CSV, or one
//! metric of it as a heatmap over two keys (`--heatmap`).

use crate::ablation::Format;
use crate::exit_code::refused;
use crate::heatmap;
use crate::ops::export::{self, TableRuns};
use crate::plot::parse_run_ids;
use crate::store::{RunRecord, Store};
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

/// What `workbench ablation` was asked for besides the runs.
pub struct Options<'a> {
    /// Only these metrics (comma-separated).
    pub metrics: Option<&'a str>,
    pub format: &'a str,
    pub out: Option<&'a Path>,
    /// `ROWS,COLUMNS`: a heatmap of one metric instead of the table.
    pub heatmap: Option<&'a str>,
    /// The heatmap's metric.
    pub metric: Option<&'a str>,
    /// `KEY=VALUE` conditions on the runs' configurations.
    pub filters: &'a [String],
    /// The column the rows are sorted by, best first.
    pub sort: Option<&'a str>,
}

pub async fn run(store: &Store, selection: Selection<'_>, options: Options<'_>) -> Result<i32> {
    let format = Format::parse(options.format).map_err(refused)?;
    let axes = options.heatmap.map(heatmap::parse_axes).transpose().map_err(|e| refused(e.into()))?;
    if axes.is_some() && matches!(format, Format::Latex | Format::Csv) {
        return Err(refused(anyhow!("--heatmap prints a text grid or --json, or draws --out FILE.png|.svg")));
    }
    if let Some(out) = options.out {
        export::check_out_dir(out)?;
    }
    let selected = export::select(store, &selection.parse().map_err(refused)?).await?;
    if selected.unfinished > 0 {
        let total = selected.records.len() + selected.unfinished;
        tracing::info!("{} of the sweeps' {total} runs are not finished and are left out", selected.unfinished);
    }
    if selected.records.is_empty() {
        bail!("no runs to tabulate: name some with --runs 3,4,7 or --sweep N (`workbench runs` lists them)");
    }
    let records = export::keep_where(selected.records, options.filters).map_err(|e| refused(e.into()))?;
    if records.is_empty() {
        return Err(refused(anyhow!("no run matches every --where condition")));
    }
    if let Some((rows, columns)) = axes {
        return heatmap(store, &records, (&rows, &columns), &options, format == Format::Json).await;
    }
    let wanted: Option<Vec<&str>> =
        options.metrics.map(|f| f.split(',').map(str::trim).filter(|m| !m.is_empty()).collect());
    let sort = options.sort.map(|column| export::TableSort { column: column.to_string(), descending: None });
    let text = export::ablation(store, &records, wanted.as_deref(), sort.as_ref(), format).await.map_err(|e| {
        if e.is::<heatmap::Refusal>() {
            refused(e)
        } else {
            e
        }
    })?;
    match options.out {
        Some(path) => {
            export::write_text(path, &text)?;
            tracing::info!("wrote {}", path.display());
        }
        None => print!("{text}"),
    }
    Ok(0)
}

/// The heatmap: the grid as text or JSON on standard output (or in `--out`), or drawn into
/// `--out` when it ends in .png or .svg.
async fn heatmap(
    store: &Store,
    records: &[RunRecord],
    (rows, columns): (&str, &str),
    options: &Options<'_>,
    json: bool,
) -> Result<i32> {
    let grid = export::heatmap(store, records, rows, columns, options.metric).await.map_err(|e| {
        if e.is::<heatmap::Refusal>() {
            refused(e)
        } else {
            e
        }
    })?;
    let image = options.out.filter(|path| crate::figure::format_of(path).is_ok());
    if let Some(path) = image {
        crate::heatmap_figure::write_image(&grid, path)?;
        tracing::info!("wrote {}", path.display());
    }
    let text = if json {
        let mut value = grid.to_json();
        if let Some(path) = image {
            value["out"] = path.display().to_string().into();
        }
        format!("{value}\n")
    } else {
        grid.to_text()
    };
    match options.out.filter(|_| image.is_none()) {
        Some(path) => {
            export::write_text(path, &text)?;
            tracing::info!("wrote {}", path.display());
        }
        None => print!("{text}"),
    }
    Ok(0)
}
