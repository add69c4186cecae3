//! Numbers of things as sentences say them.

/// `3 runs`, `1 run`.
pub fn count(n: usize, thing: &str) -> String {
    match n {
        1 => format!("1 {thing}"),
        n => format!("{n} {thing}s"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn one_thing_is_singular_and_every_other_number_plural() {
        assert_eq!(super::count(1, "run"), "1 run");
        assert_eq!(super::count(0, "run"), "0 runs");
        assert_eq!(super::count(12, "panel"), "12 panels");
    }
}
