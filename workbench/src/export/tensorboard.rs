//! A run as a TensorBoard event file: each metric a scalar tagged `split/name` (`eval/loss`),
//! each diagnostic a scalar tagged `diagnostics/name/tK` (layer iteration K), at its training
//! step; the run's plugins and configuration as a Markdown table under the text tag `config`.

use super::tfevents::{write_event, Event};
use super::RunData;
use crate::run_config::flatten_config;
use crate::store::RunRecord;
use anyhow::{Context, Result};
use std::collections::BTreeMap;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// The tag of the configuration text.
pub const CONFIG_TAG: &str = "config";

/// The directory of one run under the export directory: `run-12-hyperset-sudoku`, so runs sort
/// by id and read well in TensorBoard's run list.
pub fn run_dir_name(r: &RunRecord) -> String {
    let clean =
        |s: &str| s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '-' }).collect::<String>();
    format!("run-{}-{}-{}", r.id, clean(&r.layer.name), clean(&r.task.name))
}

/// TensorBoard's file name: `events.out.tfevents.<unix seconds>.<host>`.
pub fn file_name(now_secs: u64, host: &str) -> String {
    format!("events.out.tfevents.{now_secs}.{host}")
}

/// When the run started (its creation, if it never did), unix seconds: the metrics' wall times
/// count from there.
fn start_of(r: &RunRecord) -> f64 {
    r.started_at.unwrap_or(r.created_at)
}

/// A Markdown cell: pipes would end the cell, new lines the row.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

/// The text shown under [`CONFIG_TAG`]: identity of the run, then every configuration key.
pub fn config_markdown(r: &RunRecord) -> String {
    let build = |p: &crate::store::PluginRef| {
        format!("{} {} build {}", p.name, p.version, p.build.as_deref().unwrap_or("unknown"))
    };
    let mut rows: Vec<(String, String)> = vec![
        ("run".into(), r.id.to_string()),
        ("status".into(), r.status.to_string()),
        ("layer".into(), build(&r.layer)),
        ("task".into(), build(&r.task)),
        ("seed".into(), r.seed.to_string()),
    ];
    if let Some(s) = r.sweep {
        rows.push(("sweep".into(), s.id.to_string()));
    }
    if !r.tags.is_empty() {
        rows.push(("tags".into(), r.tags.join(", ")));
    }
    if !r.notes.is_empty() {
        rows.push(("notes".into(), r.notes.clone()));
    }
    rows.extend(flatten_config(&r.config));
    let mut text = String::from("| key | value |\n|---|---|\n");
    for (k, v) in rows {
        text.push_str(&format!("| {} | {} |\n", cell(&k), cell(&v)));
    }
    text
}

/// Every event of a run's file, in order: the version, the configuration, the metrics, the
/// diagnostics.
pub fn events(data: &RunData) -> Vec<Event> {
    let r = &data.record;
    let start = start_of(r);
    let at = |wall: f64| if wall.is_finite() { start + wall } else { start };
    // Diagnostics carry no time of their own: they were measured with the metrics of their step.
    let mut step_wall: BTreeMap<u64, f64> = BTreeMap::new();
    for m in &data.metrics {
        if m.wall_time.is_finite() {
            let w = step_wall.entry(m.step).or_insert(m.wall_time);
            *w = w.max(m.wall_time);
        }
    }
    let mut out = vec![Event::file_version(start), Event::text(start, 0, CONFIG_TAG, &config_markdown(r))];
    for m in &data.metrics {
        out.push(Event::scalar(at(m.wall_time), step(m.step), &format!("{}/{}", m.split, m.name), m.value as f32));
    }
    for d in &data.diagnostics {
        let wall = step_wall.get(&d.step).copied().unwrap_or(f64::NAN);
        let tag = format!("diagnostics/{}/t{}", d.name, d.iteration);
        out.push(Event::scalar(at(wall), step(d.step), &tag, d.value as f32));
    }
    out
}

/// Steps are stored as u64 from i64 columns, so they fit.
fn step(s: u64) -> i64 {
    i64::try_from(s).unwrap_or(i64::MAX)
}

/// Writes run `data` into `dir` (created) as one new event file; returns its path and the
/// number of scalars.
pub fn write_run(dir: &Path, data: &RunData, now_secs: u64, host: &str) -> Result<(PathBuf, usize)> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let path = dir.join(file_name(now_secs, host));
    let file = std::fs::File::create(&path).with_context(|| format!("cannot create {}", path.display()))?;
    let mut out = BufWriter::new(file);
    let events = events(data);
    for e in &events {
        write_event(&mut out, e).with_context(|| format!("cannot write {}", path.display()))?;
    }
    out.flush().with_context(|| format!("cannot write {}", path.display()))?;
    Ok((path, events.len() - 2))
}
