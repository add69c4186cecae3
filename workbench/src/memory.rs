//! The memory a run needs, estimated before it is stored, so that a configuration that cannot
//! fit (`layer.d=8192`, `batch_size=65536`) is refused with the estimate and the fix instead
//! of aborting its worker on an allocation.
//!
//! - Parameters are counted exactly: the layer, and the task's model through the task's
//!   declared [`Footprint`], are built into a `VarBuilder` whose tensors are one broadcast
//!   zero each, so nothing of their size is allocated.
//! - Training a parameter takes [`PARAMETER_COPIES`] more copies of it at the peak: its
//!   gradient, AdamW's two moments, the double-precision initial values and the backward
//!   pass's temporaries of each weight's gradient (measured: 11-12 copies in all for
//!   Hyper-SET and the Transformer at d = 2048 and 4096); each further training shard
//!   (thread) holds a gradient of its own until they are summed.
//! - Activations of one step: autograd keeps every intermediate of the pass until the
//!   backward pass, per example and iteration about [`TOKEN_FLOATS`] floats per token and
//!   width unit (or what the layer declares, `Declaration::with_activation_floats`) and
//!   [`SCORE_FLOATS`] per attention score, measured on the shipped layers with
//!   `/usr/bin/time -v` and checked by the test `memory_estimate_brackets_the_measured_peak`
//!   in `tests/bad_input.rs`. Evaluation passes record no graph (they run a model over the
//!   parameters detached from autograd): each evaluation thread holds about one iteration's
//!   intermediates of its batch at a time, whatever the depth.
//! - The task's data, as its footprint says.

use crate::run_config::RunConfig;
use anyhow::{anyhow, Result};
use candle_core::{DType, Device, Shape, Tensor};
use candle_nn::var_builder::SimpleBackend;
use candle_nn::{Init, VarBuilder};
use plugin_api::{Declaration, Footprint};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};

/// Floats kept per token, per width unit, per example and iteration of a training pass, for
/// layers that declare no number of their own.
pub const TOKEN_FLOATS: u64 = 24;
/// Floats kept per attention score (head, query, key), per example and iteration.
pub const SCORE_FLOATS: u64 = 4;
/// Copies of the parameters, beyond the parameters themselves, that training holds at its peak
/// with one training shard.
pub const PARAMETER_COPIES: u64 = 11;
/// The worker process itself: code, plugins, allocator and thread pools (whole small runs
/// peak at 30-140 MiB since evaluations record no graph and arenas are one per core; the
/// rest is slack for the allocator).
pub const PROCESS_BYTES: u64 = 192 << 20;

const FLOAT: u64 = std::mem::size_of::<f32>() as u64;
const GIB: f64 = (1u64 << 30) as f64;

/// What one run needs, in bytes, part by part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Estimate {
    /// Scalar parameters of layer and task model.
    pub params: u64,
    /// The parameters themselves.
    pub param_bytes: u64,
    /// Gradients (one set per training shard), AdamW's two moments and the other copies of
    /// the parameters that training holds at its peak.
    pub optimiser_bytes: u64,
    /// Intermediates kept for the backward pass of one step, or those of one iteration of
    /// the evaluation batches running at once, whichever is larger.
    pub activation_bytes: u64,
    /// The task's data sets; `None` when the task declares no footprint.
    pub data_bytes: Option<u64>,
}

impl Estimate {
    /// Everything, with the process itself.
    pub fn total(&self) -> u64 {
        PROCESS_BYTES + self.param_bytes + self.optimiser_bytes + self.activation_bytes + self.data_bytes.unwrap_or(0)
    }

    /// `about 12.3 GiB (parameters 1.0 GiB, ...)`.
    pub fn describe(&self) -> String {
        let gib = |b: u64| format!("{:.2} GiB", b as f64 / GIB);
        let data = match self.data_bytes {
            Some(bytes) => gib(bytes),
            None => "not declared by the task".into(),
        };
        format!(
            "about {} (parameters {} for {} values, gradients, optimiser state and other copies {}, activations of one step {}, \
             data {data})",
            gib(self.total()),
            gib(self.param_bytes),
            self.params,
            gib(self.optimiser_bytes),
            gib(self.activation_bytes),
        )
    }

    /// What to change, naming the largest part.
    fn fix(&self) -> &'static str {
        let parts = [
            (self.activation_bytes, "lower train.batch_size or train.eval_batch (activations grow with them), or the layer's iterations or the task's sequence length"),
            (self.param_bytes + self.optimiser_bytes, "lower the layer's width d (parameters grow with its square) or its layers, or set train.threads lower (each thread holds its own gradients)"),
            (self.data_bytes.unwrap_or(0), "use fewer training or evaluation examples"),
        ];
        parts.iter().max_by_key(|(bytes, _)| *bytes).map(|(_, fix)| *fix).unwrap_or(parts[0].1)
    }
}

/// How much memory a run may use where it will run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Budget {
    /// This machine's available memory (local workers).
    Local,
    /// A Slurm job's `mem=`, and the CPUs it asks for (`cpus-per-task=`, else Slurm's default
    /// of one), over which a run with `threads=0` splits its batches there.
    Job { bytes: u64, cpus: usize },
    /// Unknown (a Slurm job without `mem=`): nothing is refused.
    Unknown,
}

static BUDGET: OnceLock<Budget> = OnceLock::new();

impl Budget {
    /// Sets where this process's new runs will run (once, at start; later calls are ignored).
    pub fn set(budget: Budget) {
        let _ = BUDGET.set(budget);
    }

