//! Per-iteration diagnostics of a layer, recorded at every evaluation (notes-hyperset.md §5).
//!
//! On the first evaluation batch, the observed forward pass at each evaluation depth `L` gives
//! the states `x_0 ..= x_L` (`x_0` is the layer input). For every state `t`:
//!
//! - `energy/<name>` and `energy/<name>/std`: batch mean and population standard deviation
//!   (divided by `B`) of each per-sample energy the layer defines ([`Layer::energies`]);
//! - on the normalised per-head projections `[B, H, N, p]` ([`Layer::head_projections`]),
//!   for every sample and head, the `[N, p]` matrix of the `N` tokens:
//!   - `erank`: effective rank (Roy & Vetterli), `exp(-Σ p_i ln p_i)` with
//!     `p_i = σ_i / Σ σ_j` over the singular values (not their squares);
//!   - `rank`: numerical rank, the number of `σ_i > σ_max · max(N, p) · ε` (numpy's
//!     `matrix_rank`);
//!   - `angle/mean_arccos`: mean over token pairs `i < j` of the angle `arccos(cos_ij)` in
//!     degrees (what the authors' code plots);
//!   - `angle/arccos_mean`: `arccos` of the mean pairwise cosine, in degrees (seed 000 Eq. 18);
//!
//!   each averaged over samples and heads, plus `erank/head<h>` averaged over samples only.
//!
//! Rows are stored with the training step and `iteration = t`. Names at the training depth are
//! as above; names at another depth `K` are prefixed `eval@K/` (as the metric splits are), e.g.
//! `eval@16/energy/attention`.
//!
//! The maths ([`effective_rank`], [`numerical_rank`], [`pairwise_angles`], [`mean_std`]) are
//! pure functions over plain slices and nalgebra matrices; the tensor plumbing is
//! [`StateRecorder`], [`measure`] / [`measure_states`] and [`rows`]. The training worker
//! records the states during the evaluation's own forward pass on its first batch, so the
//! diagnostics cost no extra forward pass.

use crate::store::DiagnosticRow;
use anyhow::{anyhow, bail, Result};
use candle_core::{DType, Device, Tensor};
use nalgebra::{DMatrix, SVD};
use plugin_api::{Layer, Pass, StateObserver};

// ---------------------------------------------------------------------------------------------
// Maths
// ---------------------------------------------------------------------------------------------

/// Iteration cap of the SVD: far above what a convergent `[N, p]` problem needs, so a
/// pathological matrix yields NaN instead of hanging the worker.
const SVD_MAX_ITERATIONS: usize = 10_000;

/// The singular values of `m` (unordered); `None` when `m` is empty, holds a non-finite
/// entry or the SVD does not converge.
pub fn singular_values(m: &DMatrix<f64>) -> Option<Vec<f64>> {
    if m.is_empty() || m.iter().any(|v| !v.is_finite()) {
        return None;
    }
    let svd = SVD::try_new_unordered(m.clone(), false, false, f64::EPSILON, SVD_MAX_ITERATIONS)?;
    Some(svd.singular_values.iter().map(|s| s.abs()).collect())
}

/// Effective rank (Roy & Vetterli 2007) from singular values: `exp(-Σ p_i ln p_i)` with
/// `p_i = σ_i / Σ_j σ_j`, zero values skipped. 0 for a matrix whose singular values are all
/// zero (its rank); NaN if any value is non-finite.
pub fn effective_rank(singular_values: &[f64]) -> f64 {
    if singular_values.iter().any(|s| !s.is_finite()) {
        return f64::NAN;
    }
    let total: f64 = singular_values.iter().map(|s| s.abs()).sum();
    if total == 0.0 {
        return 0.0;
    }
    let entropy: f64 = singular_values.iter().map(|s| s.abs() / total).filter(|&p| p > 0.0).map(|p| -p * p.ln()).sum();
    entropy.exp()
}

