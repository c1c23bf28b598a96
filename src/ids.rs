//! Id normalization exactly as the router does it (routing.md §2): channels, accounts, agents
//! and peer kinds. A leaf below config, validation, routing and Access, which all use these
//! functions, so "two spellings of one conversation" is decided in one place.

use std::borrow::Cow;

/// The account every channel has when none is named.
pub(crate) const DEFAULT_ACCOUNT: &str = "default";
/// The agent that always exists.
pub(crate) const MAIN_AGENT: &str = "main";
/// deepcli's alias of `main`.
pub(crate) const PRIMARY_ALIAS: &str = "primary";

const MAX_ID_LEN: usize = 64;

/// `str::trim`, with a fast path for the common id that starts and ends with an ASCII character
/// that is not white space (an ASCII byte is a whole character in UTF-8, so nothing can be
/// trimmed then).
#[inline]
pub(crate) fn trim(s: &str) -> &str {
    let solid = |b: u8| b.is_ascii() && !char::from(b).is_whitespace();
    match s.as_bytes() {
        [first, .., last] if solid(*first) && solid(*last) => s,
        [only] if solid(*only) => s,
        _ => s.trim(),
    }
}

/// `^[a-z0-9][a-z0-9_-]{0,63}$`: an id that normalization leaves as it is.
pub(crate) fn is_canonical_id(id: &str) -> bool {
    is_id_shaped(id) && !id.bytes().any(|b| b.is_ascii_uppercase())
}

/// `^[a-z0-9][a-z0-9_-]{0,63}$`, case-insensitively.
fn is_id_shaped(id: &str) -> bool {
    let bytes = id.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= MAX_ID_LEN
        && bytes[0].is_ascii_alphanumeric()
        && bytes[1..]
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'_' || *b == b'-')
}

/// The shared id algorithm: trim; an id-shaped value is lowercased; anything else has every run
/// of characters outside `[a-z0-9_-]` (after lowercasing) turned into `-`, leading and trailing
/// `-` stripped and is cut to 64 characters. Empty → `fallback`.
fn normalize_id<'a>(raw: &'a str, fallback: &'static str) -> Cow<'a, str> {
    let trimmed = trim(raw);
    if trimmed.is_empty() {
        return Cow::Borrowed(fallback);
    }
    if is_id_shaped(trimmed) {
        return if trimmed.bytes().any(|b| b.is_ascii_uppercase()) {
            Cow::Owned(trimmed.to_ascii_lowercase())
        } else {
            Cow::Borrowed(trimmed)
        };
    }
    let mut out = String::with_capacity(trimmed.len());
    let mut in_run = false;
    for c in trimmed.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-' {
            out.push(c);
            in_run = false;
        } else if !in_run {
            out.push('-');
            in_run = true;
        }
    }
    let stripped = out.trim_matches('-');
    let cut: String = stripped.chars().take(MAX_ID_LEN).collect();
    if cut.is_empty() {
        Cow::Borrowed(fallback)
    } else {
        Cow::Owned(cut)
    }
}

/// Normalizes an account id (`" biz "` → `biz`, `"Bot Main"` → `bot-main`, `""` → `default`).
pub(crate) fn account_id(raw: &str) -> Cow<'_, str> {
    normalize_id(raw, DEFAULT_ACCOUNT)
}

/// Normalizes an agent id; `primary` is the alias of `main`.
pub(crate) fn agent_id(raw: &str) -> Cow<'_, str> {
    let id = normalize_id(raw, MAIN_AGENT);
    if id == PRIMARY_ALIAS {
        Cow::Borrowed(MAIN_AGENT)
    } else {
        id
    }
}

/// The built-in channel of the local command line: the operator's own, declared or not.
pub(crate) const CLI_CHANNEL: &str = "cli";

/// The built-in channel of A2A peers (docs/a2a.md): a peer's name is its sender.
pub(crate) const A2A_CHANNEL: &str = "a2a";

