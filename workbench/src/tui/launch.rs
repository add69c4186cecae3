//! The Launch screen's model: a form generated from the layer's, the task's and the
//! trainer's hyperparameter schemas, checked as it is edited.

use super::data::PluginList;
use crate::run_config::train_schema;
pub use crate::run_config::Scope;
use plugin_api::{ParamKind, ParamSpec, PluginKind};

/// One editable hyperparameter.
#[derive(Debug, Clone)]
pub struct Field {
    pub scope: Scope,
    pub spec: ParamSpec,
    /// The value as typed.
    pub text: String,
    /// Why the value is refused, if it is.
    pub error: Option<String>,
    /// The user set this value (typed or cycled it away from the default): only such values
    /// survive a change of layer or task.
    pub edited: bool,
}

impl Field {
    fn new(scope: Scope, spec: ParamSpec) -> Field {
        let text = value_text(&spec.default);
        Field { scope, spec, text, error: None, edited: false }
    }

    /// Whether this is the seed field, which accepts a list (one run per seed).
    pub fn is_seeds(&self) -> bool {
        self.scope == Scope::Train && self.spec.name == "seed"
    }

    /// Whether several comma-separated values may be given (every kind but free text).
    pub fn takes_lists(&self) -> bool {
        !matches!(self.spec.kind, ParamKind::Text)
    }

    /// The values of the field: several, comma-separated, for a sweep.
    pub fn values(&self) -> Vec<String> {
        if self.takes_lists() {
            self.text.split(',').map(|v| v.trim().to_string()).collect()
        } else {
            vec![self.text.trim().to_string()]
        }
    }

    /// Checks the text against the schema; for the seed field, and for lists, every value.
    pub fn check(&mut self) {
        self.error = if self.is_seeds() {
            seeds_of(&self.text, &self.spec).err()
        } else {
            self.values().iter().find_map(|v| self.spec.parse(v).err())
        };
    }

    /// Whether the value differs from the default (only those become overrides).
    pub fn changed(&self) -> bool {
        self.text.trim() != value_text(&self.spec.default)
    }

    /// For choices and booleans: the next (or previous) allowed value.
    pub fn cycle(&mut self, forward: bool) {
        let options: Vec<String> = match &self.spec.kind {
            ParamKind::Choice(c) => c.clone(),
            ParamKind::Bool => vec!["false".into(), "true".into()],
            _ => return,
        };
        let at = options.iter().position(|o| o == self.text.trim()).unwrap_or(0);
        let n = options.len();
        self.text = options[if forward { (at + 1) % n } else { (at + n - 1) % n }].clone();
        self.check();
        self.edited = self.changed();
    }

    /// Whether left / right cycle this field's value.
    pub fn cycles(&self) -> bool {
        matches!(self.spec.kind, ParamKind::Choice(_) | ParamKind::Bool)
    }
}

