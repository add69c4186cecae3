//! Differentiable building blocks shared by every plugin.
//!
//! candle's fused `rms_norm`, `layer_norm` and `softmax_last_dim` have no backward pass:
//! gradients silently stop at them. Everything here is composed of differentiable candle
//! ops so every parameter upstream receives its gradient (each plugin keeps a test of that).

use candle_core::{DType, Device, Result, Tensor, D};

/// Root-mean-square normalisation over the last dimension, `x / sqrt(mean(x^2) + eps)`,
/// then multiplied by `gain` when given. Keeps `||x||_2 = sqrt(dim)` (without gain): the
/// hyperspherical constraint of Hyper-SET (seed 000, Eq. 8).
pub fn rms_norm(x: &Tensor, gain: Option<&Tensor>, eps: f64) -> Result<Tensor> {
    let mean_sq = x.sqr()?.mean_keepdim(D::Minus1)?;
    let normed = x.broadcast_div(&(mean_sq + eps)?.sqrt()?)?;
    match gain {
        Some(g) => normed.broadcast_mul(g),
        None => Ok(normed),
    }
}

/// Numerically stable softmax along `dim` (differentiable).
pub fn softmax(x: &Tensor, dim: D) -> Result<Tensor> {
    candle_nn::ops::softmax(x, dim)
}

/// `softmax(a, -1) + softmax(a, -2)`: for the symmetric score matrix `a` this is `P + P^T`,
/// the bi-softmax attention of Hyper-SET (seed 000, Eq. 7 and 9).
pub fn bi_softmax(a: &Tensor) -> Result<Tensor> {
    softmax(a, D::Minus1)? + softmax(a, D::Minus2)?
}

/// `[sin(t w_k), cos(t w_k)]` with `dim / 2` frequencies `w_k = exp(-k ln(10^4) / (dim/2 - 1))`:
/// the iteration-index embedding of the Hyper-SET step-size network (notes-hyperset.md §9).
pub fn sinusoidal_embedding(t: f64, dim: usize, dtype: DType, device: &Device) -> Result<Tensor> {
    let half = dim / 2;
    let denom = (half.max(2) - 1) as f64;
    let mut values = Vec::with_capacity(2 * half);
    let freqs: Vec<f64> = (0..half).map(|k| (-(k as f64) * 10_000f64.ln() / denom).exp()).collect();
    values.extend(freqs.iter().map(|w| (t * w).sin()));
    values.extend(freqs.iter().map(|w| (t * w).cos()));
    Tensor::from_vec(values, 2 * half, device)?.to_dtype(dtype)
}

/// Mean cross-entropy of `logits` `[M, C]` against class ids `targets` `[M]` (u32), with
/// optional per-row weights `weights` `[M]` (e.g. 1 on blank Sudoku cells, 0 elsewhere):
/// `sum_i w_i * ce_i / sum_i w_i`.
pub fn weighted_cross_entropy(logits: &Tensor, targets: &Tensor, weights: Option<&Tensor>) -> Result<Tensor> {
    let log_p = candle_nn::ops::log_softmax(logits, D::Minus1)?;
    let picked = log_p.gather(&targets.unsqueeze(1)?, 1)?.squeeze(1)?;
    let nll = picked.neg()?;
    match weights {
        Some(w) => {
            let w = w.to_dtype(nll.dtype())?;
            let total = w.sum_all()?;
            (nll * &w)?.sum_all()?.broadcast_div(&total.maximum(1e-12)?)
        }
        None => nll.mean_all(),
    }
}

/// A causal mask `[N, N]` with 0 on and below the diagonal and `-inf` above it, to add to
/// attention scores.
pub fn causal_mask(n: usize, dtype: DType, device: &Device) -> Result<Tensor> {
    let values: Vec<f32> =
        (0..n).flat_map(|i| (0..n).map(move |j| if j <= i { 0.0 } else { f32::NEG_INFINITY })).collect();
    Tensor::from_vec(values, (n, n), device)?.to_dtype(dtype)
}

