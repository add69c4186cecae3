//! Ablation tables: runs grouped by the configuration keys that differ between them, one row
//! per configuration, each metric as mean ± std over the seeds of that configuration.
//!
//! The same table feeds the TUI's Ablation screen and `workbench ablation` (Markdown,
//! LaTeX with booktabs, CSV).

use crate::run_config::flatten_configs;
use crate::store::{MetricRow, RunRecord};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

/// Configuration keys that never define a configuration: seeds vary within a row, and
/// bookkeeping keys (the device, checkpoints, which trajectories are recorded) say nothing
/// about the model.
const IGNORED_KEYS: [&str; 6] = ["seed", "train.seed", "device", "checkpoint", "sphere_head", "sphere_tokens"];

/// A run and its metric rows, the input of [`Table::build`].
pub struct RunInput<'a> {
    pub record: &'a RunRecord,
    pub metrics: &'a [MetricRow],
}

/// Mean, sample standard deviation and count of a set of values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stat {
    pub mean: f64,
    /// Sample standard deviation (n - 1); 0 for a single value.
    pub std: f64,
    pub n: usize,
}

impl Stat {
    /// The statistics of the finite values, or `None` if there are none.
    pub fn of(values: &[f64]) -> Option<Stat> {
        let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
        let n = finite.len();
        if n == 0 {
            return None;
        }
        let mean = finite.iter().sum::<f64>() / n as f64;
        let std =
            if n > 1 { (finite.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt() } else { 0.0 };
        Some(Stat { mean, std, n })
    }

    /// `mean ± std` (just the mean for one value) with `digits` decimals.
    pub fn text(&self, digits: usize) -> String {
        if self.n > 1 {
            format!("{:.digits$} ± {:.digits$}", self.mean, self.std)
        } else {
            format!("{:.digits$}", self.mean)
        }
    }
}

/// One value per seed: the mean of the finite values of the runs with that seed, in the order
/// the seeds first appear. Runs that repeat a seed of their configuration (a sweep queued
/// twice, a rerun) are not independent samples: counted apart, they would narrow the std
/// and weigh their seed twice.
fn per_seed_means(values: impl Iterator<Item = (u64, Option<f64>)>) -> Vec<f64> {
    let mut seeds: Vec<(u64, f64, usize)> = Vec::new();
    for (seed, value) in values {
        let Some(v) = value.filter(|v| v.is_finite()) else { continue };
        match seeds.iter_mut().find(|(s, _, _)| *s == seed) {
            Some((_, sum, n)) => {
                *sum += v;
                *n += 1;
            }
            None => seeds.push((seed, v, 1)),
        }
    }
    seeds.into_iter().map(|(_, sum, n)| sum / n as f64).collect()
}

/// What a column shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ColumnKind {
    /// The metric at the last evaluation.
    Final(String),
    /// The best value of the metric over the evaluations.
    Best(String),
    /// Trainable parameters.
    Params,
    /// Seconds per training step.
    SecondsPerStep,
    /// The worker's peak resident memory in MiB (system metrics).
    PeakMemory,
}

/// One column of the table.
#[derive(Debug, Clone, PartialEq)]
pub struct Column {
    pub kind: ColumnKind,
    /// `Some(true)` when larger is better, `Some(false)` when smaller is, `None` when neither.
    pub higher_is_better: Option<bool>,
}

impl Column {
    /// The column header.
    pub fn title(&self) -> String {
        match &self.kind {
            ColumnKind::Final(m) => format!("final {m}"),
            ColumnKind::Best(m) => format!("best {m}"),
            ColumnKind::Params => "params".into(),
            ColumnKind::SecondsPerStep => "s/step".into(),
            ColumnKind::PeakMemory => "peak MiB".into(),
        }
    }
}

/// One configuration: the runs (seeds) that share it and their statistics per column.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// Layer plugin.
    pub layer: String,
    /// Values of the differing keys (same order as [`Table::keys`]; `-` where the key does not
    /// apply to this layer).
    pub values: Vec<String>,
    /// Run ids in this configuration.
    pub runs: Vec<i64>,
    /// Seeds of those runs (in the same order; runs may repeat a seed).
    pub seeds: Vec<u64>,
    /// One cell per column.
    pub cells: Vec<Option<Stat>>,
}

impl Row {
    /// How many seeds the row averages over, and its runs where some repeat a seed: `3`,
    /// `2 (4 runs)`.
    pub fn seeds_text(&self) -> String {
        let distinct: BTreeSet<u64> = self.seeds.iter().copied().collect();
        match self.runs.len() {
            n if n > distinct.len() => format!("{} ({n} runs)", distinct.len()),
            _ => distinct.len().to_string(),
        }
    }
}

