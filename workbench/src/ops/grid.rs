//! Planning a grid of configurations: `key=a,b,c` lists and `key=lo:hi:logN` ranges over one
//! or several layer plugins, every point validated before anything is queued (`workbench
//! sweep` and the TUI's Launch form plan the same way; [`super::launch`] queues the result).

use crate::host::PluginHost;
use crate::run_config::{train_schema, RunConfig};
use anyhow::{anyhow, bail, Result};
use plugin_api::PluginKind;
use serde::{Deserialize, Serialize};

/// One swept key and its values, in declared order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Axis {
    pub key: String,
    pub values: Vec<String>,
}

/// Parses `key=a,b,c`, `key=lo:hi:logN` (N values spaced geometrically, both ends included)
/// or `key=lo:hi:linN` (spaced evenly); a single value is an axis of one.
pub fn parse_axis(arg: &str) -> Result<Axis> {
    let (key, spec) = arg
        .split_once('=')
        .ok_or_else(|| anyhow!("expected key=values, got `{arg}` (e.g. `heads=4,8` or `lr=1e-4:1e-3:log4`)"))?;
    let key = key.trim();
    if key.is_empty() {
        bail!("`{arg}`: the key is empty");
    }
    let values = if let Some(range) = parse_range(spec)? {
        range
    } else {
        spec.split(',').map(|v| v.trim().to_string()).collect()
    };
    if values.iter().any(|v| v.is_empty()) && values.len() > 1 {
        bail!("`{arg}`: an empty value in the list (write `a,b,c`)");
    }
    Ok(Axis { key: key.to_string(), values })
}

fn parse_range(spec: &str) -> Result<Option<Vec<String>>> {
    let parts: Vec<&str> = spec.split(':').collect();
    if parts.len() != 3 {
        return Ok(None);
    }
    let (lo, hi, how) = (parts[0].trim(), parts[1].trim(), parts[2].trim());
    let num = |s: &str| s.parse::<f64>().map_err(|_| anyhow!("range `{spec}`: `{s}` is not a number"));
    let (a, b) = (num(lo)?, num(hi)?);
    let (log, count) = if let Some(n) = how.strip_prefix("log") {
        (true, n)
    } else if let Some(n) = how.strip_prefix("lin") {
        (false, n)
    } else {
        bail!("range `{spec}`: the third part must be logN or linN (e.g. 1e-4:1e-3:log4)");
    };
    let n: usize = count.parse().map_err(|_| anyhow!("range `{spec}`: `{how}` needs a count, e.g. log4"))?;
    if n < 2 {
        bail!("range `{spec}`: give at least 2 points");
    }
    if log && (a <= 0.0 || b <= 0.0) {
        bail!("range `{spec}`: a log range needs positive ends");
    }
    let integers = !log && lo.parse::<i64>().is_ok() && hi.parse::<i64>().is_ok();
    let values = (0..n)
        .map(|i| {
            let f = i as f64 / (n - 1) as f64;
            let v = if log { (a.ln() + f * (b.ln() - a.ln())).exp() } else { a + f * (b - a) };
            if integers && (v - v.round()).abs() < 1e-9 {
                format!("{}", v.round() as i64)
            } else {
                format_float(v)
            }
        })
        .collect();
    Ok(Some(values))
}

/// Shortest text that reads back as `v` to 12 significant digits (`0.0001`, `0.00031623`).
fn format_float(v: f64) -> String {
    let rounded: f64 = format!("{v:.12e}").parse().unwrap_or(v);
    let text = format!("{rounded}");
    if text.len() > 12 {
        format!("{rounded:e}")
    } else {
        text
    }
}

/// The cartesian product of the axes, first axis slowest: each point is `(key, value)` pairs.
pub fn expand(axes: &[Axis]) -> Vec<Vec<(String, String)>> {
    let mut points: Vec<Vec<(String, String)>> = vec![vec![]];
    for axis in axes {
        points = points
            .into_iter()
            .flat_map(|p| {
                axis.values.iter().map(move |v| {
                    let mut q = p.clone();
                    q.push((axis.key.clone(), v.clone()));
                    q
                })
            })
            .collect();
    }
    points
}

