//! A run's full configuration: layer, task and training hyperparameters, resolved from
//! `key=value` overrides and validated against the schemas before anything is stored.

use anyhow::{anyhow, bail, Context, Result};
use plugin_api::{Config, Declaration, ParamSpec};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Hyperparameters owned by the trainer rather than a plugin.
pub fn train_schema() -> Vec<ParamSpec> {
    vec![
        ParamSpec::int("steps", 600, 1, 1_000_000_000, "optimisation steps"),
        ParamSpec::int("batch_size", 16, 1, 65_536, "training examples per step"),
        ParamSpec::float("lr", 1e-3, 0.0, 10.0, "peak learning rate (AdamW)"),
        ParamSpec::float("min_lr", 1e-5, 0.0, 10.0, "learning rate at the end of the cosine decay"),
        ParamSpec::int("warmup", 50, 0, 1_000_000_000, "linear warm-up steps"),
        ParamSpec::float("weight_decay", 0.1, 0.0, 10.0, "AdamW decoupled weight decay"),
        ParamSpec::float("beta1", 0.9, 0.0, 1.0, "AdamW first-moment decay"),
        ParamSpec::float("beta2", 0.95, 0.0, 1.0, "AdamW second-moment decay"),
        ParamSpec::float("grad_clip", 1.0, 0.0, 1e9, "clip the global gradient norm to this value (0: off)"),
        ParamSpec::int("eval_every", 100, 1, 1_000_000_000, "evaluate (and checkpoint) every N steps and at the end"),
        ParamSpec::int("eval_examples", 256, 1, 100_000_000, "evaluation examples used at each evaluation"),
        ParamSpec::int("eval_batch", 64, 1, 65_536, "evaluation batch size"),
        ParamSpec::text(
            "eval_depths",
            "2",
            "extra evaluation depths as multiples of the training iterations (comma list, e.g. 1.5,2)",
        ),
        ParamSpec::int("seed", 0, 0, i64::MAX, "seed of initialisation and data"),
        ParamSpec::text("device", "cpu", "cpu, or cuda:K (needs a build with --features cuda)"),
        ParamSpec::int(
            "threads",
            0,
            0,
            // Each shard is a thread of its own: thousands fail to spawn.
            256,
            "CPU threads: each batch is split into this many shards trained in parallel (0: one per core)",
        ),
        ParamSpec::bool("checkpoint", true, "save a safetensors checkpoint at each evaluation"),
        ParamSpec::int(
            "init_from",
            0,
            0,
            i64::MAX,
            "a stored run whose checkpoint's parameters start this run (fine-tuning; its optimiser state \
             is not taken); 0: a fresh initialisation from the seed",
        ),
        ParamSpec::int(
            "sphere_head",
            0,
            0,
            4096,
            "head whose token trajectories each evaluation records (sphere panels, plot --sphere)",
        ),
        ParamSpec::int("sphere_tokens", 8, 1, 64, "tokens (the first ones) whose trajectories each evaluation records"),
    ]
}

/// Names, plugin configs and trainer config of one run; stored as JSON in `runs.config`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunConfig {
    /// Layer plugin name.
    pub layer: String,
    /// Task plugin name.
    pub task: String,
    /// Validated layer hyperparameters.
    pub layer_config: Config,
    /// Validated task hyperparameters.
    pub task_config: Config,
    /// Validated trainer hyperparameters.
    pub train: Config,
    /// The run whose checkpoint this run scores instead of training (`workbench eval`): its
    /// worker evaluates those parameters with these settings. Never an override: only `eval`
    /// sets it, after checking that the checkpoint fits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evaluates: Option<i64>,
}

/// The three namespaces an override can address (and the Launch form's fields belong to).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Scope {
    Layer,
    Task,
    Train,
}

impl Scope {
    /// The key prefix that addresses it: `layer`, `task` or `train`.
    pub fn prefix(self) -> &'static str {
        match self {
            Scope::Layer => "layer",
            Scope::Task => "task",
            Scope::Train => "train",
        }
    }
}

/// `key` as its scope prefix (`layer`, `task` or `train`, if it starts with one and a dot)
/// and the bare key after it.
pub fn split_scope(key: &str) -> (Option<&str>, &str) {
    match key.split_once('.') {
        Some((s, k)) if [Scope::Layer, Scope::Task, Scope::Train].iter().any(|scope| scope.prefix() == s) => {
            (Some(s), k)
        }
        _ => (None, key),
    }
}

