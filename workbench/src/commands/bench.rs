//! `workbench bench`: training throughput of a layer on a task (Sudoku by default).
//!
//! Runs in this (short-lived) process: two warm-up steps, then `steps` timed steps of the
//! same forward / backward / AdamW update the worker does. With a PyTorch reference, the timed
//! steps run in `rounds` blocks of `steps`, each followed (or, every other round, preceded) by
//! a block of PyTorch's, so that both sides see the same minutes of a shared machine. With
//! `--peak`, each block is also framed by 1024² matrix products (`bench_peak`), and the step's
//! GFLOP/s is read as a share of the product's rate in that round.
//! Achieved GFLOP/s counts the matrix products of the model's recorded forward graph
//! (`bench_graph`), times three for the backward, for every layer and task.

use super::bench_graph::Graph;
use super::bench_peak::{self, ProductPeak};
use super::bench_reference::{Job, Model, Session};
use crate::exit_code::refused;
use crate::host::PluginHost;
use crate::params::Params;
use crate::run_config::RunConfig;
use crate::train::optim::{clip_scale, global_grad_norm, AdamW, AdamWConfig};
use crate::train::parallel;
use anyhow::{anyhow, Result};
use candle_core::DType;
use plugin_api::PluginKind;
use std::time::Instant;

/// How the steps are timed, and what they are set beside.
pub struct Timing {
    /// Timed steps per round.
    pub steps: usize,
    /// Blocks of `steps`, each beside PyTorch's block and the product peak's when asked.
    pub rounds: usize,
    /// Time the same model in PyTorch in turn with the workbench's blocks.
    pub reference: bool,
    /// Frame each block with 1024² products, the step's GFLOP/s read as a share of theirs.
    pub peak: bool,
}

