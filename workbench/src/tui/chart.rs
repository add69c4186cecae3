//! Curves made ready for a terminal chart: smoothing, log scale, and per-column downsampling
//! so that a frame costs the same for 200 points or 20,000.

/// Exponential moving average with weight `alpha` on the new point (TensorBoard-style
/// smoothing, debiased so the first points are not pulled towards zero).
pub fn smooth(points: &[(f64, f64)], alpha: f64) -> Vec<(f64, f64)> {
    let mut avg = 0.0;
    let mut weight = 0.0;
    points
        .iter()
        .map(|&(x, y)| {
            avg = (1.0 - alpha) * avg + alpha * y;
            weight = (1.0 - alpha) * weight + alpha;
            (x, avg / weight)
        })
        .collect()
}

/// `log10(y)` of the points with `y > 0` (others cannot be drawn on a log axis).
pub fn log10(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    points.iter().filter(|(_, y)| *y > 0.0).map(|&(x, y)| (x, y.log10())).collect()
}

/// Keeps, for each of `columns` equal slices of `[x_min, x_max]`, the first, lowest, highest
/// and last point (in x order), so that spikes survive and the line keeps its shape.
/// Points must be sorted by x.
pub fn downsample(points: &[(f64, f64)], x_min: f64, x_max: f64, columns: usize) -> Vec<(f64, f64)> {
    if points.len() <= 4 * columns.max(1) || x_max <= x_min {
        return points.to_vec();
    }
    let width = (x_max - x_min) / columns as f64;
    let mut out = Vec::with_capacity(4 * columns);
    let mut start = 0;
    while start < points.len() {
        let col = (((points[start].0 - x_min) / width).floor().max(0.0) as usize).min(columns - 1);
        let mut end = start + 1;
        while end < points.len()
            && ((((points[end].0 - x_min) / width).floor().max(0.0) as usize).min(columns - 1)) == col
        {
            end += 1;
        }
        let bucket = &points[start..end];
        let (mut lo, mut hi) = (0, 0);
        for (i, p) in bucket.iter().enumerate() {
            if p.1 < bucket[lo].1 {
                lo = i;
            }
            if p.1 > bucket[hi].1 {
                hi = i;
            }
        }
        let mut keep = [0, lo, hi, bucket.len() - 1];
        keep.sort_unstable();
        let mut last = usize::MAX;
        for k in keep {
            if k != last {
                out.push(bucket[k]);
                last = k;
            }
        }
        start = end;
    }
    out
}

/// The range of x and y over several curves, widened when flat so an axis can be drawn.
pub fn bounds<'a>(curves: impl IntoIterator<Item = &'a [(f64, f64)]>) -> Option<([f64; 2], [f64; 2])> {
    let (mut x, mut y) = ([f64::INFINITY, f64::NEG_INFINITY], [f64::INFINITY, f64::NEG_INFINITY]);
    for c in curves {
        for &(px, py) in c {
            x = [x[0].min(px), x[1].max(px)];
            y = [y[0].min(py), y[1].max(py)];
        }
    }
    if !x[0].is_finite() {
        return None;
    }
    // Steps start at the frame; only a single step is widened, so that the axis has a span.
    let x = if x[1] > x[0] { x } else { crate::axis_range::padded(x[0], x[1]) };
    Some((x, crate::axis_range::padded(y[0], y[1])))
}

/// Axis labels for `values` on an axis spanning `[lo, hi]`: as many decimals as it takes to
/// tell the ends apart (a loss moving from 2.1973 to 2.1981 is not labelled "2.20" twice),
/// scientific notation for very small or large magnitudes.
pub fn labels(lo: f64, hi: f64, values: &[f64]) -> Vec<String> {
    let span = (hi - lo).abs();
    let magnitude = lo.abs().max(hi.abs());
    if magnitude != 0.0 && !(1e-3..1e6).contains(&magnitude) {
        return values.iter().map(|v| format!("{v:.2e}")).collect();
    }
    let decimals = if values.iter().all(|v| v.fract() == 0.0) {
        // Whole numbers (steps, iterations, depths) read as such: `8`, not `8.0`.
        0
    } else if span > 0.0 {
        (1.0 - span.log10().floor()).clamp(0.0, 6.0) as usize
    } else {
        2
    };
    values.iter().map(|v| format!("{v:.decimals$}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn downsampling_keeps_extremes_and_ends_and_bounds_the_size() {
        let mut points: Vec<(f64, f64)> = (0..20_000).map(|i| (i as f64, (i as f64 * 0.01).sin())).collect();
        points[12_345].1 = 50.0;
        points[777].1 = -50.0;
        let out = downsample(&points, 0.0, 19_999.0, 100);
        assert!(out.len() <= 400, "{}", out.len());
        assert!(out.contains(&points[0]) && out.contains(&points[19_999]));
        assert!(out.contains(&(12_345.0, 50.0)) && out.contains(&(777.0, -50.0)));
        assert!(out.windows(2).all(|w| w[0].0 <= w[1].0));
        let few = &points[..10];
        assert_eq!(downsample(few, 0.0, 9.0, 100), few.to_vec());
    }

    #[test]
    fn smoothing_is_debiased_and_log_drops_non_positive() {
        let s = smooth(&[(0.0, 2.0), (1.0, 2.0), (2.0, 2.0)], 0.3);
        assert_eq!(s.len(), 3);
        assert!(s.iter().all(|p| (p.1 - 2.0).abs() < 1e-12));
        let s = smooth(&[(0.0, 0.0), (1.0, 1.0)], 0.5);
        assert!((s[1].1 - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(log10(&[(0.0, 100.0), (1.0, 0.0), (2.0, -1.0)]), vec![(0.0, 2.0)]);
    }

    #[test]
    fn labels_tell_close_ends_apart() {
        assert_eq!(labels(2.1973, 2.1981, &[2.1973, 2.1981]), vec!["2.19730", "2.19810"]);
        assert_eq!(labels(0.0, 600.0, &[0.0, 600.0]), vec!["0", "600"]);
        assert_eq!(labels(0.0, 1.0, &[0.0, 0.5, 1.0]), vec!["0.0", "0.5", "1.0"]);
        assert_eq!(labels(1e-5, 3e-5, &[1e-5]), vec!["1.00e-5"]);
        assert_eq!(labels(8.0, 16.0, &[8.0, 16.0]), vec!["8", "16"], "whole numbers stay whole");
    }

    #[test]
    fn flat_curves_get_an_axis() {
        let c = [(1.0, 3.0)];
        let (x, y) = bounds([&c[..]]).unwrap();
        assert!(x[0] < 1.0 && x[1] > 1.0 && y[0] < 3.0 && y[1] > 3.0);
        assert!(bounds(std::iter::empty()).is_none());
    }

    /// A curve that is never negative (a mean angle) gets no negative tick: its axis starts
    /// at zero, where the margin would have taken it below.
    #[test]
    fn a_non_negative_curve_s_axis_stops_at_zero() {
        let angle = [(0.0, 2.0), (16.0, 80.0)];
        let (x, y) = bounds([&angle[..]]).unwrap();
        assert_eq!((x, y[0]), ([0.0, 16.0], 0.0));
        assert!(y[1] > 80.0);
    }
}