/// The `[n, n]` additive mask that leaves each token out of its own attention: `-inf` on the
/// diagonal, 0 elsewhere (the Energy Transformer's sum over `B != C`).
pub fn self_exclusion_mask(n: usize, dtype: DType, device: &Device) -> Result<Tensor> {
    let values: Vec<f32> =
        (0..n).flat_map(|i| (0..n).map(move |j| if i == j { f32::NEG_INFINITY } else { 0.0 })).collect();
    Tensor::from_vec(values, (n, n), device)?.to_dtype(dtype)
}

/// Inverted dropout with a mask drawn from `seed`: each entry kept with probability `1 - p`
/// and scaled by `1 / (1 - p)`. candle's own `dropout` draws from the device's generator,
/// which cannot be seeded on CPU, so a run with dropout would not train again to the same
/// numbers; a seed derived from the run and the data (see [`content_seed`]) makes it
/// reproducible, resumed or split over threads. The mask is [`dropout_flags`] over the
/// whole tensor, in row-major order.
pub fn seeded_dropout(x: &Tensor, p: f64, seed: u64) -> Result<Tensor> {
    let mut kept = vec![false; x.elem_count()];
    dropout_flags(seed, p, 0, &mut kept);
    let keep = (1.0 / (1.0 - p)) as f32;
    let mask: Vec<f32> = kept.iter().map(|&k| if k { keep } else { 0.0 }).collect();
    x * Tensor::from_vec(mask, x.shape(), x.device())?.to_dtype(x.dtype())?
}

/// Which of the entries `first .. first + kept.len()` of the dropout stream of `seed` are
/// kept at `rate` (in `[0, 1)`): entry `i` draws the `i`-th 64-bit word `w` of a ChaCha12
/// stream seeded by `seed_from_u64(seed)` and is dropped when the `f64` uniform it makes,
/// `(w >> 11) 2^-53` (rand's `random::<f64>()`), is below `rate`.
///
/// Every dropout mask of the workbench comes from here, composed ([`seeded_dropout`]) or
/// fused (the kernels' masks, drawn chunk by chunk over threads): ChaCha seeks, so a chunk
/// starts at its own offset and the masks do not depend on how the work is split. The
/// generator is named rather than taken as `StdRng`, whose algorithm rand may change between
/// versions (which would change every stored run's masks).
pub fn dropout_flags(seed: u64, rate: f64, first: usize, kept: &mut [bool]) {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha12Rng::seed_from_u64(seed);
    // Two 32-bit words per 64-bit draw.
    rng.set_word_pos(2 * first as u128);
    // `(w >> 11) 2^-53 < rate` as integers: `w >> 11` below `rate 2^53` rounded up.
    let dropped_below = (rate * (1u64 << 53) as f64).ceil() as u64;
    let mut words = [0u64; 256];
    for kept in kept.chunks_mut(words.len()) {
        let words = &mut words[..kept.len()];
        rng.fill(words);
        for (kept, &w) in kept.iter_mut().zip(words.iter()) {
            *kept = (w >> 11) >= dropped_below;
        }
    }
}

/// A seed from `seed` and a sequence of values (FNV-1a over them): the same values give the
/// same seed, others another one. Dropout masks and decoding draws are seeded this way.
pub fn mix_seed(seed: u64, values: impl IntoIterator<Item = u64>) -> u64 {
    values.into_iter().fold(0xcbf2_9ce4_8422_2325 ^ seed, |h, v| (h ^ v).wrapping_mul(0x0100_0000_01b3))
}

