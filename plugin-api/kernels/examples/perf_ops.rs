//! Where a training step's time goes, per op: reads `perf script` output (call stacks with
//! source lines) of a `workbench bench` run and attributes every sample to
//!
//! - a **phase**: forward (everything the bench's step runs before `backward`), backward
//!   (candle's `Tensor::backward`, including the `bwd` of custom ops), optimizer (gradient
//!   norm and AdamW), data (batch generation), graph reading (the bench's one recorded forward
//!   pass before anything is timed, whose allocations are the process's first of a step's
//!   tensors and fault in their pages), warm-up (the bench's two untimed steps), or setup
//!   (building, puzzles, loading);
//! - a **site**: the innermost line of the workspace's own code on the stack (a line of a
//!   plugin, `plugin_api::ops` or a fused kernel), or in the backward the arm of candle's
//!   `backprop.rs` that differentiates the op (e.g. `Op::Matmul`), which names the op;
//! - a **kernel**: what the leaf frame does (gemm, strided copy, element-wise map, memset of
//!   fresh gradients, page faults of fresh allocations, malloc, libm, a fused kernel...).
//!
//! Usage (see `profile-step.sh`, which runs all of it):
//!
//! ```text
//! perf record -F 999 --call-graph dwarf,32768 -o step.data -- ./target/release/workbench bench ...
//! perf script -i step.data -F tid,ip,sym,srcline --full-source-path > step.txt
//! cargo run --release -p kernels --example perf_ops -- step.txt --freq 999 --steps 4 [--top 40]
//! ```
//!
//! `--steps` is the number of timed steps the bench ran (its `--steps`), so that milliseconds
//! are per timed step; the warm-up steps are a phase of their own and never part of a site.
//! Run the bench with `RAYON_NUM_THREADS=1` for exact attribution: samples of pool threads
//! carry no model frames and are reported apart.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};

/// One stack frame: symbol and `file:line` (full path).
struct Frame {
    kernel_space: bool,
    symbol: String,
    source: Option<(String, u32)>,
}

fn parse_frame(line: &str) -> Frame {
    // "\t    7f5f3c449e70 gemm_f32::microkernel::fma::f32::x2x6"
    let trimmed = line.trim_start();
    let (address, symbol) = trimmed.split_once(' ').unwrap_or((trimmed, ""));
    Frame { kernel_space: address.starts_with("ffffffff"), symbol: symbol.trim().to_string(), source: None }
}

fn parse_source(line: &str) -> Option<(String, u32)> {
    // "  /work/main/plugins/hyperset/src/block.rs:211 (inlined)"
    let text = line.trim().trim_end_matches(" (inlined)");
    let (file, number) = text.rsplit_once(':')?;
    Some((file.to_string(), number.parse().ok()?))
}

/// The samples of a `perf script` listing, each a list of frames from leaf to root.
fn read_samples(path: &str) -> std::io::Result<Vec<Vec<Frame>>> {
    let file = std::fs::File::open(path)?;
    let mut samples = Vec::new();
    let mut current: Vec<Frame> = Vec::new();
    for line in BufReader::new(file).lines() {
        let line = line?;
        if line.trim().is_empty() {
            if !current.is_empty() {
                samples.push(std::mem::take(&mut current));
            }
        } else if line.starts_with('\t') {
            current.push(parse_frame(&line));
        } else if line.starts_with("  ") && line.trim_start().starts_with('/') {
            if let Some(frame) = current.last_mut() {
                frame.source = parse_source(&line);
            }
        }
        // Other lines are sample headers (the thread id).
    }
    if !current.is_empty() {
        samples.push(current);
    }
    Ok(samples)
}

fn phase(frames: &[Frame]) -> &'static str {
    let any = |needle: &str| frames.iter().any(|f| f.symbol.contains(needle));
    if any("commands::bench::warm_up") {
        "warm-up"
    } else if any("commands::bench::read_graph") {
        "graph reading"
    } else if any("backprop") && any("backward") {
        "backward"
    } else if any("optim::AdamW") || any("global_grad_norm") {
        "optimizer"
    } else if any("train_batch") || any("sudoku::generate") {
        "data"
    } else if any("commands::bench::run") {
        "forward"
    } else if any("rayon") || any("candle-bp") || any("BarrierPool") || any("start_thread") {
        "pool threads"
    } else {
        "setup"
    }
}

/// Whether `symbol` is an allocator's own function (glibc's malloc and free and their
/// helpers, Rust's allocation shims), not a function whose generic arguments merely name an
/// allocator (`Vec<f32, alloc::alloc::Global>`), which is what the frame does for a living.
fn is_allocator(symbol: &str) -> bool {
    let name = symbol.split(['<', '(', ' ']).next().unwrap_or(symbol);
    ["malloc", "free", "cfree", "realloc", "calloc", "sysmalloc", "malloc_consolidate", "unlink_chunk"].contains(&name)
        || ["_int_", "__libc_", "__GI___libc_", "__posix_memalign", "_mid_memalign", "__rust_", "alloc::alloc::"]
            .iter()
            .any(|prefix| name.starts_with(prefix))
        || symbol.starts_with("<alloc::alloc::Global")
}