    /// The budget set at start, else this machine's.
    pub fn current() -> Budget {
        BUDGET.get().copied().unwrap_or(Budget::Local)
    }

    /// Bytes available, if known.
    pub fn bytes(self) -> Option<u64> {
        match self {
            Budget::Local => available_memory(),
            Budget::Job { bytes, .. } => Some(bytes),
            Budget::Unknown => None,
        }
    }
}

/// Memory available to new processes here: `MemAvailable`, or the cgroup's limit less its use
/// when that is lower.
pub fn available_memory() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib = meminfo.lines().find_map(|l| l.strip_prefix("MemAvailable:"))?.trim().trim_end_matches("kB").trim();
    let system = kib.parse::<u64>().ok()? * 1024;
    let read = |name: &str| std::fs::read_to_string(format!("/sys/fs/cgroup/{name}")).ok()?.trim().parse::<u64>().ok();
    match (read("memory.max"), read("memory.current")) {
        (Some(max), Some(current)) => Some(system.min(max.saturating_sub(current))),
        _ => Some(system),
    }
}

/// Refuses `config` when its estimate exceeds the budget, with the estimate and the fix.
pub fn check(layer: &Declaration, task: &Declaration, config: &RunConfig, budget: Budget) -> Result<()> {
    let Some(available) = budget.bytes() else { return Ok(()) };
    let cores = match budget {
        Budget::Job { cpus, .. } => cpus,
        _ => crate::train::parallel::usable_cores(),
    };
    let estimate = estimate(layer, task, config, cores)?;
    tracing::debug!("memory: run of {} on {} needs {}", config.layer, config.task, estimate.describe());
    if estimate.total() > available {
        return Err(anyhow!(
            "this run needs {} but {:.2} GiB is available{}: {}",
            estimate.describe(),
            available as f64 / GIB,
            match budget {
                Budget::Job { .. } => " to its Slurm job (--slurm mem=)",
                _ => " on this machine",
            },
            estimate.fix()
        ));
    }
    Ok(())
}

/// The estimate for `config` on a machine of `cores` usable cores, without allocating its
/// parameters or making its data.
pub fn estimate(layer: &Declaration, task: &Declaration, config: &RunConfig, cores: usize) -> Result<Estimate> {
    let settings = config.settings()?;
    let shapes = ShapeOnly::default();
    let vb = VarBuilder::from_backend(Box::new(shapes.clone()), DType::F32, Device::Cpu);
    let built =
        layer.build_layer(&config.layer_config, vb.pp("layer")).map_err(|e| anyhow!("layer `{}`: {e}", layer.name))?;
    let (width, iterations) = (built.width() as u64, built.train_iterations() as u64);
    drop(built);
    let footprint = match task.footprint(&config.task_config, vb.pp("task"), width as usize) {
        Some(footprint) => Some(footprint.map_err(|e| anyhow!("task `{}`: {e}", task.name))?),
        None => None,
    };
    let params = shapes.count();
    let param_bytes = params * FLOAT;
    let on_cpu = crate::device::parse(&settings.device).map(|d| d.is_cpu()).unwrap_or(true);
    let shards_for = |work: usize| crate::train::parallel::shards_over(settings.threads, work, on_cpu, cores);
    let shards = shards_for(settings.batch_size) as u64;
    let optimiser_bytes = param_bytes * (PARAMETER_COPIES + shards - 1);
    let heads = match config.layer_config.0.get("heads") {
        Some(plugin_api::Value::Int(heads)) => (*heads).max(1) as u64,
        _ => 1,
    };
    let activation_bytes = footprint.map_or(0, |f: Footprint| {
        let n = f.seq_len as u64;
        let token_floats = layer.activation_floats().map_or(TOKEN_FLOATS, u64::from);
        let per_iteration = token_floats * n * width + SCORE_FLOATS * heads * n * n;
        let train = settings.batch_size as f64 * iterations as f64;
        // Evaluation batches, and as many at once as there are threads for them.
        let eval_batch = settings.eval_batch.min(settings.eval_examples).max(1);
        let eval_batches = settings.eval_examples.div_ceil(eval_batch);
        let eval_threads = shards_for(eval_batches);
        let eval = (eval_batch * eval_threads) as f64;
        (train.max(eval) * per_iteration as f64 * FLOAT as f64).min(u64::MAX as f64) as u64
    });
    Ok(Estimate { params, param_bytes, optimiser_bytes, activation_bytes, data_bytes: footprint.map(|f| f.data_bytes) })
}

/// A `VarBuilder` backend that records each parameter's shape and hands out a zero
/// broadcast to it: a model is built without its parameters' memory.
#[derive(Clone, Default)]
struct ShapeOnly {
    shapes: Arc<Mutex<BTreeMap<String, Shape>>>,
}

impl ShapeOnly {
    fn count(&self) -> u64 {
        self.shapes.lock().unwrap_or_else(|e| e.into_inner()).values().map(|s| s.elem_count() as u64).sum()
    }
}

impl SimpleBackend for ShapeOnly {
    fn get(&self, shape: Shape, name: &str, _: Init, dtype: DType, device: &Device) -> candle_core::Result<Tensor> {
        self.shapes.lock().unwrap_or_else(|e| e.into_inner()).insert(name.to_string(), shape.clone());
        Tensor::zeros((), dtype, device)?.broadcast_as(shape)
    }

    fn get_unchecked(&self, name: &str, _: DType, _: &Device) -> candle_core::Result<Tensor> {
        candle_core::bail!("parameter `{name}` has no shape here")
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.shapes.lock().unwrap_or_else(|e| e.into_inner()).contains_key(name)
    }
}