/// An ablation table.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    /// The configuration keys that differ between the runs (besides the seed).
    pub keys: Vec<String>,
    pub columns: Vec<Column>,
    pub rows: Vec<Row>,
}

/// Whether larger values of `name` are better: the task's declaration when stored, else the
/// convention that losses, perplexities, bits and errors are smaller-is-better.
pub fn higher_is_better(record: &RunRecord, name: &str) -> bool {
    record.higher_is_better(name).unwrap_or_else(|| {
        let lower = ["loss", "ppl", "bpb", "rmse", "mse", "error", "nll"];
        !lower.iter().any(|l| name == *l || name.ends_with(&format!("_{l}")))
    })
}

/// The flattened configurations of runs compared with each other (named alike, see
/// [`crate::run_config::ConfigNames`]) without the keys that never define a configuration.
pub fn configurations<'a>(records: impl IntoIterator<Item = &'a RunRecord>) -> Vec<BTreeMap<String, String>> {
    let configs: Vec<&serde_json::Value> = records.into_iter().map(|r| &r.config).collect();
    let mut flat = flatten_configs(&configs);
    for f in &mut flat {
        f.retain(|k, _| !IGNORED_KEYS.contains(&k.as_str()));
    }
    flat
}

fn eval_values<'a>(metrics: &'a [MetricRow], name: &'a str) -> impl Iterator<Item = &'a MetricRow> + 'a {
    metrics.iter().filter(move |m| m.split == "eval" && m.name == name && m.value.is_finite())
}

fn final_value(metrics: &[MetricRow], name: &str) -> Option<f64> {
    eval_values(metrics, name).max_by_key(|m| m.step).map(|m| m.value)
}

fn best_value(metrics: &[MetricRow], name: &str, higher: bool) -> Option<f64> {
    let values = eval_values(metrics, name).map(|m| m.value);
    if higher {
        values.reduce(f64::max)
    } else {
        values.reduce(f64::min)
    }
}

/// Seconds per step: the train curve's last wall time over its last step.
pub fn seconds_per_step(metrics: &[MetricRow]) -> Option<f64> {
    let last = metrics.iter().filter(|m| m.split == "train" && m.wall_time.is_finite()).max_by_key(|m| m.step)?;
    (last.step > 0).then(|| last.wall_time / last.step as f64)
}

/// The worker's peak resident memory in MiB, from its system metrics.
pub fn peak_memory_mib(metrics: &[MetricRow]) -> Option<f64> {
    use crate::train::system;
    let peak = metrics.iter().filter(|m| m.split == system::SPLIT && m.name == system::PEAK).map(|m| m.value);
    peak.reduce(f64::max).map(|bytes| bytes / (1024.0 * 1024.0))
}