impl RunConfig {
    /// Defaults of both plugins and the trainer, with `overrides` (`key=value`, where key may
    /// be prefixed `layer.`, `task.` or `train.`) applied and checked.
    pub fn resolve(layer: &Declaration, task: &Declaration, overrides: &[String]) -> Result<Self> {
        let train_params = train_schema();
        let schemas = [(Scope::Layer, &layer.params), (Scope::Task, &task.params), (Scope::Train, &train_params)];
        let mut configs =
            [Config::defaults(&layer.params), Config::defaults(&task.params), Config::defaults(&train_params)];
        for raw in overrides {
            let (key, value) = raw
                .split_once('=')
                .ok_or_else(|| anyhow!("expected key=value, got `{raw}` (e.g. `d=64` or `layer.heads=8`)"))?;
            let key = key.trim();
            let (scope_name, bare) = split_scope(key);
            let matches: Vec<(usize, &ParamSpec)> = schemas
                .iter()
                .enumerate()
                .filter(|(_, (scope, _))| scope_name.is_none_or(|s| s == scope.prefix()))
                .filter_map(|(i, (_, params))| params.iter().find(|p| p.name == bare).map(|p| (i, p)))
                .collect();
            let (index, spec) = match matches.as_slice() {
                [one] => *one,
                [] => {
                    // The whole list is long (every plugin's keys); shown only under -v.
                    tracing::debug!("valid keys:\n{}", describe_keys(&schemas));
                    bail!("{}", unknown_key(key, scope_name, &schemas))
                }
                many => bail!(
                    "key `{bare}` exists in several places; write one of: {}",
                    many.iter()
                        .map(|(i, _)| format!("{}.{bare}", schemas[*i].0.prefix()))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            let parsed = spec.parse(value).map_err(|e| match looks_like_sweep_axis(value) {
                true => anyhow!(
                    "`{key}={value}`: a list or range of values makes a sweep, one run per value: \
                     `workbench sweep ... {key}={value}`; `train` takes one value"
                ),
                false => anyhow!("`{key}={value}`: {e}"),
            })?;
            configs[index].set(&spec.name, parsed);
        }
        let [layer_config, task_config, train] = configs;
        layer.validate(&layer_config).map_err(|e| anyhow!("layer `{}`: {e}", layer.name))?;
        task.validate(&task_config).map_err(|e| anyhow!("task `{}`: {e}", task.name))?;
        if task.needs_causal(&task_config) && !layer.masks_causally() {
            bail!(
                "layer `{}` cannot run causally (it has no causal mask), and task `{}` needs a causal layer \
                 with this configuration: choose a layer with a causal mask (the transformer has one) or a \
                 non-causal task",
                layer.name,
                task.name
            );
        }
        let (layer_name, task_name) = (layer.name.clone(), task.name.clone());
        let run = RunConfig { layer: layer_name, task: task_name, layer_config, task_config, train, evaluates: None };
        run.settings().context("invalid training settings")?;
        Ok(run)
    }

    /// The trainer settings as typed values; keys a stored configuration lacks (it predates
    /// them) take their defaults, as plugin keys do (`Config::with_defaults`).
    pub fn settings(&self) -> Result<TrainSettings> {
        TrainSettings::from_config(&self.train.with_defaults(&train_schema()))
    }

    /// JSON form stored in the run database.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }

    /// Reads the stored JSON form back.
    pub fn from_json(value: &serde_json::Value) -> Result<Self> {
        serde_json::from_value(value.clone()).context("the stored run configuration is not readable")
    }
}

/// `unknown key`, with the known keys it most likely means, and where the full list is.
fn unknown_key(key: &str, scope: Option<&str>, schemas: &[(Scope, &Vec<ParamSpec>); 3]) -> String {
    let names = schemas
        .iter()
        .filter(|(s, _)| scope.is_none_or(|name| name == s.prefix()))
        .flat_map(|(_, params)| params.iter().map(|p| p.name.as_str()));
    let hint = "`workbench plugins` lists each plugin's keys, -v every key";
    match did_you_mean(key, names) {
        Some(suggestion) => format!("unknown key `{key}`: did you mean {suggestion}? ({hint})"),
        None => format!("unknown key `{key}` ({hint})"),
    }
}

/// The name among `names` that `key` most likely misspells: at most a third of its letters
/// (and at least one) added, removed, changed or swapped.
pub fn closest_key<'a>(key: &str, names: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    names
        .map(|name| (strsim::damerau_levenshtein(key, name), name))
        .filter(|(distance, name)| *distance <= (name.len() / 3).max(1))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, name)| name)
}

