//! Size caps on what one turn brings in and takes out (`budgets.replyBytes`,
//! `budgets.contextBytes`): a reply assembled from the agent's chunks is kept up to its cap and
//! cut with a note, and the earlier conversation given with a prompt is the newest part that
//! fits. Nothing here allocates more than its cap, whatever the agent sends.

/// A reply assembled from an agent's message chunks, kept up to `limit` bytes; what came
/// beyond is counted, not kept.
#[derive(Debug)]
pub(crate) struct Reply {
    text: String,
    total: usize,
    limit: usize,
}

impl Reply {
    pub(crate) fn new(limit: usize) -> Reply {
        Reply {
            text: String::new(),
            total: 0,
            limit,
        }
    }

    pub(crate) fn push(&mut self, chunk: &str) {
        // Once anything was left out, nothing after it is kept: the reply never skips a part.
        let whole = self.total == self.text.len();
        self.total = self.total.saturating_add(chunk.len());
        let room = self.limit.saturating_sub(self.text.len());
        if whole && room > 0 {
            self.text
                .push_str(&chunk[..floor_char_boundary(chunk, room)]);
        }
    }

    /// The reply as kept: whole, or cut with a note that says how long it was.
    pub(crate) fn finish(self) -> String {
        cut(self.text, self.total, self.limit)
    }
}

/// `text` (of `total` bytes as the agent sent it) cut to `limit` bytes on a character boundary,
/// with a note, when it is longer.
pub(crate) fn cut(mut text: String, total: usize, limit: usize) -> String {
    let total = total.max(text.len());
    if total <= limit {
        return text;
    }
    text.truncate(floor_char_boundary(&text, limit));
    text.push_str(&format!(
        "\n[deepcli: the reply was cut at {limit} of its {total} bytes (budgets.replyBytes)]"
    ));
    text
}

/// Of `sizes` (oldest first), the newest are kept while they fit in `budget` bytes together:
/// the index of the oldest one kept (`sizes.len()` when not even the newest fits).
pub(crate) fn newest_within(sizes: &[usize], budget: usize) -> usize {
    let mut used = 0usize;
    for (i, size) in sizes.iter().enumerate().rev() {
        used = used.saturating_add(*size);
        if used > budget {
            return i + 1;
        }
    }
    0
}

/// The largest index `<= at` that is a character boundary of `s`.
fn floor_char_boundary(s: &str, at: usize) -> usize {
    if at >= s.len() {
        return s.len();
    }
    (0..=at).rev().find(|&i| s.is_char_boundary(i)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reply over its cap keeps its first `limit` bytes and says how long it was; one within
    /// it is untouched.
    #[test]
    fn a_reply_over_its_cap_is_cut_with_a_note() {
        let mut reply = Reply::new(10);
        for chunk in ["hello ", "world, ", "and more"] {
            reply.push(chunk);
        }
        assert_eq!(
            reply.finish(),
            "hello worl\n[deepcli: the reply was cut at 10 of its 21 bytes (budgets.replyBytes)]"
        );
        let mut short = Reply::new(10);
        short.push("hi");
        assert_eq!(short.finish(), "hi");
    }

    /// A cut never splits a character.
    #[test]
    fn a_cut_falls_on_a_character_boundary() {
        let mut reply = Reply::new(4);
        reply.push("ab€cd");
        assert!(reply.finish().starts_with("ab\n"));
        assert!(cut("ééé".to_string(), 6, 3).starts_with("é\n"));
    }

    /// A chunk cut short on a character boundary leaves room the next chunk must not fill:
    /// the kept reply is a prefix of what was sent, with nothing skipped.
    #[test]
    fn the_kept_reply_is_a_prefix_of_what_was_sent() {
        let mut reply = Reply::new(4);
        reply.push("ab\u{20ac}");
        reply.push("xy");
        assert_eq!(reply.text, "ab");
    }

    /// What the agent sends beyond the cap is counted, not kept.
    #[test]
    fn what_comes_beyond_the_cap_is_not_kept() {
        let mut reply = Reply::new(4);
        for _ in 0..1000 {
            reply.push("0123456789");
        }
        assert_eq!(reply.text.len(), 4);
        assert_eq!(reply.total, 10_000);
    }

    #[test]
    fn the_newest_that_fit_are_kept() {
        assert_eq!(newest_within(&[5, 5, 5], 100), 0);
        assert_eq!(newest_within(&[5, 5, 5], 10), 1);
        assert_eq!(newest_within(&[5, 5, 5], 9), 2);
        assert_eq!(newest_within(&[50], 10), 1, "one alone over it: none");
        assert_eq!(newest_within(&[], 10), 0);
    }
}