impl Table {
    /// Groups `runs` (in the given order: rows appear in the order of their first run) by
    /// layer and differing configuration keys; columns are final and best of every eval
    /// metric (headline first), parameters, seconds per step and, when the runs recorded it,
    /// peak memory.
    pub fn build(runs: &[RunInput<'_>]) -> Table {
        let flat = configurations(runs.iter().map(|r| r.record));
        let all_keys: BTreeSet<&String> = flat.iter().flat_map(|f| f.keys()).collect();
        let keys: Vec<String> = all_keys
            .into_iter()
            .filter(|k| flat.iter().filter_map(|f| f.get(*k)).collect::<BTreeSet<_>>().len() > 1)
            .cloned()
            .collect();

        let mut metric_names: Vec<String> = Vec::new();
        for r in runs {
            let declared = r.record.metric_specs.iter().map(|m| m.name.clone());
            let seen = r.metrics.iter().filter(|m| m.split == "eval").map(|m| m.name.clone());
            for name in declared.chain(seen) {
                if !metric_names.contains(&name) {
                    metric_names.push(name);
                }
            }
        }
        let direction = |name: &str| runs.first().map(|r| higher_is_better(r.record, name)).unwrap_or(true);
        let mut columns = Vec::new();
        for name in &metric_names {
            let higher = Some(direction(name));
            columns.push(Column { kind: ColumnKind::Final(name.clone()), higher_is_better: higher });
            columns.push(Column { kind: ColumnKind::Best(name.clone()), higher_is_better: higher });
        }
        columns.push(Column { kind: ColumnKind::Params, higher_is_better: None });
        columns.push(Column { kind: ColumnKind::SecondsPerStep, higher_is_better: Some(false) });
        // Runs from before system metrics have no peak: no empty column for them alone.
        if runs.iter().any(|r| peak_memory_mib(r.metrics).is_some()) {
            columns.push(Column { kind: ColumnKind::PeakMemory, higher_is_better: Some(false) });
        }

        let mut rows: Vec<Row> = Vec::new();
        let mut members: Vec<Vec<usize>> = Vec::new();
        for (i, r) in runs.iter().enumerate() {
            let values: Vec<String> =
                keys.iter().map(|k| flat[i].get(k).cloned().unwrap_or_else(|| "-".into())).collect();
            let layer = r.record.layer.name.clone();
            match rows.iter().position(|row| row.layer == layer && row.values == values) {
                Some(at) => {
                    rows[at].runs.push(r.record.id);
                    rows[at].seeds.push(r.record.seed);
                    members[at].push(i);
                }
                None => {
                    rows.push(Row {
                        layer,
                        values,
                        runs: vec![r.record.id],
                        seeds: vec![r.record.seed],
                        cells: vec![],
                    });
                    members.push(vec![i]);
                }
            }
        }
        for (row, idx) in rows.iter_mut().zip(&members) {
            row.cells = columns
                .iter()
                .map(|c| {
                    let value = |i: usize| {
                        let (rec, m) = (runs[i].record, runs[i].metrics);
                        match &c.kind {
                            ColumnKind::Final(name) => final_value(m, name),
                            ColumnKind::Best(name) => best_value(m, name, higher_is_better(rec, name)),
                            ColumnKind::Params => rec.param_count.map(|p| p as f64),
                            ColumnKind::SecondsPerStep => seconds_per_step(m),
                            ColumnKind::PeakMemory => peak_memory_mib(m),
                        }
                    };
                    Stat::of(&per_seed_means(idx.iter().map(|&i| (runs[i].record.seed, value(i)))))
                })
                .collect();
        }
        Table { keys, columns, rows }
    }

    /// For each column, the rows with the best mean: every row whose mean reads the same as
    /// the best at the column's decimals (a tie in the table is marked as one), none for
    /// columns without a direction or without values.
    pub fn best_rows(&self) -> Vec<Vec<usize>> {
        self.columns
            .iter()
            .enumerate()
            .map(|(c, col)| {
                let Some(higher) = col.higher_is_better else { return Vec::new() };
                // A diverged run's NaN is never the best.
                let means = || {
                    let cells = self.rows.iter().enumerate().filter_map(|(r, row)| row.cells[c].map(|s| (r, s.mean)));
                    cells.filter(|(_, m)| m.is_finite())
                };
                let Some(best) = means().map(|(_, m)| m).reduce(|a, b| if (b > a) == higher { b } else { a }) else {
                    return Vec::new();
                };
                let written = |mean: f64| format!("{mean:.*}", digits(&col.kind));
                means().filter(|&(_, m)| written(m) == written(best)).map(|(r, _)| r).collect()
            })
            .collect()
    }

    /// Sorts rows by column `column` (ascending or descending); rows without a value last.
    pub fn sort_by_column(&mut self, column: usize, descending: bool) {
        self.rows.sort_by(|a, b| {
            let (x, y) = (a.cells.get(column).copied().flatten(), b.cells.get(column).copied().flatten());
            match (x, y) {
                (Some(x), Some(y)) => {
                    let o = x.mean.total_cmp(&y.mean);
                    if descending {
                        o.reverse()
                    } else {
                        o
                    }
                }
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (None, None) => std::cmp::Ordering::Equal,
            }
        });
    }

    /// Keeps only the columns of the named metrics (plus parameters and time per step);
    /// an unknown name is refused with the metrics available.
    pub fn keep_metrics(&mut self, names: &[&str]) -> Result<(), String> {
        let available: Vec<String> = self
            .columns
            .iter()
            .filter_map(|c| match &c.kind {
                ColumnKind::Final(m) => Some(m.clone()),
                _ => None,
            })
            .collect();
        if let Some(bad) = names.iter().find(|n| !available.iter().any(|a| a == *n)) {
            return Err(format!("no metric `{bad}` in these runs; available: {}", available.join(", ")));
        }
        let keep: Vec<bool> = self
            .columns
            .iter()
            .map(|c| match &c.kind {
                ColumnKind::Final(m) | ColumnKind::Best(m) => names.contains(&m.as_str()),
                _ => true,
            })
            .collect();
        let filter = |cells: &mut Vec<Option<Stat>>| {
            let mut i = 0;
            cells.retain(|_| {
                i += 1;
                keep[i - 1]
            });
        };
        for row in &mut self.rows {
            filter(&mut row.cells);
        }
        let mut i = 0;
        self.columns.retain(|_| {
            i += 1;
            keep[i - 1]
        });
        Ok(())
    }

    /// Header cells: layer, the differing keys, seeds, then the columns.
    pub fn header(&self) -> Vec<String> {
        let mut h = vec!["layer".to_string()];
        h.extend(self.keys.iter().cloned());
        h.push("seeds".into());
        h.extend(self.columns.iter().map(Column::title));
        h
    }

    /// Body cells of row `r` as text (`mean ± std`).
    pub fn cells_text(&self, r: usize) -> Vec<String> {
        let row = &self.rows[r];
        let mut out = vec![row.layer.clone()];
        out.extend(row.values.iter().cloned());
        out.push(row.seeds_text());
        for (c, cell) in row.cells.iter().enumerate() {
            out.push(match cell {
                None => "-".into(),
                Some(s) => format_cell(&self.columns[c].kind, s),
            });
        }
        out
    }

    /// A Markdown table; the best value per column in bold.
    pub fn to_markdown(&self) -> String {
        let best = self.best_rows();
        let fixed = 2 + self.keys.len();
        let mut out = String::new();
        let header = self.header();
        let header: Vec<String> = header.iter().map(|h| markdown_escape(h)).collect();
        let _ = writeln!(out, "| {} |", header.join(" | "));
        let _ = writeln!(out, "|{}", header.iter().map(|_| "---|").collect::<String>());
        for r in 0..self.rows.len() {
            let cells: Vec<String> = self
                .cells_text(r)
                .into_iter()
                .enumerate()
                .map(|(i, t)| {
                    let t = markdown_escape(&t);
                    if i >= fixed && best[i - fixed].contains(&r) {
                        format!("**{t}**")
                    } else {
                        t
                    }
                })
                .collect();
            let _ = writeln!(out, "| {} |", cells.join(" | "));
        }
        out
    }

    /// A LaTeX table with booktabs rules; the best value per column in bold.
    pub fn to_latex(&self) -> String {
        let best = self.best_rows();
        let fixed = 2 + self.keys.len();
        let header = self.header();
        let mut out = String::new();
        let _ = writeln!(out, "\\begin{{tabular}}{{{}}}", "l".repeat(fixed) + &"r".repeat(self.columns.len()));
        out.push_str("\\toprule\n");
        let _ = writeln!(out, "{} \\\\", header.iter().map(|h| latex_escape(h)).collect::<Vec<_>>().join(" & "));
        out.push_str("\\midrule\n");
        for r in 0..self.rows.len() {
            let cells: Vec<String> = self
                .cells_text(r)
                .into_iter()
                .enumerate()
                .map(|(i, t)| {
                    let t = latex_escape(&t).replace('±', "$\\pm$");
                    if i >= fixed && best[i - fixed].contains(&r) {
                        format!("\\textbf{{{t}}}")
                    } else {
                        t
                    }
                })
                .collect();
            let _ = writeln!(out, "{} \\\\", cells.join(" & "));
        }
        out.push_str("\\bottomrule\n\\end{tabular}\n");
        out
    }

    /// CSV: the configuration columns, then `mean` and `std` columns per metric column, full
    /// precision, for further analysis.
    pub fn to_csv(&self) -> String {
        let mut header: Vec<String> = vec!["layer".into()];
        header.extend(self.keys.iter().cloned());
        header.push("runs".into());
        for c in &self.columns {
            header.push(format!("{} mean", c.title()));
            header.push(format!("{} std", c.title()));
        }
        // The csv crate quotes whatever needs it (commas, quotes, CR and LF) by RFC 4180.
        let mut out = csv::WriterBuilder::new().terminator(csv::Terminator::Any(b'\n')).from_writer(Vec::new());
        let mut records = vec![header];
        for row in &self.rows {
            let mut fields = vec![row.layer.clone()];
            fields.extend(row.values.iter().cloned());
            fields.push(row.runs.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(" "));
            for cell in &row.cells {
                match cell {
                    Some(s) => {
                        fields.push(s.mean.to_string());
                        fields.push(s.std.to_string());
                    }
                    None => fields.extend([String::new(), String::new()]),
                }
            }
            records.push(fields);
        }
        for record in &records {
            // Writing to memory cannot fail.
            let _ = out.write_record(record);
        }
        String::from_utf8(out.into_inner().unwrap_or_default()).unwrap_or_default()
    }
}

fn format_cell(kind: &ColumnKind, s: &Stat) -> String {
    match kind {
        ColumnKind::Params => format!("{:.0}", s.mean),
        _ => s.text(digits(kind)),
    }
}

/// Decimals a column's values are written with.
pub fn digits(kind: &ColumnKind) -> usize {
    match kind {
        ColumnKind::Params | ColumnKind::PeakMemory => 0,
        ColumnKind::SecondsPerStep => 3,
        ColumnKind::Final(_) | ColumnKind::Best(_) => 4,
    }
}

/// Text as LaTeX typesets it literally: the special characters escaped, line breaks
/// (which would end the table row or paragraph) as spaces.
fn latex_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '_' | '%' | '&' | '#' | '$' | '{' | '}' => {
                out.push('\\');
                out.push(ch);
            }
            '\\' => out.push_str("\\textbackslash{}"),
            '~' => out.push_str("\\textasciitilde{}"),
            '^' => out.push_str("\\textasciicircum{}"),
            // The default font encoding prints other glyphs for these three.
            '|' => out.push_str("\\textbar{}"),
            '<' => out.push_str("\\textless{}"),
            '>' => out.push_str("\\textgreater{}"),
            '\r' | '\n' => out.push(' '),
            _ => out.push(ch),
        }
    }
    out
}