/// At most this many keys are offered for a word that several keys contain.
const MAX_SUGGESTIONS: usize = 4;

/// The keys among `names` that `key` most likely means: the one it misspells
/// ([`closest_key`]), else those that have it as one of their `_`-separated words (`batch`:
/// `batch_size`, `eval_batch`), at most [`MAX_SUGGESTIONS`], in order of name.
fn suggested_keys<'a>(key: &str, names: impl Iterator<Item = &'a str> + Clone) -> Vec<&'a str> {
    if let Some(close) = closest_key(key, names.clone()) {
        return vec![close];
    }
    let mut containing: Vec<&str> = names.filter(|name| name.split('_').any(|word| word == key)).collect();
    containing.sort_unstable();
    containing.dedup();
    containing.truncate(MAX_SUGGESTIONS);
    containing
}

/// The keys of `suggested_keys` for `key` as a phrase (`` `a` ``, `` `a` or `b` ``), each
/// with the scope `key` was written with (`train.batch`: `` `train.batch_size` ``), or `None`
/// when there are none.
pub fn did_you_mean<'a>(key: &str, names: impl Iterator<Item = &'a str> + Clone) -> Option<String> {
    let (scope, bare) = split_scope(key);
    let keys: Vec<String> = suggested_keys(bare, names)
        .into_iter()
        .map(|k| scope.map_or(format!("`{k}`"), |s| format!("`{s}.{k}`")))
        .collect();
    match keys.split_last() {
        None => None,
        Some((last, [])) => Some(last.clone()),
        Some((last, rest)) => Some(format!("{} or {last}", rest.join(", "))),
    }
}

/// Whether a value that did not parse is written as a sweep's axis (`a,b,c`, `lo:hi:logN`).
fn looks_like_sweep_axis(value: &str) -> bool {
    value.contains(',') || value.contains(":log") || value.contains(":lin")
}