/// A seed from `seed` and the values of `x` ([`mix_seed`] over their f32 bits).
pub fn content_seed(seed: u64, x: &Tensor) -> Result<u64> {
    let values: Vec<f32> = x.flatten_all()?.to_dtype(DType::F32)?.to_vec1()?;
    Ok(mix_seed(seed, values.iter().map(|v| v.to_bits() as u64)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Var;

    /// The flags follow the `random::<f64>() < rate` rule on the named generator, from any
    /// offset of the stream, at rates that keep all, drop some and drop almost all.
    #[test]
    fn dropout_flags_are_the_uniform_draws_of_the_stream_from_any_offset() {
        use rand::{Rng, SeedableRng};
        for (seed, rate) in [(7u64, 0.3), (u64::MAX, 0.0), (3, 0.5), (11, 0.999)] {
            let mut rng = rand_chacha::ChaCha12Rng::seed_from_u64(seed);
            let expected: Vec<bool> = (0..700).map(|_| rng.random::<f64>() >= rate).collect();
            for first in [0, 1, 255, 256, 333] {
                let mut kept = vec![false; 700 - first];
                dropout_flags(seed, rate, first, &mut kept);
                assert_eq!(kept, expected[first..], "seed {seed}, rate {rate}, from entry {first}");
            }
            let dropped = expected.iter().filter(|k| !**k).count();
            assert!((dropped as f64 - 700.0 * rate).abs() < 60.0, "rate {rate}: {dropped} of 700 dropped");
        }
    }

    /// `seeded_dropout` keeps the flagged entries, scaled, and zeroes the others.
    #[test]
    fn seeded_dropout_applies_the_flags() -> Result<()> {
        let x = Tensor::arange(1f32, 101.0, &Device::Cpu)?.reshape((10, 10))?;
        let mut kept = vec![false; 100];
        dropout_flags(5, 0.25, 0, &mut kept);
        let got: Vec<f32> = seeded_dropout(&x, 0.25, 5)?.flatten_all()?.to_vec1()?;
        for (i, (&g, &k)) in got.iter().zip(&kept).enumerate() {
            let expected = if k { (i + 1) as f32 * (1.0 / 0.75f64) as f32 } else { 0.0 };
            assert_eq!(g, expected, "entry {i}");
        }
        Ok(())
    }

    #[test]
    fn rms_norm_gives_sqrt_dim_norm_and_passes_gradients() -> Result<()> {
        let x = Var::from_tensor(&Tensor::randn(0f64, 1.0, (3, 5, 16), &Device::Cpu)?)?;
        let g = Var::from_tensor(&Tensor::ones(16, DType::F64, &Device::Cpu)?)?;
        let y = rms_norm(x.as_tensor(), Some(g.as_tensor()), 0.0)?;
        let norms: Vec<f64> = y.sqr()?.sum(D::Minus1)?.sqrt()?.flatten_all()?.to_vec1()?;
        for n in norms {
            assert!((n - 4.0).abs() < 1e-9, "norm {n} != sqrt(16)");
        }
        let grads = (y.sin()?.sum_all()?).backward()?;
        assert!(grads.get(x.as_tensor()).is_some());
        assert!(grads.get(g.as_tensor()).is_some());
        Ok(())
    }

    #[test]
    fn bi_softmax_of_symmetric_scores_is_p_plus_p_transpose() -> Result<()> {
        let z = Tensor::randn(0f64, 1.0, (6, 4), &Device::Cpu)?;
        let a = z.matmul(&z.t()?)?;
        let p = softmax(&a, D::Minus1)?;
        let expected = (&p + p.t()?)?;
        let diff = (bi_softmax(&a)? - expected)?.flatten_all()?.to_vec1::<f64>()?;
        // Every entry, so that a NaN fails too (candle's `max` would skip it).
        assert!(diff.iter().all(|d| d.abs() < 1e-12), "{diff:?}");
        Ok(())
    }

    #[test]
    fn weighted_cross_entropy_ignores_zero_weights() -> Result<()> {
        let dev = Device::Cpu;
        let logits = Tensor::new(&[[2f32, 0.0], [0.0, 5.0]], &dev)?;
        let targets = Tensor::new(&[0u32, 0], &dev)?;
        let w = Tensor::new(&[1f32, 0.0], &dev)?;
        let loss = weighted_cross_entropy(&logits, &targets, Some(&w))?.to_scalar::<f32>()?;
        let expected = -(2f32.exp() / (2f32.exp() + 1.0)).ln();
        assert!((loss - expected).abs() < 1e-6, "{loss} vs {expected}");
        Ok(())
    }

    #[test]
    fn sinusoidal_embedding_layout() -> Result<()> {
        let e: Vec<f64> = sinusoidal_embedding(3.0, 8, DType::F64, &Device::Cpu)?.to_vec1()?;
        assert_eq!(e.len(), 8);
        assert!((e[0] - 3f64.sin()).abs() < 1e-12); // w_0 = 1
        assert!((e[4] - 3f64.cos()).abs() < 1e-12);
        assert!((e[3] - (3.0 * 1e-4f64).sin()).abs() < 1e-12); // w_last = 1e-4
        Ok(())
    }
}