fn kernel(frames: &[Frame]) -> &'static str {
    let Some(leaf) = frames.first() else { return "unknown" };
    if leaf.kernel_space {
        return if frames.iter().any(|f| f.symbol.contains("page_fault")) {
            "page faults (fresh memory)"
        } else {
            "kernel (other)"
        };
    }
    // The leaf is often an inlined helper (`add_assign`, `{closure#0}`): the first frame,
    // from the leaf out, that names a known kind of work decides.
    for f in frames.iter().take(12) {
        let has = |needle: &str| f.symbol.contains(needle);
        let kind = if has("gemm") {
            "gemm"
        } else if f.symbol.starts_with("kernels::")
            || f.symbol.contains(" kernels::")
            || f.symbol.contains("<kernels::")
            || f.source.as_ref().is_some_and(|(file, _)| file.contains("/plugin-api/kernels/src/"))
        {
            "fused kernel"
        } else if has("memset") {
            "memset (zeroed buffers)"
        } else if has("memmove") || has("memcpy") {
            "memcpy"
        } else if has("Map1::map") || has("Map1Any") || has("copy_strided") || has("copy2d") {
            "strided copy / map"
        } else if has("add_assign_if_unshared") {
            "gradient sums in place"
        } else if has("binary_map") {
            "binary element-wise"
        } else if has("unary_map") || has("Affine") {
            "unary element-wise"
        } else if has("Reduce") || has("fold_impl") || has("vec_sum") || has("reduce") {
            "reduction"
        } else if has("exp") || has("erf") || has("libm") {
            "libm"
        } else if is_allocator(&f.symbol) {
            "malloc / free"
        } else if has("BarrierGuard") || has("park") || has("spin") {
            "thread pool"
        } else {
            continue;
        };
        return kind;
    }
    "other"
}

/// Names the match arm of candle's `backprop.rs` containing `line`: the nearest `Op::` arm
/// header above it.
struct BackpropArms {
    lines: Vec<String>,
}

impl BackpropArms {
    fn load(path: &str) -> Self {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        BackpropArms { lines: text.lines().map(str::to_string).collect() }
    }

    fn arm(&self, line: u32) -> String {
        if self.lines.is_empty() {
            // Built elsewhere (a clone since removed): the line number is all there is.
            return format!("backprop.rs:{line} (its source is not readable here)");
        }
        let target = (line as usize).saturating_sub(1).min(self.lines.len().saturating_sub(1));
        for l in (0..=target).rev() {
            let text = self.lines[l].trim();
            if (text.starts_with("Op::") || text.starts_with("&Op::") || text.starts_with("| Op::"))
                && text.contains('(')
            {
                // The arm runs from its header to the brace that closes its body.
                if self.arm_end(l) < target {
                    break;
                }
                let header: String = text.trim_start_matches('&').chars().take(60).collect();
                return header.trim_end_matches(['{', ' ', '>', '=']).to_string();
            }
        }
        format!("outside the op arms (backprop.rs:{line}: bookkeeping, freeing)")
    }

    /// The line where the body of the arm whose header is line `start` ends.
    fn arm_end(&self, start: usize) -> usize {
        let mut depth = 0i32;
        let mut opened = false;
        for (l, text) in self.lines.iter().enumerate().skip(start) {
            for c in text.chars() {
                match c {
                    '{' => {
                        depth += 1;
                        opened = true;
                    }
                    '}' => depth -= 1,
                    _ => {}
                }
            }
            if opened && depth <= 0 {
                return l;
            }
            // An arm without a block body ends at its comma.
            if !opened && text.trim_end().ends_with(',') {
                return l;
            }
        }
        self.lines.len()
    }
}

fn site(frames: &[Frame], root: &str, arms: &mut HashMap<String, BackpropArms>) -> String {
    let in_workspace =
        |f: &Frame| f.source.as_ref().is_some_and(|(file, _)| file.starts_with(root) && !file.contains("/vendor/"));
    let in_backprop = |f: &Frame| f.source.as_ref().is_some_and(|(file, _)| file.ends_with("/backprop.rs"));
    // The innermost frame that is the workspace's code or candle's backward (whose arm names
    // the op being differentiated; a custom op's `bwd` is workspace code further in).
    match frames.iter().find(|f| in_workspace(f) || in_backprop(f)) {
        Some(f) if in_backprop(f) && !f.symbol.ends_with("backward") => {
            // A helper of the backward (e.g. `GradStore::or_insert`, which zero-fills a
            // gradient before adding to it).
            let short = f.symbol.rsplit("::").next().unwrap_or(&f.symbol);
            format!("candle backward: {short}")
        }
        Some(f) if in_backprop(f) => {
            let (file, line) = f.source.as_ref().unwrap();
            let arms = arms.entry(file.clone()).or_insert_with(|| BackpropArms::load(file));
            format!("candle backward: {}", arms.arm(*line))
        }
        Some(f) => {
            let (file, line) = f.source.as_ref().unwrap();
            format!("{}:{line}", file.trim_start_matches(root).trim_start_matches('/'))
        }
        None => "(no workspace frame)".to_string(),
    }
}

