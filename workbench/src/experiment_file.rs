//! Experiment files: a run or a sweep written down in TOML instead of on the command line.
//!
//! ```toml
//! [layer]
//! plugin = "hyperset"
//! d = 64
//! [task]
//! plugin = "sudoku"
//! [train]
//! lr = 3e-3
//! [sweep]
//! name = "heads and lr"
//! seeds = [0, 1, 2]
//! layer.heads = [4, 8]
//! lr = "1e-4:1e-3:log4"
//! ```
//!
//! A file becomes the same prefixed overrides (`layer.d=64`) and sweep axes the command line
//! takes, so it is checked by exactly the same code (`RunConfig::resolve`, `grid::plan`).
//! Several files compose, later ones winning; the command line wins over all of them.

use crate::ops::grid::{parse_axis, Axis, Spec};
use crate::run_config::RunConfig;
use anyhow::{anyhow, bail, Context, Result};
use std::path::{Path, PathBuf};

/// The tables a file may hold.
const TABLES: &str = "[layer], [task], [train] and [sweep]";

/// What one or more experiment files declare.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Experiment {
    /// `[layer] plugin`: one name, or several (comma-joined) for a sweep over layers.
    pub layer: Option<String>,
    /// `[task] plugin`.
    pub task: Option<String>,
    /// Fixed values as `scope.key=value`, in file order.
    pub overrides: Vec<String>,
    /// `[sweep]` axes (`seeds` becomes `train.seed`).
    pub axes: Vec<Axis>,
    /// `[sweep] name`.
    pub name: Option<String>,
    /// The files read, for messages.
    pub files: Vec<PathBuf>,
}

impl Experiment {
    /// Reads and composes `paths` in order: a later file's plugin, value or axis replaces an
    /// earlier one's.
    pub fn load(paths: &[PathBuf]) -> Result<Experiment> {
        let mut composed = Experiment::default();
        for path in paths {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read the experiment file {}", path.display()))?;
            composed.merge(parse(&text, path)?);
        }
        Ok(composed)
    }

    fn merge(&mut self, later: Experiment) {
        self.layer = later.layer.or(self.layer.take());
        self.task = later.task.or(self.task.take());
        self.name = later.name.or(self.name.take());
        // A later file's fixed value replaces an earlier value or axis of the same key, and
        // a later axis an earlier axis or value.
        for o in later.overrides {
            let key = override_key(&o).to_string();
            self.overrides.retain(|e| !same_key(override_key(e), &key));
            self.axes.retain(|a| !same_key(&a.key, &key));
            self.overrides.push(o);
        }
        for axis in later.axes {
            self.overrides.retain(|e| !same_key(override_key(e), &axis.key));
            self.axes.retain(|a| !same_key(&a.key, &axis.key));
            self.axes.push(axis);
        }
        self.files.extend(later.files);
    }

    /// The files, for messages: `a.toml, b.toml`.
    pub fn describe_files(&self) -> String {
        self.files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>().join(", ")
    }

    /// The layer and task for `train`: an explicit command-line name wins, then the files,
    /// then the defaults. A list of layers is refused: one run has one layer.
    pub fn train_plugins(&self, layer: Option<&str>, task: Option<&str>) -> Result<(String, String)> {
        if !self.axes.is_empty() {
            bail!(
                "{}: the [sweep] table declares several runs; `workbench train` runs one: start it with \
                 `workbench sweep --config ...`, or remove the [sweep] table",
                self.describe_files()
            );
        }
        let layer = layer.map(str::to_string).or(self.layer.clone()).unwrap_or_else(|| DEFAULT_LAYER.into());
        if layer.contains(',') {
            bail!(
                "{}: [layer] plugin lists several layers ({layer}); `workbench train` runs one: name one, \
                 or use `workbench sweep`",
                self.describe_files()
            );
        }
        let task = task.map(str::to_string).or(self.task.clone()).unwrap_or_else(|| DEFAULT_TASK.into());
        Ok((layer, task))
    }

    /// The overrides for `train`: the files' values, then the command line's (which win).
    pub fn train_overrides(&self, command_line: &[String]) -> Vec<String> {
        self.overrides.iter().chain(command_line).cloned().collect()
    }

