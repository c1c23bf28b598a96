//! "Did you mean …?" — the nearest candidate to a misspelled word.

/// The candidate nearest to `word` (case-insensitively) if it is close enough to be a typo.
pub(crate) fn closest<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let limit = (word.chars().count() / 3).clamp(1, 3);
    candidates
        .into_iter()
        .map(|c| (edit_distance(word, c), c))
        .filter(|(d, _)| *d <= limit)
        // Ties go to the candidate closest in length: `modle` is `model`, not `mode`.
        .min_by_key(|(d, c)| (*d, c.chars().count().abs_diff(word.chars().count())))
        .map(|(_, c)| c)
}

/// Edit distance over lowercased characters where swapping two neighbours counts as one edit
/// (optimal string alignment), since `modle` for `model` is one slip of the fingers.
fn edit_distance(a: &str, b: &str) -> usize {
    strsim::osa_distance(&a.to_lowercase(), &b.to_lowercase())
}

#[cfg(test)]
mod tests {
    use super::{closest, edit_distance};

    #[test]
    fn near_words_are_suggested() {
        let words = ["agentId", "accountId"];
        assert_eq!(closest("agentid", words), Some("agentId"));
        assert_eq!(closest("acountId", words), Some("accountId"));
        assert_eq!(closest("zzz", words), None);
        assert_eq!(closest("modle", ["mode", "model"]), Some("model"));
    }

    /// Characters, not bytes, case aside; a swap of neighbours is one edit.
    #[test]
    fn the_distance_counts_characters_and_a_swap_once() {
        assert_eq!(edit_distance("MODLE", "model"), 1);
        assert_eq!(edit_distance("abc", "acb"), 1);
        assert_eq!(
            edit_distance("ca", "abc"),
            3,
            "optimal string alignment, not Damerau"
        );
        assert_eq!(edit_distance("café", "cafe"), 1);
        assert_eq!(edit_distance("", "ab"), 2);
        assert_eq!(closest("KANÄLE", ["kanäle", "kanal"]), Some("kanäle"));
    }
}