/// Text as a Markdown table cell shows it literally: `|` would end the cell and line breaks
/// the row; backslashes and the characters of emphasis, code, links and HTML are escaped
/// (`_` only where it could start or end emphasis, so `cell_acc` stays readable).
fn markdown_escape(s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len());
    for (i, &ch) in chars.iter().enumerate() {
        let word = |j: Option<usize>| j.and_then(|j| chars.get(j)).is_some_and(|c| c.is_alphanumeric());
        match ch {
            '\r' | '\n' => out.push(' '),
            '_' if word(i.checked_sub(1)) && word(Some(i + 1)) => out.push(ch),
            '\\' | '|' | '*' | '_' | '`' | '[' | ']' | '<' | '>' | '~' | '#' => {
                out.push('\\');
                out.push(ch);
            }
            _ => out.push(ch),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MetricDirection;
    use serde_json::json;

    fn record(id: i64, layer: &str, attention: &str, seed: u64) -> RunRecord {
        RunRecord {
            seed,
            param_count: Some(1000),
            last_step: 10,
            total_steps: Some(10),
            metric_specs: vec![
                MetricDirection { name: "acc".into(), higher_is_better: true },
                MetricDirection { name: "loss".into(), higher_is_better: false },
            ],
            ..RunRecord::fixture(
                id,
                layer,
                json!({"layer_config": {"attention": attention, "d": 64}, "task_config": {}, "train": {"seed": seed, "lr": 0.001}}),
            )
        }
    }

    fn metrics(acc: &[f64], wall: f64) -> Vec<MetricRow> {
        let mut rows: Vec<MetricRow> = acc
            .iter()
            .enumerate()
            .map(|(i, a)| MetricRow {
                step: (i as u64 + 1) * 5,
                split: "eval".into(),
                name: "acc".into(),
                value: *a,
                wall_time: 0.0,
            })
            .collect();
        rows.push(MetricRow { step: 10, split: "train".into(), name: "loss".into(), value: 1.0, wall_time: wall });
        rows
    }

    #[test]
    fn groups_seeds_and_computes_mean_and_sample_std_by_hand() {
        let recs = [
            record(1, "hyperset", "bisoftmax", 0),
            record(2, "hyperset", "bisoftmax", 1),
            record(3, "hyperset", "sigmoid", 0),
        ];
        let ms = [metrics(&[0.5, 0.4], 2.0), metrics(&[0.3, 0.6], 4.0), metrics(&[0.2, 0.1], 1.0)];
        let inputs: Vec<RunInput> = recs.iter().zip(&ms).map(|(record, m)| RunInput { record, metrics: m }).collect();
        let table = Table::build(&inputs);
        assert_eq!(table.keys, vec!["attention".to_string()]);
        assert_eq!(table.rows.len(), 2);
        assert_eq!(table.rows[0].runs, vec![1, 2]);
        let col = |kind: ColumnKind| table.columns.iter().position(|c| c.kind == kind).unwrap();
        // Final acc: 0.4 and 0.6 → mean 0.5, sample std sqrt(((0.1)^2 + (0.1)^2) / 1) = 0.141421...
        let fin = table.rows[0].cells[col(ColumnKind::Final("acc".into()))].unwrap();
        assert!((fin.mean - 0.5).abs() < 1e-12 && (fin.std - 0.02f64.sqrt()).abs() < 1e-12, "{fin:?}");
        // Best acc: 0.5 and 0.6 → mean 0.55, std sqrt(0.005) .
        let best = table.rows[0].cells[col(ColumnKind::Best("acc".into()))].unwrap();
        assert!((best.mean - 0.55).abs() < 1e-12 && (best.std - 0.005f64.sqrt()).abs() < 1e-12, "{best:?}");
        // Seconds per step: 2/10 and 4/10 → 0.3.
        let sps = table.rows[0].cells[col(ColumnKind::SecondsPerStep)].unwrap();
        assert!((sps.mean - 0.3).abs() < 1e-12);
        // One seed: std 0 and the text has no ±.
        let single = table.rows[1].cells[col(ColumnKind::Best("acc".into()))].unwrap();
        assert_eq!((single.mean, single.std, single.n), (0.2, 0.0, 1));
        assert_eq!(single.text(2), "0.20");
        // Best row per column: row 0 for accuracy, row 1 for time per step.
        let best_rows = table.best_rows();
        assert_eq!(best_rows[col(ColumnKind::Final("acc".into()))], [0]);
        assert_eq!(best_rows[col(ColumnKind::SecondsPerStep)], [1]);
        assert!(best_rows[col(ColumnKind::Params)].is_empty());
    }

    #[test]
    fn runs_that_repeat_a_seed_are_averaged_into_it_before_the_statistics() {
        let recs = [record(1, "a", "x", 0), record(2, "a", "x", 0), record(3, "a", "x", 1), record(4, "a", "y", 5)];
        let ms = [metrics(&[0.4], 1.0), metrics(&[0.6], 1.0), metrics(&[0.8], 1.0), metrics(&[0.1], 1.0)];
        let inputs: Vec<RunInput> = recs.iter().zip(&ms).map(|(record, m)| RunInput { record, metrics: m }).collect();
        let table = Table::build(&inputs);
        let c = table.columns.iter().position(|c| c.kind == ColumnKind::Final("acc".into())).unwrap();
        // Seed 0: (0.4 + 0.6) / 2 = 0.5; seed 1: 0.8. Over the two seeds: mean 0.65, sample
        // std sqrt(2 * 0.15^2) = 0.2121..., n = 2 (three runs counted apart: 0.6 ± 0.2, n = 3).
        let stat = table.rows[0].cells[c].unwrap();
        assert_eq!(stat.n, 2);
        assert!((stat.mean - 0.65).abs() < 1e-12 && (stat.std - 0.045f64.sqrt()).abs() < 1e-12, "{stat:?}");
        assert_eq!(table.rows[0].runs, [1, 2, 3]);
        assert_eq!((table.rows[0].seeds_text(), table.rows[1].seeds_text()), ("2 (3 runs)".into(), "1".into()));
        let md = table.to_markdown();
        assert!(md.contains("| a | x | 2 (3 runs) | **0.6500 ± 0.2121** |"), "{md}");
        // A run without a value leaves its seed to the others.
        let no_value = [metrics(&[f64::NAN], 1.0), metrics(&[0.6], 1.0), metrics(&[0.8], 1.0), metrics(&[0.1], 1.0)];
        let inputs: Vec<RunInput> =
            recs.iter().zip(&no_value).map(|(record, m)| RunInput { record, metrics: m }).collect();
        let stat = Table::build(&inputs).rows[0].cells[c].unwrap();
        assert!((stat.mean - 0.7).abs() < 1e-12 && stat.n == 2, "{stat:?}");
    }

    #[test]
    fn rows_that_read_the_same_are_all_best_and_a_diverged_run_never_is() {
        let recs = [record(1, "a", "x", 0), record(2, "a", "y", 0), record(3, "a", "z", 0)];
        let ms = [metrics(&[0.75], 1.0), metrics(&[0.75001], 1.0), metrics(&[f64::NAN], 1.0)];
        let inputs: Vec<RunInput> = recs.iter().zip(&ms).map(|(record, m)| RunInput { record, metrics: m }).collect();
        let table = Table::build(&inputs);
        let c = table.columns.iter().position(|c| c.kind == ColumnKind::Final("acc".into())).unwrap();
        assert_eq!(table.best_rows()[c], [0, 1], "both read 0.7500");
        let md = table.to_markdown();
        assert!(md.contains("| a | x | 1 | **0.7500** |") && md.contains("| a | y | 1 | **0.7500** |"), "{md}");
        let nan_only = [RunInput { record: &recs[2], metrics: &ms[2] }];
        assert!(Table::build(&nan_only).best_rows()[c].is_empty());
    }

    #[test]
    fn exports_contain_the_numbers_and_parse_back() {
        let recs = [record(1, "hyperset", "bisoftmax", 0), record(2, "transformer", "sigmoid", 0)];
        let ms = [metrics(&[0.25], 1.0), metrics(&[0.75], 1.0)];
        let inputs: Vec<RunInput> = recs.iter().zip(&ms).map(|(record, m)| RunInput { record, metrics: m }).collect();
        let table = Table::build(&inputs);
        let md = table.to_markdown();
        assert!(md.contains("| transformer | sigmoid | 1 | **0.7500** |"), "{md}");
        let lines: Vec<&str> = md.lines().collect();
        assert_eq!(lines.len(), 4);
        assert!(lines.iter().all(|l| l.matches('|').count() == lines[0].matches('|').count()));
        let tex = table.to_latex();
        assert!(tex.contains("\\toprule") && tex.contains("\\midrule") && tex.contains("\\bottomrule"));
        assert!(tex.contains("\\textbf{0.7500}") && tex.contains("0.2500"), "{tex}");
        let csv = table.to_csv();
        let rows: Vec<Vec<&str>> = csv.lines().map(|l| l.split(',').collect()).collect();
        assert!(rows.iter().all(|r| r.len() == rows[0].len()));
        let at = rows[0].iter().position(|h| *h == "final acc mean").unwrap();
        assert_eq!(rows[1][at].parse::<f64>().unwrap(), 0.25);
        assert_eq!(rows[2][at].parse::<f64>().unwrap(), 0.75);
    }

    #[test]
    fn peak_memory_is_a_column_of_the_largest_sample_per_run() {
        let recs = [record(1, "a", "x", 0), record(2, "a", "x", 1), record(3, "a", "y", 0)];
        let mib = 1024.0 * 1024.0;
        let peak = |step: u64, v: f64| MetricRow {
            step,
            split: "sys".into(),
            name: "peak_rss_bytes".into(),
            value: v * mib,
            wall_time: 0.0,
        };
        let mut ms = [metrics(&[0.5], 1.0), metrics(&[0.5], 1.0), metrics(&[0.5], 1.0)];
        ms[0].extend([peak(5, 90.0), peak(10, 100.0)]);
        ms[1].push(peak(10, 200.0));
        let inputs: Vec<RunInput> = recs.iter().zip(&ms).map(|(record, m)| RunInput { record, metrics: m }).collect();
        let table = Table::build(&inputs);
        let c = table.columns.iter().position(|c| c.kind == ColumnKind::PeakMemory).unwrap();
        assert_eq!(table.columns[c].title(), "peak MiB");
        // Peaks 100 and 200 MiB: mean 150, std sqrt(5000); run 3 recorded none.
        let s = table.rows[0].cells[c].unwrap();
        assert!((s.mean - 150.0).abs() < 1e-9 && (s.std - 5000f64.sqrt()).abs() < 1e-9, "{s:?}");
        assert_eq!(table.cells_text(0).last().unwrap(), "150 ± 71");
        assert_eq!(table.rows[1].cells[c], None);
        assert_eq!(table.best_rows()[c], [0]);
        // Sys metrics are never taken for task metrics.
        assert!(!table.columns.iter().any(|c| c.title().contains("rss")), "{:?}", table.header());
        // Without any recorded peak, no column.
        let plain = [metrics(&[0.5], 1.0)];
        let table = Table::build(&[RunInput { record: &recs[0], metrics: &plain[0] }]);
        assert!(!table.columns.iter().any(|c| c.kind == ColumnKind::PeakMemory));
    }

    /// A configuration value with every character the formats treat specially, and one with
    /// a CRLF: each format keeps the table's shape and the value's text.
    #[test]
    fn exports_escape_hostile_values() {
        let hostile = "a|b\\c~d^e_f&g%h$i#j{k}l";
        let recs = [record(1, "hyperset", hostile, 0), record(2, "hyperset", "x,\"y\"\r\nz", 0)];
        let ms = [metrics(&[0.25], 1.0), metrics(&[0.75], 1.0)];
        let inputs: Vec<RunInput> = recs.iter().zip(&ms).map(|(record, m)| RunInput { record, metrics: m }).collect();
        let table = Table::build(&inputs);

        let md = table.to_markdown();
        let lines: Vec<&str> = md.lines().collect();
        assert_eq!(lines.len(), 4, "{md}");
        assert!(!md.contains('\r'), "{md:?}");
        // Cells end at unescaped pipes only: every line has as many as the header.
        let pipes = |l: &str| l.replace("\\\\", "").replace("\\|", "").matches('|').count();
        assert!(lines.iter().all(|l| pipes(l) == pipes(lines[0])), "{md}");
        assert!(md.contains("| a\\|b\\\\c\\~d^e_f&g%h$i\\#j{k}l |"), "{md}");

        let tex = table.to_latex();
        let expected =
            "a\\textbar{}b\\textbackslash{}c\\textasciitilde{}d\\textasciicircum{}e\\_f\\&g\\%h\\$i\\#j\\{k\\}l";
        assert!(tex.contains(expected), "{tex}");
        assert!(tex.contains("x,\"y\"  z") && !tex.contains('\r'), "{tex:?}");

        let csv = table.to_csv();
        let mut reader = csv::ReaderBuilder::new().has_headers(true).from_reader(csv.as_bytes());
        let at = reader.headers().unwrap().iter().position(|h| h == "attention").unwrap();
        let values: Vec<String> = reader.records().map(|r| r.unwrap()[at].to_string()).collect();
        assert_eq!(values, [hostile, "x,\"y\"\r\nz"]);
    }

    #[test]
    fn sorting_puts_missing_values_last() {
        let recs = [record(1, "a", "x", 0), record(2, "a", "y", 0), record(3, "a", "z", 0)];
        let ms = [metrics(&[0.2], 1.0), vec![], metrics(&[0.9], 1.0)];
        let inputs: Vec<RunInput> = recs.iter().zip(&ms).map(|(record, m)| RunInput { record, metrics: m }).collect();
        let mut table = Table::build(&inputs);
        let c = table.columns.iter().position(|c| c.kind == ColumnKind::Final("acc".into())).unwrap();
        table.sort_by_column(c, true);
        assert_eq!(table.rows.iter().map(|r| r.runs[0]).collect::<Vec<_>>(), vec![3, 1, 2]);
        table.sort_by_column(c, false);
        assert_eq!(table.rows.iter().map(|r| r.runs[0]).collect::<Vec<_>>(), vec![1, 3, 2]);
    }
}

/// Export format of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Markdown,
    Latex,
    Csv,
    /// One JSON object ([`to_json`]), for `ablation --json`.
    Json,
}

