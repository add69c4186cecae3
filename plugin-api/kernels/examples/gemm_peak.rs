//! candle's f32 matrix product on this machine, in GFLOP/s: the peak a training step's
//! counted FLOPs are compared with ("% of gemm peak").
//!
//! `cargo run --release -p kernels --example gemm_peak [-- REPEATS]`; the thread count is
//! candle's (`RAYON_NUM_THREADS`). Shapes: a large square product, and those of the default
//! Hyper-SET Sudoku step (batch 16 x 81 tokens, d = 128, M = 512, 4 heads of 32).

use candle_core::{Device, Result, Tensor};
use std::time::Instant;

/// A random tensor of `shape`; with `transposed`, the transpose of a contiguous one (as the
/// backward pass reads its operands).
fn operand(shape: &[usize], transposed: bool) -> Result<Tensor> {
    let dev = Device::Cpu;
    if !transposed {
        return Tensor::randn(0f32, 1.0, shape, &dev);
    }
    let mut stored = shape.to_vec();
    let r = stored.len();
    stored.swap(r - 2, r - 1);
    Tensor::randn(0f32, 1.0, stored, &dev)?.transpose(r - 2, r - 1)
}

fn gflops((lhs, lhs_t): (&[usize], bool), (rhs, rhs_t): (&[usize], bool), repeats: usize) -> Result<(f64, f64)> {
    let a = operand(lhs, lhs_t)?;
    let b = operand(rhs, rhs_t)?;
    let _ = a.matmul(&b)?; // warm-up
    let mut times = Vec::with_capacity(repeats);
    for _ in 0..repeats {
        let t0 = Instant::now();
        let c = a.matmul(&b)?;
        std::hint::black_box(&c);
        times.push(t0.elapsed().as_secs_f64());
    }
    times.sort_by(|x, y| x.total_cmp(y));
    let batch: usize = lhs[..lhs.len() - 2].iter().product();
    let (m, k, n) = (lhs[lhs.len() - 2], lhs[lhs.len() - 1], rhs[rhs.len() - 1]);
    let flops = 2.0 * (batch * m * k * n) as f64;
    // Median and best of the repeats.
    Ok((flops / times[times.len() / 2] / 1e9, flops / times[0] / 1e9))
}

fn main() -> Result<()> {
    let repeats = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(20);
    println!(
        "candle 0.11.1 f32 matmul, {} threads, {} repeats (load average {})",
        candle_core::utils::get_num_threads(),
        repeats,
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    // (name, lhs, rhs), each operand with whether it is read transposed. The backward rows
    // are the products the step's backward pass runs for the forward ones above them.
    type Operand = (&'static [usize], bool);
    let shapes: [(&str, Operand, Operand); 11] = [
        ("square 1024", (&[1024, 1024], false), (&[1024, 1024], false)),
        ("X D      [1296,128]x[128,512]", (&[1296, 128], false), (&[128, 512], false)),
        ("U D^T    [1296,512]x[512,128]", (&[1296, 512], false), (&[512, 128], true)),
        ("X W      [1296,128]x[128,128]", (&[1296, 128], false), (&[128, 128], false)),
        ("Z Z^T    64x[81,32]x[32,81]", (&[64, 81, 32], false), (&[64, 32, 81], true)),
        ("backward, dX = dU D^T", (&[1296, 512], false), (&[512, 128], true)),
        ("backward, dD = X^T dU", (&[128, 1296], true), (&[1296, 512], false)),
        ("backward, dU = dY D", (&[1296, 128], false), (&[128, 512], false)),
        ("backward, dD = dY^T U", (&[128, 1296], true), (&[1296, 512], false)),
        ("backward, dX = dY W^T", (&[1296, 128], false), (&[128, 128], true)),
        ("backward, dW = X^T dY", (&[128, 1296], true), (&[1296, 128], false)),
    ];
    for (name, lhs, rhs) in shapes {
        let (median, best) = gflops(lhs, rhs, repeats)?;
        println!("  {name:<32} median {median:6.1} GFLOP/s   best {best:6.1} GFLOP/s");
    }
    Ok(())
}
