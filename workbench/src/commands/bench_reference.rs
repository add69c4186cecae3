//! `workbench bench --reference`: the same Hyper-SET Sudoku model timed in PyTorch (CPU
//! eager) right after the workbench's own measurement, so the ratio comes from one run on one
//! machine. The model is `workbench/bench/hyperset_reference.py`, embedded in the binary and
//! run with `python3` (or `$WORKBENCH_PYTHON`); PyTorch is needed only for this mode.

use anyhow::{anyhow, bail, Context, Result};
use plugin_api::{Config, ParamSpec};
use serde::Deserialize;
use std::io::Write;
use std::process::{Command, Stdio};

/// The reference model's source.
const SCRIPT: &str = include_str!("../../bench/hyperset_reference.py");

/// Options of the `hyperset` plugin the reference follows; the others must keep their
/// defaults (it implements those only).
const MODELLED: [&str; 6] = ["d", "heads", "iterations", "ff_ratio", "time_dim", "kernels"];

/// What the reference printed.
#[derive(Debug, Deserialize)]
pub struct Reference {
    pub torch: String,
    pub threads: usize,
    pub parameters: u64,
    pub step_s: f64,
    pub samples_per_s: f64,
}

/// Refuses a configuration the reference does not implement, naming the options at fault.
pub fn check_modelled(layer: &str, cfg: &Config, schema: &[ParamSpec]) -> Result<()> {
    if layer != "hyperset" {
        bail!("--reference times the hyperset layer only (got `{layer}`); drop --reference or use --layer hyperset");
    }
    let differing: Vec<String> = schema
        .iter()
        .filter(|p| !MODELLED.contains(&p.name.as_str()))
        .filter(|p| cfg.0.get(&p.name).is_some_and(|v| *v != p.default))
        .map(|p| format!("{}={}", p.name, cfg.0[&p.name]))
        .collect();
    if !differing.is_empty() {
        bail!(
            "the PyTorch reference implements the default hyperset only (it follows {}); it cannot time {}",
            MODELLED.join(", "),
            differing.join(" ")
        );
    }
    Ok(())
}

/// Runs the reference on `cfg` (the layer's options) with the given batch, steps and threads.
pub fn run(cfg: &Config, batch: usize, steps: usize, threads: usize) -> Result<Reference> {
    let python = std::env::var("WORKBENCH_PYTHON").unwrap_or_else(|_| "python3".into());
    // The script goes to Python on its standard input (`python3 -`), so no file is written
    // where another user could have placed a link.
    let mut cmd = Command::new(&python);
    cmd.arg("-");
    for key in ["d", "heads", "iterations", "ff_ratio", "time_dim"] {
        cmd.arg(format!("--{}", key.replace('_', "-"))).arg(cfg.usize(key)?.to_string());
    }
    cmd.args(["--batch", &batch.to_string(), "--steps", &steps.to_string(), "--threads", &threads.to_string()]);
    let cannot_run =
        |e| anyhow!("cannot run `{python}` for the PyTorch reference: {e}; install Python 3 or set WORKBENCH_PYTHON");
    let mut child =
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().map_err(cannot_run)?;
    let mut stdin = child.stdin.take().expect("stdin is piped");
    let fed = stdin.write_all(SCRIPT.as_bytes());
    drop(stdin);
    let output = child.wait_with_output().map_err(cannot_run)?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let hint = if stderr.contains("No module named 'torch'") {
            " (PyTorch is not installed for it: `pip install torch`, or point WORKBENCH_PYTHON at a Python that has it)"
        } else {
            ""
        };
        bail!("the PyTorch reference failed{hint}:\n{}", stderr.trim_end());
    }
    fed.with_context(|| format!("cannot pass the reference script to `{python}`"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().rev().find(|l| l.trim_start().starts_with('{')).unwrap_or("");
    serde_json::from_str(line)
        .with_context(|| format!("the PyTorch reference printed no result line (it printed: {})", stdout.trim()))
}
