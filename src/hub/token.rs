//! Session capability tokens (hub.md, "How an agent reaches the Hub"): 256 random bits, shown
//! once — in the `mcpServers` of the `session/new` or `session/load` that opens the session —
//! and kept only as their SHA-256. The Hub takes a caller's identity from its token alone.

/// What every token starts with: a reader of a log or a process list knows what it sees.
const PREFIX: &str = "dch_";

/// Longest token text looked at: anything longer is not a token (and is not hashed).
pub(crate) const MAX_LEN: usize = 128;

/// A new token: `dch_` and 64 hex digits of the system's randomness.
pub(crate) fn mint() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(format!("{PREFIX}{}", hex::encode(bytes)))
}

/// What the state keeps of a token: `sha256:<hex>`. `None` for text that cannot be a token.
pub(crate) fn hash(token: &str) -> Option<String> {
    let token = token.trim();
    (token.starts_with(PREFIX) && token.len() <= MAX_LEN).then(|| crate::hash::of(token.as_bytes()))
}

/// The token of an `Authorization: Bearer <token>` header value.
pub(crate) fn from_bearer(header: &str) -> Option<&str> {
    let (scheme, token) = header.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_long_random_and_kept_only_as_hashes() {
        let a = mint().unwrap();
        let b = mint().unwrap();
        assert_ne!(a, b);
        assert_eq!(a.len(), 4 + 64);
        assert!(
            a[4..]
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
        let h = hash(&a).unwrap();
        assert!(h.starts_with("sha256:") && !h.contains(&a[4..]));
        assert_eq!(hash(&format!(" {a}\n")), Some(h));
        assert_eq!(hash("not-a-token"), None);
        assert_eq!(hash(&format!("dch_{}", "0".repeat(200))), None);
        assert_eq!(from_bearer("Bearer dch_x"), Some("dch_x"));
        assert_eq!(from_bearer("bearer  dch_x "), Some("dch_x"));
        assert_eq!(from_bearer("Basic dch_x"), None);
    }
}
