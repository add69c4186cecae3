//! `workbench plot`: one image (PNG or SVG) with panels side by side comparing runs, or with
//! `--sphere` one run's token trajectories on the hypersphere.

use crate::exit_code::refused;
use crate::ops::export;
use crate::plot::{self as data, Panel, PANEL_NAMES};
use crate::store::Store;
use anyhow::{anyhow, Result};
use std::path::PathBuf;

/// Where a figure goes: the file `--out` names, or a PNG in the exports folder named after
/// what it shows.
pub struct Out {
    pub file: Option<PathBuf>,
    pub exports: PathBuf,
}

impl Out {
    /// The file to write: `--out` as given (checked to be `.png` or `.svg`), or
    /// `<exports>/<name>.png`, numbered when that exists.
    fn path(&self, name: &str) -> Result<PathBuf> {
        match &self.file {
            Some(file) => {
                crate::figure::format_of(file).map_err(refused)?;
                Ok(file.clone())
            }
            None => crate::ops::export_names::prepare(&self.exports.join(format!("{name}.png"))),
        }
    }
}

/// `workbench plot --runs 3,4,7 --panels ... [--out fig.png|fig.svg] [--size WxH] [--json]`.
/// With `json`, one object: `{"out": path, "runs": [ids], "panels": [names], "width", "height"}`.
pub async fn run(store: &Store, runs: &str, panels: &str, out: &Out, size: &str, json: bool) -> Result<i32> {
    let ids = data::parse_run_ids(runs).map_err(|e| refused(anyhow!(e)))?;
    let panels = data::parse_panels(panels).map_err(|e| refused(anyhow!(e)))?;
    let size = data::parse_size(size).map_err(|e| refused(anyhow!(e)))?;
    let out = out.path(&crate::ops::export_names::compare_name(&ids))?;
    let figure = export::plot(store, &ids, &panels, &out, size).await?;
    if json {
        let names: Vec<&str> = panels.iter().map(|&p| name_of(p)).collect();
        let report = serde_json::json!({
            "out": figure.path, "runs": ids, "panels": names, "width": size.0, "height": size.1,
        });
        println!("{report}");
    } else {
        println!("{}", figure.describe());
    }
    Ok(0)
}

fn name_of(panel: Panel) -> &'static str {
    PANEL_NAMES.into_iter().find(|name| Panel::from_name(name) == Some(panel)).unwrap_or("?")
}

/// `workbench plot --runs 3 --sphere [--step S] [--out fig.png|fig.svg] [--size WxH] [--json]`.
/// With `json`, one object: `{"out", "run", "step", "dim", "head", "explained", "width", "height"}`.
pub async fn sphere(store: &Store, runs: &str, step: Option<u64>, out: &Out, size: &str, json: bool) -> Result<i32> {
    let ids = data::parse_run_ids(runs).map_err(|e| refused(anyhow!(e)))?;
    let &[id] = ids.as_slice() else {
        return Err(refused(anyhow!("--sphere draws one run; give one id (e.g. --runs {})", ids[0])));
    };
    let size = data::parse_size(size).map_err(|e| refused(anyhow!(e)))?;
    let out = out.path(&crate::ops::export_names::sphere_name(id))?;
    export::check_out_dir(&out)?;
    let record = store.run(id).await?;
    let diagnostics = store.diagnostics(id).await?;
    let t = crate::sphere::trajectories(&diagnostics, step).map_err(|e| anyhow!("run {id}: {e}"))?;
    let label = data::run_legend(&[&record]).remove(0);
    crate::sphere_figure::write_image(&label, &t, &out, size)?;
    if json {
        let report = serde_json::json!({
            "out": out, "run": id, "step": t.step, "dim": t.dim, "head": t.head, "explained": t.explained,
            "width": size.0, "height": size.1,
        });
        println!("{report}");
    } else {
        println!("wrote {} (run {id}, step {}, {} tokens, {})", out.display(), t.step, t.tokens.len(), t.describe());
    }
    Ok(0)
}
