//! What memory a fused element-wise op reads and writes costs it: the feedforward's normed
//! ReLU (`kernels::normed_activation`, the default Hyper-SET Sudoku shape `[16, 81, 512]`, f32)
//! timed with its input and its output each either hot (the same buffers again and again) or
//! cold (rotating over more than the last-level cache, as in a training step, where every
//! forward output is kept for the backward and so lands in memory that was freed a step ago).
//!
//! `RAYON_NUM_THREADS=1 MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=2147483647
//! MALLOC_TOP_PAD_=67108864 cargo run --release -p kernels --example cold_outputs [-- REPEATS]`
//! (the allocator settings the workbench runs with, so that fresh outputs do not fault their
//! pages in).

use candle_core::{DType, Device, Result, Tensor};
use std::collections::VecDeque;
use std::time::Instant;

/// Buffers rotated over for a cold case: 24 inputs or outputs of 2.65 MB each, 64 MB.
const COLD_BUFFERS: usize = 24;

/// The median time of one forward, in µs, reading one of `inputs` in turn and keeping the
/// last `kept_outputs` outputs alive (0: each output's buffer is freed and reused at once).
fn median_us(inputs: &[Tensor], kept_outputs: usize, repeats: usize) -> Result<f64> {
    let gain = Tensor::ones(512, DType::F32, &Device::Cpu)?;
    let mut kept = VecDeque::new();
    let mut times = Vec::with_capacity(repeats);
    for round in 0..repeats + COLD_BUFFERS {
        let x = &inputs[round % inputs.len()];
        let t0 = Instant::now();
        let y = kernels::normed_activation(x, Some(&gain), 1e-6, kernels::Activation::Relu)?;
        let seconds = t0.elapsed().as_secs_f64();
        kept.push_back(y);
        if kept.len() > kept_outputs {
            kept.pop_front();
        }
        // The first rounds fill the rotation (and fault in its pages).
        if round >= COLD_BUFFERS {
            times.push(seconds);
        }
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2] * 1e6)
}

fn main() -> Result<()> {
    let repeats: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(400);
    let inputs =
        (0..COLD_BUFFERS).map(|_| Tensor::randn(0f32, 1.0, (16, 81, 512), &Device::Cpu)).collect::<Result<Vec<_>>>()?;
    println!("normed ReLU forward, 16 x 81 x 512 f32, one thread, median of {repeats}");
    for (name, inputs, kept) in [
        ("input hot,  output hot ", &inputs[..1], 0),
        ("input cold, output hot ", &inputs[..], 0),
        ("input hot,  output cold", &inputs[..1], COLD_BUFFERS),
        ("input cold, output cold", &inputs[..], COLD_BUFFERS),
    ] {
        println!("  {name}  {:7.1} µs", median_us(inputs, kept, repeats)?);
    }
    Ok(())
}
