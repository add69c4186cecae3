//! Progress events a worker prints on stdout, one JSON object per line, for the process
//! that launched it (progress bar, `--json` output).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One progress event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// The task prepares its data: `done` of `total` units of `what` are ready.
    Preparing { what: String, done: u64, total: u64 },
    /// The model is built and training begins (or resumes at `start_step`).
    Started { run: i64, total_steps: u64, start_step: u64, params: u64, layer: String, task: String },
    /// One optimisation step finished.
    Step { step: u64, loss: f64, lr: f64, grad_norm: f64, samples_per_s: f64 },
    /// An evaluation at `iterations` layer iterations finished.
    Eval { step: u64, iterations: usize, metrics: BTreeMap<String, f64> },
    /// The run ended with this status.
    Finished { status: String, error: Option<String> },
}

impl Event {
    /// Prints the event as one JSON line on stdout. A closed stdout (the process following
    /// the worker was killed, or its output went to `head`) is ignored: the run goes on and
    /// is recorded in the store.
    pub fn emit(&self) {
        use std::io::Write;
        if let Ok(line) = serde_json::to_string(self) {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{line}").and_then(|()| out.flush());
        }
    }
}
