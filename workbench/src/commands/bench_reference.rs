//! `workbench bench --reference`: the same model timed in PyTorch (CPU eager) in turn with the
//! workbench's own steps, so the ratio comes from one run on one machine, both sides measured
//! in the same minutes.
//!
//! A reference is written op for op in plain PyTorch, one file per layer family and one per
//! task under `workbench/bench/reference/`, all embedded in the binary. The script handed to
//! Python is `common.py`, then the task's file, then the layer's, then a call of `main`; it
//! runs as `python3 -c SCRIPT OPTIONS` (or `$WORKBENCH_PYTHON`), the resolved options one JSON
//! argument, and times blocks of steps when asked on its standard input (`common.py` says
//! how). `WORKBENCH_REFERENCE_DIR` reads the files from a folder instead (to work on a
//! reference without rebuilding). PyTorch is needed only for this mode.

use anyhow::{anyhow, bail, Context, Result};
use plugin_api::{Config, ParamSpec};
use serde::Deserialize;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

/// One side of a reference (a layer family or a task): its file, the options it implements,
/// and the options that do not change the model (data sizes, seeds). Any other option must
/// keep its default.
struct Part {
    plugin: &'static str,
    file: &'static str,
    source: &'static str,
    follows: &'static [&'static str],
    ignores: &'static [&'static str],
}

macro_rules! part {
    ($plugin:literal, $file:literal, follows: [$($f:literal),* $(,)?], ignores: [$($i:literal),* $(,)?]) => {
        Part {
            plugin: $plugin,
            file: $file,
            source: include_str!(concat!("../../bench/reference/", $file)),
            follows: &[$($f),*],
            ignores: &[$($i),*],
        }
    };
}

/// What the script of every reference starts with: the timing loop and shared helpers.
const COMMON: &str = include_str!("../../bench/reference/common.py");

const LAYERS: &[Part] = &[
    part!(
        "hyperset",
        "layers/hyperset.py",
        follows: ["d", "heads", "iterations", "ff_ratio", "time_dim", "init_std", "norm_eps"],
        ignores: ["kernels"]
    ),
    part!(
        "transformer",
        "layers/transformer.py",
        follows: [
            "d",
            "heads",
            "iterations",
            "layers",
            "ff_ratio",
            "init_std",
            "norm_eps",
            "shared_qkv",
            "attention_sign"
        ],
        ignores: ["kernels"]
    ),
    part!(
        "crate",
        "layers/crate.py",
        follows: ["d", "heads", "iterations", "layers", "variant", "eta", "lambda", "init_std"],
        ignores: ["rate_eps"]
    ),
    part!(
        "energy-transformer",
        "layers/energy_transformer.py",
        follows: ["d", "heads", "head_dim", "hopfield_ratio", "beta", "alpha", "iterations", "layers", "init_std", "attend_self"],
        ignores: []
    ),
    part!(
        "intrinsic",
        "layers/intrinsic.py",
        follows: [
            "d",
            "heads",
            "iterations",
            "layers",
            "ff_ratio",
            "attention",
            "norm",
            "bias",
            "init_std",
            "momentum_beta",
            "momentum_eta",
            "momentum_ffn",
            "newton_temperature",
            "newton_b_form",
            "newton",
            "newton_b_init",
            "newton_ridge",
            "light_tau",
            "dropout",
            "attn_dropout",
            "gate_bias"
        ],
        ignores: []
    ),
    part!(
        "cem",
        "layers/cem.py",
        follows: [
            "d",
            "heads",
            "layers",
            "iterations",
            "mlp_ratio",
            "attention",
            "attn_steps",
            "mlp_steps",
            "attn_step_size",
            "mlp_step_size",
            "preconditioner",
            "precond_rank",
            "mlp_precond_rank",
            "kq_diagonal",
            "diag_value",
            "attn_scale",
            "alibi",
            "init_std"
        ],
        ignores: []
    ),
];

const TASKS: &[Part] = &[
    part!(
        "sudoku",
        "tasks/sudoku.py",
        follows: ["init_std", "norm_eps"],
        ignores: ["difficulty", "train_puzzles", "eval_puzzles", "eval_seed", "augment"]
    ),
    part!(
        "image",
        "tasks/image.py",
        follows: ["patches", "label_smoothing"],
        ignores: ["train_images", "test_images", "shapes_seed", "crop_padding", "flip"]
    ),
    part!(
        "language",
        "tasks/language.py",
        follows: ["seq_len", "positions", "tie_embeddings", "init_std"],
        ignores: ["corpus", "path", "corpus_bytes", "corpus_seed", "eval_fraction"]
    ),
];

