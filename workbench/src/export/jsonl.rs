//! The long table as JSON lines: one object per row with the CSV's columns as keys (see
//! [`super::long`]), read by `pandas.read_json(path, lines=True)`. Configuration values are
//! JSON numbers or booleans where they are ones; keys a run does not have are left out, and
//! so are absent values. JSON has no NaN or infinity: such values are `null`.

use super::long::{self, RunColumns, CONFIG_PREFIX};
use super::RunData;
use crate::run_config::ConfigNames;
use anyhow::Result;
use serde_json::{json, Map, Value};
use std::io::Write;

/// A configuration value as typed JSON: `64` and `0.001` as numbers, `true` as a boolean,
/// anything else as text.
fn typed(text: &str) -> Value {
    if let Ok(i) = text.parse::<i64>() {
        return json!(i);
    }
    if let Some(x) = text.parse::<f64>().ok().filter(|x| x.is_finite()) {
        return json!(x);
    }
    match text {
        "true" => json!(true),
        "false" => json!(false),
        _ => json!(text),
    }
}

/// A float, or `null` where JSON has no number for it.
fn number(x: f64) -> Value {
    if x.is_finite() {
        json!(x)
    } else {
        Value::Null
    }
}

/// Appends every row of one run to `out`, its configuration under `names` (those of every run
/// exported); returns how many.
pub fn write_run(out: &mut dyn Write, data: &RunData, names: &ConfigNames) -> Result<usize> {
    let run = RunColumns::of(&data.record, names);
    let mut common = Map::new();
    common.insert("run".into(), json!(run.run));
    if let Some(sweep) = run.sweep {
        common.insert("sweep".into(), json!(sweep));
    }
    common.insert("layer".into(), json!(run.layer));
    common.insert("task".into(), json!(run.task));
    common.insert("status".into(), json!(run.status));
    common.insert("tags".into(), json!(run.tags));
    let config: Vec<(String, Value)> =
        run.config.iter().map(|(k, v)| (format!("{CONFIG_PREFIX}{k}"), typed(v))).collect();
    let mut count = 0;
    for row in long::rows(data) {
        let mut line = common.clone();
        line.insert("kind".into(), json!(row.kind));
        if !row.split.is_empty() {
            line.insert("split".into(), json!(row.split));
        }
        line.insert("name".into(), json!(row.name));
        line.insert("step".into(), json!(row.step));
        if let Some(i) = row.iteration {
            line.insert("iteration".into(), json!(i));
        }
        line.insert("value".into(), number(row.value));
        if let Some(w) = row.wall_time {
            line.insert("wall_time".into(), number(w));
        }
        line.extend(config.iter().cloned());
        serde_json::to_writer(&mut *out, &Value::Object(line))?;
        out.write_all(b"\n")?;
        count += 1;
    }
    Ok(count)
}
