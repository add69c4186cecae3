//! `workbench db copy`: every run and sweep of one store into another; `workbench db backup`:
//! a consistent copy of a store in a new SQLite file.

use super::runs::RunPick;
use crate::store::{Store, StoreLocation};
use crate::wording::count;
use anyhow::{bail, Context, Result};
use std::collections::BTreeSet;

/// Copies `from` (the runs `which` picks, all by default) into `to` and prints what was copied.
pub async fn copy(
    from: &StoreLocation,
    to: &StoreLocation,
    which: &RunPick,
    as_user: Option<&str>,
    json: bool,
) -> Result<i32> {
    if from == to {
        bail!("--from and --to name the same store ({from}); give two different stores");
    }
    let source = Store::connect(from).await.with_context(|| format!("opening the source store {from}"))?;
    let only: Option<BTreeSet<i64>> = if which.picks() {
        let picked = which.select(&source).await.with_context(|| format!("picking runs of {from}"))?;
        Some(picked.iter().map(|r| r.id).collect())
    } else {
        None
    };
    let target = Store::connect(to).await.with_context(|| format!("opening the target store {to}"))?;
    let report = source
        .copy_into_as(&target, only.as_ref(), as_user)
        .await
        .with_context(|| format!("copying {from} into {to}"))?;
    source.close().await;
    target.close().await;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(0);
    }
    let rows: Vec<String> = report.rows.iter().map(|(table, n)| format!("{n} {table}")).collect();
    let rows = if rows.is_empty() { String::new() } else { format!(" ({})", rows.join(", ")) };
    println!(
        "copied {} and {} from {from} to {to}{rows}",
        count(report.runs as usize, "run"),
        count(report.sweeps as usize, "sweep")
    );
    if let (Some(user), true) = (as_user, report.runs > 0) {
        println!("the copied runs are recorded as stored by {user}");
    }
    if report.runs + report.sweeps > 0 {
        if report.kept_ids {
            println!("the copies keep their ids");
        } else {
            println!("the target already had some of these ids, so the copies were numbered anew:");
            for (old, new) in &report.renumbered {
                println!("  run {old} -> run {new}");
            }
        }
    }
    if !report.were_running.is_empty() {
        let ids: Vec<String> = report.were_running.iter().map(i64::to_string).collect();
        println!(
            "runs {} were running in {from}: their copies are marked interrupted (copy again once they end)",
            ids.join(", ")
        );
    }
    let (already, sweeps) = (report.already_there.len() as u64, report.sweeps_already_there.len() as u64);
    if already + sweeps > 0 {
        println!(
            "{} and {} were in {to} already (copied before) and were left as they are",
            count(already as usize, "run"),
            count(sweeps as usize, "sweep")
        );
    }
    for r in &report.refers_elsewhere {
        let (run, other) = (r.run, r.other);
        let names = match r.setting {
            "evaluates" => format!("evaluates the checkpoint of run {other} of {from}"),
            setting => format!("starts from run {other} of {from} ({setting}={other})"),
        };
        println!(
            "  run {run} {names}, which this copy did not bring: its setting names that run of {from}; \
             copy run {other} too to keep the two together"
        );
    }
    for changed in &report.changed_since {
        println!(
            "  run {} has changed since: {} in {from}, {} in {to} (run {}); to copy it again, delete \
             that copy (`workbench --db TARGET runs delete {} --yes`) and copy again",
            changed.source, changed.source_state, changed.target_state, changed.target, changed.target
        );
    }
    Ok(0)
}

/// Writes a consistent copy of the store at `db` to the new SQLite file `file`.
pub async fn backup(db: &StoreLocation, file: &std::path::Path) -> Result<i32> {
    let store = Store::connect(db).await.with_context(|| format!("opening {db}"))?;
    let result = store.backup(file).await.with_context(|| format!("backing {db} up to {}", file.display()));
    store.close().await;
    result?;
    let size = std::fs::metadata(file).map(|m| m.len()).unwrap_or(0);
    println!(
        "backed up {db} to {} ({:.1} MB); open it with --db {}",
        file.display(),
        size as f64 / 1e6,
        file.display()
    );
    Ok(0)
}