/// What the reference says once its model is built and warmed up.
#[derive(Debug, Deserialize)]
pub struct Reference {
    pub torch: String,
    pub threads: usize,
    pub parameters: u64,
    /// The instruction-set settings PyTorch ran under (`pytorch_caps`, or the user's own
    /// values of those variables): empty when the kernels are not capped.
    #[serde(skip)]
    pub caps: Vec<String>,
}

/// The answer to one block of timed steps.
#[derive(Deserialize)]
struct Block {
    step_s: f64,
}

/// The reference of `layer` on `task`, or why there is none.
pub struct Model {
    layer: &'static Part,
    task: &'static Part,
}

/// The plugins a list of parts covers, for messages.
fn names(parts: &[Part]) -> String {
    parts.iter().map(|p| p.plugin).collect::<Vec<_>>().join(", ")
}

impl Model {
    /// Finds the reference of `layer` on `task` and refuses a configuration it does not
    /// implement, naming the options at fault.
    pub fn find(
        (layer, layer_cfg, layer_schema): (&str, &Config, &[ParamSpec]),
        (task, task_cfg, task_schema): (&str, &Config, &[ParamSpec]),
    ) -> Result<Self> {
        let layer_part = LAYERS.iter().find(|p| p.plugin == layer).ok_or_else(|| {
            anyhow!("no PyTorch reference of the `{layer}` layer (there are: {}); drop --reference", names(LAYERS))
        })?;
        let task_part = TASKS.iter().find(|p| p.plugin == task).ok_or_else(|| {
            anyhow!("no PyTorch reference of the `{task}` task (there are: {}); drop --reference", names(TASKS))
        })?;
        for (part, cfg, schema) in [(layer_part, layer_cfg, layer_schema), (task_part, task_cfg, task_schema)] {
            // The lists name the plugin's keys; one it no longer declares is this binary's fault.
            if let Some(key) =
                part.follows.iter().chain(part.ignores).find(|key| !schema.iter().any(|p| p.name == **key))
            {
                bail!(
                    "the PyTorch reference of `{}` names an option the plugin does not declare: `{key}`",
                    part.plugin
                );
            }
            let differing: Vec<String> = schema
                .iter()
                .filter(|p| !part.follows.contains(&p.name.as_str()) && !part.ignores.contains(&p.name.as_str()))
                .filter(|p| cfg.0.get(&p.name).is_some_and(|v| *v != p.default))
                .map(|p| format!("{}={}", p.name, cfg.0[&p.name]))
                .collect();
            if !differing.is_empty() {
                bail!(
                    "the PyTorch reference of `{}` implements its default only, with these options: {}; it cannot time {}",
                    part.plugin,
                    part.follows.join(", "),
                    differing.join(" ")
                );
            }
        }
        Ok(Model { layer: layer_part, task: task_part })
    }

    /// The script handed to Python (`python3 -c`): the embedded files, or those of `WORKBENCH_REFERENCE_DIR`.
    pub fn script(&self) -> Result<String> {
        let read = |file: &str, embedded: &str| -> Result<String> {
            match std::env::var_os("WORKBENCH_REFERENCE_DIR") {
                Some(dir) => {
                    let path = std::path::Path::new(&dir).join(file);
                    std::fs::read_to_string(&path).with_context(|| {
                        format!(
                            "cannot read {} (WORKBENCH_REFERENCE_DIR); unset it to use the built-in references",
                            path.display()
                        )
                    })
                }
                None => Ok(embedded.to_string()),
            }
        };
        Ok([
            read("common.py", COMMON)?,
            read(self.task.file, self.task.source)?,
            read(self.layer.file, self.layer.source)?,
            "\nif __name__ == \"__main__\":\n    main()\n".to_string(),
        ]
        .join("\n\n"))
    }
}

