//! Data for `workbench plot`: store rows turned into the series of each panel.
//!
//! Everything here is pure (slices of [`MetricRow`] / [`DiagnosticRow`] in, points out), so it
//! is unit-tested without drawing; `figure` draws the result with plotters.

use crate::run_config::flatten_configs;
use crate::store::{DiagnosticRow, MetricRow, RunRecord};
use std::collections::BTreeSet;

/// A panel of the figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Panel {
    /// Train and eval loss vs step.
    Loss,
    /// Every eval metric other than the loss vs step.
    Metric,
    /// Energy vs layer iteration at the last evaluation.
    Energy,
    /// Effective rank vs layer iteration at the last evaluation.
    Erank,
    /// Mean pairwise token angle vs layer iteration at the last evaluation.
    Angle,
    /// Headline eval metric at the last evaluation vs evaluation depth.
    Depth,
}

/// Panel names, in the order listed in messages.
pub const PANEL_NAMES: [&str; 6] = ["loss", "metric", "energy", "erank", "angle", "depth"];

impl Panel {
    /// The panel called `name`, if any.
    pub fn from_name(name: &str) -> Option<Panel> {
        Some(match name {
            "loss" => Panel::Loss,
            "metric" => Panel::Metric,
            "energy" => Panel::Energy,
            "erank" => Panel::Erank,
            "angle" => Panel::Angle,
            "depth" => Panel::Depth,
            _ => return None,
        })
    }
}

/// Parses a comma-separated panel list; an unknown name lists the valid ones.
pub fn parse_panels(list: &str) -> Result<Vec<Panel>, String> {
    let mut out = Vec::new();
    for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        match Panel::from_name(name) {
            Some(p) => out.push(p),
            None => return Err(format!("unknown panel `{name}`; valid panels: {}", PANEL_NAMES.join(", "))),
        }
    }
    if out.is_empty() {
        return Err(format!("no panels given; valid panels: {}", PANEL_NAMES.join(", ")));
    }
    Ok(out)
}

/// Parses a comma-separated list of run ids.
pub fn parse_run_ids(list: &str) -> Result<Vec<i64>, String> {
    let ids: Result<Vec<i64>, _> = list.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::parse).collect();
    match ids {
        Ok(ids) if !ids.is_empty() => Ok(ids),
        Ok(_) => Err("no run ids given (e.g. --runs 3,4,7)".into()),
        Err(_) => Err(format!("bad run id list `{list}`: expected comma-separated integers, e.g. 3,4,7")),
    }
}

/// Parses `WxH`.
pub fn parse_size(s: &str) -> Result<(u32, u32), String> {
    let bad = || format!("bad size `{s}`: expected WIDTHxHEIGHT, e.g. 1600x900");
    let (w, h) = s.split_once(['x', 'X']).ok_or_else(bad)?;
    let (w, h): (u32, u32) = (w.trim().parse().map_err(|_| bad())?, h.trim().parse().map_err(|_| bad())?);
    if !(64..=16384).contains(&w) || !(64..=16384).contains(&h) {
        return Err(format!("bad size `{s}`: each side must be between 64 and 16384 pixels"));
    }
    Ok((w, h))
}

/// One line of a panel.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// What the line is, within its run (e.g. `train loss`).
    pub label: String,
    /// `(x, y)` points, sorted by x; non-finite values are left out.
    pub points: Vec<(f64, f64)>,
    /// Drawn dashed with markers (evaluations) rather than solid.
    pub dashed: bool,
}

/// The lines of one run in an iteration panel, and the run's training depth.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct IterationData {
    pub series: Vec<Series>,
    /// Training depth (iterations), drawn as a vertical line.
    pub training_depth: Option<u32>,
}

fn sorted(mut points: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    points.retain(|(x, y)| x.is_finite() && y.is_finite());
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    points
}

fn metric_points(metrics: &[MetricRow], split: &str, name: &str) -> Vec<(f64, f64)> {
    sorted(metrics.iter().filter(|m| m.split == split && m.name == name).map(|m| (m.step as f64, m.value)).collect())
}

/// `loss`: train loss (solid) and eval loss (dashed) vs step.
pub fn loss_series(metrics: &[MetricRow]) -> Vec<Series> {
    [("train", false), ("eval", true)]
        .into_iter()
        .map(|(split, dashed)| Series {
            label: format!("{split} loss"),
            points: metric_points(metrics, split, "loss"),
            dashed,
        })
        .filter(|s| !s.points.is_empty())
        .collect()
}

/// The eval metric names at the training depth other than the loss, sorted.
pub fn eval_metric_names(metrics: &[MetricRow]) -> Vec<String> {
    let names: BTreeSet<&str> =
        metrics.iter().filter(|m| m.split == "eval" && m.name != "loss").map(|m| m.name.as_str()).collect();
    names.into_iter().map(String::from).collect()
}

