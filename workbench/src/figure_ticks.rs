//! Tick labels of exported figures, as short as they can be while telling ticks apart:
//! `8000` rather than `8000.000`, `25k` on a long axis, `1e-3` on a tiny one.

/// The label of tick `v` on an axis from `lo` to `hi`.
pub fn tick_label(v: f64, lo: f64, hi: f64) -> String {
    if !v.is_finite() {
        return v.to_string();
    }
    let span = if hi > lo { hi - lo } else { v.abs().max(1.0) };
    // A tick that is zero up to rounding noise (0.1 + 0.2 - 0.3).
    if v.abs() < span * 1e-9 {
        return "0".into();
    }
    let magnitude = lo.abs().max(hi.abs());
    if magnitude >= 1e4 {
        let (div, suffix) = if magnitude >= 1e9 {
            (1e9, "G")
        } else if magnitude >= 1e6 {
            (1e6, "M")
        } else {
            (1e3, "k")
        };
        return format!("{}{suffix}", fixed(v / div, span / div));
    }
    if magnitude < 1e-2 {
        return scientific(v);
    }
    fixed(v, span)
}

/// `v` with as many decimals as an axis `span` long needs, trailing zeros dropped.
fn fixed(v: f64, span: f64) -> String {
    let decimals = (2.0 - span.log10().floor()).clamp(0.0, 8.0) as usize;
    trim(&format!("{v:.decimals$}"))
}

/// `2.5e-4`: three significant digits at most.
fn scientific(v: f64) -> String {
    let text = format!("{v:.2e}");
    match text.split_once('e') {
        Some((mantissa, exponent)) => format!("{}e{exponent}", trim(mantissa)),
        None => text,
    }
}

/// Drops trailing zeros after a decimal point, and the point itself; `-0` becomes `0`.
fn trim(text: &str) -> String {
    let t = if text.contains('.') { text.trim_end_matches('0').trim_end_matches('.') } else { text };
    if t == "-0" {
        "0".into()
    } else {
        t.into()
    }
}

#[cfg(test)]
mod tests {
    use super::tick_label;

    #[test]
    fn ticks_are_compact() {
        // Steps: whole numbers, no decimals.
        assert_eq!(tick_label(8000.0, 0.0, 9000.0), "8000");
        assert_eq!(tick_label(2500.0, 0.0, 9000.0), "2500");
        // Long axes count in thousands or millions.
        assert_eq!(tick_label(25000.0, 0.0, 40000.0), "25k");
        assert_eq!(tick_label(2500.0, 0.0, 40000.0), "2.5k");
        assert_eq!(tick_label(3_000_000.0, 0.0, 4e6), "3M");
        // Tiny values in scientific notation.
        assert_eq!(tick_label(0.001, 0.0, 0.004), "1e-3");
        assert_eq!(tick_label(0.00025, 0.0, 0.004), "2.5e-4");
        // Ordinary values: the decimals the axis needs, rounding noise gone.
        assert_eq!(tick_label(0.30000000000000004, 0.0, 1.0), "0.3");
        assert_eq!(tick_label(0.25, 0.0, 1.0), "0.25");
        assert_eq!(tick_label(1.0 / 3.0, 0.0, 1.0), "0.33");
        assert_eq!(tick_label(0.8125, 0.8, 0.85), "0.8125");
        assert_eq!(tick_label(1.5, 0.5, 5.5), "1.5");
        assert_eq!(tick_label(2.0, 0.5, 5.5), "2");
        assert_eq!(tick_label(-1.25, -3.0, 0.0), "-1.25");
        assert_eq!(tick_label(1e-12, -1.0, 1.0), "0");
        assert_eq!(tick_label(-0.0001, -1.0, 1.0), "0");
    }
}
