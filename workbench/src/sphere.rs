//! Token trajectories on the hypersphere: where a few tokens' normalised head projections go
//! over the layer iterations (the figures of seed 000, drawn from heads of dimension 3).
//!
//! Recorded at every evaluation, at the training depth only, from the states the evaluation's
//! forward pass already observed on its first batch: for the first example, the head and the
//! first tokens the run's [`Selection`] names (trainer options `sphere_head`, default 0, and
//! `sphere_tokens`, default 8), the point `u_i(t)` on the unit sphere of
//! dimension `p` at every iteration `t = 0..=L` ([`Layer::head_projections`]), scaled to
//! unit length: layers normalise heads to different radii (Hyper-SET's RMSNorm to
//! `sqrt(p)`), and the direction is what moves on the sphere. Stored as diagnostic rows
//! (`iteration = t`):
//!
//! - `sphere/token<i>/x`, `/y`, `/z`: the point's three coordinates;
//! - `sphere/dim` (at `t = 0`): `p`, the head dimension;
//! - `sphere/head` (at `t = 0`): the head drawn;
//! - `sphere/pca_explained` (at `t = 0`, only when `p > 3`): share of the variance kept.
//!
//! With `p = 3` the coordinates are the projections themselves. With `p > 3` every point of
//! one evaluation (tokens × iterations) is projected onto the first three principal
//! components of those points ([`to_3d`]); nothing is re-normalised, so the points lie inside
//! the unit ball rather than on a sphere. With `p < 3` the missing coordinates are 0.
//!
//! The maths ([`to_3d`]) and the reading back ([`trajectories`]) are pure; [`measure`] is the
//! tensor plumbing the training worker calls.

use crate::store::DiagnosticRow;
use anyhow::{anyhow, bail, Result};
use candle_core::{DType, Device, Tensor};
use nalgebra::{DMatrix, SVD};
use plugin_api::Layer;
use std::collections::{BTreeMap, BTreeSet};

/// Which head and how many tokens each evaluation records: the trainer options `sphere_head`
/// and `sphere_tokens`, whose defaults (`run_config::train_schema`: head 0, 8 tokens) keep
/// the figure readable and the rows few, with enough tokens to see them gather into clusters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Selection {
    pub head: usize,
    pub tokens: usize,
}

impl Selection {
    /// Refuses a head the layer (of `heads` heads) does not have, naming the ones it has.
    fn check_head(&self, heads: usize) -> Result<()> {
        if self.head >= heads {
            bail!(
                "sphere_head = {} but the layer has {heads} heads: set train.sphere_head to one of 0..={}",
                self.head,
                heads - 1
            );
        }
        Ok(())
    }

    /// Checks, before a run trains, that `layer` has the selected head, by projecting a
    /// two-token probe state (layers without head projections record nothing and pass).
    pub fn check(&self, layer: &dyn Layer, device: &Device) -> Result<()> {
        let probe = Tensor::ones((1, 2, layer.width()), DType::F32, device)?;
        let iterations = layer.train_iterations();
        match layer.head_projections(0, iterations, &probe).map_err(|e| anyhow!("head projections: {e}"))? {
            Some(heads) => self.check_head(projection_dims(&heads, "")?[1]),
            None => Ok(()),
        }
    }
}

/// `[B, H, N, p]` of a layer's head projections (`at` says where, for the message), or an
/// error naming the shape they have.
fn projection_dims(heads: &Tensor, at: &str) -> Result<[usize; 4]> {
    let dims: [usize; 4] = heads
        .dims()
        .try_into()
        .map_err(|_| anyhow!("head projections{at} have shape {:?}, not [B, H, N, p]", heads.dims()))?;
    if dims.contains(&0) {
        bail!("head projections{at} have shape {dims:?}: nothing to record");
    }
    Ok(dims)
}

const PREFIX: &str = "sphere/";
const DIM: &str = "sphere/dim";
const HEAD_NAME: &str = "sphere/head";
const EXPLAINED: &str = "sphere/pca_explained";
const AXES: [&str; 3] = ["x", "y", "z"];

/// Iteration cap of the SVD, as in [`crate::diagnostics`]: NaN rather than a hang.
const SVD_MAX_ITERATIONS: usize = 10_000;

