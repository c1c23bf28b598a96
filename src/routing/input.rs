//! A route input and result, with OpenClaw's field names in JSON (routing.md §1, §7).

use serde::{Deserialize, Deserializer, Serialize};

use super::binding::{BindingRef, MatchedBy};
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

/// A string, or a JSON integer as its decimal text. (Not an untagged enum: that buffers every
/// value before trying its variants, and peer ids are read for every routed message.)
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
