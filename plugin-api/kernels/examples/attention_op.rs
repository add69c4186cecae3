//! The fused bi-softmax attention op alone, forward and backward, on one thread: the figure
//! to compare when changing `src/attention.rs` (the step's own figure moves with everything
//! else in the step).
//!
//! `RAYON_NUM_THREADS=1 cargo run --release -p kernels --example attention_op [-- REPEATS]`.
//! glibc's default thresholds hand each fresh output back to the system and fault its pages
//! in again (the forward's figure grows by about 40 % without them); the workbench keeps
//! freed buffers (`cli.rs`), as these variables do here: `MALLOC_MMAP_THRESHOLD_=33554432
//! MALLOC_TRIM_THRESHOLD_=2147483647 MALLOC_TOP_PAD_=67108864`.
//! Shape: the default Hyper-SET Sudoku shard (8 samples x 81 tokens, 4 heads of 32, f32).

use candle_core::{Device, Result, Tensor, Var};
use std::time::Instant;

fn median_us(mut times: Vec<f64>) -> f64 {
    times.sort_by(|a, b| a.total_cmp(b));
    times[times.len() / 2] * 1e6
}

fn main() -> Result<()> {
    let repeats: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(200);
    let (batch, tokens, heads, head_dim) = (8, 81, 4, 32);
    let dev = Device::Cpu;
    let xw = Var::randn(0f32, 1.0, (batch, tokens, heads * head_dim), &dev)?;
    let gain = Var::from_tensor(&(Tensor::randn(0f32, 0.1, head_dim, &dev)? + 1.0)?)?;
    // A fixed random projection of the output, so the backward gets a dense gradient.
    let probe = Tensor::randn(0f32, 1.0, (batch, tokens, heads * head_dim), &dev)?;
    let beta = 1.0 / (head_dim as f64).sqrt();
    let (mut forward, mut backward) = (Vec::with_capacity(repeats), Vec::with_capacity(repeats));
    for round in 0..repeats + 5 {
        let t0 = Instant::now();
        let y = kernels::bi_softmax_attention(&xw, Some(&gain), heads, beta, 1e-6)?;
        let t1 = Instant::now();
        let grads = (y * &probe)?.sum_all()?.backward()?;
        let t2 = Instant::now();
        std::hint::black_box(grads.get(&xw));
        // The first rounds warm the caches and the allocator.
        if round >= 5 {
            forward.push((t1 - t0).as_secs_f64());
            backward.push((t2 - t1).as_secs_f64());
        }
    }
    println!(
        "bi-softmax attention, {batch} x {tokens} tokens, {heads} heads of {head_dim}, {} thread(s), {repeats} repeats",
        candle_core::utils::get_num_threads()
    );
    println!("  forward   median {:8.1} us", median_us(forward));
    println!("  backward  median {:8.1} us (with the probe's product and sum)", median_us(backward));
    Ok(())
}
