//! `runs export`: which runs, and where their files go. The formats themselves are in
//! [`crate::export`]. Everything that can be refused (unknown runs or sweep, an empty
//! selection, output that exists) is refused before anything is written, and a table file
//! appears whole or not at all (written aside, then renamed).

use crate::export::{self, tensorboard, Format, RunData};
use crate::run_config::ConfigNames;
use crate::store::{RunRecord, Store};
use anyhow::{anyhow, bail, Context, Result};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Which runs to export, before the filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Which {
    /// These runs, in this order.
    Runs(Vec<i64>),
    /// The runs of this sweep, in declared order.
    Sweep(i64),
    /// Every run.
    All,
}

/// What an export wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exported {
    pub runs: usize,
    /// Rows (CSV, JSON lines) or scalars (TensorBoard).
    pub values: usize,
    /// The table file, or the event files; empty when the table went to a stream.
    pub files: Vec<PathBuf>,
}

impl Exported {
    /// One line saying what was written.
    pub fn describe(&self, format: Format) -> String {
        let what = match format {
            Format::Tensorboard => "scalars",
            _ => "rows",
        };
        let whereto = match (format, self.files.as_slice()) {
            (_, []) => String::new(),
            (Format::Tensorboard, files) => {
                let dir = files[0].parent().and_then(Path::parent).unwrap_or(Path::new("."));
                format!(" to {} (`tensorboard --logdir {}`)", dir.display(), dir.display())
            }
            (_, [file, ..]) => format!(" to {}", file.display()),
        };
        let runs = crate::wording::count(self.runs, "run");
        format!("exported {runs}, {} {what}{whereto}", self.values)
    }
}

/// The runs `which` names, in its order; an unknown run or sweep is an error.
pub async fn named(store: &Store, which: &Which) -> Result<Vec<RunRecord>> {
    Ok(match which {
        Which::Runs(ids) => {
            let mut records = Vec::with_capacity(ids.len());
            for &id in ids {
                records.push(store.run(id).await?);
            }
            records
        }
        Which::Sweep(id) => {
            store.sweep(*id).await?;
            store.sweep_runs(*id).await?
        }
        Which::All => store.list_runs().await?,
    })
}

/// The runs `which` names that pass `filter`; an error when there are none, saying why.
pub async fn select(store: &Store, which: &Which, filter: Option<&str>) -> Result<Vec<RunRecord>> {
    if let Some(f) = filter {
        crate::ops::filter::check(f)?;
    }
    let records = named(store, which).await?;
    if records.is_empty() {
        match which {
            Which::Sweep(id) => bail!("sweep {id} has no runs"),
            _ => bail!("no runs: {} has none yet (start one with `workbench train`)", store.location()),
        }
    }
    let records = match filter {
        Some(f) => crate::ops::filter::select(records, f)?,
        None => records,
    };
    if records.is_empty() {
        bail!(
            "no run passes the filter `{}`: `workbench runs --filter '{}'` shows what it selects",
            filter.unwrap_or_default(),
            filter.unwrap_or_default()
        );
    }
    Ok(records)
}

async fn load(store: &Store, record: RunRecord) -> Result<RunData> {
    let id = record.id;
    let metrics = store.metrics(id).await.with_context(|| format!("reading the metrics of run {id}"))?;
    let diagnostics = store.diagnostics(id).await.with_context(|| format!("reading the diagnostics of run {id}"))?;
    Ok(RunData { record, metrics, diagnostics })
}

/// Writes the long table of `records` as CSV or JSON lines to `out`; returns the row count.
pub async fn write_table(store: &Store, records: Vec<RunRecord>, format: Format, out: &mut dyn Write) -> Result<usize> {
    let mut rows = 0;
    let names = ConfigNames::of(records.iter().map(|r| &r.config));
    match format {
        Format::Csv => {
            let keys = export::long::config_keys(&records, &names);
            let mut table = export::csv::CsvTable::new(&mut *out, names, keys)?;
            for r in records {
                rows += table.write_run(&load(store, r).await?)?;
            }
            table.finish()?;
        }
        Format::Jsonl => {
            for r in records {
                rows += export::jsonl::write_run(out, &load(store, r).await?, &names)?;
            }
        }
        Format::Tensorboard => bail!("TensorBoard files go to a directory: give it with --out DIR"),
    }
    out.flush()?;
    Ok(rows)
}

/// Refuses to replace `path` unless `force`.
fn check_new_file(path: &Path, force: bool) -> Result<()> {
    if path.is_dir() {
        bail!("{} is a directory: --out names the file to write (e.g. runs.csv)", path.display());
    }
    super::export::check_out_dir(path)?;
    if path.exists() && !force {
        bail!("{} exists: choose another --out, or pass --force to replace it", path.display());
    }
    Ok(())
}

/// Writes the long table of `records` to the file `path` (whole or not at all).
pub async fn write_table_file(
    store: &Store,
    records: Vec<RunRecord>,
    format: Format,
    path: &Path,
    force: bool,
) -> Result<Exported> {
    check_new_file(path, force)?;
    let name = path.file_name().ok_or_else(|| anyhow!("--out {} names no file", path.display()))?;
    let partial = path.with_file_name(format!(".{}.partial", name.to_string_lossy()));
    let runs = records.len();
    let written = async {
        let file = std::fs::File::create(&partial).with_context(|| format!("cannot create {}", partial.display()))?;
        let mut out = std::io::BufWriter::new(file);
        let rows = write_table(store, records, format, &mut out).await?;
        out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        std::fs::rename(&partial, path).with_context(|| format!("cannot write {}", path.display()))?;
        Ok::<_, anyhow::Error>(rows)
    }
    .await;
    match written {
        Ok(values) => Ok(Exported { runs, values, files: vec![path.to_path_buf()] }),
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            Err(e)
        }
    }
}

/// The event files already in `dir`.
fn event_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("events.out.tfevents.")))
        .collect()
}

/// Writes one TensorBoard run directory per record under `dir`. A run directory that already
/// holds event files is refused (TensorBoard would draw both copies) unless `force`, which
/// replaces them.
pub async fn write_tensorboard(store: &Store, records: Vec<RunRecord>, dir: &Path, force: bool) -> Result<Exported> {
    if dir.exists() && !dir.is_dir() {
        bail!("{} is a file: TensorBoard files go to a directory (--out DIR)", dir.display());
    }
    let runs = records.len();
    let mut stale = Vec::new();
    for r in &records {
        let old = event_files(&dir.join(tensorboard::run_dir_name(r)));
        if !old.is_empty() && !force {
            bail!(
                "{} already holds event files of run {}: choose another --out, or pass --force to replace them",
                dir.join(tensorboard::run_dir_name(r)).display(),
                r.id
            );
        }
        stale.extend(old);
    }
    for f in stale {
        std::fs::remove_file(&f).with_context(|| format!("cannot replace {}", f.display()))?;
    }
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (mut files, mut values) = (Vec::with_capacity(runs), 0);
    for r in records {
        let run_dir = dir.join(tensorboard::run_dir_name(&r));
        let (path, scalars) = tensorboard::write_run(&run_dir, &load(store, r).await?, now, store.host())?;
        files.push(path);
        values += scalars;
    }
    Ok(Exported { runs, values, files })
}