/// Numerical rank of a `rows × cols` matrix from its singular values: the number of
/// `σ_i > σ_max · max(rows, cols) · f64::EPSILON` (numpy's `matrix_rank` tolerance).
pub fn numerical_rank(singular_values: &[f64], rows: usize, cols: usize) -> usize {
    let max = singular_values.iter().fold(0.0f64, |m, s| m.max(s.abs()));
    let tolerance = max * rows.max(cols) as f64 * f64::EPSILON;
    singular_values.iter().filter(|s| s.abs() > tolerance).count()
}

/// Average pairwise angle, in degrees, between the row vectors of `rows`, over the pairs
/// `i < j`: `(mean_arccos, arccos_mean)`, i.e. the mean of `arccos(cos_ij)` (the authors'
/// code) and the `arccos` of the mean cosine (seed 000 Eq. 18). Cosines are clamped to
/// `[-1, 1]`; rows of zero norm are skipped. `None` when fewer than two rows are left or an
/// entry is non-finite.
pub fn pairwise_angles(rows: &DMatrix<f64>) -> Option<(f64, f64)> {
    if rows.iter().any(|v| !v.is_finite()) {
        return None;
    }
    let gram = rows * rows.transpose();
    let kept: Vec<usize> = (0..rows.nrows()).filter(|&i| gram[(i, i)] > 0.0).collect();
    if kept.len() < 2 {
        return None;
    }
    let norms: Vec<f64> = kept.iter().map(|&i| gram[(i, i)].sqrt()).collect();
    let (mut angle_sum, mut cos_sum, mut pairs) = (0.0, 0.0, 0usize);
    for (a, &i) in kept.iter().enumerate() {
        for (b, &j) in kept.iter().enumerate().skip(a + 1) {
            let c = (gram[(i, j)] / (norms[a] * norms[b])).clamp(-1.0, 1.0);
            angle_sum += c.acos();
            cos_sum += c;
            pairs += 1;
        }
    }
    let n = pairs as f64;
    Some(((angle_sum / n).to_degrees(), (cos_sum / n).clamp(-1.0, 1.0).acos().to_degrees()))
}

/// Mean and population standard deviation (divided by `n`) of `values`; NaN for none.
pub fn mean_std(values: &[f64]) -> (f64, f64) {
    if values.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let var = values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
    (mean, var.sqrt())
}

/// Rank and angle statistics of one `[N, p]` head matrix.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HeadStats {
    /// Effective rank (NaN if the SVD failed).
    pub erank: f64,
    /// Numerical rank (NaN if the SVD failed).
    pub rank: f64,
    /// `(mean_arccos, arccos_mean)` in degrees, if defined.
    pub angles: Option<(f64, f64)>,
}

/// [`effective_rank`], [`numerical_rank`] and [`pairwise_angles`] of one matrix whose rows
/// are the token vectors.
pub fn head_stats(m: &DMatrix<f64>) -> HeadStats {
    let (erank, rank) = match singular_values(m) {
        Some(s) => (effective_rank(&s), numerical_rank(&s, m.nrows(), m.ncols()) as f64),
        None => (f64::NAN, f64::NAN),
    };
    HeadStats { erank, rank, angles: pairwise_angles(m) }
}

/// Mean of the values that are not NaN; NaN if there are none.
fn mean_defined(values: impl IntoIterator<Item = f64>) -> f64 {
    let (sum, n) = values.into_iter().filter(|v| !v.is_nan()).fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    if n == 0 {
        f64::NAN
    } else {
        sum / n as f64
    }
}

