//! The fused exact GELU alone, forward and backward, per element: the figure to compare when
//! changing the polynomials of `src/vector.rs` (`ncdf_f32`, `exp_f32`), which the step-size
//! network of Hyper-SET and every GELU of the plugins run on.
//!
//! `RAYON_NUM_THREADS=1 cargo run --release -p kernels --example gelu_op [-- REPEATS]`.
//! Shape: the default Hyper-SET Sudoku batch (16 x 81 tokens of width 128, f32).

use candle_core::{Device, Result, Tensor, Var};
use std::time::Instant;

fn median(mut times: Vec<f64>) -> f64 {
    times.sort_by(|a, b| a.total_cmp(b));
    times[times.len() / 2]
}

fn main() -> Result<()> {
    let repeats: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(300);
    let x = Var::randn(0f32, 1.0, (16, 81, 128), &Device::Cpu)?;
    // A fixed random weighting of the output, so the backward gets a dense gradient.
    let probe = Tensor::randn(0f32, 1.0, (16, 81, 128), &Device::Cpu)?;
    let elements = x.elem_count() as f64;
    let (mut forward, mut backward) = (Vec::with_capacity(repeats), Vec::with_capacity(repeats));
    for round in 0..repeats + 5 {
        let t0 = Instant::now();
        let y = kernels::gelu_erf(&x)?;
        let t1 = Instant::now();
        let weighted = (y * &probe)?.sum_all()?;
        let t2 = Instant::now();
        weighted.backward()?;
        let t3 = Instant::now();
        // The first rounds fault in fresh pages.
        if round >= 5 {
            forward.push((t1 - t0).as_secs_f64());
            backward.push((t3 - t2).as_secs_f64());
        }
    }
    println!("exact GELU, 16 x 81 x 128 f32, {} thread(s), {repeats} repeats", candle_core::utils::get_num_threads());
    println!("  forward   median {:.3} ns per element", median(forward) * 1e9 / elements);
    println!(
        "  backward  median {:.3} ns per element (with the probe's product and sum)",
        median(backward) * 1e9 / elements
    );
    Ok(())
}