/// One configuration of the sweep, validated.
#[derive(Debug, Clone)]
pub struct Point {
    pub layer: String,
    /// The overrides that apply to this layer (keys of other layers left out).
    pub overrides: Vec<String>,
    pub config: RunConfig,
}

/// The declared sweep, stored with it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Spec {
    pub layers: Vec<String>,
    pub task: String,
    pub axes: Vec<Axis>,
}

impl Spec {
    /// The name of a sweep not named otherwise, after the keys that vary:
    /// `hyperset,transformer on sudoku: lr x heads` (a key given one value is no dimension of
    /// the grid, and a file's fixed values would make the name endless).
    pub fn default_name(&self) -> String {
        let keys: Vec<&str> = self.axes.iter().filter(|a| a.values.len() > 1).map(|a| a.key.as_str()).collect();
        let plugins = format!("{} on {}", self.layers.join(","), self.task);
        if keys.is_empty() {
            plugins
        } else {
            format!("{plugins}: {}", keys.join(" x "))
        }
    }
}

/// Whether `key` (bare or prefixed) names a parameter of the layer, the task or the trainer.
fn applies(key: &str, layer: &plugin_api::Declaration, task: &plugin_api::Declaration) -> bool {
    let train = train_schema();
    let in_schema = |params: &[plugin_api::ParamSpec], bare: &str| params.iter().any(|p| p.name == bare);
    match key.split_once('.') {
        Some(("layer", k)) => in_schema(&layer.params, k),
        Some(("task", k)) => in_schema(&task.params, k),
        Some(("train", k)) => in_schema(&train, k),
        _ => in_schema(&layer.params, key) || in_schema(&task.params, key) || in_schema(&train, key),
    }
}

/// A free-text key (such as `eval_depths=1.5,2`) takes its commas as part of one value, not
/// as a list of values.
fn text_values_kept_whole(axis: &Axis, layers: &[&crate::host::LoadedPlugin], task: &plugin_api::Declaration) -> Axis {
    let bare = axis.key.rsplit('.').next().unwrap_or(&axis.key);
    let train = train_schema();
    let mut schemas: Vec<&[plugin_api::ParamSpec]> = layers.iter().map(|l| l.declaration.params.as_slice()).collect();
    schemas.push(&task.params);
    schemas.push(&train);
    let is_text =
        schemas.iter().flat_map(|s| s.iter()).any(|p| p.name == bare && matches!(p.kind, plugin_api::ParamKind::Text));
    if is_text && axis.values.len() > 1 {
        Axis { key: axis.key.clone(), values: vec![axis.values.join(",")] }
    } else {
        axis.clone()
    }
}