/// The rank and angle rows of one state from its projections, given as a flat row-major
/// `[B, H, N, p]` buffer: `erank`, `rank`, `angle/mean_arccos`, `angle/arccos_mean` (means
/// over samples and heads) and `erank/head<h>` (means over samples).
pub fn projection_summary(values: &[f64], dims: [usize; 4]) -> Result<Vec<(String, f64)>> {
    let [b, h, n, p] = dims;
    if values.len() != b * h * n * p {
        bail!("head projections: {} values for shape [{b}, {h}, {n}, {p}]", values.len());
    }
    let stats = per_head_stats(values, b * h, n, p);
    let mut out = vec![
        ("erank".to_string(), mean_defined(stats.iter().map(|s| s.erank))),
        ("rank".to_string(), mean_defined(stats.iter().map(|s| s.rank))),
        ("angle/mean_arccos".to_string(), mean_defined(stats.iter().map(|s| s.angles.map_or(f64::NAN, |a| a.0)))),
        ("angle/arccos_mean".to_string(), mean_defined(stats.iter().map(|s| s.angles.map_or(f64::NAN, |a| a.1)))),
    ];
    for head in 0..h {
        let erank = mean_defined((0..b).map(|sample| stats[sample * h + head].erank));
        out.push((format!("erank/head{head}"), erank));
    }
    Ok(out)
}

/// [`head_stats`] of `count` consecutive `[n, p]` matrices, spread over a few threads (the
/// SVDs dominate the cost of the diagnostics).
fn per_head_stats(values: &[f64], count: usize, n: usize, p: usize) -> Vec<HeadStats> {
    let one = |i: usize| head_stats(&DMatrix::from_row_slice(n, p, &values[i * n * p..(i + 1) * n * p]));
    let threads = compute_threads().min(count.max(1));
    if threads <= 1 {
        return (0..count).map(one).collect();
    }
    let chunk = count.div_ceil(threads);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|k| scope.spawn(move || (k * chunk..((k + 1) * chunk).min(count)).map(one).collect::<Vec<_>>()))
            .collect();
        handles.into_iter().flat_map(|h| h.join().expect("diagnostics thread panicked")).collect()
    })
}

/// Threads for the diagnostics: `RAYON_NUM_THREADS` when set (the limit given to candle's
/// pool), else the cores this process may use.
fn compute_threads() -> usize {
    std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(crate::train::parallel::usable_cores)
}

// ---------------------------------------------------------------------------------------------
// Tensor plumbing
// ---------------------------------------------------------------------------------------------

/// Collects the (detached) state after each iteration of one forward pass.
#[derive(Default)]
pub struct StateRecorder {
    /// `states[t]` is the state after iteration `t` (`[B, N, d]`; `t = 0` is the input).
    pub states: Vec<Tensor>,
}

impl StateObserver for StateRecorder {
    fn observe(&mut self, t: usize, x: &Tensor) -> plugin_api::Result<()> {
        if t != self.states.len() {
            return Err(plugin_api::PluginError::Other(format!(
                "the layer reported iteration {t} after {} states; iterations must be reported in order from 0",
                self.states.len()
            )));
        }
        self.states.push(x.detach());
        Ok(())
    }
}

/// A tensor's values as `f64` on the CPU, row-major.
fn to_f64_vec(t: &Tensor) -> Result<Vec<f64>> {
    Ok(t.to_device(&Device::Cpu)?.to_dtype(DType::F64)?.contiguous()?.flatten_all()?.to_vec1::<f64>()?)
}

/// Runs `layer` for `iterations` iterations on `x0` (`[B, N, d]`) with a [`StateRecorder`]
/// and [`measure_states`] the states.
pub fn measure(layer: &dyn Layer, x0: &Tensor, iterations: usize) -> Result<Vec<(u32, String, f64)>> {
    let mut recorder = StateRecorder::default();
    layer
        .forward(&x0.detach(), &mut Pass { iterations, causal: false, train: false, observer: Some(&mut recorder) })
        .map_err(|e| anyhow!("layer at {iterations} iterations: {e}"))?;
    if recorder.states.len() != iterations + 1 {
        bail!(
            "the layer reported {} states for {iterations} iterations (expected {})",
            recorder.states.len(),
            iterations + 1
        );
    }
    measure_states(layer, &recorder.states)
}

