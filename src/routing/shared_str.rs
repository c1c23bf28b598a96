//! [`SharedStr`]: an immutable string that route results share with the plan.
//!
//! A route result names its agent, channel, account and main session key; all of them are
//! compiled into the plan once, so a result clones them instead of allocating copies. Only a
//! long string that is new per message (a session key of a peer) is allocated.
//!
//! It is rust-analyzer's `SmolStr`: strings of up to 23 bytes (agent ids, channels, accounts,
//! most main keys) are stored inline, so cloning one copies 24 bytes and touches no shared
//! counter; longer ones share an `Arc<str>`. Reading one never re-validates UTF-8.

pub use smol_str::SmolStr as SharedStr;

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
        assert_eq!(SharedStr::from("é".repeat(12)), "é".repeat(12));
    }
}