/// `metric`: every eval metric other than the loss vs step.
pub fn metric_series(metrics: &[MetricRow]) -> Vec<Series> {
    eval_metric_names(metrics)
        .into_iter()
        .map(|name| Series { points: metric_points(metrics, "eval", &name), label: name, dashed: false })
        .filter(|s| !s.points.is_empty())
        .collect()
}

/// The headline metric: `cell_acc` if present, else the first eval metric other than the
/// loss, alphabetically.
pub fn headline_metric(metrics: &[MetricRow]) -> Option<String> {
    let names = eval_metric_names(metrics);
    if names.iter().any(|n| n == "cell_acc") {
        return Some("cell_acc".into());
    }
    names.into_iter().next()
}

/// Splits a diagnostic name into (depth K if prefixed `eval@K/`, base name).
fn split_depth(name: &str) -> (Option<u32>, &str) {
    if let Some(rest) = name.strip_prefix("eval@") {
        if let Some((k, base)) = rest.split_once('/') {
            if let Ok(k) = k.parse() {
                return (Some(k), base);
            }
        }
    }
    (None, name)
}

/// Points `(t, value)` and the training depth, if known.
pub type IterationCurve = (Vec<(f64, f64)>, Option<u32>);

/// The curve of diagnostic `base` vs iteration at the last evaluation step that recorded it,
/// at the deepest depth recorded (`eval@K/` rows when present), and the training depth (the
/// last iteration of the unprefixed rows).
pub fn iteration_curve(diagnostics: &[DiagnosticRow], base: &str) -> Option<IterationCurve> {
    let rows: Vec<(&DiagnosticRow, Option<u32>)> = diagnostics
        .iter()
        .filter_map(|d| {
            let (k, b) = split_depth(&d.name);
            (b == base).then_some((d, k))
        })
        .collect();
    let last = rows.iter().map(|(d, _)| d.step).max()?;
    let at_last: Vec<_> = rows.into_iter().filter(|(d, _)| d.step == last).collect();
    let training_depth = at_last.iter().filter(|(_, k)| k.is_none()).map(|(d, _)| d.iteration).max();
    let deepest = at_last.iter().filter_map(|(_, k)| *k).max();
    let points =
        sorted(at_last.iter().filter(|(_, k)| *k == deepest).map(|(d, _)| (d.iteration as f64, d.value)).collect());
    Some((points, training_depth))
}

fn iteration_data(diagnostics: &[DiagnosticRow], bases: &[&str]) -> IterationData {
    let mut out = IterationData::default();
    for base in bases {
        if let Some((points, depth)) = iteration_curve(diagnostics, base) {
            out.training_depth = out.training_depth.or(depth);
            if !points.is_empty() {
                out.series.push(Series { label: base.to_string(), points, dashed: false });
            }
        }
    }
    out
}

/// `energy`: `energy/total` first, then `energy/attention` and `energy/feedforward` (those the
/// layer records), vs iteration at the last evaluation, over the deepest depth recorded.
pub fn energy_data(diagnostics: &[DiagnosticRow]) -> IterationData {
    iteration_data(diagnostics, &["energy/total", "energy/attention", "energy/feedforward"])
}

/// `erank`: effective rank vs iteration at the last evaluation.
pub fn erank_data(diagnostics: &[DiagnosticRow]) -> IterationData {
    iteration_data(diagnostics, &["erank"])
}

/// `angle`: `angle/mean_arccos` vs iteration at the last evaluation.
pub fn angle_data(diagnostics: &[DiagnosticRow]) -> IterationData {
    iteration_data(diagnostics, &["angle/mean_arccos"])
}

/// `depth`: metric `name` at the last step it was evaluated vs evaluation depth (split
/// `eval` at `training_depth`, split `eval@K` at K).
pub fn depth_series(metrics: &[MetricRow], name: &str, training_depth: Option<u32>) -> Option<Series> {
    let depth_of = |split: &str| -> Option<f64> {
        if split == "eval" {
            training_depth.map(f64::from)
        } else {
            split.strip_prefix("eval@").and_then(|k| k.parse::<f64>().ok())
        }
    };
    let rows: Vec<&MetricRow> = metrics.iter().filter(|m| m.name == name && depth_of(&m.split).is_some()).collect();
    let last = rows.iter().map(|m| m.step).max()?;
    let points =
        sorted(rows.iter().filter(|m| m.step == last).map(|m| (depth_of(&m.split).unwrap(), m.value)).collect());
    (!points.is_empty()).then(|| Series { label: name.to_string(), points, dashed: false })
}

