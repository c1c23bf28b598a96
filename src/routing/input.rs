//! A route input and result, with OpenClaw's field names in JSON (routing.md §1, §7).

use serde::{Deserialize, Deserializer, Serialize};

use super::plan::{BindingRef, MatchedBy};
use super::shared_str::SharedStr;
use crate::config::model::{DmScope, GroupScope};

/// A conversation: `{kind, id}`. Ids that arrive as JSON integers become their exact decimal
/// text.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct Peer {
    pub kind: String,
    #[serde(deserialize_with = "string_or_integer")]
    pub id: String,
}

/// An id sent as a string or a JSON integer, as the integer's exact decimal text. serde_json
/// reads an integer that fits 64 bits exactly and anything else (a fraction, an exponent, more
/// digits) as a float, which would round: two chats' ids could become one. Those are refused
/// with a message that says to send the id as a string.
pub fn string_or_integer<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    d.deserialize_any(StringOrInteger)
}

/// [`string_or_integer`] for an optional field.
pub fn optional_string_or_integer<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<String>, D::Error> {
    struct Optional;
    impl<'de> serde::de::Visitor<'de> for Optional {
        type Value = Option<String>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a string, an integer or null")
        }

        fn visit_none<E: serde::de::Error>(self) -> Result<Option<String>, E> {
            Ok(None)
        }

        fn visit_unit<E: serde::de::Error>(self) -> Result<Option<String>, E> {
            Ok(None)
        }

        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Option<String>, D::Error> {
            string_or_integer(d).map(Some)
        }
    }
    d.deserialize_option(Optional)
}

/// A string, or a JSON integer as its decimal text. (An untagged enum would say the same in
/// more than twice the instructions: it buffers the value first.)
struct StringOrInteger;

impl serde::de::Visitor<'_> for StringOrInteger {
    type Value = String;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a string or an integer")
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<String, E> {
        Ok(v.to_string())
    }

    fn visit_string<E: serde::de::Error>(self, v: String) -> Result<String, E> {
        Ok(v)
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<String, E> {
        Ok(itoa::Buffer::new().format(v).to_string())
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<String, E> {
        Ok(itoa::Buffer::new().format(v).to_string())
    }

    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<String, E> {
        Err(E::custom(
            "an id sent as a number must be an integer of at most 64 bits (a larger or fractional number cannot be kept exactly): send it as a string",
        ))
    }
}

/// The JSON fields of a [`RouteInput`], as it reads them (a test holds the list to the type).
pub const ROUTE_INPUT_FIELDS: [&str; 9] = [
    "channel",
    "accountId",
    "peer",
    "parentPeer",
    "guildId",
    "teamId",
    "memberRoleIds",
    "dmScope",
    "groupScope",
];

/// An inbound message's routing facts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RouteInput {
    pub channel: String,
    #[serde(default)]
    pub account_id: Option<String>,
    #[serde(default)]
    pub peer: Option<Peer>,
    #[serde(default)]
    pub parent_peer: Option<Peer>,
    #[serde(default)]
    pub guild_id: Option<String>,
    #[serde(default)]
    pub team_id: Option<String>,
    #[serde(default)]
    pub member_role_ids: Vec<String>,
    #[serde(default)]
    pub dm_scope: Option<DmScope>,
    #[serde(default)]
    pub group_scope: Option<GroupScope>,
}

/// Which agent and session a message belongs to. The strings are shared with the plan where
/// they can be (agent ids, main keys, known channels and accounts): a result costs few
/// allocations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteResult {
    pub agent_id: SharedStr,
    pub channel: SharedStr,
    pub account_id: SharedStr,
    pub session_key: SharedStr,
    pub main_session_key: SharedStr,
    pub last_route_policy: &'static str,
    pub matched_by: MatchedBy,
    pub dm_scope: DmScope,
    pub group_scope: GroupScope,
    pub binding: Option<BindingRef>,
}

impl Serialize for RouteResult {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("RouteResult", 10)?;
        st.serialize_field("agentId", &self.agent_id)?;
        st.serialize_field("channel", &self.channel)?;
        st.serialize_field("accountId", &self.account_id)?;
        st.serialize_field("sessionKey", &self.session_key)?;
        st.serialize_field("mainSessionKey", &self.main_session_key)?;
        st.serialize_field("lastRoutePolicy", self.last_route_policy)?;
        st.serialize_field("matchedBy", self.matched_by.as_str())?;
        st.serialize_field("dmScope", &self.dm_scope)?;
        st.serialize_field("groupScope", &self.group_scope)?;
        st.serialize_field("binding", &self.binding)?;
        st.end()
    }
}

impl RouteResult {
    /// Appends the result as compact JSON, byte for byte what `serde_json::to_writer` writes
    /// (a test holds them equal), in a fraction of the instructions: `route --batch` writes one
    /// per line, and serde's field-by-field path cost more than resolving did.
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
    fn peer_ids_may_be_numbers() {
        let id = |json: &str| {
            serde_json::from_str::<Peer>(&format!(r#"{{"kind":"direct","id":{json}}}"#))
                .map(|p| p.id)
                .map_err(|e| e.to_string())
        };
        assert_eq!(id(r#""u1""#), Ok("u1".into()));
        assert_eq!(id(r#""a\"b""#), Ok("a\"b".into()));
        assert_eq!(id("42"), Ok("42".into()));
        assert_eq!(id("-7"), Ok("-7".into()));
        assert_eq!(id("9007199254740993"), Ok("9007199254740993".into()));
        assert_eq!(
            id("18446744073709551615"),
            Ok("18446744073709551615".into())
        );
        assert_eq!(
            id("-9223372036854775808"),
            Ok("-9223372036854775808".into())
        );
        let refused = id("true").unwrap_err();
        assert!(
            refused.contains("expected a string or an integer"),
            "{refused}"
        );
        assert!(id("null").is_err());
        assert!(id("[1]").is_err());
    }

    #[test]
    fn route_input_fields_are_the_fields_it_reads() {
        for field in ROUTE_INPUT_FIELDS {
            let refused = serde_json::from_str::<RouteInput>(&format!(r#"{{"{field}": 1}}"#))
                .unwrap_err()
                .to_string();
            assert!(!refused.contains("unknown field"), "{field}: {refused}");
        }
        let refused = serde_json::from_str::<RouteInput>(r#"{"channel": "x", "other": 1}"#)
            .unwrap_err()
            .to_string();
        let expected = ROUTE_INPUT_FIELDS.map(|f| format!("`{f}`")).join(", ");
        assert!(refused.contains(&expected), "{refused}");
    }

    #[test]
    fn peer_ids_beyond_64_bits_are_refused_not_rounded() {
        // As floats, both would be 1e20: two chats sharing one session.
        for json in [
            "100000000000000000000",
            "100000000000000000001",
            "1.5",
            "1e3",
        ] {
            let refused =
                serde_json::from_str::<Peer>(&format!(r#"{{"kind":"group","id":{json}}}"#))
                    .unwrap_err()
                    .to_string();
            assert!(refused.contains("send it as a string"), "{json}: {refused}");
        }
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
}