fn describe_keys(schemas: &[(Scope, &Vec<ParamSpec>); 3]) -> String {
    schemas
        .iter()
        .flat_map(|(scope, params)| {
            params.iter().map(move |p| {
                format!(
                    "  {}.{} ({}, default {}, {}) {}",
                    scope.prefix(),
                    p.name,
                    p.kind.type_name(),
                    p.default,
                    p.kind.allowed(),
                    p.help
                )
            })
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The deepest extra evaluation, as a multiple of the training iterations.
pub const MAX_EVAL_DEPTH: f64 = 64.0;
/// How many extra evaluation depths a run may list.
pub const MAX_EVAL_DEPTHS: usize = 16;

/// Typed trainer settings.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainSettings {
    pub steps: u64,
    pub batch_size: usize,
    pub lr: f64,
    pub min_lr: f64,
    pub warmup: u64,
    pub weight_decay: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub grad_clip: f64,
    pub eval_every: u64,
    pub eval_examples: usize,
    pub eval_batch: usize,
    /// Multiples of the training depth evaluated besides 1x.
    pub eval_depths: Vec<f64>,
    pub seed: u64,
    pub device: String,
    pub checkpoint: bool,
    /// The run whose checkpoint's parameters start this one, if any (`init_from`).
    pub init_from: Option<i64>,
    /// Data-parallel CPU threads (0: one per core); see `train::parallel`.
    pub threads: usize,
    /// The head and tokens whose trajectories each evaluation records.
    pub sphere: crate::sphere::Selection,
}

impl TrainSettings {
    fn from_config(c: &Config) -> Result<Self> {
        let eval_depths = c
            .str("eval_depths")?
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| match s.trim_end_matches('x').parse::<f64>() {
                Ok(v) if v > 0.0 && v <= MAX_EVAL_DEPTH => Ok(v),
                Ok(v) if v > MAX_EVAL_DEPTH => Err(anyhow!(
                    "eval_depths: {s} times the training iterations is more than the {MAX_EVAL_DEPTH} allowed \
                     (each extra depth runs the layer that many times over at every evaluation)"
                )),
                _ => Err(anyhow!("eval_depths: `{s}` is not a positive number (e.g. eval_depths=1.5,2)")),
            })
            .collect::<Result<Vec<f64>>>()?;
        if eval_depths.len() > MAX_EVAL_DEPTHS {
            bail!("eval_depths lists {} depths; at most {MAX_EVAL_DEPTHS} are evaluated", eval_depths.len());
        }
        let s = TrainSettings {
            steps: c.i64("steps")? as u64,
            batch_size: c.usize("batch_size")?,
            lr: c.f64("lr")?,
            min_lr: c.f64("min_lr")?,
            warmup: c.i64("warmup")? as u64,
            weight_decay: c.f64("weight_decay")?,
            beta1: c.f64("beta1")?,
            beta2: c.f64("beta2")?,
            grad_clip: c.f64("grad_clip")?,
            eval_every: c.i64("eval_every")? as u64,
            eval_examples: c.usize("eval_examples")?,
            eval_batch: c.usize("eval_batch")?,
            eval_depths,
            seed: c.i64("seed")? as u64,
            device: c.str("device")?.to_string(),
            checkpoint: c.bool("checkpoint")?,
            init_from: Some(c.i64("init_from")?).filter(|id| *id > 0),
            threads: c.usize("threads")?,
            sphere: crate::sphere::Selection { head: c.usize("sphere_head")?, tokens: c.usize("sphere_tokens")? },
        };
        if s.min_lr > s.lr {
            bail!("min_lr = {} is above lr = {}; the cosine schedule decays from lr to min_lr", s.min_lr, s.lr);
        }
        check_device_spelling(&s.device)?;
        Ok(s)
    }
}

/// Refuses a misspelt device early; opening a CUDA device is left to the worker.
fn check_device_spelling(spec: &str) -> Result<()> {
    if spec == "cpu" {
        return Ok(());
    }
    crate::device::parse(spec).map(|_| ())
}

/// The sections of a stored run configuration, with the prefix their keys take.
const SECTIONS: [(&str, &str); 3] = [("layer_config", "layer"), ("task_config", "task"), ("train", "train")];

/// Each section of `config` that is present: its prefix and its values.
fn sections(
    config: &serde_json::Value,
) -> impl Iterator<Item = (&'static str, &serde_json::Map<String, serde_json::Value>)> {
    SECTIONS.into_iter().filter_map(|(section, prefix)| Some((prefix, config.get(section)?.as_object()?)))
}

/// Every value of a run configuration named with its section (`layer.d`, `train.lr`): what a
/// filter's `train.beta2=0.95` is compared with, whatever the other runs are.
pub fn qualified_config(config: &serde_json::Value) -> BTreeMap<String, String> {
    sections(config)
        .flat_map(|(prefix, o)| o.iter().map(move |(k, v)| (format!("{prefix}.{k}"), value_text(v))))
        .collect()
}

/// Flattened `key → value` of a run configuration (`layer_config`, `task_config`, `train`);
/// a key present in several sections is prefixed with its section (`layer.`, `task.`, `train.`).
pub fn flatten_config(config: &serde_json::Value) -> BTreeMap<String, String> {
    ConfigNames::of([config]).flatten(config)
}

/// Flattened configurations of runs compared with each other, named alike (see
/// [`ConfigNames`]).
pub fn flatten_configs(configs: &[&serde_json::Value]) -> Vec<BTreeMap<String, String>> {
    flatten_configs_beside(configs, &[])
}

/// [`flatten_configs`] for a table with other columns: a key spelled like one of `taken`
/// carries its section too (`train.steps` beside a `steps` progress column).
pub fn flatten_configs_beside(configs: &[&serde_json::Value], taken: &[&str]) -> Vec<BTreeMap<String, String>> {
    let mut names = ConfigNames::of(configs.iter().copied());
    names.ambiguous.extend(taken.iter().map(|name| name.to_string()));
    configs.iter().map(|config| names.flatten(config)).collect()
}

/// How runs compared with each other name their settings: a key is bare (`lr`) unless it
/// belongs to several sections of any of the runs, and then it carries its section in every
/// run (a Transformer run's trainer `beta2` is `train.beta2` beside a Hyper-SET run that also
/// has `layer.beta2`), so one name means one setting across the runs: one column of an
/// export, one row of a diff.
#[derive(Debug, Clone, Default)]
pub struct ConfigNames {
    ambiguous: BTreeSet<String>,
}

impl ConfigNames {
    /// The names for `configs` and any one of them.
    pub fn of<'a>(configs: impl IntoIterator<Item = &'a serde_json::Value>) -> Self {
        let mut ambiguous = BTreeSet::new();
        for config in configs {
            let mut seen = BTreeSet::new();
            for (_, o) in sections(config) {
                ambiguous.extend(o.keys().filter(|k| !seen.insert(k.as_str())).cloned());
            }
        }
        ConfigNames { ambiguous }
    }

    /// `config` flattened under these names.
    pub fn flatten(&self, config: &serde_json::Value) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for (prefix, o) in sections(config) {
            for (k, v) in o {
                let key = if self.ambiguous.contains(k) { format!("{prefix}.{k}") } else { k.clone() };
                out.insert(key, value_text(v));
            }
        }
        out
    }
}

