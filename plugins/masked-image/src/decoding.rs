//! MaskGIT's iterative decoding (Chang et al. 2022), the seeds' evaluation of masked image
//! modelling (seed 004 A.4: temperature 1, T = 24 steps).
//!
//! From the masked codes, each of `T` steps runs the layer on the current codes, samples a
//! code for every position still masked from `softmax(logits / temperature)`, and keeps the
//! most confident samples: after step `t` (1-based) `floor(m cos(pi/2 * t/T))` of an image's
//! `m` masked positions stay masked (the cosine schedule), at least one is revealed per step,
//! none is left after the last. Confidence is the sample's log-probability plus Gumbel noise
//! scaled by `temperature * (1 - t/T)` (MaskGIT's annealed random top-k choice). With
//! `steps = 1` or `temperature = 0` the choice is the argmax, without noise: one step is the
//! one-pass reconstruction.
//!
//! The random draws are seeded by the batch's masked codes, so an evaluation gives the same
//! numbers every time it runs, whatever thread runs the batch.

use plugin_api::candle::{Tensor, D};
use plugin_api::{Batch, LayerPass, Result};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Steps and sampling temperature (options `decode_steps`, `decode_temperature`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Decoding {
    pub steps: usize,
    pub temperature: f64,
}

impl Decoding {
    /// Whether codes are sampled (with noise on the confidences) rather than taken by argmax.
    fn samples(&self) -> bool {
        self.steps > 1 && self.temperature > 0.0
    }
}

/// How many of `masked` positions stay masked after step `t` of `steps` (1-based), given
/// `remaining` are masked before it: the cosine schedule, revealing at least one per step and
/// all at the last.
pub fn still_masked(masked: usize, remaining: usize, t: usize, steps: usize) -> usize {
    if t >= steps || remaining == 0 {
        return 0;
    }
    let scheduled = (masked as f64 * (std::f64::consts::FRAC_PI_2 * t as f64 / steps as f64).cos()).floor() as usize;
    scheduled.min(remaining - 1)
}

/// The decoded codes of `batch` (`[B * N]`, row-major) and the logits of the first step
/// (`[B * N, K]`, the one-pass prediction the loss is measured on). `logits_of` maps the
/// layer's output to code logits; `embed` embeds a batch with other input codes.
pub fn decode(
    batch: &Batch,
    mask_id: u32,
    decoding: Decoding,
    layer: LayerPass<'_>,
    embed: impl Fn(&Batch) -> Result<Tensor>,
    logits_of: impl Fn(&Tensor) -> Result<Tensor>,
) -> Result<(Vec<u32>, Tensor)> {
    let (size, n) = batch.inputs.dims2()?;
    let mut codes: Vec<u32> = batch.inputs.flatten_all()?.to_vec1()?;
    let masked: Vec<usize> =
        (0..size).map(|row| codes[row * n..(row + 1) * n].iter().filter(|&&c| c == mask_id).count()).collect();
    let mut rng = StdRng::seed_from_u64(plugin_api::ops::mix_seed(0, codes.iter().map(|&c| c as u64)));
    let mut first_logits = None;
    for t in 1..=decoding.steps.max(1) {
        let inputs = Tensor::from_vec(codes.clone(), (size, n), batch.inputs.device())?;
        let current = Batch { inputs, targets: batch.targets.clone(), mask: batch.mask.clone(), size };
        let logits = logits_of(&layer(&embed(&current)?)?)?;
        let candidates = choose(&logits, &codes, mask_id, decoding, t, &mut rng)?;
        for (row, &masked_at_start) in masked.iter().enumerate() {
            let span = row * n..(row + 1) * n;
            let mut open: Vec<(f64, usize, u32)> =
                span.filter(|&i| codes[i] == mask_id).map(|i| (candidates[i].1, i, candidates[i].0)).collect();
            let keep = still_masked(masked_at_start, open.len(), t, decoding.steps.max(1));
            open.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            for &(_, i, code) in open.iter().take(open.len() - keep) {
                codes[i] = code;
            }
        }
        first_logits.get_or_insert(logits);
    }
    let first_logits = first_logits.ok_or_else(|| plugin_api::PluginError::Other("no decoding step ran".into()))?;
    Ok((codes, first_logits))
}

/// For every position, a code and its confidence: sampled (or the argmax) from the logits.
fn choose(
    logits: &Tensor,
    codes: &[u32],
    mask_id: u32,
    decoding: Decoding,
    t: usize,
    rng: &mut StdRng,
) -> Result<Vec<(u32, f64)>> {
    let scaled = if decoding.samples() { (logits / decoding.temperature)? } else { logits.clone() };
    let log_probs: Vec<Vec<f32>> = plugin_api::candle_nn::ops::log_softmax(&scaled, D::Minus1)?.to_vec2()?;
    let noise_scale = decoding.temperature * (1.0 - t as f64 / decoding.steps as f64);
    Ok(log_probs
        .iter()
        .zip(codes)
        .map(|(row, &code)| {
            if code != mask_id {
                return (code, f64::INFINITY);
            }
            let pick = if decoding.samples() { sample(row, rng) } else { argmax(row) };
            let mut confidence = row[pick] as f64;
            if decoding.samples() {
                let u: f64 = rng.random_range(f64::MIN_POSITIVE..1.0);
                confidence += noise_scale * -(-u.ln()).ln();
            }
            (pick as u32, confidence)
        })
        .collect())
}

/// The first index of the largest value.
fn argmax(row: &[f32]) -> usize {
    (1..row.len()).fold(0, |best, i| if row[i] > row[best] { i } else { best })
}

/// A draw from the distribution whose log-probabilities are `row`.
fn sample(row: &[f32], rng: &mut StdRng) -> usize {
    let mut u: f64 = rng.random();
    for (i, lp) in row.iter().enumerate() {
        u -= (*lp as f64).exp();
        if u <= 0.0 {
            return i;
        }
    }
    argmax(row)
}

#[cfg(test)]
mod tests {
    use super::*;
    use plugin_api::candle::{DType, Device};
    use std::cell::RefCell;

    #[test]
    fn the_cosine_schedule_reveals_at_least_one_per_step_and_all_at_the_end() {
        let (masked, steps) = (10, 4);
        let mut remaining = masked;
        let mut seen = Vec::new();
        for t in 1..=steps {
            let keep = still_masked(masked, remaining, t, steps);
            assert!(keep < remaining, "step {t} reveals nothing");
            remaining = keep;
            seen.push(keep);
        }
        // floor(10 cos(pi/8)) = 9, floor(10 cos(pi/4)) = 7, floor(10 cos(3 pi/8)) = 3, then 0.
        assert_eq!(seen, vec![9, 7, 3, 0]);
        // Far more steps than positions: one per step until none is left.
        assert_eq!(still_masked(2, 2, 1, 24), 1);
        assert_eq!(still_masked(2, 1, 2, 24), 0);
    }

    /// A model that knows the answer: the layer is the identity, the embedding the codes, the
    /// logits peak at the true code; decoding must recover every code, revealing positions as
    /// the schedule says, and repeat exactly.
    fn run(steps: usize, temperature: f64) -> (Vec<u32>, Vec<usize>, usize) {
        let dev = Device::Cpu;
        let (n, k, mask_id) = (12usize, 4usize, 4u32);
        let truth: Vec<u32> = (0..n as u32).map(|i| (i * 7 + 1) % k as u32).collect();
        let inputs: Vec<u32> = truth.iter().enumerate().map(|(i, &c)| if i % 3 == 0 { c } else { mask_id }).collect();
        let batch = Batch {
            inputs: Tensor::from_vec(inputs, (1, n), &dev).unwrap(),
            targets: Tensor::from_vec(truth.clone(), (1, n), &dev).unwrap(),
            mask: None,
            size: 1,
        };
        let masked_counts = RefCell::new(Vec::new());
        let embed = |b: &Batch| -> Result<Tensor> {
            let codes: Vec<u32> = b.inputs.flatten_all()?.to_vec1()?;
            masked_counts.borrow_mut().push(codes.iter().filter(|&&c| c == mask_id).count());
            Ok(b.inputs.to_dtype(DType::F32)?.unsqueeze(2)?)
        };
        let mut calls = 0;
        let mut layer = |x: &Tensor| -> Result<Tensor> {
            calls += 1;
            Ok(x.clone())
        };
        let logits_of = |_: &Tensor| -> Result<Tensor> {
            let mut values = vec![0f32; n * k];
            for (i, &c) in truth.iter().enumerate() {
                values[i * k + c as usize] = 20.0;
            }
            Ok(Tensor::from_vec(values, (n, k), &dev)?)
        };
        let decoding = Decoding { steps, temperature };
        let (codes, first) = decode(&batch, mask_id, decoding, &mut layer, embed, logits_of).unwrap();
        assert_eq!(first.dims(), &[n, k]);
        assert_eq!(codes, truth, "steps {steps}");
        (codes, masked_counts.into_inner(), calls)
    }

    #[test]
    fn decoding_recovers_a_certain_model_step_by_step_and_repeats_exactly() {
        let (codes, counts, calls) = run(4, 1.0);
        assert_eq!(calls, 4);
        // 8 masked: floor(8 cos(pi/8)) = 7, floor(8 cos(pi/4)) = 5, floor(8 cos(3 pi/8)) = 3.
        assert_eq!(counts, vec![8, 7, 5, 3]);
        assert_eq!(run(4, 1.0).0, codes);
        let (_, counts, calls) = run(1, 1.0);
        assert_eq!((calls, counts), (1, vec![8]));
    }

    /// With an uncertain model sampling draws other codes than the argmax, and the same
    /// masked codes always draw the same ones.
    #[test]
    fn sampling_is_seeded_by_the_masked_codes() {
        let dev = Device::Cpu;
        let (n, k, mask_id) = (64usize, 8usize, 8u32);
        let batch = Batch {
            inputs: Tensor::from_vec(vec![mask_id; n], (1, n), &dev).unwrap(),
            targets: Tensor::zeros((1, n), DType::U32, &dev).unwrap(),
            mask: None,
            size: 1,
        };
        let decoded = |temperature: f64| {
            let flat = |_: &Tensor| -> Result<Tensor> { Ok(Tensor::zeros((n, k), DType::F32, &dev)?) };
            let embed = |b: &Batch| -> Result<Tensor> { Ok(b.inputs.to_dtype(DType::F32)?.unsqueeze(2)?) };
            let mut identity = |x: &Tensor| -> Result<Tensor> { Ok(x.clone()) };
            decode(&batch, mask_id, Decoding { steps: 8, temperature }, &mut identity, embed, flat).unwrap().0
        };
        let sampled = decoded(1.0);
        assert_eq!(sampled, decoded(1.0));
        assert!(sampled.iter().any(|&c| c != 0), "uniform logits sampled only code 0");
        assert!(decoded(0.0).iter().all(|&c| c == 0), "temperature 0 takes the argmax (the first of equals)");
    }
}
