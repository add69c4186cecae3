//! Numbers of things as sentences say them.

/// `3 runs`, `1 run`.
pub fn count(n: impl Into<u64>, thing: &str) -> String {
    match n.into() {
        1 => format!("1 {thing}"),
        n => format!("{n} {thing}s"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn one_thing_is_singular_and_every_other_number_plural() {
        assert_eq!(super::count(1u32, "run"), "1 run");
        assert_eq!(super::count(0u32, "run"), "0 runs");
        assert_eq!(super::count(12u64, "panel"), "12 panels");
    }
}
