//! Counts in words: `1 error`, `2 errors`, `0 bindings`. Every count human output shows goes
//! through [`plural`], so no message says "1 errors".

use std::fmt::Display;

/// `n` with the noun in the number it calls for: `plural(1, "error", "errors")` is `1 error`,
/// `plural(0, "error", "errors")` is `0 errors`.
pub(crate) fn plural<N: Display + PartialEq + From<u8>>(n: N, one: &str, many: &str) -> String {
    let noun = if n == N::from(1) { one } else { many };
    format!("{n} {noun}")
}

#[cfg(test)]
mod tests {
    use super::plural;

    #[test]
    fn one_is_singular_and_every_other_count_plural() {
        assert_eq!(plural(1usize, "error", "errors"), "1 error");
        assert_eq!(plural(0usize, "error", "errors"), "0 errors");
        assert_eq!(plural(2u64, "entry", "entries"), "2 entries");
    }
}
