//! `bench --peak`: the machine's matrix-product peak, measured in the same minutes as the
//! bench's own steps, so that the step's share of it holds still while a shared machine
//! speeds up and slows down (a VM's 1024² product can change its rate by a factor of two
//! from one minute to the next: benchmark record (38)).
//!
//! The peak is the f32 product of two 1024 x 1024 matrices through `gemm`, the library
//! candle multiplies with (`kernels::dense`), on as many threads as the step has shards: the figure
//! `kernels --example gemm_peak` prints as "1024²".

use anyhow::{anyhow, Result};
use kernels::dense::{self, MatrixRef};
use std::time::Instant;

/// The side of the square product.
const SIDE: usize = 1024;

/// Products timed before and after each block of steps; the round's peak is their median.
const PRODUCTS_EACH_SIDE: usize = 3;

/// Two square operands and room for their product, with a thread pool of its own: the
/// bench process runs candle's ops on one thread (`RAYON_NUM_THREADS=1`), so rayon's global
/// pool has a single thread.
pub struct ProductPeak {
    pool: rayon::ThreadPool,
    threads: usize,
    lhs: Vec<f32>,
    rhs: Vec<f32>,
    out: Vec<f32>,
}

impl ProductPeak {
    pub fn new(threads: usize) -> Result<Self> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .map_err(|e| anyhow!("cannot start {threads} threads for the product peak: {e}"))?;
        // Values of either sign, all normal (denormals would slow the product down).
        let operand = |salt: usize| (0..SIDE * SIDE).map(|i| ((i * 7 + salt) % 13) as f32 / 13.0 - 0.5).collect();
        let mut peak = Self { pool, threads, lhs: operand(1), rhs: operand(5), out: vec![0.0; SIDE * SIDE] };
        peak.product_seconds(); // first touch of the output, and the pool's threads started
        Ok(peak)
    }

    pub fn threads(&self) -> usize {
        self.threads
    }

    /// The times of [`PRODUCTS_EACH_SIDE`] products, appended to `times`.
    pub fn time_products(&mut self, times: &mut Vec<f64>) {
        times.extend((0..PRODUCTS_EACH_SIDE).map(|_| self.product_seconds()));
    }

    /// GFLOP/s of the median of `times` (products timed by [`Self::time_products`]).
    pub fn gflop_per_s(times: &[f64]) -> f64 {
        2.0 * (SIDE * SIDE * SIDE) as f64 / median(times) / 1e9
    }

    fn product_seconds(&mut self) -> f64 {
        let (lhs, rhs) = (MatrixRef::row_major(&self.lhs, SIDE, SIDE), MatrixRef::row_major(&self.rhs, SIDE, SIDE));
        let (out, threads) = (&mut self.out, self.threads);
        let t0 = Instant::now();
        self.pool.install(|| dense::product_f32(out, lhs, rhs, threads));
        let seconds = t0.elapsed().as_secs_f64();
        std::hint::black_box(&self.out);
        seconds
    }
}

/// The step's share of the peak: each round's step GFLOP/s (at `step_flops` a step, its mean
/// step in `rounds`, beside the round's product GFLOP/s) over the product's, as the `peak`
/// object of `bench --json` and the report's lines (the rounds' line only for more than one).
pub fn report(
    threads: usize,
    step_flops: f64,
    rounds: &[(f64, f64)],
    steps: usize,
) -> (serde_json::Value, Vec<String>) {
    let rounds: Vec<(f64, f64, f64)> = rounds
        .iter()
        .map(|&(step_s, product)| (step_flops / step_s / 1e9, product, step_flops / step_s / 1e9 / product))
        .collect();
    let product = median(&rounds.iter().map(|r| r.1).collect::<Vec<_>>());
    let share = median(&rounds.iter().map(|r| r.2).collect::<Vec<_>>());
    let json = serde_json::json!({
        "threads": threads, "gflop_per_s": product, "share": share,
        "rounds": rounds.iter().map(|(step, product, share)| serde_json::json!({
            "step_gflop_per_s": step, "gflop_per_s": product, "share": share,
        })).collect::<Vec<_>>(),
    });
    let mut lines = vec![format!(
        "{:.0} % of the gemm peak: a 1024² f32 product on {threads} thread(s) at {product:.1} GFLOP/s in the same minutes{}",
        share * 100.0,
        if rounds.len() > 1 { " (medians of the rounds)" } else { "" }
    )];
    if rounds.len() > 1 {
        let each: Vec<String> = rounds
            .iter()
            .map(|(step, product, share)| format!("{:.0} % ({step:.0} of {product:.0})", share * 100.0))
            .collect();
        lines.push(format!("rounds of {steps} steps framed by products: {}", each.join(", ")));
    }
    (json, lines)
}

/// The middle value of `values` (the upper one of the two middle values for an even count).
pub fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[sorted.len() / 2]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The product is a real one (checked against a sum written out for a few entries), so
    /// its rate is a product's rate.
    #[test]
    fn the_timed_product_is_the_matrix_product() {
        let mut peak = ProductPeak::new(2).unwrap();
        let mut times = Vec::new();
        peak.time_products(&mut times);
        assert_eq!(times.len(), PRODUCTS_EACH_SIDE);
        assert!(ProductPeak::gflop_per_s(&times) > 0.0);
        for (i, j) in [(0, 0), (3, 1000), (1023, 17), (512, 512)] {
            let expected: f64 = (0..SIDE).map(|k| peak.lhs[i * SIDE + k] as f64 * peak.rhs[k * SIDE + j] as f64).sum();
            let got = peak.out[i * SIDE + j] as f64;
            assert!((got - expected).abs() < 1e-3 * (1.0 + expected.abs()), "({i}, {j}): {got} vs {expected}");
        }
    }

    #[test]
    fn the_rate_is_that_of_the_median_time() {
        let flops = 2.0 * (SIDE * SIDE * SIDE) as f64;
        let rate = ProductPeak::gflop_per_s(&[4.0, 1.0, 2.0]);
        assert!((rate - flops / 2.0 / 1e9).abs() < 1e-9, "{rate}");
    }
}
