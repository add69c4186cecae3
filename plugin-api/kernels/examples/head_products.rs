//! The attention's per-head products alone: the register tiles (`src/head_product.rs`, AVX-512 or
//! AVX2) beside the `gemm` crate on the same operands, one thread, in cache. The figure to compare
//! when changing the tiles.
//!
//! `cargo run --release -p kernels --example head_products [-- ROUNDS]`.
//! Last, the symmetric tiles of `Z Zᵀ` (queries equal to keys), rated by the full product's FLOPs.
//! Shapes: the default Sudoku heads (81 tokens, 4 heads of 32, 16 samples = 64 heads), each
//! head read where it lies in the merged `[N, H p]` rows, as the attention ops read it.

use std::time::Instant;

const TOKENS: usize = 81;
const HEADS: usize = 4;
const HEAD_DIM: usize = 32;
const SAMPLES: usize = 16;

/// A matrix read where it is: first entry, row stride, column stride.
type Matrix = (*const f32, usize, usize);

/// One product of the attention: its name and, for head `i`, its operands and its size.
struct Product {
    name: &'static str,
    size: (usize, usize, usize),
    operands: fn(&Heads, usize) -> (Matrix, Matrix),
}

/// Every head's `Q`, `K` (or `dO`) rows in the merged layout, and its `N x N` weights.
struct Heads {
    q: Vec<f32>,
    k: Vec<f32>,
    p: Vec<f32>,
}

impl Heads {
    fn new() -> Self {
        let value = |i: usize| ((i * 2_654_435_761) % 2000) as f32 / 1000.0 - 1.0;
        let merged = SAMPLES * TOKENS * HEADS * HEAD_DIM;
        Heads {
            q: (0..merged).map(value).collect(),
            k: (0..merged).map(|i| value(i + 7)).collect(),
            p: (0..SAMPLES * HEADS * TOKENS * TOKENS).map(|i| value(i + 11) / TOKENS as f32).collect(),
        }
    }

    /// Head `i` (sample `i / HEADS`, head `i % HEADS`) of a merged tensor: `N x p`.
    fn head(data: &[f32], i: usize) -> Matrix {
        let offset = (i / HEADS) * TOKENS * HEADS * HEAD_DIM + (i % HEADS) * HEAD_DIM;
        (data[offset..].as_ptr(), HEADS * HEAD_DIM, 1)
    }

    /// Head `i`'s weights: `N x N`, row-major.
    fn weights(&self, i: usize) -> Matrix {
        (self.p[i * TOKENS * TOKENS..].as_ptr(), TOKENS, 1)
    }
}

fn transposed((at, rs, cs): Matrix) -> Matrix {
    (at, cs, rs)
}

const PRODUCTS: [Product; 3] = [
    Product {
        name: "Q Kᵀ",
        size: (TOKENS, TOKENS, HEAD_DIM),
        operands: |h, i| (Heads::head(&h.q, i), transposed(Heads::head(&h.k, i))),
    },
    Product { name: "P V", size: (TOKENS, HEAD_DIM, TOKENS), operands: |h, i| (h.weights(i), Heads::head(&h.k, i)) },
    Product {
        name: "Pᵀ dO",
        size: (TOKENS, HEAD_DIM, TOKENS),
        operands: |h, i| (transposed(h.weights(i)), Heads::head(&h.q, i)),
    },
];

/// `dst = a b` by `gemm`, as the attention ops call it where no tiles run.
fn by_gemm((m, n, k): (usize, usize, usize), dst: &mut [f32], (a, a_rs, a_cs): Matrix, (b, b_rs, b_cs): Matrix) {
    // SAFETY: the operands address matrices of these sizes and strides; `dst` holds `m x n`.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            n as isize,
            false,
            a,
            a_cs as isize,
            a_rs as isize,
            b,
            b_cs as isize,
            b_rs as isize,
            0.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        )
    }
}

/// The median GFLOP/s of `rounds` passes of `run` over every head.
fn gflops(product: &Product, rounds: usize, mut run: impl FnMut(usize)) -> f64 {
    let (m, n, k) = product.size;
    let heads = SAMPLES * HEADS;
    let mut rates: Vec<f64> = (0..rounds + 3)
        .map(|_| {
            let start = Instant::now();
            (0..heads).for_each(&mut run);
            2.0 * (m * n * k * heads) as f64 / start.elapsed().as_secs_f64() / 1e9
        })
        .skip(3)
        .collect();
    rates.sort_by(|a, b| a.total_cmp(b));
    rates[rates.len() / 2]
}

fn main() {
    let rounds: usize = match std::env::args().nth(1).map(|s| s.parse()) {
        None => 200,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            eprintln!("head_products: ROUNDS must be a positive whole number (e.g. 200)");
            std::process::exit(2);
        }
    };
    let heads = Heads::new();
    println!("per-head products, {} heads, one thread, median GFLOP/s of {rounds} rounds", SAMPLES * HEADS);
    let mut dst = vec![0f32; TOKENS * TOKENS];
    for product in &PRODUCTS {
        let (m, n, k) = product.size;
        let gemm = gflops(product, rounds, |i| {
            let (a, b) = (product.operands)(&heads, i);
            by_gemm(product.size, &mut dst, a, b)
        });
        let mut ran = true;
        let tiles = gflops(product, rounds, |i| {
            let (a, b) = (product.operands)(&heads, i);
            // SAFETY: the operands and `dst` hold these sizes and strides.
            ran &= unsafe { kernels::head_product_f32(product.size, dst.as_mut_ptr(), n, a, b, 1.0, false) };
        });
        let tiles = if ran {
            format!("{tiles:6.1}")
        } else {
            "none here (the kernels run neither AVX-512 nor AVX2)".to_string()
        };
        println!("  {:<6} {m}x{n}x{k}  gemm {gemm:6.1}  register tiles {tiles}", product.name);
    }
    // Hyper-SET's scores `Z Zᵀ`: the full product's FLOPs per unit of time, so the rate
    // compares with the tiles' `Q Kᵀ` above.
    let symmetric = &PRODUCTS[0];
    let mut ran = true;
    let tiles = gflops(symmetric, rounds, |i| {
        let z = Heads::head(&heads.q, i);
        // SAFETY: `z` is N x p where it lies; `dst` holds N x N.
        ran &= unsafe { kernels::symmetric_head_product_f32((TOKENS, HEAD_DIM), dst.as_mut_ptr(), TOKENS, z, 1.0) };
    });
    let tiles =
        if ran { format!("{tiles:6.1}") } else { "none here (the kernels run neither AVX-512 nor AVX2)".to_string() };
    println!("  Z Zᵀ   {TOKENS}x{TOKENS}x{HEAD_DIM}  symmetric register tiles {tiles} (the full product's FLOPs)");
}