/// What the reference is told besides the options: the run's shapes and trainer settings.
pub struct Job<'a> {
    pub layer: &'a Config,
    pub task: &'a Config,
    /// Dimensions of one training batch's inputs, so the task builds the same embedding.
    pub inputs: Vec<usize>,
    pub causal: bool,
    pub batch: usize,
    /// `cpu` or `cuda:K`: PyTorch runs the model on the same device.
    pub device: String,
    pub threads: usize,
    pub settings: serde_json::Value,
}

/// A running reference: its model is built and warmed up, and it times blocks of steps on
/// request, so that the bench can alternate them with its own.
pub struct Session {
    process: Process,
    pub reference: Reference,
}

/// The Python process of a reference and its pipes.
struct Process {
    python: String,
    child: Child,
    /// Taken (closed) when the process is ended.
    commands: Option<ChildStdin>,
    answers: BufReader<ChildStdout>,
    /// Everything the reference wrote on standard error, read by a thread of its own so that a
    /// chatty Python never blocks on a full pipe.
    stderr: Option<std::thread::JoinHandle<String>>,
}

impl Session {
    /// Starts the reference `model` on `job` and waits until it has built the model and run its
    /// two warm-up steps.
    pub fn start(model: &Model, job: &Job) -> Result<Session> {
        let python = std::env::var("WORKBENCH_PYTHON").unwrap_or_else(|_| "python3".into());
        let script = model.script()?;
        let arguments = serde_json::json!({
            "layer": job.layer, "task": job.task, "inputs": job.inputs, "causal": job.causal,
            "batch": job.batch, "device": job.device, "threads": job.threads, "train": job.settings,
        });
        // The script is an argument (`python3 -c`), so no file is written where another user
        // could have placed a link, and standard input is free for the timing requests.
        let mut cmd = Command::new(&python);
        cmd.arg("-c").arg(&script).arg(arguments.to_string());
        let mut caps = Vec::new();
        for (variable, value) in pytorch_caps(plugin_api::isa::kernels_isa(), plugin_api::isa::Isa::detected()) {
            match std::env::var(variable) {
                Ok(own) => caps.push(format!("{variable}={own}")),
                Err(_) => {
                    cmd.env(variable, value);
                    caps.push(format!("{variable}={value}"));
                }
            }
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| cannot_run(&python, e))?;
        let mut stderr = child.stderr.take().expect("stderr is piped");
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        let commands = child.stdin.take();
        let answers = BufReader::new(child.stdout.take().expect("stdout is piped"));
        let mut process = Process { python, child, commands, answers, stderr: Some(stderr) };
        let reference: Reference = process.answer("its model")?;
        Ok(Session { process, reference: Reference { caps, ..reference } })
    }

    /// The mean seconds per step of `steps` timed steps.
    pub fn time(&mut self, steps: usize) -> Result<f64> {
        let process = &mut self.process;
        let commands = process.commands.as_mut().expect("open until the process is ended");
        let sent = writeln!(commands, "{steps}").and_then(|()| commands.flush());
        if let Err(e) = sent {
            return Err(process.failure(&format!("stopped before timing {steps} steps ({e})")));
        }
        Ok(process.answer::<Block>(&format!("{steps} timed steps"))?.step_s)
    }
}

impl Process {
    /// The next JSON line on the reference's standard output (lines that are not JSON, such
    /// as a library's notices, are skipped); its failure with what it said, when it ends first.
    fn answer<T: serde::de::DeserializeOwned>(&mut self, what: &str) -> Result<T> {
        let mut line = String::new();
        loop {
            line.clear();
            match self.answers.read_line(&mut line) {
                Ok(0) => return Err(self.failure(&format!("ended before reporting {what}"))),
                Err(e) => return Err(self.failure(&format!("could not be read ({e})"))),
                Ok(_) if line.trim_start().starts_with('{') => {
                    return serde_json::from_str(line.trim()).with_context(|| {
                        format!("the PyTorch reference answered {what} with an unexpected line: {}", line.trim())
                    })
                }
                Ok(_) => {}
            }
        }
    }