/// A stored configuration value as text: strings bare, tagged values (`{"Int": 8}`) by their
/// content.
fn value_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Object(o) if o.len() == 1 => value_text(o.values().next().unwrap()),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Transformer run's trainer `beta2` beside a Hyper-SET run with a layer `beta2` too:
    /// named `train.beta2` in both, so the two runs' same setting is one key.
    #[test]
    fn runs_compared_name_a_setting_alike() {
        let hyperset = serde_json::json!({
            "layer_config": {"beta2": 0.99, "d": 64}, "task_config": {}, "train": {"beta2": 0.95, "lr": 0.001}
        });
        let transformer = serde_json::json!({"layer_config": {"d": 64}, "task_config": {}, "train": {"beta2": 0.95}});
        let alone = flatten_config(&transformer);
        assert_eq!(alone.get("beta2").map(String::as_str), Some("0.95"));
        let both = flatten_configs(&[&hyperset, &transformer]);
        assert_eq!(both[0].keys().collect::<Vec<_>>(), ["d", "layer.beta2", "lr", "train.beta2"]);
        assert_eq!(both[1].keys().collect::<Vec<_>>(), ["d", "train.beta2"]);
        assert_eq!(both[0]["train.beta2"], both[1]["train.beta2"]);
        assert_eq!(flatten_config(&hyperset), both[0]);
        let qualified = qualified_config(&transformer);
        assert_eq!(qualified.keys().collect::<Vec<_>>(), ["layer.d", "train.beta2"]);
    }

    /// A misspelt key gets the key it misspells; a word of several keys gets those keys.
    #[test]
    fn unknown_keys_are_answered_with_the_keys_they_likely_mean() {
        let names = ["batch_size", "eval_batch", "eval_every", "lr", "steps"];
        let words = || names.iter().copied();
        assert_eq!(suggested_keys("batch_sise", words()), ["batch_size"]);
        assert_eq!(suggested_keys("batch", words()), ["batch_size", "eval_batch"]);
        assert_eq!(suggested_keys("eval", words()), ["eval_batch", "eval_every"]);
        assert!(suggested_keys("momentum", words()).is_empty());
        let quoted = |key: &str| did_you_mean(key, words());
        assert_eq!(quoted("train.batch").as_deref(), Some("`train.batch_size` or `train.eval_batch`"));
        assert_eq!(quoted("step").as_deref(), Some("`steps`"));
        assert_eq!(quoted("train.momentum"), None);
    }

    /// A run stored before `threads` existed reads it at its default (0: one per core).
    #[test]
    fn stored_train_configurations_without_newer_keys_take_their_defaults() {
        let mut train = Config::defaults(&train_schema());
        train.0.remove("threads");
        let run = RunConfig {
            layer: "hyperset".into(),
            task: "sudoku".into(),
            layer_config: Config::default(),
            task_config: Config::default(),
            train,
            evaluates: None,
        };
        let stored = RunConfig::from_json(&run.to_json()).unwrap();
        assert_eq!(stored.settings().unwrap().threads, 0);
    }
}