    /// The sweep `workbench sweep` plans: explicit `--layer` / `--task` win over the files'
    /// plugins, which win over the defaults; axes as [`Experiment::sweep_axes`].
    pub fn sweep_spec(&self, layers: Option<&str>, task: Option<&str>, command_line: &[String]) -> Result<Spec> {
        let layers = layers.map(str::to_string).or(self.layer.clone()).unwrap_or_else(|| DEFAULT_LAYER.into());
        Ok(Spec {
            layers: layers.split(',').map(|l| l.trim().to_string()).filter(|l| !l.is_empty()).collect(),
            task: task.map(str::to_string).or(self.task.clone()).unwrap_or_else(|| DEFAULT_TASK.into()),
            axes: self.sweep_axes(command_line)?,
        })
    }

    /// The sweep's axes: the files' fixed values (an axis of one value each), their `[sweep]`
    /// axes, then the command line's axes; a later axis of the same key replaces an earlier.
    pub fn sweep_axes(&self, command_line: &[String]) -> Result<Vec<Axis>> {
        let mut axes: Vec<Axis> = Vec::new();
        let fixed = self.overrides.iter().map(|o| {
            let (key, value) = o.split_once('=').unwrap_or((o, ""));
            Ok::<_, anyhow::Error>(Axis { key: key.to_string(), values: vec![value.to_string()] })
        });
        let given = command_line.iter().map(|a| parse_axis(a));
        for axis in fixed.chain(self.axes.iter().cloned().map(Ok)).chain(given) {
            let axis: Axis = axis?;
            axes.retain(|a| !same_key(&a.key, &axis.key));
            axes.push(axis);
        }
        Ok(axes)
    }
}

/// The plugins `train` and `sweep` use when neither a flag nor a file names one.
pub const DEFAULT_LAYER: &str = "hyperset";
pub const DEFAULT_TASK: &str = "sudoku";

fn override_key(o: &str) -> &str {
    o.split_once('=').map_or(o, |(k, _)| k)
}

/// Whether two keys name the same parameter: equal, or one bare and the other's key part
/// (`lr` and `train.lr`). Anything still ambiguous is refused later by `RunConfig::resolve`.
fn same_key(a: &str, b: &str) -> bool {
    let bare = |k: &str| k.split_once('.').map_or(k, |(_, rest)| rest).to_string();
    a == b || (!a.contains('.') && a == bare(b)) || (!b.contains('.') && b == bare(a))
}

/// Parses one file's text; `path` names it in errors.
pub fn parse(text: &str, path: &Path) -> Result<Experiment> {
    let file = path.display();
    let table: toml::Table = text.parse().map_err(|e| anyhow!("{file} is not valid TOML: {e}"))?;
    let mut exp = Experiment { files: vec![path.to_path_buf()], ..Default::default() };
    for (name, value) in &table {
        let toml::Value::Table(body) = value else {
            bail!("{file}: `{name}` is outside any table; put it under {TABLES} (e.g. `[train]` then `{name} = ...`)");
        };
        match name.as_str() {
            "layer" | "task" | "train" => {
                for (key, value) in body {
                    if key == "plugin" && name != "train" {
                        let plugin = plugin_names(value).ok_or_else(|| {
                            anyhow!("{file}: [{name}] plugin must be a plugin name, e.g. \"hyperset\"")
                        })?;
                        if name == "layer" {
                            exp.layer = Some(plugin);
                        } else if plugin.contains(',') {
                            bail!("{file}: [task] plugin must name one task");
                        } else {
                            exp.task = Some(plugin);
                        }
                        continue;
                    }
                    let text = scalar_text(value).map_err(|what| {
                        anyhow!(
                            "{file}: [{name}] {key}: {what} cannot be a value here; give one value \
                             (several values to sweep go under [sweep], e.g. `{name}.{key} = [1, 2]`)"
                        )
                    })?;
                    exp.overrides.push(format!("{name}.{key}={text}"));
                }
            }
            "sweep" => parse_sweep(body, &file.to_string(), &mut exp)?,
            other => bail!("{file}: unknown table [{other}]; an experiment file has {TABLES}"),
        }
    }
    Ok(exp)
}

