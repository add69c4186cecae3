//! Numbers of things as sentences say them.

/// `3 runs`, `1 run`.
pub fn count(n: usize, thing: &str) -> String {
    count_of(n, thing, &format!("{thing}s"))
}

/// [`count`] of a thing whose plural is not the singular and an `s`: `2 libraries`.
pub fn count_of(n: usize, one: &str, many: &str) -> String {
    match n {
        1 => format!("1 {one}"),
        n => format!("{n} {many}"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn one_thing_is_singular_and_every_other_number_plural() {
        assert_eq!(super::count(1, "run"), "1 run");
        assert_eq!(super::count(0, "run"), "0 runs");
        assert_eq!(super::count(12, "panel"), "12 panels");
        assert_eq!(super::count_of(1, "library", "libraries"), "1 library");
        assert_eq!(super::count_of(3, "library", "libraries"), "3 libraries");
    }
}
