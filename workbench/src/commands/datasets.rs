//! `workbench datasets`: what is in the data cache; `workbench datasets fetch NAME`: download,
//! verify and unpack a real data set into it (the work is done by `datasets::fetch`).
//!
//! The cache folder is `--cache DIR`, else `WORKBENCH_DATA`, else `datasets/cache` in the
//! repository when the binary runs from this workspace's build output (git-ignored), else
//! `$XDG_CACHE_HOME/workbench/datasets` (`~/.cache/workbench/datasets`).

use crate::host;
use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use datasets::fetch::{self, Cached, Checksum, FetchSettings, Progress, State};
use datasets::images::{check_files, Cifar100Labels, FileDataset, MnistVariant};
use indicatif::{HumanBytes, ProgressBar, ProgressStyle};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Options of `workbench datasets`.
#[derive(Args, Debug)]
pub struct DatasetsArgs {
    /// Fetch a data set; without it, list the cache.
    #[command(subcommand)]
    pub action: Option<DatasetsAction>,
    /// Cache folder. Default: datasets/cache in the repository when run from the workspace,
    /// else $XDG_CACHE_HOME/workbench/datasets.
    #[arg(long, global = true, env = "WORKBENCH_DATA")]
    pub cache: Option<PathBuf>,
    /// Hash every kept download again and compare it with the record (else: sizes only).
    #[arg(long)]
    pub verify: bool,
    /// Machine-readable listing.
    #[arg(long)]
    pub json: bool,
}

/// What `workbench datasets` does besides listing.
#[derive(Subcommand, Debug)]
pub enum DatasetsAction {
    /// Download (resuming a broken download), verify the published checksum, and unpack.
    Fetch {
        /// The data set.
        #[arg(value_parser = clap::builder::PossibleValuesParser::new(fetch::NAMES))]
        name: String,
        /// Download each file from BASE_URL, then a slash and the file's name (a mirror; the
        /// published checksums still apply).
        #[arg(long, env = "WORKBENCH_DATA_MIRROR")]
        base_url: Option<String>,
        /// Download the file from this address (data sets of one file; required for sudoku-hard
        /// unless a mirror is given).
        #[arg(long)]
        url: Option<String>,
        /// Check the file against this SHA-256 instead of the published checksum (one-file data sets).
        #[arg(long, value_name = "HEX", conflicts_with = "md5")]
        sha256: Option<String>,
        /// Check the file against this MD5 instead of the published checksum (one-file data sets).
        #[arg(long, value_name = "HEX")]
        md5: Option<String>,
        /// How many times a broken download is resumed before giving up.
        #[arg(long, default_value_t = 5)]
        retries: u32,
    },
}

/// Runs `workbench datasets [fetch ...]`; returns the exit code.
pub fn run(args: DatasetsArgs) -> Result<i32> {
    let cache = args.cache.clone().unwrap_or_else(default_cache_dir);
    match args.action {
        None => list(&cache, args.verify, args.json),
        Some(DatasetsAction::Fetch { name, base_url, url, sha256, md5, retries }) => {
            let mut source = fetch::source(&name)?;
            if let Some(base) = base_url.as_deref().filter(|b| !b.is_empty()) {
                source = source.with_mirror(base);
            }
            if let Some(url) = &url {
                source = source.with_url(url)?;
            }
            let given = match (sha256, md5) {
                (Some(hex), _) => Some(Checksum::sha256(&hex).map_err(|e| anyhow::anyhow!("--sha256: {e}"))?),
                (_, Some(hex)) => Some(Checksum::md5(&hex).map_err(|e| anyhow::anyhow!("--md5: {e}"))?),
                _ => None,
            };
            if let Some(checksum) = given {
                source = source.with_checksum(checksum)?;
            }
            tracing::info!("{}: {}", source.name, source.title);
            tracing::info!("cache: {}", cache.display());
            let settings = FetchSettings { retries, retry_delay: Duration::from_secs(1), ..FetchSettings::default() };
            let fetched = fetch::fetch(&source, &cache, &settings, &mut Bar::default())?;
            check_layout(&name, &fetched.dir)?;
            if fetched.already_there {
                println!("{name} was already in the cache and still matches its checksums: {}", fetched.dir.display());
            } else {
                println!("{name} is ready in {}", fetched.dir.display());
            }
            for line in usage(&name, &fetched.dir) {
                println!("  {line}");
            }
            Ok(0)
        }
    }
}

/// The default cache folder (see the module documentation).
pub fn default_cache_dir() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf);
    if let (Some(root), Some(out)) = (root, host::build_output_dir()) {
        if out.starts_with(root.join("target")) {
            return root.join("datasets").join("cache");
        }
    }
    let xdg = std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from).filter(|p| p.is_absolute());
    let home_cache = std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache"));
    match xdg.or(home_cache) {
        Some(base) => base.join("workbench").join("datasets"),
        None => PathBuf::from("datasets-cache"),
    }
}