/// Measures every state recorded during one forward pass of `layer` (`states[t]` after
/// iteration `t`; `states[0]` is the layer input): `(t, name, value)` with unprefixed names
/// (see the module documentation).
pub fn measure_states(layer: &dyn Layer, states: &[Tensor]) -> Result<Vec<(u32, String, f64)>> {
    let Some(x0) = states.first() else { bail!("no state was recorded") };
    let mut out = Vec::new();
    for (t, x) in states.iter().enumerate() {
        let it = u32::try_from(t)?;
        let iterations = states.len() - 1;
        for energy in layer.energies(t, iterations, x, x0).map_err(|e| anyhow!("energies at iteration {t}: {e}"))? {
            let (mean, std) = mean_std(&to_f64_vec(&energy.per_sample)?);
            out.push((it, format!("energy/{}", energy.name), mean));
            out.push((it, format!("energy/{}/std", energy.name), std));
        }
        if let Some(heads) =
            layer.head_projections(t, iterations, x).map_err(|e| anyhow!("head projections at iteration {t}: {e}"))?
        {
            let dims: [usize; 4] = heads.dims().try_into().map_err(|_| {
                anyhow!("head projections at iteration {t} have shape {:?}, not [B, H, N, p]", heads.dims())
            })?;
            for (name, value) in projection_summary(&to_f64_vec(&heads)?, dims)? {
                out.push((it, name, value));
            }
        }
    }
    Ok(out)
}

/// The stored name of diagnostic `name` measured at `iterations` iterations: unprefixed at
/// the training depth, `eval@<iterations>/<name>` otherwise.
pub fn diagnostic_name(name: &str, iterations: usize, train_iterations: usize) -> String {
    if iterations == train_iterations {
        name.to_string()
    } else {
        format!("eval@{iterations}/{name}")
    }
}

