//! [`SharedStr`]: an immutable string that route results share with the plan.
//!
//! A route result names its agent, channel, account and main session key; all of them are
//! compiled into the plan once, so a result clones them instead of allocating copies. Only a
//! long string that is new per message (a session key of a peer) is allocated.

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

/// An immutable, cheaply cloned string, comparable with `&str` and `String`. Short strings (agent
/// ids, channels, accounts, most main keys) are stored inline: cloning one copies 24 bytes and
/// touches no shared counter; longer ones share an `Arc<str>`.
#[derive(Clone)]
pub struct SharedStr(Repr);

/// The longest string stored inline.
const INLINE: usize = 22;

#[derive(Clone)]
enum Repr {
    /// Invariant: `bytes[..len]` is copied from a `str`, so it is UTF-8.
    Inline {
        len: u8,
        bytes: [u8; INLINE],
    },
    Shared(Arc<str>),
}

impl SharedStr {
    pub fn as_str(&self) -> &str {
        match &self.0 {
            Repr::Inline { len, bytes } => std::str::from_utf8(&bytes[..usize::from(*len)])
                .expect("inline bytes are copied from a str"),
            Repr::Shared(s) => s,
        }
    }

    fn inline(s: &str) -> Option<SharedStr> {
        let len = u8::try_from(s.len())
            .ok()
            .filter(|&n| usize::from(n) <= INLINE)?;
        let mut bytes = [0; INLINE];
        bytes[..s.len()].copy_from_slice(s.as_bytes());
        Some(SharedStr(Repr::Inline { len, bytes }))
    }
}

impl PartialEq for SharedStr {
    fn eq(&self, other: &SharedStr) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for SharedStr {}

impl PartialOrd for SharedStr {
    fn partial_cmp(&self, other: &SharedStr) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for SharedStr {
    fn cmp(&self, other: &SharedStr) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl std::hash::Hash for SharedStr {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl Deref for SharedStr {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for SharedStr {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl Borrow<str> for SharedStr {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl Default for SharedStr {
    fn default() -> SharedStr {
        SharedStr::from("")
    }
}

impl From<&str> for SharedStr {
    fn from(s: &str) -> SharedStr {
        SharedStr::inline(s).unwrap_or_else(|| SharedStr(Repr::Shared(Arc::from(s))))
    }
}

impl From<String> for SharedStr {
    fn from(s: String) -> SharedStr {
        SharedStr::inline(&s).unwrap_or_else(|| SharedStr(Repr::Shared(Arc::from(s))))
    }
}

impl From<SharedStr> for String {
    fn from(s: SharedStr) -> String {
        s.as_str().to_string()
    }
}

impl fmt::Debug for SharedStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for SharedStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self.as_str(), f)
    }
}

impl PartialEq<str> for SharedStr {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for SharedStr {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for SharedStr {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other.as_str()
    }
}

impl PartialEq<SharedStr> for str {
    fn eq(&self, other: &SharedStr) -> bool {
        self == other.as_str()
    }
}

impl PartialEq<SharedStr> for &str {
    fn eq(&self, other: &SharedStr) -> bool {
        *self == other.as_str()
    }
}

impl PartialEq<SharedStr> for String {
    fn eq(&self, other: &SharedStr) -> bool {
        self.as_str() == other.as_str()
    }
}

impl serde::Serialize for SharedStr {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for SharedStr {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<SharedStr, D::Error> {
        String::deserialize(d).map(SharedStr::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compares_like_a_string() {
        let s = SharedStr::from("agent:main:main");
        assert_eq!(s, "agent:main:main");
        assert_eq!(s, String::from("agent:main:main"));
        assert_eq!(s.as_str(), "agent:main:main");
        assert_eq!(format!("{s} {s:?}"), "agent:main:main \"agent:main:main\"");
        assert_eq!(serde_json::to_string(&s).unwrap(), "\"agent:main:main\"");
        let long = "agent:main:telegram:direct:+15551234567";
        assert_eq!(SharedStr::from(long), long);
        assert_eq!(SharedStr::from(long.to_string()).clone().as_str(), long);
        assert_eq!(SharedStr::from(&long[..22]), &long[..22]);
        assert_eq!(SharedStr::from("é".repeat(11)), "é".repeat(11));
    }
}