/// `[sweep]`: `name`, `seeds`, and axes, bare (`lr = ...`) or scoped (`layer.heads = ...`).
fn parse_sweep(body: &toml::Table, file: &str, exp: &mut Experiment) -> Result<()> {
    for (key, value) in body {
        match (key.as_str(), value) {
            ("name", toml::Value::String(name)) => exp.name = Some(name.clone()),
            ("name", _) => bail!("{file}: [sweep] name must be a string"),
            ("seeds", v) => exp.axes.push(axis(file, "seeds", "train.seed", v)?),
            (scope @ ("layer" | "task" | "train"), toml::Value::Table(keys)) => {
                for (k, v) in keys {
                    let shown = format!("{scope}.{k}");
                    exp.axes.push(axis(file, &shown, &shown, v)?);
                }
            }
            (_, toml::Value::Table(_)) => {
                bail!("{file}: [sweep] {key}: a table here must be layer, task or train (e.g. `layer.heads = [4, 8]`)")
            }
            (_, v) => exp.axes.push(axis(file, key, key, v)?),
        }
    }
    Ok(())
}

/// One sweep axis: an array of values, or a string in the command line's syntax
/// (`a,b,c`, `lo:hi:logN`, `lo:hi:linN`), or a single value.
fn axis(file: &str, shown: &str, key: &str, value: &toml::Value) -> Result<Axis> {
    let bad = |what: String| {
        anyhow!(
            "{file}: [sweep] {shown}: {what}; give an array of values (`[1, 2]`) or a string such as \
             \"1,2\" or \"1e-4:1e-3:log4\""
        )
    };
    match value {
        toml::Value::Array(items) => {
            if items.is_empty() {
                return Err(bad("the array is empty".into()));
            }
            let values = items
                .iter()
                .map(|v| scalar_text(v).map_err(|what| bad(format!("{what} cannot be a value"))))
                .collect::<Result<Vec<_>>>()?;
            Ok(Axis { key: key.to_string(), values })
        }
        toml::Value::String(s) => parse_axis(&format!("{key}={s}")).map_err(|e| bad(format!("{e:#}"))),
        other => {
            let text = scalar_text(other).map_err(|what| bad(format!("{what} cannot be a value")))?;
            Ok(Axis { key: key.to_string(), values: vec![text] })
        }
    }
}

/// `plugin = "name"` or, for layers, `plugin = ["a", "b"]` (comma-joined).
fn plugin_names(value: &toml::Value) -> Option<String> {
    match value {
        toml::Value::String(s) if !s.trim().is_empty() => Some(s.trim().to_string()),
        toml::Value::Array(items) if !items.is_empty() => {
            let names: Option<Vec<&str>> = items.iter().map(|v| v.as_str()).collect();
            Some(names?.join(","))
        }
        _ => None,
    }
}

/// A scalar as the text an override carries; floats keep every bit (`{:?}` is the shortest
/// text that reads back as the same number). Err names what the value is instead.
fn scalar_text(value: &toml::Value) -> std::result::Result<String, &'static str> {
    match value {
        toml::Value::String(s) => Ok(s.clone()),
        toml::Value::Integer(i) => Ok(i.to_string()),
        toml::Value::Float(x) => Ok(format!("{x:?}")),
        toml::Value::Boolean(b) => Ok(b.to_string()),
        toml::Value::Datetime(_) => Err("a date"),
        toml::Value::Array(_) => Err("an array"),
        toml::Value::Table(_) => Err("a table"),
    }
}

/// What a written experiment file holds: plugins, fixed values per table, sweep axes.
#[derive(Debug, Clone, Default)]
pub struct Document {
    /// Comment lines at the top.
    pub header: Vec<String>,
    pub layer: String,
    pub task: String,
    /// Fixed values of `[layer]`, `[task]` and `[train]`, in that order.
    pub values: [Vec<(String, plugin_api::Value)>; 3],
    /// `[sweep]` axes: `seeds` or a prefixed key (`layer.heads`), with their values.
    pub sweep: Vec<(String, Vec<plugin_api::Value>)>,
}