impl Format {
    /// Parses `md`, `markdown`, `latex`, `tex` or `csv`.
    pub fn parse(s: &str) -> anyhow::Result<Format> {
        match s.to_ascii_lowercase().as_str() {
            "md" | "markdown" => Ok(Format::Markdown),
            "latex" | "tex" => Ok(Format::Latex),
            "csv" => Ok(Format::Csv),
            "json" => Ok(Format::Json),
            other => anyhow::bail!("unknown format `{other}`: use md, latex, csv or json"),
        }
    }

    /// The table in this format.
    pub fn render(self, table: &Table) -> String {
        match self {
            Format::Markdown => table.to_markdown(),
            Format::Latex => table.to_latex(),
            Format::Csv => table.to_csv(),
            Format::Json => format!("{}\n", to_json(table)),
        }
    }
}

/// The table as one JSON object: `keys` (the differing configuration keys), `columns` (their
/// titles, e.g. `cell_acc`), and `rows`, each with `layer`, `values` (key to value), `runs`,
/// `seeds` (each run's, in the order of `runs`) and `metrics` (column title to `{mean, std,
/// n}` over the seeds, `n` counting seeds, or null without a value).
pub fn to_json(table: &Table) -> serde_json::Value {
    let titles: Vec<String> = table.columns.iter().map(Column::title).collect();
    let rows: Vec<serde_json::Value> = table
        .rows
        .iter()
        .map(|row| {
            let values: serde_json::Map<String, serde_json::Value> =
                table.keys.iter().cloned().zip(row.values.iter().map(|v| v.clone().into())).collect();
            let metrics: serde_json::Map<String, serde_json::Value> = titles
                .iter()
                .cloned()
                .zip(row.cells.iter().map(|cell| match cell {
                    Some(s) => serde_json::json!({"mean": finite(s.mean), "std": finite(s.std), "n": s.n}),
                    None => serde_json::Value::Null,
                }))
                .collect();
            serde_json::json!({
                "layer": row.layer, "values": values, "runs": row.runs, "seeds": row.seeds, "metrics": metrics,
            })
        })
        .collect();
    serde_json::json!({"keys": table.keys, "columns": titles, "rows": rows})
}

/// JSON has no NaN or infinity: those become null.
fn finite(x: f64) -> serde_json::Value {
    serde_json::Number::from_f64(x).map_or(serde_json::Value::Null, serde_json::Value::Number)
}