/// Normalizes a channel id: trimmed and lowercased, no aliases.
pub(crate) fn channel(raw: &str) -> Cow<'_, str> {
    let trimmed = trim(raw);
    let upper = if trimmed.is_ascii() {
        trimmed.bytes().any(|b| b.is_ascii_uppercase())
    } else {
        trimmed.chars().any(char::is_uppercase)
    };
    if upper {
        Cow::Owned(trimmed.to_lowercase())
    } else {
        Cow::Borrowed(trimmed)
    }
}

/// A channel's account, both ids normalized: what the access plan, the live adapters and their
/// HTTP endpoints are keyed by.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct AccountKey {
    pub(crate) channel: String,
    pub(crate) account: String,
}

impl AccountKey {
    pub(crate) fn new(channel: impl Into<String>, account: impl Into<String>) -> AccountKey {
        AccountKey {
            channel: channel.into(),
            account: account.into(),
        }
    }
}

impl std::fmt::Display for AccountKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.channel, self.account)
    }
}

/// A peer kind after normalization.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PeerKind {
    Direct,
    Group,
    Channel,
    /// A kind outside the three (say `thread`): kept as given, matches no binding.
    Other(String),
}

impl PeerKind {
    /// Trimmed, lowercased, `dm` → `direct`.
    pub fn parse(raw: &str) -> PeerKind {
        let kind = trim(raw);
        let is = |known: &str| kind.eq_ignore_ascii_case(known);
        if is("direct") || is("dm") {
            PeerKind::Direct
        } else if is("group") {
            PeerKind::Group
        } else if is("channel") {
            PeerKind::Channel
        } else {
            PeerKind::Other(kind.to_lowercase())
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            PeerKind::Direct => "direct",
            PeerKind::Group => "group",
            PeerKind::Channel => "channel",
            PeerKind::Other(kind) => kind,
        }
    }

    /// The kind class used for matching: `channel` is folded into `group`; `None` for a kind
    /// that matches nothing.
    pub fn class(&self) -> Option<PeerClass> {
        match self {
            PeerKind::Direct => Some(PeerClass::Direct),
            PeerKind::Group | PeerKind::Channel => Some(PeerClass::Group),
            PeerKind::Other(_) => None,
        }
    }
}

/// What peer kinds match each other: `direct` alone, or `group` and `channel` together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PeerClass {
    Direct,
    Group,
}

impl PeerClass {
    pub fn as_str(self) -> &'static str {
        match self {
            PeerClass::Direct => "direct",
            PeerClass::Group => "group",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn account_ids_follow_the_spec_examples() {
        assert_eq!(account_id(" biz "), "biz");
        assert_eq!(account_id("Bot Main"), "bot-main");
        assert_eq!(account_id(""), "default");
        assert_eq!(account_id("   "), "default");
        assert_eq!(account_id("!!!"), "default");
        assert_eq!(account_id("Work"), "work");
        assert_eq!(account_id("a..b//c"), "a-b-c");
        assert_eq!(account_id(&"x".repeat(80)).len(), 64);
        assert_eq!(account_id("-lead"), "lead");
    }

    #[test]
    fn primary_is_main() {
        assert_eq!(agent_id("primary"), "main");
        assert_eq!(agent_id("Primary"), "main");
        assert_eq!(agent_id(""), "main");
        assert_eq!(agent_id("Research Bot"), "research-bot");
    }

    #[test]
    fn trim_is_str_trim() {
        for s in [
            "",
            " ",
            "a",
            " a",
            "a ",
            "\u{b}a",
            "a\u{b}",
            "\u{a0}a\u{3000}",
            "é",
            " é ",
            "ab",
            "a b",
            "\u{85}x",
            "x\u{2028}",
            "\t\n",
        ] {
            assert_eq!(trim(s), s.trim(), "{s:?}");
        }
    }

    #[test]
    fn peer_kinds_fold() {
        assert_eq!(PeerKind::parse(" DM "), PeerKind::Direct);
        assert_eq!(PeerKind::parse("channel").class(), Some(PeerClass::Group));
        assert_eq!(PeerKind::parse("thread").class(), None);
    }
}
