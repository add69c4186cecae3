//! `workbench db copy`: every run and sweep of one store into another.

use crate::store::{Store, StoreLocation};
use anyhow::{bail, Context, Result};

/// Copies `from` into `to` and prints what was copied.
pub async fn copy(from: &StoreLocation, to: &StoreLocation, json: bool) -> Result<i32> {
    if from == to {
        bail!("--from and --to name the same store ({from}); give two different stores");
    }
    let source = Store::connect(from).await.with_context(|| format!("opening the source store {from}"))?;
    let target = Store::connect(to).await.with_context(|| format!("opening the target store {to}"))?;
    let report = source.copy_into(&target).await.with_context(|| format!("copying {from} into {to}"))?;
    source.close().await;
    target.close().await;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(0);
    }
    let rows: Vec<String> = report.rows.iter().map(|(table, n)| format!("{n} {table}")).collect();
    println!("copied {} runs and {} sweeps from {from} to {to} ({})", report.runs, report.sweeps, rows.join(", "));
    if report.kept_ids {
        println!("run and sweep ids are the same in both stores");
    } else {
        println!("the target already had some of these ids, so the copies were numbered anew:");
        for (old, new) in &report.renumbered {
            println!("  run {old} -> run {new}");
        }
    }
    if !report.were_running.is_empty() {
        let ids: Vec<String> = report.were_running.iter().map(i64::to_string).collect();
        println!(
            "runs {} were running in {from}: their copies are marked interrupted (copy again once they end)",
            ids.join(", ")
        );
    }
    Ok(0)
}
