//! The `gemm` crate (the products of `linear.rs`, called the same way) beside the machine's
//! C BLAS libraries on the default Hyper-SET Sudoku step's product shapes: one thread, in
//! cache, rounds interleaved. The figure to read before changing what the products run on
//! (a BLAS tuned for one processor family may beat `gemm` there and not elsewhere).
//!
//! `cargo run --release -p kernels --example blas_shapes [-- LIBRARY.so ...]`
//!
//! Each library is loaded at run time as `WORKBENCH_BLAS` loads one (`plugin_api::blas`: its
//! `cblas_sgemm`, its own threads held at one), so nothing is linked and a machine without one
//! still runs the `gemm` column. Without arguments: Debian's OpenBLAS and BLIS where they are
//! installed (`apt-get install libopenblas0-pthread libblis4-openmp`).

use plugin_api::blas::Blas;
use std::time::Instant;

/// Debian's paths of the libraries tried without arguments.
const DEFAULT_LIBRARIES: [&str; 2] =
    [plugin_api::blas::DEBIAN_OPENBLAS, "/usr/lib/x86_64-linux-gnu/blis-openmp/libblis.so.4"];

/// Timings per shape and library, each `SLICE_S` long; the median is printed.
const TIMINGS: usize = 15;
const SLICE_S: f64 = 0.02;

/// `C[m, n] = op(A) op(B)`: `A` stored `[m, k]` row-major, or `[k, m]` when transposed (as the
/// backward reads `Xᵀ`); `B` `[k, n]`, or `[n, k]` when transposed.
struct Shape {
    name: &'static str,
    m: usize,
    n: usize,
    k: usize,
    a_transposed: bool,
    b_transposed: bool,
}

/// Batch 16 x 81 tokens, d = 128, M = 512 (the feedforward's dictionary).
const SHAPES: [Shape; 8] = [
    Shape { name: "square 1024", m: 1024, n: 1024, k: 1024, a_transposed: false, b_transposed: false },
    Shape { name: "X D      [1296,128]x[128,512]", m: 1296, n: 512, k: 128, a_transposed: false, b_transposed: false },
    Shape {
        name: "A Dᵀ     [1296,512]x[512,128] view",
        m: 1296,
        n: 128,
        k: 512,
        a_transposed: false,
        b_transposed: true,
    },
    Shape {
        name: "A Dᵀ     [1296,512]x[512,128] copy",
        m: 1296,
        n: 128,
        k: 512,
        a_transposed: false,
        b_transposed: false,
    },
    Shape { name: "X W      [1296,128]x[128,128]", m: 1296, n: 128, k: 128, a_transposed: false, b_transposed: false },
    Shape {
        name: "dD = Xᵀ dU  [128,1296]x[1296,512]",
        m: 128,
        n: 512,
        k: 1296,
        a_transposed: true,
        b_transposed: false,
    },
    Shape {
        name: "dDᵀ = dUᵀ X [512,1296]x[1296,128]",
        m: 512,
        n: 128,
        k: 1296,
        a_transposed: true,
        b_transposed: false,
    },
    Shape {
        name: "dW = Xᵀ dY  [128,1296]x[1296,128]",
        m: 128,
        n: 128,
        k: 1296,
        a_transposed: true,
        b_transposed: false,
    },
];

/// What runs a product: the `gemm` crate or a loaded library's `cblas_sgemm`.
enum Backend {
    Gemm,
    Blas(Blas),
}

impl Backend {
    fn name(&self) -> &str {
        match self {
            Backend::Gemm => "gemm 0.19",
            Backend::Blas(blas) => blas.name(),
        }
    }

