//! Heatmaps: one column of an ablation table (a metric, final or best, as mean ± std over
//! seeds) laid out over two configuration keys, rows by the first key's values and columns
//! by the second's, as in the layers × iterations trade-off of the Hyper-SET paper.
//!
//! A cell holds exactly one configuration of the ablation table: when the runs differ in a
//! key that is on neither axis, the grid is refused instead of averaging different
//! configurations into one cell.

use crate::ablation::{configurations, digits, Column, ColumnKind, RunInput, Stat, Table};
use crate::run_config::closest_key;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

/// The pseudo key of the layer plugin, an axis like any configuration key.
pub const LAYER: &str = "layer";
/// What an empty cell shows.
pub const EMPTY: &str = "–";

/// One cell: the statistics of the metric over the seeds of one configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    pub stat: Stat,
    pub runs: Vec<i64>,
}

/// A metric over two keys.
#[derive(Debug, Clone, PartialEq)]
pub struct Grid {
    pub row_key: String,
    pub col_key: String,
    /// The column title, e.g. `final cell_acc`.
    pub metric: String,
    pub higher_is_better: Option<bool>,
    /// Decimals the values are written with (as in the ablation table).
    pub digits: usize,
    pub rows: Vec<String>,
    pub columns: Vec<String>,
    /// `cells[row][column]`; `None` where no run has a value.
    pub cells: Vec<Vec<Option<Cell>>>,
}

/// Why a grid cannot be drawn.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// The runs differ in keys on neither axis: each with its values.
    Mixed(Vec<(String, Vec<String>)>),
    /// Anything else (unknown key or metric, a key given twice, too few values).
    Input(String),
}