// ---------------------------------------------------------------------------------------------
// Maths
// ---------------------------------------------------------------------------------------------

/// Points in three dimensions, and the share of the variance they keep when they are a PCA
/// projection (`None`: the coordinates are the points' own).
#[derive(Debug, Clone, PartialEq)]
pub struct Projected {
    /// `n × 3`, one row per input point.
    pub points: DMatrix<f64>,
    pub explained: Option<f64>,
}

/// The rows of `points` (`n × p`) in three dimensions: unchanged for `p = 3`, padded with
/// zeros for `p < 3`, and for `p > 3` the centred points projected onto their first three
/// principal components (SVD of the centred matrix). Each component's sign is chosen so that
/// its largest loading is positive, so the picture does not flip between evaluations for no
/// reason. `None` when there are no points, an entry is non-finite or the SVD fails.
pub fn to_3d(points: &DMatrix<f64>) -> Option<Projected> {
    let (n, p) = points.shape();
    if n == 0 || p == 0 || points.iter().any(|v| !v.is_finite()) {
        return None;
    }
    if p <= 3 {
        let mut out = DMatrix::zeros(n, 3);
        out.view_mut((0, 0), (n, p)).copy_from(points);
        return Some(Projected { points: out, explained: None });
    }
    let mean = points.row_mean();
    let mut centred = points.clone();
    for mut row in centred.row_iter_mut() {
        row -= &mean;
    }
    let svd = SVD::try_new_unordered(centred.clone(), false, true, f64::EPSILON, SVD_MAX_ITERATIONS)?;
    let v_t = svd.v_t?;
    let mut order: Vec<usize> = (0..svd.singular_values.len()).collect();
    order.sort_by(|&a, &b| svd.singular_values[b].abs().total_cmp(&svd.singular_values[a].abs()));
    let total: f64 = svd.singular_values.iter().map(|s| s * s).sum();
    let mut out = DMatrix::zeros(n, 3);
    let mut kept = 0.0;
    // Fewer than three components when there are fewer than three points: the rest stay 0.
    for (k, &c) in order.iter().take(3).enumerate() {
        let mut axis = v_t.row(c).transpose();
        let largest = axis.iter().copied().fold(0.0f64, |m, v| if v.abs() > m.abs() { v } else { m });
        if largest < 0.0 {
            axis = -axis;
        }
        out.set_column(k, &(&centred * axis));
        kept += svd.singular_values[c] * svd.singular_values[c];
    }
    // Points that all coincide have no variance to lose.
    let explained = if total > 0.0 { (kept / total).clamp(0.0, 1.0) } else { 1.0 };
    Some(Projected { points: out, explained: Some(explained) })
}