/// Expands the sweep for every layer and validates every point. A key that belongs to some
/// layers only is applied to those (so baselines join the same table); a key that belongs to
/// none, or any point the plugins refuse, refuses the whole sweep with every reason.
pub fn plan(host: &PluginHost, spec: &Spec) -> Result<Vec<Point>> {
    if spec.layers.is_empty() {
        bail!("give at least one layer (--layer hyperset,transformer)");
    }
    let task = host.get(&spec.task, PluginKind::Task)?;
    let mut layers = Vec::new();
    for name in &spec.layers {
        layers.push(host.get(name, PluginKind::Layer)?);
    }
    let axes: Vec<Axis> = spec.axes.iter().map(|a| text_values_kept_whole(a, &layers, &task.declaration)).collect();
    for axis in &axes {
        if !layers.iter().any(|l| applies(&axis.key, &l.declaration, &task.declaration)) {
            let train = crate::run_config::train_schema();
            let names = layers
                .iter()
                .flat_map(|l| l.declaration.params.iter())
                .chain(&task.declaration.params)
                .chain(&train)
                .map(|p| p.name.as_str());
            let suggestion = crate::run_config::did_you_mean(&axis.key, names)
                .map(|names| format!(" (did you mean {names}?)"))
                .unwrap_or_default();
            bail!(
                "`{}` is not a key of {} or of task `{}` or of the trainer{suggestion}; `workbench plugins` lists the keys",
                axis.key,
                spec.layers.join(", "),
                spec.task
            );
        }
    }
    let mut points = Vec::new();
    let mut errors = Vec::new();
    for layer in &layers {
        let mut seen: Vec<Vec<String>> = Vec::new();
        for grid_point in expand(&axes) {
            let overrides: Vec<String> = grid_point
                .iter()
                .filter(|(k, _)| applies(k, &layer.declaration, &task.declaration))
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            if seen.contains(&overrides) {
                continue; // differs only in keys this layer does not have
            }
            seen.push(overrides.clone());
            match RunConfig::resolve(&layer.declaration, &task.declaration, &overrides) {
                Ok(config) => points.push(Point { layer: layer.declaration.name.clone(), overrides, config }),
                Err(e) => errors.push(format!("  {} {}: {e:#}", layer.declaration.name, overrides.join(" "))),
            }
        }
    }
    if !errors.is_empty() {
        bail!("{} of the sweep's points are invalid; nothing was queued:\n{}", errors.len(), errors.join("\n"));
    }
    Ok(points)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_ranges() {
        assert_eq!(parse_axis("heads=4,8").unwrap().values, vec!["4", "8"]);
        let lr: Vec<f64> = parse_axis("lr=1e-4:1e-3:log4").unwrap().values.iter().map(|v| v.parse().unwrap()).collect();
        let want = [1e-4, 1e-4 * 10f64.powf(1.0 / 3.0), 1e-4 * 10f64.powf(2.0 / 3.0), 1e-3];
        assert_eq!(lr.len(), want.len(), "{lr:?}");
        assert!(lr.iter().zip(want).all(|(a, b)| (a / b - 1.0).abs() < 1e-9), "{lr:?}");
        assert_eq!(parse_axis("iterations=2:8:lin4").unwrap().values, vec!["2", "4", "6", "8"]);
        assert_eq!(parse_axis("x=0:1:lin3").unwrap().values, vec!["0", "0.5", "1"]);
        assert_eq!(parse_axis("seed=3").unwrap().values, vec!["3"]);
        for bad in ["novalue", "=3", "lr=1:2:exp4", "lr=0:1:log3", "lr=1:2:lin1", "a=1,,2", "lr=x:1:lin2"] {
            assert!(parse_axis(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn the_default_name_lists_the_keys_that_vary() {
        let spec = |axes: &[&str]| Spec {
            layers: vec!["hyperset".into(), "transformer".into()],
            task: "sudoku".into(),
            axes: axes.iter().map(|a| parse_axis(a).unwrap()).collect(),
        };
        assert_eq!(
            spec(&["d=32", "lr=1e-3,3e-3", "steps=20", "seed=0,1"]).default_name(),
            "hyperset,transformer on sudoku: lr x seed"
        );
        assert_eq!(spec(&["d=32"]).default_name(), "hyperset,transformer on sudoku");
        assert_eq!(spec(&[]).default_name(), "hyperset,transformer on sudoku");
    }

    #[test]
    fn expansion_is_cartesian_with_the_first_axis_slowest() {
        let axes = [parse_axis("a=1,2").unwrap(), parse_axis("b=x,y,z").unwrap()];
        let points = expand(&axes);
        assert_eq!(points.len(), 6);
        let text: Vec<String> = points.iter().map(|p| p.iter().map(|(k, v)| format!("{k}{v}")).collect()).collect();
        assert_eq!(text, vec!["a1bx", "a1by", "a1bz", "a2bx", "a2by", "a2bz"]);
        assert_eq!(expand(&[]), vec![Vec::<(String, String)>::new()]);
    }
}