    fn run(&self, s: &Shape, a: &[f32], b: &[f32], c: &mut [f32]) {
        let (m, n, k) = (s.m, s.n, s.k);
        // Strides of element (i, p) of op(A) and (p, j) of op(B), as `linear.rs` passes them.
        let (a_row, a_col) = if s.a_transposed { (1, m) } else { (k, 1) };
        let (b_row, b_col) = if s.b_transposed { (1, k) } else { (n, 1) };
        match self {
            // SAFETY: the buffers hold more than every operand and output of the shapes.
            Backend::Gemm => unsafe {
                gemm::gemm(
                    m,
                    n,
                    k,
                    c.as_mut_ptr(),
                    1,
                    n as isize,
                    false,
                    a.as_ptr(),
                    a_col as isize,
                    a_row as isize,
                    b.as_ptr(),
                    b_col as isize,
                    b_row as isize,
                    0.0f32,
                    1.0f32,
                    false,
                    false,
                    false,
                    gemm::Parallelism::None,
                )
            },
            Backend::Blas(blas) => {
                // SAFETY: as above.
                let ran = unsafe {
                    blas.product(
                        (m, n, k),
                        c.as_mut_ptr(),
                        (a.as_ptr(), a_row, a_col),
                        (b.as_ptr(), b_row, b_col),
                        false,
                    )
                };
                assert!(ran, "{}: every shape here is one CBLAS reads as it lies", blas.name());
            }
        }
    }
}

/// The median GFLOP/s of `backend` on `shape` over [`TIMINGS`] slices.
fn rate(backend: &Backend, s: &Shape, a: &[f32], b: &[f32], c: &mut [f32]) -> f64 {
    for _ in 0..3 {
        backend.run(s, a, b, c);
    }
    let mut rates: Vec<f64> = (0..TIMINGS)
        .map(|_| {
            let start = Instant::now();
            let mut runs = 0;
            while start.elapsed().as_secs_f64() < SLICE_S {
                backend.run(s, a, b, c);
                runs += 1;
            }
            (2 * s.m * s.n * s.k * runs) as f64 / start.elapsed().as_secs_f64() / 1e9
        })
        .collect();
    rates.sort_by(f64::total_cmp);
    rates[rates.len() / 2]
}

fn main() {
    let asked: Vec<String> = std::env::args().skip(1).collect();
    let paths: Vec<String> =
        if asked.is_empty() { DEFAULT_LIBRARIES.iter().map(|p| p.to_string()).collect() } else { asked.clone() };
    let mut backends = vec![Backend::Gemm];
    for path in &paths {
        match Blas::load(std::path::Path::new(path)) {
            Ok(blas) => backends.push(Backend::Blas(blas)),
            // A library asked for by name must load; Debian's are tried where installed.
            Err(why) if !asked.is_empty() => {
                eprintln!("error: {why}");
                std::process::exit(1);
            }
            Err(why) => println!("(not measured: {why})"),
        }
    }
    let len = SHAPES.iter().map(|s| (s.m * s.k).max(s.k * s.n).max(s.m * s.n)).max().unwrap_or(0);
    let value = |i: usize| ((i * 2_654_435_761) % 2000) as f32 / 1000.0 - 1.0;
    let a: Vec<f32> = (0..len).map(value).collect();
    let b: Vec<f32> = (0..len).map(|i| value(i + 7)).collect();
    let mut c = vec![0f32; len];
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "f32 products, one thread, in cache, median of {TIMINGS} timings of {} ms each, GFLOP/s (load average {})",
        SLICE_S * 1e3,
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
    );
    let names: Vec<String> = backends.iter().map(|b| format!("{:>18}", b.name())).collect();
    println!("  {:36}{}", "shape", names.concat());
    for s in &SHAPES {
        // A warm-up round for every backend first, so each is measured in the same minutes.
        for backend in &backends {
            rate(backend, s, &a, &b, &mut c);
        }
        let rates: Vec<String> = backends.iter().map(|bk| format!("{:>18.1}", rate(bk, s, &a, &b, &mut c))).collect();
        println!("  {:36}{}", s.name, rates.concat());
    }
}
