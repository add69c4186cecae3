//! The long table as CSV (see [`super::long`] for the columns). Numbers are written so that
//! they read back exactly (`0.1`, `1e-7`), non-finite values as `NaN`, `inf`, `-inf`, which
//! pandas reads as floats; absent values are empty cells.

use super::long::{self, RunColumns, COLUMNS, CONFIG_PREFIX};
use super::RunData;
use crate::run_config::ConfigNames;
use anyhow::Result;
use std::io::Write;

/// Writes rows to a CSV stream.
pub struct CsvTable<W: Write> {
    out: ::csv::Writer<W>,
    names: ConfigNames,
    keys: Vec<String>,
}

/// A float that reads back as the same float (Rust's `Debug` form is the shortest such text).
fn number(x: f64) -> String {
    format!("{x:?}")
}

impl<W: Write> CsvTable<W> {
    /// Starts the table with its header; `keys`: the configuration columns, as `names` name
    /// them.
    pub fn new(out: W, names: ConfigNames, keys: Vec<String>) -> Result<Self> {
        let mut out = ::csv::Writer::from_writer(out);
        let header: Vec<String> =
            COLUMNS.iter().map(|c| c.to_string()).chain(keys.iter().map(|k| format!("{CONFIG_PREFIX}{k}"))).collect();
        out.write_record(&header)?;
        Ok(CsvTable { out, names, keys })
    }

    /// Appends every row of one run.
    pub fn write_run(&mut self, data: &RunData) -> Result<usize> {
        let run = RunColumns::of(&data.record, &self.names);
        let config: Vec<&str> = self.keys.iter().map(|k| run.config.get(k).map_or("", String::as_str)).collect();
        let (id, sweep) = (run.run.to_string(), run.sweep.map(|s| s.to_string()).unwrap_or_default());
        let mut count = 0;
        for row in long::rows(data) {
            let fields = [
                id.clone(),
                sweep.clone(),
                run.layer.clone(),
                run.task.clone(),
                run.status.clone(),
                run.tags.clone(),
                row.kind.to_string(),
                row.split.to_string(),
                row.name.to_string(),
                row.step.to_string(),
                row.iteration.map(|i| i.to_string()).unwrap_or_default(),
                number(row.value),
                row.wall_time.filter(|w| !w.is_nan()).map(number).unwrap_or_default(),
            ];
            self.out.write_record(fields.iter().map(String::as_str).chain(config.iter().copied()))?;
            count += 1;
        }
        Ok(count)
    }

    /// Flushes the table and gives the stream back.
    pub fn finish(self) -> Result<W> {
        self.out.into_inner().map_err(|e| anyhow::anyhow!("cannot finish the CSV table: {}", e.error()))
    }
}
