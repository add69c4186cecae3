//! Hyper-SET's feedforward update `act(RMSNorm(x D) g) D^T` as one op
//! (`kernels::normed_feedforward`) against its three ops (`linear`, `normed_activation`,
//! `linear_transposed`): the median time of a forward and a backward, f32, on the default
//! Sudoku shapes (`x` `[B, 81, 128]`, `D` `[128, 512]`; B = 8, a shard of the default two,
//! and B = 16, one thread), the two forms interleaved. Each round reads another input and
//! keeps the results of the last rounds alive, over more than the last-level cache, as a
//! training step keeps every forward's tensors for its backward.
//!
//! `RAYON_NUM_THREADS=1 cargo run --release -p kernels --example feedforward_op [-- ROUNDS]`

use candle_core::{DType, Device, Result, Tensor, Var};
use kernels::Activation;
use std::collections::VecDeque;
use std::time::Instant;

/// Inputs rotated over, and rounds whose results stay alive: more than 32 MiB of each.
const ROTATION: usize = 16;

fn main() -> Result<()> {
    let rounds: usize = std::env::args().nth(1).map_or(Ok(200), |a| a.parse()).expect("ROUNDS must be a number");
    println!("threads {}; median of {rounds} rounds, forward and backward, µs", rayon::current_num_threads());
    for batch in [8, 16] {
        let inputs: Vec<Tensor> = (0..ROTATION)
            .map(|i| Tensor::randn(0f32, 1.0, (batch, 81, 128), &Device::Cpu)?.affine(1.0, i as f64 * 1e-3))
            .collect::<Result<_>>()?;
        let d = Var::from_tensor(&(Tensor::randn(0f32, 1.0, (128, 512), &Device::Cpu)? * 0.1)?)?;
        let g = Var::from_tensor(&Tensor::ones(512, DType::F32, &Device::Cpu)?)?;
        let r = Tensor::randn(0f32, 1.0, (batch, 81, 128), &Device::Cpu)?;
        let mut times = [Vec::new(), Vec::new()];
        let mut kept = VecDeque::new();
        for round in 0..rounds + ROTATION {
            for (form, times) in times.iter_mut().enumerate() {
                let x = Var::from_tensor(&inputs[round % ROTATION])?;
                let (x, d, g) = (x.as_tensor(), d.as_tensor(), Some(g.as_tensor()));
                let t0 = Instant::now();
                let y = match form {
                    0 => kernels::normed_feedforward(x, d, g, 1e-6, Activation::Relu)?,
                    _ => {
                        let hidden = kernels::linear(x, d, None)?;
                        let activated = kernels::normed_activation(&hidden, g, 1e-6, Activation::Relu)?;
                        kernels::linear_transposed(&activated, d, None)?
                    }
                };
                let grads = (&y * &r)?.sum_all()?.backward()?;
                let seconds = t0.elapsed().as_secs_f64();
                kept.push_back((y, grads));
                if kept.len() > 2 * ROTATION {
                    kept.pop_front();
                }
                if round >= ROTATION {
                    times.push(seconds * 1e6);
                }
            }
        }
        let [fused, composed] = times.map(|mut t| {
            t.sort_by(f64::total_cmp);
            t[t.len() / 2]
        });
        println!("  B = {batch:2}: one op {fused:7.0}, three ops {composed:7.0} (ratio {:.3})", composed / fused);
    }
    Ok(())
}