fn value_text(v: &plugin_api::Value) -> String {
    match v {
        plugin_api::Value::Str(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The seeds of a seed field: one or more comma-separated integers.
pub fn seeds_of(text: &str, spec: &ParamSpec) -> Result<Vec<u64>, String> {
    let mut seeds = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        spec.parse(part)?;
        seeds.push(part.parse::<u64>().map_err(|_| format!("`{part}` is not a seed"))?);
    }
    if seeds.is_empty() {
        return Err("give at least one seed, e.g. 0 or 0,1,2".into());
    }
    Ok(seeds)
}

/// A row of the form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Row {
    LayerChoice,
    TaskChoice,
    Field(usize),
    LaunchButton,
}

/// The form.
#[derive(Debug, Clone, Default)]
pub struct LaunchForm {
    pub layers: Vec<String>,
    pub tasks: Vec<String>,
    pub layer: usize,
    pub task: usize,
    pub fields: Vec<Field>,
    /// Index into [`LaunchForm::rows`].
    pub cursor: usize,
    /// Editing the field under the cursor (keys type into it).
    pub editing: bool,
    /// The text before editing began (restored by Esc).
    pub before_edit: String,
    /// An error that concerns several fields (the plugins' own validators).
    pub error: Option<String>,
    /// What the last change of layer or task did to the values the user had set.
    pub notice: Option<String>,
    /// The experiment file last loaded or saved (the path prompt starts from it).
    pub file: Option<String>,
}

impl LaunchForm {
    /// A form for the first layer and task (Hyper-SET and Sudoku when present).
    pub fn new(plugins: &PluginList) -> LaunchForm {
        let layers = plugins.names(PluginKind::Layer);
        let tasks = plugins.names(PluginKind::Task);
        let layer = layers.iter().position(|n| n == "hyperset").unwrap_or(0);
        let task = tasks.iter().position(|n| n == "sudoku").unwrap_or(0);
        let mut form = LaunchForm { layers, tasks, layer, task, ..Default::default() };
        form.rebuild(plugins);
        form
    }

    pub fn layer_name(&self) -> Option<&str> {
        self.layers.get(self.layer).map(String::as_str)
    }

    pub fn task_name(&self) -> Option<&str> {
        self.tasks.get(self.task).map(String::as_str)
    }

    /// Rebuilds the fields after the layer or task changed: every field starts at the new
    /// plugin's default, except values the user set, kept where the key still exists and the
    /// value is valid for the new schema; [`LaunchForm::notice`] says which were kept and
    /// which were dropped.
    pub fn rebuild(&mut self, plugins: &PluginList) {
        let old = std::mem::take(&mut self.fields);
        let mut fields = Vec::new();
        let (mut kept, mut dropped) = (Vec::new(), Vec::new());
        let schema =
            |name: Option<&str>| name.and_then(|n| plugins.get(n)).map(|p| p.params.clone()).unwrap_or_default();
        for (scope, specs) in [
            (Scope::Layer, schema(self.layer_name())),
            (Scope::Task, schema(self.task_name())),
            (Scope::Train, train_schema()),
        ] {
            for spec in specs {
                let mut field = Field::new(scope, spec);
                let previous = old.iter().find(|f| f.edited && f.scope == scope && f.spec.name == field.spec.name);
                if let Some(prev) = previous {
                    let mut candidate = field.clone();
                    candidate.text = prev.text.clone();
                    candidate.check();
                    let name = format!("{}.{}={}", scope.prefix(), prev.spec.name, prev.text.trim());
                    if candidate.error.is_none() {
                        candidate.edited = candidate.changed();
                        field = candidate;
                        kept.push(name);
                    } else {
                        dropped.push(name);
                    }
                }
                fields.push(field);
            }
        }
        // Set values whose key the new plugins do not have are dropped too.
        for prev in old.iter().filter(|f| f.edited) {
            let exists = fields.iter().any(|f| f.scope == prev.scope && f.spec.name == prev.spec.name);
            if !exists {
                dropped.push(format!("{}.{}={}", prev.scope.prefix(), prev.spec.name, prev.text.trim()));
            }
        }
        self.fields = fields;
        self.cursor = self.cursor.min(self.rows().len().saturating_sub(1));
        self.error = None;
        let mut notice = Vec::new();
        if !kept.is_empty() {
            notice.push(format!("kept your {}", kept.join(", ")));
        }
        if !dropped.is_empty() {
            notice.push(format!("reset to the defaults (unknown or invalid here): {}", dropped.join(", ")));
        }
        self.notice = (!notice.is_empty()).then(|| notice.join("; "));
    }

    /// The rows in display order.
    pub fn rows(&self) -> Vec<Row> {
        let mut rows = vec![Row::LayerChoice, Row::TaskChoice];
        rows.extend((0..self.fields.len()).map(Row::Field));
        rows.push(Row::LaunchButton);
        rows
    }

    pub fn current(&self) -> Row {
        self.rows().get(self.cursor).copied().unwrap_or(Row::LaunchButton)
    }

    pub fn move_cursor(&mut self, delta: isize) {
        let n = self.rows().len() as isize;
        self.cursor = (self.cursor as isize + delta).clamp(0, n - 1) as usize;
    }

    /// Left / right on the row under the cursor: another layer or task, or another choice.
    pub fn cycle(&mut self, forward: bool, plugins: &PluginList) {
        let step = |i: usize, n: usize| {
            if n == 0 {
                0
            } else if forward {
                (i + 1) % n
            } else {
                (i + n - 1) % n
            }
        };
        match self.current() {
            Row::LayerChoice => {
                self.layer = step(self.layer, self.layers.len());
                self.rebuild(plugins);
            }
            Row::TaskChoice => {
                self.task = step(self.task, self.tasks.len());
                self.rebuild(plugins);
            }
            Row::Field(i) => self.fields[i].cycle(forward),
            Row::LaunchButton => {}
        }
    }

    /// The sweep axes of the fields that differ from their defaults (one value each, or
    /// several for a grid; the seed field excluded: it is expanded into one run per seed),
    /// or the first field error.
    pub fn axes(&self) -> Result<(Vec<crate::ops::grid::Axis>, Vec<u64>), String> {
        let mut axes = Vec::new();
        let mut seeds = vec![0];
        for f in &self.fields {
            if let Some(e) = &f.error {
                return Err(format!("{}.{}: {e}", f.scope.prefix(), f.spec.name));
            }
            if f.is_seeds() {
                seeds = seeds_of(&f.text, &f.spec)?;
            } else if f.changed() {
                let key = format!("{}.{}", f.scope.prefix(), f.spec.name);
                axes.push(crate::ops::grid::Axis { key, values: f.values() });
            }
        }
        Ok((axes, seeds))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_lists_and_inline_errors() {
        let spec = train_schema().into_iter().find(|p| p.name == "seed").unwrap();
        assert_eq!(seeds_of("0, 1,2", &spec).unwrap(), vec![0, 1, 2]);
        assert!(seeds_of("", &spec).is_err());
        assert!(seeds_of("1,x", &spec).unwrap_err().contains("`x`"));
        let steps = train_schema().into_iter().find(|p| p.name == "steps").unwrap();
        let mut f = Field::new(Scope::Train, steps);
        f.text = "-3".into();
        f.check();
        assert!(f.error.as_deref().unwrap().contains("outside the allowed range"), "{:?}", f.error);
        f.text = "40".into();
        f.check();
        assert!(f.error.is_none() && f.changed());
    }

    #[test]
    fn lists_become_sweep_axes() {
        let steps = train_schema().into_iter().find(|p| p.name == "steps").unwrap();
        let mut f = Field::new(Scope::Train, steps);
        f.text = "10, 20".into();
        f.check();
        assert!(f.error.is_none());
        assert_eq!(f.values(), vec!["10", "20"]);
        f.text = "10,x".into();
        f.check();
        assert!(f.error.as_deref().unwrap().contains("`x`"));
        let form = LaunchForm { fields: vec![Field { text: "10,20".into(), error: None, ..f }], ..Default::default() };
        let (axes, seeds) = form.axes().unwrap();
        assert_eq!(axes[0].key, "train.steps");
        assert_eq!(axes[0].values, vec!["10", "20"]);
        assert_eq!(seeds, vec![0]);
    }

    #[test]
    fn choices_cycle_both_ways() {
        let spec = ParamSpec::choice("attention", "a", &["a", "b", "c"], "");
        let mut f = Field::new(Scope::Layer, spec);
        f.cycle(true);
        assert_eq!(f.text, "b");
        f.cycle(false);
        f.cycle(false);
        assert_eq!(f.text, "c");
    }
}
