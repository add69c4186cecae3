//! The processor's f32 arithmetic limit: independent fused multiply-adds at the widest vector
//! width it has, on one thread and on several. A matrix product can at best reach it; the
//! products' and the training step's GFLOP/s are read against it.
//!
//! Each thread runs twelve independent chains `acc <- acc * a + b` (more than an FMA's latency
//! times the units that issue them on current x86 cores, so the chains never wait on each
//! other); `a` and `b` keep every value finite and normal.

use plugin_api::isa::Isa;
use std::time::Instant;

/// Iterations of the twelve chains per thread and timing.
const ITERATIONS: usize = 20_000_000;
const CHAINS: usize = 12;

/// `(median, best)` GFLOP/s over `repeats` timings of `threads` threads running the chains
/// at once, and the instruction set used; `None` without FMA.
pub fn gflops(threads: usize, repeats: usize) -> Option<((f64, f64), &'static str)> {
    let (lanes, name) = width()?;
    let flops = (2 * lanes * CHAINS * ITERATIONS * threads) as f64;
    let mut times: Vec<f64> = (0..repeats.max(1))
        .map(|_| {
            let t0 = Instant::now();
            std::thread::scope(|scope| {
                for _ in 0..threads {
                    scope.spawn(|| std::hint::black_box(run(ITERATIONS)));
                }
            });
            t0.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    Some(((flops / times[times.len() / 2] / 1e9, flops / times[0] / 1e9), name))
}

/// f32 lanes per instruction and the instruction set's name: the widest the processor has,
/// or the one `WORKBENCH_KERNELS_ISA` caps the kernels at (so that the figures of an AVX2
/// emulation are read against an AVX2 limit).
fn width() -> Option<(usize, &'static str)> {
    match plugin_api::isa::kernels_isa() {
        Isa::Avx512 => Some((16, "AVX-512")),
        Isa::Avx2 => Some((8, "AVX2 + FMA")),
        Isa::Baseline => None,
    }
}

/// The chains at the width `width` chose; returns a sum of them so nothing is left unused.
fn run(iterations: usize) -> f32 {
    match plugin_api::isa::kernels_isa() {
        // SAFETY: `kernels_isa` names no more than the processor has.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { x86::avx512(iterations) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86::avx2(iterations) },
        _ => 0.0,
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::CHAINS;
    use std::arch::x86_64::*;

    /// `acc * a + b` converges to `b / (1 - a)`: finite, normal, never constant-folded away
    /// (`a` and `b` pass through `black_box`).
    const A: f32 = 0.999_9;
    const B: f32 = 1e-3;

    /// `$name(iterations)`: the twelve chains at one vector width, given that width's
    /// broadcast, FMA, add and zero intrinsics and the sum of a vector's lanes.
    macro_rules! chains {
        ($name:ident, $features:literal, $set1:ident, $fmadd:ident, $add:ident, $zero:ident, $lanes_sum:ident) => {
            #[target_feature(enable = $features)]
            pub unsafe fn $name(iterations: usize) -> f32 {
                let (a, b) = ($set1(std::hint::black_box(A)), $set1(std::hint::black_box(B)));
                let mut acc = [$set1(1.0); CHAINS];
                for _ in 0..iterations {
                    for chain in acc.iter_mut() {
                        *chain = $fmadd(*chain, a, b);
                    }
                }
                $lanes_sum(acc.iter().fold($zero(), |s, &c| $add(s, c)))
            }
        };
    }

    chains!(avx2, "avx2,fma", _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps, _mm256_setzero_ps, sum_of_lanes);
    chains!(avx512, "avx512f", _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps, _mm512_setzero_ps, _mm512_reduce_add_ps);

    /// The sum of the eight lanes of `v`.
    #[target_feature(enable = "avx")]
    fn sum_of_lanes(v: __m256) -> f32 {
        let mut lanes = [0f32; 8];
        // SAFETY: `lanes` holds eight f32.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), v) };
        lanes.iter().sum()
    }
}