impl Refusal {
    /// The message, with `narrow` saying how to keep runs that share a key's value.
    pub fn describe(&self, narrow: &str) -> String {
        match self {
            Refusal::Input(message) => message.clone(),
            Refusal::Mixed(keys) => {
                let shown = |v: &String| if v.is_empty() { "\"\"".to_string() } else { v.clone() };
                let list: Vec<String> = keys
                    .iter()
                    .map(|(k, v)| format!("`{k}` ({})", v.iter().map(shown).collect::<Vec<_>>().join(", ")))
                    .collect();
                format!(
                    "the runs also differ in {}: a cell would average different configurations; {narrow}, \
                     or put the key on an axis",
                    list.join(", ")
                )
            }
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let example = match self {
            Refusal::Mixed(keys) => keys.iter().find_map(|(k, v)| Some(format!(" (e.g. --where {k}={})", v.first()?))),
            Refusal::Input(_) => None,
        };
        let narrow = format!("keep runs that share one value of each{}", example.unwrap_or_default());
        f.write_str(&self.describe(&narrow))
    }
}

impl std::error::Error for Refusal {}

fn input(message: String) -> Refusal {
    Refusal::Input(message)
}

/// `rows,columns` from `--heatmap`: two key names.
pub fn parse_axes(text: &str) -> Result<(String, String), Refusal> {
    let parts: Vec<&str> = text.split(',').map(str::trim).collect();
    match parts.as_slice() {
        [a, b] if !a.is_empty() && !b.is_empty() => Ok((a.to_string(), b.to_string())),
        _ => Err(input(format!("--heatmap wants two keys, rows then columns (e.g. layers,iterations), not `{text}`"))),
    }
}

/// The key `name` means among `known` (flattened configuration keys, and `layer`): itself,
/// itself without a `layer.`/`task.`/`train.` prefix, or the one key ending in `.name`.
pub fn resolve_key(name: &str, known: &BTreeSet<String>) -> Result<String, Refusal> {
    if known.contains(name) {
        return Ok(name.to_string());
    }
    let bare = ["layer.", "task.", "train."].iter().find_map(|p| name.strip_prefix(p));
    if let Some(bare) = bare.filter(|b| known.contains(*b)) {
        return Ok(bare.to_string());
    }
    let suffix = format!(".{name}");
    let ends: Vec<&String> = known.iter().filter(|k| k.ends_with(&suffix)).collect();
    match ends.as_slice() {
        [one] => Ok(one.to_string()),
        [] => {
            let hint = match closest_key(bare.unwrap_or(name), known.iter().map(String::as_str)) {
                Some(close) => format!(": did you mean `{close}`?"),
                None => format!(" (keys of these runs: {})", known.iter().cloned().collect::<Vec<_>>().join(", ")),
            };
            Err(input(format!("unknown key `{name}`{hint}")))
        }
        many => Err(input(format!(
            "`{name}` is ambiguous: {}",
            many.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(" or ")
        ))),
    }
}

/// The metric columns of `table` a heatmap can show (final and best of each eval metric).
pub fn metric_columns(table: &Table) -> Vec<usize> {
    (0..table.columns.len())
        .filter(|&c| matches!(table.columns[c].kind, ColumnKind::Final(_) | ColumnKind::Best(_)))
        .collect()
}

/// The column `name` means: a column title (`final cell_acc`, `best loss`, `s/step`), a
/// metric name alone (its final value), or `best:NAME` / `final:NAME`. `None`: the headline
/// metric's final value.
pub fn resolve_metric(table: &Table, name: Option<&str>, headline: Option<&str>) -> Result<usize, Refusal> {
    let titles: Vec<String> = table.columns.iter().map(Column::title).collect();
    let wanted = match name {
        Some(n) => {
            let n = n.trim();
            match n.split_once(':') {
                Some((which @ ("final" | "best"), metric)) => format!("{which} {}", metric.trim()),
                _ if titles.iter().any(|t| t == n) => n.to_string(),
                _ => format!("final {n}"),
            }
        }
        None => match headline {
            Some(h) if titles.contains(&format!("final {h}")) => format!("final {h}"),
            _ => match metric_columns(table).first() {
                Some(&c) => titles[c].clone(),
                None => return Err(input("these runs recorded no evaluation metric".into())),
            },
        },
    };
    if let Some(c) = titles.iter().position(|t| *t == wanted) {
        return Ok(c);
    }
    let metrics: Vec<&str> = table
        .columns
        .iter()
        .filter_map(|c| match &c.kind {
            ColumnKind::Final(m) => Some(m.as_str()),
            _ => None,
        })
        .collect();
    let asked = wanted.split_once(' ').map_or(wanted.as_str(), |(_, m)| m);
    let hint = closest_key(asked, metrics.iter().copied()).map(|m| format!("did you mean `{m}`? ")).unwrap_or_default();
    Err(input(format!(
        "no metric `{asked}` recorded by these runs: {hint}available: {} (each as final or best:NAME)",
        metrics.join(", ")
    )))
}

/// Text values in the order they read best: numerically when they are all numbers, else in
/// order of first appearance; `-` (a key the layer does not have) last.
fn ordered(values: Vec<String>) -> Vec<String> {
    let mut distinct: Vec<String> = Vec::new();
    for v in values {
        if !distinct.contains(&v) {
            distinct.push(v);
        }
    }
    let (mut present, absent): (Vec<String>, Vec<String>) = distinct.into_iter().partition(|v| v != "-");
    let numbers: Option<Vec<f64>> = present.iter().map(|v| v.parse::<f64>().ok()).collect();
    if numbers.is_some() {
        present.sort_by(|a, b| a.parse::<f64>().unwrap_or(0.0).total_cmp(&b.parse::<f64>().unwrap_or(0.0)));
    }
    present.extend(absent);
    present
}

impl Grid {
    /// The grid of `runs` over `row_key` × `col_key` for `metric` (see [`resolve_metric`]).
    pub fn build(runs: &[RunInput<'_>], row_key: &str, col_key: &str, metric: Option<&str>) -> Result<Grid, Refusal> {
        if runs.is_empty() {
            return Err(input("no runs to lay out".into()));
        }
        let table = Table::build(runs);
        let run_configs = configurations(runs.iter().map(|r| r.record));
        let mut known: BTreeSet<String> = run_configs.iter().flat_map(|c| c.keys().cloned()).collect();
        known.insert(LAYER.into());
        let row_key = resolve_key(row_key, &known)?;
        let col_key = resolve_key(col_key, &known)?;
        if row_key == col_key {
            return Err(input(format!("`{row_key}` is given twice: the rows and the columns need two different keys")));
        }
        // Each configuration of the table as key → value, the layer included.
        let configs: Vec<BTreeMap<&str, &str>> = table
            .rows
            .iter()
            .map(|row| {
                let mut m: BTreeMap<&str, &str> =
                    table.keys.iter().map(String::as_str).zip(row.values.iter().map(String::as_str)).collect();
                m.insert(LAYER, row.layer.as_str());
                m
            })
            .collect();
        let values_of = |key: &str| -> BTreeSet<&str> { configs.iter().filter_map(|c| c.get(key).copied()).collect() };
        for key in [&row_key, &col_key] {
            let values = values_of(key);
            if values.len() < 2 {
                let value = values
                    .first()
                    .copied()
                    .map_or_else(|| run_configs[0].get(key.as_str()).cloned().unwrap_or_default(), str::to_string);
                return Err(input(format!(
                    "`{key}` has one value in these runs ({key}={value}): an axis needs at least two"
                )));
            }
        }
        let mut mixed: Vec<(String, Vec<String>)> = Vec::new();
        for key in table.keys.iter().map(String::as_str).chain([LAYER]) {
            if key == row_key || key == col_key {
                continue;
            }
            // A key another layer lacks (`-`) follows from the layer: only its own values count.
            let values: Vec<String> = values_of(key).into_iter().filter(|v| *v != "-").map(str::to_string).collect();
            if values.len() > 1 {
                mixed.push((key.to_string(), values));
            }
        }
        if !mixed.is_empty() {
            return Err(Refusal::Mixed(mixed));
        }
        let headline = runs[0].record.headline().map(|h| h.name.as_str());
        let column = resolve_metric(&table, metric, headline)?;
        let metric = table.columns[column].title();
        let value = |c: &BTreeMap<&str, &str>, key: &str| c.get(key).copied().unwrap_or("-").to_string();
        let rows = ordered(configs.iter().map(|c| value(c, &row_key)).collect());
        let columns = ordered(configs.iter().map(|c| value(c, &col_key)).collect());
        let mut cells: Vec<Vec<Option<Cell>>> = vec![vec![None; columns.len()]; rows.len()];
        let mut taken: Vec<Vec<Option<usize>>> = vec![vec![None; columns.len()]; rows.len()];
        for (i, (row, config)) in table.rows.iter().zip(&configs).enumerate() {
            let r = rows.iter().position(|v| *v == value(config, &row_key)).unwrap_or(0);
            let c = columns.iter().position(|v| *v == value(config, &col_key)).unwrap_or(0);
            // Only a key some runs lack (`-`) and others have can bring two configurations here.
            if let Some(j) = taken[r][c] {
                let differ = configs[i]
                    .iter()
                    .filter(|(k, v)| configs[j].get(*k) != Some(*v))
                    .map(|(k, v)| (k.to_string(), vec![v.to_string(), value(&configs[j], k)]))
                    .collect();
                return Err(Refusal::Mixed(differ));
            }
            taken[r][c] = Some(i);
            cells[r][c] = row.cells[column].map(|stat| Cell { stat, runs: row.runs.clone() });
        }
        if cells.iter().flatten().all(Option::is_none) {
            return Err(input(format!("no run has a value of `{metric}`")));
        }
        let col = &table.columns[column];
        Ok(Grid {
            row_key,
            col_key,
            metric,
            higher_is_better: col.higher_is_better,
            digits: digits(&col.kind),
            rows,
            columns,
            cells,
        })
    }

    /// The smallest and largest mean.
    pub fn range(&self) -> Option<(f64, f64)> {
        let means = self.cells.iter().flatten().flatten().map(|c| c.stat.mean).filter(|m| m.is_finite());
        means.fold(None, |acc, m| match acc {
            None => Some((m, m)),
            Some((lo, hi)) => Some((lo.min(m), hi.max(m))),
        })
    }

    /// Where `mean` lies between the worst (0) and the best (1) cell; from the smallest to
    /// the largest for a metric without a direction. 1 when every cell is equal.
    pub fn goodness(&self, mean: f64) -> f64 {
        let Some((lo, hi)) = self.range() else { return 1.0 };
        if hi <= lo || !mean.is_finite() {
            return 1.0;
        }
        let t = ((mean - lo) / (hi - lo)).clamp(0.0, 1.0);
        if self.higher_is_better == Some(false) {
            1.0 - t
        } else {
            t
        }
    }

    /// The best cell (row, column), for a metric with a direction and cells that differ.
    pub fn best(&self) -> Option<(usize, usize)> {
        let higher = self.higher_is_better?;
        let (lo, hi) = self.range()?;
        if lo == hi && self.cells.iter().flatten().flatten().count() > 1 {
            return None;
        }
        let mut best: Option<(usize, usize, f64)> = None;
        for (r, row) in self.cells.iter().enumerate() {
            for (c, cell) in row.iter().enumerate() {
                let Some(m) = cell.as_ref().map(|c| c.stat.mean).filter(|m| m.is_finite()) else { continue };
                if best.is_none_or(|(_, _, b)| if higher { m > b } else { m < b }) {
                    best = Some((r, c, m));
                }
            }
        }
        best.map(|(r, c, _)| (r, c))
    }

    /// A cell's mean with the metric's decimals, or [`EMPTY`].
    pub fn value_text(&self, r: usize, c: usize) -> String {
        match &self.cells[r][c] {
            Some(cell) => format!("{:.*}", self.digits, cell.stat.mean),
            None => EMPTY.into(),
        }
    }

    /// A cell as `mean ± std` (just the mean for one seed), or [`EMPTY`].
    pub fn cell_text(&self, r: usize, c: usize) -> String {
        match &self.cells[r][c] {
            Some(cell) => cell.stat.text(self.digits),
            None => EMPTY.into(),
        }
    }

    /// The grid as an aligned text table, with a title line and a line naming the best cell.
    pub fn to_text(&self) -> String {
        let corner = format!("{} \\ {}", self.row_key, self.col_key);
        let mut table: Vec<Vec<String>> = vec![std::iter::once(corner).chain(self.columns.iter().cloned()).collect()];
        for (r, value) in self.rows.iter().enumerate() {
            let mut line = vec![value.clone()];
            line.extend((0..self.columns.len()).map(|c| self.cell_text(r, c)));
            table.push(line);
        }
        let width = |c: usize| table.iter().map(|l| l[c].chars().count()).max().unwrap_or(0);
        let widths: Vec<usize> = (0..table[0].len()).map(width).collect();
        let counts: BTreeSet<usize> = self.cells.iter().flatten().flatten().map(|c| c.stat.n).collect();
        let seeds = match (counts.first(), counts.last()) {
            (Some(a), Some(b)) if a == b => format!("{} per cell", crate::wording::count(*a, "seed")),
            (Some(a), Some(b)) => format!("{a} to {b} seeds per cell"),
            _ => String::new(),
        };
        let mut out = format!("{}: mean ± std over seeds, {seeds}\n", self.metric);
        for line in &table {
            let cells: Vec<String> = line
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    let pad = widths[i] - t.chars().count();
                    if i == 0 {
                        format!("{t}{}", " ".repeat(pad))
                    } else {
                        format!("{}{t}", " ".repeat(pad))
                    }
                })
                .collect();
            let _ = writeln!(out, "{}", cells.join("  ").trim_end());
        }
        if let Some((r, c)) = self.best() {
            let direction = if self.higher_is_better == Some(false) { "lowest" } else { "highest" };
            let _ = writeln!(
                out,
                "best ({direction}): {}={}, {}={}: {}",
                self.row_key,
                self.rows[r],
                self.col_key,
                self.columns[c],
                self.cell_text(r, c)
            );
        }
        out
    }