/// Measures and prints the report, beside PyTorch's and the product peak's when asked; with
/// `json`, one object instead of the lines (README, "Machine-readable output").
pub fn run(
    host: &PluginHost,
    (layer, task): (&str, &str),
    timing: &Timing,
    overrides: &[String],
    json: bool,
) -> Result<i32> {
    let &Timing { steps, rounds, reference, peak } = timing;
    // The report's lines, unless it is printed as JSON at the end.
    macro_rules! say {
        ($($line:tt)*) => {
            if !json {
                println!($($line)*);
            }
        };
    }
    host.refuse_plugin_names(overrides).map_err(refused)?;
    let layer_plugin = host.get(layer, PluginKind::Layer).map_err(refused)?;
    let task_plugin = host.get(task, PluginKind::Task).map_err(refused)?;
    let mut all: Vec<String> = small_data(task).iter().map(|o| o.to_string()).collect();
    all.extend(overrides.iter().cloned());
    let config = RunConfig::resolve(&layer_plugin.declaration, &task_plugin.declaration, &all).map_err(refused)?;
    let s = config.settings()?;
    let reference_model = reference
        .then(|| {
            Model::find(
                (layer, &config.layer_config, &layer_plugin.declaration.params),
                (task, &config.task_config, &task_plugin.declaration.params),
            )
            .map_err(refused)
        })
        .transpose()?;
    let device = crate::device::parse(&s.device)?;
    if peak && !device.is_cpu() {
        return Err(refused(anyhow!(
            "--peak measures the processor's matrix-product peak, and this bench runs on {}: drop --peak, or bench on the CPU (device=cpu)",
            s.device
        )));
    }
    let task_obj = host.build_task(task, &config.task_config, s.seed)?;
    let params = Params::new(s.seed);
    let vb = params.var_builder(DType::F32, &device);
    let layer_obj = host.build_layer(layer, &config.layer_config, vb.pp("layer"))?;
    let model = task_obj.build_model(vb.pp("task"), layer_obj.width()).map_err(|e| anyhow!("{e}"))?;
    let mut opt = AdamW::new(
        params.vars(),
        AdamWConfig { beta1: s.beta1, beta2: s.beta2, eps: 1e-8, weight_decay: s.weight_decay },
    )?;
    let vars: Vec<_> = opt.slots.iter().map(|slot| slot.var.as_tensor().clone()).collect();
    let iterations = layer_obj.train_iterations();
    let shards = parallel::shard_count(s.threads, s.batch_size, device.is_cpu());
    let causal = task_obj.info().map_err(|e| anyhow!("{e}"))?.causal;
    let first_batch = task_obj.train_batch(0, s.batch_size, &device).map_err(|e| anyhow!("{e}"))?;
    let graph = read_graph(|| parallel::forward_loss(&layer_obj, &model, &first_batch, iterations, causal))?;
    if peak {
        graph.check_peak_readable(&format!("`{layer}` on `{task}`")).map_err(refused)?;
    }
    // CPU time of the steps (the closure's timed part), for `cpu ... per step`.
    let cpu = std::cell::Cell::new(0.0);
    // How long the shards' threads idle at each step's end, waiting for the slowest shard.
    let waiting = std::cell::Cell::new(parallel::ShardWaiting::default());
    // The reference builds its model and warms up before the workbench's own steps, so the
    // two never run at once.
    let mut torch = match &reference_model {
        Some(model) => {
            let job = Job {
                layer: &config.layer_config,
                task: &config.task_config,
                inputs: first_batch.inputs.dims().to_vec(),
                causal,
                batch: s.batch_size,
                device: s.device.clone(),
                threads: parallel::shard_count(s.threads, usize::MAX, true),
                settings: serde_json::json!({
                    "lr": s.lr, "beta1": s.beta1, "beta2": s.beta2, "weight_decay": s.weight_decay, "grad_clip": s.grad_clip,
                }),
            };
            Some(Session::start(model, &job)?)
        }
        None => None,
    };
    let mut step = |i: usize| -> Result<f64> {
        let batch = task_obj.train_batch(i as u64, s.batch_size, &device).map_err(|e| anyhow!("{e}"))?;
        let cpu0 = process_cpu_seconds();
        let t0 = Instant::now();
        let parallel::StepGradients { grads, shard_seconds, .. } =
            parallel::loss_and_grads(&layer_obj, &model, &batch, iterations, causal, shards, &vars)?;
        let mut waited = waiting.get();
        waited.add(&shard_seconds);
        waiting.set(waited);
        let norm = global_grad_norm(&grads, vars.iter().cloned())?;
        opt.step(&grads, s.lr, clip_scale(norm, s.grad_clip))?;
        // A GPU runs the step's kernels asynchronously: the step ends when they have run.
        device.synchronize()?;
        let total = t0.elapsed().as_secs_f64();
        cpu.set(cpu.get() + process_cpu_seconds() - cpu0);
        Ok(total)
    };
    warm_up(&mut step)?;
    let mut total = 0.0;
    let cpu_warm_up = cpu.get();
    waiting.take();
    // Per round, the workbench's and PyTorch's mean step; PyTorch goes first every other round,
    // so that a machine slowing down or speeding up favours neither.
    let mut paired: Vec<(f64, f64)> = Vec::new();
    // Per round, the workbench's mean step and the product peak's GFLOP/s around it.
    let mut product_peak = peak.then(|| ProductPeak::new(shards)).transpose()?;
    let mut peaks: Vec<(f64, f64)> = Vec::new();
    let torch_block = |torch: &mut Option<Session>| torch.as_mut().map(|session| session.time(steps)).transpose();
    for round in 0..rounds {
        let torch_first = round % 2 == 1;
        let before = if torch_first { torch_block(&mut torch)? } else { None };
        let mut products = Vec::new();
        if let Some(p) = product_peak.as_mut() {
            p.time_products(&mut products);
        }
        let mut ours = 0.0;
        for i in 0..steps {
            ours += step(2 + round * steps + i)?;
        }
        total += ours;
        if let Some(p) = product_peak.as_mut() {
            p.time_products(&mut products);
            peaks.push((ours / steps as f64, ProductPeak::gflop_per_s(&products)));
        }
        let after = if torch_first { None } else { torch_block(&mut torch)? };
        if let Some(torch_step) = before.or(after) {
            paired.push((ours / steps as f64, torch_step));
        }
    }
    let cpu = cpu.get() - cpu_warm_up;
    let waiting = waiting.get();
    let n = (steps * rounds) as f64;
    let samples_per_s = s.batch_size as f64 * n / total;
    let mut report = serde_json::json!({
        "layer": layer, "task": task, "batch_size": s.batch_size, "iterations": iterations,
        "parameters": params.count(), "shards": shards, "threads_per_op": candle_core::utils::get_num_threads(),
        "steps": steps, "rounds": rounds, "step_s": total / n, "samples_per_s": samples_per_s, "cpu_s_per_step": cpu / n,
        "shard_wait_share": waiting.share(),
    });
    say!(
        "layer {layer} on {task}, batch {}, {} iterations, {} parameters, {shards} shard(s) x {} thread(s) per op",
        s.batch_size,
        iterations,
        params.count(),
        candle_core::utils::get_num_threads()
    );
    say!("  step {:.3} s (forward, backward and update)", total / n);
    say!("  throughput {samples_per_s:.1} samples/s");
    // On a shared machine wall time depends on the other processes; CPU time much less.
    say!(
        "  cpu {:.3} s per step ({:.2} cores busy; load average {})",
        cpu / n,
        cpu / total.max(1e-9),
        std::fs::read_to_string("/proc/loadavg").unwrap_or_default().split_whitespace().next().unwrap_or("?")
    );
    if shards > 1 {
        say!(
            "  shards: the slowest takes {:.1} ms a step on average; their threads spend {:.1} % of that time waiting for it",
            waiting.slowest_mean() * 1e3,
            waiting.share() * 100.0
        );
    }
    let (memory_line, memory) = crate::huge_pages::report();
    say!("  {memory_line}");
    report["memory"] = memory;
    let isa = plugin_api::isa::kernels_isa();
    report["kernels_isa"] = isa.name().into();
    let products = plugin_api::blas::in_use().map(|blas| blas.name().to_string());
    report["products"] = products.clone().unwrap_or_else(|| "gemm".into()).into();
    if device.is_cpu() {
        say!("  {}", isa_line(isa, plugin_api::isa::Isa::detected()));
        say!("  {}", products_line(products.as_deref()));
    }
    if let Ok(kernels) = config.layer_config.str("kernels") {
        let note = match (device.is_cpu(), kernels, plugin_api::cuda_kernels_switched_on()) {
            (false, "fused", true) => {
                " (on CUDA: the CUDA normalisations and softmaxes, unfinished, in candle's composition)"
            }
            (false, "fused", false) => {
                " (on CUDA: candle's composition; WORKBENCH_CUDA_KERNELS=1 fuses the normalisations and softmaxes)"
            }
            _ => "",
        };
        say!("  kernels {kernels}{note}");
    }
    say!("  {}", graph.nodes_line());
    report["graph_op_nodes"] = graph.op_nodes.into();
    report["graph_mb"] = (graph.bytes as f64 / 1e6).into();
    report["graph_kept_in_ops_mb"] = (graph.kept_in_ops as f64 / 1e6).into();
    let flops = graph.step_flops() as f64;
    report["gflop_per_step"] = (flops / 1e9).into();
    report["gflop_per_s"] = (flops / (total / n) / 1e9).into();
    report["product_nodes"] = graph.products.nodes.into();
    say!("  {}", graph.flops_line(total / n));
    if let Some(p) = &product_peak {
        let (peak_report, lines) = bench_peak::report(p.threads(), flops, &peaks, steps);
        report["peak"] = peak_report;
        for line in lines {
            say!("  {line}");
        }
    }
    if let Some(session) = torch {
        let torch = &session.reference;
        let torch_step = paired.iter().map(|(_, theirs)| theirs).sum::<f64>() / paired.len() as f64;
        let torch_samples_per_s = s.batch_size as f64 / torch_step;
        let ratio = samples_per_s / torch_samples_per_s;
        // Each round's ratio: PyTorch's step over the workbench's, in the same minute.
        let round_ratios: Vec<f64> = paired.iter().map(|(ours, theirs)| theirs / ours).collect();
        report["reference"] = serde_json::json!({
            "torch": torch.torch, "device": s.device, "threads": torch.threads, "parameters": torch.parameters, "step_s": torch_step,
            "samples_per_s": torch_samples_per_s, "ratio": ratio, "instruction_caps": torch.caps,
            "rounds": paired.iter().zip(&round_ratios).map(|((ours, theirs), ratio)| serde_json::json!({
                "step_s": ours, "reference_step_s": theirs, "ratio": ratio,
            })).collect::<Vec<_>>(),
        });
        say!(
            "reference PyTorch {} {} eager, {} threads, {} parameters{}",
            torch.torch,
            if device.is_cpu() { "CPU".to_string() } else { s.device.clone() },
            torch.threads,
            torch.parameters,
            if torch.parameters == params.count() as u64 { "" } else { " (differs: not the same model)" }
        );
        if !torch.caps.is_empty() {
            say!("  instructions capped alike: {}", torch.caps.join(" "));
        }
        say!("  step {torch_step:.3} s");
        say!("  throughput {torch_samples_per_s:.1} samples/s");
        say!("  ratio {ratio:.2}x PyTorch ({samples_per_s:.1} vs {torch_samples_per_s:.1} samples/s)");
        if rounds > 1 {
            let each: Vec<String> = round_ratios.iter().map(|r| format!("{r:.2}x")).collect();
            say!("  rounds of {steps} steps each side, in turn: {}", each.join(" "));
        }
    }
    if json {
        println!("{report}");
    }
    Ok(0)
}