/// Scales every row of `m` to unit length; rows of zero (or non-finite) length are left as
/// they are.
pub fn unit_rows(m: &mut DMatrix<f64>) {
    for mut row in m.row_iter_mut() {
        let norm = row.norm();
        if norm > 0.0 && norm.is_finite() {
            row /= norm;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Recording
// ---------------------------------------------------------------------------------------------

/// The rows (`(t, name, value)`, unprefixed) of one evaluation: `points[t]` is the `k × p`
/// matrix of the recorded tokens' projections at iteration `t` (the same `k` and `p` at every
/// `t`). Every point of every iteration goes through one [`to_3d`], so all iterations share
/// the same axes.
pub fn rows_of(points: &[DMatrix<f64>], head: usize) -> Result<Vec<(u32, String, f64)>> {
    let Some(first) = points.first() else { bail!("no iteration was recorded") };
    let (k, p) = first.shape();
    if points.iter().any(|m| m.shape() != (k, p)) {
        bail!("the head projections change shape between iterations");
    }
    let mut all = DMatrix::zeros(points.len() * k, p);
    for (t, m) in points.iter().enumerate() {
        all.view_mut((t * k, 0), (k, p)).copy_from(m);
    }
    let projected = to_3d(&all).ok_or_else(|| anyhow!("the head projections hold non-finite values"))?;
    let mut out = vec![(0, DIM.to_string(), p as f64), (0, HEAD_NAME.to_string(), head as f64)];
    if let Some(share) = projected.explained {
        out.push((0, EXPLAINED.to_string(), share));
    }
    for t in 0..points.len() {
        for i in 0..k {
            for (a, axis) in AXES.iter().enumerate() {
                out.push((u32::try_from(t)?, format!("{PREFIX}token{i}/{axis}"), projected.points[(t * k + i, a)]));
            }
        }
    }
    Ok(out)
}

/// The trajectory rows of one forward pass of `layer` (`states[t]` after iteration `t`, as
/// [`crate::diagnostics::StateRecorder`] holds them) for the head and tokens of `selection`
/// (fewer tokens when the sequence is shorter), or `None` when the layer defines no head
/// projections. A head the layer does not have is an error naming its heads. Only the first
/// example is projected, so this costs `L + 1` small calls.
pub fn measure(layer: &dyn Layer, states: &[Tensor], selection: Selection) -> Result<Option<Vec<(u32, String, f64)>>> {
    let iterations = states.len().checked_sub(1).ok_or_else(|| anyhow!("no state was recorded"))?;
    let mut points = Vec::with_capacity(states.len());
    for (t, x) in states.iter().enumerate() {
        let first = x.narrow(0, 0, 1)?;
        let Some(heads) = layer
            .head_projections(t, iterations, &first)
            .map_err(|e| anyhow!("head projections at iteration {t}: {e}"))?
        else {
            return Ok(None);
        };
        let [_, h, n, p] = projection_dims(&heads, &format!(" at iteration {t}"))?;
        selection.check_head(h)?;
        let k = selection.tokens.min(n);
        let tokens = heads.get(0)?.get(selection.head)?.narrow(0, 0, k)?;
        let values = tokens.to_device(&Device::Cpu)?.to_dtype(DType::F64)?.flatten_all()?.to_vec1::<f64>()?;
        let mut m = DMatrix::from_row_slice(k, p, &values);
        unit_rows(&mut m);
        points.push(m);
    }
    rows_of(&points, selection.head).map(Some)
}

// ---------------------------------------------------------------------------------------------
// Reading back
// ---------------------------------------------------------------------------------------------

/// The trajectories of one evaluation, as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Trajectories {
    /// Training step of the evaluation.
    pub step: u64,
    /// Head dimension `p` (3: the points are on the unit sphere).
    pub dim: usize,
    pub head: usize,
    /// Share of the variance the PCA kept, when `p > 3`.
    pub explained: Option<f64>,
    /// `tokens[i][t]`: token `i` at iteration `t`.
    pub tokens: Vec<Vec<[f64; 3]>>,
}

impl Trajectories {
    /// Whether the points are drawn on the unit sphere (`p = 3`) rather than a projection.
    pub fn on_sphere(&self) -> bool {
        self.dim == 3
    }

    /// What the coordinates are, for titles: `p = 3 heads` or `PCA of 8-dim heads (93 % variance)`.
    pub fn describe(&self) -> String {
        match self.explained {
            Some(share) => format!("PCA of {}-dim heads ({:.0} % variance)", self.dim, share * 100.0),
            None if self.dim < 3 => format!("{}-dim heads", self.dim),
            None => "p = 3 heads".to_string(),
        }
    }
}

/// The evaluation steps that recorded trajectories, ascending.
pub fn steps(diagnostics: &[DiagnosticRow]) -> Vec<u64> {
    let steps: BTreeSet<u64> = diagnostics.iter().filter(|d| d.name == DIM).map(|d| d.step).collect();
    steps.into_iter().collect()
}

/// Why a run has no trajectories, and what to do.
pub const MISSING: &str = "no token trajectories were recorded for this run: it was trained before they were \
     recorded, its layer defines no head projections, or it has not been evaluated yet. Train it again (or wait for \
     its first evaluation) with a layer that projects heads, such as hyperset";

/// The trajectories recorded at `step` (default: the last evaluation that recorded them).
pub fn trajectories(diagnostics: &[DiagnosticRow], step: Option<u64>) -> Result<Trajectories> {
    let all = steps(diagnostics);
    let Some(&last) = all.last() else { bail!("{MISSING}") };
    let step = step.unwrap_or(last);
    if !all.contains(&step) {
        let list: Vec<String> = all.iter().map(u64::to_string).collect();
        bail!("no token trajectories at step {step}; recorded at steps {}", list.join(", "));
    }
    let mut dim = None;
    let mut head = 0;
    let mut explained = None;
    let mut coords: BTreeMap<(usize, u32), [f64; 3]> = BTreeMap::new();
    for d in diagnostics.iter().filter(|d| d.step == step) {
        match d.name.as_str() {
            DIM => dim = Some(d.value),
            HEAD_NAME => head = d.value.max(0.0) as usize,
            EXPLAINED => explained = Some(d.value),
            name => {
                let Some((token, axis)) = name.strip_prefix(PREFIX).and_then(|r| r.split_once('/')) else { continue };
                let (Some(i), Some(a)) = (
                    token.strip_prefix("token").and_then(|i| i.parse::<usize>().ok()),
                    AXES.iter().position(|x| *x == axis),
                ) else {
                    continue;
                };
                coords.entry((i, d.iteration)).or_insert([f64::NAN; 3])[a] = d.value;
            }
        }
    }
    let dim = dim.filter(|p| p.is_finite() && *p >= 1.0).map(|p| p as usize).unwrap_or(3);
    let mut tokens: Vec<Vec<[f64; 3]>> = Vec::new();
    for ((i, _), point) in coords {
        if i >= tokens.len() {
            tokens.resize(i + 1, Vec::new());
        }
        // Iterations arrive in order (the map is sorted by token, then t); a point with a
        // missing or non-finite coordinate is left out rather than drawn at a wrong place.
        if point.iter().all(|v| v.is_finite()) {
            tokens[i].push(point);
        }
    }
    tokens.retain(|t| !t.is_empty());
    if tokens.is_empty() {
        bail!("the token trajectories at step {step} hold no finite points");
    }
    Ok(Trajectories { step, dim, head, explained, tokens })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn distances(m: &DMatrix<f64>) -> Vec<f64> {
        let mut out = Vec::new();
        for i in 0..m.nrows() {
            for j in i + 1..m.nrows() {
                out.push((m.row(i) - m.row(j)).norm());
            }
        }
        out
    }

    #[test]
    fn three_dimensional_points_pass_through_unchanged() {
        let m = DMatrix::from_row_slice(2, 3, &[1.0, 0.0, 0.0, 0.6, 0.8, 0.0]);
        let p = to_3d(&m).unwrap();
        assert_eq!(p.points, m);
        assert_eq!(p.explained, None);
        // Fewer dimensions are padded with zeros.
        let flat = to_3d(&DMatrix::from_row_slice(1, 2, &[0.6, 0.8])).unwrap();
        assert_eq!(flat.points, DMatrix::from_row_slice(1, 3, &[0.6, 0.8, 0.0]));
    }

    #[test]
    fn rows_are_scaled_to_unit_length() {
        // Hyper-SET's heads have length sqrt(p).
        let mut m = DMatrix::from_row_slice(3, 3, &[1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, -2.0, 0.0]);
        unit_rows(&mut m);
        assert!((m.row(0).norm() - 1.0).abs() < 1e-12);
        assert_eq!(m.row(1).norm(), 0.0);
        assert_eq!(m.row(2).iter().copied().collect::<Vec<_>>(), [0.0, -1.0, 0.0]);
    }

    #[test]
    fn points_in_a_three_dimensional_subspace_keep_their_distances() {
        // Twelve points a = (a1, a2, a3) mapped into R^7 by an orthonormal-free linear map Q
        // (columns spanning a 3-D subspace) plus an offset: PCA must recover them up to a
        // rotation and a shift, so every pairwise distance is kept and all variance explained.
        let q = DMatrix::from_row_slice(
            7,
            3,
            &[
                0.5, -0.1, 0.3, //
                0.2, 0.7, -0.4, //
                -0.3, 0.2, 0.8, //
                0.4, 0.4, 0.1, //
                0.1, -0.5, 0.2, //
                -0.6, 0.1, 0.0, //
                0.3, 0.3, -0.3,
            ],
        );
        let a = DMatrix::from_fn(12, 3, |i, j| ((i * 7 + j * 3) as f64 * 0.37).sin());
        let offset = DMatrix::from_fn(1, 7, |_, j| j as f64 * 0.1);
        let mut x = &a * q.transpose();
        for mut row in x.row_iter_mut() {
            row += &offset;
        }
        let p = to_3d(&x).unwrap();
        assert_eq!(p.points.shape(), (12, 3));
        for (d_in, d_out) in distances(&x).iter().zip(distances(&p.points)) {
            assert!((d_in - d_out).abs() < 1e-9, "{d_in} vs {d_out}");
        }
        assert!((p.explained.unwrap() - 1.0).abs() < 1e-9);
        // The projected points are centred.
        for c in 0..3 {
            assert!(p.points.column(c).sum().abs() < 1e-9);
        }
    }

    #[test]
    fn a_fourth_direction_is_lost_and_said() {
        // The unit vectors of R^5, centred, span four directions of equal variance (four
        // points would span only three): three components keep three quarters of it, and
        // distances shrink.
        let x = DMatrix::<f64>::identity(5, 5);
        let p = to_3d(&x).unwrap();
        assert!((p.explained.unwrap() - 0.75).abs() < 1e-9, "{:?}", p.explained);
        let kept: f64 = distances(&p.points).iter().sum();
        assert!(kept < distances(&x).iter().sum::<f64>() - 1e-3);
        // Too few points for three components: the rest are 0, nothing fails.
        let two = to_3d(&DMatrix::from_row_slice(2, 5, &[1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0])).unwrap();
        assert!((distances(&two.points)[0] - 2f64.sqrt()).abs() < 1e-9);
        assert_eq!(two.points.column(2).norm(), 0.0);
        assert!(to_3d(&DMatrix::from_row_slice(1, 4, &[f64::NAN, 0.0, 0.0, 0.0])).is_none());
        assert!(to_3d(&DMatrix::<f64>::zeros(0, 4)).is_none());
    }

    fn as_rows(step: u64, measured: Vec<(u32, String, f64)>) -> Vec<DiagnosticRow> {
        measured.into_iter().map(|(iteration, name, value)| DiagnosticRow { step, iteration, name, value }).collect()
    }

    #[test]
    fn rows_round_trip_through_trajectories() {
        // Two tokens over three iterations on the unit sphere of R^3.
        let at = |t: f64| DMatrix::from_row_slice(2, 3, &[t.cos(), t.sin(), 0.0, 0.0, t.cos(), t.sin()]);
        let points: Vec<_> = [0.0, 0.3, 0.6].iter().map(|t| at(*t)).collect();
        let mut rows = as_rows(4, rows_of(&points, 0).unwrap());
        rows.extend(as_rows(2, rows_of(&points[..2], 0).unwrap()));
        rows.push(DiagnosticRow { step: 4, iteration: 0, name: "erank".into(), value: 2.0 });
        assert_eq!(steps(&rows), vec![2, 4]);
        let t = trajectories(&rows, None).unwrap();
        assert_eq!((t.step, t.dim, t.head, t.explained), (4, 3, 0, None));
        assert!(t.on_sphere());
        assert_eq!(t.tokens.len(), 2);
        assert_eq!(t.tokens[0].len(), 3);
        assert_eq!(t.tokens[1][2], [0.0, 0.6f64.cos(), 0.6f64.sin()]);
        assert_eq!(trajectories(&rows, Some(2)).unwrap().tokens[0].len(), 2);
        let e = trajectories(&rows, Some(3)).unwrap_err().to_string();
        assert!(e.contains("step 3") && e.contains("2, 4"), "{e}");
        let e = trajectories(&rows[rows.len() - 1..], None).unwrap_err().to_string();
        assert!(e.contains("before they were recorded") && e.contains("head projections"), "{e}");
        // p > 3: the share is stored and said.
        let wide: Vec<_> = (0..3).map(|t| DMatrix::from_fn(2, 5, |i, j| ((i + j + t) as f64).cos())).collect();
        let t = trajectories(&as_rows(1, rows_of(&wide, 0).unwrap()), None).unwrap();
        assert_eq!(t.dim, 5);
        assert!(t.describe().starts_with("PCA of 5-dim heads (") && t.describe().ends_with("% variance)"));
        assert!(rows_of(&[at(0.0), DMatrix::zeros(3, 3)], 0).is_err());
    }
}