    /// The grid as one JSON object: `metric`, `higher_is_better`, `rows_key`, `columns_key`,
    /// `rows` and `columns` (their values), `cells` (per row, per column, `{mean, std, n,
    /// runs}` or null) and `best` (`{row, column}` or null).
    pub fn to_json(&self) -> serde_json::Value {
        let cells: Vec<Vec<serde_json::Value>> = self
            .cells
            .iter()
            .map(|row| {
                row.iter()
                    .map(|cell| match cell {
                        Some(c) => serde_json::json!({
                            "mean": finite(c.stat.mean), "std": finite(c.stat.std), "n": c.stat.n, "runs": c.runs,
                        }),
                        None => serde_json::Value::Null,
                    })
                    .collect()
            })
            .collect();
        let best = self.best().map(|(r, c)| serde_json::json!({"row": self.rows[r], "column": self.columns[c]}));
        serde_json::json!({
            "metric": self.metric,
            "higher_is_better": self.higher_is_better,
            "rows_key": self.row_key,
            "columns_key": self.col_key,
            "rows": self.rows,
            "columns": self.columns,
            "cells": cells,
            "best": best,
        })
    }
}

/// JSON has no NaN or infinity: those become null.
fn finite(x: f64) -> serde_json::Value {
    serde_json::Number::from_f64(x).map_or(serde_json::Value::Null, serde_json::Value::Number)
}

#[cfg(test)]
mod tests;