    /// The error for a reference that stopped answering: its exit and its standard error,
    /// with the fix when PyTorch is missing.
    fn failure(&mut self, what: &str) -> anyhow::Error {
        let _ = self.child.kill();
        let status = self.child.wait().map(|s| s.to_string()).unwrap_or_else(|e| e.to_string());
        let stderr = self.stderr.take().and_then(|t| t.join().ok()).unwrap_or_default();
        let hint = if stderr.contains("No module named 'torch'") {
            " (PyTorch is not installed for it: `pip install torch`, or point WORKBENCH_PYTHON at a Python that has it)"
        } else {
            ""
        };
        anyhow!("the PyTorch reference (`{}`) {what}, {status}{hint}:\n{}", self.python, stderr.trim_end())
    }
}

impl Drop for Process {
    /// Ends the reference: its standard input closes, so it leaves its loop; one that does not
    /// within a few seconds is killed.
    fn drop(&mut self) {
        drop(self.commands.take());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn cannot_run(python: &str, e: std::io::Error) -> anyhow::Error {
    anyhow!("cannot run `{python}` for the PyTorch reference: {e}; install Python 3 or set WORKBENCH_PYTHON")
}

/// The settings that cap PyTorch's own kernels (ATen's vectorised loops, MKL's and oneDNN's
/// products) at the instruction set `WORKBENCH_KERNELS_ISA` caps the workbench's kernels
/// at, so that both sides of the ratio run on the same instructions; none when uncapped.
pub fn pytorch_caps(isa: plugin_api::isa::Isa, detected: plugin_api::isa::Isa) -> Vec<(&'static str, &'static str)> {
    use plugin_api::isa::Isa;
    let (aten, mkl, onednn) = match isa {
        _ if isa == detected => return Vec::new(),
        Isa::Avx512 => ("avx512", "AVX512", "AVX512_CORE"),
        Isa::Avx2 => ("avx2", "AVX2", "AVX2"),
        Isa::Baseline => ("default", "SSE4_2", "SSE41"),
    };
    vec![("ATEN_CPU_CAPABILITY", aten), ("MKL_ENABLE_INSTRUCTIONS", mkl), ("DNNL_MAX_CPU_ISA", onednn)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn pytorch_is_capped_only_when_the_kernels_are() {
        use plugin_api::isa::Isa;
        assert!(pytorch_caps(Isa::Avx512, Isa::Avx512).is_empty());
        assert!(pytorch_caps(Isa::Avx2, Isa::Avx2).is_empty());
        let capped = pytorch_caps(Isa::Avx2, Isa::Avx512);
        assert!(
            capped.contains(&("ATEN_CPU_CAPABILITY", "avx2")) && capped.contains(&("MKL_ENABLE_INSTRUCTIONS", "AVX2"))
        );
        assert!(pytorch_caps(Isa::Baseline, Isa::Avx2).contains(&("ATEN_CPU_CAPABILITY", "default")));
    }

    /// Every layer reference with every task reference is a Python program (parsed by
    /// `python3`'s own parser; PyTorch is not needed), with the names the timing loop calls.
    #[test]
    fn every_reference_script_parses() {
        for layer in LAYERS {
            for task in TASKS {
                let script = Model { layer, task }.script().unwrap();
                for name in ["def build_layer(", "def build_task(", "def make_batch(", "def main("] {
                    assert!(script.contains(name), "{} on {}: no `{name}`", layer.plugin, task.plugin);
                }
                // Linux takes one argument of at most 128 KiB (MAX_ARG_STRLEN): `python3 -c`.
                assert!(script.len() < 128 * 1024, "{} on {}: {} bytes", layer.plugin, task.plugin, script.len());
                let mut child = Command::new("python3")
                    .args(["-c", "import ast, sys; ast.parse(sys.stdin.read())"])
                    .stdin(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("python3 runs (the CI script installs it)");
                child.stdin.take().unwrap().write_all(script.as_bytes()).unwrap();
                let output = child.wait_with_output().unwrap();
                assert!(
                    output.status.success(),
                    "{} on {}: {}",
                    layer.plugin,
                    task.plugin,
                    String::from_utf8_lossy(&output.stderr)
                );
            }
        }
    }

    /// A key is either followed or ignored, and only keys the plugin declares are named
    /// (checked against the plugins' declarations by the integration tests' refusals).
    #[test]
    fn no_key_is_both_followed_and_ignored() {
        for part in LAYERS.iter().chain(TASKS) {
            for key in part.ignores {
                assert!(!part.follows.contains(key), "{}: `{key}` both followed and ignored", part.plugin);
            }
        }
    }
}