/// The image data sets' files are checked with the image loader's own header and size checks,
/// so a fetched folder is known to be one `task.data_dir` accepts.
fn check_layout(name: &str, dir: &Path) -> Result<()> {
    let dataset = match name {
        "cifar10" => FileDataset::Cifar10,
        "cifar100" => FileDataset::Cifar100(Cifar100Labels::Fine),
        "mnist" => FileDataset::Mnist(MnistVariant::Digits),
        "fashion-mnist" => FileDataset::Mnist(MnistVariant::Fashion),
        _ => return Ok(()),
    };
    check_files(dataset, dir)
        .with_context(|| format!("the unpacked files in {} are not what the image task reads", dir.display()))
}

/// How to use a fetched data set, as command lines.
fn usage(name: &str, dir: &Path) -> Vec<String> {
    match name {
        "cifar10" | "cifar100" | "mnist" | "fashion-mnist" => vec![format!(
            "use it with: workbench train --task image task.dataset={name} task.data_dir={}",
            dir.display()
        )],
        _ => {
            let csv = find_csv_files(dir);
            let find = |stem: &str| csv.iter().find(|p| p.file_stem().is_some_and(|s| s == stem));
            match (find("train"), find("test")) {
                (Some(train), Some(test)) => vec![format!(
                    "use it with: workbench train --task sudoku task.train_csv={} task.eval_csv={}",
                    train.display(),
                    test.display()
                )],
                _ if csv.is_empty() => vec!["no CSV file was found in it".to_string()],
                _ => std::iter::once("CSV files (use them as task.train_csv / task.eval_csv):".to_string())
                    .chain(csv.iter().map(|p| format!("  {}", p.display())))
                    .collect(),
            }
        }
    }
}

/// The `.csv` files in `dir` and one level of folders below it (the downloads excepted).
fn find_csv_files(dir: &Path) -> Vec<PathBuf> {
    let list = |dir: &Path| -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
        let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        paths.sort();
        paths
    };
    let is_csv = |p: &PathBuf| p.is_file() && p.extension().is_some_and(|e| e == "csv");
    let mut found: Vec<PathBuf> = list(dir).into_iter().filter(is_csv).collect();
    for sub in list(dir).into_iter().filter(|p| p.is_dir() && !p.ends_with(fetch::DOWNLOADS)) {
        found.extend(list(&sub).into_iter().filter(is_csv));
    }
    found
}

fn list(cache: &Path, verify: bool, as_json: bool) -> Result<i32> {
    let found = fetch::cached(cache, verify)?;
    let missing: Vec<&str> = fetch::NAMES.iter().copied().filter(|n| !found.iter().any(|c| c.name == *n)).collect();
    let modified = found.iter().any(|c| c.state == State::Modified);
    if as_json {
        let rows: Vec<_> = found
            .iter()
            .map(|c| {
                json!({
                    "name": c.name, "state": c.state.label(), "verified": c.state == State::Verified,
                    "bytes": c.bytes, "path": c.dir, "detail": c.detail,
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({"cache": cache, "datasets": rows, "not_cached": missing}))?
        );
    } else {
        println!("cache: {}", cache.display());
        if found.is_empty() {
            println!("no data set is cached yet");
        }
        let width = found.iter().map(|c| c.name.len()).max().unwrap_or(0);
        for Cached { name, dir, bytes, state, detail, .. } in &found {
            println!(
                "{name:<width$}  {:<10}  {:>10}  {}",
                state.label(),
                HumanBytes(*bytes).to_string(),
                dir.display()
            );
            println!("{:width$}  {detail}", "");
        }
        if !missing.is_empty() {
            println!("not cached: {} (`workbench datasets fetch NAME`)", missing.join(", "));
        }
    }
    if verify && modified {
        bail!("a cached data set changed since it was verified (see above)");
    }
    Ok(0)
}

/// A byte progress bar on standard error (drawn only on a terminal), with notes above it.
#[derive(Default)]
struct Bar {
    bar: Option<ProgressBar>,
}

impl Progress for Bar {
    fn start(&mut self, file: &str, total: Option<u64>, start: u64) {
        let bar = match total {
            Some(total) => ProgressBar::new(total).with_style(
                ProgressStyle::with_template("{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}")
                    .expect("a valid template")
                    .progress_chars("=> "),
            ),
            None => ProgressBar::new_spinner().with_style(
                ProgressStyle::with_template("{msg} {spinner} {bytes} {bytes_per_sec}").expect("a valid template"),
            ),
        };
        bar.set_message(file.to_string());
        bar.set_position(start);
        bar.reset_eta();
        self.bar = Some(bar);
    }

    fn advance(&mut self, bytes: u64) {
        if let Some(bar) = &self.bar {
            bar.inc(bytes);
        }
    }

    fn end(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }

    fn note(&mut self, text: &str) {
        match &self.bar {
            Some(bar) => bar.suspend(|| tracing::info!("{text}")),
            None => tracing::info!("{text}"),
        }
    }
}