struct Args {
    path: String,
    freq: f64,
    steps: f64,
    top: usize,
    root: String,
}

fn args() -> Args {
    let mut a = Args {
        path: String::new(),
        freq: 999.0,
        steps: 1.0,
        top: 40,
        root: std::env::current_dir().map(|p| p.to_string_lossy().into_owned()).unwrap_or_default(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--freq" => a.freq = it.next().and_then(|v| v.parse().ok()).expect("--freq HZ"),
            "--steps" => a.steps = it.next().and_then(|v| v.parse().ok()).expect("--steps N"),
            "--top" => a.top = it.next().and_then(|v| v.parse().ok()).expect("--top N"),
            "--root" => a.root = it.next().expect("--root DIR"),
            path => a.path = path.to_string(),
        }
    }
    if a.path.is_empty() {
        eprintln!("usage: perf_ops PERF_SCRIPT.txt --freq HZ --steps N [--top K] [--root WORKSPACE]");
        std::process::exit(2);
    }
    a
}

fn main() -> std::io::Result<()> {
    let a = args();
    let samples = read_samples(&a.path)?;
    let ms = |n: usize| n as f64 * 1000.0 / a.freq / a.steps;
    let mut arms = HashMap::new();
    let mut by_phase: HashMap<&str, usize> = HashMap::new();
    let mut by_site: HashMap<(&str, String), HashMap<&str, usize>> = HashMap::new();
    let mut by_kernel: HashMap<(&str, &str), usize> = HashMap::new();
    for frames in &samples {
        let p = phase(frames);
        *by_phase.entry(p).or_default() += 1;
        let k = kernel(frames);
        *by_kernel.entry((p, k)).or_default() += 1;
        if matches!(p, "forward" | "backward" | "optimizer") {
            *by_site.entry((p, site(frames, &a.root, &mut arms))).or_default().entry(k).or_default() += 1;
        }
    }
    let step_samples: usize =
        ["forward", "backward", "optimizer"].iter().map(|p| by_phase.get(p).copied().unwrap_or(0)).sum();
    println!("{} samples at {} Hz over {} steps; per step:", samples.len(), a.freq, a.steps);
    if !by_phase.contains_key("warm-up") {
        // The phase is found by the bench's `warm_up` frame; without it the warm-up steps'
        // samples land in the other phases and every per-step figure is too high.
        println!("  (no sample in the bench's warm_up frame: the figures include the warm-up steps)");
    }
    let mut phases: Vec<_> = by_phase.iter().collect();
    phases.sort_by(|x, y| y.1.cmp(x.1));
    for (p, n) in &phases {
        println!("  {p:<14} {:8.1} ms", ms(**n));
    }
    println!("\nkernels within the step (forward + backward + optimizer):");
    let mut kernels: HashMap<&str, usize> = HashMap::new();
    for ((p, k), n) in &by_kernel {
        if matches!(*p, "forward" | "backward" | "optimizer") {
            *kernels.entry(k).or_default() += n;
        }
    }
    let mut kernels: Vec<_> = kernels.into_iter().collect();
    kernels.sort_by_key(|entry| std::cmp::Reverse(entry.1));
    for (k, n) in kernels {
        println!("  {k:<28} {:8.1} ms  {:5.1}%", ms(n), 100.0 * n as f64 / step_samples.max(1) as f64);
    }
    if std::env::var_os("PERF_OPS_OTHER").is_some() {
        let mut other: HashMap<&str, usize> = HashMap::new();
        for frames in &samples {
            if kernel(frames) == "other" {
                *other.entry(frames[0].symbol.as_str()).or_default() += 1;
            }
        }
        let mut other: Vec<_> = other.into_iter().collect();
        other.sort_by_key(|entry| std::cmp::Reverse(entry.1));
        println!("\nleaf symbols counted as other:");
        for (sym, n) in other.into_iter().take(20) {
            println!("  {:8.1} ms  {sym}", ms(n));
        }
    }
    println!("\ntop sites (phase, op site: ms per step, share of the step, kernels):");
    let mut sites: Vec<_> = by_site.into_iter().map(|(key, ks)| (key, ks.values().sum::<usize>(), ks)).collect();
    sites.sort_by_key(|entry| std::cmp::Reverse(entry.1));
    for ((p, s), n, ks) in sites.into_iter().take(a.top) {
        let mut ks: Vec<_> = ks.into_iter().collect();
        ks.sort_by_key(|entry| std::cmp::Reverse(entry.1));
        let detail: Vec<String> =
            ks.iter().take(3).map(|(k, c)| format!("{k} {:.0}%", 100.0 * *c as f64 / n as f64)).collect();
        println!(
            "  {p:<9} {s:<58} {:7.1} ms {:5.1}%   {}",
            ms(n),
            100.0 * n as f64 / step_samples.max(1) as f64,
            detail.join(", ")
        );
    }
    Ok(())
}
