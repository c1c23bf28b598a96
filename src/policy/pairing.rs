//! Pairing codes (policy.md, "Pairing"): what a code looks like, how long it lives, how many
//! may wait, and how one typed by the operator is compared. The records themselves live in the
//! state database (`state::pairing`), which takes these numbers as arguments.
//!
//! A code is 8 characters from a 32-letter alphabet without look-alikes (40 bits from the
//! operating system's random source). It is compared in constant time against every pending
//! code, and never logged. Guessing is bounded twice: one sender gets at most
//! [`CODES_PER_SENDER_PER_HOUR`] codes an hour (a pending code is repeated, not replaced), and
//! a channel takes at most [`WRONG_CODES_PER_WINDOW`] wrong codes in
//! [`WRONG_CODE_WINDOW_SECS`] before `approve` refuses for the rest of the window.

/// The letters of a code: no `0 O 1 I`.
pub const ALPHABET: &[u8; 32] = b"ABCDEFGHJKLMNPQRSTUVWXYZ23456789";
pub const CODE_LEN: usize = 8;
/// How long a code is valid.
pub const CODE_TTL_SECS: i64 = 3600;
/// Pending requests per account at most; a new one drops the oldest.
pub const MAX_PENDING: usize = 3;
/// Codes one sender may be given in an hour.
pub const CODES_PER_SENDER_PER_HOUR: u32 = 3;
/// Wrong codes `approve` takes per channel within the window before it refuses.
pub const WRONG_CODES_PER_WINDOW: u32 = 10;
pub const WRONG_CODE_WINDOW_SECS: i64 = 600;

/// A fresh code from the operating system's random source; `None` if it has none to give.
pub fn new_code() -> Option<String> {
    let mut bytes = [0u8; CODE_LEN];
    getrandom::fill(&mut bytes).ok()?;
    // 256 is a multiple of 32: taking the low five bits is unbiased.
    Some(
        bytes
            .iter()
            .map(|b| ALPHABET[usize::from(b & 31)] as char)
            .collect(),
    )
}

/// A code as the operator typed it: case, spaces and dashes do not matter.
pub fn normalize(typed: &str) -> String {
    typed
        .chars()
        .filter(|c| !c.is_whitespace() && *c != '-')
        .flat_map(char::to_uppercase)
        .collect()
}

/// Whether `typed` could be a code at all (right length and letters): a typo is told so
/// without counting as a guess.
pub fn well_formed(code: &str) -> bool {
    code.len() == CODE_LEN && code.bytes().all(|b| ALPHABET.contains(&b))
}

/// Compares two codes in constant time (for codes of equal length: every code has one).
pub fn same(a: &str, b: &str) -> bool {
    use subtle::ConstantTimeEq;
    // `ct_eq` on slices of different lengths is false without looking at them.
    bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

/// What the sender is told: give the code to the operator.
pub fn reply_text(code: &str) -> String {
    format!(
        "This bot only answers people its operator approved. Your pairing code is {code}: give it to the operator (it is valid for one hour)."
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_eight_letters_of_the_alphabet_and_differ() {
        let codes: std::collections::HashSet<String> =
            (0..200).map(|_| new_code().unwrap()).collect();
        assert!(codes.len() > 195, "codes repeat: {}", codes.len());
        for code in &codes {
            assert!(well_formed(code), "{code}");
            assert!(!code.contains(['0', 'O', '1', 'I']), "{code}");
        }
    }

    #[test]
    fn a_typed_code_is_normalized_and_compared_whole() {
        assert_eq!(normalize(" abcd-efgh "), "ABCDEFGH");
        assert!(same("ABCDEFGH", &normalize("abcdefgh")));
        assert!(!same("ABCDEFGH", "ABCDEFGJ"));
        assert!(!same("ABCDEFGH", "ABCDEFG"));
        assert!(!well_formed("ABCDEFG0"));
        assert!(!well_formed("ABC"));
    }
}
