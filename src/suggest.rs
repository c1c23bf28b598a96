//! "Did you mean …?" — the nearest candidate to a misspelled word.

/// The candidate nearest to `word` (case-insensitively) if it is close enough to be a typo.
pub fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
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
    let a: Vec<char> = a.to_lowercase().chars().collect();
    let b: Vec<char> = b.to_lowercase().chars().collect();
    let width = b.len() + 1;
    let mut d = vec![0usize; (a.len() + 1) * width];
    for i in 0..=a.len() {
        for j in 0..=b.len() {
            d[i * width + j] = if i == 0 || j == 0 {
                i + j
            } else {
                let cost = usize::from(a[i - 1] != b[j - 1]);
                let mut best = (d[(i - 1) * width + j] + 1)
                    .min(d[i * width + j - 1] + 1)
                    .min(d[(i - 1) * width + j - 1] + cost);
                if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                    best = best.min(d[(i - 2) * width + j - 2] + 1);
                }
                best
            };
        }
    }
    d[a.len() * width + b.len()]
}

#[cfg(test)]
mod tests {
    use super::closest;

    #[test]
    fn near_words_are_suggested() {
        let words = ["agentId", "accountId"];
        assert_eq!(closest("agentid", words), Some("agentId"));
        assert_eq!(closest("acountId", words), Some("accountId"));
        assert_eq!(closest("zzz", words), None);
        assert_eq!(closest("modle", ["mode", "model"]), Some("model"));
    }
}