/// The instruction set the fused kernels run with, and whether `WORKBENCH_KERNELS_ISA` capped
/// it (the matrix products of gemm follow the build, not the variable: README, "Benchmarks").
pub(crate) fn isa_line(isa: plugin_api::isa::Isa, detected: plugin_api::isa::Isa) -> String {
    match isa == detected {
        true => format!("instructions {} (the processor's widest)", isa.name()),
        false => format!(
            "instructions {} ({} caps the kernels; the processor has {})",
            isa.name(),
            plugin_api::isa::ISA_VARIABLE,
            detected.name()
        ),
    }
}

/// What runs the fused kernels' matrix products: the `gemm` crate, or the C BLAS library
/// `WORKBENCH_BLAS` names (the `--peak` product stays `gemm`'s, the goals' measure).
pub(crate) fn products_line(library: Option<&str>) -> String {
    match library {
        None => format!("products gemm (built in; {} names a C BLAS library instead)", plugin_api::blas::BLAS_VARIABLE),
        Some(name) => format!(
            "products {name} ({}; products it cannot read as they lie, and the --peak product, on gemm)",
            plugin_api::blas::BLAS_VARIABLE
        ),
    }
}

/// Options giving each task a small data pool: making the data is not what is measured.
fn small_data(task: &str) -> &'static [&'static str] {
    match task {
        "sudoku" => &["task.train_puzzles=64", "task.eval_puzzles=16"],
        "image" => &["task.train_images=256", "task.test_images=64"],
        "masked-image" => &["task.train_images=256", "task.test_images=64"],
        "language" => &["task.corpus_bytes=65536"],
        _ => &[],
    }
}

/// CPU time (user + system) of this process so far, in seconds.
fn process_cpu_seconds() -> f64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage fills the struct it is given; RUSAGE_SELF is always valid.
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr());
        usage.assume_init()
    };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

/// One forward pass on the bench's whole batch, recorded and read before anything is timed.
/// A function of its own, never inlined, so that a profile of the bench can tell its samples
/// (the process's first allocations of a step's tensors and their page faults) from the timed
/// steps' by its frame (`kernels/examples/perf_ops.rs`).
#[inline(never)]
fn read_graph(forward: impl FnOnce() -> Result<candle_core::Tensor>) -> Result<Graph> {
    Ok(Graph::of(&forward()?))
}

/// The two untimed steps before the timed ones (first allocations, page faults, caches).
/// A function of its own, never inlined, so that a profile of the bench can tell their
/// samples from the timed steps' by its frame (`kernels/examples/perf_ops.rs`).
#[inline(never)]
fn warm_up(step: &mut impl FnMut(usize) -> Result<f64>) -> Result<()> {
    for i in 0..2 {
        step(i)?;
    }
    Ok(())
}
