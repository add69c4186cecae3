//! candle's f32 matrix product on this machine, in GFLOP/s: the peak a training step's
//! counted FLOPs are compared with ("% of gemm peak"), and the processor's own f32 limit
//! (module `fma_limit`) the products are compared with.
//!
//! `cargo run --release -p kernels --example gemm_peak [-- REPEATS]`; the thread count is
//! candle's (`RAYON_NUM_THREADS`). Shapes: a large square product, and those of the default
//! Hyper-SET Sudoku step (batch 16 x 81 tokens, d = 128, M = 512, 4 heads of 32), each on
//! operands just used (in cache); then three of them as a training step meets them, on
//! operands and outputs out of the cache.

mod fma_limit;

use candle_core::{Device, Result, Tensor};
use kernels::dense::{self, MatrixRef};
use std::time::Instant;

/// Bytes the out-of-cache products rotate over: twice the largest last-level cache of the
/// machines the workbench is measured on (32 MiB), so no operand is still cached when it
/// comes round again.
const OUT_OF_CACHE_BYTES: usize = 64 << 20;

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

type Operand<'a> = (&'a [usize], bool);

/// `(median, best)` GFLOP/s of `lhs x rhs` repeated on the same operands (in cache).
fn gflops((lhs, lhs_t): Operand, (rhs, rhs_t): Operand, repeats: usize) -> Result<(f64, f64)> {
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
    Ok(rates(lhs, rhs, times))
}

/// `(median, best)` GFLOP/s of `lhs x rhs` as a training step meets it: the left operand and
/// the output were last touched long before, the product rotating over enough copies of both
/// to fill `OUT_OF_CACHE_BYTES`. Called on `gemm` itself, as the fused kernels' products are,
/// with the outputs allocated (and their pages touched) beforehand, so that what is timed is
/// the cache and not the allocator.
fn gflops_out_of_cache((lhs, lhs_t): Operand, (rhs, rhs_t): Operand, threads: usize) -> (f64, f64) {
    let (m, k, n) = (lhs[0], lhs[1], rhs[1]);
    let random = |len: usize, seed: usize| -> Vec<f32> {
        (0..len).map(|i| ((i.wrapping_mul(2_654_435_761).wrapping_add(seed)) % 1000) as f32 / 500.0 - 1.0).collect()
    };
    let copies = OUT_OF_CACHE_BYTES.div_ceil(4 * (m * k + m * n)).max(2);
    let lhs_copies: Vec<Vec<f32>> = (0..copies).map(|c| random(m * k, c)).collect();
    let mut outputs: Vec<Vec<f32>> = (0..copies).map(|_| vec![1.0; m * n]).collect();
    let b = random(k * n, copies);
    let operand = |data, rows, cols, transposed| match transposed {
        true => MatrixRef::transposed(data, rows, cols),
        false => MatrixRef::row_major(data, rows, cols),
    };
    let mut times = Vec::new();
    for round in 0..3 {
        for (a, c) in lhs_copies.iter().zip(&mut outputs) {
            let t0 = Instant::now();
            dense::product_f32(c, operand(a, m, k, lhs_t), operand(&b, k, n, rhs_t), threads);
            if round > 0 {
                times.push(t0.elapsed().as_secs_f64());
            }
        }
    }
    rates(lhs, rhs, times)
}

/// Median and best GFLOP/s of the product `lhs x rhs` timed `times`.
fn rates(lhs: &[usize], rhs: &[usize], mut times: Vec<f64>) -> (f64, f64) {
    times.sort_by(|x, y| x.total_cmp(y));
    let batch: usize = lhs[..lhs.len() - 2].iter().product();
    let (m, k, n) = (lhs[lhs.len() - 2], lhs[lhs.len() - 1], rhs[rhs.len() - 1]);
    let flops = 2.0 * (batch * m * k * n) as f64;
    (flops / times[times.len() / 2] / 1e9, flops / times[0] / 1e9)
}

fn main() -> Result<()> {
    let repeats = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(20);
    let threads = candle_core::utils::get_num_threads();
    match (fma_limit::gflops(1, 5), fma_limit::gflops(threads, 5)) {
        (Some(((one, one_best), isa)), Some(((all, all_best), _))) => println!(
            "f32 FMA limit ({isa}): 1 thread median {one:6.1} best {one_best:6.1} GFLOP/s; \
             {threads} threads median {all:6.1} best {all_best:6.1} GFLOP/s"
        ),
        _ => println!("f32 FMA limit: not measured (no AVX2 + FMA or AVX-512 on this processor, or WORKBENCH_KERNELS_ISA=baseline)"),
    }
    println!(
        "candle 0.11.1 f32 matmul, {} threads, {} repeats (load average {})",
        threads,
        repeats,
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    // (name, lhs, rhs), each operand with whether it is read transposed. The backward rows
    // are the products the step's backward pass runs for the forward ones above them (dD
    // in two forms).
    let shapes: [(&str, Operand, Operand); 11] = [
        ("square 1024", (&[1024, 1024], false), (&[1024, 1024], false)),
        ("X D      [1296,128]x[128,512]", (&[1296, 128], false), (&[128, 512], false)),
        ("U D^T    [1296,512]x[512,128]", (&[1296, 512], false), (&[512, 128], true)),
        ("X W      [1296,128]x[128,128]", (&[1296, 128], false), (&[128, 128], false)),
        ("Z Z^T    64x[81,32]x[32,81]", (&[64, 81, 32], false), (&[64, 32, 81], true)),
        ("backward, dX = dU D^T", (&[1296, 512], false), (&[512, 128], true)),
        ("backward, dD = X^T dU", (&[128, 1296], true), (&[1296, 512], false)),
        ("backward, dU = dY D", (&[1296, 128], false), (&[128, 512], false)),
        // The same product as its transpose, as the step runs it (`linear::gradient_product`).
        ("backward, dD^T = dU^T X", (&[512, 1296], true), (&[1296, 128], false)),
        ("backward, dX = dY W^T", (&[1296, 128], false), (&[128, 128], true)),
        ("backward, dW = X^T dY", (&[128, 1296], true), (&[1296, 128], false)),
    ];
    for &(name, lhs, rhs) in &shapes {
        let (median, best) = gflops(lhs, rhs, repeats)?;
        println!("  {name:<32} median {median:6.1} GFLOP/s   best {best:6.1} GFLOP/s");
    }
    println!(
        "out of cache (gemm itself; operands and outputs rotating over {} MiB, as in a training step):",
        OUT_OF_CACHE_BYTES >> 20
    );
    // X D, U D^T and dD: the step's largest products, forward and backward.
    for (name, lhs, rhs) in [shapes[1], shapes[2], shapes[6], shapes[8]] {
        let (median, best) = gflops_out_of_cache(lhs, rhs, threads);
        println!("  {name:<32} median {median:6.1} GFLOP/s   best {best:6.1} GFLOP/s");
    }
    Ok(())
}