/// The training depth of a run: the layer's `iterations` in its configuration, else the last
/// iteration of the unprefixed diagnostics.
pub fn training_depth(config: &serde_json::Value, diagnostics: &[DiagnosticRow]) -> Option<u32> {
    config
        .get("layer_config")
        .and_then(|c| c.get("iterations"))
        .and_then(value_as_u32)
        .or_else(|| diagnostics.iter().filter(|d| split_depth(&d.name).0.is_none()).map(|d| d.iteration).max())
}

fn value_as_u32(v: &serde_json::Value) -> Option<u32> {
    if let Some(n) = v.as_u64() {
        return u32::try_from(n).ok();
    }
    // Tagged enum forms such as {"Int": 8}.
    v.as_object().and_then(|o| o.values().next()).and_then(|n| n.as_u64()).and_then(|n| u32::try_from(n).ok())
}

/// Legend entries `run N: layer (key=value ...)`, naming the configuration keys whose values
/// differ between the runs that have them (a key of one layer only, such as Hyper-SET's
/// `time_dim` next to a Transformer, is left out: the layer name already says it).
pub fn legend_labels(runs: &[(i64, String, serde_json::Value)]) -> Vec<String> {
    let flat = flatten_configs(&runs.iter().map(|(_, _, c)| c).collect::<Vec<_>>());
    let keys: BTreeSet<&String> = flat.iter().flat_map(|f| f.keys()).collect();
    let differing: Vec<&String> =
        keys.into_iter().filter(|k| flat.iter().filter_map(|f| f.get(*k)).collect::<BTreeSet<_>>().len() > 1).collect();
    runs.iter()
        .zip(&flat)
        .map(|((id, layer, _), f)| {
            let kv: Vec<String> = differing.iter().filter_map(|k| f.get(*k).map(|v| format!("{k}={v}"))).collect();
            if kv.is_empty() {
                format!("run {id}: {layer}")
            } else {
                format!("run {id}: {layer} ({})", kv.join(", "))
            }
        })
        .collect()
}

