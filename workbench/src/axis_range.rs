//! The span an axis shows for data from `lo` to `hi`, the same in the terminal's charts and
//! in exported figures: a margin of 5 % each side so no point sits on the frame, a span for
//! flat data, and no margin across zero, so a quantity that is never negative (an angle, an
//! effective rank, an accuracy) gets no negative tick.

/// The margin each side, as a share of the data's span.
const MARGIN: f64 = 0.05;

/// `[lo, hi]` widened for drawing. Flat data (`lo == hi`) gets a span of 10 % of its value
/// (of 1 at zero), centred on it.
pub fn padded(lo: f64, hi: f64) -> [f64; 2] {
    if hi <= lo {
        let half = lo.abs().max(1.0) * MARGIN;
        return [lo - half, hi + half];
    }
    let pad = (hi - lo) * MARGIN;
    let below = lo - pad;
    let above = hi + pad;
    [if lo >= 0.0 { below.max(0.0) } else { below }, if hi <= 0.0 { above.min(0.0) } else { above }]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_gets_a_margin_each_side() {
        assert_eq!(padded(10.0, 30.0), [9.0, 31.0]);
        assert_eq!(padded(-30.0, -10.0), [-31.0, -9.0]);
        assert_eq!(padded(-10.0, 10.0), [-11.0, 11.0]);
    }

    #[test]
    fn the_margin_stops_at_zero() {
        assert_eq!(padded(0.0, 80.0), [0.0, 84.0], "an angle from 0 to 80 degrees");
        assert_eq!(padded(1.0, 80.0), [0.0, 83.95]);
        assert_eq!(padded(-80.0, -1.0), [-83.95, 0.0]);
    }

    #[test]
    fn flat_data_gets_a_span_around_it() {
        assert_eq!(padded(3.0, 3.0), [2.85, 3.15]);
        assert_eq!(padded(0.0, 0.0), [-0.05, 0.05]);
        assert_eq!(padded(-200.0, -200.0), [-210.0, -190.0]);
    }
}