impl Document {
    /// A file that reproduces `config`: its plugins and every stored value, typed as stored.
    pub fn of_run(config: &RunConfig, header: Vec<String>) -> Document {
        let values = [&config.layer_config, &config.task_config, &config.train]
            .map(|c| c.0.iter().map(|(k, v)| (k.clone(), v.clone())).collect());
        Document { header, layer: config.layer.clone(), task: config.task.clone(), values, sweep: Vec::new() }
    }

    /// The TOML text.
    pub fn to_toml(&self) -> String {
        let mut out: String = self.header.iter().map(|h| format!("# {h}\n")).collect();
        let tables = [("layer", Some(&self.layer)), ("task", Some(&self.task)), ("train", None)];
        for ((table, plugin), values) in tables.into_iter().zip(&self.values) {
            if plugin.is_none() && values.is_empty() {
                continue;
            }
            out.push_str(&format!("\n[{table}]\n"));
            if let Some(plugin) = plugin {
                out.push_str(&format!("plugin = {}\n", toml::Value::String(plugin.clone())));
            }
            for (key, value) in values {
                out.push_str(&format!("{} = {}\n", toml_key(key), toml_value(value)));
            }
        }
        if !self.sweep.is_empty() {
            out.push_str("\n[sweep]\n");
            for (key, values) in &self.sweep {
                let key: Vec<String> = key.split('.').map(toml_key).collect();
                let array = toml::Value::Array(values.iter().map(toml_value).collect());
                out.push_str(&format!("{} = {array}\n", key.join(".")));
            }
        }
        out
    }
}

/// A file that reproduces `config`: its plugins and every stored value, typed as stored.
/// `header` lines become comments at the top.
pub fn to_toml(config: &RunConfig, header: &[String]) -> String {
    Document::of_run(config, header.to_vec()).to_toml()
}

fn toml_value(value: &plugin_api::Value) -> toml::Value {
    match value {
        plugin_api::Value::Bool(b) => toml::Value::Boolean(*b),
        plugin_api::Value::Int(i) => toml::Value::Integer(*i),
        plugin_api::Value::Float(x) => toml::Value::Float(*x),
        plugin_api::Value::Str(s) => toml::Value::String(s.clone()),
    }
}