/// Store rows of the [`measure`]ments at `iterations` iterations, taken at training `step`.
pub fn rows(
    step: u64,
    iterations: usize,
    train_iterations: usize,
    measured: Vec<(u32, String, f64)>,
) -> Vec<DiagnosticRow> {
    measured
        .into_iter()
        .map(|(iteration, name, value)| DiagnosticRow {
            step,
            iteration,
            name: diagnostic_name(&name, iterations, train_iterations),
            value,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * (1.0 + a.abs().max(b.abs()))
    }

    #[test]
    fn effective_rank_of_hand_computed_spectra() {
        assert!(close(effective_rank(&[1.0, 1.0, 1.0, 0.0]), 3.0));
        assert!(close(effective_rank(&[1.0, 0.0, 0.0]), 1.0));
        let (a, b) = (2.0f64 / 3.0, 1.0f64 / 3.0);
        let expected = (-(a * a.ln() + b * b.ln())).exp();
        assert!(close(effective_rank(&[2.0, 1.0]), expected));
        // On singular values, not their squares: (4, 1) would give another value.
        assert!(effective_rank(&[4.0, 1.0]).is_finite());
        assert!(!close(effective_rank(&[2.0, 1.0]), effective_rank(&[4.0, 1.0])));
        assert_eq!(effective_rank(&[0.0, 0.0]), 0.0);
        assert!(effective_rank(&[1.0, f64::NAN]).is_nan());
    }

    #[test]
    fn effective_rank_of_a_matrix() {
        // diag(1, 1, 1) padded to 4x3: singular values (1, 1, 1).
        let mut m = DMatrix::<f64>::zeros(4, 3);
        for i in 0..3 {
            m[(i, i)] = 1.0;
        }
        let s = singular_values(&m).unwrap();
        assert!(close(effective_rank(&s), 3.0));
        // Rank one: every row a multiple of the same vector.
        let r = DMatrix::from_row_slice(3, 2, &[1.0, 2.0, 2.0, 4.0, -1.0, -2.0]);
        assert!(close(effective_rank(&singular_values(&r).unwrap()), 1.0));
    }

    #[test]
    fn numerical_rank_of_a_product() {
        // A (4x2) · B (2x3): a 4x3 matrix of rank 2.
        let a = DMatrix::from_row_slice(4, 2, &[1.0, 2.0, 3.0, -1.0, 0.5, 4.0, -2.0, 1.0]);
        let b = DMatrix::from_row_slice(2, 3, &[1.0, 0.0, 2.0, -1.0, 3.0, 1.0]);
        let m = &a * &b;
        let s = singular_values(&m).unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(numerical_rank(&s, 4, 3), 2);
        assert!(head_stats(&m).rank == 2.0);
        // Full rank once a third independent direction is added.
        let mut full = m.clone();
        full[(0, 0)] += 1.0;
        assert_eq!(numerical_rank(&singular_values(&full).unwrap(), 4, 3), 3);
        assert_eq!(numerical_rank(&[0.0, 0.0], 2, 2), 0);
        // The tolerance scales with max(rows, cols): 1e-14 counts in a 2x2 matrix (tolerance
        // 4.4e-16) but not in a 100x2 one (tolerance 2.2e-14).
        assert_eq!(numerical_rank(&[1.0, 1e-14], 2, 2), 2);
        assert_eq!(numerical_rank(&[1.0, 1e-14], 100, 2), 1);
    }

    #[test]
    fn angles_of_orthogonal_vectors() {
        let m = DMatrix::from_row_slice(2, 2, &[3.0, 0.0, 0.0, 0.5]);
        let (mean_arccos, arccos_mean) = pairwise_angles(&m).unwrap();
        assert!(close(mean_arccos, 90.0), "{mean_arccos}");
        assert!(close(arccos_mean, 90.0), "{arccos_mean}");
    }

    #[test]
    fn the_two_angle_definitions_differ() {
        // Vectors at 0°, 90° and 180° in a plane: pairwise angles 90, 180, 90.
        let m = DMatrix::from_row_slice(3, 2, &[1.0, 0.0, 0.0, 2.0, -1.0, 0.0]);
        let (mean_arccos, arccos_mean) = pairwise_angles(&m).unwrap();
        assert!(close(mean_arccos, 120.0), "{mean_arccos}");
        let expected = ((0.0 - 1.0 + 0.0) / 3.0f64).acos().to_degrees();
        assert!(close(arccos_mean, expected), "{arccos_mean} vs {expected}");
        assert!((mean_arccos - arccos_mean).abs() > 10.0);
    }

    #[test]
    fn angles_skip_zero_rows_and_clamp() {
        // A zero row is skipped: only the pair of parallel rows is left (angle 0, not NaN;
        // arccos near 1 turns a rounding error of 1e-16 in the cosine into ~1e-6 degrees).
        let m = DMatrix::from_row_slice(3, 2, &[1.0, 1.0, 0.0, 0.0, 2.0, 2.0]);
        let (a, b) = pairwise_angles(&m).unwrap();
        assert!(a.abs() < 1e-5 && b.abs() < 1e-5, "{a} {b}");
        assert!(pairwise_angles(&DMatrix::from_row_slice(2, 2, &[1.0, 0.0, 0.0, 0.0])).is_none());
        assert!(pairwise_angles(&DMatrix::from_row_slice(2, 1, &[1.0, f64::NAN])).is_none());
    }

    #[test]
    fn mean_and_population_std() {
        let (m, s) = mean_std(&[1.0, 3.0]);
        assert!(close(m, 2.0) && close(s, 1.0));
        let (m, s) = mean_std(&[5.0]);
        assert!(close(m, 5.0) && s == 0.0);
        assert!(mean_std(&[]).0.is_nan());
    }

    #[test]
    fn projection_summary_averages_samples_and_heads() {
        // B = 2, H = 2, N = 2, p = 2. Sample 0: head 0 orthogonal (erank 2, 90°), head 1
        // parallel (erank 1, 0°); sample 1: both heads orthogonal.
        let orth = [1.0, 0.0, 0.0, 1.0];
        let par = [1.0, 0.0, 2.0, 0.0];
        let values: Vec<f64> = [orth, par, orth, orth].concat();
        let out = projection_summary(&values, [2, 2, 2, 2]).unwrap();
        let get = |name: &str| out.iter().find(|(n, _)| n == name).unwrap().1;
        assert!(close(get("erank"), (2.0 + 1.0 + 2.0 + 2.0) / 4.0));
        assert!(close(get("rank"), (2.0 + 1.0 + 2.0 + 2.0) / 4.0));
        assert!(close(get("angle/mean_arccos"), (90.0 + 0.0 + 90.0 + 90.0) / 4.0));
        assert!(close(get("erank/head0"), 2.0));
        assert!(close(get("erank/head1"), 1.5));
        assert!(projection_summary(&values[1..], [2, 2, 2, 2]).is_err());
    }

    #[test]
    fn names_are_prefixed_off_the_training_depth() {
        assert_eq!(diagnostic_name("energy/attention", 8, 8), "energy/attention");
        assert_eq!(diagnostic_name("energy/attention", 16, 8), "eval@16/energy/attention");
        let r = rows(100, 16, 8, vec![(3, "erank".into(), 2.5)]);
        assert_eq!(r, vec![DiagnosticRow { step: 100, iteration: 3, name: "eval@16/erank".into(), value: 2.5 }]);
    }

    /// A toy layer: `x_t = x_{t-1} * 0.5`, energy `Σ x²` per sample, one head = the state.
    struct Halving;

    impl Layer for Halving {
        fn width(&self) -> usize {
            2
        }
        fn train_iterations(&self) -> usize {
            2
        }
        fn forward(&self, x0: &Tensor, pass: &mut Pass<'_>) -> plugin_api::Result<Tensor> {
            let mut x = x0.clone();
            pass.observe(0, &x)?;
            for t in 1..=pass.iterations {
                x = (x * 0.5)?;
                pass.observe(t, &x)?;
            }
            Ok(x)
        }
        fn energies(
            &self,
            _t: usize,
            _iterations: usize,
            x: &Tensor,
            _x0: &Tensor,
        ) -> plugin_api::Result<Vec<plugin_api::Energy>> {
            Ok(vec![plugin_api::Energy { name: "square".into(), per_sample: x.sqr()?.sum((1, 2))? }])
        }
        fn head_projections(&self, _t: usize, _iterations: usize, x: &Tensor) -> plugin_api::Result<Option<Tensor>> {
            Ok(Some(x.unsqueeze(1)?))
        }
    }

    #[test]
    fn measure_observes_every_iteration() {
        // Two samples of two tokens in 2-D: sample 0 orthogonal tokens, sample 1 parallel.
        let x0 = Tensor::from_vec(vec![1f32, 0.0, 0.0, 1.0, 1.0, 1.0, 2.0, 2.0], (2, 2, 2), &Device::Cpu).unwrap();
        let out = measure(&Halving, &x0, 3).unwrap();
        let get = |t: u32, name: &str| {
            out.iter().find(|(i, n, _)| *i == t && n == name).unwrap_or_else(|| panic!("{t} {name}")).2
        };
        for t in 0..=3u32 {
            // Energies 2 and 10 at t = 0, scaled by 1/4 per iteration.
            let scale = 0.25f64.powi(t as i32);
            assert!(close(get(t, "energy/square"), 6.0 * scale));
            assert!(close(get(t, "energy/square/std"), 4.0 * scale));
            assert!(close(get(t, "erank"), 1.5));
            assert!(close(get(t, "erank/head0"), 1.5));
            assert!(close(get(t, "rank"), 1.5));
            assert!((get(t, "angle/mean_arccos") - 45.0).abs() < 1e-5);
        }
        assert!(!out.iter().any(|(t, _, _)| *t > 3));
    }

    #[test]
    fn the_recorder_refuses_out_of_order_iterations() {
        let x = Tensor::zeros((1, 1, 1), DType::F32, &Device::Cpu).unwrap();
        let mut r = StateRecorder::default();
        r.observe(0, &x).unwrap();
        assert!(r.observe(2, &x).is_err());
    }
}
