//! The Launch form to and from experiment files (`o` loads one, `w` saves the form), with
//! the same meaning as `workbench train --config` / `workbench sweep --config`.

use super::data::PluginList;
use super::launch::{seeds_of, Field, LaunchForm, Scope};
use crate::experiment_file::{Document, Experiment};
use plugin_api::Value;

impl LaunchForm {
    /// Fills the form from `exp`: its plugins, then its values and sweep axes over the new
    /// plugins' defaults. Nothing changes when any part is refused; the error names it.
    pub fn load_experiment(&mut self, exp: &Experiment, plugins: &PluginList) -> Result<(), String> {
        let files = exp.describe_files();
        let mut form = self.clone();
        if let Some(layer) = &exp.layer {
            if layer.contains(',') {
                return Err(format!(
                    "{files}: [layer] plugin lists several layers ({layer}); the form launches one: \
                     run the file with `workbench sweep --config`"
                ));
            }
            form.layer = position(&form.layers, layer, "layer")?;
        }
        if let Some(task) = &exp.task {
            form.task = position(&form.tasks, task, "task")?;
        }
        // Start from the plugins' defaults: the file says everything that differs.
        form.fields.iter_mut().for_each(|f| f.edited = false);
        form.rebuild(plugins);
        let fixed = exp.overrides.iter().map(|o| {
            let (k, v) = o.split_once('=').unwrap_or((o, ""));
            (k.to_string(), v.to_string())
        });
        let swept = exp.axes.iter().map(|a| (a.key.clone(), a.values.join(",")));
        let mut errors = Vec::new();
        for (key, text) in fixed.chain(swept) {
            match field_of(&mut form.fields, &key) {
                Ok(field) => {
                    field.text = text;
                    field.check();
                    field.edited = field.changed();
                    if let Some(e) = &field.error {
                        errors.push(format!("{key}: {e}"));
                    }
                }
                Err(e) => errors.push(e),
            }
        }
        if !errors.is_empty() {
            return Err(format!("{files}: {}", errors.join("; ")));
        }
        form.notice = exp.name.as_ref().map(|n| format!("sweep name `{n}` is not kept: the form names its sweeps"));
        form.cursor = 0;
        *self = form;
        Ok(())
    }

    /// The form as an experiment file: the values that differ from the defaults, lists as
    /// `[sweep]` axes (several seeds as `seeds`).
    pub fn to_document(&self) -> Result<Document, String> {
        let (Some(layer), Some(task)) = (self.layer_name(), self.task_name()) else {
            return Err("no layer or task plugin is loaded: see the Plugins screen".into());
        };
        let mut doc = Document {
            header: vec![
                format!("Saved from the Launch form: {layer} on {task}; other values are the plugins' defaults."),
                "Run it with `workbench train --config FILE` (`workbench sweep --config FILE` with a [sweep] table)."
                    .into(),
            ],
            layer: layer.to_string(),
            task: task.to_string(),
            ..Default::default()
        };
        for f in &self.fields {
            if let Some(e) = &f.error {
                return Err(format!("{}.{}: {e}", f.scope.prefix(), f.spec.name));
            }
            if !f.changed() {
                continue;
            }
            let values = typed_values(f)?;
            let table = match f.scope {
                Scope::Layer => 0,
                Scope::Task => 1,
                Scope::Train => 2,
            };
            if values.len() == 1 {
                doc.values[table].push((f.spec.name.clone(), values[0].clone()));
            } else if f.is_seeds() {
                doc.sweep.push(("seeds".into(), values));
            } else {
                doc.sweep.push((format!("{}.{}", f.scope.prefix(), f.spec.name), values));
            }
        }
        Ok(doc)
    }
}

fn position(names: &[String], wanted: &str, kind: &str) -> Result<usize, String> {
    names.iter().position(|n| n == wanted).ok_or_else(|| {
        format!("no {kind} plugin `{wanted}` is loaded (loaded: {}; the Plugins screen says why)", names.join(", "))
    })
}

/// The field a file's key names: `scope.key`, or a bare key found in one scope only.
fn field_of<'a>(fields: &'a mut [Field], key: &str) -> Result<&'a mut Field, String> {
    let (scope, bare) = crate::run_config::split_scope(key);
    let matching: Vec<usize> = (0..fields.len())
        .filter(|&i| fields[i].spec.name == bare && scope.is_none_or(|s| s == fields[i].scope.prefix()))
        .collect();
    match matching.as_slice() {
        [i] => Ok(&mut fields[*i]),
        [] => Err(format!("unknown key `{key}` for these plugins")),
        _ => Err(format!("key `{key}` exists in several places; write layer.{bare}, task.{bare} or train.{bare}")),
    }
}

/// A field's values, typed by its schema (several for a list or several seeds).
fn typed_values(f: &Field) -> Result<Vec<Value>, String> {
    let name = format!("{}.{}", f.scope.prefix(), f.spec.name);
    if f.is_seeds() {
        let seeds = seeds_of(&f.text, &f.spec).map_err(|e| format!("{name}: {e}"))?;
        return Ok(seeds.into_iter().map(|s| Value::Int(s as i64)).collect());
    }
    f.values().iter().map(|v| f.spec.parse(v).map_err(|e| format!("{name}: {e}"))).collect()
}
