//! The compact JSON of a [`RouteResult`], written by hand for `route --batch`, and the tests that
//! hold it byte-equal to what serde_json writes from the result's [`serde::Serialize`].

use super::input::RouteResult;

impl RouteResult {
    /// Appends the result as compact JSON, byte for byte what `serde_json::to_writer` writes
    /// (`write_json_writes_what_serde_json_writes` below holds them equal). `route --batch`
    /// writes one per line, and serde's generic field-by-field path is a large part of a
    /// line's cost.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"agentId\":");
        write_str(out, &self.agent_id);
        out.extend_from_slice(b",\"channel\":");
        write_str(out, &self.channel);
        out.extend_from_slice(b",\"accountId\":");
        write_str(out, &self.account_id);
        out.extend_from_slice(b",\"sessionKey\":");
        write_str(out, &self.session_key);
        out.extend_from_slice(b",\"mainSessionKey\":");
        write_str(out, &self.main_session_key);
        out.extend_from_slice(b",\"lastRoutePolicy\":");
        write_plain(out, self.last_route_policy);
        out.extend_from_slice(b",\"matchedBy\":");
        write_plain(out, self.matched_by.as_str());
        out.extend_from_slice(b",\"dmScope\":");
        write_plain(out, self.dm_scope.as_str());
        out.extend_from_slice(b",\"groupScope\":");
        write_plain(out, self.group_scope.as_str());
        out.extend_from_slice(b",\"binding\":");
        match &self.binding {
            None => out.extend_from_slice(b"null"),
            Some(b) => {
                out.extend_from_slice(b"{\"file\":");
                write_str(out, &b.file);
                out.extend_from_slice(b",\"line\":");
                out.extend_from_slice(itoa::Buffer::new().format(b.line).as_bytes());
                out.extend_from_slice(b",\"index\":");
                out.extend_from_slice(itoa::Buffer::new().format(b.index).as_bytes());
                out.push(b'}');
            }
        }
        out.push(b'}');
    }
}

/// `text` as a JSON string. One that needs no escape (the usual id or path) is copied as it
/// is; any other goes through serde_json, so that escapes are always serde_json's.
fn write_str(out: &mut Vec<u8>, text: &str) {
    if needs_no_escape(text.as_bytes()) {
        write_plain(out, text);
    } else {
        // Writing into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut *out, text);
    }
}

/// `text`, which needs no escape, as a JSON string.
fn write_plain(out: &mut Vec<u8>, text: &str) {
    debug_assert!(needs_no_escape(text.as_bytes()), "{text:?}");
    out.reserve(text.len() + 2);
    out.push(b'"');
    out.extend_from_slice(text.as_bytes());
    out.push(b'"');
}

/// Whether no byte of `bytes` is one JSON escapes: `"`, `\` or a control character below
/// 0x20. Eight bytes at a time: subtracting `n` from every byte of a word borrows into the top
/// bit of each byte that was below `n`, and `& !w` drops the bytes whose top bit was set
/// already; so `below(w, 0x20)` finds control characters and `below(w ^ c, 1)` finds bytes
/// equal to `c`. (A borrow can only follow a byte that was below `n`, so the answer is exact.)
fn needs_no_escape(bytes: &[u8]) -> bool {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    let below = |w: u64, n: u8| w.wrapping_sub(ONES * u64::from(n)) & !w & HIGHS != 0;
    let quotes = ONES * u64::from(b'"');
    let backslashes = ONES * u64::from(b'\\');
    let mut chunks = bytes.chunks_exact(8);
    for chunk in &mut chunks {
        let w = u64::from_ne_bytes(chunk.try_into().expect("8 bytes"));
        if below(w, 0x20) || below(w ^ quotes, 1) || below(w ^ backslashes, 1) {
            return false;
        }
    }
    chunks
        .remainder()
        .iter()
        .all(|&b| b >= 0x20 && b != b'"' && b != b'\\')
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use proptest::prelude::*;

    use super::*;
    use crate::config::model::{DmScope, GroupScope};
    use crate::routing::binding::{BindingRef, MatchedBy};

    proptest! {
        #[test]
        fn write_json_writes_what_serde_json_writes(r in result()) {
            let mut ours = b"[".to_vec();
            r.write_json(&mut ours);
            let mut theirs = b"[".to_vec();
            serde_json::to_writer(&mut theirs, &r).unwrap();
            prop_assert_eq!(String::from_utf8(ours).unwrap(), String::from_utf8(theirs).unwrap());
        }
    }

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z0-9:_-]{0,40}",
            // Quotes, backslashes, control characters, DEL, non-ASCII and line separators.
            "[a-z\"\\\\\u{0}-\u{1f}\u{7f}é\u{2028}💬]{0,12}",
        ]
    }

    fn result() -> impl Strategy<Value = RouteResult> {
        let binding = prop::option::of((text(), any::<u32>(), any::<usize>())).prop_map(|b| {
            b.map(|(file, line, index)| BindingRef {
                file: Arc::from(file),
                line,
                index,
            })
        });
        let matched_by = prop::sample::select(
            MatchedBy::TIERS
                .into_iter()
                .chain([MatchedBy::Default])
                .collect::<Vec<_>>(),
        );
        let dm_scope = prop::sample::select(vec![
            DmScope::Main,
            DmScope::PerPeer,
            DmScope::PerChannelPeer,
            DmScope::PerAccountChannelPeer,
        ]);
        let group_scope = prop::sample::select(vec![GroupScope::Main, GroupScope::PerGroup]);
        (
            [text(), text(), text(), text(), text()],
            prop::sample::select(vec!["main", "session"]),
            matched_by,
            dm_scope,
            group_scope,
            binding,
        )
            .prop_map(
                |(
                    [agent, channel, account, session, main],
                    policy,
                    matched_by,
                    dm,
                    group,
                    binding,
                )| {
                    RouteResult {
                        agent_id: agent.into(),
                        channel: channel.into(),
                        account_id: account.into(),
                        session_key: session.into(),
                        main_session_key: main.into(),
                        last_route_policy: policy,
                        matched_by,
                        dm_scope: dm,
                        group_scope: group,
                        binding,
                    }
                },
            )
    }

    #[test]
    fn needs_no_escape_finds_every_byte_json_escapes() {
        let escaped = |b: u8| b < 0x20 || b == b'"' || b == b'\\';
        for b in 0..=255u8 {
            for at in 0..17 {
                let mut bytes = vec![b'a'; 17];
                bytes[at] = b;
                assert_eq!(needs_no_escape(&bytes), !escaped(b), "byte {b:#x} at {at}");
                assert_eq!(
                    needs_no_escape(&bytes[..=at]),
                    !escaped(b),
                    "byte {b:#x} last"
                );
            }
        }
        // Every pair of neighbours inside one word, where a borrow could leak.
        for first in 0..=255u8 {
            for second in 0..=255u8 {
                let bytes = [b'a', b'a', b'a', first, second, b'a', b'a', b'a'];
                let want = !escaped(first) && !escaped(second);
                assert_eq!(needs_no_escape(&bytes), want, "{first:#x} {second:#x}");
            }
        }
        assert!(needs_no_escape(b""));
    }
}