/// Legend entries for stored runs (the TUI's Compare screen and `workbench plot`): id, layer
/// (`hyperset@1a2b3c4` where compared runs of one plugin were made by different builds) and
/// the keys that differ.
pub fn run_legend(records: &[&RunRecord]) -> Vec<String> {
    let plugins: Vec<_> = records.iter().map(|r| (&r.layer, &r.task)).collect();
    let names = crate::host::build_id::legend_names(&plugins);
    let input: Vec<(i64, String, serde_json::Value)> =
        records.iter().zip(names).map(|(r, name)| (r.id, name, r.config.clone())).collect();
    legend_labels(&input)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn m(step: u64, split: &str, name: &str, value: f64) -> MetricRow {
        MetricRow { step, split: split.into(), name: name.into(), value, wall_time: 0.0 }
    }
    fn d(step: u64, iteration: u32, name: &str, value: f64) -> DiagnosticRow {
        DiagnosticRow { step, iteration, name: name.into(), value }
    }

    #[test]
    fn panels_parse_and_unknown_names_list_the_valid_ones() {
        assert_eq!(parse_panels("loss, depth").unwrap(), vec![Panel::Loss, Panel::Depth]);
        let e = parse_panels("loss,bogus").unwrap_err();
        assert!(e.contains("bogus") && e.contains("loss, metric, energy, erank, angle, depth"), "{e}");
        assert!(parse_panels("").is_err());
        assert_eq!(parse_run_ids("3,4,7").unwrap(), vec![3, 4, 7]);
        assert!(parse_run_ids("3,x").is_err());
        assert_eq!(parse_size("1600x900").unwrap(), (1600, 900));
        assert!(parse_size("1600").is_err() && parse_size("0x10").is_err());
    }

    #[test]
    fn loss_and_metric_series() {
        let rows = vec![
            m(2, "train", "loss", 2.0),
            m(1, "train", "loss", 2.2),
            m(2, "train", "lr", 1e-3),
            m(2, "eval", "loss", 2.1),
            m(2, "eval", "cell_acc", 0.2),
            m(2, "eval", "board_acc", 0.0),
            m(2, "eval@4", "cell_acc", 0.1),
            m(3, "train", "loss", f64::NAN),
        ];
        let loss = loss_series(&rows);
        assert_eq!(loss.len(), 2);
        assert_eq!(loss[0].points, vec![(1.0, 2.2), (2.0, 2.0)]);
        assert!(!loss[0].dashed && loss[1].dashed);
        assert_eq!(loss[1].points, vec![(2.0, 2.1)]);
        let metric = metric_series(&rows);
        assert_eq!(metric.iter().map(|s| s.label.as_str()).collect::<Vec<_>>(), ["board_acc", "cell_acc"]);
        assert_eq!(headline_metric(&rows).as_deref(), Some("cell_acc"));
        assert_eq!(headline_metric(&[m(1, "eval", "zeta", 1.0), m(1, "eval", "alpha", 1.0)]).as_deref(), Some("alpha"));
        assert_eq!(headline_metric(&[m(1, "eval", "loss", 1.0)]), None);
        assert!(loss_series(&[]).is_empty());
    }

    #[test]
    fn iteration_curves_use_the_last_step_and_deepest_depth() {
        let mut rows = Vec::new();
        for t in 0..=2 {
            rows.push(d(2, t, "energy/total", 10.0 - t as f64));
            rows.push(d(4, t, "energy/total", 5.0 - t as f64));
            rows.push(d(4, t, "energy/total/std", 0.1));
        }
        for t in 0..=4 {
            rows.push(d(4, t, "eval@4/energy/total", 5.0 - t as f64));
            rows.push(d(2, t, "eval@4/energy/total", 99.0));
        }
        let e = energy_data(&rows);
        assert_eq!(e.training_depth, Some(2));
        assert_eq!(e.series.len(), 1);
        assert_eq!(e.series[0].label, "energy/total");
        assert_eq!(e.series[0].points, (0..=4).map(|t| (t as f64, 5.0 - t as f64)).collect::<Vec<_>>());
        // Without eval@K rows: the training depth's curve.
        let only: Vec<_> = rows.iter().filter(|r| !r.name.starts_with("eval@")).cloned().collect();
        assert_eq!(energy_data(&only).series[0].points.len(), 3);
        // The parts too, after the total.
        let mut parts = vec![d(1, 0, "energy/attention", 1.0), d(1, 0, "energy/feedforward", 2.0)];
        let labels: Vec<_> = energy_data(&parts).series.into_iter().map(|s| s.label).collect();
        assert_eq!(labels, ["energy/attention", "energy/feedforward"]);
        parts.push(d(1, 0, "energy/total", 3.0));
        let labels: Vec<_> = energy_data(&parts).series.into_iter().map(|s| s.label).collect();
        assert_eq!(labels, ["energy/total", "energy/attention", "energy/feedforward"]);
        assert!(erank_data(&rows).series.is_empty() && angle_data(&[]).series.is_empty());
        let er = erank_data(&[d(1, 0, "erank", 3.0), d(1, 1, "erank", 2.0), d(1, 0, "erank/head0", 7.0)]);
        assert_eq!(er.series[0].points, vec![(0.0, 3.0), (1.0, 2.0)]);
        assert_eq!(angle_data(&[d(1, 0, "eval@8/angle/mean_arccos", 80.0)]).series[0].points, vec![(0.0, 80.0)]);
    }

    #[test]
    fn depth_series_puts_eval_at_the_training_depth() {
        let rows = vec![
            m(2, "eval", "cell_acc", 0.1),
            m(4, "eval", "cell_acc", 0.3),
            m(4, "eval@4", "cell_acc", 0.25),
            m(4, "eval@3", "cell_acc", 0.28),
            m(2, "eval@4", "cell_acc", 0.0),
        ];
        let s = depth_series(&rows, "cell_acc", Some(2)).unwrap();
        assert_eq!(s.points, vec![(2.0, 0.3), (3.0, 0.28), (4.0, 0.25)]);
        assert_eq!(depth_series(&rows, "cell_acc", None).unwrap().points, vec![(3.0, 0.28), (4.0, 0.25)]);
        assert!(depth_series(&rows, "board_acc", Some(2)).is_none());
    }

    #[test]
    fn legends_name_the_differing_keys() {
        let a = json!({"layer_config": {"d": 16, "iterations": 2, "init_std": 0.02}, "task_config": {"init_std": 0.02}, "train": {"steps": 4}});
        let b = json!({"layer_config": {"d": 32, "iterations": 2, "init_std": 0.02}, "task_config": {"init_std": 0.1}, "train": {"steps": 4}});
        let labels = legend_labels(&[(1, "hyperset".into(), a.clone()), (2, "transformer".into(), b)]);
        assert_eq!(
            labels,
            ["run 1: hyperset (d=16, task.init_std=0.02)", "run 2: transformer (d=32, task.init_std=0.1)"]
        );
        assert_eq!(legend_labels(&[(3, "hyperset".into(), a.clone())]), ["run 3: hyperset"]);
        // A key only one run has is not listed.
        let c = json!({"layer_config": {"d": 16, "iterations": 2, "init_std": 0.02, "time_dim": 8}, "task_config": {"init_std": 0.02}, "train": {"steps": 8}});
        let labels = legend_labels(&[(1, "hyperset".into(), a), (2, "hyperset".into(), c)]);
        assert_eq!(labels, ["run 1: hyperset (steps=4)", "run 2: hyperset (steps=8)"]);
        assert_eq!(training_depth(&json!({"layer_config": {"iterations": 8}}), &[]), Some(8));
        assert_eq!(training_depth(&json!({}), &[d(1, 3, "erank", 1.0), d(1, 6, "eval@6/erank", 1.0)]), Some(3));
    }
}
