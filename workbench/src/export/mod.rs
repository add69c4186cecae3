//! Stored runs written out for other tools: every metric value and per-iteration diagnostic
//! as a long table (CSV, JSON lines) for pandas and the like, or as TensorBoard event files.
//! Which runs, and where the files go, is decided in [`crate::ops::export_runs`]; the
//! modules here only turn one run's stored data into one format.
//!
//! - [`long`]: the rows of the long table and their columns, shared by CSV and JSON lines;
//! - [`csv`], [`jsonl`]: the two table formats;
//! - [`tensorboard`]: one event file per run, scalars and the configuration as text;
//! - [`tfevents`]: the event file format itself (protobuf messages in TFRecords).

pub mod csv;
pub mod jsonl;
pub mod long;
pub mod tensorboard;
pub mod tfevents;

use crate::store::{DiagnosticRow, MetricRow, RunRecord};
use anyhow::{bail, Result};

/// A file format of `workbench runs export`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Csv,
    Jsonl,
    Tensorboard,
}

impl Format {
    /// Parses `csv`, `jsonl` or `tensorboard` (any case).
    pub fn parse(text: &str) -> Result<Format> {
        Ok(match text.trim().to_ascii_lowercase().as_str() {
            "csv" => Format::Csv,
            "jsonl" | "ndjson" => Format::Jsonl,
            "tensorboard" | "tb" => Format::Tensorboard,
            _ => bail!("unknown export format `{text}`: use csv, jsonl or tensorboard"),
        })
    }
}

/// One run with everything it recorded.
pub struct RunData {
    pub record: RunRecord,
    pub metrics: Vec<MetricRow>,
    pub diagnostics: Vec<DiagnosticRow>,
}
