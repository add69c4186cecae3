//! `workbench plot`: one image (PNG or SVG) with panels side by side comparing runs.

use crate::ops::export;
use crate::plot as data;
use crate::store::Store;
use anyhow::{anyhow, Result};
use std::path::Path;

/// `workbench plot --runs 3,4,7 --panels ... --out fig.png|fig.svg [--size WxH]`.
pub async fn run(store: &Store, runs: &str, panels: &str, out: &Path, size: &str) -> Result<i32> {
    let ids = data::parse_run_ids(runs).map_err(|e| anyhow!(e))?;
    let panels = data::parse_panels(panels).map_err(|e| anyhow!(e))?;
    let size = data::parse_size(size).map_err(|e| anyhow!(e))?;
    println!("{}", export::plot(store, &ids, &panels, out, size).await?.describe());
    Ok(0)
}