/// A key bare when TOML allows it, quoted otherwise.
fn toml_key(key: &str) -> String {
    if !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
        key.to_string()
    } else {
        toml::Value::String(key.to_string()).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use plugin_api::{Config, Value};

    fn parse_str(text: &str) -> Result<Experiment> {
        parse(text, Path::new("exp.toml"))
    }

    #[test]
    fn tables_become_prefixed_overrides_and_axes() {
        let exp = parse_str(
            "[layer]\nplugin = \"transformer\"\nd = 64\ninit_std = 0.15\n[task]\nplugin = \"sudoku\"\n\
             difficulty = \"easy\"\n[train]\ncheckpoint = false\nlr = 3e-3\n\
             [sweep]\nname = \"s\"\nseeds = [0, 1]\nlayer.heads = [4, 8]\nlr = \"1e-4:1e-3:log2\"\nsteps = \"10,20\"\n",
        )
        .unwrap();
        assert_eq!(exp.layer.as_deref(), Some("transformer"));
        assert_eq!(exp.task.as_deref(), Some("sudoku"));
        assert_eq!(exp.name.as_deref(), Some("s"));
        assert_eq!(
            exp.overrides,
            ["layer.d=64", "layer.init_std=0.15", "task.difficulty=easy", "train.checkpoint=false", "train.lr=0.003"]
        );
        // In the order written: the first axis varies slowest.
        let axes: Vec<(&str, Vec<&str>)> =
            exp.axes.iter().map(|a| (a.key.as_str(), a.values.iter().map(String::as_str).collect())).collect();
        assert_eq!(
            axes,
            [
                ("train.seed", vec!["0", "1"]),
                ("layer.heads", vec!["4", "8"]),
                ("lr", vec!["0.0001", "0.001"]),
                ("steps", vec!["10", "20"])
            ]
        );
    }

    #[test]
    fn bad_files_name_the_file_table_and_key() {
        for (text, expected) in [
            ("[model]\nd = 3\n", "unknown table [model]"),
            ("d = 3\n", "`d` is outside any table"),
            ("[layer]\nheads = [4, 8]\n", "[layer] heads: an array"),
            ("[train]\nlr = { a = 1 }\n", "[train] lr: a table"),
            ("[layer]\nplugin = 3\n", "[layer] plugin must be"),
            ("[sweep]\nheads = []\n", "[sweep] heads: the array is empty"),
            ("[sweep]\nlr = \"1:2:exp4\"\n", "[sweep] lr:"),
            ("[sweep]\nmodel.heads = [1]\n", "[sweep] model"),
            ("[train\n", "not valid TOML"),
        ] {
            let e = format!("{:#}", parse_str(text).unwrap_err());
            assert!(e.contains("exp.toml") && e.contains(expected), "{text:?}: {e}");
        }
    }

    #[test]
    fn later_files_and_the_command_line_win() {
        let first = "[layer]\nplugin = \"hyperset\"\nd = 32\n[train]\nlr = 0.1\nsteps = 5\n\
                     [sweep]\nheads = [1, 2]\nseeds = [0, 1]\n";
        let mut a = parse_str(first).unwrap();
        a.merge(parse_str("[layer]\nd = 64\n[train]\nseed = 3\n[sweep]\nlayer.heads = [4]\nsteps = [6, 7]\n").unwrap());
        assert_eq!(a.layer.as_deref(), Some("hyperset"));
        // The later fixed seed replaces the earlier seeds axis, the later steps axis the
        // earlier fixed steps.
        assert_eq!(a.overrides, ["train.lr=0.1", "layer.d=64", "train.seed=3"]);
        let keys: Vec<&str> = a.axes.iter().map(|x| x.key.as_str()).collect();
        assert_eq!(keys, ["layer.heads", "steps"]);
        assert_eq!(a.axes[0].values, ["4"]);
        let axes = a.sweep_axes(&["d=8,16".into()]).unwrap();
        let keys: Vec<&str> = axes.iter().map(|x| x.key.as_str()).collect();
        assert_eq!(keys, ["train.lr", "train.seed", "layer.heads", "steps", "d"]);
        assert_eq!(a.train_overrides(&["lr=0.2".into()]).last().unwrap(), "lr=0.2");
        assert!(a.train_plugins(None, None).is_err(), "a [sweep] table is refused by train");
        a.axes.clear();
        assert_eq!(a.train_plugins(Some("transformer"), None).unwrap(), ("transformer".into(), "sudoku".into()));
    }

    #[test]
    fn a_printed_configuration_reads_back_bit_for_bit() {
        let mut layer = Config::default();
        layer.set("lr_scale", Value::Float(0.1 + 0.2));
        layer.set("heads", Value::Int(4));
        layer.set("attention", Value::Str("softmax".into()));
        let mut train = Config::default();
        train.set("tiny", Value::Float(1e-300));
        train.set("checkpoint", Value::Bool(false));
        let config = RunConfig {
            layer: "hyperset".into(),
            task: "sudoku".into(),
            layer_config: layer,
            task_config: Config::default(),
            train,
            evaluates: None,
        };
        let text = to_toml(&config, &["run 1".into()]);
        assert!(text.starts_with("# run 1\n"), "{text}");
        let exp = parse_str(&text).unwrap();
        assert_eq!(exp.layer.as_deref(), Some("hyperset"));
        let lr = exp.overrides.iter().find_map(|o| o.strip_prefix("layer.lr_scale=")).unwrap();
        assert_eq!(lr.parse::<f64>().unwrap().to_bits(), (0.1f64 + 0.2).to_bits());
        let tiny = exp.overrides.iter().find_map(|o| o.strip_prefix("train.tiny=")).unwrap();
        assert_eq!(tiny.parse::<f64>().unwrap(), 1e-300);
        assert!(exp.overrides.contains(&"train.checkpoint=false".to_string()));
    }
}
